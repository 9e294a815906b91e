//! A plan's outcome: tickets completed, what is now on the device
//! recorded, the host answered (after durable metadata where needed), a
//! failing cache device degraded to pass-through.

use engine::{BlockInfo, Completion, Engine, Extent};

use super::barriers::BlockedAck;
use super::{overlaps, Owner};
use crate::volume::exec::{damaged_error, Outcome};
use crate::volume::meta::{data_crc, DirtyCrc, Durability};
use crate::volume::msg::HostOp;
use crate::volume::params::CacheMode;

impl Owner {
    pub(super) fn done(&mut self, id: u64, out: Outcome) {
        let Some(run) = self.inflight.running.remove(&id) else {
            return;
        };
        let result = if out.request_ok {
            Completion::Ok
        } else {
            Completion::Failed
        };
        if let Some(t) = run.ticket {
            let _ = self.engine.complete(t, result);
            self.forget_dropped();
        }
        if let Some(t) = run.writeback_ticket {
            let _ = match out.writeback_ok {
                true if !out.damaged.is_empty() => {
                    self.engine.complete_writeback_except(t, &out.damaged)
                }
                true => self.engine.complete(t, Completion::Ok),
                false => self.engine.complete(t, Completion::Failed),
            };
            self.forget_dropped();
        }
        self.add_errors(&out);
        if !out.damaged.is_empty() {
            self.note_damaged(&out.damaged);
        }
        if out.request_ok && !run.cleaning && run.op != HostOp::Read {
            if let Some(&io) = run.touched.first() {
                self.replaced_damaged(io);
            }
        }
        self.rt.flushed_bytes += out.written_back;
        if out.writeback_ok && !run.written_back.is_empty() {
            self.mark_written_back(&run.written_back, &out.damaged);
        }
        if run.cleaning {
            self.cleaning.running = false;
            self.flush_all.done_bytes += out.written_back;
            if let Some(e) = &out.error {
                self.flush_all.error = Some(e.to_string());
            } else if let Some(d) = out.damaged.first() {
                // Never clean: a flush would otherwise plan it forever.
                self.flush_all.error =
                    Some(damaged_error(&self.params.name, d.offset, d.len).to_string());
            }
        }
        // Record what is now on the device: blocks the request filled,
        // wrote or trimmed, and blocks its write-backs cleaned.
        let mut units = Vec::new();
        let now = std::time::Instant::now();
        // A host write's data, for the checksums of the blocks it made dirty.
        let written = match (&run.op, &out.buf) {
            (HostOp::Write { .. }, Some(buf)) if !run.cleaning && out.request_ok => {
                run.touched.first().map(|&e| (e, &buf[..]))
            }
            _ => None,
        };
        for e in &run.touched {
            self.blocks.clear();
            self.engine.blocks_in(e.offset, e.len, &mut self.blocks);
            for b in &self.blocks {
                // A block another in-flight plan writes into has state on
                // the engine its data does not have yet: that plan records
                // it when it completes.
                let size = u64::from(b.size);
                if self.inflight.writes_cache(b.cache_addr, size) {
                    continue;
                }
                let crc = self.dirty_crc(b, written);
                if let Some(u) = self.meta.record(b, crc, now) {
                    units.push(u);
                }
            }
        }
        let elapsed = run.arrived.elapsed().as_nanos() as u64;
        match run.op {
            HostOp::Read if !run.cleaning => {
                if run.hit {
                    self.rt.read_hit.add(elapsed)
                } else {
                    self.rt.read_miss.add(elapsed)
                }
            }
            HostOp::Write { .. } if !run.cleaning => self.rt.write.add(elapsed),
            _ => {}
        }
        if let Some(reply) = run.reply {
            let r = match out.error {
                Some(e) if !out.host_ok => Err(e),
                _ => Ok(()),
            };
            let fua = matches!(run.op, HostOp::Write { fua: true });
            // A write-back write is acknowledged once the entry that finds
            // its data is durable; every write waits for removals planned
            // before it (a stale entry must not outlive the write).
            let dirty_write = matches!(run.op, HostOp::Write { .. }) && self.mode == CacheMode::Wb;
            let need = Durability {
                // A deallocate waits too: its trimmed entries must be
                // durable before it is answered, or a crash brings the old
                // bytes back.
                units: if dirty_write || run.op == HostOp::Deallocate {
                    units
                } else {
                    Vec::new()
                },
                removals: if run.op == HostOp::Read {
                    0
                } else {
                    self.meta.removal_mark()
                },
            };
            if r.is_ok() && (!self.meta.satisfied(&need) || (fua && dirty_write)) {
                self.barriers.acks.push(BlockedAck {
                    need,
                    reply,
                    buf: out.buf,
                    fua: fua && dirty_write,
                });
            } else {
                let _ = reply.send((out.buf, r));
            }
        }
        self.retry_waiting();
    }

    /// What recording `b` does to the checksum of its dirty bytes: a
    /// host write that left them whole in its buffer gives their crc, one
    /// that wrote part of them loses it, anything else keeps it.
    fn dirty_crc(&self, b: &BlockInfo, written: Option<(Extent, &[u8])>) -> DirtyCrc {
        let Some(dirty) = b.dirty else {
            return DirtyCrc::Drop;
        };
        if !self.params.data_checksums {
            return DirtyCrc::Drop;
        }
        let block = Extent {
            offset: b.offset,
            len: u64::from(b.size),
        };
        match written.filter(|(w, _)| overlaps(*w, block)) {
            // A failed write or a deallocate changed bytes too: their plans
            // dropped the block's checksum before their I/O (`uncheck`).
            None => DirtyCrc::Keep,
            Some((w, buf)) if w.offset <= dirty.offset && dirty.end() <= w.end() => {
                let at = (dirty.offset - w.offset) as usize;
                DirtyCrc::New(data_crc(&buf[at..at + dirty.len as usize]))
            }
            Some(_) => DirtyCrc::Drop,
        }
    }

    /// Blocks a failed completion removed leave the persisted table too.
    pub(super) fn forget_dropped(&mut self) {
        for i in 0..self.engine.dropped().len() {
            let e = self.engine.dropped()[i];
            self.meta.remove(e.cache_addr, e.offset);
        }
    }

    pub(super) fn add_errors(&mut self, out: &Outcome) {
        let (a, b) = (&mut self.rt.errors, &out.errors);
        a.core_volume_rd += b.core_volume_rd;
        a.core_volume_wr += b.core_volume_wr;
        a.cache_volume_rd += b.cache_volume_rd;
        a.cache_volume_wr += b.cache_volume_wr;
        a.total += b.total;
        if out.cache_failed {
            self.degrade("cache device I/O failed");
        }
    }

    /// A failing cache device: the volume stops using it (pass-through);
    /// dirty data stays reported and is not dropped.
    pub(super) fn degrade(&mut self, why: &str) {
        if self
            .shared
            .degraded
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        tracing::error!(bdev = %self.params.name, reason = why, dirty_bytes = self.engine.stats().dirty_bytes,
            "cache device failing: volume falls back to pass-through");
        // Removals (of the blocks forgotten below, or invalidated by later
        // pass-through writes) may never reach the failing device: a restart
        // must not trust clean blocks, whether or not I/O was in flight at
        // this moment (then the blocks stay in the table for now).
        self.params.load_clean = false;
        self.shared.set_params(&self.params);
        if self.engine.stats().dirty_bytes == 0 {
            // Nothing to lose: forget every cached block (reads and writes
            // then bypass the failing device entirely) and pass through.
            // Blocks being filled now fail on their own and roll back.
            if self.inflight.running.is_empty() && self.inflight.hits == 0 {
                // Their entries leave the device's table too (pass-through
                // writes go under the removal barrier), so that a restart
                // never brings a block back that core has since changed.
                for b in self.engine.cached_blocks() {
                    self.meta.remove(b.cache_addr, b.offset);
                }
                if let Ok(mut fresh) = Engine::new(self.engine.config().clone()) {
                    fresh.set_hold_dirty(!self.writes_back());
                    self.engine = fresh;
                }
            }
            // Cannot fail: nothing is dirty.
            let _ = self.set_mode_now(CacheMode::Pt);
        }
    }

    pub(super) fn retry_waiting(&mut self) {
        let n = self.waiting.len();
        for _ in 0..n {
            let Some((io, plan)) = self.waiting.pop_front() else {
                break;
            };
            self.submit_with(io, plan);
        }
    }
}
