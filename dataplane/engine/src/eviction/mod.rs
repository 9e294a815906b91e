//! Eviction: which block or group a full cache replaces, and whether it
//! replaces at all.
//!
//! Two families share one trait:
//! - The engine's own two-level LRU (AdaCache III.D): blocks sit on a global
//!   block LRU and groups on a group LRU; to make room the engine replaces
//!   the block LRU tail when it has the wanted size and otherwise reclaims
//!   the LRU group. [`TwoLevelLru`] and [`Lazy`] (LEA) use this mechanism;
//!   LEA only decides *whether* to replace ([`Verdict`]).
//! - Policies that choose victims themselves ([`Owned`]): S3-FIFO, SIEVE,
//!   ARC and W-TinyLFU, each run over blocks and over groups (`owned.rs`
//!   says how they map onto groups).

mod arc;
mod ghost;
mod lazy;
mod lru;
mod lru2;
mod nodes;
mod owned;
mod s3fifo;
mod sieve;
#[cfg(test)]
mod testing;
mod wtinylfu;

pub use lazy::Lazy;
pub use lru2::TwoLevelLru;
pub use owned::Owned;
pub(crate) use owned::Replacer;

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
    /// Group holding the block.
    pub group: u32,
    /// The block was hit since it was inserted.
    pub reused: bool,
}

/// The engine's answer when a policy proposes a victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Evictable: the engine evicts it.
    Take,
    /// Not evictable now (pinned by in-flight I/O, or dirty and being
    /// written back): the policy treats it as used and goes on.
    Skip,
    /// Not what the engine needs (another block size), or the scan limit
    /// was reached: stop here.
    Stop,
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
/// - [`on_miss`](Self::on_miss) names the offset of every block about to be
///   allocated for a miss, before admission and before any victim choice.
/// - A policy that [`chooses_victims`](Self::chooses_victims) is asked for
///   a block ([`block_victim`](Self::block_victim)) and, when that gives
///   none of the wanted size, for a group
///   ([`group_victim`](Self::group_victim)); it proposes candidates through
///   `offer` (see [`Offer`]) and returns the one answered `Take`, which the
///   engine then removes (an `on_remove` with `evicted` set for each block).
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
    /// `block` was cached before this policy took over (a switch of
    /// policy announces every cached block, least recently used first).
    fn on_adopt(&mut self, block: BlockRef) {
        self.on_insert(block);
    }
    /// `block` was hit.
    fn on_hit(&mut self, block: BlockRef);
    /// `block` left the cache: `evicted` by replacement, or invalidated
    /// (deallocated, overwritten, dropped on an error).
    fn on_remove(&mut self, block: BlockRef, evicted: bool);
    /// A block at `offset` is about to be allocated for a miss.
    fn on_miss(&mut self, _offset: u64) {}
    /// The cache is full and `candidate` (a volume offset) missed.
    fn on_full_miss(&mut self, candidate: u64, victim: BlockRef, cached_blocks: u32) -> Verdict;
    /// Bytes of memory the policy holds.
    fn metadata_bytes(&self) -> usize;
    /// Times the policy answered [`Verdict::Keep`].
    fn kept(&self) -> u64;
    /// Whether the policy picks victims ([`Self::block_victim`],
    /// [`Self::group_victim`]) instead of the engine's two-level LRU.
    fn chooses_victims(&self) -> bool {
        false
    }
    /// The engine id of the block to replace, proposed through `offer`.
    fn block_victim(&mut self, _offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        None
    }
    /// The group to reclaim, proposed through `offer`.
    fn group_victim(&mut self, _offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        None
    }
    /// The cache now holds `bytes` in `groups` groups (resize).
    fn set_capacity(&mut self, _bytes: u64, _groups: u32) {}
}

/// Builds the policy `config` selects.
pub fn build(config: &Config) -> Box<dyn EvictionPolicy> {
    let min_block = *config.block_sizes.iter().min().expect("validated");
    match &config.eviction {
        EvictionConfig::TwoLevelLru => Box::new(TwoLevelLru),
        EvictionConfig::Auto { candidates } => {
            // The chooser's first candidate until a shadow takes over.
            let mut first = config.clone();
            first.eviction = candidates[0].clone();
            build(&first)
        }
        EvictionConfig::S3Fifo => owned("s3fifo", s3fifo::S3Fifo::boxed, config),
        EvictionConfig::Sieve => owned("sieve", sieve::Sieve::boxed, config),
        EvictionConfig::Arc => owned("arc", arc::Arc::boxed, config),
        EvictionConfig::WTinyLfu => owned("wtinylfu", wtinylfu::WTinyLfu::boxed, config),
        EvictionConfig::Lazy { para, k } => Box::new(Lazy::new(
            *para,
            *k,
            config.block_sizes.len(),
            min_block.trailing_zeros(),
        )),
    }
}

fn owned(
    name: &'static str,
    make: owned::MakeReplacer,
    config: &Config,
) -> Box<dyn EvictionPolicy> {
    let groups = (config.capacity / config.group_size as u64) as u32;
    let mut sizes = config.block_sizes.clone();
    sizes.sort_unstable();
    Box::new(Owned::new(
        name,
        make,
        &sizes,
        groups as u64 * config.group_size as u64,
        groups,
    ))
}

/// The algorithm of `policy` over one key space, for shadow caches. The
/// engine's two-level LRU and LEA are shadowed by plain LRU (at one size
/// the two-level LRU is LRU; LEA's laziness needs the real cache).
pub(crate) fn replacer(policy: &EvictionConfig) -> owned::MakeReplacer {
    match policy {
        EvictionConfig::S3Fifo => s3fifo::S3Fifo::boxed,
        EvictionConfig::Sieve => sieve::Sieve::boxed,
        EvictionConfig::Arc => arc::Arc::boxed,
        EvictionConfig::WTinyLfu => wtinylfu::WTinyLfu::boxed,
        EvictionConfig::TwoLevelLru | EvictionConfig::Lazy { .. } | EvictionConfig::Auto { .. } => {
            lru::Lru::boxed
        }
    }
}
