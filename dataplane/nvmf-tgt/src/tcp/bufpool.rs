//! Data buffers: a budget shared by every queue pair of the target, and a
//! small per-connection cache of freed buffers.
//!
//! The budget is SPDK's: `num_shared_buffers` units of `io_unit_size`
//! bytes. A command that needs a data buffer (a read, or a write whose data
//! comes by R2T) takes `ceil(len / io_unit_size)` units as a [`Grant`]
//! before any memory is allocated, and gives them back when its buffer is
//! freed (for read data, once it has been written to the socket). A command
//! that finds no units waits in `ReqState::AwaitingBuffer`; no R2T is sent
//! for it until it has them. All queue pairs of one host (host NQN) hold at
//! most half the units together (at least one largest transfer), so a host
//! that opens many writes on many queues and never sends their data cannot
//! starve the others. In-capsule data is not counted: it is bounded per
//! queue by the queue depth and the in-capsule data size, as in SPDK.
//!
//! The cache ([`BufPool`]) keeps up to `buf_cache_size` freed buffers per
//! connection so that steady-state I/O does not allocate. Cached memory
//! holds no units (a unit held idle in one connection's cache would starve
//! the others), but all caches of the target together keep at most as many
//! bytes as the budget ([`CacheBytes`]): buffer memory stays within twice
//! the budget however many connections there are.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bdev::DmaBuf;
use metrics::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes kept per connection's cache at most.
const MAX_POOLED_BYTES: usize = 16 << 20;

/// Bytes kept in the caches of every connection together, with a cap.
pub struct CacheBytes {
    bytes: AtomicUsize,
    cap: usize,
    gauge: Arc<Gauge>,
}

impl CacheBytes {
    /// A cap of `cap` bytes, reported in `gauge`.
    pub fn new(cap: usize, gauge: Arc<Gauge>) -> Self {
        Self {
            bytes: AtomicUsize::new(0),
            cap,
            gauge,
        }
    }

    /// Bytes cached now.
    pub fn get(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Counts `n` more bytes if that stays within the cap.
    fn try_add(&self, n: usize) -> bool {
        let r = self
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                b.checked_add(n).filter(|&t| t <= self.cap)
            });
        if r.is_ok() {
            self.gauge.add(n as i64);
        }
        r.is_ok()
    }

    fn sub(&self, n: usize) {
        self.bytes.fetch_sub(n, Ordering::Relaxed);
        self.gauge.add(-(n as i64));
    }
}

/// The target-wide buffer budget.
pub struct SharedBuffers {
    units: Arc<Semaphore>,
    /// Units in the budget.
    pub total_units: u32,
    /// Bytes per unit.
    pub unit_size: u32,
    /// Bytes granted now (`rackcache_nvmf_buffer_bytes_in_use`).
    pub in_use: Arc<Gauge>,
    /// Each host's share, while one of its queue pairs holds it.
    hosts: Mutex<HashMap<String, Weak<Semaphore>>>,
    /// Bytes in the connections' caches (at most the budget's bytes).
    pub cached: Arc<CacheBytes>,
}

impl SharedBuffers {
    /// A budget of `units` units of `unit_size` bytes; `cached` reports the
    /// bytes kept in connection caches.
    pub fn new(units: u32, unit_size: u32, in_use: Arc<Gauge>, cached: Arc<Gauge>) -> Self {
        let budget = units as usize * unit_size as usize;
        Self {
            units: Arc::new(Semaphore::new(units as usize)),
            total_units: units,
            unit_size,
            in_use,
            hosts: Mutex::new(HashMap::new()),
            cached: Arc::new(CacheBytes::new(budget, cached)),
        }
    }

    /// Units a transfer of `len` bytes takes.
    pub fn units_for(&self, len: u32) -> u32 {
        len.div_ceil(self.unit_size).max(1)
    }

    /// Units the queue pairs of one host may hold at once.
    pub fn per_host_units(&self, max_io_size: u32) -> u32 {
        (self.total_units / 2).max(self.units_for(max_io_size))
    }

    /// The share of `hostnqn` (one semaphore for all its queue pairs; gone
    /// when the last of them is).
    fn host_share(&self, hostnqn: &str, max_io_size: u32) -> Arc<Semaphore> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = hosts.get(hostnqn).and_then(Weak::upgrade) {
            return s;
        }
        hosts.retain(|_, w| w.strong_count() > 0);
        let s = Arc::new(Semaphore::new(self.per_host_units(max_io_size) as usize));
        hosts.insert(hostnqn.to_owned(), Arc::downgrade(&s));
        s
    }
}

/// Units granted to one command (or, [`Grant::absorb`]ed, to several);
/// given back when dropped.
pub struct Grant {
    /// Always `Some` but while [`Grant::absorb`] moves them out: `Grant`
    /// has a destructor, so its fields cannot be moved out by value.
    shared: Option<OwnedSemaphorePermit>,
    host: Option<OwnedSemaphorePermit>,
    bytes: i64,
    in_use: Arc<Gauge>,
}

impl Grant {
    /// Takes `other`'s units into this grant, to be given back with it:
    /// one release per semaphore for a whole batch of written buffers
    /// instead of one per command. Each release takes the semaphore's lock
    /// (tokio's `add_permits`), shared by every queue pair: at 4 KiB QD32
    /// reads the budget took about 7% of the target's CPU, two thirds of it
    /// in the releases. `other` comes back when it holds another budget's
    /// or host's units.
    pub fn absorb(&mut self, mut other: Grant) -> Result<(), Grant> {
        if !same(&self.host, &other.host) || !same(&self.shared, &other.shared) {
            return Err(other);
        }
        for (mine, theirs) in [
            (&mut self.host, &mut other.host),
            (&mut self.shared, &mut other.shared),
        ] {
            if let (Some(m), Some(t)) = (mine.as_mut(), theirs.take()) {
                m.merge(t);
            }
        }
        self.bytes += std::mem::take(&mut other.bytes);
        Ok(())
    }
}

/// Whether both permits take from the same semaphore.
fn same(p: &Option<OwnedSemaphorePermit>, q: &Option<OwnedSemaphorePermit>) -> bool {
    match (p, q) {
        (Some(p), Some(q)) => Arc::ptr_eq(p.semaphore(), q.semaphore()),
        _ => false,
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if self.bytes != 0 {
            self.in_use.add(-self.bytes);
        }
    }
}

/// What waiting for a grant needs, without borrowing the connection.
pub type GrantHandles = (Arc<Semaphore>, Arc<SharedBuffers>);

/// One queue pair's view of the budget: its host's share and the target's.
pub struct QueueBuffers {
    shared: Arc<SharedBuffers>,
    host: Arc<Semaphore>,
}

impl QueueBuffers {
    /// A queue pair of `hostnqn`: its units count against the host's share
    /// of `shared`.
    pub fn new(shared: Arc<SharedBuffers>, hostnqn: &str, max_io_size: u32) -> Self {
        let host = shared.host_share(hostnqn, max_io_size);
        Self { shared, host }
    }

    fn grant(&self, h: OwnedSemaphorePermit, s: OwnedSemaphorePermit, units: u32) -> Grant {
        let bytes = i64::from(units) * i64::from(self.shared.unit_size);
        self.shared.in_use.add(bytes);
        Grant {
            shared: Some(s),
            host: Some(h),
            bytes,
            in_use: self.shared.in_use.clone(),
        }
    }

    /// Units for `len` bytes if both the host's share and the target's
    /// budget have them now.
    pub fn try_grant(&self, len: u32) -> Option<Grant> {
        let units = self.shared.units_for(len);
        let h = self.host.clone().try_acquire_many_owned(units).ok()?;
        let s = self
            .shared
            .units
            .clone()
            .try_acquire_many_owned(units)
            .ok()?;
        Some(self.grant(h, s, units))
    }

    /// Waits for units for `len` bytes (host share first, then the
    /// target's budget, each in FIFO order). Dropping the future gives back
    /// what it had and its place in line: keep it across turns.
    pub async fn grant_when_free(
        host: Arc<Semaphore>,
        shared: Arc<SharedBuffers>,
        len: u32,
    ) -> Grant {
        let units = shared.units_for(len);
        let h = host
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
        let qb = QueueBuffers { shared, host };
        qb.grant(h, s, units)
    }

    /// Handles for [`QueueBuffers::grant_when_free`] (a future that must
    /// not borrow the connection).
    pub fn handles(&self) -> GrantHandles {
        (self.host.clone(), self.shared.clone())
    }
}

/// Free buffers of any size; a request takes the first that is big enough.
pub struct BufPool {
    free: Vec<DmaBuf>,
    bytes: usize,
    max: usize,
    /// The target-wide count and cap of cached bytes.
    all: Arc<CacheBytes>,
}

impl Default for BufPool {
    fn default() -> Self {
        Self::new(32, Arc::new(CacheBytes::new(usize::MAX, Arc::default())))
    }
}

impl BufPool {
    /// A cache keeping up to `max` buffers, within the target-wide `all`.
    pub fn new(max: usize, all: Arc<CacheBytes>) -> Self {
        Self {
            free: Vec::new(),
            bytes: 0,
            max,
            all,
        }
    }

    /// A buffer of exactly `len` bytes (contents unspecified).
    pub fn take(&mut self, len: usize) -> DmaBuf {
        if let Some(i) = self.free.iter().position(|b| b.capacity() >= len) {
            let mut b = self.free.swap_remove(i);
            self.bytes -= b.capacity();
            self.all.sub(b.capacity());
            b.set_len(len);
            return b;
        }
        DmaBuf::new(len)
    }

    /// Returns a buffer for reuse (dropped when this cache or all caches
    /// together are full).
    pub fn give(&mut self, b: DmaBuf) {
        let n = b.capacity();
        if self.free.len() < self.max && self.bytes + n <= MAX_POOLED_BYTES && self.all.try_add(n) {
            self.bytes += n;
            self.free.push(b);
        }
    }
}

impl Drop for BufPool {
    fn drop(&mut self) {
        self.all.sub(self.bytes);
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
    fn all_caches_together_stay_within_their_cap() {
        let gauge = Arc::new(Gauge::default());
        let all = Arc::new(CacheBytes::new(3 * 4096, gauge.clone()));
        let mut pools: Vec<BufPool> = (0..4).map(|_| BufPool::new(32, all.clone())).collect();
        for p in &mut pools {
            let b = p.take(4096);
            p.give(b);
        }
        assert_eq!(all.get(), 3 * 4096, "the fourth buffer is not kept");
        assert_eq!(gauge.get(), 3 * 4096);
        let b = pools[0].take(4096);
        assert_eq!(all.get(), 2 * 4096);
        pools[3].give(b);
        assert_eq!(all.get(), 3 * 4096);
        pools.clear();
        assert_eq!((all.get(), gauge.get()), (0, 0));
    }

    #[test]
    fn grants_stay_within_the_host_share_and_the_budget() {
        let gauge = Arc::new(Gauge::default());
        let shared = Arc::new(SharedBuffers::new(8, 4096, gauge.clone(), Arc::default()));
        // Half the budget per host, at least one 8 KiB transfer, shared
        // by all its queue pairs.
        let a = QueueBuffers::new(shared.clone(), "host-a", 8192);
        let a_too = QueueBuffers::new(shared.clone(), "host-a", 8192);
        let b = QueueBuffers::new(shared.clone(), "host-b", 8192);
        let a1 = a.try_grant(8192).unwrap();
        let a2 = a_too.try_grant(8192).unwrap();
        assert!(a.try_grant(4096).is_none(), "host a holds its share");
        assert!(a_too.try_grant(4096).is_none(), "on every queue");
        assert_eq!(gauge.get(), 4 * 4096);
        let b1 = b.try_grant(16384).unwrap();
        assert!(b.try_grant(1).is_none(), "budget spent");
        assert_eq!(gauge.get(), 8 * 4096);
        drop((a1, a2, b1));
        assert_eq!(gauge.get(), 0);
        assert!(b.try_grant(4096).is_some());
    }

    #[test]
    fn absorbed_grants_go_back_together() {
        let gauge = Arc::new(Gauge::default());
        let shared = Arc::new(SharedBuffers::new(8, 4096, gauge.clone(), Arc::default()));
        let a = QueueBuffers::new(shared.clone(), "host-a", 4096);
        let b = QueueBuffers::new(shared.clone(), "host-b", 4096);
        let mut all = a.try_grant(4096).unwrap();
        all.absorb(a.try_grant(8192).unwrap())
            .map_err(|_| "same host")
            .unwrap();
        assert_eq!(gauge.get(), 3 * 4096);
        let other = b.try_grant(4096).unwrap();
        let other = all
            .absorb(other)
            .expect_err("another host's units stay apart");
        assert_eq!(gauge.get(), 4 * 4096, "nothing given back by a refusal");
        assert_eq!(shared.units.available_permits(), 4);
        drop(other);
        assert_eq!(shared.units.available_permits(), 5);
        assert!(
            a.try_grant(4096).is_some(),
            "host a's share has a unit left"
        );
        drop(all);
        assert_eq!(gauge.get(), 0);
        assert_eq!(shared.units.available_permits(), 8);
        assert_eq!(a.host.available_permits(), 4, "host a's share is whole");
    }
}
