//! A miss-ratio curve: the LRU miss ratio as a function of the cache size.

/// One point of a [`Curve`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CurvePoint {
    /// Cache size in bytes.
    pub cache_bytes: u64,
    /// Fraction of block references an LRU cache of this size misses,
    /// in `[0, 1]`.
    pub miss_ratio: f64,
}

/// Miss ratio against cache size, for block references of one size.
///
/// Points are in increasing `cache_bytes`, the first at 0 (miss ratio 1),
/// one per histogram bucket boundary after that; between two points the
/// ratio is interpolated linearly, and past the last it stays at the last
/// (only first references miss there). A curve of no references has no
/// points and a miss ratio of 0 everywhere.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    block_size: u32,
    references: u64,
    points: Vec<CurvePoint>,
}

impl Curve {
    pub(crate) fn new(block_size: u32, references: u64, points: Vec<CurvePoint>) -> Curve {
        Curve {
            block_size,
            references,
            points,
        }
    }

    /// The points, smallest cache first.
    pub fn points(&self) -> &[CurvePoint] {
        &self.points
    }

    /// Bytes per block reference.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Block references the curve counts (sampled or not).
    pub fn references(&self) -> u64 {
        self.references
    }

    /// The miss ratio of an LRU cache of `cache_bytes`.
    pub fn miss_ratio(&self, cache_bytes: u64) -> f64 {
        let p = &self.points;
        let Some(last) = p.last() else {
            return 0.0;
        };
        if cache_bytes >= last.cache_bytes {
            return last.miss_ratio;
        }
        // First point above the size; the one before it is at or below.
        let i = p.partition_point(|q| q.cache_bytes <= cache_bytes);
        let (a, b) = (p[i - 1], p[i]);
        let f = (cache_bytes - a.cache_bytes) as f64 / (b.cache_bytes - a.cache_bytes) as f64;
        a.miss_ratio + f * (b.miss_ratio - a.miss_ratio)
    }

    /// The curve evaluated at `sizes` (bytes).
    pub fn at(&self, sizes: &[u64]) -> Vec<CurvePoint> {
        sizes
            .iter()
            .map(|&cache_bytes| CurvePoint {
                cache_bytes,
                miss_ratio: self.miss_ratio(cache_bytes),
            })
            .collect()
    }

    /// Mean of `|self - other|` over `sizes`: how far a sampled curve is
    /// from the exact one (SHARDS's accuracy measure). 0 for no sizes.
    pub fn mean_absolute_error(&self, other: &Curve, sizes: &[u64]) -> f64 {
        if sizes.is_empty() {
            return 0.0;
        }
        let sum: f64 = sizes
            .iter()
            .map(|&s| (self.miss_ratio(s) - other.miss_ratio(s)).abs())
            .sum();
        sum / sizes.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve() -> Curve {
        let p = |cache_bytes, miss_ratio| CurvePoint {
            cache_bytes,
            miss_ratio,
        };
        Curve::new(4096, 10, vec![p(0, 1.0), p(4096, 0.5), p(12288, 0.25)])
    }

    #[test]
    fn interpolates_between_points_and_holds_after_the_last() {
        let c = curve();
        assert_eq!(c.miss_ratio(0), 1.0);
        assert_eq!(c.miss_ratio(2048), 0.75);
        assert_eq!(c.miss_ratio(4096), 0.5);
        assert_eq!(c.miss_ratio(8192), 0.375);
        assert_eq!(c.miss_ratio(1 << 40), 0.25);
        assert_eq!(Curve::new(4096, 0, Vec::new()).miss_ratio(4096), 0.0);
    }

    #[test]
    fn mean_absolute_error_over_sizes() {
        let c = curve();
        let flat = Curve::new(
            4096,
            10,
            vec![CurvePoint {
                cache_bytes: 0,
                miss_ratio: 0.5,
            }],
        );
        assert_eq!(c.mean_absolute_error(&flat, &[0, 4096, 12288]), 0.25);
        assert_eq!(c.mean_absolute_error(&c, &[0, 100, 5000]), 0.0);
    }
}
