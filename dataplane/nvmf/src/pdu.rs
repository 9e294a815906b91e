//! NVMe/TCP PDUs (transport specification 1.0, section 3.6).
//!
//! Every PDU starts with an 8-byte common header (type, flags, HLEN, PDO,
//! PLEN), followed by the rest of a fixed-size type-specific header, an
//! optional header digest, optional padding up to PDO, the data, and an
//! optional data digest. A reader therefore works in three steps:
//!
//! 1. read [`CH_LEN`] bytes and call [`CommonHeader::parse`] then
//!    [`CommonHeader::validate`], which checks the header against what the
//!    connection negotiated and returns the [`Layout`] of the whole PDU;
//! 2. read the rest of the header (`layout.header_total - CH_LEN` bytes) and
//!    call [`parse_specific`] (after checking the header digest);
//! 3. read `layout.plen - layout.header_total` more bytes: padding, data
//!    (`layout.data_len` at `layout.data_offset`) and the data digest.
//!
//! Any violation is a [`FatalError`]: the connection ends with a TermReq
//! carrying its status (FES) and the offset of the offending field (FEI).

use crate::digest::DIGEST_LEN;

/// Length of the common header.
pub const CH_LEN: usize = 8;
/// HLEN of ICReq and ICResp.
pub const IC_HLEN: usize = 128;
/// HLEN of a command capsule (common header + 64-byte SQE).
pub const CAPSULE_CMD_HLEN: usize = CH_LEN + 64;
/// HLEN of a response capsule (common header + 16-byte CQE).
pub const CAPSULE_RESP_HLEN: usize = CH_LEN + 16;
/// HLEN of H2CData, C2HData, R2T and the TermReqs.
pub const SMALL_HLEN: usize = 24;
/// A TermReq carries at most this many bytes of the PDU header that caused it.
pub const TERM_REQ_MAX_DATA: usize = 128;
/// The only PDU format version defined (PFV 0).
pub const PFV_1_0: u16 = 0;

/// PDU types (the first byte of every PDU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PduType {
    /// Host to controller: initialize connection request.
    IcReq = 0x00,
    /// Controller to host: initialize connection response.
    IcResp = 0x01,
    /// Host to controller: terminate the connection, with the reason.
    H2cTermReq = 0x02,
    /// Controller to host: terminate the connection, with the reason.
    C2hTermReq = 0x03,
    /// Host to controller: a command (SQE) with optional in-capsule data.
    CapsuleCmd = 0x04,
    /// Controller to host: a completion (CQE).
    CapsuleResp = 0x05,
    /// Host to controller: write data solicited by an R2T.
    H2cData = 0x06,
    /// Controller to host: read data.
    C2hData = 0x07,
    /// Controller to host: ready to transfer (solicits H2CData).
    R2t = 0x09,
}

impl PduType {
    /// The type for a wire value, if it is one.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x00 => Self::IcReq,
            0x01 => Self::IcResp,
            0x02 => Self::H2cTermReq,
            0x03 => Self::C2hTermReq,
            0x04 => Self::CapsuleCmd,
            0x05 => Self::CapsuleResp,
            0x06 => Self::H2cData,
            0x07 => Self::C2hData,
            0x09 => Self::R2t,
            _ => return None,
        })
    }

    /// The fixed HLEN of this type.
    pub fn hlen(self) -> usize {
        match self {
            Self::IcReq | Self::IcResp => IC_HLEN,
            Self::CapsuleCmd => CAPSULE_CMD_HLEN,
            Self::CapsuleResp => CAPSULE_RESP_HLEN,
            Self::H2cTermReq | Self::C2hTermReq | Self::H2cData | Self::C2hData | Self::R2t => {
                SMALL_HLEN
            }
        }
    }

    /// Whether the host sends this type.
    pub fn is_host_to_controller(self) -> bool {
        matches!(
            self,
            Self::IcReq | Self::H2cTermReq | Self::CapsuleCmd | Self::H2cData
        )
    }

    /// Whether PDUs of this type may carry a header digest (the IC and
    /// TermReq PDUs never do: they are exchanged before, or regardless of,
    /// digest negotiation).
    fn digestible(self) -> bool {
        !matches!(
            self,
            Self::IcReq | Self::IcResp | Self::H2cTermReq | Self::C2hTermReq
        )
    }

    /// Whether PDUs of this type may carry data.
    fn may_carry_data(self) -> bool {
        matches!(
            self,
            Self::CapsuleCmd
                | Self::CapsuleResp
                | Self::H2cData
                | Self::C2hData
                | Self::H2cTermReq
                | Self::C2hTermReq
        )
    }
}

/// Common header flags.
pub mod flags {
    /// A header digest follows the header.
    pub const HDGSTF: u8 = 0x01;
    /// A data digest follows the data.
    pub const DDGSTF: u8 = 0x02;
    /// H2CData/C2HData: the last data PDU of the command.
    pub const LAST_PDU: u8 = 0x04;
    /// C2HData: the command succeeded and no response capsule follows.
    pub const SUCCESS: u8 = 0x08;
}

/// Fatal error status (FES) of a TermReq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum TermStatus {
    /// A header field holds a value that is not allowed.
    InvalidHeaderField = 0x01,
    /// A PDU arrived that is not allowed in the connection's current state.
    PduSequenceError = 0x02,
    /// The header digest did not match.
    HeaderDigestError = 0x03,
    /// Data offset and length fall outside the command's transfer.
    DataTransferOutOfRange = 0x04,
    /// More data or more R2Ts than allowed.
    DataTransferLimitExceeded = 0x05,
    /// A parameter value this implementation does not support.
    UnsupportedParameter = 0x06,
}

/// A violation that ends the connection with a TermReq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FatalError {
    /// The FES to send.
    pub status: TermStatus,
    /// FEI: for header field errors, the byte offset of the field in the PDU
    /// header; otherwise 0.
    pub field_offset: u32,
    /// For logs: what was wrong.
    pub reason: &'static str,
}

impl FatalError {
    fn field(offset: u32, reason: &'static str) -> Self {
        Self {
            status: TermStatus::InvalidHeaderField,
            field_offset: offset,
            reason,
        }
    }

    /// An error of the given status that names no header field.
    pub fn new(status: TermStatus, reason: &'static str) -> Self {
        Self {
            status,
            field_offset: 0,
            reason,
        }
    }
}

impl std::fmt::Display for FatalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({:?}, field offset {})",
            self.reason, self.status, self.field_offset
        )
    }
}

impl std::error::Error for FatalError {}

/// What a connection has negotiated (or, before ICReq/ICResp, the defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// ICReq/ICResp have been exchanged.
    pub initialized: bool,
    /// Header digests on for capsule and data PDUs.
    pub header_digest: bool,
    /// Data digests on for PDUs that carry data.
    pub data_digest: bool,
    /// Data alignment the receiver asked for, in 4-byte units minus one
    /// (CPDA for data the controller receives, HPDA for the host).
    pub receive_pda: u8,
    /// Largest PLEN this side accepts.
    pub max_plen: u32,
}

impl Default for Negotiated {
    fn default() -> Self {
        Self {
            initialized: false,
            header_digest: false,
            data_digest: false,
            receive_pda: 0,
            max_plen: 8 << 20,
        }
    }
}

/// The 8-byte common header, as read from the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommonHeader {
    /// Raw PDU type byte.
    pub pdu_type: u8,
    /// Flags (see [`flags`]).
    pub flags: u8,
    /// Header length without the digest.
    pub hlen: u8,
    /// Data offset from the start of the PDU, or 0 without data.
    pub pdo: u8,
    /// Total PDU length including digests.
    pub plen: u32,
}

/// Where things are in a validated PDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The PDU's type.
    pub pdu_type: PduType,
    /// HLEN plus the header digest, if present.
    pub header_total: usize,
    /// A header digest follows the HLEN bytes.
    pub header_digest: bool,
    /// Offset of the data from the start of the PDU (0 without data).
    pub data_offset: usize,
    /// Length of the data, without padding and digest.
    pub data_len: usize,
    /// A data digest follows the data.
    pub data_digest: bool,
    /// Total length.
    pub plen: usize,
}

impl CommonHeader {
    /// Reads the common header's fields; validation is separate.
    pub fn parse(b: &[u8; CH_LEN]) -> Self {
        Self {
            pdu_type: b[0],
            flags: b[1],
            hlen: b[2],
            pdo: b[3],
            plen: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// Writes the common header into the first 8 bytes of `out`.
    pub fn write(&self, out: &mut [u8]) {
        out[0] = self.pdu_type;
        out[1] = self.flags;
        out[2] = self.hlen;
        out[3] = self.pdo;
        out[4..8].copy_from_slice(&self.plen.to_le_bytes());
    }

    /// Checks a received header against the connection's state and returns
    /// the PDU's layout. `from_host` says which side sent it: a target passes
    /// true, a host false.
    pub fn validate(&self, neg: &Negotiated, from_host: bool) -> Result<Layout, FatalError> {
        let pdu_type =
            PduType::from_u8(self.pdu_type).ok_or(FatalError::field(0, "unknown PDU type"))?;
        if pdu_type.is_host_to_controller() != from_host {
            return Err(FatalError::field(0, "PDU type sent in the wrong direction"));
        }
        let is_ic = matches!(pdu_type, PduType::IcReq | PduType::IcResp);
        let is_term = matches!(pdu_type, PduType::H2cTermReq | PduType::C2hTermReq);
        if !neg.initialized && !is_ic && !is_term {
            return Err(FatalError::new(
                TermStatus::PduSequenceError,
                "PDU before connection initialization",
            ));
        }
        if neg.initialized && is_ic {
            return Err(FatalError::new(
                TermStatus::PduSequenceError,
                "second connection initialization PDU",
            ));
        }
        let hlen = self.hlen as usize;
        if hlen != pdu_type.hlen() {
            return Err(FatalError::field(2, "HLEN does not match the PDU type"));
        }
        let plen = self.plen as usize;

        if is_ic {
            if self.flags != 0 || self.pdo != 0 || plen != IC_HLEN {
                return Err(FatalError::field(
                    if self.flags != 0 {
                        1
                    } else if self.pdo != 0 {
                        3
                    } else {
                        4
                    },
                    "malformed connection initialization PDU",
                ));
            }
            return Ok(Layout {
                pdu_type,
                header_total: hlen,
                header_digest: false,
                data_offset: 0,
                data_len: 0,
                data_digest: false,
                plen,
            });
        }
        if is_term {
            // TermReq data is the offending header, never digested.
            if plen < hlen || plen > hlen + TERM_REQ_MAX_DATA {
                return Err(FatalError::field(4, "TermReq PLEN out of range"));
            }
            return Ok(Layout {
                pdu_type,
                header_total: hlen,
                header_digest: false,
                data_offset: if plen > hlen { hlen } else { 0 },
                data_len: plen - hlen,
                data_digest: false,
                plen,
            });
        }

        let hdgst = self.flags & flags::HDGSTF != 0;
        if hdgst != (neg.header_digest && pdu_type.digestible()) {
            return Err(FatalError::field(1, "HDGSTF does not match negotiation"));
        }
        let header_total = hlen + if hdgst { DIGEST_LEN } else { 0 };
        if plen < header_total {
            return Err(FatalError::field(4, "PLEN shorter than the header"));
        }
        if self.plen > neg.max_plen {
            return Err(FatalError::new(
                TermStatus::DataTransferLimitExceeded,
                "PLEN above the maximum",
            ));
        }
        let ddgst = self.flags & flags::DDGSTF != 0;
        let has_data = plen > header_total;
        if !has_data {
            if self.pdo != 0 && pdu_type != PduType::CapsuleCmd {
                return Err(FatalError::field(3, "PDO set on a PDU without data"));
            }
            if ddgst {
                return Err(FatalError::field(1, "DDGSTF set on a PDU without data"));
            }
            if matches!(pdu_type, PduType::H2cData | PduType::C2hData) {
                return Err(FatalError::field(4, "data PDU without data"));
            }
            return Ok(Layout {
                pdu_type,
                header_total,
                header_digest: hdgst,
                data_offset: 0,
                data_len: 0,
                data_digest: false,
                plen,
            });
        }
        if !pdu_type.may_carry_data() || pdu_type == PduType::CapsuleResp {
            return Err(FatalError::field(4, "PDU type carries no data"));
        }
        if ddgst != neg.data_digest {
            return Err(FatalError::field(1, "DDGSTF does not match negotiation"));
        }
        let pdo = self.pdo as usize;
        let align = (neg.receive_pda as usize + 1) * 4;
        if pdo < header_total || (neg.receive_pda != 0 && !pdo.is_multiple_of(align)) {
            return Err(FatalError::field(
                3,
                "PDO invalid for this header and alignment",
            ));
        }
        let trailer = if ddgst { DIGEST_LEN } else { 0 };
        if plen < pdo + trailer + 1 {
            return Err(FatalError::field(4, "PLEN leaves no room for the data"));
        }
        Ok(Layout {
            pdu_type,
            header_total,
            header_digest: hdgst,
            data_offset: pdo,
            data_len: plen - pdo - trailer,
            data_digest: ddgst,
            plen,
        })
    }
}

/// ICReq's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcReq {
    /// PDU format version.
    pub pfv: u16,
    /// Host PDU data alignment (data the host receives).
    pub hpda: u8,
    /// Host asks for header digests.
    pub header_digest: bool,
    /// Host asks for data digests.
    pub data_digest: bool,
    /// Maximum outstanding R2Ts per command, 0's based.
    pub maxr2t: u32,
}

/// ICResp's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcResp {
    /// PDU format version.
    pub pfv: u16,
    /// Controller PDU data alignment (data the controller receives).
    pub cpda: u8,
    /// Header digests on.
    pub header_digest: bool,
    /// Data digests on.
    pub data_digest: bool,
    /// Largest H2CData payload the controller accepts.
    pub maxh2cdata: u32,
}

/// Header of H2CData and C2HData.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHeader {
    /// Command identifier of the command the data belongs to.
    pub cccid: u16,
    /// H2CData: the transfer tag of the R2T being answered; C2HData: 0.
    pub ttag: u16,
    /// Offset of this PDU's data within the command's transfer.
    pub datao: u32,
    /// Length of this PDU's data.
    pub datal: u32,
    /// The last data PDU of the command (or of the R2T).
    pub last: bool,
    /// C2HData only: the command succeeded and no response capsule follows.
    pub success: bool,
}

/// R2T's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct R2t {
    /// Command identifier.
    pub cccid: u16,
    /// Transfer tag the host echoes in its H2CData.
    pub ttag: u16,
    /// Offset of the solicited data within the command's transfer.
    pub r2to: u32,
    /// Length of the solicited data.
    pub r2tl: u32,
}

/// TermReq's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermReq {
    /// Fatal error status, as received (may be a value we do not know).
    pub fes: u16,
    /// Fatal error information.
    pub fei: u32,
}

/// A PDU's type-specific header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Specific {
    /// ICReq.
    IcReq(IcReq),
    /// ICResp.
    IcResp(IcResp),
    /// H2CTermReq or C2HTermReq.
    TermReq(TermReq),
    /// Command capsule: the SQE bytes.
    CapsuleCmd([u8; 64]),
    /// Response capsule: the CQE bytes.
    CapsuleResp([u8; 16]),
    /// H2CData or C2HData.
    Data(DataHeader),
    /// R2T.
    R2t(R2t),
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses the type-specific header. `header` holds at least HLEN bytes of a
/// PDU whose common header [`CommonHeader::validate`] accepted as `layout`.
pub fn parse_specific(
    layout: &Layout,
    flags_byte: u8,
    header: &[u8],
) -> Result<Specific, FatalError> {
    debug_assert!(header.len() >= layout.pdu_type.hlen());
    Ok(match layout.pdu_type {
        PduType::IcReq => {
            let pfv = le16(header, 8);
            if pfv != PFV_1_0 {
                return Err(FatalError::field(8, "unsupported PDU format version"));
            }
            let hpda = header[10];
            if hpda > 31 {
                return Err(FatalError::field(10, "HPDA above 31"));
            }
            let dgst = header[11];
            if dgst & !0x03 != 0 {
                return Err(FatalError::field(11, "reserved DGST bits set"));
            }
            Specific::IcReq(IcReq {
                pfv,
                hpda,
                header_digest: dgst & 0x01 != 0,
                data_digest: dgst & 0x02 != 0,
                maxr2t: le32(header, 12),
            })
        }
        PduType::IcResp => {
            let dgst = header[11];
            Specific::IcResp(IcResp {
                pfv: le16(header, 8),
                cpda: header[10],
                header_digest: dgst & 0x01 != 0,
                data_digest: dgst & 0x02 != 0,
                maxh2cdata: le32(header, 12),
            })
        }
        PduType::H2cTermReq | PduType::C2hTermReq => Specific::TermReq(TermReq {
            fes: le16(header, 8),
            fei: le32(header, 10),
        }),
        PduType::CapsuleCmd => {
            let mut sqe = [0u8; 64];
            sqe.copy_from_slice(&header[CH_LEN..CH_LEN + 64]);
            Specific::CapsuleCmd(sqe)
        }
        PduType::CapsuleResp => {
            let mut cqe = [0u8; 16];
            cqe.copy_from_slice(&header[CH_LEN..CH_LEN + 16]);
            Specific::CapsuleResp(cqe)
        }
        PduType::H2cData | PduType::C2hData => {
            let d = DataHeader {
                cccid: le16(header, 8),
                ttag: le16(header, 10),
                datao: le32(header, 12),
                datal: le32(header, 16),
                last: flags_byte & flags::LAST_PDU != 0,
                success: flags_byte & flags::SUCCESS != 0,
            };
            if d.datal as usize != layout.data_len {
                return Err(FatalError::field(16, "DATAL does not match PLEN"));
            }
            if layout.pdu_type == PduType::H2cData && d.success {
                return Err(FatalError::field(1, "SUCCESS flag on H2CData"));
            }
            if d.success && !d.last {
                return Err(FatalError::field(1, "SUCCESS without LAST_PDU"));
            }
            Specific::Data(d)
        }
        PduType::R2t => Specific::R2t(R2t {
            cccid: le16(header, 8),
            ttag: le16(header, 10),
            r2to: le32(header, 12),
            r2tl: le32(header, 16),
        }),
    })
}

/// Writes the header digest of `out[..hlen]` at `out[hlen..hlen + 4]`.
fn put_header_digest(out: &mut [u8], hlen: usize) {
    let d = crate::digest::crc32c(&out[..hlen]);
    out[hlen..hlen + DIGEST_LEN].copy_from_slice(&d.to_le_bytes());
}

/// Data offset for a PDU with `header_total` header bytes when the receiver
/// asked for alignment `pda` (4-byte units minus one; 0 means none).
pub fn data_offset(header_total: usize, pda: u8) -> usize {
    if pda == 0 {
        return header_total;
    }
    let align = (pda as usize + 1) * 4;
    header_total.div_ceil(align) * align
}

/// Encodes an ICReq into `out` (at least 128 bytes) and returns its length.
pub fn encode_ic_req(out: &mut [u8], req: &IcReq) -> usize {
    out[..IC_HLEN].fill(0);
    CommonHeader {
        pdu_type: PduType::IcReq as u8,
        flags: 0,
        hlen: IC_HLEN as u8,
        pdo: 0,
        plen: IC_HLEN as u32,
    }
    .write(out);
    out[8..10].copy_from_slice(&req.pfv.to_le_bytes());
    out[10] = req.hpda;
    out[11] = u8::from(req.header_digest) | (u8::from(req.data_digest) << 1);
    out[12..16].copy_from_slice(&req.maxr2t.to_le_bytes());
    IC_HLEN
}

/// Encodes an ICResp into `out` (at least 128 bytes) and returns its length.
pub fn encode_ic_resp(out: &mut [u8], resp: &IcResp) -> usize {
    out[..IC_HLEN].fill(0);
    CommonHeader {
        pdu_type: PduType::IcResp as u8,
        flags: 0,
        hlen: IC_HLEN as u8,
        pdo: 0,
        plen: IC_HLEN as u32,
    }
    .write(out);
    out[8..10].copy_from_slice(&resp.pfv.to_le_bytes());
    out[10] = resp.cpda;
    out[11] = u8::from(resp.header_digest) | (u8::from(resp.data_digest) << 1);
    out[12..16].copy_from_slice(&resp.maxh2cdata.to_le_bytes());
    IC_HLEN
}

/// Encodes a response capsule; returns its length (24, or 28 with digest).
pub fn encode_capsule_resp(out: &mut [u8], cqe: &[u8; 16], header_digest: bool) -> usize {
    let total = CAPSULE_RESP_HLEN + if header_digest { DIGEST_LEN } else { 0 };
    CommonHeader {
        pdu_type: PduType::CapsuleResp as u8,
        flags: if header_digest { flags::HDGSTF } else { 0 },
        hlen: CAPSULE_RESP_HLEN as u8,
        pdo: 0,
        plen: total as u32,
    }
    .write(out);
    out[CH_LEN..CAPSULE_RESP_HLEN].copy_from_slice(cqe);
    if header_digest {
        put_header_digest(out, CAPSULE_RESP_HLEN);
    }
    total
}

/// Encodes the header (and padding) of a command capsule carrying
/// `data_len` bytes of in-capsule data, which the caller sends right after,
/// followed by the data digest when `data_digest`. Returns the header length
/// including digest and padding (= where the data starts).
pub fn encode_capsule_cmd_header(
    out: &mut [u8],
    sqe: &[u8; 64],
    data_len: usize,
    header_digest: bool,
    data_digest: bool,
    cpda: u8,
) -> usize {
    let header_total = CAPSULE_CMD_HLEN + if header_digest { DIGEST_LEN } else { 0 };
    let (pdo, trailer) = if data_len > 0 {
        (
            data_offset(header_total, cpda),
            if data_digest { DIGEST_LEN } else { 0 },
        )
    } else {
        (0, 0)
    };
    let start = if data_len > 0 { pdo } else { header_total };
    out[..start].fill(0);
    let mut f = 0;
    if header_digest {
        f |= flags::HDGSTF;
    }
    if data_len > 0 && data_digest {
        f |= flags::DDGSTF;
    }
    CommonHeader {
        pdu_type: PduType::CapsuleCmd as u8,
        flags: f,
        hlen: CAPSULE_CMD_HLEN as u8,
        pdo: pdo as u8,
        plen: (start + data_len + trailer) as u32,
    }
    .write(out);
    out[CH_LEN..CAPSULE_CMD_HLEN].copy_from_slice(sqe);
    if header_digest {
        put_header_digest(out, CAPSULE_CMD_HLEN);
    }
    start
}

/// Encodes the header (and padding) of an H2CData or C2HData PDU whose
/// `d.datal` data bytes the caller sends right after, followed by the data
/// digest when `data_digest`. Returns where the data starts.
pub fn encode_data_header(
    out: &mut [u8],
    pdu_type: PduType,
    d: &DataHeader,
    header_digest: bool,
    data_digest: bool,
    pda: u8,
) -> usize {
    debug_assert!(matches!(pdu_type, PduType::H2cData | PduType::C2hData));
    let header_total = SMALL_HLEN + if header_digest { DIGEST_LEN } else { 0 };
    let pdo = data_offset(header_total, pda);
    out[..pdo].fill(0);
    let mut f = 0;
    if header_digest {
        f |= flags::HDGSTF;
    }
    if data_digest {
        f |= flags::DDGSTF;
    }
    if d.last {
        f |= flags::LAST_PDU;
    }
    if d.success {
        f |= flags::SUCCESS;
    }
    let trailer = if data_digest { DIGEST_LEN } else { 0 };
    CommonHeader {
        pdu_type: pdu_type as u8,
        flags: f,
        hlen: SMALL_HLEN as u8,
        pdo: pdo as u8,
        plen: (pdo + d.datal as usize + trailer) as u32,
    }
    .write(out);
    out[8..10].copy_from_slice(&d.cccid.to_le_bytes());
    out[10..12].copy_from_slice(&d.ttag.to_le_bytes());
    out[12..16].copy_from_slice(&d.datao.to_le_bytes());
    out[16..20].copy_from_slice(&d.datal.to_le_bytes());
    if header_digest {
        put_header_digest(out, SMALL_HLEN);
    }
    pdo
}

/// Encodes an R2T; returns its length.
pub fn encode_r2t(out: &mut [u8], r: &R2t, header_digest: bool) -> usize {
    let total = SMALL_HLEN + if header_digest { DIGEST_LEN } else { 0 };
    out[..SMALL_HLEN].fill(0);
    CommonHeader {
        pdu_type: PduType::R2t as u8,
        flags: if header_digest { flags::HDGSTF } else { 0 },
        hlen: SMALL_HLEN as u8,
        pdo: 0,
        plen: total as u32,
    }
    .write(out);
    out[8..10].copy_from_slice(&r.cccid.to_le_bytes());
    out[10..12].copy_from_slice(&r.ttag.to_le_bytes());
    out[12..16].copy_from_slice(&r.r2to.to_le_bytes());
    out[16..20].copy_from_slice(&r.r2tl.to_le_bytes());
    if header_digest {
        put_header_digest(out, SMALL_HLEN);
    }
    total
}

/// Encodes a C2HTermReq (or, with `from_host`, an H2CTermReq) for `err`,
/// carrying up to 128 bytes of the offending PDU header. Returns its length.
pub fn encode_term_req(
    out: &mut [u8],
    from_host: bool,
    err: &FatalError,
    offending: &[u8],
) -> usize {
    let n = offending.len().min(TERM_REQ_MAX_DATA);
    let total = SMALL_HLEN + n;
    out[..SMALL_HLEN].fill(0);
    CommonHeader {
        pdu_type: if from_host {
            PduType::H2cTermReq
        } else {
            PduType::C2hTermReq
        } as u8,
        flags: 0,
        hlen: SMALL_HLEN as u8,
        pdo: if n > 0 { SMALL_HLEN as u8 } else { 0 },
        plen: total as u32,
    }
    .write(out);
    out[8..10].copy_from_slice(&(err.status as u16).to_le_bytes());
    out[10..14].copy_from_slice(&err.field_offset.to_le_bytes());
    out[SMALL_HLEN..total].copy_from_slice(&offending[..n]);
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn initialized(hd: bool, dd: bool) -> Negotiated {
        Negotiated {
            initialized: true,
            header_digest: hd,
            data_digest: dd,
            ..Negotiated::default()
        }
    }

    fn ch(bytes: &[u8]) -> CommonHeader {
        CommonHeader::parse(bytes[..CH_LEN].try_into().unwrap())
    }

    #[test]
    fn ic_req_round_trip_and_sequence() {
        let mut buf = [0u8; 128];
        let req = IcReq {
            pfv: 0,
            hpda: 0,
            header_digest: true,
            data_digest: false,
            maxr2t: 0,
        };
        assert_eq!(encode_ic_req(&mut buf, &req), 128);
        let neg = Negotiated::default();
        let layout = ch(&buf).validate(&neg, true).unwrap();
        assert_eq!(layout.pdu_type, PduType::IcReq);
        assert_eq!(layout.plen, 128);
        assert_eq!(
            parse_specific(&layout, buf[1], &buf).unwrap(),
            Specific::IcReq(req)
        );
        // A second ICReq after initialization is a sequence error.
        let err = ch(&buf)
            .validate(&initialized(false, false), true)
            .unwrap_err();
        assert_eq!(err.status, TermStatus::PduSequenceError);
    }

    #[test]
    fn capsule_before_ic_is_a_sequence_error() {
        let mut buf = [0u8; 128];
        let n = encode_capsule_cmd_header(&mut buf, &[0u8; 64], 0, false, false, 0);
        assert_eq!(n, 72);
        let err = ch(&buf).validate(&Negotiated::default(), true).unwrap_err();
        assert_eq!(err.status, TermStatus::PduSequenceError);
    }

    #[test]
    fn capsule_with_in_capsule_data_and_digests() {
        let mut sqe = [0u8; 64];
        sqe[0] = 0x01; // write
        sqe[2] = 7;
        let mut buf = vec![0u8; 256];
        let start = encode_capsule_cmd_header(&mut buf, &sqe, 4096, true, true, 0);
        assert_eq!(start, 76);
        let c = ch(&buf);
        assert_eq!(c.plen as usize, 76 + 4096 + 4);
        let layout = c.validate(&initialized(true, true), true).unwrap();
        assert!(layout.header_digest && layout.data_digest);
        assert_eq!((layout.data_offset, layout.data_len), (76, 4096));
        assert!(crate::digest::verify(
            &buf[..72],
            buf[72..76].try_into().unwrap()
        ));
        match parse_specific(&layout, c.flags, &buf).unwrap() {
            Specific::CapsuleCmd(got) => assert_eq!(got, sqe),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn digest_flags_must_match_negotiation() {
        let mut buf = [0u8; 128];
        encode_capsule_cmd_header(&mut buf, &[0u8; 64], 0, false, false, 0);
        let err = ch(&buf)
            .validate(&initialized(true, false), true)
            .unwrap_err();
        assert_eq!(
            (err.status, err.field_offset),
            (TermStatus::InvalidHeaderField, 1)
        );
    }

    #[test]
    fn wrong_hlen_unknown_type_and_direction() {
        let mut buf = [0u8; 128];
        encode_capsule_cmd_header(&mut buf, &[0u8; 64], 0, false, false, 0);
        buf[2] = 71;
        let err = ch(&buf)
            .validate(&initialized(false, false), true)
            .unwrap_err();
        assert_eq!(err.field_offset, 2);
        buf[2] = 72;
        buf[0] = 0x08;
        let err = ch(&buf)
            .validate(&initialized(false, false), true)
            .unwrap_err();
        assert_eq!(
            (err.status, err.field_offset),
            (TermStatus::InvalidHeaderField, 0)
        );
        buf[0] = PduType::CapsuleResp as u8;
        assert!(ch(&buf).validate(&initialized(false, false), true).is_err());
    }

    #[test]
    fn pdo_alignment_is_enforced() {
        let mut neg = initialized(false, false);
        neg.receive_pda = 7; // 32-byte alignment
        let mut buf = vec![0u8; 256];
        let start = encode_capsule_cmd_header(&mut buf, &[0u8; 64], 16, false, false, 7);
        assert_eq!(start, 96);
        assert!(ch(&buf).validate(&neg, true).is_ok());
        buf[3] = 80; // not a multiple of 32
        assert_eq!(ch(&buf).validate(&neg, true).unwrap_err().field_offset, 3);
        buf[3] = 64; // inside the header
        assert_eq!(ch(&buf).validate(&neg, true).unwrap_err().field_offset, 3);
    }

    #[test]
    fn plen_limits() {
        let mut buf = vec![0u8; 128];
        encode_capsule_cmd_header(&mut buf, &[0u8; 64], 0, false, false, 0);
        buf[4..8].copy_from_slice(&60u32.to_le_bytes());
        assert_eq!(
            ch(&buf)
                .validate(&initialized(false, false), true)
                .unwrap_err()
                .field_offset,
            4
        );
        let mut neg = initialized(false, false);
        neg.max_plen = 8192;
        encode_capsule_cmd_header(&mut buf, &[0u8; 64], 9000, false, false, 0);
        assert_eq!(
            ch(&buf).validate(&neg, true).unwrap_err().status,
            TermStatus::DataTransferLimitExceeded
        );
    }

    #[test]
    fn data_pdus_round_trip() {
        let d = DataHeader {
            cccid: 9,
            ttag: 3,
            datao: 8192,
            datal: 4096,
            last: true,
            success: false,
        };
        let mut buf = [0u8; 64];
        let start = encode_data_header(&mut buf, PduType::H2cData, &d, true, false, 0);
        assert_eq!(start, 28);
        let c = ch(&buf);
        let layout = c.validate(&initialized(true, false), true).unwrap();
        assert_eq!((layout.data_offset, layout.data_len), (28, 4096));
        assert_eq!(
            parse_specific(&layout, c.flags, &buf).unwrap(),
            Specific::Data(d)
        );

        // C2HData with SUCCESS is for the host to parse.
        let d2 = DataHeader {
            success: true,
            ttag: 0,
            ..d
        };
        encode_data_header(&mut buf, PduType::C2hData, &d2, false, true, 0);
        let c = ch(&buf);
        let layout = c.validate(&initialized(false, true), false).unwrap();
        assert_eq!(layout.data_len, 4096);
        assert_eq!(
            parse_specific(&layout, c.flags, &buf).unwrap(),
            Specific::Data(d2)
        );
    }

    #[test]
    fn datal_must_match_plen() {
        let d = DataHeader {
            cccid: 1,
            ttag: 1,
            datao: 0,
            datal: 512,
            last: true,
            success: false,
        };
        let mut buf = [0u8; 64];
        encode_data_header(&mut buf, PduType::H2cData, &d, false, false, 0);
        buf[16..20].copy_from_slice(&511u32.to_le_bytes());
        let c = ch(&buf);
        let layout = c.validate(&initialized(false, false), true).unwrap();
        assert_eq!(
            parse_specific(&layout, c.flags, &buf)
                .unwrap_err()
                .field_offset,
            16
        );
    }

    #[test]
    fn r2t_resp_and_term_req() {
        let mut buf = [0u8; 200];
        let r = R2t {
            cccid: 5,
            ttag: 2,
            r2to: 0,
            r2tl: 65536,
        };
        assert_eq!(encode_r2t(&mut buf, &r, false), 24);
        let c = ch(&buf);
        let layout = c.validate(&initialized(false, false), false).unwrap();
        assert_eq!(
            parse_specific(&layout, c.flags, &buf).unwrap(),
            Specific::R2t(r)
        );

        let cqe = [0xabu8; 16];
        assert_eq!(encode_capsule_resp(&mut buf, &cqe, true), 28);
        let c = ch(&buf);
        let layout = c.validate(&initialized(true, false), false).unwrap();
        assert_eq!(
            parse_specific(&layout, c.flags, &buf).unwrap(),
            Specific::CapsuleResp(cqe)
        );

        let err = FatalError::field(2, "test");
        let offending = [0x55u8; 300];
        let n = encode_term_req(&mut buf, false, &err, &offending);
        assert_eq!(n, 24 + 128);
        let c = ch(&buf);
        let layout = c.validate(&Negotiated::default(), false).unwrap();
        assert_eq!(layout.data_len, 128);
        assert_eq!(
            parse_specific(&layout, c.flags, &buf).unwrap(),
            Specific::TermReq(TermReq { fes: 1, fei: 2 })
        );
    }

    #[test]
    fn ic_req_rejects_bad_version_and_reserved_bits() {
        let mut buf = [0u8; 128];
        encode_ic_req(
            &mut buf,
            &IcReq {
                pfv: 1,
                hpda: 0,
                header_digest: false,
                data_digest: false,
                maxr2t: 0,
            },
        );
        let layout = ch(&buf).validate(&Negotiated::default(), true).unwrap();
        assert_eq!(
            parse_specific(&layout, 0, &buf).unwrap_err().field_offset,
            8
        );
        buf[8] = 0;
        buf[11] = 0x04;
        assert_eq!(
            parse_specific(&layout, 0, &buf).unwrap_err().field_offset,
            11
        );
    }
}
