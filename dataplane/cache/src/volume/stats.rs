//! A cached volume's statistics: the engine's counters, the runtime's own
//! (errors, latencies, pass-through), and `bdev_adacache_get_stats`'s
//! shape: OCF's groups (usage, requests, blocks, errors) and ours, with
//! the miss-ratio curve at a few multiples of the capacity and the
//! eviction policy's online choice; and `bdev_adacache_get_mrc`'s whole
//! curve ([`VolumeMrc`]).

use crate::volume::replica::{ReplicaStats, Role};
use engine::choice::ChoiceReport;
use engine::mrc::Curve;
use engine::{FillReport, Stats};
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
    /// A mirror's dirty bytes its owner's marks cleaned.
    pub marked_clean_bytes: u64,
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
    /// `owner`, or `mirror` (holds its owner's dirty data, writes back
    /// nothing).
    pub role: &'static str,
    /// An owner's mirror, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<ReplicaStats>,
    /// A mirror's dirty bytes its owner's marks cleaned.
    pub marked_clean_bytes: u64,
    /// The control plane's epoch of the volume, when it keeps one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Loaded with an epoch and not confirmed since: writes nothing back.
    pub held: bool,
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
    /// Dirty bytes that failed their checksum: the host gets a media error
    /// on them, and they are never written back.
    pub damaged_bytes: u64,
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
    /// The LRU miss-ratio curve around the current capacity (since the
    /// volume started: `reset_stats` does not restart it).
    pub mrc: MrcSummary,
    /// The eviction policy in use and, under `auto`, its online choice.
    pub eviction: EvictionState,
    /// Fill sizing by locality (`fill_size` `locality`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<FillState>,
}

/// The state of fill sizing by locality.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FillState {
    /// The smallest block a miss fills now, bytes.
    pub floor_bytes: u32,
    /// Times the floor changed since the volume started.
    pub switches: u64,
    /// Per candidate floor: the read hit ratio of its sampled shadow
    /// cache since the volume started.
    pub shadows: Vec<FillShadow>,
}

/// One candidate floor's shadow.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FillShadow {
    /// The floor, bytes.
    pub floor_bytes: u32,
    /// Its shadow's read hit ratio (of sampled 4 KiB units).
    pub read_hit_ratio: f64,
}

impl From<&FillReport> for FillState {
    fn from(r: &FillReport) -> Self {
        FillState {
            floor_bytes: r.floor,
            switches: r.switches,
            shadows: r
                .shadows
                .iter()
                .map(|&(floor_bytes, read_hit_ratio)| FillShadow {
                    floor_bytes,
                    read_hit_ratio,
                })
                .collect(),
        }
    }
}

/// The multiples of the capacity at which [`MrcSummary`] reads the curve,
/// as (numerator, denominator).
pub const MRC_MULTIPLES: [(u64, u64); 5] = [(1, 4), (1, 2), (1, 1), (2, 1), (4, 1)];

/// One point of a miss-ratio curve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MrcPoint {
    /// Cache size, bytes.
    pub cache_bytes: u64,
    /// Fraction of block references an LRU cache of that size misses.
    pub miss_ratio: f64,
}

/// The curve read at one multiple of the capacity.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MrcSample {
    /// `cache_bytes` / the volume's capacity.
    pub multiple: f64,
    /// Cache size, bytes.
    pub cache_bytes: u64,
    /// Its LRU miss ratio (interpolated between the curve's points).
    pub miss_ratio: f64,
}

/// `get_stats`' compact miss-ratio curve: the LRU miss ratio at
/// [`MRC_MULTIPLES`] of the capacity. With no references yet every ratio
/// is 0 (the curve has no points).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MrcSummary {
    /// Block references the curve counts.
    pub references: u64,
    /// Bytes per block reference (the volume's smallest block size).
    pub block_size: u32,
    /// The curve at 0.25, 0.5, 1, 2 and 4 times the capacity.
    pub miss_ratio: Vec<MrcSample>,
}

impl MrcSummary {
    /// `curve` read around a capacity of `capacity` bytes.
    pub fn new(curve: &Curve, capacity: u64) -> MrcSummary {
        MrcSummary {
            references: curve.references(),
            block_size: curve.block_size(),
            miss_ratio: MRC_MULTIPLES
                .iter()
                .map(|&(num, den)| {
                    let cache_bytes = capacity.saturating_mul(num) / den;
                    MrcSample {
                        multiple: num as f64 / den as f64,
                        cache_bytes,
                        miss_ratio: curve.miss_ratio(cache_bytes),
                    }
                })
                .collect(),
        }
    }
}

/// One candidate of the online policy choice.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShadowMisses {
    /// The candidate policy.
    pub policy: &'static str,
    /// Its shadow cache's miss ratio since the choice started.
    pub miss_ratio: f64,
}

/// The online policy choice (`eviction: auto`), as the engine reports it
/// ([`ChoiceReport`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutoChoice {
    /// The policy in use.
    pub active: &'static str,
    /// Times the policy was switched since the choice started: when the
    /// volume started, its policies were last set
    /// (`bdev_adacache_set_policy`) or it was last resized.
    pub switches: u64,
    /// Fraction of the smallest blocks the shadows sample.
    pub sampling_rate: f64,
    /// Blocks each shadow cache holds.
    pub shadow_slots: u32,
    /// Every candidate's shadow miss ratio.
    pub shadows: Vec<ShadowMisses>,
    /// Bytes of the sampler, shadows and scores.
    pub memory_bytes: u64,
}

impl From<&ChoiceReport> for AutoChoice {
    fn from(r: &ChoiceReport) -> AutoChoice {
        AutoChoice {
            active: r.active,
            switches: r.switches,
            sampling_rate: r.rate,
            shadow_slots: r.shadow_slots,
            shadows: r
                .shadows
                .iter()
                .map(|&(policy, miss_ratio)| ShadowMisses { policy, miss_ratio })
                .collect(),
            memory_bytes: r.memory_bytes as u64,
        }
    }
}

/// `get_stats`' eviction group.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EvictionState {
    /// The policy choosing victims now (under `auto`, the candidate in
    /// use).
    pub policy: &'static str,
    /// The policy as configured (`bdev_adacache_create`,
    /// `bdev_adacache_set_policy`), e.g. `auto`.
    pub configured: String,
    /// The online choice, when configured `auto`; `None` otherwise.
    pub auto: Option<AutoChoice>,
}

impl EvictionState {
    /// The group from the engine's active policy name, the configured
    /// name and its choice report.
    pub fn new(policy: &'static str, configured: &str, choice: Option<&ChoiceReport>) -> Self {
        EvictionState {
            policy,
            configured: configured.to_owned(),
            auto: choice.map(AutoChoice::from),
        }
    }
}

/// `bdev_adacache_get_mrc`: a volume's whole miss-ratio curve.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VolumeMrc {
    /// The cached bdev.
    pub name: String,
    /// Bytes per block reference (the volume's smallest block size).
    pub block_size: u32,
    /// Block references the curve counts, since the volume started.
    pub references: u64,
    /// The volume's cache bytes now.
    pub capacity_bytes: u64,
    /// The curve at `capacity_bytes`.
    pub miss_ratio_at_capacity: f64,
    /// The curve's points, smallest cache first, as the engine gives them:
    /// the origin and one per reuse-distance bucket (about a thousand at
    /// most); none before the first reference.
    pub points: Vec<MrcPoint>,
}

impl VolumeMrc {
    /// `curve` of cached bdev `name`, whose capacity is `capacity` bytes.
    pub fn new(name: &str, curve: &Curve, capacity: u64) -> VolumeMrc {
        VolumeMrc {
            name: name.to_owned(),
            block_size: curve.block_size(),
            references: curve.references(),
            capacity_bytes: capacity,
            miss_ratio_at_capacity: curve.miss_ratio(capacity),
            points: curve
                .points()
                .iter()
                .map(|p| MrcPoint {
                    cache_bytes: p.cache_bytes,
                    miss_ratio: p.miss_ratio,
                })
                .collect(),
        }
    }
}

/// Inputs of [`VolumeStats`] besides the counters.
pub(crate) struct StatsInput<'a> {
    pub name: &'a str,
    pub mode: &'static str,
    pub role: Role,
    pub replica: Option<ReplicaStats>,
    pub epoch: Option<u64>,
    pub held: bool,
    pub degraded: bool,
    pub damaged_bytes: u64,
    pub capacity: u64,
    pub engine: &'a Stats,
    pub base: &'a Stats,
    pub rt: &'a RuntimeCounters,
    pub metadata_bytes: u64,
    pub mrc: MrcSummary,
    pub eviction: EvictionState,
    pub fill: Option<FillState>,
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
            role: i.role.name(),
            replica: i.replica,
            marked_clean_bytes: rt.marked_clean_bytes,
            epoch: i.epoch,
            held: i.held,
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
            damaged_bytes: i.damaged_bytes,
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
            mrc: i.mrc,
            eviction: i.eviction,
            fill: i.fill,
        }
    }
}

#[cfg(test)]
mod tests {
    use engine::mrc::{Shards, ShardsConfig};
    use serde_json::{json, Value};

    use super::*;

    const BS: u32 = 4096;

    /// The exact curve of `passes` cyclic scans over `blocks` blocks: LRU
    /// misses everything below `blocks` blocks, only first references from
    /// there on.
    fn scans(blocks: u64, passes: u32) -> Curve {
        let mut s = Shards::new(ShardsConfig::exact(BS)).unwrap();
        for _ in 0..passes {
            for b in 0..blocks {
                s.access(b);
            }
        }
        s.curve()
    }

    #[test]
    fn compact_curve_reads_multiples_of_the_capacity() {
        // 100 blocks scanned 4 times; a capacity of 160 blocks: 0.25x is
        // 40 blocks (all misses), 0.5x 80 (all), 1x and beyond only the
        // first references (1/4).
        let cap = 160 * u64::from(BS);
        let m = MrcSummary::new(&scans(100, 4), cap);
        assert_eq!((m.references, m.block_size), (400, BS));
        let got: Vec<(f64, u64, f64)> = m
            .miss_ratio
            .iter()
            .map(|s| (s.multiple, s.cache_bytes, s.miss_ratio))
            .collect();
        assert_eq!(
            got,
            vec![
                (0.25, cap / 4, 1.0),
                (0.5, cap / 2, 1.0),
                (1.0, cap, 0.25),
                (2.0, 2 * cap, 0.25),
                (4.0, 4 * cap, 0.25),
            ]
        );
        assert_eq!(
            serde_json::to_value(&m).unwrap()["miss_ratio"][2],
            json!({"multiple": 1.0, "cache_bytes": cap, "miss_ratio": 0.25})
        );
    }

    #[test]
    fn compact_curve_at_the_working_set_without_references_and_saturating() {
        // Capacity 200 blocks: 0.25x is 50 blocks, below the 100-block
        // working set; 0.5x is exactly it.
        let cap = 200 * u64::from(BS);
        let m = MrcSummary::new(&scans(100, 2), cap);
        let ratios: Vec<f64> = m.miss_ratio.iter().map(|s| s.miss_ratio).collect();
        assert_eq!(ratios, vec![1.0, 0.5, 0.5, 0.5, 0.5]);

        // No references: five entries all the same (0: no data), so
        // clients see one shape.
        let empty = MrcSummary::new(&scans(0, 0), cap);
        assert_eq!(empty.references, 0);
        assert_eq!(empty.miss_ratio.len(), MRC_MULTIPLES.len());
        assert!(empty.miss_ratio.iter().all(|s| s.miss_ratio == 0.0));
        // A capacity near u64::MAX saturates instead of wrapping.
        let huge = MrcSummary::new(&scans(1, 1), u64::MAX);
        assert_eq!(huge.miss_ratio[3].cache_bytes, u64::MAX);
        assert_eq!(huge.miss_ratio[4].cache_bytes, u64::MAX);
    }

    #[test]
    fn eviction_group_with_and_without_online_choice() {
        let report = ChoiceReport {
            active: "s3fifo",
            switches: 3,
            rate: 0.125,
            shadow_slots: 2048,
            shadows: vec![("s3fifo", 0.25), ("lru2", 0.5)],
            memory_bytes: 4096,
        };
        let auto = EvictionState::new("s3fifo", "auto", Some(&report));
        assert_eq!(
            serde_json::to_value(&auto).unwrap(),
            json!({
                "policy": "s3fifo",
                "configured": "auto",
                "auto": {
                    "active": "s3fifo",
                    "switches": 3,
                    "sampling_rate": 0.125,
                    "shadow_slots": 2048,
                    "shadows": [
                        {"policy": "s3fifo", "miss_ratio": 0.25},
                        {"policy": "lru2", "miss_ratio": 0.5}
                    ],
                    "memory_bytes": 4096
                }
            })
        );
        let pinned = EvictionState::new("lazy", "lazy:2:1.0", None);
        assert_eq!(
            serde_json::to_value(&pinned).unwrap(),
            json!({"policy": "lazy", "configured": "lazy:2:1.0", "auto": null})
        );
    }

    #[test]
    fn whole_curve_keeps_every_point() {
        let curve = scans(100, 3);
        let cap = 150 * u64::from(BS);
        let m = VolumeMrc::new("C0", &curve, cap);
        assert_eq!(
            (
                m.name.as_str(),
                m.block_size,
                m.references,
                m.capacity_bytes
            ),
            ("C0", BS, 300, cap)
        );
        assert_eq!(m.points.len(), curve.points().len());
        assert_eq!(
            m.points[0],
            MrcPoint {
                cache_bytes: 0,
                miss_ratio: 1.0
            }
        );
        // One point per block of distance: 1.0 up to 99 blocks, a third
        // (the first references) from 100 on.
        assert_eq!(m.points[99].miss_ratio, 1.0);
        assert_eq!(m.points[100].cache_bytes, 100 * u64::from(BS));
        assert_eq!(m.points[100].miss_ratio, 1.0 / 3.0);
        assert_eq!(m.miss_ratio_at_capacity, 1.0 / 3.0);
        assert!(m
            .points
            .windows(2)
            .all(|w| w[0].cache_bytes < w[1].cache_bytes && w[0].miss_ratio >= w[1].miss_ratio));
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v["points"][100],
            json!({"cache_bytes": 409600, "miss_ratio": 1.0 / 3.0})
        );

        let none = VolumeMrc::new("C1", &scans(0, 0), cap);
        assert_eq!((none.references, none.points.len()), (0, 0));
        assert_eq!(none.miss_ratio_at_capacity, 0.0);
    }

    #[test]
    fn stats_carry_the_compact_curve_and_the_eviction_group() {
        let stats = Stats::default();
        let cap = 64 * u64::from(BS);
        let s = VolumeStats::build(StatsInput {
            name: "C0",
            mode: "wt",
            role: Role::Owner,
            replica: None,
            epoch: None,
            held: false,
            degraded: false,
            damaged_bytes: 0,
            capacity: cap,
            engine: &stats,
            base: &stats,
            rt: &RuntimeCounters::default(),
            metadata_bytes: 0,
            mrc: MrcSummary::new(&scans(10, 2), cap),
            eviction: EvictionState::new("lru2", "lru2", None),
            fill: Some(FillState::from(&FillReport {
                floor: 4096,
                switches: 1,
                rate: 1.0,
                shadows: vec![(4096, 0.75), (32768, 0.5)],
                memory_bytes: 0,
            })),
        });
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["mrc"]["references"], 20);
        assert_eq!(v["mrc"]["miss_ratio"].as_array().unwrap().len(), 5);
        assert_eq!(v["mrc"]["miss_ratio"][0]["miss_ratio"], 0.5);
        assert_eq!(v["eviction"]["policy"], "lru2");
        assert_eq!(v["eviction"]["auto"], Value::Null);
        assert_eq!(v["fill"]["floor_bytes"], 4096);
        assert_eq!(v["fill"]["shadows"][1]["read_hit_ratio"], 0.5);
    }
}
