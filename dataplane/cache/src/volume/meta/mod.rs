//! The volume's persisted block table: what the cache device's unit
//! metadata says, kept in memory, and the rules for writing it.
//!
//! The table mirrors the engine's blocks as they are *on the device*: an
//! entry is added only after the data it describes was written, and taken
//! out before its slot is written with other data. Writes of one unit's
//! metadata are serialized (never two in flight) and always carry the whole
//! latest state of the unit, so the newest complete copy on the device holds
//! every change made before it was taken.
//!
//! Two kinds of waiting build on versions:
//! - a request that must not be acknowledged before its entry is durable
//!   (a write-back write) waits for its unit's version;
//! - a request whose I/O could otherwise make a stale entry lie (a fill or
//!   write into a reused slot, a write to core of a range an evicted entry
//!   still describes) waits for the *removal barrier*: every removal
//!   recorded before it was planned is durable.

use std::collections::BTreeMap;
use std::time::Instant;

use engine::BlockInfo;

use crate::layout::{MetaEntry, UnitMeta, VolumeRegion, UNIT_SIZE};

mod checksums;
pub(crate) use checksums::{data_crc, DirtyCrc, ReadCheck, SETTLE_AFTER};

/// One unit's table and its write state.
struct Unit {
    meta: UnitMeta,
    /// Bumped on every change.
    version: u64,
    /// The version the last completed write carried.
    durable: u64,
    /// A write is in flight.
    writing: bool,
    /// The last write failed: no retry until [`MetaTable::retry_failed`].
    failed: bool,
}

/// A condition a request waits for.
#[derive(Clone, Debug, Default)]
pub(crate) struct Durability {
    /// Units that must reach these versions.
    pub units: Vec<(u32, u64)>,
    /// Removals up to this sequence number must be durable.
    pub removals: u64,
}

/// The persisted block table of one volume.
pub(crate) struct MetaTable {
    units: Vec<Unit>,
    min_block: u64,
    sector_shift: u32,
    /// Removal sequence numbers not yet durable -> (unit, version that
    /// carries the removal).
    pending_removals: BTreeMap<u64, (u32, u64)>,
    next_removal: u64,
    /// Some unit may need a write: set by every change that can make one
    /// need it, so that `take_writes`, asked after every event (every read
    /// hit too), scans the units only then.
    maybe_writes: bool,
    /// Entries with a checksum: while none (and none pending), reads look
    /// for none.
    checked: usize,
    /// Checksums known in memory, not yet in their entries.
    pending: checksums::Pending,
}

impl MetaTable {
    /// A table over `region`'s units, filled from what was read from them.
    pub fn new(region: &VolumeRegion, loaded: Vec<UnitMeta>) -> MetaTable {
        let n = region.entries_per_unit();
        let mut units: Vec<Unit> = loaded
            .into_iter()
            .map(|meta| Unit {
                meta,
                version: 0,
                durable: 0,
                writing: false,
                failed: false,
            })
            .collect();
        units.resize_with(region.units.len(), || Unit {
            meta: UnitMeta::empty(n),
            version: 0,
            durable: 0,
            writing: false,
            failed: false,
        });
        let checked = units
            .iter()
            .map(|u| checksums::count_checked(&u.meta))
            .sum();
        MetaTable {
            units,
            min_block: u64::from(region.min_block),
            sector_shift: region.sector_size.trailing_zeros(),
            pending_removals: BTreeMap::new(),
            next_removal: 0,
            maybe_writes: false,
            checked,
            pending: checksums::Pending::default(),
        }
    }

    /// Grows or shrinks to `n` units (new units empty, as the device wrote
    /// them).
    pub fn resize(&mut self, n: usize, entries_per_unit: usize) {
        // Removals on units that go can never be written (the caller waited
        // for them before a shrink).
        self.pending_removals
            .retain(|_, &mut (u, _)| (u as usize) < n);
        for u in self.units.iter().skip(n) {
            self.checked -= checksums::count_checked(&u.meta);
        }
        self.pending.forget_from(n as u64 * UNIT_SIZE);
        self.units.truncate(n);
        self.maybe_writes = true;
        self.units.resize_with(n, || Unit {
            meta: UnitMeta::empty(entries_per_unit),
            version: 0,
            durable: 0,
            writing: false,
            failed: false,
        });
    }

    fn locate(&self, cache_addr: u64) -> (usize, usize) {
        let unit = (cache_addr / UNIT_SIZE) as usize;
        let idx = ((cache_addr % UNIT_SIZE) / self.min_block) as usize;
        (unit, idx)
    }

    /// The entry describing `b` as the engine has it now, `crc` covering its
    /// dirty bytes (dropped if it has none).
    fn entry_of(&self, b: &BlockInfo, crc: Option<u32>) -> MetaEntry {
        let s = self.sector_shift;
        let rel = |x: u64| ((x - b.offset) >> s) as u16;
        let valid = (rel(b.valid.offset), rel(b.valid.end()));
        let dirty = b
            .dirty
            .map(|d| (rel(d.offset), rel(d.end())))
            .unwrap_or((0, 0));
        MetaEntry {
            offset: b.offset,
            size: b.size,
            valid,
            dirty,
            crc: crc.filter(|_| dirty.0 < dirty.1),
        }
    }

    fn bump(&mut self, unit: usize) {
        self.units[unit].version += 1;
        self.maybe_writes = true;
    }

    /// Takes out every entry overlapping cache range `[addr, addr + len)`
    /// other than one describing exactly the block at `keep` (volume offset,
    /// size). Returns the removal sequence number to wait for, if anything
    /// was taken out.
    pub fn clear_cache_range(
        &mut self,
        addr: u64,
        len: u64,
        keep: Option<(u64, u32)>,
    ) -> Option<u64> {
        let mut last = None;
        let end = addr + len;
        // Entries start at multiples of min_block and are at most one unit
        // long, so the ones overlapping the range start in its units.
        let mut a = addr - addr % UNIT_SIZE;
        while a < end {
            let (unit, _) = self.locate(a);
            if unit >= self.units.len() {
                break;
            }
            let mut changed = false;
            for (i, e) in self.units[unit].meta.entries.iter_mut().enumerate() {
                if e.is_free() {
                    continue;
                }
                let start = a + i as u64 * self.min_block;
                let stop = start + u64::from(e.size);
                if stop <= addr || start >= end || keep == Some((e.offset, e.size)) {
                    continue;
                }
                self.checked -= usize::from(e.crc.is_some());
                self.pending.forget(start);
                *e = MetaEntry::FREE;
                changed = true;
            }
            if changed {
                self.bump(unit);
                last = Some(self.note_removal(unit));
            }
            a += UNIT_SIZE;
        }
        last
    }

    fn note_removal(&mut self, unit: usize) -> u64 {
        self.next_removal += 1;
        let v = self.units[unit].version;
        self.pending_removals
            .insert(self.next_removal, (unit as u32, v));
        self.next_removal
    }

    /// Takes out the entry of a block that left the cache (at `cache_addr`,
    /// describing volume offset `offset`). Returns its removal number.
    pub fn remove(&mut self, cache_addr: u64, offset: u64) -> Option<u64> {
        let (unit, idx) = self.locate(cache_addr);
        let e = self.units.get_mut(unit)?.meta.entries.get_mut(idx)?;
        if e.is_free() || e.offset != offset {
            return None;
        }
        self.checked -= usize::from(e.crc.is_some());
        self.pending.forget(cache_addr);
        *e = MetaEntry::FREE;
        self.bump(unit);
        Some(self.note_removal(unit))
    }

    /// Records `b` as the engine has it now (after its data was written);
    /// `crc` says what becomes of the checksum of its dirty bytes. Returns
    /// the unit and the version that carries it.
    pub fn record(&mut self, b: &BlockInfo, crc: DirtyCrc, now: Instant) -> Option<(u32, u64)> {
        let (unit, idx) = self.locate(b.cache_addr);
        let prev = *self.units.get(unit)?.meta.entries.get(idx)?;
        let fresh = self.entry_of(b, None);
        let same = prev.offset == b.offset && prev.size == b.size && prev.dirty == fresh.dirty;
        let entry = match crc {
            DirtyCrc::Keep if same => MetaEntry {
                crc: prev.crc,
                ..fresh
            },
            _ => fresh,
        };
        match crc {
            DirtyCrc::Keep if same => {}
            DirtyCrc::New(c) if entry.is_dirty() => {
                self.pending.set(b.cache_addr, c, entry.dirty, now)
            }
            _ => self.pending.forget(b.cache_addr),
        }
        if prev == entry {
            // Unchanged, but the version that carries it may still be in
            // flight: a write-back write must wait for it all the same.
            return Some((unit as u32, self.units[unit].version));
        }
        // Anything else overlapping its slot is gone (the caller cleared it
        // durably before writing the data; this keeps the table exact).
        self.clear_cache_range(b.cache_addr, u64::from(b.size), Some((b.offset, b.size)));
        let slot = &mut self.units[unit].meta.entries[idx];
        self.checked =
            self.checked + usize::from(entry.crc.is_some()) - usize::from(slot.crc.is_some());
        *slot = entry;
        self.bump(unit);
        Some((unit as u32, self.units[unit].version))
    }

    /// The highest removal number recorded so far (the barrier a request
    /// planned now waits for).
    pub fn removal_mark(&self) -> u64 {
        self.next_removal
    }

    /// Whether `d` holds.
    pub fn satisfied(&self, d: &Durability) -> bool {
        let removals_ok = self
            .pending_removals
            .keys()
            .next()
            .is_none_or(|&first| first > d.removals);
        removals_ok
            && d.units
                .iter()
                .all(|&(u, v)| self.units.get(u as usize).is_none_or(|x| x.durable >= v))
    }

    /// Units that need a write and have none in flight: marks them writing
    /// and returns (unit, version, snapshot) for each.
    pub fn take_writes(&mut self) -> Vec<(u32, u64, UnitMeta)> {
        let mut out = Vec::new();
        if !std::mem::take(&mut self.maybe_writes) {
            return out;
        }
        for (i, u) in self.units.iter_mut().enumerate() {
            if !u.writing && !u.failed && u.version > u.durable {
                u.writing = true;
                out.push((i as u32, u.version, u.meta.clone()));
            }
        }
        out
    }

    /// A write of `unit` carrying `version` completed.
    pub fn write_done(&mut self, unit: u32, version: u64, ok: bool) {
        let Some(u) = self.units.get_mut(unit as usize) else {
            return;
        };
        u.writing = false;
        u.failed = !ok;
        self.maybe_writes = true;
        if ok {
            u.durable = u.durable.max(version);
            let durable = u.durable;
            self.pending_removals
                .retain(|_, &mut (pu, pv)| !(pu == unit && pv <= durable));
        }
    }

    /// Whether `d` waits for a unit whose last metadata write failed.
    pub fn doomed(&self, d: &Durability) -> bool {
        let failed = |u: u32| self.units.get(u as usize).is_some_and(|x| x.failed);
        d.units
            .iter()
            .any(|&(u, v)| failed(u) && self.units[u as usize].durable < v)
            || self
                .pending_removals
                .range(..=d.removals)
                .any(|(_, &(u, _))| failed(u))
    }

    /// Lets units whose write failed be written again.
    pub fn retry_failed(&mut self) {
        for u in &mut self.units {
            u.failed = false;
        }
        self.maybe_writes = true;
    }

    /// Whether every change is durable and no write is in flight.
    pub fn is_clean(&self) -> bool {
        self.units
            .iter()
            .all(|u| !u.writing && u.durable >= u.version)
    }

    /// Every block the table holds, as the engine's restore takes them:
    /// unit order, entry order.
    pub fn blocks(&self) -> Vec<(u64, MetaEntry)> {
        let mut out = Vec::new();
        for (u, unit) in self.units.iter().enumerate() {
            for (i, e) in unit.meta.entries.iter().enumerate() {
                if !e.is_free() {
                    out.push((u as u64 * UNIT_SIZE + i as u64 * self.min_block, *e));
                }
            }
        }
        out
    }

    /// Drops entries the engine refused to restore (inconsistent records)
    /// or that lie beyond the engine's capacity, so the next write of their
    /// units says so too.
    pub fn drop_entry(&mut self, cache_addr: u64) {
        let (unit, idx) = self.locate(cache_addr);
        if let Some(e) = self
            .units
            .get_mut(unit)
            .and_then(|u| u.meta.entries.get_mut(idx))
        {
            self.checked -= usize::from(e.crc.is_some());
            self.pending.forget(cache_addr);
            *e = MetaEntry::FREE;
            self.bump(unit);
        }
    }

    /// Bytes of the table in memory.
    pub fn memory_bytes(&self) -> usize {
        self.units
            .iter()
            .map(|u| u.meta.entries.capacity() * std::mem::size_of::<MetaEntry>())
            .sum::<usize>()
            + self.units.capacity() * std::mem::size_of::<Unit>()
    }
}
