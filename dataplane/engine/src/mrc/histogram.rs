//! Reuse distances, scaled to the whole trace, as a histogram of reference
//! weights.
//!
//! A sampled reference at rate R stands for 1/R references, and its
//! distance among sampled blocks for 1/R times as many blocks: it is
//! recorded with weight 1/R at distance d/R. With a rate that drops over
//! time (fixed-size SHARDS), this is the paper's rescaling of the histogram
//! by R_new/R_old done up front: both count an early reference as 1/R of
//! its own time.
//!
//! Buckets are `width` blocks wide, `width` a power of two. A sampler
//! bounds the bucket count: when a distance falls beyond the last bucket,
//! neighbours are merged pairwise and the width doubles, so memory stays
//! fixed while the resolution follows the largest distance seen (the
//! working set). Unbounded, the width stays 1 and the histogram is exact.

use super::curve::{Curve, CurvePoint};

#[derive(Clone, Debug)]
pub(crate) struct Histogram {
    /// Weight of the references whose scaled distance, in blocks, lies in
    /// `[i * width, (i + 1) * width)`.
    buckets: Vec<f64>,
    width: u64,
    max_buckets: usize,
    /// Weight of first references (infinite distance: misses at any size).
    cold: f64,
    /// Sum of `buckets`.
    reused: f64,
}

impl Histogram {
    /// `max_buckets`: `usize::MAX` for an exact histogram.
    pub fn new(max_buckets: usize) -> Self {
        let max_buckets = max_buckets.max(2);
        // A bounded histogram takes its memory up front, so a sampler's
        // size does not change after construction.
        let reserve = if max_buckets == usize::MAX {
            0
        } else {
            max_buckets
        };
        Histogram {
            buckets: Vec::with_capacity(reserve),
            width: 1,
            max_buckets,
            cold: 0.0,
            reused: 0.0,
        }
    }

    pub fn memory_bytes(&self) -> usize {
        self.buckets.capacity() * 8
    }

    /// Weight of first references: the estimated distinct blocks.
    pub fn cold(&self) -> f64 {
        self.cold
    }

    /// Weight of all recorded references.
    pub fn total(&self) -> f64 {
        self.cold + self.reused
    }

    pub fn add_cold(&mut self, weight: f64) {
        self.cold += weight;
    }

    /// Records a reuse at `distance` blocks (scaled).
    pub fn add(&mut self, distance: f64, weight: f64) {
        let mut i = (distance / self.width as f64) as u64;
        while i >= self.max_buckets as u64 {
            self.coarsen();
            i /= 2;
        }
        let i = i as usize;
        if i >= self.buckets.len() {
            // Grow by doubling, but never past the bound, so a bounded
            // histogram's memory is at most `max_buckets` slots.
            let want = (i + 1).next_power_of_two().max(16).min(self.max_buckets);
            self.buckets.reserve_exact(want - self.buckets.len());
            self.buckets.resize(i + 1, 0.0);
        }
        self.buckets[i] += weight;
        self.reused += weight;
    }

    fn coarsen(&mut self) {
        let n = self.buckets.len().div_ceil(2);
        for i in 0..n {
            let b = &self.buckets;
            let merged = b[2 * i] + b.get(2 * i + 1).copied().unwrap_or(0.0);
            self.buckets[i] = merged;
        }
        self.buckets.truncate(n);
        self.width *= 2;
    }

    /// The miss-ratio curve for `references` references of `block_size`
    /// bytes, with `adjust` extra weight at distance 0 (SHARDS_adj), one
    /// point per bucket boundary.
    pub fn curve(&self, references: u64, adjust: f64, block_size: u32) -> Curve {
        let n = references as f64;
        let mut points = Vec::with_capacity(self.buckets.len() + 1);
        if references == 0 {
            return Curve::new(block_size, 0, points);
        }
        points.push(CurvePoint {
            cache_bytes: 0,
            miss_ratio: 1.0,
        });
        // A cache of c blocks hits a reference whose distance (distinct
        // blocks in between) is below c: bucket i is all hits from
        // (i + 1) * width blocks on.
        let mut hits = adjust;
        for (i, &w) in self.buckets.iter().enumerate() {
            hits += w;
            points.push(CurvePoint {
                cache_bytes: (i as u64 + 1) * self.width * block_size as u64,
                // n - hits first: exact while counts are integers.
                miss_ratio: ((n - hits) / n).clamp(0.0, 1.0),
            });
        }
        Curve::new(block_size, references, points)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_histogram_merges_and_keeps_weight() {
        let mut h = Histogram::new(4);
        h.add(0.0, 1.0);
        h.add(3.0, 1.0);
        assert_eq!((h.width, h.buckets.len()), (1, 4));
        // Distance 9 does not fit 4 buckets of 1, nor of 2: width 4.
        h.add(9.0, 2.0);
        assert_eq!(h.width, 4);
        assert_eq!(h.buckets, vec![2.0, 0.0, 2.0]);
        assert_eq!(h.total(), 4.0);
        assert!(h.memory_bytes() <= 4 * 8);
    }

    #[test]
    fn curve_steps_at_bucket_boundaries() {
        let mut h = Histogram::new(usize::MAX);
        h.add_cold(2.0);
        h.add(0.0, 1.0);
        h.add(1.0, 1.0);
        let c = h.curve(4, 0.0, 4096);
        let ratios: Vec<(u64, f64)> = c
            .points()
            .iter()
            .map(|p| (p.cache_bytes, p.miss_ratio))
            .collect();
        assert_eq!(ratios, vec![(0, 1.0), (4096, 0.75), (8192, 0.5)]);
    }
}
