//! The line-oriented reader shared by all comma-separated formats, and the
//! allocation-free field and number parsing they use.
//!
//! None of the trace formats quote fields or embed commas, so a full CSV
//! parser would only cost speed: lines are split on `,` in place, numbers are
//! parsed from bytes without going through `str`, and the one line buffer is
//! reused for the whole file.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::error::{Error, ParseErrorKind, Result};
use crate::{Format, Request};

/// One comma-separated trace format: how to recognise its optional header
/// line and how to turn a data line into a [`Request`].
///
/// Implementations MUST NOT allocate on the success path (the reader calls
/// [`CsvFormat::parse_line`] millions of times per second) and MUST return
/// `Ok(None)` only for well-formed lines that carry no data transfer (they are
/// counted as skipped, not silently lost).
pub trait CsvFormat {
    /// The format this parser reads.
    const FORMAT: Format;

    /// True if `line` (the first non-empty line of the file, without line
    /// terminator) is this format's column-name header.
    fn is_header(line: &[u8]) -> bool;

    /// Parses one data line (without line terminator).
    fn parse_line(&mut self, line: &[u8]) -> Result<Option<Request>, ParseErrorKind>;
}

/// Streams [`Request`]s from a comma-separated trace, one buffered line at a
/// time. Each format module exports an alias of this type (for example
/// [`crate::msr::MsrReader`]).
///
/// Errors are fatal: after the first `Err` the iterator yields `None`.
#[derive(Debug)]
pub struct CsvReader<R, P> {
    inner: R,
    parser: P,
    path: PathBuf,
    buf: Vec<u8>,
    line: u64,
    seen_content: bool,
    records: u64,
    skipped: u64,
    done: bool,
}

impl<R: BufRead, P: CsvFormat + Default> CsvReader<R, P> {
    /// Reads `inner`; `path` names the trace in error messages.
    pub fn new(inner: R, path: impl Into<PathBuf>) -> Self {
        Self::with_parser(inner, path, P::default())
    }
}

impl<R: BufRead, P: CsvFormat> CsvReader<R, P> {
    /// Like [`CsvReader::new`] with an explicitly configured parser.
    pub fn with_parser(inner: R, path: impl Into<PathBuf>, parser: P) -> Self {
        Self {
            inner,
            parser,
            path: path.into(),
            buf: Vec::with_capacity(256),
            line: 0,
            seen_content: false,
            records: 0,
            skipped: 0,
            done: false,
        }
    }

    /// The format being read.
    pub fn format(&self) -> Format {
        P::FORMAT
    }

    /// The format-specific parser (some keep state, such as name tables).
    pub fn parser(&self) -> &P {
        &self.parser
    }

    /// The trace's name used in errors.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Requests returned so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Well-formed lines skipped so far because they carry no data (zero
    /// length, or a command that is neither a read nor a write).
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

    fn read_next(&mut self) -> Result<Option<Request>> {
        loop {
            self.buf.clear();
            let n = self
                .inner
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| Error::io(&self.path, e))?;
            if n == 0 {
                if self.records == 0 && self.skipped == 0 {
                    return Err(Error::Empty {
                        path: self.path.clone(),
                    });
                }
                return Ok(None);
            }
            self.line += 1;
            let line = trim_line(&self.buf);
            if line.is_empty() {
                continue;
            }
            // Only the first non-blank line can be a header; a header in the
            // middle of a trace is malformed input and reported as such.
            let first = !self.seen_content;
            self.seen_content = true;
            if first && P::is_header(line) {
                continue;
            }
            match self.parser.parse_line(line) {
                Ok(Some(request)) => {
                    self.records += 1;
                    return Ok(Some(request));
                }
                Ok(None) => self.skipped += 1,
                Err(kind) => {
                    return Err(Error::Line {
                        path: self.path.clone(),
                        line: self.line,
                        kind,
                    })
                }
            }
        }
    }
}

impl<R: BufRead, P: CsvFormat> Iterator for CsvReader<R, P> {
    type Item = Result<Request>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_request().transpose()
    }
}

/// Strips the line terminator (`\n` or `\r\n`) and surrounding blanks.
fn trim_line(line: &[u8]) -> &[u8] {
    line.trim_ascii()
}

/// Splits `line` into exactly `N` comma-separated fields, each trimmed of
/// blanks.
pub(crate) fn split_fields<const N: usize>(line: &[u8]) -> Result<[&[u8]; N], ParseErrorKind> {
    let mut fields = [&line[..0]; N];
    let mut found = 0;
    for field in line.split(|&b| b == b',') {
        if found < N {
            fields[found] = field.trim_ascii();
        }
        found += 1;
    }
    if found != N {
        return Err(ParseErrorKind::FieldCount { expected: N, found });
    }
    Ok(fields)
}

/// True if `line` consists of exactly `names`, compared case-insensitively.
pub(crate) fn header_is(line: &[u8], names: &[&str]) -> bool {
    let mut fields = line.split(|&b| b == b',');
    names.iter().all(|name| {
        fields
            .next()
            .is_some_and(|f| f.trim_ascii().eq_ignore_ascii_case(name.as_bytes()))
    }) && fields.next().is_none()
}

pub(crate) fn bad_number(field: &'static str, value: &[u8]) -> ParseErrorKind {
    ParseErrorKind::BadNumber {
        field,
        value: String::from_utf8_lossy(value).into_owned(),
    }
}

/// Parses an unsigned decimal integer.
pub(crate) fn parse_u64(value: &[u8], field: &'static str) -> Result<u64, ParseErrorKind> {
    if value.is_empty() {
        return Err(bad_number(field, value));
    }
    // Up to 19 digits cannot overflow a u64, so the common case needs no
    // overflow checks in the loop.
    if value.len() <= 19 {
        let mut n: u64 = 0;
        for &b in value {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return Err(bad_number(field, value));
            }
            n = n * 10 + u64::from(d);
        }
        return Ok(n);
    }
    let mut n: u64 = 0;
    for &b in value {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(bad_number(field, value));
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d)))
            .ok_or_else(|| bad_number(field, value))?;
    }
    Ok(n)
}

/// Parses an unsigned decimal integer that must fit in a u32.
pub(crate) fn parse_u32(value: &[u8], field: &'static str) -> Result<u32, ParseErrorKind> {
    let n = parse_u64(value, field)?;
    u32::try_from(n).map_err(|_| out_of_range(field, n, "does not fit in 32 bits"))
}

/// Parses a hexadecimal integer (no `0x` prefix), as used for SCSI opcodes.
pub(crate) fn parse_hex_u8(value: &[u8], field: &'static str) -> Result<u8, ParseErrorKind> {
    let digits = value
        .strip_prefix(b"0x")
        .or_else(|| value.strip_prefix(b"0X"))
        .unwrap_or(value);
    if digits.is_empty() || digits.len() > 2 {
        return Err(bad_number(field, value));
    }
    let mut n: u8 = 0;
    for &b in digits {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return Err(bad_number(field, value)),
        };
        n = n * 16 + d;
    }
    Ok(n)
}

/// Parses non-negative decimal seconds such as `1455591804.310701000` into
/// nanoseconds without going through floating point, which would lose the
/// nanosecond digits of epoch timestamps. Digits past the ninth decimal are
/// truncated.
pub(crate) fn parse_seconds_ns(value: &[u8], field: &'static str) -> Result<u64, ParseErrorKind> {
    let (int, frac) = match value.iter().position(|&b| b == b'.') {
        Some(dot) => (&value[..dot], &value[dot + 1..]),
        None => (value, &value[value.len()..]),
    };
    if int.is_empty() && frac.is_empty() {
        return Err(bad_number(field, value));
    }
    let secs = if int.is_empty() {
        0
    } else {
        parse_u64(int, field).map_err(|_| bad_number(field, value))?
    };
    let mut nanos: u64 = 0;
    let mut scale: u64 = 1_000_000_000;
    for &b in frac {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(bad_number(field, value));
        }
        scale /= 10;
        nanos += u64::from(d) * scale;
    }
    secs.checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(nanos))
        .ok_or_else(|| out_of_range_bytes(field, value, "overflows u64 nanoseconds"))
}

pub(crate) fn out_of_range(
    field: &'static str,
    value: u64,
    reason: &'static str,
) -> ParseErrorKind {
    ParseErrorKind::OutOfRange {
        field,
        value: value.to_string(),
        reason,
    }
}

pub(crate) fn out_of_range_bytes(
    field: &'static str,
    value: &[u8],
    reason: &'static str,
) -> ParseErrorKind {
    ParseErrorKind::OutOfRange {
        field,
        value: String::from_utf8_lossy(value).into_owned(),
        reason,
    }
}

/// `value * factor`, or an out-of-range error naming `field`.
pub(crate) fn scale(
    value: u64,
    factor: u64,
    field: &'static str,
    reason: &'static str,
) -> Result<u64, ParseErrorKind> {
    value
        .checked_mul(factor)
        .ok_or_else(|| out_of_range(field, value, reason))
}

/// A byte length that must fit the 32-bit length of [`Request`].
pub(crate) fn length_u32(value: u64, field: &'static str) -> Result<u32, ParseErrorKind> {
    u32::try_from(value).map_err(|_| out_of_range(field, value, "request larger than 4 GiB"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b"0", "f"), Ok(0));
        assert_eq!(parse_u64(b"18446744073709551615", "f"), Ok(u64::MAX));
        assert!(parse_u64(b"18446744073709551616", "f").is_err());
        assert!(parse_u64(b"", "f").is_err());
        assert!(parse_u64(b"-1", "f").is_err());
        assert!(parse_u64(b"1x", "f").is_err());
        assert_eq!(parse_u32(b"4294967295", "f"), Ok(u32::MAX));
        assert!(parse_u32(b"4294967296", "f").is_err());
        assert_eq!(parse_hex_u8(b"2a", "f"), Ok(0x2a));
        assert_eq!(parse_hex_u8(b"0x2A", "f"), Ok(0x2a));
        assert!(parse_hex_u8(b"2g", "f").is_err());
        assert!(parse_hex_u8(b"123", "f").is_err());
    }

    #[test]
    fn seconds() {
        assert_eq!(
            parse_seconds_ns(b"1455591804.310701000", "t"),
            Ok(1_455_591_804_310_701_000)
        );
        assert_eq!(parse_seconds_ns(b"1.5", "t"), Ok(1_500_000_000));
        assert_eq!(parse_seconds_ns(b"7", "t"), Ok(7_000_000_000));
        assert_eq!(parse_seconds_ns(b".25", "t"), Ok(250_000_000));
        assert_eq!(parse_seconds_ns(b"1.0000000019", "t"), Ok(1_000_000_001));
        assert!(parse_seconds_ns(b".", "t").is_err());
        assert!(parse_seconds_ns(b"1.2.3", "t").is_err());
        assert!(parse_seconds_ns(b"1e9", "t").is_err());
    }

    #[test]
    fn fields() {
        assert_eq!(split_fields::<3>(b"a, b ,c"), Ok([&b"a"[..], b"b", b"c"]));
        assert_eq!(
            split_fields::<3>(b"a,b"),
            Err(ParseErrorKind::FieldCount {
                expected: 3,
                found: 2
            })
        );
        assert_eq!(
            split_fields::<2>(b"a,b,c,d"),
            Err(ParseErrorKind::FieldCount {
                expected: 2,
                found: 4
            })
        );
        assert!(header_is(b"A, b", &["a", "B"]));
        assert!(!header_is(b"a,b,c", &["a", "b"]));
        assert!(!header_is(b"a", &["a", "b"]));
    }
}
