//! Metadata and data reaching the device in the wrong order: an entry
//! durable before the data it describes, a write to core before the
//! removal of the entry that still describes the range.

use serde_json::json;

use crate::device::{Area, Ops};
use crate::rig::{must, settle, Rig};

/// Was a defect: done() re-records every engine block overlapping the finished
/// request's range, including a block another in-flight request allocated
/// and has not written yet (the engine sets a block's state at plan time).
/// Its entry becomes durable before its data: after a crash the entry
/// describes bytes that are not in the slot.
#[tokio::test(start_paused = true)]
async fn entry_of_unwritten_block_recorded_by_neighbour() {
    let rig = Rig::builder(json!({"write_mode": "wt", "cleaning": {"policy": "nop"},
        "admission": "nhit:2", "seq_cutoff": {"policy": "never"}}))
    .core_data(0, &[0x5a; 64 << 10])
    .build()
    .await;
    let core_reads = rig.core.gate(Ops::reads(Area::Whole), "core reads");
    // R1, a first access, is not admitted: it only reads core.
    let r1 = rig.submit_read(0, 64 << 10);
    core_reads.reached(1).await;
    // R2, the second, is: the engine gives it a block to fill now.
    let r2 = rig.submit_read(0, 64 << 10);
    core_reads.reached(2).await;
    let fills = rig.cache.gate(Ops::writes(Area::Data), "cache data writes");
    core_reads.open();
    must("R1", r1).await.unwrap().unwrap();
    // R2's data is held; whatever R1's completion recorded reaches the
    // device.
    fills.reached(1).await;
    settle().await;
    rig.crash();
    fills.open();
    let _ = must("R2", r2).await;
    let rig = rig.restart().await;
    let st = rig.vol.stats().await.unwrap();
    eprintln!("restored occupancy {}", st.usage.occupancy_bytes);
    let got = rig.read(0, 64 << 10).await;
    assert!(
        got.iter().all(|&x| x == 0x5a),
        "restored entry points at bytes that were never written: got {:x?}..",
        &got[..8]
    );
    rig.stop().await;
}

/// Was a defect: a pass-through / sequential-cutoff write goes to core without
/// waiting for the removal barrier. A block evicted a moment earlier still
/// has its entry on the device; after a crash the old cached copy is
/// restored over the acknowledged write.
#[tokio::test(start_paused = true)]
async fn bypass_write_skips_removal_barrier() {
    use cache::volume::CacheMode;
    let rig = Rig::builder(json!({"write_mode": "wt", "cleaning": {"policy": "nop"},
        "mode": "fixed", "block_sizes_kib": [64], "cache_size_mib": 1,
        "seq_cutoff": {"policy": "never"}}))
    .core_data(0, &[0xa1; 64 << 10])
    .build()
    .await;
    // Sixteen 64K blocks fill the 1 MiB cache; [0, 64K) is the LRU tail.
    rig.read(0, 64 << 10).await;
    for i in 1..16u64 {
        rig.read(i << 20, 64 << 10).await;
    }
    settle().await;
    let meta = rig.cache.gate(Ops::writes(Area::Meta), "metadata writes");
    // Evicts the block of [0, 64K); its removal is held.
    let r = rig.submit_read(20 << 20, 64 << 10);
    meta.reached(1).await;
    rig.vol.set_mode(CacheMode::Pt).await.unwrap();
    let w = rig.submit_write(0, &[0xb2; 64 << 10]);
    rig.crash_at_ack(w, &meta).await.unwrap();
    let _ = must("the evicting read", r).await;
    let rig = rig.restart().await;
    let got = rig.read(0, 64 << 10).await;
    assert!(
        got.iter().all(|&x| x == 0xb2),
        "acknowledged pass-through write shadowed by a stale entry: got {:x?}..",
        &got[..8]
    );
    rig.stop().await;
}
