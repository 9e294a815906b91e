use super::*;

/// Every key is read twice, the second time after `gap` other first reads:
/// recency wins (LRU keeps the key), a small FIFO filter loses it.
fn second_chance_stream(keys: u64, gap: u64) -> impl Iterator<Item = u64> {
    (0..keys + gap).flat_map(move |t| {
        let first = (t < keys).then_some(t);
        let second = (t >= gap).then(|| t - gap);
        first.into_iter().chain(second)
    })
}

#[test]
fn switches_to_the_policy_whose_shadow_misses_least() {
    // 4096 granules of 4 KiB cached; every granule sampled.
    let mut c = Chooser::with_rate(4096 << 12, 12, &all_candidates(), 1.0);
    assert_eq!(c.active(), &EvictionConfig::S3Fifo);
    let mut switched = Vec::new();
    // A hot set that S3-FIFO promotes to its main queue fills most of the
    // cache, so that its small queue holds far fewer than `gap` keys.
    let hot = (0..3600u64).flat_map(|k| [k, k, k]);
    let stream = second_chance_stream(200_000, 2000).map(|k| k + 1_000_000);
    for g in hot.chain(stream) {
        if let Some(p) = c.observe(g << 12, 4096) {
            switched.push(p);
        }
    }
    assert!(
        !switched.is_empty(),
        "S3-FIFO's small queue loses every key: {:?}",
        c.report("x")
    );
    assert_ne!(c.active(), &EvictionConfig::S3Fifo);
    let r = c.report("x");
    let ratio = |name| r.shadows.iter().find(|s| s.0 == name).unwrap().1;
    let active = crate::names::eviction_name(c.active());
    assert!(ratio(active) < ratio("s3fifo") - 0.2, "{r:?}");
    assert!(c.switches <= 3, "no flapping between equals: {r:?}");
}

#[test]
fn stays_put_when_no_policy_is_clearly_better() {
    let mut c = Chooser::with_rate(4096 << 12, 12, &all_candidates(), 1.0);
    // A working set that fits: after the cold misses, which every policy
    // takes alike, nobody misses.
    for i in 0..200_000u64 {
        assert_eq!(c.observe((i % 3_000) << 12, 4096), None);
    }
    assert_eq!(c.switches, 0);
}

#[test]
fn memory_is_bounded_whatever_the_cache_size() {
    for capacity in [64u64 << 20, 10 << 30, 1 << 40, 64 << 40] {
        let mut c = Chooser::new(capacity, 12, &all_candidates());
        // Fill every shadow.
        for i in 0..1_000_000u64 {
            c.observe(i << 12, 4096);
        }
        let r = c.report("x");
        assert!(
            r.memory_bytes <= 1 << 20,
            "{capacity}: {} bytes, {} slots, rate {}",
            r.memory_bytes,
            r.shadow_slots,
            r.rate
        );
    }
}
