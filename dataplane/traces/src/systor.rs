//! Systor'17 block traces (SNIA IOTTA, "SYSTOR '17 Traces": enterprise virtual
//! desktop infrastructure LUNs, 2016).
//!
//! csv, usually gzip-compressed (`.csv.gz`, read transparently by
//! [`crate::TraceReader`]), with a header line and six fields:
//!
//! ```text
//! Timestamp,Response,IOType,LUN,Offset,Size
//! 1455591804.310701000,0.006475000,R,0,203468398592,32768
//! ```
//!
//! - `Timestamp`: Unix time in seconds with nine decimals; parsed exactly
//!   (no floating point) into nanoseconds. Lines are *not* sorted by time
//!   (the trace is ordered by completion): callers that need order must sort.
//! - `Response`: response time in seconds; validated, not kept.
//! - `IOType`: `R` or `W`.
//! - `LUN`: the volume id.
//! - `Offset`, `Size`: bytes.

use crate::csv::{self, CsvFormat, CsvReader};
use crate::error::ParseErrorKind;
use crate::{Format, Op, Request};

/// Streaming reader of Systor'17 csv traces.
pub type SystorReader<R> = CsvReader<R, SystorParser>;

/// Line parser of Systor'17 traces.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystorParser;

impl CsvFormat for SystorParser {
    const FORMAT: Format = Format::Systor17;

    fn is_header(line: &[u8]) -> bool {
        csv::header_is(
            line,
            &["Timestamp", "Response", "IOType", "LUN", "Offset", "Size"],
        )
    }

    fn parse_line(&mut self, line: &[u8]) -> Result<Option<Request>, ParseErrorKind> {
        let [ts, response, op, lun, offset, size] = csv::split_fields::<6>(line)?;
        let timestamp_ns = csv::parse_seconds_ns(ts, "Timestamp")?;
        csv::parse_seconds_ns(response, "Response")?;
        let op = match op {
            b"R" | b"r" => Op::Read,
            b"W" | b"w" => Op::Write,
            _ => {
                return Err(ParseErrorKind::UnknownOp(
                    String::from_utf8_lossy(op).into_owned(),
                ))
            }
        };
        let volume = csv::parse_u32(lun, "LUN")?;
        let offset = csv::parse_u64(offset, "Offset")?;
        let length = csv::length_u32(csv::parse_u64(size, "Size")?, "Size")?;
        Ok(Request::with_data(timestamp_ns, op, offset, length, volume))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<crate::error::Result<Request>> {
        SystorReader::new(text.as_bytes(), "systor.csv").collect()
    }

    #[test]
    fn parses_records() {
        let text = "Timestamp,Response,IOType,LUN,Offset,Size\n\
                    1455591804.310701000,0.006475000,R,0,203468398592,32768\n\
                    1455591804.325909,0.000170000,W,3,3772221901312,4096\n";
        let got: Vec<Request> = read(text).into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got,
            [
                Request {
                    timestamp_ns: 1_455_591_804_310_701_000,
                    op: Op::Read,
                    offset: 203468398592,
                    length: 32768,
                    volume: 0,
                },
                Request {
                    timestamp_ns: 1_455_591_804_325_909_000,
                    op: Op::Write,
                    offset: 3772221901312,
                    length: 4096,
                    volume: 3,
                }
            ]
        );
    }

    #[test]
    fn header_is_optional() {
        let got = read("1.5,0.1,W,1,512,512\n");
        assert_eq!(got[0].as_ref().unwrap().timestamp_ns, 1_500_000_000);
        // Blank lines before the header do not hide it.
        let got = read("\n\nTimestamp,Response,IOType,LUN,Offset,Size\n1.5,0.1,W,1,512,512\n");
        assert_eq!(got.len(), 1);
        assert!(got[0].is_ok());
    }

    #[test]
    fn rejects_malformed_lines() {
        let cases = [
            (
                "Timestamp,Response,IOType,LUN,Offset,Size\n1.0,0.1,R,0,4096\n",
                "systor.csv:2: expected 6 comma-separated fields, found 5",
            ),
            (
                "1.0,0.1,R,0,4096,abc\n",
                "systor.csv:1: field Size: not a number: \"abc\"",
            ),
            (
                "1.0,0.1,X,0,4096,512\n",
                "systor.csv:1: unknown operation \"X\" (expected read or write)",
            ),
            (
                "1.0.0,0.1,R,0,4096,512\n",
                "systor.csv:1: field Timestamp: not a number: \"1.0.0\"",
            ),
            ("", "systor.csv: trace contains no requests"),
            (
                "Timestamp,Response,IOType,LUN,Offset,Size\n",
                "systor.csv: trace contains no requests",
            ),
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
