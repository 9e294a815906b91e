//! A record copy as it lies on the device: encoded, then framed into
//! stamped sectors (see [`super::frame`]); and read back, judged.

use super::frame::{self, Unframed};
use super::pick::Copy;
use super::*;

/// Owner tag of superblock sectors.
pub const SB_TAG: u32 = u32::from_le_bytes(*b"SBLK");
/// Largest superblock record a copy holds.
pub const SB_RECORD_MAX: usize = frame::capacity(SB_COPY_SIZE as usize);

/// Owner tag of the metadata sectors of unit `index` of volume
/// `volume_id`: a sector another owner left behind is not this one's.
pub fn unit_tag(volume_id: u64, index: u32) -> u32 {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&volume_id.to_le_bytes());
    b[8..].copy_from_slice(&index.to_le_bytes());
    crc32c::crc32c(&b)
}

/// A whole superblock copy (`SB_COPY_SIZE` bytes). Panics if the table does
/// not fit (`CacheDevice` refuses such a change before).
pub fn frame_superblock(sb: &Superblock) -> Vec<u8> {
    frame::frame(
        &encode_superblock(sb),
        sb.seq,
        SB_TAG,
        SB_COPY_SIZE as usize,
    )
}

/// Judges a superblock copy read back.
pub fn judge_superblock(copy: &[u8], max_units: u32) -> (Unframed, Copy<Superblock>) {
    let u = frame::unframe(copy, SB_TAG);
    let judged = Copy::judge(&u, |rec| {
        decode_superblock(rec, max_units).map(|sb| (sb.seq, sb))
    });
    (u, judged)
}

// The largest unit record fits one copy.
const _: () =
    assert!(UNIT_HEADER_LEN + MAX_ENTRIES * ENTRY_LEN <= frame::capacity(META_COPY_SIZE as usize));

/// A whole unit-metadata copy (`META_COPY_SIZE` bytes).
pub fn frame_unit_meta(h: &UnitHeader, meta: &UnitMeta) -> Vec<u8> {
    let rec = encode_unit_meta(h, meta);
    frame::frame(
        &rec,
        h.seq,
        unit_tag(h.volume_id, h.index),
        META_COPY_SIZE as usize,
    )
}

/// Judges a metadata copy of unit `index` of `region`: a record of another
/// owner, or with entries the volume cannot have, is not valid.
pub fn judge_unit_meta(copy: &[u8], region: &VolumeRegion, index: u32) -> Copy<UnitMeta> {
    let u = frame::unframe(copy, unit_tag(region.id, index));
    Copy::judge(&u, |rec| {
        let (h, meta) = decode_unit_meta(rec)?;
        if h.volume_id != region.id || h.index != index {
            return Err(DecodeError::Malformed(format!(
                "stamped for volume id {:#x} unit {}",
                h.volume_id, h.index
            )));
        }
        check_unit_meta(region, &meta).map_err(DecodeError::Malformed)?;
        Ok((h.seq, meta))
    })
}
