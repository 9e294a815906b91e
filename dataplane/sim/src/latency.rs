//! Per-request processing time, kept as a log-linear histogram so that a
//! trace of any length costs the same few kilobytes (a sorted vector of every
//! sample would cost 8 bytes per request).

/// Sub-buckets per power of two: values are kept with a relative error below
/// 1/64 (about 1.6%).
const SUB_BITS: u32 = 6;
const SUB: usize = 1 << SUB_BITS;
/// Enough powers of two for any `u64` nanosecond count.
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// A histogram of nanosecond durations.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum_ns: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            sum_ns: 0,
        }
    }
}

/// Bucket of `v`: values below `SUB` exactly, above that by their top
/// `SUB_BITS + 1` bits.
fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = exp - SUB_BITS;
    let mantissa = (v >> shift) as usize - SUB; // 0..SUB
    (shift as usize + 1) * SUB + mantissa
}

/// The smallest value in bucket `b` (the inverse of [`bucket`]).
fn bucket_floor(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let shift = (b / SUB - 1) as u32;
    let mantissa = (b % SUB) as u64;
    (SUB as u64 + mantissa) << shift
}

impl Histogram {
    /// Records one duration.
    pub fn record(&mut self, ns: u64) {
        self.counts[bucket(ns)] += 1;
        self.total += 1;
        self.sum_ns += ns as u128;
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Mean in nanoseconds (exact), 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.total as f64
        }
    }

    /// The `q`-quantile (0..=1), as the lower bound of its bucket; 0 when
    /// empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_floor(b);
            }
        }
        bucket_floor(BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_trip_and_stay_within_error() {
        for v in [0u64, 1, 63, 64, 65, 100, 1000, 123_456, 1 << 40, u64::MAX] {
            let floor = bucket_floor(bucket(v));
            assert!(floor <= v, "{v}: floor {floor}");
            assert!(
                (v - floor) as f64 <= v as f64 / SUB as f64,
                "{v}: floor {floor} too far"
            );
        }
        // Monotonic: a larger value never lands in an earlier bucket.
        let mut last = 0;
        for v in (0..100_000u64).step_by(7) {
            let b = bucket(v);
            assert!(b >= last);
            last = b;
        }
    }

    #[test]
    fn quantiles() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), 0);
        for v in 1..=100u64 {
            h.record(v * 10);
        }
        assert_eq!(h.count(), 100);
        assert_eq!(h.mean(), 505.0);
        let p50 = h.quantile(0.5);
        assert!((490..=500).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99);
        assert!((975..=990).contains(&p99), "{p99}");
        assert_eq!(h.quantile(0.0), 10);
    }
}
