//! The cached bdevs among the registered ones: a cached volume is a
//! [`Bdev::Layered`] made by the `cache` crate, found here by its type for
//! the handlers and tasks that act on cached bdevs only.

use bdev::Bdev;
use cache::volume::CachedVolume;

use crate::app::{App, State};

/// The cached volume a registered bdev is, if it is one.
pub fn as_volume(b: &Bdev) -> Option<&CachedVolume> {
    match b {
        Bdev::Layered(l) => l.as_any().downcast_ref::<CachedVolume>(),
        _ => None,
    }
}

/// Every cached bdev, in creation order.
pub fn volumes(state: &State) -> Vec<CachedVolume> {
    let mut list: Vec<_> = state.bdevs.values().collect();
    list.sort_by_key(|(seq, _)| *seq);
    list.iter()
        .filter_map(|(_, r)| as_volume(&r.bdev).cloned())
        .collect()
}

/// At shutdown (after the NVMe-oF target stopped): stops every cached
/// volume, newest first, so that in-flight I/O finishes and its metadata
/// is durable. Dirty data stays in the cache (a restart loads it).
pub async fn stop_all(app: &App) {
    let list = volumes(&*app.state.lock().await);
    for v in list.iter().rev() {
        let name = v.params().name;
        match v.stop(false).await {
            Ok(()) => tracing::info!(bdev = %name, "cached bdev stopped"),
            Err(e) => tracing::error!(bdev = %name, error = %e, "stopping cached bdev failed"),
        }
    }
}
