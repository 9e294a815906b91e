//! How a [`Shards`](super::Shards) sampler samples, and what it refuses.

use std::fmt;

use super::timeline::MAX_CAPACITY;

/// Tracked blocks of the default fixed-size sampler. With the key table
/// (12 bytes a slot, at most 3/4 full: 32,768 slots), the max-hash heap
/// (8 bytes a block), the timeline and the histogram, one sampler's state
/// is 602,372 bytes, within the 1 MiB a volume's curve may cost
/// (`Shards::memory_bytes`, checked in the tests).
pub const DEFAULT_MAX_KEYS: u32 = 16_384;

/// Histogram buckets of a sampled curve: at most 64 KiB of `f64`s, a
/// resolution of 1/8192 of the largest reuse distance (the working set).
pub const DEFAULT_BUCKETS: u32 = 8_192;

/// Sampling parameters of a [`Shards`](super::Shards).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShardsConfig {
    /// Bytes per block: `Shards::access` takes block numbers of this size,
    /// and curves give cache sizes as blocks times this.
    pub block_size: u32,
    /// The sampling rate R (SHARDS's T/P) to start with, in `(0, 1]`.
    pub rate: f64,
    /// Fixed-size SHARDS: track at most this many sampled blocks. One more
    /// drops the block with the largest hash and lowers the threshold below
    /// it, so the rate falls as the working set grows and memory stays
    /// bounded. `None`: the rate stays fixed and tracked blocks grow as R
    /// times the working set.
    pub max_keys: Option<u32>,
    /// Bound on the reuse-distance histogram's buckets (each then spans
    /// more blocks as distances grow); `None`: one bucket per block, exact.
    pub max_buckets: Option<u32>,
    /// Fixed-size mode only: once more blocks than the cap's `keys` are
    /// tracked, sample at most its `rate`, whatever room `max_keys` still
    /// leaves. A sampled reference costs far more than an unsampled one
    /// (a table probe, the timeline, the histogram), so this bounds the
    /// sampler's share of every request's CPU for working sets between
    /// `keys` and `max_keys / rate` blocks, which fixed-size mode would
    /// otherwise sample at up to rate 1; a working set of at most `keys`
    /// blocks keeps its exact curve.
    pub rate_cap: Option<RateCap>,
}

/// See [`ShardsConfig::rate_cap`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateCap {
    /// Blocks tracked at any rate before the cap applies.
    pub keys: u32,
    /// The highest rate beyond them, in `(0, 1]`.
    pub rate: f64,
}

impl ShardsConfig {
    /// No sampling: every block tracked, one bucket per block. The curve is
    /// the exact LRU curve; memory grows with the working set.
    pub fn exact(block_size: u32) -> Self {
        ShardsConfig {
            block_size,
            rate: 1.0,
            max_keys: None,
            max_buckets: None,
            rate_cap: None,
        }
    }

    /// Fixed-rate SHARDS: a fraction `rate` of the blocks, for ever.
    pub fn fixed_rate(block_size: u32, rate: f64) -> Self {
        ShardsConfig {
            block_size,
            rate,
            max_keys: None,
            max_buckets: Some(DEFAULT_BUCKETS),
            rate_cap: None,
        }
    }

    /// Fixed-size SHARDS starting at `rate`, tracking at most `max_keys`
    /// blocks.
    pub fn fixed_size(block_size: u32, rate: f64, max_keys: u32) -> Self {
        ShardsConfig {
            block_size,
            rate,
            max_keys: Some(max_keys),
            max_buckets: Some(DEFAULT_BUCKETS),
            rate_cap: None,
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ShardsConfigError> {
        if self.block_size == 0 {
            return Err(ShardsConfigError::BlockSize);
        }
        if !(self.rate > 0.0 && self.rate <= 1.0) {
            return Err(ShardsConfigError::Rate(self.rate));
        }
        // The timeline keeps 4 timestamps per tracked block.
        if let Some(k) = self.max_keys {
            if k == 0 || k > MAX_CAPACITY / 4 {
                return Err(ShardsConfigError::MaxKeys(k));
            }
        }
        if self.max_buckets.is_some_and(|b| b < 2) {
            return Err(ShardsConfigError::MaxBuckets);
        }
        if let Some(c) = self.rate_cap {
            // It lowers the threshold as fixed-size mode does, which needs
            // that mode's record of the largest tracked hashes.
            if self.max_keys.is_none() || !(c.rate > 0.0 && c.rate <= 1.0) || c.keys == 0 {
                return Err(ShardsConfigError::RateCap);
            }
        }
        Ok(())
    }
}

impl Default for ShardsConfig {
    /// Fixed-size sampling of 4 KiB blocks, starting at rate 1: a volume
    /// whose working set fits [`DEFAULT_MAX_KEYS`] blocks gets its exact
    /// curve, a larger one a sample of that many blocks. Memory is bounded
    /// either way, so a lower start would only cost small volumes accuracy.
    fn default() -> Self {
        ShardsConfig::fixed_size(4096, 1.0, DEFAULT_MAX_KEYS)
    }
}

/// A [`ShardsConfig`] that cannot work.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ShardsConfigError {
    /// The block size is 0.
    BlockSize,
    /// The rate is not in `(0, 1]`.
    Rate(f64),
    /// `max_keys` is 0 or above 2^29.
    MaxKeys(u32),
    /// `max_buckets` is below 2.
    MaxBuckets,
    /// A rate cap without `max_keys`, with a rate outside `(0, 1]` or no
    /// keys.
    RateCap,
}

impl fmt::Display for ShardsConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BlockSize => write!(f, "the block size must be above 0"),
            Self::Rate(r) => write!(f, "sampling rate {r} is not in (0, 1]"),
            Self::MaxKeys(k) => write!(f, "max keys {k} is not in 1..=2^29"),
            Self::MaxBuckets => write!(f, "the histogram needs at least 2 buckets"),
            Self::RateCap => write!(
                f,
                "a rate cap needs fixed-size mode, a rate in (0, 1] and at least 1 key"
            ),
        }
    }
}

impl std::error::Error for ShardsConfigError {}
