//! Errors of bdev operations.

use crate::IoKind;

/// Result of a bdev operation.
pub type Result<T, E = BdevError> = std::result::Result<T, E>;

/// What went wrong, with enough context for a log line or an RPC error.
#[derive(Debug, thiserror::Error)]
pub enum BdevError {
    /// Offset or length is not a multiple of the block size.
    #[error("offset {offset} / length {len} not aligned to the {block_size}-byte block size")]
    Misaligned {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// The device's block size.
        block_size: u32,
    },
    /// The range ends past the device.
    #[error("range {offset}+{len} is outside the {size}-byte device")]
    OutOfRange {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Device size.
        size: u64,
    },
    /// The device does not support this operation.
    #[error("{0:?} is not supported by this device")]
    Unsupported(IoKind),
    /// A creation parameter is invalid.
    #[error("{0}")]
    InvalidArgument(String),
    /// The memory a bdev needs cannot be had.
    #[error("{0}")]
    OutOfMemory(String),
    /// The operating system refused an operation.
    #[error("{op} {path}: {source}")]
    Os {
        /// What was attempted.
        op: &'static str,
        /// On which file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Stored data failed its checksum: it is not served (nor written
    /// anywhere) rather than passed on damaged.
    #[error("{0}")]
    Integrity(String),
    /// librbd or librados returned an error.
    #[error("{op}: {}", std::io::Error::from_raw_os_error(-*errno))]
    Ceph {
        /// What was attempted.
        op: String,
        /// Negative errno.
        errno: i32,
    },
}

impl BdevError {
    /// Whether this error is permanent for the request (bad parameters)
    /// rather than a device failure worth reporting as a media error.
    pub fn is_invalid_request(&self) -> bool {
        matches!(
            self,
            Self::Misaligned { .. } | Self::OutOfRange { .. } | Self::Unsupported(_)
        )
    }
}
