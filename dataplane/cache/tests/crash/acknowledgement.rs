//! Requests acknowledged before the metadata that makes them durable: the
//! metadata write they depend on is held at a gate while they are decided,
//! and the crash comes at their acknowledgement.

use serde_json::json;

use crate::device::{Area, Ops};
use crate::rig::{must, Rig};

/// Was a defect: a write-back write whose entry is already in the in-memory
/// table (record() returns None) is acknowledged without waiting for the
/// metadata version that carries that entry; after a crash it is lost.
#[tokio::test(start_paused = true)]
async fn rewrite_acked_before_its_entry_is_durable() {
    let rig = Rig::builder(json!({"write_mode": "wb", "cleaning": {"policy": "nop"},
        "seq_cutoff": {"policy": "never"}}))
    .build()
    .await;
    let meta = rig.cache.gate(Ops::writes(Area::Meta), "metadata writes");
    // W1 makes the entry of [0, 8K); its metadata write is held.
    let w1 = rig.submit_write(0, &[0xaa; 8192]);
    meta.reached(1).await;
    // W2 lands inside that block: the entry it needs is unchanged, and
    // still not durable.
    let w2 = rig.submit_write(0, &[0xbb; 4096]);
    rig.crash_at_ack(w2, &meta).await.unwrap();
    let _ = must("W1", w1).await;
    let rig = rig.restart().await;
    let got = rig.read(0, 4096).await;
    assert!(
        got.iter().all(|&x| x == 0xbb),
        "acknowledged write W2 lost after crash: got {:x?}..",
        &got[..8]
    );
    rig.stop().await;
}

/// The same defect without overlapping writes: W3 extends the block's dirty
/// hull over [4K, 8K) (its metadata still in flight); W2 writes [4K, 8K),
/// finds its entry unchanged and is acknowledged at once; a crash loses it.
#[tokio::test(start_paused = true)]
async fn disjoint_write_inside_unacked_dirty_hull_lost() {
    let rig = Rig::builder(json!({"write_mode": "wb", "cleaning": {"policy": "nop"},
        "seq_cutoff": {"policy": "never"}}))
    .build()
    .await;
    rig.write(0, &[0x11; 4096]).await;
    let meta = rig.cache.gate(Ops::writes(Area::Meta), "metadata writes");
    let w3 = rig.submit_write(8192, &[0x33; 4096]);
    meta.reached(1).await;
    let w2 = rig.submit_write(4096, &[0x22; 4096]);
    rig.crash_at_ack(w2, &meta).await.unwrap();
    let _ = must("W3", w3).await;
    let rig = rig.restart().await;
    let got = rig.read(4096, 4096).await;
    assert!(
        got.iter().all(|&x| x == 0x22),
        "acknowledged write [4K,8K) lost after crash: got {:x?}..",
        &got[..8]
    );
    rig.stop().await;
}

/// Was a defect: a deallocate that trims the end of a block's valid extent is
/// acknowledged before the narrowed entry is durable; after a crash the
/// old entry comes back and the deallocated range reads the old bytes.
#[tokio::test(start_paused = true)]
async fn trimmed_deallocate_not_durable_before_ack() {
    let rig = Rig::builder(json!({"write_mode": "wb", "cleaning": {"policy": "nop"},
        "mode": "fixed", "block_sizes_kib": [32], "seq_cutoff": {"policy": "never"}}))
    .build()
    .await;
    rig.write(0, &[0xcd; 32 << 10]).await;
    let meta = rig.cache.gate(Ops::writes(Area::Meta), "metadata writes");
    let unmap = rig.submit_unmap(24 << 10, 8 << 10);
    rig.crash_at_ack(unmap, &meta).await.unwrap();
    let rig = rig.restart().await;
    let got = rig.read(24 << 10, 8 << 10).await;
    assert!(
        got.iter().all(|&x| x == 0),
        "acknowledged deallocate undone by the crash: got {:x?}..",
        &got[..8]
    );
    rig.stop().await;
}
