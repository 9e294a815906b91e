use super::chap::{matches, Exchange};
use super::ffdhe::{DhError, KeyPair};
use super::*;
use crate::keys::DhchapSecret;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001";
const SUBNQN: &str = "nqn.2026-11.io.rackcache:vol:test";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn exchange<'a>(session_key: Option<&'a [u8]>, challenge: &'a [u8]) -> Exchange<'a> {
    Exchange {
        hash: Hash::Sha384,
        challenge,
        seqnum: 0x0102_0304,
        t_id: 7,
        session_key,
        hostnqn: HOSTNQN,
        subnqn: SUBNQN,
    }
}

/// Expected values from Python's hmac and hashlib (an implementation
/// independent of this crate's), for the layout of the NVMe base
/// specification as SPDK and the Linux kernel compute it.
#[test]
fn responses_match_an_independent_hmac() {
    let challenge = [0xa5u8; 48];
    let host_key = DhchapSecret::from_key(None, &(0u8..32).collect::<Vec<_>>()).unwrap();
    assert_eq!(
        hex(&exchange(None, &challenge).host_response(&host_key)),
        "37b9dd07cec72b01bb9cc733b5ccd61f9fefe73cb962728c3cdc9851262a0d77\
         f945de229f78ba4e264e53d384553c15"
    );
    let ctrlr_key =
        DhchapSecret::from_key(Some(Hash::Sha256), &(100u8..164).collect::<Vec<_>>()).unwrap();
    let session = [0x11u8; 256];
    assert_eq!(
        hex(&exchange(Some(&session), &challenge).controller_response(&ctrlr_key)),
        "1dbde6df4ac71a7f73ba527b8f705bbd8b081edf8e78643248ea6d0f802d083f\
         b489a22b1463883b937843bf4ad9c9f8"
    );
}

#[test]
fn matches_compares_whole_values() {
    assert!(matches(b"abc", b"abc"));
    assert!(!matches(b"abc", b"abd"));
    assert!(!matches(b"ab", b"abc"));
}

#[test]
fn both_ends_of_every_group_agree_and_refuse_degenerate_values() {
    for group in DhGroup::ALL.into_iter().skip(1) {
        let a = KeyPair::generate(group).unwrap();
        let b = KeyPair::generate(group).unwrap();
        let size = a.public().len();
        assert_eq!(
            size * 8,
            [0, 2048, 3072, 4096, 6144, 8192][group.id() as usize]
        );
        assert_ne!(a.public(), b.public(), "{group:?}: fresh exponents");
        let s1 = a.shared_secret(b.public()).unwrap();
        let s2 = b.shared_secret(a.public()).unwrap();
        assert_eq!(*s1, *s2, "{group:?}");
        assert_eq!(s1.len(), size);
        let mut one = vec![0u8; size];
        one[size - 1] = 1;
        let zero = vec![0u8; size];
        let all_ones = vec![0xffu8; size]; // above p
        for bad in [&one, &zero, &all_ones, &a.public()[1..].to_vec()] {
            assert_eq!(a.shared_secret(bad).unwrap_err(), DhError::BadPeerValue);
        }
    }
    assert!(matches!(
        KeyPair::generate(DhGroup::Null),
        Err(DhError::NullGroup)
    ));
}

#[test]
fn group_and_hash_names_round_trip() {
    for g in DhGroup::ALL {
        assert_eq!(DhGroup::from_name(g.name()), Some(g));
        assert_eq!(DhGroup::from_id(g.id()), Some(g));
    }
    assert_eq!(DhGroup::from_id(6), None);
    for h in [Hash::Sha256, Hash::Sha384, Hash::Sha512] {
        assert_eq!(hash_from_name(hash_name(h)), Some(h));
    }
    assert_eq!(hash_from_name("md5"), None);
}

#[test]
fn host_messages_round_trip() {
    let n = encode_negotiate(9, &[Hash::Sha256, Hash::Sha512], &DhGroup::ALL);
    assert_eq!(
        HostMessage::parse(&n).unwrap(),
        HostMessage::Negotiate {
            t_id: 9,
            concat: 0,
            dhchap: Some(Offer {
                hashes: vec![1, 3],
                groups: vec![0, 1, 2, 3, 4, 5]
            })
        }
    );
    let (r, c2, dh) = ([1u8; 32], [2u8; 32], [3u8; 256]);
    for challenge in [None, Some((&c2[..], 77))] {
        let reply = Reply {
            t_id: 9,
            response: &r,
            challenge,
            dh_value: &dh,
        };
        let m = encode_reply(9, &reply);
        assert_eq!(m.len(), 16 + 64 + 256);
        assert_eq!(HostMessage::parse(&m).unwrap(), HostMessage::Reply(reply));
    }
    assert_eq!(
        HostMessage::parse(&encode_success2(4)).unwrap(),
        HostMessage::Success2 { t_id: 4 }
    );
}

#[test]
fn controller_messages_round_trip() {
    let c = encode_challenge(3, Hash::Sha512, DhGroup::Ffdhe2048, 55, &[7; 64], &[8; 256]);
    assert_eq!(
        ControllerMessage::parse(&c).unwrap(),
        ControllerMessage::Challenge {
            t_id: 3,
            hash: 3,
            group: 1,
            seqnum: 55,
            challenge: &[7; 64],
            dh_value: &[8; 256]
        }
    );
    let s = encode_success1(3, Hash::Sha256, Some(&[9; 32]));
    assert_eq!(
        ControllerMessage::parse(&s).unwrap(),
        ControllerMessage::Success1 {
            t_id: 3,
            response: Some(&[9; 32])
        }
    );
    let s = encode_success1(3, Hash::Sha256, None);
    assert_eq!(s.len(), 16);
    assert_eq!(s[6], 32, "HL set even without a response");
    assert_eq!(
        ControllerMessage::parse(&encode_failure1(3, Failure::HashUnusable)).unwrap(),
        ControllerMessage::Failure1 {
            t_id: 3,
            explanation: 4
        }
    );
}

#[test]
fn malformed_host_messages_are_refused() {
    let n = encode_negotiate(1, &[Hash::Sha256], &[DhGroup::Null]);
    // A descriptor count that does not match the length.
    let mut bad = n.clone();
    bad[7] = 2;
    assert_eq!(HostMessage::parse(&bad), Err(ParseError::Payload));
    // An id list longer than its 30 slots.
    let mut bad = n.clone();
    bad[8 + 2] = 31;
    assert_eq!(HostMessage::parse(&bad), Err(ParseError::Payload));
    let reply = encode_reply(
        1,
        &Reply {
            t_id: 1,
            response: &[0; 32],
            challenge: Some((&[1; 32], 5)),
            dh_value: &[],
        },
    );
    assert_eq!(
        HostMessage::parse(&reply[..reply.len() - 1]),
        Err(ParseError::Payload)
    );
    let mut zero_seq = reply.clone();
    zero_seq[12..16].fill(0);
    assert_eq!(HostMessage::parse(&zero_seq), Err(ParseError::Payload));
    // What only a controller sends, and nonsense.
    assert_eq!(
        HostMessage::parse(&encode_failure1(1, Failure::Failed)),
        Err(ParseError::Protocol)
    );
    assert_eq!(HostMessage::parse(&[0xff; 16]), Err(ParseError::Protocol));
    assert_eq!(HostMessage::parse(&[0; 7]), Err(ParseError::Payload));
}
