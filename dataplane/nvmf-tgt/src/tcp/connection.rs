//! One NVMe/TCP queue pair: the connection state machine, the PDU reader,
//! request slots, and command dispatch (Fabrics, admin in [`crate::ctrlr::admin`],
//! I/O in [`crate::ctrlr::io`]).
//!
//! One task per connection runs [`serve`]: a loop that
//! 1. hands newly submitted bdev operations to a `FuturesUnordered`,
//! 2. writes everything queued in the [`Outbox`] (one batch per turn;
//!    given up when no byte moves for the write timeout, when the
//!    controller is torn down or its keep-alive expires, or when a drain
//!    started by shutdown times out: a host that does not read cannot hold
//!    the queue),
//! 3. waits for whichever comes first: bytes from the socket (all complete
//!    PDUs in the buffer are processed at once), a bdev completion (all
//!    ready ones are taken at once), the controller's teardown, target
//!    shutdown, the keep-alive deadline (admin queue), a pending
//!    asynchronous event (admin queue with AERs outstanding), buffer units
//!    for the oldest request in `AwaitingBuffer` (one acquisition kept
//!    across turns, so the request keeps its place in line), the deadline
//!    of the oldest request waiting for buffers or for H2CData, or the
//!    release of a parked Connect.
//!
//! When the loop ends, the operations already handed to bdevs are waited
//! for (up to the drain timeout) before the queue pair is closed. Those
//! still running then are abandoned (counted) but still awaited by a
//! detached task: the controller is released (a reconnecting host's parked
//! Connect proceeds) only once the last of them has completed.
//!
//! Request slots are indexed by the transfer tag sent in R2Ts, so an
//! H2CData PDU finds its request without a search.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bdev::{BdevError, DmaBuf, IoKind};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use nvmf::cqe::{Cqe, Status};
use nvmf::digest::{self, DIGEST_LEN};
use nvmf::pdu::{
    self, CommonHeader, DataHeader, FatalError, IcResp, Negotiated, PduType, Specific, TermStatus,
    CH_LEN,
};
use nvmf::sqe::{fctype, opcode, sgl, ConnectCmd, ConnectData, ConnectDataError, Sqe};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::ctrlr::controller::{CcTransition, Controller, CSTS_RDY};
use crate::stats::SubsystemStats;
use crate::subsystem::{Namespace, NamespaceMap, RegisterError, Subsystem};
use crate::target::Inner;
use crate::tcp::bufpool::{BufPool, Grant, QueueBuffers};
use crate::tcp::outbox::{Outbox, Progress, Tracked, INLINE_DATA_MAX};

/// Statuses the codec does not name.
pub mod status {
    use nvmf::cqe::{sct, Status};

    /// Command Aborted due to SQ Deletion (queue or controller going away).
    pub const ABORTED_SQ_DELETION: Status = Status {
        sct: sct::GENERIC,
        sc: 0x08,
        dnr: false,
    };
    /// Command Interrupted: the host should retry (queue over its depth).
    pub const COMMAND_INTERRUPTED: Status = Status {
        sct: sct::GENERIC,
        sc: 0x21,
        dnr: false,
    };
    /// Transient Transport Error (data digest mismatch).
    pub const TRANSIENT_TRANSPORT_ERROR: Status = Status {
        sct: sct::GENERIC,
        sc: 0x22,
        dnr: false,
    };
    /// Connect: Incompatible Format.
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status {
        sct: sct::COMMAND_SPECIFIC,
        sc: 0x80,
        dnr: true,
    };
    /// Connect: Controller Busy.
    pub const CONNECT_CONTROLLER_BUSY: Status = Status {
        sct: sct::COMMAND_SPECIFIC,
        sc: 0x81,
        dnr: false,
    };
}

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
/// drained (see `Inner::releasing`).
struct Parked {
    sqe: Sqe,
    data: Vec<u8>,
    released: watch::Receiver<bool>,
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

/// What to do once a request's data has arrived.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pending {
    /// Read into a buffer from `offset` (once it has one).
    Read { offset: u64 },
    /// Write the buffer at `offset`; durably before completion if `fua`.
    Write { offset: u64, fua: bool },
    /// Dataset Management with `ranges` ranges; `deallocate` set; the
    /// deallocation made durable before completion if `sync`.
    Dsm { deallocate: bool, sync: bool },
}

/// One request slot.
pub(crate) struct Request {
    pub(crate) state: ReqState,
    pub(crate) cid: u16,
    pub(crate) ns: Option<Arc<Namespace>>,
    /// Bytes expected from the host.
    pub(crate) len: u32,
    /// Bytes received so far.
    pub(crate) received: u32,
    pub(crate) buf: Option<DmaBuf>,
    /// The budget units `buf` holds.
    pub(crate) grant: Option<Grant>,
    /// Set when the data arrived damaged: complete with this instead.
    pub(crate) failed: Option<Status>,
    pub(crate) pending: Pending,
    /// When the command capsule arrived (for the latency histograms).
    pub(crate) started: Instant,
    /// When the request entered `AwaitingBuffer` or `AwaitingH2cData` (the
    /// R2T is sent then): its deadline counts from here.
    since: Instant,
    /// Which use of the slot this is (a slot is reused; its waits are not).
    seq: u64,
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

/// A bdev operation to run outside the connection's synchronous code.
pub(crate) enum Op {
    /// Read into `buf` at `offset`.
    Read {
        slot: u16,
        ns: Arc<Namespace>,
        offset: u64,
        buf: DmaBuf,
    },
    /// Write `buf` at `offset`; durably before completion if `fua`.
    Write {
        slot: u16,
        ns: Arc<Namespace>,
        offset: u64,
        buf: DmaBuf,
        fua: bool,
    },
    /// Flush one namespace.
    Flush { slot: u16, ns: Arc<Namespace> },
    /// Zero a range; flush the bdev before completion if `sync`.
    WriteZeroes {
        slot: u16,
        ns: Arc<Namespace>,
        offset: u64,
        len: u64,
        sync: bool,
    },
    /// Deallocate the ranges listed in `ranges` (DSM format, 16 bytes
    /// each); flush the bdev before completion if `sync`.
    Unmap {
        slot: u16,
        ns: Arc<Namespace>,
        ranges: DmaBuf,
        sync: bool,
    },
    /// Controller shutdown: flush every namespace, then report complete.
    ShutdownFlush { namespaces: Arc<NamespaceMap> },
}

impl Op {
    /// Whether it changes the namespace's data.
    fn changes_data(&self) -> bool {
        matches!(
            self,
            Op::Write { .. } | Op::WriteZeroes { .. } | Op::Unmap { .. }
        )
    }
}

/// The result of an [`Op`].
pub(crate) enum Done {
    /// A request finished; `ended` is when, if the bdev's counters read
    /// the clock at its end anyway (the command's latency then takes that
    /// instant instead of reading the clock once more).
    Io {
        slot: u16,
        status: Status,
        buf: Option<DmaBuf>,
        kind: IoKind,
        ended: Option<std::time::Instant>,
    },
    /// Shutdown flushing finished.
    Shutdown,
}

fn bdev_status(e: &BdevError, read: bool) -> Status {
    match e {
        BdevError::OutOfRange { .. } => Status::LBA_OUT_OF_RANGE,
        BdevError::Misaligned { .. } | BdevError::InvalidArgument(_) => Status::INVALID_FIELD,
        BdevError::Unsupported(_) => Status::INVALID_OPCODE,
        _ if read => Status::UNRECOVERED_READ_ERROR,
        BdevError::Os { .. } | BdevError::Ceph { .. } => Status::WRITE_FAULT,
    }
}

/// The [`Done`] of a request whose bdev operation returned `r`.
pub(crate) fn done_io(
    slot: u16,
    r: Result<(), BdevError>,
    buf: Option<DmaBuf>,
    kind: IoKind,
    ended: Option<std::time::Instant>,
) -> Done {
    Done::Io {
        slot,
        status: match &r {
            Ok(()) => Status::SUCCESS,
            Err(e) => bdev_status(e, kind == IoKind::Read),
        },
        buf,
        kind,
        ended,
    }
}

async fn execute(op: Op) -> Done {
    let io = |slot, r, buf, kind| done_io(slot, r, buf, kind, None);
    match op {
        Op::Read {
            slot,
            ns,
            offset,
            buf,
        } => {
            let (buf, r, ended) = ns.bdev.read_ended(offset, buf).await;
            done_io(slot, r, Some(buf), IoKind::Read, Some(ended))
        }
        Op::Write {
            slot,
            ns,
            offset,
            buf,
            fua,
        } => {
            let (buf, r) = ns.bdev.write_maybe_fua(offset, buf, fua).await;
            io(slot, r, Some(buf), IoKind::Write)
        }
        Op::Flush { slot, ns } => io(slot, ns.bdev.flush().await, None, IoKind::Flush),
        Op::WriteZeroes {
            slot,
            ns,
            offset,
            len,
            sync,
        } => {
            let mut r = ns.bdev.write_zeroes(offset, len).await;
            if sync && r.is_ok() {
                r = ns.bdev.flush().await;
            }
            io(slot, r, None, IoKind::WriteZeroes)
        }
        Op::Unmap {
            slot,
            ns,
            ranges,
            sync,
        } => {
            let mut r = Ok(());
            for range in ranges.chunks_exact(16) {
                let nlb = u64::from(u32::from_le_bytes(range[4..8].try_into().expect("4")));
                let slba = u64::from_le_bytes(range[8..16].try_into().expect("8"));
                if nlb == 0 {
                    continue;
                }
                let (Some(off), Some(len)) = (
                    slba.checked_mul(u64::from(ns.block_size)),
                    nlb.checked_mul(u64::from(ns.block_size)),
                ) else {
                    r = Err(BdevError::OutOfRange {
                        offset: u64::MAX,
                        len: 0,
                        size: 0,
                    });
                    break;
                };
                r = ns.bdev.unmap(off, len).await;
                if r.is_err() {
                    break;
                }
            }
            drop(ranges);
            if sync && r.is_ok() {
                r = ns.bdev.flush().await;
            }
            io(slot, r, None, IoKind::Unmap)
        }
        Op::ShutdownFlush { namespaces } => {
            for ns in namespaces.values() {
                if let Err(e) = ns.bdev.flush().await {
                    tracing::warn!(nsid = ns.nsid, "flush at controller shutdown: {e}");
                }
            }
            Done::Shutdown
        }
    }
}

/// The receive buffer: complete PDUs are processed in place.
struct RecvBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl RecvBuf {
    fn spare(&mut self) -> &mut [u8] {
        &mut self.buf[self.end..]
    }

    /// Makes room for a PDU of `need` bytes starting at `start`.
    fn compact(&mut self, need: usize) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0 && self.start + need > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }
}

/// A fatal error with the header that caused it (for the TermReq).
#[derive(Debug)]
struct Fatal {
    err: FatalError,
    header: [u8; pdu::TERM_REQ_MAX_DATA],
    header_len: usize,
}

impl Fatal {
    fn new(err: FatalError, header: &[u8]) -> Box<Self> {
        let n = header.len().min(pdu::TERM_REQ_MAX_DATA);
        let mut h = [0u8; pdu::TERM_REQ_MAX_DATA];
        h[..n].copy_from_slice(&header[..n]);
        Box::new(Self {
            err,
            header: h,
            header_len: n,
        })
    }
}

/// What Connect bound the connection to.
pub(crate) struct Binding {
    pub(crate) qid: u16,
    pub(crate) sqsize: u16,
    pub(crate) ctrl: Arc<Controller>,
    pub(crate) sub: Arc<Subsystem>,
    pub(crate) stats: SubsystemStats,
}

/// Per-connection state, everything but the socket and the in-flight set.
pub(crate) struct Connection {
    pub(crate) target: Arc<Inner>,
    peer: SocketAddr,
    listen: SocketAddr,
    pub(crate) state: ConnState,
    neg: Negotiated,
    /// Host PDU data alignment for data we send.
    hpda: u8,
    pub(crate) bound: Option<Binding>,
    pub(crate) slots: Vec<Request>,
    free: Vec<u16>,
    state_counts: [u32; REQ_STATES],
    pub(crate) pool: BufPool,
    /// This queue's access to the target's buffer budget.
    pub(crate) bufs: QueueBuffers,
    /// Requests in `AwaitingBuffer`, oldest first.
    pub(crate) waiting: VecDeque<u16>,
    /// Requests sent an R2T, oldest first, as (slot, seq); entries of
    /// requests no longer waiting are skipped when the deadline is computed.
    h2c_order: VecDeque<(u16, u64)>,
    /// The next request's `seq`.
    next_seq: u64,
    /// A Connect waiting for the host's previous controller to drain.
    parked: Option<Parked>,
    pub(crate) out: Outbox,
    /// Operations to hand to the in-flight set.
    pub(crate) submit: Vec<Op>,
    /// Operations that change data (writes, zeroing, deallocation) handed
    /// to a bdev and not finished: while any is, reads do not complete
    /// inline, so that none overtakes a write sent before it on this queue
    /// (a malloc write runs only when the in-flight set polls it).
    pub(crate) changing: u32,
    sqhd: u16,
    /// Outstanding Asynchronous Event Requests (admin queue).
    pub(crate) aers: Vec<u16>,
    /// Namespace snapshot and the generation it was taken at.
    ns_snapshot: Arc<NamespaceMap>,
    ns_generation: u64,
    /// Scratch page for Identify data.
    pub(crate) page: Vec<u8>,
}

impl Connection {
    fn new(target: Arc<Inner>, peer: SocketAddr, listen: SocketAddr) -> Self {
        let pool = BufPool::new(
            target.opts.buf_cache_size as usize,
            target.buffers.cached.clone(),
        );
        // Replaced by the host's share at Connect; nothing is granted before.
        let bufs = QueueBuffers::new(target.buffers.clone(), "", target.opts.max_io_size);
        let max_plen = target
            .opts
            .max_h2c_data
            .max(target.opts.in_capsule_data_size) as usize
            + pdu::CAPSULE_CMD_HLEN
            + 2 * DIGEST_LEN
            + 128;
        Self {
            target,
            peer,
            listen,
            state: ConnState::AwaitingIcReq,
            neg: Negotiated {
                max_plen: max_plen as u32,
                ..Negotiated::default()
            },
            hpda: 0,
            bound: None,
            slots: Vec::new(),
            free: Vec::new(),
            state_counts: [0; REQ_STATES],
            pool,
            bufs,
            waiting: VecDeque::new(),
            h2c_order: VecDeque::new(),
            next_seq: 0,
            parked: None,
            out: Outbox::default(),
            submit: Vec::new(),
            changing: 0,
            sqhd: 0,
            aers: Vec::new(),
            ns_snapshot: Arc::new(NamespaceMap::new()),
            ns_generation: u64::MAX,
            page: vec![0; crate::ctrlr::identify::IDENTIFY_LEN],
        }
    }

    /// Moves `slot` to `new`, keeping the per-state counts.
    pub(crate) fn set_state(&mut self, slot: u16, new: ReqState) {
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
    fn busy(&self) -> u32 {
        self.state_counts[ReqState::AwaitingBuffer.index()]
            + self.state_counts[ReqState::AwaitingH2cData.index()]
            + self.state_counts[ReqState::Executing.index()]
    }

    /// A free slot for command `cid`, or None when the host is over its
    /// queue depth.
    pub(crate) fn alloc_slot(&mut self, cid: u16) -> Option<u16> {
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

    pub(crate) fn qid(&self) -> u16 {
        self.bound.as_ref().map_or(0, |b| b.qid)
    }

    /// The namespace `nsid`, from the snapshot (refreshed when the
    /// subsystem's namespaces changed).
    pub(crate) fn namespace(&mut self, nsid: u32) -> Option<Arc<Namespace>> {
        let b = self.bound.as_ref()?;
        let generation = b.sub.ns_generation.load(Ordering::Acquire);
        if generation != self.ns_generation {
            self.ns_snapshot = b.sub.namespaces();
            self.ns_generation = generation;
        }
        self.ns_snapshot.get(&nsid).cloned()
    }

    /// The current namespace snapshot.
    pub(crate) fn namespaces(&mut self) -> Arc<NamespaceMap> {
        let _ = self.namespace(0);
        self.ns_snapshot.clone()
    }

    /// Queues a response capsule.
    pub(crate) fn respond(&mut self, cqe: Cqe) {
        if let Some(b) = &self.bound {
            b.stats.commands.inc();
            if !cqe.status.is_success() {
                b.stats.errors.inc();
            }
        }
        let hd = self.neg.header_digest;
        let raw = Cqe {
            sqhd: self.sqhd,
            sqid: self.qid(),
            ..cqe
        }
        .encode();
        self.out.put_with(pdu::CAPSULE_RESP_HLEN + DIGEST_LEN, |b| {
            pdu::encode_capsule_resp(b, &raw, hd)
        });
    }

    /// Completes `cid` with `status` and no result.
    pub(crate) fn complete(&mut self, cid: u16, status: Status) {
        self.respond(Cqe::new(cid, status));
    }

    /// Queues C2HData for `cid` carrying `data` (copied), then the response
    /// unless the SUCCESS optimisation is on; with no data, the response.
    pub(crate) fn send_data(&mut self, cid: u16, data: &[u8], result: Cqe) {
        // A C2HData PDU must carry data: a zero-length transfer (a host
        // buffer of 0 bytes) gets the response alone.
        if data.is_empty() {
            return self.respond(result);
        }
        let success = self.target.opts.c2h_success && result.status.is_success();
        self.put_c2h_header(cid, data.len() as u32, success);
        self.out.put(data);
        if self.neg.data_digest {
            self.out.put(&digest::crc32c(data).to_le_bytes());
        }
        if success {
            if let Some(b) = &self.bound {
                b.stats.commands.inc();
            }
        } else {
            self.respond(result);
        }
    }

    fn put_c2h_header(&mut self, cid: u16, len: u32, success: bool) {
        let d = DataHeader {
            cccid: cid,
            ttag: 0,
            datao: 0,
            datal: len,
            last: true,
            success,
        };
        let (hd, dd, pda) = (self.neg.header_digest, self.neg.data_digest, self.hpda);
        self.out.put_with(256, |b| {
            pdu::encode_data_header(b, PduType::C2hData, &d, hd, dd, pda)
        });
    }

    /// Queues an R2T for the whole transfer of `slot`.
    pub(crate) fn send_r2t(&mut self, slot: u16) {
        let r = &self.slots[slot as usize];
        let r2t = pdu::R2t {
            cccid: r.cid,
            ttag: slot,
            r2to: 0,
            r2tl: r.len,
        };
        let hd = self.neg.header_digest;
        self.out.put_with(pdu::SMALL_HLEN + DIGEST_LEN, |b| {
            pdu::encode_r2t(b, &r2t, hd)
        });
    }

    /// Hands `op` to the in-flight set on the loop's next turn.
    pub(crate) fn submit_op(&mut self, op: Op) {
        if op.changes_data() {
            self.changing += 1;
        }
        self.submit.push(op);
    }

    /// Handles a finished operation.
    pub(crate) fn finish(&mut self, done: Done) {
        match done {
            Done::Shutdown => {
                if let Some(b) = &self.bound {
                    b.ctrl
                        .regs
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .shutdown_complete();
                }
            }
            Done::Io {
                slot,
                status,
                buf,
                kind,
                ended,
            } => {
                let read = kind == IoKind::Read;
                if matches!(kind, IoKind::Write | IoKind::WriteZeroes | IoKind::Unmap) {
                    debug_assert!(self.changing > 0, "a data change finished twice");
                    self.changing = self.changing.saturating_sub(1);
                }
                let cid = self.slots[slot as usize].cid;
                if status.is_success() {
                    self.count_io(kind, self.slots[slot as usize].started, ended);
                }
                match buf {
                    Some(buf) if read && status.is_success() => {
                        let len = buf.len();
                        if let Some(b) = &self.bound {
                            b.stats.read_bytes.add(len as u64);
                        }
                        let success = self.target.opts.c2h_success;
                        self.put_c2h_header(cid, len as u32, success);
                        let crc = self.neg.data_digest.then(|| digest::crc32c(&buf));
                        if len <= INLINE_DATA_MAX {
                            self.out.put(&buf);
                            self.pool.give(buf);
                        } else {
                            // The units stay held until the data is sent.
                            let grant = self.slots[slot as usize].grant.take();
                            self.out.put_buffer(buf, grant);
                        }
                        if let Some(crc) = crc {
                            self.out.put(&crc.to_le_bytes());
                        }
                        if success {
                            if let Some(b) = &self.bound {
                                b.stats.commands.inc();
                            }
                        } else {
                            self.complete(cid, status);
                        }
                    }
                    other => {
                        if let Some(buf) = other {
                            if !read && status.is_success() {
                                if let Some(b) = &self.bound {
                                    b.stats.written_bytes.add(buf.len() as u64);
                                }
                            }
                            self.pool.give(buf);
                        }
                        self.complete(cid, status);
                    }
                }
                self.set_state(slot, ReqState::Free);
            }
        }
    }

    /// Counts a successful I/O command of `kind` that arrived at `started`
    /// and ended at `ended` (now if not known).
    fn count_io(&self, kind: IoKind, started: Instant, ended: Option<std::time::Instant>) {
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
            }
            IoKind::Write => {
                s.write_ops.inc();
                s.write_latency.observe_ns(ns());
            }
            IoKind::Unmap => s.unmap_ops.inc(),
            IoKind::Flush => s.flush_ops.inc(),
            IoKind::WriteZeroes => {}
        }
    }

    /// Processes every complete PDU in `rb`.
    fn process(&mut self, rb: &mut RecvBuf) -> Result<(), Box<Fatal>> {
        while rb.end - rb.start >= CH_LEN {
            let at = rb.start;
            let ch = CommonHeader::parse(rb.buf[at..at + CH_LEN].try_into().expect("8 bytes"));
            let layout = ch
                .validate(&self.neg, true)
                .map_err(|e| Fatal::new(e, &rb.buf[at..rb.end.min(at + 128)]))?;
            if rb.end - at < layout.plen {
                rb.compact(layout.plen);
                return Ok(());
            }
            let pdu = &rb.buf[at..at + layout.plen];
            let hlen = layout.pdu_type.hlen();
            if layout.header_digest
                && !digest::verify(
                    &pdu[..hlen],
                    pdu[hlen..hlen + DIGEST_LEN].try_into().expect("4"),
                )
            {
                return Err(Fatal::new(
                    FatalError::new(TermStatus::HeaderDigestError, "header digest mismatch"),
                    &pdu[..hlen],
                ));
            }
            let spec = pdu::parse_specific(&layout, ch.flags, pdu)
                .map_err(|e| Fatal::new(e, &pdu[..hlen]))?;
            let data = &pdu[layout.data_offset..layout.data_offset + layout.data_len];
            let data_ok = !layout.data_digest || {
                let end = layout.data_offset + layout.data_len;
                digest::verify(data, pdu[end..end + DIGEST_LEN].try_into().expect("4"))
            };
            self.handle_pdu(spec, data, data_ok)
                .map_err(|e| Fatal::new(e, &pdu[..hlen]))?;
            rb.start += layout.plen;
            // A parked Connect holds back everything after it.
            if matches!(self.state, ConnState::Terminating | ConnState::Closing)
                || self.parked.is_some()
            {
                return Ok(());
            }
        }
        rb.compact(CH_LEN);
        Ok(())
    }

    fn handle_pdu(&mut self, spec: Specific, data: &[u8], data_ok: bool) -> Result<(), FatalError> {
        match spec {
            Specific::IcReq(req) => {
                self.hpda = req.hpda;
                self.neg.initialized = true;
                self.neg.header_digest = req.header_digest;
                self.neg.data_digest = req.data_digest;
                self.neg.receive_pda = 0;
                let resp = IcResp {
                    pfv: pdu::PFV_1_0,
                    cpda: 0,
                    header_digest: req.header_digest,
                    data_digest: req.data_digest,
                    maxh2cdata: self.target.opts.max_h2c_data,
                };
                self.out
                    .put_with(pdu::IC_HLEN, |b| pdu::encode_ic_resp(b, &resp));
                self.state = ConnState::AwaitingConnect;
                Ok(())
            }
            Specific::TermReq(t) => {
                tracing::info!(peer = %self.peer, fes = t.fes, fei = t.fei, "host terminated the connection");
                self.state = ConnState::Closing;
                Ok(())
            }
            Specific::CapsuleCmd(raw) => {
                self.command(Sqe(raw), data, data_ok);
                Ok(())
            }
            Specific::Data(d) => self.h2c_data(&d, data, data_ok),
            // The codec only lets host-to-controller types through.
            Specific::IcResp(_) | Specific::CapsuleResp(_) | Specific::R2t(_) => {
                Err(FatalError::new(
                    TermStatus::PduSequenceError,
                    "controller PDU sent by the host",
                ))
            }
        }
    }

    fn command(&mut self, sqe: Sqe, data: &[u8], data_ok: bool) {
        let cid = sqe.cid();
        match self.state {
            ConnState::AwaitingConnect => {
                if !data_ok {
                    self.complete(cid, status::TRANSIENT_TRANSPORT_ERROR);
                } else if sqe.opcode() == opcode::FABRICS && sqe.fctype() == fctype::CONNECT {
                    self.connect(&sqe, data);
                } else {
                    self.complete(cid, Status::SEQUENCE_ERROR);
                }
            }
            ConnState::Serving => {
                let size = self.bound.as_ref().map_or(1, |b| b.sqsize + 1);
                self.sqhd = (self.sqhd + 1) % size;
                if !data_ok {
                    self.complete(cid, status::TRANSIENT_TRANSPORT_ERROR);
                } else if sqe.opcode() == opcode::FABRICS {
                    self.fabrics(&sqe);
                } else if self.qid() == 0 {
                    self.admin(&sqe, data);
                } else {
                    self.io(&sqe, data);
                }
            }
            ConnState::Draining => self.complete(cid, status::ABORTED_SQ_DELETION),
            ConnState::AwaitingIcReq
            | ConnState::Terminating
            | ConnState::Closing
            | ConnState::HostClosed => {}
        }
    }

    fn h2c_data(&mut self, d: &DataHeader, data: &[u8], data_ok: bool) -> Result<(), FatalError> {
        let slot = d.ttag;
        let ok = self
            .slots
            .get(slot as usize)
            .is_some_and(|r| r.state == ReqState::AwaitingH2cData && r.cid == d.cccid);
        if !ok {
            return Err(FatalError {
                status: TermStatus::InvalidHeaderField,
                field_offset: 10,
                reason: "H2CData for no outstanding R2T",
            });
        }
        let r = &mut self.slots[slot as usize];
        if d.datao != r.received || d.datao as u64 + d.datal as u64 > r.len as u64 {
            return Err(FatalError::new(
                TermStatus::DataTransferOutOfRange,
                "H2CData outside the solicited range or out of order",
            ));
        }
        if let Some(buf) = r.buf.as_mut() {
            let at = d.datao as usize;
            buf[at..at + data.len()].copy_from_slice(data);
        }
        r.received += d.datal;
        if !data_ok {
            r.failed = Some(status::TRANSIENT_TRANSPORT_ERROR);
        }
        if r.received == r.len {
            self.data_complete(slot);
        }
        Ok(())
    }

    /// All of `slot`'s data is here: run it.
    pub(crate) fn data_complete(&mut self, slot: u16) {
        let r = &mut self.slots[slot as usize];
        if let Some(st) = r.failed {
            let cid = r.cid;
            self.complete(cid, st);
            self.set_state(slot, ReqState::Free);
            return;
        }
        let (Some(ns), Some(buf)) = (r.ns.clone(), r.buf.take()) else {
            let cid = r.cid;
            self.complete(cid, Status::INTERNAL_ERROR);
            self.set_state(slot, ReqState::Free);
            return;
        };
        match r.pending {
            Pending::Read { .. } => {
                let cid = r.cid;
                self.complete(cid, Status::INTERNAL_ERROR);
                self.set_state(slot, ReqState::Free);
            }
            Pending::Write { offset, fua } => {
                self.set_state(slot, ReqState::Executing);
                self.submit_op(Op::Write {
                    slot,
                    ns,
                    offset,
                    buf,
                    fua,
                });
            }
            Pending::Dsm { deallocate, sync } => {
                if deallocate {
                    self.set_state(slot, ReqState::Executing);
                    self.submit_op(Op::Unmap {
                        slot,
                        ns,
                        ranges: buf,
                        sync,
                    });
                } else {
                    let cid = r.cid;
                    self.pool.give(buf);
                    self.complete(cid, Status::SUCCESS);
                    self.set_state(slot, ReqState::Free);
                }
            }
        }
    }

    /// Fabrics commands after Connect.
    fn fabrics(&mut self, sqe: &Sqe) {
        let cid = sqe.cid();
        match sqe.fctype() {
            fctype::PROPERTY_GET if self.qid() == 0 => self.property_get(sqe),
            fctype::PROPERTY_SET if self.qid() == 0 => self.property_set(sqe),
            fctype::CONNECT => self.complete(cid, Status::SEQUENCE_ERROR),
            fctype::DISCONNECT => {
                self.complete(cid, Status::SUCCESS);
                self.state = ConnState::Closing;
            }
            _ => self.complete(cid, Status::INVALID_OPCODE),
        }
    }

    fn property_get(&mut self, sqe: &Sqe) {
        use crate::ctrlr::controller::prop;
        let p = nvmf::sqe::PropertyCmd::parse(sqe);
        let Some(b) = &self.bound else { return };
        let regs = *b.ctrl.regs.lock().unwrap_or_else(|p| p.into_inner());
        let opts = &self.target.opts;
        let value: u64 = match p.offset {
            prop::CAP => {
                let mqes = u64::from(opts.max_queue_depth - 1);
                // MQES, CQR (contiguous queues required), TO = 10 s (500 ms
                // units), CSS: NVM command set, MPSMIN = MPSMAX = 4 KiB.
                mqes | (1 << 16) | (20 << 24) | (1 << 37)
            }
            prop::VS => u64::from(crate::ctrlr::identify::NVME_VERSION),
            prop::CC => u64::from(regs.cc),
            prop::CSTS => u64::from(regs.csts),
            prop::NSSR => 0,
            _ => return self.complete(sqe.cid(), Status::INVALID_FIELD),
        };
        let value = if p.eight_bytes {
            value
        } else {
            value & 0xffff_ffff
        };
        let cqe = Cqe {
            dw0: value as u32,
            dw1: (value >> 32) as u32,
            ..Cqe::new(sqe.cid(), Status::SUCCESS)
        };
        self.respond(cqe);
    }

    fn property_set(&mut self, sqe: &Sqe) {
        use crate::ctrlr::controller::prop;
        let p = nvmf::sqe::PropertyCmd::parse(sqe);
        let cid = sqe.cid();
        if p.offset != prop::CC {
            return self.complete(cid, Status::INVALID_FIELD);
        }
        let Some(b) = &self.bound else { return };
        let transition = b
            .ctrl
            .regs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_cc(p.value as u32);
        match transition {
            CcTransition::None | CcTransition::Enable => {}
            CcTransition::Reset => self.abort_aers(),
            CcTransition::Shutdown => {
                let namespaces = self.namespaces();
                self.submit_op(Op::ShutdownFlush { namespaces });
                // As SPDK's target does: outstanding AERs are not answered
                // (the host has abandoned them before shutting down; an
                // answer now is a completion for a command it no longer
                // knows), they end with the admin queue.
                self.aers.clear();
            }
        }
        self.complete(cid, Status::SUCCESS);
    }

    /// Ends every outstanding AER (reset, shutdown).
    fn abort_aers(&mut self) {
        for cid in std::mem::take(&mut self.aers) {
            self.complete(cid, status::ABORTED_SQ_DELETION);
        }
    }

    /// Completes outstanding AERs with pending events.
    pub(crate) fn deliver_events(&mut self) {
        let Some(ctrl) = self.bound.as_ref().map(|b| b.ctrl.clone()) else {
            return;
        };
        while !self.aers.is_empty() {
            let Some(ev) = ctrl.take_event() else { break };
            let cid = self.aers.remove(0);
            self.respond(Cqe {
                dw0: ev,
                ..Cqe::new(cid, Status::SUCCESS)
            });
        }
    }

    fn connect(&mut self, sqe: &Sqe, data: &[u8]) {
        let cid = sqe.cid();
        if ConnectCmd::parse(sqe).qid == 0 {
            if let Ok(d) = ConnectData::parse(data) {
                if let Some(released) = self.target.releasing(&d.subnqn, &d.hostnqn) {
                    tracing::info!(peer = %self.peer, subnqn = %d.subnqn, hostnqn = %d.hostnqn, "Connect waits for the host's previous controller to drain");
                    self.parked = Some(Parked {
                        sqe: Sqe(sqe.0),
                        data: data.to_vec(),
                        released,
                    });
                    return;
                }
            }
        }
        match self.try_connect(sqe, data) {
            Ok(cntlid) => self.respond(Cqe {
                dw0: u32::from(cntlid),
                ..Cqe::new(cid, Status::SUCCESS)
            }),
            Err((status, dw0)) => {
                tracing::info!(peer = %self.peer, sc = status.sc, dw0, "Connect refused");
                self.respond(Cqe {
                    dw0,
                    ..Cqe::new(cid, status)
                })
            }
        }
    }

    /// Connect; on refusal, the status and CQE DW0 (for Invalid Parameters:
    /// the offset of the bad field, bit 16 set when it is in the data).
    fn try_connect(&mut self, sqe: &Sqe, data: &[u8]) -> Result<u16, (Status, u32)> {
        const IN_DATA: u32 = 1 << 16;
        let invalid = |at: u32| (Status::CONNECT_INVALID_PARAMETERS, at);
        let cmd = ConnectCmd::parse(sqe);
        let sgl_desc = sqe.sgl();
        if sgl_desc.kind != sgl::IN_CAPSULE || sgl_desc.address != 0 || data.len() < 1024 {
            return Err((Status::SGL_TYPE_INVALID, 0));
        }
        if cmd.recfmt != 0 {
            return Err((status::CONNECT_INCOMPATIBLE_FORMAT, 0));
        }
        let d = ConnectData::parse(data).map_err(|e| match e {
            ConnectDataError::TooShort => invalid(0),
            ConnectDataError::BadNqn(at) => invalid(IN_DATA | u32::from(at)),
        })?;
        let sub = self
            .target
            .subsystem(&d.subnqn)
            .filter(|s| s.listens_on(self.listen))
            .ok_or(invalid(IN_DATA | 256))?;
        if !sub.host_allowed(&d.hostnqn) {
            tracing::warn!(subnqn = %d.subnqn, hostnqn = %d.hostnqn, "host not allowed");
            return Err((Status::CONNECT_INVALID_HOST, IN_DATA | 512));
        }
        let opts = &self.target.opts;
        let max_entries = if cmd.qid == 0 {
            opts.max_aq_depth
        } else {
            opts.max_queue_depth
        };
        let min_sqsize = if cmd.qid == 0 { 31 } else { 1 };
        if cmd.sqsize < min_sqsize || u32::from(cmd.sqsize) + 1 > u32::from(max_entries) {
            return Err(invalid(44));
        }
        let ctrl = if cmd.qid == 0 {
            if d.cntlid != 0xffff {
                return Err(invalid(IN_DATA | 16));
            }
            let io_queues = if sub.is_discovery {
                0
            } else {
                u32::from(opts.max_io_qpairs_per_ctrlr)
            };
            let s2 = sub.clone();
            let ctrl = sub
                .register_controller(&d.hostnqn, self.listen, |id| {
                    Arc::new(Controller::new(
                        id,
                        s2,
                        d.hostnqn.clone(),
                        d.host_id,
                        cmd.kato_ms,
                        io_queues,
                        self.path(),
                    ))
                })
                .map_err(|e| match e {
                    RegisterError::NotAllowed => (Status::CONNECT_INVALID_HOST, IN_DATA | 512),
                    RegisterError::Unreachable => invalid(IN_DATA | 256),
                    RegisterError::Busy => (status::CONNECT_CONTROLLER_BUSY, 0),
                })?;
            ctrl.keep_alive();
            ctrl
        } else {
            if sub.is_discovery {
                return Err(invalid(42));
            }
            let ctrl = sub.controller(d.cntlid).ok_or(invalid(IN_DATA | 16))?;
            if ctrl.hostnqn != d.hostnqn {
                return Err(invalid(IN_DATA | 512));
            }
            let ready = ctrl.regs.lock().unwrap_or_else(|p| p.into_inner()).csts & CSTS_RDY != 0;
            if !ready {
                return Err((Status::SEQUENCE_ERROR, 0));
            }
            if u32::from(cmd.qid) > ctrl.io_queues_granted.load(Ordering::Relaxed)
                || !ctrl.attach_io_queue(cmd.qid, self.path())
            {
                return Err(invalid(42));
            }
            ctrl
        };
        let cntlid = ctrl.cntlid;
        let entries = cmd.sqsize as usize + 1;
        self.slots = (0..entries).map(|_| Request::free()).collect();
        self.free = (0..entries as u16).rev().collect();
        self.state_counts = [0; REQ_STATES];
        self.state_counts[ReqState::Free.index()] = entries as u32;
        let stats = sub.stats.clone();
        // Every queue pair of this host draws on one share of the budget.
        self.bufs = QueueBuffers::new(
            self.target.buffers.clone(),
            &d.hostnqn,
            self.target.opts.max_io_size,
        );
        self.target.queue_opened(&ctrl);
        stats.connections_total.inc();
        stats.connections.add(1);
        tracing::debug!(peer = %self.peer, subnqn = %sub.nqn, cntlid, qid = cmd.qid, sqsize = cmd.sqsize, "queue connected");
        self.bound = Some(Binding {
            qid: cmd.qid,
            sqsize: cmd.sqsize,
            ctrl,
            sub,
            stats,
        });
        self.state = ConnState::Serving;
        Ok(cntlid)
    }

    /// Where this queue pair came from (recorded in its controller).
    fn path(&self) -> crate::ctrlr::controller::QpairPath {
        crate::ctrlr::controller::QpairPath {
            listen: self.listen,
            peer: self.peer,
        }
    }

    /// Queues the TermReq for `f` and ends the connection.
    fn terminate(&mut self, f: &Fatal) {
        tracing::warn!(peer = %self.peer, "fatal NVMe/TCP error, sending TermReq: {}", f.err);
        if let Some(b) = &self.bound {
            b.stats.protocol_errors.inc();
        } else {
            self.target.discovery.stats.protocol_errors.inc();
        }
        let header = &f.header[..f.header_len];
        self.out
            .put_with(pdu::SMALL_HLEN + pdu::TERM_REQ_MAX_DATA, |b| {
                pdu::encode_term_req(b, false, &f.err, header)
            });
        self.state = ConnState::Terminating;
    }

    fn begin_drain(&mut self) {
        if self.state == ConnState::Serving {
            self.state = ConnState::Draining;
            self.abort_aers();
        } else if self.state != ConnState::Draining {
            self.state = ConnState::Closing;
        }
    }

    /// Ends the queue pair once its commands have drained or been
    /// abandoned: an admin queue tears its controller down. Returns the
    /// controller, to be released with `Inner::queue_closed` (a
    /// reconnecting host's parked Connect proceeds when its last queue pair
    /// is released) once nothing this queue started runs any more.
    fn unbind(&mut self) -> Option<Arc<Controller>> {
        let b = self.bound.take()?;
        b.stats.connections.add(-1);
        if b.qid == 0 {
            b.ctrl.tear_down("admin queue closed");
        } else {
            b.ctrl.detach_io_queue(b.qid);
        }
        Some(b.ctrl)
    }

    /// When the oldest request sent an R2T must have all its data (each
    /// request has its own deadline: data for one does not extend
    /// another's). Forgets requests no longer waiting.
    fn h2c_deadline(&mut self, timeout: Duration) -> Option<Instant> {
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
    fn buffer_deadline(&self, timeout: Duration) -> Option<Instant> {
        let &slot = self.waiting.front()?;
        self.slots[slot as usize].since.checked_add(timeout)
    }

    /// Fails every request that has waited for buffer units for `timeout`
    /// with Command Interrupted (the host retries it later).
    fn expire_waiting(&mut self, timeout: Duration) {
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

/// A queue pair that ends in any way, a panic included, releases its
/// controller: a reconnecting host is never left waiting for it.
impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(ctrl) = self.unbind() {
            self.target.queue_closed(&ctrl);
        }
    }
}

async fn wait_torn_down(rx: &mut Option<watch::Receiver<bool>>) {
    match rx {
        Some(rx) => {
            if rx.wait_for(|v| *v).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn notified(ctrl: Option<&Controller>) {
    match ctrl {
        Some(c) => c.event_notify.notified().await,
        None => std::future::pending().await,
    }
}

/// A wait for budget units that lives across loop turns.
type GrantWait = Pin<Box<dyn Future<Output = Grant> + Send>>;

/// Resolves when a parked Connect may proceed: true once the earlier
/// controller has been released, false when `bound` has passed first (its
/// abandoned commands may still be running: the Connect is then refused
/// with Controller Busy, and the host retries).
async fn released(rx: Option<watch::Receiver<bool>>, bound: Duration) -> bool {
    match rx {
        Some(mut rx) => tokio::time::timeout(bound, crate::target::until_true(&mut rx))
            .await
            .is_ok(),
        None => std::future::pending().await,
    }
}

/// Waits until every operation in `inflight` has completed or `deadline`
/// passes; returns how many were still running (abandoned).
async fn drain<F: std::future::Future>(
    inflight: &mut FuturesUnordered<F>,
    deadline: Instant,
) -> u64 {
    while !inflight.is_empty() {
        tokio::select! {
            _ = inflight.next() => {}
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    inflight.len() as u64
}

/// Serves one accepted connection until it ends: `rd` and `wr` are the two
/// halves of its byte stream (a TCP socket's, or an in-memory pipe's in
/// tests and the fuzzer), `listen` the address it arrived on.
///
/// However the queue pair ends, the commands it already handed to a bdev
/// are waited for before its controller is released: librbd, io_uring and
/// the delay bdev keep executing a submitted write, and a reconnecting host
/// must not have its new writes overtaken by stale ones. After the drain
/// timeout the queue pair closes and the rest is awaited in the background.
pub(crate) async fn serve<R, W>(
    mut rd: R,
    mut wr: W,
    peer: SocketAddr,
    listen: SocketAddr,
    target: Arc<Inner>,
    _drain: mpsc::Sender<()>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut shutdown = target.shutdown.subscribe();
    let drain_timeout = target.opts.drain_timeout;
    let write_timeout = target.opts.write_timeout;
    let h2c_timeout = target.opts.h2c_data_timeout;
    let mut conn = Connection::new(target, peer, listen);
    let mut rb = RecvBuf {
        buf: vec![0; 2 * conn.neg.max_plen as usize],
        start: 0,
        end: 0,
    };
    let mut inflight = FuturesUnordered::new();
    let mut teardown: Option<watch::Receiver<bool>> = None;
    let mut drain_deadline: Option<Instant> = None;
    let progress = Progress::default();
    // The wait for the oldest `AwaitingBuffer` request's units, and which
    // request (slot, seq) it is for. Kept until that request stops being
    // the oldest: dropping it would give back units it was partly assigned
    // and its place in line.
    let mut grant_wait: GrantWait = Box::pin(std::future::pending());
    let mut grant_key: Option<(u16, u64)> = None;
    let poller = conn.target.poller.clone();
    loop {
        poller.note_activity();
        for op in conn.submit.drain(..) {
            inflight.push(execute(op));
        }
        let ctrl = conn.bound.as_ref().map(|b| b.ctrl.clone());
        if teardown.is_none() {
            teardown = ctrl.as_ref().map(|c| c.teardown_signal());
        }
        let is_admin = conn.bound.as_ref().is_some_and(|b| b.qid == 0);
        let ka_deadline = if is_admin {
            ctrl.as_ref().and_then(|c| c.keep_alive_deadline())
        } else {
            None
        };
        if !conn.out.is_empty() {
            // A host that stops reading must not hold the queue pair (and
            // with it keep-alive expiry, teardown, draining and target
            // shutdown) forever; one that reads slowly keeps it as long as
            // bytes move. Biased: the write usually completes at once,
            // before the timers are polled (and registered).
            progress.mark();
            let mut shutdown_seen = false;
            // While this write waits for the socket to drain, spinning
            // cannot speed it and takes the CPU the kernel's TCP work
            // needs (see `poller`); the guard ends the wait however the
            // write ends.
            let _writing = poller.writing();
            let ended: Option<&str> = {
                let mut w = Tracked::new(&mut wr, &progress);
                let flush = conn.out.flush(&mut w, &mut conn.pool);
                tokio::pin!(flush);
                loop {
                    tokio::select! {
                        biased;
                        r = &mut flush => break match r {
                            Ok(()) => None,
                            Err(e) => {
                                tracing::debug!(%peer, "write: {e}");
                                Some("socket write failed")
                            }
                        },
                        _ = progress.stalled_for(write_timeout) => break Some("write made no progress: the host is not reading"),
                        _ = wait_torn_down(&mut teardown) => break Some("controller torn down during a write"),
                        _ = sleep_until(ka_deadline) => {
                            if let Some(c) = &ctrl {
                                c.tear_down("keep-alive timeout");
                            }
                            break Some("keep-alive timeout during a write");
                        }
                        // Shutdown starts the drain while the write goes
                        // on; the drain's deadline ends it.
                        _ = crate::target::until_true(&mut shutdown), if drain_deadline.is_none() => {
                            shutdown_seen = true;
                            drain_deadline = Some(Instant::now() + drain_timeout);
                        }
                        _ = sleep_until(drain_deadline) => break Some("drain timed out during a write"),
                    }
                }
            };
            if shutdown_seen {
                conn.begin_drain();
            }
            if let Some(why) = ended {
                tracing::info!(%peer, "queue pair ends: {why}");
                break;
            }
        }
        match conn.state {
            ConnState::Terminating | ConnState::Closing => break,
            ConnState::Draining if conn.busy() == 0 && inflight.is_empty() => break,
            ConnState::HostClosed if inflight.is_empty() => break,
            _ => {}
        }
        let events_ctrl = ctrl
            .as_deref()
            .filter(|_| is_admin && !conn.aers.is_empty());
        let draining = conn.state == ConnState::Draining;
        let reading = conn.state != ConnState::HostClosed && conn.parked.is_none();
        let h2c_deadline = conn.h2c_deadline(h2c_timeout);
        let buffer_deadline = conn.buffer_deadline(h2c_timeout);
        let head = conn
            .waiting
            .front()
            .map(|&s| (s, conn.slots[s as usize].seq));
        if head != grant_key {
            grant_key = head;
            grant_wait = match head {
                Some((s, _)) => {
                    let (host, shared) = conn.bufs.handles();
                    let len = conn.slots[s as usize].len;
                    Box::pin(QueueBuffers::grant_when_free(host, shared, len))
                }
                None => Box::pin(std::future::pending()),
            };
        }
        let parked = conn.parked.as_ref().map(|p| p.released.clone());
        tokio::select! {
            Some(done) = inflight.next(), if !inflight.is_empty() => {
                conn.finish(done);
                while let Some(Some(done)) = inflight.next().now_or_never() {
                    conn.finish(done);
                }
                conn.start_waiting();
            }
            r = rd.read(rb.spare()), if reading => match r {
                Ok(0) => conn.state = ConnState::HostClosed,
                Err(e) => {
                    tracing::debug!(%peer, "read: {e}");
                    break;
                }
                Ok(n) => {
                    rb.end += n;
                    if let Err(f) = conn.process(&mut rb) {
                        conn.terminate(&f);
                    }
                }
            },
            _ = wait_torn_down(&mut teardown) => break,
            _ = crate::target::until_true(&mut shutdown), if !draining => {
                conn.begin_drain();
                drain_deadline = Some(Instant::now() + drain_timeout);
            }
            _ = sleep_until(ka_deadline) => {
                if let Some(c) = &ctrl {
                    if c.keep_alive_deadline().is_some_and(|d| d <= Instant::now()) {
                        c.tear_down("keep-alive timeout");
                        break;
                    }
                }
            }
            _ = notified(events_ctrl) => conn.deliver_events(),
            g = &mut grant_wait, if grant_key.is_some() => {
                // `grant_key` is the front of `waiting` (checked above).
                grant_key = None;
                grant_wait = Box::pin(std::future::pending());
                if let Some(slot) = conn.waiting.pop_front() {
                    conn.start_with(slot, g);
                }
                conn.start_waiting();
            }
            _ = sleep_until(buffer_deadline) => conn.expire_waiting(h2c_timeout),
            _ = sleep_until(h2c_deadline) => {
                if h2c_deadline.is_some_and(|d| d <= Instant::now()) {
                    // Requests that waited as long for buffer units are
                    // answered first (Command Interrupted): both timers
                    // may fall due at the same instant, and the answers
                    // are written before the queue pair closes.
                    conn.expire_waiting(h2c_timeout);
                    // Ending the queue pair rather than failing the one
                    // command: its transfer tag stays the host's until the
                    // host is told, and the host's transport recovery
                    // (reconnect and retry) is the spec's answer.
                    tracing::warn!(%peer, timeout = ?h2c_timeout, "a solicited write's data did not all arrive in time: closing the queue pair");
                    conn.state = ConnState::Closing;
                }
            }
            ok = released(parked, drain_timeout + drain_timeout) => {
                if let Some(p) = conn.parked.take() {
                    if ok {
                        conn.connect(&p.sqe, &p.data);
                    } else {
                        tracing::warn!(%peer, "the host's previous controller still has commands running: Connect refused with Controller Busy");
                        conn.respond(Cqe::new(p.sqe.cid(), status::CONNECT_CONTROLLER_BUSY));
                    }
                    // A Connect that finds the host's controller draining
                    // again parks again; the bound above keeps this finite.
                    // Then what the host sent after it.
                    if conn.parked.is_none() {
                        if let Err(f) = conn.process(&mut rb) {
                            conn.terminate(&f);
                        }
                    }
                }
            }
            _ = sleep_until(drain_deadline) => break,
        }
    }
    drop(grant_wait);
    let deadline = drain_deadline.unwrap_or_else(|| Instant::now() + drain_timeout);
    let abandoned = drain(&mut inflight, deadline).await;
    let ctrl = conn.unbind();
    if abandoned > 0 {
        conn.target.abandoned.add(abandoned);
        tracing::warn!(%peer, abandoned, "queue pair closed with commands still running on the bdev after the drain timeout; the controller is released once they end");
        let target = conn.target.clone();
        tokio::spawn(async move {
            while inflight.next().await.is_some() {}
            if let Some(c) = ctrl {
                target.queue_closed(&c);
            }
        });
    } else if let Some(c) = ctrl {
        conn.target.queue_closed(&c);
    }
}

#[cfg(test)]
mod tests {
    use nvmf::pdu::{encode_capsule_cmd_header, encode_ic_req, IcReq};

    use super::*;
    use crate::{SubsystemConfig, Target, TransportOptions};

    fn conn() -> Connection {
        let t = Target::new(TransportOptions::default(), metrics::Registry::new()).unwrap();
        t.add_subsystem(SubsystemConfig::new("nqn.2016-06.io.spdk:cnode1"))
            .unwrap();
        Connection::new(
            t.inner(),
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:4420".parse().unwrap(),
        )
    }

    fn feed(c: &mut Connection, bytes: &[u8]) -> Result<(), Box<Fatal>> {
        let mut rb = RecvBuf {
            buf: vec![0; 1 << 20],
            start: 0,
            end: bytes.len(),
        };
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
        assert!(!c.out.is_empty(), "ICResp queued");
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
        let mut c = Connection::new(t.inner(), "127.0.0.1:1".parse().unwrap(), listen);
        let mut input = wire::ic_req(wire::Digests::default()).to_vec();
        let (sqe, data) = wire::connect(1, NQN, HOST, [1; 16], 0, 32, 0xffff, 0);
        wire::put_command(&mut input, &sqe, Some(&data), wire::Digests::default());
        feed(&mut c, &input).unwrap();
        assert_eq!(c.state, ConnState::Serving);
        assert_eq!(sub.live_controllers().len(), 1);
        drop(c);
        assert!(sub.live_controllers().is_empty(), "controller torn down");
        assert!(
            t.inner().releasing(NQN, HOST).is_none(),
            "a reconnect of the host need not wait"
        );
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
