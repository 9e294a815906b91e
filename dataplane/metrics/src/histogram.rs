//! The latency histogram: lock-free recording, encoded by prometheus-client.
//!
//! prometheus-client's own histogram keeps its state behind a mutex that
//! every observation takes; our per-bdev and per-subsystem histograms are
//! shared by all queue-pair tasks, and nothing on the I/O path may take a
//! lock shared by queues. So the buckets are fixed (powers of two in µs) and
//! each is one `AtomicU64`: an observation is two or three relaxed
//! `fetch_add`s (its bucket and the sum's two parts, see [`Cells`]). A scrape reads the atomics one by one; it may see an
//! observation's bucket without its sum (or the reverse), which a later
//! scrape corrects, but `_count` and the `+Inf` bucket always agree because
//! both are the total of the bucket counts read.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Number of finite buckets: upper bounds 1, 2, 4, ... 2^23 µs (~8.4 s).
pub const BUCKETS: u16 = 24;

/// Finite upper bounds in nanoseconds (bucket `i`: `1000 << i`). Comparing
/// integer nanoseconds against these puts every observation in the bucket
/// prometheus-client's `value_seconds <= bound_seconds` picked before: the
/// bounds in seconds below are the correctly rounded `1000 << i` / 1e9.
const BOUNDS_NS: [u64; BUCKETS as usize] = {
    let mut b = [0; BUCKETS as usize];
    let mut i = 0;
    while i < b.len() {
        b[i] = 1000 << i;
        i += 1;
    }
    b
};

/// Upper bound of finite bucket `i` in seconds, as exposed in `le`: the
/// values `exponential_buckets(1e-6, 2.0, BUCKETS)` gives, so the labels are
/// the same text as with prometheus-client's histogram.
fn bound_seconds(i: usize) -> f64 {
    1e-6 * 2f64.powi(i as i32)
}

/// The sum of the observations is kept in two parts so that it does not
/// wrap over a long uptime: a `u64` of nanoseconds wraps after 584 years of
/// summed latency, which a busy bdev (1M IOPS at 1 ms) accumulates in 213
/// days. Whole microseconds wrap only after 2^64 µs (that bdev: 585 years),
/// and the sub-microsecond parts (under 1000 ns each) after 1.8e16
/// observations (571 years at 1M IOPS). The exact sum in nanoseconds is
/// `1000 * sum_us + sum_sub_us_ns`; no lock and no compare-and-swap loop.
#[derive(Debug)]
struct Cells {
    /// Per-bucket (not cumulative) counts; the last is `+Inf`.
    buckets: [AtomicU64; BUCKETS as usize + 1],
    /// Whole microseconds of each observation, summed.
    sum_us: AtomicU64,
    /// The rest (`ns % 1000`) of each observation, summed, in nanoseconds.
    sum_sub_us_ns: AtomicU64,
}

/// A latency histogram (a handle on one series). Clones share the counts;
/// the registry's family holds one clone to encode it.
#[derive(Debug, Clone)]
pub struct Histogram(Arc<Cells>);

impl Default for Histogram {
    fn default() -> Self {
        Self(Arc::new(Cells {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
            sum_sub_us_ns: AtomicU64::new(0),
        }))
    }
}

impl Histogram {
    /// Records one observation of `ns` nanoseconds.
    pub fn observe_ns(&self, ns: u64) {
        // First bound >= ns; past the last finite one is the +Inf bucket.
        let i = BOUNDS_NS.partition_point(|&b| b < ns);
        self.0.buckets[i].fetch_add(1, Relaxed);
        self.0.sum_us.fetch_add(ns / 1000, Relaxed);
        let rest = ns % 1000;
        if rest != 0 {
            self.0.sum_sub_us_ns.fetch_add(rest, Relaxed);
        }
    }

    /// Sum of all observations, nanoseconds (exact, see [`Cells`]).
    pub fn sum_ns_wide(&self) -> u128 {
        u128::from(self.0.sum_us.load(Relaxed)) * 1000
            + u128::from(self.0.sum_sub_us_ns.load(Relaxed))
    }

    /// Sum of all observations, nanoseconds, saturating at `u64::MAX`
    /// (584 years) rather than wrapping: for fields that are a `u64`, such
    /// as SPDK's `*_latency_ticks`.
    pub fn sum_ns(&self) -> u64 {
        u64::try_from(self.sum_ns_wide()).unwrap_or(u64::MAX)
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.0.buckets.iter().map(|b| b.load(Relaxed)).sum()
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // The encoder takes per-bucket counts and accumulates them itself.
        let mut buckets = [(0.0, 0); BUCKETS as usize + 1];
        let mut count = 0;
        for (i, (slot, cell)) in buckets.iter_mut().zip(&self.0.buckets).enumerate() {
            let n = cell.load(Relaxed);
            count += n;
            let bound = if i < BUCKETS as usize {
                bound_seconds(i)
            } else {
                f64::INFINITY
            };
            *slot = (bound, n);
        }
        let sum = self.sum_ns_wide() as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::histogram::exponential_buckets;

    #[test]
    fn bounds_match_prometheus_client_buckets() {
        let pc: Vec<f64> = exponential_buckets(1e-6, 2.0, BUCKETS).collect();
        let ours: Vec<f64> = (0..BUCKETS as usize).map(bound_seconds).collect();
        assert_eq!(ours, pc);
        for (i, &ns) in BOUNDS_NS.iter().enumerate() {
            // The seconds value of a bound is the bound in seconds, so ns
            // and seconds comparisons pick the same bucket at the edges.
            assert_eq!(ns as f64 / 1e9, pc[i], "bound {i}");
        }
    }

    /// The `v`th test observation: 1 ns to ~34 s, so every bucket (the
    /// edges and `+Inf` included) gets some.
    fn value(v: u64) -> u64 {
        (1 << (v % 36)) + v % 1001
    }

    #[test]
    fn concurrent_observations_sum_exactly() {
        const THREADS: u64 = 8;
        const PER_THREAD: u64 = 20_000;
        let h = Histogram::default();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let h = h.clone();
                s.spawn(move || {
                    for k in 0..PER_THREAD {
                        h.observe_ns(value(t * PER_THREAD + k));
                    }
                });
            }
        });
        let n = THREADS * PER_THREAD;
        let want_sum: u64 = (0..n).map(value).sum();
        assert_eq!(h.count(), n);
        assert_eq!(h.sum_ns(), want_sum);
        // Each bucket holds exactly the values in its range.
        for (i, cell) in h.0.buckets.iter().enumerate() {
            let lo = if i == 0 { 0 } else { BOUNDS_NS[i - 1] + 1 };
            let hi = BOUNDS_NS.get(i).copied().unwrap_or(u64::MAX);
            let want = (0..n).map(value).filter(|v| (lo..=hi).contains(v)).count() as u64;
            assert!(want > 0, "bucket {i} is exercised");
            assert_eq!(cell.load(Relaxed), want, "bucket {i}");
        }
    }

    /// The text prometheus-client's own histogram produced for these
    /// observations (captured before the switch), byte for byte.
    #[test]
    fn encodes_like_prometheus_client_histogram() {
        let r = crate::Registry::new();
        let h = r
            .histogram("lat_seconds", "Latency.", &[("bdev", "m")])
            .unwrap();
        for ns in [
            0,
            500,
            1_000,
            1_001,
            3_000,
            255_300,
            8_388_608_000,
            8_388_608_001,
            100_000_000_000,
        ] {
            h.observe_ns(ns);
        }
        let want: String = [
            "# HELP lat_seconds Latency.\n",
            "# TYPE lat_seconds histogram\n",
            "lat_seconds_sum{bdev=\"m\"} 116.777476802\n",
            "lat_seconds_count{bdev=\"m\"} 9\n",
            "lat_seconds_bucket{le=\"0.000001\",bdev=\"m\"} 3\n",
            "lat_seconds_bucket{le=\"0.000002\",bdev=\"m\"} 4\n",
            "lat_seconds_bucket{le=\"0.000004\",bdev=\"m\"} 5\n",
            "lat_seconds_bucket{le=\"0.000008\",bdev=\"m\"} 5\n",
            "lat_seconds_bucket{le=\"0.000016\",bdev=\"m\"} 5\n",
            "lat_seconds_bucket{le=\"0.000032\",bdev=\"m\"} 5\n",
            "lat_seconds_bucket{le=\"0.000064\",bdev=\"m\"} 5\n",
            "lat_seconds_bucket{le=\"0.000128\",bdev=\"m\"} 5\n",
            "lat_seconds_bucket{le=\"0.000256\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"0.000512\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"0.001024\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"0.002048\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"0.004096\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"0.008192\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"0.016384\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"0.032768\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"0.065536\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"0.131072\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"0.262144\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"0.524288\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"1.048576\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"2.097152\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"4.194304\",bdev=\"m\"} 6\n",
            "lat_seconds_bucket{le=\"8.388608\",bdev=\"m\"} 7\n",
            "lat_seconds_bucket{le=\"+Inf\",bdev=\"m\"} 9\n",
        ]
        .concat();
        assert_eq!(r.render(), want + "# EOF\n");
    }

    /// Past 2^64 ns of summed latency the sum goes on growing (`_sum` in
    /// seconds); the `u64` view saturates. It used to wrap to near zero.
    #[test]
    fn the_sum_does_not_wrap() {
        let r = crate::Registry::new();
        let h = r
            .histogram("big_seconds", "Big.", &[("bdev", "m")])
            .unwrap();
        h.observe_ns(u64::MAX);
        h.observe_ns(u64::MAX);
        h.observe_ns(1_500);
        let want = 2 * u128::from(u64::MAX) + 1_500;
        assert_eq!(h.sum_ns_wide(), want);
        assert_eq!(h.sum_ns(), u64::MAX, "saturates");
        let text = r.render();
        let sum: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("big_seconds_sum{bdev=\"m\"} "))
            .expect("a _sum line")
            .parse()
            .unwrap();
        assert_eq!(sum, want as f64 / 1e9, "{text}");
        assert_eq!(h.count(), 3);
    }
}
