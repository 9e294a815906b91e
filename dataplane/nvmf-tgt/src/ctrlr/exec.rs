//! Execution against bdevs: the operations a command becomes once its data
//! is in place ([`Op`]), running one ([`Op::run`]) and what it returns
//! ([`Done`]). The transport polls the futures; nothing here knows how the
//! command arrived.

use std::sync::Arc;

use bdev::{BdevError, DmaBuf, IoKind};
use nvmf::cqe::Status;

use crate::subsystem::{Namespace, NamespaceMap};

/// A bdev operation to run outside the queue's synchronous code.
pub(crate) enum Op {
    /// Read into `buf` at `offset`.
    Read {
        ns: Arc<Namespace>,
        offset: u64,
        buf: DmaBuf,
    },
    /// Write `buf` at `offset`; durably before completion if `fua`.
    Write {
        ns: Arc<Namespace>,
        offset: u64,
        buf: DmaBuf,
        fua: bool,
    },
    /// Flush one namespace.
    Flush { ns: Arc<Namespace> },
    /// Zero a range; flush the bdev before completion if `sync`.
    WriteZeroes {
        ns: Arc<Namespace>,
        offset: u64,
        len: u64,
        sync: bool,
    },
    /// Deallocate the ranges listed in `ranges` (DSM format, 16 bytes
    /// each); flush the bdev before completion if `sync`.
    Unmap {
        ns: Arc<Namespace>,
        ranges: DmaBuf,
        sync: bool,
    },
    /// A mirror's clean mark ([`IoKind::MarkClean`]).
    MarkClean {
        ns: Arc<Namespace>,
        offset: u64,
        len: u64,
    },
    /// Controller shutdown: flush every namespace, then report complete.
    ShutdownFlush { namespaces: Arc<NamespaceMap> },
}

/// The result of an [`Op`].
pub(crate) enum Done {
    /// A request finished; `ended` is when, if the bdev's counters read
    /// the clock at its end anyway (the command's latency then takes that
    /// instant instead of reading the clock once more).
    Io {
        status: Status,
        buf: Option<DmaBuf>,
        kind: IoKind,
        ended: Option<std::time::Instant>,
    },
    /// Shutdown flushing finished.
    Shutdown,
}

/// The NVMe status of a failed bdev operation.
fn bdev_status(e: &BdevError, read: bool) -> Status {
    match e {
        BdevError::OutOfRange { .. } => Status::LBA_OUT_OF_RANGE,
        BdevError::Misaligned { .. } | BdevError::InvalidArgument(_) => Status::INVALID_FIELD,
        BdevError::Unsupported(_) => Status::INVALID_OPCODE,
        BdevError::OutOfMemory(_) => Status::INTERNAL_ERROR,
        _ if read => Status::UNRECOVERED_READ_ERROR,
        BdevError::Os { .. } | BdevError::Ceph { .. } | BdevError::Integrity(_) => {
            Status::WRITE_FAULT
        }
    }
}

/// The [`Done`] of a request whose bdev operation returned `r`.
pub(crate) fn done_io(
    r: Result<(), BdevError>,
    buf: Option<DmaBuf>,
    kind: IoKind,
    ended: Option<std::time::Instant>,
) -> Done {
    Done::Io {
        status: match &r {
            Ok(()) => Status::SUCCESS,
            Err(e) => bdev_status(e, kind == IoKind::Read),
        },
        buf,
        kind,
        ended,
    }
}

impl Op {
    /// Whether it changes the namespace's data.
    pub(crate) fn changes_data(&self) -> bool {
        matches!(
            self,
            Op::Write { .. } | Op::WriteZeroes { .. } | Op::Unmap { .. } | Op::MarkClean { .. }
        )
    }

    /// Runs the operation; `tag` (the transport's name for the request)
    /// comes back with the result.
    pub(crate) async fn run(self, tag: u16) -> (u16, Done) {
        (tag, self.execute().await)
    }

    async fn execute(self) -> Done {
        let io = |r, buf, kind| done_io(r, buf, kind, None);
        match self {
            Op::Read { ns, offset, buf } => {
                let (buf, r, ended) = ns.bdev.read_ended(offset, buf).await;
                done_io(r, Some(buf), IoKind::Read, Some(ended))
            }
            Op::Write {
                ns,
                offset,
                buf,
                fua,
            } => {
                let (buf, r) = ns.bdev.write_maybe_fua(offset, buf, fua).await;
                io(r, Some(buf), IoKind::Write)
            }
            Op::Flush { ns } => io(ns.bdev.flush().await, None, IoKind::Flush),
            Op::MarkClean { ns, offset, len } => io(
                ns.bdev.bdev().mark_clean(offset, len).await,
                None,
                IoKind::MarkClean,
            ),
            Op::WriteZeroes {
                ns,
                offset,
                len,
                sync,
            } => {
                let mut r = ns.bdev.write_zeroes(offset, len).await;
                if sync && r.is_ok() {
                    r = ns.bdev.flush().await;
                }
                io(r, None, IoKind::WriteZeroes)
            }
            Op::Unmap { ns, ranges, sync } => {
                let mut r = unmap_ranges(&ns, &ranges).await;
                drop(ranges);
                if sync && r.is_ok() {
                    r = ns.bdev.flush().await;
                }
                io(r, None, IoKind::Unmap)
            }
            Op::ShutdownFlush { namespaces } => {
                for ns in namespaces.values() {
                    if let Err(e) = ns.bdev.flush().await {
                        tracing::warn!(nsid = ns.nsid, "flush at controller shutdown: {e}");
                    }
                }
                Done::Shutdown
            }
        }
    }
}

/// Deallocates every range of a DSM range list, stopping at the first
/// failure.
async fn unmap_ranges(ns: &Namespace, ranges: &[u8]) -> Result<(), BdevError> {
    for range in ranges.chunks_exact(16) {
        let nlb = u64::from(u32::from_le_bytes(range[4..8].try_into().expect("4")));
        let slba = u64::from_le_bytes(range[8..16].try_into().expect("8"));
        if nlb == 0 {
            continue;
        }
        let (Some(off), Some(len)) = (
            slba.checked_mul(u64::from(ns.block_size)),
            nlb.checked_mul(u64::from(ns.block_size)),
        ) else {
            return Err(BdevError::OutOfRange {
                offset: u64::MAX,
                len: 0,
                size: 0,
            });
        };
        ns.bdev.unmap(off, len).await?;
    }
    Ok(())
}
