//! Planning cost per request with a million cached blocks: the engine's
//! hot path, adaptive against the fixed-size baselines, in one run.
//!
//! Each configuration first caches at least `TARGET_BLOCKS` blocks (reads of
//! its block sizes over a region the trace never touches, until the cache is
//! full, so the replay below runs in the steady state: misses evict), then
//! replays the CloudPhysics sample `PASSES` times, timing each request's
//! `plan` plus the completions of its tickets. Prints the median, p99 and
//! mean per request and each configuration's ratio to fixed-32KiB, all
//! under the two-level LRU (the paper's comparison). A second table runs
//! the adaptive configuration under every eviction policy and under `auto`
//! (the default: the active policy plus the shadow caches that choose it),
//! with each one's ratio to the two-level LRU; `auto` against `sieve` (its
//! starting policy) is the cost of the shadows.
//!
//! The trace is read from $RACKCACHE_TRACES (default ../shared/traces next
//! to the repository); without it the benchmark says so and stops.
//!
//! Run: `make bench`, or `cargo bench -p rackcache-sim --bench planning`.

use std::path::PathBuf;
use std::time::Instant;

use engine::{Completion, Config, Engine, EvictionConfig, Op, Plan, PlanStatus};
use rackcache_sim::latency::Histogram;

const TARGET_BLOCKS: u64 = 1 << 20;
const PASSES: usize = 3;
/// The warm-up region starts past anything the trace addresses (the
/// CloudPhysics sample stays below 32 GiB).
const WARM_BASE: u64 = 64 << 30;
const VOLUME: u64 = 1 << 40;

fn trace_path() -> Option<PathBuf> {
    let dir = rackcache_sim::traces_dir();
    let p = dir.join("cloudphysics/cloudPhysicsIO.csv");
    p.is_file().then_some(p)
}

fn load(path: &PathBuf) -> Vec<(Op, u64, u64)> {
    let reader = traces::TraceReader::open(path).expect("open the trace");
    reader
        .map(|r| {
            let r = r.expect("read the trace");
            let start = r.offset / 4096 * 4096;
            let end = r.end().div_ceil(4096) * 4096;
            let op = match r.op {
                traces::Op::Read => Op::Read,
                traces::Op::Write => Op::Write,
            };
            (op, start, end - start)
        })
        .collect()
}

fn run(e: &mut Engine, plan: &mut Plan, op: Op, offset: u64, len: u64) {
    if let Err(err) = e.plan(op, offset, len, plan) {
        panic!("plan {op:?} {offset}+{len}: {err} (stats {:?})", e.stats());
    }
    assert_eq!(plan.status, PlanStatus::Ready);
    for t in [plan.ticket, plan.writeback_ticket].into_iter().flatten() {
        e.complete(t, Completion::Ok).expect("complete");
    }
}

struct Row {
    label: String,
    cached_blocks: u64,
    bytes_per_block: f64,
    /// Eviction (shadows included), admission and curve bytes per block.
    policy_bytes_per_block: f64,
    hist: Histogram,
    batch_mean_ns: f64,
}

fn bench(label: &str, mut cfg: Config, requests: &[(Op, u64, u64)]) -> Row {
    // Warm-up reads cycle through the configured block sizes, each at a
    // 256 KiB-aligned offset so that it allocates exactly one block of its
    // size; the capacity holds TARGET_BLOCKS of that mix.
    let sizes = cfg.block_sizes.clone();
    let mean = sizes.iter().map(|&s| s as u64).sum::<u64>() / sizes.len() as u64;
    cfg.volume_size = VOLUME;
    cfg.capacity = TARGET_BLOCKS * mean + (64 << 20);
    let mut e = Engine::new(cfg).expect("valid configuration");
    let mut plan = Plan::new();
    let mut off = WARM_BASE;
    let mut i = 0;
    // Until the cache is full and evicting, so every trace miss evicts too.
    while e.stats().cached_blocks < TARGET_BLOCKS || e.stats().evicted_blocks == 0 {
        run(
            &mut e,
            &mut plan,
            Op::Read,
            off,
            sizes[i % sizes.len()] as u64,
        );
        off += 256 << 10;
        i += 1;
    }
    let mut hist = Histogram::default();
    for _ in 0..PASSES {
        for &(op, offset, len) in requests {
            let t = Instant::now();
            run(&mut e, &mut plan, op, offset, len);
            hist.record(t.elapsed().as_nanos() as u64);
        }
    }
    // One more pass without per-request timers: the mean without their cost.
    let batch = Instant::now();
    for &(op, offset, len) in requests {
        run(&mut e, &mut plan, op, offset, len);
    }
    let batch_mean_ns = batch.elapsed().as_nanos() as f64 / requests.len() as f64;
    let meta = e.metadata();
    Row {
        label: label.to_string(),
        cached_blocks: e.stats().cached_blocks,
        bytes_per_block: meta.core_bytes_per_block(),
        policy_bytes_per_block: (meta.eviction + meta.admission + meta.mrc) as f64
            / meta.cached_blocks.max(1) as f64,
        hist,
        batch_mean_ns,
    }
}

fn main() {
    let Some(path) = trace_path() else {
        println!(
            "planning bench: skipped: no CloudPhysics sample (set RACKCACHE_TRACES to the traces directory; see docs/traces.md)"
        );
        return;
    };
    let requests = load(&path);
    println!(
        "planning bench: {} ({} requests) x {PASSES} passes, each configuration holding >= {TARGET_BLOCKS} cached blocks",
        path.display(),
        requests.len()
    );
    let lru = |c: Config| Config {
        eviction: EvictionConfig::TwoLevelLru,
        ..c
    };
    let mut rows = Vec::new();
    for size in [32u32 << 10, 64 << 10, 128 << 10, 256 << 10] {
        let cfg = lru(Config::fixed(1, 1, size));
        rows.push(bench(&format!("fixed-{}KiB", size >> 10), cfg, &requests));
    }
    rows.push(bench("adaptive", lru(Config::adaptive(1, 1)), &requests));
    print_rows(&rows, "fixed-32K");

    println!("\nadaptive under each eviction policy:");
    let mut rows = Vec::new();
    for name in ["lru2", "s3fifo", "sieve", "arc", "wtinylfu", "auto"] {
        let cfg = Config {
            eviction: engine::names::parse_eviction(name).expect("a policy name"),
            ..Config::adaptive(1, 1)
        };
        rows.push(bench(name, cfg, &requests));
    }
    print_rows(&rows, "lru2");
    let mean = |label: &str| {
        rows.iter()
            .find(|r| r.label == label)
            .map_or(f64::NAN, |r| r.batch_mean_ns)
    };
    println!(
        "shadow caches (auto vs sieve, batch mean): x{:.3}",
        mean("auto") / mean("sieve")
    );
}

fn print_rows(rows: &[Row], base_label: &str) {
    let base = rows[0].hist.quantile(0.5).max(1) as f64;
    println!(
        "{:<13} {:>13} {:>12} {:>12} {:>9} {:>9} {:>10} {:>16} {:>18}",
        "config",
        "cached blocks",
        "meta B/blk",
        "policy B/blk",
        "p50 ns",
        "p99 ns",
        "mean ns",
        "batch mean ns",
        format!("p50 vs {base_label}")
    );
    for r in rows {
        println!(
            "{:<13} {:>13} {:>12.1} {:>12.1} {:>9} {:>9} {:>10.1} {:>16.1} {:>17.3}x",
            r.label,
            r.cached_blocks,
            r.bytes_per_block,
            r.policy_bytes_per_block,
            r.hist.quantile(0.5),
            r.hist.quantile(0.99),
            r.hist.mean(),
            r.batch_mean_ns,
            r.hist.quantile(0.5) as f64 / base,
        );
    }
}
