//! DH-HMAC-CHAP on one queue pair (SPDK's `lib/nvmf/auth.c`): the
//! controller's side of Authentication Send and Receive.
//!
//! A queue whose host has a key is connected but not authenticated: until
//! a transaction ends in success, every command but Authentication
//! Send/Receive and Disconnect gets Authentication Required, keep-alive
//! does not run, and the transport closes the socket at `auth_timeout`
//! after Connect. A failed transaction answers the host's next
//! Authentication Receive with AUTH_Failure1 and marks the queue failed,
//! so the transport closes it once that answer is out. A host may
//! authenticate again at any time (re-authentication, after a key
//! rotation); the queue keeps serving I/O meanwhile, and a failed
//! re-authentication leaves it with its earlier authentication (counted
//! and logged, Failure1 sent), as SPDK treats a re-authentication that
//! times out. Closing it would gain nothing (the same TCP stream proved
//! its key before; revocation is `remove_host`) and wedges the Linux
//! host: a queue closed under its re-authentication work never reconnects
//! (6.12, seen when a rotation hands it the controller key a moment
//! before the host key).
//!
//! Keys are read from the subsystem when the host's reply arrives, so a
//! rotation applies to every transaction that replies after it.

use nvmf::auth::chap::{self, Exchange};
use nvmf::auth::ffdhe::KeyPair;
use nvmf::auth::{self, DhGroup, Failure, HostMessage, Offer};
use nvmf::cqe::{Cqe, Status};
use nvmf::keys::Hash;
use nvmf::sqe::{sgl, Sqe};
use zeroize::Zeroizing;

use super::controller::{AuthState, QueueAuth};
use super::{status, Outcome, Queue};

/// Transactions a queue may start before one succeeds.
const MAX_UNAUTHENTICATED_TRANSACTIONS: u8 = 3;

/// Where a queue's transaction stands: what the host must send next.
enum Step {
    /// AUTH_Negotiate chose a hash and group: the host receives the
    /// challenge next.
    Negotiated,
    /// The challenge went out: the host sends its reply next.
    Challenged(Box<Challenge>),
    /// The reply was right: the host receives Success1 next (with R2 when
    /// it asked).
    Replied(Option<Zeroizing<Vec<u8>>>),
    /// Success1 carried R2: the host sends Success2 or Failure2 next.
    AwaitingSuccess2,
    /// The transaction failed: the host receives Failure1 next.
    Failed(Failure),
}

/// What the controller keeps between its challenge and the host's reply.
struct Challenge {
    challenge: Zeroizing<Vec<u8>>,
    seqnum: u32,
    dh: Option<KeyPair>,
}

/// One transaction.
pub(super) struct Transaction {
    t_id: u16,
    hash: Hash,
    group: DhGroup,
    step: Step,
}

impl Transaction {
    fn failed(t_id: u16, why: Failure) -> Self {
        Self {
            t_id,
            hash: Hash::Sha256,
            group: DhGroup::Null,
            step: Step::Failed(why),
        }
    }
}

/// The fields of Authentication Send/Receive: SECP, SPSP0/1 in CDW10,
/// the transfer or allocation length in CDW11.
fn command_length(sqe: &Sqe) -> Option<usize> {
    let cdw10 = sqe.cdw(10);
    let (spsp0, spsp1, secp) = ((cdw10 >> 8) as u8, (cdw10 >> 16) as u8, (cdw10 >> 24) as u8);
    (secp == auth::SECP && spsp0 == auth::SPSP && spsp1 == auth::SPSP).then(|| sqe.cdw(11) as usize)
}

/// The strongest entry of `ours` (strongest first) that `offered` names.
fn choose<T: Copy>(ours: &[T], offered: &[u8], id: impl Fn(T) -> u8) -> Option<T> {
    ours.iter().copied().find(|x| offered.contains(&id(*x)))
}

impl Queue {
    /// Authentication Send: a host message, in the capsule.
    pub(super) fn auth_send(&mut self, sqe: &Sqe, data: &[u8]) -> Outcome {
        let cid = sqe.cid();
        let d = sqe.sgl();
        let len = match command_length(sqe) {
            Some(len) if d.kind == sgl::IN_CAPSULE && d.length as usize == len => len,
            _ => return Outcome::Complete(Cqe::new(cid, Status::INVALID_FIELD)),
        };
        let Some(msg) = data.get(..len) else {
            return Outcome::Complete(Cqe::new(cid, Status::SGL_LENGTH_INVALID));
        };
        let next = match HostMessage::parse(msg) {
            Ok(m) => self.host_message(m),
            Err(e) => {
                let t_id = self.auth.as_ref().map_or(0, |t| t.t_id);
                Some(Transaction::failed(t_id, Failure::from(e)))
            }
        };
        if let Some(Step::Failed(why)) = next.as_ref().map(|t| &t.step) {
            self.note_auth_failure(*why);
        }
        self.auth = next.map(Box::new);
        // The command itself succeeds; a failure is the answer to the
        // host's next Authentication Receive.
        Outcome::Complete(Cqe::new(cid, Status::SUCCESS))
    }

    /// The transaction after host message `m` (`None`: it ended).
    fn host_message(&mut self, m: HostMessage<'_>) -> Option<Transaction> {
        let current = self.auth.take().map(|t| *t);
        let t_id = current.as_ref().map_or(0, |t| t.t_id);
        let out_of_turn = |t_id| Some(Transaction::failed(t_id, Failure::IncorrectProtocolMessage));
        match (m, current) {
            // A new transaction: the first, re-authentication, or a host
            // starting over (an unfinished transaction is dropped: only a
            // whole one that succeeds changes anything).
            (
                HostMessage::Negotiate {
                    t_id,
                    concat,
                    dhchap,
                },
                _,
            ) => Some(self.negotiate(t_id, concat, dhchap)),
            (HostMessage::Reply(r), Some(t)) if r.t_id == t.t_id => match t.step {
                Step::Challenged(ref c) => Some(self.check_reply(&t, c, &r)),
                _ => out_of_turn(t.t_id),
            },
            (HostMessage::Success2 { t_id }, Some(t))
                if t_id == t.t_id && matches!(t.step, Step::AwaitingSuccess2) =>
            {
                self.auth_succeeded(t.hash, t.group);
                None
            }
            (HostMessage::Failure2 { t_id, .. }, Some(t))
                if t_id == t.t_id && matches!(t.step, Step::AwaitingSuccess2) =>
            {
                // The host refused our response; there is no Failure1 to
                // send.
                self.note_auth_failure(Failure::Failed);
                self.transaction_failed();
                None
            }
            _ => out_of_turn(t_id),
        }
    }

    fn negotiate(&mut self, t_id: u16, concat: u8, dhchap: Option<Offer>) -> Transaction {
        let fail = |why| Transaction::failed(t_id, why);
        // A queue that has not authenticated gets a few tries, not an
        // endless supply of challenges.
        if self.awaits_authentication() {
            self.auth_attempts += 1;
            if self.auth_attempts > MAX_UNAUTHENTICATED_TRANSACTIONS {
                return fail(Failure::IncorrectProtocolMessage);
            }
        }
        if concat != 0 {
            return fail(Failure::ConcatMismatch);
        }
        let Some(offer) = dhchap else {
            return fail(Failure::ProtocolUnusable);
        };
        let policy = self.target.auth_policy();
        let Some(hash) = choose(&policy.digests(), &offer.hashes, Hash::id) else {
            return fail(Failure::HashUnusable);
        };
        let Some(group) = choose(&policy.groups(), &offer.groups, DhGroup::id) else {
            return fail(Failure::DhGroupUnusable);
        };
        Transaction {
            t_id,
            hash,
            group,
            step: Step::Negotiated,
        }
    }

    fn check_reply(&self, t: &Transaction, c: &Challenge, r: &auth::Reply<'_>) -> Transaction {
        let (t_id, hash) = (t.t_id, t.hash);
        let fail = |why| Transaction::failed(t_id, why);
        let Some(b) = &self.bound else {
            return fail(Failure::Failed);
        };
        if r.response.len() != hash.digest_len() {
            return fail(Failure::IncorrectPayload);
        }
        let session_key = match &c.dh {
            None if r.dh_value.is_empty() => None,
            Some(dh) => match dh.shared_secret(r.dh_value) {
                Ok(s) => Some(s),
                Err(_) => return fail(Failure::IncorrectPayload),
            },
            None => return fail(Failure::IncorrectPayload),
        };
        let keys = b.sub.host_keys(&b.ctrl.hostnqn);
        let Some(host_key) = keys.host else {
            return fail(Failure::Failed);
        };
        let exchange = |challenge, seqnum| Exchange {
            hash,
            challenge,
            seqnum,
            t_id,
            session_key: session_key.as_deref().map(|s| &s[..]),
            hostnqn: &b.ctrl.hostnqn,
            subnqn: &b.sub.nqn,
        };
        let expected = exchange(&c.challenge, c.seqnum).host_response(&host_key.secret);
        if !chap::matches(r.response, &expected) {
            return fail(Failure::Failed);
        }
        let r2 = match r.challenge {
            None => None,
            Some((c2, s2)) => match &keys.ctrlr {
                Some(k) => Some(exchange(c2, s2).controller_response(&k.secret)),
                // The host wants the controller authenticated and there is
                // no controller key.
                None => return fail(Failure::Failed),
            },
        };
        Transaction {
            t_id,
            hash,
            group: t.group,
            step: Step::Replied(r2),
        }
    }

    /// Authentication Receive: the controller's next message.
    pub(super) fn auth_recv(&mut self, sqe: &Sqe) -> Outcome {
        let cid = sqe.cid();
        let Some(al) = command_length(sqe) else {
            return Outcome::Complete(Cqe::new(cid, Status::INVALID_FIELD));
        };
        let current = self.auth.take().map(|t| *t);
        let (msg, next) = match current {
            Some(t) => self.controller_message(t),
            None => {
                self.note_auth_failure(Failure::IncorrectProtocolMessage);
                self.failure1(0, Failure::IncorrectProtocolMessage)
            }
        };
        self.auth = next.map(Box::new);
        let len = msg.len().min(al);
        self.reply[..len].copy_from_slice(&msg[..len]);
        self.reply_data(sqe, len)
    }

    /// The message answering the host's receive in transaction `t`, and
    /// the transaction after it (`None`: ended).
    fn controller_message(&mut self, t: Transaction) -> (Vec<u8>, Option<Transaction>) {
        match t.step {
            Step::Negotiated => match self.challenge(&t) {
                Ok((msg, c)) => (
                    msg,
                    Some(Transaction {
                        step: Step::Challenged(Box::new(c)),
                        ..t
                    }),
                ),
                Err(why) => self.failure1(t.t_id, why),
            },
            Step::Replied(r2) => {
                let msg = auth::encode_success1(t.t_id, t.hash, r2.as_deref().map(|r| &r[..]));
                if r2.is_some() {
                    let next = Transaction {
                        step: Step::AwaitingSuccess2,
                        ..t
                    };
                    (msg, Some(next))
                } else {
                    self.auth_succeeded(t.hash, t.group);
                    (msg, None)
                }
            }
            Step::Failed(why) => self.failure1(t.t_id, why),
            Step::Challenged(_) | Step::AwaitingSuccess2 => {
                self.note_auth_failure(Failure::IncorrectProtocolMessage);
                self.failure1(t.t_id, Failure::IncorrectProtocolMessage)
            }
        }
    }

    /// Failure1: a queue that had not authenticated is failed (the
    /// transport closes it once this answer is out); one that had keeps
    /// its earlier authentication.
    fn failure1(&mut self, t_id: u16, why: Failure) -> (Vec<u8>, Option<Transaction>) {
        self.transaction_failed();
        (auth::encode_failure1(t_id, why), None)
    }

    /// A transaction failed: see the module's comment.
    fn transaction_failed(&mut self) {
        if self.awaits_authentication() {
            self.set_auth_state(AuthState::Failed);
        }
    }

    /// DH-HMAC-CHAP_Challenge: a fresh challenge, sequence number and DH
    /// key pair.
    fn challenge(&self, t: &Transaction) -> Result<(Vec<u8>, Challenge), Failure> {
        let mut challenge = Zeroizing::new(vec![0u8; t.hash.digest_len()]);
        getrandom::fill(&mut challenge).map_err(|_| Failure::Failed)?;
        // Any nonzero value (zero means "no sequence number").
        let seqnum = getrandom::u32().map_err(|_| Failure::Failed)?.max(1);
        let dh = match t.group {
            DhGroup::Null => None,
            _ if !self.target.allow_dh_challenge(self.path.peer.ip()) => {
                if self.target.peer_log().allow(self.path.peer.ip()) {
                    tracing::warn!(peer = %self.path.peer, "DH-HMAC-CHAP challenge refused: the peer is over its budget of DH key pairs");
                }
                return Err(Failure::Failed);
            }
            g => Some(KeyPair::generate(g).map_err(|_| Failure::Failed)?),
        };
        let dh_value = dh.as_ref().map_or(&[][..], KeyPair::public);
        let msg = auth::encode_challenge(t.t_id, t.hash, t.group, seqnum, &challenge, dh_value);
        Ok((
            msg,
            Challenge {
                challenge,
                seqnum,
                dh,
            },
        ))
    }

    fn auth_succeeded(&mut self, hash: Hash, group: DhGroup) {
        let first = self.awaits_authentication();
        if let Some(b) = &mut self.bound {
            b.auth = AuthState::Completed;
            b.ctrl.note_auth(
                b.qid,
                QueueAuth {
                    state: AuthState::Completed,
                    digest: Some(auth::hash_name(hash)),
                    dhgroup: Some(group.name()),
                },
            );
            // Keep-alive starts now: the host could send none before.
            if b.qid == 0 {
                b.ctrl.keep_alive();
            }
            b.stats.auth_successes.inc();
            tracing::info!(subnqn = %b.sub.nqn, hostnqn = %b.ctrl.hostnqn, cntlid = b.ctrl.cntlid, qid = b.qid, digest = auth::hash_name(hash), dhgroup = group.name(), reauthentication = !first, "host authenticated (DH-HMAC-CHAP)");
        }
    }

    /// Moves the queue to `state` (not `Completed`: see
    /// `auth_succeeded`), for the queue and the controller's record; the
    /// hash and group of the last success stay.
    pub(super) fn set_auth_state(&mut self, state: AuthState) {
        if let Some(b) = &mut self.bound {
            b.auth = state;
            let last = b.ctrl.auth_of(b.qid);
            b.ctrl.note_auth(
                b.qid,
                QueueAuth {
                    state,
                    digest: last.and_then(|a| a.digest),
                    dhgroup: last.and_then(|a| a.dhgroup),
                },
            );
        }
    }

    fn note_auth_failure(&self, why: Failure) {
        if let Some(b) = &self.bound {
            b.stats.auth_failures.inc();
            if self.target.peer_log().allow(self.path.peer.ip()) {
                tracing::warn!(peer = %self.path.peer, subnqn = %b.sub.nqn, hostnqn = %b.ctrl.hostnqn, qid = b.qid, reason = ?why, "DH-HMAC-CHAP authentication failed");
            }
        }
    }
}

/// Authentication Required: the command came before the queue
/// authenticated.
pub(super) fn required(cid: u16) -> Outcome {
    Outcome::Complete(Cqe::new(cid, status::AUTH_REQUIRED))
}
