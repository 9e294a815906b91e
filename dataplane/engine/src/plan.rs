//! What the engine tells the runtime to do for one request or flush.
//!
//! A [`Plan`] is a reusable buffer: the engine clears and refills it on every
//! call, so steady-state planning allocates nothing.

/// Host operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Host read.
    Read,
    /// Host write.
    Write,
    /// Host deallocate (TRIM/discard): contents become undefined.
    Deallocate,
}

/// A range of the cached volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Volume byte offset.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl Extent {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// A range of the volume and where it lives in the cache device space of this
/// volume (`cache_addr` is a byte offset into the volume's cache space).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheIo {
    /// Volume byte offset.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Byte offset in the cache space.
    pub cache_addr: u64,
}

impl CacheIo {
    /// One past the last volume byte.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// A block that left the cache.
///
/// Contract: every block that leaves the cache while a plan is made (block
/// LRU replacement, group reclaim, deallocate invalidation, any other
/// invalidation) is listed in that plan's `evicted`, and every block a
/// failed completion drops is listed in [`crate::Engine::dropped`]. A plan
/// may reuse the slot at `cache_addr` for a new block (its fills and cache
/// writes name the same address): the runtime persists the removal before
/// it issues the plan's I/O, so a restart never finds the old block's
/// record over the new block's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evicted {
    /// Volume byte offset of the block.
    pub offset: u64,
    /// Block size in bytes.
    pub size: u32,
    /// Byte address the block had in the volume's cache space.
    pub cache_addr: u64,
}

/// Identifies in-flight work whose completion the runtime reports with
/// [`crate::Engine::complete`]. Tickets are reused after completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket(pub(crate) u32);

/// Whether a plan can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanStatus {
    /// Execute the plan.
    Ready,
    /// The request touches blocks that in-flight work owns, or conflicts
    /// with an older refused request; nothing changed except that it holds
    /// a place in the queue of refused requests (`Plan::waiting`). Queue
    /// it and plan it again, in arrival order, after `Plan::retry_after`
    /// completes (see `docs/engine.md`, "Consistency rules").
    Retry,
}

/// How the runtime reports in-flight work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Every I/O of the ticket succeeded.
    Ok,
    /// At least one I/O failed; the engine rolls back what the ticket added
    /// and treats the written range as undefined.
    Failed,
}

/// The I/O a request needs, in execution order.
///
/// 1. `writebacks` (cache -> core) carry dirty data of blocks chosen for
///    eviction or flushing; those blocks stay cached and readable until the
///    write-back ticket completes, so nothing else waits for them.
/// 2. `cache_reads`, `fills` and `core_reads` produce the host's read data:
///    together they cover the request exactly once, except that a fill may
///    also cover bytes outside the request (whole-block fills).
/// 3. `cache_writes` and `core_writes` carry the host's write data.
/// 4. `discards` and `cache_zeroes` (deallocate) run in any order.
///
/// Fills and cache writes never overlap unless `fills_before_cache_writes`.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Ready or retry.
    pub status: PlanStatus,
    /// The planned operation.
    pub op: Op,
    /// Request range.
    pub request: Extent,
    /// Completion handle of the request's cache work, if it has any.
    pub ticket: Option<Ticket>,
    /// Completion handle of `writebacks`, if there are any.
    pub writeback_ticket: Option<Ticket>,
    /// On `Retry`: an in-flight ticket the request waits for; plan the
    /// request again once it completes (it may then wait for another).
    pub retry_after: Option<Ticket>,
    /// On `Retry`: the request's place in the engine's queue of refused
    /// requests. `plan` reads it back, so retry a refused request with the
    /// same `Plan` (or this value in it): it keeps its place, and requests
    /// that arrived after it and conflict with it wait behind it. A new
    /// request starts with `None` (`Plan::new()`, or a plan whose last
    /// answer was `Ready` or an error); set it to `None` before reusing the
    /// plan of an abandoned request for another.
    pub waiting: Option<u64>,
    /// Host read data served by the cache.
    pub cache_reads: Vec<CacheIo>,
    /// Read from core, write the same bytes to the cache; for reads the host's
    /// data in this range comes from the same buffer.
    pub fills: Vec<CacheIo>,
    /// Host read data served by core without caching it.
    pub core_reads: Vec<Extent>,
    /// Host write data to store in the cache.
    pub cache_writes: Vec<CacheIo>,
    /// Host write data to store in core.
    pub core_writes: Vec<Extent>,
    /// Dirty data to copy from cache to core.
    pub writebacks: Vec<CacheIo>,
    /// Ranges to deallocate in core; afterwards they must read as zeroes.
    pub discards: Vec<Extent>,
    /// Cache ranges to overwrite with zeroes: a deallocate that punches a
    /// hole into the middle of a block's valid extent keeps the block (its
    /// valid extent stays one range) and zeroes the hole, so it reads as
    /// the deallocated core does. The block is pinned by `ticket` until
    /// the zeroes are written.
    pub cache_zeroes: Vec<CacheIo>,
    /// Blocks evicted while planning (their space is reused by this plan).
    pub evicted: Vec<Evicted>,
    /// Fills overlap cache writes (whole-block write-miss fills): run them
    /// first.
    pub fills_before_cache_writes: bool,
}

impl Default for Plan {
    fn default() -> Self {
        Plan::new()
    }
}

impl Plan {
    /// An empty plan; reuse it across calls.
    pub fn new() -> Plan {
        Plan {
            status: PlanStatus::Ready,
            op: Op::Read,
            request: Extent { offset: 0, len: 0 },
            ticket: None,
            writeback_ticket: None,
            retry_after: None,
            waiting: None,
            cache_reads: Vec::new(),
            fills: Vec::new(),
            core_reads: Vec::new(),
            cache_writes: Vec::new(),
            core_writes: Vec::new(),
            writebacks: Vec::new(),
            discards: Vec::new(),
            cache_zeroes: Vec::new(),
            evicted: Vec::new(),
            fills_before_cache_writes: false,
        }
    }

    pub(crate) fn reset(&mut self, op: Op, offset: u64, len: u64) {
        self.status = PlanStatus::Ready;
        self.op = op;
        self.request = Extent { offset, len };
        self.ticket = None;
        self.writeback_ticket = None;
        self.retry_after = None;
        self.waiting = None;
        self.cache_reads.clear();
        self.fills.clear();
        self.core_reads.clear();
        self.cache_writes.clear();
        self.core_writes.clear();
        self.writebacks.clear();
        self.discards.clear();
        self.cache_zeroes.clear();
        self.evicted.clear();
        self.fills_before_cache_writes = false;
    }

    /// Appends a core range, merging it with the previous one when adjacent
    /// so the runtime issues fewer, larger I/Os.
    pub(crate) fn push_extent(list: &mut Vec<Extent>, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        if let Some(last) = list.last_mut() {
            if last.end() == offset {
                last.len += len;
                return;
            }
        }
        list.push(Extent { offset, len });
    }

    /// Appends a cache range, merging it with the previous one when both the
    /// volume and the cache ranges are adjacent.
    pub(crate) fn push_io(list: &mut Vec<CacheIo>, offset: u64, len: u64, cache_addr: u64) {
        if len == 0 {
            return;
        }
        if let Some(last) = list.last_mut() {
            if last.end() == offset && last.cache_addr + last.len == cache_addr {
                last.len += len;
                return;
            }
        }
        list.push(CacheIo {
            offset,
            len,
            cache_addr,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_merges_adjacent_ranges() {
        let mut v = Vec::new();
        Plan::push_extent(&mut v, 0, 4096);
        Plan::push_extent(&mut v, 4096, 4096);
        Plan::push_extent(&mut v, 16384, 0);
        Plan::push_extent(&mut v, 16384, 4096);
        assert_eq!(
            v,
            vec![
                Extent {
                    offset: 0,
                    len: 8192
                },
                Extent {
                    offset: 16384,
                    len: 4096
                }
            ]
        );
        let mut c = Vec::new();
        Plan::push_io(&mut c, 0, 4096, 100);
        Plan::push_io(&mut c, 4096, 4096, 4196);
        Plan::push_io(&mut c, 8192, 4096, 0);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].len, 8192);
    }
}
