//! Mirrored write-back: a volume's role, and where an owner mirrors its
//! writes.
//!
//! In write-back the owner of a mirrored volume forwards every write and
//! deallocate to the mirror's copy of the volume ([`Replica`]) when it plans
//! it, and answers the host only once both servers have it: a write is on
//! two cache devices before it is acknowledged. The mirror never cleans
//! (its role holds write-back); when the owner's write-back has put bytes
//! in core it tells the mirror, which marks them clean without any I/O
//! ([`CachedVolume::mark_clean`](super::CachedVolume::mark_clean)). So the
//! mirror's dirty set always covers the owner's, and every byte it does
//! not hold dirty is in core: promoted, it serves the volume as it was
//! acknowledged and writes its dirty set back.
//!
//! Order: a request overlapping a forwarded operation that the mirror has
//! not answered waits for it, so two operations on the same bytes (two
//! writes, or a write and the mark of an earlier write-back) never race on
//! the wire and the mirror applies them in the owner's order.
//!
//! A mirror that fails an operation is broken: the owner keeps serving,
//! but holds the answers of the writes it could not mirror (and of every
//! later one) until the control plane drops or replaces the mirror
//! ([`CachedVolume::set_replica`](super::CachedVolume::set_replica)): an
//! acknowledged write is never on one server only while the volume is
//! meant to have two.

use bdev::{BoxFuture, DmaBuf};
use serde::{Deserialize, Serialize};

/// What a cached volume is to its subsystem's hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Serves hosts, writes back, forwards to its mirror when it has one.
    #[default]
    Owner,
    /// Holds a copy of the owner's dirty data: writes back nothing, and
    /// flushes are refused, until it is made owner.
    Mirror,
}

impl Role {
    /// The role's name, as `bdev_adacache_set_role` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Mirror => "mirror",
        }
    }
}

/// An operation the mirror failed, in words for a log line.
pub type ReplicaError = String;

/// The mirror's copy of a volume, as the owner reaches it (the daemon's
/// NVMe/TCP connection to the mirror's replication subsystem). Each
/// operation completes once the mirror has it as durably as the owner
/// has its own: in the mirror's cache with durable metadata.
pub trait Replica: Send + Sync + 'static {
    /// Writes `data` at byte `offset` (`fua`: durable before completion).
    fn write(
        &self,
        offset: u64,
        data: DmaBuf,
        fua: bool,
    ) -> BoxFuture<'static, Result<(), ReplicaError>>;
    /// Deallocates `[offset, offset + len)`.
    fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'static, Result<(), ReplicaError>>;
    /// The owner wrote `[offset, offset + len)` back to core: the mirror
    /// may clean its dirty bytes there.
    fn mark_clean(&self, offset: u64, len: u64) -> BoxFuture<'static, Result<(), ReplicaError>>;
    /// Makes every completed write durable on the mirror's device.
    fn flush(&self) -> BoxFuture<'static, Result<(), ReplicaError>>;
    /// Where the mirror is, for status and logs.
    fn describe(&self) -> String;
}

/// The `replica` part of `bdev_adacache_get_stats` (an owner with a
/// mirror).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplicaStats {
    /// Where the mirror is.
    pub target: String,
    /// `in-sync`, `syncing` (dirty data from before the mirror was
    /// attached is being written back, so it is on one server only) or
    /// `broken` (an operation failed; answers are held).
    pub state: &'static str,
    /// The first failure since the mirror was attached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Operations sent and not yet answered.
    pub inflight: usize,
    /// Writes mirrored.
    pub writes: u64,
    /// Bytes they carried.
    pub write_bytes: u64,
    /// Deallocates mirrored.
    pub deallocates: u64,
    /// Clean marks sent.
    pub marks: u64,
    /// Bytes they marked clean.
    pub mark_bytes: u64,
}
