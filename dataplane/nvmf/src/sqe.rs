//! The 64-byte submission queue entry (NVMe base specification, figure
//! "Common Command Format") and the Fabrics commands carried in it.

/// Admin and I/O opcodes this project handles, and the Fabrics opcode.
pub mod opcode {
    /// Admin: Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Admin: Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Admin: Abort.
    pub const ABORT: u8 = 0x08;
    /// Admin: Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Admin: Get Features.
    pub const GET_FEATURES: u8 = 0x0a;
    /// Admin: Asynchronous Event Request.
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0c;
    /// Admin: Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
    /// I/O: Flush.
    pub const FLUSH: u8 = 0x00;
    /// I/O: Write.
    pub const WRITE: u8 = 0x01;
    /// I/O: Read.
    pub const READ: u8 = 0x02;
    /// I/O: Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// I/O: Dataset Management.
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    /// I/O, vendor specific (no data): rackcache's clean mark, from a
    /// mirrored volume's owner to its mirror; SLBA and NLB as a Write's.
    pub const MARK_CLEAN: u8 = 0x80;
    /// Fabrics commands (the type is in byte 4).
    pub const FABRICS: u8 = 0x7f;
}

/// Fabrics command types (byte 4 of a Fabrics SQE).
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Authentication Send.
    pub const AUTH_SEND: u8 = 0x05;
    /// Authentication Receive.
    pub const AUTH_RECV: u8 = 0x06;
    /// Disconnect.
    pub const DISCONNECT: u8 = 0x08;
}

/// SGL descriptor type byte (type in bits 7:4, subtype in bits 3:0) of the
/// two descriptors NVMe/TCP uses.
pub mod sgl {
    /// Data Block, subtype Offset: in-capsule data at `address` bytes into the
    /// capsule's data.
    pub const IN_CAPSULE: u8 = 0x01;
    /// Transport SGL Data Block, subtype Transport Specific: the data moves in
    /// H2CData/C2HData PDUs.
    pub const TRANSPORT: u8 = 0x5a;
}

/// A submission queue entry, viewed in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sqe(pub [u8; 64]);

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The data pointer of a Fabrics SQE: one SGL descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SglDescriptor {
    /// Address (for in-capsule data: offset into the capsule data).
    pub address: u64,
    /// Length in bytes.
    pub length: u32,
    /// Type and subtype byte (see [`sgl`]).
    pub kind: u8,
}

impl Sqe {
    /// Opcode.
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }
    /// Fused operation bits.
    pub fn fuse(&self) -> u8 {
        self.0[1] & 0x03
    }
    /// PRP or SGL for data transfer (fabrics requires SGLs: 1 or 2).
    pub fn psdt(&self) -> u8 {
        self.0[1] >> 6
    }
    /// Command identifier.
    pub fn cid(&self) -> u16 {
        le16(&self.0, 2)
    }
    /// Namespace identifier (byte 4..8; for Fabrics commands byte 4 is FCTYPE).
    pub fn nsid(&self) -> u32 {
        le32(&self.0, 4)
    }
    /// Fabrics command type.
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }
    /// The SGL descriptor in DPTR.
    pub fn sgl(&self) -> SglDescriptor {
        SglDescriptor {
            address: le64(&self.0, 24),
            length: le32(&self.0, 32),
            kind: self.0[39],
        }
    }
    /// Command dword `n` (10..=15).
    pub fn cdw(&self, n: usize) -> u32 {
        debug_assert!((10..=15).contains(&n));
        le32(&self.0, 40 + (n - 10) * 4)
    }
    /// Starting LBA of Read, Write, Write Zeroes (CDW10-11).
    pub fn slba(&self) -> u64 {
        le64(&self.0, 40)
    }
    /// Number of logical blocks, 0's based (CDW12 bits 15:0).
    pub fn nlb(&self) -> u16 {
        le16(&self.0, 48)
    }

    /// Builds an SQE from its common fields (for hosts and tests).
    pub fn build(opcode: u8, cid: u16, nsid: u32, sgl: SglDescriptor, cdw10_15: [u32; 6]) -> Self {
        let mut b = [0u8; 64];
        b[0] = opcode;
        b[1] = 0x40; // PSDT: SGL, metadata pointer as address
        b[2..4].copy_from_slice(&cid.to_le_bytes());
        b[4..8].copy_from_slice(&nsid.to_le_bytes());
        b[24..32].copy_from_slice(&sgl.address.to_le_bytes());
        b[32..36].copy_from_slice(&sgl.length.to_le_bytes());
        b[39] = sgl.kind;
        for (i, dw) in cdw10_15.iter().enumerate() {
            b[40 + i * 4..44 + i * 4].copy_from_slice(&dw.to_le_bytes());
        }
        Self(b)
    }
}

/// The Connect command's SQE fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectCmd {
    /// Record format (0).
    pub recfmt: u16,
    /// Queue to create: 0 for the admin queue.
    pub qid: u16,
    /// Submission queue size, 0's based.
    pub sqsize: u16,
    /// Connect attributes.
    pub cattr: u8,
    /// Keep-alive timeout in milliseconds (admin queue only; 0 = none).
    pub kato_ms: u32,
}

impl ConnectCmd {
    /// Reads the Connect fields of a Fabrics SQE.
    pub fn parse(sqe: &Sqe) -> Self {
        let b = &sqe.0;
        Self {
            recfmt: le16(b, 40),
            qid: le16(b, 42),
            sqsize: le16(b, 44),
            cattr: b[46],
            kato_ms: le32(b, 48),
        }
    }
}

/// Length of the Connect command's data.
pub const CONNECT_DATA_LEN: usize = 1024;

/// The Connect command's 1024 bytes of data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectData {
    /// Host identifier.
    pub host_id: [u8; 16],
    /// Controller id: 0xFFFF asks for a dynamic controller (admin queue);
    /// for I/O queues, the id the admin Connect returned.
    pub cntlid: u16,
    /// NQN of the subsystem to connect to.
    pub subnqn: String,
    /// NQN of the host; may be empty (SPDK's initiators send an empty one
    /// unless told otherwise, and SPDK's target accepts it where any host
    /// is allowed).
    pub hostnqn: String,
}

/// Why Connect data was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectDataError {
    /// Fewer than 1024 bytes.
    TooShort,
    /// An NQN without a terminating NUL, or not UTF-8. Carries the offset of
    /// the field, for the Connect Invalid Parameters response.
    BadNqn(u16),
}

fn nqn_at(b: &[u8], at: usize, allow_empty: bool) -> Result<String, ConnectDataError> {
    let field = &b[at..at + 256];
    let end = field
        .iter()
        .position(|&c| c == 0)
        .ok_or(ConnectDataError::BadNqn(at as u16))?;
    if end == 0 && !allow_empty {
        return Err(ConnectDataError::BadNqn(at as u16));
    }
    std::str::from_utf8(&field[..end])
        .map(str::to_owned)
        .map_err(|_| ConnectDataError::BadNqn(at as u16))
}

impl ConnectData {
    /// Parses the Connect data.
    pub fn parse(b: &[u8]) -> Result<Self, ConnectDataError> {
        if b.len() < CONNECT_DATA_LEN {
            return Err(ConnectDataError::TooShort);
        }
        Ok(Self {
            host_id: b[0..16].try_into().unwrap(),
            cntlid: le16(b, 16),
            subnqn: nqn_at(b, 256, false)?,
            hostnqn: nqn_at(b, 512, true)?,
        })
    }

    /// Encodes the Connect data (for hosts and tests).
    pub fn encode(&self) -> [u8; CONNECT_DATA_LEN] {
        let mut b = [0u8; CONNECT_DATA_LEN];
        b[0..16].copy_from_slice(&self.host_id);
        b[16..18].copy_from_slice(&self.cntlid.to_le_bytes());
        let sub = self.subnqn.as_bytes();
        let host = self.hostnqn.as_bytes();
        b[256..256 + sub.len().min(255)].copy_from_slice(&sub[..sub.len().min(255)]);
        b[512..512 + host.len().min(255)].copy_from_slice(&host[..host.len().min(255)]);
        b
    }
}

/// Property Get/Set fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PropertyCmd {
    /// 8-byte property (true) or 4-byte (false).
    pub eight_bytes: bool,
    /// Property offset (CAP 0x0, VS 0x8, CC 0x14, CSTS 0x1c, ...).
    pub offset: u32,
    /// Property Set only: the value.
    pub value: u64,
}

impl PropertyCmd {
    /// Reads the property fields of a Fabrics SQE.
    pub fn parse(sqe: &Sqe) -> Self {
        let b = &sqe.0;
        Self {
            eight_bytes: b[40] & 0x07 == 1,
            offset: le32(b, 44),
            value: le64(b, 48),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_command_fields() {
        let sqe = Sqe::build(
            opcode::READ,
            42,
            1,
            SglDescriptor {
                address: 0,
                length: 8192,
                kind: sgl::TRANSPORT,
            },
            [100, 0, 15, 0, 0, 0],
        );
        assert_eq!(sqe.opcode(), opcode::READ);
        assert_eq!(sqe.cid(), 42);
        assert_eq!(sqe.nsid(), 1);
        assert_eq!(sqe.psdt(), 1);
        assert_eq!(sqe.slba(), 100);
        assert_eq!(sqe.nlb(), 15);
        assert_eq!(sqe.sgl().length, 8192);
        assert_eq!(sqe.sgl().kind, sgl::TRANSPORT);
        assert_eq!(sqe.cdw(12), 15);
    }

    #[test]
    fn connect_round_trip() {
        let mut raw = [0u8; 64];
        raw[0] = opcode::FABRICS;
        raw[4] = fctype::CONNECT;
        raw[42..44].copy_from_slice(&3u16.to_le_bytes());
        raw[44..46].copy_from_slice(&127u16.to_le_bytes());
        raw[48..52].copy_from_slice(&15000u32.to_le_bytes());
        let c = ConnectCmd::parse(&Sqe(raw));
        assert_eq!((c.qid, c.sqsize, c.kato_ms), (3, 127, 15000));

        let data = ConnectData {
            host_id: [7; 16],
            cntlid: 0xffff,
            subnqn: "nqn.2026-11.io.rackcache:vol-1".into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:1234".into(),
        };
        assert_eq!(ConnectData::parse(&data.encode()).unwrap(), data);
    }

    #[test]
    fn connect_data_errors() {
        assert_eq!(
            ConnectData::parse(&[0u8; 100]),
            Err(ConnectDataError::TooShort)
        );
        let mut b = [0u8; CONNECT_DATA_LEN];
        assert_eq!(ConnectData::parse(&b), Err(ConnectDataError::BadNqn(256)));
        b[256] = b'x';
        assert_eq!(
            ConnectData::parse(&b).unwrap().hostnqn,
            "",
            "empty host NQN"
        );
        b[512..768].fill(b'h'); // no terminating NUL
        assert_eq!(ConnectData::parse(&b), Err(ConnectDataError::BadNqn(512)));
    }
}
