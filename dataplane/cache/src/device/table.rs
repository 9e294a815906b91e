//! The superblock copies at open: judged, damage reported, and what a
//! damaged table means for loading.

use super::*;
use crate::layout::pick::Copy;

/// Judges both superblock copies of the header area `buf`, logging and
/// counting damaged ones. A copy of another format version refuses the
/// device: this build must not overwrite what a newer one wrote.
pub(super) fn judge_copies(
    device: &str,
    buf: &[u8],
    max_units: u32,
    errors: &MetadataErrors,
) -> Result<[Copy<Superblock>; 2], DeviceError> {
    let half = layout::SB_COPY_SIZE as usize;
    let copies = [0, 1].map(|c| {
        let (u, judged) = layout::judge_superblock(&buf[c * half..(c + 1) * half], max_units);
        // Nothing stamped and no magic of ours: another system's bytes, not
        // a damaged copy (whether formatting may go over them is
        // `signature`'s call).
        let ours = u.newest_stamp().is_some() || u.record.starts_with(&layout::SB_MAGIC);
        match judged {
            Copy::Damaged { .. } if !ours => Copy::Blank,
            j => j,
        }
    });
    for c in &copies {
        if let Copy::OtherVersion(v) = c {
            return Err(DeviceError::Version {
                device: device.to_owned(),
                source: layout::DecodeError::Version(*v),
            });
        }
    }
    for (i, c) in copies.iter().enumerate() {
        errors.note(device, "superblock", i, c);
    }
    Ok(copies)
}

/// The refusal when the newest table cannot be vouched for.
pub(super) fn lost(device: &str, surviving: Option<(usize, u64, Superblock)>) -> DeviceError {
    let reason = match surviving {
        Some((copy, seq, sb)) => format!(
            "superblock copy {} is damaged and may hold a newer volume table than copy {} \
             (seq {seq}, {} volumes); loading the older table could lose volumes created or \
             changed since, so the device is not loaded",
            if copy == 0 { 'B' } else { 'A' },
            if copy == 0 { 'A' } else { 'B' },
            sb.volumes.len()
        ),
        None => "both superblock copies are damaged (no valid volume table)".into(),
    };
    DeviceError::Corrupt {
        device: device.to_owned(),
        reason,
    }
}
