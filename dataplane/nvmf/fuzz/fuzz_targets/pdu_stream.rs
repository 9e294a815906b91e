//! Feeds arbitrary bytes to the PDU decoder the way a connection does: one
//! common header at a time, validated against a negotiated state chosen by
//! the first input byte, then the type-specific header, then the capsule's
//! SQE fields and Connect data. Nothing may panic, loop or read out of
//! bounds; every accepted layout must fit PLEN.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmf::pdu::{self, CommonHeader, Negotiated, Specific, CH_LEN};
use nvmf::sqe::{ConnectCmd, ConnectData, PropertyCmd, Sqe};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let mut neg = Negotiated {
        initialized: mode & 1 != 0,
        header_digest: mode & 2 != 0,
        data_digest: mode & 4 != 0,
        receive_pda: (mode >> 3) & 0x07,
        max_plen: 1 << 20,
    };
    let from_host = mode & 0x80 == 0;
    while rest.len() >= CH_LEN {
        let ch = CommonHeader::parse(rest[..CH_LEN].try_into().unwrap());
        let Ok(layout) = ch.validate(&neg, from_host) else {
            return;
        };
        assert!(layout.header_total <= layout.plen);
        assert!(layout.data_offset + layout.data_len <= layout.plen);
        if rest.len() < layout.plen {
            return;
        }
        let Ok(spec) = pdu::parse_specific(&layout, ch.flags, &rest[..layout.header_total]) else {
            return;
        };
        match spec {
            Specific::IcReq(_) | Specific::IcResp(_) => neg.initialized = true,
            Specific::CapsuleCmd(raw) => {
                let sqe = Sqe(raw);
                let _ = (
                    sqe.opcode(),
                    sqe.cid(),
                    sqe.nsid(),
                    sqe.sgl(),
                    sqe.slba(),
                    sqe.nlb(),
                );
                let _ = ConnectCmd::parse(&sqe);
                let _ = PropertyCmd::parse(&sqe);
                let d = &rest[layout.data_offset..layout.data_offset + layout.data_len];
                let _ = ConnectData::parse(d);
            }
            _ => {}
        }
        rest = &rest[layout.plen..];
    }
});
