//! Requests whose plans run: what each holds until it completes.

use std::time::Instant;

use engine::{Extent, Plan, Ticket};

use crate::volume::exec::Outcome;
use crate::volume::msg::{HostOp, Reply};

/// A plan's I/O, yielding its request id and outcome.
pub(super) type PlanIo =
    std::pin::Pin<Box<dyn std::future::Future<Output = (u64, Outcome)> + Send>>;

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
        }
    }

    pub(super) fn writes_cache(&self, addr: u64, len: u64) -> bool {
        self.cache_ranges
            .iter()
            .any(|&(a, l)| a < addr + len && addr < a + l)
    }
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
