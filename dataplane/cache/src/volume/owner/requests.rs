//! A host request's way in: planned, queued when refused, granted when a
//! pure hit, else its plan launched once metadata and core writes allow.

use bdev::{BdevError, DmaBuf};
use engine::{Extent, Op, Plan, PlanStatus};

use super::barriers::BlockedStart;
use super::inflight::{cache_ranges, written_back, Running};
use super::{engine_op, is_pure_hit, Owner};
use crate::volume::exec;
use crate::volume::meta::Durability;
use crate::volume::msg::{HostIo, HostOp};

impl Owner {
    pub(super) fn submit(&mut self, io: HostIo) {
        let plan = std::mem::take(&mut self.spare_plan);
        self.submit_with(io, plan);
    }

    /// Plans `io` in `plan` (a fresh plan, or the one it was refused in).
    pub(super) fn submit_with(&mut self, io: HostIo, mut plan: Plan) {
        let ext = Extent {
            offset: io.offset,
            len: io.len,
        };
        // Requests overlapping a bypassing one wait for it: a fill planned
        // now could read core before the bypassing write lands.
        if self.inflight.bypass_overlaps(ext) || self.mirror_busy(io.op, ext) {
            self.waiting.push_back((io, Plan::new()));
            return;
        }
        if let Some(e) = self.refuse_damaged(io.op, io.offset, io.len) {
            let _ = io.reply.send((io.buf, Err(e)));
            return;
        }
        if self.should_bypass(io.op, io.offset, io.len) {
            self.start_bypass(io);
            return;
        }
        if let Err(e) = self
            .engine
            .plan(engine_op(io.op), io.offset, io.len, &mut plan)
        {
            let _ = io
                .reply
                .send((io.buf, Err(BdevError::InvalidArgument(e.to_string()))));
            return;
        }
        self.planned(io, plan);
    }

    /// Runs, grants or queues `io` by its plan.
    pub(super) fn planned(&mut self, io: HostIo, plan: Plan) {
        let op = engine_op(io.op);
        let ext = Extent {
            offset: io.offset,
            len: io.len,
        };
        if plan.status == PlanStatus::Retry {
            self.waiting.push_back((io, plan));
            return;
        }
        let io = match (io.buf, is_pure_hit(&plan)) {
            (Some(buf), true) => return self.grant_hit(io.reply, io.arrived, buf, plan),
            (buf, _) => HostIo { buf, ..io },
        };
        let mut io = io;
        self.forward(io.op, ext, io.buf.as_ref(), &mut io.reply);
        let id = self.inflight.new_id();
        let fua = matches!(io.op, HostOp::Write { fua: true });
        let mut touched = vec![ext];
        touched.extend(plan.fills.iter().map(|f| Extent {
            offset: f.offset,
            len: f.len,
        }));
        let hit = plan.fills.is_empty() && plan.core_reads.is_empty() && op == Op::Read;
        let after = self.inflight.fill_conflicts(&plan);
        let core_writes = plan
            .core_writes
            .iter()
            .chain(&plan.discards)
            .copied()
            .collect();
        let mut run = Running::new(io.op, Some(io.reply), io.arrived);
        run.ticket = plan.ticket;
        run.writeback_ticket = plan.writeback_ticket;
        run.hit = hit;
        run.touched = touched;
        run.core_writes = core_writes;
        run.cache_ranges = cache_ranges(&plan);
        run.written_back = written_back(&plan);
        self.inflight.running.insert(id, run);
        let need = self.prepare_slots(&plan);
        self.launch(id, plan, io.buf, fua, need, after);
    }

    /// Takes out of the persisted table every entry the plan's data will
    /// overwrite or that left the cache, and says what must be durable
    /// before the plan's I/O may start.
    pub(super) fn prepare_slots(&mut self, plan: &Plan) -> Option<Durability> {
        for e in &plan.evicted {
            self.meta.remove(e.cache_addr, e.offset);
        }
        let mut unchecked = Vec::new();
        for c in plan.fills.iter().chain(&plan.cache_writes) {
            self.blocks.clear();
            self.engine.blocks_in(c.offset, c.len, &mut self.blocks);
            for b in &self.blocks {
                self.meta.clear_cache_range(
                    b.cache_addr,
                    u64::from(b.size),
                    Some((b.offset, b.size)),
                );
            }
        }
        // Dirty bytes a checksum vouches for are about to change.
        for c in plan.cache_writes.iter().chain(&plan.cache_zeroes) {
            self.blocks.clear();
            self.engine.blocks_in(c.offset, c.len, &mut self.blocks);
            for b in &self.blocks {
                unchecked.extend(self.meta.uncheck(b));
            }
        }
        let writes_anything = !plan.fills.is_empty()
            || !plan.cache_writes.is_empty()
            || !plan.core_writes.is_empty()
            || !plan.discards.is_empty()
            || !plan.cache_zeroes.is_empty();
        if !writes_anything {
            return None;
        }
        let need = Durability {
            units: unchecked,
            removals: self.meta.removal_mark(),
        };
        (!self.meta.satisfied(&need)).then_some(need)
    }

    pub(super) fn launch(
        &mut self,
        id: u64,
        plan: Plan,
        buf: Option<DmaBuf>,
        fua: bool,
        need: Option<Durability>,
        after: Vec<u64>,
    ) {
        if need.is_some() || !after.is_empty() {
            self.barriers.starts.push(BlockedStart {
                id,
                need: need.unwrap_or_default(),
                after,
                plan,
                buf,
                fua,
            });
            return;
        }
        // The owner polls the plan's I/O itself (no task per request, no
        // message back): devices wake it when they complete.
        let devices = self.devices.clone();
        let region = self.region.clone();
        let checksums = self.writeback_checksums(&plan);
        let reads = match (plan.op, &buf) {
            (Op::Read, Some(_)) if self.read_checks(plan.request.offset, plan.request.len) => {
                std::mem::take(&mut self.checks)
            }
            _ => Vec::new(),
        };
        self.inflight.io.push(Box::pin(async move {
            let checks = exec::Checks {
                writebacks: &checksums,
                reads: &reads,
            };
            let out = exec::execute(&devices, &region, &plan, buf, fua, checks).await;
            (id, out)
        }));
    }

    /// What each of `plan`'s write-backs must hash to, where the table
    /// knows (its blocks are pinned: no write changes them meanwhile).
    fn writeback_checksums(&mut self, plan: &Plan) -> Vec<Option<u32>> {
        let mut out = Vec::with_capacity(plan.writebacks.len());
        for w in &plan.writebacks {
            self.blocks.clear();
            self.engine.blocks_in(w.offset, w.len, &mut self.blocks);
            let crc = match self.blocks.as_slice() {
                [b] => self.meta.writeback_checksum(b, w.offset, w.len),
                _ => None,
            };
            out.push(crc);
        }
        out
    }
}
