//! Policies that choose victims themselves, at block and at group level.
//!
//! A [`Replacer`] is one replacement algorithm over dense keys. [`Owned`]
//! runs two instances of the same algorithm: one over blocks (the keys are
//! the engine's block ids, size class and slab slot; the weight of a block
//! is its size in bytes; its tag is its granule, so ghosts and sketches
//! recognise a block that comes back), and one over groups.
//!
//! # How the algorithms map onto groups
//!
//! A full cache frees either one block of the wanted size or a whole group
//! (AdaCache III.D). The block instance picks the block. Only when its
//! victim has another size than the one wanted does the engine ask the
//! group instance, which sees:
//! - a group *inserted* when it receives its first live block,
//! - a group *hit* whenever one of its blocks is hit (refilling a group is
//!   not a hit: sequential fills would otherwise promote every group),
//! - a group *removed* when its last block leaves.
//!
//! A group has no identity across reuse (it is a piece of cache space, not
//! of the volume), so the group instance runs without ghosts and without a
//! frequency sketch: S3-FIFO's small queue still filters groups that were
//! filled and never hit again, SIEVE's visited bit and ARC's two lists work
//! on group hits, and W-TinyLFU compares the hit counts of the two groups.
//! At a single block size (the fixed configurations) the block instance
//! decides every replacement and the group instance is never asked.

use super::{BlockRef, EvictionPolicy, Offer, Verdict};
use crate::eviction::nodes::NO_TAG;

/// One replacement algorithm over dense `u32` keys.
///
/// Contract (checked by the property test over every policy):
/// - a key is [`insert`](Self::insert)ed once, then hit any number of
///   times, then [`remove`](Self::remove)d once; keys are reused after;
/// - [`victim`](Self::victim) proposes tracked keys in the algorithm's
///   eviction order and returns the first one `offer` answers
///   [`Offer::Take`] for (still tracked: the caller removes it), or `None`
///   when `offer` answers [`Offer::Stop`] or nothing is tracked. A key
///   answered [`Offer::Skip`] (pinned, dirty) is treated as if it had been
///   accessed, so the scan always ends;
/// - [`miss`](Self::miss) names a tag that was requested and is not cached.
pub(crate) trait Replacer: Send {
    fn insert(&mut self, key: u32, tag: u32, weight: u32);
    /// Like [`insert`](Self::insert), for a block that was cached before the
    /// policy took over (announced least recently used first); `reused`: it
    /// was hit since its insertion. Policies place it where their own
    /// history would have put such a block.
    fn adopt(&mut self, key: u32, tag: u32, weight: u32, reused: bool) {
        self.insert(key, tag, weight);
        if reused {
            self.hit(key);
        }
    }
    fn hit(&mut self, key: u32);
    /// `evicted`: the replacement chose it (ghosts remember it), rather
    /// than it being invalidated.
    fn remove(&mut self, key: u32, evicted: bool);
    fn miss(&mut self, tag: u32);
    fn victim(&mut self, offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32>;
    /// Capacity in weight units (bytes for blocks, groups for groups).
    fn set_capacity(&mut self, capacity: u64);
    fn memory_bytes(&self) -> usize;
}

/// Builds one instance of an algorithm: `capacity` in weight units,
/// `entries` the number of keys a full cache holds (sketch sizing), `tags`
/// whether keys have identities (ghosts and sketches are on).
pub(crate) type MakeReplacer = fn(capacity: u64, entries: u64, tags: bool) -> Box<dyn Replacer>;

/// A victim-choosing policy: the same algorithm over blocks and groups.
pub struct Owned {
    name: &'static str,
    blocks: Box<dyn Replacer>,
    groups: Box<dyn Replacer>,
    sizes: Vec<u32>,
    granule_shift: u32,
    /// Live blocks per group, to derive group insertions and removals.
    group_live: Vec<u32>,
}

impl Owned {
    /// `sizes`: the block sizes by class; `capacity` bytes in `groups`
    /// groups.
    pub(crate) fn new(
        name: &'static str,
        make: MakeReplacer,
        sizes: &[u32],
        capacity: u64,
        groups: u32,
    ) -> Owned {
        let smallest = *sizes.iter().min().expect("validated");
        Owned {
            name,
            blocks: make(capacity, capacity / smallest as u64, true),
            groups: make(groups as u64, groups as u64, false),
            sizes: sizes.to_vec(),
            granule_shift: smallest.trailing_zeros(),
            group_live: Vec::new(),
        }
    }

    /// Blocks are keyed by their engine id (class and slot).
    fn key(&self, b: BlockRef) -> u32 {
        b.id
    }

    /// A block joined group `g`: the group enters the group instance with
    /// its first block.
    fn group_joined(&mut self, group: u32) {
        let g = group as usize;
        if self.group_live.len() <= g {
            self.group_live.resize(g + 1, 0);
        }
        if self.group_live[g] == 0 {
            self.groups.insert(group, NO_TAG, 1);
        }
        self.group_live[g] += 1;
    }

    fn tag(&self, offset: u64) -> u32 {
        (offset >> self.granule_shift) as u32
    }
}

impl EvictionPolicy for Owned {
    fn name(&self) -> &'static str {
        self.name
    }
    fn on_request(&mut self) {}
    fn on_insert(&mut self, block: BlockRef) {
        let w = self.sizes[block.class];
        self.blocks
            .insert(self.key(block), self.tag(block.offset), w);
        self.group_joined(block.group);
    }
    fn on_adopt(&mut self, block: BlockRef) {
        let w = self.sizes[block.class];
        self.blocks
            .adopt(self.key(block), self.tag(block.offset), w, block.reused);
        self.group_joined(block.group);
    }
    fn on_hit(&mut self, block: BlockRef) {
        self.blocks.hit(self.key(block));
        self.groups.hit(block.group);
    }
    fn on_remove(&mut self, block: BlockRef, evicted: bool) {
        self.blocks.remove(self.key(block), evicted);
        let g = block.group as usize;
        self.group_live[g] -= 1;
        if self.group_live[g] == 0 {
            self.groups.remove(block.group, evicted);
        }
    }
    fn on_miss(&mut self, offset: u64) {
        let tag = self.tag(offset);
        self.blocks.miss(tag);
    }
    fn on_full_miss(&mut self, _candidate: u64, _victim: BlockRef, _cached: u32) -> Verdict {
        Verdict::Replace
    }
    fn chooses_victims(&self) -> bool {
        true
    }
    fn block_victim(&mut self, offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        self.blocks.victim(offer)
    }
    fn group_victim(&mut self, offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        self.groups.victim(offer)
    }
    fn set_capacity(&mut self, bytes: u64, groups: u32) {
        self.blocks.set_capacity(bytes);
        self.groups.set_capacity(groups as u64);
    }
    fn metadata_bytes(&self) -> usize {
        self.blocks.memory_bytes() + self.groups.memory_bytes() + self.group_live.capacity() * 4
    }
    fn kept(&self) -> u64 {
        0
    }
}
