//! Flushing: background cleaning plans, and flush-everything with the
//! control work that waits for it (an answer, a mode change, a stop).

use std::time::Instant;

use engine::{Extent, FlushKind, Plan};
use tokio::sync::oneshot;

use super::inflight::Running;
use super::Owner;
use crate::volume::clean::Cleaner;
use crate::volume::meta::SETTLE_AFTER;
use crate::volume::msg::HostOp;
use crate::volume::params::CacheMode;
use crate::volume::VolumeError;

/// Control work that waits for every dirty block to be written back.
pub(super) enum AfterFlush {
    Reply(oneshot::Sender<Result<(), VolumeError>>),
    SetMode(CacheMode, oneshot::Sender<Result<(), VolumeError>>),
    Stop {
        reply: oneshot::Sender<Result<(), VolumeError>>,
    },
    /// A new mirror lacks the dirty data from before it was attached.
    Synced,
}

/// Background cleaning: when it runs, and whether a cleaning (or flush)
/// plan runs now (one at a time).
pub(super) struct Cleaning {
    pub(super) policy: Cleaner,
    pub(super) running: bool,
}

impl Cleaning {
    pub(super) fn new(policy: Cleaner) -> Cleaning {
        Cleaning {
            policy,
            running: false,
        }
    }
}

/// A flush-everything: under way or not, what waits for it, and the
/// figures `bdev_adacache_flush_status` reports.
#[derive(Default)]
pub(super) struct FlushAll {
    pub(super) active: bool,
    /// What runs once it ends.
    pub(super) then: Vec<AfterFlush>,
    pub(super) started: Option<Instant>,
    pub(super) done_bytes: u64,
    /// The last write-back error: the flush ends with it.
    pub(super) error: Option<String>,
}

impl Owner {
    pub(super) fn start_cleaning_plan(&mut self, kind: FlushKind) -> u32 {
        let mut plan = Plan::new();
        let n = self.engine.plan_flush(kind, &mut plan);
        if plan.writeback_ticket.is_none() {
            return 0;
        }
        let id = self.inflight.new_id();
        let touched = plan
            .writebacks
            .iter()
            .map(|w| Extent {
                offset: w.offset,
                len: w.len,
            })
            .collect();
        let mut run = Running::new(HostOp::Write { fua: false }, None, Instant::now());
        run.ticket = plan.ticket;
        run.writeback_ticket = plan.writeback_ticket;
        run.written_back.clone_from(&touched);
        run.touched = touched;
        run.cleaning = true;
        self.inflight.running.insert(id, run);
        self.cleaning.running = true;
        self.launch(id, plan, None, false, None, Vec::new());
        n
    }

    pub(super) fn clean_tick(&mut self) {
        // Failed metadata writes are retried at this pace, not at once.
        self.meta.retry_failed();
        // Checksums of blocks left alone a while go into their entries.
        self.meta.settle(Instant::now(), SETTLE_AFTER);
        self.resume_sync();
        // Damaged dirty data fails every write-back of it again: only a
        // flush asked for tries (and reports it), background cleaning not.
        // A mirror cleans only when its owner says (`mark_clean`).
        if self.flush_all.active
            || !self.writes_back()
            || self.cleaning.running
            || self.stop.requested
            || !self.damage.is_empty()
        {
            return;
        }
        let busy = self.inflight.running.len() + self.inflight.hits;
        if let Some(kind) = self.cleaning.policy.due(
            Instant::now(),
            self.last_io,
            busy,
            self.engine.stats().dirty_bytes,
        ) {
            self.start_cleaning_plan(kind);
        }
    }

    /// Drives a flush-everything and the work waiting for it.
    pub(super) fn pump_flush(&mut self) {
        if !self.flush_all.active || self.cleaning.running {
            return;
        }
        // A volume made mirror meanwhile writes nothing back any more.
        if !self.writes_back()
            && self.engine.stats().dirty_bytes > 0
            && self.flush_all.error.is_none()
        {
            self.flush_all.error = Some(match self.held {
                true => format!(
                    "cached bdev {} was loaded with epoch {} and waits for its role to be confirmed (bdev_adacache_set_role) before it writes back",
                    self.params.name,
                    self.params.epoch.unwrap_or_default()
                ),
                false => format!(
                    "cached bdev {} is a mirror: its owner writes back",
                    self.params.name
                ),
            });
        }
        // A write-back that failed ends the flush with its error: core
        // refusing data would otherwise make flushing retry forever.
        let failed = self.flush_all.error.is_some();
        if !failed && self.engine.stats().dirty_bytes > 0 {
            // When every dirty block is held by host I/O this plans
            // nothing; the next completion pumps again.
            self.start_cleaning_plan(FlushKind::All);
            return;
        }
        if self.engine.writebacks_inflight() > 0 {
            return;
        }
        self.flush_all.active = false;
        for w in std::mem::take(&mut self.flush_all.then) {
            self.after_flush_step(w);
        }
    }

    pub(super) fn after_flush_step(&mut self, w: AfterFlush) {
        match w {
            AfterFlush::Reply(r) => {
                let _ = r.send(match &self.flush_all.error {
                    Some(e) => Err(VolumeError::Flush(e.clone())),
                    None => Ok(()),
                });
            }
            AfterFlush::SetMode(m, r) => {
                self.switching_to = None;
                let res = match &self.flush_all.error {
                    Some(e) => {
                        // Still write-back: writes are cached again.
                        let _ = self.engine.set_write_mode(self.mode.engine_mode());
                        Err(VolumeError::Flush(e.clone()))
                    }
                    None => self.set_mode_now(m),
                };
                let _ = r.send(res);
            }
            AfterFlush::Synced => {
                let e = self.flush_all.error.clone();
                self.synced(e.as_deref());
            }
            AfterFlush::Stop { reply } => match &self.flush_all.error {
                // Dirty data core refused stays: the volume keeps running.
                Some(e) => {
                    let _ = reply.send(Err(VolumeError::Flush(e.clone())));
                }
                None => {
                    self.stop.requested = true;
                    self.stop.reply = Some(reply);
                }
            },
        }
    }

    pub(super) fn begin_flush(&mut self, then: AfterFlush) {
        if !self.flush_all.active {
            self.flush_all.active = true;
            self.flush_all.started = Some(Instant::now());
            self.flush_all.done_bytes = 0;
            self.flush_all.error = None;
        }
        self.flush_all.then.push(then);
    }
}
