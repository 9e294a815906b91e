//! The 16-byte completion queue entry and the status codes this project
//! returns.

/// Status code types.
pub mod sct {
    /// Generic command status.
    pub const GENERIC: u8 = 0x0;
    /// Command specific status.
    pub const COMMAND_SPECIFIC: u8 = 0x1;
    /// Media and data integrity errors.
    pub const MEDIA: u8 = 0x2;
}

/// A status: type and code. `Status::SUCCESS` is (0, 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// Status code type.
    pub sct: u8,
    /// Status code.
    pub sc: u8,
    /// Do not retry.
    pub dnr: bool,
}

impl Status {
    /// Success.
    pub const SUCCESS: Self = Self::generic(0x00);
    /// Invalid Command Opcode.
    pub const INVALID_OPCODE: Self = Self::generic(0x01).no_retry();
    /// Invalid Field in Command.
    pub const INVALID_FIELD: Self = Self::generic(0x02).no_retry();
    /// Command ID Conflict.
    pub const COMMAND_ID_CONFLICT: Self = Self::generic(0x03).no_retry();
    /// Data Transfer Error.
    pub const DATA_TRANSFER_ERROR: Self = Self::generic(0x04);
    /// Internal Error.
    pub const INTERNAL_ERROR: Self = Self::generic(0x06);
    /// Command Abort Requested.
    pub const ABORT_REQUESTED: Self = Self::generic(0x07);
    /// Invalid Namespace or Format.
    pub const INVALID_NAMESPACE: Self = Self::generic(0x0b).no_retry();
    /// Command Sequence Error.
    pub const SEQUENCE_ERROR: Self = Self::generic(0x0c).no_retry();
    /// SGL Data Block Length Invalid.
    pub const SGL_LENGTH_INVALID: Self = Self::generic(0x0f).no_retry();
    /// SGL Descriptor Type Invalid.
    pub const SGL_TYPE_INVALID: Self = Self::generic(0x11).no_retry();
    /// Invalid SGL Offset (in-capsule data).
    pub const SGL_OFFSET_INVALID: Self = Self::generic(0x16).no_retry();
    /// LBA Out of Range.
    pub const LBA_OUT_OF_RANGE: Self = Self::generic(0x80).no_retry();
    /// Namespace Not Ready.
    pub const NAMESPACE_NOT_READY: Self = Self::generic(0x82);
    /// Fabrics Connect: Invalid Parameters (DW0 says which).
    pub const CONNECT_INVALID_PARAMETERS: Self = Self::specific(0x82).no_retry();
    /// Fabrics Connect: Invalid Host (not allowed to connect).
    pub const CONNECT_INVALID_HOST: Self = Self::specific(0x84).no_retry();
    /// Invalid Queue Size (Connect SQSIZE).
    pub const INVALID_QUEUE_SIZE: Self = Self::specific(0x02).no_retry();
    /// Invalid Log Page.
    pub const INVALID_LOG_PAGE: Self = Self::specific(0x09).no_retry();
    /// Asynchronous Event Request Limit Exceeded.
    pub const AER_LIMIT_EXCEEDED: Self = Self::specific(0x05);
    /// Unrecovered Read Error.
    pub const UNRECOVERED_READ_ERROR: Self = Self {
        sct: sct::MEDIA,
        sc: 0x81,
        dnr: false,
    };
    /// Write Fault.
    pub const WRITE_FAULT: Self = Self {
        sct: sct::MEDIA,
        sc: 0x80,
        dnr: false,
    };

    const fn generic(sc: u8) -> Self {
        Self {
            sct: sct::GENERIC,
            sc,
            dnr: false,
        }
    }

    const fn specific(sc: u8) -> Self {
        Self {
            sct: sct::COMMAND_SPECIFIC,
            sc,
            dnr: false,
        }
    }

    /// The same status with Do Not Retry set.
    pub const fn no_retry(self) -> Self {
        Self { dnr: true, ..self }
    }

    /// Whether this is success.
    pub fn is_success(&self) -> bool {
        self.sct == 0 && self.sc == 0
    }

    /// The 15-bit status field (without the phase bit), shifted into place
    /// for the CQE's last 16 bits.
    pub fn to_field(self) -> u16 {
        ((self.sc as u16) << 1) | (((self.sct & 0x7) as u16) << 9) | (u16::from(self.dnr) << 15)
    }

    /// Reads a status from the CQE's last 16 bits.
    pub fn from_field(f: u16) -> Self {
        Self {
            sc: ((f >> 1) & 0xff) as u8,
            sct: ((f >> 9) & 0x7) as u8,
            dnr: f & 0x8000 != 0,
        }
    }
}

/// A completion queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    /// Command specific dword 0.
    pub dw0: u32,
    /// Command specific dword 1.
    pub dw1: u32,
    /// Submission queue head pointer.
    pub sqhd: u16,
    /// Submission queue id.
    pub sqid: u16,
    /// Command identifier.
    pub cid: u16,
    /// Status.
    pub status: Status,
}

impl Cqe {
    /// A completion for `cid` with `status` and no result dwords.
    pub fn new(cid: u16, status: Status) -> Self {
        Self {
            dw0: 0,
            dw1: 0,
            sqhd: 0,
            sqid: 0,
            cid,
            status,
        }
    }

    /// Wire encoding.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.dw0.to_le_bytes());
        b[4..8].copy_from_slice(&self.dw1.to_le_bytes());
        b[8..10].copy_from_slice(&self.sqhd.to_le_bytes());
        b[10..12].copy_from_slice(&self.sqid.to_le_bytes());
        b[12..14].copy_from_slice(&self.cid.to_le_bytes());
        b[14..16].copy_from_slice(&self.status.to_field().to_le_bytes());
        b
    }

    /// Decodes a CQE.
    pub fn decode(b: &[u8; 16]) -> Self {
        Self {
            dw0: u32::from_le_bytes(b[0..4].try_into().unwrap()),
            dw1: u32::from_le_bytes(b[4..8].try_into().unwrap()),
            sqhd: u16::from_le_bytes([b[8], b[9]]),
            sqid: u16::from_le_bytes([b[10], b[11]]),
            cid: u16::from_le_bytes([b[12], b[13]]),
            status: Status::from_field(u16::from_le_bytes([b[14], b[15]])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_field_layout() {
        // LBA out of range: SC 0x80, SCT 0, DNR: bits 8:1 = 0x80, bit 15.
        assert_eq!(Status::LBA_OUT_OF_RANGE.to_field(), 0x8100);
        // Connect invalid host: SC 0x84, SCT 1.
        assert_eq!(
            Status::CONNECT_INVALID_HOST.to_field(),
            0x8000 | 0x0200 | 0x0108
        );
        for s in [Status::SUCCESS, Status::INVALID_FIELD, Status::WRITE_FAULT] {
            assert_eq!(Status::from_field(s.to_field()), s);
        }
    }

    #[test]
    fn cqe_round_trip() {
        let c = Cqe {
            dw0: 0x1234_5678,
            dw1: 9,
            sqhd: 17,
            sqid: 2,
            cid: 0xbeef,
            status: Status::INVALID_OPCODE,
        };
        assert_eq!(Cqe::decode(&c.encode()), c);
    }
}
