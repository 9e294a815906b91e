//! Access that can be revoked, against the repository's own NVMe/TCP host
//! (`nvmf_host::host`) over loopback TCP: removing a host, a listener or a
//! subsystem, or turning `allow_any_host` off, ends the controllers that
//! lost access (every queue pair, admin and I/O) and only those; the
//! returned `Revocation` resolves once their queues have closed; the next
//! Connect is refused. Also the discovery subsystem's own listeners.
//!
//! Waits are bounded liveness checks (a hang fails), never timing claims.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bdev::malloc::MallocBdev;
use bdev::Bdev;
use metrics::Registry;
use nvmf_host::host::{ConnectParams, HostController, HostQueue};
use nvmf_tgt::{Revocation, SubsystemConfig, Target, TransportOptions, DISCOVERY_NQN};

use common::status_of;

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";
const NQN2: &str = "nqn.2016-06.io.spdk:cnode2";
const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-00000000000a";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-00000000000b";
const HOST_C: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-00000000000c";
const BS: usize = 512;
/// Liveness bound for a revocation: far above what closing takes.
const BOUND: Duration = Duration::from_secs(20);

struct Harness {
    rt: tokio::runtime::Runtime,
    target: Target,
}

impl Harness {
    fn start() -> Self {
        let rt = common::runtime();
        let target = Target::new(TransportOptions::default(), Registry::new()).unwrap();
        Self { rt, target }
    }

    /// Subsystem `nqn` on a fresh malloc bdev, allowing `hosts`.
    fn subsystem(&self, nqn: &str, hosts: &[&str]) {
        let sub = self
            .target
            .add_subsystem(SubsystemConfig::new(nqn))
            .unwrap();
        for h in hosts {
            sub.add_host(h, Default::default()).unwrap();
        }
        let bdev = Arc::new(Bdev::Malloc(MallocBdev::new("m", 2048, BS as u32).unwrap()));
        sub.add_namespace(Some(1), bdev, None, None).unwrap();
    }

    fn listen(&self, nqn: &str, addr: &str) -> SocketAddr {
        self.rt
            .block_on(
                self.target
                    .add_listener(nqn, addr.parse().unwrap(), None, None),
            )
            .unwrap()
    }

    fn wait(&self, r: Revocation) {
        assert!(
            self.rt.block_on(r.wait(BOUND)),
            "revoked queue pairs still open after {BOUND:?}"
        );
    }

    fn cntlids(&self, nqn: &str) -> Vec<u16> {
        let s = self.target.subsystem(nqn).unwrap();
        s.live_controllers().iter().map(|c| c.cntlid).collect()
    }

    fn stop(self) {
        common::shutdown(&self.rt, &self.target, Duration::from_secs(20));
        self.rt.shutdown_timeout(Duration::from_secs(2));
    }
}

fn params(addr: SocketAddr, subnqn: &str, hostnqn: &str) -> ConnectParams {
    ConnectParams {
        addr: addr.to_string(),
        subnqn: subnqn.into(),
        hostnqn: hostnqn.into(),
        host_id: [0x11; 16],
        queue_size: 32,
        kato_ms: 0,
    }
}

/// Every queue of `c` has been closed by the target.
fn all_closed(c: &mut HostController) {
    assert!(c.admin.keep_alive().is_err(), "admin queue still open");
    for q in &mut c.io {
        let mut b = vec![0u8; BS];
        assert!(
            q.read_blocks(1, 0, BS, &mut b).is_err(),
            "I/O queue {} still open",
            q.qid
        );
    }
}

/// Every queue of `c` still serves.
fn all_open(c: &mut HostController) {
    c.admin.keep_alive().expect("admin queue serves");
    for q in &mut c.io {
        let mut b = vec![0u8; BS];
        q.read_blocks(1, 0, BS, &mut b).expect("I/O queue serves");
    }
}

#[test]
fn remove_host_ends_its_controllers_and_refuses_its_next_connect() {
    let h = Harness::start();
    h.subsystem(NQN, &[HOST_A, HOST_B]);
    let addr = h.listen(NQN, "127.0.0.1:0");
    let mut a = HostController::connect(&params(addr, NQN, HOST_A), 2).unwrap();
    let mut a2 = HostController::connect(&params(addr, NQN, HOST_A), 1).unwrap();
    let mut b = HostController::connect(&params(addr, NQN, HOST_B), 1).unwrap();
    assert_eq!(h.cntlids(NQN).len(), 3);

    let r = h.target.remove_host(NQN, HOST_A).unwrap();
    assert_eq!(r.len(), 2, "both of host A's controllers");
    h.wait(r);
    all_closed(&mut a);
    all_closed(&mut a2);
    assert_eq!(h.cntlids(NQN), [b.admin.cntlid]);
    let st = status_of(
        HostQueue::connect(&params(addr, NQN, HOST_A), 0, 0)
            .err()
            .unwrap(),
    );
    assert_eq!(
        (st.sct, st.sc, st.dnr),
        (1, 0x84, true),
        "Connect Invalid Host"
    );
    // An I/O queue for the old controller id is refused as well.
    assert!(HostQueue::connect(&params(addr, NQN, HOST_A), 1, a.admin.cntlid).is_err());
    all_open(&mut b);
    drop((a, a2, b));
    h.stop();
}

#[test]
fn allow_any_host_off_ends_only_hosts_not_listed() {
    let h = Harness::start();
    h.subsystem(NQN, &[HOST_A]);
    let addr = h.listen(NQN, "127.0.0.1:0");
    assert!(h.target.set_allow_any_host(NQN, true).unwrap().is_empty());
    let mut a = HostController::connect(&params(addr, NQN, HOST_A), 1).unwrap();
    let mut c = HostController::connect(&params(addr, NQN, HOST_C), 1).unwrap();

    let r = h.target.set_allow_any_host(NQN, false).unwrap();
    assert_eq!(r.len(), 1);
    h.wait(r);
    all_closed(&mut c);
    all_open(&mut a);
    assert!(HostQueue::connect(&params(addr, NQN, HOST_C), 0, 0).is_err());
    drop((a, c));
    h.stop();
}

#[test]
fn remove_listener_ends_only_that_subsystems_queues_on_that_listener() {
    let h = Harness::start();
    h.subsystem(NQN, &[HOST_A]);
    h.subsystem(NQN2, &[HOST_A]);
    let l1 = h.listen(NQN, "127.0.0.1:0");
    let l2 = h.listen(NQN, "127.0.0.1:0");
    // The second subsystem shares the first listener.
    assert_eq!(h.listen(NQN2, &l1.to_string()), l1);
    let mut on_l1 = HostController::connect(&params(l1, NQN, HOST_A), 2).unwrap();
    let mut on_l2 = HostController::connect(&params(l2, NQN, HOST_A), 1).unwrap();
    let mut other = HostController::connect(&params(l1, NQN2, HOST_A), 1).unwrap();

    let r = h.target.remove_listener(NQN, l1).unwrap();
    assert_eq!(r.len(), 1);
    h.wait(r);
    all_closed(&mut on_l1);
    all_open(&mut on_l2);
    all_open(&mut other);
    // The socket stays (cnode2 listens there) but cnode1 is not reachable
    // through it any more.
    let st = status_of(
        HostQueue::connect(&params(l1, NQN, HOST_A), 0, 0)
            .err()
            .unwrap(),
    );
    assert_eq!((st.sct, st.sc), (1, 0x84), "answered as a refused host");
    HostController::connect(&params(l2, NQN, HOST_A), 1).unwrap();
    drop((on_l1, on_l2, other));
    h.stop();
}

#[test]
fn delete_subsystem_ends_every_controller() {
    let h = Harness::start();
    h.subsystem(NQN, &[HOST_A, HOST_B]);
    h.subsystem(NQN2, &[HOST_A]);
    let addr = h.listen(NQN, "127.0.0.1:0");
    h.listen(NQN2, &addr.to_string());
    let mut a = HostController::connect(&params(addr, NQN, HOST_A), 2).unwrap();
    let mut b = HostController::connect(&params(addr, NQN, HOST_B), 1).unwrap();
    let mut other = HostController::connect(&params(addr, NQN2, HOST_A), 1).unwrap();
    all_open(&mut a);
    let before = h.target.stats();
    assert_eq!(
        (before.qpairs.admin_current, before.qpairs.io_current),
        (3, 4)
    );
    assert_eq!(before.completed_io, 2, "the two reads");

    let r = h.target.remove_subsystem(NQN).unwrap();
    assert_eq!(r.len(), 2);
    h.wait(r);
    all_closed(&mut a);
    all_closed(&mut b);
    all_open(&mut other);
    let after = h.target.stats();
    assert_eq!(
        (after.qpairs.admin_current, after.qpairs.io_current),
        (1, 1)
    );
    assert_eq!((after.qpairs.admin_total, after.qpairs.io_total), (3, 4));
    // A deleted subsystem's I/O still counts; the other's read adds one.
    assert_eq!(after.completed_io, 3);
    drop((a, b, other));
    h.stop();
}

#[test]
fn discovery_listener_serves_discovery_only_and_is_listed_as_current() {
    let h = Harness::start();
    h.subsystem(NQN, &[HOST_A]);
    let nvm = h.listen(NQN, "127.0.0.1:0");
    let disc = h.listen(DISCOVERY_NQN, "127.0.0.1:0");
    let dparams = |addr| ConnectParams {
        kato_ms: 10_000,
        ..params(addr, DISCOVERY_NQN, HOST_A)
    };
    let mut d = HostQueue::connect(&dparams(disc), 0, 0).unwrap();
    d.enable().unwrap();
    let log = d.get_log_page(0x70, 0, 3072).unwrap();
    assert_eq!(u64::from_le_bytes(log[8..16].try_into().unwrap()), 2);
    let (e0, e1) = (&log[1024..2048], &log[2048..3072]);
    assert_eq!(
        e0[2], 3,
        "the discovery listener: current discovery subsystem"
    );
    assert_eq!(u16::from_le_bytes([e0[10], e0[11]]) & 1, 1, "DUPRETINFO");
    assert_eq!(
        &e0[256..256 + DISCOVERY_NQN.len()],
        DISCOVERY_NQN.as_bytes()
    );
    let port = disc.port().to_string();
    assert_eq!(&e0[32..32 + port.len()], port.as_bytes());
    assert_eq!(e1[2], 2);
    assert_eq!(&e1[256..256 + NQN.len()], NQN.as_bytes());
    // The NVM subsystem is not reachable on the discovery listener; the
    // discovery subsystem still is on the NVM one.
    let st = status_of(
        HostQueue::connect(&params(disc, NQN, HOST_A), 0, 0)
            .err()
            .unwrap(),
    );
    assert_eq!((st.sct, st.sc), (1, 0x84), "answered as a refused host");
    let mut d_on_nvm = HostQueue::connect(&dparams(nvm), 0, 0).unwrap();
    d_on_nvm.enable().unwrap();

    let r = h.target.remove_listener(DISCOVERY_NQN, disc).unwrap();
    assert_eq!(r.len(), 1, "the discovery controller on that listener");
    h.wait(r);
    assert!(d.keep_alive().is_err());
    d_on_nvm.keep_alive().unwrap();
    assert!(
        std::net::TcpStream::connect(disc).is_err(),
        "the discovery-only socket is closed"
    );
    drop((d, d_on_nvm));
    h.stop();
}
