//! An async NVMe/TCP host over an in-memory pipe to a [`Target`], for tests
//! that run on tokio's paused clock (keep-alive, drain and timeout paths
//! without waiting on the wall clock). PDUs are built by `nvmf_host::wire`,
//! the same builder the TCP host uses.

use std::collections::VecDeque;
use std::net::SocketAddr;

use nvmf::cqe::Cqe;
use nvmf::pdu::{self, CommonHeader, Negotiated, Specific, CH_LEN};
use nvmf::sqe::{opcode, sgl, Sqe};
use nvmf_host::wire::{self, Digests};
use nvmf_tgt::Target;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::task::JoinHandle;

/// What a received PDU meant: the TCP host's events, read data carried
/// as the bytes themselves.
pub type Event = nvmf_host::host::Event<Vec<u8>>;

/// One queue pair's host side.
pub struct MemHost {
    rd: ReadHalf<DuplexStream>,
    wr: WriteHalf<DuplexStream>,
    buf: Vec<u8>,
    neg: Negotiated,
    next_cid: u16,
    /// Largest H2CData payload the target accepts.
    pub maxh2cdata: u32,
    /// Controller id after Connect.
    pub cntlid: u16,
    /// Events for other commands seen while waiting for one.
    pending: VecDeque<Event>,
}

/// Connect parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host NQN.
    pub hostnqn: String,
    /// Queue entries.
    pub entries: u16,
    /// Keep-alive timeout (admin queue), ms.
    pub kato_ms: u32,
}

impl MemHost {
    /// Opens a connection to `target` as if it arrived on `listen`, over a
    /// pipe buffering `pipe_bytes` each way, served by a spawned task whose
    /// handle is returned (it ends when the target closes the queue pair).
    pub fn open(target: &Target, listen: SocketAddr, pipe_bytes: usize) -> (Self, JoinHandle<()>) {
        let (ours, theirs) = tokio::io::duplex(pipe_bytes);
        let t = target.clone();
        let peer: SocketAddr = "127.0.0.1:9".parse().expect("address");
        let task = tokio::spawn(async move { t.serve_stream(theirs, peer, listen).await });
        let (rd, wr) = tokio::io::split(ours);
        let host = Self {
            rd,
            wr,
            buf: Vec::new(),
            neg: Negotiated::default(),
            next_cid: 0,
            maxh2cdata: 0,
            cntlid: 0,
            pending: VecDeque::new(),
        };
        (host, task)
    }

    /// ICReq/ICResp without digests.
    pub async fn initialize(&mut self) -> Result<(), String> {
        self.send(&wire::ic_req(Digests::default())).await?;
        match self.recv_specific().await?.0 {
            Specific::IcResp(r) => {
                self.neg.initialized = true;
                self.maxh2cdata = r.maxh2cdata;
                Ok(())
            }
            other => Err(format!("expected ICResp, got {other:?}")),
        }
    }

    /// ICReq, then Connect of queue `qid` (0: a new controller).
    pub async fn connect(&mut self, p: &Params, qid: u16, cntlid: u16) -> Result<Cqe, String> {
        self.initialize().await?;
        let cid = self.cid();
        let (sqe, data) = wire::connect(
            cid, &p.subnqn, &p.hostnqn, [0x33; 16], qid, p.entries, cntlid, p.kato_ms,
        );
        let c = self.execute(sqe, Some(&data), None).await?;
        if c.status.is_success() {
            self.cntlid = c.dw0 as u16;
        }
        Ok(c)
    }

    /// A fresh command id.
    pub fn cid(&mut self) -> u16 {
        self.next_cid = self.next_cid.wrapping_add(1);
        self.next_cid
    }

    /// Sends raw bytes.
    pub async fn send(&mut self, b: &[u8]) -> Result<(), String> {
        self.wr.write_all(b).await.map_err(|e| format!("send: {e}"))
    }

    /// Sends a command (its data in the capsule when given) without
    /// waiting; returns its command id (written into the SQE).
    pub async fn submit(&mut self, mut sqe: Sqe, data: Option<&[u8]>) -> Result<u16, String> {
        let cid = self.cid();
        sqe.0[2..4].copy_from_slice(&cid.to_le_bytes());
        let mut out = Vec::new();
        wire::put_command(&mut out, &sqe, data, Digests::default());
        self.send(&out).await?;
        Ok(cid)
    }

    async fn recv_specific(&mut self) -> Result<(Specific, Vec<u8>), String> {
        loop {
            if self.buf.len() >= CH_LEN {
                let ch = CommonHeader::parse(self.buf[..CH_LEN].try_into().expect("8"));
                let layout = ch
                    .validate(&self.neg, false)
                    .map_err(|e| format!("bad PDU: {e}"))?;
                if self.buf.len() >= layout.plen {
                    let p: Vec<u8> = self.buf.drain(..layout.plen).collect();
                    let spec = pdu::parse_specific(&layout, ch.flags, &p)
                        .map_err(|e| format!("bad PDU: {e}"))?;
                    let data = p[layout.data_offset..layout.data_offset + layout.data_len].to_vec();
                    return Ok((spec, data));
                }
            }
            let mut chunk = [0u8; 16384];
            let n = self
                .rd
                .read(&mut chunk)
                .await
                .map_err(|e| format!("recv: {e}"))?;
            if n == 0 {
                return Err("the target closed the connection".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Reads at most `max` bytes from the target into the receive buffer,
    /// for [`MemHost::recv`] to parse later (a host that reads slowly).
    pub async fn read_some(&mut self, max: usize) -> Result<usize, String> {
        let mut chunk = vec![0u8; max];
        let n = self
            .rd
            .read(&mut chunk)
            .await
            .map_err(|e| format!("recv: {e}"))?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// The next event (already seen ones first).
    pub async fn recv(&mut self) -> Result<Event, String> {
        if let Some(e) = self.pending.pop_front() {
            return Ok(e);
        }
        match self.recv_specific().await? {
            (Specific::CapsuleResp(c), _) => Ok(Event::Completion(Cqe::decode(&c))),
            (Specific::Data(d), data) => Ok(Event::Data {
                cccid: d.cccid,
                datao: d.datao,
                data,
                success: d.success,
            }),
            (Specific::R2t(r), _) => Ok(Event::R2t(r)),
            (Specific::TermReq(t), _) => Err(format!("TermReq from the target: {t:?}")),
            (other, _) => Err(format!("unexpected PDU {other:?}")),
        }
    }

    /// Runs one command to completion: sends `write` (in the capsule when
    /// the SQE says so, else answering R2Ts) and copies read data into
    /// `read`. Events for other commands are kept for [`MemHost::recv`].
    pub async fn execute(
        &mut self,
        sqe: Sqe,
        write: Option<&[u8]>,
        mut read: Option<&mut [u8]>,
    ) -> Result<Cqe, String> {
        let in_capsule = sqe.sgl().kind == sgl::IN_CAPSULE;
        let cid = self
            .submit(sqe, if in_capsule { write } else { None })
            .await?;
        let mut others = VecDeque::new();
        let result = loop {
            let e = match self.pending.pop_front() {
                Some(e) => e,
                None => match self.recv().await {
                    Ok(e) => e,
                    Err(e) => break Err(e),
                },
            };
            match e {
                Event::Completion(c) if c.cid == cid => break Ok(c),
                Event::Data {
                    cccid,
                    datao,
                    data,
                    success,
                } if cccid == cid => {
                    if let Some(b) = read.as_deref_mut() {
                        let at = datao as usize;
                        b[at..at + data.len()].copy_from_slice(&data);
                    }
                    if success {
                        break Ok(Cqe::new(cid, nvmf::cqe::Status::SUCCESS));
                    }
                }
                Event::R2t(r) if r.cccid == cid => {
                    let Some(data) = write else {
                        break Err("R2T for a command without data".into());
                    };
                    let mut out = Vec::new();
                    let chunk = self.maxh2cdata.max(4096) as usize;
                    let (off, len) = (r.r2to as usize, r.r2tl as usize);
                    let mut done = 0;
                    while done < len {
                        let n = chunk.min(len - done);
                        let d = &data[off + done..off + done + n];
                        let last = done + n == len;
                        wire::put_h2c(
                            &mut out,
                            cid,
                            r.ttag,
                            (off + done) as u32,
                            d,
                            last,
                            Digests::default(),
                        );
                        done += n;
                    }
                    if let Err(e) = self.send(&out).await {
                        break Err(e);
                    }
                }
                other => others.push_back(other),
            }
        };
        others.append(&mut self.pending);
        self.pending = others;
        result
    }

    /// Property Set CC.EN.
    pub async fn enable(&mut self) -> Result<Cqe, String> {
        let sqe = wire::property_set(0, wire::prop::CC, wire::prop::CC_ENABLE);
        self.execute(sqe, None, None).await
    }

    /// Keep Alive.
    pub async fn keep_alive(&mut self) -> Result<Cqe, String> {
        let sqe = Sqe::build(opcode::KEEP_ALIVE, 0, 0, wire::transport(0), [0; 6]);
        self.execute(sqe, None, None).await
    }

    /// A Write SQE of `len` bytes at block `slba` of namespace 1.
    pub fn write_sqe(slba: u64, len: usize, block_size: usize, in_capsule: bool) -> Sqe {
        let kind = if in_capsule {
            sgl::IN_CAPSULE
        } else {
            sgl::TRANSPORT
        };
        wire::rw(opcode::WRITE, 0, 1, slba, len, block_size, kind)
    }

    /// A Read SQE of `len` bytes at block `slba` of namespace 1.
    pub fn read_sqe(slba: u64, len: usize, block_size: usize) -> Sqe {
        wire::rw(opcode::READ, 0, 1, slba, len, block_size, sgl::TRANSPORT)
    }
}
