//! The cache device: formatting, the volume table and its allocator, unit
//! metadata, and recovery from torn or corrupt copies (see
//! docs/cache-format.md).

use std::sync::Arc;

mod common;

use common::{poke, raw};

use bdev::error_inject::{ErrorBdev, ErrorType, IoTypeSel};
use bdev::malloc::MallocBdev;
use bdev::{Bdev, CountedBdev, IoKind};
use cache::device::{
    CacheDevice, DeviceError, MetaEntry, UnitMeta, VolumeRegion, VolumeSpec, UNIT_SIZE,
};
use cache::layout::pick::{Copy, Damage};
use cache::layout::{self, Geometry};

const MIB: u64 = 1 << 20;

fn malloc(name: &str, mib: u64) -> Arc<Bdev> {
    Arc::new(Bdev::Malloc(
        MallocBdev::new(name, mib * MIB / 512, 512).unwrap(),
    ))
}

async fn open(b: &Arc<Bdev>, format: bool) -> Result<Arc<CacheDevice>, DeviceError> {
    CacheDevice::open(CountedBdev::from(Arc::clone(b)), format).await
}

fn spec(name: &str, units: u32) -> VolumeSpec {
    VolumeSpec {
        name: name.into(),
        volume_size: 1 << 30,
        sector_size: 512,
        block_sizes: vec![65536, 4096],
        group_size: 1 << 20,
        units,
    }
}

/// Garbage over one 512-byte block at `offset`.
async fn garble(b: &Bdev, offset: u64) {
    poke(b, offset, &[0xa5; 512]).await;
}

/// Seqs of the two superblock copies (None: invalid).
async fn sb_seqs(b: &Bdev) -> [Option<u64>; 2] {
    let h = raw(b, 0, layout::HEADER_AREA).await;
    let half = layout::SB_COPY_SIZE as usize;
    [0, 1].map(
        |c| match layout::judge_superblock(&h[c * half..(c + 1) * half], u32::MAX).1 {
            Copy::Valid { seq, .. } => Some(seq),
            _ => None,
        },
    )
}

/// Seqs of the two metadata copies of unit `index` of `v` (None: invalid).
async fn meta_seqs(b: &Bdev, dev: &CacheDevice, v: &VolumeRegion, index: u32) -> [Option<u64>; 2] {
    let g = Geometry::for_units(dev.total_units());
    let unit = v.units[index as usize];
    let mut out = [None; 2];
    for (c, seq) in out.iter_mut().enumerate() {
        let buf = raw(b, g.meta_copy_offset(unit, c), layout::META_COPY_SIZE).await;
        if let Copy::Valid { seq: s, .. } = layout::judge_unit_meta(&buf, v, index) {
            *seq = Some(s);
        }
    }
    out
}

fn newest(seqs: [Option<u64>; 2]) -> usize {
    if seqs[1] > seqs[0] {
        1
    } else {
        0
    }
}

/// A unit's metadata with `blocks` 4 KiB blocks at entries 0.. and one
/// 64 KiB dirty block at entry 64.
fn meta(blocks: u64) -> UnitMeta {
    let mut m = UnitMeta::empty(256);
    for i in 0..blocks as usize {
        m.entries[i] = MetaEntry {
            offset: 4096 * (i as u64 + 100),
            size: 4096,
            valid: (0, 8),
            dirty: (0, 0),
            crc: None,
        };
    }
    m.entries[64] = MetaEntry {
        offset: 65536 * 3,
        size: 65536,
        valid: (0, 128),
        dirty: (8, 16),
        crc: None,
    };
    m
}

#[tokio::test]
async fn format_then_reopen_malloc() {
    let b = malloc("m0", 64);
    assert!(matches!(
        open(&b, false).await,
        Err(DeviceError::Unformatted(_))
    ));
    assert_eq!(sb_seqs(&b).await, [None, None], "a refusal writes nothing");
    let dev = open(&b, true).await.unwrap();
    // 64 MiB: 1 MiB header, 62 * 16 KiB of metadata padded to 1 MiB, 62 units.
    assert_eq!(dev.total_units(), 62);
    assert_eq!(dev.free_units(), 62);
    assert_eq!(dev.name(), "m0");
    assert!(dev.volumes().is_empty());
    let uuid = dev.uuid();
    drop(dev);
    let dev = open(&b, false).await.unwrap();
    assert_eq!(dev.uuid(), uuid);
    assert_eq!(dev.total_units(), 62);
    // Opening with format = true loads, never reformats, a formatted device.
    drop(dev);
    assert_eq!(open(&b, true).await.unwrap().uuid(), uuid);
}

#[tokio::test]
async fn format_then_reopen_file() {
    let dir = testkit::TempDir::new("cache-device");
    let path = dir.path().join("cache.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(40 * MIB)
        .unwrap();
    let file = |name: &str| {
        Arc::new(Bdev::File(
            bdev::file::FileBdev::open(name, &path, 0).unwrap(),
        ))
    };
    let b = file("f0");
    let dev = open(&b, true).await.unwrap();
    let units = dev.total_units();
    assert_eq!(units, 38);
    let v = dev.create_volume(spec("v", 5)).await.unwrap();
    dev.write_unit_meta(&v, 4, &meta(3), true).await.unwrap();
    drop((dev, b));
    let b = file("f0");
    let dev = open(&b, false).await.unwrap();
    assert_eq!(dev.total_units(), units);
    assert_eq!(dev.volumes(), vec![v.clone()]);
    assert_eq!(dev.read_unit_meta(&v, 4).await.unwrap(), meta(3));
}

#[tokio::test]
async fn too_small_or_large_blocks_refused() {
    let b = malloc("tiny", 2);
    let e = open(&b, true).await.err().expect("refused");
    assert!(matches!(e, DeviceError::Unsuitable { .. }), "{e}");
    let big = Arc::new(Bdev::Malloc(MallocBdev::new("big", 1024, 65536).unwrap()));
    let e = open(&big, true).await.err().expect("refused");
    assert!(e.to_string().contains("block size"), "{e}");
}

#[tokio::test]
async fn volumes_persist_across_reopen() {
    let b = malloc("m1", 64);
    let dev = open(&b, true).await.unwrap();
    let a = dev.create_volume(spec("a", 10)).await.unwrap();
    let c = dev.create_volume(spec("c", 20)).await.unwrap();
    assert_eq!(a.units, (0..10).collect::<Vec<_>>());
    assert_eq!(c.units, (10..30).collect::<Vec<_>>());
    assert_eq!(a.min_block, 4096);
    assert_eq!(a.block_sizes, vec![4096, 65536]);
    assert_ne!(a.id, c.id);
    assert_eq!(dev.free_units(), 32);
    // Grow a (its next units are taken: elsewhere), shrink c, delete nothing.
    let a = dev.resize_volume("a", 15).await.unwrap();
    assert_eq!(a.units[10..], [30, 31, 32, 33, 34]);
    let c = dev.resize_volume("c", 4).await.unwrap();
    assert_eq!(c.units, vec![10, 11, 12, 13]);
    assert_eq!(dev.free_units(), 62 - 19);
    // Byte addresses follow the unit list.
    let data = Geometry::for_units(62).data_offset;
    assert_eq!(data, 2 * MIB);
    assert_eq!(
        CacheDevice::data_offset(&a, 10 * UNIT_SIZE + 4096),
        data + 30 * UNIT_SIZE + 4096
    );
    assert_eq!(a.data_offset(5), data + 5);
    drop(dev);

    let dev = open(&b, false).await.unwrap();
    assert_eq!(dev.volumes(), vec![a.clone(), c.clone()]);
    assert_eq!(dev.find_volume("c"), Some(c));
    assert_eq!(dev.free_units(), 62 - 19);
    dev.delete_volume("c").await.unwrap();
    assert_eq!(dev.find_volume("c"), None);
    drop(dev);
    let dev = open(&b, false).await.unwrap();
    assert_eq!(dev.volumes(), vec![a]);
    assert_eq!(dev.free_units(), 62 - 15);
}

#[tokio::test]
async fn refusals_change_nothing() {
    let b = malloc("m2", 64);
    let dev = open(&b, true).await.unwrap();
    dev.create_volume(spec("a", 30)).await.unwrap();
    let before = raw(&b, 0, 64 * MIB).await;
    let bad = |f: fn(&mut VolumeSpec)| {
        let mut s = spec("b", 1);
        f(&mut s);
        s
    };
    let refused = [
        spec("a", 1),                              // name exists
        spec("b", 33),                             // no space
        bad(|s| s.units = 0),                      // no units
        bad(|s| s.name = String::new()),           // empty name
        bad(|s| s.name = "x".repeat(256)),         // name too long
        bad(|s| s.block_sizes = vec![]),           // no block size
        bad(|s| s.block_sizes = vec![3000]),       // not a power of two
        bad(|s| s.block_sizes = vec![2048]),       // below 4 KiB
        bad(|s| s.block_sizes = vec![4096, 4096]), // twice
        bad(|s| s.sector_size = 8192),             // sector above the smallest block
        bad(|s| s.group_size = 32768),             // group below the largest block
        bad(|s| s.group_size = 2 << 20),           // group above a unit
        bad(|s| s.volume_size = 0),                // empty volume
        bad(|s| s.volume_size = 1000),             // not whole sectors
    ];
    for s in refused {
        let name = s.name.clone();
        let e = dev
            .create_volume(s)
            .await
            .err()
            .unwrap_or_else(|| panic!("{name:?} accepted"));
        assert!(
            matches!(
                e,
                DeviceError::VolumeExists(_)
                    | DeviceError::NoSpace { .. }
                    | DeviceError::InvalidSpec { .. }
            ),
            "{e}"
        );
    }
    assert!(matches!(
        dev.resize_volume("a", 63).await,
        Err(DeviceError::NoSpace { .. })
    ));
    assert!(matches!(
        dev.resize_volume("a", 0).await,
        Err(DeviceError::InvalidSpec { .. })
    ));
    assert!(matches!(
        dev.resize_volume("x", 3).await,
        Err(DeviceError::NoSuchVolume(_))
    ));
    assert!(matches!(
        dev.delete_volume("x").await,
        Err(DeviceError::NoSuchVolume(_))
    ));
    assert_eq!(dev.resize_volume("a", 30).await.unwrap().units.len(), 30);
    assert!(
        raw(&b, 0, 64 * MIB).await == before,
        "a refusal wrote to the device"
    );
    assert_eq!(dev.volumes().len(), 1);
    assert_eq!(dev.free_units(), 32);
}

/// A superblock copy holding `sb`'s record with its version field set to
/// `version` (the record's own crc then fails, which a version check
/// precedes), stamped as a whole copy.
fn framed_sb(sb: &layout::Superblock, version: u32) -> Vec<u8> {
    let mut rec = layout::encode_superblock(sb);
    rec[8..12].copy_from_slice(&version.to_le_bytes());
    layout::frame::frame(&rec, sb.seq, layout::SB_TAG, layout::SB_COPY_SIZE as usize)
}

#[tokio::test]
async fn other_version_or_inconsistent_superblock_is_never_reformatted() {
    let b = malloc("m4", 64);
    open(&b, true).await.unwrap();
    let sb = |seq, units| layout::Superblock {
        seq,
        uuid: [1; 16],
        geometry: Geometry::for_units(units),
        volumes: vec![],
    };
    // A copy of a future version.
    let future = framed_sb(&sb(5, 62), layout::VERSION + 1);
    poke(&b, 0, &future).await;
    let e = open(&b, true).await.err().expect("refused");
    assert!(matches!(e, DeviceError::Version { .. }), "{e}");
    assert_eq!(
        raw(&b, 0, layout::SB_COPY_SIZE).await,
        future,
        "not reformatted"
    );
    // Also when the other copy is one this build reads: no downgrade.
    poke(
        &b,
        layout::SB_COPY_SIZE,
        &layout::frame_superblock(&sb(4, 62)),
    )
    .await;
    assert_eq!(sb_seqs(&b).await[1], Some(4));
    let e = open(&b, true).await.err().expect("refused");
    assert!(matches!(e, DeviceError::Version { .. }), "{e}");
    // A checksummed table for a bigger device than this one (as after the
    // bdev shrank) ...
    let bigger = layout::frame_superblock(&sb(9, 100));
    poke(&b, 0, &bigger).await;
    // ... beside an older usable copy may be the newest table: refused.
    let e = open(&b, true).await.err().expect("refused");
    assert!(matches!(e, DeviceError::Corrupt { .. }), "{e}");
    // Beside a newer usable copy, it is an old copy: ignored.
    poke(
        &b,
        layout::SB_COPY_SIZE,
        &layout::frame_superblock(&sb(10, 62)),
    )
    .await;
    let dev = open(&b, false).await.unwrap();
    assert_eq!(dev.total_units(), 62);
    assert_eq!(dev.metadata_errors().count(Damage::Malformed), 1);
    drop(dev);
    // Alone, it is refused, not formatted over.
    garble(&b, layout::SB_COPY_SIZE).await;
    let e = open(&b, true).await.err().expect("refused");
    assert!(matches!(e, DeviceError::Corrupt { .. }), "{e}");
    assert_eq!(raw(&b, 0, layout::SB_COPY_SIZE).await, bigger);
}

async fn volume_with_meta(b: &Arc<Bdev>) -> (Arc<CacheDevice>, VolumeRegion) {
    let dev = open(b, true).await.unwrap();
    let v = dev.create_volume(spec("v", 3)).await.unwrap();
    (dev, v)
}

#[tokio::test]
async fn unit_meta_round_trips_and_alternates_copies() {
    let b = malloc("m5", 64);
    let (dev, v) = volume_with_meta(&b).await;
    assert!(dev.read_unit_meta(&v, 1).await.unwrap().is_empty());
    let mut prev = meta_seqs(&b, &dev, &v, 1).await;
    for n in 1..=4 {
        dev.write_unit_meta(&v, 1, &meta(n), n % 2 == 0)
            .await
            .unwrap();
        let now = meta_seqs(&b, &dev, &v, 1).await;
        let w = newest(now);
        assert_eq!(now[w], Some(prev.iter().flatten().max().unwrap() + 1));
        assert_eq!(now[1 - w], prev[1 - w], "the newest copy before is kept");
        assert_ne!(w, newest(prev), "copies alternate");
        prev = now;
    }
    assert_eq!(dev.read_unit_meta(&v, 1).await.unwrap(), meta(4));
    let blocks = dev.load_volume_blocks(&v).await.unwrap();
    assert_eq!(blocks.len(), 5);
    assert_eq!(blocks[4], (1, 64, meta(0).entries[64]));
    assert!(dev.read_unit_meta(&v, 0).await.unwrap().is_empty());
}

#[tokio::test]
async fn right_after_open_the_next_write_keeps_the_newest_copy() {
    let b = malloc("m6", 64);
    let (dev, v) = volume_with_meta(&b).await;
    for n in 1..=3 {
        dev.write_unit_meta(&v, 2, &meta(n), true).await.unwrap();
    }
    let before = meta_seqs(&b, &dev, &v, 2).await;
    drop(dev);
    let dev = open(&b, false).await.unwrap();
    // No read first: the device must still find the newest copy.
    dev.write_unit_meta(&v, 2, &meta(9), true).await.unwrap();
    let after = meta_seqs(&b, &dev, &v, 2).await;
    assert_eq!(after[newest(before)], before[newest(before)]);
    assert_eq!(dev.read_unit_meta(&v, 2).await.unwrap(), meta(9));
}

#[tokio::test]
async fn freed_units_never_show_a_previous_owners_blocks() {
    let b = malloc("m8", 8); // 6 units
    let dev = open(&b, true).await.unwrap();
    assert_eq!(dev.total_units(), 6);
    let a = dev.create_volume(spec("a", 6)).await.unwrap();
    for i in 0..6 {
        dev.write_unit_meta(&a, i, &meta(u64::from(i) + 1), i % 2 == 0)
            .await
            .unwrap();
    }
    // Shrink and grow again: the same volume id and unit indices, so only
    // the emptying on grow keeps the old entries out.
    let a2 = dev.resize_volume("a", 2).await.unwrap();
    assert!(
        matches!(
            dev.write_unit_meta(&a, 4, &meta(1), true).await,
            Err(DeviceError::NotOwned { .. })
        ),
        "a stale region cannot write a dropped unit"
    );
    let a3 = dev.resize_volume("a", 6).await.unwrap();
    assert_eq!(a3.units, a.units);
    assert_eq!(
        dev.read_unit_meta(&a3, 1).await.unwrap(),
        meta(2),
        "kept units keep theirs"
    );
    for i in 2..6 {
        assert!(
            dev.read_unit_meta(&a3, i).await.unwrap().is_empty(),
            "unit {i}"
        );
    }
    assert_eq!(a2.units, a.units[..2]);
    // Another volume on the same units after a delete.
    for i in 0..6 {
        dev.write_unit_meta(&a3, i, &meta(5), false).await.unwrap();
    }
    dev.delete_volume("a").await.unwrap();
    let c = dev.create_volume(spec("c", 6)).await.unwrap();
    drop(dev);
    let dev = open(&b, false).await.unwrap();
    assert!(dev.load_volume_blocks(&c).await.unwrap().is_empty());
}

#[tokio::test]
async fn refused_meta_and_stale_regions() {
    let b = malloc("m9", 64);
    let (dev, v) = volume_with_meta(&b).await;
    // A 4 KiB block inside the 64 KiB block of entry 64.
    let mut inside = meta(1);
    inside.entries[65] = MetaEntry {
        offset: 0,
        size: 4096,
        valid: (0, 8),
        dirty: (0, 0),
        crc: None,
    };
    // A 64 KiB block at a cache address that is not a multiple of 64 KiB.
    let mut unaligned = UnitMeta::empty(256);
    unaligned.entries[1] = meta(0).entries[64];
    let cases = [
        UnitMeta::empty(255),
        inside,
        unaligned,
        {
            let mut m = UnitMeta::empty(256);
            m.entries[0] = MetaEntry {
                offset: 4096,
                size: 8192,
                valid: (0, 1),
                dirty: (0, 0),
                crc: None,
            };
            m
        },
        {
            let mut m = UnitMeta::empty(256);
            m.entries[255] = MetaEntry {
                offset: 0,
                size: 65536,
                valid: (0, 1),
                dirty: (0, 0),
                crc: None,
            };
            m
        },
        {
            let mut m = UnitMeta::empty(256);
            m.entries[0] = MetaEntry {
                offset: 0,
                size: 4096,
                valid: (0, 9),
                dirty: (0, 0),
                crc: None,
            };
            m
        },
        {
            let mut m = UnitMeta::empty(256);
            m.entries[0] = MetaEntry {
                offset: 1 << 30,
                size: 4096,
                valid: (0, 1),
                dirty: (0, 0),
                crc: None,
            };
            m
        },
    ];
    for m in cases {
        let e = dev
            .write_unit_meta(&v, 0, &m, true)
            .await
            .expect_err("refused");
        assert!(matches!(e, DeviceError::InvalidMeta { .. }), "{e}");
    }
    assert!(matches!(
        dev.read_unit_meta(&v, 3).await,
        Err(DeviceError::NotOwned { .. })
    ));
    let gone = v.clone();
    dev.delete_volume("v").await.unwrap();
    assert!(matches!(
        dev.read_unit_meta(&gone, 0).await,
        Err(DeviceError::NotOwned { .. })
    ));
}

/// The cache device over an error-injecting bdev.
fn faulty(name: &str) -> (Arc<Bdev>, CountedBdev) {
    let base = CountedBdev::from(malloc(name, 64));
    let b = Arc::new(Bdev::Error(ErrorBdev::new(&format!("EE_{name}"), base)));
    (Arc::clone(&b), CountedBdev::from(b))
}

fn inject(b: &Bdev, kind: IoKind, n: u32) {
    let Bdev::Error(e) = b else { unreachable!() };
    e.inject(IoTypeSel::Kind(kind), ErrorType::Failure, n)
        .unwrap();
}

#[tokio::test]
async fn failed_operations_commit_nothing() {
    let (b, counted) = faulty("m10");
    let dev = CacheDevice::open(counted.clone(), true).await.unwrap();
    let a = dev.create_volume(spec("a", 4)).await.unwrap();
    // The flush after emptying the units fails: no table is written.
    inject(&b, IoKind::Flush, 1);
    let e = dev.create_volume(spec("c", 4)).await.expect_err("failed");
    assert!(matches!(e, DeviceError::Io { .. }), "{e}");
    assert_eq!(dev.volumes(), vec![a.clone()]);
    // The table write of a delete fails: still there, here and on disk.
    inject(&b, IoKind::Write, 1);
    assert!(dev.delete_volume("a").await.is_err());
    assert_eq!(dev.volumes(), vec![a.clone()]);
    drop(dev);
    let dev = CacheDevice::open(counted.clone(), false).await.unwrap();
    assert_eq!(dev.volumes(), vec![a.clone()]);
    assert_eq!(dev.free_units(), 58);
    // A failed metadata write: the next one still keeps the newest copy.
    dev.write_unit_meta(&a, 0, &meta(1), true).await.unwrap();
    inject(&b, IoKind::Write, 1);
    assert!(dev.write_unit_meta(&a, 0, &meta(2), true).await.is_err());
    dev.write_unit_meta(&a, 0, &meta(3), true).await.unwrap();
    assert_eq!(dev.read_unit_meta(&a, 0).await.unwrap(), meta(3));
    drop(dev);
    let dev = CacheDevice::open(counted, false).await.unwrap();
    assert_eq!(dev.read_unit_meta(&a, 0).await.unwrap(), meta(3));
}

#[tokio::test]
async fn a_non_durable_copy_is_flushed_before_its_twin_is_overwritten() {
    let b = malloc("m11", 64);
    let counted = CountedBdev::from(Arc::clone(&b));
    let dev = CacheDevice::open(counted.clone(), true).await.unwrap();
    let v = dev.create_volume(spec("v", 2)).await.unwrap();
    let flushes = || counted.stats().num_flush_ops.get();
    let f0 = flushes();
    dev.write_unit_meta(&v, 0, &meta(1), false).await.unwrap();
    assert_eq!(flushes(), f0, "the emptied copies were flushed");
    dev.write_unit_meta(&v, 0, &meta(2), false).await.unwrap();
    assert_eq!(
        flushes(),
        f0 + 1,
        "meta(1) made durable before its twin is overwritten"
    );
    dev.flush().await.unwrap();
    dev.write_unit_meta(&v, 0, &meta(3), true).await.unwrap();
    assert_eq!(flushes(), f0 + 2, "a device flush covered meta(2)");
    dev.write_unit_meta(&v, 0, &meta(4), false).await.unwrap();
    assert_eq!(flushes(), f0 + 2, "meta(3) was written with FUA");
    dev.write_unit_meta(&v, 1, &meta(4), false).await.unwrap();
    assert_eq!(flushes(), f0 + 2, "other units are independent");
}

/// Volumes share the device across tasks: it and its futures are Send.
#[test]
fn device_and_its_futures_are_send() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<CacheDevice>();
    let b = malloc("m12", 8);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let dev = rt.block_on(open(&b, true)).unwrap();
    let v = rt.block_on(dev.create_volume(spec("v", 1))).unwrap();
    let m = UnitMeta::empty(256);
    send(&dev.write_unit_meta(&v, 0, &m, true));
    send(&dev.read_unit_meta(&v, 0));
    send(&dev.load_volume_blocks(&v));
    send(&dev.resize_volume("v", 2));
    send(&dev.create_volume(spec("w", 1)));
    send(&dev.delete_volume("v"));
    send(&CacheDevice::open(CountedBdev::from(b), false));
}

/// 4 KiB device blocks: every record write is rounded up to whole blocks.
#[tokio::test]
async fn four_kib_blocks() {
    let b = Arc::new(Bdev::Malloc(
        MallocBdev::new("m4k", 16 * 256, 4096).unwrap(),
    ));
    let dev = open(&b, true).await.unwrap();
    assert_eq!(dev.total_units(), 14);
    let v = dev.create_volume(spec("v", 14)).await.unwrap();
    dev.write_unit_meta(&v, 13, &meta(7), false).await.unwrap();
    dev.write_unit_meta(&v, 13, &meta(8), false).await.unwrap();
    dev.flush().await.unwrap();
    drop(dev);
    let dev = open(&b, false).await.unwrap();
    assert_eq!(dev.volumes(), vec![v.clone()]);
    assert_eq!(dev.read_unit_meta(&v, 13).await.unwrap(), meta(8));
    assert_eq!(dev.free_units(), 0);
}
