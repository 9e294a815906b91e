//! JSON-RPC errors with SPDK's codes: the JSON-RPC 2.0 reserved codes for
//! protocol problems, and a negative errno with its strerror text for
//! failures of the operation itself (as SPDK's `spdk_strerror(-rc)`).

use serde_json::{json, Value};

/// Invalid JSON was received.
pub const PARSE_ERROR: i32 = -32700;
/// The JSON sent is not a valid request object.
pub const INVALID_REQUEST: i32 = -32600;
/// The method does not exist.
pub const METHOD_NOT_FOUND: i32 = -32601;
/// Invalid method parameters.
pub const INVALID_PARAMS: i32 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i32 = -32603;

/// What kind of failure an error is: it fixes the JSON-RPC code, and is
/// what callers match on (never the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Invalid JSON ([`PARSE_ERROR`]).
    Parse,
    /// Not a valid request object ([`INVALID_REQUEST`]).
    InvalidRequest,
    /// No such method ([`METHOD_NOT_FOUND`]).
    MethodNotFound,
    /// Invalid or conflicting parameters ([`INVALID_PARAMS`]).
    InvalidParams,
    /// Internal error, and SPDK's "already exists" of a transport or
    /// subsystem ([`INTERNAL_ERROR`]).
    Internal,
    /// The operation failed with this errno (positive); the code is its
    /// negative, as SPDK's `spdk_strerror(-rc)` answers.
    Errno(i32),
}

impl ErrorKind {
    /// The JSON-RPC error code.
    pub fn code(self) -> i32 {
        match self {
            Self::Parse => PARSE_ERROR,
            Self::InvalidRequest => INVALID_REQUEST,
            Self::MethodNotFound => METHOD_NOT_FOUND,
            Self::InvalidParams => INVALID_PARAMS,
            Self::Internal => INTERNAL_ERROR,
            Self::Errno(e) => -e.abs(),
        }
    }
}

/// An error response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// Human-readable message.
    pub message: String,
}

impl RpcError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// The JSON-RPC error code.
    pub fn code(&self) -> i32 {
        self.kind.code()
    }

    /// Invalid parameters, saying which and why.
    pub fn invalid_params(detail: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorKind::InvalidParams,
            format!("Invalid parameters: {detail}"),
        )
    }

    /// A failure as SPDK reports it: the negative errno as code and the
    /// errno's text, followed by what failed.
    pub fn errno(errno: i32, context: impl std::fmt::Display) -> Self {
        // std appends " (os error N)" to errno texts; SPDK's strerror does not.
        let strip = |s: String| match s.find(" (os error") {
            Some(i) => s[..i].to_owned(),
            None => s,
        };
        let text = strip(std::io::Error::from_raw_os_error(errno.abs()).to_string());
        Self::new(
            ErrorKind::Errno(errno.abs()),
            format!("{text}: {}", strip(context.to_string())),
        )
    }

    /// The `error` member of a response.
    pub fn to_json(&self) -> Value {
        json!({ "code": self.code(), "message": self.message })
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code())
    }
}

impl std::error::Error for RpcError {}

impl From<bdev::BdevError> for RpcError {
    fn from(e: bdev::BdevError) -> Self {
        use bdev::BdevError as E;
        match &e {
            E::InvalidArgument(_) | E::Misaligned { .. } | E::OutOfRange { .. } => {
                Self::errno(libc_errno::EINVAL, &e)
            }
            E::Unsupported(_) => Self::errno(libc_errno::ENOTSUP, &e),
            E::OutOfMemory(_) => Self::errno(libc_errno::ENOMEM, &e),
            E::Os { source, .. } => {
                Self::errno(source.raw_os_error().unwrap_or(libc_errno::EIO), &e)
            }
            E::Ceph { errno, .. } => Self::errno(*errno, &e),
            E::Integrity(_) => Self::errno(libc_errno::EUCLEAN, &e),
        }
    }
}

impl From<nvmf_tgt::TargetError> for RpcError {
    /// SPDK's nvmf methods answer bad or conflicting input (unknown names,
    /// duplicates, out-of-range values) with "invalid parameters", and say
    /// which here; a failed bind keeps its errno.
    fn from(e: nvmf_tgt::TargetError) -> Self {
        use nvmf_tgt::TargetError as E;
        match &e {
            E::InvalidArgument(_) | E::Exists(_) | E::NotFound(_) => Self::invalid_params(&e),
            E::Listen { source, .. } => {
                Self::errno(source.raw_os_error().unwrap_or(libc_errno::EIO), &e)
            }
            E::ShuttingDown => Self::new(ErrorKind::Internal, e.to_string()),
        }
    }
}

impl RpcError {
    /// A cached-volume failure: the errno fitting its kind, then `what`
    /// was being done, then why (the cache crate says what to fix).
    pub fn cache(what: impl std::fmt::Display, e: &cache::volume::VolumeError) -> Self {
        use cache::device::DeviceError as D;
        use cache::volume::VolumeError as V;
        let errno = match e {
            V::Invalid(_) | V::Load { .. } => libc_errno::EINVAL,
            V::Busy(_) => libc_errno::EBUSY,
            V::Flush(_) => libc_errno::EIO,
            V::Stopped(_) => libc_errno::ENODEV,
            V::Device(d) => match d {
                D::NoSpace { .. } | D::TableFull { .. } => libc_errno::ENOSPC,
                D::VolumeExists(_) => libc_errno::EEXIST,
                D::NoSuchVolume(_) => libc_errno::ENOENT,
                D::Unformatted(_) => libc_errno::ENODEV,
                D::Unsuitable { .. } | D::InvalidSpec { .. } | D::Version { .. } => {
                    libc_errno::EINVAL
                }
                D::NotBlank { .. } => libc_errno::ENOTEMPTY,
                D::Corrupt { .. } | D::MetadataLost { .. } => libc_errno::EUCLEAN,
                _ => libc_errno::EIO,
            },
        };
        Self::errno(errno, format!("{what}: {e}"))
    }
}

/// The errno values used here (Linux numbering, as SPDK reports them).
pub mod libc_errno {
    /// Operation not permitted.
    pub const EPERM: i32 = 1;
    /// No such file or directory.
    pub const ENOENT: i32 = 2;
    /// I/O error.
    pub const EIO: i32 = 5;
    /// Cannot allocate memory.
    pub const ENOMEM: i32 = 12;
    /// Device or resource busy.
    pub const EBUSY: i32 = 16;
    /// File exists.
    pub const EEXIST: i32 = 17;
    /// No such device.
    pub const ENODEV: i32 = 19;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// No space left on device.
    pub const ENOSPC: i32 = 28;
    /// Directory not empty: a device holds a signature, not formatted.
    pub const ENOTEMPTY: i32 = 39;
    /// Operation not supported.
    pub const ENOTSUP: i32 = 95;
    /// Structure needs cleaning: damaged metadata, refused.
    pub const EUCLEAN: i32 = 117;
    /// Required key not available.
    pub const ENOKEY: i32 = 126;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_messages_match_strerror() {
        let e = RpcError::errno(17, "bdev Malloc0");
        assert_eq!(e.code(), -17);
        assert_eq!(e.kind, ErrorKind::Errno(17));
        assert_eq!(e.message, "File exists: bdev Malloc0");
        assert_eq!(RpcError::errno(-19, "x").code(), -19);
    }

    /// A cached-volume error's code follows its variant, whatever its text.
    #[test]
    fn cache_errors_map_by_kind_not_text() {
        use cache::volume::VolumeError as V;
        let busy = RpcError::cache("x", &V::Busy("not supported here".into()));
        assert_eq!(busy.kind, ErrorKind::Errno(libc_errno::EBUSY));
        let stopped = RpcError::cache("x", &V::Stopped("c0".into()));
        assert_eq!(stopped.code(), -libc_errno::ENODEV);
        assert_eq!(ErrorKind::InvalidParams.code(), INVALID_PARAMS);
    }
}
