//! Asymmetric Namespace Access through the ctrlr layer: what Identify and
//! the ANA log page report, the notice a state change sends, and I/O
//! refused with a path status through an inaccessible listener while
//! another listener of the same subsystem serves. (Linux's multipath
//! following the states is the guest test test/dataplane/ana_test.go.)

use super::*;
use crate::ana::AnaState;
use crate::ctrlr::controller::{AEN_ANA_CHANGED, AEN_CFG_ANA_CHANGE};

pub(super) const LID_ANA: u32 = 0x0c;
pub(super) const SECOND: &str = "127.0.0.1:4421";

/// A subsystem reporting ANA states, listening at 127.0.0.1:4420 and
/// `SECOND`; an enabled admin queue through each.
pub(super) fn ana_rig() -> (Rig, Queue) {
    let mut cfg = SubsystemConfig::new(NQN);
    cfg.allow_any_host = true;
    cfg.ana_reporting = true;
    let (target, sub, listen) = target_with(cfg);
    sub.add_listener(ListenAddress {
        listen: SECOND.parse().unwrap(),
        advertised_addr: None,
        advertised_port: None,
        secure_channel: false,
    })
    .unwrap();
    let enabled = |listen: SocketAddr| {
        let mut admin = queue(&target, listen);
        let cntlid = connect(&mut admin, 0, 0);
        let enable = admin.exec(&wire::property_set(2, prop::CC, CC_EN), &[]);
        assert_eq!(status_of(&enable), Status::SUCCESS);
        (admin, cntlid)
    };
    let (admin, cntlid) = enabled(listen);
    let (other, _) = enabled(SECOND.parse().unwrap());
    let rig = Rig {
        target,
        sub,
        listen,
        admin,
        cntlid,
    };
    (rig, other)
}

fn le32(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().unwrap())
}

/// The admin command's reply data.
pub(super) fn reply(q: &mut Queue, sqe: &Sqe) -> Vec<u8> {
    let o = q.exec(sqe, &[]);
    assert_eq!(status_of(&o), Status::SUCCESS);
    q.reply().to_vec()
}

/// The state of the one ANA group in the log page, and its change count.
pub(super) fn ana_log(q: &mut Queue) -> (u8, u64) {
    let p = reply(q, &get_log_page(9, LID_ANA, 1024, 0));
    assert_eq!(le16(&p, 8), 1, "one group");
    assert_eq!((le32(&p, 16), le32(&p, 20), le32(&p, 48)), (1, 1, 1));
    (p[32], u64::from_le_bytes(p[0..8].try_into().unwrap()))
}

#[tokio::test]
async fn identify_and_the_log_page_report_ana_groups() {
    let (mut r, _) = ana_rig();
    let c = reply(&mut r.admin, &identify(1, 1, 0));
    assert_eq!(c[76] & 0x0a, 0x0a, "CMIC: multi-controller and ANA");
    assert_eq!((c[342], c[343] & 0x1f), (10, 0x1f), "ANATT, ANACAP");
    assert_eq!((le32(&c, 344), le32(&c, 348)), (32, 32));
    assert_ne!(le32(&c, 92) & (1 << 11), 0, "OAES: ANA change notices");
    let ns = reply(&mut r.admin, &identify(2, 0, 1));
    assert_eq!(le32(&ns, 92), 1, "ANAGRPID: the nsid by default");
    assert_eq!(ana_log(&mut r.admin), (AnaState::Optimized.code(), 0));
}

#[tokio::test]
async fn without_ana_reporting_nothing_is_reported_or_settable() {
    let mut r = rig();
    let c = reply(&mut r.admin, &identify(1, 1, 0));
    assert_eq!(c[76] & 0x08, 0);
    assert_eq!((c[342], c[343]), (0, 0));
    let log = r.admin.exec(&get_log_page(2, LID_ANA, 1024, 0), &[]);
    assert_eq!(status_of(&log), Status::INVALID_LOG_PAGE);
    let e = r
        .sub
        .set_ana_state(r.listen, None, AnaState::Inaccessible)
        .unwrap_err();
    assert!(e.to_string().contains("ana_reporting"), "{e}");
}

#[tokio::test]
async fn an_inaccessible_listener_refuses_io_with_a_path_status_and_tells_its_hosts() {
    let (mut r, mut other) = ana_rig();
    let aec = r
        .admin
        .exec(&set_features(1, FID_AEC, AEN_CFG_ANA_CHANGE), &[]);
    assert_eq!(status_of(&aec), Status::SUCCESS);
    let aer = admin_cmd(opcode::ASYNC_EVENT_REQUEST, 2, 0, 0, [0; 6]);
    assert!(matches!(r.admin.exec(&aer, &[]), Outcome::Deferred));
    let mut q = r.io_queue();
    let mut other_io = queue(&r.target, SECOND.parse().unwrap());
    let other_cntlid = r
        .sub
        .live_controllers()
        .into_iter()
        .map(|c| c.cntlid)
        .find(|&c| c != r.cntlid)
        .unwrap();
    connect(&mut other_io, 1, other_cntlid);
    let write = rw(opcode::WRITE, 3, 0, 1);
    assert_eq!(io(&mut q, &write, &[5; BS]).await.0, Status::SUCCESS);

    r.sub
        .set_ana_state(r.listen, Some(1), AnaState::Inaccessible)
        .unwrap();
    let (st, _) = io(&mut q, &rw(opcode::READ, 4, 0, 1), &[]).await;
    assert_eq!((st.sct, st.sc, st.dnr), (3, 2, false), "{st:?}");
    let (st, _) = io(&mut q, &write, &[6; BS]).await;
    assert_eq!((st.sct, st.sc), (3, 2), "writes too, before any data moves");
    // The other listener's controller still serves, and sees optimized.
    let (st, data) = io(&mut other_io, &rw(opcode::READ, 5, 0, 1), &[]).await;
    assert_eq!(st, Status::SUCCESS);
    assert_eq!(
        data.unwrap()[..],
        [5; BS][..],
        "the refused write changed nothing"
    );
    assert_eq!(ana_log(&mut other).0, AnaState::Optimized.code());

    r.admin.deliver_events();
    let ev = r.admin.take_completion().expect("the AER answered");
    assert_eq!((ev.cid, ev.dw0), (2, AEN_ANA_CHANGED));
    // Masked until the log page is read: a second change is not told.
    let aer = admin_cmd(opcode::ASYNC_EVENT_REQUEST, 6, 0, 0, [0; 6]);
    assert!(matches!(r.admin.exec(&aer, &[]), Outcome::Deferred));
    r.sub
        .set_ana_state(r.listen, Some(1), AnaState::Change)
        .unwrap();
    r.admin.deliver_events();
    assert!(r.admin.take_completion().is_none(), "masked");
    assert_eq!(ana_log(&mut r.admin), (AnaState::Change.code(), 2));
    r.sub
        .set_ana_state(r.listen, None, AnaState::Optimized)
        .unwrap();
    r.admin.deliver_events();
    let ev = r.admin.take_completion().expect("unmasked by the read");
    assert_eq!((ev.cid, ev.dw0), (6, AEN_ANA_CHANGED));
    assert_eq!(
        io(&mut q, &rw(opcode::READ, 7, 0, 1), &[]).await.0,
        Status::SUCCESS
    );
}

#[tokio::test]
async fn bad_ana_settings_are_refused_and_change_nothing() {
    let (r, _) = ana_rig();
    let unknown: SocketAddr = "127.0.0.1:4999".parse().unwrap();
    assert!(r
        .sub
        .set_ana_state(unknown, None, AnaState::Inaccessible)
        .is_err());
    assert!(r
        .sub
        .set_ana_state(r.listen, Some(33), AnaState::Inaccessible)
        .is_err());
    assert!(r
        .sub
        .set_ana_state(r.listen, Some(0), AnaState::Inaccessible)
        .is_err());
    assert_eq!(r.sub.ana_states(r.listen).change_count, 0);
    let b = MallocBdev::new("Malloc9", 8, BS as u32).unwrap();
    let e = r
        .sub
        .add_namespace_in_group(Some(2), Arc::new(Bdev::Malloc(b)), None, None, Some(40))
        .unwrap_err();
    assert!(e.to_string().contains("anagrpid 40"), "{e}");
    assert_eq!(r.sub.namespaces().len(), 1);
}
