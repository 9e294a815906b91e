//! MSR Cambridge block traces (SNIA IOTTA, "MSR Cambridge Traces", 2007).
//!
//! One csv file per volume, no header, seven fields:
//!
//! ```text
//! Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime
//! 128166372003061629,hm,0,Read,7014609920,24576,41286
//! ```
//!
//! - `Timestamp`: Windows FILETIME, 100 ns ticks since 1601-01-01 UTC; converted
//!   to nanoseconds since the Unix epoch so that all formats share one clock.
//! - `Hostname`, `DiskNumber`: the volume (`hm_0` is host `hm`, disk 0). Each
//!   distinct pair gets a small volume id in order of first appearance, so
//!   ids are stable for a given file; [`MsrParser::volume_names`] maps them back.
//! - `Type`: `Read` or `Write`.
//! - `Offset`, `Size`: bytes.
//! - `ResponseTime`: 100 ns ticks; validated but not kept (the simulator
//!   computes its own latencies).

use crate::csv::{self, CsvFormat, CsvReader};
use crate::error::ParseErrorKind;
use crate::{Format, Op, Request};

/// FILETIME ticks between 1601-01-01 and 1970-01-01.
const FILETIME_UNIX_EPOCH: u64 = 116_444_736_000_000_000;

/// Streaming reader of MSR Cambridge csv traces.
pub type MsrReader<R> = CsvReader<R, MsrParser>;

/// Line parser of MSR Cambridge traces; keeps the host/disk → volume id table.
#[derive(Debug, Default)]
pub struct MsrParser {
    volumes: Vec<(Box<[u8]>, u32)>,
    // Traces are one volume per file, so remembering the last match makes the
    // lookup a single comparison in practice.
    last: usize,
}

impl MsrParser {
    /// Volume names (`host_disk`, as MSR names its files) indexed by the
    /// volume ids this parser assigned.
    pub fn volume_names(&self) -> Vec<String> {
        self.volumes
            .iter()
            .map(|(host, disk)| format!("{}_{disk}", String::from_utf8_lossy(host)))
            .collect()
    }

    fn volume_id(&mut self, host: &[u8], disk: u32) -> u32 {
        if let Some((h, d)) = self.volumes.get(self.last) {
            if *d == disk && **h == *host {
                return self.last as u32;
            }
        }
        let index = match self
            .volumes
            .iter()
            .position(|(h, d)| *d == disk && **h == *host)
        {
            Some(i) => i,
            None => {
                self.volumes.push((host.into(), disk));
                self.volumes.len() - 1
            }
        };
        self.last = index;
        index as u32
    }
}

impl CsvFormat for MsrParser {
    const FORMAT: Format = Format::MsrCambridge;

    fn is_header(line: &[u8]) -> bool {
        csv::header_is(
            line,
            &[
                "Timestamp",
                "Hostname",
                "DiskNumber",
                "Type",
                "Offset",
                "Size",
                "ResponseTime",
            ],
        )
    }

    fn parse_line(&mut self, line: &[u8]) -> Result<Option<Request>, ParseErrorKind> {
        let [ts, host, disk, op, offset, size, response] = csv::split_fields::<7>(line)?;
        let ticks = csv::parse_u64(ts, "Timestamp")?;
        let since_unix = ticks.checked_sub(FILETIME_UNIX_EPOCH).ok_or_else(|| {
            csv::out_of_range(
                "Timestamp",
                ticks,
                "before 1970: not a Windows FILETIME of a real trace",
            )
        })?;
        let timestamp_ns = csv::scale(since_unix, 100, "Timestamp", "overflows u64 nanoseconds")?;
        if host.is_empty() {
            return Err(ParseErrorKind::OutOfRange {
                field: "Hostname",
                value: String::new(),
                reason: "empty host name",
            });
        }
        let disk = csv::parse_u32(disk, "DiskNumber")?;
        let op = if op.eq_ignore_ascii_case(b"Read") {
            Op::Read
        } else if op.eq_ignore_ascii_case(b"Write") {
            Op::Write
        } else {
            return Err(ParseErrorKind::UnknownOp(
                String::from_utf8_lossy(op).into_owned(),
            ));
        };
        let offset = csv::parse_u64(offset, "Offset")?;
        let length = csv::length_u32(csv::parse_u64(size, "Size")?, "Size")?;
        csv::parse_u64(response, "ResponseTime")?;
        if length == 0 {
            return Ok(None);
        }
        Ok(Some(Request {
            timestamp_ns,
            op,
            offset,
            length,
            volume: self.volume_id(host, disk),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn read(text: &str) -> Vec<crate::error::Result<Request>> {
        MsrReader::new(text.as_bytes(), "msr.csv").collect()
    }

    #[test]
    fn parses_records_and_assigns_volume_ids() {
        let text = "128166372003061629,hm,0,Read,7014609920,24576,41286\n\
                    128166372016382155,hm,0,Write,1317441536,8192,1963\r\n\
                    \n\
                    128166372026382245,src1,2,write,4096,512,10\n\
                    128166372036382245,hm,0,Read,0,4096,10\n";
        let mut reader = MsrReader::new(text.as_bytes(), "msr.csv");
        let all: Vec<Request> = reader.by_ref().map(Result::unwrap).collect();
        assert_eq!(all.len(), 4);
        assert_eq!(
            all[0],
            Request {
                timestamp_ns: (128166372003061629 - FILETIME_UNIX_EPOCH) * 100,
                op: Op::Read,
                offset: 7014609920,
                length: 24576,
                volume: 0,
            }
        );
        assert_eq!(all[1].op, Op::Write);
        assert_eq!((all[2].volume, all[2].op), (1, Op::Write));
        assert_eq!(all[3].volume, 0);
        assert_eq!(reader.parser().volume_names(), ["hm_0", "src1_2"]);
        // 2007-02-22, when MSR collected its traces: checks the epoch conversion.
        assert_eq!(all[0].timestamp_ns / 1_000_000_000 / 86_400, 13_566);
    }

    #[test]
    fn skips_header_and_zero_length() {
        let text = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n\
                    128166372003061629,hm,0,Read,0,0,1\n\
                    128166372003061629,hm,0,Read,0,512,1\n";
        let mut reader = MsrReader::new(text.as_bytes(), "msr.csv");
        assert_eq!(reader.by_ref().count(), 1);
        assert_eq!(reader.skipped(), 1);
    }

    #[test]
    fn rejects_malformed_lines() {
        let cases = [
            (
                "128166372003061629,hm,0,Read,7x,512,1\n",
                "msr.csv:1: field Offset: not a number: \"7x\"",
            ),
            (
                "128166372003061629,hm,0,Read,0,512\n",
                "msr.csv:1: expected 7 comma-separated fields, found 6",
            ),
            (
                "128166372003061629,hm,0,Trim,0,512,1\n",
                "msr.csv:1: unknown operation \"Trim\" (expected read or write)",
            ),
            (
                "12,hm,0,Read,0,512,1\n",
                "msr.csv:1: field Timestamp: value 12 out of range: before 1970: not a Windows FILETIME of a real trace",
            ),
            (
                "128166372003061629,hm,0,Read,0,4294967296,1\n",
                "msr.csv:1: field Size: value 4294967296 out of range: request larger than 4 GiB",
            ),
        ];
        for (text, message) in cases {
            let got = read(text);
            assert_eq!(got.len(), 1, "{text}");
            assert_eq!(got[0].as_ref().unwrap_err().to_string(), message);
        }
    }

    #[test]
    fn error_names_the_line_and_stops() {
        let text = "128166372003061629,hm,0,Read,0,512,1\n\
                    128166372003061629,hm,0,Read,0,512,1\n\
                    128166372003061629,hm,0,Read,0,512\n\
                    128166372003061629,hm,0,Read,0,512,1\n";
        let got = read(text);
        assert_eq!(got.len(), 3);
        assert!(matches!(got[2], Err(Error::Line { line: 3, .. })));
    }

    #[test]
    fn empty_file_is_an_error() {
        for text in [
            "",
            "\n\n",
            "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n",
        ] {
            let got = read(text);
            assert_eq!(got.len(), 1);
            assert_eq!(
                got[0].as_ref().unwrap_err().to_string(),
                "msr.csv: trace contains no requests"
            );
        }
    }
}
