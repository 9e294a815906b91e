//! The sampler against hand-checked sequences, a brute-force LRU cache and
//! its own exact mode.

use std::collections::VecDeque;

use super::*;

const BS: u32 = 4096;

fn exact_curve(refs: &[u64]) -> Curve {
    let mut s = Shards::exact(BS);
    refs.iter().for_each(|&b| s.access(b));
    s.curve()
}

/// Misses of an LRU cache of `blocks` blocks, the obvious way.
fn lru_misses(refs: &[u64], blocks: usize) -> u64 {
    let mut cache: VecDeque<u64> = VecDeque::new();
    let mut misses = 0;
    for &b in refs {
        if let Some(i) = cache.iter().position(|&c| c == b) {
            cache.remove(i);
        } else {
            misses += 1;
            if cache.len() == blocks {
                cache.pop_back();
            }
        }
        cache.push_front(b);
    }
    misses
}

/// A fixed-seed generator (xorshift64*) for test workloads.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Skewed random reuse over `blocks` blocks mixed with sequential runs
/// through a larger region: `n` references.
fn workload(n: usize, blocks: u64, seed: u64) -> Vec<u64> {
    let mut rng = Rng(seed);
    let mut cursor = 0u64;
    (0..n)
        .map(|_| {
            if rng.unit() < 0.7 {
                let u = rng.unit();
                (u * u * blocks as f64) as u64
            } else {
                cursor = (cursor + 1) % (blocks * 2);
                blocks + cursor
            }
        })
        .collect()
}

/// Cache sizes from 0.5% to 100% of a working set.
fn sizes(working_set_bytes: u64) -> Vec<u64> {
    [
        0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0,
    ]
    .iter()
    .map(|p| (working_set_bytes as f64 * p / 100.0) as u64)
    .collect()
}

#[test]
fn cyclic_scan_misses_everything_below_its_length() {
    // 50 blocks, 4 passes: LRU always evicts the block needed next until it
    // holds all 50; from then on only the 50 first references miss.
    let refs: Vec<u64> = (0..4).flat_map(|_| 0..50u64).collect();
    let c = exact_curve(&refs);
    for blocks in [0, 1, 25, 49] {
        assert_eq!(c.miss_ratio(blocks * 4096), 1.0, "{blocks} blocks");
    }
    for blocks in [50, 51, 1000] {
        assert_eq!(c.miss_ratio(blocks * 4096), 0.25, "{blocks} blocks");
    }
    assert_eq!(c.references(), 200);
}

#[test]
fn hand_checked_distances() {
    // A B A C A B: A, B, C are first references; A reuses after B (1
    // distinct block), A after C (1), B after A and C (2).
    let c = exact_curve(&[1, 2, 1, 3, 1, 2]);
    let misses = |blocks: u64| c.miss_ratio(blocks * 4096) * 6.0;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(misses(1), 6.0));
    assert!(close(misses(2), 4.0));
    assert!(close(misses(3), 3.0));
    assert!(close(misses(10), 3.0));
    // The same block twice in a row hits in a 1-block cache.
    assert_eq!(exact_curve(&[7, 7, 7, 7]).miss_ratio(4096), 0.25);
}

#[test]
fn exact_curve_matches_a_brute_force_lru_cache() {
    // 450 blocks (150 reused at random, 300 scanned), long enough to force
    // many timeline compactions.
    let refs = workload(30_000, 150, 1);
    let c = exact_curve(&refs);
    let n = refs.len() as f64;
    for blocks in [1usize, 2, 3, 7, 20, 64, 150, 300, 449, 450, 451] {
        let hits = ((1.0 - c.miss_ratio(blocks as u64 * 4096)) * n).round() as u64;
        assert_eq!(
            refs.len() as u64 - hits,
            lru_misses(&refs, blocks),
            "{blocks} blocks"
        );
    }
}

#[test]
fn byte_ranges_split_into_blocks() {
    let mut a = Shards::exact(BS);
    a.access_bytes(4096 - 512, 1024); // blocks 0 and 1
    a.access_bytes(8192, 8192); // blocks 2 and 3
    a.access_bytes(0, 0); // nothing
    let mut b = Shards::exact(BS);
    (0..4).for_each(|x| b.access(x));
    assert_eq!(a.curve(), b.curve());
    assert_eq!(a.working_set_bytes(), 4 * 4096);
}

#[test]
fn fixed_size_under_its_bound_is_exact() {
    let refs = workload(50_000, 1_000, 2);
    let mut s = Shards::new(ShardsConfig::default()).unwrap();
    refs.iter().for_each(|&b| s.access(b));
    assert_eq!(s.rate(), 1.0);
    assert_eq!(s.sampled_references(), refs.len() as u64);
    assert_eq!(s.curve(), exact_curve(&refs));
}

#[test]
fn byte_ranges_map_to_blocks_of_any_size() {
    // A power of two shifts, any other size divides: the same blocks.
    for (bs, offset, len, blocks) in [
        (4096, 4095, 2, 2),
        (4096, 8192, 4096, 1),
        (3000, 2999, 2, 2),
        (3000, 6000, 9000, 3),
    ] {
        let mut s = Shards::exact(bs);
        s.access_bytes(offset, len);
        s.access_bytes(offset, 0);
        assert_eq!(s.references(), blocks, "{bs}: {offset}+{len}");
    }
}

#[test]
fn deferred_references_give_the_same_curve() {
    // Enough distinct blocks that fixed-size mode lowers its threshold
    // while references wait, and a read of the curve between batches.
    let refs = workload(60_000, 20_000, 7);
    let mut now = Shards::new(ShardsConfig::fixed_size(BS, 1.0, 1_000)).unwrap();
    let mut later = Shards::new(ShardsConfig::fixed_size(BS, 1.0, 1_000)).unwrap();
    for (i, &b) in refs.iter().enumerate() {
        now.access(b);
        later.access_deferred(b);
        if i == refs.len() / 2 {
            later.settle();
            assert_eq!(later.curve(), now.curve());
        }
    }
    later.access_bytes_deferred(5 * u64::from(BS), 3 * u64::from(BS));
    now.access_bytes(5 * u64::from(BS), 3 * u64::from(BS));
    later.settle();
    assert!(now.rate() < 0.2, "the threshold fell: rate {}", now.rate());
    assert_eq!(
        (
            later.curve(),
            later.rate(),
            later.sampled_references(),
            later.references()
        ),
        (
            now.curve(),
            now.rate(),
            now.sampled_references(),
            now.references()
        )
    );
}

#[test]
fn same_references_same_curve() {
    let refs = workload(100_000, 50_000, 3);
    let run = || {
        let mut s = Shards::new(ShardsConfig::fixed_size(BS, 1.0, 1_000)).unwrap();
        refs.iter().for_each(|&b| s.access(b));
        (s.curve(), s.rate(), s.sampled_references())
    };
    assert_eq!(run(), run());
}

#[test]
fn fixed_size_bounds_keys_and_memory() {
    let mut s = Shards::new(ShardsConfig::default()).unwrap();
    let start = s.memory_bytes();
    assert!(start <= 1 << 20, "{start} bytes");
    // 2 million distinct blocks, each read twice some time apart.
    for round in 0..20u64 {
        for b in 0..100_000u64 {
            s.access(round * 100_000 + b);
        }
        for b in 0..100_000u64 {
            s.access(round * 100_000 + b);
        }
    }
    assert_eq!(s.tracked_blocks(), DEFAULT_MAX_KEYS as usize);
    assert_eq!(s.memory_bytes(), start, "allocated up front");
    // About max_keys out of 2 million blocks are sampled now.
    let expected = DEFAULT_MAX_KEYS as f64 / 2e6;
    assert!((s.rate() / expected - 1.0).abs() < 0.1, "rate {}", s.rate());
    let ws = s.working_set_bytes() as f64 / (2e6 * 4096.0);
    assert!((ws - 1.0).abs() < 0.05, "working set estimate x{ws}");
    // Each block's second reference comes 100,000 blocks after its first.
    // Sampled at R, that distance is 100,000 R sampled blocks give or take
    // sqrt(100,000 R), so the step from 1 to 0.5 spreads over about +-3.5%.
    let c = s.curve();
    assert!((c.miss_ratio(90_000 * 4096) - 1.0).abs() < 0.02);
    assert!((c.miss_ratio(110_000 * 4096) - 0.5).abs() < 0.02);
}

#[test]
fn sampled_curves_are_close_to_the_exact_one() {
    // A million references over about 300,000 blocks (the default sampler
    // ends near rate 0.055), three workloads. The bound is looser for
    // fixed rate 0.01: it samples about 3,000 blocks, so whether a few hot
    // ones are among them moves its curve more (up to 0.023 seen).
    for seed in 1..=3 {
        let refs = workload(1_000_000, 100_000, seed);
        let mut exact = Shards::exact(BS);
        refs.iter().for_each(|&b| exact.access(b));
        let sizes = sizes(exact.working_set_bytes());
        for (cfg, bound) in [
            (ShardsConfig::default(), 0.02),
            (ShardsConfig::fixed_size(BS, 0.1, 8_192), 0.02),
            (ShardsConfig::fixed_rate(BS, 0.01), 0.03),
        ] {
            let mut s = Shards::new(cfg).unwrap();
            refs.iter().for_each(|&b| s.access(b));
            assert!(s.rate() < 0.1, "{cfg:?}: sampled at {}", s.rate());
            let mae = s.curve().mean_absolute_error(&exact.curve(), &sizes);
            assert!(
                mae <= bound,
                "{cfg:?}, workload {seed}: mean absolute error {mae}"
            );
            assert!(s.memory_bytes() <= 1 << 20, "{cfg:?}: {}", s.memory_bytes());
        }
    }
}

/// The engine's sampler: fixed-size with a rate cap of 1/8 past 1,024
/// tracked blocks (`engine::mrc_config`).
fn capped() -> ShardsConfig {
    ShardsConfig {
        rate_cap: Some(RateCap {
            keys: 1_024,
            rate: 1.0 / 8.0,
        }),
        ..ShardsConfig::fixed_size(BS, 1.0, 4_096)
    }
}

#[test]
fn a_capped_rate_keeps_small_working_sets_exact() {
    let refs = workload(20_000, 300, 4);
    let mut s = Shards::new(capped()).unwrap();
    refs.iter().for_each(|&b| s.access(b));
    assert_eq!(s.rate(), 1.0);
    assert_eq!(s.curve(), exact_curve(&refs));
}

#[test]
fn a_capped_rate_stays_close_to_the_exact_curve() {
    // About 15,000 distinct blocks: uncapped, fixed-size mode would sample
    // them at about 0.27; capped, at 1/8 (about 1,900 tracked).
    for seed in 1..=3 {
        let refs = workload(300_000, 5_000, seed);
        let mut exact = Shards::exact(BS);
        refs.iter().for_each(|&b| exact.access(b));
        let sizes = sizes(exact.working_set_bytes());
        let mut s = Shards::new(capped()).unwrap();
        let mut uncapped = Shards::new(ShardsConfig {
            rate_cap: None,
            ..capped()
        })
        .unwrap();
        for &b in &refs {
            s.access(b);
            uncapped.access(b);
        }
        assert!(uncapped.rate() > 0.2, "uncapped rate {}", uncapped.rate());
        assert!(s.rate() <= 1.0 / 8.0, "capped rate {}", s.rate());
        assert!(s.sampled_references() * 6 < uncapped.sampled_references() * 3);
        let mae = s.curve().mean_absolute_error(&exact.curve(), &sizes);
        assert!(mae <= 0.02, "workload {seed}: mean absolute error {mae}");
        assert_eq!(s.memory_bytes(), uncapped.memory_bytes());
    }
}

#[test]
fn bad_configurations_are_refused() {
    let ok = ShardsConfig::default();
    for (cfg, err) in [
        (
            ShardsConfig {
                block_size: 0,
                ..ok
            },
            ShardsConfigError::BlockSize,
        ),
        (
            ShardsConfig { rate: 0.0, ..ok },
            ShardsConfigError::Rate(0.0),
        ),
        (
            ShardsConfig { rate: 1.5, ..ok },
            ShardsConfigError::Rate(1.5),
        ),
        (
            ShardsConfig {
                max_keys: Some(0),
                ..ok
            },
            ShardsConfigError::MaxKeys(0),
        ),
        (
            ShardsConfig {
                max_buckets: Some(1),
                ..ok
            },
            ShardsConfigError::MaxBuckets,
        ),
        (
            ShardsConfig {
                max_keys: None,
                ..capped()
            },
            ShardsConfigError::RateCap,
        ),
        (
            ShardsConfig {
                rate_cap: Some(RateCap {
                    keys: 10,
                    rate: 0.0,
                }),
                ..ok
            },
            ShardsConfigError::RateCap,
        ),
    ] {
        assert_eq!(Shards::new(cfg).unwrap_err(), err);
    }
    assert!(matches!(
        Shards::new(ShardsConfig {
            rate: f64::NAN,
            ..ok
        }),
        Err(ShardsConfigError::Rate(_))
    ));
}
