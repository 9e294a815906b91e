//! The invariant checker, shared by this crate's tests and (with the `check`
//! feature) by the dataplane's fuzz and soak tests.

use crate::blocks::{id_class, make_id, FREE_KEY, F_DIRTY, F_EXT, F_PINNED};
use crate::engine::Engine;
use crate::lru::NIL;
use std::collections::{BTreeMap, BTreeSet};

impl Engine {
    /// Checks every structural invariant; O(cached blocks). Returns the first
    /// violation found.
    ///
    /// Checked: indexes and slabs agree; blocks never overlap and stay inside
    /// the volume; every group holds one size, and its live/dirty/pinned
    /// counts match its blocks; free and in-use groups partition the space;
    /// the block LRU, group LRU and hole lists are consistent doubly-linked
    /// lists over exactly the blocks, in-use groups and holes; extents are
    /// well formed and the dirty byte counter matches them; pins match the
    /// tickets in flight; queued refused requests are in order and wait for
    /// tickets in flight.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let b = &self.blocks;
        let shift = self.sector_shift;
        let mut ranges = Vec::new();
        let mut live_ids = BTreeSet::new();
        let mut dirty_bytes = 0u64;
        let mut hole_ids = BTreeSet::new();
        let free: BTreeSet<u32> = self.groups.free.iter().copied().collect();
        if free.len() != self.groups.free.len() {
            return Err("a group is on the free list twice".into());
        }
        let mut in_use = 0u32;
        for (g, grp) in self.groups.groups.iter().enumerate() {
            let g = g as u32;
            if !grp.in_use {
                if !free.contains(&g) {
                    return Err(format!("group {g} neither in use nor free"));
                }
                continue;
            }
            if free.contains(&g) {
                return Err(format!("group {g} in use and free"));
            }
            in_use += 1;
            let class = grp.class as usize;
            let c = &b.classes[class];
            if c.chunk_group.get(grp.chunk as usize) != Some(&g) {
                return Err(format!("group {g}: chunk {} not owned", grp.chunk));
            }
            if (grp.cursor as u32) < c.per_group && self.groups.open[class] != g {
                return Err(format!("group {g} has free slots but is not open"));
            }
            let (mut live, mut dirty, mut pinned) = (0u16, 0u16, 0u16);
            for slot in 0..c.per_group {
                let idx = grp.chunk * c.per_group + slot;
                let id = make_id(class, idx);
                let e = c.entries[idx as usize];
                let f = c.flags[idx as usize];
                if slot >= grp.cursor as u32 {
                    if e.key != FREE_KEY || f != 0 {
                        return Err(format!("group {g}: block beyond the cursor"));
                    }
                    continue;
                }
                if e.key == FREE_KEY {
                    if f != 0 {
                        return Err(format!("hole {id:#x} has flags {f}"));
                    }
                    hole_ids.insert(id);
                    continue;
                }
                live += 1;
                live_ids.insert(id);
                if c.lookup(e.key) != Some(idx) {
                    return Err(format!("block {id:#x} (key {}) not indexed", e.key));
                }
                let start = (e.key as u64) << c.shift;
                let end = start + c.size as u64;
                if end > self.cfg.volume_size {
                    return Err(format!("block {id:#x} beyond the volume"));
                }
                ranges.push((start, end));
                let ext = b.ext(id);
                if (f & F_EXT != 0) != b.ext.contains(id) {
                    return Err(format!("block {id:#x}: F_EXT and side table disagree"));
                }
                if !(ext.valid_lo < ext.valid_hi && ext.valid_hi <= c.sectors) {
                    return Err(format!("block {id:#x}: bad valid extent {ext:?}"));
                }
                if ext.is_dirty() != (f & F_DIRTY != 0) {
                    return Err(format!("block {id:#x}: F_DIRTY and extent disagree"));
                }
                if ext.is_dirty() {
                    if !(ext.valid_lo <= ext.dirty_lo && ext.dirty_hi <= ext.valid_hi) {
                        return Err(format!("block {id:#x}: dirty outside valid {ext:?}"));
                    }
                    dirty += 1;
                    dirty_bytes += (ext.dirty_sectors() as u64) << shift;
                }
                if (f & F_PINNED != 0) != b.pins.contains(id) {
                    return Err(format!("block {id:#x}: F_PINNED and pin table disagree"));
                }
                if f & F_PINNED != 0 {
                    pinned += 1;
                }
            }
            if (live, dirty, pinned) != (grp.live, grp.dirty, grp.pinned) {
                return Err(format!(
                    "group {g}: counts (live, dirty, pinned) {:?} but blocks say {:?}",
                    (grp.live, grp.dirty, grp.pinned),
                    (live, dirty, pinned)
                ));
            }
        }
        if in_use as usize + free.len() != self.groups.groups.len() {
            return Err("groups: in use + free != all".into());
        }
        if (self.groups.groups.len() as u64) * self.cfg.group_size as u64 != self.capacity {
            return Err("capacity is not the group space".into());
        }
        for (class, &g) in self.groups.open.iter().enumerate() {
            if g != NIL {
                let grp = &self.groups.groups[g as usize];
                if !grp.in_use || grp.class as usize != class {
                    return Err(format!(
                        "open group {g} of class {class} is not in use by it"
                    ));
                }
            }
        }
        for (c, class) in b.classes.iter().enumerate() {
            let n = class.index.slots().count();
            if n as u32 != class.index.len() {
                return Err(format!("class {c}: index length"));
            }
            for slot in class.index.slots() {
                if !live_ids.contains(&make_id(c, slot)) {
                    return Err(format!("class {c}: index names a dead slot {slot}"));
                }
            }
        }
        let indexed: usize = b.classes.iter().map(|c| c.index.len() as usize).sum();
        if indexed != live_ids.len() || live_ids.len() as u64 != self.stats.cached_blocks {
            return Err(format!(
                "blocks: {} live, {} indexed, {} counted",
                live_ids.len(),
                indexed,
                self.stats.cached_blocks
            ));
        }
        let cached_bytes: u64 = ranges.iter().map(|(s, e)| e - s).sum();
        if cached_bytes != self.stats.cached_bytes || cached_bytes > self.capacity {
            return Err("cached bytes counter".into());
        }
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(format!("blocks overlap: {:?} and {:?}", w[0], w[1]));
            }
        }
        if dirty_bytes != self.stats.dirty_bytes {
            return Err(format!(
                "dirty bytes: counter {} but extents say {dirty_bytes}",
                self.stats.dirty_bytes
            ));
        }
        let lru: BTreeSet<u32> = b.lru.collect(&b.classes[..])?.into_iter().collect();
        if lru != live_ids {
            return Err("block LRU is not the set of cached blocks".into());
        }
        let glru: Vec<u32> = self.groups.lru.collect(&self.groups.groups[..])?;
        if glru.len() != in_use as usize
            || glru.iter().any(|&g| !self.groups.groups[g as usize].in_use)
        {
            return Err("group LRU is not the set of groups in use".into());
        }
        let mut holes = BTreeSet::new();
        for (c, list) in b.holes.iter().enumerate() {
            for id in list.collect(&b.classes[..])? {
                if id_class(id) != c {
                    return Err(format!("hole {id:#x} on the list of class {c}"));
                }
                holes.insert(id);
            }
        }
        if holes != hole_ids {
            return Err("hole lists are not the set of free slots below cursors".into());
        }
        // Pins against tickets.
        let mut expected: BTreeMap<u32, (u16, bool, bool)> = BTreeMap::new();
        for (r, writeback) in self.inflight_records() {
            for &(id, exclusive) in r {
                let e = expected.entry(id).or_default();
                if exclusive {
                    if e.1 || writeback {
                        return Err(format!("block {id:#x} pinned exclusively twice"));
                    }
                    e.1 = true;
                } else {
                    e.0 += 1;
                    if writeback {
                        if e.2 {
                            return Err(format!("block {id:#x} written back twice at once"));
                        }
                        e.2 = true;
                    }
                }
            }
        }
        for (id, (shared, exclusive, writeback)) in &expected {
            let p = b.pin(*id);
            if (p.shared, p.exclusive, p.writeback) != (*shared, *exclusive, *writeback) {
                return Err(format!(
                    "block {id:#x}: pin {p:?} but tickets say {:?}",
                    (shared, exclusive, writeback)
                ));
            }
            if p.exclusive && p.shared > 0 {
                return Err(format!("block {id:#x} pinned shared and exclusive"));
            }
        }
        if expected.len() != b.pins.len() {
            return Err("pins without tickets".into());
        }
        if self.waiters().windows(2).any(|w| w[0].seq >= w[1].seq) {
            return Err("refused requests out of order".into());
        }
        for w in self.waiters() {
            if !self.ticket_active(w.ticket) {
                return Err(format!("waiter {} waits for a completed ticket", w.seq));
            }
        }
        Ok(())
    }
}
