//! Miss ratios against libCacheSim's policies: every sample trace at 1%, 5%
//! and 10% of its working set, the engine at fixed 4 KiB blocks under each
//! of its eviction policies and under `auto` (online choice, the default),
//! beside libCacheSim's LRU, ARC, S3FIFO, WTinyLFU, LIRS and Sieve on the
//! same 4 KiB block stream with the same bytes (the engine's capacity), in
//! the same run. The last columns give `auto` minus the best peer, in
//! points of miss ratio (negative: ours misses less), and the default
//! adaptive configuration's miss ratio, which prefetches whole blocks of
//! 32 KiB and more around each miss and so is not comparable block for
//! block (it reads more from core; `rackcache-sim --compare` shows how
//! much).
//!
//! Traces come from $RACKCACHE_TRACES (default ../shared/traces next to the
//! repository); libCacheSim from the project's venv (`hack/deps.sh python`).
//! Without either, the benchmark says what is missing and stops.
//!
//! Run: `make bench`, or `cargo bench -p rackcache-sim --bench peers`.

use engine::{Config, EvictionConfig};
use rackcache_sim::peers::stream::write_block_stream;
use rackcache_sim::peers::{Peers, POLICIES};
use rackcache_sim::replay::{replay, FlushPolicy, Profile, SimConfig, TraceSpec};

const SIZES: [u64; 3] = [1, 5, 10];
const OURS: [&str; 6] = ["lru2", "s3fifo", "sieve", "arc", "wtinylfu", "auto"];

/// The sample traces: path under the traces directory, oracleGeneral id
/// unit.
const TRACES: [(&str, u64); 4] = [
    ("cloudphysics/cloudPhysicsIO.oracleGeneral.bin", 512),
    ("msr_cambridge/msr-cambridge1-sample.csv", 1),
    ("systor17/systor17-traces-sample.csv.gz", 1),
    ("systor17/systor17-additional-sample.csv.gz", 1),
];

/// Fixed 4 KiB blocks in 64 KiB groups, so that 1% of the small samples'
/// working sets is still a cache (whole groups); at one block size groups
/// never decide a replacement.
fn fixed_4k(eviction: EvictionConfig) -> Config {
    Config {
        group_size: 64 << 10,
        eviction,
        ..Config::fixed(1, 1, 4096)
    }
}

fn miss(spec: &TraceSpec, profile: &Profile, engine: Config, cache: u64) -> (f64, u64) {
    let sim = SimConfig {
        label: String::new(),
        engine,
        flush: FlushPolicy::None,
    };
    let r = replay(spec, profile, &sim, cache, |_| {}).expect("replay");
    (r.miss_ratio, r.cache_bytes)
}

fn main() {
    let dir = rackcache_sim::traces_dir();
    let tmp = tempfile::Builder::new()
        .prefix("rackcache-peers-bench-")
        .tempdir()
        .expect("temporary directory");
    let peers = match Peers::locate(tmp.path()) {
        Ok(p) => p,
        Err(e) => {
            println!("peers bench: skipped: {e}");
            return;
        }
    };
    println!(
        "peers bench: 4 KiB block miss ratio, engine write-back at fixed 4 KiB blocks vs libCacheSim {} at the same bytes",
        peers.version
    );
    let mut header = format!("{:<34} {:>5}", "trace", "cache");
    for o in OURS {
        header += &format!(" {o:>8}");
    }
    for p in POLICIES {
        header += &format!(" {p:>8}");
    }
    header += &format!(
        " {:>9} {:>12} {:>9}",
        "best peer", "auto - best", "adaptive"
    );
    println!("{header}");
    for (name, unit) in TRACES {
        let path = dir.join(name);
        if !path.is_file() {
            println!("{name}: not found (set RACKCACHE_TRACES; see docs/traces.md)");
            continue;
        }
        let mut spec = TraceSpec::new(&path);
        spec.oracle_id_unit = unit;
        let profile = Profile::scan(&spec, 4096).expect("profile the trace");
        let stream = tmp.path().join("blocks.oracleGeneral");
        write_block_stream(&spec, &profile, 0, &stream).expect("write the block stream");
        let short = name.rsplit('/').next().unwrap_or(name);
        for pct in SIZES {
            let cache = profile.working_set_bytes * pct / 100;
            let mut row = format!("{short:<34} {:>4}%", pct);
            let mut used = 0;
            let mut auto = f64::NAN;
            for o in OURS {
                let ev = engine::names::parse_eviction(o).expect("a policy name");
                match std::panic::catch_unwind(|| miss(&spec, &profile, fixed_4k(ev), cache)) {
                    Ok((m, bytes)) => {
                        used = bytes;
                        if o == "auto" {
                            auto = m;
                        }
                        row += &format!(" {:>7.2}%", m * 100.0);
                    }
                    Err(_) => row += &format!(" {:>8}", "-"),
                }
            }
            if used == 0 {
                println!("{row}  (cache below one group)");
                continue;
            }
            let got = peers.run(&stream, 0, &[used]).expect("libCacheSim");
            let mut best = ("", f64::MAX);
            for p in POLICIES {
                let m = got
                    .iter()
                    .find(|r| r.policy == p)
                    .map_or(f64::NAN, |r| r.miss_ratio);
                if m < best.1 {
                    best = (p, m);
                }
                row += &format!(" {:>7.2}%", m * 100.0);
            }
            let (adaptive, _) = miss(
                &spec,
                &profile,
                Config::adaptive(1, 1),
                cache.max(256 << 10),
            );
            row += &format!(
                " {:>9} {:>+11.2}p {:>8.2}%",
                best.0,
                (auto - best.1) * 100.0,
                adaptive * 100.0
            );
            println!("{row}");
        }
    }
    println!("(p: points of miss ratio; ours and libCacheSim's replay the same 4 KiB blocks, capacity = the engine's whole groups)");
}
