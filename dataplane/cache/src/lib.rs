//! Cached volumes: a bdev that puts a region of a shared cache device, run
//! by the cache engine, in front of a core bdev (usually Ceph RBD).
//!
//! - [`layout`]: the on-device format (superblock, volume table, per-unit
//!   metadata) and its encoding; see `docs/cache-format.md`.
//! - [`device`]: a cache device shared by volumes: formatting, loading, the
//!   server-level allocator of 1 MiB units, the volume table.
//! - [`volume`]: one cached volume: its owner task (the engine plans and
//!   completes there), plan execution, metadata persistence, cleaning,
//!   statistics.

pub mod device;
pub mod layout;
pub mod volume;
