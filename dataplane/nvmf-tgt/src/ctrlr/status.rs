//! Statuses the codec does not name.

use nvmf::cqe::{sct, Status};

/// Command Aborted due to SQ Deletion (queue or controller going away).
pub const ABORTED_SQ_DELETION: Status = Status {
    sct: sct::GENERIC,
    sc: 0x08,
    dnr: false,
};
/// Command Interrupted: the host should retry (queue over its depth).
pub const COMMAND_INTERRUPTED: Status = Status {
    sct: sct::GENERIC,
    sc: 0x21,
    dnr: false,
};
/// Transient Transport Error (data digest mismatch).
pub const TRANSIENT_TRANSPORT_ERROR: Status = Status {
    sct: sct::GENERIC,
    sc: 0x22,
    dnr: false,
};
/// Connect: Incompatible Format.
pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status {
    sct: sct::COMMAND_SPECIFIC,
    sc: 0x80,
    dnr: true,
};
/// Connect: Controller Busy.
pub const CONNECT_CONTROLLER_BUSY: Status = Status {
    sct: sct::COMMAND_SPECIFIC,
    sc: 0x81,
    dnr: false,
};
/// Generic status 0x20, Namespace is Write Protected: a command that would
/// change a read-only bdev (Identify Namespace reports NSATTR bit 0).
pub const NAMESPACE_WRITE_PROTECTED: Status = Status {
    sct: sct::GENERIC,
    sc: 0x20,
    dnr: true,
};
/// Fabrics: Authentication Required (a command before the queue
/// authenticated).
pub const AUTH_REQUIRED: Status = Status {
    sct: sct::COMMAND_SPECIFIC,
    sc: 0x91,
    dnr: true,
};
