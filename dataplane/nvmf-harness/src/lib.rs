//! Test support for the NVMe/TCP target, kept out of the daemon: an
//! in-memory host for tests and the fuzzer. [`mem`] is an async host over
//! in-memory pipes for tests that run on paused time.
//!
//! [`run`] takes a fresh target with one
//! subsystem on a small malloc bdev, one admin queue already connected and
//! enabled (so a stream may connect an I/O queue to controller 1), and one
//! more connection whose host side is a byte string. [`run`] serves that
//! connection over an in-memory pipe to the end of the bytes and checks that
//! everything the target answered is a well-formed PDU
//! ([`check_controller_stream`]). [`HostStream`] builds valid streams (the
//! fuzzer's seeds and unit tests).
//!
//! Limits keep every run short: inputs are cut at [`MAX_INPUT`] bytes, the
//! bdev has [`NUM_BLOCKS`] blocks, and a run that takes longer than
//! [`TIME_LIMIT`] panics as a hang.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bdev::malloc::MallocBdev;
use bdev::{Bdev, IoStats};
use nvmf::digest::{self, DIGEST_LEN};
use nvmf::pdu::{self, CommonHeader, Negotiated, PduType, Specific, CH_LEN};
use nvmf::sqe::{opcode, sgl, Sqe};
use nvmf_host::wire;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use nvmf_tgt::stats::SubsystemStats;
use nvmf_tgt::{SubsystemConfig, Target, TransportOptions};

pub mod mem;

/// The subsystem every run serves.
pub const SUBNQN: &str = "nqn.2016-06.io.rackcache:harness";
/// The host of the admin queue the harness connects.
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0000-4000-8000-00000000f022";
/// The controller of that admin queue (the first of a fresh subsystem).
pub const CNTLID: u16 = 1;
/// Block size of the namespace.
pub const BLOCK_SIZE: u32 = 512;
/// Blocks of the namespace (64 KiB: reads stay small).
pub const NUM_BLOCKS: u64 = 128;
/// Host bytes used at most per run.
pub const MAX_INPUT: usize = 256 << 10;
/// A run taking longer than this is a hang.
pub const TIME_LIMIT: Duration = Duration::from_secs(10);

/// Small limits, so that the fuzzer reaches "too big" and "over depth".
pub fn options() -> TransportOptions {
    TransportOptions {
        max_queue_depth: 8,
        max_aq_depth: 32,
        max_io_qpairs_per_ctrlr: 4,
        in_capsule_data_size: 4096,
        max_io_size: 32 << 10,
        max_h2c_data: 4096,
        c2h_success: false,
        drain_timeout: Duration::from_secs(1),
        num_shared_buffers: 64,
        io_unit_size: 8192,
        ..TransportOptions::default()
    }
}

/// Builds a host's byte stream without digests (a valid one when the
/// caller sends things in a valid order), with `nvmf_host::wire`, the PDU
/// builder the TCP host uses too.
#[derive(Default)]
pub struct HostStream {
    bytes: Vec<u8>,
}

const NO_DIGESTS: wire::Digests = wire::Digests {
    header: false,
    data: false,
};

impl HostStream {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// ICReq without digests, HPDA 0.
    pub fn ic_req(mut self) -> Self {
        self.bytes.extend_from_slice(&wire::ic_req(NO_DIGESTS));
        self
    }

    /// A command capsule with `data` in the capsule.
    pub fn command(mut self, sqe: &Sqe, data: &[u8]) -> Self {
        wire::put_command(&mut self.bytes, sqe, Some(data), NO_DIGESTS);
        self
    }

    /// Fabrics Connect of queue `qid` (0: a new controller, else an I/O
    /// queue of `cntlid`) to [`SUBNQN`] as [`HOSTNQN`].
    pub fn connect(self, cid: u16, qid: u16, sqsize: u16, cntlid: u16) -> Self {
        self.connect_as(cid, qid, sqsize, cntlid, HOSTNQN)
    }

    /// [`HostStream::connect`] as host `hostnqn` (may be empty, as SPDK's
    /// perf sends it).
    pub fn connect_as(self, cid: u16, qid: u16, sqsize: u16, cntlid: u16, hostnqn: &str) -> Self {
        let (sqe, data) =
            wire::connect(cid, SUBNQN, hostnqn, [0x22; 16], qid, sqsize + 1, cntlid, 0);
        self.command(&sqe, &data)
    }

    /// Fabrics Property Set of a 4-byte property.
    pub fn property_set(self, cid: u16, offset: u32, value: u32) -> Self {
        self.command(&wire::property_set(cid, offset, value), &[])
    }

    /// Property Set CC.EN with 64/16-byte queue entries.
    pub fn enable(self, cid: u16) -> Self {
        self.property_set(cid, wire::prop::CC, wire::prop::CC_ENABLE)
    }

    /// Asynchronous Event Request.
    pub fn async_event_request(self, cid: u16) -> Self {
        let sqe = Sqe::build(
            opcode::ASYNC_EVENT_REQUEST,
            cid,
            0,
            wire::transport(0),
            [0; 6],
        );
        self.command(&sqe, &[])
    }

    /// Identify `cns` of `nsid` (4 KiB by C2HData).
    pub fn identify(self, cid: u16, cns: u8, nsid: u32) -> Self {
        let sqe = Sqe::build(
            opcode::IDENTIFY,
            cid,
            nsid,
            wire::transport(4096),
            [u32::from(cns), 0, 0, 0, 0, 0],
        );
        self.command(&sqe, &[])
    }

    /// Write of `data` (whole blocks) at `slba` of namespace 1, in the
    /// capsule.
    pub fn write_in_capsule(self, cid: u16, slba: u64, data: &[u8]) -> Self {
        let sqe = rw(opcode::WRITE, cid, slba, data.len(), sgl::IN_CAPSULE);
        self.command(&sqe, data)
    }

    /// Write of `len` bytes at `slba` of namespace 1 whose data follows by
    /// R2T (send it with [`HostStream::h2c_data`]).
    pub fn write_by_r2t(self, cid: u16, slba: u64, len: usize) -> Self {
        let sqe = rw(opcode::WRITE, cid, slba, len, sgl::TRANSPORT);
        self.command(&sqe, &[])
    }

    /// Read of `len` bytes at `slba` of namespace 1.
    pub fn read(self, cid: u16, slba: u64, len: usize) -> Self {
        let sqe = rw(opcode::READ, cid, slba, len, sgl::TRANSPORT);
        self.command(&sqe, &[])
    }

    /// An H2CData PDU for transfer tag `ttag`.
    pub fn h2c_data(mut self, cccid: u16, ttag: u16, datao: u32, data: &[u8], last: bool) -> Self {
        wire::put_h2c(&mut self.bytes, cccid, ttag, datao, data, last, NO_DIGESTS);
        self
    }

    /// Flush of namespace 1.
    pub fn flush(self, cid: u16) -> Self {
        let sqe = Sqe::build(opcode::FLUSH, cid, 1, wire::transport(0), [0; 6]);
        self.command(&sqe, &[])
    }

    /// Dataset Management, deallocate, of `(slba, blocks)` ranges of
    /// namespace 1, the range list in the capsule.
    pub fn deallocate(self, cid: u16, ranges: &[(u64, u32)]) -> Self {
        let (sqe, list) = wire::deallocate(cid, 1, ranges);
        self.command(&sqe, &list)
    }

    /// Raw bytes, as they are.
    pub fn raw(mut self, b: &[u8]) -> Self {
        self.bytes.extend_from_slice(b);
        self
    }

    /// The stream.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

fn rw(op: u8, cid: u16, slba: u64, len: usize, kind: u8) -> Sqe {
    wire::rw(op, cid, 1, slba, len, BLOCK_SIZE as usize, kind)
}

/// What the target sent, as [`check_controller_stream`] saw it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Answer {
    /// PDU types in order.
    pub pdus: Vec<PduType>,
    /// Response capsules as (CID, status field), in order.
    pub responses: Vec<(u16, u16)>,
    /// C2HData payload bytes.
    pub data_bytes: usize,
}

/// Checks that `out` is a sequence of complete, well-formed
/// controller-to-host PDUs a host that sent `input` can parse: ICResp (or a
/// TermReq) first, digests where negotiated and correct, data aligned to the
/// host's HPDA, nothing after a TermReq, no partial PDU at the end.
pub fn check_controller_stream(input: &[u8], out: &[u8]) -> Result<Answer, String> {
    // The HPDA the host asked for, if its first PDU was an ICReq the
    // target could accept.
    let hpda = input
        .get(..pdu::IC_HLEN)
        .and_then(|h| {
            let ch = CommonHeader::parse(h[..CH_LEN].try_into().expect("8"));
            let layout = ch.validate(&Negotiated::default(), true).ok()?;
            match pdu::parse_specific(&layout, ch.flags, h).ok()? {
                Specific::IcReq(r) => Some(r.hpda),
                _ => None,
            }
        })
        .unwrap_or(0);
    let mut neg = Negotiated::default();
    let mut answer = Answer::default();
    let mut rest = out;
    let mut terminated = false;
    while !rest.is_empty() {
        let at = out.len() - rest.len();
        if terminated {
            return Err(format!("{} bytes after a C2HTermReq", rest.len()));
        }
        if rest.len() < CH_LEN {
            return Err(format!("partial common header at {at}"));
        }
        let ch = CommonHeader::parse(rest[..CH_LEN].try_into().expect("8"));
        let layout = ch
            .validate(&neg, false)
            .map_err(|e| format!("PDU at {at} ({ch:?}): {e}"))?;
        if rest.len() < layout.plen {
            return Err(format!("PDU at {at} truncated ({ch:?})"));
        }
        let p = &rest[..layout.plen];
        let hlen = layout.pdu_type.hlen();
        if layout.header_digest
            && !digest::verify(
                &p[..hlen],
                p[hlen..hlen + DIGEST_LEN].try_into().expect("4"),
            )
        {
            return Err(format!("header digest of the PDU at {at}"));
        }
        if layout.data_digest {
            let end = layout.data_offset + layout.data_len;
            let d = &p[layout.data_offset..end];
            if !digest::verify(d, p[end..end + DIGEST_LEN].try_into().expect("4")) {
                return Err(format!("data digest of the PDU at {at}"));
            }
        }
        let spec = pdu::parse_specific(&layout, ch.flags, p)
            .map_err(|e| format!("PDU at {at} ({ch:?}): {e}"))?;
        match spec {
            Specific::IcResp(r) => {
                neg.initialized = true;
                neg.header_digest = r.header_digest;
                neg.data_digest = r.data_digest;
                neg.receive_pda = hpda;
            }
            Specific::TermReq(_) => terminated = true,
            Specific::CapsuleResp(raw) => {
                let cqe = nvmf::cqe::Cqe::decode(&raw);
                answer.responses.push((cqe.cid, cqe.status.to_field()));
            }
            Specific::Data(d) => {
                if d.datal as usize != layout.data_len {
                    return Err(format!("C2HData at {at}: DATAL != data length"));
                }
                answer.data_bytes += layout.data_len;
            }
            Specific::R2t(_) => {}
            Specific::IcReq(_) | Specific::CapsuleCmd(_) => {
                return Err(format!("host PDU type from the target at {at}"));
            }
        }
        answer.pdus.push(layout.pdu_type);
        rest = &rest[layout.plen..];
    }
    Ok(answer)
}

/// A fresh target (subsystem [`SUBNQN`] on a malloc bdev, any host, a
/// listener on 127.0.0.1 so Connect finds the subsystem), its listen
/// address, and the subsystem.
pub async fn target() -> (Target, SocketAddr) {
    let t = Target::new(options(), metrics::Registry::new()).expect("valid options");
    let mut cfg = SubsystemConfig::new(SUBNQN);
    cfg.allow_any_host = true;
    let sub = t.add_subsystem(cfg).expect("subsystem");
    let b = MallocBdev::new("Malloc0", NUM_BLOCKS, BLOCK_SIZE).expect("malloc bdev");
    sub.add_namespace(Some(1), Arc::new(Bdev::Malloc(b)), None, None)
        .expect("namespace");
    let listen = t
        .add_listener(SUBNQN, "127.0.0.1:0".parse().expect("addr"), None, None)
        .await
        .expect("listener on 127.0.0.1");
    (t, listen)
}

/// Serves `input` as one host's stream to a fresh [`target`] whose
/// controller [`CNTLID`] is connected and enabled on another queue, and
/// returns what the target sent back. Panics when the run hangs.
pub fn run(input: &[u8]) -> Vec<u8> {
    run_counted(input).0
}

/// [`run`], also returning the subsystem's counters and those of the bdev
/// under its namespace, as they were when the run ended.
pub fn run_counted(input: &[u8]) -> (Vec<u8>, SubsystemStats, Arc<IoStats>) {
    let input = &input[..input.len().min(MAX_INPUT)];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (t, listen) = target().await;
        let peer: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        let run = async {
            // The admin queue of controller 1, open until the stream ends.
            let (admin, admin_host) = tokio::io::duplex(64 << 10);
            let admin_serve = t.serve_stream(admin, peer, listen);
            let admin_host_side = async {
                let (mut rd, mut wr) = tokio::io::split(admin_host);
                let prologue = HostStream::new()
                    .ic_req()
                    .connect(1, 0, 31, 0)
                    .enable(2)
                    .into_bytes();
                wr.write_all(&prologue).await.expect("admin prologue");
                // ICResp, then the two responses.
                let want = pdu::IC_HLEN + 2 * pdu::CAPSULE_RESP_HLEN;
                let mut got = vec![0u8; want];
                rd.read_exact(&mut got).await.expect("admin answers");
                let a = check_controller_stream(&prologue, &got).expect("admin answers");
                assert_eq!(a.responses, [(1, 0), (2, 0)], "admin queue set up");

                let (conn, host) = tokio::io::duplex(64 << 10);
                let serve = t.serve_stream(conn, peer, listen);
                let (mut hrd, mut hwr) = tokio::io::split(host);
                let feed = async {
                    // The target may close first: a failed write is fine.
                    let _ = hwr.write_all(input).await;
                    let _ = hwr.shutdown().await;
                    drop(hwr);
                };
                let collect = async {
                    let mut out = Vec::new();
                    let _ = hrd.read_to_end(&mut out).await;
                    out
                };
                let ((), (), out) = tokio::join!(serve, feed, collect);
                drop((rd, wr));
                out
            };
            let ((), out) = tokio::join!(admin_serve, admin_host_side);
            out
        };
        let out = tokio::time::timeout(TIME_LIMIT, run)
            .await
            .unwrap_or_else(|_| panic!("the connection did not end within {TIME_LIMIT:?}"));
        let sub = t.subsystem(SUBNQN).expect("subsystem");
        let bdev_stats = sub.namespaces()[&1].bdev.stats().clone();
        let stats = sub.stats.clone();
        t.shutdown().await;
        (out, stats, bdev_stats)
    })
}
