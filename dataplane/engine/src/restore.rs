//! Rebuilding an engine from the per-block metadata the runtime persisted
//! (after a restart), and listing blocks for it to persist.
//!
//! `restore` puts every block at exactly its recorded cache address. The
//! block LRU follows the order given (first = least recently used); the
//! group LRU follows each group's most recently used block. A group whose
//! given slots are a prefix `0..k` (k below its capacity) becomes its
//! size's open group with cursor `k`, if that size has none yet; in every
//! other restored group the slots not given are holes. A state reached
//! without invalidations (deallocate, failed I/O) is therefore restored
//! exactly: the same lookups and the same plans. After invalidations, the
//! group LRU order and the order holes are reused in may differ (the engine
//! does not persist them); admission and eviction policy history and the
//! flush clock hand start afresh.

use crate::blocks::{make_id, Ext};
use crate::engine::{BlockInfo, Engine};
use crate::lru::NIL;
use crate::plan::Extent;
use std::fmt;

/// One block as the runtime persisted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestoredBlock {
    /// Volume offset (a multiple of `size`).
    pub offset: u64,
    /// Block size: one of the configured sizes.
    pub size: u32,
    /// Byte address in the volume's cache space (a multiple of `size`).
    pub cache_addr: u64,
    /// Valid bytes: a non-empty, sector-aligned volume range inside the block.
    pub valid: Extent,
    /// Dirty bytes: a non-empty, sector-aligned range inside `valid`.
    pub dirty: Option<Extent>,
}

impl From<BlockInfo> for RestoredBlock {
    fn from(b: BlockInfo) -> RestoredBlock {
        RestoredBlock {
            offset: b.offset,
            size: b.size,
            cache_addr: b.cache_addr,
            valid: b.valid,
            dirty: b.dirty,
        }
    }
}

/// Why `restore` refused its input. `index`, `first` and `second` are
/// positions in the input; the other field is the offending value.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreError {
    /// The engine already holds blocks or in-flight work.
    NotFresh,
    /// The block size is not one of the configured sizes.
    SizeNotConfigured { index: usize, size: u32 },
    /// The volume offset is not a multiple of the block size.
    MisalignedOffset { index: usize, offset: u64 },
    /// The block ends beyond the volume.
    BeyondVolume { index: usize, offset: u64 },
    /// The cache address is not a multiple of the block size.
    MisalignedCacheAddr { index: usize, cache_addr: u64 },
    /// The block ends beyond the cache capacity.
    BeyondCapacity { index: usize, cache_addr: u64 },
    /// The block's group (at `group_addr`) already holds another size.
    MixedGroup { index: usize, group_addr: u64 },
    /// Two blocks overlap in volume space.
    OverlapInVolume { first: usize, second: usize },
    /// Two blocks overlap in cache space.
    OverlapInCache { first: usize, second: usize },
    /// The valid or dirty extent is empty, unaligned, outside the block, or
    /// dirty is not inside valid.
    BadExtent { index: usize, why: &'static str },
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RestoreError::*;
        match *self {
            NotFresh => write!(
                f,
                "restore needs a fresh engine: it already holds blocks or in-flight work"
            ),
            SizeNotConfigured { index, size } => write!(
                f,
                "block {index}: size {size} is not a configured block size"
            ),
            MisalignedOffset { index, offset } => write!(
                f,
                "block {index}: volume offset {offset} is not a multiple of its size"
            ),
            BeyondVolume { index, offset } => write!(
                f,
                "block {index}: at volume offset {offset} it ends beyond the volume"
            ),
            MisalignedCacheAddr { index, cache_addr } => write!(
                f,
                "block {index}: cache address {cache_addr} is not a multiple of its size"
            ),
            BeyondCapacity { index, cache_addr } => write!(
                f,
                "block {index}: at cache address {cache_addr} it ends beyond the cache capacity"
            ),
            MixedGroup { index, group_addr } => write!(
                f,
                "block {index}: the group at cache address {group_addr} already holds blocks of another size"
            ),
            OverlapInVolume { first, second } => {
                write!(f, "blocks {first} and {second} overlap in volume space")
            }
            OverlapInCache { first, second } => {
                write!(f, "blocks {first} and {second} overlap in cache space")
            }
            BadExtent { index, why } => write!(f, "block {index}: {why}"),
        }
    }
}

impl std::error::Error for RestoreError {}

/// Where a validated block goes.
#[derive(Clone, Copy)]
struct Place {
    class: usize,
    group: u32,
    slot: u32,
    ext: Ext,
}

impl Engine {
    /// Every cached block, least recently used first (the order
    /// [`Engine::restore`] takes).
    pub fn cached_blocks(&self) -> Vec<BlockInfo> {
        let mut out = Vec::with_capacity(self.stats.cached_blocks as usize);
        let mut id = self.blocks.lru.tail;
        while id != NIL {
            out.push(self.block_info(id));
            id = self.blocks.entry(id).prev;
        }
        out
    }

    /// Appends to `out` (not cleared) the cached blocks overlapping the
    /// volume range `offset..offset + len`, by offset. Allocates nothing
    /// when `out` has room.
    pub fn blocks_in(&self, offset: u64, len: u64, out: &mut Vec<BlockInfo>) {
        let end = offset.saturating_add(len).min(self.cfg.volume_size);
        if offset >= end {
            return;
        }
        let from = out.len();
        for (c, class) in self.blocks.classes.iter().enumerate() {
            if class.index.len() == 0 {
                continue;
            }
            for key in (offset >> class.shift)..=((end - 1) >> class.shift) {
                if let Some(slot) = class.lookup(key as u32) {
                    out.push(self.block_info(make_id(c, slot)));
                }
            }
        }
        out[from..].sort_unstable_by_key(|b| b.offset);
    }

    /// Rebuilds the cache from persisted blocks, on a fresh engine (before
    /// any plan). Each block goes to exactly its `cache_addr`; `blocks` is
    /// in LRU order, least recently used first. Refuses inconsistent input
    /// without changing anything. See the module docs for what is and is
    /// not restored exactly.
    pub fn restore(&mut self, blocks: &[RestoredBlock]) -> Result<(), RestoreError> {
        if self.stats.cached_blocks != 0 || self.inflight() != 0 || self.groups.lru.len != 0 {
            return Err(RestoreError::NotFresh);
        }
        let places = self.validate_restore(blocks)?;
        let n_groups = self.groups.groups.len();
        // Per group: (class, given slots), filled in cache address order.
        let mut used: Vec<Option<(usize, Vec<u32>)>> = vec![None; n_groups];
        for p in &places {
            used[p.group as usize]
                .get_or_insert_with(|| (p.class, Vec::new()))
                .1
                .push(p.slot);
        }
        self.groups.free.retain(|&g| used[g as usize].is_none());
        let mut holes = Vec::new();
        for (g, u) in used.iter_mut().enumerate() {
            let Some((class, slots)) = u else { continue };
            let class = *class;
            slots.sort_unstable();
            let per = self.blocks.classes[class].per_group;
            let k = slots.len() as u32;
            let prefix = slots[slots.len() - 1] + 1 == k;
            let open = prefix && k < per && self.groups.open[class] == NIL;
            let cursor = if open { k } else { per };
            let chunk = self.blocks.classes[class].take_chunk(g as u32);
            self.groups
                .restore(g as u32, class, chunk, cursor as u16, open);
            let mut given = slots.iter().peekable();
            for slot in 0..cursor {
                if given.peek() == Some(&&slot) {
                    given.next();
                } else {
                    holes.push(make_id(class, chunk * per + slot));
                }
            }
        }
        // The hole list's head (reused first) is the lowest cache address.
        for &id in holes.iter().rev() {
            let class = crate::blocks::id_class(id);
            self.blocks.holes[class].push_front(&mut self.blocks.classes[..], id);
        }
        for (b, p) in blocks.iter().zip(&places) {
            let c = &self.blocks.classes[p.class];
            let chunk = self.groups.groups[p.group as usize].chunk;
            let id = make_id(p.class, chunk * c.per_group + p.slot);
            let key = (b.offset >> c.shift) as u32;
            self.insert_block(id, key);
            self.set_ext(id, p.ext);
        }
        Ok(())
    }

    fn validate_restore(&self, blocks: &[RestoredBlock]) -> Result<Vec<Place>, RestoreError> {
        use RestoreError::*;
        let sector = self.cfg.sector_size as u64;
        let s = self.sector_shift;
        let gsize = self.cfg.group_size as u64;
        let mut group_class = vec![usize::MAX; self.groups.groups.len()];
        let mut places = Vec::with_capacity(blocks.len());
        for (index, b) in blocks.iter().enumerate() {
            let size = b.size as u64;
            let class = self
                .sizes
                .iter()
                .position(|&x| x == b.size)
                .ok_or(SizeNotConfigured {
                    index,
                    size: b.size,
                })?;
            if !b.offset.is_multiple_of(size) {
                return Err(MisalignedOffset {
                    index,
                    offset: b.offset,
                });
            }
            if b.offset
                .checked_add(size)
                .is_none_or(|e| e > self.cfg.volume_size)
            {
                return Err(BeyondVolume {
                    index,
                    offset: b.offset,
                });
            }
            if !b.cache_addr.is_multiple_of(size) {
                return Err(MisalignedCacheAddr {
                    index,
                    cache_addr: b.cache_addr,
                });
            }
            if b.cache_addr
                .checked_add(size)
                .is_none_or(|e| e > self.capacity)
            {
                return Err(BeyondCapacity {
                    index,
                    cache_addr: b.cache_addr,
                });
            }
            let group = (b.cache_addr / gsize) as usize;
            if group_class[group] == usize::MAX {
                group_class[group] = class;
            } else if group_class[group] != class {
                return Err(MixedGroup {
                    index,
                    group_addr: group as u64 * gsize,
                });
            }
            let inside = |x: &Extent, lo: u64, hi: u64| {
                x.len > 0
                    && x.offset.is_multiple_of(sector)
                    && x.len.is_multiple_of(sector)
                    && x.offset >= lo
                    && x.offset.checked_add(x.len).is_some_and(|e| e <= hi)
            };
            if !inside(&b.valid, b.offset, b.offset + size) {
                return Err(BadExtent {
                    index,
                    why: "valid extent empty, unaligned or outside the block",
                });
            }
            let mut ext = Ext {
                valid_lo: ((b.valid.offset - b.offset) >> s) as u16,
                valid_hi: ((b.valid.end() - b.offset) >> s) as u16,
                dirty_lo: 0,
                dirty_hi: 0,
            };
            if let Some(d) = b.dirty {
                if !inside(&d, b.valid.offset, b.valid.end()) {
                    return Err(BadExtent {
                        index,
                        why: "dirty extent empty, unaligned or not inside the valid extent",
                    });
                }
                ext.dirty_lo = ((d.offset - b.offset) >> s) as u16;
                ext.dirty_hi = ((d.end() - b.offset) >> s) as u16;
            }
            places.push(Place {
                class,
                group: group as u32,
                slot: ((b.cache_addr % gsize) / size) as u32,
                ext,
            });
        }
        let mut order: Vec<usize> = (0..blocks.len()).collect();
        let overlaps = |order: &[usize], key: &dyn Fn(&RestoredBlock) -> u64| {
            order.windows(2).find_map(|w| {
                let (a, b) = (&blocks[w[0]], &blocks[w[1]]);
                (key(a) + a.size as u64 > key(b)).then(|| (w[0].min(w[1]), w[0].max(w[1])))
            })
        };
        order.sort_unstable_by_key(|&i| blocks[i].offset);
        if let Some((first, second)) = overlaps(&order, &|b| b.offset) {
            return Err(OverlapInVolume { first, second });
        }
        order.sort_unstable_by_key(|&i| blocks[i].cache_addr);
        if let Some((first, second)) = overlaps(&order, &|b| b.cache_addr) {
            return Err(OverlapInCache { first, second });
        }
        Ok(places)
    }
}
