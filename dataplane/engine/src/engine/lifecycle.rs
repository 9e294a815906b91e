//! A block's life cycle, and the one place its state changes:
//! - inserted by a miss: exclusively pinned until its ticket completes, so
//!   nobody reads it before its fill lands; a failed ticket removes it;
//! - cached: readable (shared pins), writable (exclusive pin);
//! - dirty (write-back): never evicted; eviction and flushing first write it
//!   back under a shared pin (reads continue, also while it starts; writes
//!   retry), and only a clean block or group is reclaimed;
//! - removed: evicted (space reused at once), or invalidated (deallocate,
//!   failed I/O), which leaves a hole its size reuses first. Every removal
//!   is reported with its cache address (`Plan::evicted`, `dropped`).

use crate::blocks::{id_class, id_index, Ext, FREE_KEY, F_EXT, F_PINNED, F_REUSED};
use crate::eviction::BlockRef;

use super::Engine;

impl Engine {
    pub(crate) fn block_ref(&self, id: u32) -> BlockRef {
        BlockRef {
            id,
            class: id_class(id),
            slot: id_index(id),
            offset: self.blocks.offset(id),
            group: self.blocks.group(id),
            reused: self.blocks.flags(id) & F_REUSED != 0,
        }
    }

    /// Moves a block and its group to the heads of the LRU lists.
    pub(super) fn promote(&mut self, id: u32) {
        *self.blocks.flags_mut(id) |= F_REUSED;
        self.blocks
            .lru
            .move_to_front(&mut self.blocks.classes[..], id);
        let g = self.blocks.group(id);
        self.groups.touch(g);
    }

    /// Stores extents and keeps the dirty counters in step: the one place
    /// block state changes.
    pub(crate) fn set_ext(&mut self, id: u32, e: Ext) {
        let old = self.blocks.ext(id);
        let s = self.sector_shift;
        self.stats.dirty_bytes -= (old.dirty_sectors() as u64) << s;
        self.stats.dirty_bytes += (e.dirty_sectors() as u64) << s;
        if old.is_dirty() != e.is_dirty() {
            let g = self.blocks.group(id) as usize;
            if e.is_dirty() {
                self.groups.groups[g].dirty += 1;
            } else {
                self.groups.groups[g].dirty -= 1;
            }
        }
        self.blocks.store_ext(id, e);
    }

    pub(crate) fn insert_block(&mut self, id: u32, key: u32) {
        let class = id_class(id);
        let idx = id_index(id);
        let c = &mut self.blocks.classes[class];
        c.entries[idx as usize].key = key;
        c.flags[idx as usize] = 0;
        let entries = &c.entries;
        c.index.insert(key, idx, |s| entries[s as usize].key);
        self.blocks.lru.push_front(&mut self.blocks.classes[..], id);
        let g = self.blocks.group(id);
        self.groups.groups[g as usize].live += 1;
        self.groups.touch(g);
        self.eviction.on_insert(self.block_ref(id));
        let size = self.sizes[class] as u64;
        self.stats.cached_blocks += 1;
        self.stats.cached_bytes += size;
        self.stats.alloc[class].blocks += 1;
        self.stats.alloc[class].cached += 1;
    }

    /// Forgets a block. `to_hole`: the slot becomes a hole (and an emptied
    /// group is freed); otherwise the caller reuses the slot or the group.
    pub(super) fn remove_block(&mut self, id: u32, to_hole: bool) {
        let class = id_class(id);
        let idx = id_index(id);
        debug_assert_eq!(
            self.blocks.flags(id) & F_PINNED,
            0,
            "removing a pinned block"
        );
        let block = self.block_ref(id);
        let e = self.blocks.ext(id);
        let g = self.blocks.group(id);
        if e.is_dirty() {
            debug_assert!(to_hole, "evicting dirty data");
            let bytes = (e.dirty_sectors() as u64) << self.sector_shift;
            self.stats.dirty_bytes -= bytes;
            self.stats.discarded_dirty_bytes += bytes;
            self.groups.groups[g as usize].dirty -= 1;
        }
        if self.blocks.flags(id) & F_EXT != 0 {
            self.blocks.ext.remove(id);
        }
        let c = &mut self.blocks.classes[class];
        let key = c.entries[idx as usize].key;
        let entries = &c.entries;
        c.index.remove(key, |s| entries[s as usize].key);
        self.blocks.lru.remove(&mut self.blocks.classes[..], id);
        let c = &mut self.blocks.classes[class];
        c.entries[idx as usize].key = FREE_KEY;
        c.flags[idx as usize] = 0;
        self.eviction.on_remove(block, !to_hole);
        self.groups.groups[g as usize].live -= 1;
        let size = self.sizes[class] as u64;
        self.stats.cached_blocks -= 1;
        self.stats.cached_bytes -= size;
        self.stats.alloc[class].cached -= 1;
        if to_hole {
            self.blocks.holes[class].push_front(&mut self.blocks.classes[..], id);
            if self.groups.groups[g as usize].live == 0 && self.groups.open[class] != g {
                self.free_group(g);
            }
        }
    }
}
