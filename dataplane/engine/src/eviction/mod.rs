//! Eviction: whether, on a full cache, the two-level victim is replaced.
//!
//! The mechanism is fixed and lives in the engine: blocks sit on a global
//! block LRU and groups on a group LRU (AdaCache III.D); to make room the
//! engine replaces the block LRU tail when it has the wanted size and
//! otherwise reclaims the LRU group. A policy only decides *whether* to
//! replace at all ([`Verdict`]), and observes inserts, hits and removals to
//! keep its own per-block state.

mod lazy;
mod lru2;

pub use lazy::Lazy;
pub use lru2::TwoLevelLru;

use crate::config::{Config, EvictionConfig};

/// A cached block as policies see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRef {
    /// Engine-internal block id, stable while the block is cached.
    pub id: u32,
    /// Size class (index into the sorted block sizes).
    pub class: usize,
    /// Slot of the block in its class's slab (dense, for per-block arrays).
    pub slot: u32,
    /// Volume offset of the block.
    pub offset: u64,
}

/// The answer to a full-cache miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Reclaim space (block or group) and insert the missed block.
    Replace,
    /// Be lazy: keep the victim (the engine moves it and its group to the
    /// LRU heads) and serve the miss from core without caching it.
    Keep,
}

/// Decides replacement on a full cache.
///
/// Contract:
/// - [`on_request`](Self::on_request) is called once per planned request,
///   before any other call for that request: it is the logical clock.
/// - Every cached block is announced by exactly one
///   [`on_insert`](Self::on_insert) and leaves with exactly one
///   [`on_remove`](Self::on_remove); [`on_hit`](Self::on_hit) only names
///   blocks between the two. Ids and slots are reused after removal.
/// - [`on_full_miss`](Self::on_full_miss) is called only when the cache has
///   no free space for a missed block; `victim` is the block LRU tail.
///   `cached_blocks` is the number of blocks cached (LEA's list length).
/// - A policy MUST be deterministic and MUST NOT hold references into the
///   engine; it MUST bound its memory by the number of cached blocks and
///   report it in [`metadata_bytes`](Self::metadata_bytes).
/// - Returning [`Verdict::Keep`] MUST NOT be the answer forever: the policy
///   MUST make the victim less valuable each time it keeps it (LEA halves
///   its flag), so the cache keeps admitting.
pub trait EvictionPolicy: Send {
    /// Short name (`lru2`, `lazy`).
    fn name(&self) -> &'static str;
    /// Advances the logical clock.
    fn on_request(&mut self);
    /// `block` was inserted.
    fn on_insert(&mut self, block: BlockRef);
    /// `block` was hit.
    fn on_hit(&mut self, block: BlockRef);
    /// `block` left the cache (evicted or invalidated).
    fn on_remove(&mut self, block: BlockRef);
    /// The cache is full and `candidate` (a volume offset) missed.
    fn on_full_miss(&mut self, candidate: u64, victim: BlockRef, cached_blocks: u32) -> Verdict;
    /// Bytes of memory the policy holds.
    fn metadata_bytes(&self) -> usize;
    /// Times the policy answered [`Verdict::Keep`].
    fn kept(&self) -> u64;
}

/// Builds the policy `config` selects.
pub fn build(config: &Config) -> Box<dyn EvictionPolicy> {
    let min_block = *config.block_sizes.iter().min().expect("validated");
    match &config.eviction {
        EvictionConfig::TwoLevelLru => Box::new(TwoLevelLru),
        EvictionConfig::Lazy { para, k } => Box::new(Lazy::new(
            *para,
            *k,
            config.block_sizes.len(),
            min_block.trailing_zeros(),
        )),
    }
}
