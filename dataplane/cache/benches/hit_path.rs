//! The hit path without the network: 4K random reads of a warm cached
//! volume beside the same reads of its cache bdev, both RAM, in one
//! current-thread runtime (as the pinned daemon runs), at QD1 and QD32.
//! What the volume adds per read is what this prints: nanoseconds per
//! read and the ratio to the raw bdev. `cargo bench -p loadgen --bench
//! cached` (part 3) measures the same over NVMe/TCP. Each side is read
//! through counters of its own, as the NVMe-oF target counts every
//! namespace it exports.
//!
//! Part 2, dirty data: two write-back volumes (4 KiB blocks) side by side,
//! one with checksums of dirty data (the default) and one without; per 4K
//! request, QD1: read hits of clean blocks beside checked ones, the writes
//! that make clean blocks dirty (a crc32c each), read hits of those
//! blocks once they rested (each verified), overwrites of blocks just
//! written (hot) and of blocks that rested (their checksums on the device:
//! the first overwrite into a 1 MiB unit drops the unit's, a metadata
//! write before the data), all of them and then one block in 256 (about
//! one a unit: each pays that metadata write). Ratios are with / without.
//!
//! `RACKCACHE_BENCH_HIT_READS` (200000): reads per measured pass.
//! `RACKCACHE_BENCH_HIT_VOLUME_MIB` (64): the volume, all of it read;
//! `cargo bench -p loadgen --bench cached`'s part 3 reads 256 MiB.
//! `RACKCACHE_BENCH_HIT_COLD_MIB` (0): when set, also QD1 reads with this
//! many MiB of other memory walked between them (untimed), so that each
//! read finds the CPU caches cold, as a target serving one request at a
//! time between the kernel's network work and other processes does.

use std::sync::Arc;
use std::time::Instant;

use bdev::malloc::MallocBdev;
use bdev::{Bdev, CountedBdev, DmaBuf, IoStats};
use cache::device::CacheDevice;
use cache::volume::{CachedVolume, VolumeParams};
use futures_util::stream::{FuturesUnordered, StreamExt};

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 4096;

fn counted(b: Arc<Bdev>) -> CountedBdev {
    let reg = metrics::Registry::new();
    let name = b.info().name.clone();
    CountedBdev::new(b, IoStats::register(&reg, &name))
}

/// xorshift64*: the same offsets for both sides.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Nanoseconds per read of `reads` random 4K reads, `qd` in flight.
async fn pass(b: &CountedBdev, space: u64, qd: usize, reads: u64) -> f64 {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut next = || rng.below(space / BLOCK) * BLOCK;
    let mut inflight = FuturesUnordered::new();
    let mut bufs: Vec<DmaBuf> = (0..qd).map(|_| DmaBuf::new(BLOCK as usize)).collect();
    let start = Instant::now();
    let mut issued = 0;
    while issued < reads && inflight.len() < qd {
        inflight.push(b.read(next(), bufs.pop().expect("one per slot")));
        issued += 1;
    }
    while let Some((buf, r)) = inflight.next().await {
        r.expect("read");
        if issued < reads {
            inflight.push(b.read(next(), buf));
            issued += 1;
        }
    }
    start.elapsed().as_nanos() as f64 / reads as f64
}

/// Nanoseconds per read of `reads` random 4K reads one at a time, each
/// timed alone, with `thrash` walked between them.
async fn cold_pass(b: &CountedBdev, space: u64, reads: u64, thrash: &mut [u8]) -> f64 {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut buf = DmaBuf::new(BLOCK as usize);
    let mut total = 0u128;
    for i in 0..reads {
        // One write per cache line evicts what the last read left.
        for line in thrash.chunks_mut(64) {
            line[0] = line[0].wrapping_add(i as u8);
        }
        let off = rng.below(space / BLOCK) * BLOCK;
        let start = Instant::now();
        let (b2, r) = b.read(off, buf).await;
        total += start.elapsed().as_nanos();
        r.expect("read");
        buf = b2;
    }
    std::hint::black_box(&thrash);
    total as f64 / reads as f64
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| !"hit_path".contains(&f)) {
        return;
    }
    let reads = env_u64("RACKCACHE_BENCH_HIT_READS", 200_000);
    let volume_mib = env_u64("RACKCACHE_BENCH_HIT_VOLUME_MIB", 64).max(1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let core = counted(Arc::new(Bdev::Malloc(
            MallocBdev::new("core", volume_mib * MIB / BLOCK, BLOCK as u32).expect("core"),
        )));
        let cache_mib = volume_mib * 2;
        let cache_bdev = counted(Arc::new(Bdev::Malloc(
            MallocBdev::new("cache", cache_mib * MIB / BLOCK, BLOCK as u32).expect("cache"),
        )));
        let dev = CacheDevice::open(cache_bdev.clone(), true)
            .await
            .expect("format");
        let params: VolumeParams = serde_json::from_value(serde_json::json!({
            "name": "hit", "core_bdev_name": "core", "cache_bdev_name": "cache",
            "cache_size_mib": volume_mib + volume_mib / 4,
            "seq_cutoff": {"policy": "never"}, "cleaning": {"policy": "nop"},
        }))
        .expect("params");
        let v = CachedVolume::create(params, core, dev)
            .await
            .expect("volume");
        let vb = v.bdev();
        let space = volume_mib * MIB;
        // Warm: every block cached (sequential 128K reads fill them).
        for off in (0..space).step_by(128 << 10) {
            let (_, r) = vb.read(off, DmaBuf::new(128 << 10)).await;
            r.expect("warm");
        }
        // The namespaces: the cache bdev exported directly, and the volume.
        let raw = counted(cache_bdev.bdev().clone());
        let vb = counted(Arc::new(vb));
        println!(
            "{:<6} {:>12} {:>12} {:>8} {:>10}",
            "QD", "raw ns/rd", "hit ns/rd", "hit/raw", "hit ratio"
        );
        for qd in [1usize, 32] {
            v.reset_stats().await.expect("reset");
            // Alternate sides so that load from elsewhere falls on both.
            let (mut r, mut h) = (Vec::new(), Vec::new());
            for _ in 0..3 {
                r.push(pass(&raw, space, qd, reads).await);
                h.push(pass(&vb, space, qd, reads).await);
            }
            r.sort_by(f64::total_cmp);
            h.sort_by(f64::total_cmp);
            let hit = v.stats().await.expect("stats").hit_ratio.read;
            println!(
                "{qd:<6} {:>12.0} {:>12.0} {:>8.2} {hit:>10.3}",
                r[1],
                h[1],
                h[1] / r[1]
            );
        }
        let cold_mib: usize = std::env::var("RACKCACHE_BENCH_HIT_COLD_MIB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if cold_mib > 0 {
            let mut thrash = vec![1u8; cold_mib << 20];
            let n = (reads / 100).max(100);
            let (mut r, mut h) = (Vec::new(), Vec::new());
            for _ in 0..3 {
                r.push(cold_pass(&raw, space, n, &mut thrash).await);
                h.push(cold_pass(&vb, space, n, &mut thrash).await);
            }
            r.sort_by(f64::total_cmp);
            h.sort_by(f64::total_cmp);
            println!(
                "{:<6} {:>12.0} {:>12.0} {:>8.2}  ({cold_mib} MiB walked between reads)",
                "1 cold",
                r[1],
                h[1],
                h[1] / r[1]
            );
        }
        v.stop(false).await.expect("stop");
        dirty_data(volume_mib, reads).await;
    });
}

/// A warm write-back volume over fresh RAM devices with 4 KiB blocks (so
/// that each 4 KiB write makes one whole block dirty), cleaning off.
async fn write_back_volume(mib: u64, checksums: bool) -> CachedVolume {
    let ram = |name: &str, mib: u64| {
        counted(Arc::new(Bdev::Malloc(
            MallocBdev::new(name, mib * MIB / BLOCK, BLOCK as u32).expect("malloc"),
        )))
    };
    let core = ram("core", mib);
    let dev = CacheDevice::open(ram("cache", mib * 2), true)
        .await
        .expect("format");
    let params: VolumeParams = serde_json::from_value(serde_json::json!({
        "name": "wb", "core_bdev_name": "core", "cache_bdev_name": "cache",
        "cache_size_mib": mib + mib / 4, "write_mode": "wb", "data_checksums": checksums,
        "mode": "fixed", "block_sizes_kib": [4],
        "seq_cutoff": {"policy": "never"}, "cleaning": {"policy": "nop"},
    }))
    .expect("params");
    let v = CachedVolume::create(params, core, dev)
        .await
        .expect("volume");
    let b = v.bdev();
    for off in (0..mib * MIB).step_by(128 << 10) {
        let (_, r) = b.read(off, DmaBuf::new(128 << 10)).await;
        r.expect("warm");
    }
    v
}

/// Nanoseconds per request of 4K requests at `offsets`, one at a time.
async fn qd1(b: &Bdev, offsets: &[u64], write: bool) -> f64 {
    let mut buf = DmaBuf::new(BLOCK as usize);
    buf.fill(0xa5);
    let start = Instant::now();
    for &off in offsets {
        let (b2, r) = if write {
            b.write(off, buf).await
        } else {
            b.read(off, buf).await
        };
        r.expect("request");
        buf = b2;
    }
    start.elapsed().as_nanos() as f64 / offsets.len() as f64
}

/// Rounds of part 2 (each on fresh volumes): its passes vary more than
/// reads do (metadata writes are tasks of their own).
const ROUNDS: usize = 5;

/// Long enough for every checksum to go on the device (SETTLE_AFTER, then
/// the next cleaning tick, then the metadata writes).
const REST: std::time::Duration = std::time::Duration::from_millis(2500);

/// Part 2: what checksums of dirty data cost per request.
async fn dirty_data(mib: u64, reads: u64) {
    let blocks = mib * MIB / BLOCK;
    // Every block once, in a random order (a Fisher-Yates shuffle).
    let mut order: Vec<u64> = (0..blocks).map(|i| i * BLOCK).collect();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut random = Vec::with_capacity(reads as usize);
    for _ in 0..reads.min(blocks * 4) {
        random.push(rng.below(blocks) * BLOCK);
    }
    println!();
    println!(
        "{:<22} {:>12} {:>12} {:>8}",
        "dirty data, QD1 4K", "off ns/req", "on ns/req", "on/off"
    );
    let row = |what: &str, off: f64, on: f64| {
        println!("{what:<22} {off:>12.0} {on:>12.0} {:>8.3}", on / off);
    };
    // Fresh volumes per round; the median of the rounds. Passes, in
    // order: one block in 256 made dirty and left to rest, so that random
    // reads then run beside checked blocks (nearly all of clean blocks,
    // each looked up all the same); every block written once (clean ->
    // dirty: a crc32c each, kept in memory) and at once again (hot: no
    // checksum on the device yet); after a rest past SETTLE_AFTER (every
    // checksum on the device, nothing settling in the background), random
    // reads (each verifies its block) and every block overwritten (the
    // first overwrite into a unit drops the unit's checksums, a metadata
    // write before the data); after another rest, one block in 256 (the
    // worst case: each one a unit's first).
    let sparse: Vec<u64> = order
        .iter()
        .copied()
        .filter(|o| (o / BLOCK).is_multiple_of(256))
        .collect();
    let mut passes: [[Vec<f64>; 2]; 6] = Default::default();
    for round in 0..ROUNDS {
        // Both volumes live side by side, each pass run on one and then
        // the other (which goes first alternates by round), reads three
        // times over: what the machine does meanwhile falls on both.
        // Which one is made first (and so where its memory lies) alternates
        // too.
        let sides = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut made = Vec::new();
        for side in sides {
            made.push((side, write_back_volume(mib, side == 1).await));
        }
        made.sort_by_key(|(side, _)| *side);
        let vols = made.into_iter().map(|(_, v)| v).collect::<Vec<_>>();
        let b = [vols[0].bdev(), vols[1].bdev()];
        let both = async |pass: &mut [Vec<f64>; 2], offsets: &[u64], write: bool| {
            for _ in 0..if write { 1 } else { 3 } {
                for side in sides {
                    pass[side].push(qd1(&b[side], offsets, write).await);
                }
            }
        };
        for side in sides {
            qd1(&b[side], &sparse, true).await;
        }
        tokio::time::sleep(REST).await;
        both(&mut passes[0], &random, false).await;
        both(&mut passes[1], &order, true).await;
        both(&mut passes[3], &order, true).await;
        tokio::time::sleep(REST).await;
        both(&mut passes[2], &random, false).await;
        both(&mut passes[4], &order, true).await;
        tokio::time::sleep(REST).await;
        both(&mut passes[5], &sparse, true).await;
        for v in vols {
            v.stop(false).await.expect("stop");
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let names = [
        "read hit, clean",
        "write, clean -> dirty",
        "read hit, verified",
        "overwrite, hot",
        "overwrite, rested",
        "  one block in 256",
    ];
    for (what, [off, on]) in names.into_iter().zip(passes) {
        row(what, median(off), median(on));
    }
}
