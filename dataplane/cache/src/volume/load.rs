//! Creating a volume's cache on the device, or attaching to the one there
//! (`load`): the region, the persisted block table, and an engine rebuilt
//! from it.
//!
//! Clean blocks come back as well as dirty ones, after a clean stop and
//! after a crash alike: the table only ever describes data that is on the
//! device (see `meta.rs`), so nothing needs invalidating (OCF drops clean
//! lines after a dirty shutdown; the cache would start cold).

use bdev::CountedBdev;
use engine::{Engine, Extent, RestoredBlock};

use futures_util::StreamExt;

use super::exec::cache_read;
use super::meta::{data_crc, MetaTable};
use super::params::VolumeParams;
use super::VolumeError;
use crate::device::{CacheDevice, VolumeSpec};
use crate::layout::{MetaEntry, VolumeRegion, UNIT_SIZE};

pub(super) struct Loaded {
    /// The volume's sector (block) size.
    pub sector: u32,
    pub engine: Engine,
    pub region: VolumeRegion,
    pub meta: MetaTable,
    /// Dirty ranges whose data failed its checksum.
    pub damaged: Vec<Extent>,
}

/// Records on the device that the volume's core grew to `volume_size`
/// bytes, once the engine is known to accept that size: a record no engine
/// accepts would leave the volume unloadable.
pub(super) async fn record_grown_size(
    params: &VolumeParams,
    cache: &CacheDevice,
    volume_size: u64,
    sector: u32,
) -> Result<VolumeRegion, VolumeError> {
    params
        .engine_config(volume_size, sector, UNIT_SIZE)
        .map_err(|e| VolumeError::Invalid(e.0))?;
    Ok(cache.grow_volume_size(&params.name, volume_size).await?)
}

pub(super) async fn open_region(
    params: &VolumeParams,
    core: &CountedBdev,
    cache: &CacheDevice,
) -> Result<Loaded, VolumeError> {
    let ci = core.info();
    let volume_size = ci.size_bytes();
    let sector = ci.block_size;
    let name = &params.name;
    let load_err = |reason: String| VolumeError::Load {
        name: name.clone(),
        reason,
    };
    // The volume's sector is the larger of the two block sizes, so every
    // host I/O can be cached (a 4Kn cache SSD in front of 512-byte RBD
    // exports a 4096-byte namespace).
    let sector = sector.max(cache.bdev().info().block_size);
    if !volume_size.is_multiple_of(u64::from(sector)) {
        return Err(VolumeError::Invalid(format!(
            "core {} ({volume_size} bytes) is not a whole number of the cache bdev's {sector}-byte blocks",
            ci.name
        )));
    }
    let existing = cache.find_volume(name);
    let region = match (params.load, existing) {
        (true, None) => {
            return Err(load_err(format!(
                "cache device {} holds no cache for it (a create without load starts an empty one; if a cache of it was expected there, its dirty data is not on this device)",
                cache.name()
            )))
        }
        (false, Some(_)) => {
            return Err(VolumeError::Invalid(format!(
                "cache device {} already holds a cache for {name}: pass load=true to attach to it, or delete it first",
                cache.name()
            )))
        }
        (true, Some(r)) => {
            let sizes = params.block_sizes().map_err(|e| VolumeError::Invalid(e.0))?;
            // Core may have grown since the record was written (a resize
            // cut short by a crash, or an image grown while the dataplane
            // was down): every cached block is still inside it. A core
            // smaller than the record is not the volume the cache was for.
            if r.volume_size > volume_size || r.sector_size != sector || r.block_sizes != sizes {
                return Err(load_err(format!(
                    "the cache on {} was made for a {}-byte volume with {}-byte sectors and block sizes {:?}; core {} is {} bytes with {}-byte blocks and block sizes {:?} were asked",
                    cache.name(), r.volume_size, r.sector_size, r.block_sizes,
                    ci.name, volume_size, sector, sizes
                )));
            }
            if r.volume_size < volume_size {
                record_grown_size(params, cache, volume_size, sector).await?
            } else {
                r
            }
        }
        (false, None) => {
            let cfg = params
                .engine_config(volume_size, sector, params.cache_size_mib * UNIT_SIZE)
                .map_err(|e| VolumeError::Invalid(e.0))?;
            let units = u32::try_from(params.cache_size_mib)
                .map_err(|_| VolumeError::Invalid("cache_size_mib too large".into()))?;
            cache
                .create_volume(VolumeSpec {
                    name: name.clone(),
                    volume_size,
                    sector_size: sector,
                    block_sizes: cfg.block_sizes.clone(),
                    group_size: cfg.group_size,
                    units,
                })
                .await?
        }
    };
    let capacity = region.cache_bytes();
    let cfg = params
        .engine_config(volume_size, sector, capacity)
        .map_err(|e| VolumeError::Invalid(e.0))?;
    let mut engine = Engine::new(cfg).map_err(|e| VolumeError::Invalid(e.to_string()))?;
    let mut metas = Vec::with_capacity(region.units.len());
    if params.load {
        for i in 0..region.units.len() as u32 {
            metas.push(cache.read_unit_meta(&region, i).await?);
        }
    }
    let mut meta = MetaTable::new(&region, metas);
    if !params.load_clean {
        // The cache device failed last time: only dirty data is trusted.
        for (addr, e) in meta.blocks() {
            if e.dirty.1 <= e.dirty.0 {
                meta.drop_entry(addr);
            }
        }
    }
    let blocks = restorable(&meta.blocks(), sector);
    if let Err(e) = engine.restore(&blocks.keep) {
        return Err(load_err(format!(
            "the on-device block table is inconsistent: {e}"
        )));
    }
    for addr in blocks.dropped {
        meta.drop_entry(addr);
    }
    let damaged = verify_dirty(cache, &region, &meta)
        .await
        .map_err(|e| load_err(format!("reading dirty data to verify it: {e}")))?;
    if params.load {
        tracing::info!(bdev = %name, blocks = blocks.keep.len(),
            dirty_bytes = engine.stats().dirty_bytes, damaged = damaged.len(),
            "cache loaded from device");
    }
    Ok(Loaded {
        sector,
        engine,
        region,
        meta,
        damaged,
    })
}

/// Reads back every dirty range the table vouches for with a checksum and
/// returns those (volume ranges) whose bytes fail it.
async fn verify_dirty(
    cache: &CacheDevice,
    region: &VolumeRegion,
    meta: &MetaTable,
) -> Result<Vec<Extent>, bdev::BdevError> {
    let shift = region.sector_size.trailing_zeros();
    let checked = meta.blocks().into_iter().filter_map(|(addr, e)| {
        let crc = e.crc?;
        let lo = u64::from(e.dirty.0) << shift;
        let len = (u64::from(e.dirty.1) << shift) - lo;
        Some((addr + lo, e.offset + lo, len, crc))
    });
    let results: Vec<_> = futures_util::stream::iter(checked)
        .map(|(addr, offset, len, crc)| async move {
            let (buf, r) = cache_read(cache, region, addr, len).await;
            r.map(|()| (data_crc(&buf) != crc).then_some(Extent { offset, len }))
        })
        .buffered(VERIFY_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().filter_map(Result::transpose).collect()
}

/// Dirty ranges read back at a time when a volume loads.
const VERIFY_CONCURRENCY: usize = 16;

fn last_is_dirty(b: &RestoredBlock) -> bool {
    b.dirty.is_some()
}

struct Restorable {
    keep: Vec<RestoredBlock>,
    /// Entries that overlap a kept one in volume space (cache address).
    dropped: Vec<u64>,
}

/// The table's blocks as the engine restores them. Two entries for
/// overlapping volume ranges cannot both be true; the table's write rules
/// prevent it, and should it happen the dirty one wins (it holds data core
/// does not), else the first.
fn restorable(entries: &[(u64, MetaEntry)], sector: u32) -> Restorable {
    let mut sorted: Vec<&(u64, MetaEntry)> = entries.iter().collect();
    sorted.sort_by_key(|(_, e)| (e.offset, e.dirty.0 == e.dirty.1));
    let mut keep = Vec::with_capacity(sorted.len());
    let mut dropped = Vec::new();
    let mut end = 0u64;
    let s = u64::from(sector);
    for &&(addr, e) in &sorted {
        if e.offset < end {
            // Overlaps the last kept block: the dirty one of the two stays
            // (it holds data core does not).
            let last = keep.last_mut().expect("end > 0 means one was kept");
            let (last_dirty, this_dirty) = (last_is_dirty(last), e.dirty.1 > e.dirty.0);
            if this_dirty && !last_dirty {
                dropped.push(last.cache_addr);
                keep.pop();
            } else {
                dropped.push(addr);
                continue;
            }
        }
        end = e.offset + u64::from(e.size);
        let ext = |(lo, hi): (u16, u16)| Extent {
            offset: e.offset + u64::from(lo) * s,
            len: u64::from(hi.saturating_sub(lo)) * s,
        };
        keep.push(RestoredBlock {
            offset: e.offset,
            size: e.size,
            cache_addr: addr,
            valid: ext(e.valid),
            dirty: (e.dirty.1 > e.dirty.0).then(|| ext(e.dirty)),
        });
    }
    // The engine takes them least recently used first; the device keeps no
    // recency, so cache-address order stands in for it.
    keep.sort_by_key(|b| b.cache_addr);
    Restorable { keep, dropped }
}
