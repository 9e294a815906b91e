//! The transport-neutral request and controller layer (SPDK's
//! `lib/nvmf/ctrlr.c`): what a queue pair is bound to once Connect has
//! succeeded, and what every command means. A transport hands each
//! command capsule to `Queue::exec` and acts on the `Outcome`:
//!
//! - `Outcome::Complete` / `Outcome::Reply`: answered now (with data
//!   for the host in `Queue::reply` for the latter);
//! - `Outcome::NeedsData`: the command needs a data buffer first, filled
//!   from the host when it is a write (in the capsule or solicited); once
//!   it is, the transport calls `Queue::run`;
//! - `Outcome::Submit`: a bdev operation: the transport polls
//!   `Op::run` with its other in-flight operations and hands the
//!   `Done` back to `Queue::account` while it sends the answer;
//! - the rest concern one queue's life: Connect parked or accepted,
//!   Disconnect, an AER left outstanding, a controller shutdown's flush.
//!
//! Completions that are no command's direct answer (AERs answered by an
//! event or aborted by a reset) queue in the `Queue`; the transport
//! sends them, in order, with `Queue::take_completion` before the
//! outcome's own. Nothing here allocates, locks or dispatches dynamically
//! on the I/O path: an I/O command is a namespace lookup in the queue's
//! snapshot, range checks and an `Op` returned by value.
//!
//! Files: `fabrics` (Connect, Property Get/Set, Disconnect),
//! `admin` (Identify, Get Log Page, features, keep-alive, AERs), `io`
//! (Read, Write, Flush, Write Zeroes, Dataset Management), `exec` (bdev
//! execution), [`controller`] (what the queue pairs of one association
//! share), [`identify`] and [`log_page`] (data structures), [`status`].

mod admin;
mod auth;
pub mod controller;
mod events;
mod exec;
mod fabrics;
pub mod identify;
mod io;
pub mod log_page;
pub mod status;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bdev::IoKind;
use nvmf::cqe::{Cqe, Status};
use nvmf::sqe::{fctype, opcode, Sqe};
use nvmf::tls::PskIdentity;
use tokio::sync::watch;
use tokio::time::Instant;

use self::controller::{AuthState, Controller, QpairPath};
use crate::ana::ListenerAna;
use crate::state::TargetState;
use crate::stats::SubsystemStats;
use crate::subsystem::{Namespace, NamespaceMap, Subsystem};

pub(crate) use self::exec::{Done, Op};
pub(crate) use self::io::{Pending, Transfer};

/// What the ctrlr layer made of a command.
pub(crate) enum Outcome {
    /// Answered: send this completion.
    Complete(Cqe),
    /// Answered with data for the host: send [`Queue::reply`] (when not
    /// empty), then this completion.
    Reply(Cqe),
    /// Needs a data buffer first (filled from the host for a write); then
    /// [`Queue::run`].
    NeedsData(Transfer),
    /// Hand the operation to the bdev: poll [`Op::run`].
    Submit(Op),
    /// Ran at once (a read the device answers from memory): as if
    /// [`Op::run`] had returned it.
    Ran(Done),
    /// Run the operation for the controller, not for a command (its
    /// command's completion is already queued).
    Background(Op),
    /// No answer now: an event answers it later (an AER).
    Deferred,
    /// Connect waits until the signal turns true (the host's previous
    /// controller draining); then exec it again.
    Parked(watch::Receiver<bool>),
    /// Connect accepted: the queue is bound ([`Queue::entries`],
    /// [`Queue::hostnqn`]); send the completion.
    Connected(Cqe),
    /// Disconnect: send the completion, then close the queue pair.
    Disconnect(Cqe),
}

/// What Connect bound the queue to.
struct Binding {
    qid: u16,
    sqsize: u16,
    ctrl: Arc<Controller>,
    sub: Arc<Subsystem>,
    stats: SubsystemStats,
    /// Whether the queue may carry commands: `Completed` at Connect when
    /// the host has no DH-HMAC-CHAP key, else once it authenticated.
    auth: AuthState,
}

/// One queue pair as the controller sees it: the binding Connect made,
/// the submission queue head, outstanding AERs, the namespace snapshot.
/// Owned by the transport's queue pair task.
pub(crate) struct Queue {
    target: Arc<TargetState>,
    path: QpairPath,
    bound: Option<Binding>,
    sqhd: u16,
    /// Outstanding Asynchronous Event Requests (admin queue).
    aers: Vec<u16>,
    /// Completions that are no command's direct answer, oldest first.
    completions: VecDeque<Cqe>,
    /// Namespace snapshot and the generation it was taken at.
    ns_snapshot: Arc<NamespaceMap>,
    ns_generation: u64,
    /// The controller's listener's ANA states and the generation they were
    /// taken at (subsystems that report ANA states only).
    ana_states: Arc<ListenerAna>,
    ana_generation: u64,
    /// Data an admin command returns: its first `reply_len` bytes.
    reply: Vec<u8>,
    reply_len: usize,
    /// The DH-HMAC-CHAP transaction under way.
    auth: Option<Box<auth::Transaction>>,
    /// Transactions started before the queue authenticated.
    auth_attempts: u8,
    /// The PSK identity the queue's TLS handshake proved (a secure
    /// channel); its Connect must name the same host and subsystem.
    secure: Option<Arc<PskIdentity>>,
}

impl Queue {
    /// A queue not connected yet, which arrived through `path`.
    pub(crate) fn new(target: Arc<TargetState>, path: QpairPath) -> Self {
        Self {
            target,
            path,
            bound: None,
            sqhd: 0,
            aers: Vec::new(),
            completions: VecDeque::new(),
            ns_snapshot: Arc::new(NamespaceMap::new()),
            ns_generation: u64::MAX,
            ana_states: Arc::default(),
            ana_generation: u64::MAX,
            reply: vec![0; identify::IDENTIFY_LEN],
            reply_len: 0,
            auth: None,
            auth_attempts: 0,
            secure: None,
        }
    }

    /// The queue arrived through a secure channel that proved `identity`
    /// (None: plain TCP).
    pub(crate) fn set_secure_channel(&mut self, identity: Option<Arc<PskIdentity>>) {
        self.secure = identity;
    }

    /// The one entry point for commands: `sqe` with its in-capsule `data`.
    /// Before Connect only Connect is accepted.
    pub(crate) fn exec(&mut self, sqe: &Sqe, data: &[u8]) -> Outcome {
        let Some(b) = &self.bound else {
            if sqe.opcode() == opcode::FABRICS && sqe.fctype() == fctype::CONNECT {
                return self.connect(sqe, data);
            }
            return Outcome::Complete(Cqe::new(sqe.cid(), Status::SEQUENCE_ERROR));
        };
        if sqe.opcode() == opcode::FABRICS {
            self.fabrics(sqe, data)
        } else if b.auth != AuthState::Completed {
            auth::required(sqe.cid())
        } else if b.qid == 0 {
            self.admin(sqe)
        } else {
            self.io(sqe, data)
        }
    }

    /// A command arrived on the connected queue: the submission queue head
    /// moves (whether or not the command is valid).
    pub(crate) fn command_arrived(&mut self) {
        let size = self.bound.as_ref().map_or(1, |b| b.sqsize + 1);
        self.sqhd = (self.sqhd + 1) % size;
    }

    /// `cqe` as it goes to the host: counted, with the queue's id and
    /// head.
    pub(crate) fn completing(&self, cqe: Cqe) -> Cqe {
        if let Some(b) = &self.bound {
            b.stats.commands.inc();
            if !cqe.status.is_success() {
                b.stats.errors.inc();
            }
        }
        Cqe {
            sqhd: self.sqhd,
            sqid: self.qid(),
            ..cqe
        }
    }

    /// A command answered without a completion (read data sent with the
    /// transport's SUCCESS flag): counted all the same.
    pub(crate) fn completed_in_data(&self) {
        if let Some(b) = &self.bound {
            b.stats.commands.inc();
        }
    }

    /// Counts an I/O command of `kind` that moved `bytes` to or from the
    /// host and succeeded; it arrived at `started` and ended at `ended`
    /// (now if not known).
    pub(crate) fn account(
        &self,
        kind: IoKind,
        bytes: usize,
        started: Instant,
        ended: Option<std::time::Instant>,
    ) {
        let Some(b) = &self.bound else { return };
        let s = &b.stats;
        let ns = || {
            let end = ended.map_or_else(Instant::now, Instant::from_std);
            end.saturating_duration_since(started).as_nanos() as u64
        };
        match kind {
            IoKind::Read => {
                s.read_ops.inc();
                s.read_latency.observe_ns(ns());
                s.read_bytes.add(bytes as u64);
            }
            IoKind::Write => {
                s.write_ops.inc();
                s.write_latency.observe_ns(ns());
                s.written_bytes.add(bytes as u64);
            }
            IoKind::Unmap => s.unmap_ops.inc(),
            IoKind::Flush => s.flush_ops.inc(),
            IoKind::WriteZeroes | IoKind::MarkClean => {}
        }
    }

    /// The flush of a controller shutdown finished.
    pub(crate) fn shutdown_flushed(&self) {
        if let Some(b) = &self.bound {
            b.ctrl.shutdown_complete();
        }
    }

    /// Counts a connection ended by a protocol error (against the
    /// discovery subsystem before Connect).
    pub(crate) fn count_protocol_error(&self) {
        match &self.bound {
            Some(b) => b.stats.protocol_errors.inc(),
            None => self.target.discovery().stats.protocol_errors.inc(),
        }
    }

    /// The next completion that is no command's direct answer.
    pub(crate) fn take_completion(&mut self) -> Option<Cqe> {
        self.completions.pop_front()
    }

    /// Ends every outstanding AER (reset, shutdown, drain).
    pub(crate) fn abort_aers(&mut self) {
        for cid in self.aers.drain(..) {
            self.completions
                .push_back(Cqe::new(cid, status::ABORTED_SQ_DELETION));
        }
    }

    /// Answers outstanding AERs with pending events.
    pub(crate) fn deliver_events(&mut self) {
        let Some(b) = &self.bound else { return };
        while !self.aers.is_empty() {
            let Some(ev) = b.ctrl.take_event() else { break };
            let cid = self.aers.remove(0);
            self.completions.push_back(Cqe {
                dw0: ev,
                ..Cqe::new(cid, Status::SUCCESS)
            });
        }
    }

    /// The controller whose events the queue waits for (an admin queue
    /// with AERs outstanding).
    pub(crate) fn awaits_events(&self) -> Option<&Controller> {
        self.bound
            .as_ref()
            .filter(|b| b.qid == 0 && !self.aers.is_empty())
            .map(|b| &*b.ctrl)
    }

    /// The controller the queue is bound to.
    pub(crate) fn controller(&self) -> Option<&Arc<Controller>> {
        self.bound.as_ref().map(|b| &b.ctrl)
    }

    /// The queue id (0 before Connect).
    pub(crate) fn qid(&self) -> u16 {
        self.bound.as_ref().map_or(0, |b| b.qid)
    }

    /// Whether the queue is connected and still owes its authentication:
    /// the transport bounds that time as it bounds ICReq and Connect.
    pub(crate) fn awaits_authentication(&self) -> bool {
        self.bound
            .as_ref()
            .is_some_and(|b| b.auth != AuthState::Completed)
    }

    /// Whether an authentication failed: the transport closes the queue
    /// once the answer saying so is out.
    pub(crate) fn auth_failed(&self) -> bool {
        self.bound
            .as_ref()
            .is_some_and(|b| b.auth == AuthState::Failed)
    }

    /// Whether this is a connected admin queue.
    pub(crate) fn is_admin(&self) -> bool {
        self.bound.as_ref().is_some_and(|b| b.qid == 0)
    }

    /// Queue entries (SQSIZE + 1; 0 before Connect).
    pub(crate) fn entries(&self) -> usize {
        self.bound.as_ref().map_or(0, |b| usize::from(b.sqsize) + 1)
    }

    /// The connected host's NQN.
    pub(crate) fn hostnqn(&self) -> &str {
        self.bound.as_ref().map_or("", |b| &b.ctrl.hostnqn)
    }

    /// The data of the last [`Outcome::Reply`].
    pub(crate) fn reply(&self) -> &[u8] {
        &self.reply[..self.reply_len]
    }

    /// The namespace `nsid`, from the snapshot (refreshed when the
    /// subsystem's namespaces changed).
    fn namespace(&mut self, nsid: u32) -> Option<Arc<Namespace>> {
        let b = self.bound.as_ref()?;
        let generation = b.sub.ns_generation.load(Ordering::Acquire);
        if generation != self.ns_generation {
            self.ns_snapshot = b.sub.namespaces();
            self.ns_generation = generation;
        }
        self.ns_snapshot.get(&nsid).cloned()
    }

    /// The status refusing I/O to `ns` when the controller's listener
    /// reports its ANA group inaccessible (or lost, or changing); one
    /// atomic load per command while nothing changes.
    fn ana_refusal(&mut self, ns: &Namespace) -> Option<Status> {
        let b = self.bound.as_ref()?;
        if !b.sub.ana_reporting {
            return None;
        }
        let generation = b.sub.ana_generation.load(Ordering::Acquire);
        if generation != self.ana_generation {
            self.ana_states = b.sub.ana_states(b.ctrl.admin_path.listen);
            self.ana_generation = generation;
        }
        self.ana_states.state(ns.anagrpid).io_refusal()
    }

    /// The current namespace snapshot.
    fn namespaces(&mut self) -> Arc<NamespaceMap> {
        let _ = self.namespace(0);
        self.ns_snapshot.clone()
    }

    /// Ends the queue's binding once its commands have drained or been
    /// abandoned: an admin queue tears its controller down. Returns the
    /// controller, to be released with `TargetState::queue_closed` (a
    /// reconnecting host's parked Connect proceeds when its last queue
    /// pair is released) once nothing this queue started runs any more.
    pub(crate) fn unbind(&mut self) -> Option<Arc<Controller>> {
        let b = self.bound.take()?;
        b.stats.connections.add(-1);
        if b.qid == 0 {
            b.ctrl.tear_down("admin queue closed");
        } else {
            b.ctrl.detach_io_queue(b.qid);
        }
        Some(b.ctrl)
    }
}

/// A queue that ends in any way, a panic included, releases its
/// controller: a reconnecting host is never left waiting for it.
impl Drop for Queue {
    fn drop(&mut self) {
        if let Some(ctrl) = self.unbind() {
            self.target.queue_closed(&ctrl);
        }
    }
}
