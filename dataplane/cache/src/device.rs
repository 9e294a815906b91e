//! A cache device shared by cached volumes (see `docs/cache-format.md`):
//! formatting and loading, the volume table with its allocator of 1 MiB
//! units, and the per-unit metadata records the volumes persist their
//! blocks in.
//!
//! Table changes are serialized by one async mutex and committed by writing
//! the superblock copy that does not hold the newest version, then flushing.
//! Unit metadata alternates between two copies the same way; the device
//! remembers per unit which copy is newest and whether it is durable yet.

mod alloc;
mod error;
mod integrity;
mod meta;
mod signature;
mod table;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bdev::{BdevError, CountedBdev, DmaBuf};
use futures_util::{StreamExt, TryStreamExt};

use crate::layout::pick::{self, Choice};
use crate::layout::{self, Geometry, Superblock, UnitHeader};
pub use crate::layout::{MetaEntry, UnitMeta, VolumeRegion, UNIT_SIZE};
pub use error::DeviceError;
pub use integrity::MetadataErrors;
pub use signature::probe as probe_signatures;

/// What [`CacheDevice::open_with`] may do to a device without a format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Load only: a device without a format is refused.
    Never,
    /// Format a blank device (no signature of ours or of anything else);
    /// refuse any other.
    IfBlank,
    /// Format whatever is there: destroys every volume on the device,
    /// write-back data included. Only when the user said so.
    Wipe,
}

/// Unit-metadata reads or writes in flight at once for one operation.
const CONCURRENCY: usize = 32;

/// Parameters of a new volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeSpec {
    /// Unique name on the device (1 to 255 bytes of UTF-8).
    pub name: String,
    /// Size of the cached volume in bytes.
    pub volume_size: u64,
    /// Host sector size.
    pub sector_size: u32,
    /// Engine block sizes (powers of two, 4 KiB to 1 MiB).
    pub block_sizes: Vec<u32>,
    /// Engine group size (a power of two up to 1 MiB).
    pub group_size: u32,
    /// Units of cache space.
    pub units: u32,
}

/// The newest table on the device and where it is.
struct TableState {
    seq: u64,
    /// The copy (0 = A, 1 = B) holding `seq`; the next write goes to the other.
    copy: usize,
}

/// What the device knows of one unit's metadata copies.
#[derive(Clone, Copy, Debug)]
struct UnitState {
    /// Seq of the newest valid copy of the owner (0 if none).
    seq: u64,
    /// The copy holding it, if any.
    copy: Option<usize>,
    /// For a write not yet known durable: the flushes started when it
    /// completed (a flush started after that makes it durable). Copies
    /// read from the device are durable: `open` flushes.
    unflushed: Option<u64>,
    /// A write failed: the copies must be read again before the next one.
    reread: bool,
}

/// A formatted cache device. Shared by its volumes as `Arc`.
pub struct CacheDevice {
    bdev: CountedBdev,
    name: String,
    uuid: [u8; 16],
    geometry: Geometry,
    /// Serializes table changes.
    table: tokio::sync::Mutex<TableState>,
    /// The committed table, for the synchronous getters.
    current: RwLock<Arc<Superblock>>,
    /// Per device unit, once read or written.
    units: Mutex<HashMap<u32, UnitState>>,
    flushes_started: AtomicU64,
    flushes_done: AtomicU64,
    /// Damaged metadata copies seen.
    errors: MetadataErrors,
}

impl CacheDevice {
    /// Loads the format from `bdev` if a valid superblock exists, else
    /// formats a blank device (`format` false refuses an unformatted device
    /// instead). See [`CacheDevice::open_with`].
    pub async fn open(bdev: CountedBdev, format: bool) -> Result<Arc<CacheDevice>, DeviceError> {
        let how = if format {
            Format::IfBlank
        } else {
            Format::Never
        };
        Self::open_with(bdev, how).await
    }

    /// Loads the format from `bdev`, or formats it as `how` allows. A
    /// superblock of another version, one that is valid but does not fit,
    /// or a damaged one that may hold a newer table than the valid copy is
    /// refused (never reformatted) unless `how` is [`Format::Wipe`].
    pub async fn open_with(
        bdev: CountedBdev,
        how: Format,
    ) -> Result<Arc<CacheDevice>, DeviceError> {
        let name = bdev.info().name.clone();
        let block_size = u64::from(bdev.info().block_size);
        let unsuitable = |reason: String| DeviceError::Unsuitable {
            device: name.clone(),
            reason,
        };
        if block_size > layout::META_COPY_SIZE {
            return Err(unsuitable(format!(
                "block size {block_size} is larger than a metadata copy ({})",
                layout::META_COPY_SIZE
            )));
        }
        let max = Geometry::for_device(bdev.info().size_bytes());
        if max.units == 0 {
            return Err(unsuitable(format!(
                "{} bytes hold no unit (at least {} needed)",
                bdev.info().size_bytes(),
                Geometry::for_units(1).device_bytes()
            )));
        }
        if how == Format::Wipe {
            return Self::format(bdev, max).await;
        }
        let (buf, r) = bdev
            .read(0, DmaBuf::new(layout::HEADER_AREA as usize))
            .await;
        r.map_err(|source| DeviceError::Io {
            device: name.clone(),
            what: "reading the superblock copies".into(),
            source,
        })?;
        let errors = MetadataErrors::default();
        let copies = table::judge_copies(&name, &buf, max.units, &errors)?;
        let (copy, sb) = match pick::choose(copies) {
            Choice::Use { copy, value, .. } => (copy, value),
            Choice::Lost { surviving } => return Err(table::lost(&name, surviving)),
            Choice::Initial if how == Format::IfBlank => {
                tracing::warn!(device = %name, "an interrupted format found: formatting again");
                return Self::format(bdev, max).await;
            }
            Choice::Blank if how == Format::IfBlank => {
                signature::refuse_unless_blank(&bdev).await?;
                return Self::format(bdev, max).await;
            }
            Choice::Initial | Choice::Blank => return Err(DeviceError::Unformatted(name)),
        };
        // Whatever the device holds now (a previous process may have left
        // writes in its volatile cache) is durable from here on: a unit's
        // metadata copy read later may have its twin overwritten at once.
        bdev.flush().await.map_err(|source| DeviceError::Io {
            device: name.clone(),
            what: "flushing after load".into(),
            source,
        })?;
        tracing::info!(device = %name, uuid = %uuid::Uuid::from_bytes(sb.uuid),
            units = sb.geometry.units, volumes = sb.volumes.len(), seq = sb.seq,
            copy, "cache device loaded");
        Ok(Arc::new(Self::new(bdev, sb, copy, errors)))
    }

    fn new(bdev: CountedBdev, sb: Superblock, copy: usize, errors: MetadataErrors) -> Self {
        Self {
            name: bdev.info().name.clone(),
            bdev,
            uuid: sb.uuid,
            geometry: sb.geometry,
            table: tokio::sync::Mutex::new(TableState { seq: sb.seq, copy }),
            current: RwLock::new(Arc::new(sb)),
            units: Mutex::new(HashMap::new()),
            flushes_started: AtomicU64::new(0),
            flushes_done: AtomicU64::new(0),
            errors,
        }
    }

    /// Writes an empty table with a new identity into both copies (seq 1
    /// in A, 2 in B: versions 1 and 2 are initial content, see
    /// [`pick::INITIAL_SEQS`]), in one write, and flushes. Called on a blank
    /// device, after an interrupted format, or when asked to wipe; stale
    /// unit metadata needs no clearing (see `create_volume`).
    async fn format(bdev: CountedBdev, geometry: Geometry) -> Result<Arc<Self>, DeviceError> {
        let mut uuid = [0u8; 16];
        getrandom::fill(&mut uuid).map_err(|e| DeviceError::Random {
            what: "the device uuid",
            reason: e.to_string(),
        })?;
        let uuid = *uuid::Builder::from_random_bytes(uuid).as_uuid().as_bytes();
        let mut sb = Superblock {
            seq: 1,
            uuid,
            geometry,
            volumes: Vec::new(),
        };
        let mut buf = DmaBuf::new(layout::HEADER_AREA as usize);
        buf[..layout::SB_COPY_SIZE as usize].copy_from_slice(&layout::frame_superblock(&sb));
        sb.seq = 2;
        buf[layout::SB_COPY_SIZE as usize..].copy_from_slice(&layout::frame_superblock(&sb));
        let name = bdev.info().name.clone();
        let io = |what: &str, source| DeviceError::Io {
            device: name.clone(),
            what: what.into(),
            source,
        };
        let (_, r) = bdev.write(0, buf).await;
        r.map_err(|s| io("formatting (writing both superblock copies)", s))?;
        bdev.flush()
            .await
            .map_err(|s| io("flushing the format", s))?;
        tracing::info!(device = %name, uuid = %uuid::Uuid::from_bytes(uuid),
            units = geometry.units, "cache device formatted");
        Ok(Arc::new(Self::new(bdev, sb, 1, MetadataErrors::default())))
    }

    /// The device's bdev.
    pub fn bdev(&self) -> &CountedBdev {
        &self.bdev
    }

    /// The bdev's name.
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// The identity written when the device was formatted.
    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }

    /// Units of the data area.
    pub fn total_units(&self) -> u32 {
        self.geometry.units
    }

    /// Units no volume has.
    pub fn free_units(&self) -> u32 {
        let sb = self.snapshot();
        let used: usize = sb.volumes.iter().map(|v| v.units.len()).sum();
        self.geometry.units - used as u32
    }

    /// The volume table as committed on the device.
    pub fn volumes(&self) -> Vec<VolumeRegion> {
        self.snapshot()
            .volumes
            .iter()
            .map(|v| self.region(v))
            .collect()
    }

    /// The volume `name` as committed on the device.
    pub fn find_volume(&self, name: &str) -> Option<VolumeRegion> {
        let sb = self.snapshot();
        sb.volumes
            .iter()
            .find(|v| v.name == name)
            .map(|v| self.region(v))
    }

    fn region(&self, v: &VolumeRegion) -> VolumeRegion {
        VolumeRegion {
            data_start: self.geometry.data_offset,
            ..v.clone()
        }
    }

    fn snapshot(&self) -> Arc<Superblock> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Byte offset on the bdev of `cache_offset` inside the volume's cache
    /// space. Panics if `cache_offset` is beyond the region (a caller bug).
    pub fn data_offset(region: &VolumeRegion, cache_offset: u64) -> u64 {
        region.data_offset(cache_offset)
    }

    /// Allocates `spec.units` units for a new volume. Their metadata is
    /// emptied (both copies, stamped with the new volume's id) and flushed
    /// before the table that gives them to the volume is written, so stale
    /// metadata of a previous owner is never read as the new volume's.
    /// Refusals change nothing.
    pub async fn create_volume(&self, spec: VolumeSpec) -> Result<VolumeRegion, DeviceError> {
        let mut st = self.table.lock().await;
        let sb = self.snapshot();
        let mut block_sizes = spec.block_sizes.clone();
        block_sizes.sort_unstable();
        let mut region = VolumeRegion {
            name: spec.name.clone(),
            id: 0,
            volume_size: spec.volume_size,
            sector_size: spec.sector_size,
            min_block: block_sizes.first().copied().unwrap_or(0),
            block_sizes,
            group_size: spec.group_size,
            units: vec![0; spec.units as usize],
            data_start: self.geometry.data_offset,
        };
        layout::check_volume(&region).map_err(|reason| DeviceError::InvalidSpec {
            name: spec.name.clone(),
            reason,
        })?;
        if sb.volumes.iter().any(|v| v.name == spec.name) {
            return Err(DeviceError::VolumeExists(spec.name));
        }
        region.units =
            alloc::allocate(&self.used(&sb), spec.units, None).ok_or(DeviceError::NoSpace {
                name: spec.name.clone(),
                wanted: spec.units,
                free: self.free_units(),
            })?;
        region.id = loop {
            let id = getrandom::u64().map_err(|e| DeviceError::Random {
                what: "a volume id",
                reason: e.to_string(),
            })?;
            if !sb.volumes.iter().any(|v| v.id == id) {
                break id;
            }
        };
        let mut volumes = sb.volumes.clone();
        volumes.push(region.clone());
        self.check_fits(&st, &volumes)?;
        let given: Vec<(u32, u32)> = region.units.iter().copied().zip(0..).collect();
        self.empty_units(&region, &given).await?;
        self.commit(&mut st, volumes).await?;
        tracing::info!(device = %self.name, volume = %region.name, id = region.id,
            units = spec.units, "cache volume created");
        Ok(region)
    }

    /// Grows (appends units, their metadata emptied first as in
    /// `create_volume`) or shrinks (drops the last units) volume `name` to
    /// `units` units. The table write is the commit point.
    pub async fn resize_volume(&self, name: &str, units: u32) -> Result<VolumeRegion, DeviceError> {
        let mut st = self.table.lock().await;
        let sb = self.snapshot();
        let pos = sb.volumes.iter().position(|v| v.name == name);
        let pos = pos.ok_or_else(|| DeviceError::NoSuchVolume(name.to_owned()))?;
        let mut region = self.region(&sb.volumes[pos]);
        let have = region.units.len() as u32;
        if units == 0 {
            return Err(DeviceError::InvalidSpec {
                name: name.to_owned(),
                reason: "a volume needs at least one unit (delete it instead)".into(),
            });
        }
        if units == have {
            return Ok(region);
        }
        let dropped: Vec<u32> = if units > have {
            let more = alloc::allocate(&self.used(&sb), units - have, region.units.last().copied());
            let more = more.ok_or(DeviceError::NoSpace {
                name: name.to_owned(),
                wanted: units - have,
                free: self.free_units(),
            })?;
            region.units.extend(more);
            Vec::new()
        } else {
            region.units.split_off(units as usize)
        };
        let mut volumes = sb.volumes.clone();
        volumes[pos] = region.clone();
        self.check_fits(&st, &volumes)?;
        let given: Vec<(u32, u32)> = region
            .units
            .iter()
            .copied()
            .zip(0..)
            .skip(have as usize)
            .collect();
        self.empty_units(&region, &given).await?;
        self.commit(&mut st, volumes).await?;
        self.forget_units(&dropped);
        tracing::info!(device = %self.name, volume = %name, from = have, to = units,
            "cache volume resized");
        Ok(region)
    }

    /// Records that volume `name`'s core has grown to `volume_size` bytes
    /// (the table write is the commit point). Entries beyond the old end
    /// cannot exist, so nothing else changes; a smaller size is refused.
    pub async fn grow_volume_size(
        &self,
        name: &str,
        volume_size: u64,
    ) -> Result<VolumeRegion, DeviceError> {
        let mut st = self.table.lock().await;
        let sb = self.snapshot();
        let pos = sb.volumes.iter().position(|v| v.name == name);
        let pos = pos.ok_or_else(|| DeviceError::NoSuchVolume(name.to_owned()))?;
        let mut region = self.region(&sb.volumes[pos]);
        if volume_size == region.volume_size {
            return Ok(region);
        }
        if volume_size < region.volume_size {
            return Err(DeviceError::InvalidSpec {
                name: name.to_owned(),
                reason: format!(
                    "a cached volume can grow, not shrink ({} to {volume_size} bytes)",
                    region.volume_size
                ),
            });
        }
        let from = region.volume_size;
        region.volume_size = volume_size;
        let mut volumes = sb.volumes.clone();
        volumes[pos] = region.clone();
        self.check_fits(&st, &volumes)?;
        self.commit(&mut st, volumes).await?;
        tracing::info!(device = %self.name, volume = %name, from, to = volume_size,
            "cached volume grown");
        Ok(region)
    }

    /// Removes volume `name` from the table; its units become free.
    pub async fn delete_volume(&self, name: &str) -> Result<(), DeviceError> {
        let mut st = self.table.lock().await;
        let sb = self.snapshot();
        let pos = sb.volumes.iter().position(|v| v.name == name);
        let pos = pos.ok_or_else(|| DeviceError::NoSuchVolume(name.to_owned()))?;
        let mut volumes = sb.volumes.clone();
        let gone = volumes.remove(pos);
        self.commit(&mut st, volumes).await?;
        self.forget_units(&gone.units);
        tracing::info!(device = %self.name, volume = %name, "cache volume deleted");
        Ok(())
    }

    /// Damaged metadata copies seen since the device was opened, by kind.
    pub fn metadata_errors(&self) -> &MetadataErrors {
        &self.errors
    }

    /// Makes every completed write durable (and lets later metadata writes
    /// know it: use this rather than the bdev's flush).
    pub async fn flush(&self) -> Result<(), DeviceError> {
        let n = self.flushes_started.fetch_add(1, Ordering::SeqCst) + 1;
        self.bdev
            .flush()
            .await
            .map_err(|source| self.io("flushing", source))?;
        self.flushes_done.fetch_max(n, Ordering::SeqCst);
        Ok(())
    }

    /// Which units some volume has.
    fn used(&self, sb: &Superblock) -> Vec<bool> {
        let mut used = vec![false; self.geometry.units as usize];
        for u in sb.volumes.iter().flat_map(|v| &v.units) {
            used[*u as usize] = true;
        }
        used
    }

    /// Refuses a table that would not fit a superblock copy.
    fn check_fits(&self, st: &TableState, volumes: &[VolumeRegion]) -> Result<(), DeviceError> {
        let bytes = layout::superblock_len(&self.next_table(st, volumes.to_vec()));
        if bytes > layout::SB_RECORD_MAX {
            return Err(DeviceError::TableFull {
                bytes,
                max: layout::SB_RECORD_MAX as u64,
            });
        }
        Ok(())
    }

    fn next_table(&self, st: &TableState, volumes: Vec<VolumeRegion>) -> Superblock {
        Superblock {
            seq: st.seq + 1,
            uuid: self.uuid,
            geometry: self.geometry,
            volumes,
        }
    }

    /// Writes the table `volumes` into the copy not holding the newest
    /// version and flushes: the commit point of every table change.
    async fn commit(
        &self,
        st: &mut TableState,
        volumes: Vec<VolumeRegion>,
    ) -> Result<(), DeviceError> {
        let sb = self.next_table(st, volumes);
        let target = 1 - st.copy;
        let buf = DmaBuf::from_slice(&layout::frame_superblock(&sb));
        let at = target as u64 * layout::SB_COPY_SIZE;
        let copy = if target == 0 { 'A' } else { 'B' };
        let (_, r) = self.bdev.write(at, buf).await;
        r.map_err(|s| {
            self.io(
                format!("writing superblock copy {copy} (seq {})", sb.seq),
                s,
            )
        })?;
        self.flush().await?;
        st.seq = sb.seq;
        st.copy = target;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(sb);
        Ok(())
    }

    fn io(&self, what: impl Into<String>, source: BdevError) -> DeviceError {
        DeviceError::Io {
            device: self.name.clone(),
            what: what.into(),
            source,
        }
    }

    fn forget_units(&self, units: &[u32]) {
        let mut map = self.units.lock().unwrap_or_else(|p| p.into_inner());
        for u in units {
            map.remove(u);
        }
    }
}
