//! One cached volume: the bdev `bdev_adacache_create` makes.
//!
//! [`CachedVolume`] is a cheap handle: the NVMe-oF namespace holds one (as a
//! [`bdev::Bdev::Layered`]), the RPC handlers another. Every request goes to
//! the volume's owner task ([`owner`]), which alone runs the engine.
//!
//! - [`params`]: what it is created with (SPDK-style JSON).
//! - [`owner`]: planning, completing, ordering, flushing, control.
//! - [`msg`]: what passes between callers and the owner.
//! - [`exec`]: running a plan's I/O against core and the cache device.
//! - [`hit`]: pure read hits, read by the caller itself.
//! - [`meta`]: the persisted block table and its durability rules.
//! - [`clean`]: when background cleaning runs.
//! - [`replica`]: mirrored write-back (roles, forwarding, clean marks).
//! - [`stats`]: the figures of `bdev_adacache_get_stats` and
//!   `bdev_adacache_get_mrc`.

mod clean;
mod exec;
mod hit;
#[cfg(test)]
mod hit_tests;
mod load;
mod meta;
mod msg;
mod owner;
pub mod params;
pub mod replica;
mod slot;
pub mod stats;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bdev::layered::{ConfigCall, LayeredBdev, ReadInline};
use bdev::{BdevError, BdevInfo, BoxFuture, CountedBdev, DmaBuf, IoKind};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::device::{CacheDevice, DeviceError};
use crate::layout::UNIT_SIZE;
use hit::HitDone;
use msg::{Answer, Control, HostIo, HostOp, Msg, Now, Reply};
use owner::Owner;
pub use params::{CacheMode, Cleaning, SeqCutoff, VolumeParams};
use replica::{Replica, Role};
use slot::Slot;
pub use stats::{FillShadow, FillState, VolumeMrc, VolumeStats};

/// Why a cached-volume operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A parameter cannot work.
    #[error("{0}")]
    Invalid(String),
    /// The cache device refused or failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The on-device cache could not be attached.
    #[error("cannot load the cache of {name}: {reason}")]
    Load {
        /// The cached bdev.
        name: String,
        /// Why.
        reason: String,
    },
    /// Not possible in the volume's current state.
    #[error("{0}")]
    Busy(String),
    /// Writing dirty data back failed.
    #[error("flushing dirty data to core failed: {0}")]
    Flush(String),
    /// The volume is stopping or stopped.
    #[error("cached bdev {0} is stopped")]
    Stopped(String),
}

/// `bdev_adacache_flush_status`.
#[derive(Clone, Debug, Serialize)]
pub struct FlushStatus {
    /// A flush is running.
    pub in_progress: bool,
    /// Dirty bytes left.
    pub dirty_bytes: u64,
    /// Bytes the current (or last) flush wrote back.
    pub flushed_bytes: u64,
    /// Time since the current (or last) flush started.
    pub elapsed_ms: u64,
    /// The last write-back error, if any.
    pub error: Option<String>,
}

/// `bdev_adacache_set_policy`: what changes (cached blocks stay).
#[derive(Clone, Debug, Default)]
pub struct PolicyChange {
    /// Admission policy name.
    pub admission: Option<String>,
    /// Eviction policy name.
    pub eviction: Option<String>,
    /// Cleaning policy.
    pub cleaning: Option<Cleaning>,
    /// Sequential cutoff.
    pub seq_cutoff: Option<SeqCutoff>,
}

/// State the handle reads without asking the owner.
pub(crate) struct Shared {
    mode: AtomicU8,
    degraded: AtomicBool,
    params: Mutex<VolumeParams>,
    host_flushes: AtomicU64,
    /// The mirror an owner forwards to (host flushes reach it too), and
    /// how many times it was set: answers held for a broken mirror wait
    /// for the next setting.
    replica: Mutex<Option<Arc<dyn Replica>>>,
    replica_generation: tokio::sync::watch::Sender<u64>,
    /// Set once the volume is being stopped: held answers then never come
    /// (the stop must not wait for a mirror nobody will set again).
    stopping: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    fn mode(&self) -> CacheMode {
        match self.mode.load(Relaxed) {
            0 => CacheMode::Wt,
            1 => CacheMode::Wb,
            2 => CacheMode::Wa,
            _ => CacheMode::Pt,
        }
    }

    pub(crate) fn set_mode(&self, m: CacheMode) {
        self.mode.store(m as u8, Relaxed);
    }

    pub(crate) fn is_degraded(&self) -> bool {
        self.degraded.load(Relaxed)
    }

    pub(crate) fn set_params(&self, p: &VolumeParams) {
        *self.params.lock().expect("params lock") = p.clone();
    }

    pub(crate) fn replica_generation(&self) -> u64 {
        *self.replica_generation.borrow()
    }

    pub(crate) fn set_replica(&self, r: Option<Arc<dyn Replica>>) {
        *self.replica.lock().expect("replica lock") = r;
        self.replica_generation.send_modify(|g| *g += 1);
    }

    fn replica(&self) -> Option<Arc<dyn Replica>> {
        self.replica.lock().expect("replica lock").clone()
    }

    /// Waits until the mirror that broke in generation `broken` has been
    /// dropped or replaced: until then a write it could not mirror is not
    /// acknowledged. False when the volume is stopped first: what waited
    /// is never acknowledged.
    async fn released(&self, broken: u64) -> bool {
        let mut rx = self.replica_generation.subscribe();
        let mut stopping = self.stopping.subscribe();
        tokio::select! {
            biased;
            _ = rx.wait_for(|g| *g > broken) => true,
            _ = stopping.wait_for(|s| *s) => false,
        }
    }
}

struct Inner {
    info: BdevInfo,
    /// Used in place when free, else through `tx` (see [`owner`]).
    /// `None` once the owner's task ended (stopped, or a panic poisoned
    /// the lock): requests then fail at once.
    owner: Arc<Slot<Option<Owner>>>,
    tx: mpsc::UnboundedSender<Msg>,
    shared: Arc<Shared>,
    core: CountedBdev,
    cache: Arc<CacheDevice>,
}

/// A cached volume (clones share it).
#[derive(Clone)]
pub struct CachedVolume {
    inner: Arc<Inner>,
}

impl CachedVolume {
    /// Creates (or, with `params.load`, attaches to) the cache of volume
    /// `params.name` on `cache`, in front of `core`, and starts its owner.
    pub async fn create(
        params: VolumeParams,
        core: CountedBdev,
        cache: Arc<CacheDevice>,
    ) -> Result<CachedVolume, VolumeError> {
        params.validate().map_err(|e| VolumeError::Invalid(e.0))?;
        let loaded = load::open_region(&params, &core, &cache).await?;
        let shared = Arc::new(Shared {
            mode: AtomicU8::new(params.write_mode as u8),
            degraded: AtomicBool::new(false),
            params: Mutex::new(params.clone()),
            host_flushes: AtomicU64::new(0),
            replica: Mutex::new(None),
            replica_generation: tokio::sync::watch::channel(0).0,
            stopping: tokio::sync::watch::channel(false).0,
        });
        let ci = core.info();
        let info = BdevInfo {
            name: params.name.clone(),
            product_name: "AdaCache disk",
            block_size: loaded.sector,
            blocks: bdev::BlockCount::new(ci.size_bytes() / u64::from(loaded.sector)),
            uuid: bdev::uuid_from_name("adacache", &params.name),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let devices = Arc::new(exec::Devices {
            core: core.clone(),
            cache: cache.clone(),
        });
        let o = Owner::new(
            loaded.engine,
            params,
            shared.clone(),
            devices,
            Arc::new(loaded.region),
            loaded.meta,
            rx,
            tx.clone(),
        )
        .with_damage(&loaded.damaged);
        let o = Arc::new(Slot::new(Some(o)));
        tokio::spawn(owner::run(o.clone()));
        Ok(CachedVolume {
            inner: Arc::new(Inner {
                info,
                owner: o,
                tx,
                shared,
                core,
                cache,
            }),
        })
    }

    /// The bdev to register (shares this volume).
    pub fn bdev(&self) -> bdev::Bdev {
        bdev::Bdev::Layered(Box::new(self.clone()))
    }

    /// The parameters as they are now (what `save_config` records; `load`
    /// is set so that a restored configuration attaches, never formats).
    pub fn params(&self) -> VolumeParams {
        let mut p = self
            .inner
            .shared
            .params
            .lock()
            .expect("params lock")
            .clone();
        p.load = true;
        p
    }

    /// The core bdev's name.
    pub fn core_name(&self) -> String {
        self.inner.core.info().name.clone()
    }

    /// The cache device's bdev name.
    pub fn cache_name(&self) -> String {
        self.inner.cache.name()
    }

    /// The cache device.
    pub fn cache_device(&self) -> &Arc<CacheDevice> {
        &self.inner.cache
    }

    /// The cache device failed and the volume runs in pass-through.
    pub fn degraded(&self) -> bool {
        self.inner.shared.is_degraded()
    }

    async fn ask<T>(
        &self,
        f: impl FnOnce(oneshot::Sender<T>) -> Control,
    ) -> Result<T, VolumeError> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .tx
            .send(Msg::Ctl(f(tx)))
            .map_err(|_| VolumeError::Stopped(self.inner.info.name.clone()))?;
        rx.await
            .map_err(|_| VolumeError::Stopped(self.inner.info.name.clone()))
    }

    /// `bdev_adacache_get_stats`.
    pub async fn stats(&self) -> Result<VolumeStats, VolumeError> {
        let mut s = self.ask(Control::Stats).await?;
        s.requests.flushes = self.inner.shared.host_flushes.load(Relaxed);
        Ok(s)
    }

    /// `bdev_adacache_get_mrc`: the volume's LRU miss-ratio curve now.
    pub async fn miss_ratio_curve(&self) -> Result<VolumeMrc, VolumeError> {
        self.ask(Control::Mrc).await
    }

    /// `bdev_adacache_reset_stats`.
    pub async fn reset_stats(&self) -> Result<(), VolumeError> {
        self.inner.shared.host_flushes.store(0, Relaxed);
        self.ask(Control::ResetStats).await
    }

    /// `bdev_adacache_flush`: starts writing every dirty block back.
    pub async fn start_flush(&self) -> Result<(), VolumeError> {
        self.ask(Control::StartFlush).await
    }

    /// Writes every dirty block back and waits.
    pub async fn flush_all(&self) -> Result<(), VolumeError> {
        self.ask(Control::FlushAll).await?
    }

    /// `bdev_adacache_flush_status`.
    pub async fn flush_status(&self) -> Result<FlushStatus, VolumeError> {
        self.ask(Control::FlushStatus).await
    }

    /// `bdev_adacache_set_mode`: leaving write-back flushes first.
    pub async fn set_mode(&self, mode: CacheMode) -> Result<(), VolumeError> {
        self.ask(|r| Control::SetMode(mode, r)).await?
    }

    /// `bdev_adacache_set_mode` with `wait: false`: like
    /// [`CachedVolume::set_mode`], but answers once the change is under
    /// way. Leaving write-back for write-through (or -around), writes go to
    /// core from now on and the new mode is reported once the flush ends
    /// (`flush_status` shows its progress and error); asked again while
    /// under way, it starts nothing more.
    pub async fn start_set_mode(&self, mode: CacheMode) -> Result<(), VolumeError> {
        self.ask(|r| Control::StartSetMode(mode, r)).await?
    }

    /// `bdev_adacache_set_role`: owner or mirror (see [`replica`]), with
    /// the control plane's epoch when it keeps one
    /// ([`VolumeParams::epoch`]).
    pub async fn set_role(&self, role: Role, epoch: Option<u64>) -> Result<(), VolumeError> {
        self.ask(|r| Control::SetRole(role, epoch, r)).await?
    }

    /// `bdev_adacache_set_mirror`: the mirror this owner forwards its
    /// write-back writes to, or none. Answers held for a broken mirror are
    /// released.
    pub async fn set_replica(&self, replica: Option<Arc<dyn Replica>>) -> Result<(), VolumeError> {
        self.ask(|r| Control::SetReplica(replica, r)).await?
    }

    /// A mirror's owner wrote `[offset, offset + len)` back to core: its
    /// dirty bytes wholly inside become clean here. Returns the bytes
    /// cleaned; refused on an owner.
    pub async fn mark_clean(&self, offset: u64, len: u64) -> Result<u64, VolumeError> {
        self.ask(|reply| Control::MarkClean { offset, len, reply })
            .await?
    }

    /// `bdev_adacache_set_policy`.
    pub async fn set_policy(&self, change: PolicyChange) -> Result<(), VolumeError> {
        self.ask(|r| Control::SetPolicy(change, r)).await?
    }

    /// `bdev_adacache_resize`: the volume's share of the cache device
    /// becomes `mib` MiB. Shrinking writes dirty data back first and evicts
    /// what no longer fits; growing keeps every cached block.
    pub async fn resize(&self, mib: u64) -> Result<(), VolumeError> {
        let name = self.inner.info.name.clone();
        let dev = &self.inner.cache;
        let region = dev
            .find_volume(&name)
            .ok_or_else(|| VolumeError::Stopped(name.clone()))?;
        let units = u32::try_from(mib)
            .ok()
            .filter(|&u| u > 0)
            .ok_or_else(|| VolumeError::Invalid(format!("cache_size_mib {mib} out of range")))?;
        let cur = region.units.len() as u32;
        if units > cur {
            let grown = dev.resize_volume(&name, units).await?;
            let capacity = grown.cache_bytes();
            let taken = self
                .ask(|reply| Control::Resize {
                    capacity,
                    region: Arc::new(grown),
                    reply,
                })
                .await
                .and_then(|r| r);
            if let Err(e) = taken {
                // The engine never used the new units (they hold only empty
                // metadata): give them back rather than leak them.
                if let Err(undo) = dev.resize_volume(&name, cur).await {
                    tracing::warn!(volume = %name, error = %undo,
                        "a failed grow could not return its units; the next resize or load does");
                }
                return Err(e);
            }
            return Ok(());
        }
        if units < cur {
            self.flush_all().await?;
            let mut shrunk = region.clone();
            shrunk.units.truncate(units as usize);
            let capacity = u64::from(units) * UNIT_SIZE;
            self.ask(|reply| Control::Resize {
                capacity,
                region: Arc::new(shrunk),
                reply,
            })
            .await??;
            dev.resize_volume(&name, units).await?;
        }
        Ok(())
    }

    /// Follows core when it has grown (an RBD image resized under the
    /// volume): the device's record of the volume's size, then the engine's
    /// bounds, then the size the bdev exports. In that order a crash
    /// anywhere is safe: a load reads core's size and grows a smaller record
    /// (`load.rs`), and hosts are told only after every layer accepts the
    /// new end. Returns whether the size changed.
    pub async fn follow_core_size(&self) -> Result<bool, VolumeError> {
        let name = self.inner.info.name.clone();
        let size = self.inner.core.info().size_bytes();
        let sector = u64::from(self.inner.info.block_size);
        if size <= self.inner.info.size_bytes() {
            return Ok(false);
        }
        if !size.is_multiple_of(sector) {
            return Err(VolumeError::Invalid(format!(
                "core {} grew to {size} bytes, not a whole number of the volume's {sector}-byte blocks",
                self.core_name()
            )));
        }
        load::record_grown_size(
            &self.params(),
            &self.inner.cache,
            size,
            self.inner.info.block_size,
        )
        .await?;
        self.ask(|reply| Control::GrowVolume {
            volume_size: size,
            reply,
        })
        .await??;
        self.inner.info.blocks.grow_to(size / sector);
        tracing::info!(bdev = %name, size, "cached volume follows its grown core");
        Ok(true)
    }

    /// Stops the volume: with `flush`, every dirty block is written back
    /// first; in-flight requests finish and metadata is made durable. The
    /// cache stays on the device (a later create with `load` attaches).
    pub async fn stop(&self, flush: bool) -> Result<(), VolumeError> {
        // Answers held for a broken mirror are never given now (a stop
        // that writes back first sets it only once that succeeded: a
        // failed one leaves the volume running as it was).
        if !flush {
            self.inner.shared.stopping.send_replace(true);
        }
        match self.ask(|reply| Control::Stop { flush, reply }).await {
            Ok(r) => r?,
            Err(VolumeError::Stopped(_)) => {
                self.inner.shared.stopping.send_replace(true);
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        self.inner.shared.stopping.send_replace(true);
        self.inner.cache.flush().await?;
        Ok(())
    }

    /// `bdev_adacache_delete`: writes dirty data back (unless `force`,
    /// which discards it), stops, and frees the volume's cache space.
    pub async fn delete(&self, force: bool) -> Result<(), VolumeError> {
        self.stop(!force).await?;
        self.inner
            .cache
            .delete_volume(&self.inner.info.name)
            .await?;
        Ok(())
    }

    async fn io(
        &self,
        op: HostOp,
        offset: u64,
        len: u64,
        buf: Option<DmaBuf>,
    ) -> (Option<DmaBuf>, bdev::Result<()>) {
        let arrived = Instant::now();
        // The request with a channel for its answer.
        let with_reply = |buf| {
            let (reply, rx) = Reply::channel();
            let io = HostIo {
                op,
                offset,
                len,
                buf,
                reply,
                arrived,
            };
            (io, rx)
        };
        // In place when the owner is free: a hit on a RAM or file cache
        // then completes in this task, with no switch to the owner's task
        // (and a read's grant comes back directly, without a channel).
        let now = match self.inner.owner.try_lock() {
            Ok(mut o) => match (o.as_mut(), op, buf) {
                (None, _, buf) => return (buf, Err(stopped(&self.inner.info.name))),
                (Some(o), HostOp::Read, Some(buf)) => o.read_now(offset, len, buf, arrived),
                (Some(o), _, buf) => {
                    let (io, rx) = with_reply(buf);
                    o.submit_now(io);
                    Now::Wait(rx)
                }
            },
            Err(std::sync::TryLockError::WouldBlock) => {
                let (io, rx) = with_reply(buf);
                if let Err(mpsc::error::SendError(Msg::Io(io))) = self.inner.tx.send(Msg::Io(io)) {
                    return (io.buf, Err(stopped(&self.inner.info.name)));
                }
                Now::Wait(rx)
            }
            Err(std::sync::TryLockError::Poisoned(_)) => {
                return (buf, Err(stopped(&self.inner.info.name)))
            }
        };
        let (grant, buf) = match now {
            Now::Hit(grant, buf) => (grant, buf),
            Now::Done(buf, r) => return (buf, r),
            Now::Wait(rx) => match rx.await {
                Ok(Answer::Done(buf, r)) => return (buf, r),
                Ok(Answer::Mirrored(buf, mirror)) => {
                    // Dropped (the mirror was dropped meanwhile): answered.
                    if let Ok(Err(broken)) = mirror.await {
                        if !self.inner.shared.released(broken).await {
                            return (buf, Err(stopped(&self.inner.info.name)));
                        }
                    }
                    return (buf, Ok(()));
                }
                Ok(Answer::Hit(grant, buf)) => (grant, buf),
                Err(_) => return (None, Err(stopped(&self.inner.info.name))),
            },
        };
        let (buf, r, done) = grant.serve(self.inner.cache.bdev(), buf).await;
        self.hit_done(done);
        (Some(buf), r)
    }

    /// Gives a hit's ticket back, in place when the owner is free.
    fn hit_done(&self, d: HitDone) {
        match self.inner.owner.try_lock() {
            Ok(mut o) => {
                if let Some(o) = o.as_mut() {
                    o.hit_done_now(d);
                }
            }
            Err(_) => {
                // A stopped owner has nothing pinned.
                let _ = self.inner.tx.send(Msg::HitDone(d));
            }
        }
    }

    /// A host flush reaches the mirror too: the writes it acknowledged
    /// are in its volatile write cache as much as in ours. A mirror that
    /// fails it is waited out like a failed write (`Shared::released`).
    async fn flush_mirror(&self) -> bdev::Result<()> {
        let shared = &self.inner.shared;
        let generation = shared.replica_generation();
        let Some(r) = shared.replica() else {
            return Ok(());
        };
        if let Err(e) = r.flush().await {
            tracing::warn!(bdev = %self.inner.info.name, error = %e, "the mirror failed a flush");
            if !shared.released(generation).await {
                return Err(stopped(&self.inner.info.name));
            }
        }
        Ok(())
    }

    async fn data_io(&self, op: HostOp, offset: u64, buf: DmaBuf) -> (DmaBuf, bdev::Result<()>) {
        let len = buf.len();
        let (b, r) = self.io(op, offset, len as u64, Some(buf)).await;
        // The owner always hands the buffer back unless it stopped.
        (b.unwrap_or_else(|| DmaBuf::new(len)), r)
    }
}

/// A cache-device failure as the host sees it.
pub(crate) fn device_io(e: DeviceError) -> BdevError {
    BdevError::InvalidArgument(e.to_string())
}

fn stopped(name: &str) -> BdevError {
    BdevError::InvalidArgument(format!("cached bdev {name} is stopped"))
}

/// Largest write a Write Zeroes is cut into.
const ZEROES_CHUNK: u64 = 1 << 20;

impl LayeredBdev for CachedVolume {
    fn info(&self) -> &BdevInfo {
        &self.inner.info
    }

    fn supports(&self, kind: IoKind) -> bool {
        matches!(
            kind,
            IoKind::Read
                | IoKind::Write
                | IoKind::Flush
                | IoKind::WriteZeroes
                | IoKind::Unmap
                | IoKind::MarkClean
        )
    }

    fn base_names(&self) -> Vec<String> {
        vec![self.core_name(), self.cache_name()]
    }

    fn read(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(self.data_io(HostOp::Read, offset, buf))
    }

    /// A hit on a RAM cache device, when the owner is free.
    fn read_inline(&self, offset: u64, buf: DmaBuf, arrived: Instant) -> ReadInline<DmaBuf> {
        // Any other device must wait for its reads: every read of such a
        // volume would take and drop the lock here for nothing.
        if !self.inner.cache.bdev().bdev().reads_inline() {
            return Err(buf);
        }
        let Ok(mut owner) = self.inner.owner.try_lock() else {
            return Err(buf);
        };
        match owner.as_mut() {
            Some(o) => o.read_hit_inline(offset, buf, arrived),
            None => Err(buf),
        }
    }

    fn write(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(self.data_io(HostOp::Write { fua: false }, offset, buf))
    }

    fn write_fua(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(self.data_io(HostOp::Write { fua: true }, offset, buf))
    }

    fn flush(&self) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(async move {
            self.inner.shared.host_flushes.fetch_add(1, Relaxed);
            // Write-back: acknowledged writes are on the cache device with
            // durable-on-completion metadata; the device's write cache is
            // what a Flush must empty. Other modes acknowledge writes only
            // once core has them: flush core.
            if self.inner.shared.mode() == CacheMode::Wb {
                // Requests that bypassed the cache (not admitted, cut off)
                // went to core: its write cache is flushed too.
                let (c, k, m) = tokio::join!(
                    self.inner.cache.flush(),
                    self.inner.core.flush(),
                    self.flush_mirror()
                );
                c.map_err(device_io)?;
                k.and(m)
            } else {
                self.inner.core.flush().await
            }
        })
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(async move {
            let mut done = 0;
            while done < len {
                let n = (len - done).min(ZEROES_CHUNK);
                let (_, r) = self
                    .data_io(
                        HostOp::Write { fua: false },
                        offset + done,
                        DmaBuf::new(n as usize),
                    )
                    .await;
                r?;
                done += n;
            }
            Ok(())
        })
    }

    fn unmap(&self, offset: u64, len: u64) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(async move { self.io(HostOp::Deallocate, offset, len, None).await.1 })
    }

    fn mark_clean(&self, offset: u64, len: u64) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(async move {
            CachedVolume::mark_clean(self, offset, len)
                .await
                .map(|_| ())
                .map_err(|e| BdevError::InvalidArgument(e.to_string()))
        })
    }

    /// `bdev_adacache_create` with the current parameters (mode,
    /// policies, size as changed since) and `load`, so that a restore
    /// attaches to the cache on the device and never formats it.
    fn config_call(&self) -> Option<ConfigCall> {
        Some(ConfigCall {
            method: "bdev_adacache_create",
            params: serde_json::json!(self.params()),
        })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
