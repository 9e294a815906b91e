//! Identify data structures (NVMe base specification 1.4/2.0, "Identify
//! Controller / Namespace data structure"; NVMe-oF 1.1 for the Fabrics part
//! of Identify Controller), built into 4096-byte pages.
//!
//! What Linux checks (drivers/nvme/host/core.c, fabrics.c, tcp.c): SGLS must
//! advertise SGL support; ICDOFF must be 0; MAXCMD must be non-zero (it
//! clamps the queue size); the (CNTLID, SUBNQN) pair must be unique; with
//! several controllers on a subsystem, CMIC must say "multi-controller" or
//! the second one is refused as a duplicate; MNAN must agree with NN.

use crate::subsystem::Namespace;

/// Size of every Identify page.
pub const IDENTIFY_LEN: usize = 4096;

/// Identify CNS values served.
pub mod cns {
    /// Namespace.
    pub const NAMESPACE: u8 = 0x00;
    /// Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active namespace id list.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace identification descriptor list.
    pub const NS_DESCRIPTORS: u8 = 0x03;
    /// I/O command set specific namespace (NVM: all limits zero).
    pub const CS_NAMESPACE: u8 = 0x05;
    /// I/O command set specific controller (NVM: all limits zero).
    pub const CS_CONTROLLER: u8 = 0x06;
}

/// Version reported in VS and Identify VER: 1.3.0 (so Linux does not ask
/// for the 2.0-only command-set-independent namespace structure).
pub const NVME_VERSION: u32 = 0x0001_0300;

/// Controller type (CNTRLTYPE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControllerType {
    /// Serves I/O queues and namespaces.
    Io = 1,
    /// Discovery controller.
    Discovery = 2,
}

/// What Identify Controller reports; everything else is fixed.
#[derive(Clone, Debug)]
pub struct ControllerIdentity<'a> {
    /// Serial number.
    pub serial: &'a str,
    /// Model number.
    pub model: &'a str,
    /// Firmware revision.
    pub firmware: &'a str,
    /// Controller id.
    pub cntlid: u16,
    /// Subsystem NQN.
    pub subnqn: &'a str,
    /// I/O or discovery.
    pub kind: ControllerType,
    /// Largest nsid (NN) and maximum allowed namespaces (MNAN).
    pub max_namespaces: u32,
    /// Commands outstanding per queue (MAXCMD).
    pub max_cmd: u16,
    /// Largest transfer, in 4 KiB pages, as a power of two (MDTS).
    pub mdts: u8,
    /// In-capsule data the target accepts, bytes (IOCCSZ = (64 + this)/16).
    pub in_capsule_data: u32,
    /// Keep-alive granularity, 100 ms units (KAS).
    pub kas_100ms: u16,
    /// The subsystem reports ANA states ([`crate::ana`]).
    pub ana_reporting: bool,
}

fn put_str(page: &mut [u8], at: usize, len: usize, s: &str) {
    // Identify strings are ASCII, space padded, not NUL terminated.
    let field = &mut page[at..at + len];
    field.fill(b' ');
    for (d, c) in field.iter_mut().zip(s.bytes()) {
        *d = if c.is_ascii_graphic() || c == b' ' {
            c
        } else {
            b'_'
        };
    }
}

fn put16(page: &mut [u8], at: usize, v: u16) {
    page[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(page: &mut [u8], at: usize, v: u32) {
    page[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(page: &mut [u8], at: usize, v: u64) {
    page[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Optional Asynchronous Events Supported: namespace attribute notices.
pub const OAES_NS_ATTRIBUTE: u32 = 1 << 8;
/// OAES: ANA change notices.
pub const OAES_ANA_CHANGE: u32 = 1 << 11;
/// OAES: discovery log page change notices (discovery controllers).
pub const OAES_DISCOVERY_CHANGE: u32 = 1 << 31;

/// Fills `page` (4096 bytes) with the Identify Controller structure.
pub fn controller(page: &mut [u8], id: &ControllerIdentity) {
    page[..IDENTIFY_LEN].fill(0);
    // VID/SSVID stay 0: no PCI vendor.
    put_str(page, 4, 20, id.serial);
    put_str(page, 24, 40, id.model);
    put_str(page, 64, 8, id.firmware);
    page[72] = 6; // RAB: recommended arbitration burst (advisory)
                  // CMIC bit 1: the subsystem may have several controllers (multipath,
                  // and Linux refuses a second controller of a single-controller subsystem).
    page[76] = if id.kind == ControllerType::Io {
        0x02
    } else {
        0
    };
    if id.ana_reporting {
        // CMIC bit 3: ANA reporting.
        page[76] |= 0x08;
        page[342] = ANATT_SECONDS; // ANATT
                                   // ANACAP: every state reported (bits 0-4); ANAGRPID never changes
                                   // while a namespace is attached (bit 6); non-zero ANAGRPIDs (bit 7).
        page[343] = 0x1f | (1 << 6) | (1 << 7);
        put32(page, 344, id.max_namespaces); // ANAGRPMAX
        put32(page, 348, id.max_namespaces); // NANAGRPID
    }
    page[77] = id.mdts;
    put16(page, 78, id.cntlid);
    put32(page, 80, NVME_VERSION);
    put32(
        page,
        92,
        match id.kind {
            ControllerType::Io if id.ana_reporting => OAES_NS_ATTRIBUTE | OAES_ANA_CHANGE,
            ControllerType::Io => OAES_NS_ATTRIBUTE,
            ControllerType::Discovery => OAES_DISCOVERY_CHANGE,
        },
    );
    page[111] = id.kind as u8; // CNTRLTYPE
                               // OACS 0: no optional admin commands (no format, no ns management).
    page[258] = 3; // ACL: 4 aborts (0's based; Abort is answered, never acts)
    page[259] = 3; // AERL: 4 outstanding AERs (0's based)
    page[261] = 0x04; // LPA: extended data for Get Log Page (offsets)
    page[262] = 0; // ELPE: 1 error log entry (0's based)
    put16(page, 320, id.kas_100ms); // KAS
    if id.kind == ControllerType::Io {
        page[512] = 0x66; // SQES: 64-byte entries
        page[513] = 0x44; // CQES: 16-byte entries
    }
    put16(page, 514, id.max_cmd); // MAXCMD
    let nn = if id.kind == ControllerType::Io {
        id.max_namespaces
    } else {
        0
    };
    put32(page, 516, nn); // NN
    if id.kind == ControllerType::Io {
        // ONCS: Dataset Management (bit 2) and Write Zeroes (bit 3).
        put16(page, 520, (1 << 2) | (1 << 3));
        // VWC: a volatile write cache: hosts send Flush and FUA writes, and
        // may turn it off (Set Features 0x06), which the I/O path honours.
        page[525] = 0x01;
    }
    // SGLS: SGLs supported without alignment (bit 0), SGL offsets for
    // in-capsule data (bit 20). Keyed SGLs (bit 2) are RDMA only.
    put32(page, 536, 1 | (1 << 20));
    put32(page, 540, nn); // MNAN = NN, as Linux requires them consistent
    let subnqn = id.subnqn.as_bytes();
    let n = subnqn.len().min(255);
    page[768..768 + n].copy_from_slice(&subnqn[..n]);
    // Fabrics: IOCCSZ and IORCSZ in 16-byte units, ICDOFF 0, FCATT 0
    // (dynamic controller model), MSDBD 1, OFCS bit 0 (Disconnect).
    put32(page, 1792, (64 + id.in_capsule_data) / 16);
    put32(page, 1796, 1);
    put16(page, 1800, 0);
    page[1802] = 0;
    page[1803] = 1;
    put16(page, 1804, 1);
    // Power state 0: max power 0 (unreported), entry/exit latency 0.
}

/// ANA Transition Time: how long a host waits for a group in the change
/// state before it counts the path as failed.
pub const ANATT_SECONDS: u8 = 10;

/// Fills `page` with the Identify Namespace structure of `ns` (with its
/// ANA group when the subsystem reports ANA states).
pub fn namespace(page: &mut [u8], ns: &Namespace, ana_reporting: bool) {
    page[..IDENTIFY_LEN].fill(0);
    put64(page, 0, ns.num_blocks); // NSZE
    put64(page, 8, ns.num_blocks); // NCAP
    put64(page, 16, ns.num_blocks); // NUSE
    page[24] = 0; // NSFEAT
    page[25] = 0; // NLBAF: one format (0's based)
    page[26] = 0; // FLBAS: format 0, no metadata
    page[30] = 0x01; // NMIC: may be shared by several controllers
                     // DLFEAT: deallocated blocks read as zeroes. Every bdev keeps this
                     // promise (malloc fills zeroes, files punch a hole or write zeroes, rbd
                     // deallocates through write-zeroes).
    page[33] = 0x01;
    // NSATTR bit 0: write protected (a read-only bdev).
    if ana_reporting {
        put32(page, 92, ns.anagrpid); // ANAGRPID
    }
    page[99] = u8::from(!ns.bdev.supports(bdev::IoKind::Write));
    page[104..120].copy_from_slice(&ns.nguid); // NGUID
                                               // LBAF0: no metadata, LBADS = log2(block size), relative performance 0.
    put32(page, 128, ns.block_shift << 16);
}

/// Fills `page` with the active nsids above `after`, ascending, at most
/// 1024 of them.
pub fn active_ns_list<'a>(page: &mut [u8], after: u32, nsids: impl Iterator<Item = &'a u32>) {
    page[..IDENTIFY_LEN].fill(0);
    for (i, nsid) in nsids.filter(|&&n| n > after).take(1024).enumerate() {
        put32(page, i * 4, *nsid);
    }
}

/// Namespace identifier types in the descriptor list.
mod nidt {
    pub const NGUID: u8 = 2;
    pub const UUID: u8 = 3;
    pub const CSI: u8 = 4;
}

/// Fills `page` with the namespace identification descriptor list: NGUID,
/// UUID and the command set (NVM).
pub fn ns_descriptors(page: &mut [u8], ns: &Namespace) {
    page[..IDENTIFY_LEN].fill(0);
    let mut at = 0;
    for (t, v) in [
        (nidt::NGUID, &ns.nguid[..]),
        (nidt::UUID, &ns.uuid[..]),
        (nidt::CSI, &[0u8][..]),
    ] {
        page[at] = t;
        page[at + 1] = v.len() as u8;
        page[at + 4..at + 4 + v.len()].copy_from_slice(v);
        at += 4 + v.len();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bdev::malloc::MallocBdev;
    use bdev::Bdev;

    use super::*;

    fn ident(kind: ControllerType) -> ControllerIdentity<'static> {
        ControllerIdentity {
            serial: "SN123",
            model: "rackcache Controller",
            firmware: "0.1.0",
            cntlid: 7,
            subnqn: "nqn.2016-06.io.spdk:cnode1",
            kind,
            max_namespaces: 32,
            max_cmd: 128,
            mdts: 8,
            in_capsule_data: 8192,
            kas_100ms: 10,
            ana_reporting: false,
        }
    }

    fn le16(p: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([p[at], p[at + 1]])
    }
    fn le32(p: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(p[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn controller_layout() {
        let mut p = vec![0xffu8; IDENTIFY_LEN];
        controller(&mut p, &ident(ControllerType::Io));
        assert_eq!(&p[4..24], b"SN123               ");
        assert_eq!(&p[24..44], b"rackcache Controller");
        assert!(p[44..64].iter().all(|&c| c == b' '));
        assert_eq!(p[76] & 0x02, 0x02, "CMIC multi-controller");
        assert_eq!(p[77], 8, "MDTS: 2^8 pages of 4 KiB = 1 MiB");
        assert_eq!(le16(&p, 78), 7);
        assert_eq!(le32(&p, 80), 0x0001_0300);
        assert_eq!(p[111], 1);
        assert_eq!(le16(&p, 320), 10, "KAS");
        assert_eq!((p[512], p[513]), (0x66, 0x44));
        assert_eq!(le16(&p, 514), 128);
        assert_eq!(le32(&p, 516), 32, "NN");
        assert_eq!(le32(&p, 540), le32(&p, 516), "MNAN == NN");
        assert_eq!(le32(&p, 536) & 0x3, 1, "SGLs without keyed descriptors");
        assert_ne!(
            le32(&p, 536) & (1 << 20),
            0,
            "SGL offsets for in-capsule data"
        );
        assert_eq!(&p[768..794], b"nqn.2016-06.io.spdk:cnode1");
        assert_eq!(p[794], 0);
        assert_eq!(le32(&p, 1792), (8192 + 64) / 16, "IOCCSZ");
        assert_eq!(le32(&p, 1796), 1, "IORCSZ");
        assert_eq!(le16(&p, 1800), 0, "ICDOFF must be 0 for Linux");
        assert_eq!(p[1803], 1, "MSDBD");
        assert!(p[2048..].iter().all(|&b| b == 0));
    }

    #[test]
    fn discovery_controller_has_no_namespaces() {
        let mut p = vec![0u8; IDENTIFY_LEN];
        controller(&mut p, &ident(ControllerType::Discovery));
        assert_eq!(p[111], 2);
        assert_eq!(le32(&p, 516), 0);
        assert_eq!(le32(&p, 540), 0);
        assert_eq!(le32(&p, 92), OAES_DISCOVERY_CHANGE);
    }

    fn ns() -> Namespace {
        let b = Arc::new(Bdev::Malloc(MallocBdev::new("m0", 2048, 4096).unwrap()));
        Namespace::new("nqn.2016-06.io.spdk:cnode1", 3, b, None, None)
    }

    #[test]
    fn namespace_layout_and_stable_ids() {
        let n = ns();
        let mut p = vec![0u8; IDENTIFY_LEN];
        namespace(&mut p, &n, false);
        assert_eq!(u64::from_le_bytes(p[0..8].try_into().unwrap()), 2048);
        assert_eq!(u64::from_le_bytes(p[8..16].try_into().unwrap()), 2048);
        assert_eq!((p[25], p[26]), (0, 0));
        assert_eq!((le32(&p, 128) >> 16) & 0xff, 12);
        assert_eq!(&p[104..120], &n.nguid);
        // Same subsystem and nsid give the same identifiers (restarts,
        // paths); another nsid does not.
        let again = ns();
        assert_eq!((again.nguid, again.uuid), (n.nguid, n.uuid));
        let b = Arc::new(Bdev::Malloc(MallocBdev::new("m0", 8, 512).unwrap()));
        let other = Namespace::new("nqn.2016-06.io.spdk:cnode1", 4, b, None, None);
        assert_ne!(other.uuid, n.uuid);
        assert_ne!(n.uuid, n.nguid);
    }

    #[test]
    fn descriptor_list_layout() {
        let n = ns();
        let mut p = vec![0u8; IDENTIFY_LEN];
        ns_descriptors(&mut p, &n);
        assert_eq!((p[0], p[1]), (2, 16));
        assert_eq!(&p[4..20], &n.nguid);
        assert_eq!((p[20], p[21]), (3, 16));
        assert_eq!(&p[24..40], &n.uuid);
        assert_eq!((p[40], p[41], p[44]), (4, 1, 0));
        assert!(p[45..].iter().all(|&b| b == 0));
    }

    #[test]
    fn active_list_starts_after_nsid() {
        let ids = [1u32, 2, 5, 9];
        let mut p = vec![0u8; IDENTIFY_LEN];
        active_ns_list(&mut p, 2, ids.iter());
        assert_eq!((le32(&p, 0), le32(&p, 4), le32(&p, 8)), (5, 9, 0));
    }
}
