//! PDUs the host sends: the receive buffer, framing and digest checks,
//! and what each PDU type does to the queue pair (ICReq, TermReq, command
//! capsules, H2CData).

use nvmf::digest::{self, DIGEST_LEN};
use nvmf::pdu::{
    self, CommonHeader, DataHeader, FatalError, PduType, Specific, TermStatus, CH_LEN,
};
use nvmf::sqe::Sqe;

use super::qpair::{ConnState, Connection, ReqState};
use crate::ctrlr::status;

/// The receive buffer: complete PDUs are processed in place. An H2CData
/// payload that has not all arrived when its header has is read straight
/// into its request's buffer instead ([`Direct`]): a large write's data
/// then crosses memory once on its way from the socket, not twice.
pub(super) struct RecvBuf {
    pub(super) buf: Vec<u8>,
    pub(super) start: usize,
    pub(super) end: usize,
    /// The payload being read into a request's buffer, if one is.
    pub(super) direct: Option<Direct>,
}

/// An H2CData payload being read from the socket into its request's
/// buffer. While one is, every byte read belongs to it (the host sends a
/// PDU whole before the next), so nothing goes through the receive buffer.
#[derive(Clone, Copy, Debug)]
pub(super) struct Direct {
    slot: u16,
    /// Where in the request's buffer the next byte goes.
    at: usize,
    /// Payload bytes still to come.
    remaining: usize,
    /// The PDU's DATAL, counted as received once all of it is in.
    datal: u32,
}

impl RecvBuf {
    /// A buffer of `len` bytes.
    pub(super) fn new(len: usize) -> Self {
        Self {
            buf: vec![0; len],
            start: 0,
            end: 0,
            direct: None,
        }
    }

    /// Where the next bytes from the socket go.
    pub(super) fn spare(&mut self) -> &mut [u8] {
        &mut self.buf[self.end..]
    }

    /// Makes room for a PDU of `need` bytes starting at `start`.
    fn compact(&mut self, need: usize) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0 && self.start + need > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }
}

/// A fatal error with the header that caused it (for the TermReq).
#[derive(Debug)]
pub(super) struct Fatal {
    pub(super) err: FatalError,
    header: [u8; pdu::TERM_REQ_MAX_DATA],
    header_len: usize,
}

impl Fatal {
    fn new(err: FatalError, header: &[u8]) -> Box<Self> {
        let n = header.len().min(pdu::TERM_REQ_MAX_DATA);
        let mut h = [0u8; pdu::TERM_REQ_MAX_DATA];
        h[..n].copy_from_slice(&header[..n]);
        Box::new(Self {
            err,
            header: h,
            header_len: n,
        })
    }

    /// The header quoted in the TermReq.
    pub(super) fn header(&self) -> &[u8] {
        &self.header[..self.header_len]
    }
}

/// Checks the header digest of the PDU whose header (with its digest) starts
/// `pdu`, when digests were negotiated.
fn check_header_digest(layout: &pdu::Layout, pdu: &[u8]) -> Result<(), Box<Fatal>> {
    let hlen = layout.pdu_type.hlen();
    if layout.header_digest
        && !digest::verify(
            &pdu[..hlen],
            pdu[hlen..hlen + DIGEST_LEN].try_into().expect("4"),
        )
    {
        return Err(Fatal::new(
            FatalError::new(TermStatus::HeaderDigestError, "header digest mismatch"),
            &pdu[..hlen],
        ));
    }
    Ok(())
}

impl Connection {
    /// Where the next bytes from the socket go: the rest of the payload
    /// being read directly ([`Direct`]), else the receive buffer.
    pub(super) fn recv_dest<'a>(&'a mut self, rb: &'a mut RecvBuf) -> &'a mut [u8] {
        if let Some(d) = rb.direct {
            let r = &mut self.slots[d.slot as usize];
            // The request waits for this payload, with its buffer, until
            // it is all in ([`Connection::start_direct`] sets it only for a
            // request that has one): only the end of the queue pair ends
            // that wait. [`Connection::received`] counts what is read here.
            debug_assert_eq!(r.state, ReqState::AwaitingH2cData);
            let buf = r
                .buf
                .as_mut()
                .expect("a direct payload's request keeps its buffer");
            return &mut buf[d.at..d.at + d.remaining];
        }
        rb.spare()
    }

    /// Bytes (or the end, or an error) from the socket, read into
    /// [`Connection::recv_dest`]: every complete PDU is processed. False
    /// when the queue pair must end at once.
    pub(super) fn received(&mut self, r: std::io::Result<usize>, rb: &mut RecvBuf) -> bool {
        match r {
            Ok(0) => self.state = ConnState::HostClosed,
            Err(e) => {
                tracing::debug!(peer = %self.peer, "read: {e}");
                return false;
            }
            Ok(n) => match rb.direct.as_mut() {
                Some(d) => {
                    d.at += n;
                    d.remaining -= n;
                    if d.remaining == 0 {
                        let d = rb.direct.take().expect("direct payload");
                        self.h2c_received(d.slot, d.datal, true);
                    }
                }
                None => {
                    rb.end += n;
                    if let Err(f) = self.process(rb) {
                        self.terminate(&f);
                    }
                }
            },
        }
        true
    }

    /// Runs a parked Connect once `released` says whether the host's
    /// previous controller has drained; then, unless it parked again,
    /// what the host sent after it.
    pub(super) fn unpark(&mut self, released: bool, rb: &mut RecvBuf) {
        self.run_parked(released);
        // A Connect that finds the host's controller draining again parks
        // again; the bound on the wait keeps this finite.
        if !self.is_parked() {
            if let Err(f) = self.process(rb) {
                self.terminate(&f);
            }
        }
    }

    /// Queues the TermReq for `f` and ends the connection.
    pub(super) fn terminate(&mut self, f: &Fatal) {
        if self.target.peer_log().allow(self.peer.ip()) {
            tracing::warn!(peer = %self.peer, "fatal NVMe/TCP error, sending TermReq: {}", f.err);
        }
        self.ctrlr.count_protocol_error();
        self.tx.term_req(&f.err, f.header());
        self.state = ConnState::Terminating;
    }

    /// Processes every complete PDU in `rb`.
    pub(super) fn process(&mut self, rb: &mut RecvBuf) -> Result<(), Box<Fatal>> {
        while rb.end - rb.start >= CH_LEN {
            let at = rb.start;
            let ch = CommonHeader::parse(rb.buf[at..at + CH_LEN].try_into().expect("8 bytes"));
            let layout = ch
                .validate(&self.tx.neg, true)
                .map_err(|e| Fatal::new(e, &rb.buf[at..rb.end.min(at + 128)]))?;
            if rb.end - at < layout.plen {
                if layout.pdu_type == PduType::H2cData
                    && !layout.data_digest
                    && rb.end >= at + layout.data_offset
                {
                    // The header is in, the payload is not: the rest of it
                    // goes straight to its request.
                    self.start_direct(rb, &layout, ch.flags)?;
                    if rb.direct.is_some() {
                        return Ok(());
                    }
                }
                rb.compact(layout.plen);
                return Ok(());
            }
            let pdu = &rb.buf[at..at + layout.plen];
            let hlen = layout.pdu_type.hlen();
            check_header_digest(&layout, pdu)?;
            let spec = pdu::parse_specific(&layout, ch.flags, pdu)
                .map_err(|e| Fatal::new(e, &pdu[..hlen]))?;
            let data = &pdu[layout.data_offset..layout.data_offset + layout.data_len];
            let data_ok = !layout.data_digest || {
                let end = layout.data_offset + layout.data_len;
                digest::verify(data, pdu[end..end + DIGEST_LEN].try_into().expect("4"))
            };
            self.handle_pdu(spec, data, data_ok)
                .map_err(|e| Fatal::new(e, &pdu[..hlen]))?;
            rb.start += layout.plen;
            // A parked Connect holds back everything after it.
            if matches!(self.state, ConnState::Terminating | ConnState::Closing) || self.is_parked()
            {
                return Ok(());
            }
        }
        rb.compact(CH_LEN);
        Ok(())
    }

    fn handle_pdu(&mut self, spec: Specific, data: &[u8], data_ok: bool) -> Result<(), FatalError> {
        match spec {
            Specific::IcReq(req) => {
                self.tx.ic_resp(&req, self.target.opts().max_h2c_data);
                self.state = ConnState::AwaitingConnect;
                Ok(())
            }
            Specific::TermReq(t) => {
                if self.target.peer_log().allow(self.peer.ip()) {
                    tracing::info!(peer = %self.peer, fes = t.fes, fei = t.fei, "host terminated the connection");
                }
                self.state = ConnState::Closing;
                Ok(())
            }
            Specific::CapsuleCmd(raw) => {
                self.command(Sqe(raw), data, data_ok);
                Ok(())
            }
            Specific::Data(d) => self.h2c_data(&d, data, data_ok),
            // The codec only lets host-to-controller types through.
            Specific::IcResp(_) | Specific::CapsuleResp(_) | Specific::R2t(_) => {
                Err(FatalError::new(
                    TermStatus::PduSequenceError,
                    "controller PDU sent by the host",
                ))
            }
        }
    }

    /// Starts reading the payload of the H2CData PDU at `rb.start`, whose
    /// header (with its digest and padding) is in `rb` and whose payload is
    /// not all there, straight into its request's buffer: the part already
    /// received is copied there, the rest is read there
    /// ([`Connection::recv_dest`]). Leaves `rb.direct` unset (the PDU is
    /// then received whole as any other) when the request has no buffer.
    fn start_direct(
        &mut self,
        rb: &mut RecvBuf,
        layout: &pdu::Layout,
        flags: u8,
    ) -> Result<(), Box<Fatal>> {
        let at = rb.start;
        let hlen = layout.pdu_type.hlen();
        check_header_digest(layout, &rb.buf[at..at + layout.data_offset])?;
        // parse_specific reads only the header of a data PDU.
        let Specific::Data(d) = pdu::parse_specific(layout, flags, &rb.buf[at..at + hlen])
            .map_err(|e| Fatal::new(e, &rb.buf[at..at + hlen]))?
        else {
            unreachable!("an H2CData layout parses as data");
        };
        let slot = self
            .h2c_slot(&d)
            .map_err(|e| Fatal::new(e, &rb.buf[at..at + hlen]))?;
        let Some(buf) = self.slots[slot as usize].buf.as_mut() else {
            return Ok(());
        };
        let payload = &rb.buf[at + layout.data_offset..rb.end];
        let to = d.datao as usize;
        buf[to..to + payload.len()].copy_from_slice(payload);
        rb.direct = Some(Direct {
            slot,
            at: to + payload.len(),
            remaining: layout.data_len - payload.len(),
            datal: d.datal,
        });
        rb.start = rb.end;
        rb.compact(CH_LEN);
        Ok(())
    }

    /// The slot of the request `d` carries data for, if `d` is the data it
    /// waits for next.
    fn h2c_slot(&self, d: &DataHeader) -> Result<u16, FatalError> {
        let slot = d.ttag;
        let Some(r) = self
            .slots
            .get(slot as usize)
            .filter(|r| r.state == ReqState::AwaitingH2cData && r.cid == d.cccid)
        else {
            return Err(FatalError {
                status: TermStatus::InvalidHeaderField,
                field_offset: 10,
                reason: "H2CData for no outstanding R2T",
            });
        };
        if d.datao != r.received || d.datao as u64 + d.datal as u64 > r.len as u64 {
            return Err(FatalError::new(
                TermStatus::DataTransferOutOfRange,
                "H2CData outside the solicited range or out of order",
            ));
        }
        Ok(slot)
    }

    fn h2c_data(&mut self, d: &DataHeader, data: &[u8], data_ok: bool) -> Result<(), FatalError> {
        let slot = self.h2c_slot(d)?;
        if let Some(buf) = self.slots[slot as usize].buf.as_mut() {
            let at = d.datao as usize;
            buf[at..at + data.len()].copy_from_slice(data);
        }
        self.h2c_received(slot, d.datal, data_ok);
        Ok(())
    }

    /// Counts `datal` more bytes of `slot`'s data in (damaged unless
    /// `data_ok`); the request runs once all of them are.
    fn h2c_received(&mut self, slot: u16, datal: u32, data_ok: bool) {
        let r = &mut self.slots[slot as usize];
        r.received += datal;
        if !data_ok {
            r.failed = Some(status::TRANSIENT_TRANSPORT_ERROR);
        }
        if r.received == r.len {
            self.data_complete(slot);
        }
    }
}
