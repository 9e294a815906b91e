//! The on-device format of a cache device (see `docs/cache-format.md`):
//! constants, the records and their encoding. Pure functions, no I/O:
//! [`crate::device`] does the reads and writes.
//!
//! Every record starts with a magic, the format version, a crc32c over the
//! whole record (computed with the crc field zeroed) and a sequence number;
//! all integers are little-endian. Decoding never panics: bytes that are not
//! a valid record give a [`DecodeError`].

/// The allocation unit of a cache device: the largest engine block and
/// group size, so an engine group never straddles two units.
pub const UNIT_SIZE: u64 = 1 << 20;
/// The header area `[0, HEADER_AREA)` holds two superblock copies.
pub const HEADER_AREA: u64 = 1 << 20;
/// Bytes of one superblock copy (A at 0, B at `SB_COPY_SIZE`).
pub const SB_COPY_SIZE: u64 = HEADER_AREA / 2;
/// Where the unit-metadata area starts.
pub const META_OFFSET: u64 = HEADER_AREA;
/// Metadata bytes per unit: copy A at +0, copy B at +`META_COPY_SIZE`.
pub const META_PER_UNIT: u64 = 16 << 10;
/// Bytes of one unit-metadata copy.
pub const META_COPY_SIZE: u64 = META_PER_UNIT / 2;
/// Most entries in one unit-metadata record (`UNIT_SIZE` / 4 KiB).
pub const MAX_ENTRIES: usize = 256;
/// Smallest engine block size the format can describe.
pub const MIN_BLOCK: u32 = (UNIT_SIZE / MAX_ENTRIES as u64) as u32;
/// The format version written and the only one read (1 had no sector
/// stamps, 2 no checksums of dirty data: a device of either is refused,
/// never reformatted).
pub const VERSION: u32 = 3;
/// Magic of a superblock copy.
pub const SB_MAGIC: [u8; 8] = *b"RCACHESB";
/// Magic of a unit-metadata copy.
pub const UNIT_MAGIC: [u8; 8] = *b"RCACHEUM";
/// Longest volume name in bytes.
pub const MAX_NAME: usize = 255;

/// Fixed part of a superblock copy.
pub const SB_HEADER_LEN: usize = 72;
/// Fixed part of a unit-metadata copy.
pub const UNIT_HEADER_LEN: usize = 40;
/// Bytes per unit-metadata entry.
pub const ENTRY_LEN: usize = 28;
/// Entry flag: the entry's `crc` covers its dirty sectors.
pub const ENTRY_CHECKED: u32 = 1;
/// Offset of the crc field in both record kinds.
const CRC_AT: usize = 12;

mod codec;
mod copies;
pub mod frame;
pub mod pick;
pub use codec::{
    decode_superblock, decode_unit_meta, encode_superblock, encode_unit_meta, superblock_len,
    unit_meta_len, UnitHeader,
};
pub use copies::{
    frame_superblock, frame_unit_meta, judge_superblock, judge_unit_meta, unit_tag, SB_RECORD_MAX,
    SB_TAG,
};

/// Why bytes are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not a record of this kind (never written, or overwritten).
    #[error("no record (bad magic)")]
    BadMagic,
    /// A record of a format version this build does not read.
    #[error("format version {0} is not supported (this build reads {VERSION})")]
    Version(u32),
    /// The checksum does not match: a torn or corrupted write (the sector
    /// stamps tell which, see [`pick`]).
    #[error("checksum mismatch")]
    BadCrc,
    /// The checksum matches but the contents are inconsistent.
    #[error("malformed record: {0}")]
    Malformed(String),
}

/// Where the superblock copies and a unit's metadata copies live, and how
/// many units a device of `size` bytes holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Data units.
    pub units: u32,
    /// Start of the unit-metadata area.
    pub meta_offset: u64,
    /// Start of the data area (the metadata area padded to 1 MiB).
    pub data_offset: u64,
}

impl Geometry {
    /// The geometry of `units` units.
    pub fn for_units(units: u32) -> Self {
        let meta = (u64::from(units) * META_PER_UNIT).next_multiple_of(UNIT_SIZE);
        Self {
            units,
            meta_offset: META_OFFSET,
            data_offset: META_OFFSET + meta,
        }
    }

    /// Bytes the format needs on the device.
    pub fn device_bytes(&self) -> u64 {
        self.data_offset + u64::from(self.units) * UNIT_SIZE
    }

    /// The most units a device of `size` bytes holds (0 if none fits).
    pub fn for_device(size: u64) -> Self {
        // Every unit costs UNIT_SIZE + META_PER_UNIT, plus the padding of the
        // metadata area (less than a unit): start from the upper bound and
        // step down until it fits.
        let bound = size.saturating_sub(HEADER_AREA) / (UNIT_SIZE + META_PER_UNIT);
        let mut n = bound.min(u64::from(u32::MAX)) as u32;
        while n > 0 && Self::for_units(n).device_bytes() > size {
            n -= 1;
        }
        Self::for_units(n)
    }

    /// Byte offset of metadata copy `copy` (0 = A, 1 = B) of device unit `unit`.
    pub fn meta_copy_offset(&self, unit: u32, copy: usize) -> u64 {
        self.meta_offset + u64::from(unit) * META_PER_UNIT + copy as u64 * META_COPY_SIZE
    }

    /// Byte offset of device unit `unit`'s data.
    pub fn unit_offset(&self, unit: u32) -> u64 {
        self.data_offset + u64::from(unit) * UNIT_SIZE
    }
}

/// One volume of the volume table: its parameters and its units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeRegion {
    /// Unique name on the device.
    pub name: String,
    /// Random identity, stamped into every unit-metadata record of the
    /// volume; never reused, so stale metadata is never taken for its own.
    pub id: u64,
    /// Size of the cached volume in bytes.
    pub volume_size: u64,
    /// Host sector size in bytes.
    pub sector_size: u32,
    /// Engine block sizes, ascending.
    pub block_sizes: Vec<u32>,
    /// Engine group size.
    pub group_size: u32,
    /// Smallest block size: one metadata entry per `min_block` of a unit.
    pub min_block: u32,
    /// Device unit indices in volume order: the volume's cache byte `x`
    /// lives in device unit `units[x / UNIT_SIZE]`.
    pub units: Vec<u32>,
    /// Byte offset of the device's data area (not recorded per volume; set
    /// by the device so that [`VolumeRegion::data_offset`] needs nothing else).
    pub data_start: u64,
}

impl VolumeRegion {
    /// Byte offset on the device of byte `cache_offset` of the volume's cache
    /// space. Panics if it is beyond the region (a caller bug).
    pub fn data_offset(&self, cache_offset: u64) -> u64 {
        let unit = self.units[(cache_offset / UNIT_SIZE) as usize];
        self.data_start + u64::from(unit) * UNIT_SIZE + cache_offset % UNIT_SIZE
    }

    /// Bytes of cache space.
    pub fn cache_bytes(&self) -> u64 {
        self.units.len() as u64 * UNIT_SIZE
    }

    /// Metadata entries per unit.
    pub fn entries_per_unit(&self) -> usize {
        (UNIT_SIZE / u64::from(self.min_block)) as usize
    }

    /// Whether `size` is one of the block sizes.
    pub fn has_block_size(&self, size: u32) -> bool {
        self.block_sizes.contains(&size)
    }
}

/// A superblock copy: the device's identity, geometry and volume table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Version counter: the valid copy with the higher one is current.
    pub seq: u64,
    /// Identity of the formatted device.
    pub uuid: [u8; 16],
    /// Units, metadata and data offsets.
    pub geometry: Geometry,
    /// The volume table.
    pub volumes: Vec<VolumeRegion>,
}

/// Metadata of one unit: entry `i` describes the block whose cache address
/// in the unit is `i * min_block`, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitMeta {
    /// `UNIT_SIZE / min_block` entries.
    pub entries: Vec<MetaEntry>,
}

impl UnitMeta {
    /// No block: every entry free.
    pub fn empty(entries: usize) -> Self {
        Self {
            entries: vec![MetaEntry::FREE; entries],
        }
    }

    /// Whether no entry describes a block.
    pub fn is_empty(&self) -> bool {
        self.entries.iter().all(MetaEntry::is_free)
    }
}

/// A cached block: its place in the volume and which sectors of it are
/// valid and dirty (half-open ranges in sectors from the block's start).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MetaEntry {
    /// Volume byte offset of the block; `u64::MAX` for a free entry.
    pub offset: u64,
    /// Block size in bytes.
    pub size: u32,
    /// Valid sectors `[lo, hi)`.
    pub valid: (u16, u16),
    /// Dirty sectors `[lo, hi)` (empty when lo == hi).
    pub dirty: (u16, u16),
    /// crc32c of the dirty sectors' bytes, when known: set by the write
    /// that made the block dirty, cleared (durably, before the data is
    /// touched) by any write into the block while it is dirty, so that a
    /// checksum on the device never meets bytes a crash left half written.
    pub crc: Option<u32>,
}

impl MetaEntry {
    /// An entry that describes no block.
    pub const FREE: Self = Self {
        offset: u64::MAX,
        size: 0,
        valid: (0, 0),
        dirty: (0, 0),
        crc: None,
    };

    /// Whether the entry describes no block.
    pub fn is_free(&self) -> bool {
        self.offset == u64::MAX
    }

    /// Whether some sectors of the block are dirty.
    pub fn is_dirty(&self) -> bool {
        self.dirty.0 < self.dirty.1
    }
}

/// Checks a volume's parameters (what `create_volume` refuses and what a
/// decoded table must satisfy). Returns why not.
pub fn check_volume(v: &VolumeRegion) -> Result<(), String> {
    if v.name.is_empty() || v.name.len() > MAX_NAME {
        return Err(format!("name must be 1 to {MAX_NAME} bytes"));
    }
    let Some(&min) = v.block_sizes.iter().min() else {
        return Err("no block size".into());
    };
    let max = *v.block_sizes.iter().max().expect("non-empty");
    let mut sorted = v.block_sizes.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted != v.block_sizes {
        return Err("block sizes must be distinct and ascending".into());
    }
    if v.block_sizes
        .iter()
        .any(|&b| !b.is_power_of_two() || !(MIN_BLOCK..=UNIT_SIZE as u32).contains(&b))
    {
        return Err(format!(
            "block sizes must be powers of two from {MIN_BLOCK} to {UNIT_SIZE}"
        ));
    }
    if !v.sector_size.is_power_of_two() || v.sector_size < 512 || v.sector_size > min {
        return Err("sector size must be a power of two from 512 to the smallest block".into());
    }
    if max / v.sector_size > u32::from(u16::MAX) {
        return Err("a block has more sectors than a u16 holds".into());
    }
    if !v.group_size.is_power_of_two() || v.group_size < max || u64::from(v.group_size) > UNIT_SIZE
    {
        return Err(format!(
            "group size must be a power of two from the largest block to {UNIT_SIZE}"
        ));
    }
    if v.volume_size == 0 || !v.volume_size.is_multiple_of(u64::from(v.sector_size)) {
        return Err("volume size must be a non-zero multiple of the sector size".into());
    }
    if v.min_block != min {
        return Err("min block must be the smallest block size".into());
    }
    if v.units.is_empty() {
        return Err("a volume needs at least one unit".into());
    }
    Ok(())
}

/// Runs of consecutive units, in order: `(first, count)`.
pub fn extents(units: &[u32]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &u in units {
        match out.last_mut() {
            Some((s, n)) if s.checked_add(*n) == Some(u) => *n += 1,
            _ => out.push((u, 1)),
        }
    }
    out
}

/// Checks that `meta` describes blocks `v` can have: the entry count, block
/// sizes, alignment, sector ranges, and no block overlapping another.
pub fn check_unit_meta(v: &VolumeRegion, meta: &UnitMeta) -> Result<(), String> {
    let n = v.entries_per_unit();
    if meta.entries.len() != n {
        return Err(format!(
            "{} entries, the volume has {n} per unit",
            meta.entries.len()
        ));
    }
    let min = v.min_block as usize;
    let mut covered_until = 0usize; // first entry not inside the previous block
    for (i, e) in meta.entries.iter().enumerate() {
        if e.is_free() {
            continue;
        }
        if i < covered_until {
            return Err(format!(
                "entry {i} lies inside the block of an earlier entry"
            ));
        }
        if !v.has_block_size(e.size) {
            return Err(format!("entry {i}: {} is not a block size", e.size));
        }
        // Engine blocks sit at multiples of their size inside a group, and
        // groups at multiples of the group size inside a unit.
        let span = e.size as usize / min;
        if i % span != 0 {
            return Err(format!(
                "entry {i}: cache address not a multiple of {}",
                e.size
            ));
        }
        if !e.offset.is_multiple_of(u64::from(e.size)) || e.offset >= v.volume_size {
            return Err(format!(
                "entry {i}: offset {} unaligned or past the volume",
                e.offset
            ));
        }
        let sectors = e.size / v.sector_size;
        for (what, (lo, hi)) in [("valid", e.valid), ("dirty", e.dirty)] {
            if lo > hi || u32::from(hi) > sectors {
                return Err(format!(
                    "entry {i}: {what} range {lo}..{hi} outside the block"
                ));
            }
        }
        if e.crc.is_some() && !e.is_dirty() {
            return Err(format!("entry {i}: a checksum on a clean block"));
        }
        covered_until = i + span;
    }
    Ok(())
}
