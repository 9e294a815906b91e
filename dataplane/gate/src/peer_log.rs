//! Log lines that a remote peer can cause (refused sockets, protocol
//! errors, deadlines), limited per peer address: a party that has not
//! authenticated must not be able to flood the log or bury what matters.
//! The same budget, at another rate, bounds other work a peer can cause
//! (the target's Diffie-Hellman key pairs for DH-HMAC-CHAP challenges).

use std::net::IpAddr;
use std::num::NonZeroU32;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// Lines per peer address a minute, after a burst of [`BURST`].
const PER_MINUTE: u32 = 12;
const BURST: u32 = 5;
/// Addresses remembered before idle ones are forgotten.
const MAX_TRACKED: usize = 4096;

/// A per-peer-address budget for log lines.
pub struct PeerLog {
    limiter: DefaultKeyedRateLimiter<IpAddr>,
}

impl Default for PeerLog {
    fn default() -> Self {
        Self::with_rate(PER_MINUTE, BURST)
    }
}

impl PeerLog {
    /// A budget of `burst` events per peer address, refilled at
    /// `per_minute` a minute (both at least 1).
    pub fn with_rate(per_minute: u32, burst: u32) -> Self {
        let quota = Quota::per_minute(NonZeroU32::new(per_minute.max(1)).expect("non-zero"))
            .allow_burst(NonZeroU32::new(burst.max(1)).expect("non-zero"));
        Self {
            limiter: RateLimiter::keyed(quota),
        }
    }

    /// True when a line caused by `peer` may be logged now.
    pub fn allow(&self, peer: IpAddr) -> bool {
        let ok = self.limiter.check_key(&peer).is_ok();
        if self.limiter.len() > MAX_TRACKED {
            self.limiter.retain_recent();
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_peer_exhausts_only_its_own_budget() {
        let log = PeerLog::default();
        let noisy: IpAddr = "127.0.0.2".parse().unwrap();
        let quiet: IpAddr = "127.0.0.3".parse().unwrap();
        let allowed = (0..100).filter(|_| log.allow(noisy)).count();
        assert_eq!(allowed, BURST as usize, "the burst, then nothing at once");
        assert!(log.allow(quiet), "another peer still logs");
    }

    #[test]
    fn another_rate_is_a_budget_of_its_own() {
        let budget = PeerLog::with_rate(60, 3);
        let peer: IpAddr = "127.0.0.4".parse().unwrap();
        assert_eq!((0..10).filter(|_| budget.allow(peer)).count(), 3);
    }
}
