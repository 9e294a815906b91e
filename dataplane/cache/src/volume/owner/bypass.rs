//! Requests that go straight to core: pass-through mode and the sequential
//! cutoff, when no cached block overlaps them.

use bdev::DmaBuf;
use engine::Extent;

use super::barriers::BlockedBypass;
use super::inflight::Running;
use super::Owner;
use crate::volume::meta::Durability;
use crate::volume::msg::{HostIo, HostOp, Msg};
use crate::volume::params::{CacheMode, SeqCutoffPolicy};

/// The stream of requests the sequential cutoff watches (OCF's
/// seq-cutoff): where the last one ended, and how many bytes in a row.
pub(super) struct SeqStream {
    pub(super) end: u64,
    pub(super) bytes: u64,
}

impl Default for SeqStream {
    fn default() -> SeqStream {
        SeqStream {
            end: u64::MAX,
            bytes: 0,
        }
    }
}

impl Owner {
    // ----------------------------------------------------------- bypassing

    /// Pass-through mode and the sequential cutoff send a request straight
    /// to core when no cached block overlaps it.
    pub(super) fn should_bypass(&mut self, op: HostOp, offset: u64, len: u64) -> bool {
        if op == HostOp::Deallocate {
            return false;
        }
        // Sequential stream tracking (OCF's seq-cutoff).
        if offset == self.seq.end {
            self.seq.bytes += len;
        } else {
            self.seq.bytes = len;
        }
        self.seq.end = offset + len;
        let seq = &self.params.seq_cutoff;
        let cut = self.seq.bytes >= seq.threshold_kib * 1024
            && match seq.policy {
                SeqCutoffPolicy::Always => true,
                SeqCutoffPolicy::Full => {
                    self.engine.stats().cached_bytes + u64::from(self.region.group_size)
                        > self.engine.capacity()
                }
                SeqCutoffPolicy::Never => false,
            };
        if !(cut || self.mode == CacheMode::Pt) {
            return false;
        }
        self.blocks.clear();
        self.engine.blocks_in(offset, len, &mut self.blocks);
        self.blocks.is_empty()
    }

    pub(super) fn start_bypass(&mut self, mut io: HostIo) {
        let id = self.inflight.new_id();
        let ext = Extent {
            offset: io.offset,
            len: io.len,
        };
        self.forward(io.op, ext, io.buf.as_ref(), &mut io.reply);
        match io.op {
            HostOp::Read => {
                self.rt.pt_reads += 1;
                self.rt.pt_read_bytes += io.len;
            }
            _ => {
                self.rt.pt_writes += 1;
                self.rt.pt_write_bytes += io.len;
            }
        }
        self.inflight.bypass.push((id, ext));
        let mut run = Running::new(io.op, Some(io.reply), io.arrived);
        if io.op != HostOp::Read {
            run.core_writes = vec![ext];
        }
        self.inflight.running.insert(id, run);
        // A write to core waits for every removal recorded before it: an
        // evicted block's entry must be gone before core changes under it.
        let need = Durability {
            units: Vec::new(),
            removals: self.meta.removal_mark(),
        };
        if io.op != HostOp::Read && !self.meta.satisfied(&need) {
            self.barriers.bypasses.push(BlockedBypass {
                id,
                op: io.op,
                offset: io.offset,
                buf: io.buf,
                need,
            });
            return;
        }
        self.spawn_bypass(id, io.op, io.offset, io.buf);
    }

    pub(super) fn spawn_bypass(&mut self, id: u64, op: HostOp, offset: u64, buf: Option<DmaBuf>) {
        let core = self.devices.core.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let (buf, r) = match (op, buf) {
                (HostOp::Read, Some(b)) => core.read(offset, b).await,
                (HostOp::Write { fua }, Some(b)) => core.write_maybe_fua(offset, b, fua).await,
                (_, b) => {
                    let _ = tx.send(Msg::BypassDone(id, b, Ok(())));
                    return;
                }
            };
            let _ = tx.send(Msg::BypassDone(id, Some(buf), r));
        });
    }
}
