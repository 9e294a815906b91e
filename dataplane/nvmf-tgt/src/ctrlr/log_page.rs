//! Log pages: error information, SMART / health, changed namespace list,
//! and the discovery log (NVMe-oF 1.1, "Discovery Log Page"): a 1024-byte
//! header followed by 1024-byte entries, read by hosts in pieces at byte
//! offsets (LPOL/LPOU), so every page is built whole and sliced.

use crate::subsystem::ListenAddress;

/// Log page identifiers served.
pub mod lid {
    /// Error information.
    pub const ERROR: u8 = 0x01;
    /// SMART / health information.
    pub const SMART: u8 = 0x02;
    /// Firmware slot information.
    pub const FIRMWARE_SLOT: u8 = 0x03;
    /// Changed namespace list.
    pub const CHANGED_NS_LIST: u8 = 0x04;
    /// Asymmetric Namespace Access (`crate::ana::log_page`).
    pub const ANA: u8 = 0x0c;
    /// Discovery log (discovery controllers only).
    pub const DISCOVERY: u8 = 0x70;
}

/// Size of one discovery log entry, and of the header.
pub const DISCOVERY_ENTRY_LEN: usize = 1024;

/// One discovery log entry's contents.
#[derive(Clone, Debug)]
pub struct DiscoveryEntry {
    /// NQN of the subsystem reachable there.
    pub subnqn: String,
    /// The listener, with its advertised address.
    pub addr: ListenAddress,
    /// Port id of the listener.
    pub portid: u16,
    /// An entry for one of the discovery subsystem's own listeners (SUBTYPE
    /// 3, "current discovery subsystem"), else an NVM subsystem (2).
    pub current_discovery: bool,
}

/// SUBTYPE of an NVM subsystem's entry.
pub const SUBTYPE_NVME: u8 = 2;
/// SUBTYPE of an entry for the discovery subsystem answering the query.
pub const SUBTYPE_CURRENT_DISCOVERY: u8 = 3;
/// EFLAGS: the entry's controller returns the same log (DUPRETINFO), so
/// hosts do not follow it (nvme-cli's connect-all skips it).
pub const EFLAGS_DUPRETINFO: u16 = 1 << 0;
/// EFLAGS: explicit persistent connections (Keep Alive, AERs) supported.
pub const EFLAGS_EPCSD: u16 = 1 << 1;

fn put_padded(out: &mut [u8], s: &str, pad: u8) {
    out.fill(pad);
    let n = s.len().min(out.len());
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// TREQ: a secure channel is required.
const TREQ_REQUIRED: u8 = 1;
/// TSAS SECTYPE of TCP: TLS 1.3.
const SECTYPE_TLS13: u8 = 2;

/// Builds the whole discovery log: header with `genctr`, then one entry
/// per element of `entries`.
pub fn discovery_log(genctr: u64, entries: &[DiscoveryEntry]) -> Vec<u8> {
    let mut page = vec![0u8; DISCOVERY_ENTRY_LEN * (1 + entries.len())];
    page[0..8].copy_from_slice(&genctr.to_le_bytes());
    page[8..16].copy_from_slice(&(entries.len() as u64).to_le_bytes());
    // RECFMT 0.
    for (i, e) in entries.iter().enumerate() {
        let r = &mut page[DISCOVERY_ENTRY_LEN * (i + 1)..DISCOVERY_ENTRY_LEN * (i + 2)];
        r[0] = 3; // TRTYPE: TCP
        r[1] = if e.addr.is_ipv6() { 2 } else { 1 }; // ADRFAM
        r[2] = if e.current_discovery {
            SUBTYPE_CURRENT_DISCOVERY
        } else {
            SUBTYPE_NVME
        };
        // TREQ: 1, a secure channel is required, for a TLS listener; else
        // 0, "not specified" (as Linux's own target sends): "not required"
        // (2) makes libnvme 1.3 (Debian 12's nvme-cli) ask the kernel for
        // TLS on `nvme connect-all`, which a 6.1 kernel refuses.
        r[3] = if e.addr.secure_channel {
            TREQ_REQUIRED
        } else {
            0
        };
        r[4..6].copy_from_slice(&e.portid.to_le_bytes());
        r[6..8].copy_from_slice(&0xffffu16.to_le_bytes()); // CNTLID: dynamic
        r[8..10].copy_from_slice(&32u16.to_le_bytes()); // ASQSZ
        if e.current_discovery {
            r[10..12].copy_from_slice(&(EFLAGS_DUPRETINFO | EFLAGS_EPCSD).to_le_bytes());
        }
        put_padded(&mut r[32..64], &e.addr.trsvcid(), b' ');
        put_padded(&mut r[256..512], &e.subnqn, 0);
        put_padded(&mut r[512..768], &e.addr.traddr(), b' ');
        // TSAS for TCP: SECTYPE, TLS 1.3 or none; the rest is reserved.
        r[768] = if e.addr.secure_channel {
            SECTYPE_TLS13
        } else {
            0
        };
    }
    page
}

/// Copies `len` bytes of `page` from byte `offset` into `out`, zero
/// filling past its end (hosts read a fixed size and look at NUMREC).
pub fn slice_into(out: &mut [u8], page: &[u8], offset: u64) {
    out.fill(0);
    if offset >= page.len() as u64 {
        return;
    }
    let from = &page[offset as usize..];
    let n = from.len().min(out.len());
    out[..n].copy_from_slice(&from[..n]);
}

/// SMART / health page (512 bytes) with data units read and written
/// (thousands of 512-byte units, rounded up, as the spec counts them).
pub fn smart(read_bytes: u64, written_bytes: u64, reads: u64, writes: u64) -> Vec<u8> {
    let mut p = vec![0u8; 512];
    let units = |b: u64| (b / 512).div_ceil(1000) as u128;
    p[1..3].copy_from_slice(&(273u16 + 25).to_le_bytes()); // composite temperature, K
    p[3] = 100; // available spare
    p[4] = 10; // available spare threshold
    p[32..48].copy_from_slice(&units(read_bytes).to_le_bytes());
    p[48..64].copy_from_slice(&units(written_bytes).to_le_bytes());
    p[64..80].copy_from_slice(&u128::from(reads).to_le_bytes());
    p[80..96].copy_from_slice(&u128::from(writes).to_le_bytes());
    p
}

/// Changed namespace list (4096 bytes): up to 1024 nsids, or 0xFFFFFFFF
/// first when more changed.
pub fn changed_ns_list(nsids: &[u32]) -> Vec<u8> {
    let mut p = vec![0u8; 4096];
    if nsids.len() > 1024 {
        p[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    } else {
        for (i, n) in nsids.iter().enumerate() {
            p[i * 4..i * 4 + 4].copy_from_slice(&n.to_le_bytes());
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u16) -> DiscoveryEntry {
        DiscoveryEntry {
            subnqn: format!("nqn.2016-06.io.spdk:cnode{i}"),
            addr: ListenAddress {
                listen: "127.0.0.1:4420".parse().unwrap(),
                advertised_addr: Some("10.0.3.100".into()),
                advertised_port: None,
                secure_channel: i == 2,
            },
            portid: i,
            current_discovery: false,
        }
    }

    #[test]
    fn discovery_listener_entry_is_the_current_discovery_subsystem() {
        let mut d = entry(7);
        d.subnqn = crate::DISCOVERY_NQN.into();
        d.current_discovery = true;
        let p = discovery_log(1, &[d, entry(1)]);
        let (e, n) = (&p[1024..2048], &p[2048..3072]);
        assert_eq!((e[2], n[2]), (SUBTYPE_CURRENT_DISCOVERY, SUBTYPE_NVME));
        assert_eq!(
            u16::from_le_bytes([e[10], e[11]]),
            0b11,
            "DUPRETINFO | EPCSD"
        );
        assert_eq!(u16::from_le_bytes([n[10], n[11]]), 0);
        assert_eq!(
            &e[256..256 + crate::DISCOVERY_NQN.len()],
            crate::DISCOVERY_NQN.as_bytes()
        );
    }

    #[test]
    fn discovery_log_layout() {
        let p = discovery_log(5, &[entry(1), entry(2)]);
        assert_eq!(p.len(), 3 * 1024);
        assert_eq!(u64::from_le_bytes(p[0..8].try_into().unwrap()), 5);
        assert_eq!(u64::from_le_bytes(p[8..16].try_into().unwrap()), 2);
        let e = &p[2048..3072];
        // Entry 2's listener is a secure channel: TREQ required, TLS 1.3.
        assert_eq!(&e[0..4], &[3, 1, 2, TREQ_REQUIRED]);
        assert_eq!(e[768], SECTYPE_TLS13);
        let plain = &p[1024..2048];
        assert_eq!((plain[3], plain[768]), (0, 0));
        assert_eq!(u16::from_le_bytes([e[4], e[5]]), 2);
        assert_eq!(u16::from_le_bytes([e[6], e[7]]), 0xffff);
        assert_eq!(&e[32..36], b"4420");
        assert_eq!(e[36], b' ');
        assert_eq!(&e[256..282], b"nqn.2016-06.io.spdk:cnode2");
        assert_eq!(e[282], 0);
        assert_eq!(&e[512..522], b"10.0.3.100");
        assert_eq!(e[522], b' ');
    }

    #[test]
    fn discovery_log_paging() {
        let entries: Vec<_> = (0..5).map(entry).collect();
        let whole = discovery_log(9, &entries);
        // Reading in 1536-byte pieces at increasing offsets reassembles it,
        // and reading past the end gives zeroes.
        let mut got = Vec::new();
        let mut off = 0u64;
        while off < whole.len() as u64 + 2048 {
            let mut piece = vec![0xaau8; 1536];
            slice_into(&mut piece, &whole, off);
            got.extend_from_slice(&piece);
            off += 1536;
        }
        assert_eq!(&got[..whole.len()], &whole[..]);
        assert!(got[whole.len()..].iter().all(|&b| b == 0));
        // A header-only read (what hosts do first) gives NUMREC.
        let mut hdr = [0u8; 16];
        slice_into(&mut hdr, &whole, 0);
        assert_eq!(u64::from_le_bytes(hdr[8..16].try_into().unwrap()), 5);
        // The fourth entry alone.
        let mut one = vec![0u8; 1024];
        slice_into(&mut one, &whole, 4 * 1024);
        assert_eq!(&one[256..282], b"nqn.2016-06.io.spdk:cnode3");
    }

    #[test]
    fn changed_list_overflow() {
        assert_eq!(
            &changed_ns_list(&[3, 4])[..12],
            &[3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0]
        );
        let many: Vec<u32> = (1..=1025).collect();
        assert_eq!(
            &changed_ns_list(&many)[..8],
            &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]
        );
    }
}
