//! The owner of one cached volume: the only state its engine runs in.
//!
//! It lives behind a mutex that its task ([`run`]) and the volume's callers
//! share. A caller that finds it free (always, on a one-thread runtime)
//! submits its request in place ([`Owner::submit_now`]); otherwise it sends
//! it ([`Msg::Io`]). The owner plans requests, polls their I/O
//! ([`super::exec`]) in its task, and with each outcome completes the
//! engine's tickets, records what is now on the device ([`super::meta`]) and
//! answers the host. A pure read hit is answered with a grant instead, and
//! the caller reads the cache device itself ([`super::hit`]). Requests the
//! engine refuses for now (`Retry`) wait in arrival order and are planned
//! again after each completion. Control calls (stats, flush, mode, policy,
//! resize, stop) arrive as [`Msg::Ctl`] and run between requests.

mod bypass;
mod control;
mod pump;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bdev::layered::ReadInline;
use bdev::{BdevError, DmaBuf, LocalReads};
use engine::{Completion, Engine, Extent, Op, Plan, PlanStatus, Stats, Ticket};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};

use super::clean::Cleaner;
use super::exec::{self, Devices, Outcome};
use super::hit::{since, HitDone, HitGrant, HitGuard, Pieces};
use super::meta::{Durability, MetaTable};
use super::params::{CacheMode, VolumeParams};
use super::slot::Slot;
use super::stats::RuntimeCounters;
use super::{Control, Shared, VolumeError};
use crate::layout::{VolumeRegion, UNIT_SIZE};

/// A host operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostOp {
    Read,
    Write { fua: bool },
    Deallocate,
}

/// What a host request is answered with.
pub(crate) enum Answer {
    /// Its outcome, with its buffer.
    Done(Option<DmaBuf>, Result<(), BdevError>),
    /// A pure read hit for the caller to read itself, with its buffer.
    Hit(HitGrant, DmaBuf),
}

/// What a read submitted in place ([`Owner::read_now`]) became.
pub(crate) enum Now {
    /// A pure hit for the caller to read at once: no channel was made.
    Hit(HitGrant, DmaBuf),
    /// Refused at once.
    Done(Option<DmaBuf>, Result<(), BdevError>),
    /// Queued or running: the answer comes on this channel.
    Wait(oneshot::Receiver<Answer>),
}

/// What became of a pure read hit.
enum Hit {
    /// Read already (a RAM cache device): the host's buffer and result.
    Served(DmaBuf, Result<(), BdevError>),
    /// For the caller to read.
    Granted(HitGrant, DmaBuf),
}

/// The way back to a host request's caller.
pub(crate) struct Reply(oneshot::Sender<Answer>);

impl Reply {
    pub(crate) fn channel() -> (Reply, oneshot::Receiver<Answer>) {
        let (tx, rx) = oneshot::channel();
        (Reply(tx), rx)
    }

    /// Answers with the outcome; fails when the caller went away.
    pub(crate) fn send(self, (buf, r): (Option<DmaBuf>, Result<(), BdevError>)) -> Result<(), ()> {
        self.0.send(Answer::Done(buf, r)).map_err(|_| ())
    }

    /// Hands over a hit. A caller that went away drops the grant, whose
    /// guard then gives the ticket back.
    fn grant(self, g: HitGrant, buf: DmaBuf) {
        let _ = self.0.send(Answer::Hit(g, buf));
    }
}

/// A host request on its way to the owner.
pub(crate) struct HostIo {
    pub op: HostOp,
    pub offset: u64,
    pub len: u64,
    pub buf: Option<DmaBuf>,
    pub reply: Reply,
    pub arrived: Instant,
}

/// What the owner receives.
pub(crate) enum Msg {
    Io(HostIo),
    Ctl(Control),
    MetaDone {
        unit: u32,
        version: u64,
        ok: bool,
    },
    BypassDone(u64, Option<DmaBuf>, Result<(), BdevError>),
    /// A granted hit's read ended, or its request went away.
    HitDone(HitDone),
}

/// A plan's I/O, yielding its request id and outcome.
type PlanIo = std::pin::Pin<Box<dyn std::future::Future<Output = (u64, Outcome)> + Send>>;

/// A request whose plan runs (or waits to run).
struct Running {
    op: HostOp,
    reply: Option<Reply>,
    arrived: Instant,
    ticket: Option<Ticket>,
    writeback_ticket: Option<Ticket>,
    /// Every byte came from the cache.
    hit: bool,
    /// Volume ranges whose blocks to re-record when it completes.
    touched: Vec<Extent>,
    /// A cleaning or flush plan (no host).
    cleaning: bool,
    /// Core ranges its plan writes (host writes to core, deallocates):
    /// fills planned later must not read them before they land.
    core_writes: Vec<Extent>,
    /// Cache ranges (address, length) its plan writes: blocks there are
    /// recorded by this request when it completes, never by another.
    cache_ranges: Vec<(u64, u64)>,
}

impl Running {
    fn new(op: HostOp, reply: Option<Reply>, arrived: Instant) -> Running {
        Running {
            op,
            reply,
            arrived,
            ticket: None,
            writeback_ticket: None,
            hit: false,
            touched: Vec::new(),
            cleaning: false,
            core_writes: Vec::new(),
            cache_ranges: Vec::new(),
        }
    }

    fn writes_cache(&self, addr: u64, len: u64) -> bool {
        self.cache_ranges
            .iter()
            .any(|&(a, l)| a < addr + len && addr < a + l)
    }
}

/// Cache ranges a plan writes.
fn cache_ranges(plan: &Plan) -> Vec<(u64, u64)> {
    plan.fills
        .iter()
        .chain(&plan.cache_writes)
        .chain(&plan.cache_zeroes)
        .map(|c| (c.cache_addr, c.len))
        .collect()
}

/// A request whose plan waits for durable metadata before its I/O.
struct BlockedStart {
    id: u64,
    need: Durability,
    /// Requests whose core writes overlap this plan's fills: a fill reading
    /// core before such a write lands would cache the old data as valid.
    after: Vec<u64>,
    plan: Plan,
    buf: Option<DmaBuf>,
    fua: bool,
}

/// A completed request waiting for durable metadata before its answer.
struct BlockedAck {
    need: Durability,
    reply: Reply,
    buf: Option<DmaBuf>,
    fua: bool,
}

/// A shrink whose cut blocks' removals are not durable yet.
struct Shrink {
    need: Durability,
    region: Arc<VolumeRegion>,
    capacity: u64,
    reply: oneshot::Sender<Result<(), VolumeError>>,
}

/// Control work that waits for every dirty block to be written back.
enum AfterFlush {
    Reply(oneshot::Sender<Result<(), VolumeError>>),
    SetMode(CacheMode, oneshot::Sender<Result<(), VolumeError>>),
    Stop {
        reply: oneshot::Sender<Result<(), VolumeError>>,
    },
}

pub(crate) struct Owner {
    pub engine: Engine,
    pub params: VolumeParams,
    pub mode: CacheMode,
    pub shared: Arc<Shared>,
    pub devices: Arc<Devices>,
    /// This volume's share of the cache device's read counters: hits read
    /// in place, under the owner's lock, count there without locked
    /// instructions (`bdev::LocalReads`).
    device_reads: LocalReads,
    pub region: Arc<VolumeRegion>,
    pub meta: MetaTable,
    pub rx: mpsc::UnboundedReceiver<Msg>,
    pub tx: mpsc::UnboundedSender<Msg>,
    pub cleaner: Cleaner,
    rt: RuntimeCounters,
    base: Stats,
    /// Requests the engine refused for now, with the plan each was refused
    /// in (the engine's FIFO contract: re-plan them in arrival order with
    /// that plan, before new requests).
    waiting: VecDeque<(HostIo, Plan)>,
    running: HashMap<u64, Running>,
    blocked_start: Vec<BlockedStart>,
    blocked_ack: Vec<BlockedAck>,
    bypass: Vec<(u64, Extent)>,
    /// Plans whose I/O runs, polled by the owner's loop.
    io: FuturesUnordered<PlanIo>,
    /// Bypassing writes waiting for the removal barrier.
    bypass_blocked: Vec<(u64, HostOp, u64, Option<DmaBuf>, Durability)>,
    /// Shrinks waiting for the removal of the blocks they cut.
    shrinks: Vec<Shrink>,
    next_id: u64,
    /// A flush-everything is under way, and what waits for it.
    flushing: bool,
    after_flush: Vec<AfterFlush>,
    flush_started: Option<Instant>,
    flush_done_bytes: u64,
    flush_error: Option<String>,
    /// A cleaning or flush plan runs.
    cleaning_running: bool,
    /// Sequential-cutoff stream state.
    seq_end: u64,
    seq_bytes: u64,
    stopping: bool,
    stop_reply: Option<oneshot::Sender<Result<(), VolumeError>>>,
    last_io: Instant,
    blocks: Vec<engine::BlockInfo>,
    /// Granted hits whose tickets have not come back.
    hits: usize,
    /// The plan of the last granted hit: the next request reuses its
    /// vectors.
    spare_plan: Plan,
    /// Wakes the owner's task when a caller in place gave it work.
    waker: Option<Waker>,
}

impl Owner {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        engine: Engine,
        params: VolumeParams,
        shared: Arc<Shared>,
        devices: Arc<Devices>,
        region: Arc<VolumeRegion>,
        meta: MetaTable,
        rx: mpsc::UnboundedReceiver<Msg>,
        tx: mpsc::UnboundedSender<Msg>,
    ) -> Owner {
        let cleaner = Cleaner::new(params.cleaning.clone());
        let device_reads = devices.cache.bdev().stats().local_reads();
        Owner {
            device_reads,
            mode: params.write_mode,
            base: Stats::default(),
            engine,
            params,
            shared,
            devices,
            region,
            meta,
            rx,
            tx,
            cleaner,
            rt: RuntimeCounters::default(),
            waiting: VecDeque::new(),
            running: HashMap::new(),
            blocked_start: Vec::new(),
            blocked_ack: Vec::new(),
            bypass: Vec::new(),
            io: FuturesUnordered::new(),
            bypass_blocked: Vec::new(),
            shrinks: Vec::new(),
            next_id: 0,
            flushing: false,
            after_flush: Vec::new(),
            flush_started: None,
            flush_done_bytes: 0,
            flush_error: None,
            cleaning_running: false,
            seq_end: u64::MAX,
            seq_bytes: 0,
            stopping: false,
            stop_reply: None,
            last_io: Instant::now(),
            blocks: Vec::new(),
            hits: 0,
            spare_plan: Plan::new(),
            waker: None,
        }
    }

    /// One pass of the owner's task: every message, plan completion and
    /// cleaning tick that is ready, each followed by [`Owner::pump`] (as
    /// after every event). Ready when stopped.
    fn poll_events(&mut self, cx: &mut Context<'_>, tick: &mut tokio::time::Interval) -> Poll<()> {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.waker = Some(cx.waker().clone());
        }
        loop {
            let mut progressed = false;
            match self.rx.poll_recv(cx) {
                Poll::Ready(None) => return Poll::Ready(()),
                Poll::Ready(Some(m)) => {
                    self.handle(m);
                    if self.after_event() {
                        return Poll::Ready(());
                    }
                    progressed = true;
                }
                Poll::Pending => {}
            }
            if !self.io.is_empty() {
                if let Poll::Ready(Some((id, out))) = self.io.poll_next_unpin(cx) {
                    self.done(id, out);
                    if self.after_event() {
                        return Poll::Ready(());
                    }
                    progressed = true;
                }
            }
            if tick.poll_tick(cx).is_ready() {
                self.clean_tick();
                if self.after_event() {
                    return Poll::Ready(());
                }
                progressed = true;
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    }

    /// After every event; true once stopped.
    fn after_event(&mut self) -> bool {
        self.pump();
        self.finished()
    }

    /// Submits a host request from its caller's task.
    pub(crate) fn submit_now(&mut self, io: HostIo) {
        let started = self.io.len();
        self.handle(Msg::Io(io));
        self.after_in_place(started);
    }

    /// Submits a read from its caller's task. A pure hit is handed back
    /// directly: on the hit path a oneshot channel (an allocation, a send,
    /// a poll and a free per read) would only carry the grant to the very
    /// task that is already here. Anything else gets a channel and takes
    /// [`Owner::submit_now`]'s path, in the same order of checks.
    pub(crate) fn read_now(&mut self, offset: u64, len: u64, buf: DmaBuf, arrived: Instant) -> Now {
        let ext = Extent { offset, len };
        let queued = |buf: DmaBuf| {
            let (reply, rx) = Reply::channel();
            let io = HostIo {
                op: HostOp::Read,
                offset,
                len,
                buf: Some(buf),
                reply,
                arrived,
            };
            (io, rx)
        };
        if self.stopping || self.bypass.iter().any(|(_, e)| overlaps(*e, ext)) {
            let (io, rx) = queued(buf);
            self.submit_now(io);
            return Now::Wait(rx);
        }
        self.last_io = arrived;
        let started = self.io.len();
        if self.should_bypass(HostOp::Read, offset, len) {
            let (io, rx) = queued(buf);
            self.start_bypass(io);
            self.after_in_place(started);
            return Now::Wait(rx);
        }
        let mut plan = std::mem::take(&mut self.spare_plan);
        if let Err(e) = self.engine.plan(Op::Read, offset, len, &mut plan) {
            self.spare_plan = plan;
            return Now::Done(Some(buf), Err(BdevError::InvalidArgument(e.to_string())));
        }
        if plan.status == PlanStatus::Retry || !is_pure_hit(&plan) {
            let (io, rx) = queued(buf);
            self.planned(io, plan);
            self.after_in_place(started);
            return Now::Wait(rx);
        }
        match self.take_hit(arrived, plan, buf) {
            Hit::Served(buf, r) => Now::Done(Some(buf), r),
            Hit::Granted(grant, buf) => Now::Hit(grant, buf),
        }
    }

    /// A read one cached block holds whole, on a RAM cache device: copied
    /// now, under the lock the caller holds, with no plan, ticket or pin
    /// ([`Engine::read_hit_now`]). `Err` hands the buffer back with nothing
    /// done or recorded: the caller submits the read ([`Self::read_now`]).
    pub(crate) fn read_hit_inline(
        &mut self,
        offset: u64,
        buf: DmaBuf,
        arrived: Instant,
    ) -> ReadInline<DmaBuf> {
        let len = buf.len() as u64;
        let ext = Extent { offset, len };
        if self.stopping
            || !self.devices.cache.bdev().bdev().reads_inline()
            || self.bypass.iter().any(|(_, e)| overlaps(*e, ext))
        {
            return Err(buf);
        }
        let Some(addr) = self.engine.read_hit_now(offset, len) else {
            return Err(buf);
        };
        self.last_io = arrived;
        // The sequential stream goes on; a cached range is never bypassed.
        let bypassed = self.should_bypass(HostOp::Read, offset, len);
        debug_assert!(!bypassed, "a cached range was bypassed");
        // Blocks are aligned to their size, at most a unit: one never
        // spans two units.
        debug_assert!(addr % UNIT_SIZE + len <= UNIT_SIZE);
        let dev = self.region.data_offset(addr);
        let Ok((buf, r, end)) = self.read_device_inline(dev, buf) else {
            unreachable!("RAM reads inline");
        };
        self.hit_ended(u64::from(r.is_err()), Some(since(arrived, end)));
        Ok((buf, r, end))
    }

    /// A granted hit ended, told from its caller's task.
    pub(crate) fn hit_done_now(&mut self, d: HitDone) {
        let started = self.io.len();
        self.hit_done(d);
        self.after_in_place(started);
    }

    fn after_in_place(&mut self, started: usize) {
        self.pump();
        // The task polls plan I/O and ends a stop; it sleeps until a
        // message, a completion or a tick wakes it, so it is woken when a
        // call in place gave it such work.
        if self.io.len() > started || self.stopping {
            if let Some(w) = &self.waker {
                w.wake_by_ref();
            }
        }
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Io(io) => {
                self.last_io = io.arrived;
                if self.stopping {
                    let _ = io.reply.send((io.buf, Err(gone(&self.params.name))));
                    return;
                }
                self.submit(io);
            }
            Msg::Ctl(c) => self.control(c),
            Msg::MetaDone { unit, version, ok } => {
                self.rt.meta_writes += 1;
                if !ok {
                    self.rt.errors.cache_volume_wr += 1;
                    self.rt.errors.total += 1;
                    self.degrade("metadata write failed");
                }
                self.meta.write_done(unit, version, ok);
            }
            Msg::BypassDone(id, buf, r) => {
                self.bypass.retain(|(i, _)| *i != id);
                if let Some(run) = self.running.remove(&id) {
                    if let Some(reply) = run.reply {
                        let _ = reply.send((buf, r));
                    }
                }
                self.retry_waiting();
            }
            Msg::HitDone(d) => self.hit_done(d),
        }
    }

    // ------------------------------------------------------------ requests

    fn submit(&mut self, io: HostIo) {
        let plan = std::mem::take(&mut self.spare_plan);
        self.submit_with(io, plan);
    }

    /// Plans `io` in `plan` (a fresh plan, or the one it was refused in).
    fn submit_with(&mut self, io: HostIo, mut plan: Plan) {
        let ext = Extent {
            offset: io.offset,
            len: io.len,
        };
        // Requests overlapping a bypassing one wait for it: a fill planned
        // now could read core before the bypassing write lands.
        if self.bypass.iter().any(|(_, e)| overlaps(*e, ext)) {
            self.waiting.push_back((io, Plan::new()));
            return;
        }
        if self.should_bypass(io.op, io.offset, io.len) {
            self.start_bypass(io);
            return;
        }
        if let Err(e) = self
            .engine
            .plan(engine_op(io.op), io.offset, io.len, &mut plan)
        {
            let _ = io
                .reply
                .send((io.buf, Err(BdevError::InvalidArgument(e.to_string()))));
            return;
        }
        self.planned(io, plan);
    }

    /// Runs, grants or queues `io` by its plan.
    fn planned(&mut self, io: HostIo, plan: Plan) {
        let op = engine_op(io.op);
        let ext = Extent {
            offset: io.offset,
            len: io.len,
        };
        if plan.status == PlanStatus::Retry {
            self.waiting.push_back((io, plan));
            return;
        }
        let io = match (io.buf, is_pure_hit(&plan)) {
            (Some(buf), true) => return self.grant_hit(io.reply, io.arrived, buf, plan),
            (buf, _) => HostIo { buf, ..io },
        };
        let id = self.id();
        let fua = matches!(io.op, HostOp::Write { fua: true });
        let mut touched = vec![ext];
        touched.extend(plan.fills.iter().map(|f| Extent {
            offset: f.offset,
            len: f.len,
        }));
        let hit = plan.fills.is_empty() && plan.core_reads.is_empty() && op == Op::Read;
        let after = self.fill_conflicts(&plan);
        let core_writes = plan
            .core_writes
            .iter()
            .chain(&plan.discards)
            .copied()
            .collect();
        let mut run = Running::new(io.op, Some(io.reply), io.arrived);
        run.ticket = plan.ticket;
        run.writeback_ticket = plan.writeback_ticket;
        run.hit = hit;
        run.touched = touched;
        run.core_writes = core_writes;
        run.cache_ranges = cache_ranges(&plan);
        self.running.insert(id, run);
        let need = self.prepare_slots(&plan);
        self.launch(id, plan, io.buf, fua, need, after);
    }

    /// Answers a pure read hit (see [`Self::take_hit`]).
    fn grant_hit(&mut self, reply: Reply, arrived: Instant, buf: DmaBuf, plan: Plan) {
        match self.take_hit(arrived, plan, buf) {
            Hit::Served(buf, r) => {
                let _ = reply.send((Some(buf), r));
            }
            Hit::Granted(grant, buf) => reply.grant(grant, buf),
        }
    }

    /// A pure read hit's `plan`: a RAM cache device copies at once, so the
    /// hit ends here, under the lock it was planned under; any other device
    /// is read by the caller (see [`super::hit`]), the plan's ticket staying
    /// out until that read ended. The plan's vectors are kept for the next
    /// request.
    fn take_hit(&mut self, arrived: Instant, plan: Plan, buf: DmaBuf) -> Hit {
        let pieces = Pieces::of(&self.region, &plan);
        let ticket = plan.ticket;
        self.spare_plan = plan;
        self.hits += 1;
        let buf = match pieces {
            Pieces::One(dev) => match self.read_device_inline(dev, buf) {
                Ok((buf, r, end)) => {
                    self.hit_done_now(HitDone {
                        ticket,
                        elapsed_ns: Some(since(arrived, end)),
                        failed_reads: u64::from(r.is_err()),
                    });
                    return Hit::Served(buf, r);
                }
                Err(buf) => buf,
            },
            Pieces::Many(_) => buf,
        };
        let guard = HitGuard::new(self.tx.clone(), ticket, arrived);
        Hit::Granted(HitGrant { pieces, guard }, buf)
    }

    /// A hit's read of the cache device at `dev`, in place when the device
    /// answers at once, counted in this volume's share of its counters.
    fn read_device_inline(&self, dev: u64, buf: DmaBuf) -> ReadInline<DmaBuf> {
        let device = self.devices.cache.bdev();
        device.read_inline_into(dev, buf, &self.device_reads)
    }

    #[cfg(test)]
    pub(crate) fn hits_in_flight(&self) -> usize {
        self.hits
    }

    /// A granted hit's ticket came back. Its blocks changed nothing on the
    /// device, so there is nothing to record (a plan writing into them
    /// records them itself).
    fn hit_done(&mut self, d: HitDone) {
        self.hits -= 1;
        let failed = d.failed_reads > 0;
        if let Some(t) = d.ticket {
            let r = if failed {
                Completion::Failed
            } else {
                Completion::Ok
            };
            let _ = self.engine.complete(t, r);
            self.forget_dropped();
        }
        self.hit_ended(d.failed_reads, d.elapsed_ns);
        self.retry_waiting();
    }

    /// Counts a hit's read: its failed device reads, and its latency unless
    /// its request went away.
    fn hit_ended(&mut self, failed_reads: u64, elapsed_ns: Option<u64>) {
        if failed_reads > 0 {
            let e = &mut self.rt.errors;
            e.cache_volume_rd += failed_reads;
            e.total += failed_reads;
            self.degrade("cache device I/O failed");
        }
        if let Some(ns) = elapsed_ns {
            self.rt.read_hit.add(ns);
        }
    }

    /// Takes out of the persisted table every entry the plan's data will
    /// overwrite or that left the cache, and says what must be durable
    /// before the plan's I/O may start.
    fn prepare_slots(&mut self, plan: &Plan) -> Option<Durability> {
        for e in &plan.evicted {
            self.meta.remove(e.cache_addr, e.offset);
        }
        for c in plan.fills.iter().chain(&plan.cache_writes) {
            self.blocks.clear();
            self.engine.blocks_in(c.offset, c.len, &mut self.blocks);
            for b in &self.blocks {
                self.meta.clear_cache_range(
                    b.cache_addr,
                    u64::from(b.size),
                    Some((b.offset, b.size)),
                );
            }
        }
        let writes_anything = !plan.fills.is_empty()
            || !plan.cache_writes.is_empty()
            || !plan.core_writes.is_empty()
            || !plan.discards.is_empty()
            || !plan.cache_zeroes.is_empty();
        if !writes_anything {
            return None;
        }
        let need = Durability {
            units: Vec::new(),
            removals: self.meta.removal_mark(),
        };
        (!self.meta.satisfied(&need)).then_some(need)
    }

    /// Running requests whose core writes overlap `plan`'s fills.
    fn fill_conflicts(&self, plan: &Plan) -> Vec<u64> {
        if plan.fills.is_empty() {
            return Vec::new();
        }
        self.running
            .iter()
            .filter(|(_, r)| {
                r.core_writes.iter().any(|w| {
                    plan.fills.iter().any(|f| {
                        overlaps(
                            *w,
                            Extent {
                                offset: f.offset,
                                len: f.len,
                            },
                        )
                    })
                })
            })
            .map(|(&id, _)| id)
            .collect()
    }

    fn launch(
        &mut self,
        id: u64,
        plan: Plan,
        buf: Option<DmaBuf>,
        fua: bool,
        need: Option<Durability>,
        after: Vec<u64>,
    ) {
        if need.is_some() || !after.is_empty() {
            self.blocked_start.push(BlockedStart {
                id,
                need: need.unwrap_or_default(),
                after,
                plan,
                buf,
                fua,
            });
            return;
        }
        // The owner polls the plan's I/O itself (no task per request, no
        // message back): devices wake it when they complete.
        let devices = self.devices.clone();
        let region = self.region.clone();
        self.io.push(Box::pin(async move {
            let out = exec::execute(&devices, &region, &plan, buf, fua).await;
            (id, out)
        }));
    }

    fn done(&mut self, id: u64, out: Outcome) {
        let Some(run) = self.running.remove(&id) else {
            return;
        };
        let result = if out.request_ok {
            Completion::Ok
        } else {
            Completion::Failed
        };
        if let Some(t) = run.ticket {
            let _ = self.engine.complete(t, result);
            self.forget_dropped();
        }
        if let Some(t) = run.writeback_ticket {
            let r = if out.writeback_ok {
                Completion::Ok
            } else {
                Completion::Failed
            };
            let _ = self.engine.complete(t, r);
            self.forget_dropped();
        }
        self.add_errors(&out);
        self.rt.flushed_bytes += out.written_back;
        if run.cleaning {
            self.cleaning_running = false;
            self.flush_done_bytes += out.written_back;
            if let Some(e) = &out.error {
                self.flush_error = Some(e.to_string());
            }
        }
        // Record what is now on the device: blocks the request filled,
        // wrote or trimmed, and blocks its write-backs cleaned.
        let mut units = Vec::new();
        for e in &run.touched {
            self.blocks.clear();
            self.engine.blocks_in(e.offset, e.len, &mut self.blocks);
            for b in &self.blocks {
                // A block another in-flight plan writes into has state on
                // the engine its data does not have yet: that plan records
                // it when it completes.
                let size = u64::from(b.size);
                if self
                    .running
                    .values()
                    .any(|r| r.writes_cache(b.cache_addr, size))
                {
                    continue;
                }
                if let Some(u) = self.meta.record(b) {
                    units.push(u);
                }
            }
        }
        let elapsed = run.arrived.elapsed().as_nanos() as u64;
        match run.op {
            HostOp::Read if !run.cleaning => {
                if run.hit {
                    self.rt.read_hit.add(elapsed)
                } else {
                    self.rt.read_miss.add(elapsed)
                }
            }
            HostOp::Write { .. } if !run.cleaning => self.rt.write.add(elapsed),
            _ => {}
        }
        if let Some(reply) = run.reply {
            let r = match out.error {
                Some(e) if !out.request_ok => Err(e),
                _ => Ok(()),
            };
            let fua = matches!(run.op, HostOp::Write { fua: true });
            // A write-back write is acknowledged once the entry that finds
            // its data is durable; every write waits for removals planned
            // before it (a stale entry must not outlive the write).
            let dirty_write = matches!(run.op, HostOp::Write { .. }) && self.mode == CacheMode::Wb;
            let need = Durability {
                // A deallocate waits too: its trimmed entries must be
                // durable before it is answered, or a crash brings the old
                // bytes back.
                units: if dirty_write || run.op == HostOp::Deallocate {
                    units
                } else {
                    Vec::new()
                },
                removals: if run.op == HostOp::Read {
                    0
                } else {
                    self.meta.removal_mark()
                },
            };
            if r.is_ok() && (!self.meta.satisfied(&need) || (fua && dirty_write)) {
                self.blocked_ack.push(BlockedAck {
                    need,
                    reply,
                    buf: out.buf,
                    fua: fua && dirty_write,
                });
            } else {
                let _ = reply.send((out.buf, r));
            }
        }
        self.retry_waiting();
    }

    /// Blocks a failed completion removed leave the persisted table too.
    fn forget_dropped(&mut self) {
        for i in 0..self.engine.dropped().len() {
            let e = self.engine.dropped()[i];
            self.meta.remove(e.cache_addr, e.offset);
        }
    }

    fn add_errors(&mut self, out: &Outcome) {
        let (a, b) = (&mut self.rt.errors, &out.errors);
        a.core_volume_rd += b.core_volume_rd;
        a.core_volume_wr += b.core_volume_wr;
        a.cache_volume_rd += b.cache_volume_rd;
        a.cache_volume_wr += b.cache_volume_wr;
        a.total += b.total;
        if out.cache_failed {
            self.degrade("cache device I/O failed");
        }
    }

    /// A failing cache device: the volume stops using it (pass-through);
    /// dirty data stays reported and is not dropped.
    fn degrade(&mut self, why: &str) {
        if self
            .shared
            .degraded
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        tracing::error!(bdev = %self.params.name, reason = why, dirty_bytes = self.engine.stats().dirty_bytes,
            "cache device failing: volume falls back to pass-through");
        // Removals (of the blocks forgotten below, or invalidated by later
        // pass-through writes) may never reach the failing device: a restart
        // must not trust clean blocks, whether or not I/O was in flight at
        // this moment (then the blocks stay in the table for now).
        self.params.load_clean = false;
        self.shared.set_params(&self.params);
        if self.engine.stats().dirty_bytes == 0 {
            // Nothing to lose: forget every cached block (reads and writes
            // then bypass the failing device entirely) and pass through.
            // Blocks being filled now fail on their own and roll back.
            if self.running.is_empty() && self.hits == 0 {
                // Their entries leave the device's table too (pass-through
                // writes go under the removal barrier), so that a restart
                // never brings a block back that core has since changed.
                for b in self.engine.cached_blocks() {
                    self.meta.remove(b.cache_addr, b.offset);
                }
                if let Ok(fresh) = Engine::new(self.engine.config().clone()) {
                    self.engine = fresh;
                }
            }
            // Cannot fail: nothing is dirty.
            let _ = self.set_mode_now(CacheMode::Pt);
        }
    }

    fn retry_waiting(&mut self) {
        let n = self.waiting.len();
        for _ in 0..n {
            let Some((io, plan)) = self.waiting.pop_front() else {
                break;
            };
            self.submit_with(io, plan);
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

/// Runs the owner's task until the volume stopped (or a caller panicked
/// while holding the owner).
pub(crate) async fn run(owner: Arc<Slot<Option<Owner>>>) {
    let period = match owner.lock().as_deref() {
        Ok(Some(o)) => o.cleaner.tick(),
        _ => return,
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    std::future::poll_fn(|cx| match owner.lock().as_deref_mut() {
        Ok(Some(o)) => o.poll_events(cx, &mut tick),
        _ => Poll::Ready(()),
    })
    .await;
    // Stopped, or a panic poisoned the lock: drop the owner, so that every
    // request still queued or running is answered (its reply dropped:
    // "stopped") and later ones fail at once instead of waiting on a
    // channel nobody reads.
    let owner = match owner.lock() {
        Ok(mut o) => o.take(),
        Err(p) => p.into_inner().take(),
    };
    drop(owner);
}

fn engine_op(op: HostOp) -> Op {
    match op {
        HostOp::Read => Op::Read,
        HostOp::Write { .. } => Op::Write,
        HostOp::Deallocate => Op::Deallocate,
    }
}

/// Only cache reads: nothing to fill, write back or persist first.
fn is_pure_hit(plan: &Plan) -> bool {
    plan.op == Op::Read
        && !plan.cache_reads.is_empty()
        && plan.fills.is_empty()
        && plan.core_reads.is_empty()
        && plan.writebacks.is_empty()
        && plan.writeback_ticket.is_none()
        && plan.evicted.is_empty()
}

fn overlaps(a: Extent, b: Extent) -> bool {
    a.offset < b.end() && b.offset < a.end()
}

fn meta_failed() -> BdevError {
    BdevError::InvalidArgument(
        "the cache device failed writing the metadata this request needs".into(),
    )
}

fn gone(name: &str) -> BdevError {
    BdevError::InvalidArgument(format!("cached bdev {name} is being deleted"))
}
