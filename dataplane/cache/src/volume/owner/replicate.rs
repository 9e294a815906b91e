//! Mirrored write-back (see [`crate::volume::replica`]): the owner's side
//! (forwarding, order, clean marks, attaching a mirror) and the mirror's
//! (marks applied, roles).

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll};

use bdev::{BoxFuture, DmaBuf};
use engine::{Completion, Extent, Plan};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::oneshot;

use super::flush::AfterFlush;
use super::{overlaps, Owner};
use crate::volume::meta::DirtyCrc;
use crate::volume::msg::{HostOp, MirrorAnswer, Reply};
use crate::volume::params::CacheMode;
use crate::volume::replica::{Replica, ReplicaError, ReplicaStats, Role};
use crate::volume::VolumeError;

type ReplicaIo = BoxFuture<'static, (u64, Result<(), ReplicaError>)>;

/// The mirror an owner forwards to, and what it has not answered yet.
#[derive(Default)]
pub(super) struct Replication {
    replica: Option<Arc<dyn Replica>>,
    ops: FuturesUnordered<ReplicaIo>,
    /// Forwarded operations not answered: the bytes each covers, and the
    /// request waiting for it (none for a clean mark).
    pending: HashMap<u64, (Extent, Option<oneshot::Sender<MirrorAnswer>>)>,
    next: u64,
    /// The first failure since the mirror was attached.
    broken: Option<String>,
    /// The whole-volume mark after which the mirror is dropped.
    detach_after: Option<u64>,
    /// Dirty data from before the mirror was attached is being written
    /// back: until it is, some dirty bytes are on this server only.
    syncing: bool,
    stats: ReplicaStats,
}

impl Owner {
    /// Writes and deallocates go to a mirror: one is attached, this is the
    /// owner, and writes are acknowledged from the cache.
    fn mirroring(&self) -> bool {
        self.replication.replica.is_some()
            && self.mode == CacheMode::Wb
            && self.params.role == Role::Owner
    }

    /// A request on `ext` must wait: the mirror has not answered an
    /// operation on the same bytes.
    pub(super) fn mirror_busy(&self, op: HostOp, ext: Extent) -> bool {
        op != HostOp::Read
            && self
                .replication
                .pending
                .values()
                .any(|(e, _)| overlaps(*e, ext))
    }

    /// Forwards a write or deallocate planned now; its answer will wait
    /// for the mirror's.
    pub(super) fn forward(
        &mut self,
        op: HostOp,
        ext: Extent,
        buf: Option<&DmaBuf>,
        reply: &mut Reply,
    ) {
        if op == HostOp::Read || !self.mirroring() {
            return;
        }
        let (tx, rx) = oneshot::channel();
        reply.set_mirrored(rx);
        if self.replication.broken.is_some() {
            let _ = tx.send(Err(self.shared.replica_generation()));
            return;
        }
        let Some(replica) = self.replication.replica.clone() else {
            return;
        };
        let s = &mut self.replication.stats;
        let io = match (op, buf) {
            (HostOp::Write { fua }, Some(b)) => {
                s.writes += 1;
                s.write_bytes += ext.len;
                replica.write(ext.offset, DmaBuf::from_slice(b), fua)
            }
            (HostOp::Write { .. }, None) => return,
            _ => {
                s.deallocates += 1;
                replica.deallocate(ext.offset, ext.len)
            }
        };
        self.push_replica_op(ext, io, Some(tx));
    }

    fn push_replica_op(
        &mut self,
        ext: Extent,
        io: BoxFuture<'static, Result<(), ReplicaError>>,
        waiter: Option<oneshot::Sender<MirrorAnswer>>,
    ) -> u64 {
        let r = &mut self.replication;
        r.next += 1;
        let id = r.next;
        r.pending.insert(id, (ext, waiter));
        r.ops.push(Box::pin(async move { (id, io.await) }));
        // Pushed by a caller in place, the operation is polled (and its
        // answer seen) only once the owner's task runs: wake it.
        if let Some(w) = &self.waker {
            w.wake_by_ref();
        }
        id
    }

    /// The volume left write-back: nothing is forwarded any more, so the
    /// mirror's copy goes stale from the next write. Its dirty bytes (all
    /// in core now: the switch flushed) are marked clean over the whole
    /// volume, so that a promotion could never write them back over newer
    /// data, and once that mark is answered the mirror is dropped. Its
    /// clean blocks go stale too: such a mirror must be made anew before
    /// it serves (the control plane's part).
    pub(super) fn detach_mirror_cleaned(&mut self) {
        let Some(replica) = self.replication.replica.clone() else {
            return;
        };
        tracing::info!(bdev = %self.params.name, mirror = %self.replication.stats.target,
            "left write-back: the mirror is marked clean and dropped");
        let io = replica.mark_clean(0, self.region.volume_size);
        // Covering no bytes: writes are not forwarded any more, so none
        // has to wait for it.
        let none = Extent { offset: 0, len: 0 };
        let id = self.push_replica_op(none, io, None);
        self.replication.detach_after = Some(id);
    }

    /// A plan (cleaning, or a host request's dirty victims) wrote
    /// `written` back: the mirror may clean what is
    /// clean here now (not `damaged`, which stays dirty; not bytes a write
    /// re-dirtied or is writing).
    pub(super) fn mark_written_back(&mut self, written: &[Extent], damaged: &[Extent]) {
        if !self.mirroring() || self.replication.broken.is_some() {
            return;
        }
        let Some(replica) = self.replication.replica.clone() else {
            return;
        };
        for &w in written {
            if damaged.iter().any(|d| overlaps(*d, w)) {
                continue;
            }
            self.blocks.clear();
            self.engine.blocks_in(w.offset, w.len, &mut self.blocks);
            let clean = self.blocks.iter().all(|b| {
                b.dirty.is_none_or(|d| !overlaps(d, w))
                    && !self.inflight.writes_cache(b.cache_addr, u64::from(b.size))
            });
            if !clean {
                continue;
            }
            self.replication.stats.marks += 1;
            self.replication.stats.mark_bytes += w.len;
            let io = replica.mark_clean(w.offset, w.len);
            self.push_replica_op(w, io, None);
        }
    }

    /// Takes the mirror's answers that are ready; true if any was.
    pub(super) fn poll_replica(&mut self, cx: &mut Context<'_>) -> bool {
        let mut progressed = false;
        while !self.replication.ops.is_empty() {
            let Poll::Ready(Some((id, r))) = self.replication.ops.poll_next_unpin(cx) else {
                break;
            };
            progressed = true;
            if self.replication.detach_after == Some(id) {
                if let Err(e) = &r {
                    tracing::warn!(bdev = %self.params.name, error = %e,
                        "marking the dropped mirror clean failed: it must not be promoted");
                }
                // Cannot fail: dropping.
                let _ = self.set_replica(None);
                break;
            }
            let Some((_, waiter)) = self.replication.pending.remove(&id) else {
                continue;
            };
            let answer = match r {
                Ok(()) => Ok(()),
                Err(e) => {
                    if self.replication.broken.is_none() {
                        tracing::error!(bdev = %self.params.name, mirror = %self.replication.stats.target,
                            error = %e, "mirror failed a forwarded operation: writes are answered only once it is dropped or replaced");
                        self.replication.broken = Some(e);
                    }
                    Err(self.shared.replica_generation())
                }
            };
            if let Some(w) = waiter {
                let _ = w.send(answer);
            }
        }
        if progressed {
            self.retry_waiting();
        }
        progressed
    }

    /// Attaches `replica` (or drops the mirror). Answers held for a broken
    /// mirror, and those still waiting for a dropped one, are released:
    /// the data is durable here, and the control plane decided. Dirty data
    /// from before the attach is on this server only until it has been
    /// written back: a flush starts (`syncing` until it ends).
    pub(super) fn set_replica(
        &mut self,
        replica: Option<Arc<dyn Replica>>,
    ) -> Result<(), VolumeError> {
        if replica.is_some() && self.params.role != Role::Owner {
            return Err(VolumeError::Invalid(format!(
                "cached bdev {} is a mirror: only an owner forwards to a mirror",
                self.params.name
            )));
        }
        let r = &mut self.replication;
        // Dropping the pending senders answers their requests (as mirrored).
        r.ops = FuturesUnordered::new();
        r.pending.clear();
        r.broken = None;
        r.detach_after = None;
        r.stats = ReplicaStats {
            target: replica.as_ref().map(|r| r.describe()).unwrap_or_default(),
            ..ReplicaStats::default()
        };
        r.replica = replica.clone();
        self.shared.set_replica(replica.clone());
        r.syncing = replica.is_some() && self.engine.stats().dirty_bytes > 0;
        if r.syncing {
            self.begin_flush(AfterFlush::Synced);
        }
        tracing::info!(bdev = %self.params.name, mirror = %self.replication.stats.target,
            syncing = self.replication.syncing, "mirror set");
        self.retry_waiting();
        Ok(())
    }

    /// The flush started by [`Owner::set_replica`] ended.
    pub(super) fn synced(&mut self, error: Option<&str>) {
        match error {
            None => self.replication.syncing = false,
            // Background cleaning goes on; the next tick tries again.
            Some(e) => tracing::warn!(bdev = %self.params.name, error = e,
                "writing back the dirty data a new mirror lacks failed; retried"),
        }
    }

    /// A sync whose flush failed starts another (from the cleaning tick).
    pub(super) fn resume_sync(&mut self) {
        if self.replication.syncing && !self.flush_all.active && self.mirroring() {
            self.begin_flush(AfterFlush::Synced);
        }
    }

    /// `replica` of `bdev_adacache_get_stats`.
    pub(super) fn replica_stats(&self) -> Option<ReplicaStats> {
        self.replication.replica.as_ref()?;
        let r = &self.replication;
        Some(ReplicaStats {
            state: if r.broken.is_some() {
                "broken"
            } else if r.syncing {
                "syncing"
            } else {
                "in-sync"
            },
            error: r.broken.clone(),
            inflight: r.pending.len(),
            ..r.stats.clone()
        })
    }

    /// Whether the volume writes its dirty data back: an owner whose role
    /// is confirmed.
    pub(super) fn writes_back(&self) -> bool {
        self.params.role == Role::Owner && !self.held
    }

    /// `bdev_adacache_set_role`, with the control plane's epoch: older than
    /// the one the volume has is refused (a stale control plane, or an
    /// order that was overtaken). A mirror made owner writes its dirty set
    /// back (a flush starts), as does a held volume confirmed owner; an
    /// owner made mirror drops its own mirror and stops writing back.
    pub(super) fn set_role(&mut self, role: Role, epoch: Option<u64>) -> Result<(), VolumeError> {
        if let (Some(asked), Some(have)) = (epoch, self.params.epoch) {
            if asked < have {
                return Err(VolumeError::Invalid(format!(
                    "epoch {asked} is older than cached bdev {}'s epoch {have}: refused",
                    self.params.name
                )));
            }
        }
        let was_writing_back = self.writes_back();
        if role == self.params.role
            && !self.held
            && epoch.is_none_or(|e| Some(e) == self.params.epoch)
        {
            return Ok(());
        }
        if role == Role::Mirror {
            self.set_replica(None)?;
        }
        self.params.role = role;
        self.params.epoch = epoch.or(self.params.epoch);
        self.held = false;
        self.engine.set_hold_dirty(role == Role::Mirror);
        self.shared.set_params(&self.params);
        tracing::info!(bdev = %self.params.name, role = role.name(), epoch = ?self.params.epoch,
            dirty_bytes = self.engine.stats().dirty_bytes, "role set");
        if self.writes_back() && !was_writing_back && self.engine.stats().dirty_bytes > 0 {
            let (tx, _rx) = oneshot::channel();
            self.begin_flush(AfterFlush::Reply(tx));
        }
        Ok(())
    }

    /// The mirror's side of a clean mark: the dirty bytes wholly inside
    /// `[offset, offset + len)` become clean, with no I/O (the owner wrote
    /// them back). Returns the bytes cleaned.
    pub(super) fn mark_clean(&mut self, offset: u64, len: u64) -> Result<u64, VolumeError> {
        if self.params.role != Role::Mirror {
            return Err(VolumeError::Invalid(format!(
                "cached bdev {} is not a mirror: only its own write-back cleans it",
                self.params.name
            )));
        }
        let mut plan = Plan::new();
        if self.engine.plan_flush_range(offset, len, &mut plan) == 0 {
            return Ok(0);
        }
        if let Some(t) = plan.writeback_ticket {
            let _ = self.engine.complete(t, Completion::Ok);
            self.forget_dropped();
        }
        let now = std::time::Instant::now();
        let mut cleaned = 0;
        for w in &plan.writebacks {
            cleaned += w.len;
            self.blocks.clear();
            self.engine.blocks_in(w.offset, w.len, &mut self.blocks);
            for i in 0..self.blocks.len() {
                let b = self.blocks[i];
                let crc = if b.dirty.is_some() {
                    DirtyCrc::Keep
                } else {
                    DirtyCrc::Drop
                };
                self.meta.record(&b, crc, now);
            }
        }
        self.rt.marked_clean_bytes += cleaned;
        Ok(cleaned)
    }
}
