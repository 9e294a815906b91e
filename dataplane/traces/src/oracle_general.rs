//! libCacheSim's `oracleGeneral` binary traces: the request-level format
//! libCacheSim converts every trace to, and in which many public cache traces
//! are redistributed (usually zstd-compressed: decompress with `zstd -d`
//! first, this crate reads the raw records).
//!
//! A flat array of 24-byte little-endian records, no header:
//!
//! ```text
//! off size field
//!   0  u32  timestamp          (seconds)
//!   4  u64  obj_id
//!  12  u32  obj_size           (bytes)
//!  16  i64  next_access_vtime  (index of the next request to obj_id, -1 if none)
//! ```
//!
//! # Mapping to block requests
//!
//! The format has no operation, no volume and no byte address, only an object
//! id and a size. This reader maps
//!
//! - `offset = obj_id * id_unit` (default `id_unit` = 1: the id is used as the
//!   offset verbatim), `length = obj_size`;
//! - `op = Read` for every record; `volume = 0`;
//! - `timestamp_ns = timestamp * 10^9`; `next_access_vtime` is validated (it
//!   must be -1 or non-negative) but not kept.
//!
//! `offset = obj_id * obj_size` would be wrong: objects of different sizes
//! would collide. For traces converted *from block traces*, such as the
//! shared `cloudPhysicsIO.oracleGeneral.bin`, `obj_id` is the 512-byte sector
//! number (lbn) and `obj_size` the size of the object's *first* request, so
//! `id_unit = 512` recovers the original byte offsets
//! ([`OracleGeneralReader::with_id_unit`]). For object (CDN, key-value)
//! traces ids are hashes and the default keeps them distinct without overflow;
//! their "offsets" then mean nothing beyond identity, and requests of objects
//! whose ids are closer than their sizes overlap.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::csv;
use crate::error::{Error, ParseErrorKind, Result};
use crate::{read_record, Op, Request};

/// Bytes per record.
pub const RECORD_SIZE: usize = 24;

/// Streaming reader of oracleGeneral traces.
///
/// Errors are fatal: after the first `Err` the iterator yields `None`.
#[derive(Debug)]
pub struct OracleGeneralReader<R> {
    inner: R,
    path: PathBuf,
    id_unit: u64,
    index: u64,
    records: u64,
    skipped: u64,
    done: bool,
}

impl<R: BufRead> OracleGeneralReader<R> {
    /// Reads `inner` with `offset = obj_id`; `path` names the trace in errors.
    pub fn new(inner: R, path: impl Into<PathBuf>) -> Self {
        Self {
            inner,
            path: path.into(),
            id_unit: 1,
            index: 0,
            records: 0,
            skipped: 0,
            done: false,
        }
    }

    /// Maps `offset = obj_id * id_unit` (512 for traces converted from block
    /// traces whose ids are sector numbers). Panics if `id_unit` is 0.
    pub fn with_id_unit(mut self, id_unit: u64) -> Self {
        assert!(id_unit > 0, "id_unit must be positive");
        self.id_unit = id_unit;
        self
    }

    /// The trace's name used in errors.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Requests returned so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Records skipped so far (zero-size objects).
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
        Error::Record {
            path: self.path.clone(),
            index: self.index,
            offset: self.index * RECORD_SIZE as u64,
            kind,
        }
    }

    fn read_next(&mut self) -> Result<Option<Request>> {
        let mut buf = [0u8; RECORD_SIZE];
        loop {
            let n = read_record(&mut self.inner, &mut buf).map_err(|e| Error::io(&self.path, e))?;
            if n == 0 {
                if self.records == 0 && self.skipped == 0 {
                    return Err(Error::Empty {
                        path: self.path.clone(),
                    });
                }
                return Ok(None);
            }
            if n < RECORD_SIZE {
                return Err(self.error(ParseErrorKind::TruncatedRecord {
                    expected: RECORD_SIZE,
                    found: n,
                }));
            }
            let record = decode(&buf);
            if record.next_access_vtime < -1 {
                return Err(self.error(ParseErrorKind::OutOfRange {
                    field: "next_access_vtime",
                    value: record.next_access_vtime.to_string(),
                    reason: "must be -1 or a request index",
                }));
            }
            let offset = csv::scale(
                record.obj_id,
                self.id_unit,
                "obj_id",
                "obj_id * id_unit overflows u64",
            )
            .map_err(|k| self.error(k))?;
            self.index += 1;
            if record.obj_size == 0 {
                self.skipped += 1;
                continue;
            }
            self.records += 1;
            return Ok(Some(Request {
                timestamp_ns: u64::from(record.timestamp) * 1_000_000_000,
                op: Op::Read,
                offset,
                length: record.obj_size,
                volume: 0,
            }));
        }
    }
}

impl<R: BufRead> Iterator for OracleGeneralReader<R> {
    type Item = Result<Request>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_request().transpose()
    }
}

/// One decoded oracleGeneral record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OracleGeneralRecord {
    /// Seconds.
    pub timestamp: u32,
    /// Object id.
    pub obj_id: u64,
    /// Object size in bytes.
    pub obj_size: u32,
    /// Index of the next request to the same object, -1 if none.
    pub next_access_vtime: i64,
}

/// Decodes one record.
pub fn decode(b: &[u8; RECORD_SIZE]) -> OracleGeneralRecord {
    OracleGeneralRecord {
        timestamp: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
        obj_id: u64::from_le_bytes(b[4..12].try_into().expect("8 bytes")),
        obj_size: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
        next_access_vtime: i64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
    }
}

/// Encodes one record (for tests, benches and trace conversion).
pub fn encode(r: &OracleGeneralRecord) -> [u8; RECORD_SIZE] {
    let mut b = [0u8; RECORD_SIZE];
    b[0..4].copy_from_slice(&r.timestamp.to_le_bytes());
    b[4..12].copy_from_slice(&r.obj_id.to_le_bytes());
    b[12..16].copy_from_slice(&r.obj_size.to_le_bytes());
    b[16..24].copy_from_slice(&r.next_access_vtime.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(timestamp: u32, obj_id: u64, obj_size: u32, next: i64) -> OracleGeneralRecord {
        OracleGeneralRecord {
            timestamp,
            obj_id,
            obj_size,
            next_access_vtime: next,
        }
    }

    fn bytes(records: &[OracleGeneralRecord]) -> Vec<u8> {
        records.iter().flat_map(encode).collect()
    }

    #[test]
    fn parses_records() {
        let data = bytes(&[
            rec(5633898, 42932745, 512, -1),
            rec(5633899, 6160447, 4096, 19),
            rec(5633899, 1, 0, -1),
        ]);
        let mut reader = OracleGeneralReader::new(&data[..], "t.oracleGeneral");
        let got: Vec<Request> = reader.by_ref().map(Result::unwrap).collect();
        assert_eq!(
            got,
            [
                Request {
                    timestamp_ns: 5_633_898_000_000_000,
                    op: Op::Read,
                    offset: 42932745,
                    length: 512,
                    volume: 0,
                },
                Request {
                    timestamp_ns: 5_633_899_000_000_000,
                    op: Op::Read,
                    offset: 6160447,
                    length: 4096,
                    volume: 0,
                }
            ]
        );
        assert_eq!(reader.skipped(), 1);

        let scaled: Vec<Request> = OracleGeneralReader::new(&data[..], "t")
            .with_id_unit(512)
            .map(Result::unwrap)
            .collect();
        assert_eq!(scaled[0].offset, 42932745 * 512);
    }

    #[test]
    fn rejects_malformed_records() {
        let data = bytes(&[rec(1, 2, 3, -1), rec(1, 2, 3, -1)]);
        let got: Vec<_> = OracleGeneralReader::new(&data[..40], "t.bin").collect();
        assert_eq!(
            got.last().unwrap().as_ref().unwrap_err().to_string(),
            "t.bin: record 1 (byte offset 24): truncated record: 16 of 24 bytes"
        );

        let data = bytes(&[rec(1, 2, 3, -1), rec(1, 2, 3, -7)]);
        let got: Vec<_> = OracleGeneralReader::new(&data[..], "t.bin").collect();
        assert_eq!(
            got.last().unwrap().as_ref().unwrap_err().to_string(),
            "t.bin: record 1 (byte offset 24): field next_access_vtime: value -7 out of range: must be -1 or a request index"
        );

        let data = bytes(&[rec(1, u64::MAX, 3, -1)]);
        let got: Vec<_> = OracleGeneralReader::new(&data[..], "t.bin")
            .with_id_unit(512)
            .collect();
        assert!(got[0].is_err());

        let got: Vec<_> = OracleGeneralReader::new(&[][..], "t.bin").collect();
        assert_eq!(
            got[0].as_ref().unwrap_err().to_string(),
            "t.bin: trace contains no requests"
        );
    }
}
