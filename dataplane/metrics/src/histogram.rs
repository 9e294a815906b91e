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

use crate::local::{add_unshared, OneWriter, Shares};

/// Number of finite buckets: upper bounds 1, 2, 4, ... 2^23 µs (~8.4 s).
pub const BUCKETS: u16 = 24;

/// Finite upper bounds in nanoseconds (bucket `i`: `1000 << i`). Comparing
/// integer nanoseconds against these puts every observation in the bucket
/// prometheus-client's `value_seconds <= bound_seconds` picked before: the
/// bounds in seconds below are the correctly rounded `1000 << i` / 1e9.
/// Observations compute their bucket ([`bucket_of`]); tests check it
/// against these.
#[cfg(test)]
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
#[derive(Debug, Default)]
struct Cells {
    /// Per-bucket (not cumulative) counts; the last is `+Inf`.
    buckets: [AtomicU64; BUCKETS as usize + 1],
    /// Whole microseconds of each observation, summed.
    sum_us: AtomicU64,
    /// The rest (`ns % 1000`) of each observation, summed, in nanoseconds.
    sum_sub_us_ns: AtomicU64,
}

impl Cells {
    /// Adds one observation with `add` (locked or plain).
    #[inline]
    fn observe_with(&self, ns: u64, add: impl Fn(&AtomicU64, u64)) {
        let (us, rest) = (ns / 1000, ns % 1000);
        add(&self.buckets[bucket_of(us, rest)], 1);
        add(&self.sum_us, us);
        if rest != 0 {
            add(&self.sum_sub_us_ns, rest);
        }
    }

    /// Adds `other`'s counts to these (a share folding in).
    fn absorb(&self, other: &Cells) {
        for (b, o) in self.buckets.iter().zip(&other.buckets) {
            b.fetch_add(o.load(Relaxed), Relaxed);
        }
        self.sum_us.fetch_add(other.sum_us.load(Relaxed), Relaxed);
        self.sum_sub_us_ns
            .fetch_add(other.sum_sub_us_ns.load(Relaxed), Relaxed);
    }
}

/// The bucket of an observation of `us` whole microseconds and `rest`
/// nanoseconds: the first bound at or above it, or past the last finite
/// one the +Inf bucket. Computed, not searched: a search over the bounds is
/// a chain of dependent compares on every I/O's path.
#[inline]
fn bucket_of(us: u64, rest: u64) -> usize {
    // Bound i (1000 << i ns) holds the observation iff it is at most
    // 1 << i whole microseconds, rounded up.
    let up = us + u64::from(rest != 0);
    let i = if up <= 1 {
        0
    } else {
        (u64::BITS - (up - 1).leading_zeros()) as usize
    };
    i.min(BUCKETS as usize)
}

fn locked_add(cell: &AtomicU64, n: u64) {
    cell.fetch_add(n, Relaxed);
}

/// What readers sum: the shared cells and the live shares' ([`LocalHistogram`]).
#[derive(Debug, Default)]
struct Shared {
    cells: Cells,
    shares: Shares<Cells>,
}

/// A latency histogram (a handle on one series). Clones share the counts;
/// the registry's family holds one clone to encode it.
#[derive(Debug, Clone, Default)]
pub struct Histogram(Arc<Shared>);

impl Histogram {
    /// Records one observation of `ns` nanoseconds.
    pub fn observe_ns(&self, ns: u64) {
        self.0.cells.observe_with(ns, locked_add);
    }

    /// A share of this histogram for one writer at a time.
    pub fn local(&self) -> LocalHistogram {
        let cells = Arc::new(Cells::default());
        self.0.shares.add(Arc::clone(&cells));
        LocalHistogram {
            cells,
            histogram: self.clone(),
            _one_writer: OneWriter::default(),
        }
    }

    /// Per-bucket counts and the sum's two parts, shares included.
    fn totals(&self) -> ([u64; BUCKETS as usize + 1], u64, u64) {
        let shares = self.0.shares.lock();
        let mut buckets = [0u64; BUCKETS as usize + 1];
        let (mut us, mut sub) = (0u64, 0u64);
        for c in std::iter::once(&self.0.cells).chain(shares.iter().map(|s| &**s)) {
            for (t, b) in buckets.iter_mut().zip(&c.buckets) {
                *t = t.wrapping_add(b.load(Relaxed));
            }
            us = us.wrapping_add(c.sum_us.load(Relaxed));
            sub = sub.wrapping_add(c.sum_sub_us_ns.load(Relaxed));
        }
        (buckets, us, sub)
    }

    /// Sum of all observations, nanoseconds (exact, see [`Cells`]).
    pub fn sum_ns_wide(&self) -> u128 {
        let (_, us, sub) = self.totals();
        u128::from(us) * 1000 + u128::from(sub)
    }

    /// Sum of all observations, nanoseconds, saturating at `u64::MAX`
    /// (584 years) rather than wrapping: for fields that are a `u64`, such
    /// as SPDK's `*_latency_ticks`.
    pub fn sum_ns(&self) -> u64 {
        u64::try_from(self.sum_ns_wide()).unwrap_or(u64::MAX)
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.totals().0.iter().sum()
    }
}

/// A share of a [`Histogram`]: read with the histogram at once, recorded
/// into with plain loads and stores by one writer at a time (it is not
/// `Sync`). Dropping it moves its counts into the histogram.
#[derive(Debug)]
pub struct LocalHistogram {
    cells: Arc<Cells>,
    histogram: Histogram,
    _one_writer: OneWriter,
}

impl LocalHistogram {
    /// Records one observation of `ns` nanoseconds.
    #[inline]
    pub fn observe_ns(&self, ns: u64) {
        self.cells.observe_with(ns, add_unshared);
    }
}

impl Drop for LocalHistogram {
    fn drop(&mut self) {
        let shared = &self.histogram.0.cells;
        self.histogram
            .0
            .shares
            .remove(&self.cells, |c| shared.absorb(c));
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // The encoder takes per-bucket counts and accumulates them itself.
        // One reading of the cells and shares for the buckets and the sum.
        let (counts, us, sub) = self.totals();
        let mut buckets = [(0.0, 0); BUCKETS as usize + 1];
        let mut count = 0;
        for (i, (slot, &n)) in buckets.iter_mut().zip(&counts).enumerate() {
            count += n;
            let bound = if i < BUCKETS as usize {
                bound_seconds(i)
            } else {
                f64::INFINITY
            };
            *slot = (bound, n);
        }
        let sum = (u128::from(us) * 1000 + u128::from(sub)) as f64 / 1e9;
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

    #[test]
    fn computed_buckets_are_the_first_bound_at_or_above() {
        let search = |ns: u64| BOUNDS_NS.partition_point(|&b| b < ns);
        let edges = BOUNDS_NS.iter().flat_map(|&b| [b - 1, b, b + 1]).chain([
            0,
            1,
            999,
            1000,
            1001,
            u64::MAX - 1,
            u64::MAX,
        ]);
        let spread = (0..200_000u64).map(|v| v.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (v % 64));
        for ns in edges.chain(spread) {
            assert_eq!(bucket_of(ns / 1000, ns % 1000), search(ns), "{ns} ns");
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
        for (i, cell) in h.0.cells.buckets.iter().enumerate() {
            let lo = if i == 0 { 0 } else { BOUNDS_NS[i - 1] + 1 };
            let hi = BOUNDS_NS.get(i).copied().unwrap_or(u64::MAX);
            let want = (0..n).map(value).filter(|v| (lo..=hi).contains(v)).count() as u64;
            assert!(want > 0, "bucket {i} is exercised");
            assert_eq!(cell.load(Relaxed), want, "bucket {i}");
        }
    }

    #[test]
    fn shares_are_read_with_the_histogram_and_fold_in() {
        let r = crate::Registry::new();
        let h = r
            .histogram("lat_seconds", "Latency.", &[("bdev", "m")])
            .unwrap();
        h.observe_ns(1_500);
        let share = h.local();
        share.observe_ns(3_000);
        share.observe_ns(5_001);
        let text = r.render();
        assert!(text.contains("lat_seconds_count{bdev=\"m\"} 3\n"), "{text}");
        assert!(
            text.contains("lat_seconds_sum{bdev=\"m\"} 0.000009501\n"),
            "{text}"
        );
        assert!(text.contains("{le=\"0.000004\",bdev=\"m\"} 2\n"), "{text}");
        assert_eq!((h.count(), h.sum_ns()), (3, 9_501));
        drop(share);
        assert_eq!((h.count(), h.sum_ns()), (3, 9_501));
        assert!(h.0.shares.lock().is_empty());
        assert_eq!(h.0.cells.buckets[2].load(Relaxed), 1, "3000 ns: <= 4 us");
        assert_eq!(h.0.cells.buckets[3].load(Relaxed), 1, "5001 ns: <= 8 us");
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
