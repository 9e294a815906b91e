//! Phase 1 of planning: conflicts with in-flight work (who holds a pinned
//! block) and with older refused requests, kept in a FIFO so that a
//! refused request cannot be starved by later ones.

use crate::alloc::Seg;
use crate::plan::{Op, Plan, PlanStatus, Ticket};

use super::Engine;

/// A refused request, in the FIFO of refused requests: later requests that
/// conflict with it (overlap its blocks, one of the two writing) are
/// refused too, so it cannot be overtaken. It expires when the ticket it
/// waits for completes; the runtime retries refused requests in order
/// before new ones, which renews it if the request is refused again.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Waiter {
    /// Place in the queue (arrival order of first refusal).
    pub seq: u64,
    /// Volume range of the blocks the request touches.
    pub begin: u64,
    pub end: u64,
    /// The request writes (or completes partial blocks).
    pub exclusive: bool,
    /// The in-flight ticket it waits for.
    pub ticket: u32,
}

/// The FIFO of refused requests still waiting, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    queue: Vec<Waiter>,
    /// The place given to the last newly refused request.
    last_seq: u64,
}

impl Waiters {
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Oldest first.
    pub(crate) fn as_slice(&self) -> &[Waiter] {
        &self.queue
    }

    pub(super) fn memory_bytes(&self) -> usize {
        self.queue.capacity() * std::mem::size_of::<Waiter>()
    }

    /// The ticket an older waiter (placed before `seq`) that conflicts with
    /// `[begin, end)` waits for.
    fn older_conflict(&self, seq: u64, begin: u64, end: u64, writes: bool) -> Option<u32> {
        self.queue
            .iter()
            .find(|w| w.seq < seq && w.begin < end && begin < w.end && (w.exclusive || writes))
            .map(|w| w.ticket)
    }

    /// Queues a refused request (`waiting`: its place if it waited before,
    /// which renews that entry) and returns its place.
    fn refuse(&mut self, waiting: Option<u64>, w: Waiter) -> u64 {
        let seq = waiting.unwrap_or_else(|| {
            self.last_seq += 1;
            self.last_seq
        });
        let w = Waiter { seq, ..w };
        match self.queue.iter().position(|x| x.seq >= seq) {
            Some(i) if self.queue[i].seq == seq => self.queue[i] = w,
            Some(i) => self.queue.insert(i, w),
            None => self.queue.push(w),
        }
        seq
    }

    /// A waiter at place `seq` was planned at last.
    fn leave(&mut self, seq: u64) {
        self.queue.retain(|w| w.seq != seq);
    }

    /// Ticket `t` completed: the waiters waiting for it expire.
    pub(super) fn expire(&mut self, t: u32) {
        if !self.queue.is_empty() {
            self.queue.retain(|w| w.ticket != t);
        }
    }

    /// A waiting write overlaps `[start, end)`.
    pub(super) fn write_waits_on(&self, start: u64, end: u64) -> bool {
        self.queue
            .iter()
            .any(|w| w.exclusive && w.begin < end && start < w.end)
    }
}

impl Engine {
    /// Phase 1: whether the request must wait. A conflict with in-flight
    /// pins, or with an older refused request, refuses it (`Retry`, naming
    /// the ticket to wait for) with nothing changed but its place in the
    /// FIFO. Otherwise a request that waited leaves the FIFO. `waiting` is
    /// its place there if it was refused before.
    pub(super) fn refuse_on_conflict(
        &mut self,
        op: Op,
        offset: u64,
        len: u64,
        segs: &[Seg],
        waiting: Option<u64>,
        plan: &mut Plan,
    ) -> bool {
        let mut conflict = None;
        let mut writes = op != Op::Read;
        for seg in segs {
            if let Seg::Cached { id, start, .. } = *seg {
                let pin = self.blocks.pin(id);
                let exclusive = self.needs_exclusive(op, id, start, offset, len);
                writes |= exclusive;
                if conflict.is_none() && (pin.exclusive || (exclusive && pin.shared > 0)) {
                    conflict = self.tickets.holder(id);
                    debug_assert!(conflict.is_some(), "pinned without a ticket");
                }
            }
        }
        let (begin, end) = match (segs.first(), segs.last()) {
            (Some(f), Some(l)) => (f.start(), l.end()),
            _ => {
                let granule = self.sizes[0] as u64;
                (
                    offset / granule * granule,
                    (offset + len).div_ceil(granule) * granule,
                )
            }
        };
        let seq = waiting.unwrap_or(u64::MAX);
        if conflict.is_none() {
            conflict = self.waiters.older_conflict(seq, begin, end, writes);
        }
        let Some(ticket) = conflict else {
            if waiting.is_some() {
                self.waiters.leave(seq);
            }
            return false;
        };
        let w = Waiter {
            seq: 0,
            begin,
            end,
            exclusive: writes,
            ticket,
        };
        let seq = self.waiters.refuse(waiting, w);
        plan.status = PlanStatus::Retry;
        plan.retry_after = Some(Ticket(ticket));
        plan.waiting = Some(seq);
        self.stats.retries += 1;
        true
    }

    /// Refused requests still waiting, oldest first (for the checker).
    pub(crate) fn waiters(&self) -> &[Waiter] {
        self.waiters.as_slice()
    }
}
