//! Streaming readers of public block I/O traces, for replaying them through
//! the cache engine in the simulator (`rackcache-sim`).
//!
//! Every format is turned into the same request-level record, [`Request`]:
//! a timestamp in nanoseconds, read or write, a byte offset and length, and a
//! volume id. Readers are buffered iterators over `Result<Request>`: a trace
//! is never loaded whole, lines are parsed in place, and malformed input stops
//! the iteration with an [`Error`] naming the file and the line (text) or
//! record index and byte offset (binary).
//!
//! | [`Format`] | module | files |
//! |---|---|---|
//! | MSR Cambridge | [`msr`] | csv |
//! | Systor'17 | [`systor`] | csv, csv.gz |
//! | Alibaba block traces | [`alibaba`] | csv |
//! | Tencent CBS | [`tencent`] | csv |
//! | CloudPhysics csv / vscsi | [`cloudphysics`] | csv, vscsi binary (v1, v2) |
//! | libCacheSim oracleGeneral | [`oracle_general`] | binary |
//!
//! Any of them may be gzip-compressed; [`TraceReader`] decompresses
//! transparently and [`detect()`] recognises the format from the file's content
//! and name.
//!
//! ```no_run
//! use traces::{TraceReader, WorkingSet};
//!
//! let mut working_set = WorkingSet::new(4096);
//! for request in TraceReader::open("hm_0.csv")? {
//!     working_set.add(&request?);
//! }
//! println!("{} distinct 4 KiB blocks", working_set.blocks());
//! # Ok::<(), traces::Error>(())
//! ```
//!
//! `docs/traces.md` in the repository describes the formats' units, where to
//! get the traces, and how tests find them (`RACKCACHE_TRACES`).

#![warn(missing_docs)]

pub mod alibaba;
pub mod cloudphysics;
pub mod csv;
pub mod detect;
pub mod error;
pub mod msr;
pub mod oracle_general;
pub mod systor;
pub mod tencent;
pub mod working_set;

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use detect::detect;
pub use error::{Error, ParseErrorKind, Result};
pub use working_set::{working_set, WorkingSet};

use alibaba::AlibabaReader;
use cloudphysics::{CloudPhysicsCsvReader, VscsiReader};
use msr::MsrReader;
use oracle_general::OracleGeneralReader;
use systor::SystorReader;
use tencent::TencentReader;

/// Direction of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Data read from the volume.
    Read,
    /// Data written to the volume.
    Write,
}

/// One block I/O request, the common denominator of all trace formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// When the request was issued (or completed, for traces that log
    /// completions), in nanoseconds. Absolute (since the Unix epoch) where
    /// the trace has a wall clock (MSR, Systor'17, Alibaba, Tencent), relative
    /// to the trace's own origin otherwise (CloudPhysics, oracleGeneral).
    /// Not necessarily monotonic: Systor'17 logs out of order.
    pub timestamp_ns: u64,
    /// Read or write.
    pub op: Op,
    /// Byte offset on the volume.
    pub offset: u64,
    /// Length in bytes, never 0 (requests without data are skipped).
    pub length: u32,
    /// Volume the request targets, as numbered by the trace (see each format
    /// module for how); 0 for single-volume formats.
    pub volume: u32,
}

impl Request {
    /// The request, or `None` when it moves no data (zero length): readers
    /// skip and count those records.
    pub fn with_data(
        timestamp_ns: u64,
        op: Op,
        offset: u64,
        length: u32,
        volume: u32,
    ) -> Option<Request> {
        (length > 0).then_some(Request {
            timestamp_ns,
            op,
            offset,
            length,
            volume,
        })
    }

    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.length))
    }
}

/// A supported trace format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// MSR Cambridge csv ([`msr`]).
    MsrCambridge,
    /// Systor'17 csv ([`systor`]).
    Systor17,
    /// Alibaba block trace csv ([`alibaba`]).
    Alibaba,
    /// Tencent CBS csv ([`tencent`]).
    TencentCbs,
    /// CloudPhysics csv export ([`cloudphysics`]).
    CloudPhysicsCsv,
    /// CloudPhysics / VMware vscsi binary ([`cloudphysics`]).
    CloudPhysicsVscsi,
    /// libCacheSim oracleGeneral binary ([`oracle_general`]).
    OracleGeneral,
}

impl Format {
    /// All formats, in the order detection prefers them when content is
    /// ambiguous.
    pub const ALL: [Format; 7] = [
        Format::MsrCambridge,
        Format::Systor17,
        Format::Alibaba,
        Format::TencentCbs,
        Format::CloudPhysicsCsv,
        Format::CloudPhysicsVscsi,
        Format::OracleGeneral,
    ];

    /// Short name, as accepted by [`Format::from_str`] and printed by
    /// [`fmt::Display`].
    pub const fn name(self) -> &'static str {
        match self {
            Format::MsrCambridge => "msr",
            Format::Systor17 => "systor17",
            Format::Alibaba => "alibaba",
            Format::TencentCbs => "tencent",
            Format::CloudPhysicsCsv => "cloudphysics-csv",
            Format::CloudPhysicsVscsi => "vscsi",
            Format::OracleGeneral => "oracle-general",
        }
    }

    /// True for binary (record-oriented) formats.
    pub const fn is_binary(self) -> bool {
        matches!(self, Format::CloudPhysicsVscsi | Format::OracleGeneral)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of [`Format::from_str`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown trace format {0:?} (expected one of: msr, systor17, alibaba, tencent, cloudphysics-csv, vscsi, oracle-general)")]
pub struct UnknownFormatName(pub String);

impl FromStr for Format {
    type Err = UnknownFormatName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let normalized = s.to_ascii_lowercase().replace(['_', ' '], "-");
        Ok(match normalized.as_str() {
            "msr" | "msr-cambridge" => Format::MsrCambridge,
            "systor" | "systor17" | "systor-17" => Format::Systor17,
            "alibaba" | "ali" => Format::Alibaba,
            "tencent" | "tencent-cbs" | "cbs" => Format::TencentCbs,
            "cloudphysics-csv" | "cloudphysics" | "cp-csv" => Format::CloudPhysicsCsv,
            "vscsi" | "cloudphysics-vscsi" => Format::CloudPhysicsVscsi,
            "oracle-general" | "oraclegeneral" | "oracle" => Format::OracleGeneral,
            _ => return Err(UnknownFormatName(s.to_string())),
        })
    }
}

/// How [`TraceReader`] opens a trace. `OpenOptions::default()` auto-detects
/// the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    format: Option<Format>,
    oracle_id_unit: u64,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            format: None,
            oracle_id_unit: 1,
        }
    }
}

impl OpenOptions {
    /// Auto-detection, `oracle_id_unit` 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the trace as `format` instead of detecting it.
    pub fn format(mut self, format: Format) -> Self {
        self.format = Some(format);
        self
    }

    /// Bytes per oracleGeneral object id (see [`oracle_general`]): 512 for
    /// traces converted from block traces. Panics if 0.
    pub fn oracle_id_unit(mut self, unit: u64) -> Self {
        assert!(unit > 0, "oracle_id_unit must be positive");
        self.oracle_id_unit = unit;
        self
    }

    /// Opens `path` with these options.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<TraceReader> {
        let path = path.as_ref();
        let format = match self.format {
            Some(f) => f,
            None => detect(path)?,
        };
        let input = open_input(path)?;
        Ok(TraceReader::build(input, path.to_path_buf(), format, self))
    }
}

/// Size of the read buffer: large enough that a syscall (or an inflate call)
/// is amortised over thousands of records.
const BUFFER_SIZE: usize = 256 * 1024;

/// A buffered byte stream of a trace, decompressed if needed.
pub(crate) type Input = Box<dyn BufRead + Send>;

/// Opens `path` for reading, transparently inflating gzip (recognised by its
/// magic bytes, not its name, so renamed files work).
pub(crate) fn open_input(path: &Path) -> Result<Input> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    wrap_input(file).map_err(|e| Error::io(path, e))
}

fn wrap_input(read: impl Read + Send + 'static) -> io::Result<Input> {
    let mut reader = BufReader::with_capacity(BUFFER_SIZE, read);
    let head = loop {
        match reader.fill_buf() {
            Ok(head) => break head,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    if head.starts_with(&[0x1f, 0x8b]) {
        // Multi-member: `cat a.gz b.gz` and parallel gzip tools produce
        // several members, which a plain GzDecoder would stop after.
        let inflated = flate2::bufread::MultiGzDecoder::new(reader);
        Ok(Box::new(BufReader::with_capacity(BUFFER_SIZE, inflated)))
    } else {
        Ok(Box::new(reader))
    }
}

/// Reads up to `buf.len()` bytes, fewer only at the end of the stream;
/// returns how many were read. Binary readers use it to tell a clean end
/// (0 bytes) from a truncated record.
pub(crate) fn read_record<R: BufRead + ?Sized>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    // Fast path: the whole record is already buffered.
    if let Ok(available) = r.fill_buf() {
        if available.len() >= buf.len() {
            buf.copy_from_slice(&available[..buf.len()]);
            r.consume(buf.len());
            return Ok(buf.len());
        }
    }
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// A reader of any supported format, chosen at run time.
///
/// Iterates `Result<Request>`; errors are fatal (after the first `Err` it
/// yields `None`).
pub struct TraceReader {
    path: PathBuf,
    format: Format,
    inner: Inner,
}

enum Inner {
    Msr(MsrReader<Input>),
    Systor(SystorReader<Input>),
    Alibaba(AlibabaReader<Input>),
    Tencent(TencentReader<Input>),
    CloudPhysicsCsv(CloudPhysicsCsvReader<Input>),
    Vscsi(VscsiReader<Input>),
    OracleGeneral(OracleGeneralReader<Input>),
}

/// Calls the same method on whichever reader is inside.
macro_rules! dispatch {
    ($inner:expr, $r:ident => $e:expr) => {
        match $inner {
            Inner::Msr($r) => $e,
            Inner::Systor($r) => $e,
            Inner::Alibaba($r) => $e,
            Inner::Tencent($r) => $e,
            Inner::CloudPhysicsCsv($r) => $e,
            Inner::Vscsi($r) => $e,
            Inner::OracleGeneral($r) => $e,
        }
    };
}

impl TraceReader {
    /// Opens `path`, detecting its format (see [`detect()`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        OpenOptions::new().open(path)
    }

    /// Opens `path` as `format`.
    pub fn open_as(path: impl AsRef<Path>, format: Format) -> Result<Self> {
        OpenOptions::new().format(format).open(path)
    }

    /// Reads a trace of `format` from any byte stream (gzip is inflated
    /// transparently); `name` names it in errors.
    pub fn from_reader(
        read: impl Read + Send + 'static,
        name: impl Into<PathBuf>,
        options: &OpenOptions,
        format: Format,
    ) -> Result<Self> {
        let name = name.into();
        let input = wrap_input(read).map_err(|e| Error::io(&name, e))?;
        Ok(Self::build(input, name, format, options))
    }

    fn build(input: Input, path: PathBuf, format: Format, options: &OpenOptions) -> Self {
        let p = path.clone();
        let inner = match format {
            Format::MsrCambridge => Inner::Msr(MsrReader::new(input, p)),
            Format::Systor17 => Inner::Systor(SystorReader::new(input, p)),
            Format::Alibaba => Inner::Alibaba(AlibabaReader::new(input, p)),
            Format::TencentCbs => Inner::Tencent(TencentReader::new(input, p)),
            Format::CloudPhysicsCsv => Inner::CloudPhysicsCsv(CloudPhysicsCsvReader::new(input, p)),
            Format::CloudPhysicsVscsi => Inner::Vscsi(VscsiReader::new(input, p)),
            Format::OracleGeneral => Inner::OracleGeneral(
                OracleGeneralReader::new(input, p).with_id_unit(options.oracle_id_unit),
            ),
        };
        Self {
            path,
            format,
            inner,
        }
    }

    /// The format being read.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The trace's path (or name).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Requests returned so far.
    pub fn records(&self) -> u64 {
        dispatch!(&self.inner, r => r.records())
    }

    /// Well-formed records skipped so far because they carry no data.
    pub fn skipped(&self) -> u64 {
        dispatch!(&self.inner, r => r.skipped())
    }

    /// Names of the volume ids, for formats whose volumes are named rather
    /// than numbered (MSR Cambridge: `hm_0`, ...); `None` otherwise.
    pub fn volume_names(&self) -> Option<Vec<String>> {
        match &self.inner {
            Inner::Msr(r) => Some(r.parser().volume_names()),
            _ => None,
        }
    }

    /// The next request, `Ok(None)` at the end of the trace.
    pub fn next_request(&mut self) -> Result<Option<Request>> {
        dispatch!(&mut self.inner, r => r.next_request())
    }
}

impl fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceReader")
            .field("path", &self.path)
            .field("format", &self.format)
            .field("records", &self.records())
            .finish_non_exhaustive()
    }
}

impl Iterator for TraceReader {
    type Item = Result<Request>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_request().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    #[test]
    fn readers_can_move_to_another_thread() {
        fn assert_send<T: Send>() {}
        assert_send::<TraceReader>();
        assert_send::<Error>();
    }

    #[test]
    fn format_names_round_trip() {
        for f in Format::ALL {
            assert_eq!(f.name().parse::<Format>(), Ok(f));
            assert_eq!(f.to_string(), f.name());
        }
        assert_eq!("MSR_Cambridge".parse(), Ok(Format::MsrCambridge));
        assert!("parquet".parse::<Format>().is_err());
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn gzip_round_trip() {
        let text = "Timestamp,Response,IOType,LUN,Offset,Size\n\
                    1455591804.310701000,0.006475000,R,0,203468398592,32768\n\
                    1455591804.325909000,0.000170000,W,0,3772221901312,4096\n";
        let plain: Vec<Request> = TraceReader::from_reader(
            text.as_bytes(),
            "s.csv",
            &OpenOptions::new(),
            Format::Systor17,
        )
        .unwrap()
        .map(Result::unwrap)
        .collect();
        let gz: Vec<Request> = TraceReader::from_reader(
            io::Cursor::new(gzip(text.as_bytes())),
            "s.csv.gz",
            &OpenOptions::new(),
            Format::Systor17,
        )
        .unwrap()
        .map(Result::unwrap)
        .collect();
        assert_eq!(plain.len(), 2);
        assert_eq!(plain, gz);

        // Two concatenated gzip members read as one stream.
        let mut two = gzip(&text.as_bytes()[..100]);
        two.extend(gzip(&text.as_bytes()[100..]));
        let multi: Vec<Request> = TraceReader::from_reader(
            io::Cursor::new(two),
            "s.csv.gz",
            &OpenOptions::new(),
            Format::Systor17,
        )
        .unwrap()
        .map(Result::unwrap)
        .collect();
        assert_eq!(multi, plain);
    }

    #[test]
    fn corrupt_gzip_is_an_io_error_naming_the_file() {
        let mut data = gzip(b"1,R,0,4096,5\n".repeat(1000).as_slice());
        let n = data.len();
        data.truncate(n / 2);
        let errors: Vec<Error> = TraceReader::from_reader(
            io::Cursor::new(data),
            "bad.csv.gz",
            &OpenOptions::new(),
            Format::Alibaba,
        )
        .unwrap()
        .filter_map(Result::err)
        .collect();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].to_string().starts_with("bad.csv.gz: "),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn garbage_never_panics() {
        // Pseudo-random bytes, biased towards digits, commas and newlines so
        // that the parsers get past their first checks.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let alphabet = b"0123456789,,,,\n.RWrw-x \r";
        for round in 0..200 {
            let len = (round * 37) % 600;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if round % 2 == 0 {
                        alphabet[(x % alphabet.len() as u64) as usize]
                    } else {
                        x as u8
                    }
                })
                .collect();
            for format in Format::ALL {
                let reader = TraceReader::from_reader(
                    io::Cursor::new(bytes.clone()),
                    "garbage",
                    &OpenOptions::new().oracle_id_unit(512),
                    format,
                )
                .unwrap();
                // Bounded: every item consumes input, errors end iteration.
                assert!(reader.count() <= len + 1);
            }
            let _ = detect::detect_from_content(&bytes, true);
        }
    }

    #[test]
    fn read_record_handles_short_reads() {
        // A reader that returns one byte at a time exercises the slow path.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = buf.len().min(self.0.len()).min(1);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut r = BufReader::with_capacity(1, Trickle(b"abcdefg"));
        let mut buf = [0u8; 4];
        assert_eq!(read_record(&mut r, &mut buf).unwrap(), 4);
        assert_eq!(&buf, b"abcd");
        assert_eq!(read_record(&mut r, &mut buf).unwrap(), 3);
        assert_eq!(read_record(&mut r, &mut buf).unwrap(), 0);
    }
}
