//! Log lines that a remote peer can cause (refused sockets, protocol
//! errors, deadlines), limited per peer address: a party that has not
//! authenticated must not be able to flood the log or bury what matters.

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
        let quota = Quota::per_minute(NonZeroU32::new(PER_MINUTE).expect("non-zero"))
            .allow_burst(NonZeroU32::new(BURST).expect("non-zero"));
        Self {
            limiter: RateLimiter::keyed(quota),
        }
    }
}

impl PeerLog {
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
}
