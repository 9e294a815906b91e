//! Damaged metadata copies: every one is logged and counted, by kind
//! (`rackcache_cache_metadata_errors_total{device,kind}`); and dirty data
//! that failed its checksum (`rackcache_cache_data_checksum_errors_total`,
//! logged by the volume that found it).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::layout::pick::{Copy, Damage};

/// Damaged copies seen, by kind.
#[derive(Debug, Default)]
pub struct MetadataErrors {
    torn: AtomicU64,
    checksum: AtomicU64,
    malformed: AtomicU64,
    dirty_data: AtomicU64,
}

impl MetadataErrors {
    /// `(kind, count)` for every kind, zeros included.
    pub fn counts(&self) -> [(Damage, u64); 3] {
        [
            (Damage::Torn, self.torn.load(Ordering::Relaxed)),
            (Damage::Checksum, self.checksum.load(Ordering::Relaxed)),
            (Damage::Malformed, self.malformed.load(Ordering::Relaxed)),
        ]
    }

    /// Dirty blocks whose data failed its checksum.
    pub fn data_checksum(&self) -> u64 {
        self.dirty_data.load(Ordering::Relaxed)
    }

    pub(crate) fn note_data_checksum(&self, blocks: u64) {
        self.dirty_data.fetch_add(blocks, Ordering::Relaxed);
    }

    /// The count of one kind.
    pub fn count(&self, kind: Damage) -> u64 {
        self.counter(kind).load(Ordering::Relaxed)
    }

    fn counter(&self, kind: Damage) -> &AtomicU64 {
        match kind {
            Damage::Torn => &self.torn,
            Damage::Checksum => &self.checksum,
            Damage::Malformed => &self.malformed,
        }
    }

    /// Logs and counts `copy` if it is damaged; `what` names the record
    /// ("superblock", "unit 3 of volume v").
    pub(crate) fn note<T>(&self, device: &str, what: &str, index: usize, copy: &Copy<T>) {
        let Copy::Damaged {
            damage,
            newest,
            reason,
        } = copy
        else {
            return;
        };
        self.counter(*damage).fetch_add(1, Ordering::Relaxed);
        let copy = if index == 0 { "A" } else { "B" };
        match damage {
            // The expected trace of a crash during a write.
            Damage::Torn => tracing::info!(device, record = what, copy, ?newest, %reason,
                "metadata copy torn by an interrupted write; the other copy is used"),
            Damage::Checksum | Damage::Malformed => tracing::error!(device, record = what,
                copy, kind = damage.as_str(), ?newest, %reason, "metadata copy damaged"),
        }
    }
}
