//! When each request of a paced replay is due: at its trace time since the
//! first paced request, divided by the speed-up.

use std::time::Duration;

/// The schedule of a replay at `speedup` times the trace's own timing.
#[derive(Clone, Debug)]
pub struct Pacer {
    speedup: f64,
    origin_ns: Option<u64>,
}

impl Pacer {
    /// `speedup` 0 (or not finite) means "no pacing": every request is due
    /// at once and only the queue depth holds the replay back.
    pub fn new(speedup: f64) -> Self {
        Self {
            speedup,
            origin_ns: None,
        }
    }

    /// Whether requests wait for their time at all.
    pub fn paced(&self) -> bool {
        self.speedup.is_finite() && self.speedup > 0.0
    }

    /// When the request logged at `timestamp_ns` is due, counted from the
    /// first request this pacer saw. Traces whose clock steps back (merged
    /// volumes, reordered logs) give a request due at once, never before
    /// the origin.
    pub fn due(&mut self, timestamp_ns: u64) -> Duration {
        if !self.paced() {
            return Duration::ZERO;
        }
        let origin = *self.origin_ns.get_or_insert(timestamp_ns);
        let trace_ns = timestamp_ns.saturating_sub(origin) as f64;
        Duration::from_secs_f64(trace_ns / self.speedup / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_time_divided_by_the_speedup_from_the_first_request() {
        let mut p = Pacer::new(2.0);
        assert!(p.paced());
        assert_eq!(p.due(5_000_000_000), Duration::ZERO);
        assert_eq!(p.due(7_000_000_000), Duration::from_secs(1));
        // A step back in the trace's clock is due at once.
        assert_eq!(p.due(4_000_000_000), Duration::ZERO);
        let mut slow = Pacer::new(0.5);
        slow.due(0);
        assert_eq!(slow.due(1_000_000), Duration::from_millis(2));
    }

    #[test]
    fn zero_speedup_is_unpaced() {
        let mut p = Pacer::new(0.0);
        assert!(!p.paced());
        assert_eq!(p.due(0), Duration::ZERO);
        assert_eq!(p.due(u64::MAX), Duration::ZERO);
    }
}
