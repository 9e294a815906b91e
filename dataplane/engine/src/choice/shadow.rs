//! A shadow cache: one eviction algorithm replayed on the sampled granules
//! only, with unit weights and no data. It answers one question, "how
//! often would this policy have missed", at `rate` of the cost of a cache.

use crate::eviction::{replacer, Offer, Replacer};
use crate::map::U32Map;
use crate::EvictionConfig;

const NO_SLOT: u32 = u32::MAX;

/// One policy's shadow over the sampled granules.
pub(crate) struct ShadowCache {
    pub policy: EvictionConfig,
    replacer: Box<dyn Replacer>,
    /// Sampled granule (truncated to `u32`, as the policies' tags are) to
    /// its slot.
    slot_of: U32Map<u32>,
    granule_of: Vec<u32>,
    free: Vec<u32>,
    pub misses: u64,
}

impl ShadowCache {
    /// A shadow of `slots` granules.
    pub fn new(policy: EvictionConfig, slots: u32) -> ShadowCache {
        let slots = slots.max(1);
        ShadowCache {
            replacer: replacer(&policy)(slots as u64, slots as u64, true),
            policy,
            slot_of: U32Map::new(NO_SLOT),
            granule_of: vec![0; slots as usize],
            free: (0..slots).rev().collect(),
            misses: 0,
        }
    }

    /// Replays one access; returns whether it hit.
    pub fn access(&mut self, granule: u32) -> bool {
        if let Some(slot) = self.slot_of.get(granule) {
            self.replacer.hit(slot);
            return true;
        }
        self.misses += 1;
        self.replacer.miss(granule);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                let Some(v) = self.replacer.victim(&mut |_| Offer::Take) else {
                    return false;
                };
                self.replacer.remove(v, true);
                self.slot_of.remove(self.granule_of[v as usize]);
                v
            }
        };
        self.replacer.insert(slot, granule, 1);
        self.granule_of[slot as usize] = granule;
        self.slot_of.insert(granule, slot);
        false
    }

    /// Whether every slot has been filled once (the shadow now evicts).
    pub fn full(&self) -> bool {
        self.free.is_empty()
    }

    pub fn memory_bytes(&self) -> usize {
        self.replacer.memory_bytes()
            + self.slot_of.memory_bytes()
            + (self.granule_of.capacity() + self.free.capacity()) * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_misses_like_the_policy() {
        let mut s = ShadowCache::new(EvictionConfig::TwoLevelLru, 2);
        let hits: Vec<bool> = [1, 2, 1, 3, 2, 1].iter().map(|&g| s.access(g)).collect();
        assert_eq!(hits, [false, false, true, false, false, false]);
        assert_eq!(s.misses, 5);
    }
}
