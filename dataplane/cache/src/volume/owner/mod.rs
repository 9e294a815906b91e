//! The owner of one cached volume: the only state its engine runs in.
//!
//! It lives behind a mutex that its task ([`run`]) and the volume's callers
//! share. A caller that finds it free (always, on a one-thread runtime)
//! submits its request in place ([`Owner::submit_now`]); otherwise it sends
//! it ([`Msg::Io`](super::msg::Msg)). The owner plans requests, polls their I/O
//! ([`super::exec`]) in its task, and with each outcome completes the
//! engine's tickets, records what is now on the device ([`super::meta`]) and
//! answers the host. A pure read hit is answered with a grant instead, and
//! the caller reads the cache device itself ([`super::hit`]). Requests the
//! engine refuses for now (`Retry`) wait in arrival order and are planned
//! again after each completion. Control calls (stats, flush, mode, policy,
//! resize, stop) arrive as [`Msg::Ctl`](super::msg::Msg) and run between requests.

mod barriers;
mod bypass;
mod control;
mod done;
mod flush;
mod grant;
mod in_place;
mod inflight;
mod pump;
mod requests;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bdev::{BdevError, DmaBuf, LocalReads};
use engine::{Engine, Extent, Op, Plan, Stats};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};

use super::clean::Cleaner;
use super::exec::Devices;
use super::meta::{Durability, MetaTable};
use super::msg::{HostIo, HostOp, Msg};
use super::params::{CacheMode, VolumeParams};
use super::slot::Slot;
use super::stats::RuntimeCounters;
use super::{Shared, VolumeError};
use crate::layout::VolumeRegion;
use barriers::{BlockedAck, BlockedStart, Shrink};
use flush::AfterFlush;
use inflight::{PlanIo, Running};

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
