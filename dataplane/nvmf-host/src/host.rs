//! One NVMe/TCP queue pair, host side, on a blocking TCP stream.
//!
//! The stream is read into one buffer and PDUs are decoded in place with
//! the `nvmf` codec, so a pipelined reader does one `read` per batch of
//! PDUs, not one per header.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use nvmf::cqe::Cqe;
use nvmf::pdu::{self, CommonHeader, Negotiated, Specific, CH_LEN};
use nvmf::sqe::{opcode, sgl, SglDescriptor, Sqe};

use crate::auth::DhchapKeys;
use crate::wire;

/// Errors of the host side.
#[derive(Debug)]
pub enum HostError {
    /// Socket error.
    Io(io::Error),
    /// The target sent something the protocol does not allow.
    Protocol(String),
    /// A command completed with an error status.
    Status {
        /// What was being done.
        what: &'static str,
        /// The completion.
        cqe: Cqe,
    },
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "socket: {e}"),
            Self::Protocol(m) => write!(f, "protocol: {m}"),
            Self::Status { what, cqe } => write!(
                f,
                "{what} failed: status type {} code {:#x} (dw0 {:#x})",
                cqe.status.sct, cqe.status.sc, cqe.dw0
            ),
        }
    }
}

impl std::error::Error for HostError {}

impl From<io::Error> for HostError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// Result of host operations.
pub type Result<T> = std::result::Result<T, HostError>;

/// What a received PDU meant. `D` is how read data is handed over: this
/// host gives its length (`usize`), the bytes being [`HostQueue::last_data`]
/// until the next `recv`; a host that owns the bytes (`nvmf-harness`'s
/// in-memory one) gives them (`Vec<u8>`).
#[derive(Debug)]
pub enum Event<D = usize> {
    /// A completion.
    Completion(Cqe),
    /// Read data for command `cccid` at offset `datao`.
    Data {
        /// Command id.
        cccid: u16,
        /// Offset in the command's transfer.
        datao: u32,
        /// The bytes, or their length (see `D`).
        data: D,
        /// The command succeeded and no completion follows.
        success: bool,
    },
    /// The target asks for write data.
    R2t(pdu::R2t),
}

/// Connection parameters.
#[derive(Clone, Debug)]
pub struct ConnectParams {
    /// Target address, e.g. `127.0.0.1:4420`.
    pub addr: String,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host NQN.
    pub hostnqn: String,
    /// Host identifier.
    pub host_id: [u8; 16],
    /// Submission queue size (entries; sent 0's based).
    pub queue_size: u16,
    /// Keep-alive timeout for the admin queue, ms (0: none).
    pub kato_ms: u32,
}

/// One queue pair.
pub struct HostQueue {
    stream: TcpStream,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    data_at: usize,
    neg: Negotiated,
    out: Vec<u8>,
    /// How much of `out` a [`HostQueue::try_flush`] has sent.
    out_sent: usize,
    /// The controller id (after Connect).
    pub cntlid: u16,
    /// Queue id.
    pub qid: u16,
    /// Largest H2CData the target accepts.
    pub maxh2cdata: u32,
    /// Connect's answer asked for authentication (AUTHREQ.ATR).
    pub auth_required: bool,
    next_cid: u16,
    /// Spin on a non-blocking socket instead of sleeping in `read`.
    busy_poll: bool,
    read_timeout: Duration,
}

impl HostQueue {
    /// Opens a TCP connection, exchanges ICReq/ICResp and connects queue
    /// `qid` (0 = admin: a new controller; else an I/O queue of `cntlid`).
    pub fn connect(p: &ConnectParams, qid: u16, cntlid: u16) -> Result<Self> {
        let mut q = Self::initialize(&p.addr, false, false)?;
        q.fabrics_connect(p, qid, cntlid)?;
        Ok(q)
    }

    /// [`HostQueue::connect`], then DH-HMAC-CHAP with `keys` when the
    /// Connect's answer asks for it.
    pub fn connect_with_keys(
        p: &ConnectParams,
        qid: u16,
        cntlid: u16,
        keys: Option<&DhchapKeys>,
    ) -> Result<Self> {
        let mut q = Self::connect(p, qid, cntlid)?;
        if let (true, Some(k)) = (q.auth_required, keys) {
            q.authenticate(p, k)?;
        }
        Ok(q)
    }

    /// Opens a TCP connection and exchanges ICReq/ICResp, asking for header
    /// and data digests as given; no Connect yet.
    pub fn initialize(addr: &str, header_digest: bool, data_digest: bool) -> Result<Self> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut q = Self {
            stream,
            rbuf: vec![0; 4 << 20],
            rstart: 0,
            rend: 0,
            data_at: 0,
            neg: Negotiated::default(),
            out: Vec::with_capacity(1 << 20),
            out_sent: 0,
            cntlid: 0,
            qid: 0,
            maxh2cdata: 0,
            auth_required: false,
            next_cid: 0,
            busy_poll: false,
            read_timeout: Duration::from_secs(30),
        };
        let ic = wire::ic_req(wire::Digests {
            header: header_digest,
            data: data_digest,
        });
        q.stream.write_all(&ic)?;
        match q.recv_specific()? {
            Specific::IcResp(r) => {
                if r.header_digest != header_digest || r.data_digest != data_digest {
                    return Err(HostError::Protocol(
                        "target answered digests other than those asked for".into(),
                    ));
                }
                if r.cpda != 0 || r.maxh2cdata < 4096 || r.maxh2cdata % 4 != 0 {
                    return Err(HostError::Protocol(format!("unusable ICResp {r:?}")));
                }
                q.maxh2cdata = r.maxh2cdata;
                q.neg.initialized = true;
                q.neg.header_digest = header_digest;
                q.neg.data_digest = data_digest;
            }
            other => {
                return Err(HostError::Protocol(format!(
                    "expected ICResp, got {other:?}"
                )))
            }
        }
        Ok(q)
    }

    /// Sends Fabrics Connect for queue `qid` (0 = admin: a new controller;
    /// else an I/O queue of `cntlid`).
    pub fn fabrics_connect(&mut self, p: &ConnectParams, qid: u16, cntlid: u16) -> Result<()> {
        let q = self;
        q.qid = qid;
        let (sqe, data) = wire::connect(
            0,
            &p.subnqn,
            &p.hostnqn,
            p.host_id,
            qid,
            p.queue_size,
            cntlid,
            p.kato_ms,
        );
        let cqe = q.execute_raw(sqe, Some(&data), None, "Connect")?;
        q.cntlid = cqe.dw0 as u16;
        q.auth_required = cqe.dw0 & nvmf::auth::CONNECT_AUTHREQ_ATR != 0;
        Ok(())
    }

    /// A fresh command id.
    pub fn cid(&mut self) -> u16 {
        self.next_cid = self.next_cid.wrapping_add(1);
        self.next_cid
    }

    /// Queues a command capsule (with in-capsule `data`, if any) for the
    /// next [`HostQueue::flush`].
    pub fn queue_command(&mut self, sqe: &Sqe, data: Option<&[u8]>) {
        let d = self.digests();
        wire::put_command(&mut self.out, sqe, data, d);
    }

    /// Queues an H2CData PDU.
    pub fn queue_h2c(&mut self, cccid: u16, ttag: u16, datao: u32, data: &[u8], last: bool) {
        let d = self.digests();
        wire::put_h2c(&mut self.out, cccid, ttag, datao, data, last, d);
    }

    fn digests(&self) -> wire::Digests {
        wire::Digests {
            header: self.neg.header_digest,
            data: self.neg.data_digest,
        }
    }

    /// Sends everything queued, in one write where the kernel allows.
    pub fn flush(&mut self) -> Result<()> {
        let mut sent = std::mem::take(&mut self.out_sent);
        while sent < self.out.len() {
            match self.stream.write(&self.out[sent..]) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Busy-polling: the send buffer is full until the target reads.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e.into()),
            }
        }
        self.out.clear();
        Ok(())
    }

    /// On a non-blocking (busy-polling) queue: sends what the socket takes
    /// now of everything queued, keeping the rest for the next call.
    /// `Ok(true)` once all of it is sent; `Ok(false)`: wait until the
    /// socket is writable and call again.
    pub fn try_flush(&mut self) -> Result<bool> {
        while self.out_sent < self.out.len() {
            match self.stream.write(&self.out[self.out_sent..]) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                Ok(n) => self.out_sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        self.out.clear();
        self.out_sent = 0;
        Ok(true)
    }

    /// Busy-polls the socket (as SPDK's perf does) instead of sleeping in
    /// the kernel until data arrives: a waiting receive costs a core but no
    /// wake-up, which on a VM is most of a small I/O's latency.
    pub fn set_busy_poll(&mut self, on: bool) -> Result<()> {
        self.stream.set_nonblocking(on)?;
        self.busy_poll = on;
        Ok(())
    }

    /// Whether a whole PDU is already buffered, so the next [`HostQueue::recv`]
    /// needs no system call. A pipelined loop sends its queued commands only
    /// when this is false: one write per batch of completions, not one each.
    pub fn pdu_buffered(&self) -> bool {
        let avail = &self.rbuf[self.rstart..self.rend];
        avail.len() >= CH_LEN
            && avail.len()
                >= CommonHeader::parse(avail[..CH_LEN].try_into().expect("8 bytes")).plen as usize
    }

    /// On a busy-polling (non-blocking) queue: whether the socket has bytes
    /// to read now, or is closed, so that a [`HostQueue::recv`] will not
    /// wait for the first byte.
    pub fn readable_now(&self) -> bool {
        match self.stream.peek(&mut [0u8; 1]) {
            Ok(_) => true,
            Err(e) => e.kind() != io::ErrorKind::WouldBlock,
        }
    }

    /// The data of the last [`Event::Data`].
    pub fn last_data(&self, len: usize) -> &[u8] {
        &self.rbuf[self.data_at..self.data_at + len]
    }

    fn fill(&mut self, need: usize) -> Result<()> {
        if self.rend - self.rstart >= need {
            return Ok(());
        }
        if need > self.rbuf.len() {
            return Err(HostError::Protocol(format!(
                "PDU of {need} bytes exceeds the receive buffer"
            )));
        }
        if self.rstart + need > self.rbuf.len() {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
        }
        let mut waiting_since = None;
        while self.rend - self.rstart < need {
            let n = match self.stream.read(&mut self.rbuf[self.rend..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if self.busy_poll && e.kind() == io::ErrorKind::WouldBlock => {
                    let since = *waiting_since.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() > self.read_timeout {
                        return Err(e.into());
                    }
                    std::hint::spin_loop();
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Err(HostError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "target closed the connection",
                )));
            }
            self.rend += n;
        }
        Ok(())
    }

    /// Receives one PDU and returns its type-specific header, remembering
    /// where its data is.
    fn recv_specific(&mut self) -> Result<Specific> {
        self.fill(CH_LEN)?;
        let ch = CommonHeader::parse(
            self.rbuf[self.rstart..self.rstart + CH_LEN]
                .try_into()
                .expect("8 bytes"),
        );
        let layout = ch
            .validate(&self.neg, false)
            .map_err(|e| HostError::Protocol(format!("bad PDU from target: {e}")))?;
        self.fill(layout.plen)?;
        let at = self.rstart;
        let hlen = layout.pdu_type.hlen();
        if layout.header_digest {
            let d: [u8; 4] = self.rbuf[at + hlen..at + hlen + 4].try_into().expect("4");
            if !nvmf::digest::verify(&self.rbuf[at..at + hlen], d) {
                return Err(HostError::Protocol("header digest mismatch".into()));
            }
        }
        if layout.data_digest {
            let (from, to) = (
                at + layout.data_offset,
                at + layout.data_offset + layout.data_len,
            );
            let d: [u8; 4] = self.rbuf[to..to + 4].try_into().expect("4");
            if !nvmf::digest::verify(&self.rbuf[from..to], d) {
                return Err(HostError::Protocol("data digest mismatch".into()));
            }
        }
        let spec = pdu::parse_specific(&layout, ch.flags, &self.rbuf[at..at + layout.header_total])
            .map_err(|e| HostError::Protocol(format!("bad PDU from target: {e}")))?;
        self.data_at = at + layout.data_offset;
        self.rstart += layout.plen;
        if let Specific::TermReq(t) = spec {
            return Err(HostError::Protocol(format!(
                "target terminated the connection: FES {:#x} FEI {:#x}",
                t.fes, t.fei
            )));
        }
        Ok(spec)
    }

    /// Receives the next event.
    pub fn recv(&mut self) -> Result<Event> {
        match self.recv_specific()? {
            Specific::CapsuleResp(c) => Ok(Event::Completion(Cqe::decode(&c))),
            Specific::Data(d) => Ok(Event::Data {
                cccid: d.cccid,
                datao: d.datao,
                data: d.datal as usize,
                success: d.success,
            }),
            Specific::R2t(r) => Ok(Event::R2t(r)),
            other => Err(HostError::Protocol(format!("unexpected PDU {other:?}"))),
        }
    }

    /// Receives the next event, or `None` when none arrives within `wait`
    /// (for a host that paces its submissions). A PDU received in part
    /// stays buffered for the next call. Not for busy-polling queues.
    pub fn recv_timeout(&mut self, wait: Duration) -> Result<Option<Event>> {
        if self.pdu_buffered() {
            return self.recv().map(Some);
        }
        // A zero timeout means "block forever" to the socket.
        self.stream
            .set_read_timeout(Some(wait.max(Duration::from_micros(1))))?;
        let r = self.recv();
        self.stream.set_read_timeout(Some(self.read_timeout))?;
        match r {
            Ok(e) => Ok(Some(e)),
            Err(HostError::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Runs one command to completion: sends `write` data (in the capsule
    /// when the SQE says so, else answering R2Ts) and copies read data into
    /// `read`.
    pub fn execute_raw(
        &mut self,
        mut sqe: Sqe,
        write: Option<&[u8]>,
        mut read: Option<&mut [u8]>,
        what: &'static str,
    ) -> Result<Cqe> {
        let cid = self.cid();
        sqe.0[2..4].copy_from_slice(&cid.to_le_bytes());
        let in_capsule = sqe.0[39] == sgl::IN_CAPSULE;
        self.queue_command(&sqe, if in_capsule { write } else { None });
        self.flush()?;
        loop {
            match self.recv()? {
                Event::Completion(c) if c.cid == cid => {
                    if !c.status.is_success() {
                        return Err(HostError::Status { what, cqe: c });
                    }
                    return Ok(c);
                }
                Event::Completion(c) => {
                    return Err(HostError::Protocol(format!(
                        "completion for unknown cid {}",
                        c.cid
                    )))
                }
                Event::Data {
                    cccid,
                    datao,
                    data: len,
                    success,
                } if cccid == cid => {
                    let at = self.data_at;
                    if let Some(buf) = read.as_deref_mut() {
                        let end = datao as usize + len;
                        if end > buf.len() {
                            return Err(HostError::Protocol(
                                "C2HData beyond the read buffer".into(),
                            ));
                        }
                        buf[datao as usize..end].copy_from_slice(&self.rbuf[at..at + len]);
                    }
                    if success {
                        return Ok(Cqe::new(cid, nvmf::cqe::Status::SUCCESS));
                    }
                }
                Event::R2t(r) if r.cccid == cid => {
                    let data = write.ok_or_else(|| {
                        HostError::Protocol("R2T for a command without data".into())
                    })?;
                    let (off, len) = (r.r2to as usize, r.r2tl as usize);
                    if off + len > data.len() {
                        return Err(HostError::Protocol("R2T beyond the write data".into()));
                    }
                    let chunk = self.maxh2cdata.max(4096) as usize;
                    let mut done = 0;
                    while done < len {
                        let n = chunk.min(len - done);
                        let d = &data[off + done..off + done + n];
                        self.queue_h2c(cid, r.ttag, (off + done) as u32, d, done + n == len);
                        done += n;
                    }
                    self.flush()?;
                }
                other => return Err(HostError::Protocol(format!("unexpected {other:?}"))),
            }
        }
    }

    /// Property Get (8-byte when `wide`).
    pub fn property_get(&mut self, offset: u32, wide: bool) -> Result<u64> {
        let sqe = wire::property_get(0, offset, wide);
        let c = self.execute_raw(sqe, None, None, "Property Get")?;
        Ok(u64::from(c.dw0) | (u64::from(c.dw1) << 32))
    }

    /// Property Set (4-byte).
    pub fn property_set(&mut self, offset: u32, value: u32) -> Result<()> {
        let sqe = wire::property_set(0, offset, value);
        self.execute_raw(sqe, None, None, "Property Set")
            .map(|_| ())
    }

    /// An admin command whose data (`len` bytes) the target sends back.
    pub fn admin_read(
        &mut self,
        opc: u8,
        nsid: u32,
        cdw10_15: [u32; 6],
        len: usize,
        what: &'static str,
    ) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let sqe = Sqe::build(
            opc,
            0,
            nsid,
            SglDescriptor {
                address: 0,
                length: len as u32,
                kind: sgl::TRANSPORT,
            },
            cdw10_15,
        );
        self.execute_raw(sqe, None, Some(&mut buf), what)?;
        Ok(buf)
    }

    /// Enables the controller (CC.EN with 64/16-byte queue entries) and
    /// waits for CSTS.RDY.
    pub fn enable(&mut self) -> Result<()> {
        self.property_set(wire::prop::CC, wire::prop::CC_ENABLE)?;
        for _ in 0..100 {
            if self.property_get(wire::prop::CSTS, false)? & 1 == 1 {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(HostError::Protocol(
            "controller did not become ready".into(),
        ))
    }

    /// Set Features Number of Queues; returns how many I/O queues were granted.
    pub fn set_queue_count(&mut self, n: u16) -> Result<u16> {
        let sqe = Sqe::build(
            opcode::SET_FEATURES,
            0,
            0,
            SglDescriptor {
                address: 0,
                length: 0,
                kind: sgl::TRANSPORT,
            },
            [7, u32::from(n - 1) | (u32::from(n - 1) << 16), 0, 0, 0, 0],
        );
        let c = self.execute_raw(sqe, None, None, "Set Features (Number of Queues)")?;
        Ok((c.dw0 & 0xffff) as u16 + 1)
    }

    /// Sends raw bytes (for tests of malformed PDUs).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream.write_all(bytes)?;
        Ok(())
    }

    /// Sets how long a receive may wait.
    pub fn set_read_timeout(&mut self, t: Duration) -> Result<()> {
        self.stream.set_read_timeout(Some(t))?;
        self.read_timeout = t;
        Ok(())
    }

    /// Enables Namespace Attribute Changed notices (Set Features, Async
    /// Event Configuration) and leaves an Asynchronous Event Request with
    /// command id `cid` outstanding: its completion arrives through
    /// [`HostQueue::recv`] when a namespace changes.
    pub fn arm_namespace_notices(&mut self, cid: u16) -> Result<()> {
        self.admin_no_data(opcode::SET_FEATURES, 0, [0x0b, 1 << 8, 0, 0, 0, 0], "AEC")?;
        let aer = Sqe::build(
            opcode::ASYNC_EVENT_REQUEST,
            cid,
            0,
            SglDescriptor {
                address: 0,
                length: 0,
                kind: sgl::TRANSPORT,
            },
            [0; 6],
        );
        self.queue_command(&aer, None);
        self.flush()
    }

    /// Keep Alive.
    pub fn keep_alive(&mut self) -> Result<()> {
        self.admin_no_data(opcode::KEEP_ALIVE, 0, [0; 6], "Keep Alive")
            .map(|_| ())
    }

    /// An admin or I/O command without data.
    pub fn admin_no_data(
        &mut self,
        opc: u8,
        nsid: u32,
        cdw10_15: [u32; 6],
        what: &'static str,
    ) -> Result<Cqe> {
        let sqe = Sqe::build(
            opc,
            0,
            nsid,
            SglDescriptor {
                address: 0,
                length: 0,
                kind: sgl::TRANSPORT,
            },
            cdw10_15,
        );
        self.execute_raw(sqe, None, None, what)
    }

    /// Identify with `cns` for `nsid` (4096 bytes).
    pub fn identify(&mut self, cns: u8, nsid: u32) -> Result<Vec<u8>> {
        self.admin_read(
            opcode::IDENTIFY,
            nsid,
            [u32::from(cns), 0, 0, 0, 0, 0],
            4096,
            "Identify",
        )
    }

    /// Get Log Page `lid`: `len` bytes (a multiple of 4) from byte `offset`.
    pub fn get_log_page(&mut self, lid: u8, offset: u64, len: usize) -> Result<Vec<u8>> {
        let numd = (len / 4 - 1) as u32;
        self.admin_read(
            opcode::GET_LOG_PAGE,
            0xffff_ffff,
            [
                u32::from(lid) | ((numd & 0xffff) << 16),
                numd >> 16,
                offset as u32,
                (offset >> 32) as u32,
                0,
                0,
            ],
            len,
            "Get Log Page",
        )
    }

    /// Writes `data` at block `slba` of `nsid`: in the capsule when it fits
    /// `in_capsule_max`, else through R2T and H2CData.
    pub fn write_blocks(
        &mut self,
        nsid: u32,
        slba: u64,
        block_size: usize,
        data: &[u8],
        in_capsule_max: usize,
    ) -> Result<Cqe> {
        let kind = if data.len() <= in_capsule_max {
            sgl::IN_CAPSULE
        } else {
            sgl::TRANSPORT
        };
        let sqe = wire::rw(opcode::WRITE, 0, nsid, slba, data.len(), block_size, kind);
        self.execute_raw(sqe, Some(data), None, "Write")
    }

    /// Reads `buf.len()` bytes from block `slba` of `nsid`.
    pub fn read_blocks(
        &mut self,
        nsid: u32,
        slba: u64,
        block_size: usize,
        buf: &mut [u8],
    ) -> Result<Cqe> {
        let sqe = wire::rw(
            opcode::READ,
            0,
            nsid,
            slba,
            buf.len(),
            block_size,
            sgl::TRANSPORT,
        );
        self.execute_raw(sqe, None, Some(buf), "Read")
    }

    /// Dataset Management, deallocate: `ranges` of (starting LBA, blocks).
    pub fn deallocate(&mut self, nsid: u32, ranges: &[(u64, u32)]) -> Result<Cqe> {
        let (sqe, data) = wire::deallocate(0, nsid, ranges);
        self.execute_raw(sqe, Some(&data), None, "Dataset Management")
    }
}

/// The queue's socket, for a caller that waits for it to be readable
/// (with busy-polling on, so that [`HostQueue::recv`] reads without
/// blocking) instead of blocking in `recv`.
impl std::os::fd::AsRawFd for HostQueue {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.stream)
    }
}

/// A connected controller: its admin queue and I/O queues.
pub struct HostController {
    /// Admin queue.
    pub admin: HostQueue,
    /// I/O queues, qid 1.. in order.
    pub io: Vec<HostQueue>,
}

impl HostController {
    /// Connects the admin queue, enables the controller, asks for
    /// `io_queues` I/O queues and connects them (as Linux does).
    pub fn connect(p: &ConnectParams, io_queues: u16) -> Result<Self> {
        Self::connect_with_keys(p, io_queues, None)
    }

    /// [`HostController::connect`], authenticating every queue whose
    /// Connect asks for it with `keys` (DH-HMAC-CHAP).
    pub fn connect_with_keys(
        p: &ConnectParams,
        io_queues: u16,
        keys: Option<&DhchapKeys>,
    ) -> Result<Self> {
        let mut admin = HostQueue::connect_with_keys(p, 0, 0, keys)?;
        admin.property_get(0, true)?; // CAP
        admin.enable()?;
        admin.identify(0x01, 0)?;
        let granted = if io_queues > 0 {
            admin.set_queue_count(io_queues)?.min(io_queues)
        } else {
            0
        };
        let mut io = Vec::new();
        for qid in 1..=granted {
            io.push(HostQueue::connect_with_keys(p, qid, admin.cntlid, keys)?);
        }
        Ok(Self { admin, io })
    }
}
