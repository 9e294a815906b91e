//! Hits served by the caller (`hit.rs`): counted as hits, the right bytes,
//! and the blocks they read pinned until their reads end, even when
//! evictions want the space meanwhile or the request goes away.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bdev::layered::LayeredBdev;
use bdev::malloc::MallocBdev;
use bdev::{Bdev, BdevInfo, BlockCount, BoxFuture, CountedBdev, DmaBuf, IoKind};
use tokio::sync::watch;

use super::{CachedVolume, VolumeParams};
use crate::device::CacheDevice;

const SECTOR: u32 = 4096;
const BLOCK: u64 = 64 << 10;
const CORE_MIB: u64 = 8;

/// A RAM bdev whose reads wait while the gate is closed, then read: a
/// slot overwritten while a read waits shows in the bytes it returns.
/// Writes (fills, metadata) pass.
struct Gated {
    info: BdevInfo,
    ram: Bdev,
    gate: Arc<Gate>,
}

struct Gate {
    open: watch::Sender<bool>,
    /// Reads waiting at the closed gate.
    waiting: AtomicUsize,
}

impl Gate {
    fn set(&self, open: bool) {
        self.open.send_replace(open);
    }

    async fn pass(&self) {
        let mut rx = self.open.subscribe();
        if *rx.borrow() {
            return;
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _ = rx.wait_for(|open| *open).await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl LayeredBdev for Gated {
    fn info(&self) -> &BdevInfo {
        &self.info
    }
    fn supports(&self, kind: IoKind) -> bool {
        self.ram.supports(kind)
    }
    fn base_names(&self) -> Vec<String> {
        Vec::new()
    }
    fn read(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(async move {
            self.gate.pass().await;
            self.ram.read(offset, buf).await
        })
    }
    fn write(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(self.ram.write(offset, buf))
    }
    fn write_fua(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(self.ram.write_fua(offset, buf))
    }
    fn flush(&self) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(self.ram.flush())
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(self.ram.write_zeroes(offset, len))
    }
    fn unmap(&self, offset: u64, len: u64) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(self.ram.unmap(offset, len))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

fn ram(name: &str, mib: u64) -> Bdev {
    Bdev::Malloc(MallocBdev::new(name, (mib << 20) / u64::from(SECTOR), SECTOR).unwrap())
}

/// The core's bytes: every 8-byte word differs from the others (a hash
/// of its offset), so bytes of another block show.
fn pattern(off: u64, len: u64) -> Vec<u8> {
    (off..off + len)
        .map(|i| ((i / 8).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8 ^ (i % 8) as u8)
        .collect()
}

struct Rig {
    volume: CachedVolume,
    bdev: Bdev,
    gate: Arc<Gate>,
}

/// A write-through volume of 64 KiB blocks with a 1 MiB cache (16 slots)
/// in front of a core filled with `pattern`, its cache device gated.
async fn rig() -> Rig {
    rig_on(true).await
}

/// [`rig`], its cache device gated (a device that waits) or plain RAM.
async fn rig_on(gated: bool) -> Rig {
    let core = Arc::new(ram("core", CORE_MIB));
    let (_, r) = core
        .write(0, DmaBuf::from_slice(&pattern(0, CORE_MIB << 20)))
        .await;
    r.unwrap();
    let (open, _) = watch::channel(true);
    let gate = Arc::new(Gate {
        open,
        waiting: AtomicUsize::new(0),
    });
    let cache_ram = ram("nvme", 8);
    let device = Gated {
        info: BdevInfo {
            name: "nvme".into(),
            product_name: "gated RAM",
            block_size: SECTOR,
            blocks: BlockCount::new(cache_ram.info().num_blocks()),
            uuid: [7; 16],
        },
        ram: cache_ram,
        gate: gate.clone(),
    };
    let cache = if gated {
        CountedBdev::from(Arc::new(Bdev::Layered(Box::new(device))))
    } else {
        CountedBdev::from(Arc::new(device.ram))
    };
    let dev = CacheDevice::open(cache, true).await.unwrap();
    let params: VolumeParams = serde_json::from_value(serde_json::json!({
        "name": "hits", "core_bdev_name": "core", "cache_bdev_name": "nvme",
        "cache_size_mib": 1, "mode": "fixed", "block_sizes_kib": [64],
        "eviction": "lru2", "seq_cutoff": {"policy": "never"},
        "cleaning": {"policy": "nop"},
    }))
    .unwrap();
    let volume = CachedVolume::create(params, CountedBdev::from(core), dev)
        .await
        .unwrap();
    let bdev = volume.bdev();
    Rig { volume, bdev, gate }
}

/// Caches the first `len` bytes, then zeroes the volume's counters.
async fn warm(r: &Rig, len: u64) {
    read_ok(&r.bdev, 0, len).await;
    r.volume.reset_stats().await.unwrap();
}

async fn read_ok(b: &Bdev, off: u64, len: u64) -> DmaBuf {
    let (buf, r) = b.read(off, DmaBuf::new(len as usize)).await;
    r.unwrap();
    buf
}

fn hits_in_flight(v: &CachedVolume) -> usize {
    v.inner
        .owner
        .lock()
        .unwrap()
        .as_ref()
        .map_or(0, |o| o.hits_in_flight())
}

/// Lets other tasks run until `cond` holds.
/// A read submitted in place, as a queue pair finding the owner free does.
fn read_now(v: &CachedVolume, off: u64, len: u64) -> super::msg::Now {
    let mut o = v.inner.owner.lock().unwrap();
    let o = o.as_mut().expect("running");
    o.read_now(
        off,
        len,
        DmaBuf::new(len as usize),
        std::time::Instant::now(),
    )
}

async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn hits_are_counted_and_return_the_cached_bytes() {
    let r = rig().await;
    // Warm four blocks; the second pass reads them all from the cache:
    // within one block, across two blocks, and whole blocks.
    warm(&r, 4 * BLOCK).await;
    let reads = [
        (4096, 4096),
        (BLOCK - 4096, 8192),
        (0, 4 * BLOCK),
        (2 * BLOCK, BLOCK),
    ];
    for (off, len) in reads {
        let got = read_ok(&r.bdev, off, len).await;
        assert!(got[..] == pattern(off, len)[..], "read {off}+{len}");
    }
    assert_eq!(hits_in_flight(&r.volume), 0);
    let s = r.volume.stats().await.unwrap();
    assert_eq!(s.requests.rd_hits, reads.len() as u64);
    assert_eq!(s.requests.rd_misses, 0);
    assert_eq!(s.latency.read_hit.count, reads.len() as u64);
    assert_eq!(s.errors.total, 0);
    r.volume.stop(false).await.unwrap();
}

#[tokio::test]
async fn a_block_read_by_a_hit_is_not_reused_before_the_read_ends() {
    let r = rig().await;
    read_ok(&r.bdev, 0, BLOCK).await;
    r.gate.set(false);
    let b = r.volume.bdev();
    let hit = tokio::spawn(async move { read_ok(&b, 4096, 4096).await });
    until(|| r.gate.waiting.load(Ordering::SeqCst) == 1).await;
    assert_eq!(hits_in_flight(&r.volume), 1, "served by the caller");
    // Misses that need every slot twice over: their fills write through
    // the open side of the gate into whatever slots eviction frees.
    for i in 1..33 {
        read_ok(&r.bdev, i * BLOCK, BLOCK).await;
    }
    assert!(r.volume.stats().await.unwrap().evictions.blocks >= 16);
    r.gate.set(true);
    let got = hit.await.unwrap();
    assert!(
        got[..] == pattern(4096, 4096)[..],
        "the hit's slot was reused"
    );
    // The block stayed cached through all of it.
    r.volume.reset_stats().await.unwrap();
    read_ok(&r.bdev, 0, 4096).await;
    assert_eq!(r.volume.stats().await.unwrap().requests.rd_hits, 1);
    r.volume.stop(false).await.unwrap();
}

#[tokio::test]
async fn a_hit_whose_request_goes_away_gives_its_blocks_back() {
    let r = rig().await;
    read_ok(&r.bdev, 0, BLOCK).await;
    r.gate.set(false);
    let b = r.volume.bdev();
    let hit = tokio::spawn(async move { read_ok(&b, 0, 4096).await });
    until(|| r.gate.waiting.load(Ordering::SeqCst) == 1).await;
    assert_eq!(hits_in_flight(&r.volume), 1);
    hit.abort();
    let _ = hit.await;
    // The owner's task hears of it (a bounded number of turns, no clock).
    for _ in 0..1000 {
        if hits_in_flight(&r.volume) == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(hits_in_flight(&r.volume), 0, "the ticket came back");
    // A write needs the block exclusively: it would wait for a pin the
    // dropped request kept.
    let (_, w) = r.bdev.write(0, DmaBuf::from_slice(&pattern(0, 4096))).await;
    w.unwrap();
    r.gate.set(true);
    r.volume.stop(false).await.unwrap();
}

/// A read submitted in place (`Owner::read_now`) that is a pure hit comes
/// back as its grant, with no channel; a miss waits on a channel for its
/// answer, and a request the engine refuses is answered at once.
#[tokio::test]
async fn a_read_in_place_is_granted_directly_and_only_the_rest_wait() {
    use super::msg::{Answer, Now};
    let r = rig().await;
    warm(&r, BLOCK).await;
    let read_now = |off, len| read_now(&r.volume, off, len);
    let Now::Hit(grant, buf) = read_now(4096, 4096) else {
        panic!("a cached block's read is a pure hit");
    };
    assert_eq!(hits_in_flight(&r.volume), 1, "pinned until served");
    let (buf, res, done) = grant.serve(r.volume.inner.cache.bdev(), buf).await;
    res.unwrap();
    r.volume.hit_done(done);
    assert!(buf[..] == pattern(4096, 4096)[..]);
    assert_eq!(hits_in_flight(&r.volume), 0);

    let Now::Wait(rx) = read_now(3 * BLOCK, 4096) else {
        panic!("a miss is planned and run by the owner");
    };
    match rx.await {
        Ok(Answer::Done(Some(buf), Ok(()))) => {
            assert!(buf[..] == pattern(3 * BLOCK, 4096)[..]);
        }
        _ => panic!("the miss is answered with its bytes"),
    }
    // Misaligned: the bdev layer checks that first; the engine refuses it
    // here too, at once.
    assert!(matches!(read_now(1, 4096), Now::Done(Some(_), Err(_))));

    let s = r.volume.stats().await.unwrap();
    assert_eq!(s.requests.rd_hits, 1);
    assert_eq!(s.requests.rd_misses, 1);
    assert_eq!(s.latency.read_hit.count, 1);
    r.volume.stop(false).await.unwrap();
}

/// On a RAM cache device a hit read in place is served at once, under the
/// owner's lock: no grant, nothing left pinned, and counted like any hit
/// (the volume's hit and latency, the cache device's read).
#[tokio::test]
async fn a_hit_on_a_ram_cache_is_served_in_place() {
    use super::msg::Now;
    let r = rig_on(false).await;
    warm(&r, 2 * BLOCK).await;
    let device_reads = || r.volume.inner.cache.bdev().stats().num_read_ops.get();
    let before = device_reads();
    // Through the bdev: a read one block holds completes before the call
    // returns; a miss is handed back untouched, for the volume's task.
    let Ok((buf, res)) = r.bdev.read_inline(4096, DmaBuf::new(4096)) else {
        panic!("a one-block hit reads inline");
    };
    res.unwrap();
    assert!(buf[..] == pattern(4096, 4096)[..]);
    assert!(r.bdev.read_inline(3 * BLOCK, DmaBuf::new(4096)).is_err());
    // The owner's own path: inside one block, and across two blocks next
    // to each other on the device (planned).
    let reads = [(8192, 4096), (BLOCK - 4096, 8192)];
    for (off, len) in reads {
        let now = read_now(&r.volume, off, len);
        let Now::Done(Some(buf), Ok(())) = now else {
            panic!("a RAM cache's hit {off}+{len} is read at once");
        };
        assert!(buf[..] == pattern(off, len)[..], "{off}+{len}");
        assert_eq!(hits_in_flight(&r.volume), 0, "nothing stays pinned");
    }
    assert_eq!(device_reads(), before + 3);
    // A write needs the blocks exclusively: it would wait for a pin left.
    let (_, w) = r
        .bdev
        .write(BLOCK - 4096, DmaBuf::from_slice(&pattern(0, 8192)))
        .await;
    w.unwrap();
    let s = r.volume.stats().await.unwrap();
    assert_eq!(s.requests.rd_hits, 3);
    assert_eq!(s.requests.rd_misses, 0, "the miss handed back was not read");
    assert_eq!(s.latency.read_hit.count, 3);
    r.volume.stop(false).await.unwrap();
}

/// A hit answered inline and counted by the namespace above the volume (as
/// the NVMe-oF target counts it) is timed once: the namespace's read
/// latency and the volume's hit latency span the same two instants, the
/// namespace's arrival and the end of the cache device's read, and that
/// read lies within them.
#[tokio::test]
async fn an_inline_hit_shares_its_instants_with_the_counter_above() {
    let r = rig_on(false).await;
    warm(&r, BLOCK).await;
    let device = r.volume.inner.cache.bdev().stats().clone();
    let (device_ns, device_reads) = (device.read_latency.sum_ns_wide(), device.num_read_ops.get());
    let namespace = CountedBdev::from(Arc::new(r.volume.bdev()));
    let (buf, res) = namespace.read(4096, DmaBuf::new(4096)).await;
    res.unwrap();
    assert!(buf[..] == pattern(4096, 4096)[..]);
    assert_eq!(device.num_read_ops.get(), device_reads + 1, "read inline");

    let counted_ns = namespace.stats().read_latency.sum_ns_wide();
    let s = r.volume.stats().await.unwrap();
    assert_eq!(s.latency.read_hit.count, 1);
    let hit_ns = (s.latency.read_hit.avg_us * 1000.0).round() as u128;
    assert_eq!(counted_ns, hit_ns, "one arrival and one end for both");
    let read_ns = device.read_latency.sum_ns_wide() - device_ns;
    assert!(
        read_ns <= counted_ns,
        "device read {read_ns} ns within {counted_ns} ns"
    );
    r.volume.stop(false).await.unwrap();
}

/// A cache device that waits for its reads (a file, an NVMe drive) never
/// serves a hit inline: the buffer comes back untouched and uncounted, and
/// the usual path then serves the hit.
#[tokio::test]
async fn a_hit_on_a_device_that_waits_is_not_read_inline() {
    let r = rig().await;
    warm(&r, BLOCK).await;
    let device_reads = || r.volume.inner.cache.bdev().stats().num_read_ops.get();
    let before = device_reads();
    let Err(back) = r.bdev.read_inline(4096, DmaBuf::from_slice(&[9; 4096])) else {
        panic!("a gated device's hit was read inline");
    };
    assert!(
        back.iter().all(|&b| b == 9),
        "the buffer comes back untouched"
    );
    assert_eq!(device_reads(), before);
    let got = read_ok(&r.bdev, 4096, 4096).await;
    assert!(got[..] == pattern(4096, 4096)[..]);
    let s = r.volume.stats().await.unwrap();
    assert_eq!((s.requests.rd_hits, s.requests.rd_misses), (1, 0));
    r.volume.stop(false).await.unwrap();
}
