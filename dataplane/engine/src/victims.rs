//! Making room under a policy that chooses its own victims (S3-FIFO, SIEVE,
//! ARC, W-TinyLFU; see [`crate::eviction::Owned`]).
//!
//! The policy proposes blocks in its eviction order; the engine takes the
//! first clean, unpinned block of the wanted size and reuses its slot. A
//! proposal of another size ends the block scan: as in AdaCache III.D the
//! engine then frees a whole group, the one the policy's group instance
//! proposes. Dirty candidates are written back and passed over (they are
//! clean, and evictable, once the write-back completes), so a miss never
//! waits for core; a scan that finds nothing evictable within its limit
//! bypasses the cache, like the two-level LRU's.

use crate::blocks::{id_class, F_DIRTY, F_PINNED};
use crate::engine::Engine;
use crate::eviction::Offer;
use crate::lru::NIL;
use crate::plan::Plan;

impl Engine {
    /// A slot of `class` on a full cache, or `None` (the miss bypasses).
    pub(crate) fn reclaim_chosen(&mut self, class: usize, plan: &mut Plan) -> Option<u32> {
        if let Some(id) = self.chosen_block(class, plan) {
            let g = self.blocks.group(id);
            self.evict_block(id, &mut plan.evicted);
            self.groups.touch(g);
            self.stats.replaced_blocks += 1;
            return Some(id);
        }
        // An open group of another size whose blocks all left (invalidated
        // or failed fills) holds no block for the policy to name: it is the
        // cheapest group to take.
        let empty = self.groups.open.iter().copied().find(|&g| {
            g != NIL && {
                let grp = &self.groups.groups[g as usize];
                grp.live == 0 && grp.pinned == 0
            }
        });
        let g = match empty {
            Some(g) => g,
            None => self.chosen_group(plan)?,
        };
        self.evict_group(g, &mut plan.evicted);
        let chunk = self.blocks.classes[class].take_chunk(g);
        self.groups.assign(g, class, chunk);
        self.stats.evicted_groups += 1;
        self.take_open_slot(class)
    }

    /// The policy's block victim, if it has the wanted size. Passes over as
    /// many blocks as the two-level scan would look at in its groups.
    fn chosen_block(&mut self, class: usize, plan: &mut Plan) -> Option<u32> {
        let limit = self.cfg.max_victim_scan * self.blocks.classes[class].per_group;
        let mut skipped = std::mem::take(&mut self.scratch.skipped);
        skipped.clear();
        let blocks = &self.blocks;
        let mut passed = 0;
        let victim = self.eviction.block_victim(&mut |id| {
            if id_class(id) != class {
                return Offer::Stop;
            }
            let f = blocks.flags(id);
            if f & (F_PINNED | F_DIRTY) == 0 {
                return Offer::Take;
            }
            if f & F_DIRTY != 0 {
                skipped.push(id);
            }
            passed += 1;
            if passed >= limit {
                Offer::Stop
            } else {
                Offer::Skip
            }
        });
        for &id in &skipped {
            if !self.hold_dirty && self.can_write_back(id) {
                self.start_writeback(id, plan);
            }
        }
        self.scratch.skipped = skipped;
        victim
    }

    /// The policy's group victim: clean and unpinned, within
    /// `max_victim_scan` proposals.
    fn chosen_group(&mut self, plan: &mut Plan) -> Option<u32> {
        let limit = self.cfg.max_victim_scan;
        let mut skipped = std::mem::take(&mut self.scratch.skipped);
        skipped.clear();
        let groups = &self.groups;
        let mut passed = 0;
        let victim = self.eviction.group_victim(&mut |g| {
            let grp = &groups.groups[g as usize];
            if grp.pinned == 0 && grp.dirty == 0 {
                return Offer::Take;
            }
            if grp.dirty > 0 {
                // Pinned or not: readers do not stop a write-back.
                skipped.push(g);
            }
            passed += 1;
            if passed >= limit {
                Offer::Stop
            } else {
                Offer::Skip
            }
        });
        for &g in &skipped {
            self.clean_group(g, plan);
        }
        self.scratch.skipped = skipped;
        victim
    }
}
