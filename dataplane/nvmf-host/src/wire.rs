//! Host-to-controller PDUs and the commands hosts send, as bytes: the one
//! builder shared by [`crate::host`] (over TCP) and the test harness
//! (`nvmf-harness`, over in-memory pipes and in the fuzzer's seeds).

use nvmf::pdu::{self, DataHeader, IcReq, PduType};
use nvmf::sqe::{fctype, opcode, sgl, ConnectData, SglDescriptor, Sqe};

/// Property offsets a host drives.
pub mod prop {
    /// Controller Capabilities.
    pub const CAP: u32 = 0x00;
    /// Controller Configuration.
    pub const CC: u32 = 0x14;
    /// Controller Status.
    pub const CSTS: u32 = 0x1c;
    /// CC value that enables the controller with 64/16-byte queue entries.
    pub const CC_ENABLE: u32 = 1 | (6 << 16) | (4 << 20);
    /// CC.SHN = normal shutdown.
    pub const CC_SHN_NORMAL: u32 = 1 << 14;
}

/// Digests a queue negotiated (what every PDU it sends must carry).
#[derive(Clone, Copy, Debug, Default)]
pub struct Digests {
    /// Header digest.
    pub header: bool,
    /// Data digest.
    pub data: bool,
}

/// An ICReq with PFV 1.0, HPDA 0 and the given digests.
pub fn ic_req(d: Digests) -> [u8; pdu::IC_HLEN] {
    let mut b = [0u8; pdu::IC_HLEN];
    pdu::encode_ic_req(
        &mut b,
        &IcReq {
            pfv: pdu::PFV_1_0,
            hpda: 0,
            header_digest: d.header,
            data_digest: d.data,
            maxr2t: 0,
        },
    );
    b
}

/// Appends a command capsule carrying `data` in the capsule (if any).
pub fn put_command(out: &mut Vec<u8>, sqe: &Sqe, data: Option<&[u8]>, d: Digests) {
    let start = out.len();
    let len = data.map_or(0, <[u8]>::len);
    out.resize(start + 128, 0);
    let hlen = pdu::encode_capsule_cmd_header(&mut out[start..], &sqe.0, len, d.header, d.data, 0);
    out.truncate(start + hlen);
    if let Some(data) = data {
        out.extend_from_slice(data);
        if d.data && !data.is_empty() {
            out.extend_from_slice(&nvmf::digest::crc32c(data).to_le_bytes());
        }
    }
}

/// Appends an H2CData PDU.
pub fn put_h2c(
    out: &mut Vec<u8>,
    cccid: u16,
    ttag: u16,
    datao: u32,
    data: &[u8],
    last: bool,
    d: Digests,
) {
    let start = out.len();
    out.resize(start + 64, 0);
    let h = DataHeader {
        cccid,
        ttag,
        datao,
        datal: data.len() as u32,
        last,
        success: false,
    };
    let hlen =
        pdu::encode_data_header(&mut out[start..], PduType::H2cData, &h, d.header, d.data, 0);
    out.truncate(start + hlen);
    out.extend_from_slice(data);
    if d.data {
        out.extend_from_slice(&nvmf::digest::crc32c(data).to_le_bytes());
    }
}

/// Fabrics Connect of queue `qid` (0: a new controller, `cntlid` ignored;
/// else an I/O queue of `cntlid`) with `entries` queue entries, and its
/// 1024 bytes of in-capsule data.
#[allow(clippy::too_many_arguments)]
pub fn connect(
    cid: u16,
    subnqn: &str,
    hostnqn: &str,
    host_id: [u8; 16],
    qid: u16,
    entries: u16,
    cntlid: u16,
    kato_ms: u32,
) -> (Sqe, [u8; 1024]) {
    let data = ConnectData {
        host_id,
        cntlid: if qid == 0 { 0xffff } else { cntlid },
        subnqn: subnqn.into(),
        hostnqn: hostnqn.into(),
    }
    .encode();
    let mut raw = [0u8; 64];
    raw[0] = opcode::FABRICS;
    raw[2..4].copy_from_slice(&cid.to_le_bytes());
    raw[4] = fctype::CONNECT;
    raw[32..36].copy_from_slice(&(data.len() as u32).to_le_bytes());
    raw[39] = sgl::IN_CAPSULE;
    raw[42..44].copy_from_slice(&qid.to_le_bytes());
    raw[44..46].copy_from_slice(&(entries - 1).to_le_bytes());
    raw[48..52].copy_from_slice(&(if qid == 0 { kato_ms } else { 0 }).to_le_bytes());
    (Sqe(raw), data)
}

/// Fabrics Property Set of a 4-byte property.
pub fn property_set(cid: u16, offset: u32, value: u32) -> Sqe {
    let mut raw = [0u8; 64];
    raw[0] = opcode::FABRICS;
    raw[2..4].copy_from_slice(&cid.to_le_bytes());
    raw[4] = fctype::PROPERTY_SET;
    raw[44..48].copy_from_slice(&offset.to_le_bytes());
    raw[48..52].copy_from_slice(&value.to_le_bytes());
    Sqe(raw)
}

/// Fabrics Property Get (8 bytes when `wide`).
pub fn property_get(cid: u16, offset: u32, wide: bool) -> Sqe {
    let mut raw = [0u8; 64];
    raw[0] = opcode::FABRICS;
    raw[2..4].copy_from_slice(&cid.to_le_bytes());
    raw[4] = fctype::PROPERTY_GET;
    raw[40] = u8::from(wide);
    raw[44..48].copy_from_slice(&offset.to_le_bytes());
    Sqe(raw)
}

/// Fabrics Authentication Send or Receive (`fctype`) of DH-HMAC-CHAP:
/// SECP and SPSP0/1 in CDW10, `len` (the message's length, or the
/// receive buffer's) in CDW11 and in the SGL (in the capsule for a send).
pub fn auth(fctype_value: u8, cid: u16, len: usize) -> Sqe {
    let mut raw = [0u8; 64];
    raw[0] = opcode::FABRICS;
    raw[2..4].copy_from_slice(&cid.to_le_bytes());
    raw[4] = fctype_value;
    raw[32..36].copy_from_slice(&(len as u32).to_le_bytes());
    raw[39] = if fctype_value == fctype::AUTH_SEND {
        sgl::IN_CAPSULE
    } else {
        sgl::TRANSPORT
    };
    raw[41] = nvmf::auth::SPSP;
    raw[42] = nvmf::auth::SPSP;
    raw[43] = nvmf::auth::SECP;
    raw[44..48].copy_from_slice(&(len as u32).to_le_bytes());
    Sqe(raw)
}

/// A transport SGL of `len` bytes (data by C2HData or R2T).
pub fn transport(len: u32) -> SglDescriptor {
    SglDescriptor {
        address: 0,
        length: len,
        kind: sgl::TRANSPORT,
    }
}

/// Read or Write (`op`) of `len` bytes at block `slba` of `nsid`; `kind` is
/// the SGL type (in-capsule or transport).
pub fn rw(op: u8, cid: u16, nsid: u32, slba: u64, len: usize, block_size: usize, kind: u8) -> Sqe {
    let nlb = (len / block_size) as u32 - 1;
    let desc = SglDescriptor {
        address: 0,
        length: len as u32,
        kind,
    };
    Sqe::build(
        op,
        cid,
        nsid,
        desc,
        [slba as u32, (slba >> 32) as u32, nlb, 0, 0, 0],
    )
}

/// Dataset Management, deallocate, of `(slba, blocks)` ranges, and the
/// range list to send in the capsule.
pub fn deallocate(cid: u16, nsid: u32, ranges: &[(u64, u32)]) -> (Sqe, Vec<u8>) {
    let mut list = vec![0u8; ranges.len() * 16];
    for (r, (slba, nlb)) in list.chunks_exact_mut(16).zip(ranges) {
        r[4..8].copy_from_slice(&nlb.to_le_bytes());
        r[8..16].copy_from_slice(&slba.to_le_bytes());
    }
    let desc = SglDescriptor {
        address: 0,
        length: list.len() as u32,
        kind: sgl::IN_CAPSULE,
    };
    let n = ranges.len() as u32 - 1;
    let sqe = Sqe::build(
        opcode::DATASET_MANAGEMENT,
        cid,
        nsid,
        desc,
        [n, 1 << 2, 0, 0, 0, 0],
    );
    (sqe, list)
}
