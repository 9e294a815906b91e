//! What an unauthenticated party on the network can and cannot do to a
//! listener, over real loopback TCP: idle sockets that never identify
//! themselves neither keep a host out nor stay past `identify_timeout`; a
//! Connect past the host cap is answered Controller Busy; and a host that
//! vanishes with keep-alive timeout 0 (its packets dropped by an iptables
//! rule, a real partition) does not hold its controller forever; and a
//! Connect with an allowed NQN that must authenticate (DH-HMAC-CHAP) and
//! never does is served nothing and closed at `auth_timeout`.

mod common;

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bdev::malloc::MallocBdev;
use bdev::Bdev;
use metrics::Registry;
use nvmf::cqe::Status;
use nvmf::keys::DhchapSecret;
use nvmf_host::host::{ConnectParams, HostController, HostQueue};
use nvmf_tgt::{HostKeys, NamedKey, Subsystem, SubsystemConfig, Target, TransportOptions};
use socket2::{Domain, Socket, Type};

use common::status_of;

const NQN: &str = "nqn.2016-06.io.rackcache:admission";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-0000000000a1";
const BS: usize = 512;

struct Harness {
    rt: tokio::runtime::Runtime,
    target: Target,
    sub: Arc<Subsystem>,
    addr: SocketAddr,
}

impl Harness {
    fn start(opts: TransportOptions) -> Self {
        let rt = common::runtime();
        let target = Target::new(opts, Registry::new()).unwrap();
        let sub = target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
        sub.add_host(HOST, Default::default()).unwrap();
        let bdev = Arc::new(Bdev::Malloc(
            MallocBdev::new("Malloc0", 2048, BS as u32).unwrap(),
        ));
        sub.add_namespace(Some(1), bdev, None, None).unwrap();
        let addr = common::listen_loopback(&rt, &target, NQN);
        Self {
            rt,
            target,
            sub,
            addr,
        }
    }

    fn params(&self, kato_ms: u32) -> ConnectParams {
        ConnectParams {
            addr: self.addr.to_string(),
            subnqn: NQN.into(),
            hostnqn: HOST.into(),
            host_id: [0xa1; 16],
            queue_size: 32,
            kato_ms,
        }
    }

    /// HOST must authenticate from now on (with a key this file never
    /// uses: no host here authenticates).
    fn require_key(&self) {
        let secret = DhchapSecret::from_key(None, &[7; 32]).unwrap();
        let keys = HostKeys {
            host: Some(Arc::new(NamedKey {
                name: "key0".into(),
                secret,
            })),
            ctrlr: None,
            psk: None,
            pending: false,
        };
        self.sub.set_host_keys(HOST, keys).unwrap();
    }

    /// A host that connects, writes a block and reads it back.
    fn host_io(&self, kato_ms: u32) -> HostController {
        let mut c = HostController::connect(&self.params(kato_ms), 1).expect("the host connects");
        let data = vec![0x5a; BS];
        c.io[0].write_blocks(1, 7, BS, &data, 8192).unwrap();
        let mut back = vec![0; BS];
        c.io[0].read_blocks(1, 7, BS, &mut back).unwrap();
        assert_eq!(back, data);
        c
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        common::shutdown(&self.rt, &self.target, Duration::from_secs(10));
    }
}

/// A socket from `source` (another loopback address: another peer) to
/// `to` that sends nothing.
fn idle_socket(source: &str, to: SocketAddr) -> TcpStream {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{source}:0").parse().unwrap();
    s.bind(&from.into()).unwrap();
    s.connect(&to.into()).unwrap();
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// True when the target closed `s` (a read sees the end of the stream or
/// a reset) within the socket's read timeout.
fn closed_by_target(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// True while `s` is still open: a short read finds no data and no end.
fn still_open(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
}

#[test]
fn a_flood_of_idle_sockets_cannot_keep_a_host_out() {
    let h = Harness::start(TransportOptions {
        max_unidentified_per_listener: 12,
        max_unidentified_per_peer: 4,
        // Far beyond the test: what admits the host is not the deadline.
        identify_timeout: Duration::from_secs(600),
        ..TransportOptions::default()
    });
    // Three "attackers" open 10 sockets each and send nothing: 4 of each
    // are admitted (12 in all: the listener's cap), the rest closed at once.
    let mut kept = Vec::new();
    let mut refused = 0;
    for source in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        for i in 0..10 {
            let mut s = idle_socket(source, h.addr);
            if i >= 4 {
                assert!(
                    closed_by_target(&mut s),
                    "{source}'s socket {i}: over the per-peer cap"
                );
                refused += 1;
            } else {
                kept.push(s);
            }
        }
    }
    assert_eq!((kept.len(), refused), (12, 18));
    assert!(
        kept.iter_mut().all(still_open),
        "all 12 admitted sockets wait"
    );
    // A host connects its admin and I/O queue and does I/O at once. Its
    // first socket made the oldest idle one give way; by its second, that
    // one had gone and the admin queue had connected (no longer counted as
    // unidentified), so there was room.
    let c = h.host_io(0);
    assert_eq!(h.sub.live_controllers().len(), 1);
    for (i, s) in kept.iter_mut().enumerate() {
        if i == 0 {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            assert!(closed_by_target(s), "the oldest idle socket made room");
        } else {
            assert!(still_open(s), "idle socket {i} is still there");
        }
    }
    drop(c);
}

#[test]
fn idle_sockets_are_closed_at_identify_timeout() {
    let h = Harness::start(TransportOptions {
        identify_timeout: Duration::from_secs(2),
        ..TransportOptions::default()
    });
    let started = Instant::now();
    let mut idle: Vec<TcpStream> = (0..3).map(|_| idle_socket("127.0.0.2", h.addr)).collect();
    for s in &mut idle {
        assert!(closed_by_target(s), "an idle socket is closed");
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1500),
        "closed at the deadline, not before ({waited:?})"
    );
    // A socket that sent its ICReq but no Connect goes the same way.
    let mut half = idle_socket("127.0.0.2", h.addr);
    std::io::Write::write_all(&mut half, &nvmf_host::wire::ic_req(Default::default())).unwrap();
    let mut icresp = [0u8; 128];
    half.read_exact(&mut icresp).unwrap();
    assert!(
        closed_by_target(&mut half),
        "no Connect after ICReq: closed"
    );
}

#[test]
fn a_connect_past_the_host_cap_is_answered_controller_busy() {
    let h = Harness::start(TransportOptions {
        max_connections_per_listener: 2,
        ..TransportOptions::default()
    });
    let c = h.host_io(0);
    // Admin and one I/O queue hold both host slots; a second I/O queue's
    // Connect is refused, and the socket stays usable for a retry.
    let e = HostQueue::connect(&h.params(0), 2, c.admin.cntlid)
        .err()
        .unwrap();
    assert_eq!(status_of(e), CONNECT_CONTROLLER_BUSY);
    drop(c);
    // Once the host has gone, its slots are free again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !h.sub.live_controllers().is_empty() {
        assert!(Instant::now() < deadline, "the controller is released");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(h.host_io(0));
}

/// Connect Controller Busy: status code type 1h, status code 81h.
const CONNECT_CONTROLLER_BUSY: Status = Status {
    sct: 1,
    sc: 0x81,
    ..Status::SUCCESS
};

/// iptables rules that drop every packet to and from a loopback port, and
/// are deleted on drop (a failed test included).
struct Partition {
    rules: Vec<Vec<String>>,
}

impl Partition {
    fn port(port: u16) -> Option<Self> {
        let mut p = Self { rules: Vec::new() };
        for (chain, dir) in [("INPUT", "--dport"), ("INPUT", "--sport")] {
            let rule: Vec<String> = [
                chain,
                "-i",
                "lo",
                "-p",
                "tcp",
                dir,
                &port.to_string(),
                "-j",
                "DROP",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let ok = Command::new("iptables")
                .arg("-I")
                .args(&rule)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return None;
            }
            p.rules.push(rule);
        }
        Some(p)
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        for rule in &self.rules {
            let _ = Command::new("iptables").arg("-D").args(rule).status();
        }
    }
}

#[test]
fn a_vanished_host_with_keep_alive_zero_does_not_hold_its_controller() {
    let h = Harness::start(TransportOptions {
        tcp_keepalive: Duration::from_secs(2),
        ..TransportOptions::default()
    });
    // KATO 0: the NVMe keep-alive timer never fires for this controller.
    let c = h.host_io(0);
    assert_eq!(h.sub.live_controllers().len(), 1);
    let Some(cut) = Partition::port(h.addr.port()) else {
        testkit::missing("iptables (root) to cut a loopback port");
        return;
    };
    // The host neither closes nor answers: its packets are dropped. TCP
    // keep-alive (2 s, then 3 probes 1 s apart) ends its queue pairs.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !h.sub.live_controllers().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the vanished host's controller is released"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(cut);
    drop(c);
}

#[test]
fn a_host_that_never_authenticates_is_served_nothing_and_closed_at_auth_timeout() {
    let h = Harness::start(TransportOptions {
        auth_timeout: Duration::from_secs(3),
        ..TransportOptions::default()
    });
    h.require_key();
    // The allowed NQN with keep-alive 1 s, and no key.
    let mut q = HostQueue::connect(&h.params(1000), 0, 0).expect("Connect itself succeeds");
    let e = q
        .property_get(0x00, true)
        .expect_err("CAP before authentication");
    assert_eq!(status_of(e).sc, 0x91, "Authentication Required");
    assert_eq!(h.sub.live_controllers().len(), 1);
    // Keep-alive does not run before authentication (the host could not
    // send Keep Alive): past twice the KATO the queue still answers.
    std::thread::sleep(Duration::from_millis(2000));
    let e = q.property_get(0x00, true).expect_err("still refused");
    assert_eq!(status_of(e).sc, 0x91);
    // At auth_timeout the target closes it, and the controller goes.
    q.set_read_timeout(Duration::from_secs(10)).unwrap();
    assert!(q.recv().is_err(), "the target closed the queue");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !h.sub.live_controllers().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        h.sub.live_controllers().is_empty(),
        "the controller is gone"
    );
    // A host without keys is unaffected.
    h.sub.set_host_keys(HOST, HostKeys::default()).unwrap();
    h.host_io(0);
}

#[test]
fn connects_that_owe_authentication_take_no_host_slot() {
    // Two host slots: a host's admin and one I/O queue.
    let h = Harness::start(TransportOptions {
        max_connections_per_listener: 2,
        ..TransportOptions::default()
    });
    const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-0000000000a2";
    h.sub.add_host(OTHER, HostKeys::default()).unwrap();
    h.require_key();
    // Two Connects with the keyed host's NQN and no key: had they taken
    // host slots, none would be left.
    let mut squatters: Vec<HostQueue> = (0..2)
        .map(|_| {
            HostQueue::connect(&h.params(0), 0, 0)
                .expect("Connect succeeds, authentication pending")
        })
        .collect();
    // Both slots are still there for a host that needs no key.
    let mut other = HostController::connect(
        &ConnectParams {
            hostnqn: OTHER.into(),
            ..h.params(0)
        },
        1,
    )
    .expect("the keyless host takes the free slot");
    let data = vec![0x3c; BS];
    other.io[0].write_blocks(1, 3, BS, &data, 8192).unwrap();
    for q in &mut squatters {
        let e = q
            .property_get(0x00, true)
            .expect_err("nothing before authentication");
        assert_eq!(status_of(e).sc, 0x91);
    }
}
