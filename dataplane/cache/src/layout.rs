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
/// The format version written and the only one read.
pub const VERSION: u32 = 1;
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
pub const ENTRY_LEN: usize = 20;
/// Offset of the crc field in both record kinds.
const CRC_AT: usize = 12;

/// Why bytes are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not a record of this kind (never written, or overwritten).
    #[error("no record (bad magic)")]
    BadMagic,
    /// A record of a format version this build does not read.
    #[error("format version {0} is not supported (this build reads {VERSION})")]
    Version(u32),
    /// The checksum does not match: a torn or corrupted write.
    #[error("checksum mismatch (torn or corrupt record)")]
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
}

impl MetaEntry {
    /// An entry that describes no block.
    pub const FREE: Self = Self {
        offset: u64::MAX,
        size: 0,
        valid: (0, 0),
        dirty: (0, 0),
    };

    /// Whether the entry describes no block.
    pub fn is_free(&self) -> bool {
        self.offset == u64::MAX
    }
}

/// Encoded size of `sb`.
pub fn superblock_len(sb: &Superblock) -> usize {
    SB_HEADER_LEN
        + sb.volumes
            .iter()
            .map(|v| 1 + v.name.len() + 8 + 8 + 4 * 5 + 8 * extents(&v.units).len())
            .sum::<usize>()
}

/// Encodes a superblock copy (its exact length; the caller pads it).
pub fn encode_superblock(sb: &Superblock) -> Vec<u8> {
    let mut b = Vec::with_capacity(superblock_len(sb));
    b.extend_from_slice(&SB_MAGIC);
    put32(&mut b, VERSION);
    put32(&mut b, 0); // crc, filled in below
    put64(&mut b, sb.seq);
    put32(&mut b, superblock_len(sb) as u32);
    put32(&mut b, sb.volumes.len() as u32);
    b.extend_from_slice(&sb.uuid);
    put32(&mut b, sb.geometry.units);
    put32(&mut b, 0); // reserved
    put64(&mut b, sb.geometry.meta_offset);
    put64(&mut b, sb.geometry.data_offset);
    debug_assert_eq!(b.len(), SB_HEADER_LEN);
    for v in &sb.volumes {
        b.push(v.name.len() as u8);
        b.extend_from_slice(v.name.as_bytes());
        put64(&mut b, v.id);
        put64(&mut b, v.volume_size);
        put32(&mut b, v.sector_size);
        put32(&mut b, block_mask(&v.block_sizes));
        put32(&mut b, v.group_size);
        put32(&mut b, v.min_block);
        let ext = extents(&v.units);
        put32(&mut b, ext.len() as u32);
        for (start, len) in ext {
            put32(&mut b, start);
            put32(&mut b, len);
        }
    }
    seal(&mut b);
    b
}

/// Decodes a superblock copy from `buf` (which may be longer than it).
/// Checks the format and internal consistency; a unit count above
/// `max_units` (what the device holds) is malformed, which also bounds the
/// memory a decoded table takes.
pub fn decode_superblock(buf: &[u8], max_units: u32) -> Result<Superblock, DecodeError> {
    let mut r = Reader::new(buf);
    check_head(&mut r, &SB_MAGIC)?;
    let crc = r.u32()?;
    let seq = r.u64()?;
    let len = r.u32()? as usize;
    if !(SB_HEADER_LEN..=buf.len()).contains(&len) {
        return Err(DecodeError::BadCrc); // a length this wrong is garbage
    }
    verify_crc(&buf[..len], crc)?;
    let mut r = Reader::new(&buf[..len]);
    r.skip(28)?;
    let count = r.u32()?;
    let uuid: [u8; 16] = r.bytes(16)?.try_into().expect("16 bytes");
    let units = r.u32()?;
    r.u32()?;
    let meta_offset = r.u64()?;
    let data_offset = r.u64()?;
    if units > max_units {
        return Err(malformed(format!(
            "{units} units recorded, the device holds {max_units}"
        )));
    }
    let mut volumes = Vec::new();
    let mut total = 0u64;
    for _ in 0..count {
        volumes.push(decode_volume(&mut r, units, &mut total)?);
    }
    if r.remaining() != 0 {
        return Err(malformed("bytes after the volume table"));
    }
    let geometry = Geometry {
        units,
        meta_offset,
        data_offset,
    };
    if geometry != Geometry::for_units(units) {
        return Err(malformed(
            "metadata/data offsets do not match the unit count",
        ));
    }
    check_table(&volumes, units)?;
    Ok(Superblock {
        seq,
        uuid,
        geometry,
        volumes,
    })
}

/// Decodes one volume; `total` counts the units of all volumes so far, and
/// more than the device has is malformed (before the extents are expanded).
fn decode_volume(
    r: &mut Reader<'_>,
    device_units: u32,
    total: &mut u64,
) -> Result<VolumeRegion, DecodeError> {
    let name_len = r.u8()? as usize;
    let name = std::str::from_utf8(r.bytes(name_len)?)
        .map_err(|_| malformed("volume name is not UTF-8"))?
        .to_owned();
    let id = r.u64()?;
    let volume_size = r.u64()?;
    let sector_size = r.u32()?;
    let mask = r.u32()?;
    let group_size = r.u32()?;
    let min_block = r.u32()?;
    let n_ext = r.u32()?;
    let mut units = Vec::new();
    for _ in 0..n_ext {
        let start = r.u32()?;
        let len = r.u32()?;
        let end = start
            .checked_add(len)
            .filter(|&e| e <= device_units && len > 0)
            .ok_or_else(|| malformed(format!("volume {name:?}: extent outside the device")))?;
        *total += u64::from(len);
        if *total > u64::from(device_units) {
            return Err(malformed("more units given than the device has"));
        }
        units.extend(start..end);
    }
    let block_sizes: Vec<u32> = (0..32)
        .filter(|k| mask & (1 << k) != 0)
        .map(|k| 1 << k)
        .collect();
    let v = VolumeRegion {
        name,
        id,
        volume_size,
        sector_size,
        block_sizes,
        group_size,
        min_block,
        units,
        data_start: 0,
    };
    check_volume(&v).map_err(|e| malformed(format!("volume {:?}: {e}", v.name)))?;
    if v.min_block != v.block_sizes[0] {
        return Err(malformed(format!("volume {:?}: wrong min block", v.name)));
    }
    Ok(v)
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

/// Checks that names, ids and units are not shared between volumes.
fn check_table(volumes: &[VolumeRegion], units: u32) -> Result<(), DecodeError> {
    let mut owner = vec![false; units as usize];
    for (i, v) in volumes.iter().enumerate() {
        if volumes[..i]
            .iter()
            .any(|w| w.name == v.name || w.id == v.id)
        {
            return Err(malformed(format!("volume {:?} recorded twice", v.name)));
        }
        for &u in &v.units {
            let slot = &mut owner[u as usize];
            if *slot {
                return Err(malformed(format!("unit {u} given twice")));
            }
            *slot = true;
        }
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

fn block_mask(sizes: &[u32]) -> u32 {
    sizes.iter().fold(0, |m, s| m | s)
}

/// Encoded length of a unit-metadata record of `entries` entries.
pub fn unit_meta_len(entries: usize) -> usize {
    UNIT_HEADER_LEN + entries * ENTRY_LEN
}

/// The header fields of a unit-metadata copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitHeader {
    /// Version counter: the valid copy with the higher one is current.
    pub seq: u64,
    /// The owning volume's id.
    pub volume_id: u64,
    /// Index of this unit in the owning volume.
    pub index: u32,
}

/// Encodes a unit-metadata copy (its exact length).
pub fn encode_unit_meta(h: &UnitHeader, meta: &UnitMeta) -> Vec<u8> {
    let mut b = Vec::with_capacity(unit_meta_len(meta.entries.len()));
    b.extend_from_slice(&UNIT_MAGIC);
    put32(&mut b, VERSION);
    put32(&mut b, 0);
    put64(&mut b, h.seq);
    put64(&mut b, h.volume_id);
    put32(&mut b, h.index);
    put32(&mut b, meta.entries.len() as u32);
    for e in &meta.entries {
        put64(&mut b, e.offset);
        put32(&mut b, e.size);
        for x in [e.valid.0, e.valid.1, e.dirty.0, e.dirty.1] {
            b.extend_from_slice(&x.to_le_bytes());
        }
    }
    seal(&mut b);
    b
}

/// Decodes a unit-metadata copy from `buf` (which may be longer than it).
pub fn decode_unit_meta(buf: &[u8]) -> Result<(UnitHeader, UnitMeta), DecodeError> {
    let mut r = Reader::new(buf);
    check_head(&mut r, &UNIT_MAGIC)?;
    let crc = r.u32()?;
    let seq = r.u64()?;
    let volume_id = r.u64()?;
    let index = r.u32()?;
    let count = r.u32()? as usize;
    if count > MAX_ENTRIES || unit_meta_len(count) > buf.len() {
        return Err(DecodeError::BadCrc);
    }
    verify_crc(&buf[..unit_meta_len(count)], crc)?;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        entries.push(MetaEntry {
            offset: r.u64()?,
            size: r.u32()?,
            valid: (r.u16()?, r.u16()?),
            dirty: (r.u16()?, r.u16()?),
        });
    }
    let h = UnitHeader {
        seq,
        volume_id,
        index,
    };
    Ok((h, UnitMeta { entries }))
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
        covered_until = i + span;
    }
    Ok(())
}

fn check_head(r: &mut Reader<'_>, magic: &[u8; 8]) -> Result<(), DecodeError> {
    if r.bytes(8).map_err(|_| DecodeError::BadMagic)? != magic {
        return Err(DecodeError::BadMagic);
    }
    match r.u32().map_err(|_| DecodeError::BadMagic)? {
        VERSION => Ok(()),
        v => Err(DecodeError::Version(v)),
    }
}

/// Fills in the crc of an encoded record.
fn seal(b: &mut [u8]) {
    let crc = crc32c::crc32c(b);
    b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

fn verify_crc(rec: &[u8], want: u32) -> Result<(), DecodeError> {
    let mut crc = crc32c::crc32c(&rec[..CRC_AT]);
    crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc = crc32c::crc32c_append(crc, &rec[CRC_AT + 4..]);
    if crc == want {
        Ok(())
    } else {
        Err(DecodeError::BadCrc)
    }
}

fn malformed(s: impl Into<String>) -> DecodeError {
    DecodeError::Malformed(s.into())
}

fn put32(b: &mut Vec<u8>, x: u32) {
    b.extend_from_slice(&x.to_le_bytes());
}

fn put64(b: &mut Vec<u8>, x: u64) {
    b.extend_from_slice(&x.to_le_bytes());
}

/// A bounds-checked little-endian reader.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, at: 0 }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| malformed("record ends early"))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.bytes(n).map(|_| ())
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.bytes(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(
            self.bytes(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(
            self.bytes(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(
            self.bytes(8)?.try_into().expect("8 bytes"),
        ))
    }
}
