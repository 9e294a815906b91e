//! After every event: metadata writes go out, requests whose durability now
//! holds are released (or failed when it never can), flushing and stopping
//! move on.

use engine::Completion;

use super::barriers::BlockedStart;
use super::{meta_failed, Owner};
use crate::volume::msg::Msg;
use crate::volume::VolumeError;

impl Owner {
    // ---------------------------------------------------------------- pump

    /// After every event: start metadata writes, release requests whose
    /// durability holds, drive flushing and stopping.
    pub(super) fn pump(&mut self) {
        if self.stop.requested {
            // Nothing writes any more: every checksum goes on the device.
            self.meta
                .settle(std::time::Instant::now(), std::time::Duration::ZERO);
        }
        for (unit, version, snap) in self.meta.take_writes() {
            let dev = self.devices.cache.clone();
            let region = self.region.clone();
            let tx = self.tx.clone();
            tokio::spawn(async move {
                let ok = dev
                    .write_unit_meta(&region, unit, &snap, false)
                    .await
                    .inspect_err(|e| tracing::error!(error = %e, unit, "metadata write failed"))
                    .is_ok();
                let _ = tx.send(Msg::MetaDone { unit, version, ok });
            });
        }
        let starts = std::mem::take(&mut self.barriers.starts);
        let mut failed_any = false;
        for b in starts {
            let ready = self.meta.satisfied(&b.need)
                && b.after
                    .iter()
                    .all(|id| !self.inflight.running.contains_key(id));
            if !ready && self.meta.doomed(&b.need) {
                // Metadata it waits for cannot be written: the plan never
                // runs; its tickets fail (the engine rolls back).
                self.fail_unstarted(b);
                failed_any = true;
                continue;
            }
            if ready {
                self.launch(b.id, b.plan, b.buf, b.fua, None, Vec::new());
            } else {
                self.barriers.starts.push(b);
            }
        }
        if failed_any {
            // Their rolled-back tickets may be what refused requests wait for.
            self.retry_waiting();
        }
        for b in std::mem::take(&mut self.barriers.bypasses) {
            // A degraded volume passes writes through even when its removals
            // cannot be recorded: `load_clean` is off, so a restart does not
            // trust the entries they would have removed.
            let degraded = self.shared.is_degraded() && !self.params.load_clean;
            if self.meta.satisfied(&b.need) || (degraded && self.meta.doomed(&b.need)) {
                self.spawn_bypass(b.id, b.op, b.offset, b.buf);
            } else if self.meta.doomed(&b.need) {
                self.inflight.bypass.retain(|(i, _)| *i != b.id);
                if let Some(reply) = self.inflight.running.remove(&b.id).and_then(|r| r.reply) {
                    let _ = reply.send((b.buf, Err(meta_failed())));
                }
            } else {
                self.barriers.bypasses.push(b);
            }
        }
        for sh in std::mem::take(&mut self.barriers.shrinks) {
            if self.meta.satisfied(&sh.need) {
                self.meta
                    .resize(sh.region.units.len(), sh.region.entries_per_unit());
                self.finish_resize(sh.capacity, sh.region);
                let _ = sh.reply.send(Ok(()));
            } else if self.meta.doomed(&sh.need) {
                let _ = sh.reply.send(Err(VolumeError::Busy(
                    "the cache device failed while shrinking; the cut blocks' entries are not removed".into(),
                )));
            } else {
                self.barriers.shrinks.push(sh);
            }
        }
        let acks = std::mem::take(&mut self.barriers.acks);
        for b in acks {
            if self.meta.doomed(&b.need) {
                let _ = b.reply.send((b.buf, Err(meta_failed())));
                continue;
            }
            if !self.meta.satisfied(&b.need) {
                self.barriers.acks.push(b);
                continue;
            }
            if b.fua {
                // FUA in write-back: the cache device's own write cache is
                // flushed before the answer (data and metadata both).
                let dev = self.devices.cache.clone();
                tokio::spawn(async move {
                    let r = dev.flush().await.map_err(crate::volume::device_io);
                    let _ = b.reply.send((b.buf, r));
                });
            } else {
                let _ = b.reply.send((b.buf, Ok(())));
            }
        }
        self.pump_flush();
        // A load that dropped untrusted clean entries: once that is on the
        // device, clean blocks can be trusted again.
        if !self.params.load_clean && !self.shared.is_degraded() && self.meta.is_clean() {
            self.params.load_clean = true;
            self.shared.set_params(&self.params);
        }
    }

    pub(super) fn fail_unstarted(&mut self, b: BlockedStart) {
        let Some(run) = self.inflight.running.remove(&b.id) else {
            return;
        };
        for t in [run.ticket, run.writeback_ticket].into_iter().flatten() {
            let _ = self.engine.complete(t, Completion::Failed);
            self.forget_dropped();
        }
        if run.cleaning {
            self.cleaning.running = false;
            self.flush_all.error = Some(meta_failed().to_string());
        }
        if let Some(reply) = run.reply {
            let _ = reply.send((b.buf, Err(meta_failed())));
        }
    }

    /// Stopping and nothing left: make metadata durable and leave.
    pub(super) fn finished(&mut self) -> bool {
        if !self.stop.requested
            || !self.inflight.running.is_empty()
            || self.inflight.hits > 0
            || !self.barriers.starts.is_empty()
            || !self.barriers.acks.is_empty()
            || !self.waiting.is_empty()
            || !(self.meta.is_clean() || self.shared.is_degraded())
        {
            return false;
        }
        if let Some(reply) = self.stop.reply.take() {
            let _ = reply.send(Ok(()));
        }
        true
    }
}
