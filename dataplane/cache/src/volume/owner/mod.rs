//! The owner of one cached volume: the only state its engine runs in.
//!
//! It lives behind a mutex that its task ([`run`]) and the volume's callers
//! share. A caller that finds it free (always, on a one-thread runtime)
//! submits its request in place ([`Owner::submit_now`]); otherwise it sends
//! it (`Msg::Io`; the messages are in [`super::msg`]). The owner plans
//! requests, polls their I/O ([`super::exec`]) in its task, and with each
//! outcome completes the engine's tickets, records what is now on the
//! device ([`super::meta`]) and answers the host. A pure read hit is
//! answered with a grant instead, and the caller reads the cache device
//! itself ([`super::hit`]). Requests the engine refuses for now (`Retry`)
//! wait in arrival order and are planned again after each completion.
//! Control calls (stats, flush, mode, policy, resize, stop) arrive as
//! `Msg::Ctl` and run between requests.

mod barriers;
mod bypass;
mod control;
mod damage;
mod done;
mod flush;
mod grant;
mod in_place;
mod inflight;
mod pump;
mod replicate;
mod requests;

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bdev::{BdevError, LocalReads};
use engine::{Engine, Extent, Op, Plan, Stats};
use futures_util::stream::StreamExt;
use tokio::sync::{mpsc, oneshot};

use super::clean::Cleaner;
use super::exec::Devices;
use super::meta::MetaTable;
use super::msg::{HostIo, HostOp, Msg};
use super::params::{CacheMode, VolumeParams};
use super::slot::Slot;
use super::stats::RuntimeCounters;
use super::{Shared, VolumeError};
use crate::layout::VolumeRegion;
use barriers::Barriers;
use bypass::SeqStream;
use flush::{Cleaning, FlushAll};
use inflight::InFlight;

/// A volume's owner. Its parts, each in its own file: the requests in
/// flight (`inflight.rs`), the work waiting for durable metadata
/// (`barriers.rs`), flushing (`flush.rs`), the sequential cutoff
/// (`bypass.rs`).
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
    rt: RuntimeCounters,
    base: Stats,
    /// Requests the engine refused for now, with the plan each was refused
    /// in (the engine's FIFO contract: re-plan them in arrival order with
    /// that plan, before new requests).
    waiting: VecDeque<(HostIo, Plan)>,
    /// Plans, bypassing requests and granted hits under way.
    inflight: InFlight,
    /// Work waiting for durable metadata.
    barriers: Barriers,
    /// Background cleaning: when, and whether its plan runs.
    cleaning: Cleaning,
    /// A flush-everything and what waits for it.
    flush_all: FlushAll,
    /// The sequential cutoff's stream.
    seq: SeqStream,
    /// A stop asked for, and its answer.
    stop: Stop,
    last_io: Instant,
    blocks: Vec<engine::BlockInfo>,
    /// The plan of the last granted hit: the next request reuses its
    /// vectors.
    spare_plan: Plan,
    /// Wakes the owner's task when a caller in place gave it work.
    waker: Option<Waker>,
    /// Dirty data that failed its checksum.
    damage: damage::Damage,
    /// What the read being served verifies (kept for its capacity).
    checks: Vec<crate::volume::meta::ReadCheck>,
    /// A change of mode out of write-back under way (its flush runs).
    switching_to: Option<CacheMode>,
    /// The mirror writes are forwarded to (`replicate.rs`).
    replication: replicate::Replication,
    /// Loaded with an epoch and not confirmed since: writes nothing back
    /// (`VolumeParams::epoch`).
    held: bool,
}

/// A stop asked for: the owner leaves once nothing is left (see
/// `Owner::finished`).
#[derive(Default)]
struct Stop {
    requested: bool,
    reply: Option<oneshot::Sender<Result<(), VolumeError>>>,
}

impl Owner {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mut engine: Engine,
        params: VolumeParams,
        shared: Arc<Shared>,
        devices: Arc<Devices>,
        region: Arc<VolumeRegion>,
        meta: MetaTable,
        rx: mpsc::UnboundedReceiver<Msg>,
        tx: mpsc::UnboundedSender<Msg>,
    ) -> Owner {
        let cleaning = Cleaning::new(Cleaner::new(params.cleaning.clone()));
        let held = params.load && params.epoch.is_some();
        engine.set_hold_dirty(held || params.role == crate::volume::replica::Role::Mirror);
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
            rt: RuntimeCounters::default(),
            waiting: VecDeque::new(),
            inflight: InFlight::default(),
            barriers: Barriers::default(),
            cleaning,
            flush_all: FlushAll::default(),
            seq: SeqStream::default(),
            stop: Stop::default(),
            last_io: Instant::now(),
            blocks: Vec::new(),
            spare_plan: Plan::new(),
            waker: None,
            damage: damage::Damage::default(),
            checks: Vec::new(),
            switching_to: None,
            replication: replicate::Replication::default(),
            held,
        }
    }

    /// Starts with `ranges` damaged (what the load found).
    pub fn with_damage(mut self, ranges: &[Extent]) -> Owner {
        self.note_damaged(ranges);
        self
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
            if !self.inflight.io.is_empty() {
                if let Poll::Ready(Some((id, out))) = self.inflight.io.poll_next_unpin(cx) {
                    self.done(id, out);
                    if self.after_event() {
                        return Poll::Ready(());
                    }
                    progressed = true;
                }
            }
            if self.poll_replica(cx) {
                if self.after_event() {
                    return Poll::Ready(());
                }
                progressed = true;
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
                if self.stop.requested {
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
                self.inflight.bypass.retain(|(i, _)| *i != id);
                if let Some(run) = self.inflight.running.remove(&id) {
                    if let Some(reply) = run.reply {
                        let _ = reply.send((buf, r));
                    }
                }
                self.retry_waiting();
            }
            Msg::HitDone(d) => self.hit_done(d),
        }
    }
}

/// Runs the owner's task until the volume stopped (or a caller panicked
/// while holding the owner).
pub(crate) async fn run(owner: Arc<Slot<Option<Owner>>>) {
    let period = match owner.lock().as_deref() {
        Ok(Some(o)) => o.cleaning.policy.tick(),
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
