//! Requests in flight: plans whose I/O runs (or waits to), requests
//! bypassing the cache, granted hits; what each holds until it completes.

use std::collections::HashMap;
use std::time::Instant;

use engine::{Extent, Plan, Ticket};
use futures_util::stream::FuturesUnordered;

use crate::volume::exec::Outcome;
use crate::volume::msg::{HostOp, Reply};

use super::overlaps;

/// A plan's I/O, yielding its request id and outcome.
pub(super) type PlanIo =
    std::pin::Pin<Box<dyn std::future::Future<Output = (u64, Outcome)> + Send>>;

/// What is under way. Requests get ids from one counter, whatever path
/// they take.
#[derive(Default)]
pub(super) struct InFlight {
    /// Requests with a plan (or bypassing), by id.
    pub(super) running: HashMap<u64, Running>,
    /// Plans whose I/O runs, polled by the owner's loop.
    pub(super) io: FuturesUnordered<PlanIo>,
    /// Requests bypassing the cache: (id, volume range).
    pub(super) bypass: Vec<(u64, Extent)>,
    /// Granted hits whose tickets have not come back.
    pub(super) hits: usize,
    next_id: u64,
}

impl InFlight {
    /// A new request's id.
    pub(super) fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A request bypassing the cache overlaps `ext`.
    pub(super) fn bypass_overlaps(&self, ext: Extent) -> bool {
        self.bypass.iter().any(|(_, e)| overlaps(*e, ext))
    }

    /// A running plan writes the cache range at `addr`: blocks there are
    /// that plan's to record.
    pub(super) fn writes_cache(&self, addr: u64, len: u64) -> bool {
        self.running.values().any(|r| r.writes_cache(addr, len))
    }

    /// Running requests whose core writes overlap `plan`'s fills.
    pub(super) fn fill_conflicts(&self, plan: &Plan) -> Vec<u64> {
        if plan.fills.is_empty() {
            return Vec::new();
        }
        self.running
            .iter()
            .filter(|(_, r)| {
                r.core_writes.iter().any(|w| {
                    plan.fills.iter().any(|f| {
                        overlaps(
                            *w,
                            Extent {
                                offset: f.offset,
                                len: f.len,
                            },
                        )
                    })
                })
            })
            .map(|(&id, _)| id)
            .collect()
    }
}

/// A request whose plan runs (or waits to run).
pub(super) struct Running {
    pub(super) op: HostOp,
    pub(super) reply: Option<Reply>,
    pub(super) arrived: Instant,
    pub(super) ticket: Option<Ticket>,
    pub(super) writeback_ticket: Option<Ticket>,
    /// Every byte came from the cache.
    pub(super) hit: bool,
    /// Volume ranges whose blocks to re-record when it completes.
    pub(super) touched: Vec<Extent>,
    /// A cleaning or flush plan (no host).
    pub(super) cleaning: bool,
    /// Core ranges its plan writes (host writes to core, deallocates):
    /// fills planned later must not read them before they land.
    pub(super) core_writes: Vec<Extent>,
    /// Cache ranges (address, length) its plan writes: blocks there are
    /// recorded by this request when it completes, never by another.
    pub(super) cache_ranges: Vec<(u64, u64)>,
    /// Volume ranges its plan writes back to core (a cleaning plan's, or a
    /// host request's dirty victims): a mirror is told once they are in
    /// core.
    pub(super) written_back: Vec<Extent>,
}

impl Running {
    pub(super) fn new(op: HostOp, reply: Option<Reply>, arrived: Instant) -> Running {
        Running {
            op,
            reply,
            arrived,
            ticket: None,
            writeback_ticket: None,
            hit: false,
            touched: Vec::new(),
            cleaning: false,
            core_writes: Vec::new(),
            cache_ranges: Vec::new(),
            written_back: Vec::new(),
        }
    }

    pub(super) fn writes_cache(&self, addr: u64, len: u64) -> bool {
        self.cache_ranges
            .iter()
            .any(|&(a, l)| a < addr + len && addr < a + l)
    }
}

/// Volume ranges a plan writes back.
pub(super) fn written_back(plan: &Plan) -> Vec<Extent> {
    plan.writebacks
        .iter()
        .map(|w| Extent {
            offset: w.offset,
            len: w.len,
        })
        .collect()
}

/// Cache ranges a plan writes.
pub(super) fn cache_ranges(plan: &Plan) -> Vec<(u64, u64)> {
    plan.fills
        .iter()
        .chain(&plan.cache_writes)
        .chain(&plan.cache_zeroes)
        .map(|c| (c.cache_addr, c.len))
        .collect()
}
