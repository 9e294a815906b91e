//! The fault matrix of docs/cache-format.md ("Integrity"): for each record
//! kind (superblock, unit metadata) and each copy (the newest, the older),
//! a flipped bit, a torn write and a zeroed sector, each with its expected
//! outcome: recovered silently because provably torn, used with the damage
//! counted because provably older, or refused with the loss reported.
//! Never lost without a word.

use std::sync::Arc;

mod common;

use common::{poke, raw};

use bdev::malloc::MallocBdev;
use bdev::{Bdev, CountedBdev, DmaBuf};
use cache::device::{CacheDevice, DeviceError, MetaEntry, UnitMeta, VolumeRegion, VolumeSpec};
use cache::layout::frame::SECTOR;
use cache::layout::pick::{Copy, Damage};
use cache::layout::{self, Geometry};

const MIB: u64 = 1 << 20;

fn malloc(name: &str) -> Arc<Bdev> {
    Arc::new(Bdev::Malloc(
        MallocBdev::new(name, 64 * MIB / 512, 512).unwrap(),
    ))
}

async fn open(b: &Arc<Bdev>) -> Result<Arc<CacheDevice>, DeviceError> {
    CacheDevice::open(CountedBdev::from(Arc::clone(b)), false).await
}

fn spec(name: &str) -> VolumeSpec {
    VolumeSpec {
        name: name.into(),
        volume_size: 1 << 30,
        sector_size: 512,
        block_sizes: vec![65536, 4096],
        group_size: 1 << 20,
        units: 2,
    }
}

/// The faults of the matrix, applied to one copy at `at`.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// One bit of sector `n` flipped (bit rot).
    Flip(usize),
    /// Sector `n` zeroed.
    Zero(usize),
    /// The last write to the copy torn: its first half of sectors landed,
    /// the rest still hold what the copy held before that write.
    Tear,
}

const FAULTS: [Fault; 5] = [
    Fault::Flip(0),
    Fault::Flip(1),
    Fault::Zero(0),
    Fault::Zero(1),
    Fault::Tear,
];

/// Applies `f` to the copy of `len` bytes at `at`; a tear needs what the
/// copy held before its last write (`before`).
async fn inject(b: &Bdev, at: u64, len: u64, before: &[u8], f: Fault) {
    let mut now = raw(b, at, len).await;
    match f {
        Fault::Flip(n) => now[n * SECTOR + 37] ^= 0x08,
        Fault::Zero(n) => now[n * SECTOR..(n + 1) * SECTOR].fill(0),
        Fault::Tear => {
            let half = now.len() / SECTOR / 2 * SECTOR;
            now[half..].copy_from_slice(&before[half..]);
        }
    }
    poke(b, at, &now).await;
}

// ---- superblock ----

/// A device with volume `a` committed, then `c` (the newest table). Returns
/// the bdev, the copy holding the newest table, and that copy's bytes
/// before `c`'s commit.
async fn two_tables(name: &str) -> (Arc<Bdev>, usize, Vec<u8>) {
    let b = malloc(name);
    let dev = CacheDevice::open(CountedBdev::from(Arc::clone(&b)), true)
        .await
        .unwrap();
    dev.create_volume(spec("a")).await.unwrap();
    let header = raw(&b, 0, layout::HEADER_AREA).await;
    dev.create_volume(spec("c")).await.unwrap();
    drop(dev);
    let after = raw(&b, 0, layout::HEADER_AREA).await;
    let half = layout::SB_COPY_SIZE as usize;
    let newest = (0..2)
        .find(|&c| header[c * half..(c + 1) * half] != after[c * half..(c + 1) * half])
        .expect("the commit changed a copy");
    (
        b,
        newest,
        header[newest * half..(newest + 1) * half].to_vec(),
    )
}

fn names(dev: &CacheDevice) -> Vec<String> {
    dev.volumes().into_iter().map(|v| v.name).collect()
}

#[tokio::test]
async fn superblock_matrix() {
    for (i, fault) in FAULTS.into_iter().enumerate() {
        // The newest copy.
        let (b, newest, before) = two_tables(&format!("sbn{i}")).await;
        let at = newest as u64 * layout::SB_COPY_SIZE;
        inject(&b, at, layout::SB_COPY_SIZE, &before, fault).await;
        let header = raw(&b, 0, layout::HEADER_AREA).await;
        match (fault, open(&b).await) {
            // A torn commit never completed: the table before it is the
            // device's, and the next commit goes into the torn copy.
            (Fault::Tear, Ok(dev)) => {
                assert_eq!(names(&dev), ["a"]);
                assert_eq!(dev.metadata_errors().count(Damage::Torn), 1);
                dev.create_volume(spec("d")).await.unwrap();
                drop(dev);
                let dev = open(&b).await.unwrap();
                assert_eq!(names(&dev), ["a", "d"]);
            }
            (Fault::Flip(_) | Fault::Zero(_), Err(e @ DeviceError::Corrupt { .. })) => {
                let msg = e.to_string();
                assert!(msg.contains("may hold a newer volume table"), "{msg}");
                assert!(!msg.contains("without load"), "{msg}");
                assert_eq!(
                    raw(&b, 0, layout::HEADER_AREA).await,
                    header,
                    "{fault:?}: changed"
                );
                // Not even a format over it.
                let e = CacheDevice::open(CountedBdev::from(Arc::clone(&b)), true).await;
                assert!(matches!(e, Err(DeviceError::Corrupt { .. })), "{fault:?}");
            }
            (f, r) => panic!("newest copy, {f:?}: {:?}", r.map(|d| names(&d))),
        }

        // The older copy: damage to it loses nothing, and is counted.
        let (b, newest, _) = two_tables(&format!("sbo{i}")).await;
        let older = 1 - newest;
        let at = older as u64 * layout::SB_COPY_SIZE;
        let (Fault::Flip(_) | Fault::Zero(_)) = fault else {
            continue; // a torn older copy is a torn newest write: above
        };
        inject(&b, at, layout::SB_COPY_SIZE, &[], fault).await;
        let dev = open(&b).await.expect("the newest table loads");
        assert_eq!(names(&dev), ["a", "c"], "{fault:?}");
        assert_eq!(
            dev.metadata_errors().count(Damage::Checksum),
            1,
            "{fault:?}"
        );
    }
}

#[tokio::test]
async fn both_superblock_copies_damaged_is_refused() {
    let (b, newest, _) = two_tables("sbb").await;
    for c in [newest, 1 - newest] {
        inject(
            &b,
            c as u64 * layout::SB_COPY_SIZE,
            layout::SB_COPY_SIZE,
            &[],
            Fault::Flip(1),
        )
        .await;
    }
    let e = CacheDevice::open(CountedBdev::from(Arc::clone(&b)), true)
        .await
        .err();
    assert!(matches!(e, Some(DeviceError::Corrupt { .. })), "{e:?}");
}

// ---- unit metadata ----

/// 8 dirty 4 KiB blocks in entries 0..8 (`n` shifts their offsets).
fn dirty_meta(n: u64) -> UnitMeta {
    let mut m = UnitMeta::empty(256);
    for i in 0..8 {
        m.entries[i] = MetaEntry {
            offset: 4096 * (n * 100 + i as u64),
            size: 4096,
            valid: (0, 8),
            dirty: (0, 8),
            crc: None,
        };
    }
    m
}

/// A volume whose unit 1 has had `dirty_meta(1)` then `dirty_meta(2)`
/// written; returns where unit 1's newest copy is and its bytes before
/// that write.
async fn two_versions(name: &str) -> (Arc<Bdev>, VolumeRegion, u64, u64, Vec<u8>) {
    let b = malloc(name);
    let dev = CacheDevice::open(CountedBdev::from(Arc::clone(&b)), true)
        .await
        .unwrap();
    let v = dev.create_volume(spec("v")).await.unwrap();
    dev.write_unit_meta(&v, 1, &dirty_meta(1), true)
        .await
        .unwrap();
    let g = Geometry::for_units(dev.total_units());
    let copies = [0, 1].map(|c| g.meta_copy_offset(v.units[1], c));
    let before = raw(&b, copies[0], layout::META_PER_UNIT).await;
    dev.write_unit_meta(&v, 1, &dirty_meta(2), true)
        .await
        .unwrap();
    drop(dev);
    let after = raw(&b, copies[0], layout::META_PER_UNIT).await;
    let half = layout::META_COPY_SIZE as usize;
    let newest = (0..2)
        .find(|&c| before[c * half..(c + 1) * half] != after[c * half..(c + 1) * half])
        .expect("the write changed a copy");
    let old = before[newest * half..(newest + 1) * half].to_vec();
    (b, v, copies[newest], copies[1 - newest], old)
}

#[tokio::test]
async fn unit_metadata_matrix() {
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let (b, v, newest, _, before) = two_versions(&format!("umn{i}")).await;
        inject(&b, newest, layout::META_COPY_SIZE, &before, fault).await;
        let dev = open(&b).await.unwrap();
        match (fault, dev.read_unit_meta(&v, 1).await) {
            (Fault::Tear, Ok(m)) => {
                assert_eq!(m, dirty_meta(1), "the version before the torn write");
                assert_eq!(dev.metadata_errors().count(Damage::Torn), 1);
            }
            (
                Fault::Flip(_) | Fault::Zero(_),
                Err(DeviceError::MetadataLost {
                    units, dirty_bytes, ..
                }),
            ) => {
                assert_eq!(units, [1], "{fault:?}");
                assert_eq!(
                    dirty_bytes,
                    8 * 4096,
                    "{fault:?}: the older copy's dirty bytes"
                );
                assert_eq!(
                    dev.metadata_errors().count(Damage::Checksum),
                    1,
                    "{fault:?}"
                );
                // The whole volume's load names the unit too, and the other
                // units still read.
                let e = dev.load_volume_blocks(&v).await.expect_err("refused");
                assert!(e.to_string().contains("unit(s) [1]"), "{e}");
                assert!(dev.read_unit_meta(&v, 0).await.unwrap().is_empty());
            }
            (f, r) => panic!("newest copy, {f:?}: {r:?}"),
        }

        let (Fault::Flip(_) | Fault::Zero(_)) = fault else {
            continue;
        };
        let (b, v, _, older, _) = two_versions(&format!("umo{i}")).await;
        inject(&b, older, layout::META_COPY_SIZE, &[], fault).await;
        let dev = open(&b).await.unwrap();
        assert_eq!(
            dev.read_unit_meta(&v, 1).await.unwrap(),
            dirty_meta(2),
            "{fault:?}"
        );
        assert_eq!(
            dev.metadata_errors().count(Damage::Checksum),
            1,
            "{fault:?}"
        );
    }
}

#[tokio::test]
async fn after_a_torn_unit_write_the_next_write_replaces_the_torn_copy() {
    let (b, v, newest, older, before) = two_versions("umt").await;
    inject(&b, newest, layout::META_COPY_SIZE, &before, Fault::Tear).await;
    let kept = raw(&b, older, layout::META_COPY_SIZE).await;
    let dev = open(&b).await.unwrap();
    dev.write_unit_meta(&v, 1, &dirty_meta(3), false)
        .await
        .unwrap();
    assert_eq!(raw(&b, older, layout::META_COPY_SIZE).await, kept);
    assert_eq!(dev.read_unit_meta(&v, 1).await.unwrap(), dirty_meta(3));
}

#[tokio::test]
async fn both_unit_copies_damaged_or_zeroed_is_a_loss() {
    for fault in [Fault::Flip(1), Fault::Zero(0)] {
        let (b, v, newest, older, _) = two_versions("umb").await;
        for at in [newest, older] {
            inject(&b, at, layout::SB_COPY_SIZE, &[], fault).await;
        }
        if let Fault::Zero(_) = fault {
            // Every sector of both copies.
            poke(
                &b,
                older.min(newest),
                &vec![0; layout::META_PER_UNIT as usize],
            )
            .await;
        }
        let dev = open(&b).await.unwrap();
        let r = dev.read_unit_meta(&v, 1).await;
        assert!(
            matches!(r, Err(DeviceError::MetadataLost { ref units, .. }) if units == &[1]),
            "{fault:?}: {r:?}"
        );
    }
}

// ---- a cached volume over damaged metadata ----

/// The finding: 32 acknowledged write-back writes, then one bit
/// flipped in the newest metadata copy of the units holding them. On
/// today's main the restart silently lost one of them; now the volume is
/// not loaded and the loss is named, while another volume on the same
/// device loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_volume_over_damaged_metadata_is_refused_with_the_loss_named() {
    use common::{create, params, Devices, Rng};
    let d = Devices::new(64, 16, false);
    let dev = d.open_cache().await;
    let wb = params(serde_json::json!({"write_mode": "wb", "cleaning": {"policy": "nop"}}));
    let (vol, b) = create(&d, &dev, wb.clone()).await;
    let mut other = params(serde_json::json!({"name": "Other", "cache_size_mib": 2}));
    other.core_bdev_name = "core".into();
    let (vol2, _) = create(&d, &dev, other.clone()).await;
    let mut rng = Rng(32);
    for i in 0..32u64 {
        let mut buf = DmaBuf::new(4096);
        rng.fill(&mut buf);
        let (_, r) = b.write(i * (1 << 20), buf).await;
        r.unwrap();
    }
    assert_eq!(vol.stats().await.unwrap().dirty_bytes, 32 * 4096);
    vol.stop(false).await.unwrap();
    vol2.stop(false).await.unwrap();
    let region = dev.find_volume("Cache0").unwrap();
    drop((vol, vol2, b, dev));

    // Flip a bit in the newest copy of every unit that holds blocks.
    let raw_cache = d.cache.bdev().clone();
    let g = Geometry::for_units(Geometry::for_device(raw_cache.info().size_bytes()).units);
    let mut damaged = Vec::new();
    for (index, &unit) in region.units.iter().enumerate() {
        let index = index as u32;
        let mut newest: Option<(u64, u64)> = None;
        for c in 0..2 {
            let at = g.meta_copy_offset(unit, c);
            let buf = raw(&raw_cache, at, layout::META_COPY_SIZE).await;
            if let Copy::Valid { seq, value } = layout::judge_unit_meta(&buf, &region, index) {
                if !value.is_empty() && newest.is_none_or(|(s, _)| seq > s) {
                    newest = Some((seq, at));
                }
            }
        }
        if let Some((_, at)) = newest {
            inject(&raw_cache, at, layout::META_COPY_SIZE, &[], Fault::Flip(1)).await;
            damaged.push(index);
        }
    }
    assert!(!damaged.is_empty());

    let dev = d.open_cache().await;
    let mut load = wb;
    load.load = true;
    let e = cache::volume::CachedVolume::create(load, d.core.clone(), dev.clone())
        .await
        .err()
        .expect("the volume is not loaded");
    let msg = e.to_string();
    assert!(msg.contains(&format!("unit(s) {damaged:?}")), "{msg}");
    assert!(
        msg.contains("dirty bytes") && msg.contains("not loaded"),
        "{msg}"
    );
    assert!(dev.metadata_errors().count(Damage::Checksum) >= damaged.len() as u64);
    // Nothing of the refused volume changed on the device; the other loads.
    assert!(dev.find_volume("Cache0").is_some());
    other.load = true;
    cache::volume::CachedVolume::create(other, d.core.clone(), dev.clone())
        .await
        .expect("the other volume loads");
}
