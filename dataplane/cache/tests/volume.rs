//! A cached volume against a trivially correct model of the bytes: random
//! reads, writes, deallocates, flushes and restarts (stop, then attach with
//! `load`) in every write mode, adaptive and fixed; then core's own copy
//! after a final flush. A working set several times the cache forces
//! evictions with dirty write-back.

mod common;

use std::sync::Arc;

use bdev::{Bdev, DmaBuf};
use common::{create, params, read, Devices, Model, Rng, SECTOR};
use futures_util::future::join_all;

const VOLUME_MIB: u64 = 24;
const CACHE_DEV_MIB: u64 = 12;

/// Up to `n` random ranges, pairwise disjoint, sector-aligned, at most
/// 160 KiB each (so they straddle blocks and groups).
fn disjoint_ranges(rng: &mut Rng, n: usize, size: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    let sec = u64::from(SECTOR);
    for _ in 0..n {
        // Mostly small, sometimes large; half of them in a hot 2 MiB.
        let len = if rng.below(4) == 0 {
            (1 + rng.below(320)) * sec
        } else {
            (1 + rng.below(16)) * sec
        };
        let span = if rng.below(2) == 0 { 2 << 20 } else { size };
        let off = rng.below((span - len) / sec) * sec;
        if out.iter().all(|&(o, l)| off + len <= o || o + l <= off) {
            out.push((off, len));
        }
    }
    out
}

async fn run_model(json: serde_json::Value, seed: u64, rounds: usize) {
    run_model_on(
        Devices::new(VOLUME_MIB, CACHE_DEV_MIB, false),
        json,
        seed,
        rounds,
    )
    .await;
}

async fn run_model_on(d: Devices, json: serde_json::Value, seed: u64, rounds: usize) {
    let dev = d.open_cache().await;
    let (mut vol, mut b) = create(&d, &dev, params(json.clone())).await;
    let size = VOLUME_MIB << 20;
    let mut model = Model::new(size as usize);
    let mut rng = Rng(seed);
    for round in 0..rounds {
        let ranges = disjoint_ranges(&mut rng, 8, size);
        let mut ops = Vec::new();
        for &(off, len) in &ranges {
            let kind = rng.below(10);
            let kind = if kind == 4 && std::env::var("NO_UNMAP").is_ok() {
                5
            } else {
                kind
            };
            let mut data = vec![0u8; len as usize];
            if kind < 4 {
                rng.fill(&mut data);
            }
            ops.push((kind, off, len, data));
        }
        let futs = ops.iter().map(|(kind, off, len, data)| {
            let b = b.clone();
            async move {
                match kind {
                    0..=3 => b.write(*off, DmaBuf::from_slice(data)).await.1,
                    4 => b.unmap(*off, *len).await,
                    _ => read(&b, *off, *len).await.1,
                }
            }
        });
        for r in join_all(futs).await {
            r.unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
        if let Ok(sec) = std::env::var("DEBUG_SECTOR") {
            let sec: u64 = sec.parse().unwrap();
            for (kind, off, len, data) in &ops {
                if *off <= sec * 512 && sec * 512 < off + len {
                    let i = (sec * 512 - off) as usize;
                    eprintln!(
                        "round {round}: op {kind} {off}+{len} byte {}",
                        if *kind < 4 { data[i] } else { 0 }
                    );
                }
            }
        }
        for (kind, off, len, data) in &ops {
            match kind {
                0..=3 => model.write(*off, data),
                4 => model.zero(*off, *len),
                _ => {}
            }
        }
        // Every range reads back as the model says.
        for &(off, len) in &ranges {
            let (got, r) = read(&b, off, len).await;
            r.unwrap();
            model.check(off, &got, &format!("round {round}, read {off}+{len}"));
        }
        let pick = rng.below(40);
        let pick = if std::env::var("NO_RESTART").is_ok() && pick == 1 {
            2
        } else {
            pick
        };
        match pick {
            0 => b.flush().await.unwrap(),
            1 => {
                if std::env::var("DEBUG_SECTOR").is_ok() {
                    eprintln!("round {round}: restart");
                }
                // Restart: stop without flushing, attach to the device's
                // cache again.
                vol.stop(false).await.unwrap();
                let mut p = params(json.clone());
                p.load = true;
                (vol, b) = create(&d, &dev, p).await;
            }
            _ => {}
        }
    }
    // Whole volume, through the cache.
    for off in (0..size).step_by(1 << 20) {
        let (got, r) = read(&b, off, 1 << 20).await;
        r.unwrap();
        model.check(off, &got, "final read");
    }
    // Core's own copy after a flush holds every byte.
    vol.flush_all().await.unwrap();
    let st = vol.stats().await.unwrap();
    assert_eq!(st.dirty_bytes, 0, "flush_all leaves no dirty data");
    for off in (0..size).step_by(1 << 20) {
        let (got, r) = d.core_ram.read(off, DmaBuf::new(1 << 20)).await;
        r.unwrap();
        model.check(off, &got, "core after flush");
    }
    if st.write_mode != "pt" {
        assert!(st.requests.rd_hits > 0, "the cache served reads: {st:?}");
    } else {
        assert_eq!(
            st.requests.rd_hits, 0,
            "pass-through serves nothing from the cache: {st:?}"
        );
    }
    vol.delete(false).await.unwrap();
    assert!(dev.find_volume("Cache0").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_back_adaptive() {
    run_model(serde_json::json!({"write_mode": "wb"}), 1, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_back_fixed_4k_lazy_eviction_nhit() {
    run_model(
        serde_json::json!({"write_mode": "wb", "mode": "fixed", "block_sizes_kib": [4],
            "eviction": "lazy", "admission": "nhit:2"}),
        2,
        300,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_through_adaptive_tinylfu_whole_block_fills() {
    run_model(
        serde_json::json!({"write_mode": "wt", "admission": "tinylfu", "write_miss_fill": "whole-block"}),
        3,
        300,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_around() {
    run_model(serde_json::json!({"write_mode": "wa"}), 4, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_through() {
    run_model(serde_json::json!({"write_mode": "pt"}), 5, 100).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_back_head_tail_aggressive_cleaning_seq_cutoff() {
    run_model(
        serde_json::json!({"write_mode": "wb", "write_miss_fill": "head-tail",
            "cleaning": {"policy": "aggressive", "dirty_ratio": 0.05, "wake_up_ms": 1},
            "seq_cutoff": {"policy": "always", "threshold_kib": 64}}),
        6,
        300,
    )
    .await;
}

/// Delayed devices reorder completions: the fills, write-backs, removals
/// and acknowledgements still keep their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_back_on_delayed_devices() {
    let d = Devices::delayed(VOLUME_MIB, CACHE_DEV_MIB);
    run_model_on(
        d,
        serde_json::json!({"write_mode": "wb",
        "cleaning": {"policy": "aggressive", "dirty_ratio": 0.1, "wake_up_ms": 1}}),
        8,
        150,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_through_on_delayed_devices() {
    let d = Devices::delayed(VOLUME_MIB, CACHE_DEV_MIB);
    run_model_on(
        d,
        serde_json::json!({"write_mode": "wt", "write_miss_fill": "whole-block"}),
        9,
        150,
    )
    .await;
}

/// Clean blocks survive a restart: reads after it hit as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_clean_and_dirty_blocks_warm() {
    let d = Devices::new(VOLUME_MIB, CACHE_DEV_MIB, false);
    let dev = d.open_cache().await;
    let json = serde_json::json!({"write_mode": "wb"});
    let (vol, b) = create(&d, &dev, params(json.clone())).await;
    let hot = 2u64 << 20;
    let mut rng = Rng(7);
    let mut data = vec![0u8; hot as usize];
    rng.fill(&mut data[..1 << 20]);
    // First MiB written (dirty), second read (clean fills).
    b.write(0, DmaBuf::from_slice(&data[..1 << 20]))
        .await
        .1
        .unwrap();
    read(&b, 1 << 20, 1 << 20).await.1.unwrap();
    vol.reset_stats().await.unwrap();
    for off in (0..hot).step_by(64 << 10) {
        read(&b, off, 64 << 10).await.1.unwrap();
    }
    let before = vol.stats().await.unwrap();
    assert_eq!(before.hit_ratio.read, 1.0);
    vol.stop(false).await.unwrap();
    let mut p = params(json);
    p.load = true;
    let (vol, b) = create(&d, &dev, p).await;
    let after_load = vol.stats().await.unwrap();
    assert_eq!(after_load.dirty_bytes, 1 << 20, "dirty data is back");
    for off in (0..hot).step_by(64 << 10) {
        let (got, r) = read(&b, off, 64 << 10).await;
        r.unwrap();
        assert!(got[..] == data[off as usize..(off + (64 << 10)) as usize]);
    }
    let after = vol.stats().await.unwrap();
    assert_eq!(after.hit_ratio.read, before.hit_ratio.read, "{after:?}");
    vol.stop(false).await.unwrap();
}

/// Faults on core and cache: failed requests fail cleanly, count in the
/// stats, and never leave a mapping that reads wrong data afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults_fail_requests_cleanly() {
    use bdev::error_inject::{ErrorType, IoTypeSel};
    use bdev::IoKind;
    let d = Devices::new(VOLUME_MIB, CACHE_DEV_MIB, true);
    let dev = d.open_cache().await;
    let (vol, b) = create(&d, &dev, params(serde_json::json!({"write_mode": "wt"}))).await;
    let core_ee = Devices::error_bdev(&d.core);
    let size = VOLUME_MIB << 20;
    let mut model = Model::new(size as usize);
    let mut rng = Rng(11);
    let mut failed = 0;
    for round in 0..200 {
        if round % 10 == 0 {
            core_ee
                .inject(IoTypeSel::Kind(IoKind::Read), ErrorType::Failure, 1)
                .unwrap();
            core_ee
                .inject(IoTypeSel::Kind(IoKind::Write), ErrorType::Failure, 1)
                .unwrap();
        }
        for (off, len) in disjoint_ranges(&mut rng, 4, size) {
            if rng.below(2) == 0 {
                let mut data = vec![0u8; len as usize];
                rng.fill(&mut data);
                match b.write(off, DmaBuf::from_slice(&data)).await.1 {
                    Ok(()) => model.write(off, &data),
                    Err(_) => {
                        failed += 1;
                        model.mark(off, len, true);
                    }
                }
            } else {
                match read(&b, off, len).await {
                    (got, Ok(())) => model.check(off, &got, &format!("round {round}")),
                    (_, Err(_)) => failed += 1,
                }
            }
        }
    }
    core_ee.clear();
    let st = vol.stats().await.unwrap();
    assert!(
        failed > 0 && st.errors.core_volume_rd + st.errors.core_volume_wr > 0,
        "{st:?}"
    );
    for off in (0..size).step_by(1 << 20) {
        let (got, r) = read(&b, off, 1 << 20).await;
        r.unwrap();
        model.check(off, &got, "after faults");
    }
    assert!(!vol.degraded(), "core errors do not degrade the cache");
    // A failing cache device: the volume falls back to pass-through and
    // keeps serving correct data from core.
    let cache_ee = Devices::error_bdev(&d.cache);
    cache_ee
        .inject(
            IoTypeSel::Kind(IoKind::Write),
            ErrorType::Failure,
            1_000_000,
        )
        .unwrap();
    let mut data = vec![0u8; 64 << 10];
    rng.fill(&mut data);
    // The read that finds the device failing is still answered (from
    // core): only its fill could not be cached.
    let (got, r) = read(&b, 8 << 20, 64 << 10).await;
    r.expect("a failed fill does not fail the host's read");
    model.check(8 << 20, &got, "the read whose fill failed");
    assert!(vol.degraded(), "cache write errors degrade the volume");
    b.write(8 << 20, DmaBuf::from_slice(&data)).await.1.unwrap();
    model.write(8 << 20, &data);
    let (got, r) = read(&b, 8 << 20, 64 << 10).await;
    r.unwrap();
    model.check(8 << 20, &got, "pass-through after cache failure");
    let st = vol.stats().await.unwrap();
    assert_eq!(st.write_mode, "pt");
    assert!(st.errors.cache_volume_wr > 0);
    let _ = Arc::clone(&b);
    // Restarting from what the daemon would save: clean blocks whose
    // removal never reached the failing device are not trusted.
    let p = vol.params();
    assert!(
        !p.load_clean,
        "a degraded volume stops trusting clean blocks"
    );
    vol.stop(false).await.unwrap();
    cache_ee.clear();
    let (vol, b) = create(&d, &dev, p).await;
    for off in (0..size).step_by(1 << 20) {
        let (got, r) = read(&b, off, 1 << 20).await;
        r.unwrap();
        model.check(off, &got, "after a restart of the degraded volume");
    }
    vol.stop(false).await.unwrap();
    assert!(
        vol.params().load_clean,
        "trusted again once the load dropped them"
    );
}

/// Bdev-level checks a namespace relies on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_and_zeroes() {
    let d = Devices::new(VOLUME_MIB, CACHE_DEV_MIB, false);
    let dev = d.open_cache().await;
    let (vol, b) = create(&d, &dev, params(serde_json::json!({"write_mode": "wb"}))).await;
    assert_eq!(b.info().name, "Cache0");
    assert_eq!(b.info().size_bytes(), VOLUME_MIB << 20);
    b.write(0, DmaBuf::from_slice(&[0xab; 8192]))
        .await
        .1
        .unwrap();
    b.write_zeroes(0, 4096).await.unwrap();
    let (got, r) = read(&b, 0, 8192).await;
    r.unwrap();
    assert!(got[..4096].iter().all(|&x| x == 0) && got[4096..].iter().all(|&x| x == 0xab));
    let Bdev::Layered(l) = b.as_ref() else {
        panic!()
    };
    assert_eq!(l.base_names(), vec!["core".to_string(), "nvme".to_string()]);
    vol.stop(false).await.unwrap();
}
