//! The volume's life around the crash-safe table: a shrink, a failing
//! cache device, failing metadata writes, and the restart after them.

use serde_json::json;

use crate::common::Rng;
use crate::device::{Area, Ops};
use crate::rig::{answered, busy, must, settle, Rig};

/// Was a defect: shrinking a volume whose cut-off units held cached blocks leaves
/// removals pending on units the table no longer has; every later plan that
/// writes anything waits for them forever.
#[tokio::test(start_paused = true)]
async fn shrink_with_cached_blocks_then_write_hangs() {
    let rig = Rig::builder(json!({"write_mode": "wt", "cache_size_mib": 4,
        "cleaning": {"policy": "nop"}, "seq_cutoff": {"policy": "never"}}))
    .build()
    .await;
    // Fill the cache with clean blocks (reads).
    for i in 0..64u64 {
        rig.read(i * (256 << 10), 64 << 10).await;
    }
    // Their entries are on the device.
    settle().await;
    let st = rig.vol.stats().await.unwrap();
    eprintln!("occupancy before shrink {}", st.usage.occupancy_bytes);
    assert!(
        st.usage.occupancy_bytes > 1 << 20,
        "no cached block lies in the units a shrink to 1 MiB cuts"
    );
    let shrink = answered(rig.vol.resize(1)).await;
    assert!(shrink.is_some(), "the shrink never completes");
    shrink.unwrap().unwrap();
    let w = rig
        .bdev
        .write(20 << 20, bdev::DmaBuf::from_slice(&[7; 4096]));
    let r = answered(w).await;
    assert!(r.is_some(), "a write after shrinking never completes");
    r.unwrap().1.unwrap();
    let s = answered(rig.vol.stop(false)).await;
    assert!(s.is_some(), "stop hangs");
}

/// The other half of the shrink's fix: the cut blocks' entries are removed
/// on the device before the volume takes the shrink. The device's table
/// write is the shrink's commit point; a crash just before it reloads the
/// old units, and an entry left on a cut unit brings its block back over a
/// write acknowledged in between.
#[tokio::test(start_paused = true)]
async fn shrink_cut_short_by_crash_restores_cut_blocks() {
    let ranges: Vec<u64> = (0..64u64).map(|i| i * (256 << 10)).collect();
    let mut rig = Rig::builder(json!({"write_mode": "wt", "cache_size_mib": 4,
        "cleaning": {"policy": "nop"}, "seq_cutoff": {"policy": "never"}}));
    for &at in &ranges {
        rig = rig.core_data(at, &[0x0a; 64 << 10]);
    }
    let rig = rig.build().await;
    for &at in &ranges {
        rig.read(at, 64 << 10).await;
    }
    settle().await;
    let st = rig.vol.stats().await.unwrap();
    assert!(
        st.usage.occupancy_bytes > 1 << 20,
        "no cached block lies in the units a shrink to 1 MiB cuts"
    );
    let table = rig
        .cache
        .gate(Ops::writes(Area::Header), "volume table writes");
    let vol = rig.vol.clone();
    let shrink = tokio::spawn(async move { vol.resize(1).await });
    // The volume took the shrink; the device's table does not say so yet.
    table.reached(1).await;
    for &at in &ranges {
        rig.write(at, &[0x0b; 64 << 10]).await;
    }
    rig.crash();
    table.open();
    let _ = must("the shrink", shrink).await;
    let rig = rig.restart().await;
    for &at in &ranges {
        let got = rig.read(at, 64 << 10).await;
        assert!(
            got.iter().all(|&x| x == 0x0b),
            "a block the shrink cut came back over the write acknowledged at {at}: got {:x?}..",
            &got[..8]
        );
    }
    rig.stop().await;
}

/// Was a defect: a cache error with no dirty data degrades the volume to
/// pass-through and forgets the engine's blocks, but their entries stay on
/// the device; pass-through writes then change core underneath, and a
/// restart with `load` (what a persisted config does) serves the stale
/// cached copy.
#[tokio::test(start_paused = true)]
async fn degraded_volume_restores_stale_clean_blocks() {
    let rig = Rig::builder(json!({"write_mode": "wt", "cleaning": {"policy": "nop"},
        "seq_cutoff": {"policy": "never"}}))
    .build()
    .await;
    let mut rng = Rng(3);
    let mut a = vec![0u8; 64 << 10];
    rng.fill(&mut a);
    rig.write(0, &a).await;
    rig.read(0, 64 << 10).await;
    // Every metadata write is done: the failure below hits the fill.
    settle().await;
    rig.cache.fail_next(Ops::writes(Area::Data), 1);
    let _ = rig.bdev.read(8 << 20, bdev::DmaBuf::new(64 << 10)).await;
    assert_eq!(
        rig.cache.failures(),
        1,
        "the fill's cache write did not fail"
    );
    assert!(rig.vol.degraded());
    let mut bb = vec![0u8; 64 << 10];
    rng.fill(&mut bb);
    rig.write(0, &bb).await;
    let got = rig.read(0, 64 << 10).await;
    assert!(got[..] == bb[..], "reads the new data before the restart");
    let rig = rig.restart().await;
    let got = rig.read(0, 64 << 10).await;
    assert!(
        got[..] == bb[..],
        "after restart the cache serves the stale copy"
    );
    rig.stop().await;
}

/// Was a defect: a metadata write that keeps failing is retried at once, forever
/// (a hot loop), and the write-back write waiting for it is never answered;
/// stop (and so delete with force) never finishes either.
#[tokio::test(start_paused = true)]
async fn failing_metadata_write_hangs_request_and_stop() {
    let rig = Rig::builder(json!({"write_mode": "wb", "cleaning": {"policy": "nop"},
        "seq_cutoff": {"policy": "never"}}))
    .build()
    .await;
    rig.cache.fail_all(Ops::writes(Area::Meta));
    let w = answered(rig.bdev.write(0, bdev::DmaBuf::from_slice(&[1; 4096]))).await;
    // Failed writes are retried at the cleaning tick's pace: with the clock
    // held, none is.
    let tried = rig.cache.failures();
    busy().await;
    let retried = rig.cache.failures() - tried;
    let st = rig.vol.stats().await.unwrap();
    eprintln!(
        "write answered: {}, degraded {}, metadata writes failed {tried} then {retried}, stats {:?}",
        w.is_some(),
        st.degraded,
        st
    );
    let s = answered(rig.vol.delete(true)).await;
    rig.cache.stop_failing();
    eprintln!("delete(force) finished: {}", s.is_some());
    assert!(w.is_some(), "the write-back write is never answered");
    assert_eq!(
        retried, 0,
        "a failing metadata write is retried at once, in a hot loop"
    );
    assert!(s.is_some(), "delete(force) never finishes");
}
