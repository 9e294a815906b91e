//! The in-memory host of `nvmf_harness` (what the `connection` fuzz
//! target runs): the committed seed streams are exactly what the codec's
//! encoders produce, and each is served as intended (every command
//! succeeds, the data comes back). `RACKCACHE_WRITE_SEEDS=1` rewrites the
//! seed files instead of comparing.

use std::path::PathBuf;

use nvmf::pdu::PduType;
use nvmf::sqe::{opcode, sgl, SglDescriptor, Sqe};
use nvmf_harness::{self as harness, HostStream, CNTLID};

const IDENTIFY_CONTROLLER: u8 = 1;
const IDENTIFY_NAMESPACE: u8 = 0;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// A seed: file name, stream, expected C2HData bytes, expected responses.
type Seed = (&'static str, Vec<u8>, usize, Vec<(u16, u16)>);

fn seeds() -> Vec<Seed> {
    vec![
        (
            "admin_identify",
            HostStream::new()
                .ic_req()
                .connect(1, 0, 31, 0)
                .enable(2)
                .identify(3, IDENTIFY_CONTROLLER, 0)
                .identify(4, IDENTIFY_NAMESPACE, 1)
                .into_bytes(),
            8192,
            vec![(1, 0), (2, 0), (3, 0), (4, 0)],
        ),
        (
            "io_write_read",
            HostStream::new()
                .ic_req()
                .connect(1, 1, 7, CNTLID)
                .write_in_capsule(2, 0, &pattern(4096, 1))
                .read(3, 0, 4096)
                .into_bytes(),
            4096,
            vec![(1, 0), (2, 0), (3, 0)],
        ),
        (
            "io_r2t_write_read",
            HostStream::new()
                .ic_req()
                .connect(1, 1, 7, CNTLID)
                .write_by_r2t(2, 8, 8192)
                // The first free slot is 0: the R2T's transfer tag.
                .h2c_data(2, 0, 0, &pattern(4096, 2), false)
                .h2c_data(2, 0, 4096, &pattern(4096, 3), true)
                .read(3, 8, 8192)
                .into_bytes(),
            8192,
            vec![(1, 0), (2, 0), (3, 0)],
        ),
        (
            "io_flush_deallocate",
            HostStream::new()
                .ic_req()
                .connect(1, 1, 7, CNTLID)
                .flush(2)
                .deallocate(3, &[(0, 8), (64, 16)])
                .into_bytes(),
            0,
            vec![(1, 0), (2, 0), (3, 0)],
        ),
    ]
}

#[test]
fn seed_streams_are_committed_and_served_as_intended() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../nvmf/fuzz/seeds/connection");
    let write = std::env::var_os("RACKCACHE_WRITE_SEEDS").is_some();
    for (name, bytes, data_bytes, responses) in seeds() {
        let path = dir.join(name);
        if write {
            std::fs::write(&path, &bytes).unwrap();
        } else {
            let committed = std::fs::read(&path).unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (RACKCACHE_WRITE_SEEDS=1 writes it)",
                    path.display()
                )
            });
            assert!(
                committed == bytes,
                "{name}: committed seed differs from the encoders' stream"
            );
        }
        let out = harness::run(&bytes);
        let a = harness::check_controller_stream(&bytes, &out).unwrap();
        assert_eq!(a.pdus[0], PduType::IcResp, "{name}");
        assert_eq!(a.responses, responses, "{name}");
        assert_eq!(a.data_bytes, data_bytes, "{name}");
    }
}

#[test]
fn written_data_reads_back_through_the_harness() {
    let data = pattern(2048, 9);
    let s = HostStream::new()
        .ic_req()
        .connect(1, 1, 7, CNTLID)
        .write_in_capsule(2, 4, &data)
        .read(3, 4, 2048)
        .into_bytes();
    let out = harness::run(&s);
    harness::check_controller_stream(&s, &out).unwrap();
    // ICResp, Connect and Write responses, then the C2HData header.
    let at = 128 + 24 + 24 + 24;
    assert_eq!(&out[at..at + data.len()], &data[..]);
}

#[test]
fn garbage_gets_a_term_req_or_nothing() {
    for input in [
        &b""[..],
        &[0xffu8; 64][..],
        &[4u8, 0, 128, 0, 128, 0, 0, 0][..],
    ] {
        let out = harness::run(input);
        let a = harness::check_controller_stream(input, &out).unwrap();
        assert!(
            a.pdus.is_empty() || a.pdus == [PduType::C2hTermReq],
            "{:?}",
            a.pdus
        );
    }
}

#[test]
fn io_is_counted_per_subsystem_and_per_bdev() {
    let s = HostStream::new()
        .ic_req()
        .connect(1, 1, 7, CNTLID)
        // The first slot, 0, is the R2T's transfer tag.
        .write_by_r2t(2, 8, 8192)
        .h2c_data(2, 0, 0, &pattern(8192, 5)[..4096], false)
        .h2c_data(2, 0, 4096, &pattern(8192, 5)[4096..], true)
        .write_in_capsule(3, 0, &pattern(4096, 4))
        .read(4, 0, 2048)
        .flush(5)
        .deallocate(6, &[(0, 4), (16, 8)])
        // Out of range: an error, counted as neither I/O nor bytes.
        .read(7, 127, 1024)
        .into_bytes();
    let (out, sub, bdev) = harness::run_counted(&s);
    let a = harness::check_controller_stream(&s, &out).unwrap();
    assert_eq!(a.responses.len(), 7, "{:?}", a.responses);
    let got = [
        sub.write_ops.get(),
        sub.read_ops.get(),
        sub.flush_ops.get(),
        sub.unmap_ops.get(),
        sub.written_bytes.get(),
        sub.read_bytes.get(),
        sub.errors.get(),
        sub.write_latency.count(),
        sub.read_latency.count(),
    ];
    assert_eq!(got, [2, 1, 1, 1, 4096 + 8192, 2048, 1, 2, 1]);
    // One bdev unmap per deallocated range; the refused read never
    // reached the bdev; the target's shutdown at the end of the run
    // flushed once more.
    let got = [
        bdev.num_write_ops.get(),
        bdev.bytes_written.get(),
        bdev.num_read_ops.get(),
        bdev.bytes_read.get(),
        bdev.num_flush_ops.get(),
        bdev.num_unmap_ops.get(),
        bdev.bytes_unmapped.get(),
        bdev.io_errors.get(),
        bdev.write_latency.count(),
    ];
    assert_eq!(got, [2, 4096 + 8192, 1, 2048, 2, 2, 12 * 512, 0, 2]);
}

/// Found by the fuzzer: an admin command returning data to a host buffer
/// of 0 bytes got a C2HData PDU without data, which hosts must reject.
#[test]
fn zero_length_admin_data_gets_a_response_without_c2h_data() {
    let empty = SglDescriptor {
        address: 0,
        length: 0,
        kind: sgl::TRANSPORT,
    };
    let identify = Sqe::build(opcode::IDENTIFY, 3, 0, empty, [1, 0, 0, 0, 0, 0]);
    let log_page = Sqe::build(
        opcode::GET_LOG_PAGE,
        4,
        0,
        empty,
        [0x02 | (127 << 16), 0, 0, 0, 0, 0],
    );
    let s = HostStream::new()
        .ic_req()
        .connect(1, 0, 31, 0)
        .enable(2)
        .command(&identify, &[])
        .command(&log_page, &[])
        .into_bytes();
    let out = harness::run(&s);
    let a = harness::check_controller_stream(&s, &out).unwrap();
    assert_eq!(a.responses, [(1, 0), (2, 0), (3, 0), (4, 0)]);
    assert!(!a.pdus.contains(&PduType::C2hData), "{:?}", a.pdus);
    // The fuzzer's input itself (ICReq with HPDA 1, admin Connect, ...).
    let crash = include_bytes!("fuzz_regressions/c2h_data_without_data");
    let out = harness::run(crash);
    harness::check_controller_stream(crash, &out).unwrap();
}
