//! Shares of a metric that one writer at a time adds to, summed by every
//! reader: how a hot path counts without a locked instruction.
//!
//! A shared counter is an atomic every writer updates with a locked
//! read-modify-write (a `fetch_add`), some 20 cycles each even when no
//! other CPU touches it. A share belongs to one writer at a time (the
//! caller serializes, e.g. under a lock it holds anyway), which adds with
//! a plain load and store; readers (a scrape, `bdev_get_iostat`) add the
//! shares to the shared value. SPDK keeps per-channel I/O statistics for
//! the same reason and sums them when they are queried.
//!
//! A share that goes away adds what it counted to the shared value first,
//! under the same lock readers take, so a reader never sees it twice or
//! not at all.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

/// The live shares of one metric.
#[derive(Debug)]
pub(crate) struct Shares<T>(Mutex<Vec<Arc<T>>>);

impl<T> Default for Shares<T> {
    fn default() -> Self {
        Self(Mutex::new(Vec::new()))
    }
}

impl<T> Shares<T> {
    /// The shares, locked: readers sum them, a departing share folds in.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Vec<Arc<T>>> {
        // A panic while locked leaves the list whole.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn add(&self, share: Arc<T>) {
        self.lock().push(share);
    }

    /// Takes `share` out of the list, after `fold` (under the lock) moved
    /// its counts to the shared value.
    pub(crate) fn remove(&self, share: &Arc<T>, fold: impl FnOnce(&T)) {
        let mut shares = self.lock();
        fold(share);
        shares.retain(|s| !Arc::ptr_eq(s, share));
    }
}

/// Adds `n` to a cell only its one writer changes: a plain load and store.
#[inline]
pub(crate) fn add_unshared(cell: &AtomicU64, n: u64) {
    cell.store(cell.load(Relaxed).wrapping_add(n), Relaxed);
}

/// Makes a share `Send` but not `Sync`: one thread at a time may hold a
/// reference to add through, so no two writers add at once.
pub(crate) type OneWriter = PhantomData<std::cell::Cell<()>>;
