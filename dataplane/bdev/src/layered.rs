//! Bdevs built in other crates on top of bdevs of this one (the cached
//! volume in `dataplane/cache`): the [`Bdev::Layered`](crate::Bdev::Layered)
//! variant holds them behind this trait, so that this crate needs no
//! dependency on theirs and the NVMe-oF target exports them like any bdev.
//!
//! Operations return boxed futures (the trait is object safe); their
//! contract is [`Bdev`](crate::Bdev)'s: ranges are checked by the caller
//! before they get here, buffers come back with the result.
//!
//! The operations on views ([`BufView`]) have default methods that go
//! through a temporary [`DmaBuf`] and a copy, so an implementor need not
//! write them; one that can do better (a cached volume splitting the view
//! further) overrides them.

use std::time::Instant;

use crate::{BdevInfo, BoxFuture, BufView, DmaBuf, IoKind, Result};

/// A read that completed in the call ([`LayeredBdev::read_inline`]): the
/// buffer, the result and the instant it ended; or the buffer handed back
/// untouched, to be read the usual way.
pub type ReadInline<B> = std::result::Result<(B, Result<()>, Instant), B>;

/// A bdev's entry in a saved configuration (SPDK's `save_config`; each
/// SPDK bdev module writes its own with `write_config_json`): the RPC
/// method and parameters that recreate the bdev as it is now.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigCall {
    /// The RPC method (`bdev_adacache_create`, ...).
    pub method: &'static str,
    /// Its parameters.
    pub params: serde_json::Value,
}

/// A bdev implemented outside this crate.
pub trait LayeredBdev: Send + Sync {
    /// Name, size, block size and identity.
    fn info(&self) -> &BdevInfo;
    /// Whether the device supports `kind`.
    fn supports(&self, kind: IoKind) -> bool;
    /// The names of the bdevs it is built on (they are claimed by it).
    fn base_names(&self) -> Vec<String>;
    /// Reads `buf.len()` bytes at `offset`.
    fn read(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)>;
    /// [`Self::read`] completed before returning, when this read can be
    /// (a cached volume's hit on a RAM cache device): no future to box
    /// and poll. `arrived` is when the caller took the request, and the
    /// instant the read ended comes back with it: such a read takes a few
    /// hundred nanoseconds, and the clock reads the counters of both sides
    /// would otherwise repeat are a good part of that. `Err` hands the
    /// buffer back with nothing done; the caller then reads it with
    /// [`Self::read`].
    fn read_inline(&self, _offset: u64, buf: DmaBuf, _arrived: Instant) -> ReadInline<DmaBuf> {
        Err(buf)
    }
    /// Writes `buf` at `offset`.
    fn write(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)>;
    /// Writes `buf` at `offset`, durable before it completes (FUA).
    fn write_fua(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)>;
    /// Reads `view.len()` bytes at `offset` into the view. By default
    /// into a temporary buffer, copied into the view on success.
    fn read_view(&self, offset: u64, mut view: BufView) -> BoxFuture<'_, (BufView, Result<()>)> {
        Box::pin(async move {
            let (tmp, r) = self.read(offset, DmaBuf::new(view.len())).await;
            if r.is_ok() {
                view.copy_from_slice(&tmp);
            }
            (view, r)
        })
    }
    /// Writes the view at `offset`. By default from a temporary copy.
    fn write_view(&self, offset: u64, view: BufView) -> BoxFuture<'_, (BufView, Result<()>)> {
        Box::pin(async move {
            let (_, r) = self.write(offset, DmaBuf::from_slice(&view)).await;
            (view, r)
        })
    }
    /// Writes the view at `offset`, durable before it completes (FUA). By
    /// default from a temporary copy.
    fn write_fua_view(&self, offset: u64, view: BufView) -> BoxFuture<'_, (BufView, Result<()>)> {
        Box::pin(async move {
            let (_, r) = self.write_fua(offset, DmaBuf::from_slice(&view)).await;
            (view, r)
        })
    }
    /// Makes every completed write durable.
    fn flush(&self) -> BoxFuture<'_, Result<()>>;
    /// Zeroes a range.
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<()>>;
    /// Deallocates a range; it reads as zeroes after.
    fn unmap(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<()>>;
    /// A mirror's clean mark ([`crate::IoKind::MarkClean`]); unsupported
    /// unless the bdev says otherwise.
    fn mark_clean(&self, _offset: u64, _len: u64) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Err(crate::BdevError::Unsupported(crate::IoKind::MarkClean)) })
    }
    /// Its entry in a saved configuration, written by the bdev itself
    /// because its parameters change after creation (a cached volume's
    /// mode, policies and size). `None`: the call that created it, as the
    /// caller recorded it, recreates it.
    fn config_call(&self) -> Option<ConfigCall> {
        None
    }
    /// The concrete type, for the crate that made it (RPC handlers).
    fn as_any(&self) -> &dyn std::any::Any;
}
