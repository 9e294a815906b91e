//! Control operations on live cached volumes: switching out of write-back
//! flushes first, resizing keeps data, policies change without losing
//! cached blocks, volumes sharing a device stay apart, delete flushes.

mod common;

use bdev::DmaBuf;
use cache::volume::{CacheMode, PolicyChange, VolumeError};
use common::{create, params, read, Devices, Rng};

const VOLUME_MIB: u64 = 24;

async fn write_pattern(b: &bdev::Bdev, rng: &mut Rng, off: u64, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    rng.fill(&mut data);
    b.write(off, DmaBuf::from_slice(&data)).await.1.unwrap();
    data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_write_back_flushes_first_and_core_holds_the_data() {
    let d = Devices::new(VOLUME_MIB, 12, false);
    let dev = d.open_cache().await;
    let (vol, b) = create(
        &d,
        &dev,
        params(serde_json::json!({"write_mode": "wb",
        "cleaning": {"policy": "nop"}})),
    )
    .await;
    let mut rng = Rng(21);
    let data = write_pattern(&b, &mut rng, 1 << 20, 512 << 10).await;
    let st = vol.stats().await.unwrap();
    assert_eq!(st.dirty_bytes, 512 << 10, "nop cleaning keeps writes dirty");
    let (core, _) = d.core_ram.read(1 << 20, DmaBuf::new(512 << 10)).await;
    assert!(
        core[..] != data[..],
        "write-back: core does not have it yet"
    );
    vol.set_mode(CacheMode::Wt).await.unwrap();
    let st = vol.stats().await.unwrap();
    assert_eq!((st.write_mode, st.dirty_bytes), ("wt", 0));
    let (core, r) = d.core_ram.read(1 << 20, DmaBuf::new(512 << 10)).await;
    r.unwrap();
    assert!(
        core[..] == data[..],
        "the switch wrote every dirty byte back"
    );
    // Write-through now: a new write is on core when acknowledged.
    let data2 = write_pattern(&b, &mut rng, 4 << 20, 64 << 10).await;
    let (core, _) = d.core_ram.read(4 << 20, DmaBuf::new(64 << 10)).await;
    assert!(core[..] == data2[..]);
    // And back to write-back needs no flush.
    vol.set_mode(CacheMode::Wb).await.unwrap();
    vol.stop(false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_grows_and_shrinks_keeping_data() {
    let d = Devices::new(VOLUME_MIB, 12, false);
    let dev = d.open_cache().await;
    let (vol, b) = create(
        &d,
        &dev,
        params(serde_json::json!({"write_mode": "wb",
        "cache_size_mib": 2, "cleaning": {"policy": "nop"}})),
    )
    .await;
    let free0 = dev.free_units();
    let mut rng = Rng(22);
    let data = write_pattern(&b, &mut rng, 0, 1536 << 10).await;
    vol.resize(6).await.unwrap();
    assert_eq!(dev.free_units(), free0 - 4);
    assert_eq!(vol.stats().await.unwrap().usage.capacity_bytes, 6 << 20);
    let more = write_pattern(&b, &mut rng, 8 << 20, 4 << 20).await;
    vol.resize(1).await.unwrap();
    assert_eq!(dev.free_units(), free0 + 1);
    let st = vol.stats().await.unwrap();
    assert_eq!(st.usage.capacity_bytes, 1 << 20);
    assert!(st.usage.occupancy_bytes <= 1 << 20);
    let (got, r) = read(&b, 0, 1536 << 10).await;
    r.unwrap();
    assert!(got[..] == data[..]);
    let (got, r) = read(&b, 8 << 20, 4 << 20).await;
    r.unwrap();
    assert!(got[..] == more[..]);
    assert!(vol.resize(0).await.is_err(), "zero is refused");
    // The shrunk size is what a restart attaches to.
    vol.stop(false).await.unwrap();
    // A grow the stopped volume cannot take leaks no unit of the device.
    let free = dev.free_units();
    assert!(matches!(vol.resize(4).await, Err(VolumeError::Stopped(_))));
    assert_eq!(
        dev.free_units(),
        free,
        "the failed grow gave its units back"
    );
    assert_eq!(dev.find_volume("Cache0").unwrap().units.len(), 1);
    let mut p = vol.params();
    assert_eq!(p.cache_size_mib, 1);
    p.load = true;
    let (vol, b) = create(&d, &dev, p).await;
    let (got, _) = read(&b, 0, 1536 << 10).await;
    assert!(got[..] == data[..]);
    vol.delete(false).await.unwrap();
    let (core, _) = d.core_ram.read(8 << 20, DmaBuf::new(4 << 20)).await;
    assert!(core[..] == more[..], "delete flushed dirty data to core");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_change_without_losing_cached_blocks() {
    let d = Devices::new(VOLUME_MIB, 12, false);
    let dev = d.open_cache().await;
    let (vol, b) = create(&d, &dev, params(serde_json::json!({}))).await;
    read(&b, 0, 1 << 20).await.1.unwrap();
    let before = vol.stats().await.unwrap().cached_blocks;
    assert!(before > 0);
    vol.set_policy(PolicyChange {
        admission: Some("tinylfu".into()),
        eviction: Some("lazy:2:1.0".into()),
        ..PolicyChange::default()
    })
    .await
    .unwrap();
    assert_eq!(vol.stats().await.unwrap().cached_blocks, before);
    let p = vol.params();
    assert_eq!(
        (p.admission.as_str(), p.eviction.as_str()),
        ("tinylfu", "lazy:2:1.0")
    );
    let bad = vol
        .set_policy(PolicyChange {
            admission: Some("lfu".into()),
            ..PolicyChange::default()
        })
        .await;
    assert!(bad.unwrap_err().to_string().contains("unknown admission"));
    assert_eq!(
        vol.params().admission,
        "tinylfu",
        "a refused change changes nothing"
    );
    vol.reset_stats().await.unwrap();
    read(&b, 0, 1 << 20).await.1.unwrap();
    assert_eq!(vol.stats().await.unwrap().hit_ratio.read, 1.0);
    vol.stop(false).await.unwrap();
}

/// Two volumes on one cache device: the second's eviction storm does not
/// touch the first's blocks (each has its own units).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_volume_is_unaffected_by_the_firsts_eviction_storm() {
    let d = Devices::new(VOLUME_MIB, 16, false);
    let d2 = Devices::new(VOLUME_MIB, 1, false);
    let dev = d.open_cache().await;
    let (quiet, qb) = create(&d, &dev, params(serde_json::json!({"cache_size_mib": 4}))).await;
    let mut p = params(serde_json::json!({"cache_size_mib": 2, "write_mode": "wb"}));
    p.name = "Cache1".into();
    let storm = cache::volume::CachedVolume::create(p, d2.core.clone(), dev.clone())
        .await
        .unwrap();
    let sb = std::sync::Arc::new(storm.bdev());
    read(&qb, 0, 2 << 20).await.1.unwrap();
    quiet.reset_stats().await.unwrap();
    let mut rng = Rng(23);
    for i in 0..64u64 {
        write_pattern(&sb, &mut rng, (i % 20) << 20, 256 << 10).await;
        read(&qb, (i % 8) << 18, 256 << 10).await.1.unwrap();
    }
    let s = storm.stats().await.unwrap();
    assert!(s.evictions.blocks > 0, "the storm evicted: {s:?}");
    let q = quiet.stats().await.unwrap();
    assert_eq!(q.hit_ratio.read, 1.0, "{q:?}");
    assert_eq!(q.evictions.blocks, 0);
    assert_eq!(dev.volumes().len(), 2);
    storm.delete(true).await.unwrap();
    quiet.delete(false).await.unwrap();
    assert!(dev.volumes().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_refusals_change_nothing() {
    let d = Devices::new(VOLUME_MIB, 12, false);
    let dev = d.open_cache().await;
    let free = dev.free_units();
    let try_create = |json: serde_json::Value| {
        let core = d.core.clone();
        let dev = dev.clone();
        async move { cache::volume::CachedVolume::create(params(json), core, dev).await }
    };
    let e = try_create(serde_json::json!({"load": true}))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("holds no cache for it"), "{e}");
    let e = try_create(serde_json::json!({"cache_size_mib": 100}))
        .await
        .err()
        .unwrap();
    assert!(!e.to_string().is_empty());
    let e = try_create(serde_json::json!({"block_sizes_kib": [3]}))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("3 KiB"), "{e}");
    assert_eq!(dev.free_units(), free);
    assert!(dev.volumes().is_empty());
    let (v, _) = create(&d, &dev, params(serde_json::json!({}))).await;
    let e = try_create(serde_json::json!({})).await.err().unwrap();
    assert!(e.to_string().contains("load=true"), "{e}");
    v.stop(false).await.unwrap();
    let e = try_create(serde_json::json!({"load": true, "block_sizes_kib": [64]}))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("block sizes"), "{e}");
}

/// Core refusing write-backs: a flush ends with the error instead of
/// retrying forever, and delete (which flushes) keeps the volume and its
/// dirty data.
/// Leaving write-back while a host keeps writing (a snapshot's
/// write-through hold): writes go to core from the moment the switch is
/// asked for, so the flush ends however fast the host writes (16 writers
/// here, on a core slower than the cache: cleaning alone never catches
/// up); every acknowledged write is on core once the volume reports
/// write-through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_write_back_ends_under_a_steady_stream_of_writes() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    const WRITERS: u64 = 16;
    const BLOCKS: u64 = 256; // per writer
    let d = Devices::delayed(VOLUME_MIB, 12);
    let dev = d.open_cache().await;
    let (vol, b) = create(
        &d,
        &dev,
        params(serde_json::json!({"write_mode": "wb", "cleaning": {"policy": "nop"}})),
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (b, stop, count) = (b.clone(), stop.clone(), count.clone());
            tokio::spawn(async move {
                // The last stamp acknowledged for each of its blocks.
                let mut last = std::collections::HashMap::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let blk = w * BLOCKS + i % BLOCKS;
                    let stamp = (i % 251) as u8 + 1;
                    b.write(blk * 4096, DmaBuf::from_slice(&[stamp; 4096]))
                        .await
                        .1
                        .unwrap();
                    last.insert(blk, stamp);
                    count.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                last
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let before = count.load(Ordering::Relaxed);
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        vol.set_mode(CacheMode::Wt),
    )
    .await
    .expect("the switch ends while the host writes")
    .unwrap();
    let during = count.load(Ordering::Relaxed) - before;
    let st = vol.stats().await.unwrap();
    assert_eq!((st.write_mode, st.dirty_bytes), ("wt", 0));
    // Back to write-back, and out again as the operator asks for it
    // (bdev_adacache_set_mode with wait false): started, then watched;
    // asked again meanwhile, nothing more starts.
    vol.set_mode(CacheMode::Wb).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    vol.start_set_mode(CacheMode::Wt).await.unwrap();
    vol.start_set_mode(CacheMode::Wt).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while vol.stats().await.unwrap().write_mode != "wt" {
        assert!(
            std::time::Instant::now() < deadline,
            "the started switch ends while the host writes"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(vol.stats().await.unwrap().dirty_bytes, 0);
    stop.store(true, Ordering::Relaxed);
    assert!(during > 0, "the host wrote during the switch");
    for w in writers {
        for (blk, v) in w.await.unwrap() {
            let (core, r) = d.core_ram.read(blk * 4096, DmaBuf::new(4096)).await;
            r.unwrap();
            assert!(core.iter().all(|&x| x == v), "block {blk} on core");
        }
    }
    vol.stop(false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_core_refuses_fails_and_delete_keeps_the_dirty_data() {
    use bdev::error_inject::{ErrorType, IoTypeSel};
    use bdev::IoKind;
    let d = Devices::new(VOLUME_MIB, 12, true);
    let dev = d.open_cache().await;
    let (vol, b) = create(
        &d,
        &dev,
        params(serde_json::json!({"write_mode": "wb",
        "cleaning": {"policy": "nop"}})),
    )
    .await;
    let mut rng = Rng(24);
    let data = write_pattern(&b, &mut rng, 0, 256 << 10).await;
    let core_ee = Devices::error_bdev(&d.core);
    core_ee
        .inject(
            IoTypeSel::Kind(IoKind::Write),
            ErrorType::Failure,
            1_000_000,
        )
        .unwrap();
    let e = vol.flush_all().await.unwrap_err();
    assert!(e.to_string().contains("flushing dirty data"), "{e}");
    assert!(
        vol.delete(false).await.is_err(),
        "delete must not drop dirty data"
    );
    assert!(vol.set_mode(CacheMode::Wt).await.is_err());
    let st = vol.stats().await.unwrap();
    assert_eq!((st.write_mode, st.dirty_bytes), ("wb", 256 << 10));
    let (got, r) = read(&b, 0, 256 << 10).await;
    r.unwrap();
    assert!(got[..] == data[..], "still served from the cache");
    core_ee.clear();
    vol.set_mode(CacheMode::Wt).await.unwrap();
    assert_eq!(
        vol.params().write_mode,
        CacheMode::Wt,
        "params follow the mode"
    );
    vol.delete(false).await.unwrap();
    let (core, _) = d.core_ram.read(0, DmaBuf::new(256 << 10)).await;
    assert!(core[..] == data[..]);
}

/// A 4096-byte cache bdev in front of a 512-byte core exports 4096-byte
/// blocks: every host I/O can then be cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_larger_block_size_is_the_volumes() {
    use bdev::malloc::MallocBdev;
    use bdev::Bdev;
    let d = Devices::new(VOLUME_MIB, 12, false);
    let cache4k = common::counted(Bdev::Malloc(
        MallocBdev::new("nvme4k", 12 << 8, 4096).unwrap(),
    ));
    let dev = cache::device::CacheDevice::open(cache4k, true)
        .await
        .unwrap();
    let (vol, b) = create(&d, &dev, params(serde_json::json!({"write_mode": "wb"}))).await;
    assert_eq!(b.info().block_size, 4096);
    assert_eq!(b.info().size_bytes(), VOLUME_MIB << 20);
    let mut rng = Rng(25);
    let data = write_pattern(&b, &mut rng, 4096, 8192).await;
    let (got, r) = read(&b, 4096, 8192).await;
    r.unwrap();
    assert!(got[..] == data[..]);
    assert!(
        b.write(512, DmaBuf::new(512)).await.1.is_err(),
        "512-byte I/O is refused"
    );
    vol.stop(false).await.unwrap();
}

/// The miss-ratio curve counts every read through the engine; `stats`
/// reads it at multiples of the capacity, `miss_ratio_curve` gives it
/// whole; the eviction group follows the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn miss_ratio_curve_and_eviction_in_stats() {
    let d = Devices::new(VOLUME_MIB, 12, false);
    let dev = d.open_cache().await;
    let (vol, b) = create(
        &d,
        &dev,
        params(serde_json::json!({"mode": "fixed", "block_sizes_kib": [32],
            "eviction": "auto", "seq_cutoff": {"policy": "never"}})),
    )
    .await;
    const BLOCK: u64 = 32 << 10;
    // Two passes over 64 blocks (2 MiB, half the 4 MiB cache).
    for _ in 0..2 {
        for i in 0..64 {
            read(&b, i * BLOCK, BLOCK).await.1.unwrap();
        }
    }
    let c = vol.miss_ratio_curve().await.unwrap();
    assert_eq!(
        (c.name.as_str(), c.block_size, c.references),
        ("Cache0", 32 << 10, 128)
    );
    assert_eq!(c.capacity_bytes, 4 << 20);
    assert_eq!(c.miss_ratio_at_capacity, 0.5);
    let at = |bytes| c.points.iter().find(|p| p.cache_bytes == bytes).unwrap();
    assert_eq!(at(63 * BLOCK).miss_ratio, 1.0);
    assert_eq!(at(64 * BLOCK).miss_ratio, 0.5);

    let st = vol.stats().await.unwrap();
    assert_eq!(st.mrc.references, 128);
    let compact: Vec<(u64, f64)> = st
        .mrc
        .miss_ratio
        .iter()
        .map(|s| (s.cache_bytes, s.miss_ratio))
        .collect();
    assert_eq!(
        compact,
        vec![
            (1 << 20, 1.0),
            (2 << 20, 0.5),
            (4 << 20, 0.5),
            (8 << 20, 0.5),
            (16 << 20, 0.5)
        ]
    );
    assert_eq!(st.eviction.configured, "auto");
    let auto = st.eviction.auto.as_ref().expect("online choice");
    assert_eq!(auto.active, st.eviction.policy);
    assert_eq!(auto.shadows.len(), 2);

    // A reset leaves the curve; a pinned policy has no online choice.
    vol.reset_stats().await.unwrap();
    vol.set_policy(PolicyChange {
        eviction: Some("lru2".into()),
        ..PolicyChange::default()
    })
    .await
    .unwrap();
    let st = vol.stats().await.unwrap();
    assert_eq!(st.mrc.references, 128);
    assert_eq!(
        (st.eviction.policy, st.eviction.configured.as_str()),
        ("lru2", "lru2")
    );
    assert!(st.eviction.auto.is_none());
    vol.stop(false).await.unwrap();
}

/// `fill_size` `locality`: sequential 4 KiB reads through a 1 MiB cache
/// only hit when misses prefetch, so the fill floor leaves 4 KiB; what is
/// read stays core's data; stats show the floor and its shadows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fill_size_locality_raises_the_floor_for_sequential_reads() {
    let d = Devices::new(VOLUME_MIB, 12, false);
    let mut rng = Rng(31);
    let mut data = vec![0u8; 8 << 20];
    rng.fill(&mut data);
    d.core_ram
        .write(0, DmaBuf::from_slice(&data))
        .await
        .1
        .unwrap();
    let dev = d.open_cache().await;
    let (vol, b) = create(
        &d,
        &dev,
        params(
            serde_json::json!({"cache_size_mib": 1, "fill_size": "locality",
            "seq_cutoff": {"policy": "never"}}),
        ),
    )
    .await;
    let st = vol.stats().await.unwrap();
    let fill = st.fill.as_ref().expect("fill sizing state");
    assert_eq!((fill.floor_bytes, fill.switches), (4096, 0));
    assert_eq!(fill.shadows.len(), 5, "4, 32, 64, 128 and 256 KiB floors");
    for pass in 0..3 {
        for i in 0..2048u64 {
            let (buf, r) = read(&b, i * 4096, 4096).await;
            r.unwrap();
            let at = (i * 4096) as usize;
            assert!(buf[..] == data[at..at + 4096], "pass {pass}, block {i}");
        }
    }
    let st = vol.stats().await.unwrap();
    let fill = st.fill.as_ref().unwrap();
    assert!(fill.floor_bytes > 4096 && fill.switches >= 1, "{fill:?}");
    assert!(
        st.hit_ratio.read > 0.5,
        "prefetching hits: {:?}",
        st.hit_ratio
    );
    vol.stop(false).await.unwrap();
}
