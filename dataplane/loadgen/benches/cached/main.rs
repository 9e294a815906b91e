//! The cached-volume benchmark of `make bench` (issue 8, "Benchmark"): the
//! project's NVMe/TCP target in this process with its runtime on CPU 0,
//! loadgen on CPU 1, cores on a one-node Ceph (hack/ceph.sh), one cache
//! device (a file on local disk, or RAM) shared by the volumes. Every figure
//! is printed beside its baseline measured in the same run:
//!
//! 1. 4K random reads QD32, working set in cache: raw RBD vs the cached
//!    volume cold (first pass) and warm (after a sequential warming pass).
//! 2. 70/30 random read/write 4K QD32 in wt and wb vs raw RBD.
//! 3. The warm volume's hit path vs the raw cache bdev exported directly,
//!    4K random reads at QD1 and QD32 (engine overhead), each side with
//!    the CPU time the target's runtime threads spent per I/O (which load
//!    from other processes hardly moves, unlike IOPS and latency).
//! 4. Fixed 32 KiB vs adaptive on a real trace (CloudPhysics sample from
//!    `$RACKCACHE_TRACES`) replayed through the load generator: measured
//!    read hit ratio beside the simulator's prediction for the same requests.
//! 5. Warm restart: read hit ratio over a fixed request count before
//!    `stop` + `create(load)` and right after.
//! 6. Against a cache peer: an OCF-style fixed 4 KiB cache line with LRU
//!    vs adaptive, 256 MiB over a 1 GiB core, Zipf 4K reads (`peer.rs`).
//!
//! Environment (defaults keep a run to a few minutes):
//! - `RACKCACHE_BENCH_SECONDS` (3): seconds per timed workload.
//! - `RACKCACHE_BENCH_ROUNDS` (3): timed workloads and their baselines run
//!   alternately this many times; the run of median IOPS is printed.
//! - `RACKCACHE_BENCH_IMAGE_MIB` (256): the working set of parts 1-3 and 5.
//! - `RACKCACHE_BENCH_CACHE` (`file`): `file` or `malloc` (RAM cache).
//! - `RACKCACHE_BENCH_MIX_REQUESTS` (10000): measured requests of part 2.
//! - `RACKCACHE_BENCH_TRACE_REQUESTS` (40000), `_TRACE_WARMUP` (10000),
//!   `_TRACE_CACHE_PCT` (10, of the selection's working set), `_REPLAY_QD`
//!   (32): part 4.
//! - `RACKCACHE_BENCH_RESTART_REQUESTS` (10000): part 5's window.
//! - `RACKCACHE_BENCH_PEER_*`: part 6 (`peer.rs`).
//! - `RACKCACHE_BENCH_CEPH=0`: skip this bench (its cores are RBD images).
//! - `RACKCACHE_BENCH_PARTS` (all): the parts to run, e.g. `3`, `1,3` or `6`
//!   (part 3 alone still warms its volume, unmeasured).
//!
//! No figure is judged by a time limit: targets are ratios to baselines.

mod peer;
mod rig;
mod synth;
mod table;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bdev::{Bdev, CountedBdev};
use cache::volume::{CachedVolume, VolumeParams, VolumeStats};
use loadgen::replay::{predict_run, CacheModel, ReplayOptions};
use loadgen::run::Report;
use loadgen::workload::Pattern;
use rackcache_sim::replay::{FlushPolicy, SimConfig};
use rackcache_sim::size::CacheSize;
use rig::{
    measure, measure_cpu, replay, replay_options, CacheKind, Export, Rig, Timed, BLOCK, MIB,
};
use serde_json::json;
use synth::Rng;
use table::Row;
use testkit::{Ceph, TempDir};

pub(crate) const QD: usize = 32;
const IMAGE_A: &str = "cbench-a";
const IMAGE_TRACE: &str = "cbench-trace";

pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&v| v > 0)
        .unwrap_or(default)
}

struct Knobs {
    seconds: Duration,
    rounds: u64,
    image_mib: u64,
    kind: CacheKind,
    mix_requests: u64,
    trace_requests: u64,
    trace_warmup: u64,
    trace_pct: u64,
    replay_qd: usize,
    restart_requests: u64,
    /// Bit `n` set: run part `n`.
    parts: u8,
}

impl Knobs {
    fn from_env() -> Result<Self, String> {
        let kind = match std::env::var("RACKCACHE_BENCH_CACHE").as_deref() {
            Err(_) | Ok("file") => CacheKind::File,
            Ok("malloc") => CacheKind::Malloc,
            Ok(other) => return Err(format!("RACKCACHE_BENCH_CACHE={other}: file or malloc")),
        };
        let k = Knobs {
            seconds: testkit::bench_seconds(),
            rounds: testkit::bench_rounds() as u64,
            image_mib: env_u64("RACKCACHE_BENCH_IMAGE_MIB", 256).max(16),
            kind,
            mix_requests: env_u64("RACKCACHE_BENCH_MIX_REQUESTS", 10_000),
            trace_requests: env_u64("RACKCACHE_BENCH_TRACE_REQUESTS", 40_000),
            trace_warmup: env_u64("RACKCACHE_BENCH_TRACE_WARMUP", 10_000),
            trace_pct: env_u64("RACKCACHE_BENCH_TRACE_CACHE_PCT", 10).min(100),
            replay_qd: env_u64("RACKCACHE_BENCH_REPLAY_QD", 32).min(1023) as usize,
            restart_requests: env_u64("RACKCACHE_BENCH_RESTART_REQUESTS", 10_000),
            parts: match std::env::var("RACKCACHE_BENCH_PARTS") {
                Ok(v) => parse_parts(&v)?,
                Err(_) => 0b111_1110,
            },
        };
        if k.parts == 0 {
            return Err("RACKCACHE_BENCH_PARTS selects no part (1-6)".into());
        }
        if k.trace_warmup >= k.trace_requests {
            return Err("RACKCACHE_BENCH_TRACE_WARMUP must be below _TRACE_REQUESTS".into());
        }
        Ok(k)
    }

    fn runs(&self, part: u8) -> bool {
        self.parts & (1 << part) != 0
    }

    /// Cache of the volumes whose working set must fit.
    fn fitting_cache_mib(&self) -> u64 {
        self.image_mib + self.image_mib / 4
    }
}

/// `RACKCACHE_BENCH_PARTS`: part numbers 1-6, comma-separated.
fn parse_parts(v: &str) -> Result<u8, String> {
    let mut bits = 0u8;
    for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p.parse::<u8>() {
            Ok(n @ 1..=6) => bits |= 1 << n,
            _ => {
                return Err(format!(
                    "RACKCACHE_BENCH_PARTS={v}: part numbers 1-6, comma-separated"
                ))
            }
        }
    }
    Ok(bits)
}

/// Parameters of a bench volume: no sequential cutoff (warming passes are
/// sequential; the simulator has none) and no background cleaning.
pub(crate) fn params(
    name: &str,
    core: &str,
    mib: u64,
    extra: serde_json::Value,
) -> Result<VolumeParams, String> {
    let mut j = json!({
        "name": name, "core_bdev_name": core, "cache_bdev_name": "cache",
        "cache_size_mib": mib, "seq_cutoff": {"policy": "never"},
        "cleaning": {"policy": "nop"},
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        j[k] = v.clone();
    }
    serde_json::from_value(j).map_err(|e| format!("volume parameters: {e}"))
}

/// Runs `a` and `b` alternately `rounds` times and keeps each side's run
/// of median IOPS: on a shared machine, load that comes and goes then
/// falls on both sides alike.
fn paired(
    rounds: u64,
    a: impl FnMut() -> Result<Report, String>,
    b: impl FnMut() -> Result<Report, String>,
) -> Result<(Report, Report), String> {
    paired_by(rounds, a, b, |r| r.iops)
}

/// [`paired`] for any run, keeping each side's run of median `iops`.
fn paired_by<T>(
    rounds: u64,
    mut a: impl FnMut() -> Result<T, String>,
    mut b: impl FnMut() -> Result<T, String>,
    iops: impl Fn(&T) -> f64,
) -> Result<(T, T), String> {
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        ra.push(a()?);
        rb.push(b()?);
    }
    let median = |mut v: Vec<T>| {
        v.sort_by(|x, y| iops(x).total_cmp(&iops(y)));
        v.swap_remove(v.len() / 2)
    };
    Ok((median(ra), median(rb)))
}

/// The median over `rounds` of the target's CPU time per I/O: unlike
/// IOPS it hardly moves with other load on the machine.
fn median_cpu(runs: &[f64]) -> f64 {
    let mut v = runs.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn volume_export(rig: &Rig, v: &CachedVolume) -> Result<Export, String> {
    rig.export(CountedBdev::from(Arc::new(v.bdev())))
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that excludes us skips.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| !"cached".contains(&f)) {
        return;
    }
    if let Err(e) = bench() {
        eprintln!("cached bench failed: {e}");
        std::process::exit(1);
    }
}

fn bench() -> Result<(), String> {
    let k = Knobs::from_env()?;
    let peer_knobs = peer::Knobs::from_env()?;
    if std::env::var("RACKCACHE_BENCH_CEPH").as_deref() == Ok("0") {
        println!("cached: skipped (RACKCACHE_BENCH_CEPH=0; the cores are RBD images)");
        return Ok(());
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus <= rig::LOADGEN_CPU {
        return Err(format!("needs CPUs 0 and 1, this machine has {cpus}"));
    }
    let work = TempDir::new("rackcache-bench-cached");
    let trace = rackcache_sim::traces_dir().join("cloudphysics/cloudPhysicsIO.csv");
    let trace_opts = (k.runs(4) && trace.is_file()).then(|| {
        let mut o = ReplayOptions::new("", "", &trace);
        o.max_requests = Some(k.trace_requests);
        o.warmup_requests = k.trace_warmup;
        o
    });
    let trace_profile = match &trace_opts {
        Some(o) => Some(
            o.profile()
                .map_err(|e| format!("scan {}: {e}", trace.display()))?,
        ),
        None if !k.runs(4) => None,
        None => {
            testkit::missing(&format!(
                "{} (set RACKCACHE_TRACES; see docs/traces.md): part 4 skipped",
                trace.display()
            ));
            None
        }
    };
    let trace_cache_mib = trace_profile.as_ref().map_or(0, |p| {
        (p.working_set_bytes * k.trace_pct / 100)
            .div_ceil(MIB)
            .max(1)
    });
    // Parts 1-3 and 5 read image A; part 6 alone does not write it.
    let image_a_parts = [1, 2, 3, 5].iter().any(|&p| k.runs(p));
    let mut need = trace_cache_mib;
    if image_a_parts {
        need = need.max(k.fitting_cache_mib());
    }
    if k.runs(6) {
        need = need.max(peer::CACHE_MIB);
    }
    // The header and the per-unit metadata copies.
    let device_mib = need + need / 32 + 8;

    println!("cached: starting a one-node Ceph ...");
    let ceph = Ceph::start();
    if image_a_parts {
        let image_a = format!("{}/{IMAGE_A}", ceph.var("RACKCACHE_CEPH_POOL"));
        ceph.create_filled_image(&image_a, k.image_mib * MIB);
    }
    println!("cached: formatting a {device_mib} MiB cache device ...");
    let rig = Rig::start(&ceph, work.path(), k.kind, device_mib)?;
    let mut rows = Vec::new();
    let mut notes = vec![format!(
        "{} s per timed workload; target runtime on CPU {}, loadgen on CPU {}; cache device: {} MiB {}; working set {} MiB in a {} MiB cache (parts 1-3)",
        k.seconds.as_secs_f64(),
        rig::TARGET_CPU,
        rig::LOADGEN_CPU,
        device_mib,
        if k.kind == CacheKind::File { "file on local disk" } else { "malloc" },
        k.image_mib,
        k.fitting_cache_mib()
    )];
    let result = (|| -> Result<(), String> {
        let a = if image_a_parts {
            Some(rig.rbd(IMAGE_A)?)
        } else {
            None
        };
        if let (Some(a), true) = (&a, k.runs(1) || k.runs(2) || k.runs(3)) {
            let raw = rig.export(CountedBdev::from(Arc::clone(a)))?;
            if k.runs(1) || k.runs(3) {
                println!("cached: parts 1 and 3 (random reads, engine overhead) ...");
                read_parts(&rig, &k, a, &raw, work.path(), &mut rows)?;
            }
            if k.runs(2) {
                println!("cached: part 2 (70/30 mix) ...");
                mix_part(&rig, &k, a, &raw, work.path(), &mut rows)?;
            }
            rig.unexport(&raw)?;
        }
        if let (Some(o), Some(p)) = (&trace_opts, &trace_profile) {
            println!(
                "cached: part 4 (fixed vs adaptive on {}) ...",
                trace.display()
            );
            let img = format!("{}/{IMAGE_TRACE}", ceph.var("RACKCACHE_CEPH_POOL"));
            let mib = p.address_space.div_ceil(MIB).to_string();
            ceph.admin("rbd", &["create", "--size", &format!("{mib}M"), &img]);
            trace_part(&rig, &k, o, trace_cache_mib, &mut rows, &mut notes)?;
        }
        if let (Some(a), true) = (&a, k.runs(5)) {
            println!("cached: part 5 (warm restart) ...");
            restart_part(&rig, &k, a, work.path(), &mut rows)?;
        }
        if k.runs(6) {
            println!("cached: part 6 (fixed 4K LRU, OCF-style, vs adaptive; Zipf) ...");
            peer::create_image(&ceph);
            peer::part(&rig, &peer_knobs, work.path(), &mut rows, &mut notes)?;
        }
        Ok(())
    })();
    rig.shutdown();
    drop(ceph);
    table::print(&rows, &notes);
    result
}

/// Parts 1 and 3 on one volume: cold and warm random reads beside raw
/// RBD, then the warm hit path beside the raw cache bdev.
fn read_parts(
    rig: &Rig,
    k: &Knobs,
    a: &Arc<Bdev>,
    raw: &Export,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
    let space = k.image_mib * MIB;
    let rr = |e: &Export, qd| measure(e, Pattern::RandRead, BLOCK as usize, qd, k.seconds);
    let v = rig.volume(params("rd", IMAGE_A, k.fitting_cache_mib(), json!({}))?, a)?;
    let ve = volume_export(rig, &v)?;
    rig.reset_stats(&v)?;
    let cold = if k.runs(1) {
        let r = rr(&ve, QD)?;
        Some((r, rig.stats(&v)?))
    } else {
        None
    };
    let seq = synth::write_trace(
        dir,
        "seq128k.csv",
        &synth::sequential_reads(space, 128 << 10),
        space,
    )?;
    replay(&ve, &seq, QD, 0, None, || Ok(()))?;
    let mut base = None;
    if let Some((cold, cold_stats)) = cold {
        rig.reset_stats(&v)?;
        let (b, warm) = paired(k.rounds, || rr(raw, QD), || rr(&ve, QD))?;
        let warm_hit = rig.stats(&v)?.hit_ratio.read;
        rows.extend(part1_rows(&b, &cold, &cold_stats, &warm, warm_hit));
        base = Some(b);
    }

    // Part 3: the same cache bdev, exported directly, read over its whole
    // size (written over before formatting: no holes).
    if k.runs(3) {
        let direct = rig.export(CountedBdev::from(Arc::clone(&rig.cache_bdev)))?;
        let timed =
            |e: &Export, qd| measure_cpu(rig, e, Pattern::RandRead, BLOCK as usize, qd, k.seconds);
        for qd in [QD, 1] {
            rig.reset_stats(&v)?;
            let (mut dc, mut hc) = (Vec::new(), Vec::new());
            let (d, h) = paired_by(
                k.rounds,
                || timed(&direct, qd).inspect(|t| dc.push(t.target_cpu_us)),
                || timed(&ve, qd).inspect(|t| hc.push(t.target_cpu_us)),
                |t: &Timed| t.report.iops,
            )?;
            let (dcpu, hcpu) = (median_cpu(&dc), median_cpu(&hc));
            let (d, h) = (d.report, h.report);
            let hit = rig.stats(&v)?.hit_ratio.read;
            let mut row = Row::new("3 engine", format!("raw cache bdev 4K QD{qd}"))
                .perf(d.iops, d.latency.p99_us)
                .note(format!("avg {:.1} us", d.latency.avg_us))
                .note(format!("target CPU {dcpu:.2} us/IO"));
            if let (true, Some(b)) = (qd == QD, &base) {
                // The most a cached volume could reach over raw RBD here.
                row = row.ratio("ceiling: raw cache/raw rbd", d.iops, b.iops);
            }
            rows.push(row);
            let mut row = Row::new("3 engine", format!("cached warm hit 4K QD{qd}"))
                .perf(h.iops, h.latency.p99_us)
                .hit(hit)
                .target("IOPS hit/raw cache", h.iops, d.iops, 0.9)
                .ratio("p99", h.latency.p99_us, d.latency.p99_us)
                // What the hit path adds to each I/O's cost on the
                // target's CPU, which other load hardly moves (IOPS and
                // latency on a shared machine do).
                .note(format!(
                    "target CPU {hcpu:.2} us/IO ({:+.2} over raw)",
                    hcpu - dcpu
                ));
            if qd == 1 {
                // The 2 us target is the hit path's own cost, which only a
                // RAM cache device leaves visible.
                let target = (k.kind == CacheKind::Malloc).then_some(2.0);
                row = row.diff_us("avg hit-raw", h.latency.avg_us, d.latency.avg_us, target);
            }
            rows.push(row);
        }
        rig.unexport(&direct)?;
    }
    rig.unexport(&ve)?;
    rig.delete(&v)
}

/// Part 1's rows: cold and warm beside raw RBD.
fn part1_rows(
    base: &Report,
    cold: &Report,
    cold_stats: &VolumeStats,
    warm: &Report,
    warm_hit: f64,
) -> [Row; 3] {
    [
        Row::new("1 randrd", "raw rbd 4K QD32").perf(base.iops, base.latency.p99_us),
        Row::new("1 randrd", "cached cold (first pass)")
            .perf(cold.iops, cold.latency.p99_us)
            .hit(cold_stats.hit_ratio.read)
            .ratio("IOPS cold/raw", cold.iops, base.iops)
            .ratio("p99 cold/raw", cold.latency.p99_us, base.latency.p99_us)
            .note(format!(
                "core read/host read {:.1} (fills)",
                cold_stats.blocks.core_volume_rd as f64 / cold_stats.blocks.volume_rd.max(1) as f64
            )),
        Row::new("1 randrd", "cached warm")
            .perf(warm.iops, warm.latency.p99_us)
            .hit(warm_hit)
            .target("IOPS warm/raw", warm.iops, base.iops, 20.0)
            .ratio("p99 warm/raw", warm.latency.p99_us, base.latency.p99_us),
    ]
}

/// Part 2: the same 70/30 requests, after the same sequential warming
/// pass (not measured), on raw RBD and on volumes in wt and wb.
fn mix_part(
    rig: &Rig,
    k: &Knobs,
    a: &Arc<Bdev>,
    raw: &Export,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
    let space = k.image_mib * MIB;
    let mut reqs = synth::sequential_reads(space, 128 << 10);
    let warmup = reqs.len() as u64;
    reqs.extend(synth::mix(&mut Rng::new(70), space, k.mix_requests, 70));
    let trace = synth::write_trace(dir, "mix70.csv", &reqs, space)?;
    let base = replay(raw, &trace, QD, warmup, None, || Ok(()))?;
    let wp99 =
        |r: &loadgen::replay::ReplayReport| format!("write p99 {:.1} us", r.write_latency.p99_us);
    rows.push(
        Row::new("2 mix", "raw rbd 70/30 4K QD32")
            .perf(base.iops, base.read_latency.p99_us)
            .note(wp99(&base)),
    );
    for mode in ["wt", "wb"] {
        let v = rig.volume(
            params(
                &format!("mix-{mode}"),
                IMAGE_A,
                k.fitting_cache_mib(),
                json!({"write_mode": mode}),
            )?,
            a,
        )?;
        let ve = volume_export(rig, &v)?;
        let r = replay(&ve, &trace, QD, warmup, None, || rig.reset_stats(&v))?;
        let hit = rig.stats(&v)?.hit_ratio.read;
        rows.push(
            Row::new("2 mix", format!("cached {mode} 70/30 4K QD32"))
                .perf(r.iops, r.read_latency.p99_us)
                .hit(hit)
                .ratio(&format!("IOPS {mode}/raw"), r.iops, base.iops)
                .ratio("read p99", r.read_latency.p99_us, base.read_latency.p99_us)
                .ratio(
                    "write p99",
                    r.write_latency.p99_us,
                    base.write_latency.p99_us,
                ),
        );
        rig.unexport(&ve)?;
        rig.delete(&v)?;
    }
    Ok(())
}

/// Part 4: the trace through a fixed 32 KiB and an adaptive volume of the
/// same cache size, each beside the simulator's prediction for exactly the
/// requests the run sent, with the volume's own configuration and capacity.
fn trace_part(
    rig: &Rig,
    k: &Knobs,
    o: &ReplayOptions,
    cache_mib: u64,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let core = rig.rbd(IMAGE_TRACE)?;
    let volume_size = core.info().size_bytes();
    let mut measured = Vec::new();
    for (label, extra) in [
        (
            "fixed-32K",
            json!({"mode": "fixed", "block_sizes_kib": [32]}),
        ),
        ("adaptive", json!({"mode": "adaptive"})),
    ] {
        let p = params(label, IMAGE_TRACE, cache_mib, extra)?;
        let v = rig.volume(p.clone(), &core)?;
        let ve = volume_export(rig, &v)?;
        let opts = replay_options(
            &ve,
            &o.trace,
            k.replay_qd,
            o.warmup_requests,
            o.max_requests,
        );
        let r = replay(
            &ve,
            &o.trace,
            k.replay_qd,
            o.warmup_requests,
            o.max_requests,
            || rig.reset_stats(&v),
        )?;
        let s = rig.stats(&v)?;
        let capacity = s.usage.capacity_bytes;
        let model = CacheModel {
            cache_size: CacheSize::Bytes(capacity),
            config: SimConfig {
                label: label.into(),
                engine: p
                    .engine_config(volume_size, BLOCK, capacity)
                    .map_err(|e| format!("{label}: {e}"))?,
                flush: FlushPolicy::None,
            },
        };
        let pred = predict_run(&opts, &model, &r).map_err(|e| format!("predict {label}: {e}"))?;
        let (got, want) = (s.hit_ratio.read, pred.report.read_hit_ratio);
        let diff = (got - want) * 100.0;
        let mark = if diff.abs() <= 2.0 { "ok" } else { "MISS" };
        rows.push(
            Row::new("4 trace", format!("{label} {} MiB QD{}", capacity / MIB, k.replay_qd))
                .perf(r.iops, r.read_latency.p99_us)
                .hit(got)
                .note(format!(
                    "simulator {want:.3}, measured-simulator {diff:+.1} pt (target |diff| <= 2: {mark})"
                )),
        );
        if r.errors > 0 || r.split_requests > 0 {
            notes.push(format!(
                "{label}: {} failed requests, {} split at the MDTS",
                r.errors, r.split_requests
            ));
        }
        measured.push(got);
        rig.unexport(&ve)?;
        rig.delete(&v)?;
    }
    rows.push(Row::new("4 trace", "adaptive vs fixed-32K").ratio(
        "read hit adaptive/fixed",
        measured[1],
        measured[0],
    ));
    notes.push(format!(
        "part 4: {} requests of {} ({} warm-up), cache {}% of their working set",
        o.max_requests.unwrap_or(0),
        o.trace.display(),
        o.warmup_requests,
        k.trace_pct
    ));
    Ok(())
}

/// Part 5: a skewed read workload larger than its cache; the read hit
/// ratio over the same number of requests before a clean stop and right
/// after the volume is attached again with `load`. A control volume runs
/// the same requests without the restart, which separates what the
/// restart costs from the difference between the two windows.
fn restart_part(
    rig: &Rig,
    k: &Knobs,
    a: &Arc<Bdev>,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
    let space = k.image_mib * MIB;
    let cache_mib = (k.image_mib / 4).max(4);
    let hot = cache_mib * MIB / 2;
    let n = k.restart_requests;
    let mut rng = Rng::new(5);
    let before = synth::skewed_reads(&mut rng, space, hot, 90, 3 * n);
    let after = synth::skewed_reads(&mut rng, space, hot, 90, n);
    let before = synth::write_trace(dir, "restart-before.csv", &before, space)?;
    let after = synth::write_trace(dir, "restart-after.csv", &after, space)?;
    // Both windows on one volume; `restart` between them.
    let windows = |name: &str, restart: bool| -> Result<[VolumeStats; 3], String> {
        let p = params(name, IMAGE_A, cache_mib, json!({}))?;
        let v = rig.volume(p.clone(), a)?;
        let ve = volume_export(rig, &v)?;
        replay(&ve, &before, QD, 2 * n, None, || rig.reset_stats(&v))?;
        let first = rig.stats(&v)?;
        let (v, ve) = if restart {
            rig.unexport(&ve)?;
            rig.stop(&v, false)?;
            let v = rig.volume(VolumeParams { load: true, ..p }, a)?;
            let ve = volume_export(rig, &v)?;
            (v, ve)
        } else {
            (v, ve)
        };
        let loaded = rig.stats(&v)?;
        replay(&ve, &after, QD, 0, None, || rig.reset_stats(&v))?;
        let second = rig.stats(&v)?;
        rig.unexport(&ve)?;
        rig.delete(&v)?;
        Ok([first, loaded, second])
    };
    let [_, _, control] = windows("restart-control", false)?;
    let [before, loaded, after] = windows("restart", true)?;
    let (hit_before, hit_after) = (before.hit_ratio.read, after.hit_ratio.read);
    rows.push(
        Row::new("5 restart", format!("before stop, {n} reads"))
            .hit(hit_before)
            .note(format!(
                "{} cached bytes at the stop",
                before.usage.occupancy_bytes
            )),
    );
    rows.push(
        Row::new("5 restart", format!("no restart, next {n} reads"))
            .hit(control.hit_ratio.read)
            .note("control: the same requests without the restart"),
    );
    rows.push(
        Row::new("5 restart", format!("after load, next {n} reads"))
            .hit(hit_after)
            .target("hit after/before", hit_after, hit_before, 0.95)
            .ratio("after/control", hit_after, control.hit_ratio.read)
            .ratio(
                "cached bytes loaded/stopped",
                loaded.usage.occupancy_bytes as f64,
                before.usage.occupancy_bytes as f64,
            ),
    );
    Ok(())
}
