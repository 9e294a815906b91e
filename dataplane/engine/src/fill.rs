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
/// Utilization a size needs to be chosen: half of its units read.
pub(crate) const THRESHOLD: u32 = ONE / 2;
/// EWMA weight of a new sample: 1 / 2^ALPHA_SHIFT.
const ALPHA_SHIFT: u32 = 4;
/// One decision in this many tries the next larger size.
pub(crate) const EXPLORE_EVERY: u32 = 256;

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
    /// with an expected utilization of at least `THRESHOLD` (the smallest
    /// when none), or the next larger one on an exploring decision.
    pub fn choose(&mut self) -> usize {
        let c = (1..self.classes)
            .rev()
            .find(|&c| self.util[c] >= THRESHOLD)
            .unwrap_or(0);
        self.tick = self.tick.wrapping_add(1);
        if self.tick.is_multiple_of(EXPLORE_EVERY) && c + 1 < self.classes {
            c + 1
        } else {
            c
        }
    }

    /// A speculative block of `class` left the cache with `used` of its
    /// `units` units touched.
    pub fn observe(&mut self, class: usize, used: u32, units: u32) {
        debug_assert!(units > 0 && used <= units);
        let u = (used * ONE / units) as i64;
        let old = self.util[class] as i64;
        self.util[class] = (old + ((u - old) >> ALPHA_SHIFT)) as u32;
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

    #[test]
    fn starts_with_the_largest_size() {
        let mut f = FillSizer::new(5);
        assert_eq!(f.choose(), 4);
        assert_eq!(FillSizer::new(1).choose(), 0);
    }

    #[test]
    fn poorly_used_sizes_fall_back_to_smaller_ones() {
        let mut f = FillSizer::new(3);
        // 256 KiB-like class 2 read at 1/64, class 1 at 1/8.
        for _ in 0..64 {
            f.observe(2, 1, 64);
            f.observe(1, 1, 8);
        }
        assert!(f.util[2] < THRESHOLD && f.util[1] < THRESHOLD);
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
        for _ in 0..64 {
            f.observe(2, 1, 64);
            f.observe(1, 1, 8);
        }
        // The workload turns sequential: explored class 1 blocks are read whole.
        for _ in 0..32 {
            f.observe(1, 8, 8);
        }
        assert!(f.util[1] >= THRESHOLD);
        assert_eq!(f.choose(), 1);
        let r = f.report();
        assert_eq!(r[1].1, 96);
        assert!(r[2].0 < 0.5);
    }

    #[test]
    fn ewma_converges_to_the_sampled_utilization() {
        let mut f = FillSizer::new(2);
        for _ in 0..200 {
            f.observe(1, 3, 8);
        }
        let u = f.util[1] as i64;
        assert!((u - 3 * ONE as i64 / 8).abs() <= 16, "{u}");
    }
}
