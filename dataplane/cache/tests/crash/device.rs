//! A RAM bdev as a crash test steers it: gates hold chosen operations
//! ([`Gate`]), faults fail them, and a crash drops every write from then on
//! (as after `kill -9`, only what completed before is on the media; what
//! the process had in flight never lands).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bdev::layered::LayeredBdev;
use bdev::{Bdev, BdevError, BdevInfo, BoxFuture, CountedBdev, DmaBuf, IoKind};
use cache::layout::Geometry;

use crate::common::counted;
use crate::gate::Gate;

/// Reads, or anything that changes data (writes, Write Zeroes, Unmap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

/// Where on the device: the cache device's header (the superblock copies
/// holding the volume table), unit-metadata area or data area, or anywhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Area {
    Whole,
    Header,
    Meta,
    Data,
}

/// The operations a gate or a fault applies to.
#[derive(Clone, Copy, Debug)]
pub struct Ops {
    kind: Kind,
    area: Area,
}

impl Ops {
    pub const fn reads(area: Area) -> Ops {
        Ops {
            kind: Kind::Read,
            area,
        }
    }

    pub const fn writes(area: Area) -> Ops {
        Ops {
            kind: Kind::Write,
            area,
        }
    }
}

/// Fails matching operations: the next `left` of them, or all while
/// `left` is `None`.
struct Fault {
    ops: Ops,
    left: Option<u32>,
}

/// What the test controls of one device (shared with the bdev it wraps).
pub struct Steer {
    whole: Range<u64>,
    header: Range<u64>,
    meta: Range<u64>,
    data: Range<u64>,
    crashed: AtomicBool,
    gates: Mutex<Vec<(Ops, Arc<Gate>)>>,
    faults: Mutex<Vec<Fault>>,
    failures: AtomicU64,
}

impl Steer {
    /// Installs a closed gate for `ops`; `what` names them in messages.
    pub fn gate(&self, ops: Ops, what: &'static str) -> Arc<Gate> {
        let g = Arc::new(Gate::closed(what));
        self.gates.lock().unwrap().push((ops, g.clone()));
        g
    }

    /// Fails the next `n` operations of `ops`.
    pub fn fail_next(&self, ops: Ops, n: u32) {
        self.faults
            .lock()
            .unwrap()
            .push(Fault { ops, left: Some(n) });
    }

    /// Fails every operation of `ops` until [`Self::stop_failing`].
    pub fn fail_all(&self, ops: Ops) {
        self.faults.lock().unwrap().push(Fault { ops, left: None });
    }

    pub fn stop_failing(&self) {
        self.faults.lock().unwrap().clear();
    }

    /// Operations failed so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    /// From now on no write reaches the media.
    pub fn crash(&self) {
        self.crashed.store(true, Ordering::SeqCst);
    }

    fn range(&self, area: Area) -> &Range<u64> {
        match area {
            Area::Whole => &self.whole,
            Area::Header => &self.header,
            Area::Meta => &self.meta,
            Area::Data => &self.data,
        }
    }

    fn applies(&self, ops: Ops, kind: Kind, at: &Range<u64>) -> bool {
        let r = self.range(ops.area);
        ops.kind == kind && at.start < r.end && r.start < at.end
    }

    /// Before an operation reaches the media: a fault fails it, gates hold
    /// it.
    async fn admit(&self, kind: Kind, offset: u64, len: u64) -> bdev::Result<()> {
        let at = offset..offset + len;
        let failed = self.faults.lock().unwrap().iter_mut().any(|f| {
            let hit = self.applies(f.ops, kind, &at) && f.left != Some(0);
            if hit {
                f.left = f.left.map(|n| n - 1);
            }
            hit
        });
        if failed {
            self.failures.fetch_add(1, Ordering::SeqCst);
            return Err(BdevError::InvalidArgument(format!(
                "injected failure of a {kind:?} at {offset}"
            )));
        }
        let gates: Vec<Arc<Gate>> = (self.gates.lock().unwrap().iter())
            .filter(|(ops, _)| self.applies(*ops, kind, &at))
            .map(|(_, g)| g.clone())
            .collect();
        for g in gates {
            g.pass().await;
        }
        Ok(())
    }

    fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }
}

/// `ram` steered. For a cache device, [`Area::Header`], [`Area::Meta`] and
/// [`Area::Data`] are the areas of the format a device of its size gets;
/// for core each is the whole device.
pub fn steered(ram: &Arc<Bdev>, cache_device: bool) -> (CountedBdev, Arc<Steer>) {
    let size = ram.info().size_bytes();
    let (header, meta, data) = if cache_device {
        let g = Geometry::for_device(size);
        (
            0..g.meta_offset,
            g.meta_offset..g.data_offset,
            g.data_offset..g.device_bytes(),
        )
    } else {
        (0..size, 0..size, 0..size)
    };
    let steer = Arc::new(Steer {
        whole: 0..size,
        header,
        meta,
        data,
        crashed: AtomicBool::new(false),
        gates: Mutex::new(Vec::new()),
        faults: Mutex::new(Vec::new()),
        failures: AtomicU64::new(0),
    });
    let b = Steered {
        inner: ram.clone(),
        info: ram.info().clone(),
        steer: steer.clone(),
    };
    (counted(Bdev::Layered(Box::new(b))), steer)
}

struct Steered {
    inner: Arc<Bdev>,
    info: BdevInfo,
    steer: Arc<Steer>,
}

impl Steered {
    async fn write(&self, offset: u64, buf: DmaBuf, fua: bool) -> (DmaBuf, bdev::Result<()>) {
        if let Err(e) = self
            .steer
            .admit(Kind::Write, offset, buf.len() as u64)
            .await
        {
            return (buf, Err(e));
        }
        if self.steer.crashed() {
            return (buf, Ok(()));
        }
        if fua {
            self.inner.write_fua(offset, buf).await
        } else {
            self.inner.write(offset, buf).await
        }
    }

    async fn change(&self, offset: u64, len: u64, unmap: bool) -> bdev::Result<()> {
        self.steer.admit(Kind::Write, offset, len).await?;
        if self.steer.crashed() {
            return Ok(());
        }
        if unmap {
            self.inner.unmap(offset, len).await
        } else {
            self.inner.write_zeroes(offset, len).await
        }
    }
}

impl LayeredBdev for Steered {
    fn info(&self) -> &BdevInfo {
        &self.info
    }

    fn supports(&self, kind: IoKind) -> bool {
        self.inner.supports(kind)
    }

    fn base_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn read(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(async move {
            match self.steer.admit(Kind::Read, offset, buf.len() as u64).await {
                Ok(()) => self.inner.read(offset, buf).await,
                Err(e) => (buf, Err(e)),
            }
        })
    }

    fn write(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(Steered::write(self, offset, buf, false))
    }

    fn write_fua(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, bdev::Result<()>)> {
        Box::pin(Steered::write(self, offset, buf, true))
    }

    fn flush(&self) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(self.inner.flush())
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(self.change(offset, len, false))
    }

    fn unmap(&self, offset: u64, len: u64) -> BoxFuture<'_, bdev::Result<()>> {
        Box::pin(self.change(offset, len, true))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
