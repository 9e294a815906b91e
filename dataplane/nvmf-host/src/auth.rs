//! DH-HMAC-CHAP from the host's side, as the Linux host runs it: after a
//! Connect whose answer sets AUTHREQ.ATR, one transaction on that queue
//! (negotiate every hash and group, answer the challenge, check the
//! controller's response when a controller key is given).

use nvmf::auth::chap::{self, Exchange};
use nvmf::auth::ffdhe::KeyPair;
use nvmf::auth::{self, ControllerMessage, DhGroup, Reply};
use nvmf::keys::{DhchapSecret, Hash};
use nvmf::sqe::fctype;

use crate::host::{ConnectParams, HostError, HostQueue, Result};
use crate::wire;

/// A host's DH-HMAC-CHAP secrets.
#[derive(Clone, Debug)]
pub struct DhchapKeys {
    /// The host's secret (`nvme connect --dhchap-secret`).
    pub host: DhchapSecret,
    /// The controller's, to authenticate it too (`--dhchap-ctrl-secret`).
    pub ctrlr: Option<DhchapSecret>,
}

/// What a successful transaction used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Authenticated {
    pub hash: Hash,
    pub group: DhGroup,
}

/// The receive buffer of Authentication Receive: room for the largest
/// challenge (SHA-512 and FFDHE-8192).
const RECV_LEN: usize = 4096;

impl HostQueue {
    fn auth_send(&mut self, msg: &[u8]) -> Result<()> {
        let sqe = wire::auth(fctype::AUTH_SEND, 0, msg.len());
        self.execute_raw(sqe, Some(msg), None, "Authentication Send")?;
        Ok(())
    }

    fn auth_recv(&mut self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; RECV_LEN];
        let sqe = wire::auth(fctype::AUTH_RECV, 0, RECV_LEN);
        self.execute_raw(sqe, None, Some(&mut buf), "Authentication Receive")?;
        Ok(buf)
    }

    /// Authenticates this queue with `keys` (after a Connect whose answer
    /// asked for it, see [`HostQueue::auth_required`]).
    pub fn authenticate(&mut self, p: &ConnectParams, keys: &DhchapKeys) -> Result<Authenticated> {
        let t_id = self.qid;
        let refused =
            |why: String| HostError::Protocol(format!("DH-HMAC-CHAP on queue {t_id}: {why}"));
        self.auth_send(&auth::encode_negotiate(
            t_id,
            &[Hash::Sha512, Hash::Sha384, Hash::Sha256],
            &DhGroup::ALL,
        ))?;
        let m = self.auth_recv()?;
        let (hash, group, seqnum, c1, dh_value) = match ControllerMessage::parse(&m) {
            Ok(ControllerMessage::Challenge {
                hash,
                group,
                seqnum,
                challenge,
                dh_value,
                ..
            }) => (hash, group, seqnum, challenge.to_vec(), dh_value.to_vec()),
            Ok(ControllerMessage::Failure1 { explanation, .. }) => {
                return Err(refused(format!(
                    "the controller refused (explanation {explanation})"
                )))
            }
            other => return Err(refused(format!("expected a challenge, got {other:?}"))),
        };
        let hash = Hash::from_id(hash).ok_or_else(|| refused(format!("hash {hash}")))?;
        let group = DhGroup::from_id(group).ok_or_else(|| refused(format!("group {group}")))?;
        let dh = match group {
            DhGroup::Null => None,
            g => Some(KeyPair::generate(g).map_err(|e| refused(e.to_string()))?),
        };
        let session = match &dh {
            Some(k) => Some(
                k.shared_secret(&dh_value)
                    .map_err(|e| refused(e.to_string()))?,
            ),
            None => None,
        };
        let exchange = |challenge, seqnum| Exchange {
            hash,
            challenge,
            seqnum,
            t_id,
            session_key: session.as_deref().map(|s| &s[..]),
            hostnqn: &p.hostnqn,
            subnqn: &p.subnqn,
        };
        let r1 = exchange(&c1, seqnum).host_response(&keys.host);
        let mut c2 = vec![0u8; hash.digest_len()];
        getrandom::fill(&mut c2).map_err(|e| refused(e.to_string()))?;
        let s2 = getrandom::u32().map_err(|e| refused(e.to_string()))?.max(1);
        let reply = Reply {
            t_id,
            response: &r1,
            challenge: keys.ctrlr.as_ref().map(|_| (&c2[..], s2)),
            dh_value: dh.as_ref().map_or(&[][..], KeyPair::public),
        };
        self.auth_send(&auth::encode_reply(t_id, &reply))?;
        let m = self.auth_recv()?;
        match ControllerMessage::parse(&m) {
            Ok(ControllerMessage::Success1 { response, .. }) => {
                if let Some(k) = &keys.ctrlr {
                    let r2 = exchange(&c2, s2).controller_response(k);
                    if !response.is_some_and(|r| chap::matches(r, &r2)) {
                        self.auth_send(&auth::encode_failure2(t_id))?;
                        return Err(refused("the controller's response does not match".into()));
                    }
                    self.auth_send(&auth::encode_success2(t_id))?;
                }
                Ok(Authenticated { hash, group })
            }
            Ok(ControllerMessage::Failure1 { explanation, .. }) => Err(refused(format!(
                "the controller refused (explanation {explanation})"
            ))),
            other => Err(refused(format!("expected success1, got {other:?}"))),
        }
    }
}
