//! The target against the repository's own NVMe/TCP host (`nvmf_host::host`)
//! over loopback TCP, on malloc bdevs. Each test starts its own target on
//! an ephemeral 127.0.0.1 port in its own runtime and stops it at the end.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bdev::malloc::MallocBdev;
use bdev::Bdev;
use metrics::Registry;
use nvmf::cqe::Status;
use nvmf::sqe::{opcode, sgl, SglDescriptor, Sqe};
use nvmf_host::host::{ConnectParams, Event, HostController, HostError, HostQueue};
use nvmf_tgt::{SubsystemConfig, Target, TransportOptions, DISCOVERY_NQN};

use common::status_of;

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-000000000001";
const BS: usize = 512;
const BLOCKS: u64 = 32768; // 16 MiB

struct Harness {
    rt: tokio::runtime::Runtime,
    target: Target,
    addr: SocketAddr,
    registry: Arc<Registry>,
}

impl Harness {
    fn start(allowed: &[&str]) -> Self {
        let rt = common::runtime();
        let registry = Registry::new();
        let target = Target::new(TransportOptions::default(), registry.clone()).unwrap();
        let mut cfg = SubsystemConfig::new(NQN);
        cfg.serial = "RC0001".into();
        let sub = target.add_subsystem(cfg).unwrap();
        for h in allowed {
            sub.add_host(h, Default::default()).unwrap();
        }
        let bdev = Arc::new(Bdev::Malloc(
            MallocBdev::new("Malloc0", BLOCKS, BS as u32).unwrap(),
        ));
        assert_eq!(sub.add_namespace(Some(1), bdev, None, None).unwrap(), 1);
        let addr = rt
            .block_on(target.add_listener(
                NQN,
                "127.0.0.1:0".parse().unwrap(),
                Some("10.0.3.100".into()),
                None,
            ))
            .unwrap();
        Self {
            rt,
            target,
            addr,
            registry,
        }
    }

    fn params(&self, subnqn: &str, hostnqn: &str, kato_ms: u32) -> ConnectParams {
        ConnectParams {
            addr: self.addr.to_string(),
            subnqn: subnqn.into(),
            hostnqn: hostnqn.into(),
            host_id: [0x11; 16],
            queue_size: 128,
            kato_ms,
        }
    }

    fn stop(self) {
        common::shutdown(&self.rt, &self.target, Duration::from_secs(10));
        self.rt.shutdown_timeout(Duration::from_secs(2));
    }
}

fn le16(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([p[at], p[at + 1]])
}
fn le32(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().unwrap())
}
fn le64(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().unwrap())
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

#[test]
fn connect_identify_and_io_over_several_queues() {
    let h = Harness::start(&[HOST]);
    let p = h.params(NQN, HOST, 10_000);
    let mut c = HostController::connect(&p, 4).unwrap();
    assert_eq!(c.io.len(), 4);

    // Properties Linux reads.
    let cap = c.admin.property_get(0x0, true).unwrap();
    assert!(cap & 0xffff >= 127, "MQES {}", cap & 0xffff);
    assert_ne!(cap & (1 << 37), 0, "NVM command set");
    assert_eq!(c.admin.property_get(0x8, false).unwrap(), 0x0001_0300);

    // Identify Controller.
    let id = c.admin.identify(0x01, 0).unwrap();
    assert_eq!(le16(&id, 78), c.admin.cntlid);
    assert_eq!(&id[4..10], b"RC0001");
    assert_eq!(le32(&id, 516), le32(&id, 540), "NN == MNAN");
    assert!((4096u64 << id[77]) >= 1 << 20, "MDTS allows 1 MiB");
    assert_eq!(le32(&id, 536) & 1, 1, "SGLs");
    assert_eq!(&id[768..768 + NQN.len()], NQN.as_bytes());
    assert_eq!(le16(&id, 1800), 0, "ICDOFF");
    assert!(le16(&id, 514) >= 128, "MAXCMD");

    // Namespaces.
    let list = c.admin.identify(0x02, 0).unwrap();
    assert_eq!((le32(&list, 0), le32(&list, 4)), (1, 0));
    let ns = c.admin.identify(0x00, 1).unwrap();
    assert_eq!(le64(&ns, 0), BLOCKS);
    assert_eq!((le32(&ns, 128) >> 16) & 0xff, 9);
    let desc = c.admin.identify(0x03, 1).unwrap();
    assert_eq!((desc[0], desc[1]), (2, 16));
    assert_eq!(&desc[4..20], &ns[104..120], "NGUID in both places");
    let err = c.admin.identify(0x00, 0).unwrap_err();
    assert_eq!(status_of(err), Status::INVALID_NAMESPACE);

    // Data: 4 KiB in the capsule on one queue, 1 MiB through R2T on
    // another, read back on a third.
    let small = pattern(4096, 1);
    c.io[0].write_blocks(1, 8, BS, &small, 8192).unwrap();
    let big = pattern(1 << 20, 2);
    c.io[1].write_blocks(1, 4096, BS, &big, 8192).unwrap();
    let mut back = vec![0u8; 4096];
    c.io[2].read_blocks(1, 8, BS, &mut back).unwrap();
    assert_eq!(back, small);
    let mut back = vec![0u8; 1 << 20];
    c.io[3].read_blocks(1, 4096, BS, &mut back).unwrap();
    assert!(back == big, "1 MiB read back differs");

    // Flush, Write Zeroes, Deallocate.
    c.io[0]
        .admin_no_data(opcode::FLUSH, 1, [0; 6], "Flush")
        .unwrap();
    c.io[0]
        .admin_no_data(opcode::WRITE_ZEROES, 1, [8, 0, 3, 0, 0, 0], "Write Zeroes")
        .unwrap();
    let mut back = vec![0xffu8; 4096];
    c.io[1].read_blocks(1, 8, BS, &mut back).unwrap();
    assert!(back[..2048].iter().all(|&b| b == 0));
    assert_eq!(&back[2048..], &small[2048..]);
    c.io[2].deallocate(1, &[(4096, 2048), (10, 2)]).unwrap();
    let mut back = vec![0xffu8; 1 << 20];
    c.io[3].read_blocks(1, 4096, BS, &mut back).unwrap();
    assert!(back[..1 << 20].iter().all(|&b| b == 0));

    // Errors map to statuses; the queue keeps working.
    let mut b = vec![0u8; 4096];
    let err = c.io[0].read_blocks(1, BLOCKS - 4, BS, &mut b).unwrap_err();
    assert_eq!(status_of(err), Status::LBA_OUT_OF_RANGE);
    let err = c.io[0].read_blocks(7, 0, BS, &mut b).unwrap_err();
    assert_eq!(status_of(err), Status::INVALID_NAMESPACE);
    c.io[0].read_blocks(1, 0, BS, &mut b).unwrap();

    // Metrics counted the traffic.
    let text = h.registry.render();
    let line = text
        .lines()
        .find(|l| {
            l.starts_with(
                "rackcache_nvmf_written_bytes_total{subnqn=\"nqn.2016-06.io.spdk:cnode1\"}",
            )
        })
        .unwrap_or_else(|| panic!("no written bytes series in\n{text}"));
    let written: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(written, 4096 + (1 << 20));
    drop(c);
    h.stop();
}

#[test]
fn digests_on_both_directions() {
    let h = Harness::start(&[HOST]);
    let p = h.params(NQN, HOST, 0);
    let mut admin = HostQueue::initialize(&p.addr, true, true).unwrap();
    admin.fabrics_connect(&p, 0, 0).unwrap();
    admin.enable().unwrap();
    assert_eq!(admin.set_queue_count(1).unwrap(), 1);
    let mut io = HostQueue::initialize(&p.addr, true, true).unwrap();
    io.fabrics_connect(&p, 1, admin.cntlid).unwrap();
    let data = pattern(256 << 10, 9);
    io.write_blocks(1, 0, BS, &data, 8192).unwrap();
    let small = pattern(2048, 4);
    io.write_blocks(1, 2000, BS, &small, 8192).unwrap();
    let mut back = vec![0u8; 256 << 10];
    io.read_blocks(1, 0, BS, &mut back).unwrap();
    assert!(back == data);
    let mut back = vec![0u8; 2048];
    io.read_blocks(1, 2000, BS, &mut back).unwrap();
    assert_eq!(back, small);
    admin.identify(0x01, 0).unwrap();
    drop((admin, io));
    h.stop();
}

#[test]
fn discovery_log_lists_the_subsystem_with_paging_and_keep_alive() {
    let h = Harness::start(&[HOST]);
    let mut p = h.params(DISCOVERY_NQN, HOST, 5000);
    p.queue_size = 32;
    let mut d = HostQueue::connect(&p, 0, 0).unwrap();
    d.enable().unwrap();
    let id = d.identify(0x01, 0).unwrap();
    assert_eq!(id[111], 2, "discovery controller");
    assert_eq!(le32(&id, 516), 0);
    d.keep_alive().unwrap();
    // Header first, as nvme-cli does, then the entries.
    let hdr = d.get_log_page(0x70, 0, 1024).unwrap();
    assert_eq!(le64(&hdr, 8), 1, "one subsystem, one listener");
    let all = d.get_log_page(0x70, 0, 2048).unwrap();
    assert_eq!(&all[..1024], &hdr[..]);
    let e = &all[1024..];
    assert_eq!((e[0], e[1], e[2]), (3, 1, 2));
    assert_eq!(&e[256..256 + NQN.len()], NQN.as_bytes());
    assert_eq!(&e[512..522], b"10.0.3.100", "advertised address");
    let port = h.addr.port().to_string();
    assert_eq!(&e[32..32 + port.len()], port.as_bytes());
    // Paging: the entry alone at offset 1024.
    let paged = d.get_log_page(0x70, 1024, 1024).unwrap();
    assert_eq!(&paged[..], e);
    // I/O queues cannot be created on discovery.
    assert!(HostQueue::connect(&p, 1, d.cntlid).is_err());
    // A host outside the allow list sees nothing.
    let p2 = h.params(DISCOVERY_NQN, "nqn.2014-08.org.example:other", 0);
    let mut d2 = HostQueue::connect(
        &ConnectParams {
            queue_size: 32,
            ..p2
        },
        0,
        0,
    )
    .unwrap();
    d2.enable().unwrap();
    assert_eq!(le64(&d2.get_log_page(0x70, 0, 1024).unwrap(), 8), 0);
    drop((d, d2));
    h.stop();
}

#[test]
fn host_not_allowed_is_refused() {
    let h = Harness::start(&[HOST]);
    let p = h.params(NQN, "nqn.2014-08.org.example:intruder", 0);
    let err = HostQueue::connect(&p, 0, 0).err().expect("refused");
    let st = status_of(err);
    assert_eq!((st.sct, st.sc), (1, 0x84), "Connect Invalid Host");
    // An unknown subsystem is answered the same way: the status tells an
    // unauthenticated party nothing about which NQNs exist.
    let p = h.params("nqn.2016-06.io.spdk:nope", HOST, 0);
    let unknown = status_of(HostQueue::connect(&p, 0, 0).err().unwrap());
    assert_eq!(unknown, st, "the same status as a refused host");
    // An I/O queue of someone else's controller with another host NQN.
    let good = HostController::connect(&h.params(NQN, HOST, 0), 1).unwrap();
    h.target.subsystem(NQN).unwrap().set_allow_any_host(true);
    let other = h.params(NQN, "nqn.2014-08.org.example:other", 0);
    assert!(HostQueue::connect(&other, 2, good.admin.cntlid).is_err());
    drop(good);
    h.stop();
}

// Keep-alive expiry and extension run on paused time in lifecycle.rs.

#[test]
fn malformed_pdu_ends_only_that_connection() {
    let h = Harness::start(&[HOST]);
    let p = h.params(NQN, HOST, 0);
    let mut a = HostController::connect(&p, 1).unwrap();
    let mut b = HostController::connect(&p, 1).unwrap();
    assert_ne!(a.admin.cntlid, b.admin.cntlid);
    // A command capsule with a wrong HLEN.
    let mut bad = [0u8; 72];
    bad[0] = 0x04;
    bad[2] = 71;
    bad[4..8].copy_from_slice(&72u32.to_le_bytes());
    a.io[0].send_raw(&bad).unwrap();
    let mut buf = vec![0u8; 512];
    match a.io[0].read_blocks(1, 0, BS, &mut buf) {
        Err(HostError::Protocol(m)) => assert!(m.contains("FES 0x1"), "{m}"),
        other => panic!("expected a TermReq, got {other:?}"),
    }
    // The other controller, and A's admin queue, keep working.
    let data = pattern(8192, 3);
    b.io[0].write_blocks(1, 64, BS, &data, 8192).unwrap();
    let mut back = vec![0u8; 8192];
    b.io[0].read_blocks(1, 64, BS, &mut back).unwrap();
    assert_eq!(back, data);
    a.admin.keep_alive().unwrap();
    // Garbage before ICReq on a fresh connection is refused the same way.
    let mut raw = std::net::TcpStream::connect(h.addr).unwrap();
    use std::io::{Read, Write};
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    raw.write_all(&[0xee; 8]).unwrap();
    let mut term = [0u8; 24];
    raw.read_exact(&mut term).unwrap();
    assert_eq!(term[0], 0x03, "C2HTermReq");
    drop((a, b));
    h.stop();
}

#[test]
fn exceeding_the_queue_depth_does_not_crash() {
    let h = Harness::start(&[HOST]);
    let mut p = h.params(NQN, HOST, 0);
    let mut admin = HostQueue::connect(&p, 0, 0).unwrap();
    admin.enable().unwrap();
    admin.set_queue_count(1).unwrap();
    p.queue_size = 16;
    let mut io = HostQueue::connect(&p, 1, admin.cntlid).unwrap();
    let n = 200u16;
    for i in 0..n {
        let sqe = Sqe::build(
            opcode::READ,
            1000 + i,
            1,
            SglDescriptor {
                address: 0,
                length: 4096,
                kind: sgl::TRANSPORT,
            },
            [u32::from(i) * 8, 0, 7, 0, 0, 0],
        );
        io.queue_command(&sqe, None);
    }
    io.flush().unwrap();
    let (mut ok, mut refused, mut data) = (0, 0, 0);
    while ok + refused < n {
        match io.recv().unwrap() {
            Event::Completion(c) if c.status.is_success() => ok += 1,
            Event::Completion(c) => {
                assert_eq!((c.status.sct, c.status.sc), (0, 0x21));
                refused += 1;
            }
            Event::Data { .. } => data += 1,
            Event::R2t(_) => panic!("R2T for a read"),
        }
    }
    assert_eq!(ok, data);
    assert!(ok >= 16, "at least the queue depth succeeded ({ok})");
    // Still serving.
    let mut b = vec![0u8; 4096];
    io.read_blocks(1, 0, BS, &mut b).unwrap();
    drop((admin, io));
    h.stop();
}

#[test]
fn namespace_change_completes_an_outstanding_aer() {
    let h = Harness::start(&[HOST]);
    let mut c = HostController::connect(&h.params(NQN, HOST, 0), 0).unwrap();
    // Enable namespace attribute notices, then leave an AER outstanding.
    c.admin.arm_namespace_notices(777).unwrap();
    let bdev = Arc::new(Bdev::Malloc(MallocBdev::new("Malloc1", 64, 512).unwrap()));
    let nsid = h
        .target
        .subsystem(NQN)
        .unwrap()
        .add_namespace(None, bdev, None, None)
        .unwrap();
    assert_eq!(nsid, 2);
    match c.admin.recv().unwrap() {
        Event::Completion(cqe) => {
            assert_eq!(cqe.cid, 777);
            assert_eq!(cqe.dw0, 0x0004_0002);
        }
        other => panic!("{other:?}"),
    }
    let log = c.admin.get_log_page(0x04, 0, 4096).unwrap();
    assert_eq!((le32(&log, 0), le32(&log, 4)), (2, 0));
    let list = c.admin.identify(0x02, 0).unwrap();
    assert_eq!((le32(&list, 0), le32(&list, 4)), (1, 2));
    drop(c);
    h.stop();
}

#[test]
fn shutdown_drains_and_closes_connections() {
    let h = Harness::start(&[HOST]);
    let mut c = HostController::connect(&h.params(NQN, HOST, 0), 1).unwrap();
    let data = pattern(4096, 5);
    c.io[0].write_blocks(1, 0, BS, &data, 8192).unwrap();
    // Controller shutdown through CC.SHN completes.
    let cc = c.admin.property_get(0x14, false).unwrap() as u32;
    c.admin.property_set(0x14, cc | (1 << 14)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.admin.property_get(0x1c, false).unwrap() & 0xc != 0x8 {
        assert!(Instant::now() < deadline, "shutdown did not complete");
        std::thread::sleep(Duration::from_millis(10));
    }
    let t = h.target.clone();
    h.rt.block_on(async move { t.shutdown().await });
    c.io[0].set_read_timeout(Duration::from_secs(5)).unwrap();
    let mut b = vec![0u8; 4096];
    assert!(c.io[0].read_blocks(1, 0, BS, &mut b).is_err());
    assert!(
        std::net::TcpStream::connect(h.addr).is_err() || {
            // The port may linger in the kernel briefly; a Connect must fail.
            HostQueue::connect(&h.params(NQN, HOST, 0), 0, 0).is_err()
        }
    );
    drop(c);
    h.stop();
}
