//! Miss-ratio curves of every sample trace: SHARDS against the exact curve
//! (mean absolute error at most 0.02 over the printed sizes, 0.5% to 100% of
//! the working set), the exact curve against a plain LRU cache, and
//! `rackcache-sim --mrc` as a user runs it. Skips with a message when the
//! traces are absent (see docs/traces.md), and fails then under `CI=true`.
//!
//! `cargo test -p rackcache-sim --test mrc -- --nocapture` prints each
//! trace's error and memory.

use std::collections::HashMap;
use std::process::Command;

use engine::mrc::{Curve, Shards, ShardsConfig};
use rackcache_sim::mrc::{self, MrcOptions, BLOCK};
use rackcache_sim::replay::{Profile, TraceSpec};

/// Every sample: directory, file, bytes per oracleGeneral object id.
const SAMPLES: [(&str, &str, u64); 6] = [
    ("cloudphysics", "cloudPhysicsIO.csv", 1),
    ("cloudphysics", "cloudPhysicsIO.vscsi", 1),
    ("cloudphysics", "cloudPhysicsIO.oracleGeneral.bin", 512),
    ("msr_cambridge", "msr-cambridge1-sample.csv", 1),
    ("systor17", "systor17-traces-sample.csv.gz", 1),
    ("systor17", "systor17-additional-sample.csv.gz", 1),
];

/// Tracked blocks of a sampler that samples every sample trace (the
/// smallest has 1,917 blocks): the default one holds the MSR and Systor'17
/// samples whole, so its curves there are exact by construction.
const FORCED_MAX_KEYS: u32 = 1024;

const MAX_ERROR: f64 = 0.02;

/// The samples present, each with its spec; a missing one is reported
/// (and fails the test under CI=true).
fn samples() -> Vec<(String, TraceSpec)> {
    let dir = rackcache_sim::traces_dir();
    let mut out = Vec::new();
    for (sub, file, unit) in SAMPLES {
        let p = dir.join(sub).join(file);
        if !p.is_file() {
            testkit::missing(&format!(
                "{} not found (set RACKCACHE_TRACES to the traces directory)",
                p.display()
            ));
            continue;
        }
        let mut spec = TraceSpec::new(p);
        spec.oracle_id_unit = unit;
        out.push((file.to_string(), spec));
    }
    out
}

fn profile(spec: &TraceSpec) -> Profile {
    Profile::scan(spec, 4096).expect("scan the trace")
}

/// One curve over the whole trace (every sample has one volume).
fn curve(spec: &TraceSpec, p: &Profile, config: ShardsConfig) -> Shards {
    let mut s = Shards::new(config).unwrap();
    mrc::for_each_block(spec, p, |_, _, blocks| blocks.for_each(|b| s.access(b))).unwrap();
    s
}

#[test]
fn sampled_curves_are_close_to_the_exact_ones() {
    let samples = samples();
    // Two threads: the CloudPhysics samples take most of the time.
    let results: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = samples
            .iter()
            .map(|(name, spec)| scope.spawn(move || check_accuracy(name, spec)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in results {
        println!("{r}");
    }
}

fn check_accuracy(name: &str, spec: &TraceSpec) -> String {
    let p = profile(spec);
    assert_eq!(p.volumes(), 1, "{name}: one volume");
    // What `rackcache-sim --mrc --mrc-exact` prints.
    let opts = MrcOptions {
        exact: true,
        ..MrcOptions::default()
    };
    let curves = mrc::curves(spec, &p, &opts, |_| {}).unwrap();
    assert_eq!(curves.len(), 1);
    let c = &curves[0];
    let mae = c.mean_absolute_error().unwrap();
    assert!(mae <= MAX_ERROR, "{name}: mean absolute error {mae}");
    assert!(
        c.memory_bytes <= 1 << 20,
        "{name}: {} bytes",
        c.memory_bytes
    );

    // A sampler small enough to sample even the smallest trace.
    let forced = curve(
        spec,
        &p,
        ShardsConfig::fixed_size(BLOCK, 1.0, FORCED_MAX_KEYS),
    );
    assert!(forced.rate() < 1.0, "{name}: not sampled");
    let exact = c.exact.as_ref().unwrap();
    let forced_mae = forced.curve().mean_absolute_error(exact, &c.sizes());
    assert!(
        forced_mae <= MAX_ERROR,
        "{name}, {FORCED_MAX_KEYS} blocks: mean absolute error {forced_mae}"
    );
    format!(
        "{name}: {} block refs, working set {} blocks; default sampler: rate {:.4}, MAE {mae:.4}, \
         {} bytes; {FORCED_MAX_KEYS}-block sampler: rate {:.4}, MAE {forced_mae:.4}, {} bytes; \
         exact: {} bytes",
        exact.references(),
        c.working_set_bytes / BLOCK as u64,
        c.rate,
        c.memory_bytes,
        forced.rate(),
        forced.memory_bytes(),
        c.exact_memory_bytes.unwrap(),
    )
}

/// The stream with its blocks renumbered 0, 1, 2... in order of first
/// reference, so that the LRU simulation below indexes arrays instead of
/// hashing (a debug build hashes slowly); and how many distinct blocks.
fn dense(stream: &[u64]) -> (Vec<u32>, usize) {
    let mut ids: HashMap<u64, u32> = HashMap::new();
    let out = stream
        .iter()
        .map(|b| {
            let n = ids.len() as u32;
            *ids.entry(*b).or_insert(n)
        })
        .collect();
    (out, ids.len())
}

/// Misses of an LRU cache of `blocks` blocks over a stream of dense block
/// ids, simulated directly: the cached blocks in a doubly linked list in
/// recency order, the tail evicted.
fn lru_misses(stream: &[u32], distinct: usize, blocks: usize) -> u64 {
    const NIL: u32 = u32::MAX;
    let mut cached = vec![false; distinct];
    let mut prev = vec![NIL; distinct];
    let mut next = vec![NIL; distinct];
    let (mut head, mut tail, mut len) = (NIL, NIL, 0);
    let mut misses = 0;
    for &b in stream {
        let i = b as usize;
        if cached[i] {
            // Unlink, to be pushed at the head below.
            let (p, n) = (prev[i], next[i]);
            match p {
                NIL => head = n,
                _ => next[p as usize] = n,
            }
            match n {
                NIL => tail = p,
                _ => prev[n as usize] = p,
            }
        } else {
            misses += 1;
            if len == blocks {
                let t = tail as usize;
                tail = prev[t];
                match tail {
                    NIL => head = NIL,
                    _ => next[tail as usize] = NIL,
                }
                cached[t] = false;
            } else {
                len += 1;
            }
            cached[i] = true;
        }
        prev[i] = NIL;
        next[i] = head;
        match head {
            NIL => tail = b,
            _ => prev[head as usize] = b,
        }
        head = b;
    }
    misses
}

/// Misses the curve gives for a cache of `blocks` blocks: exact curves
/// count whole references, so this is an integer.
fn curve_misses(c: &Curve, blocks: u64) -> u64 {
    (c.miss_ratio(blocks * BLOCK as u64) * c.references() as f64).round() as u64
}

#[test]
fn exact_curves_match_a_simulated_lru_cache() {
    let samples = samples();
    std::thread::scope(|scope| {
        for (name, spec) in &samples {
            scope.spawn(move || {
                let p = profile(spec);
                let mut stream = Vec::new();
                mrc::for_each_block(spec, &p, |_, _, blocks| stream.extend(blocks)).unwrap();
                let mut exact = Shards::exact(BLOCK);
                stream.iter().for_each(|&b| exact.access(b));
                let exact = exact.curve();
                let (ids, distinct) = dense(&stream);
                let ws = p.working_set_bytes / BLOCK as u64;
                assert_eq!(distinct as u64, ws, "{name}");
                for blocks in [1, 2, ws / 100, ws / 10, ws / 2, ws - 1, ws] {
                    assert_eq!(
                        curve_misses(&exact, blocks),
                        lru_misses(&ids, distinct, blocks as usize),
                        "{name}: {blocks} blocks"
                    );
                }
            });
        }
    });
}

#[test]
fn command_line_prints_the_curve() {
    let Some((_, spec)) = samples()
        .into_iter()
        .find(|(n, _)| n.starts_with("msr-cambridge"))
    else {
        return;
    };
    let trace = spec.path.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_rackcache-sim"))
            .args(args)
            .output()
            .expect("run rackcache-sim");
        assert!(
            out.status.success(),
            "rackcache-sim {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let table = run(&["--mrc", trace]);
    assert!(table.contains("volume 0: working set 7.49MiB"), "{table}");
    assert!(table.contains("mean absolute error 0.0000"), "{table}");
    assert_eq!(
        table.lines().filter(|l| l.contains("%  ")).count(),
        mrc::SIZES_PERCENT.len(),
        "{table}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&run(&["--mrc", "--json", "--mrc-max-keys", "1024", trace])).unwrap();
    let c = &json["curves"][0];
    assert_eq!(c["tracked_blocks"], 1024);
    assert!(c["rate"].as_f64().unwrap() < 1.0);
    let points = c["points"].as_array().unwrap();
    assert_eq!(points.len(), mrc::SIZES_PERCENT.len());
    // Miss ratios never rise with the cache size.
    for w in points.windows(2) {
        assert!(w[1]["miss_ratio"].as_f64() <= w[0]["miss_ratio"].as_f64());
    }

    let dir = testkit::TempDir::new("rackcache-mrc-plot");
    let out = Command::new(env!("CARGO_BIN_EXE_rackcache-sim"))
        .args(["--mrc", "--plot", dir.path().to_str().unwrap(), trace])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("no font for chart text") {
        testkit::missing("Debian's fonts-dejavu-core, for --plot");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    assert!(dir.path().join("mrc-volume-0.png").is_file(), "{stderr}");
}
