//! Read hits served by the caller: when a read's plan is nothing but cache
//! reads (no fill, no core read, no write-back, no eviction), the owner
//! answers with a [`HitGrant`] instead of running the plan, and the
//! caller reads the cache device straight into the host's buffer. A RAM
//! or file read then completes in the caller's own task, with no task
//! switch to the owner and back.
//!
//! The grant carries the plan's ticket, whose shared pins keep every block
//! read here from being evicted, reused or written until the read ends:
//! [`HitGuard`] returns the ticket to the owner once the read completed, or
//! when the grant or the request is dropped before (a host that went
//! away). A device may still be reading into such a request's buffer after
//! that; the buffer is nobody's then, so the bytes it gets do not matter.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bdev::view::BufView;
use bdev::{BdevError, CountedBdev, DmaBuf};
use engine::{Plan, Ticket};
use futures_util::future::join_all;
use tokio::sync::mpsc;

use super::exec::{damaged_error, in_request, unit_pieces};
use super::meta::ReadCheck;
use crate::layout::{VolumeRegion, UNIT_SIZE};

/// Where a hit's bytes are on the cache device.
pub(crate) enum Pieces {
    /// The whole request from one device offset (the usual case: one
    /// block, one unit), read into the host's buffer itself.
    One(u64),
    /// (range of the request's buffer, device offset) per piece, disjoint,
    /// read into views of the host's buffer.
    Many(Vec<(Range<usize>, u64)>),
}

impl Pieces {
    /// `plan`'s cache reads, cut at unit boundaries (units are not
    /// contiguous on the device).
    pub(crate) fn of(region: &VolumeRegion, plan: &Plan) -> Pieces {
        let req = plan.request;
        if let [c] = plan.cache_reads[..] {
            if c.offset == req.offset
                && c.len == req.len
                && c.cache_addr % UNIT_SIZE + c.len <= UNIT_SIZE
            {
                return Pieces::One(region.data_offset(c.cache_addr));
            }
        }
        let out = plan
            .cache_reads
            .iter()
            .flat_map(|c| unit_pieces(region, c))
            .map(|(off, len, dev)| (in_request(req, off, len), dev))
            .collect();
        Pieces::Many(out)
    }
}

/// What the owner learns when a granted hit ends.
pub(crate) struct HitDone {
    pub ticket: Option<Ticket>,
    /// From the request's arrival to the end of its read; `None` when the
    /// request went away first (no latency to record).
    pub elapsed_ns: Option<u64>,
    /// Cache-device reads that failed.
    pub failed_reads: u64,
    /// Dirty ranges whose bytes failed their checksum.
    pub damaged: Vec<engine::Extent>,
}

/// Returns a granted hit's ticket to the owner exactly once: by
/// [`HitGuard::finish`], or on drop (abandoned), as a message `M` on the
/// owner's channel. Generic so that hits need not know the owner's
/// message type, which carries grants itself (`msg.rs`).
pub(crate) struct HitGuard<M: From<HitDone>> {
    tx: mpsc::UnboundedSender<M>,
    ticket: Option<Ticket>,
    arrived: Instant,
    finished: bool,
}

impl<M: From<HitDone>> HitGuard<M> {
    pub(crate) fn new(
        tx: mpsc::UnboundedSender<M>,
        ticket: Option<Ticket>,
        arrived: Instant,
    ) -> HitGuard<M> {
        HitGuard {
            tx,
            ticket,
            arrived,
            finished: false,
        }
    }

    /// The read ended at `end`: what the owner must hear.
    fn finish(mut self, failed_reads: u64, end: Instant, damaged: Vec<engine::Extent>) -> HitDone {
        self.finished = true;
        HitDone {
            ticket: self.ticket,
            elapsed_ns: Some(since(self.arrived, end)),
            failed_reads,
            damaged,
        }
    }
}

impl<M: From<HitDone>> Drop for HitGuard<M> {
    fn drop(&mut self) {
        if !self.finished {
            // The owner may be gone (stopped): then nothing is pinned.
            let _ = self.tx.send(M::from(HitDone {
                ticket: self.ticket,
                elapsed_ns: None,
                failed_reads: 0,
                damaged: Vec::new(),
            }));
        }
    }
}

/// Nanoseconds from `start` to `end`: a hit's latency.
pub(crate) fn since(start: Instant, end: Instant) -> u64 {
    end.saturating_duration_since(start).as_nanos() as u64
}

/// A pure read hit the caller serves itself; `M` is the owner's message
/// type (see [`HitGuard`]).
pub(crate) struct HitGrant<M: From<HitDone>> {
    pub pieces: Pieces,
    pub guard: HitGuard<M>,
    /// Dirty bytes the read verifies once read, and the volume's region
    /// to name in the error (only then).
    pub checks: Option<(Vec<ReadCheck>, Arc<VolumeRegion>)>,
}

impl<M: From<HitDone>> HitGrant<M> {
    /// Reads the hit from `cache` into `buf` (the request's buffer).
    /// Returns the buffer, the host's result, and what the owner must
    /// hear.
    pub(crate) async fn serve(
        self,
        cache: &CountedBdev,
        buf: DmaBuf,
    ) -> (DmaBuf, Result<(), BdevError>, HitDone) {
        let len = buf.len();
        let (buf, r, failed, end) = match self.pieces {
            Pieces::One(dev) => {
                // The device's counters read the clock when the read ends;
                // the hit's latency ends there too.
                let (b, r, end) = cache.read_ended(dev, buf).await;
                let failed = u64::from(r.is_err());
                (b, r, failed, end)
            }
            Pieces::Many(pieces) => {
                let (b, r, failed) = read_pieces(cache, pieces, buf, len).await;
                (b, r, failed, Instant::now())
            }
        };
        let (damaged, r) = match (&self.checks, r) {
            (Some((checks, region)), Ok(())) => {
                let damaged = ReadCheck::failures(&buf, checks);
                let r = match damaged.first() {
                    Some(d) => Err(damaged_error(&region.name, d.offset, d.len)),
                    None => Ok(()),
                };
                (damaged, r)
            }
            (_, r) => (Vec::new(), r),
        };
        (buf, r, self.guard.finish(failed, end, damaged))
    }
}

/// Reads each piece into its own view of `buf`, concurrently.
async fn read_pieces(
    cache: &CountedBdev,
    pieces: Vec<(Range<usize>, u64)>,
    buf: DmaBuf,
    len: usize,
) -> (DmaBuf, Result<(), BdevError>, u64) {
    let (ranges, devs): (Vec<_>, Vec<_>) = pieces.into_iter().unzip();
    let views = match buf.into_views(ranges) {
        Ok(v) => v,
        Err(e) => {
            let err = BdevError::InvalidArgument(e.to_string());
            return (e.buf, Err(err), 1);
        }
    };
    let results = join_all(
        devs.into_iter()
            .zip(views)
            .map(|(dev, v)| cache.read_view(dev, v)),
    )
    .await;
    let mut first = None;
    let mut failed = 0;
    let mut views = Vec::with_capacity(results.len());
    for (v, r) in results {
        if let Err(e) = r {
            failed += 1;
            first.get_or_insert(e);
        }
        views.push(v);
    }
    match BufView::reunite(views) {
        Ok(b) => (b, first.map_or(Ok(()), Err), failed),
        // A device lost a view (it hands back a stand-in on some errors):
        // the request fails, with a fresh buffer.
        Err(e) => {
            let err = first.unwrap_or_else(|| BdevError::InvalidArgument(e.to_string()));
            (DmaBuf::new(len), Err(err), failed.max(1))
        }
    }
}
