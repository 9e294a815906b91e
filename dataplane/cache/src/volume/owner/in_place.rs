//! Calls from a caller's own task, made while it holds the owner: host
//! requests submitted in place, reads that are pure hits, hits that ended.

use std::time::Instant;

use bdev::layered::ReadInline;
use bdev::{BdevError, DmaBuf};
use engine::{Extent, Op, PlanStatus};

use super::grant::Hit;
use super::{is_pure_hit, Owner};
use crate::layout::UNIT_SIZE;
use crate::volume::hit::{since, HitDone};
use crate::volume::msg::{HostIo, HostOp, Msg, Now, Reply};

impl Owner {
    /// Submits a host request from its caller's task.
    pub(crate) fn submit_now(&mut self, io: HostIo) {
        let started = self.inflight.io.len();
        self.handle(Msg::Io(io));
        self.after_in_place(started);
    }

    /// Submits a read from its caller's task. A pure hit is handed back
    /// directly: on the hit path a oneshot channel (an allocation, a send,
    /// a poll and a free per read) would only carry the grant to the very
    /// task that is already here. Anything else gets a channel and takes
    /// [`Owner::submit_now`]'s path, in the same order of checks.
    pub(crate) fn read_now(&mut self, offset: u64, len: u64, buf: DmaBuf, arrived: Instant) -> Now {
        let ext = Extent { offset, len };
        let queued = |buf: DmaBuf| {
            let (reply, rx) = Reply::channel();
            let io = HostIo {
                op: HostOp::Read,
                offset,
                len,
                buf: Some(buf),
                reply,
                arrived,
            };
            (io, rx)
        };
        if self.stop.requested || self.inflight.bypass_overlaps(ext) {
            let (io, rx) = queued(buf);
            self.submit_now(io);
            return Now::Wait(rx);
        }
        self.last_io = arrived;
        if let Some(e) = self.refuse_damaged(HostOp::Read, offset, len) {
            return Now::Done(Some(buf), Err(e));
        }
        let started = self.inflight.io.len();
        if self.should_bypass(HostOp::Read, offset, len) {
            let (io, rx) = queued(buf);
            self.start_bypass(io);
            self.after_in_place(started);
            return Now::Wait(rx);
        }
        let mut plan = std::mem::take(&mut self.spare_plan);
        if let Err(e) = self.engine.plan(Op::Read, offset, len, &mut plan) {
            self.spare_plan = plan;
            return Now::Done(Some(buf), Err(BdevError::InvalidArgument(e.to_string())));
        }
        if plan.status == PlanStatus::Retry || !is_pure_hit(&plan) {
            let (io, rx) = queued(buf);
            self.planned(io, plan);
            self.after_in_place(started);
            return Now::Wait(rx);
        }
        match self.take_hit(arrived, plan, buf) {
            Hit::Served(buf, r) => Now::Done(Some(buf), r),
            Hit::Granted(grant, buf) => Now::Hit(grant, buf),
        }
    }

    /// A read one cached block holds whole, on a RAM cache device: copied
    /// now, under the lock the caller holds, with no plan, ticket or pin
    /// ([`Engine::read_hit_now`]). `Err` hands the buffer back with nothing
    /// done or recorded: the caller submits the read ([`Self::read_now`]).
    pub(crate) fn read_hit_inline(
        &mut self,
        offset: u64,
        buf: DmaBuf,
        arrived: Instant,
    ) -> ReadInline<DmaBuf> {
        let len = buf.len() as u64;
        let ext = Extent { offset, len };
        // Damaged bytes are refused on the way that says why.
        if self.stop.requested
            || !self.devices.cache.bdev().bdev().reads_inline()
            || self.inflight.bypass_overlaps(ext)
            || !self.damage.is_empty()
        {
            return Err(buf);
        }
        let Some(hit) = self.engine.read_hit_now(offset, len) else {
            return Err(buf);
        };
        let addr = hit.cache_addr;
        self.last_io = arrived;
        // The sequential stream goes on; a cached range is never bypassed.
        let bypassed = self.should_bypass(HostOp::Read, offset, len);
        debug_assert!(!bypassed, "a cached range was bypassed");
        // Blocks are aligned to their size, at most a unit: one never
        // spans two units.
        debug_assert!(addr % UNIT_SIZE + len <= UNIT_SIZE);
        let dev = self.region.data_offset(addr);
        self.read_checks_in(hit.dirty_block.as_ref(), offset, len);
        let Ok((buf, r, end)) = self.read_device_inline(dev, buf) else {
            unreachable!("RAM reads inline");
        };
        let r = r.and_then(|()| self.verify_read(&buf));
        self.hit_ended(u64::from(r.is_err()), Some(since(arrived, end)));
        Ok((buf, r, end))
    }

    /// A granted hit ended, told from its caller's task.
    pub(crate) fn hit_done_now(&mut self, d: HitDone) {
        let started = self.inflight.io.len();
        self.hit_done(d);
        self.after_in_place(started);
    }

    pub(super) fn after_in_place(&mut self, started: usize) {
        self.pump();
        // The task polls plan I/O and ends a stop; it sleeps until a
        // message, a completion or a tick wakes it, so it is woken when a
        // call in place gave it such work.
        if self.inflight.io.len() > started || self.stop.requested {
            if let Some(w) = &self.waker {
                w.wake_by_ref();
            }
        }
    }
}
