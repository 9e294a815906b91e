//! Errors of the trace readers.
//!
//! Every error names the trace (its path, or the name a caller gave an
//! in-memory reader) and, for malformed input, where in it the problem is: a
//! 1-based line number for text formats, a 0-based record index and byte
//! offset for binary formats. A simulator run over a multi-gigabyte trace is
//! useless if it only says "invalid digit".

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while opening, detecting or reading a trace.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read (includes corrupt gzip streams).
    #[error("{}: {source}", path.display())]
    Io {
        /// The trace being read.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A line of a text (csv) trace is malformed.
    #[error("{}:{line}: {kind}", path.display())]
    Line {
        /// The trace being read.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong with the line.
        kind: ParseErrorKind,
    },

    /// A record of a binary trace is malformed.
    #[error("{}: record {index} (byte offset {offset}): {kind}", path.display())]
    Record {
        /// The trace being read.
        path: PathBuf,
        /// 0-based record index.
        index: u64,
        /// Byte offset of the record's first byte (in the decompressed stream).
        offset: u64,
        /// What is wrong with the record.
        kind: ParseErrorKind,
    },

    /// The trace holds no request at all (empty file, header only, or only
    /// records that carry no data).
    #[error("{}: trace contains no requests", path.display())]
    Empty {
        /// The trace being read.
        path: PathBuf,
    },

    /// Auto-detection could not tell which format the trace is in.
    #[error("{}: cannot detect the trace format: {reason}", path.display())]
    UnknownFormat {
        /// The trace being read.
        path: PathBuf,
        /// Why detection gave up.
        reason: String,
    },
}

/// What is wrong with one line or record. Kept separate from [`Error`] so that
/// the per-format parsers need not know file names or positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// A line does not have the number of comma-separated fields the format has.
    FieldCount {
        /// Fields the format has.
        expected: usize,
        /// Fields found on the line.
        found: usize,
    },
    /// A numeric field is not a number (or overflows).
    BadNumber {
        /// Name of the field, as in the format's documentation.
        field: &'static str,
        /// The offending text (lossily decoded).
        value: String,
    },
    /// A field holds a number that is out of range for its meaning.
    OutOfRange {
        /// Name of the field.
        field: &'static str,
        /// The offending value.
        value: String,
        /// Why the value is not acceptable.
        reason: &'static str,
    },
    /// The operation field is neither a read nor a write.
    UnknownOp(String),
    /// A binary trace ends in the middle of a record.
    TruncatedRecord {
        /// Size of a full record.
        expected: usize,
        /// Bytes present.
        found: usize,
    },
    /// A binary record carries a version/layout marker different from the
    /// trace's first record (a sign of corruption or of a wrong format).
    BadVersion {
        /// Version found in the first record.
        expected: u8,
        /// Version found in this record.
        found: u8,
    },
    /// The first record of a vscsi trace carries no known layout version.
    UnknownVersion,
}

impl fmt::Display for ParseErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FieldCount { expected, found } => {
                write!(
                    f,
                    "expected {expected} comma-separated fields, found {found}"
                )
            }
            Self::BadNumber { field, value } => write!(f, "field {field}: not a number: {value:?}"),
            Self::OutOfRange {
                field,
                value,
                reason,
            } => write!(f, "field {field}: value {value} out of range: {reason}"),
            Self::UnknownOp(op) => write!(f, "unknown operation {op:?} (expected read or write)"),
            Self::TruncatedRecord { expected, found } => {
                write!(f, "truncated record: {found} of {expected} bytes")
            }
            Self::BadVersion { expected, found } => write!(
                f,
                "record layout version {found} differs from the trace's version {expected}"
            ),
            Self::UnknownVersion => write!(f, "no known vscsi record layout version (1 or 2)"),
        }
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
