//! Per cache device series: `rackcache_cache_metadata_errors_total{device,kind}`,
//! the damaged metadata copies the device found (torn copies after a
//! crash, copies failing their checksum, malformed ones; see
//! docs/cache-format.md, "Integrity"). Every opened device shows all kinds,
//! zeros included, so an alert can watch the rate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cache::device::CacheDevice;
use metrics::Registry;

use super::advance;

/// The family.
pub const METADATA_ERRORS: (&str, &str) = (
    "rackcache_cache_metadata_errors_total",
    "Damaged metadata copies found on the cache device, by kind (torn: a write interrupted by a crash, recovered; checksum, malformed: damage).",
);

/// The dirty-data family.
pub const DATA_CHECKSUM_ERRORS: (&str, &str) = (
    "rackcache_cache_data_checksum_errors_total",
    "Dirty blocks whose data failed its checksum on the cache device (bit rot): found when a volume loaded or before a write-back; never served or written back.",
);

/// What each device's counters showed at the last refresh.
#[derive(Default)]
pub struct DeviceMetrics {
    last: Mutex<HashMap<(String, &'static str), u64>>,
}

impl DeviceMetrics {
    /// Copies every device's counts into its series.
    pub fn refresh<'a>(
        &self,
        registry: &Registry,
        devices: impl IntoIterator<Item = (&'a String, &'a Arc<CacheDevice>)>,
    ) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        for (name, dev) in devices {
            for (kind, n) in dev.metadata_errors().counts() {
                let kind = kind.as_str();
                let labels = [("device", name.as_str()), ("kind", kind)];
                let (family, help) = METADATA_ERRORS;
                let c = registry
                    .counter(family, help, &labels)
                    .expect("valid metric names");
                // A device opened again counts from zero: `advance` adds it all.
                advance(&c, last.entry((name.clone(), kind)).or_default(), n);
            }
            let (family, help) = DATA_CHECKSUM_ERRORS;
            let c = registry
                .counter(family, help, &[("device", name.as_str())])
                .expect("valid metric names");
            let n = dev.metadata_errors().data_checksum();
            advance(&c, last.entry((name.clone(), "data")).or_default(), n);
        }
    }
}
