//! Connect through a secure channel: the queue is bound to the host and
//! subsystem its TLS PSK identity named, and a host with a PSK does not
//! get in over plain TCP. (The handshake itself, against the Linux host
//! and tlshd, is the guest test test/dataplane/tls_test.go.)

use nvmf::keys::{Hash, TlsPsk};
use nvmf::tls::PskIdentity;

use super::*;
use crate::auth::{HostKeys, NamedPsk};

const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-0000000000c2";

fn identity(hostnqn: &str, subnqn: &str) -> Arc<PskIdentity> {
    Arc::new(PskIdentity {
        version: 0,
        hash: Hash::Sha256,
        hostnqn: hostnqn.into(),
        subnqn: subnqn.into(),
        digest: None,
    })
}

/// A target listing HOST with a PSK and OTHER_HOST without one.
fn tls_rig() -> (Target, SocketAddr) {
    let (target, sub, listen) = target_with(SubsystemConfig::new(NQN));
    let psk =
        TlsPsk::parse("NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:").unwrap();
    let keys = HostKeys {
        psk: Some(Arc::new(NamedPsk {
            name: "psk0".into(),
            psk,
        })),
        ..HostKeys::default()
    };
    sub.add_host(HOST, keys).unwrap();
    sub.add_host(OTHER_HOST, HostKeys::default()).unwrap();
    (target, listen)
}

fn connect_as(q: &mut Queue, hostnqn: &str) -> Status {
    let (sqe, data) = wire::connect(1, NQN, hostnqn, [7; 16], 0, 32, 0xffff, 0);
    status_of(&q.exec(&sqe, &data))
}

#[test]
fn a_secure_channel_admits_only_the_host_and_subsystem_of_its_identity() {
    let (target, listen) = tls_rig();
    let mut q = queue(&target, listen);
    q.set_secure_channel(Some(identity(HOST, NQN)));
    assert_eq!(connect_as(&mut q, HOST), Status::SUCCESS);

    // HOST's PSK does not let another allowed host in.
    let mut q = queue(&target, listen);
    q.set_secure_channel(Some(identity(HOST, NQN)));
    assert_eq!(connect_as(&mut q, OTHER_HOST), Status::CONNECT_INVALID_HOST);

    // Nor into another subsystem.
    let mut q = queue(&target, listen);
    q.set_secure_channel(Some(identity(HOST, "nqn.2016-06.io.rackcache:other")));
    assert_eq!(connect_as(&mut q, HOST), Status::CONNECT_INVALID_HOST);
}

#[test]
fn a_host_with_a_psk_is_refused_over_plain_tcp() {
    let (target, listen) = tls_rig();
    let mut q = queue(&target, listen);
    assert_eq!(connect_as(&mut q, HOST), Status::CONNECT_INVALID_HOST);
    // A host without a PSK still connects over plain TCP.
    let mut q = queue(&target, listen);
    assert_eq!(connect_as(&mut q, OTHER_HOST), Status::SUCCESS);
}
