//! NVM I/O commands: Read, Write, Flush, Write Zeroes, Dataset Management.
//! Checks happen before any data moves (a doomed write is refused before
//! its data is asked for); what needs a buffer comes back as a
//! [`Transfer`], the rest as an [`Op`] for the transport's in-flight set.

use std::sync::Arc;

use bdev::{DmaBuf, IoKind};
use nvmf::cqe::{Cqe, Status};
use nvmf::sqe::{opcode, sgl, Sqe};

use super::exec::done_io;
use super::{status, Op, Outcome, Queue};
use crate::subsystem::Namespace;

/// A DSM range is 16 bytes; at most 256 ranges.
const DSM_RANGE_LEN: usize = 16;

/// Read/Write/Write Zeroes CDW12 bit 30: Force Unit Access.
const CDW12_FUA: u32 = 1 << 30;

/// What to do once a request's buffer (and, for a write, its data) is
/// there.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pending {
    /// Read into the buffer from `offset`.
    Read { offset: u64 },
    /// Write the buffer at `offset`; durably before completion if `fua`.
    Write { offset: u64, fua: bool },
    /// Dataset Management: the buffer holds the ranges; deallocate them if
    /// `deallocate`, made durable before completion if `sync`.
    Dsm { deallocate: bool, sync: bool },
}

impl Pending {
    /// Whether the buffer is filled from the host (a write) rather than
    /// sent to it (a read).
    pub(crate) fn moves_data_in(self) -> bool {
        !matches!(self, Pending::Read { .. })
    }
}

/// A command that needs a data buffer of `len` bytes before it can run.
pub(crate) struct Transfer {
    /// Its namespace.
    pub(crate) ns: Arc<Namespace>,
    /// Bytes to move.
    pub(crate) len: u32,
    /// What to do then.
    pub(crate) pending: Pending,
    /// Where the data starts in the capsule's in-capsule data, when the
    /// host sent it there (None: the transport solicits it, or it is a
    /// read).
    pub(crate) in_capsule: Option<usize>,
}

fn complete(cid: u16, status: Status) -> Outcome {
    Outcome::Complete(Cqe::new(cid, status))
}

impl Queue {
    /// I/O commands (queues 1 and up).
    pub(super) fn io(&mut self, sqe: &Sqe, data: &[u8]) -> Outcome {
        let cid = sqe.cid();
        let Some(ns) = self.namespace(sqe.nsid()) else {
            return complete(cid, Status::INVALID_NAMESPACE);
        };
        if let Some(st) = self.ana_refusal(&ns) {
            return complete(cid, st);
        }
        let changes_data = match sqe.opcode() {
            opcode::WRITE | opcode::WRITE_ZEROES | opcode::MARK_CLEAN => true,
            opcode::DATASET_MANAGEMENT => sqe.cdw(11) & (1 << 2) != 0,
            _ => false,
        };
        if changes_data && !ns.bdev.supports(IoKind::Write) {
            // Refused before any data moves (no R2T for a doomed write).
            return complete(cid, status::NAMESPACE_WRITE_PROTECTED);
        }
        match sqe.opcode() {
            opcode::READ => self.read(sqe, ns),
            opcode::WRITE => self.write(sqe, ns, data),
            opcode::FLUSH => Outcome::Submit(Op::Flush { ns }),
            opcode::WRITE_ZEROES => {
                let (offset, len) = match range(sqe, &ns) {
                    Ok(r) => r,
                    Err(st) => return complete(cid, st),
                };
                // Made durable (a flush after the zeroing) like a write.
                let sync = self.write_through(sqe);
                Outcome::Submit(Op::WriteZeroes {
                    ns,
                    offset,
                    len,
                    sync,
                })
            }
            opcode::DATASET_MANAGEMENT => self.dataset_management(sqe, ns, data),
            opcode::MARK_CLEAN if ns.bdev.supports(IoKind::MarkClean) => match range(sqe, &ns) {
                Ok((offset, len)) => Outcome::Submit(Op::MarkClean { ns, offset, len }),
                Err(st) => complete(cid, st),
            },
            _ => complete(cid, Status::INVALID_OPCODE),
        }
    }

    /// [`range`] of a command that moves data, also checked against the
    /// transfer limit (MDTS) before any narrowing: a larger transfer is
    /// refused with Invalid Field, never truncated.
    fn transfer_len(&self, sqe: &Sqe, ns: &Namespace) -> Result<(u64, u32), Status> {
        let (offset, len) = range(sqe, ns)?;
        let max = self.target.opts().max_io_size;
        let len = match u32::try_from(len) {
            Ok(l) if l <= max => l,
            _ => {
                tracing::debug!(cid = sqe.cid(), len, max, "transfer above MDTS refused");
                return Err(Status::INVALID_FIELD);
            }
        };
        if sqe.psdt() == 0 {
            return Err(Status::INVALID_FIELD);
        }
        if sqe.sgl().length < len {
            return Err(Status::SGL_LENGTH_INVALID);
        }
        Ok((offset, len))
    }

    /// Whether a write (or Write Zeroes) must be durable before it
    /// completes: the host set FUA, or turned the volatile write cache off.
    fn write_through(&self, sqe: &Sqe) -> bool {
        sqe.cdw(12) & CDW12_FUA != 0 || self.cache_off()
    }

    /// Whether the host turned the volatile write cache off (Set Features
    /// 0x06): every change to the medium is then written through, a
    /// Deallocate (which has no FUA bit) included.
    fn cache_off(&self) -> bool {
        self.bound
            .as_ref()
            .is_some_and(|b| !b.ctrl.write_cache_enabled())
    }

    fn read(&mut self, sqe: &Sqe, ns: Arc<Namespace>) -> Outcome {
        let cid = sqe.cid();
        let (offset, len) = match self.transfer_len(sqe, &ns) {
            Ok(r) => r,
            Err(st) => return complete(cid, st),
        };
        if sqe.sgl().kind != sgl::TRANSPORT {
            return complete(cid, Status::SGL_TYPE_INVALID);
        }
        Outcome::NeedsData(Transfer {
            ns,
            len,
            pending: Pending::Read { offset },
            in_capsule: None,
        })
    }

    fn write(&mut self, sqe: &Sqe, ns: Arc<Namespace>, data: &[u8]) -> Outcome {
        let cid = sqe.cid();
        let (offset, len) = match self.transfer_len(sqe, &ns) {
            Ok(r) => r,
            Err(st) => return complete(cid, st),
        };
        let fua = self.write_through(sqe);
        receive(sqe, ns, data, len, Pending::Write { offset, fua })
    }

    fn dataset_management(&mut self, sqe: &Sqe, ns: Arc<Namespace>, data: &[u8]) -> Outcome {
        let cid = sqe.cid();
        let ranges = (sqe.cdw(10) & 0xff) as usize + 1;
        let deallocate = sqe.cdw(11) & (1 << 2) != 0;
        let len = (ranges * DSM_RANGE_LEN) as u32;
        if sqe.sgl().length < len {
            return complete(cid, Status::SGL_LENGTH_INVALID);
        }
        let sync = deallocate && self.cache_off();
        receive(sqe, ns, data, len, Pending::Dsm { deallocate, sync })
    }

    /// Runs command `cid` once its buffer is there (`buf`, filled for a
    /// write; taken unless the command needs it no more, then left for the
    /// transport to reuse). A read the device answers from memory runs at
    /// once when `inline_ok` (the transport has no data change of this
    /// queue still to run, which the read could overtake).
    pub(crate) fn run(
        &mut self,
        cid: u16,
        ns: Arc<Namespace>,
        pending: Pending,
        buf: &mut Option<DmaBuf>,
        inline_ok: bool,
    ) -> Outcome {
        match pending {
            Pending::Dsm {
                deallocate: false, ..
            } => return complete(cid, Status::SUCCESS),
            _ if buf.is_none() => return complete(cid, Status::INTERNAL_ERROR),
            _ => {}
        }
        let buf = buf.take().expect("checked above");
        match pending {
            Pending::Read { offset } => {
                // A read the device answers at once (RAM, or a cached
                // volume's hit on a RAM cache device) completes here, as
                // SPDK completes a malloc read in the poller that took the
                // command: no future and no trip through the in-flight set,
                // which cost more than the copy itself.
                let buf = if inline_ok && ns.bdev.bdev().may_read_inline() {
                    match ns.bdev.read_inline_ended(offset, buf) {
                        Ok((buf, r, ended)) => {
                            return Outcome::Ran(done_io(r, Some(buf), IoKind::Read, Some(ended)))
                        }
                        Err(buf) => buf,
                    }
                } else {
                    buf
                };
                Outcome::Submit(Op::Read { ns, offset, buf })
            }
            Pending::Write { offset, fua } => Outcome::Submit(Op::Write {
                ns,
                offset,
                buf,
                fua,
            }),
            Pending::Dsm { sync, .. } => Outcome::Submit(Op::Unmap {
                ns,
                ranges: buf,
                sync,
            }),
        }
    }
}

/// Byte offset and length of an LBA-range command, checked against the
/// namespace. In u64: 65536 blocks of 64 KiB are 4 GiB, one more than a
/// u32 holds.
fn range(sqe: &Sqe, ns: &Namespace) -> Result<(u64, u64), Status> {
    let slba = sqe.slba();
    let nlb = u64::from(sqe.nlb()) + 1;
    match slba.checked_add(nlb) {
        Some(end) if end <= ns.num_blocks => {}
        _ => return Err(Status::LBA_OUT_OF_RANGE),
    }
    Ok((slba << ns.block_shift, nlb << ns.block_shift))
}

/// Where a command's `len` bytes of host data come from: the capsule
/// (`data`, checked against the descriptor) or a transfer the transport
/// solicits.
fn receive(sqe: &Sqe, ns: Arc<Namespace>, data: &[u8], len: u32, pending: Pending) -> Outcome {
    let cid = sqe.cid();
    let d = sqe.sgl();
    let in_capsule = match d.kind {
        sgl::IN_CAPSULE => {
            let start = d.address as usize;
            if d.address > data.len() as u64 || data.len() - start < len as usize {
                return complete(cid, Status::SGL_OFFSET_INVALID);
            }
            Some(start)
        }
        sgl::TRANSPORT => None,
        _ => return complete(cid, Status::SGL_TYPE_INVALID),
    };
    Outcome::NeedsData(Transfer {
        ns,
        len,
        pending,
        in_capsule,
    })
}
