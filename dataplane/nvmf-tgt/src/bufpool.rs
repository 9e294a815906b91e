//! Data buffers: a budget shared by every queue pair of the target, and a
//! small per-connection cache of freed buffers.
//!
//! The budget is SPDK's: `num_shared_buffers` units of `io_unit_size`
//! bytes. A command that needs a data buffer (a read, or a write whose data
//! comes by R2T) takes `ceil(len / io_unit_size)` units as a [`Grant`]
//! before any memory is allocated, and gives them back when its buffer is
//! freed (for read data, once it has been written to the socket). A command
//! that finds no units waits in `ReqState::AwaitingBuffer`; no R2T is sent
//! for it until it has them. One queue pair holds at most half the units
//! (at least one largest transfer), so a host that opens many writes and
//! never sends their data cannot starve the others. In-capsule data is not
//! counted: it is bounded per queue by the queue depth and the in-capsule
//! data size, as in SPDK.
//!
//! The cache ([`BufPool`]) keeps up to `buf_cache_size` freed buffers per
//! connection so that steady-state I/O does not allocate; cached memory
//! holds no units.

use std::sync::Arc;

use bdev::DmaBuf;
use metrics::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes kept per connection's cache at most.
const MAX_POOLED_BYTES: usize = 16 << 20;

/// The target-wide buffer budget.
pub struct SharedBuffers {
    units: Arc<Semaphore>,
    /// Units in the budget.
    pub total_units: u32,
    /// Bytes per unit.
    pub unit_size: u32,
    /// Bytes granted now (`rackcache_nvmf_buffer_bytes_in_use`).
    pub in_use: Arc<Gauge>,
}

impl SharedBuffers {
    /// A budget of `units` units of `unit_size` bytes.
    pub fn new(units: u32, unit_size: u32, in_use: Arc<Gauge>) -> Self {
        Self {
            units: Arc::new(Semaphore::new(units as usize)),
            total_units: units,
            unit_size,
            in_use,
        }
    }

    /// Units a transfer of `len` bytes takes.
    pub fn units_for(&self, len: u32) -> u32 {
        len.div_ceil(self.unit_size).max(1)
    }

    /// Units one queue pair may hold at once.
    pub fn per_queue_units(&self, max_io_size: u32) -> u32 {
        (self.total_units / 2).max(self.units_for(max_io_size))
    }
}

/// Units granted to one command; given back when dropped.
pub struct Grant {
    _shared: OwnedSemaphorePermit,
    _queue: OwnedSemaphorePermit,
    bytes: i64,
    in_use: Arc<Gauge>,
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.in_use.add(-self.bytes);
    }
}

/// What waiting for a grant needs, without borrowing the connection.
pub type GrantHandles = (Arc<Semaphore>, Arc<SharedBuffers>);

/// One queue pair's view of the budget: its own share and the target's.
pub struct QueueBuffers {
    shared: Arc<SharedBuffers>,
    queue: Arc<Semaphore>,
}

impl QueueBuffers {
    /// A queue's share of `shared`.
    pub fn new(shared: Arc<SharedBuffers>, max_io_size: u32) -> Self {
        let per_queue = shared.per_queue_units(max_io_size);
        Self {
            shared,
            queue: Arc::new(Semaphore::new(per_queue as usize)),
        }
    }

    fn grant(&self, q: OwnedSemaphorePermit, s: OwnedSemaphorePermit, units: u32) -> Grant {
        let bytes = i64::from(units) * i64::from(self.shared.unit_size);
        self.shared.in_use.add(bytes);
        Grant {
            _shared: s,
            _queue: q,
            bytes,
            in_use: self.shared.in_use.clone(),
        }
    }

    /// Units for `len` bytes if both the queue's share and the target's
    /// budget have them now.
    pub fn try_grant(&self, len: u32) -> Option<Grant> {
        let units = self.shared.units_for(len);
        let q = self.queue.clone().try_acquire_many_owned(units).ok()?;
        let s = self
            .shared
            .units
            .clone()
            .try_acquire_many_owned(units)
            .ok()?;
        Some(self.grant(q, s, units))
    }

    /// Waits for units for `len` bytes (queue share first, then the
    /// target's budget, each in FIFO order).
    pub async fn grant_when_free(
        queue: Arc<Semaphore>,
        shared: Arc<SharedBuffers>,
        len: u32,
    ) -> Grant {
        let units = shared.units_for(len);
        let q = queue
            .clone()
            .acquire_many_owned(units)
            .await
            .expect("the semaphore is never closed");
        let s = shared
            .units
            .clone()
            .acquire_many_owned(units)
            .await
            .expect("the semaphore is never closed");
        let qb = QueueBuffers { shared, queue };
        qb.grant(q, s, units)
    }

    /// Handles for [`QueueBuffers::grant_when_free`] (a future that must
    /// not borrow the connection).
    pub fn handles(&self) -> GrantHandles {
        (self.queue.clone(), self.shared.clone())
    }
}

/// Free buffers of any size; a request takes the first that is big enough.
pub struct BufPool {
    free: Vec<DmaBuf>,
    bytes: usize,
    max: usize,
}

impl Default for BufPool {
    fn default() -> Self {
        Self::new(32)
    }
}

impl BufPool {
    /// A cache keeping up to `max` buffers.
    pub fn new(max: usize) -> Self {
        Self {
            free: Vec::new(),
            bytes: 0,
            max,
        }
    }

    /// A buffer of exactly `len` bytes (contents unspecified).
    pub fn take(&mut self, len: usize) -> DmaBuf {
        if let Some(i) = self.free.iter().position(|b| b.capacity() >= len) {
            let mut b = self.free.swap_remove(i);
            self.bytes -= b.capacity();
            b.set_len(len);
            return b;
        }
        DmaBuf::new(len)
    }

    /// Returns a buffer for reuse (dropped when the pool is full).
    pub fn give(&mut self, b: DmaBuf) {
        if self.free.len() < self.max && self.bytes + b.capacity() <= MAX_POOLED_BYTES {
            self.bytes += b.capacity();
            self.free.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_big_enough_buffers() {
        let mut p = BufPool::default();
        let b = p.take(8192);
        let ptr = b.as_ptr();
        p.give(b);
        let b = p.take(4096);
        assert_eq!(b.as_ptr(), ptr, "reused");
        assert_eq!(b.len(), 4096);
        let big = p.take(1 << 20);
        assert_eq!(big.len(), 1 << 20);
        p.give(b);
        p.give(big);
        assert_eq!(p.free.len(), 2);
    }

    #[test]
    fn grants_stay_within_the_queue_share_and_the_budget() {
        let gauge = Arc::new(Gauge::default());
        let shared = Arc::new(SharedBuffers::new(8, 4096, gauge.clone()));
        // Half the budget per queue, at least one 8 KiB transfer.
        let a = QueueBuffers::new(shared.clone(), 8192);
        let b = QueueBuffers::new(shared.clone(), 8192);
        let a1 = a.try_grant(8192).unwrap();
        let a2 = a.try_grant(8192).unwrap();
        assert!(a.try_grant(4096).is_none(), "queue a holds its share");
        assert_eq!(gauge.get(), 4 * 4096);
        let b1 = b.try_grant(16384).unwrap();
        assert!(b.try_grant(1).is_none(), "budget spent");
        assert_eq!(gauge.get(), 8 * 4096);
        drop((a1, a2, b1));
        assert_eq!(gauge.get(), 0);
        assert!(b.try_grant(4096).is_some());
    }
}
