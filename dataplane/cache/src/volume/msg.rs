//! What passes between a volume's callers and its owner: host requests
//! and their answers, control calls, and the owner's other messages.

use std::sync::Arc;
use std::time::Instant;

use bdev::{BdevError, DmaBuf};
use tokio::sync::oneshot;

use super::hit::{HitDone, HitGrant};
use super::replica::{Replica, Role};
use super::{CacheMode, FlushStatus, PolicyChange, VolumeError, VolumeMrc, VolumeStats};
use crate::layout::VolumeRegion;

/// A host operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostOp {
    Read,
    Write { fua: bool },
    Deallocate,
}

/// The mirror's answer to a forwarded request: `Err(generation)` when
/// the mirror is broken since that generation of
/// `CachedVolume::set_replica` (the answer waits for the next one).
pub(crate) type MirrorAnswer = Result<(), u64>;

/// What a host request is answered with.
pub(crate) enum Answer {
    /// Its outcome, with its buffer.
    Done(Option<DmaBuf>, Result<(), BdevError>),
    /// A pure read hit for the caller to read itself, with its buffer.
    Hit(HitGrant<Msg>, DmaBuf),
    /// A write that succeeded here and was forwarded to the mirror: it is
    /// acknowledged once the mirror has it too (see [`super::replica`]).
    Mirrored(Option<DmaBuf>, oneshot::Receiver<MirrorAnswer>),
}

/// What a read submitted in place (`Owner::read_now`) became.
pub(crate) enum Now {
    /// A pure hit for the caller to read at once: no channel was made.
    Hit(HitGrant<Msg>, DmaBuf),
    /// Refused at once.
    Done(Option<DmaBuf>, Result<(), BdevError>),
    /// Queued or running: the answer comes on this channel.
    Wait(oneshot::Receiver<Answer>),
}

/// The way back to a host request's caller, and the mirror's answer the
/// caller waits for too when the request was forwarded.
pub(crate) struct Reply {
    tx: oneshot::Sender<Answer>,
    mirrored: Option<oneshot::Receiver<MirrorAnswer>>,
}

impl Reply {
    pub(crate) fn channel() -> (Reply, oneshot::Receiver<Answer>) {
        let (tx, rx) = oneshot::channel();
        (Reply { tx, mirrored: None }, rx)
    }

    /// The request was forwarded to the mirror, which answers on `rx`.
    pub(crate) fn set_mirrored(&mut self, rx: oneshot::Receiver<MirrorAnswer>) {
        self.mirrored = Some(rx);
    }

    /// Answers with the outcome; fails when the caller went away.
    pub(crate) fn send(self, (buf, r): (Option<DmaBuf>, Result<(), BdevError>)) -> Result<(), ()> {
        let answer = match (self.mirrored, r) {
            (Some(rx), Ok(())) => Answer::Mirrored(buf, rx),
            (_, r) => Answer::Done(buf, r),
        };
        self.tx.send(answer).map_err(|_| ())
    }

    /// Hands over a hit. A caller that went away drops the grant, whose
    /// guard then gives the ticket back.
    pub(crate) fn grant(self, g: HitGrant<Msg>, buf: DmaBuf) {
        let _ = self.tx.send(Answer::Hit(g, buf));
    }
}

/// A host request on its way to the owner.
pub(crate) struct HostIo {
    pub op: HostOp,
    pub offset: u64,
    pub len: u64,
    pub buf: Option<DmaBuf>,
    pub reply: Reply,
    pub arrived: Instant,
}

/// What the owner receives.
pub(crate) enum Msg {
    Io(HostIo),
    Ctl(Control),
    MetaDone {
        unit: u32,
        version: u64,
        ok: bool,
    },
    BypassDone(u64, Option<DmaBuf>, Result<(), BdevError>),
    /// A granted hit's read ended, or its request went away.
    HitDone(HitDone),
}

impl From<HitDone> for Msg {
    fn from(d: HitDone) -> Msg {
        Msg::HitDone(d)
    }
}

/// Control calls the owner runs between requests.
pub(crate) enum Control {
    Stats(oneshot::Sender<VolumeStats>),
    Mrc(oneshot::Sender<VolumeMrc>),
    ResetStats(oneshot::Sender<()>),
    StartFlush(oneshot::Sender<()>),
    FlushAll(oneshot::Sender<Result<(), VolumeError>>),
    FlushStatus(oneshot::Sender<FlushStatus>),
    SetMode(CacheMode, oneshot::Sender<Result<(), VolumeError>>),
    /// Starts a change of mode and answers at once (see
    /// `CachedVolume::start_set_mode`).
    StartSetMode(CacheMode, oneshot::Sender<Result<(), VolumeError>>),
    SetPolicy(PolicyChange, oneshot::Sender<Result<(), VolumeError>>),
    Resize {
        capacity: u64,
        region: Arc<VolumeRegion>,
        reply: oneshot::Sender<Result<(), VolumeError>>,
    },
    GrowVolume {
        volume_size: u64,
        reply: oneshot::Sender<Result<(), VolumeError>>,
    },
    Stop {
        flush: bool,
        reply: oneshot::Sender<Result<(), VolumeError>>,
    },
    /// Makes the volume owner or mirror (see [`super::replica`]).
    SetRole(Role, Option<u64>, oneshot::Sender<Result<(), VolumeError>>),
    /// Attaches (or with `None` drops) the mirror an owner forwards to.
    SetReplica(
        Option<Arc<dyn Replica>>,
        oneshot::Sender<Result<(), VolumeError>>,
    ),
    /// A mirror's owner wrote these bytes back: clean them here.
    MarkClean {
        offset: u64,
        len: u64,
        reply: oneshot::Sender<Result<u64, VolumeError>>,
    },
}
