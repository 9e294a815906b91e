//! Pure read hits: served at once from a RAM cache device, or granted to
//! the caller (see [`crate::volume::hit`]), and their tickets coming back.

use std::time::Instant;

use bdev::layered::ReadInline;
use bdev::{BdevError, DmaBuf};
use engine::{Completion, Plan};

use super::Owner;
use crate::volume::hit::{since, HitDone, HitGrant, HitGuard, Pieces};
use crate::volume::msg::{Msg, Reply};

/// What became of a pure read hit.
pub(super) enum Hit {
    /// Read already (a RAM cache device): the host's buffer and result.
    Served(DmaBuf, Result<(), BdevError>),
    /// For the caller to read.
    Granted(HitGrant<Msg>, DmaBuf),
}

impl Owner {
    /// Answers a pure read hit (see [`Self::take_hit`]).
    pub(super) fn grant_hit(&mut self, reply: Reply, arrived: Instant, buf: DmaBuf, plan: Plan) {
        match self.take_hit(arrived, plan, buf) {
            Hit::Served(buf, r) => {
                let _ = reply.send((Some(buf), r));
            }
            Hit::Granted(grant, buf) => reply.grant(grant, buf),
        }
    }

    /// A pure read hit's `plan`: a RAM cache device copies at once, so the
    /// hit ends here, under the lock it was planned under; any other device
    /// is read by the caller (see [`super::hit`]), the plan's ticket staying
    /// out until that read ended. The plan's vectors are kept for the next
    /// request.
    pub(super) fn take_hit(&mut self, arrived: Instant, plan: Plan, buf: DmaBuf) -> Hit {
        let pieces = Pieces::of(&self.region, &plan);
        let ticket = plan.ticket;
        let checked = self.read_checks(plan.request.offset, plan.request.len);
        self.spare_plan = plan;
        self.inflight.hits += 1;
        let buf = match pieces {
            Pieces::One(dev) => match self.read_device_inline(dev, buf) {
                Ok((buf, r, end)) => {
                    let failed_reads = u64::from(r.is_err());
                    let r = r.and_then(|()| self.verify_read(&buf));
                    self.hit_done_now(HitDone {
                        ticket,
                        elapsed_ns: Some(since(arrived, end)),
                        failed_reads,
                        damaged: Vec::new(),
                    });
                    return Hit::Served(buf, r);
                }
                Err(buf) => buf,
            },
            Pieces::Many(_) => buf,
        };
        let guard = HitGuard::new(self.tx.clone(), ticket, arrived);
        Hit::Granted(
            HitGrant {
                pieces,
                guard,
                checks: checked.then(|| (std::mem::take(&mut self.checks), self.region.clone())),
            },
            buf,
        )
    }

    /// A hit's read of the cache device at `dev`, in place when the device
    /// answers at once, counted in this volume's share of its counters.
    pub(super) fn read_device_inline(&self, dev: u64, buf: DmaBuf) -> ReadInline<DmaBuf> {
        let device = self.devices.cache.bdev();
        device.read_inline_into(dev, buf, &self.device_reads)
    }

    #[cfg(test)]
    pub(crate) fn hits_in_flight(&self) -> usize {
        self.inflight.hits
    }

    /// A granted hit's ticket came back. Its blocks changed nothing on the
    /// device, so there is nothing to record (a plan writing into them
    /// records them itself).
    pub(super) fn hit_done(&mut self, d: HitDone) {
        self.inflight.hits -= 1;
        if !d.damaged.is_empty() {
            self.note_damaged(&d.damaged);
        }
        let failed = d.failed_reads > 0;
        if let Some(t) = d.ticket {
            let r = if failed {
                Completion::Failed
            } else {
                Completion::Ok
            };
            let _ = self.engine.complete(t, r);
            self.forget_dropped();
        }
        self.hit_ended(d.failed_reads, d.elapsed_ns);
        self.retry_waiting();
    }

    /// Counts a hit's read: its failed device reads, and its latency unless
    /// its request went away.
    pub(super) fn hit_ended(&mut self, failed_reads: u64, elapsed_ns: Option<u64>) {
        if failed_reads > 0 {
            let e = &mut self.rt.errors;
            e.cache_volume_rd += failed_reads;
            e.total += failed_reads;
            self.degrade("cache device I/O failed");
        }
        if let Some(ns) = elapsed_ns {
            self.rt.read_hit.add(ns);
        }
    }
}
