//! Tickets: what in-flight work holds (pins, inserted blocks, undo
//! records) and its completion, which commits or rolls it back.

use crate::blocks::{Ext, PinKind};
use crate::plan::{Completion, Evicted, Extent, Op, Ticket};

use super::{CompletionError, Engine};

/// A touched block's extents before the request changed them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Undo {
    pub(super) id: u32,
    pub(super) before: Ext,
}

/// What a ticket holds until it completes.
#[derive(Debug, Default)]
pub(super) struct Inflight {
    active: bool,
    /// A write-back ticket (pins are shared, completion cleans).
    writeback: bool,
    op: Option<Op>,
    /// (block, exclusive)
    pins: Vec<(u32, bool)>,
    /// Blocks this request inserted.
    new_blocks: Vec<u32>,
    undo: Vec<Undo>,
}

/// Every ticket: the records of those in flight, reused once completed,
/// and the write-back ticket a plan is adding write-backs to.
#[derive(Debug, Default)]
pub(super) struct Tickets {
    /// Indexed by ticket number; inactive records are free for reuse.
    records: Vec<Inflight>,
    free: Vec<u32>,
    /// The write-back ticket of the plan being made, if any.
    plan_writeback: Option<u32>,
    /// Write-back tickets in flight.
    writebacks: u32,
    /// Blocks the last `complete` dropped.
    dropped: Vec<Evicted>,
}

impl Tickets {
    /// A free ticket, active from now on.
    fn take(&mut self, op: Op, writeback: bool) -> u32 {
        let t = match self.free.pop() {
            Some(t) => t,
            None => {
                self.records.push(Inflight::default());
                self.records.len() as u32 - 1
            }
        };
        self.writebacks += writeback as u32;
        let r = &mut self.records[t as usize];
        r.active = true;
        r.writeback = writeback;
        r.op = Some(op);
        t
    }

    /// Frees a ticket that holds nothing.
    fn put(&mut self, t: u32) {
        self.records[t as usize].active = false;
        self.free.push(t);
    }

    /// Ticket `t`'s record, taken out to be completed; `None` unless it is
    /// in flight.
    fn take_record(&mut self, t: u32) -> Option<Inflight> {
        let r = self.records.get_mut(t as usize).filter(|r| r.active)?;
        let rec = std::mem::take(r);
        if rec.writeback {
            self.writebacks -= 1;
        }
        Some(rec)
    }

    /// A completed ticket's record back, emptied, and the ticket free.
    fn put_record(&mut self, t: u32, mut rec: Inflight) {
        rec.pins.clear();
        rec.new_blocks.clear();
        rec.undo.clear();
        rec.active = false;
        self.records[t as usize] = rec;
        self.free.push(t);
    }

    pub(super) fn active(&self, t: u32) -> bool {
        self.records.get(t as usize).is_some_and(|r| r.active)
    }

    pub(super) fn in_flight(&self) -> usize {
        self.records.len() - self.free.len()
    }

    pub(super) fn writebacks_in_flight(&self) -> u32 {
        self.writebacks
    }

    /// Ticket `t` pins no block and inserted none: nothing to complete.
    pub(super) fn holds_nothing(&self, t: u32) -> bool {
        let r = &self.records[t as usize];
        r.pins.is_empty() && r.new_blocks.is_empty()
    }

    /// A ticket in flight that pins `id`. Only asked on a retry, so a scan of
    /// the tickets costs nothing on the hot path and no per-pin memory.
    pub(super) fn holder(&self, id: u32) -> Option<u32> {
        self.records
            .iter()
            .position(|r| r.active && r.pins.iter().any(|&(p, _)| p == id))
            .map(|t| t as u32)
    }

    /// Records a block's extents before ticket `t` changes them.
    pub(super) fn push_undo(&mut self, t: u32, u: Undo) {
        self.records[t as usize].undo.push(u);
    }

    /// Records a block ticket `t` inserted.
    pub(super) fn push_new_block(&mut self, t: u32, id: u32) {
        self.records[t as usize].new_blocks.push(id);
    }

    /// The write-back ticket of the plan being made, which the plan then
    /// carries.
    pub(super) fn take_plan_writeback(&mut self) -> Option<u32> {
        self.plan_writeback.take()
    }

    /// Exact bytes of the records and lists.
    pub(super) fn memory_bytes(&self) -> usize {
        self.records.capacity() * std::mem::size_of::<Inflight>()
            + self
                .records
                .iter()
                .map(|r| {
                    r.pins.capacity() * 8
                        + r.new_blocks.capacity() * 4
                        + r.undo.capacity() * std::mem::size_of::<Undo>()
                })
                .sum::<usize>()
            + self.free.capacity() * 4
            + self.dropped.capacity() * std::mem::size_of::<Evicted>()
    }
}

impl Engine {
    /// Reports the outcome of a ticket's I/O.
    ///
    /// `Ok` makes inserted blocks readable and releases pins; for a
    /// write-back ticket it marks the written-back data clean. `Failed` rolls
    /// back: inserted blocks are dropped, completed partial blocks return to
    /// their previous extent, blocks a failed write touched are dropped if
    /// they were clean (their cached bytes are unknown) and keep their old
    /// dirty extent otherwise (the written range is undefined, as after any
    /// failed write); a failed write-back leaves its blocks dirty.
    pub fn complete(&mut self, ticket: Ticket, outcome: Completion) -> Result<(), CompletionError> {
        self.complete_keeping(ticket, outcome, &[])
    }

    /// [`Engine::complete`] for a write-back ticket whose write-backs
    /// succeeded except those of the blocks overlapping `failed`: those
    /// stay dirty, the others become clean (as with `Ok`).
    pub fn complete_writeback_except(
        &mut self,
        ticket: Ticket,
        failed: &[Extent],
    ) -> Result<(), CompletionError> {
        self.complete_keeping(ticket, Completion::Ok, failed)
    }

    fn complete_keeping(
        &mut self,
        ticket: Ticket,
        outcome: Completion,
        keep_dirty: &[Extent],
    ) -> Result<(), CompletionError> {
        let t = ticket.0;
        let Some(rec) = self.tickets.take_record(t) else {
            return Err(CompletionError::UnknownTicket);
        };
        self.tickets.dropped.clear();
        self.waiters.expire(t);
        if outcome == Completion::Failed {
            self.stats.failed_completions += 1;
        }
        if rec.writeback {
            for &(id, _) in &rec.pins {
                let (start, size) = (self.blocks.offset(id), u64::from(self.blocks.size(id)));
                let kept = keep_dirty
                    .iter()
                    .any(|k| k.offset < start + size && start < k.offset + k.len);
                if outcome == Completion::Ok && !kept {
                    let mut e = self.blocks.ext(id);
                    e.dirty_lo = 0;
                    e.dirty_hi = 0;
                    self.set_ext(id, e);
                }
                self.unpin(id, PinKind::Writeback);
            }
        } else {
            for &(id, exclusive) in &rec.pins {
                let kind = if exclusive {
                    PinKind::Exclusive
                } else {
                    PinKind::Shared
                };
                self.unpin(id, kind);
            }
            if outcome == Completion::Failed {
                for &id in &rec.new_blocks {
                    self.drop_block(id);
                }
                for u in &rec.undo {
                    // A failed write or cache zeroing leaves the range
                    // undefined: a clean block can no longer be trusted.
                    if rec.op != Some(Op::Read) && !u.before.is_dirty() {
                        self.drop_block(u.id);
                    } else {
                        self.set_ext(u.id, u.before);
                    }
                }
            }
        }
        self.tickets.put_record(t, rec);
        Ok(())
    }

    /// The blocks the last [`Engine::complete`] dropped (a failed ticket's
    /// new blocks, and clean blocks a failed write touched). The runtime
    /// persists their removal like a plan's `evicted`.
    pub fn dropped(&self) -> &[Evicted] {
        &self.tickets.dropped
    }

    /// Invalidates a block a failed ticket leaves undefined.
    pub(super) fn drop_block(&mut self, id: u32) {
        self.tickets.dropped.push(Evicted {
            offset: self.blocks.offset(id),
            size: self.blocks.size(id),
            cache_addr: self.blocks.cache_addr(id),
        });
        self.remove_block(id, true);
        self.stats.invalidated_blocks += 1;
    }

    /// The pins of every ticket in flight, and whether it is a write-back
    /// (for the invariant checker).
    pub(crate) fn inflight_records(&self) -> impl Iterator<Item = (&[(u32, bool)], bool)> {
        self.tickets
            .records
            .iter()
            .filter(|r| r.active)
            .map(|r| (&r.pins[..], r.writeback))
    }

    pub(super) fn take_ticket(&mut self, op: Op, writeback: bool) -> u32 {
        self.tickets.take(op, writeback)
    }

    pub(super) fn put_ticket(&mut self, t: u32) {
        self.tickets.put(t);
    }

    pub(crate) fn ticket_active(&self, t: u32) -> bool {
        self.tickets.active(t)
    }

    /// The write-back ticket of the plan being made, taken now if it has
    /// none yet.
    pub(super) fn plan_writeback_ticket(&mut self) -> u32 {
        match self.tickets.plan_writeback {
            Some(w) => w,
            None => {
                let w = self.take_ticket(Op::Write, true);
                self.tickets.plan_writeback = Some(w);
                w
            }
        }
    }

    pub(super) fn pin(&mut self, t: u32, id: u32, exclusive: bool) {
        let kind = if self.tickets.records[t as usize].writeback {
            PinKind::Writeback
        } else if exclusive {
            PinKind::Exclusive
        } else {
            PinKind::Shared
        };
        if self.blocks.add_pin(id, kind) {
            let g = self.blocks.group(id);
            self.groups.groups[g as usize].pinned += 1;
        }
        self.tickets.records[t as usize].pins.push((id, exclusive));
    }

    pub(super) fn unpin(&mut self, id: u32, kind: PinKind) {
        if self.blocks.drop_pin(id, kind) {
            let g = self.blocks.group(id);
            self.groups.groups[g as usize].pinned -= 1;
        }
    }
}
