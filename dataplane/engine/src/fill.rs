//! Fill sizing by locality (`FillSize::Locality`): the smallest block a
//! miss fills, chosen online by sampled shadow caches.
//!
//! AdaCache sizes a block after the request that missed, and at least the
//! smallest configured size: with 32 KiB as the smallest, a 4 KiB read
//! fills 32 KiB. Where neighbouring blocks are read soon after (sequential
//! runs of small reads, hot extents) that prefetch is what makes hits;
//! where hot 4 KiB blocks are scattered (a hashed Zipf, as fio draws it)
//! it fills 28 KiB nobody reads and the cache holds an eighth of the useful
//! data it could. Which one pays is the workload's, so it is measured: the
//! same way `choice` picks an eviction policy, one shadow cache per
//! candidate *fill floor* (each configured block size up to `MAX_FLOOR`)
//! replays the sampled request stream as an LRU of blocks of that size, and
//! the floor whose shadow hits most is used.
//!
//! - Sampling: SHARDS-style, by a hash of the region (the largest
//!   candidate's size) a request touches, so a sampled region is seen with
//!   all of its neighbouring blocks, which is what prefetching is about.
//!   The rate makes the shadows' capacity `SAMPLED_BYTES` (a cache no
//!   larger is shadowed whole): memory and CPU are bounded whatever the
//!   cache size.
//! - Scores: each shadow counts the hits of reads in units of the
//!   smallest size (writes allocate in the shadows but do not count); per
//!   window, scores decay by [`crate::choice::DECAY`] and a floor ahead of
//!   the active one by [`crate::choice::MARGIN`] two windows in a row
//!   becomes active.
//! - Start: the smallest size, which wastes no space, until every shadow
//!   is full: before that nothing is evicted for prefetched data, so every
//!   floor looks the better the larger it is. Starting at 32 KiB instead
//!   cost 6.7 points of read hits on part 6's scattered Zipf stream (blocks
//!   filled before the switch that hold one hot unit are hit, so they stay).
//! - Use: a miss is widened to the active floor's aligned window where the
//!   whole window is missing, else to the largest smaller window that is,
//!   else not at all (a window holding a cached block is not filled around
//!   it). Requests larger than the floor get the request rule's blocks.

use crate::choice::{sample::Sampler, shadow::ShadowCache, LeadRule, DECAY};
use crate::config::EvictionConfig;

/// Bytes of cache the shadows model together with their sampling: 8 MiB is
/// 2,048 blocks of 4 KiB and 32 of 256 KiB, enough for the largest floor's
/// shadow to rank, and about 100 KiB of memory per volume.
pub(crate) const SAMPLED_BYTES: u64 = 8 << 20;
/// Largest floor tried: 256 KiB. A larger floor would prefetch most of a
/// 1 MiB group on every miss.
pub(crate) const MAX_FLOOR: u32 = 256 << 10;
/// Sampled units (of the smallest block size) read per decision window. Unlike an eviction
/// policy's shadow, a floor's shadow needs no turnover to show its lead:
/// prefetch hits and wasted space both show within a few hundred sampled
/// reads, and decaying scores carry the longer history.
const WINDOW_UNITS: u64 = 256;

/// What fill sizing reports (stats, simulator).
#[derive(Clone, Debug, PartialEq)]
pub struct FillReport {
    /// The active floor in bytes.
    pub floor: u32,
    /// Times the floor changed.
    pub switches: u64,
    /// Fraction of regions sampled.
    pub rate: f64,
    /// Per candidate floor: its size and its shadow's read hit ratio (of
    /// sampled units of the smallest size read) since the start.
    pub shadows: Vec<(u32, f64)>,
    /// Bytes held by the sampler and shadows.
    pub memory_bytes: usize,
}

struct Floor {
    /// Index of the block size in the engine's sizes.
    class: usize,
    shift: u32,
    shadow: ShadowCache,
    hits: u64,
    window_hits: u64,
    score: f64,
}

/// Shadow caches of every candidate floor, and the decision rule.
pub(crate) struct FillChooser {
    sampler: Sampler,
    region_shift: u32,
    unit_shift: u32,
    floors: Vec<Floor>,
    active: usize,
    lead: LeadRule,
    seen_in_window: u64,
    reads: u64,
    switches: u64,
}

impl FillChooser {
    /// A chooser for a cache of `capacity` bytes with block `sizes`
    /// (ascending, as the engine keeps them).
    pub fn new(capacity: u64, sizes: &[u32]) -> FillChooser {
        let rate = (SAMPLED_BYTES as f64 / capacity.max(1) as f64).min(1.0);
        let sampler = Sampler::new(rate);
        let sampled = capacity as f64 * sampler.rate();
        let candidates: Vec<usize> = (0..sizes.len())
            .filter(|&c| c == 0 || sizes[c] <= MAX_FLOOR)
            .collect();
        let largest = sizes[*candidates.last().expect("the smallest size")];
        let floors: Vec<Floor> = candidates
            .iter()
            .map(|&class| Floor {
                class,
                shift: sizes[class].trailing_zeros(),
                shadow: ShadowCache::new(
                    EvictionConfig::TwoLevelLru,
                    ((sampled / sizes[class] as f64).round() as u32).max(1),
                ),
                hits: 0,
                window_hits: 0,
                score: 0.0,
            })
            .collect();
        FillChooser {
            sampler,
            region_shift: largest.trailing_zeros(),
            unit_shift: sizes[0].trailing_zeros(),
            floors,
            active: 0,
            lead: LeadRule::default(),
            seen_in_window: 0,
            reads: 0,
            switches: 0,
        }
    }

    /// The size class of the active floor.
    pub fn class(&self) -> usize {
        self.floors[self.active].class
    }

    /// Feeds one accepted request (reads count hits; writes allocate).
    pub fn observe(&mut self, read: bool, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let end = offset + len;
        let mut region = offset >> self.region_shift;
        while region << self.region_shift < end {
            let lo = offset.max(region << self.region_shift);
            let hi = end.min((region + 1) << self.region_shift);
            if self.sampler.sampled(region) {
                self.replay(read, lo, hi);
            }
            region += 1;
        }
    }

    /// One request's part inside one sampled region.
    fn replay(&mut self, read: bool, lo: u64, hi: u64) {
        for f in &mut self.floors {
            let mut b = lo >> f.shift;
            while b << f.shift < hi {
                let (s, e) = (lo.max(b << f.shift), hi.min((b + 1) << f.shift));
                // Block numbers fit u32 for volumes up to 16 TiB of 4 KiB
                // blocks (the engine's own limit).
                if f.shadow.access(b as u32) && read {
                    f.window_hits += (e - s) >> self.unit_shift;
                }
                b += 1;
            }
        }
        if !read {
            return;
        }
        let units = (hi - lo) >> self.unit_shift;
        self.reads += units;
        self.seen_in_window += units;
        if self.seen_in_window >= WINDOW_UNITS {
            self.seen_in_window = 0;
            self.decide();
        }
    }

    fn decide(&mut self) {
        for f in &mut self.floors {
            f.score = DECAY * f.score + f.window_hits as f64;
            f.hits += f.window_hits;
            f.window_hits = 0;
        }
        // While a shadow has free room, every floor looks better the
        // larger it is (nothing is evicted for the prefetched data):
        // decide only once all of them are full.
        if self.floors.iter().any(|f| !f.shadow.full()) {
            return;
        }
        if let Some(best) = self
            .lead
            .next(self.floors.iter().map(|f| f.score), self.active)
        {
            self.active = best;
            self.switches += 1;
        }
    }

    pub fn report(&self, sizes: &[u32]) -> FillReport {
        let n = self.reads.max(1) as f64;
        FillReport {
            floor: sizes[self.class()],
            switches: self.switches,
            rate: self.sampler.rate(),
            shadows: self
                .floors
                .iter()
                .map(|f| (sizes[f.class], (f.hits + f.window_hits) as f64 / n))
                .collect(),
            memory_bytes: self.memory_bytes(),
        }
    }

    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<FillChooser>()
            + self
                .floors
                .iter()
                .map(|f| std::mem::size_of::<Floor>() + f.shadow.memory_bytes())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;
    const SIZES: [u32; 3] = [4 << 10, 32 << 10, 64 << 10];

    /// Sequential 4 KiB reads over 32 MiB into 1 MiB, scattered ones.
    fn sequential(f: &mut FillChooser, n: u64) {
        for i in 0..n {
            f.observe(true, (i % 8192) * 4 * K, 4 * K);
        }
    }

    /// A hot set of 200 blocks 64 KiB apart: it fits a 1 MiB cache of
    /// 4 KiB blocks, not one of 32 KiB blocks.
    fn scattered(f: &mut FillChooser, rounds: u64) {
        for _ in 0..rounds {
            for i in 0..200u64 {
                f.observe(true, i * 64 * K, 4 * K);
            }
        }
    }

    #[test]
    fn starts_at_the_smallest_size_and_waits_for_full_shadows() {
        let mut f = FillChooser::new(1 << 30, &SIZES);
        assert_eq!(f.class(), 0);
        // 512 KiB of sequential reads: the larger floors' shadows would
        // win by prefetching, but none is full yet.
        sequential(&mut f, 128);
        f.decide();
        f.decide();
        assert_eq!((f.class(), f.switches), (0, 0));
    }

    #[test]
    fn scattered_hot_blocks_move_the_floor_back_down() {
        let mut f = FillChooser::new(1 << 20, &SIZES);
        sequential(&mut f, 100_000);
        assert_eq!(f.class(), 2);
        scattered(&mut f, 64);
        assert_eq!(f.class(), 0, "{:?}", f.report(&SIZES));
        assert_eq!(f.switches, 2);
    }

    /// Sequential 4 KiB reads: larger floors prefetch, and the largest
    /// candidate takes over.
    #[test]
    fn sequential_small_reads_move_the_floor_up() {
        let mut f = FillChooser::new(1 << 20, &SIZES);
        sequential(&mut f, 200_000);
        let r = f.report(&SIZES);
        assert_eq!(r.floor, 64 << 10, "{r:?}");
        assert!(r.shadows[2].1 > r.shadows[0].1 + 0.5, "{r:?}");
    }

    #[test]
    fn writes_allocate_without_scoring() {
        let mut f = FillChooser::new(1 << 20, &SIZES);
        f.observe(false, 0, 4 * K);
        f.observe(true, 0, 4 * K);
        assert_eq!(f.reads, 1);
        let r = f.report(&SIZES);
        assert!(r.shadows.iter().all(|s| s.1 == 1.0), "{r:?}");
    }
}
