//! Encoding and decoding of the records (layout in `docs/cache-format.md`):
//! bounds-checked, never panicking on arbitrary bytes.

use super::*;

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
        put32(&mut b, e.crc.unwrap_or(0));
        put32(&mut b, if e.crc.is_some() { ENTRY_CHECKED } else { 0 });
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
        let (offset, size) = (r.u64()?, r.u32()?);
        let valid = (r.u16()?, r.u16()?);
        let dirty = (r.u16()?, r.u16()?);
        let (crc, flags) = (r.u32()?, r.u32()?);
        if flags & !ENTRY_CHECKED != 0 {
            return Err(malformed(format!("unknown entry flags {flags:#x}")));
        }
        entries.push(MetaEntry {
            offset,
            size,
            valid,
            dirty,
            crc: (flags & ENTRY_CHECKED != 0).then_some(crc),
        });
    }
    let h = UnitHeader {
        seq,
        volume_id,
        index,
    };
    Ok((h, UnitMeta { entries }))
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
