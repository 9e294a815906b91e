//! CloudPhysics block traces (Waldspurger et al., "Efficient MRC Construction
//! with SHARDS", FAST'15: 106 week-long VMware virtual-disk traces), in the
//! two forms they circulate in: the original VMware `vscsiStats` binary
//! ("vscsi") and a csv export of it. One file is one virtual disk, so every
//! request gets volume id 0.
//!
//! # vscsi binary
//!
//! A flat array of little-endian records, no file header. The layout version
//! is recognised from the first record, as libCacheSim's vscsi reader does:
//! version 2 if the high byte of the `u16` at byte 2 is 2, otherwise version 1
//! if the high byte of the `u16` at byte 14 is 1.
//!
//! ```text
//! vscsi1, 32 bytes                      vscsi2, 40 bytes
//! off size field                         off size field
//!   0  u32  sn   (serial number)           0  u16  cmd  (SCSI opcode)
//!   4  u32  len  (bytes)                   2  u16  ver  (0x02xx)
//!   8  u32  nSG  (scatter-gather entries)  4  u32  sn
//!  12  u16  cmd  (SCSI opcode)             8  u32  len  (bytes)
//!  14  u16  ver  (0x01xx)                 12  u32  nSG
//!  16  u64  lbn  (512-byte sectors)       16  u64  lbn  (512-byte sectors)
//!  24  u64  ts   (microseconds)           24  u64  ts   (microseconds)
//!                                         32  u64  rt   (response time, µs)
//! ```
//!
//! # csv
//!
//! ```text
//! Version,time,op,size,lbn
//! 1,5633898,2a,512,42932745
//! ```
//!
//! `Version` is the vscsi layout version, `time` is the vscsi timestamp in
//! whole seconds (decimals accepted), `op` the SCSI opcode in hex, `size`
//! bytes and `lbn` 512-byte sectors.
//!
//! # Operations
//!
//! Only READ and WRITE commands (6, 10, 12 and 16-byte CDBs) move data;
//! everything else (SYNCHRONIZE CACHE, INQUIRY, UNMAP, ...) is well-formed but
//! skipped and counted, so that a simulator sees only data transfers.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::csv::{self, CsvFormat, CsvReader};
use crate::error::{Error, ParseErrorKind, Result};
use crate::{read_record, Format, Op, Request};

/// Sector size of `lbn`.
pub const SECTOR: u64 = 512;

/// Maps a SCSI opcode to a data operation, `None` for commands that move no
/// data through the cache.
pub fn scsi_op(opcode: u16) -> Option<Op> {
    match opcode {
        // READ(6), READ(10), READ(12), READ(16)
        0x08 | 0x28 | 0xa8 | 0x88 => Some(Op::Read),
        // WRITE(6), WRITE(10), WRITE(12), WRITE(16)
        0x0a | 0x2a | 0xaa | 0x8a => Some(Op::Write),
        _ => None,
    }
}

/// Streaming reader of CloudPhysics csv traces.
pub type CloudPhysicsCsvReader<R> = CsvReader<R, CloudPhysicsCsvParser>;

/// Line parser of CloudPhysics csv traces.
#[derive(Debug, Default, Clone, Copy)]
pub struct CloudPhysicsCsvParser;

impl CsvFormat for CloudPhysicsCsvParser {
    const FORMAT: Format = Format::CloudPhysicsCsv;

    fn is_header(line: &[u8]) -> bool {
        csv::header_is(line, &["Version", "time", "op", "size", "lbn"])
    }

    fn parse_line(&mut self, line: &[u8]) -> Result<Option<Request>, ParseErrorKind> {
        let [version, ts, op, size, lbn] = csv::split_fields::<5>(line)?;
        csv::parse_u64(version, "Version")?;
        let timestamp_ns = csv::parse_seconds_ns(ts, "time")?;
        let opcode = csv::parse_hex_u8(op, "op")?;
        let length = csv::length_u32(csv::parse_u64(size, "size")?, "size")?;
        let offset = csv::scale(
            csv::parse_u64(lbn, "lbn")?,
            SECTOR,
            "lbn",
            "byte offset overflows u64",
        )?;
        let Some(op) = scsi_op(u16::from(opcode)) else {
            return Ok(None);
        };
        Ok(Request::with_data(timestamp_ns, op, offset, length, 0))
    }
}

/// Layout version of a vscsi trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VscsiVersion {
    /// 32-byte records.
    V1,
    /// 40-byte records with a response time.
    V2,
}

impl VscsiVersion {
    /// Bytes per record.
    pub const fn record_size(self) -> usize {
        match self {
            Self::V1 => 32,
            Self::V2 => 40,
        }
    }

    /// The version number stored in each record's `ver` high byte.
    pub const fn number(self) -> u8 {
        match self {
            Self::V1 => 1,
            Self::V2 => 2,
        }
    }

    /// Recognises the version from the first 32 bytes of a record.
    pub fn detect(record: &[u8]) -> Option<Self> {
        if record.len() < 32 {
            return None;
        }
        if record[3] == 2 {
            Some(Self::V2)
        } else if record[15] == 1 {
            Some(Self::V1)
        } else {
            None
        }
    }
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Streaming reader of CloudPhysics vscsi binary traces (both layouts).
///
/// Errors are fatal: after the first `Err` the iterator yields `None`.
#[derive(Debug)]
pub struct VscsiReader<R> {
    inner: R,
    path: PathBuf,
    version: Option<VscsiVersion>,
    index: u64,
    records: u64,
    skipped: u64,
    done: bool,
}

impl<R: BufRead> VscsiReader<R> {
    /// Reads `inner`; `path` names the trace in error messages.
    pub fn new(inner: R, path: impl Into<PathBuf>) -> Self {
        Self {
            inner,
            path: path.into(),
            version: None,
            index: 0,
            records: 0,
            skipped: 0,
            done: false,
        }
    }

    /// The layout version, known once the first record has been read.
    pub fn version(&self) -> Option<VscsiVersion> {
        self.version
    }

    /// The trace's name used in errors.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Requests returned so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Well-formed records skipped so far (commands other than READ/WRITE, or
    /// zero length).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The next request, `Ok(None)` at the end of the trace.
    pub fn next_request(&mut self) -> Result<Option<Request>> {
        if self.done {
            return Ok(None);
        }
        let result = self.read_next();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    fn error(&self, kind: ParseErrorKind) -> Error {
        let size = self.version.map_or(32, VscsiVersion::record_size) as u64;
        Error::Record {
            path: self.path.clone(),
            index: self.index,
            offset: self.index * size,
            kind,
        }
    }

    fn read_next(&mut self) -> Result<Option<Request>> {
        let mut buf = [0u8; 40];
        loop {
            let version = match self.version {
                Some(v) => v,
                None => {
                    // The first record decides the layout; 32 bytes (the
                    // smaller record) are enough to tell.
                    let n = read_record(&mut self.inner, &mut buf[..32])
                        .map_err(|e| Error::io(&self.path, e))?;
                    if n == 0 {
                        return Err(Error::Empty {
                            path: self.path.clone(),
                        });
                    }
                    if n < 32 {
                        return Err(self.error(ParseErrorKind::TruncatedRecord {
                            expected: 32,
                            found: n,
                        }));
                    }
                    let v = VscsiVersion::detect(&buf[..32])
                        .ok_or_else(|| self.error(ParseErrorKind::UnknownVersion))?;
                    self.version = Some(v);
                    if v == VscsiVersion::V2 {
                        let n = read_record(&mut self.inner, &mut buf[32..40])
                            .map_err(|e| Error::io(&self.path, e))?;
                        if n < 8 {
                            return Err(self.error(ParseErrorKind::TruncatedRecord {
                                expected: 40,
                                found: 32 + n,
                            }));
                        }
                    }
                    v
                }
            };
            let size = version.record_size();
            if self.index > 0 {
                let n = read_record(&mut self.inner, &mut buf[..size])
                    .map_err(|e| Error::io(&self.path, e))?;
                if n == 0 {
                    if self.records == 0 && self.skipped == 0 {
                        return Err(Error::Empty {
                            path: self.path.clone(),
                        });
                    }
                    return Ok(None);
                }
                if n < size {
                    return Err(self.error(ParseErrorKind::TruncatedRecord {
                        expected: size,
                        found: n,
                    }));
                }
            }
            let record = &buf[..size];
            let (found_version, cmd, len, lbn, ts) = match version {
                VscsiVersion::V1 => (
                    record[15],
                    le_u16(record, 12),
                    le_u32(record, 4),
                    le_u64(record, 16),
                    le_u64(record, 24),
                ),
                VscsiVersion::V2 => (
                    record[3],
                    le_u16(record, 0),
                    le_u32(record, 8),
                    le_u64(record, 16),
                    le_u64(record, 24),
                ),
            };
            if found_version != version.number() {
                return Err(self.error(ParseErrorKind::BadVersion {
                    expected: version.number(),
                    found: found_version,
                }));
            }
            let offset = csv::scale(lbn, SECTOR, "lbn", "byte offset overflows u64")
                .map_err(|k| self.error(k))?;
            let timestamp_ns = csv::scale(ts, 1_000, "ts", "overflows u64 nanoseconds")
                .map_err(|k| self.error(k))?;
            self.index += 1;
            match scsi_op(cmd) {
                Some(op) if len > 0 => {
                    self.records += 1;
                    return Ok(Some(Request {
                        timestamp_ns,
                        op,
                        offset,
                        length: len,
                        volume: 0,
                    }));
                }
                _ => self.skipped += 1,
            }
        }
    }
}

impl<R: BufRead> Iterator for VscsiReader<R> {
    type Item = Result<Request>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_request().transpose()
    }
}

/// Encodes one vscsi record (for tests, benches and trace conversion).
pub fn encode_vscsi(version: VscsiVersion, opcode: u16, request: &Request) -> Vec<u8> {
    let mut out = vec![0u8; version.record_size()];
    let lbn = request.offset / SECTOR;
    let ts = request.timestamp_ns / 1_000;
    match version {
        VscsiVersion::V1 => {
            out[4..8].copy_from_slice(&request.length.to_le_bytes());
            out[8..12].copy_from_slice(&1u32.to_le_bytes());
            out[12..14].copy_from_slice(&opcode.to_le_bytes());
            out[14..16].copy_from_slice(&0x0100u16.to_le_bytes());
        }
        VscsiVersion::V2 => {
            out[0..2].copy_from_slice(&opcode.to_le_bytes());
            out[2..4].copy_from_slice(&0x0200u16.to_le_bytes());
            out[8..12].copy_from_slice(&request.length.to_le_bytes());
            out[12..16].copy_from_slice(&1u32.to_le_bytes());
        }
    }
    out[16..24].copy_from_slice(&lbn.to_le_bytes());
    out[24..32].copy_from_slice(&ts.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(ts_us: u64, op: Op, lbn: u64, len: u32) -> Request {
        Request {
            timestamp_ns: ts_us * 1_000,
            op,
            offset: lbn * SECTOR,
            length: len,
            volume: 0,
        }
    }

    #[test]
    fn csv_parses_records_and_skips_non_data_commands() {
        let text = "Version,time,op,size,lbn\n\
                    1,5633898,2a,512,42932745\n\
                    1,5633899,35,0,0\n\
                    1,5633899,28,6656,40409911\n";
        let mut reader = CloudPhysicsCsvReader::new(text.as_bytes(), "cp.csv");
        let got: Vec<Request> = reader.by_ref().map(Result::unwrap).collect();
        assert_eq!(
            got,
            [
                req(5_633_898_000_000, Op::Write, 42932745, 512),
                req(5_633_899_000_000, Op::Read, 40409911, 6656)
            ]
        );
        assert_eq!(reader.skipped(), 1);
    }

    #[test]
    fn csv_rejects_malformed_lines() {
        let cases = [
            (
                "1,5,2a,512\n",
                "cp.csv:1: expected 5 comma-separated fields, found 4",
            ),
            ("1,5,zz,512,1\n", "cp.csv:1: field op: not a number: \"zz\""),
            (
                "1,5,2a,5x,1\n",
                "cp.csv:1: field size: not a number: \"5x\"",
            ),
            (
                "Version,time,op,size,lbn\n",
                "cp.csv: trace contains no requests",
            ),
        ];
        for (text, message) in cases {
            let got: Vec<_> = CloudPhysicsCsvReader::new(text.as_bytes(), "cp.csv").collect();
            assert_eq!(
                got.last().unwrap().as_ref().unwrap_err().to_string(),
                message
            );
        }
    }

    fn fixture(version: VscsiVersion) -> (Vec<u8>, Vec<Request>) {
        let requests = vec![
            req(5_633_898_368_802, Op::Write, 42932745, 512),
            req(5_633_898_611_441, Op::Read, 42932746, 4096),
            req(5_633_898_745_540, Op::Write, 7, 69632),
        ];
        let mut bytes = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            let opcode = match (r.op, i) {
                (Op::Read, _) => 0x28,
                (Op::Write, 0) => 0x2a,
                (Op::Write, _) => 0x8a,
            };
            bytes.extend(encode_vscsi(version, opcode, r));
            if i == 0 {
                // A SYNCHRONIZE CACHE between data commands.
                bytes.extend(encode_vscsi(version, 0x35, &req(0, Op::Read, 0, 0)));
            }
        }
        (bytes, requests)
    }

    #[test]
    fn vscsi_both_layouts_round_trip() {
        for version in [VscsiVersion::V1, VscsiVersion::V2] {
            let (bytes, requests) = fixture(version);
            let mut reader = VscsiReader::new(&bytes[..], "t.vscsi");
            let got: Vec<Request> = reader.by_ref().map(Result::unwrap).collect();
            assert_eq!(got, requests, "{version:?}");
            assert_eq!(reader.version(), Some(version));
            assert_eq!(reader.skipped(), 1);
        }
    }

    #[test]
    fn vscsi_matches_the_cloudphysics_sample_bytes() {
        // The first record of the shared cloudPhysicsIO.vscsi sample, written
        // down byte for byte, and its csv twin `1,5633898,2a,512,42932745`.
        let record: [u8; 32] = [
            0xf4, 0x00, 0x00, 0x80, 0x00, 0x02, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2a, 0x00,
            0x00, 0x01, 0x09, 0x1a, 0x8f, 0x02, 0x00, 0x00, 0x00, 0x00, 0x22, 0xcf, 0x82, 0xbe,
            0x1f, 0x05, 0x00, 0x00,
        ];
        let got: Vec<Request> = VscsiReader::new(&record[..], "s.vscsi")
            .map(Result::unwrap)
            .collect();
        assert_eq!(got, [req(5_633_898_368_802, Op::Write, 42932745, 512)]);
    }

    #[test]
    fn vscsi_rejects_malformed_records() {
        let (bytes, _) = fixture(VscsiVersion::V1);
        let truncated = &bytes[..bytes.len() - 5];
        let got: Vec<_> = VscsiReader::new(truncated, "t.vscsi").collect();
        assert_eq!(
            got.last().unwrap().as_ref().unwrap_err().to_string(),
            "t.vscsi: record 3 (byte offset 96): truncated record: 27 of 32 bytes"
        );

        let mut corrupt = bytes.clone();
        corrupt[32 + 15] = 7;
        let got: Vec<_> = VscsiReader::new(&corrupt[..], "t.vscsi").collect();
        assert_eq!(
            got.last().unwrap().as_ref().unwrap_err().to_string(),
            "t.vscsi: record 1 (byte offset 32): record layout version 7 differs from the trace's version 1"
        );

        let got: Vec<_> = VscsiReader::new(&[0u8; 32][..], "t.vscsi").collect();
        assert_eq!(
            got[0].as_ref().unwrap_err().to_string(),
            "t.vscsi: record 0 (byte offset 0): no known vscsi record layout version (1 or 2)"
        );

        let got: Vec<_> = VscsiReader::new(&bytes[..10], "t.vscsi").collect();
        assert!(got[0]
            .as_ref()
            .unwrap_err()
            .to_string()
            .ends_with("truncated record: 10 of 32 bytes"));

        let got: Vec<_> = VscsiReader::new(&[][..], "t.vscsi").collect();
        assert_eq!(
            got[0].as_ref().unwrap_err().to_string(),
            "t.vscsi: trace contains no requests"
        );
    }
}
