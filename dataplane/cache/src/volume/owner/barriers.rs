//! Work waiting for durable metadata: plans before their I/O, answers,
//! writes bypassing to core, shrinks. `Owner::pump` releases each once
//! what it needs is durable (or fails it when that never can be).

use std::sync::Arc;

use bdev::DmaBuf;
use engine::Plan;
use tokio::sync::oneshot;

use crate::layout::VolumeRegion;
use crate::volume::meta::Durability;
use crate::volume::msg::{HostOp, Reply};
use crate::volume::VolumeError;

/// What waits for durable metadata.
#[derive(Default)]
pub(super) struct Barriers {
    /// Plans before their I/O.
    pub(super) starts: Vec<BlockedStart>,
    /// Completed requests before their answer.
    pub(super) acks: Vec<BlockedAck>,
    /// Bypassing writes waiting for the removal barrier.
    pub(super) bypasses: Vec<BlockedBypass>,
    /// Shrinks waiting for the removal of the blocks they cut.
    pub(super) shrinks: Vec<Shrink>,
}

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

/// A write bypassing the cache: core changes under blocks whose entries
/// were removed, so it waits until those removals are durable.
pub(super) struct BlockedBypass {
    pub(super) id: u64,
    pub(super) op: HostOp,
    pub(super) offset: u64,
    pub(super) buf: Option<DmaBuf>,
    pub(super) need: Durability,
}

/// A shrink whose cut blocks' removals are not durable yet.
pub(super) struct Shrink {
    pub(super) need: Durability,
    pub(super) region: Arc<VolumeRegion>,
    pub(super) capacity: u64,
    pub(super) reply: oneshot::Sender<Result<(), VolumeError>>,
}
