//! Checksums of dirty data (docs/cache-format.md, "Checksums of dirty
//! data"): bit rot on the cache device under acknowledged write-back data
//! is found when the volume loads and before a write-back, the damaged
//! bytes are never served or written to core, and everything else is.

use std::sync::Arc;

mod common;

use common::{create, params, poke, raw, Devices, Rng};

use bdev::{Bdev, BdevError, DmaBuf};
use cache::device::{CacheDevice, MetaEntry, VolumeRegion};
use cache::layout::UNIT_SIZE;
use cache::volume::{CachedVolume, VolumeParams};

const MIB: u64 = 1 << 20;
const BLOCK: usize = 4096;

fn write_back(extra: serde_json::Value) -> VolumeParams {
    let mut p = params(serde_json::json!({"write_mode": "wb", "cleaning": {"policy": "nop"}}));
    if let Some(on) = extra.get("data_checksums") {
        p.data_checksums = on.as_bool().unwrap();
    }
    p
}

/// Writes 4 KiB of fresh random bytes at `i` MiB and returns them.
async fn write_block(b: &Bdev, rng: &mut Rng, i: u64) -> Vec<u8> {
    let mut buf = DmaBuf::new(BLOCK);
    rng.fill(&mut buf);
    let data = buf.to_vec();
    let (_, r) = b.write(i * MIB, buf).await;
    r.unwrap();
    data
}

async fn read_block(b: &Bdev, i: u64) -> Result<Vec<u8>, BdevError> {
    let (buf, r) = b.read(i * MIB, DmaBuf::new(BLOCK)).await;
    r.map(|()| buf.to_vec())
}

/// The device's entry for the block at volume offset `offset`, and where
/// its first dirty byte lies on the device.
async fn entry_at(dev: &CacheDevice, region: &VolumeRegion, offset: u64) -> (MetaEntry, u64) {
    let min = u64::from(region.min_block);
    let (u, i, e) = dev
        .load_volume_blocks(region)
        .await
        .unwrap()
        .into_iter()
        .find(|(_, _, e)| e.offset == offset)
        .expect("the block has an entry");
    let addr = u64::from(u) * UNIT_SIZE + u64::from(i) * min;
    let at = region.data_offset(addr) + u64::from(e.dirty.0) * u64::from(region.sector_size);
    (e, at)
}

/// Flips one bit of the byte at device offset `at`.
async fn flip_bit(cache: &Bdev, at: u64) {
    let sector = at - at % 512;
    let mut s = raw(cache, sector, 512).await;
    s[(at - sector) as usize] ^= 0x10;
    poke(cache, sector, &s).await;
}

fn assert_media_error(r: Result<Vec<u8>, BdevError>) {
    match r {
        Err(BdevError::Integrity(m)) => assert!(m.contains("failed its checksum"), "{m}"),
        other => panic!("expected a checksum error, got {:?}", other.map(|_| "data")),
    }
}

#[tokio::test]
async fn a_flipped_bit_under_dirty_data_is_found_at_load_never_served_nor_written_back() {
    let d = Devices::new(64, 16, false);
    let dev = d.open_cache().await;
    let p = write_back(serde_json::json!({}));
    let (vol, b) = create(&d, &dev, p.clone()).await;
    let mut rng = Rng(7);
    let mut data = Vec::new();
    for i in 0..8 {
        data.push(write_block(&b, &mut rng, i).await);
    }
    vol.stop(false).await.unwrap();
    let region = dev.find_volume("Cache0").unwrap();
    let (entry, at) = entry_at(&dev, &region, 3 * MIB).await;
    // The checksum on the device is the one of the bytes the host wrote.
    assert_eq!(entry.crc, Some(crc32c::crc32c(&data[3])));
    drop((vol, b, dev));
    flip_bit(d.cache.bdev(), at + 100).await;

    let dev = d.open_cache().await;
    let vol = CachedVolume::create(
        VolumeParams { load: true, ..p },
        d.core.clone(),
        dev.clone(),
    )
    .await
    .expect("the volume loads: only the damaged block is refused");
    let b = Arc::new(vol.bdev());
    let stats = vol.stats().await.unwrap();
    assert_eq!((stats.damaged_bytes, stats.dirty_bytes), (4096, 8 * 4096));
    assert_eq!(dev.metadata_errors().data_checksum(), 1);
    assert_media_error(read_block(&b, 3).await);
    assert_eq!(read_block(&b, 2).await.unwrap(), data[2]);

    // A flush writes back everything else and fails naming the damage.
    let e = vol
        .flush_all()
        .await
        .expect_err("the damaged block is not written back");
    assert!(e.to_string().contains("failed its checksum"), "{e}");
    assert_eq!(vol.stats().await.unwrap().dirty_bytes, 4096);
    for i in [0, 1, 2, 4, 5, 6, 7] {
        let core = raw(d.core_ram.bdev(), i * MIB, BLOCK as u64).await;
        assert_eq!(core, data[i as usize], "block {i} reached core");
    }
    let core = raw(d.core_ram.bdev(), 3 * MIB, BLOCK as u64).await;
    assert_eq!(core, vec![0; BLOCK], "damaged bytes never reach core");
    // A partial overwrite does not replace what was lost: still refused.
    let (_, r) = b.write(3 * MIB, DmaBuf::new(512)).await;
    assert!(matches!(r, Err(BdevError::Integrity(_))), "{r:?}");

    // A write of the whole damaged range replaces it.
    let fresh = write_block(&b, &mut rng, 3).await;
    assert_eq!(read_block(&b, 3).await.unwrap(), fresh);
    vol.flush_all().await.unwrap();
    assert_eq!(vol.stats().await.unwrap().damaged_bytes, 0);
    assert_eq!(raw(d.core_ram.bdev(), 3 * MIB, BLOCK as u64).await, fresh);
    vol.stop(false).await.unwrap();
}

#[tokio::test]
async fn rot_under_a_running_volume_is_caught_before_write_back() {
    rot_under_a_running_volume(Devices::new(64, 16, false), false).await;
}

/// The same on devices that do not answer at once: reads of hits are
/// granted to the caller, or planned.
#[tokio::test]
async fn rot_under_a_running_volume_on_slower_devices() {
    rot_under_a_running_volume(Devices::delayed(64, 16), false).await;
}

/// A read of the rotted block finds it first.
#[tokio::test]
async fn a_read_of_rotted_dirty_bytes_gets_a_media_error() {
    rot_under_a_running_volume(Devices::new(64, 16, false), true).await;
    rot_under_a_running_volume(Devices::delayed(64, 16), true).await;
}

async fn rot_under_a_running_volume(d: Devices, read_first: bool) {
    let dev = d.open_cache().await;
    let (vol, b) = create(&d, &dev, write_back(serde_json::json!({}))).await;
    let mut rng = Rng(9);
    let mut data = Vec::new();
    for i in 0..4 {
        data.push(write_block(&b, &mut rng, i).await);
    }
    let region = dev.find_volume("Cache0").unwrap();
    let (_, at) = entry_at(&dev, &region, MIB).await;
    flip_bit(d.cache.bdev(), at + 4000).await;

    if read_first {
        // Part of the block's dirty bytes cannot be verified: served.
        let (_, r) = b.read(MIB, DmaBuf::new(2048)).await;
        r.expect("a read of part of the dirty bytes is not verified");
        assert_media_error(read_block(&b, 1).await);
        assert_eq!(vol.stats().await.unwrap().damaged_bytes, 4096);
        assert_eq!(dev.metadata_errors().data_checksum(), 1);
        // Known damaged now: any read of it is refused.
        let (_, r) = b.read(MIB, DmaBuf::new(2048)).await;
        assert!(matches!(r, Err(BdevError::Integrity(_))), "{r:?}");
        assert_eq!(read_block(&b, 2).await.unwrap(), data[2]);
    }
    let e = vol
        .flush_all()
        .await
        .expect_err("rot is found before write-back");
    assert!(e.to_string().contains(&format!("bytes {MIB}+4096")), "{e}");
    assert_eq!(
        raw(d.core_ram.bdev(), MIB, BLOCK as u64).await,
        vec![0; BLOCK]
    );
    for i in [0, 2, 3] {
        assert_eq!(
            raw(d.core_ram.bdev(), i * MIB, BLOCK as u64).await,
            data[i as usize]
        );
    }
    let stats = vol.stats().await.unwrap();
    assert_eq!((stats.damaged_bytes, stats.dirty_bytes), (4096, 4096));
    assert_eq!(dev.metadata_errors().data_checksum(), 1);
    assert_media_error(read_block(&b, 1).await);
    // Found again by the next flush, counted once.
    vol.flush_all().await.expect_err("still damaged");
    assert_eq!(dev.metadata_errors().data_checksum(), 1);
    vol.stop(false).await.unwrap();
}

/// The device's entry for the block at `offset` once it has its checksum
/// (or `None` after the wait: pending checksums go into entries once their
/// block was left alone for a second, at the next cleaning tick).
async fn settled_crc_at(dev: &CacheDevice, region: &VolumeRegion, offset: u64) -> Option<u32> {
    for _ in 0..40 {
        if let Some(c) = entry_at(dev, region, offset).await.0.crc {
            return Some(c);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    None
}

async fn settled_crc(dev: &CacheDevice, region: &VolumeRegion) -> Option<u32> {
    settled_crc_at(dev, region, 0).await
}

#[tokio::test]
async fn a_checksum_goes_on_the_device_once_its_block_rests_and_leaves_it_before_a_write() {
    let d = Devices::new(64, 16, false);
    let dev = d.open_cache().await;
    let (vol, b) = create(&d, &dev, write_back(serde_json::json!({}))).await;
    let region = dev.find_volume("Cache0").unwrap();
    let writes = || d.cache.stats().num_write_ops.get();
    let mut rng = Rng(11);
    let first = write_block(&b, &mut rng, 0).await;
    // Known in memory at once (a write-back would verify it), on the
    // device only once the block rests: a hot block's overwrites cost no
    // metadata write for their checksums.
    assert_eq!(entry_at(&dev, &region, 0).await.0.crc, None);
    let before = writes();
    let hot = write_block(&b, &mut rng, 0).await;
    assert_eq!(
        writes() - before,
        1,
        "an overwrite of a block with no checksum on the device writes its data only"
    );
    assert_eq!(settled_crc(&dev, &region).await, Some(crc32c::crc32c(&hot)));
    assert_ne!(first, hot);

    // Overwritten once its checksum is on the device: the entry loses it
    // (durably, before the data lands) so that a crash in the middle of the
    // write never leaves a checksum the half-written bytes fail...
    let before = writes();
    let whole = write_block(&b, &mut rng, 0).await;
    assert_eq!(entry_at(&dev, &region, 0).await.0.crc, None);
    assert_eq!(
        writes() - before,
        2,
        "the metadata write that drops the checksum, then the data"
    );
    // ... and gets the new one once it rests again.
    assert_eq!(
        settled_crc(&dev, &region).await,
        Some(crc32c::crc32c(&whole))
    );

    // A write of part of the dirty bytes leaves none to vouch for them.
    let (_, r) = b.write(0, DmaBuf::from_slice(&[7u8; 2048])).await;
    r.unwrap();
    assert_eq!(settled_crc(&dev, &region).await, None);
    // Cleaned, then written whole again: checked again.
    vol.flush_all().await.unwrap();
    let again = write_block(&b, &mut rng, 0).await;
    assert_eq!(
        settled_crc(&dev, &region).await,
        Some(crc32c::crc32c(&again))
    );
    vol.stop(false).await.unwrap();
}

/// The metadata write that drops one block's checksum is its whole unit's:
/// the unit's other checksums leave the device in it and wait in memory,
/// still guarding reads, so that the next overwrites into the unit wait
/// for no metadata write; they go back once the unit rests.
#[tokio::test]
async fn an_overwrite_takes_its_units_checksums_off_the_device_until_it_rests() {
    let d = Devices::new(64, 16, false);
    let dev = d.open_cache().await;
    let (vol, b) = create(&d, &dev, write_back(serde_json::json!({}))).await;
    let region = dev.find_volume("Cache0").unwrap();
    let writes = || d.cache.stats().num_write_ops.get();
    let mut rng = Rng(12);
    let mut data = Vec::new();
    for i in 0..3 {
        data.push(write_block(&b, &mut rng, i).await);
    }
    let unit_of = |at: u64| (at - region.data_offset(0)) / UNIT_SIZE;
    let mut units = Vec::new();
    for i in 0..3 {
        let crc = settled_crc_at(&dev, &region, i * MIB).await;
        assert_eq!(crc, Some(crc32c::crc32c(&data[i as usize])), "block {i}");
        units.push(unit_of(entry_at(&dev, &region, i * MIB).await.1));
    }
    assert!(
        units.iter().all(|&u| u == units[0]),
        "the test needs the three blocks in one unit: {units:?}"
    );

    let before = writes();
    data[0] = write_block(&b, &mut rng, 0).await;
    assert_eq!(writes() - before, 2, "the unit's metadata, then the data");
    for i in 0..3 {
        let (e, _) = entry_at(&dev, &region, i * MIB).await;
        assert_eq!(
            e.crc, None,
            "block {i}: its unit's checksums left the device"
        );
    }
    let before = writes();
    data[1] = write_block(&b, &mut rng, 1).await;
    assert_eq!(
        writes() - before,
        1,
        "the next overwrite writes its data only"
    );

    // The checksum of block 2 still guards it from memory.
    let (_, at) = entry_at(&dev, &region, 2 * MIB).await;
    flip_bit(d.cache.bdev(), at + 100).await;
    assert_media_error(read_block(&b, 2).await);
    // A write of the whole block heals it.
    data[2] = write_block(&b, &mut rng, 2).await;
    assert_eq!(read_block(&b, 2).await.unwrap(), data[2]);

    // Rested, every checksum is back on the device.
    for i in 0..3 {
        let crc = settled_crc_at(&dev, &region, i * MIB).await;
        assert_eq!(crc, Some(crc32c::crc32c(&data[i as usize])), "block {i}");
    }
    vol.stop(false).await.unwrap();
}

#[tokio::test]
async fn checksums_off_vouches_for_nothing() {
    let d = Devices::new(64, 16, false);
    let dev = d.open_cache().await;
    let p = write_back(serde_json::json!({"data_checksums": false}));
    let (vol, b) = create(&d, &dev, p).await;
    let region = dev.find_volume("Cache0").unwrap();
    write_block(&b, &mut Rng(3), 0).await;
    // A stop puts every known checksum on the device: there is none.
    vol.stop(false).await.unwrap();
    assert_eq!(entry_at(&dev, &region, 0).await.0.crc, None);
}
