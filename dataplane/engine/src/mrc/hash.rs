//! Spatially hashed sampling: whether a block is sampled depends only on
//! its number, so every reference to a sampled block is seen and its reuse
//! distance among the sampled blocks can be measured exactly.

/// Added to the block number before mixing, so that block 0 does not hash
/// to 0 (the mix maps 0 to 0) and always land in the sample.
const SEED: u64 = 0x5348_4152_4453_4d52;

/// splitmix64's finalizer over `block + SEED`. Every step (adding a
/// constant, xor with a right shift of itself, multiplying by an odd
/// constant) is invertible, so distinct blocks get distinct hashes: the
/// hash can stand for the block in the key table, which then needs no
/// hashing of its own. Fixed constants, no per-process seed: the same trace
/// gives the same sample, and the same curve, every time.
#[inline]
pub(crate) fn mix(block: u64) -> u64 {
    let mut z = block.wrapping_add(SEED);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 2^64 as a float: SHARDS's modulus P. The paper samples `hash mod P < T`
/// with P = 2^24; the whole 64-bit hash gives a finer threshold, so that
/// fixed-size sampling can drop exactly one block at a time.
pub(crate) const P: f64 = 18_446_744_073_709_551_616.0;

/// The largest hash sampled at `rate` (SHARDS's T - 1): `hash <= limit`
/// samples a fraction `(limit + 1) / 2^64` of the blocks.
pub(crate) fn limit_for_rate(rate: f64) -> u64 {
    if rate >= 1.0 {
        u64::MAX
    } else {
        // Rounded down: the float product is below 2^64, and at least 1
        // hash stays sampled for any positive rate.
        ((rate * P) as u64).saturating_sub(1)
    }
}

/// The sampling rate R = T / P of a limit.
pub(crate) fn rate_of_limit(limit: u64) -> f64 {
    (limit as f64 + 1.0) / P
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_deterministic_and_spreads_consecutive_blocks() {
        assert_eq!(mix(7), mix(7));
        assert_ne!(mix(0), 0);
        // About a tenth of 100,000 consecutive block numbers fall below a
        // 10% limit: consecutive blocks are not sampled together.
        let limit = limit_for_rate(0.1);
        let n = (0..100_000u64).filter(|&b| mix(b) <= limit).count();
        assert!((9_500..10_500).contains(&n), "{n}");
    }

    #[test]
    fn rates_and_limits_round_trip() {
        assert_eq!(limit_for_rate(1.0), u64::MAX);
        assert_eq!(rate_of_limit(u64::MAX), 1.0);
        let r = rate_of_limit(limit_for_rate(0.01));
        assert!((r - 0.01).abs() < 1e-12, "{r}");
    }
}
