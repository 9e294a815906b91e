//! Test helpers: a cache of unit-weight slots driven through one
//! [`Replacer`], so that a policy's unit tests read as access sequences.

use std::collections::HashMap;

use super::owned::Replacer;
use super::Offer;

/// Objects (tags) cached in `capacity` unit slots.
pub(crate) struct Sim {
    slot_of: HashMap<u32, u32>,
    owner: Vec<Option<u32>>,
    free: Vec<u32>,
    pub misses: u64,
}

impl Sim {
    pub fn new(capacity: u32) -> Sim {
        Sim {
            slot_of: HashMap::new(),
            owner: vec![None; capacity as usize],
            free: (0..capacity).rev().collect(),
            misses: 0,
        }
    }

    /// Requests `obj`: a hit, or a miss that evicts when the cache is full.
    pub fn access(&mut self, r: &mut dyn Replacer, obj: u32) -> bool {
        if let Some(&slot) = self.slot_of.get(&obj) {
            r.hit(slot);
            return true;
        }
        self.misses += 1;
        r.miss(obj);
        if self.free.is_empty() {
            let v = evict(r, |_| Offer::Take).expect("a full cache has a victim");
            r.remove(v, true);
            let old = self.owner[v as usize].take().expect("victim was cached");
            self.slot_of.remove(&old);
            self.free.push(v);
        }
        let slot = self.free.pop().expect("a slot was freed");
        r.insert(slot, obj, 1);
        self.owner[slot as usize] = Some(obj);
        self.slot_of.insert(obj, slot);
        false
    }

    /// A request for `obj` that the cache does not keep (frequency only).
    pub fn miss_only(&mut self, r: &mut dyn Replacer, obj: u32) {
        r.miss(obj);
    }

    pub fn cached(&self, obj: u32) -> bool {
        self.slot_of.contains_key(&obj)
    }

    pub fn slot(&self, obj: u32) -> u32 {
        self.slot_of[&obj]
    }
}

/// Asks `r` for a victim, answering with `f`.
pub(crate) fn evict(r: &mut dyn Replacer, mut f: impl FnMut(u32) -> Offer) -> Option<u32> {
    r.victim(&mut f)
}
