//! `rackcache_cache_*` on /metrics: the figures of
//! `bdev_adacache_get_stats` for every cached bdev, labelled `bdev` (the
//! cached bdev) and `volume` (its core bdev).
//!
//! The statistics live in each volume's owner task, so they are copied
//! here by a refresh task once a second ([`refresh::run`], started by
//! `main`), not
//! when /metrics is scraped: the metrics server renders its registry
//! without calling back into the daemon. A scrape may thus be up to a
//! second behind `get_stats`.
//!
//! `get_stats` counts since the last `bdev_adacache_reset_stats`; the
//! Prometheus counters never go down: each refresh adds what the volume
//! counted since the previous one, and a reset first takes in what was
//! counted up to it (a figure found lower than before also counts as
//! restarted from zero). A few figures count since the volume started
//! rather than since the reset ([`LIFETIME_COUNTERS`]): a reset leaves
//! them alone.
//!
//! The miss-ratio curve is shown at the multiples of the capacity that
//! `get_stats` reads it at, one series per multiple (label `multiple`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use cache::volume::stats::MRC_MULTIPLES;
use cache::volume::{CachedVolume, VolumeStats};
use metrics::{Counter, FloatGauge, Gauge, Registry};

use crate::rpc::error::RpcError;

pub mod devices;
pub mod refresh;

type Field = fn(&VolumeStats) -> u64;

/// Counters: (family, help, figure of get_stats).
const COUNTERS: &[(&str, &str, Field)] = &[
    (
        "rackcache_cache_read_hits_total",
        "Reads served entirely from the cache.",
        |s| s.requests.rd_hits,
    ),
    (
        "rackcache_cache_read_misses_total",
        "Reads that missed some byte.",
        |s| s.requests.rd_misses,
    ),
    (
        "rackcache_cache_read_passthrough_total",
        "Reads that bypassed the cache.",
        |s| s.requests.rd_pt,
    ),
    (
        "rackcache_cache_write_hits_total",
        "Writes landing entirely on cached blocks.",
        |s| s.requests.wr_hits,
    ),
    (
        "rackcache_cache_write_misses_total",
        "Other writes through the cache.",
        |s| s.requests.wr_misses,
    ),
    (
        "rackcache_cache_write_passthrough_total",
        "Writes that bypassed the cache.",
        |s| s.requests.wr_pt,
    ),
    (
        "rackcache_cache_deallocates_total",
        "Deallocate requests.",
        |s| s.requests.deallocates,
    ),
    (
        "rackcache_cache_core_read_bytes_total",
        "Bytes read from the core bdev.",
        |s| s.blocks.core_volume_rd,
    ),
    (
        "rackcache_cache_core_written_bytes_total",
        "Bytes written to the core bdev.",
        |s| s.blocks.core_volume_wr,
    ),
    (
        "rackcache_cache_cache_read_bytes_total",
        "Bytes read from the cache device.",
        |s| s.blocks.cache_volume_rd,
    ),
    (
        "rackcache_cache_cache_written_bytes_total",
        "Bytes written to the cache device.",
        |s| s.blocks.cache_volume_wr,
    ),
    (
        "rackcache_cache_host_read_bytes_total",
        "Bytes read by hosts.",
        |s| s.blocks.volume_rd,
    ),
    (
        "rackcache_cache_host_written_bytes_total",
        "Bytes written by hosts.",
        |s| s.blocks.volume_wr,
    ),
    (
        "rackcache_cache_evicted_blocks_total",
        "Cache blocks evicted.",
        |s| s.evictions.blocks,
    ),
    (
        "rackcache_cache_evicted_bytes_total",
        "Bytes of evicted cache blocks.",
        |s| s.evictions.bytes,
    ),
    (
        "rackcache_cache_flushed_bytes_total",
        "Dirty bytes written back to core by flushing and cleaning.",
        |s| s.flushed_bytes,
    ),
    (
        "rackcache_cache_metadata_writes_total",
        "Metadata writes to the cache device.",
        |s| s.metadata_writes,
    ),
    (
        "rackcache_cache_core_read_errors_total",
        "Failed reads from the core bdev.",
        |s| s.errors.core_volume_rd,
    ),
    (
        "rackcache_cache_core_write_errors_total",
        "Failed writes to the core bdev.",
        |s| s.errors.core_volume_wr,
    ),
    (
        "rackcache_cache_cache_read_errors_total",
        "Failed reads from the cache device.",
        |s| s.errors.cache_volume_rd,
    ),
    (
        "rackcache_cache_cache_write_errors_total",
        "Failed writes to the cache device.",
        |s| s.errors.cache_volume_wr,
    ),
];

/// Counters that `bdev_adacache_reset_stats` does not restart: (family,
/// help, figure). A figure found lower than before restarted from zero
/// (its count restarts with the online choice: a policy change, a resize).
const LIFETIME_COUNTERS: &[(&str, &str, Field)] = &[(
    "rackcache_cache_eviction_switches_total",
    "Eviction policy switches made by online choice (eviction auto).",
    |s| s.eviction.auto.as_ref().map_or(0, |a| a.switches),
)];

/// The miss-ratio curve's family: one series per multiple of the capacity.
const MRC_FAMILY: (&str, &str) = (
    "rackcache_cache_mrc_miss_ratio",
    "LRU miss ratio of a cache of the labelled multiple of the volume's capacity, from the volume's miss-ratio curve since it started (0 before any reference).",
);

/// The `multiple` label of [`MRC_MULTIPLES`]' entries: 0.25, 0.5, 1, 2, 4.
fn multiple_labels() -> Vec<String> {
    MRC_MULTIPLES
        .iter()
        .map(|&(num, den)| (num as f64 / den as f64).to_string())
        .collect()
}

/// Whole-number gauges: (family, help, figure).
const GAUGES: &[(&str, &str, Field)] = &[
    (
        "rackcache_cache_dirty_bytes",
        "Dirty bytes in the cache.",
        |s| s.dirty_bytes,
    ),
    (
        "rackcache_cache_occupancy_bytes",
        "Bytes of cached blocks.",
        |s| s.usage.occupancy_bytes,
    ),
    (
        "rackcache_cache_capacity_bytes",
        "Cache bytes of the volume.",
        |s| s.usage.capacity_bytes,
    ),
    (
        "rackcache_cache_metadata_bytes",
        "Bytes of in-memory metadata of the volume.",
        |s| s.metadata_bytes,
    ),
    ("rackcache_cache_cached_blocks", "Blocks cached now.", |s| {
        s.cached_blocks
    }),
    (
        "rackcache_cache_damaged_bytes",
        "Dirty bytes that failed their checksum on the cache device: not served (media error), not written back.",
        |s| s.damaged_bytes,
    ),
    (
        "rackcache_cache_degraded",
        "1 when the cache device failed and the volume runs in pass-through.",
        |s| u64::from(s.degraded),
    ),
];

type Ratio = fn(&VolumeStats) -> f64;

/// Ratio gauges: (family, help, figure); since the last reset, as
/// get_stats gives them.
const RATIOS: &[(&str, &str, Ratio)] = &[
    (
        "rackcache_cache_read_hit_ratio",
        "Reads served entirely from the cache / reads, since the last reset.",
        |s| s.hit_ratio.read,
    ),
    (
        "rackcache_cache_read_hit_bytes_ratio",
        "Read bytes served from the cache / read bytes, since the last reset.",
        |s| s.hit_ratio.read_bytes,
    ),
    (
        "rackcache_cache_write_hit_ratio",
        "Writes landing on cached blocks / writes, since the last reset.",
        |s| s.hit_ratio.write,
    ),
];

/// The series of one cached bdev, and the figures last added.
struct Series {
    labels: (String, String),
    counters: Vec<Arc<Counter>>,
    last: Vec<u64>,
    gauges: Vec<Arc<Gauge>>,
    ratios: Vec<Arc<FloatGauge>>,
    lifetime: Vec<Arc<Counter>>,
    lifetime_last: Vec<u64>,
    /// By [`MRC_MULTIPLES`].
    mrc: Vec<Arc<FloatGauge>>,
}

/// Adds to `counter` what `now` counted beyond `last` (all of `now` if it
/// restarted from zero), and remembers `now`.
fn advance(counter: &Counter, last: &mut u64, now: u64) {
    counter.add(if now >= *last { now - *last } else { now });
    *last = now;
}

impl Series {
    fn update(&mut self, s: &VolumeStats) {
        for (i, (_, _, f)) in COUNTERS.iter().enumerate() {
            advance(&self.counters[i], &mut self.last[i], f(s));
        }
        for (i, (_, _, f)) in LIFETIME_COUNTERS.iter().enumerate() {
            advance(&self.lifetime[i], &mut self.lifetime_last[i], f(s));
        }
        for (g, m) in self.mrc.iter().zip(&s.mrc.miss_ratio) {
            g.set(m.miss_ratio);
        }
        for (g, (_, _, f)) in self.gauges.iter().zip(GAUGES) {
            g.set(i64::try_from(f(s)).unwrap_or(i64::MAX));
        }
        for (g, (_, _, f)) in self.ratios.iter().zip(RATIOS) {
            g.set(f(s));
        }
    }
}

/// A cached bdev's series and their labels (bdev, volume).
type Entry = (Arc<tokio::sync::Mutex<Series>>, (String, String));

/// Every cached bdev's series, by cached bdev name. The async mutex
/// serialises refreshes and resets, which both ask the owner task.
#[derive(Default)]
pub struct CacheMetrics {
    series: Mutex<HashMap<String, Entry>>,
}

impl CacheMetrics {
    /// Registers the series of cached bdev `v`.
    pub fn add(&self, registry: &Registry, v: &CachedVolume) {
        let (bdev, volume) = (v.params().name, v.core_name());
        let l = [("bdev", bdev.as_str()), ("volume", volume.as_str())];
        let series = Series {
            counters: COUNTERS
                .iter()
                .map(|(n, h, _)| registry.counter(n, h, &l).expect("valid metric names"))
                .collect(),
            last: vec![0; COUNTERS.len()],
            gauges: GAUGES
                .iter()
                .map(|(n, h, _)| registry.gauge(n, h, &l).expect("valid metric names"))
                .collect(),
            ratios: RATIOS
                .iter()
                .map(|(n, h, _)| registry.float_gauge(n, h, &l).expect("valid metric names"))
                .collect(),
            lifetime: LIFETIME_COUNTERS
                .iter()
                .map(|(n, h, _)| registry.counter(n, h, &l).expect("valid metric names"))
                .collect(),
            lifetime_last: vec![0; LIFETIME_COUNTERS.len()],
            mrc: multiple_labels()
                .iter()
                .map(|m| {
                    let (n, h) = MRC_FAMILY;
                    let l = [l[0], l[1], ("multiple", m.as_str())];
                    registry.float_gauge(n, h, &l).expect("valid metric names")
                })
                .collect(),
            labels: (bdev.clone(), volume),
        };
        let labels = series.labels.clone();
        self.lock()
            .insert(bdev, (Arc::new(tokio::sync::Mutex::new(series)), labels));
    }

    /// Removes cached bdev `name`'s series (it was deleted).
    pub fn remove(&self, registry: &Registry, name: &str) {
        let Some(s) = self.lock().remove(name) else {
            return;
        };
        // A refresh still running may add to the handles: no longer shown.
        let (bdev, volume) = &s.1;
        let l = [("bdev", bdev.as_str()), ("volume", volume.as_str())];
        for (n, _, _) in COUNTERS.iter().chain(GAUGES).chain(LIFETIME_COUNTERS) {
            registry.remove(n, &l);
        }
        for (n, _, _) in RATIOS {
            registry.remove(n, &l);
        }
        for m in multiple_labels() {
            registry.remove(MRC_FAMILY.0, &[l[0], l[1], ("multiple", m.as_str())]);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.series.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, name: &str) -> Option<Arc<tokio::sync::Mutex<Series>>> {
        self.lock().get(name).map(|e| Arc::clone(&e.0))
    }

    /// Copies `v`'s statistics into its series.
    pub async fn refresh(&self, v: &CachedVolume) {
        let Some(series) = self.get(&v.params().name) else {
            return;
        };
        let mut series = series.lock().await;
        if let Ok(s) = v.stats().await {
            series.update(&s);
        }
    }

    /// Takes in `v`'s figures, then runs `reset` (the volume's reset), so
    /// that the counters keep what was counted before it. The lifetime
    /// counters' figures do not restart: their last values stay.
    pub async fn reset<F, Fut>(&self, v: &CachedVolume, reset: F) -> Result<(), RpcError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(), RpcError>>,
    {
        let series = self.get(&v.params().name);
        let mut guard = match &series {
            Some(s) => Some(s.lock().await),
            None => None,
        };
        if let (Some(g), Ok(s)) = (guard.as_mut(), v.stats().await) {
            g.update(&s);
        }
        reset().await?;
        if let Some(g) = guard.as_mut() {
            g.last.iter_mut().for_each(|l| *l = 0);
        }
        Ok(())
    }
}
