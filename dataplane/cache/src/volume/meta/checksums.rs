//! Checksums of dirty data in the table (docs/cache-format.md, "Checksums
//! of dirty data"): a host write that makes a block's dirty bytes whole
//! gives their crc32c, kept in memory (*pending*) and moved into the entry
//! once the block has not been written for [`SETTLE_AFTER`], in a
//! metadata write nobody waits for. Reads and write-backs verify against
//! either; a load against entries only. Before a write into a block whose
//! entry has a checksum, the entry loses it durably ([`MetaTable::uncheck`]):
//! so a hot block costs no metadata write for its checksum, and a crash
//! never leaves a checksum that half-written bytes fail.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

use engine::BlockInfo;

use super::MetaTable;
use crate::layout::{MetaEntry, UnitMeta, UNIT_SIZE};

/// How long a block's dirty bytes stay unwritten before their checksum
/// goes into its entry.
pub(crate) const SETTLE_AFTER: Duration = Duration::from_secs(1);

/// What a recorded change does to the checksum of a block's dirty bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DirtyCrc {
    /// Nothing wrote into the block: whatever it had holds if its dirty
    /// bytes are the same.
    Keep,
    /// A host write left these dirty bytes, whole in its buffer: their crc.
    New(u32),
    /// Unknown now.
    Drop,
}

/// Checksums known in memory, by the cache address of their block's slot.
#[derive(Default)]
pub(crate) struct Pending {
    by_slot: HashMap<u64, PendingCrc, BuildHasherDefault<SlotHasher>>,
}

/// Hashes a slot's cache address (a multiple of the smallest block size)
/// with one multiplication: looked up on every read of a dirty block, where
/// SipHash would cost more than the rest of the lookup.
#[derive(Default)]
pub(crate) struct SlotHasher(u64);

impl Hasher for SlotHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

#[derive(Clone, Copy)]
struct PendingCrc {
    crc: u32,
    /// The dirty sectors it covers (the entry must still say so).
    dirty: (u16, u16),
    since: Instant,
}

impl Pending {
    pub(super) fn set(&mut self, slot: u64, crc: u32, dirty: (u16, u16), since: Instant) {
        self.by_slot.insert(slot, PendingCrc { crc, dirty, since });
    }

    pub(super) fn forget(&mut self, slot: u64) {
        if !self.by_slot.is_empty() {
            self.by_slot.remove(&slot);
        }
    }

    /// Forgets every slot at or past `addr` (units cut by a shrink).
    pub(super) fn forget_from(&mut self, addr: u64) {
        self.by_slot.retain(|&slot, _| slot < addr);
    }

    fn get(&self, slot: u64, e: &MetaEntry) -> Option<u32> {
        let p = self.by_slot.get(&slot)?;
        (p.dirty == e.dirty).then_some(p.crc)
    }
}

pub(super) fn count_checked(m: &UnitMeta) -> usize {
    m.entries.iter().filter(|e| e.crc.is_some()).count()
}

/// The crc32c of a block's dirty bytes (the same function as the records'
/// crcs, by a crate that folds whole blocks with carry-less
/// multiplication where the CPU has it).
pub(crate) fn data_crc(bytes: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(bytes)
}

/// Dirty bytes a read can verify: `len` bytes at `at` in the read's
/// buffer (volume offset `offset`) must hash to `crc`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadCheck {
    pub at: usize,
    pub offset: u64,
    pub len: u64,
    pub crc: u32,
}

impl ReadCheck {
    /// The ranges of `checks` whose bytes in `buf` fail them.
    pub fn failures(buf: &[u8], checks: &[ReadCheck]) -> Vec<engine::Extent> {
        checks
            .iter()
            .filter(|c| data_crc(&buf[c.at..c.at + c.len as usize]) != c.crc)
            .map(|c| engine::Extent {
                offset: c.offset,
                len: c.len,
            })
            .collect()
    }
}

impl MetaTable {
    /// The crc of `b`'s dirty bytes, from its entry or in memory, and the
    /// entry.
    fn crc_for(&self, b: &BlockInfo) -> Option<(&MetaEntry, u32)> {
        // A clean block (the engine knows) needs no look at the table.
        b.dirty?;
        let (unit, idx) = self.locate(b.cache_addr);
        let e = self.units.get(unit)?.meta.entries.get(idx)?;
        if e.offset != b.offset || e.size != b.size || !e.is_dirty() {
            return None;
        }
        let crc = e.crc.or_else(|| self.pending.get(b.cache_addr, e))?;
        Some((e, crc))
    }

    /// Volume range of the dirty bytes of entry `e` of block `b`.
    fn dirty_range(&self, b: &BlockInfo, e: &MetaEntry) -> (u64, u64) {
        let s = self.sector_shift;
        (
            b.offset + (u64::from(e.dirty.0) << s),
            b.offset + (u64::from(e.dirty.1) << s),
        )
    }

    /// The checksum a write-back of volume bytes `[offset, offset + len)`
    /// out of block `b` must match, when it covers exactly its dirty bytes.
    pub fn writeback_checksum(&self, b: &BlockInfo, offset: u64, len: u64) -> Option<u32> {
        let (e, crc) = self.crc_for(b)?;
        let (lo, hi) = self.dirty_range(b, e);
        (lo == offset && hi == offset + len).then_some(crc)
    }

    /// Whether some block has a checksum.
    pub fn any_checked(&self) -> bool {
        self.checked > 0 || !self.pending.by_slot.is_empty()
    }

    /// What a read of volume bytes `[offset, offset + len)` over `blocks`
    /// can verify: the dirty bytes of checked blocks it reads whole.
    pub fn read_checks(
        &self,
        blocks: &[BlockInfo],
        offset: u64,
        len: u64,
        out: &mut Vec<ReadCheck>,
    ) {
        out.extend(blocks.iter().filter_map(|b| {
            let (e, crc) = self.crc_for(b)?;
            let (lo, hi) = self.dirty_range(b, e);
            (offset <= lo && hi <= offset + len).then(|| ReadCheck {
                at: (lo - offset) as usize,
                offset: lo,
                len: hi - lo,
                crc,
            })
        }));
    }

    /// Before a write into `b` (or zeroes): a checksum of it in memory is
    /// forgotten; if its entry vouches for its dirty bytes with one, that
    /// is dropped too, and the write's I/O must wait for the returned
    /// (unit, version). A crash during the write then leaves an entry that
    /// claims nothing about those bytes, never a checksum that half-written
    /// data fails.
    ///
    /// That metadata write is the whole unit's, so every other checksum of
    /// the unit leaves the device in it too and waits in memory to settle
    /// again: the next writes into the unit's blocks (a file rewritten in
    /// place, a log wrapping round) wait for no metadata write of their
    /// own. Until then a restart has no checksum for those blocks, as for
    /// any block written in the last [`SETTLE_AFTER`].
    pub fn uncheck(&mut self, b: &BlockInfo) -> Option<(u32, u64)> {
        // A checksum in memory no longer holds either.
        self.pending.forget(b.cache_addr);
        let (unit, idx) = self.locate(b.cache_addr);
        let e = self.units.get(unit)?.meta.entries.get(idx)?;
        if e.offset != b.offset || e.size != b.size || e.crc.is_none() {
            return None;
        }
        let (unit_addr, now) = (unit as u64 * UNIT_SIZE, Instant::now());
        for (i, e) in self.units[unit].meta.entries.iter_mut().enumerate() {
            let Some(crc) = e.crc.take() else { continue };
            self.checked -= 1;
            if i != idx {
                let slot = unit_addr + i as u64 * self.min_block;
                self.pending.set(slot, crc, e.dirty, now);
            }
        }
        self.bump(unit);
        Some((unit as u32, self.units[unit].version))
    }

    /// Moves checksums pending for `min_age` ([`SETTLE_AFTER`], or zero
    /// when the volume stops) into their entries, if those still describe
    /// the same dirty bytes.
    pub fn settle(&mut self, now: Instant, min_age: Duration) {
        if self.pending.by_slot.is_empty() {
            return;
        }
        let due: Vec<(u64, PendingCrc)> = self
            .pending
            .by_slot
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.since) >= min_age)
            .map(|(&slot, &p)| (slot, p))
            .collect();
        for (slot, p) in due {
            self.pending.by_slot.remove(&slot);
            let (unit, idx) = self.locate(slot);
            let Some(e) = self
                .units
                .get_mut(unit)
                .and_then(|u| u.meta.entries.get_mut(idx))
            else {
                continue;
            };
            if e.is_free() || e.dirty != p.dirty || e.crc.is_some() {
                continue;
            }
            e.crc = Some(p.crc);
            self.checked += 1;
            self.bump(unit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::data_crc;

    /// The format says crc32c: both crates must agree on it, at every
    /// length a block's dirty bytes can have and at odd ones.
    #[test]
    fn data_crc_is_crc32c() {
        let bytes: Vec<u8> = (0..256 * 1024u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [0, 1, 7, 512, 4096, 4099, 65536, 256 * 1024] {
            assert_eq!(
                data_crc(&bytes[..len]),
                crc32c::crc32c(&bytes[..len]),
                "{len} bytes"
            );
        }
        assert_eq!(
            data_crc(b"123456789"),
            0xe306_9283,
            "the catalogue's check value"
        );
    }
}
