//! Two-level LRU (AdaCache III.D): always replace; the engine's block and
//! group LRU lists already hold all the state this policy needs.

use super::{BlockRef, EvictionPolicy, Verdict};

/// Always replaces the two-level victim.
#[derive(Clone, Copy, Debug, Default)]
pub struct TwoLevelLru;

impl EvictionPolicy for TwoLevelLru {
    fn name(&self) -> &'static str {
        "lru2"
    }
    fn on_request(&mut self) {}
    fn on_insert(&mut self, _block: BlockRef) {}
    fn on_hit(&mut self, _block: BlockRef) {}
    fn on_remove(&mut self, _block: BlockRef, _evicted: bool) {}
    fn on_full_miss(&mut self, _candidate: u64, _victim: BlockRef, _cached: u32) -> Verdict {
        Verdict::Replace
    }
    fn metadata_bytes(&self) -> usize {
        0
    }
    fn kept(&self) -> u64 {
        0
    }
}
