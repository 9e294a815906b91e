//! What passes between a volume's callers and its owner: host requests
//! and their answers, control calls, and the owner's other messages.

use std::sync::Arc;
use std::time::Instant;

use bdev::{BdevError, DmaBuf};
use tokio::sync::oneshot;

use super::hit::{HitDone, HitGrant};
use super::{CacheMode, FlushStatus, PolicyChange, VolumeError, VolumeMrc, VolumeStats};
use crate::layout::VolumeRegion;

/// A host operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostOp {
    Read,
    Write { fua: bool },
    Deallocate,
}

/// What a host request is answered with.
pub(crate) enum Answer {
    /// Its outcome, with its buffer.
    Done(Option<DmaBuf>, Result<(), BdevError>),
    /// A pure read hit for the caller to read itself, with its buffer.
    Hit(HitGrant<Msg>, DmaBuf),
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

/// The way back to a host request's caller.
pub(crate) struct Reply(oneshot::Sender<Answer>);

impl Reply {
    pub(crate) fn channel() -> (Reply, oneshot::Receiver<Answer>) {
        let (tx, rx) = oneshot::channel();
        (Reply(tx), rx)
    }

    /// Answers with the outcome; fails when the caller went away.
    pub(crate) fn send(self, (buf, r): (Option<DmaBuf>, Result<(), BdevError>)) -> Result<(), ()> {
        self.0.send(Answer::Done(buf, r)).map_err(|_| ())
    }

    /// Hands over a hit. A caller that went away drops the grant, whose
    /// guard then gives the ticket back.
    pub(crate) fn grant(self, g: HitGrant<Msg>, buf: DmaBuf) {
        let _ = self.0.send(Answer::Hit(g, buf));
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
}
