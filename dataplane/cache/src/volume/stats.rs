//! A cached volume's statistics: the engine's counters, the runtime's own
//! (errors, latencies, pass-through), and `bdev_adacache_get_stats`'s
//! shape: OCF's groups (usage, requests, blocks, errors) and ours.

use engine::Stats;
use serde::Serialize;

/// Latencies of one kind of request, microseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    /// Requests measured.
    pub count: u64,
    /// Mean.
    pub avg_us: f64,
    /// Largest.
    pub max_us: f64,
}

/// Accumulates latencies (the owner task is single-threaded).
#[derive(Clone, Debug, Default)]
pub(crate) struct LatencySum {
    count: u64,
    sum_ns: u128,
    max_ns: u64,
}

impl LatencySum {
    pub fn add(&mut self, ns: u64) {
        self.count += 1;
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn report(&self) -> Latency {
        Latency {
            count: self.count,
            avg_us: if self.count == 0 {
                0.0
            } else {
                self.sum_ns as f64 / self.count as f64 / 1000.0
            },
            max_us: self.max_ns as f64 / 1000.0,
        }
    }
}

/// I/O errors by device and direction.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Errors {
    /// Reads from core that failed.
    pub core_volume_rd: u64,
    /// Writes (and deallocates) to core that failed.
    pub core_volume_wr: u64,
    /// Reads from the cache device that failed.
    pub cache_volume_rd: u64,
    /// Writes to the cache device (data and metadata) that failed.
    pub cache_volume_wr: u64,
    /// All of them.
    pub total: u64,
}

/// What the runtime counts beside the engine.
#[derive(Clone, Debug, Default)]
pub(crate) struct RuntimeCounters {
    pub errors: Errors,
    pub read_hit: LatencySum,
    pub read_miss: LatencySum,
    pub write: LatencySum,
    /// Requests that bypassed the engine (pass-through mode, sequential
    /// cutoff) and their bytes.
    pub pt_reads: u64,
    pub pt_writes: u64,
    pub pt_read_bytes: u64,
    pub pt_write_bytes: u64,
    /// Bytes written back by cleaning and flushes.
    pub flushed_bytes: u64,
    /// Host flushes.
    pub host_flushes: u64,
    /// Metadata writes.
    pub meta_writes: u64,
}

/// OCF's usage group.
#[derive(Clone, Debug, Serialize)]
pub struct Usage {
    /// Cache bytes of this volume.
    pub capacity_bytes: u64,
    /// Bytes of cached blocks.
    pub occupancy_bytes: u64,
    /// Unused bytes.
    pub free_bytes: u64,
    /// Cached bytes holding no dirty data.
    pub clean_bytes: u64,
    /// Dirty bytes.
    pub dirty_bytes: u64,
}

/// OCF's requests group (counts).
#[derive(Clone, Debug, Serialize)]
pub struct Requests {
    /// Reads served entirely from the cache.
    pub rd_hits: u64,
    /// Reads with a missing byte.
    pub rd_misses: u64,
    /// Reads that bypassed the cache.
    pub rd_pt: u64,
    /// All reads.
    pub rd_total: u64,
    /// Writes landing entirely on cached blocks.
    pub wr_hits: u64,
    /// Other writes.
    pub wr_misses: u64,
    /// Writes that bypassed the cache.
    pub wr_pt: u64,
    /// All writes.
    pub wr_total: u64,
    /// Deallocates.
    pub deallocates: u64,
    /// Host flushes.
    pub flushes: u64,
}

/// OCF's blocks group, in bytes: the four I/O volumes and the host's.
#[derive(Clone, Debug, Serialize)]
pub struct Blocks {
    /// Read from core.
    pub core_volume_rd: u64,
    /// Written to core.
    pub core_volume_wr: u64,
    /// Read from the cache device.
    pub cache_volume_rd: u64,
    /// Written to the cache device.
    pub cache_volume_wr: u64,
    /// Read by the host.
    pub volume_rd: u64,
    /// Written by the host.
    pub volume_wr: u64,
}

/// Hit ratios, 0..=1.
#[derive(Clone, Debug, Serialize)]
pub struct HitRatios {
    /// Reads served entirely from the cache / reads.
    pub read: f64,
    /// Read bytes from the cache / read bytes.
    pub read_bytes: f64,
    /// Writes landing on cached blocks / writes.
    pub write: f64,
}

/// Evictions.
#[derive(Clone, Debug, Serialize)]
pub struct Evictions {
    /// Blocks evicted.
    pub blocks: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Whole groups reclaimed.
    pub groups: u64,
}

/// Latencies split by hit and miss.
#[derive(Clone, Debug, Serialize)]
pub struct Latencies {
    /// Reads served entirely from the cache.
    pub read_hit: Latency,
    /// Other reads.
    pub read_miss: Latency,
    /// Writes.
    pub write: Latency,
}

/// `bdev_adacache_get_stats` for one volume.
#[derive(Clone, Debug, Serialize)]
pub struct VolumeStats {
    /// The cached bdev.
    pub name: String,
    /// Current cache mode.
    pub write_mode: &'static str,
    /// The cache device failed and the volume runs in pass-through.
    pub degraded: bool,
    /// OCF usage.
    pub usage: Usage,
    /// OCF requests.
    pub requests: Requests,
    /// OCF blocks (bytes).
    pub blocks: Blocks,
    /// OCF errors.
    pub errors: Errors,
    /// Hit ratios.
    pub hit_ratio: HitRatios,
    /// Dirty bytes now.
    pub dirty_bytes: u64,
    /// Evictions.
    pub evictions: Evictions,
    /// Bytes written back to core by flushing and cleaning.
    pub flushed_bytes: u64,
    /// Bytes of in-memory metadata (engine structures and the persisted
    /// block table).
    pub metadata_bytes: u64,
    /// Metadata writes to the cache device.
    pub metadata_writes: u64,
    /// Blocks cached now.
    pub cached_blocks: u64,
    /// Average allocated block size, bytes.
    pub average_allocated_block_bytes: f64,
    /// Latencies.
    pub latency: Latencies,
}

/// Inputs of [`VolumeStats`] besides the counters.
pub(crate) struct StatsInput<'a> {
    pub name: &'a str,
    pub mode: &'static str,
    pub degraded: bool,
    pub capacity: u64,
    pub engine: &'a Stats,
    pub base: &'a Stats,
    pub rt: &'a RuntimeCounters,
    pub metadata_bytes: u64,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl VolumeStats {
    /// Figures since the last reset: `engine - base` for counters, gauges
    /// as they are.
    pub(crate) fn build(i: StatsInput<'_>) -> VolumeStats {
        let (e, b, rt) = (i.engine, i.base, i.rt);
        let d = |f: fn(&Stats) -> u64| f(e).saturating_sub(f(b));
        let rd_total = d(|s| s.read.requests);
        let rd_hits = d(|s| s.read.hit_requests);
        let wr_total = d(|s| s.write.requests);
        let wr_hits = d(|s| s.write.hit_requests);
        let read_bytes = d(|s| s.read.bytes);
        let read_hit_bytes = d(|s| s.read.hit_bytes);
        VolumeStats {
            name: i.name.to_owned(),
            write_mode: i.mode,
            degraded: i.degraded,
            usage: Usage {
                capacity_bytes: i.capacity,
                occupancy_bytes: e.cached_bytes,
                free_bytes: i.capacity.saturating_sub(e.cached_bytes),
                clean_bytes: e.cached_bytes.saturating_sub(e.dirty_bytes),
                dirty_bytes: e.dirty_bytes,
            },
            requests: Requests {
                rd_hits,
                rd_misses: rd_total - rd_hits.min(rd_total),
                rd_pt: rt.pt_reads,
                rd_total: rd_total + rt.pt_reads,
                wr_hits,
                wr_misses: wr_total - wr_hits.min(wr_total),
                wr_pt: rt.pt_writes,
                wr_total: wr_total + rt.pt_writes,
                deallocates: d(|s| s.deallocate_requests),
                flushes: rt.host_flushes,
            },
            blocks: Blocks {
                core_volume_rd: d(|s| s.read_from_core) + rt.pt_read_bytes,
                core_volume_wr: d(|s| s.write_to_core) + rt.pt_write_bytes,
                cache_volume_rd: d(|s| s.read_from_cache),
                cache_volume_wr: d(|s| s.write_to_cache),
                volume_rd: read_bytes + rt.pt_read_bytes,
                volume_wr: d(|s| s.write.bytes) + rt.pt_write_bytes,
            },
            errors: rt.errors,
            hit_ratio: HitRatios {
                read: ratio(rd_hits, rd_total + rt.pt_reads),
                read_bytes: ratio(read_hit_bytes, read_bytes + rt.pt_read_bytes),
                write: ratio(wr_hits, wr_total + rt.pt_writes),
            },
            dirty_bytes: e.dirty_bytes,
            evictions: Evictions {
                blocks: d(|s| s.evicted_blocks),
                bytes: d(|s| s.evicted_bytes),
                groups: d(|s| s.evicted_groups),
            },
            flushed_bytes: rt.flushed_bytes,
            metadata_bytes: i.metadata_bytes,
            metadata_writes: rt.meta_writes,
            cached_blocks: e.cached_blocks,
            average_allocated_block_bytes: e.average_allocated_block(),
            latency: Latencies {
                read_hit: rt.read_hit.report(),
                read_miss: rt.read_miss.report(),
                write: rt.write.report(),
            },
        }
    }
}
