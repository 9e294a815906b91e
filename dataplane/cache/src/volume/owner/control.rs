//! The control calls that run between requests: stats, the miss-ratio
//! curve, flush, mode, policy, resize, stop.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::barriers::Shrink;
use super::flush::AfterFlush;
use super::Owner;
use crate::layout::VolumeRegion;
use crate::volume::meta::Durability;
use crate::volume::msg::Control;
use crate::volume::params::CacheMode;
use crate::volume::stats::{
    EvictionState, FillState, MrcSummary, RuntimeCounters, StatsInput, VolumeMrc, VolumeStats,
};
use crate::volume::{FlushStatus, PolicyChange, VolumeError};

impl Owner {
    pub(super) fn set_mode_now(&mut self, m: CacheMode) -> Result<(), VolumeError> {
        self.engine
            .set_write_mode(m.engine_mode())
            .map_err(|e| VolumeError::Busy(e.to_string()))?;
        let left_write_back = self.mode == CacheMode::Wb && m != CacheMode::Wb;
        self.mode = m;
        if left_write_back {
            self.detach_mirror_cleaned();
        }
        self.params.write_mode = m;
        self.shared.set_mode(m);
        self.shared.set_params(&self.params);
        Ok(())
    }

    /// Changes the mode, answering `r` when done. Leaving write-back,
    /// every dirty block goes to core first. For write-through (or
    /// -around), writes go to core from now on, so that a steady stream of
    /// them cannot keep the flush from ending; the volume reports the new
    /// mode once nothing is dirty.
    fn set_mode(&mut self, m: CacheMode, r: oneshot::Sender<Result<(), VolumeError>>) {
        if self.mode == CacheMode::Wb && m != CacheMode::Wb {
            if matches!(m, CacheMode::Wt | CacheMode::Wa) {
                let _ = self.engine.set_write_mode_keeping_dirty(m.engine_mode());
            }
            self.switching_to = Some(m);
            self.begin_flush(AfterFlush::SetMode(m, r));
        } else {
            let _ = r.send(self.set_mode_now(m));
        }
    }

    pub(super) fn control(&mut self, c: Control) {
        match c {
            Control::Stats(r) => {
                let _ = r.send(self.stats());
            }
            Control::Mrc(r) => {
                let curve = self.engine.miss_ratio_curve();
                let _ = r.send(VolumeMrc::new(
                    &self.params.name,
                    &curve,
                    self.engine.capacity(),
                ));
            }
            Control::ResetStats(r) => {
                self.base = self.engine.stats().clone();
                self.rt = RuntimeCounters::default();
                let _ = r.send(());
            }
            Control::StartFlush(r) => {
                let (tx, _rx) = oneshot::channel();
                self.begin_flush(AfterFlush::Reply(tx));
                let _ = r.send(());
            }
            Control::FlushAll(r) => self.begin_flush(AfterFlush::Reply(r)),
            Control::FlushStatus(r) => {
                let _ = r.send(FlushStatus {
                    in_progress: self.flush_all.active,
                    dirty_bytes: self.engine.stats().dirty_bytes,
                    flushed_bytes: self.flush_all.done_bytes,
                    elapsed_ms: self
                        .flush_all
                        .started
                        .map(|s| s.elapsed().as_millis() as u64)
                        .unwrap_or(0),
                    error: self.flush_all.error.clone(),
                });
            }
            Control::SetMode(m, r) => self.set_mode(m, r),
            Control::StartSetMode(m, r) => {
                let (tx, _rx) = oneshot::channel();
                if self.switching_to != Some(m) {
                    self.set_mode(m, tx);
                }
                let _ = r.send(Ok(()));
            }
            Control::SetPolicy(p, r) => {
                let _ = r.send(self.set_policy(p));
            }
            Control::Resize {
                capacity,
                region,
                reply,
            } => self.apply_resize(capacity, region, reply),
            Control::GrowVolume { volume_size, reply } => {
                let _ = reply.send(self.grow_volume(volume_size));
            }
            Control::Stop { flush, reply } => {
                if flush {
                    self.begin_flush(AfterFlush::Stop { reply });
                } else {
                    self.stop.requested = true;
                    self.stop.reply = Some(reply);
                }
            }
            Control::SetRole(role, epoch, r) => {
                let _ = r.send(self.set_role(role, epoch));
            }
            Control::SetReplica(replica, r) => {
                let _ = r.send(self.set_replica(replica));
            }
            Control::MarkClean { offset, len, reply } => {
                let _ = reply.send(self.mark_clean(offset, len));
            }
        }
    }

    pub(super) fn set_policy(&mut self, p: PolicyChange) -> Result<(), VolumeError> {
        let mut params = self.params.clone();
        if let Some(a) = p.admission {
            params.admission = a;
        }
        if let Some(e) = p.eviction {
            params.eviction = e;
        }
        if let Some(c) = p.cleaning {
            params.cleaning = c;
        }
        if let Some(s) = p.seq_cutoff {
            params.seq_cutoff = s;
        }
        params.validate().map_err(|e| VolumeError::Invalid(e.0))?;
        let cfg = params
            .engine_config(
                self.region.volume_size,
                self.region.sector_size,
                self.engine.capacity(),
            )
            .map_err(|e| VolumeError::Invalid(e.0))?;
        fn invalid(e: impl std::fmt::Display) -> VolumeError {
            VolumeError::Invalid(e.to_string())
        }
        self.engine.set_admission(cfg.admission).map_err(invalid)?;
        self.engine.set_eviction(cfg.eviction).map_err(invalid)?;
        self.engine.set_flush(cfg.flush).map_err(invalid)?;
        self.cleaning.policy = crate::volume::clean::Cleaner::new(params.cleaning.clone());
        self.params = params;
        self.shared.set_params(&self.params);
        Ok(())
    }

    pub(super) fn apply_resize(
        &mut self,
        capacity: u64,
        region: Arc<VolumeRegion>,
        reply: oneshot::Sender<Result<(), VolumeError>>,
    ) {
        let mut evicted = Vec::new();
        if let Err(e) = self.engine.resize(capacity, &mut evicted) {
            let _ = reply.send(Err(VolumeError::Busy(e.to_string())));
            return;
        }
        for e in &evicted {
            self.meta.remove(e.cache_addr, e.offset);
        }
        if region.units.len() >= self.region.units.len() {
            self.meta
                .resize(region.units.len(), region.entries_per_unit());
            self.finish_resize(capacity, region);
            let _ = reply.send(Ok(()));
            return;
        }
        // The cut units' entries must be gone from the device (and no write
        // to them in flight) before the device gives them away.
        self.barriers.shrinks.push(Shrink {
            need: Durability {
                units: Vec::new(),
                removals: self.meta.removal_mark(),
            },
            region,
            capacity,
            reply,
        });
    }

    /// Core grew and the device recorded it: accept requests up to the new
    /// end.
    fn grow_volume(&mut self, volume_size: u64) -> Result<(), VolumeError> {
        self.engine
            .grow_volume(volume_size)
            .map_err(|e| VolumeError::Invalid(e.to_string()))?;
        let mut region = VolumeRegion::clone(&self.region);
        region.volume_size = volume_size;
        self.region = Arc::new(region);
        Ok(())
    }

    pub(super) fn finish_resize(&mut self, capacity: u64, region: Arc<VolumeRegion>) {
        self.region = region;
        self.params.cache_size_mib = capacity >> 20;
        self.shared.set_params(&self.params);
    }

    pub(super) fn stats(&mut self) -> VolumeStats {
        let md = self.engine.metadata().total() + self.meta.memory_bytes();
        let capacity = self.engine.capacity();
        let choice = self.engine.choice();
        let mrc = MrcSummary::new(&self.engine.miss_ratio_curve(), capacity);
        VolumeStats::build(StatsInput {
            name: &self.params.name,
            mode: self.mode.name(),
            role: self.params.role,
            replica: self.replica_stats(),
            epoch: self.params.epoch,
            held: self.held,
            degraded: self.shared.is_degraded(),
            damaged_bytes: self.damage.bytes(),
            capacity,
            engine: self.engine.stats(),
            base: &self.base,
            rt: &self.rt,
            metadata_bytes: md as u64,
            mrc,
            eviction: EvictionState::new(
                self.engine.policy_names().1,
                &self.params.eviction,
                choice.as_ref(),
            ),
            fill: self.engine.fill_report().as_ref().map(FillState::from),
        })
    }
}
