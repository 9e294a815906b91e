//! Counters and metadata accounting.
//!
//! Counters are plain integers updated by the single thread that owns the
//! engine; the dataplane copies them into its metrics. I/O volumes are
//! counted when a plan is made, so a failed I/O still counts (it was issued).

use crate::config::MAX_CLASSES;

/// Hits and misses of one operation type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpStats {
    /// Requests planned (retries not included).
    pub requests: u64,
    /// Requests served entirely by cached blocks.
    pub hit_requests: u64,
    /// Requests with at least one missing byte.
    pub miss_requests: u64,
    /// Request bytes.
    pub bytes: u64,
    /// Request bytes that landed in cached blocks (reads: valid cached data).
    pub hit_bytes: u64,
    /// Request bytes that did not.
    pub miss_bytes: u64,
}

impl OpStats {
    /// Hit ratio by requests (0 when there were none).
    pub fn hit_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.hit_requests as f64 / self.requests as f64
        }
    }
}

/// Allocations of one block size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Block size in bytes.
    pub size: u32,
    /// Blocks allocated (cumulative).
    pub blocks: u64,
    /// Blocks of this size cached now.
    pub cached: u64,
}

/// Everything the engine counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Host reads.
    pub read: OpStats,
    /// Host writes.
    pub write: OpStats,
    /// Host deallocates.
    pub deallocate_requests: u64,
    /// Plans answered with `Retry`.
    pub retries: u64,
    /// Bytes read from core (fills and uncached reads).
    pub read_from_core: u64,
    /// Bytes written to core (host writes and write-backs).
    pub write_to_core: u64,
    /// Bytes read from the cache (hits and write-backs).
    pub read_from_cache: u64,
    /// Bytes written to the cache (fills and host writes).
    pub write_to_cache: u64,
    /// Bytes of missed request data served without caching.
    pub bypassed_bytes: u64,
    /// Candidates the admission policy rejected.
    pub admission_rejects: u64,
    /// Misses the eviction policy declined to make room for (LEA).
    pub lazy_keeps: u64,
    /// Misses for which no clean, unpinned victim was found.
    pub no_victim: u64,
    /// Blocks evicted (replaced or reclaimed with their group).
    pub evicted_blocks: u64,
    /// Bytes of evicted blocks.
    pub evicted_bytes: u64,
    /// Blocks replaced in place from the block LRU tail.
    pub replaced_blocks: u64,
    /// Groups reclaimed from the group LRU tail.
    pub evicted_groups: u64,
    /// Blocks dropped by deallocation or failed I/O.
    pub invalidated_blocks: u64,
    /// Dirty bytes dropped because the host deallocated them.
    pub discarded_dirty_bytes: u64,
    /// Blocks written back (flush and eviction cleaning).
    pub writeback_blocks: u64,
    /// Bytes written back.
    pub writeback_bytes: u64,
    /// Completions reported as failed.
    pub failed_completions: u64,
    /// Dirty bytes cached now.
    pub dirty_bytes: u64,
    /// Blocks cached now.
    pub cached_blocks: u64,
    /// Bytes of cached blocks now (block sizes, valid or not).
    pub cached_bytes: u64,
    /// Requests with a miss and their bytes: AdaCache Fig. 13's "average
    /// missed request size" is `missed_request_bytes / missed_requests`.
    pub missed_requests: u64,
    /// See `missed_requests`.
    pub missed_request_bytes: u64,
    /// Per block size, smallest first.
    pub alloc: [AllocStats; MAX_CLASSES],
}

impl Stats {
    /// Average allocated block size (AdaCache Fig. 13), 0 before any.
    pub fn average_allocated_block(&self) -> f64 {
        let (n, bytes) = self.alloc.iter().fold((0u64, 0u64), |(n, b), a| {
            (n + a.blocks, b + a.blocks * a.size as u64)
        });
        if n == 0 {
            0.0
        } else {
            bytes as f64 / n as f64
        }
    }

    /// Average size of requests that missed, 0 before any.
    pub fn average_missed_request(&self) -> f64 {
        if self.missed_requests == 0 {
            0.0
        } else {
            self.missed_request_bytes as f64 / self.missed_requests as f64
        }
    }
}

/// Exact bytes of the engine's in-memory structures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    /// Block slabs, flags, chunk maps and indexes.
    pub blocks: usize,
    /// Extent and pin side tables.
    pub side_tables: usize,
    /// Group records and free list.
    pub groups: usize,
    /// In-flight records and scratch buffers.
    pub inflight: usize,
    /// Admission policy.
    pub admission: usize,
    /// Eviction policy (the active one, and the online choice's shadow
    /// caches when the policy is `auto`).
    pub eviction: usize,
    /// The volume's miss-ratio curve sampler ([`crate::mrc`]).
    pub mrc: usize,
    /// Blocks cached when measured.
    pub cached_blocks: u64,
}

impl Metadata {
    /// Sum of all parts.
    pub fn total(&self) -> usize {
        self.blocks
            + self.side_tables
            + self.groups
            + self.inflight
            + self.admission
            + self.eviction
            + self.mrc
    }

    /// The structures every configuration needs (blocks, side tables,
    /// groups) per cached block: the figure AdaCache puts at 40 bytes.
    pub fn core_bytes_per_block(&self) -> f64 {
        if self.cached_blocks == 0 {
            0.0
        } else {
            (self.blocks + self.side_tables + self.groups) as f64 / self.cached_blocks as f64
        }
    }

    /// Everything per cached block.
    pub fn total_bytes_per_block(&self) -> f64 {
        if self.cached_blocks == 0 {
            0.0
        } else {
            self.total() as f64 / self.cached_blocks as f64
        }
    }
}
