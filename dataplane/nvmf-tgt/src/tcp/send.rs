//! PDUs the target sends: capsule responses, C2HData, R2T, ICResp and
//! TermReq, encoded into the queue pair's [`Outbox`] with the digests and
//! data alignment the connection negotiated.

use nvmf::cqe::Cqe;
use nvmf::digest::{self, DIGEST_LEN};
use nvmf::pdu::{self, DataHeader, FatalError, IcResp, Negotiated, PduType};

use super::outbox::Outbox;

/// The sending half of a queue pair: what was negotiated and the output
/// batch.
pub(super) struct Tx {
    /// PDUs queued for the next write.
    pub(super) out: Outbox,
    /// Digests and sizes agreed at ICReq.
    pub(super) neg: Negotiated,
    /// Host PDU data alignment for data we send.
    hpda: u8,
}

impl Tx {
    /// Nothing negotiated yet; PDUs up to `max_plen` bytes are accepted.
    pub(super) fn new(max_plen: u32) -> Self {
        Self {
            out: Outbox::default(),
            neg: Negotiated {
                max_plen,
                ..Negotiated::default()
            },
            hpda: 0,
        }
    }

    /// Records what ICReq asked for and queues the ICResp.
    pub(super) fn ic_resp(&mut self, req: &pdu::IcReq, maxh2cdata: u32) {
        self.hpda = req.hpda;
        self.neg.initialized = true;
        self.neg.header_digest = req.header_digest;
        self.neg.data_digest = req.data_digest;
        self.neg.receive_pda = 0;
        let resp = IcResp {
            pfv: pdu::PFV_1_0,
            cpda: 0,
            header_digest: req.header_digest,
            data_digest: req.data_digest,
            maxh2cdata,
        };
        self.out
            .put_with(pdu::IC_HLEN, |b| pdu::encode_ic_resp(b, &resp));
    }

    /// Queues a response capsule carrying `cqe` (ids already set).
    pub(super) fn capsule_resp(&mut self, cqe: &Cqe) {
        let hd = self.neg.header_digest;
        let raw = cqe.encode();
        self.out.put_with(pdu::CAPSULE_RESP_HLEN + DIGEST_LEN, |b| {
            pdu::encode_capsule_resp(b, &raw, hd)
        });
    }

    /// Queues the header of one C2HData PDU carrying all `len` bytes of
    /// `cid`'s data, with the SUCCESS flag when `success`.
    pub(super) fn c2h_header(&mut self, cid: u16, len: u32, success: bool) {
        let d = DataHeader {
            cccid: cid,
            ttag: 0,
            datao: 0,
            datal: len,
            last: true,
            success,
        };
        let (hd, dd, pda) = (self.neg.header_digest, self.neg.data_digest, self.hpda);
        self.out.put_with(256, |b| {
            pdu::encode_data_header(b, PduType::C2hData, &d, hd, dd, pda)
        });
    }

    /// Queues C2HData for `cid` carrying `data` (copied) and its digest.
    pub(super) fn c2h_data(&mut self, cid: u16, data: &[u8], success: bool) {
        self.c2h_header(cid, data.len() as u32, success);
        self.out.put(data);
        if self.neg.data_digest {
            self.out.put(&digest::crc32c(data).to_le_bytes());
        }
    }

    /// Queues an R2T for the whole `len`-byte transfer of `cid`, tagged
    /// `ttag`.
    pub(super) fn r2t(&mut self, cid: u16, ttag: u16, len: u32) {
        let r2t = pdu::R2t {
            cccid: cid,
            ttag,
            r2to: 0,
            r2tl: len,
        };
        let hd = self.neg.header_digest;
        self.out.put_with(pdu::SMALL_HLEN + DIGEST_LEN, |b| {
            pdu::encode_r2t(b, &r2t, hd)
        });
    }

    /// Queues a C2HTermReq for `err`, quoting `header`.
    pub(super) fn term_req(&mut self, err: &FatalError, header: &[u8]) {
        self.out
            .put_with(pdu::SMALL_HLEN + pdu::TERM_REQ_MAX_DATA, |b| {
                pdu::encode_term_req(b, false, err, header)
            });
    }
}
