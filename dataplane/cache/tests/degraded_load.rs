//! A write-back volume whose cache device failed (degraded, `load_clean`
//! off) is loaded again while the device fails again: reads failing during
//! the load, writes failing while the load drops the clean blocks it no
//! longer trusts. Each attempt either loads or fails with an error and
//! changes nothing it cannot finish; once the device is healthy the volume
//! loads with every acknowledged write.

mod common;

use bdev::error_inject::{ErrorType, IoTypeSel};
use bdev::{DmaBuf, IoKind};
use cache::volume::{CachedVolume, VolumeParams};
use common::{create, params, read, Devices, Model, Rng};

const VOLUME_MIB: u64 = 24;
const CACHE_DEV_MIB: u64 = 12;
const MIB: u64 = 1 << 20;

/// Makes every later I/O of `kind` on the cache device fail.
fn fail_all(d: &Devices, kind: IoKind) {
    let ee = Devices::error_bdev(&d.cache);
    ee.clear();
    ee.inject(IoTypeSel::Kind(kind), ErrorType::Failure, 1_000_000)
        .unwrap();
}

async fn check_all(b: &bdev::Bdev, model: &Model, what: &str) {
    for off in (0..VOLUME_MIB * MIB).step_by(MIB as usize) {
        let (got, r) = read(b, off, MIB).await;
        r.unwrap_or_else(|e| panic!("{what}: read at {off}: {e}"));
        model.check(off, &got, what);
    }
}

#[tokio::test]
async fn a_device_failing_again_during_a_degraded_load_never_loses_acknowledged_writes() {
    let d = Devices::new(VOLUME_MIB, CACHE_DEV_MIB, true);
    let dev = d.open_cache().await;
    let wb = params(serde_json::json!({"write_mode": "wb", "cleaning": {"policy": "nop"}}));
    let (vol, b) = create(&d, &dev, wb).await;
    let mut model = Model::new((VOLUME_MIB * MIB) as usize);
    let mut rng = Rng(21);
    // Dirty blocks, and clean ones (read misses filled from core).
    for i in 0..8u64 {
        let mut data = vec![0u8; 8192];
        rng.fill(&mut data);
        b.write(i * MIB, DmaBuf::from_slice(&data)).await.1.unwrap();
        model.write(i * MIB, &data);
    }
    for i in 8..12u64 {
        let _ = read(&b, i * MIB, 64 << 10).await;
    }
    // The cache device starts failing writes: the volume degrades and
    // stops trusting clean blocks on its next load.
    fail_all(&d, IoKind::Write);
    let _ = read(&b, 16 * MIB, 64 << 10).await;
    assert!(vol.degraded());
    let saved: VolumeParams = vol.params();
    assert!(!saved.load_clean && saved.load);
    vol.stop(false).await.unwrap();
    drop((vol, b));

    // 1. The load's own reads fail: an error, nothing changed.
    fail_all(&d, IoKind::Read);
    let err = CachedVolume::create(saved.clone(), d.core.clone(), dev.clone())
        .await
        .err()
        .expect("a load whose reads fail is refused");
    assert!(!err.to_string().is_empty());

    // 2. Reads work, writes still fail: the volume loads, serves every
    // acknowledged write, and still does not trust clean blocks.
    fail_all(&d, IoKind::Write);
    let vol = CachedVolume::create(saved.clone(), d.core.clone(), dev.clone())
        .await
        .expect("loads with the device failing writes");
    let b = vol.bdev();
    check_all(&b, &model, "loaded while the device fails writes").await;
    assert!(
        !vol.params().load_clean,
        "the dropped clean blocks could not be recorded"
    );
    let again = vol.params();
    vol.stop(false).await.unwrap();
    drop((vol, b));

    // 3. Healthy again: every acknowledged write is there.
    Devices::error_bdev(&d.cache).clear();
    let (vol, b) = create(&d, &dev, again).await;
    check_all(&b, &model, "after the device recovered").await;
    vol.flush_all().await.unwrap();
    for i in 0..8u64 {
        let (got, r) = read(d.core_ram.bdev(), i * MIB, 8192).await;
        r.unwrap();
        model.check(i * MIB, &got, "core after the flush");
    }
    vol.stop(false).await.unwrap();
}
