//! The sparse layout (only the 1 MiB regions requests touch, packed) gives
//! exactly the dense layout's figures (volumes end to end) wherever the
//! dense one fits: on a synthetic multi-volume trace with requests that
//! cross region boundaries, under every write mode, fill, eviction and
//! flush setting and block sizes from 4 KiB to 1 MiB; and on the sample
//! traces (skipped with a message when absent, failing under `CI=true`).
//!
//! Admission stays `always`: `nhit`, `tinylfu` and `size-aware` hash block
//! numbers into fixed tables, so placement changes their collisions (see
//! `src/layout.rs`).

mod common;

use common::{sim, write_tencent, Req, Rng};
use engine::{Config, EvictionConfig, WriteMissFill, WriteMode};
use rackcache_sim::layout::LayoutKind;
use rackcache_sim::replay::{comparison_set, replay, FlushPolicy, Profile, SimConfig, TraceSpec};
use rackcache_sim::report::Report;
use testkit::TempDir;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// 40 volumes of up to 256 GiB (10 TiB dense: it fits at 4 KiB blocks).
/// Each has a few hot spots; requests land within 1.5 MiB of one, from
/// 512 bytes to 2.5 MiB long, so they cross region boundaries into
/// neighbours that other requests sometimes touch and sometimes do not.
/// Gaps of a few seconds let lazy flushing run.
fn synthetic(n: usize) -> Vec<Req> {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let spots: Vec<Vec<u64>> = (0..40)
        .map(|_| (0..6).map(|_| 2 * MIB + rng.below(254 * GIB)).collect())
        .collect();
    let mut secs = 0;
    (0..n)
        .map(|_| {
            // Low volume numbers are busier.
            let volume = (rng.below(40) * rng.below(40) / 40) as u32;
            let offset = if rng.below(10) == 0 {
                rng.below(256 * GIB)
            } else {
                let spot = spots[volume as usize][rng.below(6) as usize];
                spot + rng.below(3 * MIB) - 3 * MIB / 2
            } / 512
                * 512;
            let len = match rng.below(10) {
                0..=5 => 512 * (1 + rng.below(16)),
                6..=8 => 8 * KIB + 512 * rng.below(240),
                _ => 128 * KIB + 512 * rng.below(4864),
            };
            secs += match rng.below(50) {
                0 => 5,
                1..=20 => 1,
                _ => 0,
            };
            Req {
                secs,
                volume,
                offset,
                len,
                write: rng.below(10) < 3,
            }
        })
        .collect()
}

/// Every setting whose decisions depend on volume offsets.
fn configurations() -> Vec<SimConfig> {
    let base = Config::adaptive(1, 1);
    let mut v = comparison_set(&base, FlushPolicy::None);
    let wide = Config {
        block_sizes: vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20],
        group_size: 1 << 20,
        ..base.clone()
    };
    v.push(sim(
        "fixed-4KiB",
        Config::fixed(1, 1, 4096),
        FlushPolicy::None,
    ));
    v.push(sim(
        "fixed-1MiB",
        Config::fixed(1, 1, 1 << 20),
        FlushPolicy::None,
    ));
    v.push(sim("adaptive-4K-1M", wide.clone(), FlushPolicy::None));
    for mode in [WriteMode::WriteThrough, WriteMode::WriteAround] {
        let c = Config {
            write_mode: mode,
            ..wide.clone()
        };
        v.push(sim(&format!("{mode:?}"), c, FlushPolicy::None));
    }
    for fill in [WriteMissFill::WholeBlock, WriteMissFill::HeadTail] {
        let c = Config {
            write_miss_fill: fill,
            ..wide.clone()
        };
        v.push(sim(&format!("{fill:?}"), c, FlushPolicy::None));
    }
    let lazy = Config {
        eviction: EvictionConfig::Lazy { para: 2, k: 1.0 },
        ..wide.clone()
    };
    v.push(sim("lea", lazy, FlushPolicy::None));
    v.push(sim(
        "flush-lazy",
        base.clone(),
        FlushPolicy::Lazy {
            idle_ns: 2_000_000_000,
        },
    ));
    v.push(sim("flush-aggressive", wide, FlushPolicy::Aggressive));
    v
}

/// The report without the wall-clock figures.
fn figures(mut r: Report) -> Report {
    r.plan_ns_median = 0;
    r.plan_ns_p99 = 0;
    r.plan_ns_mean = 0.0;
    r
}

/// Replays `spec` under both layouts and asserts identical figures; returns
/// the (dense, sparse) address spaces.
fn assert_same(spec: &TraceSpec, sims: &[SimConfig], cache_percent: u64) -> (u64, u64) {
    let dense = Profile::scan_with_layout(spec, 4096, LayoutKind::Dense).unwrap();
    let sparse = Profile::scan_with_layout(spec, 4096, LayoutKind::Sparse).unwrap();
    assert_eq!(dense.layout.kind(), LayoutKind::Dense);
    assert_eq!(sparse.layout.kind(), LayoutKind::Sparse);
    assert_eq!(dense.volumes(), sparse.volumes());
    assert_eq!(dense.working_set_bytes, sparse.working_set_bytes);
    let cache = (dense.working_set_bytes * cache_percent / 100).max(2 * MIB);
    for s in sims {
        // The default eviction (`auto`) samples granules by a hash of their
        // address, so its shadows, like hashed admission tables, see other
        // granules under another layout. The fixed policies are
        // address-blind.
        let mut s = s.clone();
        if matches!(s.engine.eviction, EvictionConfig::Auto { .. }) {
            s.engine.eviction = EvictionConfig::TwoLevelLru;
        }
        let s = &s;
        let a = replay(spec, &dense, s, cache, |_| {}).unwrap();
        let b = replay(spec, &sparse, s, cache, |_| {}).unwrap();
        assert!(a.cached_blocks_end > 0, "{}: nothing cached", s.label);
        assert_eq!(
            figures(a),
            figures(b),
            "{} on {}",
            s.label,
            spec.path.display()
        );
    }
    (dense.address_space, sparse.address_space)
}

#[test]
fn sparse_and_dense_agree_on_a_synthetic_multi_volume_trace() {
    let dir = TempDir::new("rackcache-sim-layout");
    let path = dir.path().join("tencent-synthetic.csv");
    write_tencent(&path, &synthetic(6000));
    let mut spec = TraceSpec::new(&path);
    spec.format = Some(traces::Format::TencentCbs);
    // Small caches evict (and write back) all the time; the large one
    // holds more of the blocks the requests partly share.
    for pct in [3, 30] {
        let (dense, sparse) = assert_same(&spec, &configurations(), pct);
        assert!(dense > 8 << 40, "dense spans {dense}");
        assert!(sparse < dense / 1000, "sparse spans {sparse}");
    }
    // Auto keeps the dense layout: it fits.
    let auto = Profile::scan(&spec, 4096).unwrap();
    assert_eq!(auto.layout.kind(), LayoutKind::Dense);
}

#[test]
fn sparse_and_dense_agree_on_the_sample_traces() {
    let dir = rackcache_sim::traces_dir();
    let samples = [
        "msr_cambridge/msr-cambridge1-sample.csv",
        "systor17/systor17-traces-sample.csv.gz",
        "systor17/systor17-additional-sample.csv.gz",
        "cloudphysics/cloudPhysicsIO.csv",
    ];
    let sims: Vec<SimConfig> = comparison_set(&Config::adaptive(1, 1), FlushPolicy::None)
        .into_iter()
        .chain([sim(
            "fixed-4KiB",
            Config::fixed(1, 1, 4096),
            FlushPolicy::None,
        )])
        .collect();
    for name in samples {
        let p = dir.join(name);
        if !p.is_file() {
            testkit::missing(&format!(
                "{} not found (set RACKCACHE_TRACES to the traces directory)",
                p.display()
            ));
            continue;
        }
        let mut spec = TraceSpec::new(p);
        spec.limit = Some(40_000);
        assert_same(&spec, &sims, 10);
    }
}
