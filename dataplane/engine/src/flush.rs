//! Flushing dirty data to core, as plan generators the runtime calls
//! (io-caches-fast-devices 5.3).
//!
//! - [`FlushKind::Lazy`]: the runtime calls it when the volume is idle; it
//!   writes back up to `batch_blocks` dirty blocks whatever the dirty ratio.
//!   Under load nothing is flushed and write misses that find no clean
//!   victim bypass the cache, which the paper found best for tail latency.
//! - [`FlushKind::Aggressive`]: the runtime calls it periodically or after
//!   writes; it writes back a batch only while dirty bytes exceed
//!   `dirty_ratio` of the capacity (OpenCAS's ACP, dm-cache's default).
//!
//! - [`FlushKind::All`]: write back every dirty block, a batch per call,
//!   whatever the dirty ratio: the drain before a volume is deleted,
//!   snapshotted, switched out of write-back or shrunk. The runtime loops
//!   "plan, execute, complete" until [`Engine::dirty_bytes`] and
//!   [`Engine::writebacks_inflight`] are both zero; a call that selects
//!   nothing while dirty bytes remain means every dirty block is owned by
//!   in-flight work (its write-back, or a write): wait for a completion. New
//!   writes keep adding dirty data, so the runtime holds them back while
//!   draining.
//!
//! Blocks are chosen by a clock hand over the slabs, so consecutive calls
//! continue where the previous one stopped and every dirty block is reached
//! within one lap. Blocks being written back stay readable; writes to them
//! retry until the write-back ticket completes. Blocks being read are
//! written back too; blocks a write owns, or a refused write waits for, are
//! skipped until their next lap.

use crate::blocks::{make_id, FREE_KEY};
use crate::engine::Engine;
use crate::plan::{Op, Plan};

/// Which flushing policy to plan for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushKind {
    /// Idle-time flushing: always write back a batch.
    Lazy,
    /// Threshold flushing: write back a batch while above the dirty ratio.
    Aggressive,
    /// Drain: write back a batch of the dirty blocks not already being
    /// written back, whatever the ratio; call until clean.
    All,
}

impl Engine {
    /// Dirty bytes in the cache (not yet written back).
    pub fn dirty_bytes(&self) -> u64 {
        self.stats.dirty_bytes
    }

    /// Dirty bytes over capacity.
    pub fn dirty_ratio(&self) -> f64 {
        self.stats.dirty_bytes as f64 / self.capacity as f64
    }

    /// Plans write-backs into `plan` (cleared first; its request is empty).
    /// Returns the number of blocks selected; `plan.writeback_ticket` must be
    /// completed when the write-backs finish.
    pub fn plan_flush(&mut self, kind: FlushKind, plan: &mut Plan) -> u32 {
        plan.reset(Op::Write, 0, 0);
        if self.stats.dirty_bytes == 0
            || (kind == FlushKind::Aggressive && self.dirty_ratio() <= self.cfg.flush.dirty_ratio)
        {
            return 0;
        }
        let batch = self.cfg.flush.batch_blocks;
        let total: u64 = self
            .blocks
            .classes
            .iter()
            .map(|c| c.entries.len() as u64)
            .sum();
        let (mut class, mut slot) = self.flush_cursor;
        let mut picked = 0;
        let mut visited = 0u64;
        while picked < batch && visited < total {
            if class >= self.blocks.classes.len() {
                class = 0;
                slot = 0;
            }
            let len = self.blocks.classes[class].entries.len() as u32;
            if slot >= len {
                class += 1;
                slot = 0;
                continue;
            }
            let id = make_id(class, slot);
            if self.blocks.entry(id).key != FREE_KEY && self.can_write_back(id) {
                self.start_writeback(id, plan);
                picked += 1;
            }
            slot += 1;
            visited += 1;
        }
        self.flush_cursor = (class, slot);
        self.finish_flush_plan(plan);
        picked
    }
}
