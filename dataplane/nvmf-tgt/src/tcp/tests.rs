//! The queue pair's PDU state machine, driven without a socket.

use nvmf::pdu::{encode_capsule_cmd_header, encode_ic_req, IcReq, TermStatus};
use nvmf::sqe::opcode;

use super::qpair::tests::conn;
use super::qpair::{ConnState, Connection};
use super::recv::{Fatal, RecvBuf};
use crate::{SubsystemConfig, Target, TransportOptions};

fn feed(c: &mut Connection, bytes: &[u8]) -> Result<(), Box<Fatal>> {
    let mut rb = RecvBuf::new(1 << 20);
    rb.end = bytes.len();
    rb.buf[..bytes.len()].copy_from_slice(bytes);
    c.process(&mut rb)
}

fn ic_req() -> [u8; 128] {
    let mut b = [0u8; 128];
    encode_ic_req(
        &mut b,
        &IcReq {
            pfv: 0,
            hpda: 0,
            header_digest: false,
            data_digest: false,
            maxr2t: 0,
        },
    );
    b
}

#[test]
fn ic_then_connect_only() {
    let mut c = conn();
    assert_eq!(c.state, ConnState::AwaitingIcReq);
    // A command before ICReq is a fatal sequence error.
    let mut cmd = [0u8; 72];
    encode_capsule_cmd_header(&mut cmd, &[0u8; 64], 0, false, false, 0);
    let f = feed(&mut c, &cmd).err().unwrap();
    assert_eq!(f.err.status, TermStatus::PduSequenceError);

    let mut c = conn();
    feed(&mut c, &ic_req()).unwrap();
    assert_eq!(c.state, ConnState::AwaitingConnect);
    assert!(!c.tx.out.is_empty(), "ICResp queued");
    // Anything but Connect now gets Command Sequence Error, and the
    // connection stays where it is.
    let mut sqe = [0u8; 64];
    sqe[0] = opcode::IDENTIFY;
    encode_capsule_cmd_header(&mut cmd, &sqe, 0, false, false, 0);
    feed(&mut c, &cmd).unwrap();
    assert_eq!(c.state, ConnState::AwaitingConnect);
    // A second ICReq is fatal.
    let f = feed(&mut c, &ic_req()).err().unwrap();
    assert_eq!(f.err.status, TermStatus::PduSequenceError);
    c.terminate(&f);
    assert_eq!(c.state, ConnState::Terminating);
}

/// A connection dropped without `serve` reaching its end (its task
/// panicked) still releases its controller.
#[tokio::test]
async fn a_dropped_connection_releases_its_controller() {
    use nvmf_host::wire;
    const NQN: &str = "nqn.2016-06.io.rackcache:drop";
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0000-4000-8000-00000000d00d";
    let t = Target::new(TransportOptions::default(), metrics::Registry::new()).unwrap();
    let mut cfg = SubsystemConfig::new(NQN);
    cfg.allow_any_host = true;
    let sub = t.add_subsystem(cfg).unwrap();
    let listen = t
        .add_listener(NQN, "127.0.0.1:0".parse().unwrap(), None, None)
        .await
        .unwrap();
    let mut c = Connection::new(t.state(), "127.0.0.1:1".parse().unwrap(), listen);
    let mut input = wire::ic_req(wire::Digests::default()).to_vec();
    let (sqe, data) = wire::connect(1, NQN, HOST, [1; 16], 0, 32, 0xffff, 0);
    wire::put_command(&mut input, &sqe, Some(&data), wire::Digests::default());
    feed(&mut c, &input).unwrap();
    assert_eq!(c.state, ConnState::Serving);
    assert_eq!(sub.live_controllers().len(), 1);
    drop(c);
    assert!(sub.live_controllers().is_empty(), "controller torn down");
    assert!(
        t.state().releasing(NQN, HOST).is_none(),
        "a reconnect of the host need not wait"
    );
}
