//! The counter: one shared atomic, and [`LocalCounter`] shares that a
//! single writer adds to without a locked instruction (`local.rs`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

use crate::local::{add_unshared, OneWriter, Shares};

#[derive(Debug, Default)]
struct Cells {
    value: AtomicU64,
    shares: Shares<AtomicU64>,
}

/// A monotonically increasing count (a handle on one series). Clones share
/// the count; the registry's family holds one clone to encode it.
#[derive(Debug, Default, Clone)]
pub struct Counter(Arc<Cells>);

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.value.fetch_add(n, Relaxed);
    }

    /// Adds 1.
    pub fn inc(&self) {
        self.add(1);
    }

    /// The current value: the shared count and every live share's.
    pub fn get(&self) -> u64 {
        let shares = self.0.shares.lock();
        shares.iter().fold(self.0.value.load(Relaxed), |v, s| {
            v.wrapping_add(s.load(Relaxed))
        })
    }

    /// A share of this counter for one writer at a time.
    pub fn local(&self) -> LocalCounter {
        let cell = Arc::new(AtomicU64::new(0));
        self.0.shares.add(Arc::clone(&cell));
        LocalCounter {
            cell,
            counter: self.clone(),
            _one_writer: OneWriter::default(),
        }
    }
}

impl TypedMetric for Counter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for Counter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A share of a [`Counter`]: counted in the counter's value at once, added
/// to with a plain load and store by one writer at a time (it is not
/// `Sync`). Dropping it moves its count into the counter.
#[derive(Debug)]
pub struct LocalCounter {
    cell: Arc<AtomicU64>,
    counter: Counter,
    _one_writer: OneWriter,
}

impl LocalCounter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        add_unshared(&self.cell, n);
    }

    /// Adds 1.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }
}

impl Drop for LocalCounter {
    fn drop(&mut self) {
        let value = &self.counter.0.value;
        self.counter.0.shares.remove(&self.cell, |c| {
            value.fetch_add(c.load(Relaxed), Relaxed);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_count_at_once_and_fold_in_when_dropped() {
        let c = Counter::default();
        c.add(5);
        let a = c.local();
        let b = c.local();
        a.add(10);
        b.inc();
        assert_eq!(c.get(), 16, "shares are read with the counter");
        drop(a);
        assert_eq!(c.get(), 16, "a dropped share's count stays");
        assert_eq!(c.0.shares.lock().len(), 1);
        b.add(2);
        drop(b);
        assert_eq!((c.get(), c.0.value.load(Relaxed)), (18, 18));
    }

    #[test]
    fn a_share_moves_between_threads_with_its_writer() {
        let c = Counter::default();
        let share = c.local();
        std::thread::scope(|s| {
            s.spawn(|| {
                let share = share;
                for _ in 0..1000 {
                    share.inc();
                }
            });
            for _ in 0..1000 {
                c.inc();
            }
        });
        assert_eq!(c.get(), 2000);
    }
}
