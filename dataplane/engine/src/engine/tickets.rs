//! Tickets: what in-flight work holds (pins, inserted blocks, undo
//! records) and its completion, which commits or rolls it back.

use crate::blocks::{Ext, PinKind};
use crate::plan::{Completion, Evicted, Op, Ticket};

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
    pub(super) active: bool,
    /// A write-back ticket (pins are shared, completion cleans).
    pub(super) writeback: bool,
    pub(super) op: Option<Op>,
    /// (block, exclusive)
    pub(super) pins: Vec<(u32, bool)>,
    /// Blocks this request inserted.
    pub(super) new_blocks: Vec<u32>,
    pub(super) undo: Vec<Undo>,
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
        let t = ticket.0 as usize;
        if t >= self.inflight.len() || !self.inflight[t].active {
            return Err(CompletionError::UnknownTicket);
        }
        let mut rec = std::mem::take(&mut self.inflight[t]);
        self.dropped.clear();
        if !self.waiters.is_empty() {
            self.waiters.retain(|w| w.ticket != t as u32);
        }
        if outcome == Completion::Failed {
            self.stats.failed_completions += 1;
        }
        if rec.writeback {
            self.wb_inflight -= 1;
            for &(id, _) in &rec.pins {
                if outcome == Completion::Ok {
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
        rec.pins.clear();
        rec.new_blocks.clear();
        rec.undo.clear();
        rec.active = false;
        self.inflight[t] = rec;
        self.free_tickets.push(t as u32);
        Ok(())
    }

    /// The blocks the last [`Engine::complete`] dropped (a failed ticket's
    /// new blocks, and clean blocks a failed write touched). The runtime
    /// persists their removal like a plan's `evicted`.
    pub fn dropped(&self) -> &[Evicted] {
        &self.dropped
    }

    /// Invalidates a block a failed ticket leaves undefined.
    pub(super) fn drop_block(&mut self, id: u32) {
        self.dropped.push(Evicted {
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
        self.inflight
            .iter()
            .filter(|r| r.active)
            .map(|r| (&r.pins[..], r.writeback))
    }

    pub(super) fn take_ticket(&mut self, op: Op, writeback: bool) -> u32 {
        let t = match self.free_tickets.pop() {
            Some(t) => t,
            None => {
                self.inflight.push(Inflight::default());
                self.inflight.len() as u32 - 1
            }
        };
        self.wb_inflight += writeback as u32;
        let r = &mut self.inflight[t as usize];
        r.active = true;
        r.writeback = writeback;
        r.op = Some(op);
        t
    }

    pub(super) fn put_ticket(&mut self, t: u32) {
        self.inflight[t as usize].active = false;
        self.free_tickets.push(t);
    }

    pub(crate) fn ticket_active(&self, t: u32) -> bool {
        self.inflight.get(t as usize).is_some_and(|r| r.active)
    }

    pub(super) fn pin(&mut self, t: u32, id: u32, exclusive: bool) {
        let kind = if self.inflight[t as usize].writeback {
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
        self.inflight[t as usize].pins.push((id, exclusive));
    }

    pub(super) fn unpin(&mut self, id: u32, kind: PinKind) {
        if self.blocks.drop_pin(id, kind) {
            let g = self.blocks.group(id);
            self.groups.groups[g as usize].pinned -= 1;
        }
    }
}
