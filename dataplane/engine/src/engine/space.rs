//! Space for a miss: admission, free slots (holes, the open group, free
//! groups) and reclaiming them on a full cache (AdaCache III.D).

use crate::admission::Candidate;
use crate::blocks::{id_class, make_id, FREE_KEY, F_DIRTY, F_PINNED};
use crate::eviction::Verdict;
use crate::lru::NIL;
use crate::plan::{Evicted, Op, Plan};

use super::Engine;

impl Engine {
    /// Admission, space and insertion for one Algorithm 2 block.
    pub(super) fn try_insert(
        &mut self,
        t: u32,
        op: Op,
        offset: u64,
        class: usize,
        plan: &mut Plan,
    ) -> Option<u32> {
        self.eviction.on_miss(offset);
        let needs_reclaim = self.needs_reclaim(class);
        let tail = self.blocks.lru.tail;
        let victim = (needs_reclaim && tail != NIL).then(|| self.blocks.offset(tail));
        let candidate = Candidate {
            op,
            offset,
            size: self.sizes[class],
        };
        if !self.admission.admit(&candidate, victim) {
            self.stats.admission_rejects += 1;
            return None;
        }
        let id = if needs_reclaim {
            if tail != NIL && !self.eviction.chooses_victims() {
                let cached = self.stats.cached_blocks as u32;
                let verdict = self
                    .eviction
                    .on_full_miss(offset, self.block_ref(tail), cached);
                if verdict == Verdict::Keep {
                    self.stats.lazy_keeps += 1;
                    self.promote(tail);
                    return None;
                }
            }
            match self.reclaim(class, plan) {
                Some(id) => id,
                None => {
                    self.stats.no_victim += 1;
                    return None;
                }
            }
        } else {
            self.alloc_free(class).expect("free space was found")
        };
        self.insert_block(id, (offset >> self.blocks.classes[class].shift) as u32);
        self.pin(t, id, true);
        self.tickets.push_new_block(t, id);
        Some(id)
    }

    pub(super) fn open_has_room(&self, class: usize) -> bool {
        let g = self.groups.open[class];
        g != NIL
            && (self.groups.groups[g as usize].cursor as u32) < self.blocks.classes[class].per_group
    }

    pub(super) fn needs_reclaim(&self, class: usize) -> bool {
        self.blocks.holes[class].len == 0
            && !self.open_has_room(class)
            && self.groups.free.is_empty()
    }

    /// A slot from a hole, the open group or a free group.
    pub(super) fn alloc_free(&mut self, class: usize) -> Option<u32> {
        if let Some(id) = self.blocks.holes[class].pop_front(&mut self.blocks.classes[..]) {
            return Some(id);
        }
        if let Some(id) = self.take_open_slot(class) {
            return Some(id);
        }
        let g = *self.groups.free.last()?;
        let chunk = self.blocks.classes[class].take_chunk(g);
        self.groups.open_free(class, chunk);
        self.take_open_slot(class)
    }

    pub(crate) fn take_open_slot(&mut self, class: usize) -> Option<u32> {
        let g = self.groups.open[class];
        if g == NIL {
            return None;
        }
        let per = self.blocks.classes[class].per_group;
        let grp = &mut self.groups.groups[g as usize];
        if grp.cursor as u32 >= per {
            self.groups.open[class] = NIL;
            return None;
        }
        let idx = grp.chunk * per + grp.cursor as u32;
        grp.cursor += 1;
        if grp.cursor as u32 == per {
            self.groups.open[class] = NIL;
        }
        Some(make_id(class, idx))
    }

    /// AdaCache III.D on a full cache: the block LRU tail if it has the
    /// wanted size, else the group LRU tail. Dirty victims are written back
    /// (and skipped) instead of waiting: the scan moves on to the next group,
    /// up to `max_victim_scan` groups, and a miss that finds nothing clean
    /// bypasses the cache (io-caches-fast-devices 5.3, Fig. 11c).
    pub(super) fn reclaim(&mut self, class: usize, plan: &mut Plan) -> Option<u32> {
        if self.eviction.chooses_victims() {
            return self.reclaim_chosen(class, plan);
        }
        let tail = self.blocks.lru.tail;
        if tail != NIL && id_class(tail) == class {
            let f = self.blocks.flags(tail);
            if f & (F_PINNED | F_DIRTY) == 0 {
                let g = self.blocks.group(tail);
                self.evict_block(tail, &mut plan.evicted);
                self.groups.touch(g);
                self.stats.replaced_blocks += 1;
                return Some(tail);
            }
            if !self.hold_dirty && self.can_write_back(tail) {
                self.start_writeback(tail, plan);
            }
        }
        let mut g = self.groups.lru.tail;
        let mut scanned = 0;
        while g != NIL && scanned < self.cfg.max_victim_scan {
            scanned += 1;
            let grp = self.groups.groups[g as usize];
            if grp.pinned == 0 && grp.dirty == 0 {
                self.evict_group(g, &mut plan.evicted);
                let chunk = self.blocks.classes[class].take_chunk(g);
                self.groups.assign(g, class, chunk);
                self.stats.evicted_groups += 1;
                return self.take_open_slot(class);
            }
            if grp.dirty > 0 {
                // Pinned or not: readers do not stop a write-back.
                self.clean_group(g, plan);
            }
            g = grp.prev;
        }
        None
    }

    pub(crate) fn evict_block(&mut self, id: u32, out: &mut Vec<Evicted>) {
        let size = self.blocks.size(id);
        out.push(Evicted {
            offset: self.blocks.offset(id),
            size,
            cache_addr: self.blocks.cache_addr(id),
        });
        self.stats.evicted_blocks += 1;
        self.stats.evicted_bytes += size as u64;
        self.remove_block(id, false);
    }

    /// Evicts every block of `g` and takes it off the LRU; the caller reuses it.
    pub(crate) fn evict_group(&mut self, g: u32, out: &mut Vec<Evicted>) {
        let grp = self.groups.groups[g as usize];
        let class = grp.class as usize;
        let per = self.blocks.classes[class].per_group;
        for slot in 0..grp.cursor as u32 {
            let id = make_id(class, grp.chunk * per + slot);
            if self.blocks.entry(id).key != FREE_KEY {
                self.evict_block(id, out);
            } else {
                self.blocks.holes[class].remove(&mut self.blocks.classes[..], id);
            }
        }
        self.blocks.classes[class].release_chunk(grp.chunk);
        self.groups.unlink(g);
    }

    /// Returns an empty, non-open group to the free list.
    pub(super) fn free_group(&mut self, g: u32) {
        let grp = self.groups.groups[g as usize];
        let class = grp.class as usize;
        let per = self.blocks.classes[class].per_group;
        for slot in 0..grp.cursor as u32 {
            let id = make_id(class, grp.chunk * per + slot);
            self.blocks.holes[class].remove(&mut self.blocks.classes[..], id);
        }
        self.blocks.classes[class].release_chunk(grp.chunk);
        self.groups.release(g);
    }
}
