//! Alibaba Cloud block traces (the 2020 "block-traces" release of Alibaba's
//! cloud disk service, about 1000 virtual disks over one month).
//!
//! csv without header, five fields:
//!
//! ```text
//! device_id,opcode,offset,length,timestamp
//! 419,W,8792731648,16384,1577808144228654
//! ```
//!
//! - `device_id`: the volume id.
//! - `opcode`: `R` or `W`.
//! - `offset`, `length`: bytes.
//! - `timestamp`: Unix time in microseconds.

use crate::csv::{self, CsvFormat, CsvReader};
use crate::error::ParseErrorKind;
use crate::{Format, Op, Request};

/// Streaming reader of Alibaba block traces.
pub type AlibabaReader<R> = CsvReader<R, AlibabaParser>;

/// Line parser of Alibaba block traces.
#[derive(Debug, Default, Clone, Copy)]
pub struct AlibabaParser;

impl CsvFormat for AlibabaParser {
    const FORMAT: Format = Format::Alibaba;

    fn is_header(line: &[u8]) -> bool {
        csv::header_is(
            line,
            &["device_id", "opcode", "offset", "length", "timestamp"],
        )
    }

    fn parse_line(&mut self, line: &[u8]) -> Result<Option<Request>, ParseErrorKind> {
        let [device, op, offset, length, ts] = csv::split_fields::<5>(line)?;
        let volume = csv::parse_u32(device, "device_id")?;
        let op = match op {
            b"R" | b"r" => Op::Read,
            b"W" | b"w" => Op::Write,
            _ => {
                return Err(ParseErrorKind::UnknownOp(
                    String::from_utf8_lossy(op).into_owned(),
                ))
            }
        };
        let offset = csv::parse_u64(offset, "offset")?;
        let length = csv::length_u32(csv::parse_u64(length, "length")?, "length")?;
        let micros = csv::parse_u64(ts, "timestamp")?;
        let timestamp_ns = csv::scale(micros, 1_000, "timestamp", "overflows u64 nanoseconds")?;
        Ok(Request::with_data(timestamp_ns, op, offset, length, volume))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<crate::error::Result<Request>> {
        AlibabaReader::new(text.as_bytes(), "ali.csv").collect()
    }

    #[test]
    fn parses_records() {
        let text = "419,W,8792731648,16384,1577808144228654\n\
                    3,R,0,4096,1577808144228655\n";
        let got: Vec<Request> = read(text).into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got[0],
            Request {
                timestamp_ns: 1_577_808_144_228_654_000,
                op: Op::Write,
                offset: 8792731648,
                length: 16384,
                volume: 419,
            }
        );
        assert_eq!((got[1].op, got[1].volume), (Op::Read, 3));
    }

    #[test]
    fn rejects_malformed_lines() {
        let cases = [
            (
                "1,R,0,4096\n",
                "ali.csv:1: expected 5 comma-separated fields, found 4",
            ),
            (
                "1,R,0,4096,5,6\n",
                "ali.csv:1: expected 5 comma-separated fields, found 6",
            ),
            (
                "1,R,-5,4096,5\n",
                "ali.csv:1: field offset: not a number: \"-5\"",
            ),
            (
                "1,D,0,4096,5\n",
                "ali.csv:1: unknown operation \"D\" (expected read or write)",
            ),
            ("", "ali.csv: trace contains no requests"),
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
