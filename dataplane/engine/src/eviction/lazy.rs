//! Lazy eviction: LEA (lea-lazy-eviction, Algorithm 2).
//!
//! LEL is the engine's global block LRU (head = insertion point, tail =
//! eviction point). BIL is a ghost list of block identities (granules: volume
//! offset / smallest block size) kept here, never longer than LEL. Per block
//! we keep `flag`, `last_access` and `reuse_distance` in arrays indexed by
//! the block's slab slot.
//!
//! On a full-cache miss of X with LEL.EP the block LRU tail:
//! - X not in BIL: if `LAZY_1` (EP.flag > 0) — CASE 1: halve EP.flag, keep EP
//!   (the engine moves it to the LRU head), insert X into BIL. Otherwise
//!   CASE 2: replace.
//! - X in BIL: if `LAZY_2` (EP.flag > 0 and EP.age < EP.reuse_distance ×
//!   EP.flag × K) — CASE 3: halve EP.flag, keep EP, move X to the BIL head.
//!   Otherwise CASE 4: EP's identity moves to BIL, X leaves BIL, replace.
//! - A hit (CASE 5) increments the flag and records the reuse distance.
//!   LEA's text defines age and reuse distance against the *last* access, so
//!   a hit also sets `last_access` (the pseudo-code only updates it on insert).
//!
//! An inserted block starts with `flag = PARA` and `reuse_distance = 0`.
//!
//! Groups: LEA judges only the block LRU tail, which is also the two-level
//! mechanism's first choice. When the engine must reclaim a whole group
//! instead (the tail has another size), the verdict still comes from the
//! tail block: a "valuable" tail postpones reclamation and its group moves to
//! the group LRU head with it. LEA thus throttles *how often* space is
//! reclaimed; *which* group goes stays the group LRU's choice. The logical
//! clock ticks once per request, not per block.

use super::{BlockRef, EvictionPolicy, Verdict};
use crate::lru::{List, NIL};
use crate::map::U32Map;

#[derive(Clone, Copy, Debug, Default)]
struct Meta {
    last_access: u32,
    reuse_distance: u32,
    flag: u32,
}

#[derive(Clone, Copy, Debug)]
struct Ghost {
    granule: u32,
    prev: u32,
    next: u32,
}

crate::lru::slice_links!(Ghost);

/// LEA lazy eviction.
#[derive(Clone, Debug)]
pub struct Lazy {
    para: u32,
    k: f64,
    cnt: u32,
    granule_shift: u32,
    meta: Vec<Vec<Meta>>,
    ghosts: Vec<Ghost>,
    ghost_free: Vec<u32>,
    ghost_index: U32Map<u32>,
    bil: List,
    kept: u64,
}

impl Lazy {
    /// `classes` block sizes; identities are offsets >> `granule_shift`.
    pub fn new(para: u32, k: f64, classes: usize, granule_shift: u32) -> Lazy {
        Lazy {
            para,
            k,
            cnt: 0,
            granule_shift,
            meta: vec![Vec::new(); classes],
            ghosts: Vec::new(),
            ghost_free: Vec::new(),
            ghost_index: U32Map::new(NIL),
            bil: List::new(),
            kept: 0,
        }
    }

    fn meta(&mut self, b: BlockRef) -> &mut Meta {
        let v = &mut self.meta[b.class];
        if v.len() <= b.slot as usize {
            v.resize(b.slot as usize + 1, Meta::default());
        }
        &mut v[b.slot as usize]
    }

    fn granule(&self, offset: u64) -> u32 {
        (offset >> self.granule_shift) as u32
    }

    /// Moves (or inserts) `granule` to the BIL insertion point, trimming BIL
    /// to `limit` identities.
    fn bil_touch(&mut self, granule: u32, limit: u32) {
        if let Some(n) = self.ghost_index.get(granule) {
            self.bil.move_to_front(&mut self.ghosts[..], n);
            return;
        }
        let g = Ghost {
            granule,
            prev: NIL,
            next: NIL,
        };
        let n = match self.ghost_free.pop() {
            Some(n) => {
                self.ghosts[n as usize] = g;
                n
            }
            None => {
                self.ghosts.push(g);
                self.ghosts.len() as u32 - 1
            }
        };
        self.bil.push_front(&mut self.ghosts[..], n);
        self.ghost_index.insert(granule, n);
        while self.bil.len > limit.max(1) {
            let ep = self.bil.tail;
            self.bil_remove_node(ep);
        }
    }

    fn bil_remove_node(&mut self, n: u32) {
        self.bil.remove(&mut self.ghosts[..], n);
        self.ghost_index.remove(self.ghosts[n as usize].granule);
        self.ghost_free.push(n);
    }

    /// Identities currently in BIL (for tests).
    pub fn bil_len(&self) -> u32 {
        self.bil.len
    }
}

impl EvictionPolicy for Lazy {
    fn name(&self) -> &'static str {
        "lazy"
    }

    fn on_request(&mut self) {
        self.cnt = self.cnt.wrapping_add(1);
    }

    fn on_insert(&mut self, block: BlockRef) {
        let (cnt, para) = (self.cnt, self.para);
        *self.meta(block) = Meta {
            last_access: cnt,
            reuse_distance: 0,
            flag: para,
        };
        let g = self.granule(block.offset);
        if let Some(n) = self.ghost_index.get(g) {
            self.bil_remove_node(n);
        }
    }

    fn on_hit(&mut self, block: BlockRef) {
        let cnt = self.cnt;
        let m = self.meta(block);
        m.flag = m.flag.saturating_add(1);
        m.reuse_distance = cnt.wrapping_sub(m.last_access);
        m.last_access = cnt;
    }

    fn on_remove(&mut self, block: BlockRef, _evicted: bool) {
        *self.meta(block) = Meta::default();
    }

    fn on_full_miss(&mut self, candidate: u64, victim: BlockRef, cached: u32) -> Verdict {
        let x = self.granule(candidate);
        let (cnt, k) = (self.cnt, self.k);
        let in_bil = self.ghost_index.contains(x);
        let ep = *self.meta(victim);
        let lazy = if in_bil {
            let age = cnt.wrapping_sub(ep.last_access) as f64;
            ep.flag > 0 && age < ep.reuse_distance as f64 * ep.flag as f64 * k
        } else {
            ep.flag > 0
        };
        if lazy {
            // CASE 1 / CASE 3
            self.meta(victim).flag >>= 1;
            self.bil_touch(x, cached);
            self.kept += 1;
            Verdict::Keep
        } else {
            if in_bil {
                // CASE 4: the victim's identity is remembered, X leaves BIL
                // when the engine inserts it (on_insert).
                let v = self.granule(victim.offset);
                self.bil_touch(v, cached);
            }
            // CASE 2 / CASE 4
            Verdict::Replace
        }
    }

    fn metadata_bytes(&self) -> usize {
        self.meta
            .iter()
            .map(|v| v.capacity() * std::mem::size_of::<Meta>())
            .sum::<usize>()
            + self.ghosts.capacity() * std::mem::size_of::<Ghost>()
            + self.ghost_free.capacity() * 4
            + self.ghost_index.memory_bytes()
    }

    fn kept(&self) -> u64 {
        self.kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(slot: u32, offset: u64) -> BlockRef {
        BlockRef {
            id: slot,
            class: 0,
            slot,
            offset,
            group: 0,
            reused: false,
        }
    }

    #[test]
    fn follows_the_five_cases() {
        let mut l = Lazy::new(2, 1.0, 1, 15);
        l.on_request();
        let ep = b(0, 0);
        l.on_insert(ep); // flag = PARA = 2
                         // CASE 1 twice (two different missed blocks): flag 2 -> 1 -> 0.
        l.on_request();
        assert_eq!(l.on_full_miss(1 << 15, ep, 4), Verdict::Keep);
        assert_eq!(l.bil_len(), 1);
        l.on_request();
        assert_eq!(l.on_full_miss(2 << 15, ep, 4), Verdict::Keep);
        assert_eq!(l.bil_len(), 2);
        // X is in BIL and EP.flag is 0: CASE 4 replaces and remembers EP.
        l.on_request();
        assert_eq!(l.on_full_miss(1 << 15, ep, 4), Verdict::Replace);
        l.on_remove(ep, true);
        l.on_insert(b(0, 1 << 15));
        assert!(l.ghost_index.contains(0), "EP identity in BIL");
        assert!(!l.ghost_index.contains(1), "X left BIL");
        // CASE 5 then CASE 3: a block re-accessed quickly stays.
        let x = b(0, 1 << 15);
        l.on_request();
        l.on_hit(x); // flag 3, reuse distance 1
        l.on_request();
        l.on_request();
        // age 2 < reuse_distance 1 * flag 3 * K 1
        assert_eq!(l.on_full_miss(0, x, 4), Verdict::Keep);
        assert_eq!(l.kept(), 3);
    }
}
