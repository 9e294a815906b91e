//! Dirty data that failed its checksum (found when the volume loaded, or
//! read back for a write-back): its bytes are never served or written
//! back, and the host gets a media error on them instead of damaged or
//! stale data. A write or deallocate covering a damaged range whole
//! replaces what was lost and ends the damage there.

use bdev::BdevError;
use engine::{BlockInfo, Extent};

use super::{overlaps, Owner};
use crate::volume::exec::damaged_error;
use crate::volume::meta::ReadCheck;
use crate::volume::msg::HostOp;

/// Damaged volume ranges (each the dirty range of one block).
#[derive(Default)]
pub(super) struct Damage {
    ranges: Vec<Extent>,
}

impl Damage {
    /// Bytes damaged.
    pub(super) fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.len).sum()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

impl Owner {
    /// Records ranges found damaged; each is logged and counted on the
    /// device once.
    pub(super) fn note_damaged(&mut self, found: &[Extent]) {
        let mut new = 0;
        for &r in found {
            if self.damage.ranges.contains(&r) {
                continue;
            }
            tracing::error!(bdev = %self.params.name, device = %self.devices.cache.name(),
                offset = r.offset, len = r.len,
                "dirty data failed its checksum: not served, not written back (media error to the host)");
            self.damage.ranges.push(r);
            new += 1;
        }
        self.devices.cache.metadata_errors().note_data_checksum(new);
        if new > 0 {
            // The checksums that found it go on the device now, so that a
            // restart finds the damage again (not only after the block
            // rested).
            self.meta
                .settle(std::time::Instant::now(), std::time::Duration::ZERO);
        }
    }

    /// The error for host I/O that touches damaged bytes: any read of them,
    /// a write or deallocate that does not replace a damaged range whole.
    pub(super) fn refuse_damaged(&self, op: HostOp, offset: u64, len: u64) -> Option<BdevError> {
        if self.damage.is_empty() {
            return None;
        }
        let io = Extent { offset, len };
        let replaces = |r: &Extent| {
            op != HostOp::Read && io.offset <= r.offset && r.offset + r.len <= io.offset + io.len
        };
        let r = self
            .damage
            .ranges
            .iter()
            .find(|r| overlaps(**r, io) && !replaces(r))?;
        Some(damaged_error(&self.params.name, r.offset, r.len))
    }

    /// Collects in `self.checks` what a read of `[offset, offset + len)`
    /// can verify: the dirty bytes of checked blocks it reads whole (none,
    /// and no lookup, while no block is checked: the hit path of clean
    /// data stays as it was). Whether there is any.
    pub(super) fn read_checks(&mut self, offset: u64, len: u64) -> bool {
        self.checks.clear();
        if !self.meta.any_checked() {
            return false;
        }
        self.blocks.clear();
        self.engine.blocks_in(offset, len, &mut self.blocks);
        self.meta
            .read_checks(&self.blocks, offset, len, &mut self.checks);
        !self.checks.is_empty()
    }

    /// [`Self::read_checks`] for a read that `block` holds whole, when the
    /// engine's lookup found its block dirty (`None`: clean, nothing to
    /// verify and no second lookup).
    pub(super) fn read_checks_in(&mut self, block: Option<&BlockInfo>, offset: u64, len: u64) {
        self.checks.clear();
        if let Some(b) = block.filter(|_| self.meta.any_checked()) {
            self.meta
                .read_checks(std::slice::from_ref(b), offset, len, &mut self.checks);
        }
    }

    /// Verifies a read's bytes against `self.checks`: a failure is noted
    /// as damage and is the host's error.
    pub(super) fn verify_read(&mut self, buf: &[u8]) -> Result<(), BdevError> {
        if self.checks.is_empty() {
            return Ok(());
        }
        let bad = ReadCheck::failures(buf, &self.checks);
        let Some(first) = bad.first() else {
            return Ok(());
        };
        let e = damaged_error(&self.params.name, first.offset, first.len);
        self.note_damaged(&bad);
        Err(e)
    }

    /// A write or deallocate of `io` completed: damaged ranges it covered
    /// hold its data now.
    pub(super) fn replaced_damaged(&mut self, io: Extent) {
        self.damage
            .ranges
            .retain(|r| !(io.offset <= r.offset && r.offset + r.len <= io.offset + io.len));
    }
}
