//! Write-backs: which dirty blocks may go to core now, and the write-back
//! ticket a plan's write-backs share.

use crate::blocks::{make_id, FREE_KEY, F_DIRTY, F_PINNED};
use crate::plan::{Op, Plan, Ticket};

use super::Engine;

impl Engine {
    pub(crate) fn clean_group(&mut self, g: u32, plan: &mut Plan) {
        if self.hold_dirty {
            return;
        }
        let grp = self.groups.groups[g as usize];
        let class = grp.class as usize;
        let per = self.blocks.classes[class].per_group;
        for slot in 0..grp.cursor as u32 {
            let id = make_id(class, grp.chunk * per + slot);
            if self.blocks.entry(id).key != FREE_KEY && self.can_write_back(id) {
                self.start_writeback(id, plan);
            }
        }
    }

    /// A dirty block can be written back unless a write owns it, a
    /// write-back is already in flight, or a refused write waits for it. A
    /// write-back only reads the cache, so readers do not stop it: a dirty
    /// block that is read all the time still gets cleaned.
    pub(crate) fn can_write_back(&self, id: u32) -> bool {
        let f = self.blocks.flags(id);
        if f & F_DIRTY == 0 {
            return false;
        }
        if f & F_PINNED != 0 {
            let p = self.blocks.pin(id);
            if p.exclusive || p.writeback {
                return false;
            }
        }
        if self.waiters.is_empty() {
            return true;
        }
        let start = self.blocks.offset(id);
        let end = start + self.blocks.size(id) as u64;
        !self.waiters.write_waits_on(start, end)
    }

    /// Adds a block's dirty extent to the plan's write-backs.
    pub(crate) fn start_writeback(&mut self, id: u32, plan: &mut Plan) {
        let w = self.plan_writeback_ticket();
        let e = self.blocks.ext(id);
        let start = self.blocks.offset(id);
        let s = self.sector_shift;
        let ds = start + ((e.dirty_lo as u64) << s);
        let len = (e.dirty_sectors() as u64) << s;
        let addr = self.blocks.cache_addr(id);
        Plan::push_io(&mut plan.writebacks, ds, len, addr + ds - start);
        self.pin(w, id, false);
        self.stats.writeback_blocks += 1;
        self.stats.writeback_bytes += len;
    }

    /// Finishes the write-back ticket of a flush plan.
    pub(crate) fn finish_flush_plan(&mut self, plan: &mut Plan) {
        plan.writeback_ticket = self.tickets.take_plan_writeback().map(Ticket);
        self.count_volumes(plan);
    }
}

impl Engine {
    /// With `hold`, reclaiming space never writes a dirty block back: only
    /// clean blocks are evicted, and a miss that finds none bypasses the
    /// cache. For a mirror, whose dirty data another server writes back
    /// (its own write-back of an older copy could land in core after the
    /// owner's newer one).
    pub fn set_hold_dirty(&mut self, hold: bool) {
        self.hold_dirty = hold;
    }

    /// Plans write-backs of the dirty blocks whose dirty bytes lie wholly
    /// in `[offset, offset + len)` and that may be written back now, into
    /// `plan` (cleared first). A mirror completes the ticket without any
    /// I/O when its owner says those bytes reached core: the blocks become
    /// clean exactly as after a write-back of their own. A block whose
    /// dirty bytes reach past the range stays dirty (writing the same bytes
    /// back again later is harmless; cleaning bytes core lacks is not).
    pub fn plan_flush_range(&mut self, offset: u64, len: u64, plan: &mut Plan) -> u32 {
        plan.reset(Op::Write, 0, 0);
        let end = offset.saturating_add(len).min(self.cfg.volume_size);
        let mut picked = 0;
        if self.stats.dirty_bytes == 0 || offset >= end {
            return 0;
        }
        let s = self.sector_shift;
        for c in 0..self.blocks.classes.len() {
            let class = &self.blocks.classes[c];
            if class.index.len() == 0 {
                continue;
            }
            let shift = class.shift;
            for key in (offset >> shift)..=((end - 1) >> shift) {
                let Some(slot) = self.blocks.classes[c].lookup(key as u32) else {
                    continue;
                };
                let id = make_id(c, slot);
                if !self.can_write_back(id) {
                    continue;
                }
                let e = self.blocks.ext(id);
                let start = self.blocks.offset(id);
                let lo = start + ((e.dirty_lo as u64) << s);
                let hi = lo + ((e.dirty_sectors() as u64) << s);
                if offset <= lo && hi <= end {
                    self.start_writeback(id, plan);
                    picked += 1;
                }
            }
        }
        // Not counted as core traffic: nothing is written.
        plan.writeback_ticket = self.tickets.take_plan_writeback().map(Ticket);
        picked
    }
}
