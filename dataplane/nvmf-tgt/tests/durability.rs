//! Durability through the target, driven by the repository's own NVMe/TCP
//! host over loopback: FUA writes and Flush reach the bdev as durable
//! operations (counted in its `IoStats`), the Volatile Write Cache feature
//! turned off makes every write durable (Write Zeroes with FUA, and Write
//! Zeroes or Deallocate with the cache off, flush the bdev), and transfer
//! lengths are computed without wrapping on 64 KiB-block namespaces.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bdev::file::FileBdev;
use bdev::malloc::MallocBdev;
use bdev::{Bdev, CountedBdev, IoStats};
use metrics::Registry;
use nvmf::cqe::Status;
use nvmf::sqe::{opcode, sgl, SglDescriptor, Sqe};
use nvmf_host::host::{ConnectParams, HostController};
use nvmf_tgt::{SubsystemConfig, Target, TransportOptions};

use common::status_of;

const NQN: &str = "nqn.2016-06.io.rackcache:durability";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-0000000000d1";
const FID_VWC: u32 = 0x06;
const FUA: u32 = 1 << 30;

struct Harness {
    rt: tokio::runtime::Runtime,
    target: Target,
    addr: SocketAddr,
    stats: Arc<IoStats>,
}

impl Harness {
    fn start(bdev: Bdev) -> Self {
        let rt = common::runtime();
        let registry = Registry::new();
        let target = Target::new(TransportOptions::default(), registry.clone()).unwrap();
        let sub = target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
        sub.add_host(HOST, Default::default()).unwrap();
        let name = bdev.info().name.clone();
        let stats = IoStats::register(&registry, &name);
        let counted = CountedBdev::new(Arc::new(bdev), Arc::clone(&stats));
        sub.add_namespace(Some(1), counted, None, None).unwrap();
        let addr = common::listen_loopback(&rt, &target, NQN);
        Self {
            rt,
            target,
            addr,
            stats,
        }
    }

    fn connect(&self) -> HostController {
        let p = ConnectParams {
            addr: self.addr.to_string(),
            subnqn: NQN.into(),
            hostnqn: HOST.into(),
            host_id: [0x21; 16],
            queue_size: 32,
            kato_ms: 30_000,
        };
        HostController::connect(&p, 1).unwrap()
    }

    /// (writes, FUA writes, flushes) the bdev completed.
    fn counts(&self) -> (u64, u64, u64) {
        let s = &self.stats;
        (
            s.num_write_ops.get(),
            s.num_fua_write_ops.get(),
            s.num_flush_ops.get(),
        )
    }

    fn stop(self) {
        common::shutdown(&self.rt, &self.target, Duration::from_secs(10));
    }
}

/// A Write of `data` at `slba` with extra CDW12 bits (FUA).
fn write_sqe(slba: u64, nlb_blocks: u32, len: u32, cdw12_flags: u32) -> Sqe {
    Sqe::build(
        opcode::WRITE,
        0,
        1,
        SglDescriptor {
            address: 0,
            length: len,
            kind: sgl::IN_CAPSULE,
        },
        [
            slba as u32,
            (slba >> 32) as u32,
            (nlb_blocks - 1) | cdw12_flags,
            0,
            0,
            0,
        ],
    )
}

#[test]
fn fua_writes_and_flushes_reach_the_bdev_as_durable_operations() {
    let h = Harness::start(Bdev::Malloc(MallocBdev::new("m0", 2048, 512).unwrap()));
    let mut c = h.connect();
    let data = vec![0x5au8; 4096];
    let q = &mut c.io[0];

    // A write with the cache on: a plain write.
    q.write_blocks(1, 0, 512, &data, 8192).unwrap();
    assert_eq!(h.counts(), (1, 0, 0));
    // FUA (CDW12 bit 30): durable before completion.
    q.execute_raw(write_sqe(8, 8, 4096, FUA), Some(&data), None, "FUA write")
        .unwrap();
    assert_eq!(h.counts(), (2, 1, 0));
    // Flush.
    q.admin_no_data(opcode::FLUSH, 1, [0; 6], "Flush").unwrap();
    assert_eq!(h.counts(), (2, 1, 1));
    let mut back = vec![0u8; 4096];
    q.read_blocks(1, 8, 512, &mut back).unwrap();
    assert_eq!(back, data);
    drop(c);
    h.stop();
}

#[test]
fn volatile_write_cache_off_makes_every_write_durable() {
    let h = Harness::start(Bdev::Malloc(MallocBdev::new("m0", 2048, 512).unwrap()));
    let mut c = h.connect();
    let data = vec![0xa5u8; 4096];
    let vwc = |c: &mut HostController| {
        c.admin
            .admin_no_data(opcode::GET_FEATURES, 0, [FID_VWC, 0, 0, 0, 0, 0], "Get VWC")
            .unwrap()
            .dw0
    };
    // Identify still advertises a volatile write cache; it starts enabled.
    let id = c.admin.identify(0x01, 0).unwrap();
    assert_eq!(id[525] & 1, 1, "VWC present");
    assert_eq!(vwc(&mut c), 1);

    c.admin
        .admin_no_data(opcode::SET_FEATURES, 0, [FID_VWC, 0, 0, 0, 0, 0], "VWC off")
        .unwrap();
    assert_eq!(vwc(&mut c), 0, "Get Features reports the cache off");
    for i in 0..3u64 {
        c.io[0].write_blocks(1, i * 8, 512, &data, 8192).unwrap();
    }
    // A write larger than the capsule takes the R2T path: durable as well.
    let big = vec![0x3cu8; 64 << 10];
    c.io[0].write_blocks(1, 256, 512, &big, 8192).unwrap();
    assert_eq!(h.counts(), (4, 4, 0), "every write written through");

    c.admin
        .admin_no_data(opcode::SET_FEATURES, 0, [FID_VWC, 1, 0, 0, 0, 0], "VWC on")
        .unwrap();
    assert_eq!(vwc(&mut c), 1);
    c.io[0].write_blocks(1, 0, 512, &data, 8192).unwrap();
    assert_eq!(h.counts(), (5, 4, 0), "cached again");
    drop(c);
    h.stop();
}

/// 65536 blocks of 64 KiB are 4 GiB: the byte length used to be narrowed
/// to u32 and wrapped to 0, so a Read of NLB 65536 "succeeded" without
/// data and a Write Zeroes of it zeroed nothing.
#[test]
fn lengths_of_64k_block_namespaces_do_not_wrap() {
    const BS: usize = 65536;
    let dir = std::env::temp_dir().join(format!("nvmf-durability-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("big.img");
    // Sparse: 65536 blocks of 64 KiB.
    std::fs::File::create(&path)
        .unwrap()
        .set_len(65536 * BS as u64)
        .unwrap();
    let h = Harness::start(Bdev::File(FileBdev::open("big", &path, BS as u32).unwrap()));
    let mut c = h.connect();
    let q = &mut c.io[0];
    let data = vec![0x77u8; BS];
    q.write_blocks(1, 65535, BS, &data, 0).unwrap();

    // A Read of all 65536 blocks is above MDTS: refused, not truncated.
    let read = Sqe::build(
        opcode::READ,
        0,
        1,
        SglDescriptor {
            address: 0,
            length: u32::MAX,
            kind: sgl::TRANSPORT,
        },
        [0, 0, 65535, 0, 0, 0],
    );
    let err = q.execute_raw(read, None, None, "4 GiB read").unwrap_err();
    assert_eq!(status_of(err), Status::INVALID_FIELD);

    // Write Zeroes moves no data: all 4 GiB are zeroed, the last block too.
    q.admin_no_data(
        opcode::WRITE_ZEROES,
        1,
        [0, 0, 65535, 0, 0, 0],
        "Write Zeroes",
    )
    .unwrap();
    let mut back = vec![0xffu8; BS];
    q.read_blocks(1, 65535, BS, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0), "last block not zeroed");
    drop(c);
    h.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Write Zeroes with FUA (CDW12 bit 30), and Write Zeroes or Deallocate
/// with the volatile write cache off, are made durable (a flush of the
/// bdev) before they complete; with the cache on and no FUA they are not.
#[test]
fn write_zeroes_and_deallocate_honour_fua_and_the_write_cache() {
    let h = Harness::start(Bdev::Malloc(MallocBdev::new("m0", 2048, 512).unwrap()));
    let mut c = h.connect();
    let flushes = |h: &Harness| h.stats.num_flush_ops.get();
    let zeroes = |q: &mut nvmf_host::host::HostQueue, slba: u64, flags: u32| {
        q.admin_no_data(
            opcode::WRITE_ZEROES,
            1,
            [slba as u32, 0, 7 | flags, 0, 0, 0],
            "Write Zeroes",
        )
        .unwrap();
    };
    // Cache on: nothing to make durable.
    zeroes(&mut c.io[0], 0, 0);
    c.io[0].deallocate(1, &[(8, 8)]).unwrap();
    assert_eq!(flushes(&h), 0);
    // FUA: durable before completion.
    zeroes(&mut c.io[0], 16, FUA);
    assert_eq!(flushes(&h), 1, "Write Zeroes with FUA");

    c.admin
        .admin_no_data(opcode::SET_FEATURES, 0, [FID_VWC, 0, 0, 0, 0, 0], "VWC off")
        .unwrap();
    zeroes(&mut c.io[0], 24, 0);
    assert_eq!(flushes(&h), 2, "Write Zeroes with the cache off");
    c.io[0].deallocate(1, &[(32, 8), (48, 8)]).unwrap();
    assert_eq!(flushes(&h), 3, "Deallocate with the cache off");
    // Nothing else was counted as a write.
    assert_eq!(h.counts().0, 0);
    drop(c);
    h.stop();
}
