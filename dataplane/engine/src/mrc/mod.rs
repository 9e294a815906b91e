//! Miss-ratio curves (MRC) by SHARDS: Waldspurger, Park, Garthwaite and
//! Ahmad, "Efficient MRC Construction with SHARDS", FAST'15.
//!
//! A curve gives, for every cache size, the fraction of block references an
//! LRU cache of that size would miss, from one pass over the references.
//! SHARDS samples blocks by a hash of their number (so a sampled block's
//! every reference is seen), measures each sampled reference's exact LRU
//! reuse distance among the sampled blocks and scales it by 1/R. Fixed-size
//! SHARDS lowers the threshold as blocks arrive so that at most `max_keys`
//! are tracked: a volume's whole state stays within a fixed budget (about
//! 590 KiB by default, [`Shards::memory_bytes`]).
//!
//! ```
//! use engine::mrc::{Shards, ShardsConfig};
//!
//! let mut s = Shards::new(ShardsConfig::default()).unwrap();
//! for _ in 0..3 {
//!     for block in 0..100 {
//!         s.access(block); // a cyclic scan of 100 blocks of 4 KiB
//!     }
//! }
//! let curve = s.curve();
//! assert_eq!(curve.miss_ratio(99 * 4096), 1.0); // LRU thrashes below 100
//! assert_eq!(curve.miss_ratio(100 * 4096), 1.0 / 3.0); // first references only
//! ```
//!
//! - `hash.rs`: the sampling hash and threshold; `config.rs`: the
//!   parameters.
//! - `shards.rs`: sampling, fixed-size eviction, reuse distances.
//! - `timeline.rs`: the order-statistic structure (a bitmap of last-access
//!   times under a Fenwick tree) that gives a distance in O(log n).
//! - `table.rs`: the tracked blocks' last access times.
//! - `histogram.rs`, `curve.rs`: scaled distances, and the curve from them.
//!
//! The engine does not use curves to decide anything (yet); the simulator
//! prints them (`rackcache-sim --mrc`, docs/simulator.md).

mod config;
mod curve;
mod hash;
mod histogram;
mod shards;
mod table;
mod timeline;

pub use config::{RateCap, ShardsConfig, ShardsConfigError, DEFAULT_BUCKETS, DEFAULT_MAX_KEYS};
pub use curve::{Curve, CurvePoint};
pub use shards::Shards;

#[cfg(test)]
mod tests;
