//! Crash consistency of cached volumes, in process: the cache device is a
//! RAM bdev behind a wrapper that can "crash" (from then on every write is
//! dropped, as after `kill -9` only completed writes are on the device) and
//! can delay metadata or data writes to open the windows where ordering
//! matters. After the crash the volume is loaded again from the same RAM
//! and what was acknowledged must read back. The delays only open windows:
//! with correct ordering every assertion holds whatever the timing.
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bdev::layered::LayeredBdev;
use bdev::malloc::MallocBdev;
use bdev::{Bdev, BdevInfo, BoxFuture, DmaBuf, IoKind};
use cache::device::CacheDevice;
use cache::volume::CachedVolume;
use common::{counted, create, params, read, Devices, Rng};

const VOLUME_MIB: u64 = 24;

/// A RAM cache device that can "crash": once frozen, writes are dropped
/// (they never reach the media), as after kill -9. Metadata-area writes can
/// be delayed.
struct Crashable {
    inner: Arc<Bdev>,
    info: BdevInfo,
    frozen: Arc<AtomicBool>,
    meta_delay_ms: Arc<AtomicU64>,
    data_delay_ms: Arc<AtomicU64>,
    read_delay_ms: u64,
    fail_meta: Arc<AtomicBool>,
}

impl Crashable {
    async fn w(&self, offset: u64, buf: DmaBuf, fua: bool) -> (DmaBuf, bdev::Result<()>) {
        if self.fail_meta.load(Ordering::SeqCst) && (1 << 20..2 << 20).contains(&offset) {
            return (
                buf,
                Err(bdev::BdevError::InvalidArgument(
                    "injected meta failure".into(),
                )),
            );
        }
        let d = self.meta_delay_ms.load(Ordering::SeqCst);
        if d > 0 && (1 << 20..2 << 20).contains(&offset) {
            tokio::time::sleep(Duration::from_millis(d)).await;
        }
        let d = self.data_delay_ms.load(Ordering::SeqCst);
        if d > 0 && offset >= 2 << 20 {
            tokio::time::sleep(Duration::from_millis(d)).await;
        }
        if self.frozen.load(Ordering::SeqCst) {
            return (buf, Ok(()));
        }
        if fua {
            self.inner.write_fua(offset, buf).await
        } else {
            self.inner.write(offset, buf).await
        }
    }
}

impl LayeredBdev for Crashable {
    fn info(&self) -> &BdevInfo {
        &self.info
    }
    fn supports(&self, _k: IoKind) -> bool {
        true
    }
    fn base_names(&self) -> Vec<String> {
        vec![]
    }
    fn read(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(async move {
            if self.read_delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(self.read_delay_ms)).await;
            }
            self.inner.read(offset, buf).await
        })
    }
    fn write(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(self.w(offset, buf, false))
    }
    fn write_fua(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(self.w(offset, buf, true))
    }
    fn flush(&self) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(async move { Ok(()) })
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(async move {
            if self.frozen.load(Ordering::SeqCst) {
                return Ok(());
            }
            self.inner.write_zeroes(offset, len).await
        })
    }
    fn unmap(&self, offset: u64, len: u64) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(async move {
            if self.frozen.load(Ordering::SeqCst) {
                return Ok(());
            }
            self.inner.unmap(offset, len).await
        })
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

fn crashable(inner: &Arc<Bdev>) -> (bdev::CountedBdev, Arc<AtomicBool>, Arc<AtomicU64>) {
    let (c, f, m, _) = crashable2(inner, 0);
    (c, f, m)
}

fn crashable2(
    inner: &Arc<Bdev>,
    read_delay_ms: u64,
) -> (
    bdev::CountedBdev,
    Arc<AtomicBool>,
    Arc<AtomicU64>,
    Arc<AtomicU64>,
) {
    let frozen = Arc::new(AtomicBool::new(false));
    let delay = Arc::new(AtomicU64::new(0));
    let ddelay = Arc::new(AtomicU64::new(0));
    let c = Crashable {
        inner: inner.clone(),
        info: inner.info().clone(),
        frozen: frozen.clone(),
        meta_delay_ms: delay.clone(),
        data_delay_ms: ddelay.clone(),
        read_delay_ms,
        fail_meta: Arc::new(AtomicBool::new(false)),
    };
    (counted(Bdev::Layered(Box::new(c))), frozen, delay, ddelay)
}

/// The restart after a crash: the cache device opened again from what
/// reached the RAM, the volume attached with `load`.
async fn reload(ram: &Arc<Bdev>, json: serde_json::Value, core: bdev::CountedBdev) -> CachedVolume {
    let (cache, _, _) = crashable(ram);
    let dev = CacheDevice::open(cache, false).await.unwrap();
    let mut p = params(json);
    p.load = true;
    CachedVolume::create(p, core, dev).await.unwrap()
}

/// A crashable cache bdev whose metadata writes fail while the returned
/// flag is set.
fn failing_meta(inner: &Arc<Bdev>) -> (bdev::CountedBdev, Arc<AtomicBool>) {
    let fail = Arc::new(AtomicBool::new(false));
    let c = Crashable {
        inner: inner.clone(),
        info: inner.info().clone(),
        frozen: Arc::new(AtomicBool::new(false)),
        meta_delay_ms: Arc::new(AtomicU64::new(0)),
        data_delay_ms: Arc::new(AtomicU64::new(0)),
        read_delay_ms: 0,
        fail_meta: fail.clone(),
    };
    (counted(Bdev::Layered(Box::new(c))), fail)
}

/// Was a defect: a write-back write whose entry is already in the in-memory
/// table (record() returns None) is acknowledged without waiting for the
/// metadata version that carries that entry; after a crash it is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_acked_before_its_entry_is_durable() {
    let core = counted(Bdev::Malloc(
        MallocBdev::new("core", VOLUME_MIB << 11, 512).unwrap(),
    ));
    let ram = Arc::new(Bdev::Malloc(
        MallocBdev::new("nvme", 12 << 11, 512).unwrap(),
    ));
    let (cache, frozen, delay) = crashable(&ram);
    let dev = CacheDevice::open(cache, true).await.unwrap();
    let json = serde_json::json!({"write_mode": "wb", "cleaning": {"policy": "nop"},
        "seq_cutoff": {"policy": "never"}});
    let vol = CachedVolume::create(params(json.clone()), core.clone(), dev.clone())
        .await
        .unwrap();
    let b = Arc::new(vol.bdev());
    delay.store(400, Ordering::SeqCst);
    let b1 = b.clone();
    let w1 = tokio::spawn(async move { b1.write(0, DmaBuf::from_slice(&[0xaa; 8192])).await.1 });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = std::time::Instant::now();
    b.write(0, DmaBuf::from_slice(&[0xbb; 4096]))
        .await
        .1
        .unwrap();
    eprintln!(
        "W2 acked after {:?}; W1 finished: {}",
        t.elapsed(),
        w1.is_finished()
    );
    // kill -9 right after W2's acknowledgement.
    frozen.store(true, Ordering::SeqCst);
    let _ = w1.await;
    vol.stop(false).await.unwrap();
    // Restart from what is on the media.
    let vol2 = reload(&ram, json, core).await;
    let b2 = vol2.bdev();
    let (got, r) = read(&b2, 0, 4096).await;
    r.unwrap();
    assert!(
        got.iter().all(|&x| x == 0xbb),
        "acknowledged write W2 lost after crash: got {:x?}..",
        &got[..8]
    );
    vol2.stop(false).await.unwrap();
}

/// Was a defect: shrinking a volume whose cut-off units held cached blocks leaves
/// removals pending on units the table no longer has; every later plan that
/// writes anything waits for them forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_with_cached_blocks_then_write_hangs() {
    let d = Devices::new(VOLUME_MIB, 12, false);
    let dev = d.open_cache().await;
    let (vol, b) = create(
        &d,
        &dev,
        params(serde_json::json!({"write_mode": "wt", "cache_size_mib": 4,
            "cleaning": {"policy": "nop"}, "seq_cutoff": {"policy": "never"}})),
    )
    .await;
    // Fill the cache with clean blocks (reads).
    for i in 0..64u64 {
        read(&b, i * (256 << 10), 64 << 10).await.1.unwrap();
    }
    let st = vol.stats().await.unwrap();
    eprintln!("occupancy before shrink {}", st.usage.occupancy_bytes);
    tokio::time::sleep(Duration::from_millis(100)).await;
    vol.resize(1).await.unwrap();
    let w = b.write(20 << 20, DmaBuf::from_slice(&[7; 4096]));
    let r = tokio::time::timeout(Duration::from_secs(20), w).await;
    assert!(r.is_ok(), "a write after shrinking never completes");
    r.unwrap().1.unwrap();
    let s = tokio::time::timeout(Duration::from_secs(20), vol.stop(false)).await;
    assert!(s.is_ok(), "stop hangs");
}

/// Was a defect: a cache error with no dirty data degrades the volume to
/// pass-through and forgets the engine's blocks, but their entries stay on
/// the device; pass-through writes then change core underneath, and a
/// restart with `load` (what a persisted config does) serves the stale
/// cached copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degraded_volume_restores_stale_clean_blocks() {
    use bdev::error_inject::{ErrorType, IoTypeSel};
    let d = Devices::new(VOLUME_MIB, 12, true);
    let dev = d.open_cache().await;
    let json = serde_json::json!({"write_mode": "wt", "cleaning": {"policy": "nop"},
        "seq_cutoff": {"policy": "never"}});
    let (vol, b) = create(&d, &dev, params(json.clone())).await;
    let mut rng = Rng(3);
    let mut a = vec![0u8; 64 << 10];
    rng.fill(&mut a);
    b.write(0, DmaBuf::from_slice(&a)).await.1.unwrap();
    read(&b, 0, 64 << 10).await.1.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let cache_ee = Devices::error_bdev(&d.cache);
    cache_ee
        .inject(IoTypeSel::Kind(IoKind::Write), ErrorType::Failure, 1)
        .unwrap();
    let _ = read(&b, 8 << 20, 64 << 10).await;
    assert!(vol.degraded());
    cache_ee.clear();
    let mut bb = vec![0u8; 64 << 10];
    rng.fill(&mut bb);
    b.write(0, DmaBuf::from_slice(&bb)).await.1.unwrap();
    let (got, _) = read(&b, 0, 64 << 10).await;
    assert!(got[..] == bb[..], "reads the new data before the restart");
    vol.stop(false).await.unwrap();
    let mut p = params(json);
    p.load = true;
    let (vol, b) = create(&d, &dev, p).await;
    let (got, r) = read(&b, 0, 64 << 10).await;
    r.unwrap();
    assert!(
        got[..] == bb[..],
        "after restart the cache serves the stale copy"
    );
    vol.stop(false).await.unwrap();
}

/// Was a defect: done() re-records every engine block overlapping the finished
/// request's range, including a block another in-flight request allocated
/// and has not written yet (the engine sets a block's state at plan time).
/// Its entry becomes durable before its data: after a crash the entry
/// describes bytes that are not in the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_of_unwritten_block_recorded_by_neighbour() {
    let core_ram = Arc::new(Bdev::Malloc(
        MallocBdev::new("core", VOLUME_MIB << 11, 512).unwrap(),
    ));
    core_ram
        .write(0, DmaBuf::from_slice(&[0x5a; 64 << 10]))
        .await
        .1
        .unwrap();
    let (core, _, _, _) = crashable2(&core_ram, 200);
    let ram = Arc::new(Bdev::Malloc(
        MallocBdev::new("nvme", 12 << 11, 512).unwrap(),
    ));
    let (cache, frozen, _, ddelay) = crashable2(&ram, 0);
    let dev = CacheDevice::open(cache, true).await.unwrap();
    let json = serde_json::json!({"write_mode": "wt", "cleaning": {"policy": "nop"},
        "admission": "nhit:2", "seq_cutoff": {"policy": "never"}});
    let vol = CachedVolume::create(params(json.clone()), core.clone(), dev.clone())
        .await
        .unwrap();
    let b = Arc::new(vol.bdev());
    ddelay.store(600, Ordering::SeqCst);
    let b1 = b.clone();
    let r1 = tokio::spawn(async move { read(&b1, 0, 64 << 10).await.1 });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let b2 = b.clone();
    let r2 = tokio::spawn(async move { read(&b2, 0, 64 << 10).await.1 });
    r1.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    eprintln!("r2 finished before crash: {}", r2.is_finished());
    frozen.store(true, Ordering::SeqCst);
    let _ = r2.await;
    vol.stop(false).await.unwrap();
    let vol2 = reload(&ram, json, core).await;
    let st = vol2.stats().await.unwrap();
    eprintln!("restored occupancy {}", st.usage.occupancy_bytes);
    let (got, r) = read(&vol2.bdev(), 0, 64 << 10).await;
    r.unwrap();
    assert!(
        got.iter().all(|&x| x == 0x5a),
        "restored entry points at bytes that were never written: got {:x?}..",
        &got[..8]
    );
    vol2.stop(false).await.unwrap();
}

/// Was a defect: a pass-through / sequential-cutoff write goes to core without
/// waiting for the removal barrier. A block evicted a moment earlier still
/// has its entry on the device; after a crash the old cached copy is
/// restored over the acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bypass_write_skips_removal_barrier() {
    use cache::volume::CacheMode;
    let core = counted(Bdev::Malloc(
        MallocBdev::new("core", VOLUME_MIB << 11, 512).unwrap(),
    ));
    core.write(0, DmaBuf::from_slice(&[0xa1; 64 << 10]))
        .await
        .1
        .unwrap();
    let ram = Arc::new(Bdev::Malloc(
        MallocBdev::new("nvme", 12 << 11, 512).unwrap(),
    ));
    let (cache, frozen, delay) = crashable(&ram);
    let dev = CacheDevice::open(cache, true).await.unwrap();
    let json = serde_json::json!({"write_mode": "wt", "cleaning": {"policy": "nop"},
        "mode": "fixed", "block_sizes_kib": [64], "cache_size_mib": 1,
        "seq_cutoff": {"policy": "never"}});
    let vol = CachedVolume::create(params(json.clone()), core.clone(), dev.clone())
        .await
        .unwrap();
    let b = Arc::new(vol.bdev());
    read(&b, 0, 64 << 10).await.1.unwrap();
    for i in 1..16u64 {
        read(&b, i << 20, 64 << 10).await.1.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    delay.store(600, Ordering::SeqCst);
    let b1 = b.clone();
    // Evicts the block of [0, 64K) (LRU tail); its removal is in flight.
    let r = tokio::spawn(async move { read(&b1, 20 << 20, 64 << 10).await.1 });
    tokio::time::sleep(Duration::from_millis(50)).await;
    vol.set_mode(CacheMode::Pt).await.unwrap();
    let t = std::time::Instant::now();
    b.write(0, DmaBuf::from_slice(&[0xb2; 64 << 10]))
        .await
        .1
        .unwrap();
    eprintln!("bypass write acked after {:?}", t.elapsed());
    frozen.store(true, Ordering::SeqCst);
    let _ = r.await;
    vol.stop(false).await.unwrap();
    let vol2 = reload(&ram, json, core).await;
    let (got, r) = read(&vol2.bdev(), 0, 64 << 10).await;
    r.unwrap();
    assert!(
        got.iter().all(|&x| x == 0xb2),
        "acknowledged pass-through write shadowed by a stale entry: got {:x?}..",
        &got[..8]
    );
    vol2.stop(false).await.unwrap();
}

/// Was a defect: a metadata write that keeps failing is retried at once, forever
/// (a hot loop), and the write-back write waiting for it is never answered;
/// stop (and so delete with force) never finishes either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_metadata_write_hangs_request_and_stop() {
    let core = counted(Bdev::Malloc(
        MallocBdev::new("core", VOLUME_MIB << 11, 512).unwrap(),
    ));
    let ram = Arc::new(Bdev::Malloc(
        MallocBdev::new("nvme", 12 << 11, 512).unwrap(),
    ));
    let (cache, fail) = failing_meta(&ram);
    let dev = CacheDevice::open(cache, true).await.unwrap();
    let json = serde_json::json!({"write_mode": "wb", "cleaning": {"policy": "nop"},
        "seq_cutoff": {"policy": "never"}});
    let vol = CachedVolume::create(params(json.clone()), core.clone(), dev.clone())
        .await
        .unwrap();
    let b = Arc::new(vol.bdev());
    fail.store(true, Ordering::SeqCst);
    let w = tokio::time::timeout(
        Duration::from_secs(20),
        b.write(0, DmaBuf::from_slice(&[1; 4096])),
    )
    .await;
    let st = vol.stats().await.unwrap();
    eprintln!(
        "write answered: {}, degraded {}, meta writes so far {:?}",
        w.is_ok(),
        st.degraded,
        st
    );
    let s = tokio::time::timeout(Duration::from_secs(20), vol.delete(true)).await;
    fail.store(false, Ordering::SeqCst);
    eprintln!("delete(force) finished: {}", s.is_ok());
    assert!(w.is_ok(), "the write-back write is never answered");
    assert!(s.is_ok(), "delete(force) never finishes");
}

/// Was a defect: a deallocate that trims the end of a block's valid extent is
/// acknowledged before the narrowed entry is durable; after a crash the
/// old entry comes back and the deallocated range reads the old bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimmed_deallocate_not_durable_before_ack() {
    let core = counted(Bdev::Malloc(
        MallocBdev::new("core", VOLUME_MIB << 11, 512).unwrap(),
    ));
    let ram = Arc::new(Bdev::Malloc(
        MallocBdev::new("nvme", 12 << 11, 512).unwrap(),
    ));
    let (cache, frozen, delay) = crashable(&ram);
    let dev = CacheDevice::open(cache, true).await.unwrap();
    let json = serde_json::json!({"write_mode": "wb", "cleaning": {"policy": "nop"},
        "mode": "fixed", "block_sizes_kib": [32], "seq_cutoff": {"policy": "never"}});
    let vol = CachedVolume::create(params(json.clone()), core.clone(), dev.clone())
        .await
        .unwrap();
    let b = Arc::new(vol.bdev());
    b.write(0, DmaBuf::from_slice(&[0xcd; 32 << 10]))
        .await
        .1
        .unwrap();
    delay.store(600, Ordering::SeqCst);
    let t = std::time::Instant::now();
    b.unmap(24 << 10, 8 << 10).await.unwrap();
    eprintln!("unmap acked after {:?}", t.elapsed());
    frozen.store(true, Ordering::SeqCst);
    vol.stop(false).await.unwrap();
    let vol2 = reload(&ram, json, core).await;
    let (got, r) = read(&vol2.bdev(), 24 << 10, 8 << 10).await;
    r.unwrap();
    assert!(
        got.iter().all(|&x| x == 0),
        "acknowledged deallocate undone by the crash: got {:x?}..",
        &got[..8]
    );
    vol2.stop(false).await.unwrap();
}

/// The same defect without overlapping writes: W3 extends the block's dirty
/// hull over [4K, 8K) (its metadata still in flight); W2 writes [4K, 8K),
/// finds its entry unchanged and is acknowledged at once; a crash loses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disjoint_write_inside_unacked_dirty_hull_lost() {
    let core = counted(Bdev::Malloc(
        MallocBdev::new("core", VOLUME_MIB << 11, 512).unwrap(),
    ));
    let ram = Arc::new(Bdev::Malloc(
        MallocBdev::new("nvme", 12 << 11, 512).unwrap(),
    ));
    let (cache, frozen, delay) = crashable(&ram);
    let dev = CacheDevice::open(cache, true).await.unwrap();
    let json = serde_json::json!({"write_mode": "wb", "cleaning": {"policy": "nop"},
        "seq_cutoff": {"policy": "never"}});
    let vol = CachedVolume::create(params(json.clone()), core.clone(), dev.clone())
        .await
        .unwrap();
    let b = Arc::new(vol.bdev());
    b.write(0, DmaBuf::from_slice(&[0x11; 4096]))
        .await
        .1
        .unwrap();
    delay.store(400, Ordering::SeqCst);
    let b3 = b.clone();
    let w3 = tokio::spawn(async move { b3.write(8192, DmaBuf::from_slice(&[0x33; 4096])).await.1 });
    tokio::time::sleep(Duration::from_millis(100)).await;
    b.write(4096, DmaBuf::from_slice(&[0x22; 4096]))
        .await
        .1
        .unwrap();
    eprintln!("W2 acked; W3 acked yet: {}", w3.is_finished());
    frozen.store(true, Ordering::SeqCst);
    let _ = w3.await;
    vol.stop(false).await.unwrap();
    let vol2 = reload(&ram, json, core).await;
    let (got, r) = read(&vol2.bdev(), 4096, 4096).await;
    r.unwrap();
    assert!(
        got.iter().all(|&x| x == 0x22),
        "acknowledged write [4K,8K) lost after crash: got {:x?}..",
        &got[..8]
    );
    vol2.stop(false).await.unwrap();
}
