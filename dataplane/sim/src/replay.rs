//! Replaying a trace through the engine: a first pass learns the trace's
//! shape (working set, the volumes and the parts of them the requests
//! touch, hence their layout: `layout.rs`), then each configuration streams
//! the trace again, planning every request and completing its I/O at once,
//! as a device that never fails would.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use engine::config::max_volume_size;
use engine::{Completion, Config, Engine, FlushKind, OpStats, Plan, PlanStatus, Stats};
use traces::{Format, OpenOptions, Request, TraceReader, WorkingSet};

use crate::latency::Histogram;
use crate::layout::{Footprint, Layout, LayoutKind};
use crate::report::{FillSummary, Report};

/// Granularity of the working set that `N%` cache sizes refer to (the
/// paper's WSS counts 4 KiB blocks).
const WORKING_SET_BLOCK: u64 = 4096;

/// Requests between two samples of the engine's metadata size.
const METADATA_SAMPLE_EVERY: u64 = 64;

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The trace could not be read (the message names the file and line).
    #[error(transparent)]
    Trace(#[from] traces::Error),
    /// The configuration was rejected by the engine.
    #[error("configuration {label}: {source}")]
    Config {
        /// The configuration's label.
        label: String,
        /// What the engine said.
        source: engine::ConfigError,
    },
    /// The trace has no requests (after the volume filter).
    #[error("{0}: no requests to replay")]
    Empty(PathBuf),
    /// The trace's address space is larger than the engine can index.
    #[error("{path}: the trace's {layout} layout spans {bytes} bytes, more than the {max} bytes the engine indexes with blocks of {smallest} bytes{hint}")]
    TooLarge {
        /// The trace.
        path: PathBuf,
        /// `dense` or `sparse`.
        layout: LayoutKind,
        /// Its address space.
        bytes: u64,
        /// The engine's limit with `smallest`.
        max: u64,
        /// The smallest block size configured.
        smallest: u32,
        /// What to try instead.
        hint: &'static str,
    },
    /// The miss-ratio curve sampler refused its configuration.
    #[error("miss-ratio curve: {0}")]
    Mrc(String),
    /// The engine refused a request or answered in a way an instantly
    /// completing device cannot produce: a bug, reported with its position.
    #[error("{path}: request {index}: {message}")]
    Engine {
        /// The trace.
        path: PathBuf,
        /// The request's position (0-based, after filtering).
        index: u64,
        /// What went wrong.
        message: String,
    },
}

/// Which trace to read, and which part of it.
#[derive(Clone, Debug)]
pub struct TraceSpec {
    /// The trace file.
    pub path: PathBuf,
    /// Its format; detected from the content when `None`.
    pub format: Option<Format>,
    /// Bytes per oracleGeneral object id (512 for converted block traces).
    pub oracle_id_unit: u64,
    /// Only this volume's requests.
    pub volume: Option<u32>,
    /// At most this many requests (after the volume filter).
    pub limit: Option<u64>,
}

impl TraceSpec {
    /// A whole trace, format detected.
    pub fn new(path: impl Into<PathBuf>) -> TraceSpec {
        TraceSpec {
            path: path.into(),
            format: None,
            oracle_id_unit: 1,
            volume: None,
            limit: None,
        }
    }

    fn open(&self) -> Result<TraceReader, SimError> {
        let mut o = OpenOptions::new().oracle_id_unit(self.oracle_id_unit);
        if let Some(f) = self.format {
            o = o.format(f);
        }
        Ok(o.open(&self.path)?)
    }

    /// Streams the selected requests to `f` with their index (0-based,
    /// after the volume filter); the first error `f` returns stops the
    /// stream. Any replay of the same spec sees the same requests in the
    /// same order (the load generator's replay relies on it).
    pub fn for_each<E: From<SimError>>(
        &self,
        mut f: impl FnMut(u64, &Request) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut reader = self.open()?;
        let mut index = 0;
        while let Some(r) = reader.next_request().map_err(SimError::from)? {
            if self.volume.is_some_and(|v| v != r.volume) {
                continue;
            }
            if self.limit.is_some_and(|l| index >= l) {
                break;
            }
            f(index, &r)?;
            index += 1;
        }
        Ok(())
    }
}

/// What the first pass learned about a trace.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Requests selected.
    pub requests: u64,
    /// Distinct 4 KiB blocks touched, in bytes (the paper's WSS).
    pub working_set_bytes: u64,
    /// The same per volume.
    pub volume_working_set: BTreeMap<u32, u64>,
    /// Bytes read and written by the requests.
    pub read_bytes: u64,
    /// See `read_bytes`.
    pub write_bytes: u64,
    /// Where each volume's requests go in the engine's address space.
    pub layout: Layout,
    /// The engine's volume size: `layout.address_space()`.
    pub address_space: u64,
    /// Alignment requests are widened to (the engine's sector size).
    pub sector_size: u64,
}

impl Profile {
    /// Reads the whole trace once, with the layout `LayoutKind::Auto`
    /// picks. Requests are widened to `sector_size` boundaries (traces log
    /// 512-byte sectors; the cache works in 4 KiB).
    pub fn scan(spec: &TraceSpec, sector_size: u64) -> Result<Profile, SimError> {
        Profile::scan_with_layout(spec, sector_size, LayoutKind::Auto)
    }

    /// [`Profile::scan`] with the given layout.
    pub fn scan_with_layout(
        spec: &TraceSpec,
        sector_size: u64,
        kind: LayoutKind,
    ) -> Result<Profile, SimError> {
        let mut ws = WorkingSet::new(WORKING_SET_BLOCK);
        let mut footprint = Footprint::new();
        let mut requests = 0;
        spec.for_each(|_, r| -> Result<(), SimError> {
            ws.add(r);
            let (start, end) = widen(r, sector_size);
            footprint.add(r.volume, start, end);
            requests += 1;
            Ok(())
        })?;
        if requests == 0 {
            return Err(SimError::Empty(spec.path.clone()));
        }
        let volume_working_set = footprint
            .volume_ids()
            .map(|v| (v, ws.volume_blocks(v) * WORKING_SET_BLOCK))
            .collect();
        let layout = footprint.layout(kind);
        Ok(Profile {
            requests,
            working_set_bytes: ws.bytes(),
            volume_working_set,
            read_bytes: ws.read_bytes(),
            write_bytes: ws.write_bytes(),
            address_space: layout.address_space(),
            layout,
            sector_size,
        })
    }

    /// Volumes selected.
    pub fn volumes(&self) -> usize {
        self.layout.volumes()
    }

    /// The request's aligned range (offset, length) in the engine's address
    /// space: widened to `sector_size`, then placed by the layout.
    pub fn place(&self, r: &Request) -> (u64, u64) {
        let (start, end) = widen(r, self.sector_size);
        (self.layout.place(r.volume, start, end - start), end - start)
    }
}

/// The request's volume range widened to `sector` boundaries.
fn widen(r: &Request, sector: u64) -> (u64, u64) {
    (r.offset / sector * sector, round_up(r.end(), sector))
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to).saturating_mul(to)
}

/// When dirty blocks are written back besides eviction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FlushPolicy {
    /// Only when their space is reused (AdaCache's replay setting).
    None,
    /// A batch whenever the trace is idle for at least `idle_ns` between two
    /// requests.
    Lazy {
        /// Gap that counts as idle, in nanoseconds of trace time.
        idle_ns: u64,
    },
    /// A batch after each request while dirty data is above the configured
    /// ratio.
    Aggressive,
}

/// One configuration to simulate.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Name in the table, e.g. `fixed-32KiB`.
    pub label: String,
    /// The engine's configuration; `volume_size` and `capacity` are set
    /// from the trace.
    pub engine: Config,
    /// Flushing besides eviction.
    pub flush: FlushPolicy,
}

/// Replays the trace through one configuration with `cache_bytes` of cache.
/// `progress` is called every few thousand requests with the count so far.
pub fn replay(
    spec: &TraceSpec,
    profile: &Profile,
    sim: &SimConfig,
    cache_bytes: u64,
    progress: impl FnMut(u64),
) -> Result<Report, SimError> {
    replay_from(spec, profile, sim, cache_bytes, 0, progress)
}

/// [`replay`], with the first `warmup` requests replayed but left out of
/// the request counts, hit ratios and I/O volumes (as a run whose counters
/// are reset after a warm-up). `spec` may select fewer requests than
/// `profile` was scanned from: the layout stays that of the profile.
pub fn replay_from(
    spec: &TraceSpec,
    profile: &Profile,
    sim: &SimConfig,
    cache_bytes: u64,
    warmup: u64,
    mut progress: impl FnMut(u64),
) -> Result<Report, SimError> {
    let mut cfg = sim.engine.clone();
    cfg.volume_size = profile.address_space;
    cfg.capacity = cache_bytes;
    let smallest = *cfg.block_sizes.iter().min().unwrap_or(&0);
    cfg.sector_size = profile.sector_size as u32;
    if smallest > 0 && profile.address_space > max_volume_size(smallest) {
        let kind = profile.layout.kind();
        return Err(SimError::TooLarge {
            path: spec.path.clone(),
            layout: kind,
            bytes: profile.address_space,
            max: max_volume_size(smallest),
            smallest,
            hint: if kind == LayoutKind::Dense {
                " (--layout sparse packs only the 1 MiB regions requests touch)"
            } else {
                " (a larger smallest block size, or fewer requests: --volume, --limit)"
            },
        });
    }
    let mut engine = Engine::new(cfg).map_err(|source| SimError::Config {
        label: sim.label.clone(),
        source,
    })?;

    let mut plan = Plan::new();
    let mut flush_plan = Plan::new();
    let mut times = Histogram::default();
    let mut meta_sum: u128 = 0;
    let mut meta_samples: u64 = 0;
    let mut meta_peak: u64 = 0;
    let mut last_ts: Option<u64> = None;
    let engine_error = |index: u64, message: String| SimError::Engine {
        path: spec.path.clone(),
        index,
        message,
    };

    let mut base = Stats::default();
    spec.for_each(|index, r| -> Result<(), SimError> {
        if index == warmup && warmup > 0 {
            base = engine.stats().clone();
        }
        if let (FlushPolicy::Lazy { idle_ns }, Some(prev)) = (sim.flush, last_ts) {
            if r.timestamp_ns.saturating_sub(prev) >= idle_ns {
                flush_once(&mut engine, FlushKind::Lazy, &mut flush_plan)
                    .map_err(|m| engine_error(index, m))?;
            }
        }
        last_ts = Some(r.timestamp_ns);

        let (offset, len) = profile.place(r);
        let op = match r.op {
            traces::Op::Read => engine::Op::Read,
            traces::Op::Write => engine::Op::Write,
        };
        let start = Instant::now();
        engine
            .plan(op, offset, len, &mut plan)
            .map_err(|e| engine_error(index, e.to_string()))?;
        if plan.status != PlanStatus::Ready {
            return Err(engine_error(
                index,
                "plan asked to retry with nothing in flight".into(),
            ));
        }
        for t in [plan.ticket, plan.writeback_ticket].into_iter().flatten() {
            engine
                .complete(t, Completion::Ok)
                .map_err(|e| engine_error(index, e.to_string()))?;
        }
        times.record(start.elapsed().as_nanos() as u64);

        if sim.flush == FlushPolicy::Aggressive {
            flush_once(&mut engine, FlushKind::Aggressive, &mut flush_plan)
                .map_err(|m| engine_error(index, m))?;
        }
        if index % METADATA_SAMPLE_EVERY == 0 {
            let m = engine.metadata().total() as u64;
            meta_sum += m as u128;
            meta_samples += 1;
            meta_peak = meta_peak.max(m);
        }
        if index % 4096 == 0 {
            progress(index);
        }
        Ok(())
    })?;
    let m = engine.metadata().total() as u64;
    meta_sum += m as u128;
    meta_samples += 1;
    meta_peak = meta_peak.max(m);
    progress(profile.requests);

    let s = &since(engine.stats(), &base);
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let meta = engine.metadata();
    Ok(Report {
        config: sim.label.clone(),
        cache_bytes: engine.capacity(),
        reads: s.read.requests,
        writes: s.write.requests,
        miss_ratio: ratio(
            s.read.miss_bytes + s.write.miss_bytes,
            s.read.bytes + s.write.bytes,
        ),
        read_hit_ratio: s.read.hit_ratio(),
        write_hit_ratio: s.write.hit_ratio(),
        read_byte_hit_ratio: ratio(s.read.hit_bytes, s.read.bytes),
        write_byte_hit_ratio: ratio(s.write.hit_bytes, s.write.bytes),
        read_from_core: s.read_from_core,
        write_to_core: s.write_to_core,
        read_from_cache: s.read_from_cache,
        write_to_cache: s.write_to_cache,
        metadata_avg: (meta_sum / meta_samples as u128) as u64,
        metadata_peak: meta_peak,
        metadata_per_block: meta.core_bytes_per_block(),
        cached_blocks_end: s.cached_blocks,
        dirty_bytes_end: s.dirty_bytes,
        avg_missed_request: s.average_missed_request(),
        avg_allocated_block: s.average_allocated_block(),
        plan_ns_median: times.quantile(0.5),
        plan_ns_p99: times.quantile(0.99),
        plan_ns_mean: times.mean(),
        fill: engine.fill_report().map(|f| FillSummary {
            floor: f.floor,
            switches: f.switches,
            shadows: f.shadows,
        }),
    })
}

/// The counters the report uses, accumulated since `base` was taken.
fn since(now: &Stats, base: &Stats) -> Stats {
    let op = |n: &OpStats, b: &OpStats| OpStats {
        requests: n.requests - b.requests,
        hit_requests: n.hit_requests - b.hit_requests,
        miss_requests: n.miss_requests - b.miss_requests,
        bytes: n.bytes - b.bytes,
        hit_bytes: n.hit_bytes - b.hit_bytes,
        miss_bytes: n.miss_bytes - b.miss_bytes,
    };
    let mut s = now.clone();
    s.read = op(&now.read, &base.read);
    s.write = op(&now.write, &base.write);
    s.read_from_core -= base.read_from_core;
    s.write_to_core -= base.write_to_core;
    s.read_from_cache -= base.read_from_cache;
    s.write_to_cache -= base.write_to_cache;
    s.missed_requests -= base.missed_requests;
    s.missed_request_bytes -= base.missed_request_bytes;
    for (a, b) in s.alloc.iter_mut().zip(&base.alloc) {
        a.blocks -= b.blocks;
    }
    s
}

/// Plans one flush batch and completes it.
fn flush_once(engine: &mut Engine, kind: FlushKind, plan: &mut Plan) -> Result<(), String> {
    if engine.plan_flush(kind, plan) > 0 {
        if let Some(t) = plan.writeback_ticket {
            engine
                .complete(t, Completion::Ok)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The `--compare` set: fixed 32, 64, 128 and 256 KiB blocks and adaptive
/// blocks over the same sizes, every other setting taken from `base`.
pub fn comparison_set(base: &Config, flush: FlushPolicy) -> Vec<SimConfig> {
    let sizes = [32u32 << 10, 64 << 10, 128 << 10, 256 << 10];
    let mut v: Vec<SimConfig> = sizes
        .iter()
        .map(|&b| SimConfig {
            label: format!("fixed-{}KiB", b >> 10),
            engine: Config {
                block_sizes: vec![b],
                group_size: b.max(256 << 10),
                ..base.clone()
            },
            flush,
        })
        .collect();
    v.push(SimConfig {
        label: "adaptive".into(),
        engine: Config {
            block_sizes: sizes.to_vec(),
            group_size: 256 << 10,
            ..base.clone()
        },
        flush,
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A small MSR-format trace written by the test: two volumes, reads and
    /// writes, a re-read that must hit.
    fn fixture(dir: &std::path::Path) -> PathBuf {
        let p = dir.join("fixture.csv");
        let mut f = std::fs::File::create(&p).unwrap();
        let lines = [
            "128166372003061629,hm,0,Read,0,65536,100",
            "128166372003061630,hm,0,Read,0,65536,100",
            "128166372003061631,hm,1,Write,1048576,4096,100",
            "128166372003061632,hm,1,Read,1048576,4096,100",
            "128166372003061633,hm,0,Read,512,1024,100",
        ];
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        p
    }

    #[test]
    fn profile_lays_volumes_out_and_aligns() {
        let dir = tempdir();
        let spec = TraceSpec::new(fixture(dir.path()));
        let p = Profile::scan(&spec, 4096).unwrap();
        assert_eq!(p.requests, 5);
        assert_eq!(p.volumes(), 2);
        assert_eq!(p.layout.kind(), LayoutKind::Dense);
        // Volume 0 ends at 64 KiB: the next starts at the next MiB.
        assert_eq!(p.layout.place(0, 0, 1), 0);
        assert_eq!(p.layout.place(1, 0, 1), 1 << 20);
        assert_eq!(p.address_space, (1 << 20) + (2 << 20));
        // 16 blocks of volume 0 plus one of volume 1.
        assert_eq!(p.working_set_bytes, 17 * 4096);
        assert_eq!(p.volume_working_set[&0], 16 * 4096);
        assert_eq!(p.volume_working_set[&1], 4096);
        let r = Request {
            timestamp_ns: 0,
            op: traces::Op::Read,
            offset: 512,
            length: 1024,
            volume: 0,
        };
        assert_eq!(p.place(&r), (0, 4096));
    }

    #[test]
    fn replay_counts_hits_and_volumes() {
        let dir = tempdir();
        let spec = TraceSpec::new(fixture(dir.path()));
        let profile = Profile::scan(&spec, 4096).unwrap();
        let sim = SimConfig {
            label: "fixed-32KiB".into(),
            engine: Config::fixed(1, 1, 32 << 10),
            flush: FlushPolicy::None,
        };
        let r = replay(&spec, &profile, &sim, 1 << 20, |_| {}).unwrap();
        assert_eq!((r.reads, r.writes), (4, 1));
        // Reads 2, 4 and 5 hit (the 4 KiB write-back write landed in a new
        // block that the read then finds); read 1 misses.
        assert_eq!(r.read_hit_ratio, 0.75);
        assert_eq!(r.read_from_core, 64 << 10);
        assert!(r.metadata_peak > 0 && r.plan_ns_median > 0);
        assert_eq!(r.dirty_bytes_end, 4096);
    }

    #[test]
    fn warmup_requests_are_replayed_but_not_counted() {
        let dir = tempdir();
        let spec = TraceSpec::new(fixture(dir.path()));
        let profile = Profile::scan(&spec, 4096).unwrap();
        let sim = SimConfig {
            label: "fixed-32KiB".into(),
            engine: Config::fixed(1, 1, 32 << 10),
            flush: FlushPolicy::None,
        };
        // The first two reads fill and hit; what is left is the write and
        // two reads that hit.
        let r = replay_from(&spec, &profile, &sim, 1 << 20, 2, |_| {}).unwrap();
        assert_eq!((r.reads, r.writes), (2, 1));
        assert_eq!(r.read_hit_ratio, 1.0);
        assert_eq!(r.read_from_core, 0);
        assert_eq!(r.write_to_cache, 4096);
        // A shorter spec over the same profile replays only its requests.
        let mut short = spec.clone();
        short.limit = Some(3);
        let r = replay_from(&short, &profile, &sim, 1 << 20, 2, |_| {}).unwrap();
        assert_eq!((r.reads, r.writes), (0, 1));
    }

    #[test]
    fn limit_and_volume_filter() {
        let dir = tempdir();
        let mut spec = TraceSpec::new(fixture(dir.path()));
        spec.volume = Some(1);
        assert_eq!(Profile::scan(&spec, 4096).unwrap().requests, 2);
        spec.volume = None;
        spec.limit = Some(3);
        assert_eq!(Profile::scan(&spec, 4096).unwrap().requests, 3);
        spec.volume = Some(7);
        assert!(matches!(
            Profile::scan(&spec, 4096),
            Err(SimError::Empty(_))
        ));
    }

    /// `Report::miss_ratio` on a hand-made trace: 10 block accesses of
    /// 4 KiB, counted one by one below.
    #[test]
    fn miss_ratio_counts_4k_block_accesses() {
        let dir = tempdir();
        let p = dir.path().join("blocks.csv");
        let requests = [
            "Read,0,8192",      // blocks 0, 1
            "Read,4096,8192",   // blocks 1, 2
            "Write,512,1024",   // block 0 (widened to 4 KiB)
            "Write,16384,4096", // block 4
            "Read,16384,4096",  // block 4
            "Write,40960,4096", // block 10
            "Read,36864,8192",  // blocks 9, 10
        ];
        let lines: Vec<String> = requests
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{},hm,0,{r},100\n", 128166372003061629u64 + i as u64))
            .collect();
        std::fs::write(&p, lines.concat()).unwrap();
        let spec = TraceSpec::new(&p);
        let profile = Profile::scan(&spec, 4096).unwrap();
        let run = |engine: Config| {
            let sim = SimConfig {
                label: "t".into(),
                engine,
                flush: FlushPolicy::None,
            };
            replay(&spec, &profile, &sim, 1 << 20, |_| {}).unwrap()
        };
        let fixed = |mode| Config {
            write_mode: mode,
            ..Config::fixed(1, 1, 4096)
        };
        // Misses per request: 2, 1 (block 1 hits), 0, 1, 0 (the write
        // allocated block 4), 1, 1 (block 9).
        let r = run(fixed(engine::WriteMode::WriteThrough));
        assert_eq!(r.miss_ratio, 0.6);
        // Write-around allocates nothing on a write miss: the reads of
        // blocks 4 and 10 miss too.
        let r = run(fixed(engine::WriteMode::WriteAround));
        assert_eq!(r.miss_ratio, 0.8);
        // Adaptive: the first read caches the 32 KiB block 0..32K whole, so
        // requests 2-5 hit. The write to block 10 allocates 32K..64K with
        // only its own 4 KiB valid (sparse fill): a miss, and then block 9
        // of the last read is a miss in a cached block, block 10 a hit.
        let r = run(Config::adaptive(1, 1));
        assert_eq!(r.miss_ratio, 0.4);
    }

    #[test]
    fn comparison_set_has_the_papers_five_configurations() {
        let base = Config::adaptive(1, 1);
        let labels: Vec<String> = comparison_set(&base, FlushPolicy::None)
            .into_iter()
            .map(|c| c.label)
            .collect();
        assert_eq!(
            labels,
            [
                "fixed-32KiB",
                "fixed-64KiB",
                "fixed-128KiB",
                "fixed-256KiB",
                "adaptive"
            ]
        );
    }

    fn tempdir() -> testkit::TempDir {
        testkit::TempDir::new("rackcache-sim-test")
    }
}
