//! DH-HMAC-CHAP through the ctrlr layer: the host's side played here with
//! the codec's encoders and computations (the Linux host's side is the
//! guest test, test/dataplane/auth_test.go).

use nvmf::auth::chap::Exchange;
use nvmf::auth::ffdhe::KeyPair;
use nvmf::auth::{self, ControllerMessage, DhGroup, Failure, Reply};
use nvmf::keys::{DhchapSecret, Hash};
use nvmf::sqe::fctype;

use super::*;
use crate::auth::{HostKeys, NamedKey};

const ALL_HASHES: [Hash; 3] = [Hash::Sha256, Hash::Sha384, Hash::Sha512];

fn secret(fill: u8, transform: Option<Hash>) -> DhchapSecret {
    DhchapSecret::from_key(transform, &[fill; 32]).unwrap()
}

fn keys(host: &DhchapSecret, ctrlr: Option<&DhchapSecret>) -> HostKeys {
    let named = |name: &str, s: &DhchapSecret| {
        Some(Arc::new(NamedKey {
            name: name.into(),
            secret: s.clone(),
        }))
    };
    HostKeys {
        host: named("key0", host),
        ctrlr: ctrlr.and_then(|c| named("ckey0", c)),
        psk: None,
        pending: false,
    }
}

/// A target whose subsystem lists HOST with `k`.
fn auth_rig(k: HostKeys) -> (Target, Arc<Subsystem>, SocketAddr) {
    let (target, sub, listen) = target_with(SubsystemConfig::new(NQN));
    sub.add_host(HOST, k).unwrap();
    (target, sub, listen)
}

/// Connect; returns DW0 (controller id and AUTHREQ).
fn connect_dw0(q: &mut Queue, qid: u16, cntlid: u16) -> u32 {
    let (sqe, data) = wire::connect(1, NQN, HOST, [7; 16], qid, 32, cntlid, 0);
    match q.exec(&sqe, &data) {
        Outcome::Connected(c) => c.dw0,
        o => panic!("Connect: {:?}", status_of(&o)),
    }
}

fn send(q: &mut Queue, msg: &[u8]) {
    let o = q.exec(&wire::auth(fctype::AUTH_SEND, 9, msg.len()), msg);
    assert_eq!(status_of(&o), Status::SUCCESS, "Authentication Send");
}

fn recv(q: &mut Queue) -> Vec<u8> {
    let o = q.exec(&wire::auth(fctype::AUTH_RECV, 10, 4096), &[]);
    assert_eq!(status_of(&o), Status::SUCCESS, "Authentication Receive");
    q.reply().to_vec()
}

/// The host's side of one transaction offering `hashes` and `groups`,
/// with C2 when `ctrlr_key` is given. Ok: the hash and group used; Err:
/// the controller's Failure1 explanation, or 0 when the controller's
/// response did not verify (the host then sent Failure2).
fn authenticate(
    q: &mut Queue,
    host_key: &DhchapSecret,
    ctrlr_key: Option<&DhchapSecret>,
    hashes: &[Hash],
    groups: &[DhGroup],
) -> Result<(Hash, DhGroup), u8> {
    send(q, &auth::encode_negotiate(3, hashes, groups));
    let challenge = recv(q);
    let (hash, group, seqnum, c1, dh_value) = match ControllerMessage::parse(&challenge).unwrap() {
        ControllerMessage::Challenge {
            t_id: 3,
            hash,
            group,
            seqnum,
            challenge,
            dh_value,
        } => (hash, group, seqnum, challenge.to_vec(), dh_value.to_vec()),
        ControllerMessage::Failure1 { explanation, .. } => return Err(explanation),
        m => panic!("{m:?}"),
    };
    let hash = Hash::from_id(hash).unwrap();
    let group = DhGroup::from_id(group).unwrap();
    let dh = (group != DhGroup::Null).then(|| KeyPair::generate(group).unwrap());
    let session = dh.as_ref().map(|k| k.shared_secret(&dh_value).unwrap());
    let exchange = |challenge, seqnum| Exchange {
        hash,
        challenge,
        seqnum,
        t_id: 3,
        session_key: session.as_deref().map(|s| &s[..]),
        hostnqn: HOST,
        subnqn: NQN,
    };
    let r1 = exchange(&c1, seqnum).host_response(host_key);
    let c2 = vec![0x5a; hash.digest_len()];
    let reply = Reply {
        t_id: 3,
        response: &r1,
        challenge: ctrlr_key.map(|_| (&c2[..], 77)),
        dh_value: dh.as_ref().map_or(&[][..], KeyPair::public),
    };
    send(q, &auth::encode_reply(3, &reply));
    let success = recv(q);
    match ControllerMessage::parse(&success).unwrap() {
        ControllerMessage::Success1 { t_id: 3, response } => {
            if let Some(k) = ctrlr_key {
                let r2 = exchange(&c2, 77).controller_response(k);
                if response != Some(&r2[..]) {
                    send(q, &auth::encode_failure2(3));
                    return Err(0);
                }
                send(q, &auth::encode_success2(3));
            } else {
                assert_eq!(response, None);
            }
            Ok((hash, group))
        }
        ControllerMessage::Failure1 { explanation, .. } => Err(explanation),
        m => panic!("{m:?}"),
    }
}

#[tokio::test]
async fn a_keyed_host_authenticates_every_queue_before_any_command() {
    let (hk, ck) = (secret(1, Some(Hash::Sha256)), secret(2, None));
    let (target, sub, listen) = auth_rig(keys(&hk, Some(&ck)));
    let mut admin = queue(&target, listen);
    let dw0 = connect_dw0(&mut admin, 0, 0);
    assert_ne!(dw0 & auth::CONNECT_AUTHREQ_ATR, 0, "AUTHREQ.ATR set");
    let cntlid = dw0 as u16;
    assert!(admin.awaits_authentication());
    for sqe in [
        wire::property_get(2, prop::CC, false),
        wire::property_set(2, prop::CC, CC_EN),
        identify(2, 1, 0),
    ] {
        assert_eq!(status_of(&admin.exec(&sqe, &[])), status::AUTH_REQUIRED);
    }
    assert_eq!(
        authenticate(&mut admin, &hk, Some(&ck), &ALL_HASHES, &DhGroup::ALL),
        Ok((Hash::Sha512, DhGroup::Ffdhe8192)),
        "the strongest both ends accept"
    );
    assert!(!admin.awaits_authentication());
    let enable = admin.exec(&wire::property_set(2, prop::CC, CC_EN), &[]);
    assert_eq!(status_of(&enable), Status::SUCCESS);

    let mut io_q = queue(&target, listen);
    let dw0 = connect_dw0(&mut io_q, 1, cntlid);
    assert_ne!(dw0 & auth::CONNECT_AUTHREQ_ATR, 0);
    let data = vec![0xabu8; BS];
    let (st, _) = io(&mut io_q, &rw(opcode::WRITE, 5, 0, 1), &data).await;
    assert_eq!(st, status::AUTH_REQUIRED, "no I/O before authentication");
    authenticate(&mut io_q, &hk, None, &[Hash::Sha256], &[DhGroup::Ffdhe2048]).unwrap();
    let (st, _) = io(&mut io_q, &rw(opcode::WRITE, 5, 0, 1), &data).await;
    assert_eq!(st, Status::SUCCESS);
    assert_eq!(sub.stats.auth_successes.get(), 2);
    assert_eq!(sub.stats.auth_failures.get(), 0);
    let ctrl = &sub.live_controllers()[0];
    let completed = |digest, dhgroup| {
        Some(crate::ctrlr::controller::QueueAuth {
            state: crate::ctrlr::controller::AuthState::Completed,
            digest: Some(digest),
            dhgroup: Some(dhgroup),
        })
    };
    assert_eq!(ctrl.auth_of(0), completed("sha512", "ffdhe8192"));
    assert_eq!(ctrl.auth_of(1), completed("sha256", "ffdhe2048"));
}

#[tokio::test]
async fn a_wrong_or_missing_key_is_refused_and_the_queue_stays_closed() {
    let (hk, ck) = (secret(1, None), secret(2, None));
    let (target, sub, listen) = auth_rig(keys(&hk, Some(&ck)));
    // The right NQN with another key.
    let mut q = queue(&target, listen);
    connect_dw0(&mut q, 0, 0);
    let wrong = secret(9, None);
    assert_eq!(
        authenticate(&mut q, &wrong, None, &ALL_HASHES, &[DhGroup::Null]),
        Err(Failure::Failed as u8)
    );
    assert!(q.awaits_authentication());
    let enable = q.exec(&wire::property_set(2, prop::CC, CC_EN), &[]);
    assert_eq!(status_of(&enable), status::AUTH_REQUIRED);
    // The right key, but the controller proves itself with a key the host
    // does not expect: the host's check fails (the reply was right).
    let mut q = queue(&target, listen);
    connect_dw0(&mut q, 0, 0);
    assert_eq!(
        authenticate(&mut q, &hk, Some(&wrong), &ALL_HASHES, &[DhGroup::Null]),
        Err(0),
        "the controller's response does not verify under another key"
    );
    assert!(q.awaits_authentication(), "Failure2 ends the queue");
    // A host that never starts a transaction: the first receive fails.
    let mut q = queue(&target, listen);
    connect_dw0(&mut q, 0, 0);
    let m = recv(&mut q);
    assert_eq!(
        ControllerMessage::parse(&m).unwrap(),
        ControllerMessage::Failure1 {
            t_id: 0,
            explanation: Failure::IncorrectProtocolMessage as u8
        }
    );
    assert_eq!(sub.stats.auth_failures.get(), 3);
    assert_eq!(sub.stats.auth_successes.get(), 0);
}

#[tokio::test]
async fn bidirectional_authentication_needs_a_controller_key() {
    let hk = secret(1, None);
    let (target, _sub, listen) = auth_rig(keys(&hk, None));
    let mut q = queue(&target, listen);
    connect_dw0(&mut q, 0, 0);
    let ck = secret(2, None);
    assert_eq!(
        authenticate(&mut q, &hk, Some(&ck), &ALL_HASHES, &[DhGroup::Null]),
        Err(Failure::Failed as u8)
    );
}

#[tokio::test]
async fn the_policy_limits_hashes_and_groups() {
    let hk = secret(1, Some(Hash::Sha512));
    let (target, _sub, listen) = auth_rig(keys(&hk, None));
    target
        .auth_policy()
        .set(&[Hash::Sha256], &[DhGroup::Null, DhGroup::Ffdhe3072]);
    let mut q = queue(&target, listen);
    connect_dw0(&mut q, 0, 0);
    assert_eq!(
        authenticate(&mut q, &hk, None, &ALL_HASHES, &DhGroup::ALL),
        Ok((Hash::Sha256, DhGroup::Ffdhe3072))
    );
    let mut q = queue(&target, listen);
    connect_dw0(&mut q, 0, 0);
    assert_eq!(
        authenticate(&mut q, &hk, None, &[Hash::Sha512], &DhGroup::ALL),
        Err(Failure::HashUnusable as u8)
    );
    let mut q = queue(&target, listen);
    connect_dw0(&mut q, 0, 0);
    assert_eq!(
        authenticate(&mut q, &hk, None, &ALL_HASHES, &[DhGroup::Ffdhe8192]),
        Err(Failure::DhGroupUnusable as u8)
    );
}

#[tokio::test]
async fn rotated_keys_reauthenticate_a_live_queue_and_old_keys_stop_working() {
    let (old, new) = (secret(1, None), secret(3, None));
    let (target, sub, listen) = auth_rig(keys(&old, None));
    let mut admin = queue(&target, listen);
    connect_dw0(&mut admin, 0, 0);
    authenticate(&mut admin, &old, None, &ALL_HASHES, &[DhGroup::Null]).unwrap();
    let enable = admin.exec(&wire::property_set(2, prop::CC, CC_EN), &[]);
    assert_eq!(status_of(&enable), Status::SUCCESS);

    sub.set_host_keys(HOST, keys(&new, None)).unwrap();
    // Mid-transaction the queue keeps serving commands.
    send(
        &mut admin,
        &auth::encode_negotiate(4, &ALL_HASHES, &[DhGroup::Null]),
    );
    let get = admin.exec(&wire::property_get(5, prop::CC, false), &[]);
    assert_eq!(status_of(&get), Status::SUCCESS);
    // Finish that one as a host would, then re-authenticate properly.
    let _ = recv(&mut admin);
    send(&mut admin, &auth::encode_success2(4));
    let _ = recv(&mut admin); // Failure1: out of turn
    assert!(
        !admin.awaits_authentication() && !admin.auth_failed(),
        "a failed re-authentication leaves the queue its earlier authentication"
    );
    let get = admin.exec(&wire::property_get(6, prop::CC, false), &[]);
    assert_eq!(status_of(&get), Status::SUCCESS, "and it serves on");
    // So does a re-authentication with the replaced key.
    assert_eq!(
        authenticate(&mut admin, &old, None, &ALL_HASHES, &[DhGroup::Null]),
        Err(Failure::Failed as u8)
    );
    assert!(!admin.auth_failed());
    authenticate(&mut admin, &new, None, &ALL_HASHES, &[DhGroup::Null]).unwrap();

    let mut admin = queue(&target, listen);
    connect_dw0(&mut admin, 0, 0);
    assert_eq!(
        authenticate(&mut admin, &old, None, &ALL_HASHES, &[DhGroup::Null]),
        Err(Failure::Failed as u8),
        "the old key no longer works"
    );
    let mut admin = queue(&target, listen);
    connect_dw0(&mut admin, 0, 0);
    authenticate(&mut admin, &new, None, &ALL_HASHES, &[DhGroup::Null]).unwrap();
    authenticate(&mut admin, &new, None, &ALL_HASHES, &[DhGroup::Ffdhe2048]).unwrap();
    assert!(!admin.awaits_authentication());
}

#[tokio::test]
async fn a_host_without_keys_is_not_asked_to_authenticate() {
    let (target, _sub, listen) = auth_rig(HostKeys::default());
    let mut q = queue(&target, listen);
    let dw0 = connect_dw0(&mut q, 0, 0);
    assert_eq!(dw0 & auth::CONNECT_AUTHREQ_ATR, 0);
    let enable = q.exec(&wire::property_set(2, prop::CC, CC_EN), &[]);
    assert_eq!(status_of(&enable), Status::SUCCESS);
}

#[tokio::test]
async fn malformed_authentication_commands_are_refused() {
    let hk = secret(1, None);
    let (target, _sub, listen) = auth_rig(keys(&hk, None));
    let mut q = queue(&target, listen);
    connect_dw0(&mut q, 0, 0);
    let neg = auth::encode_negotiate(3, &ALL_HASHES, &[DhGroup::Null]);
    // Another security protocol.
    let mut sqe = wire::auth(fctype::AUTH_SEND, 9, neg.len());
    sqe.0[43] = 0xea;
    assert_eq!(status_of(&q.exec(&sqe, &neg)), Status::INVALID_FIELD);
    // A transfer length the capsule does not hold.
    let sqe = wire::auth(fctype::AUTH_SEND, 9, neg.len() + 4);
    assert_eq!(status_of(&q.exec(&sqe, &neg)), Status::SGL_LENGTH_INVALID);
    // A garbled message: the send succeeds, the receive says why.
    send(&mut q, &[0u8, 0, 0, 0, 3, 0, 0, 9]);
    let m = recv(&mut q);
    assert_eq!(
        ControllerMessage::parse(&m).unwrap(),
        ControllerMessage::Failure1 {
            t_id: 0,
            explanation: Failure::IncorrectPayload as u8
        }
    );
}

#[tokio::test]
async fn a_host_that_starts_over_mid_transaction_can_still_authenticate() {
    let hk = secret(1, None);
    let (target, _sub, listen) = auth_rig(keys(&hk, None));
    let mut q = queue(&target, listen);
    connect_dw0(&mut q, 0, 0);
    send(
        &mut q,
        &auth::encode_negotiate(1, &ALL_HASHES, &[DhGroup::Null]),
    );
    let _challenge = recv(&mut q);
    // No reply: the host negotiates again (its own timeout, a restart).
    assert_eq!(
        authenticate(&mut q, &hk, None, &ALL_HASHES, &[DhGroup::Null]),
        Ok((Hash::Sha512, DhGroup::Null))
    );
    assert!(!q.awaits_authentication());
}

#[tokio::test]
async fn a_queue_that_never_authenticates_gets_a_few_challenges_not_endless_ones() {
    let hk = secret(1, None);
    let (target, _sub, listen) = auth_rig(keys(&hk, None));
    let mut q = queue(&target, listen);
    connect_dw0(&mut q, 0, 0);
    for _ in 0..3 {
        send(
            &mut q,
            &auth::encode_negotiate(1, &ALL_HASHES, &[DhGroup::Ffdhe2048]),
        );
        assert!(matches!(
            ControllerMessage::parse(&recv(&mut q)).unwrap(),
            ControllerMessage::Challenge { .. }
        ));
    }
    send(
        &mut q,
        &auth::encode_negotiate(1, &ALL_HASHES, &[DhGroup::Ffdhe2048]),
    );
    assert_eq!(
        ControllerMessage::parse(&recv(&mut q)).unwrap(),
        ControllerMessage::Failure1 {
            t_id: 1,
            explanation: Failure::IncorrectProtocolMessage as u8
        }
    );
    assert!(q.auth_failed(), "the queue closes");
}
