//! When background cleaning runs (OCF's cleaning policies, the papers'
//! lazy and aggressive flushing).
//!
//! One cleaning batch runs at a time, so cleaning never has more than
//! `max_batch` write-backs in flight beside host I/O:
//! - `nop`: never; flushes and evictions still write dirty data back.
//! - `lazy`: when the volume has had no host I/O for `activity_threshold_ms`
//!   and it has held dirty data for at least `staleness_ms` (the age of the
//!   volume's dirty state, not of each block: the engine keeps no per-block
//!   timestamps), a batch every `wake_up_ms`.
//! - `aggressive`: every `wake_up_ms` while dirty bytes exceed `dirty_ratio`
//!   of the cache (the engine's aggressive flush checks the ratio), and
//!   only while fewer than a queue's worth of host requests run, so host
//!   I/O goes first.

use std::time::{Duration, Instant};

use engine::FlushKind;

use super::params::Cleaning;

/// Host requests in flight above which aggressive cleaning waits.
const BUSY_REQUESTS: usize = 64;

pub(crate) struct Cleaner {
    policy: Cleaning,
    last_round: Option<Instant>,
    dirty_since: Option<Instant>,
}

impl Cleaner {
    pub fn new(policy: Cleaning) -> Cleaner {
        Cleaner {
            policy,
            last_round: None,
            dirty_since: None,
        }
    }

    /// How often the owner asks.
    pub fn tick(&self) -> Duration {
        let ms = match &self.policy {
            Cleaning::Nop {} => 1000,
            Cleaning::Lazy { wake_up_ms, .. } => (*wake_up_ms).min(1000),
            Cleaning::Aggressive { wake_up_ms, .. } => *wake_up_ms,
        };
        Duration::from_millis(ms.max(1))
    }

    /// Which flush to plan now, if any.
    pub fn due(
        &mut self,
        now: Instant,
        last_io: Instant,
        busy: usize,
        dirty_bytes: u64,
    ) -> Option<FlushKind> {
        if dirty_bytes == 0 {
            self.dirty_since = None;
            return None;
        }
        let since = *self.dirty_since.get_or_insert(now);
        let waited = |ms: u64, from: Option<Instant>| {
            from.is_none_or(|t| now.duration_since(t) >= Duration::from_millis(ms))
        };
        let kind = match &self.policy {
            Cleaning::Nop {} => return None,
            Cleaning::Lazy {
                staleness_ms,
                wake_up_ms,
                activity_threshold_ms,
                ..
            } => {
                let idle =
                    now.duration_since(last_io) >= Duration::from_millis(*activity_threshold_ms);
                let stale = now.duration_since(since) >= Duration::from_millis(*staleness_ms);
                if !(idle && stale && waited(*wake_up_ms, self.last_round)) {
                    return None;
                }
                FlushKind::Lazy
            }
            Cleaning::Aggressive { wake_up_ms, .. } => {
                if busy >= BUSY_REQUESTS || !waited(*wake_up_ms, self.last_round) {
                    return None;
                }
                FlushKind::Aggressive
            }
        };
        self.last_round = Some(now);
        Some(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lazy_waits_for_idle_and_stale_dirty_data() {
        let mut c = Cleaner::new(Cleaning::Lazy {
            staleness_ms: 100,
            wake_up_ms: 10,
            max_batch: 8,
            activity_threshold_ms: 50,
        });
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        assert_eq!(c.due(ms(0), ms(0), 0, 0), None, "nothing dirty");
        assert_eq!(c.due(ms(1), ms(0), 0, 4096), None, "dirty just now");
        assert_eq!(c.due(ms(120), ms(100), 0, 4096), None, "not idle");
        assert_eq!(c.due(ms(160), ms(100), 0, 4096), Some(FlushKind::Lazy));
        assert_eq!(c.due(ms(165), ms(100), 0, 4096), None, "wake-up interval");
        assert_eq!(c.due(ms(171), ms(100), 0, 4096), Some(FlushKind::Lazy));
    }

    #[test]
    fn aggressive_yields_to_busy_host_io_and_nop_never_cleans() {
        let mut c = Cleaner::new(Cleaning::Aggressive {
            dirty_ratio: 0.1,
            batch_blocks: 8,
            wake_up_ms: 5,
        });
        let t0 = Instant::now();
        assert_eq!(c.due(t0, t0, BUSY_REQUESTS, 1), None);
        assert_eq!(c.due(t0, t0, 0, 1), Some(FlushKind::Aggressive));
        let mut n = Cleaner::new(Cleaning::Nop {});
        assert_eq!(n.due(t0 + Duration::from_secs(999), t0, 0, 1 << 30), None);
    }
}
