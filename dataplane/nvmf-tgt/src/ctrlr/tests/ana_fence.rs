//! The target's ANA fence through the ctrlr layer: while it is up, every
//! listener of a subsystem reporting ANA states reports every group
//! inaccessible (log page, I/O refused with the path status), each
//! transition notifies the controllers, the states the control plane set
//! (before or during the fence) come back when it is lifted, and a
//! subsystem without ANA reporting serves on.

use super::ana::{ana_log, ana_rig, SECOND};
use super::*;
use crate::ana::AnaState;
use crate::ctrlr::controller::{AEN_ANA_CHANGED, AEN_CFG_ANA_CHANGE};

const PLAIN_NQN: &str = "nqn.2016-06.io.rackcache:plain";

/// Enables ANA change notices on `admin` and leaves an AER (`cid`)
/// outstanding.
fn arm_ana_notices(admin: &mut Queue, cid: u16) {
    let aec = admin.exec(&set_features(cid, FID_AEC, AEN_CFG_ANA_CHANGE), &[]);
    assert_eq!(status_of(&aec), Status::SUCCESS);
    let aer = admin_cmd(opcode::ASYNC_EVENT_REQUEST, cid + 1, 0, 0, [0; 6]);
    assert!(matches!(admin.exec(&aer, &[]), Outcome::Deferred));
}

/// The ANA change notice `admin` was sent (answering AER `cid`).
fn assert_notified(admin: &mut Queue, cid: u16) {
    admin.deliver_events();
    let ev = admin.take_completion().expect("an ANA change notice");
    assert_eq!((ev.cid, ev.dw0), (cid, AEN_ANA_CHANGED));
}

/// An I/O queue of the controller `admin_cntlid` on `listen`.
fn io_queue_on(r: &Rig, listen: &str, cntlid: u16) -> Queue {
    let mut q = queue(&r.target, listen.parse().unwrap());
    connect(&mut q, 1, cntlid);
    q
}

fn refused_with_path_status(st: Status) {
    assert_eq!(
        (st.sct, st.sc, st.dnr),
        (3, 2, false),
        "Asymmetric Access Inaccessible, retryable: {st:?}"
    );
}

#[tokio::test]
async fn the_fence_makes_every_path_inaccessible_and_lifting_it_restores_the_states_set() {
    let (mut r, mut other) = ana_rig();
    let second: SocketAddr = SECOND.parse().unwrap();
    r.sub
        .set_ana_state(second, None, AnaState::NonOptimized)
        .unwrap();
    let other_cntlid = r
        .sub
        .live_controllers()
        .into_iter()
        .map(|c| c.cntlid)
        .find(|&c| c != r.cntlid)
        .unwrap();
    arm_ana_notices(&mut r.admin, 1);
    arm_ana_notices(&mut other, 1);
    let mut q = r.io_queue();
    let mut other_io = io_queue_on(&r, SECOND, other_cntlid);
    let write = rw(opcode::WRITE, 3, 0, 1);
    assert_eq!(io(&mut q, &write, &[5; BS]).await.0, Status::SUCCESS);
    let (_, before) = ana_log(&mut r.admin);
    assert!(!r.target.ana_fenced());

    assert!(r.target.set_ana_fenced(true), "raised");
    assert!(!r.target.set_ana_fenced(true), "already up: no change");
    assert!(r.target.ana_fenced());
    // Every controller, through either listener, is told.
    assert_notified(&mut r.admin, 2);
    assert_notified(&mut other, 2);
    let (state, count) = ana_log(&mut r.admin);
    assert_eq!(state, AnaState::Inaccessible.code());
    assert!(count > before, "the change count moved");
    assert_eq!(ana_log(&mut other).0, AnaState::Inaccessible.code());
    // I/O through either path: refused before any data moves, with the
    // status on which a multipath host retries elsewhere.
    refused_with_path_status(io(&mut q, &rw(opcode::WRITE, 4, 0, 1), &[6; BS]).await.0);
    refused_with_path_status(io(&mut other_io, &rw(opcode::READ, 5, 0, 1), &[]).await.0);
    // The states set are kept underneath, and a state set meanwhile is
    // kept too (hosts see none of it).
    assert_eq!(
        r.sub.configured_ana_states(second).state(1),
        AnaState::NonOptimized
    );
    // (Told as a change: the log page's change count moves.)
    arm_ana_notices(&mut r.admin, 10);
    r.sub
        .set_ana_state(r.listen, Some(1), AnaState::NonOptimized)
        .unwrap();
    assert_notified(&mut r.admin, 11);
    assert_eq!(ana_log(&mut r.admin).0, AnaState::Inaccessible.code());
    refused_with_path_status(io(&mut q, &rw(opcode::READ, 6, 0, 1), &[]).await.0);

    arm_ana_notices(&mut r.admin, 7);
    arm_ana_notices(&mut other, 7);
    assert!(r.target.set_ana_fenced(false), "lifted");
    assert!(!r.target.set_ana_fenced(false), "already down: no change");
    assert_notified(&mut r.admin, 8);
    assert_notified(&mut other, 8);
    assert_eq!(ana_log(&mut r.admin).0, AnaState::NonOptimized.code());
    assert_eq!(ana_log(&mut other).0, AnaState::NonOptimized.code());
    let (st, data) = io(&mut other_io, &rw(opcode::READ, 9, 0, 1), &[]).await;
    assert_eq!(st, Status::SUCCESS);
    assert_eq!(
        data.unwrap()[..],
        [5; BS][..],
        "the refused write changed nothing"
    );
    assert_eq!(io(&mut q, &write, &[7; BS]).await.0, Status::SUCCESS);
}

#[tokio::test]
async fn a_subsystem_without_ana_reporting_serves_through_the_fence() {
    let (mut r, _) = ana_rig();
    let mut cfg = SubsystemConfig::new(PLAIN_NQN);
    cfg.allow_any_host = true;
    let plain = r.target.add_subsystem(cfg).unwrap();
    let b = MallocBdev::new("Malloc1", BLOCKS, BS as u32).unwrap();
    plain
        .add_namespace(Some(1), Arc::new(Bdev::Malloc(b)), None, None)
        .unwrap();
    plain
        .add_listener(ListenAddress {
            listen: r.listen,
            advertised_addr: None,
            advertised_port: None,
            secure_channel: false,
        })
        .unwrap();
    let connect_to = |q: &mut Queue, qid: u16, cntlid: u16| {
        let (sqe, data) = wire::connect(1, PLAIN_NQN, HOST, [7; 16], qid, 32, cntlid, 0);
        match q.exec(&sqe, &data) {
            Outcome::Connected(c) => c.dw0 as u16,
            o => panic!("Connect: {:?}", status_of(&o)),
        }
    };
    let mut admin = queue(&r.target, r.listen);
    let cntlid = connect_to(&mut admin, 0, 0);
    let enable = admin.exec(&wire::property_set(2, prop::CC, CC_EN), &[]);
    assert_eq!(status_of(&enable), Status::SUCCESS);
    let mut q = queue(&r.target, r.listen);
    connect_to(&mut q, 1, cntlid);

    r.target.set_ana_fenced(true);
    let write = rw(opcode::WRITE, 3, 0, 1);
    assert_eq!(io(&mut q, &write, &[9; BS]).await.0, Status::SUCCESS);
    let log = admin.exec(&get_log_page(4, super::ana::LID_ANA, 1024, 0), &[]);
    assert_eq!(
        status_of(&log),
        Status::INVALID_LOG_PAGE,
        "no ANA to report"
    );
    // The ANA subsystem beside it is fenced.
    refused_with_path_status(io(&mut r.io_queue(), &write, &[9; BS]).await.0);
    assert_eq!(ana_log(&mut r.admin).0, AnaState::Inaccessible.code());
}

#[tokio::test]
async fn a_subsystem_created_while_fenced_is_fenced_from_the_start() {
    let target = Target::new(TransportOptions::default(), metrics::Registry::new()).unwrap();
    target.set_ana_fenced(true);
    let mut cfg = SubsystemConfig::new(NQN);
    cfg.allow_any_host = true;
    cfg.ana_reporting = true;
    let sub = target.add_subsystem(cfg).unwrap();
    let listen: SocketAddr = "127.0.0.1:4420".parse().unwrap();
    sub.add_listener(ListenAddress {
        listen,
        advertised_addr: None,
        advertised_port: None,
        secure_channel: false,
    })
    .unwrap();
    assert_eq!(sub.ana_states(listen).state(1), AnaState::Inaccessible);
    assert_eq!(
        sub.configured_ana_states(listen).state(1),
        AnaState::Optimized
    );
    target.set_ana_fenced(false);
    assert_eq!(sub.ana_states(listen).state(1), AnaState::Optimized);
}
