//! rackcache's cache engine: decides, for every host request on a cached
//! volume, which bytes come from the cache SSD, which from core (Ceph RBD),
//! what gets cached, evicted and written back.
//!
//! The engine is a pure library: no I/O, no clocks, no global state, no
//! randomness. The dataplane executes its [`Plan`]s against real devices and
//! reports completions; the simulator executes them instantly. Both get the
//! same decisions from the same request sequence.
//!
//! # Using it
//!
//! ```
//! use engine::{Completion, Config, Engine, Op, Plan, PlanStatus};
//!
//! let mut e = Engine::new(Config::adaptive(1 << 30, 64 << 20)).unwrap();
//! let mut plan = Plan::new();
//! e.plan(Op::Read, 48 << 10, 184 << 10, &mut plan).unwrap();
//! assert_eq!(plan.status, PlanStatus::Ready);
//! // Read plan.fills from core and write them to the cache (the host's data
//! // comes from the same buffers), then:
//! e.complete(plan.ticket.unwrap(), Completion::Ok).unwrap();
//! e.plan(Op::Read, 64 << 10, 4096, &mut plan).unwrap();
//! assert_eq!(plan.cache_reads.len(), 1);
//! ```
//!
//! # Where each paper's algorithm lives
//!
//! - AdaCache (adaptive block size), III.B Algorithms 1 and 2:
//!   [`alloc`](crate::alloc) — `missing_intervals` and `greedy_cover`; the
//!   fixed-size baseline is the same code with one block size
//!   ([`Config::fixed`]).
//! - AdaCache III.C, group-based organization: `group.rs` (groups, open
//!   group per size, free list) and `blocks.rs` (one slab chunk per group).
//! - AdaCache III.D, two-level replacement: the block and group LRU lists in
//!   `blocks.rs`/`group.rs`, the victim choice in `Engine::reclaim`
//!   (`engine/space.rs`), the policy hook in [`eviction::TwoLevelLru`].
//! - S3-FIFO, SIEVE, ARC and W-TinyLFU, choosing victims at block and at
//!   group level: [`eviction::Owned`] and `eviction/{s3fifo,sieve,arc,
//!   wtinylfu}.rs`; online choice among them by sampled shadow caches (the
//!   default, `auto`): [`choice`]; per-volume miss-ratio curves (SHARDS):
//!   [`mrc`].
//! - LEA lazy eviction, Algorithm 2: [`eviction::Lazy`], including how it is
//!   applied to groups.
//! - Admission: [`admission::Always`]; [`admission::NHit`]
//!   (io-caches-fast-devices 5.2); [`admission::TinyLfu`] (BiDiFilter 3.1,
//!   tie-break 3.4); [`admission::SizeAware`] (SACache 3.1, Appendix A).
//! - Flushing, lazy and aggressive (io-caches-fast-devices 5.3):
//!   [`flush`](crate::flush).
//! - Write modes and partial-block writes: [`WriteMode`], [`WriteMissFill`],
//!   `Engine::plan_write` and `docs/engine.md`.
//! - Fill sizing from observed spatial locality (ours, opt-in):
//!   [`FillSize::Locality`], `fill.rs` and `docs/engine.md`.
//! - SHARDS (FAST'15) miss-ratio curves: [`mrc`] (not used by the engine's
//!   decisions; the simulator prints them).
//!
//! # Metadata
//!
//! A cached block costs a 12-byte slab entry (block number, block LRU links
//! as `u32`), one flag byte and one `u32` index slot at a load of 7/12..7/8,
//! plus its share of a 24-byte group record. Its cache address is implied by
//! its slab position. Partial or partially dirty blocks and pinned blocks add
//! side-table entries. [`Engine::metadata`] reports the bytes exactly from
//! the allocated structures.

#![warn(missing_docs)]

pub mod admission;
mod alloc;
mod blocks;
mod check;
pub mod choice;
pub mod config;
mod engine;
pub mod eviction;
mod fill;
pub mod flush;
mod group;
mod hit;
mod index;
mod lru;
mod map;
pub mod mrc;
pub mod names;
pub mod plan;
mod reconfig;
mod restore;
mod sketch;
pub mod stats;
mod victims;

pub use config::{
    AdmissionConfig, Config, ConfigError, EvictionConfig, FillSize, FlushConfig, SizeAwareConfig,
    WriteMissFill, WriteMode,
};
pub use engine::{BlockInfo, CompletionError, Engine, RequestError};
pub use fill::FillReport;
pub use flush::FlushKind;
pub use hit::HitNow;
pub use plan::{CacheIo, Completion, Evicted, Extent, Op, Plan, PlanStatus, Ticket};
pub use reconfig::{ReconfigureError, ResizeError};
pub use restore::{RestoreError, RestoredBlock};
pub use stats::{AllocStats, Metadata, OpStats, Stats};

#[cfg(test)]
mod hit_tests;
#[cfg(test)]
mod mirror_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_runtime;
