//! The ctrlr layer driven directly, without a socket or PDUs: a queue is
//! connected and enabled with Fabrics commands, then admin and I/O
//! commands run against a malloc bdev, their bdev operations awaited
//! here as the transport's in-flight set would.

use std::net::SocketAddr;
use std::sync::Arc;

use bdev::malloc::MallocBdev;
use bdev::{Bdev, DmaBuf};
use nvmf::cqe::{Cqe, Status};
use nvmf::sqe::{opcode, sgl, Sqe};
use nvmf_host::wire;

use super::controller::{prop, AEN_CFG_NS_ATTRIBUTE, AEN_NS_CHANGED, CC_EN, CSTS_RDY};
use super::controller::{CSTS_SHST_COMPLETE, CSTS_SHST_MASK};
use super::{status, Done, Op, Outcome, Queue};
use crate::subsystem::{ListenAddress, Subsystem};
use crate::{SubsystemConfig, Target, TransportOptions};

const NQN: &str = "nqn.2016-06.io.rackcache:ctrlr";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-0000000000c1";
const BS: usize = 512;
const BLOCKS: u64 = 8192;
const FID_VWC: u32 = 0x06;
const FID_AEC: u32 = 0x0b;
const CDW12_FUA: u32 = 1 << 30;

/// A target with one subsystem on a malloc bdev, reachable at `listen`
/// (recorded, not bound: nothing here uses a socket), and its enabled
/// admin queue.
struct Rig {
    target: Target,
    sub: Arc<Subsystem>,
    listen: SocketAddr,
    admin: Queue,
    cntlid: u16,
}

fn queue(r: &Target, listen: SocketAddr) -> Queue {
    let peer = "127.0.0.1:5000".parse().unwrap();
    Queue::new(r.state(), super::controller::QpairPath { listen, peer })
}

/// The status of an outcome that answers at once.
fn status_of(o: &Outcome) -> Status {
    match o {
        Outcome::Complete(c) | Outcome::Reply(c) | Outcome::Connected(c) => c.status,
        _ => panic!("not answered at once"),
    }
}

fn cqe_of(o: Outcome) -> Cqe {
    match o {
        Outcome::Complete(c) | Outcome::Reply(c) | Outcome::Connected(c) => c,
        _ => panic!("not answered at once"),
    }
}

/// Connects `q` as queue `qid` (of controller `cntlid` for an I/O queue);
/// returns the controller id.
fn connect(q: &mut Queue, qid: u16, cntlid: u16) -> u16 {
    let (sqe, data) = wire::connect(1, NQN, HOST, [7; 16], qid, 32, cntlid, 0);
    match q.exec(&sqe, &data) {
        Outcome::Connected(c) => {
            assert_eq!(c.status, Status::SUCCESS);
            c.dw0 as u16
        }
        o => panic!("Connect: {:?}", status_of(&o)),
    }
}

/// A target with subsystem `cfg` on a malloc bdev, listening (on paper)
/// at 127.0.0.1:4420.
fn target_with(cfg: SubsystemConfig) -> (Target, Arc<Subsystem>, SocketAddr) {
    let target = Target::new(TransportOptions::default(), metrics::Registry::new()).unwrap();
    let sub = target.add_subsystem(cfg).unwrap();
    let b = MallocBdev::new("Malloc0", BLOCKS, BS as u32).unwrap();
    sub.add_namespace(Some(1), Arc::new(Bdev::Malloc(b)), None, None)
        .unwrap();
    let listen: SocketAddr = "127.0.0.1:4420".parse().unwrap();
    sub.add_listener(ListenAddress {
        listen,
        advertised_addr: None,
        advertised_port: None,
        secure_channel: false,
    })
    .unwrap();
    (target, sub, listen)
}

fn rig() -> Rig {
    let mut cfg = SubsystemConfig::new(NQN);
    cfg.allow_any_host = true;
    let (target, sub, listen) = target_with(cfg);
    let mut admin = queue(&target, listen);
    let cntlid = connect(&mut admin, 0, 0);
    let enable = admin.exec(&wire::property_set(2, prop::CC, CC_EN), &[]);
    assert_eq!(status_of(&enable), Status::SUCCESS);
    Rig {
        target,
        sub,
        listen,
        admin,
        cntlid,
    }
}

impl Rig {
    /// An I/O queue of the rig's controller.
    fn io_queue(&self) -> Queue {
        let mut q = queue(&self.target, self.listen);
        connect(&mut q, 1, self.cntlid);
        q
    }
}

fn admin_cmd(op: u8, cid: u16, nsid: u32, len: u32, cdw10_15: [u32; 6]) -> Sqe {
    Sqe::build(op, cid, nsid, wire::transport(len), cdw10_15)
}

fn identify(cid: u16, cns: u32, nsid: u32) -> Sqe {
    admin_cmd(opcode::IDENTIFY, cid, nsid, 4096, [cns, 0, 0, 0, 0, 0])
}

fn get_features(cid: u16, fid: u32) -> Sqe {
    admin_cmd(opcode::GET_FEATURES, cid, 0, 0, [fid, 0, 0, 0, 0, 0])
}

fn set_features(cid: u16, fid: u32, value: u32) -> Sqe {
    admin_cmd(opcode::SET_FEATURES, cid, 0, 0, [fid, value, 0, 0, 0, 0])
}

fn get_log_page(cid: u16, lid: u32, len: u32, offset: u64) -> Sqe {
    let numd = len / 4 - 1;
    let cdw10 = lid | (numd & 0xffff) << 16;
    let cdw11 = numd >> 16;
    admin_cmd(
        opcode::GET_LOG_PAGE,
        cid,
        u32::MAX,
        len,
        [cdw10, cdw11, offset as u32, (offset >> 32) as u32, 0, 0],
    )
}

/// Read or Write of `blocks` blocks at `slba`; a write's data in the
/// capsule.
fn rw(op: u8, cid: u16, slba: u64, blocks: usize) -> Sqe {
    let kind = if op == opcode::WRITE {
        sgl::IN_CAPSULE
    } else {
        sgl::TRANSPORT
    };
    wire::rw(op, cid, 1, slba, blocks * BS, BS, kind)
}

fn le16(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([p[at], p[at + 1]])
}

/// Runs a bdev operation as the transport's in-flight set would.
async fn run(op: Op) -> Done {
    op.run(0).await.1
}

/// The status (and any data buffer) of a finished operation.
fn io_status(done: Done) -> (Status, Option<DmaBuf>) {
    match done {
        Done::Io { status, buf, .. } => (status, buf),
        Done::Shutdown => panic!("a shutdown flush"),
    }
}

/// Takes an I/O command through the whole layer as a transport would:
/// exec, a buffer filled from the capsule for a write, run, the bdev
/// operation awaited. Returns the status and, for a read, its data.
async fn io(q: &mut Queue, sqe: &Sqe, data: &[u8]) -> (Status, Option<DmaBuf>) {
    let outcome = match q.exec(sqe, data) {
        Outcome::NeedsData(t) => {
            let mut buf = DmaBuf::new(t.len as usize);
            if let Some(at) = t.in_capsule {
                buf.copy_from_slice(&data[at..at + t.len as usize]);
            }
            q.run(sqe.cid(), t.ns, t.pending, &mut Some(buf), true)
        }
        other => other,
    };
    match outcome {
        Outcome::Submit(op) => io_status(run(op).await),
        Outcome::Ran(done) => io_status(done),
        other => (status_of(&other), None),
    }
}

#[tokio::test]
async fn only_connect_before_connect_and_only_property_access_before_enable() {
    let r = rig();
    let mut q = queue(&r.target, r.listen);
    assert_eq!(
        status_of(&q.exec(&identify(1, 1, 0), &[])),
        Status::SEQUENCE_ERROR
    );
    // A second controller, not enabled: admin commands wait for CC.EN.
    connect(&mut q, 0, 0);
    assert_eq!(
        status_of(&q.exec(&identify(2, 1, 0), &[])),
        Status::SEQUENCE_ERROR
    );
    let csts = cqe_of(q.exec(&wire::property_get(3, prop::CSTS, false), &[]));
    assert_eq!(csts.dw0 & CSTS_RDY, 0);
    q.exec(&wire::property_set(4, prop::CC, CC_EN), &[]);
    let csts = cqe_of(q.exec(&wire::property_get(5, prop::CSTS, false), &[]));
    assert_eq!(csts.dw0 & CSTS_RDY, CSTS_RDY);
    // Connect again on a connected queue is out of sequence.
    let (sqe, data) = wire::connect(6, NQN, HOST, [7; 16], 0, 32, 0, 0);
    assert_eq!(status_of(&q.exec(&sqe, &data)), Status::SEQUENCE_ERROR);
    // An I/O queue of an unknown controller is refused.
    let mut io = queue(&r.target, r.listen);
    let (sqe, data) = wire::connect(7, NQN, HOST, [7; 16], 1, 32, 999, 0);
    assert_eq!(
        status_of(&io.exec(&sqe, &data)),
        Status::CONNECT_INVALID_PARAMETERS
    );
}

#[tokio::test]
async fn identify_controller_and_namespaces() {
    let mut r = rig();
    let o = r.admin.exec(&identify(1, 1, 0), &[]);
    assert_eq!(status_of(&o), Status::SUCCESS);
    let page = r.admin.reply();
    assert_eq!(page.len(), 4096);
    assert_eq!(le16(page, 78), r.cntlid);
    assert_eq!(&page[768..768 + NQN.len()], NQN.as_bytes());

    let o = r.admin.exec(&identify(2, 0, 1), &[]);
    assert_eq!(status_of(&o), Status::SUCCESS);
    let nsze = u64::from_le_bytes(r.admin.reply()[0..8].try_into().unwrap());
    assert_eq!(nsze, BLOCKS);
    // An inactive nsid: a zeroed structure; nsid 0: invalid.
    r.admin.exec(&identify(3, 0, 2), &[]);
    assert!(r.admin.reply().iter().all(|&b| b == 0));
    assert_eq!(
        status_of(&r.admin.exec(&identify(4, 0, 0), &[])),
        Status::INVALID_NAMESPACE
    );
    // Active namespace list: nsid 1 only.
    r.admin.exec(&identify(5, 2, 0), &[]);
    let list = r.admin.reply();
    assert_eq!((list[0], list[4]), (1, 0));
    // A host buffer smaller than the page gets that much.
    let small = admin_cmd(opcode::IDENTIFY, 6, 0, 512, [1, 0, 0, 0, 0, 0]);
    r.admin.exec(&small, &[]);
    assert_eq!(r.admin.reply().len(), 512);
    // The data must go by the transport, not in the capsule.
    let mut bad = identify(7, 1, 0);
    bad.0[39] = sgl::IN_CAPSULE;
    assert_eq!(
        status_of(&r.admin.exec(&bad, &[])),
        Status::SGL_TYPE_INVALID
    );
    assert_eq!(
        status_of(&r.admin.exec(&identify(8, 0x7f, 0), &[])),
        Status::INVALID_FIELD
    );
}

#[tokio::test]
async fn volatile_write_cache_is_a_feature_and_makes_writes_durable_when_off() {
    let mut r = rig();
    let mut q = r.io_queue();
    assert_eq!(cqe_of(r.admin.exec(&get_features(1, FID_VWC), &[])).dw0, 1);
    let write = rw(opcode::WRITE, 2, 0, 1);
    let data = vec![0xa5; BS];
    let fua_of = |q: &mut Queue, sqe: &Sqe| {
        let Outcome::NeedsData(t) = q.exec(sqe, &data) else {
            panic!("a write needs its data")
        };
        let buf = DmaBuf::from_slice(&data);
        match q.run(sqe.cid(), t.ns, t.pending, &mut Some(buf), true) {
            Outcome::Submit(Op::Write { fua, .. }) => fua,
            _ => panic!("a write is submitted"),
        }
    };
    assert!(!fua_of(&mut q, &write), "cache on: written back");
    let off = r.admin.exec(&set_features(3, FID_VWC, 0), &[]);
    assert_eq!(status_of(&off), Status::SUCCESS);
    assert_eq!(cqe_of(r.admin.exec(&get_features(4, FID_VWC), &[])).dw0, 0);
    assert!(fua_of(&mut q, &write), "cache off: written through");
    // Unknown feature: invalid field.
    assert_eq!(
        status_of(&r.admin.exec(&get_features(5, 0x7e), &[])),
        Status::INVALID_FIELD
    );
}

#[tokio::test]
async fn get_log_page_pages_and_their_checks() {
    let mut r = rig();
    let smart = r.admin.exec(&get_log_page(1, 0x02, 512, 0), &[]);
    assert_eq!(status_of(&smart), Status::SUCCESS);
    assert_eq!(r.admin.reply().len(), 512);
    let error = r.admin.exec(&get_log_page(2, 0x01, 64, 0), &[]);
    assert_eq!(status_of(&error), Status::SUCCESS);
    assert_eq!(r.admin.reply().len(), 64);
    assert_eq!(
        status_of(&r.admin.exec(&get_log_page(3, 0x70, 1024, 0), &[])),
        Status::INVALID_LOG_PAGE,
        "no discovery log on an NVM subsystem"
    );
    assert_eq!(
        status_of(&r.admin.exec(&get_log_page(4, 0x02, 512, 2), &[])),
        Status::INVALID_FIELD,
        "offset not dword aligned"
    );
    // A namespace added shows in the changed namespace list once.
    let b = MallocBdev::new("Malloc1", BLOCKS, BS as u32).unwrap();
    r.sub
        .add_namespace(Some(2), Arc::new(Bdev::Malloc(b)), None, None)
        .unwrap();
    r.admin.exec(&get_log_page(5, 0x04, 4096, 0), &[]);
    let list = r.admin.reply();
    assert_eq!(u32::from_le_bytes(list[0..4].try_into().unwrap()), 2);
    assert_eq!(u32::from_le_bytes(list[4..8].try_into().unwrap()), 0);
    r.admin.exec(&get_log_page(6, 0x04, 4096, 0), &[]);
    assert!(r.admin.reply().iter().all(|&b| b == 0), "read clears it");
}

#[tokio::test]
async fn read_write_flush_and_fua() {
    let r = rig();
    let mut q = r.io_queue();
    let data: Vec<u8> = (0..4 * BS).map(|i| (i % 251) as u8).collect();
    let (st, _) = io(&mut q, &rw(opcode::WRITE, 1, 10, 4), &data).await;
    assert_eq!(st, Status::SUCCESS);
    let (st, buf) = io(&mut q, &rw(opcode::READ, 2, 10, 4), &[]).await;
    assert_eq!(st, Status::SUCCESS);
    assert_eq!(&buf.unwrap()[..], &data[..]);
    // FUA: the write is made durable before it completes.
    let mut fua = rw(opcode::WRITE, 3, 20, 1);
    fua.0[48..52].copy_from_slice(&CDW12_FUA.to_le_bytes());
    let Outcome::NeedsData(t) = q.exec(&fua, &data[..BS]) else {
        panic!("a write needs its data")
    };
    let buf = DmaBuf::from_slice(&data[..BS]);
    match q.run(3, t.ns, t.pending, &mut Some(buf), true) {
        Outcome::Submit(op @ Op::Write { fua: true, .. }) => {
            assert_eq!(io_status(run(op).await).0, Status::SUCCESS);
        }
        _ => panic!("a FUA write is submitted with FUA"),
    }
    let flush = Sqe::build(opcode::FLUSH, 4, 1, wire::transport(0), [0; 6]);
    let Outcome::Submit(op @ Op::Flush { .. }) = q.exec(&flush, &[]) else {
        panic!("a flush is submitted")
    };
    assert_eq!(io_status(run(op).await).0, Status::SUCCESS);
    // Write Zeroes, then the blocks read back as zeroes.
    let wz = Sqe::build(
        opcode::WRITE_ZEROES,
        5,
        1,
        wire::transport(0),
        [10, 0, 3, 0, 0, 0],
    );
    assert_eq!(io(&mut q, &wz, &[]).await.0, Status::SUCCESS);
    let (_, buf) = io(&mut q, &rw(opcode::READ, 6, 10, 4), &[]).await;
    assert!(buf.unwrap().iter().all(|&b| b == 0));
}

#[tokio::test]
async fn invalid_opcode_namespace_range_and_transfer_statuses() {
    let mut r = rig();
    let mut q = r.io_queue();
    let odd = Sqe::build(0x7e, 1, 1, wire::transport(0), [0; 6]);
    assert_eq!(status_of(&q.exec(&odd, &[])), Status::INVALID_OPCODE);
    assert_eq!(
        status_of(
            &r.admin
                .exec(&Sqe::build(0xc1, 2, 0, wire::transport(0), [0; 6]), &[])
        ),
        Status::INVALID_OPCODE
    );
    let beyond = rw(opcode::READ, 3, BLOCKS - 1, 2);
    assert_eq!(status_of(&q.exec(&beyond, &[])), Status::LBA_OUT_OF_RANGE);
    let mut other_ns = rw(opcode::READ, 4, 0, 1);
    other_ns.0[4..8].copy_from_slice(&9u32.to_le_bytes());
    assert_eq!(
        status_of(&q.exec(&other_ns, &[])),
        Status::INVALID_NAMESPACE
    );
    // Above MDTS (1 MiB by default): refused, never truncated.
    let big = wire::rw(opcode::READ, 5, 1, 0, 2 << 20, BS, sgl::TRANSPORT);
    assert_eq!(status_of(&q.exec(&big, &[])), Status::INVALID_FIELD);
    // In-capsule data shorter than the command says.
    let short = rw(opcode::WRITE, 6, 0, 2);
    assert_eq!(
        status_of(&q.exec(&short, &[0; BS])),
        Status::SGL_OFFSET_INVALID
    );
    // A read's data cannot come in the capsule.
    let mut in_capsule_read = rw(opcode::READ, 7, 0, 1);
    in_capsule_read.0[39] = sgl::IN_CAPSULE;
    assert_eq!(
        status_of(&q.exec(&in_capsule_read, &[])),
        Status::SGL_TYPE_INVALID
    );
    // Fabrics Property Get is for the admin queue only.
    assert_eq!(
        status_of(&q.exec(&wire::property_get(8, prop::CC, false), &[])),
        Status::INVALID_OPCODE
    );
}

#[tokio::test]
async fn aers_wait_for_events_and_end_at_reset() {
    let mut r = rig();
    let aec = r
        .admin
        .exec(&set_features(1, FID_AEC, AEN_CFG_NS_ATTRIBUTE), &[]);
    assert_eq!(status_of(&aec), Status::SUCCESS);
    let aer = admin_cmd(opcode::ASYNC_EVENT_REQUEST, 2, 0, 0, [0; 6]);
    assert!(matches!(r.admin.exec(&aer, &[]), Outcome::Deferred));
    assert!(r.admin.awaits_events().is_some());
    assert!(r.admin.take_completion().is_none());
    r.sub.remove_namespace(1).unwrap();
    r.admin.deliver_events();
    let ev = r.admin.take_completion().expect("the AER answered");
    assert_eq!((ev.cid, ev.dw0), (2, AEN_NS_CHANGED));
    // Another AER, then a controller reset: it ends, aborted.
    let aer = admin_cmd(opcode::ASYNC_EVENT_REQUEST, 3, 0, 0, [0; 6]);
    r.admin.exec(&aer, &[]);
    let reset = r.admin.exec(&wire::property_set(4, prop::CC, 0), &[]);
    assert_eq!(status_of(&reset), Status::SUCCESS);
    let aborted = r.admin.take_completion().expect("the AER ended");
    assert_eq!(
        (aborted.cid, aborted.status),
        (3, status::ABORTED_SQ_DELETION)
    );
}

#[tokio::test]
async fn shutdown_flushes_then_reports_complete() {
    let mut r = rig();
    let shn = wire::property_set(1, prop::CC, CC_EN | (1 << 14));
    let Outcome::Background(op @ Op::ShutdownFlush { .. }) = r.admin.exec(&shn, &[]) else {
        panic!("shutdown flushes in the background")
    };
    let done = r.admin.take_completion().expect("Property Set answered");
    assert_eq!((done.cid, done.status), (1, Status::SUCCESS));
    assert!(matches!(run(op).await, Done::Shutdown));
    r.admin.shutdown_flushed();
    let csts = cqe_of(r.admin.exec(&wire::property_get(2, prop::CSTS, false), &[]));
    assert_eq!(csts.dw0 & CSTS_SHST_MASK, CSTS_SHST_COMPLETE);
}

#[tokio::test]
async fn disconnect_and_unbind_release_the_controller() {
    let mut r = rig();
    let q = r.io_queue();
    assert_eq!(r.sub.live_controllers().len(), 1);
    let disconnect = {
        let mut raw = [0u8; 64];
        raw[0] = opcode::FABRICS;
        raw[2..4].copy_from_slice(&9u16.to_le_bytes());
        raw[4] = nvmf::sqe::fctype::DISCONNECT;
        Sqe(raw)
    };
    assert!(matches!(
        r.admin.exec(&disconnect, &[]),
        Outcome::Disconnect(c) if c.status == Status::SUCCESS
    ));
    drop(q);
    let ctrl = r.admin.unbind().expect("bound");
    assert!(ctrl.is_torn_down(), "the admin queue's end tears it down");
    assert!(r.sub.live_controllers().iter().all(|c| c.is_torn_down()));
}

mod ana;
mod ana_fence;
mod auth;
mod tls;
