//! Planning one host request. It is two phases. Phase 1 only reads:
//! Algorithm 1 splits the aligned request range into cached blocks and
//! missing intervals, and every cached block is checked against in-flight
//! pins and older refused requests (`conflicts.rs`); a conflict answers
//! `Retry` naming a ticket to wait for, with nothing changed except the
//! request's place in the FIFO of refused requests (`Waiter`), which
//! refuses later conflicting requests so it cannot be starved. Phase 2 pins
//! and promotes the cached blocks first (so reclaiming space for the misses
//! can never evict them), then walks the segments in order, covering
//! missing intervals with Algorithm 2 and producing the plan's I/O
//! (`per_op.rs`).

use crate::alloc::{missing_intervals, Seg};
use crate::blocks::F_EXT;
use crate::plan::{CacheIo, Extent, Op, Plan, Ticket};

use super::{Engine, RequestError};

impl Engine {
    /// Plans one host request into `plan` (cleared first). On
    /// `PlanStatus::Retry` nothing changed; plan it again after a completion.
    pub fn plan(
        &mut self,
        op: Op,
        offset: u64,
        len: u64,
        plan: &mut Plan,
    ) -> Result<(), RequestError> {
        let waiting = plan.waiting;
        plan.reset(op, offset, len);
        self.check_request(offset, len)?;
        let mut segs = std::mem::take(&mut self.scratch.segs);
        self.probe(op, offset, len, &mut segs);
        if !self.refuse_on_conflict(op, offset, len, &segs, waiting, plan) {
            self.plan_admitted(op, offset, len, &segs, plan);
        }
        self.scratch.segs = segs;
        Ok(())
    }

    /// A request must be non-empty, whole sectors, inside the volume.
    fn check_request(&self, offset: u64, len: u64) -> Result<(), RequestError> {
        if len == 0 {
            return Err(RequestError::Empty);
        }
        if !self.sector_aligned(offset, len) {
            return Err(RequestError::Unaligned);
        }
        match offset.checked_add(len) {
            Some(e) if e <= self.cfg.volume_size => Ok(()),
            _ => Err(RequestError::OutOfRange),
        }
    }

    /// Algorithm 1 over the request's range aligned to the smallest block
    /// (widened to fill sizing's window, if any): its cached blocks and
    /// missing intervals, in order, into `segs`.
    fn probe(&self, op: Op, offset: u64, len: u64, segs: &mut Vec<Seg>) {
        let granule = self.sizes[0] as u64;
        let begin = offset / granule * granule;
        let end = (offset + len).div_ceil(granule) * granule;
        segs.clear();
        let class = match self.observers.fill.as_ref() {
            Some(f) if op != Op::Deallocate => f.class(),
            _ => 0,
        };
        if class > 0 {
            let window = self.sizes[class] as u64;
            let wb = begin / window * window;
            let we = end.div_ceil(window) * window;
            missing_intervals(&self.blocks.classes, wb, we.min(self.cfg.volume_size), segs);
            // The floor's window, else the largest smaller one missing whole.
            widen_to_window(segs, begin, end, &self.sizes[1..=class]);
        } else {
            missing_intervals(&self.blocks.classes, begin, end, segs);
        }
    }

    /// Phase 2, for a request nothing refused: its cached blocks pinned
    /// and promoted first (so reclaiming space for the misses can never
    /// evict them), then its per-op plan, ticket and statistics.
    fn plan_admitted(&mut self, op: Op, offset: u64, len: u64, segs: &[Seg], plan: &mut Plan) {
        if op != Op::Deallocate {
            self.observe(op, offset, len);
        }
        let t = self.take_ticket(op, false);
        if op != Op::Deallocate {
            for seg in segs {
                if let Seg::Cached { id, start, .. } = *seg {
                    let exclusive = self.needs_exclusive(op, id, start, offset, len);
                    self.pin(t, id, exclusive);
                    self.touch(id);
                }
            }
        }
        let (hit, miss) = match op {
            Op::Read => self.plan_read(t, segs, plan),
            Op::Write => self.plan_write(t, segs, plan),
            Op::Deallocate => {
                self.plan_deallocate(t, segs, plan);
                (0, 0)
            }
        };
        if self.tickets.holds_nothing(t) {
            self.put_ticket(t);
        } else {
            plan.ticket = Some(Ticket(t));
        }
        plan.writeback_ticket = self.tickets.take_plan_writeback().map(Ticket);
        self.count_request(op, len, hit, miss, plan);
    }

    /// A planned request's figures: requests, bytes, hits and misses per
    /// op, and the I/O volumes of its plan.
    fn count_request(&mut self, op: Op, len: u64, hit: u64, miss: u64, plan: &Plan) {
        let s = match op {
            Op::Read => &mut self.stats.read,
            Op::Write => &mut self.stats.write,
            Op::Deallocate => {
                self.stats.deallocate_requests += 1;
                self.count_volumes(plan);
                return;
            }
        };
        s.requests += 1;
        s.bytes += len;
        s.hit_bytes += hit;
        s.miss_bytes += miss;
        if miss == 0 {
            s.hit_requests += 1;
        } else {
            s.miss_requests += 1;
            self.stats.missed_requests += 1;
            self.stats.missed_request_bytes += len;
        }
        self.count_volumes(plan);
    }

    /// What every read and write tells the policies and samplers, hit or
    /// miss, before its blocks are touched.
    pub(crate) fn observe(&mut self, op: Op, offset: u64, len: u64) {
        self.admission.on_request(op, offset, len);
        self.eviction.on_request();
        // Settled before the curve is read (`miss_ratio_curve`).
        self.observers.mrc.access_bytes_deferred(offset, len);
        let next = self
            .observers
            .chooser
            .as_mut()
            .and_then(|c| c.observe(offset, len));
        if let Some(next) = next {
            self.install_eviction(next);
        }
        if let Some(f) = self.observers.fill.as_mut() {
            f.observe(op == Op::Read, offset, len);
        }
    }

    /// A request found block `id` cached: it and its group move up, and
    /// the eviction policy hears of the hit.
    pub(crate) fn touch(&mut self, id: u32) {
        self.promote(id);
        self.eviction.on_hit(self.block_ref(id));
    }

    /// Reads need a block exclusively only to complete a partial block.
    pub(crate) fn needs_exclusive(
        &self,
        op: Op,
        id: u32,
        start: u64,
        offset: u64,
        len: u64,
    ) -> bool {
        if op != Op::Read {
            return true;
        }
        if self.blocks.flags(id) & F_EXT == 0 {
            return false;
        }
        let e = self.blocks.ext(id);
        let end = start + self.blocks.size(id) as u64;
        let (rs, re) = (start.max(offset), end.min(offset + len));
        let s = self.sector_shift;
        let (vs, ve) = (
            start + ((e.valid_lo as u64) << s),
            start + ((e.valid_hi as u64) << s),
        );
        !(rs >= vs && re <= ve)
    }

    pub(super) fn count_volumes(&mut self, plan: &Plan) {
        let sum_io = |v: &[CacheIo]| v.iter().map(|x| x.len).sum::<u64>();
        let sum_ext = |v: &[Extent]| v.iter().map(|x| x.len).sum::<u64>();
        let fills = sum_io(&plan.fills);
        let wbs = sum_io(&plan.writebacks);
        self.stats.read_from_core += fills + sum_ext(&plan.core_reads);
        self.stats.write_to_cache +=
            fills + sum_io(&plan.cache_writes) + sum_io(&plan.cache_zeroes);
        self.stats.read_from_cache += sum_io(&plan.cache_reads) + wbs;
        self.stats.write_to_core += sum_ext(&plan.core_writes) + wbs;
    }
}

/// Fill sizing by locality: `segs` cover the request's aligned range
/// `[begin, end)` widened to bounds aligned to the largest of `windows`
/// (block sizes, smallest first). Keeps the segments that overlap the
/// request; a missing one is widened to the largest window size whose
/// windows around its part of the request are missing whole, else clipped
/// to the request (a window holding a cached block is not filled around
/// it, so no fill is split into small speculative blocks).
fn widen_to_window(segs: &mut Vec<Seg>, begin: u64, end: u64, windows: &[u32]) {
    segs.retain(|s| s.start() < end && s.end() > begin);
    for seg in segs.iter_mut() {
        if let Seg::Missing { start, end: stop } = *seg {
            let (s, e) = (start.max(begin), stop.min(end));
            let (a, b) = windows
                .iter()
                .rev()
                .map(|&w| {
                    let w = w as u64;
                    (s / w * w, e.div_ceil(w) * w)
                })
                .find(|&(a, b)| a >= start && b <= stop)
                .unwrap_or((s, e));
            *seg = Seg::Missing { start: a, end: b };
        }
    }
}
