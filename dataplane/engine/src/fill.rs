//! Fill sizing from observed spatial locality (`FillSize::Locality`).
//!
//! AdaCache sizes a block after the request that missed: a 4 KiB miss gets
//! the smallest configured block, whatever it is. With 32 KiB as the
//! smallest size, a 4 KiB read whose neighbours are never read fills 28 KiB
//! nobody wants, and the cache holds an eighth of the useful data it could;
//! with 4 KiB as the smallest size, a sequential run of small reads misses
//! on every block instead of being prefetched. Which one pays depends on the
//! workload's spatial locality, so this module measures it.
//!
//! A block is *speculative* when the host asked for less than all of it (the
//! fill went beyond the request). Every cached block larger than the
//! smallest size keeps a 64-bit bitmap of the units the host touched (units
//! of `max(smallest size, block size / 64)`: 4 KiB in blocks up to 256 KiB
//! over 4 KiB granules). When a speculative block leaves the cache, the
//! fraction of its units that were touched is its *fill utilization*, folded
//! into an EWMA per block size (weight 1/16). A request then fills the
//! largest block size whose expected utilization is at least one half: below
//! that, the unused part of a fill takes more cache space than the useful
//! part, and the smallest blocks hold more useful data for the same space.
//!
//! Every size starts at full utilization (AdaCache's prefetching), so a
//! workload without spatial locality pays only until the first speculative
//! blocks are evicted, which a cache of large blocks reaches quickly. A size
//! nobody fills gets no samples, so one decision in `EXPLORE_EVERY` tries
//! the next larger size than the one chosen: a workload that turns
//! sequential is seen again. Deterministic (a counter, no randomness), O(1)
//! per request (one pass over at most nine sizes), and a few dozen bytes
//! plus 8 bytes per cached block larger than the smallest size.

use crate::config::MAX_CLASSES;

/// Fixed-point scale of utilizations.
pub(crate) const ONE: u32 = 1024;
/// EWMA weight of a new sample: 1 / 2^ALPHA_SHIFT.
const ALPHA_SHIFT: u32 = 5;
/// The smallest size's samples are one bit each (re-read or not) and come
/// with every eviction of such a block: a slower average keeps its noise
/// below the larger sizes' differences (standard deviation about 0.02 at a
/// re-read ratio of 0.15, against 0.06 at 1/16).
const BASE_ALPHA_SHIFT: u32 = 8;
/// A size is chosen when its speculative units are read at least this many
/// times as densely as blocks of the smallest size are re-read: a fill
/// larger than the request also costs core reads nobody asked for, and
/// mixing sizes makes the cache reclaim whole groups more often.
pub(crate) const MARGIN: u32 = 2;
/// One decision in this many tries the next larger size.
pub(crate) const EXPLORE_EVERY: u32 = 1024;

/// The per-size fill utilization estimates and the exploration counter.
#[derive(Clone, Debug)]
pub(crate) struct FillSizer {
    /// EWMA fill utilization per size class, in 1/`ONE`.
    util: [u32; MAX_CLASSES],
    /// Samples folded in per class.
    samples: [u64; MAX_CLASSES],
    classes: usize,
    tick: u32,
}

impl FillSizer {
    pub fn new(classes: usize) -> FillSizer {
        FillSizer {
            util: [ONE; MAX_CLASSES],
            samples: [0; MAX_CLASSES],
            classes,
            tick: 0,
        }
    }

    /// The size class whose blocks the next fill is aligned to: the largest
    /// whose speculative fills are read at least as densely as blocks of the
    /// smallest size are re-read (the smallest when none); on exploring
    /// decisions, the next larger one or the smallest.
    pub fn choose(&mut self) -> usize {
        let c = (1..self.classes)
            .rev()
            .find(|&c| self.qualifies(c))
            .unwrap_or(0);
        self.tick = self.tick.wrapping_add(1);
        let phase = self.tick % EXPLORE_EVERY;
        if phase == 0 && c + 1 < self.classes {
            c + 1
        } else if phase == EXPLORE_EVERY / 2 {
            0
        } else {
            c
        }
    }

    /// Whether fills of `class` are expected to pay (the smallest always
    /// does).
    pub fn qualifies(&self, class: usize) -> bool {
        class == 0 || self.util[class] >= self.util[0].saturating_mul(MARGIN)
    }

    /// A speculative block of `class` left the cache with `used` of its
    /// `units` units touched.
    pub fn observe(&mut self, class: usize, used: u32, units: u32) {
        debug_assert!(units > 0 && used <= units);
        let u = (used * ONE / units) as i64;
        let old = self.util[class] as i64;
        let shift = if class == 0 {
            BASE_ALPHA_SHIFT
        } else {
            ALPHA_SHIFT
        };
        // Rounds towards the sample, so that the average reaches 0 and ONE.
        let d = u - old;
        let step = if d >= 0 {
            (d + (1 << shift) - 1) >> shift
        } else {
            -((-d + (1 << shift) - 1) >> shift)
        };
        self.util[class] = (old + step) as u32;
        self.samples[class] += 1;
    }

    /// Per class: the utilization estimate (0..=1) and its sample count.
    pub fn report(&self) -> Vec<(f64, u64)> {
        (0..self.classes)
            .map(|c| (self.util[c] as f64 / ONE as f64, self.samples[c]))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Re-read ratio of the smallest size driven to `r` (of `ONE`).
    fn base(f: &mut FillSizer, reread: bool, n: usize) {
        for _ in 0..n {
            f.observe(0, reread as u32, 1);
        }
    }

    #[test]
    fn starts_small_then_tries_the_largest_unmeasured_size() {
        let mut f = FillSizer::new(5);
        // Nothing known yet: every size at full utilization, none twice the
        // smallest's.
        assert_eq!(f.choose(), 0);
        assert_eq!(FillSizer::new(1).choose(), 0);
        // Small blocks are never re-read: unmeasured sizes are tried.
        base(&mut f, false, 4096);
        assert_eq!(f.util[0], 0);
        assert_eq!(f.choose(), 4);
    }

    #[test]
    fn poorly_used_sizes_fall_back_to_smaller_ones() {
        let mut f = FillSizer::new(3);
        base(&mut f, false, 4096);
        base(&mut f, true, 64); // re-read ratio about 0.22
        for _ in 0..256 {
            f.observe(2, 1, 64);
            f.observe(1, 1, 8);
        }
        assert!(!f.qualifies(1) && !f.qualifies(2) && f.qualifies(0));
        let picks: Vec<usize> = (0..EXPLORE_EVERY).map(|_| f.choose()).collect();
        // Only the exploring decision tries class 1.
        assert_eq!(
            picks.iter().filter(|&&c| c == 0).count() as u32,
            EXPLORE_EVERY - 1
        );
        assert_eq!(picks[EXPLORE_EVERY as usize - 1], 1);
    }

    #[test]
    fn a_well_used_size_is_chosen_again() {
        let mut f = FillSizer::new(3);
        base(&mut f, false, 4096);
        base(&mut f, true, 64);
        for _ in 0..256 {
            f.observe(2, 1, 64);
            f.observe(1, 0, 8);
        }
        // The workload turns sequential: explored class 1 blocks are read whole.
        for _ in 0..64 {
            f.observe(1, 8, 8);
        }
        assert!(f.qualifies(1) && !f.qualifies(2));
        assert_eq!(f.choose(), 1);
        let r = f.report();
        assert_eq!(r[1].1, 320);
        assert!(r[2].0 < 0.05);
    }

    #[test]
    fn ewma_converges_to_the_sampled_utilization() {
        let mut f = FillSizer::new(2);
        for _ in 0..400 {
            f.observe(1, 3, 8);
        }
        let u = f.util[1] as i64;
        assert!((u - 3 * ONE as i64 / 8).abs() <= 32, "{u}");
        for _ in 0..400 {
            f.observe(1, 8, 8);
        }
        assert_eq!(f.util[1], ONE);
    }
}
