//! Cost of a miss-ratio curve per block reference: an unsampled reference
//! (hash and compare), a sampled one (distance, timeline, histogram), and
//! the default fixed-size sampler over a whole trace, on the CloudPhysics
//! sample's 4 KiB block stream (1.14 million references, 269,210 blocks).
//!
//! - `unsampled`: a rate so low that nothing is sampled.
//! - `exact`: every reference sampled (the exact curve; 10 MiB of state).
//! - `fixed-size`: the default sampler (16,384 blocks, rate 1 falling to
//!   0.061); its time per sampled reference is its total minus the
//!   unsampled references at the `unsampled` cost.
//!
//! Each is the best of `RUNS` runs. The trace is read from
//! $RACKCACHE_TRACES (default ../shared/traces next to the repository);
//! without it the benchmark says so and stops.
//!
//! Run: `make bench`, or `cargo bench -p rackcache-sim --bench mrc`.

use std::time::Instant;

use engine::mrc::{Shards, ShardsConfig};
use rackcache_sim::mrc::{for_each_block, BLOCK};
use rackcache_sim::replay::{Profile, TraceSpec};

const RUNS: usize = 5;

struct Run {
    ns: f64,
    sampled: u64,
    memory: usize,
}

fn best(stream: &[u64], config: ShardsConfig) -> Run {
    let mut out: Option<Run> = None;
    for _ in 0..RUNS {
        let mut s = Shards::new(config).expect("valid configuration");
        let start = Instant::now();
        for &b in stream {
            s.access(b);
        }
        let curve = s.curve();
        let ns = start.elapsed().as_nanos() as f64;
        std::hint::black_box(curve);
        if out.as_ref().is_none_or(|o| ns < o.ns) {
            out = Some(Run {
                ns,
                sampled: s.sampled_references(),
                memory: s.memory_bytes(),
            });
        }
    }
    out.expect("RUNS > 0")
}

fn main() {
    let path = rackcache_sim::traces_dir().join("cloudphysics/cloudPhysicsIO.csv");
    if !path.is_file() {
        println!("mrc: SKIPPED, {} not found", path.display());
        return;
    }
    let spec = TraceSpec::new(&path);
    let profile = Profile::scan(&spec, 4096).expect("scan the trace");
    let mut stream = Vec::new();
    for_each_block(&spec, &profile, |_, _, blocks| stream.extend(blocks)).expect("read the trace");
    let n = stream.len() as f64;

    let unsampled = best(&stream, ShardsConfig::fixed_rate(BLOCK, 1e-15));
    assert_eq!(unsampled.sampled, 0, "a rate of 1e-15 samples nothing here");
    let exact = best(&stream, ShardsConfig::exact(BLOCK));
    let fixed = best(&stream, ShardsConfig::default());
    let per_unsampled = unsampled.ns / n;
    let fixed_sampled =
        (fixed.ns - (n - fixed.sampled as f64) * per_unsampled) / fixed.sampled as f64;

    println!(
        "mrc: {} block references of {}, best of {RUNS}",
        stream.len(),
        path.display()
    );
    println!(
        "{:<12} {:>10} {:>12} {:>16} {:>12}",
        "sampler", "sampled", "ns/ref", "ns/sampled ref", "state"
    );
    for (label, r, per_sampled) in [
        ("unsampled", &unsampled, None),
        ("exact", &exact, Some(exact.ns / n)),
        ("fixed-size", &fixed, Some(fixed_sampled)),
    ] {
        let per_sampled = per_sampled.map_or("-".into(), |v| format!("{v:.1}"));
        println!(
            "{label:<12} {:>10} {:>12.1} {:>16} {:>11}B",
            r.sampled,
            r.ns / n,
            per_sampled,
            r.memory
        );
    }
}
