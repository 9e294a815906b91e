//! Work waiting for durable metadata: plans before their I/O, answers,
//! shrinks.

use std::sync::Arc;

use bdev::DmaBuf;
use engine::Plan;
use tokio::sync::oneshot;

use crate::layout::VolumeRegion;
use crate::volume::meta::Durability;
use crate::volume::msg::Reply;
use crate::volume::VolumeError;

/// A request whose plan waits for durable metadata before its I/O.
pub(super) struct BlockedStart {
    pub(super) id: u64,
    pub(super) need: Durability,
    /// Requests whose core writes overlap this plan's fills: a fill reading
    /// core before such a write lands would cache the old data as valid.
    pub(super) after: Vec<u64>,
    pub(super) plan: Plan,
    pub(super) buf: Option<DmaBuf>,
    pub(super) fua: bool,
}

/// A completed request waiting for durable metadata before its answer.
pub(super) struct BlockedAck {
    pub(super) need: Durability,
    pub(super) reply: Reply,
    pub(super) buf: Option<DmaBuf>,
    pub(super) fua: bool,
}

/// A shrink whose cut blocks' removals are not durable yet.
pub(super) struct Shrink {
    pub(super) need: Durability,
    pub(super) region: Arc<VolumeRegion>,
    pub(super) capacity: u64,
    pub(super) reply: oneshot::Sender<Result<(), VolumeError>>,
}
