//! Stamped sectors: how a record copy is laid on the device so that a
//! write torn by a crash can be told from a corrupted one.
//!
//! A copy is written whole, every time: its record, then zeros, cut into
//! 512-byte sectors that each end in a stamp (the write's seq, an owner tag
//! and a crc32c of the sector). A device writes at least one sector
//! atomically, so a crash in the middle of a write leaves every sector
//! either the new write's or the copy's previous one: all stamps intact.
//! A sector whose stamp fails (a flipped bit, a zeroed sector, another
//! owner's bytes) is damage, never the result of a crash. See
//! `docs/cache-format.md`, "Integrity".

/// Bytes of a stamped sector (the smallest atomic write of any device).
pub const SECTOR: usize = 512;
/// Bytes of the stamp at the end of each sector: seq (u64), owner tag
/// (u32), crc32c (u32) of the sector up to the crc.
pub const STAMP_LEN: usize = 16;
/// Record bytes per sector.
pub const SECTOR_PAYLOAD: usize = SECTOR - STAMP_LEN;

/// Record bytes a copy of `copy_len` bytes holds.
pub const fn capacity(copy_len: usize) -> usize {
    copy_len / SECTOR * SECTOR_PAYLOAD
}

/// Lays `record` into a whole copy of `copy_len` bytes (a multiple of
/// [`SECTOR`]), every sector stamped with `seq` and `tag`. Panics if the
/// record does not fit (callers check [`capacity`] first).
pub fn frame(record: &[u8], seq: u64, tag: u32, copy_len: usize) -> Vec<u8> {
    assert!(copy_len.is_multiple_of(SECTOR) && record.len() <= capacity(copy_len));
    let mut out = vec![0u8; copy_len];
    for (i, sector) in out.chunks_exact_mut(SECTOR).enumerate() {
        let from = (i * SECTOR_PAYLOAD).min(record.len());
        let to = ((i + 1) * SECTOR_PAYLOAD).min(record.len());
        sector[..to - from].copy_from_slice(&record[from..to]);
        stamp(sector, seq, tag);
    }
    out
}

fn stamp(sector: &mut [u8], seq: u64, tag: u32) {
    let at = SECTOR_PAYLOAD;
    sector[at..at + 8].copy_from_slice(&seq.to_le_bytes());
    sector[at + 8..at + 12].copy_from_slice(&tag.to_le_bytes());
    let crc = crc32c::crc32c(&sector[..SECTOR - 4]);
    sector[SECTOR - 4..].copy_from_slice(&crc.to_le_bytes());
}

/// What one sector of a copy holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sector {
    /// Intact, written by the write with this seq.
    Stamped(u64),
    /// All zeros: never written, or zeroed.
    Zero,
    /// A stamp that fails: corrupt, or not this owner's.
    Damaged,
}

/// A copy read back: its record bytes (the sectors' payloads, damaged
/// ones included) and the state of each sector.
#[derive(Clone, Debug)]
pub struct Unframed {
    /// The payloads of all sectors, in order.
    pub record: Vec<u8>,
    /// Per sector.
    pub sectors: Vec<Sector>,
}

impl Unframed {
    /// Whether every sector is intact and carries `seq`.
    pub fn all_stamped(&self, seq: u64) -> bool {
        self.sectors.iter().all(|s| *s == Sector::Stamped(seq))
    }

    /// Whether every sector is intact (each one some write's).
    pub fn all_intact(&self) -> bool {
        self.sectors.iter().all(|s| matches!(s, Sector::Stamped(_)))
    }

    /// Whether no sector holds anything (a copy never written).
    pub fn all_zero(&self) -> bool {
        self.sectors.iter().all(|s| *s == Sector::Zero)
    }

    /// The highest seq an intact sector carries.
    pub fn newest_stamp(&self) -> Option<u64> {
        self.sectors
            .iter()
            .filter_map(|s| match s {
                Sector::Stamped(seq) => Some(*seq),
                _ => None,
            })
            .max()
    }

    /// Indices of the sectors that are not intact.
    pub fn damaged(&self) -> Vec<usize> {
        (0..self.sectors.len())
            .filter(|&i| !matches!(self.sectors[i], Sector::Stamped(_)))
            .collect()
    }
}

/// Reads a copy's sectors (a trailing partial sector is ignored), checking
/// each stamp against `tag`.
pub fn unframe(copy: &[u8], tag: u32) -> Unframed {
    let n = copy.len() / SECTOR;
    let mut record = Vec::with_capacity(n * SECTOR_PAYLOAD);
    let mut sectors = Vec::with_capacity(n);
    for sector in copy.chunks_exact(SECTOR) {
        record.extend_from_slice(&sector[..SECTOR_PAYLOAD]);
        sectors.push(inspect(sector, tag));
    }
    Unframed { record, sectors }
}

fn inspect(sector: &[u8], tag: u32) -> Sector {
    let at = SECTOR_PAYLOAD;
    let seq = u64::from_le_bytes(sector[at..at + 8].try_into().expect("8 bytes"));
    let got_tag = u32::from_le_bytes(sector[at + 8..at + 12].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(sector[SECTOR - 4..].try_into().expect("4 bytes"));
    if got_tag == tag && crc32c::crc32c(&sector[..SECTOR - 4]) == crc {
        Sector::Stamped(seq)
    } else if sector.iter().all(|&b| b == 0) {
        Sector::Zero
    } else {
        Sector::Damaged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_framed_record_reads_back_with_every_sector_stamped() {
        let rec: Vec<u8> = (0..1500u32).map(|i| i as u8).collect();
        let copy = frame(&rec, 7, 42, 8 * SECTOR);
        let u = unframe(&copy, 42);
        assert_eq!(&u.record[..rec.len()], &rec[..]);
        assert!(u.record[rec.len()..].iter().all(|&b| b == 0));
        assert!(u.all_stamped(7));
        assert_eq!(u.newest_stamp(), Some(7));
    }

    #[test]
    fn a_flipped_bit_a_zeroed_sector_and_another_owner_are_damage() {
        let mut copy = frame(b"record", 3, 1, 4 * SECTOR);
        copy[SECTOR + 100] ^= 0x10;
        copy[2 * SECTOR..3 * SECTOR].fill(0);
        let u = unframe(&copy, 1);
        assert_eq!(
            u.sectors,
            vec![
                Sector::Stamped(3),
                Sector::Damaged,
                Sector::Zero,
                Sector::Stamped(3)
            ]
        );
        assert_eq!(u.damaged(), vec![1, 2]);
        assert!(unframe(&copy, 2)
            .sectors
            .iter()
            .all(|s| *s != Sector::Stamped(3)));
    }

    #[test]
    fn a_torn_write_leaves_every_sector_intact() {
        let old = frame(b"old", 1, 9, 4 * SECTOR);
        let new = frame(b"new", 3, 9, 4 * SECTOR);
        let mut torn = new[..2 * SECTOR].to_vec();
        torn.extend_from_slice(&old[2 * SECTOR..]);
        let u = unframe(&torn, 9);
        assert!(u.all_intact());
        assert!(!u.all_stamped(3));
        assert_eq!(u.newest_stamp(), Some(3));
    }
}
