//! NVM I/O commands: Read, Write, Flush, Write Zeroes, Dataset Management.
//! Checks happen before any data moves (a doomed write is refused before
//! its R2T); the bdev call runs in the connection's in-flight set.

use std::sync::Arc;

use bdev::IoKind;
use nvmf::cqe::Status;
use nvmf::sqe::{opcode, sgl, Sqe};

use crate::subsystem::Namespace;
use crate::tcp::bufpool::Grant;
use crate::tcp::connection::{done_io, status, Connection, Op, Pending, ReqState};

/// A DSM range is 16 bytes; at most 256 ranges.
const DSM_RANGE_LEN: usize = 16;

/// Read/Write/Write Zeroes CDW12 bit 30: Force Unit Access.
const CDW12_FUA: u32 = 1 << 30;

/// Generic status 0x20, Namespace is Write Protected: a command that would
/// change a read-only bdev (Identify Namespace reports NSATTR bit 0).
pub(crate) const NAMESPACE_WRITE_PROTECTED: Status = Status {
    sct: 0,
    sc: 0x20,
    dnr: true,
};

impl Connection {
    pub(crate) fn io(&mut self, sqe: &Sqe, data: &[u8]) {
        let cid = sqe.cid();
        let Some(ns) = self.namespace(sqe.nsid()) else {
            return self.complete(cid, Status::INVALID_NAMESPACE);
        };
        let changes_data = match sqe.opcode() {
            opcode::WRITE | opcode::WRITE_ZEROES => true,
            opcode::DATASET_MANAGEMENT => sqe.cdw(11) & (1 << 2) != 0,
            _ => false,
        };
        if changes_data && !ns.bdev.supports(IoKind::Write) {
            // Refused before any data moves (no R2T for a doomed write).
            return self.complete(cid, NAMESPACE_WRITE_PROTECTED);
        }
        match sqe.opcode() {
            opcode::READ => self.read(sqe, ns),
            opcode::WRITE => self.write(sqe, ns, data),
            opcode::FLUSH => {
                let Some(slot) = self.slot_or_refuse(cid) else {
                    return;
                };
                self.set_state(slot, ReqState::Executing);
                self.submit_op(Op::Flush { slot, ns });
            }
            opcode::WRITE_ZEROES => {
                let (offset, len) = match self.range(sqe, &ns) {
                    Ok(r) => r,
                    Err(st) => return self.complete(cid, st),
                };
                // Made durable (a flush after the zeroing) like a write.
                let sync = self.write_through(sqe);
                let Some(slot) = self.slot_or_refuse(cid) else {
                    return;
                };
                self.set_state(slot, ReqState::Executing);
                self.submit_op(Op::WriteZeroes {
                    slot,
                    ns,
                    offset,
                    len,
                    sync,
                });
            }
            opcode::DATASET_MANAGEMENT => self.dataset_management(sqe, ns, data),
            _ => self.complete(cid, Status::INVALID_OPCODE),
        }
    }

    /// A slot, or the over-depth refusal: a host that ignores the queue
    /// size gets a retryable error for the extra commands, nothing worse.
    fn slot_or_refuse(&mut self, cid: u16) -> Option<u16> {
        let slot = self.alloc_slot(cid);
        if slot.is_none() {
            self.complete(cid, status::COMMAND_INTERRUPTED);
        }
        slot
    }

    /// Byte offset and length of an LBA-range command, checked against the
    /// namespace. In u64: 65536 blocks of 64 KiB are 4 GiB, one more than
    /// a u32 holds.
    fn range(&self, sqe: &Sqe, ns: &Namespace) -> Result<(u64, u64), Status> {
        let slba = sqe.slba();
        let nlb = u64::from(sqe.nlb()) + 1;
        match slba.checked_add(nlb) {
            Some(end) if end <= ns.num_blocks => {}
            _ => return Err(Status::LBA_OUT_OF_RANGE),
        }
        Ok((slba << ns.block_shift, nlb << ns.block_shift))
    }

    /// [`Self::range`] of a command that moves data, also checked against
    /// the transfer limit (MDTS) before any narrowing: a larger transfer is
    /// refused with Invalid Field, never truncated.
    fn transfer_len(&self, sqe: &Sqe, ns: &Namespace) -> Result<(u64, u32), Status> {
        let (offset, len) = self.range(sqe, ns)?;
        let len = match u32::try_from(len) {
            Ok(l) if l <= self.target.opts.max_io_size => l,
            _ => {
                tracing::debug!(
                    cid = sqe.cid(),
                    len,
                    max = self.target.opts.max_io_size,
                    "transfer above MDTS refused"
                );
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

    fn read(&mut self, sqe: &Sqe, ns: Arc<Namespace>) {
        let cid = sqe.cid();
        let (offset, len) = match self.transfer_len(sqe, &ns) {
            Ok(r) => r,
            Err(st) => return self.complete(cid, st),
        };
        if sqe.sgl().kind != sgl::TRANSPORT {
            return self.complete(cid, Status::SGL_TYPE_INVALID);
        }
        let Some(slot) = self.slot_or_refuse(cid) else {
            return;
        };
        let r = &mut self.slots[slot as usize];
        r.ns = Some(ns);
        r.len = len;
        r.pending = Pending::Read { offset };
        self.with_buffer(slot);
    }

    fn write(&mut self, sqe: &Sqe, ns: Arc<Namespace>, data: &[u8]) {
        let cid = sqe.cid();
        let (offset, len) = match self.transfer_len(sqe, &ns) {
            Ok(r) => r,
            Err(st) => return self.complete(cid, st),
        };
        let fua = self.write_through(sqe);
        self.receive_then(sqe, ns, data, len, Pending::Write { offset, fua });
    }

    fn dataset_management(&mut self, sqe: &Sqe, ns: Arc<Namespace>, data: &[u8]) {
        let cid = sqe.cid();
        let ranges = (sqe.cdw(10) & 0xff) as usize + 1;
        let deallocate = sqe.cdw(11) & (1 << 2) != 0;
        let len = (ranges * DSM_RANGE_LEN) as u32;
        if sqe.sgl().length < len {
            return self.complete(cid, Status::SGL_LENGTH_INVALID);
        }
        let sync = deallocate && self.cache_off();
        self.receive_then(sqe, ns, data, len, Pending::Dsm { deallocate, sync });
    }

    /// Gets `len` bytes of host data for a command, in the capsule or by
    /// R2T, then runs `pending`.
    fn receive_then(
        &mut self,
        sqe: &Sqe,
        ns: Arc<Namespace>,
        data: &[u8],
        len: u32,
        pending: Pending,
    ) {
        let cid = sqe.cid();
        let d = sqe.sgl();
        let in_capsule = match d.kind {
            sgl::IN_CAPSULE => {
                let start = d.address as usize;
                if d.address > data.len() as u64 || data.len() - start < len as usize {
                    return self.complete(cid, Status::SGL_OFFSET_INVALID);
                }
                Some(start)
            }
            sgl::TRANSPORT => None,
            _ => return self.complete(cid, Status::SGL_TYPE_INVALID),
        };
        let Some(slot) = self.slot_or_refuse(cid) else {
            return;
        };
        let r = &mut self.slots[slot as usize];
        r.ns = Some(ns);
        r.len = len;
        r.pending = pending;
        match in_capsule {
            // In-capsule data is already here: bounded per queue by the
            // queue depth and the in-capsule size, it takes no units.
            Some(start) => {
                let mut buf = self.pool.take(len as usize);
                buf.copy_from_slice(&data[start..start + len as usize]);
                let r = &mut self.slots[slot as usize];
                r.buf = Some(buf);
                r.received = len;
                self.data_complete(slot);
            }
            None => self.with_buffer(slot),
        }
    }

    /// Starts `slot` (a read, or a write whose data comes by R2T) once it
    /// has budget units for its buffer: now if they are free and no older
    /// request of this queue waits, else in `AwaitingBuffer`.
    fn with_buffer(&mut self, slot: u16) {
        let len = self.slots[slot as usize].len;
        let grant = if self.waiting.is_empty() {
            self.bufs.try_grant(len)
        } else {
            None
        };
        match grant {
            Some(g) => self.start_with(slot, g),
            None => {
                self.set_state(slot, ReqState::AwaitingBuffer);
                self.waiting.push_back(slot);
            }
        }
    }

    /// Allocates `slot`'s buffer under `grant` and starts it: a read goes
    /// to the bdev, a write asks for its data.
    pub(crate) fn start_with(&mut self, slot: u16, grant: Grant) {
        let len = self.slots[slot as usize].len;
        let buf = self.pool.take(len as usize);
        let r = &mut self.slots[slot as usize];
        r.grant = Some(grant);
        match (r.pending, r.ns.clone()) {
            (Pending::Read { offset }, Some(ns)) => {
                self.set_state(slot, ReqState::Executing);
                // A read the device answers at once (RAM, or a cached
                // volume's hit on a RAM cache device) completes here, as
                // SPDK completes a malloc read in the poller that took the
                // command: no future and no trip through the in-flight set,
                // which cost more than the copy itself. Not while a write
                // of this queue is still to run: the read would overtake it.
                let buf = if self.changing == 0 && ns.bdev.bdev().may_read_inline() {
                    match ns.bdev.read_inline_ended(offset, buf) {
                        Ok((buf, r, ended)) => {
                            return self.finish(done_io(
                                slot,
                                r,
                                Some(buf),
                                IoKind::Read,
                                Some(ended),
                            ))
                        }
                        Err(buf) => buf,
                    }
                } else {
                    buf
                };
                self.submit_op(Op::Read {
                    slot,
                    ns,
                    offset,
                    buf,
                });
            }
            _ => {
                r.buf = Some(buf);
                self.set_state(slot, ReqState::AwaitingH2cData);
                self.send_r2t(slot);
            }
        }
    }

    /// Starts waiting requests, oldest first, while units are free.
    pub(crate) fn start_waiting(&mut self) {
        while let Some(&slot) = self.waiting.front() {
            let Some(g) = self.bufs.try_grant(self.slots[slot as usize].len) else {
                break;
            };
            self.waiting.pop_front();
            self.start_with(slot, g);
        }
    }
}
