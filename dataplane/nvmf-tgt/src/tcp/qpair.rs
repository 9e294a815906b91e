//! One NVMe/TCP queue pair's state: where the connection is in its life,
//! the request slots (indexed by the transfer tag sent in R2Ts, so an
//! H2CData PDU finds its request without a search), the data buffers and
//! their budget, and what the transport does with each `Outcome` of the
//! ctrlr layer.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bdev::{DmaBuf, IoKind};
use nvmf::cqe::{Cqe, Status};
use nvmf::digest::DIGEST_LEN;
use nvmf::pdu;
use nvmf::sqe::Sqe;
use tokio::sync::watch;
use tokio::time::Instant;

use super::admission::Admission;
use super::bufpool::{BufPool, Grant, QueueBuffers};
use super::outbox::INLINE_DATA_MAX;
use super::send::Tx;
use crate::ctrlr::controller::QpairPath;
use crate::ctrlr::{status, Done, Op, Outcome, Pending, Queue, Transfer};
use crate::state::TargetState;
use crate::subsystem::Namespace;

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// Accepted: only an ICReq (or a TermReq) may come.
    AwaitingIcReq,
    /// ICResp sent: the only command allowed is Fabrics Connect.
    AwaitingConnect,
    /// Connected as an admin or I/O queue: serving commands.
    Serving,
    /// The target is shutting down: in-flight commands finish, new ones are
    /// aborted, the connection closes when no request is left.
    Draining,
    /// A fatal protocol error: the TermReq is queued; close once it is sent.
    Terminating,
    /// The host asked to end (Disconnect or its own TermReq): close once
    /// the output is sent.
    Closing,
    /// The host closed its sending side: nothing more is read; commands
    /// already handed to the bdev finish and are answered (the host may
    /// still be reading), then the connection closes. Requests still
    /// waiting for H2CData never complete and are dropped.
    HostClosed,
}

/// A Connect held back until an earlier controller of the same host has
/// drained (see `TargetState::releasing`).
pub(super) struct Parked {
    pub(super) sqe: Sqe,
    pub(super) data: Vec<u8>,
    pub(super) released: watch::Receiver<bool>,
    /// When it was parked: the wait's bound counts from here, however
    /// many turns the queue pair's loop takes meanwhile.
    pub(super) since: Instant,
}

/// Where a request slot is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqState {
    /// Unused.
    Free,
    /// Waiting for data buffer units (the target's budget or the host's
    /// share is spent): no buffer is allocated and no R2T sent yet. After
    /// the H2CData timeout it is completed with Command Interrupted.
    AwaitingBuffer,
    /// R2T sent: H2CData PDUs are filling the request's buffer.
    AwaitingH2cData,
    /// Handed to the bdev; the result comes back through the connection's
    /// in-flight set.
    Executing,
}

const REQ_STATES: usize = 4;

impl ReqState {
    fn index(self) -> usize {
        self as usize
    }
}

/// One request slot.
pub(super) struct Request {
    pub(super) state: ReqState,
    pub(super) cid: u16,
    ns: Option<Arc<Namespace>>,
    /// Bytes expected from the host.
    pub(super) len: u32,
    /// Bytes received so far.
    pub(super) received: u32,
    pub(super) buf: Option<DmaBuf>,
    /// The budget units `buf` holds.
    grant: Option<Grant>,
    /// Set when the data arrived damaged: complete with this instead.
    pub(super) failed: Option<Status>,
    pending: Pending,
    /// When the command capsule arrived (for the latency histograms).
    started: Instant,
    /// When the request entered `AwaitingBuffer` or `AwaitingH2cData` (the
    /// R2T is sent then): its deadline counts from here.
    since: Instant,
    /// Which use of the slot this is (a slot is reused; its waits are not).
    pub(super) seq: u64,
}

impl Request {
    fn free() -> Self {
        Self {
            state: ReqState::Free,
            cid: 0,
            ns: None,
            len: 0,
            received: 0,
            buf: None,
            grant: None,
            failed: None,
            pending: Pending::Write {
                offset: 0,
                fua: false,
            },
            started: Instant::now(),
            since: Instant::now(),
            seq: 0,
        }
    }
}

/// Per-connection state, everything but the socket and the in-flight set.
pub(super) struct Connection {
    pub(super) target: Arc<TargetState>,
    pub(super) peer: SocketAddr,
    pub(super) state: ConnState,
    /// The controller side of the queue.
    pub(super) ctrlr: Queue,
    /// The sending side.
    pub(super) tx: Tx,
    pub(super) slots: Vec<Request>,
    free: Vec<u16>,
    state_counts: [u32; REQ_STATES],
    pub(super) pool: BufPool,
    /// This queue's access to the target's buffer budget.
    pub(super) bufs: QueueBuffers,
    /// Requests in `AwaitingBuffer`, oldest first.
    pub(super) waiting: VecDeque<u16>,
    /// Requests sent an R2T, oldest first, as (slot, seq); entries of
    /// requests no longer waiting are skipped when the deadline is computed.
    h2c_order: VecDeque<(u16, u64)>,
    /// The next request's `seq`.
    next_seq: u64,
    /// A Connect waiting for the host's previous controller to drain.
    pub(super) parked: Option<Parked>,
    /// The listener slots this connection holds.
    pub(super) admission: Admission,
    /// Operations to hand to the in-flight set, with their slots.
    pub(super) submit: Vec<(u16, Op)>,
    /// Operations that change data (writes, zeroing, deallocation) handed
    /// to a bdev and not finished: while any is, reads do not complete
    /// inline, so that none overtakes a write sent before it on this queue
    /// (a malloc write runs only when the in-flight set polls it).
    changing: u32,
}

/// The slot tag of an operation run for the controller, not a request.
const NO_SLOT: u16 = u16::MAX;

impl Connection {
    pub(super) fn new(target: Arc<TargetState>, peer: SocketAddr, listen: SocketAddr) -> Self {
        let opts = target.opts();
        let pool = BufPool::new(
            opts.buf_cache_size as usize,
            target.buffers().cached.clone(),
        );
        // Replaced by the host's share at Connect; nothing is granted before.
        let bufs = QueueBuffers::new(target.buffers().clone(), "", opts.max_io_size);
        let max_plen = opts.max_h2c_data.max(opts.in_capsule_data_size) as usize
            + pdu::CAPSULE_CMD_HLEN
            + 2 * DIGEST_LEN
            + 128;
        let ctrlr = Queue::new(target.clone(), QpairPath { listen, peer });
        Self {
            target,
            peer,
            state: ConnState::AwaitingIcReq,
            ctrlr,
            tx: Tx::new(max_plen as u32),
            slots: Vec::new(),
            free: Vec::new(),
            state_counts: [0; REQ_STATES],
            pool,
            bufs,
            waiting: VecDeque::new(),
            h2c_order: VecDeque::new(),
            next_seq: 0,
            parked: None,
            admission: Admission::unlimited(),
            submit: Vec::new(),
            changing: 0,
        }
    }

    /// Moves `slot` to `new`, keeping the per-state counts.
    pub(super) fn set_state(&mut self, slot: u16, new: ReqState) {
        let r = &mut self.slots[slot as usize];
        if matches!(new, ReqState::AwaitingH2cData | ReqState::AwaitingBuffer) {
            r.since = Instant::now();
        }
        if new == ReqState::AwaitingH2cData {
            self.h2c_order.push_back((slot, r.seq));
        }
        self.state_counts[r.state.index()] -= 1;
        self.state_counts[new.index()] += 1;
        r.state = new;
        if new == ReqState::Free {
            r.ns = None;
            r.failed = None;
            r.grant = None;
            if let Some(b) = r.buf.take() {
                self.pool.give(b);
            }
            self.free.push(slot);
        }
    }

    /// Requests not free.
    pub(super) fn busy(&self) -> u32 {
        self.state_counts[ReqState::AwaitingBuffer.index()]
            + self.state_counts[ReqState::AwaitingH2cData.index()]
            + self.state_counts[ReqState::Executing.index()]
    }

    /// A free slot for command `cid`, or None when the host is over its
    /// queue depth.
    fn alloc_slot(&mut self, cid: u16) -> Option<u16> {
        let slot = self.free.pop()?;
        let r = &mut self.slots[slot as usize];
        debug_assert_eq!(r.state, ReqState::Free);
        r.cid = cid;
        r.received = 0;
        r.len = 0;
        r.started = Instant::now();
        r.seq = self.next_seq;
        self.next_seq += 1;
        // Counted as Free until the caller sets the real state.
        Some(slot)
    }

    /// A slot, or the over-depth refusal: a host that ignores the queue
    /// size gets a retryable error for the extra commands, nothing worse.
    fn slot_or_refuse(&mut self, cid: u16) -> Option<u16> {
        let slot = self.alloc_slot(cid);
        if slot.is_none() {
            self.complete(cid, status::COMMAND_INTERRUPTED);
        }
        slot
    }

    /// `entries` free request slots (at Connect).
    fn make_slots(&mut self, entries: usize) {
        self.slots = (0..entries).map(|_| Request::free()).collect();
        self.free = (0..entries as u16).rev().collect();
        self.state_counts = [0; REQ_STATES];
        self.state_counts[ReqState::Free.index()] = entries as u32;
    }

    /// Whether a Connect is parked.
    pub(super) fn is_parked(&self) -> bool {
        self.parked.is_some()
    }

    /// Queues a response capsule.
    pub(super) fn respond(&mut self, cqe: Cqe) {
        let cqe = self.ctrlr.completing(cqe);
        self.tx.capsule_resp(&cqe);
    }

    /// Completes `cid` with `status` and no result.
    pub(super) fn complete(&mut self, cid: u16, status: Status) {
        self.respond(Cqe::new(cid, status));
    }

    /// Sends the completions the ctrlr layer queued besides a command's own
    /// answer (AERs answered or aborted).
    pub(super) fn send_completions(&mut self) {
        while let Some(cqe) = self.ctrlr.take_completion() {
            self.respond(cqe);
        }
    }

    /// A command capsule: checked against the connection's state, then
    /// handed to the ctrlr layer.
    pub(super) fn command(&mut self, sqe: Sqe, data: &[u8], data_ok: bool) {
        let cid = sqe.cid();
        match self.state {
            ConnState::AwaitingConnect | ConnState::Serving => {
                let connecting = self.state == ConnState::AwaitingConnect;
                if !connecting {
                    self.ctrlr.command_arrived();
                }
                if !data_ok {
                    return self.complete(cid, status::TRANSIENT_TRANSPORT_ERROR);
                }
                // A Connect needs one of the listener's host slots.
                if connecting && !self.admission.reserve_host() {
                    return self.complete(cid, status::CONNECT_CONTROLLER_BUSY);
                }
                let outcome = self.ctrlr.exec(&sqe, data);
                self.send_completions();
                self.outcome(&sqe, data, outcome);
                if connecting {
                    self.connect_settled();
                }
            }
            ConnState::Draining => self.complete(cid, status::ABORTED_SQ_DELETION),
            ConnState::AwaitingIcReq
            | ConnState::Terminating
            | ConnState::Closing
            | ConnState::HostClosed => {}
        }
    }

    /// Acts on what the ctrlr layer made of command `sqe`.
    fn outcome(&mut self, sqe: &Sqe, data: &[u8], outcome: Outcome) {
        let cid = sqe.cid();
        match outcome {
            Outcome::Complete(cqe) => self.respond(cqe),
            Outcome::Reply(cqe) => self.send_reply(cqe),
            Outcome::NeedsData(t) => self.transfer(cid, data, t),
            Outcome::Submit(op) => {
                let Some(slot) = self.slot_or_refuse(cid) else {
                    return;
                };
                self.set_state(slot, ReqState::Executing);
                self.submit_op(slot, op);
            }
            // Only `Queue::run` returns it.
            Outcome::Ran(_) => self.complete(cid, Status::INTERNAL_ERROR),
            Outcome::Background(op) => self.submit_op(NO_SLOT, op),
            Outcome::Deferred => {}
            Outcome::Parked(released) => {
                self.parked = Some(Parked {
                    sqe: Sqe(sqe.0),
                    data: data.to_vec(),
                    released,
                    since: Instant::now(),
                });
            }
            Outcome::Connected(cqe) => {
                self.make_slots(self.ctrlr.entries());
                // Every queue pair of this host draws on one share of the
                // budget.
                self.bufs = QueueBuffers::new(
                    self.target.buffers().clone(),
                    self.ctrlr.hostnqn(),
                    self.target.opts().max_io_size,
                );
                self.state = ConnState::Serving;
                self.respond(cqe);
            }
            Outcome::Disconnect(cqe) => {
                self.respond(cqe);
                self.state = ConnState::Closing;
            }
        }
    }

    /// Sends the ctrlr layer's reply data and `cqe`: C2HData (and the
    /// response unless the SUCCESS optimisation is on); with no data (a
    /// host buffer of 0 bytes: a C2HData PDU must carry data), the
    /// response alone.
    fn send_reply(&mut self, cqe: Cqe) {
        let data = self.ctrlr.reply();
        if data.is_empty() {
            return self.respond(cqe);
        }
        let success = self.target.opts().c2h_success && cqe.status.is_success();
        self.tx.c2h_data(cqe.cid, data, success);
        if success {
            self.ctrlr.completed_in_data();
        } else {
            self.respond(cqe);
        }
    }

    /// A command that needs a buffer: its data is in the capsule (copied
    /// out, run now), or to be solicited, or it is a read.
    fn transfer(&mut self, cid: u16, data: &[u8], t: Transfer) {
        let Some(slot) = self.slot_or_refuse(cid) else {
            return;
        };
        let r = &mut self.slots[slot as usize];
        r.ns = Some(t.ns);
        r.len = t.len;
        r.pending = t.pending;
        match t.in_capsule {
            // In-capsule data is already here: bounded per queue by the
            // queue depth and the in-capsule size, it takes no units.
            Some(start) => {
                let len = t.len as usize;
                let mut buf = self.pool.take(len);
                buf.copy_from_slice(&data[start..start + len]);
                let r = &mut self.slots[slot as usize];
                r.buf = Some(buf);
                r.received = t.len;
                self.data_complete(slot);
            }
            None => self.with_buffer(slot),
        }
    }

    /// All of `slot`'s data is here: run it.
    pub(super) fn data_complete(&mut self, slot: u16) {
        let r = &mut self.slots[slot as usize];
        let cid = r.cid;
        if let Some(st) = r.failed {
            self.complete(cid, st);
            return self.set_state(slot, ReqState::Free);
        }
        let ns = match (r.ns.clone(), r.pending) {
            (Some(ns), pending) if r.buf.is_some() && pending.moves_data_in() => ns,
            _ => {
                self.complete(cid, Status::INTERNAL_ERROR);
                return self.set_state(slot, ReqState::Free);
            }
        };
        let pending = r.pending;
        let outcome = self.ctrlr.run(cid, ns, pending, &mut r.buf, false);
        self.started(slot, outcome);
    }

    /// Acts on what [`Queue::run`] made of `slot`.
    fn started(&mut self, slot: u16, outcome: Outcome) {
        match outcome {
            Outcome::Submit(op) => {
                self.set_state(slot, ReqState::Executing);
                self.submit_op(slot, op);
            }
            Outcome::Ran(done) => {
                self.set_state(slot, ReqState::Executing);
                self.finish(slot, done);
            }
            Outcome::Complete(cqe) => {
                self.respond(cqe);
                self.set_state(slot, ReqState::Free);
            }
            _ => {
                let cid = self.slots[slot as usize].cid;
                self.complete(cid, Status::INTERNAL_ERROR);
                self.set_state(slot, ReqState::Free);
            }
        }
    }

    /// Starts `slot` (a read, or a write whose data comes by R2T) once it
    /// has budget units for its buffer: now if they are free and no older
    /// request of this queue waits, else in `AwaitingBuffer`.
    fn with_buffer(&mut self, slot: u16) {
        let len = self.slots[slot as usize].len;
        let grant = if self.waiting.is_empty() {
            self.bufs.try_grant(len)
        } else {
            None
        };
        match grant {
            Some(g) => self.start_with(slot, g),
            None => {
                self.set_state(slot, ReqState::AwaitingBuffer);
                self.waiting.push_back(slot);
            }
        }
    }

    /// Allocates `slot`'s buffer under `grant` and starts it: a read goes
    /// to the bdev, a write asks for its data.
    pub(super) fn start_with(&mut self, slot: u16, grant: Grant) {
        let len = self.slots[slot as usize].len;
        let buf = self.pool.take(len as usize);
        let r = &mut self.slots[slot as usize];
        r.grant = Some(grant);
        r.buf = Some(buf);
        match (r.pending, r.ns.clone()) {
            (pending @ Pending::Read { .. }, Some(ns)) => {
                let cid = r.cid;
                // Not inline while a write of this queue is still to run:
                // the read would overtake it.
                let inline_ok = self.changing == 0;
                let outcome = self.ctrlr.run(cid, ns, pending, &mut r.buf, inline_ok);
                self.started(slot, outcome);
            }
            _ => {
                let (cid, len) = (r.cid, r.len);
                self.set_state(slot, ReqState::AwaitingH2cData);
                self.tx.r2t(cid, slot, len);
            }
        }
    }

    /// The oldest waiting request's units are granted: it starts, and
    /// those after it while units are free.
    pub(super) fn buffer_granted(&mut self, g: Grant) {
        if let Some(slot) = self.waiting.pop_front() {
            self.start_with(slot, g);
        }
        self.start_waiting();
    }

    /// Starts waiting requests, oldest first, while units are free.
    pub(super) fn start_waiting(&mut self) {
        while let Some(&slot) = self.waiting.front() {
            let Some(g) = self.bufs.try_grant(self.slots[slot as usize].len) else {
                break;
            };
            self.waiting.pop_front();
            self.start_with(slot, g);
        }
    }

    /// Hands `op` for `slot` to the in-flight set on the loop's next turn.
    fn submit_op(&mut self, slot: u16, op: Op) {
        if op.changes_data() {
            self.changing += 1;
        }
        self.submit.push((slot, op));
    }

    /// Handles a finished operation of `slot`.
    pub(super) fn finish(&mut self, slot: u16, done: Done) {
        let Done::Io {
            status,
            buf,
            kind,
            ended,
        } = done
        else {
            return self.ctrlr.shutdown_flushed();
        };
        let read = kind == IoKind::Read;
        if matches!(
            kind,
            IoKind::Write | IoKind::WriteZeroes | IoKind::Unmap | IoKind::MarkClean
        ) {
            debug_assert!(self.changing > 0, "a data change finished twice");
            self.changing = self.changing.saturating_sub(1);
        }
        let cid = self.slots[slot as usize].cid;
        if status.is_success() {
            let bytes = buf.as_ref().map_or(0, |b| b.len());
            self.ctrlr
                .account(kind, bytes, self.slots[slot as usize].started, ended);
        }
        match buf {
            Some(buf) if read && status.is_success() => {
                let len = buf.len();
                let success = self.target.opts().c2h_success;
                self.tx.c2h_header(cid, len as u32, success);
                let crc = self.tx.neg.data_digest.then(|| nvmf::digest::crc32c(&buf));
                if len <= INLINE_DATA_MAX {
                    self.tx.out.put(&buf);
                    self.pool.give(buf);
                } else {
                    // The units stay held until the data is sent.
                    let grant = self.slots[slot as usize].grant.take();
                    self.tx.out.put_buffer(buf, grant);
                }
                if let Some(crc) = crc {
                    self.tx.out.put(&crc.to_le_bytes());
                }
                if success {
                    self.ctrlr.completed_in_data();
                } else {
                    self.complete(cid, status);
                }
            }
            other => {
                if let Some(buf) = other {
                    self.pool.give(buf);
                }
                self.complete(cid, status);
            }
        }
        self.set_state(slot, ReqState::Free);
    }

    /// Runs a Connect that was parked, once `released` says whether the
    /// host's previous controller has drained.
    pub(super) fn run_parked(&mut self, released: bool) {
        let Some(p) = self.parked.take() else { return };
        if released {
            let outcome = self.ctrlr.exec(&p.sqe, &p.data);
            self.send_completions();
            self.outcome(&p.sqe, &p.data, outcome);
        } else {
            tracing::warn!(peer = %self.peer, "the host's previous controller still has commands running: Connect refused with Controller Busy");
            self.respond(Cqe::new(p.sqe.cid(), status::CONNECT_CONTROLLER_BUSY));
        }
        self.connect_settled();
    }

    /// After a Connect ran: a host keeps its host slot and gives back its
    /// unidentified ones; a refused Connect gives back the host slot; a
    /// parked one keeps it while it waits.
    fn connect_settled(&mut self) {
        match self.state {
            // Until it authenticates, a host keeps its place at the gate
            // and no host slot (see `serve`).
            ConnState::Serving if self.ctrlr.awaits_authentication() => {
                self.admission.release_host()
            }
            ConnState::Serving => self.admission.connected(),
            _ if self.is_parked() => {}
            _ => self.admission.release_host(),
        }
    }

    /// Target shutdown: a serving queue drains, any other closes.
    pub(super) fn begin_drain(&mut self) {
        if self.state == ConnState::Serving {
            self.state = ConnState::Draining;
            self.ctrlr.abort_aers();
            self.send_completions();
        } else if self.state != ConnState::Draining {
            self.state = ConnState::Closing;
        }
    }

    /// When the oldest request sent an R2T must have all its data (each
    /// request has its own deadline: data for one does not extend
    /// another's). Forgets requests no longer waiting.
    pub(super) fn h2c_deadline(&mut self, timeout: Duration) -> Option<Instant> {
        while let Some(&(slot, seq)) = self.h2c_order.front() {
            let r = &self.slots[slot as usize];
            if r.state == ReqState::AwaitingH2cData && r.seq == seq {
                return r.since.checked_add(timeout);
            }
            self.h2c_order.pop_front();
        }
        None
    }

    /// When the oldest request waiting for buffer units gives up.
    pub(super) fn buffer_deadline(&self, timeout: Duration) -> Option<Instant> {
        let &slot = self.waiting.front()?;
        self.slots[slot as usize].since.checked_add(timeout)
    }

    /// The oldest solicited write's data deadline (`deadline`) may have
    /// passed: if so, the queue pair closes.
    pub(super) fn h2c_timed_out(&mut self, deadline: Option<Instant>, timeout: Duration) {
        if deadline.is_none_or(|d| d > Instant::now()) {
            return;
        }
        // Requests that waited as long for buffer units are answered first
        // (Command Interrupted): both timers may fall due at the same
        // instant, and the answers are written before the queue pair
        // closes.
        self.expire_waiting(timeout);
        // Ending the queue pair rather than failing the one command: its
        // transfer tag stays the host's until the host is told, and the
        // host's transport recovery (reconnect and retry) is the spec's
        // answer.
        tracing::warn!(peer = %self.peer, ?timeout, "a solicited write's data did not all arrive in time: closing the queue pair");
        self.state = ConnState::Closing;
    }

    /// Fails every request that has waited for buffer units for `timeout`
    /// with Command Interrupted (the host retries it later).
    pub(super) fn expire_waiting(&mut self, timeout: Duration) {
        let now = Instant::now();
        while let Some(&slot) = self.waiting.front() {
            let r = &self.slots[slot as usize];
            if r.since.checked_add(timeout).is_some_and(|d| d > now) {
                break;
            }
            let cid = r.cid;
            self.waiting.pop_front();
            tracing::warn!(peer = %self.peer, cid, ?timeout, "no data buffer units in time: command interrupted");
            self.complete(cid, status::COMMAND_INTERRUPTED);
            self.set_state(slot, ReqState::Free);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::{SubsystemConfig, Target, TransportOptions};

    /// A connection of a target with one subsystem, before its ICReq.
    pub(in crate::tcp) fn conn() -> Connection {
        let t = Target::new(TransportOptions::default(), metrics::Registry::new()).unwrap();
        t.add_subsystem(SubsystemConfig::new("nqn.2016-06.io.spdk:cnode1"))
            .unwrap();
        Connection::new(
            t.state(),
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:4420".parse().unwrap(),
        )
    }

    #[test]
    fn request_slot_states_are_counted() {
        let mut c = conn();
        c.slots = (0..4).map(|_| Request::free()).collect();
        c.free = (0..4u16).rev().collect();
        c.state_counts = [4, 0, 0, 0];
        let a = c.alloc_slot(10).unwrap();
        c.set_state(a, ReqState::AwaitingH2cData);
        let b = c.alloc_slot(11).unwrap();
        c.set_state(b, ReqState::Executing);
        assert_eq!(c.busy(), 2);
        assert_eq!(c.state_counts, [2, 0, 1, 1]);
        c.set_state(a, ReqState::Executing);
        c.set_state(a, ReqState::Free);
        c.set_state(b, ReqState::Free);
        assert_eq!((c.busy(), c.free.len()), (0, 4));
        // Over depth: no slot.
        for i in 0..4 {
            let s = c.alloc_slot(i).unwrap();
            c.set_state(s, ReqState::Executing);
        }
        assert!(c.alloc_slot(99).is_none());
    }
}
