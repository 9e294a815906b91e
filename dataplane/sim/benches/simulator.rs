//! Simulator throughput: requests per second of `rackcache-sim`'s replay
//! (trace parsing, planning, completions, metrics) against libCacheSim's LRU
//! (PyPI `libcachesim`, its C core driven from Python) on the same trace and
//! cache size, in the same run.
//!
//! The trace is the CloudPhysics sample in libCacheSim's oracleGeneral
//! format, read from $RACKCACHE_TRACES (default ../shared/traces next to the
//! repository); the baseline needs the project's venv (`hack/deps.sh
//! python`, found at bin/venv, $RACKCACHE_VENV or $RACKCACHE_PYTHON, as
//! `rackcache-sim --compare-peers` finds it). Without either, the
//! benchmark says what is missing and reports what it can.
//!
//! Run: `make bench`, or `cargo bench -p rackcache-sim --bench simulator`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use engine::Config;
use rackcache_sim::replay::{replay, FlushPolicy, Profile, SimConfig, TraceSpec};

const CACHE_FRACTION: f64 = 0.10;
const RUNS: usize = 3;

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn trace_path() -> Option<PathBuf> {
    let dir = rackcache_sim::traces_dir();
    let p = dir.join("cloudphysics/cloudPhysicsIO.oracleGeneral.bin");
    p.is_file().then_some(p)
}

fn venv_python() -> Option<PathBuf> {
    let p = rackcache_sim::peers::python();
    p.is_file().then_some(p)
}

/// Best-of-`RUNS` requests/s of one rackcache configuration.
fn ours(spec: &TraceSpec, profile: &Profile, sim: &SimConfig) -> (f64, f64) {
    let cache = (profile.working_set_bytes as f64 * CACHE_FRACTION) as u64;
    let mut best = f64::MAX;
    let mut hit = 0.0;
    for _ in 0..RUNS {
        let t = Instant::now();
        let r = replay(spec, profile, sim, cache, |_| {}).expect("replay");
        best = best.min(t.elapsed().as_secs_f64());
        hit = r.read_hit_ratio;
    }
    (profile.requests as f64 / best, hit)
}

/// Best-of-`RUNS` requests/s of libCacheSim's LRU, or why it did not run.
fn baseline(python: &PathBuf, trace: &PathBuf) -> Result<(f64, f64), String> {
    let script = manifest_dir().join("benches/libcachesim_baseline.py");
    let mut best: Option<(f64, f64)> = None;
    for _ in 0..RUNS {
        let out = Command::new(python)
            .arg(&script)
            .arg(trace)
            .arg(CACHE_FRACTION.to_string())
            .output()
            .map_err(|e| format!("run {}: {e}", python.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} failed: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("baseline output is not JSON: {e}"))?;
        let rps = v["requests_per_second"]
            .as_f64()
            .ok_or("no requests_per_second")?;
        let miss = v["miss_ratio"].as_f64().unwrap_or(f64::NAN);
        if best.is_none_or(|(b, _)| rps > b) {
            best = Some((rps, miss));
        }
    }
    best.ok_or_else(|| "no run".into())
}

fn main() {
    let Some(trace) = trace_path() else {
        println!(
            "simulator bench: skipped: no CloudPhysics oracleGeneral sample (set RACKCACHE_TRACES; see docs/traces.md)"
        );
        return;
    };
    let mut spec = TraceSpec::new(&trace);
    spec.oracle_id_unit = 512;
    let profile = Profile::scan(&spec, 4096).expect("profile the trace");
    println!(
        "simulator bench: {} ({} requests), cache {:.0}% of the working set, best of {RUNS} runs",
        trace.display(),
        profile.requests,
        CACHE_FRACTION * 100.0
    );

    let base = match venv_python() {
        Some(py) => baseline(&py, &trace),
        None => Err("no venv (run hack/deps.sh python)".into()),
    };
    let mut rows: Vec<(String, f64, String)> = Vec::new();
    match &base {
        Ok((rps, miss)) => rows.push((
            "libCacheSim LRU".into(),
            *rps,
            format!("miss ratio {miss:.3} (objects)"),
        )),
        Err(e) => println!("baseline not run: {e}"),
    }
    let configs = [
        ("rackcache fixed-32KiB", Config::fixed(1, 1, 32 << 10)),
        ("rackcache adaptive", Config::adaptive(1, 1)),
    ];
    for (label, engine) in configs {
        let sim = SimConfig {
            label: label.into(),
            engine,
            flush: FlushPolicy::None,
        };
        let (rps, hit) = ours(&spec, &profile, &sim);
        rows.push((
            label.into(),
            rps,
            format!("read hit ratio {hit:.3} (requests)"),
        ));
    }
    println!(
        "{:<22} {:>14} {:>16}  notes",
        "simulator", "requests/s", "vs libCacheSim"
    );
    for (label, rps, note) in &rows {
        let ratio = match &base {
            Ok((b, _)) => format!("{:.2}x", rps / b),
            Err(_) => "-".into(),
        };
        println!("{label:<22} {rps:>14.0} {ratio:>16}  {note}");
    }
}
