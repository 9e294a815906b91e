//! Tencent Cloud Block Storage (CBS) traces (SNIA IOTTA, "Tencent CBS", 2018:
//! thousands of cloud volumes over about ten days).
//!
//! csv without header, five fields:
//!
//! ```text
//! Timestamp,Offset,Size,IOType,VolumeID
//! 1538323200,12003600,8,1,1283
//! ```
//!
//! - `Timestamp`: Unix time in seconds (the trace has one-second resolution).
//! - `Offset`, `Size`: in 512-byte sectors; converted to bytes.
//! - `IOType`: `0` read, `1` write.
//! - `VolumeID`: the volume id.

use crate::csv::{self, CsvFormat, CsvReader};
use crate::error::ParseErrorKind;
use crate::{Format, Op, Request};

/// Sector size of the `Offset` and `Size` fields.
pub const SECTOR: u64 = 512;

/// Streaming reader of Tencent CBS traces.
pub type TencentReader<R> = CsvReader<R, TencentParser>;

/// Line parser of Tencent CBS traces.
#[derive(Debug, Default, Clone, Copy)]
pub struct TencentParser;

impl CsvFormat for TencentParser {
    const FORMAT: Format = Format::TencentCbs;

    fn is_header(line: &[u8]) -> bool {
        csv::header_is(line, &["Timestamp", "Offset", "Size", "IOType", "VolumeID"])
    }

    fn parse_line(&mut self, line: &[u8]) -> Result<Option<Request>, ParseErrorKind> {
        let [ts, offset, size, op, volume] = csv::split_fields::<5>(line)?;
        let secs = csv::parse_u64(ts, "Timestamp")?;
        let timestamp_ns = csv::scale(
            secs,
            1_000_000_000,
            "Timestamp",
            "overflows u64 nanoseconds",
        )?;
        let offset = csv::scale(
            csv::parse_u64(offset, "Offset")?,
            SECTOR,
            "Offset",
            "byte offset overflows u64",
        )?;
        let sectors = csv::parse_u64(size, "Size")?;
        let length = csv::length_u32(
            csv::scale(sectors, SECTOR, "Size", "byte length overflows u64")?,
            "Size",
        )?;
        let op = match op {
            b"0" => Op::Read,
            b"1" => Op::Write,
            _ => {
                return Err(ParseErrorKind::UnknownOp(
                    String::from_utf8_lossy(op).into_owned(),
                ))
            }
        };
        let volume = csv::parse_u32(volume, "VolumeID")?;
        Ok(Request::with_data(timestamp_ns, op, offset, length, volume))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<crate::error::Result<Request>> {
        TencentReader::new(text.as_bytes(), "cbs.csv").collect()
    }

    #[test]
    fn parses_records_in_sectors() {
        let text = "1538323200,12003600,8,1,1283\n1538323201,0,1,0,7\n";
        let got: Vec<Request> = read(text).into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got,
            [
                Request {
                    timestamp_ns: 1_538_323_200_000_000_000,
                    op: Op::Write,
                    offset: 12003600 * 512,
                    length: 4096,
                    volume: 1283,
                },
                Request {
                    timestamp_ns: 1_538_323_201_000_000_000,
                    op: Op::Read,
                    offset: 0,
                    length: 512,
                    volume: 7,
                }
            ]
        );
    }

    #[test]
    fn rejects_malformed_lines() {
        let cases = [
            (
                "1,2,3,1\n",
                "cbs.csv:1: expected 5 comma-separated fields, found 4",
            ),
            ("1,2,x,1,1\n", "cbs.csv:1: field Size: not a number: \"x\""),
            (
                "1,2,3,2,1\n",
                "cbs.csv:1: unknown operation \"2\" (expected read or write)",
            ),
            (
                "1,2,8388608,1,1\n",
                "cbs.csv:1: field Size: value 4294967296 out of range: request larger than 4 GiB",
            ),
            ("", "cbs.csv: trace contains no requests"),
        ];
        for (text, message) in cases {
            let got = read(text);
            assert_eq!(
                got.last().unwrap().as_ref().unwrap_err().to_string(),
                message
            );
        }
    }
}
