//! Block records: one slab per block size, chunked by group.
//!
//! A block is a 12-byte [`Entry`] (block number and the two LRU links) plus
//! one flag byte. Where the block lives in the cache is not stored: each
//! group owns one chunk of `group_size / block_size` consecutive entries of
//! its size's slab, so the entry's position names the group (through
//! `chunk_group`) and the slot inside it. Blocks are named by a `u32` id
//! carrying the size class in its top four bits.
//!
//! The rare state only some blocks have lives in side tables keyed by id:
//! valid/dirty extents of partially valid or partially dirty blocks
//! ([`Ext`]) and pins of in-flight I/O ([`Pin`]).

use std::collections::BTreeSet;

use crate::index::Index;
use crate::lru::{Links, List, NIL};
use crate::map::U32Map;

/// `Entry::key` of a slot that holds no block.
pub(crate) const FREE_KEY: u32 = u32::MAX;
const CLASS_SHIFT: u32 = 28;
const INDEX_MASK: u32 = (1 << CLASS_SHIFT) - 1;

/// The block has dirty data (its dirty extent is not empty).
pub(crate) const F_DIRTY: u8 = 1;
/// The block has an entry in the extent side table.
pub(crate) const F_EXT: u8 = 2;
/// The block has an entry in the pin side table.
pub(crate) const F_PINNED: u8 = 4;
/// The block was hit since it was inserted: a policy that takes over
/// (online choice) treats it as proven rather than new.
pub(crate) const F_REUSED: u8 = 8;

#[inline]
pub(crate) fn make_id(class: usize, index: u32) -> u32 {
    debug_assert!(index <= INDEX_MASK);
    ((class as u32) << CLASS_SHIFT) | index
}

#[inline]
pub(crate) fn id_class(id: u32) -> usize {
    (id >> CLASS_SHIFT) as usize
}

#[inline]
pub(crate) fn id_index(id: u32) -> u32 {
    id & INDEX_MASK
}

/// The per-block record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Entry {
    /// Volume offset divided by the block size, or `FREE_KEY`.
    pub key: u32,
    /// Block LRU links for blocks, hole-list links for free slots.
    pub prev: u32,
    pub next: u32,
}

const UNUSED: Entry = Entry {
    key: FREE_KEY,
    prev: NIL,
    next: NIL,
};

/// Valid and dirty sector ranges inside a block (`lo..hi`, relative to the
/// block start). Blocks without an `Ext` are fully valid, and fully dirty
/// exactly when `F_DIRTY` is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Ext {
    pub valid_lo: u16,
    pub valid_hi: u16,
    pub dirty_lo: u16,
    pub dirty_hi: u16,
}

impl Ext {
    pub fn full(sectors: u16, dirty: bool) -> Ext {
        Ext {
            valid_lo: 0,
            valid_hi: sectors,
            dirty_lo: 0,
            dirty_hi: if dirty { sectors } else { 0 },
        }
    }

    pub fn dirty_sectors(&self) -> u32 {
        (self.dirty_hi - self.dirty_lo) as u32
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty_hi > self.dirty_lo
    }
}

/// In-flight use of a block. Readers share; fills and writes are exclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Pin {
    /// Readers: cache reads of hits and write-backs.
    pub shared: u16,
    /// A fill or a cache write owns the block.
    pub exclusive: bool,
    /// One of the shared pins is a write-back (at most one at a time).
    pub writeback: bool,
}

/// How in-flight work uses a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PinKind {
    /// A cache read of a hit.
    Shared,
    /// A write-back (reads the cache, like a hit).
    Writeback,
    /// A fill, cache write or cache zeroing.
    Exclusive,
}

/// One block size.
#[derive(Clone, Debug)]
pub(crate) struct Class {
    pub size: u32,
    pub shift: u32,
    /// Blocks per group.
    pub per_group: u32,
    /// `per_group`'s log2 (block and group sizes are powers of two): a
    /// block's chunk and its place in it come from a shift and a mask, not
    /// a division, on every hit.
    pub per_group_shift: u32,
    /// Sectors per block.
    pub sectors: u16,
    pub entries: Vec<Entry>,
    pub flags: Vec<u8>,
    /// Group owning each chunk of `per_group` entries (`NIL`: free).
    pub chunk_group: Vec<u32>,
    /// Free chunks below the last used one, lowest first out: reusing low
    /// chunks lets the high ones fall free and the slab shrink.
    pub free_chunks: BTreeSet<u32>,
    pub index: Index,
}

impl Class {
    pub fn new(size: u32, group_size: u32, sector_size: u32) -> Class {
        debug_assert!(size.is_power_of_two() && group_size.is_power_of_two());
        Class {
            size,
            shift: size.trailing_zeros(),
            per_group: group_size / size,
            per_group_shift: (group_size / size).trailing_zeros(),
            sectors: (size / sector_size) as u16,
            entries: Vec::new(),
            flags: Vec::new(),
            chunk_group: Vec::new(),
            free_chunks: BTreeSet::new(),
            index: Index::new(),
        }
    }

    pub fn memory_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.flags.capacity()
            + self.chunk_group.capacity() * 4
            // A B-tree node holds up to 11 keys: count 8 bytes a chunk.
            + self.free_chunks.len() * 8
            + self.index.memory_bytes()
    }

    /// A chunk of entries for group `g`.
    pub fn take_chunk(&mut self, g: u32) -> u32 {
        if let Some(c) = self.free_chunks.pop_first() {
            self.chunk_group[c as usize] = g;
            return c;
        }
        let c = self.chunk_group.len() as u32;
        // Grow by an eighth rather than doubling: the slabs are most of the
        // metadata, and a doubled Vec would leave up to half of it unused.
        // Still amortised O(1) per chunk.
        let per = self.per_group as usize;
        if self.entries.len() + per > self.entries.capacity() {
            let more = per.max(self.entries.len() / 8);
            self.entries.reserve_exact(more);
            self.flags.reserve_exact(more);
            self.chunk_group.reserve_exact(more / per + 1);
        }
        self.chunk_group.push(g);
        let n = self.entries.len() + per;
        self.entries.resize(n, UNUSED);
        self.flags.resize(n, 0);
        c
    }

    pub fn release_chunk(&mut self, c: u32) {
        let base = (c * self.per_group) as usize;
        for e in &mut self.entries[base..base + self.per_group as usize] {
            *e = UNUSED;
        }
        for f in &mut self.flags[base..base + self.per_group as usize] {
            *f = 0;
        }
        self.chunk_group[c as usize] = NIL;
        self.free_chunks.insert(c);
        self.trim();
    }

    /// Drops the free chunks at the end of the slab, and gives memory back
    /// once a quarter of it is unused: the slab follows the groups this
    /// class holds now, not the most it ever held (a group that changes
    /// size moves its metadata to the other class's slab).
    fn trim(&mut self) {
        let per = self.per_group as usize;
        while let Some(&last) = self.free_chunks.last() {
            if last as usize + 1 != self.chunk_group.len() {
                break;
            }
            self.free_chunks.pop_last();
            self.chunk_group.pop();
        }
        let n = self.chunk_group.len() * per;
        if n < self.entries.len() {
            self.entries.truncate(n);
            self.flags.truncate(n);
            if self.entries.capacity() > n + n / 4 + per {
                self.entries.shrink_to(n + n / 8);
                self.flags.shrink_to(n + n / 8);
                self.chunk_group.shrink_to(n / per + n / per / 8);
            }
        }
    }

    #[inline]
    pub fn lookup(&self, key: u32) -> Option<u32> {
        let entries = &self.entries;
        self.index.get(key, |s| entries[s as usize].key)
    }
}

impl Links for [Class] {
    #[inline]
    fn prev(&self, id: u32) -> u32 {
        self[id_class(id)].entries[id_index(id) as usize].prev
    }
    #[inline]
    fn next(&self, id: u32) -> u32 {
        self[id_class(id)].entries[id_index(id) as usize].next
    }
    #[inline]
    fn set_prev(&mut self, id: u32, to: u32) {
        self[id_class(id)].entries[id_index(id) as usize].prev = to;
    }
    #[inline]
    fn set_next(&mut self, id: u32, to: u32) {
        self[id_class(id)].entries[id_index(id) as usize].next = to;
    }
}

/// Every block of one volume.
#[derive(Clone, Debug)]
pub(crate) struct Blocks {
    pub classes: Vec<Class>,
    /// Global block LRU (AdaCache III.D), most recent first.
    pub lru: List,
    /// Per class: free slots inside in-use groups (left by invalidation or
    /// rollback), reused before the open group.
    pub holes: Vec<List>,
    pub ext: U32Map<Ext>,
    pub pins: U32Map<Pin>,
    pub group_size: u64,
}

impl Blocks {
    pub fn new(sizes: &[u32], group_size: u32, sector_size: u32) -> Blocks {
        Blocks {
            classes: sizes
                .iter()
                .map(|&s| Class::new(s, group_size, sector_size))
                .collect(),
            lru: List::new(),
            holes: vec![List::new(); sizes.len()],
            ext: U32Map::new(Ext::default()),
            pins: U32Map::new(Pin::default()),
            group_size: group_size as u64,
        }
    }

    #[inline]
    pub fn entry(&self, id: u32) -> &Entry {
        &self.classes[id_class(id)].entries[id_index(id) as usize]
    }

    #[inline]
    pub fn flags(&self, id: u32) -> u8 {
        self.classes[id_class(id)].flags[id_index(id) as usize]
    }

    #[inline]
    pub fn flags_mut(&mut self, id: u32) -> &mut u8 {
        &mut self.classes[id_class(id)].flags[id_index(id) as usize]
    }

    #[inline]
    pub fn size(&self, id: u32) -> u32 {
        self.classes[id_class(id)].size
    }

    /// Volume offset of the block.
    #[inline]
    pub fn offset(&self, id: u32) -> u64 {
        let c = &self.classes[id_class(id)];
        (c.entries[id_index(id) as usize].key as u64) << c.shift
    }

    #[inline]
    pub fn group(&self, id: u32) -> u32 {
        let c = &self.classes[id_class(id)];
        c.chunk_group[(id_index(id) >> c.per_group_shift) as usize]
    }

    /// Byte address of the block in the volume's cache space.
    #[inline]
    pub fn cache_addr(&self, id: u32) -> u64 {
        let c = &self.classes[id_class(id)];
        let i = id_index(id);
        let g = c.chunk_group[(i >> c.per_group_shift) as usize] as u64;
        g * self.group_size + (((i & (c.per_group - 1)) as u64) << c.shift)
    }

    /// Valid and dirty extents.
    #[inline]
    pub fn ext(&self, id: u32) -> Ext {
        let f = self.flags(id);
        if f & F_EXT != 0 {
            self.ext.get(id).expect("F_EXT without an extent")
        } else {
            Ext::full(self.classes[id_class(id)].sectors, f & F_DIRTY != 0)
        }
    }

    /// Stores extents, keeping the side table only for blocks that need it.
    pub fn store_ext(&mut self, id: u32, e: Ext) {
        let sectors = self.classes[id_class(id)].sectors;
        debug_assert!(e.valid_lo < e.valid_hi && e.valid_hi <= sectors);
        debug_assert!(
            !e.is_dirty() || (e.valid_lo <= e.dirty_lo && e.dirty_hi <= e.valid_hi),
            "dirty extent outside the valid one"
        );
        let canonical = e.valid_lo == 0
            && e.valid_hi == sectors
            && (!e.is_dirty() || (e.dirty_lo == 0 && e.dirty_hi == sectors));
        let f = self.flags_mut(id);
        if e.is_dirty() {
            *f |= F_DIRTY;
        } else {
            *f &= !F_DIRTY;
        }
        if canonical {
            if *f & F_EXT != 0 {
                *f &= !F_EXT;
                self.ext.remove(id);
            }
        } else {
            *f |= F_EXT;
            let e = if e.is_dirty() {
                e
            } else {
                Ext {
                    dirty_lo: 0,
                    dirty_hi: 0,
                    ..e
                }
            };
            self.ext.insert(id, e);
        }
    }

    #[inline]
    pub fn pin(&self, id: u32) -> Pin {
        if self.flags(id) & F_PINNED != 0 {
            self.pins.get(id).unwrap_or_default()
        } else {
            Pin::default()
        }
    }

    /// Returns true when the block went from unpinned to pinned.
    pub fn add_pin(&mut self, id: u32, kind: PinKind) -> bool {
        let mut p = self.pin(id);
        let was = p != Pin::default();
        if kind == PinKind::Exclusive {
            debug_assert!(!was, "exclusive pin on a pinned block");
            p.exclusive = true;
        } else {
            debug_assert!(!p.exclusive, "shared pin on an exclusively pinned block");
            p.shared += 1;
            if kind == PinKind::Writeback {
                debug_assert!(!p.writeback, "two write-backs of one block");
                p.writeback = true;
            }
        }
        self.pins.insert(id, p);
        *self.flags_mut(id) |= F_PINNED;
        !was
    }

    /// Returns true when the block became unpinned.
    pub fn drop_pin(&mut self, id: u32, kind: PinKind) -> bool {
        let mut p = self.pin(id);
        if kind == PinKind::Exclusive {
            debug_assert!(p.exclusive);
            p.exclusive = false;
        } else {
            debug_assert!(p.shared > 0);
            p.shared -= 1;
            if kind == PinKind::Writeback {
                debug_assert!(p.writeback);
                p.writeback = false;
            }
        }
        if p == Pin::default() {
            self.pins.remove(id);
            *self.flags_mut(id) &= !F_PINNED;
            true
        } else {
            self.pins.insert(id, p);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_class_and_index() {
        let id = make_id(3, 12345);
        assert_eq!((id_class(id), id_index(id)), (3, 12345));
        assert_ne!(make_id(8, INDEX_MASK), NIL);
    }

    #[test]
    fn entry_is_twelve_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 12);
    }

    #[test]
    fn extents_use_the_side_table_only_when_needed() {
        let mut b = Blocks::new(&[32 << 10], 32 << 10, 4096);
        let c = b.classes[0].take_chunk(5);
        let id = make_id(0, c);
        b.classes[0].entries[0].key = 3;
        assert_eq!(b.cache_addr(id), 5 * (32 << 10));
        assert_eq!(b.offset(id), 3 * (32 << 10));
        b.store_ext(id, Ext::full(8, true));
        assert_eq!(b.flags(id), F_DIRTY);
        let part = Ext {
            valid_lo: 1,
            valid_hi: 4,
            dirty_lo: 2,
            dirty_hi: 3,
        };
        b.store_ext(id, part);
        assert_eq!(b.ext(id), part);
        assert_eq!(b.flags(id), F_DIRTY | F_EXT);
        b.store_ext(id, Ext::full(8, false));
        assert_eq!(b.flags(id), 0);
        assert_eq!(b.ext.len(), 0);
        assert!(b.add_pin(id, PinKind::Shared));
        assert!(!b.add_pin(id, PinKind::Writeback));
        assert!(b.pin(id).writeback);
        assert!(!b.drop_pin(id, PinKind::Writeback));
        assert!(b.drop_pin(id, PinKind::Shared));
        assert_eq!(b.flags(id), 0);
    }
}
