//! Block devices ("bdevs") in SPDK's sense: the layer the cache reads misses
//! from and writes back to (the core device, usually Ceph RBD), and the layer
//! it keeps cached blocks on (the cache device, a file or NVMe namespace).
//!
//! # Design
//!
//! - One enum, [`Bdev`], over the kinds in this crate: static dispatch keeps
//!   `async fn` free of boxing and makes the set of kinds explicit.
//! - Buffers are owned and passed in and out ([`DmaBuf`]): librbd and
//!   io_uring keep writing into a buffer until they complete, so a future that
//!   is dropped early must not free memory still in use. The bdev holds the
//!   buffer until the device is done with it, then hands it back.
//! - One host buffer can serve several concurrent operations without a
//!   copy: [`DmaBuf::into_views`] splits it into disjoint [`BufView`]s that
//!   move into [`Bdev::read_view`], [`Bdev::write_view`] and
//!   [`Bdev::write_fua_view`] (same contract as the `DmaBuf` operations),
//!   and [`BufView::reunite`] gives the whole buffer back once every view
//!   has returned ([`view`] has the soundness argument). Both kinds of
//!   buffer take one path through each bdev kind (an internal buffer
//!   trait), so views cost nothing extra. A view must start at a multiple
//!   of the block size (of 4096 for larger blocks), as O_DIRECT needs.
//! - Completions from librbd's threads wake the waiting task through a
//!   oneshot channel; nothing on the I/O path takes a lock shared by queues.
//! - Offsets and lengths are bytes and must be multiples of the block size
//!   ([`BdevError::Misaligned`]); I/O past the end fails with
//!   [`BdevError::OutOfRange`] and touches nothing.
//!
//! Kinds: [`malloc`] (RAM, for tests and benchmarks), [`file`] (a file or
//! block device, O_DIRECT where the filesystem allows it), [`rbd`] (Ceph RBD
//! through librbd's C API, cephx), and two wrappers of another bdev for
//! fault injection: [`delay`] (added latency) and [`error_inject`]
//! (failing, hanging or corrupting I/O); [`layered`]: bdevs of other crates
//! built on these (cached volumes). A wrapper's operations box the
//! base's future (the enum is recursive through them). [`stats`]: per-bdev I/O counters and
//! [`CountedBdev`], the counted handle the daemon and the NVMe-oF target
//! use.

pub mod buf;
pub mod delay;
pub mod error;
pub mod error_inject;
pub mod file;
mod huge;
pub mod layered;
pub mod malloc;
pub mod rbd;
pub mod stats;
mod uring;
pub mod view;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub use buf::DmaBuf;
use buf::IoBuf;
pub use layered::ConfigCall;
pub use view::{BufView, ReuniteError, SplitError, ViewError};

/// A boxed, sendable future: what the wrapper bdevs' operations return, so
/// that the recursive `Bdev` enum (a wrapper's future awaits its base's)
/// has futures of a known type.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
pub use error::{BdevError, Result};
pub use stats::{CountedBdev, IoStats, LocalReads, INLINE_TIMED_EVERY};

/// Operations a bdev may support.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    /// Read.
    Read,
    /// Write.
    Write,
    /// Make written data durable.
    Flush,
    /// Write zeroes without sending them.
    WriteZeroes,
    /// Deallocate (discard/trim).
    Unmap,
    /// A mirror's clean mark: its owner wrote a range back (cached
    /// volumes only; a vendor-specific NVMe command).
    MarkClean,
}

/// A bdev's size in blocks, which can grow while it is in use (an RBD
/// image resized under an attached namespace). Clones share one count, so a
/// bdev layered on another (delay, error injection) follows its base's size.
#[derive(Clone, Debug)]
pub struct BlockCount(Arc<AtomicU64>);

impl BlockCount {
    /// A count of `blocks`.
    pub fn new(blocks: u64) -> Self {
        Self(Arc::new(AtomicU64::new(blocks)))
    }

    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Raises the count to `blocks`; a smaller value changes nothing (sizes
    /// only grow while the bdev exists: data beyond a shrunk end would be
    /// lost under whoever still addresses it).
    pub fn grow_to(&self, blocks: u64) {
        self.0.fetch_max(blocks, Ordering::AcqRel);
    }
}

impl PartialEq for BlockCount {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for BlockCount {}

/// What every bdev reports about itself (SPDK's `bdev_get_bdevs` fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BdevInfo {
    /// Unique name.
    pub name: String,
    /// Product name, e.g. "Malloc disk", "AIO disk", "Ceph Rbd Disk".
    pub product_name: &'static str,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// Number of logical blocks, now: read it with [`BdevInfo::num_blocks`].
    pub blocks: BlockCount,
    /// Stable identifier (NVMe namespaces derive NGUID/UUID from it).
    pub uuid: [u8; 16],
}

impl BdevInfo {
    /// Number of logical blocks, now.
    pub fn num_blocks(&self) -> u64 {
        self.blocks.get()
    }

    /// Size in bytes, now.
    pub fn size_bytes(&self) -> u64 {
        self.num_blocks() * u64::from(self.block_size)
    }

    /// Checks that `[offset, offset + len)` is block-aligned and inside the
    /// device.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        let bs = u64::from(self.block_size);
        if !offset.is_multiple_of(bs) || !len.is_multiple_of(bs) {
            return Err(BdevError::Misaligned {
                offset,
                len,
                block_size: self.block_size,
            });
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.size_bytes() => Ok(()),
            _ => Err(BdevError::OutOfRange {
                offset,
                len,
                size: self.size_bytes(),
            }),
        }
    }
}

/// A block device of any kind in this crate.
pub enum Bdev {
    /// RAM.
    Malloc(malloc::MallocBdev),
    /// A file or block device.
    File(file::FileBdev),
    /// A Ceph RBD image.
    Rbd(rbd::RbdBdev),
    /// Another bdev with added latency.
    Delay(delay::DelayBdev),
    /// Another bdev with injectable errors.
    Error(error_inject::ErrorBdev),
    /// A bdev of another crate built on bdevs of this one (cached volumes).
    Layered(Box<dyn layered::LayeredBdev>),
}

macro_rules! dispatch {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            Bdev::Malloc($b) => $e,
            Bdev::File($b) => $e,
            Bdev::Rbd($b) => $e,
            Bdev::Delay($b) => $e,
            Bdev::Error($b) => $e,
            Bdev::Layered($b) => $e,
        }
    };
}

impl Bdev {
    /// Name, size, block size and identity.
    pub fn info(&self) -> &BdevInfo {
        dispatch!(self, b => b.info())
    }

    /// Whether the device supports `kind`.
    pub fn supports(&self, kind: IoKind) -> bool {
        dispatch!(self, b => b.supports(kind))
    }

    /// Its entry in a saved configuration when the bdev writes its own
    /// ([`layered::LayeredBdev::config_call`]). The kinds of this crate do
    /// not change after creation (a delay bdev's latencies are set through
    /// the caller, which records them), so for them the call that created
    /// the bdev, as the caller recorded it, is the entry: `None`.
    pub fn config_call(&self) -> Option<ConfigCall> {
        match self {
            Bdev::Layered(l) => l.config_call(),
            Bdev::Malloc(_) | Bdev::File(_) | Bdev::Rbd(_) | Bdev::Delay(_) | Bdev::Error(_) => {
                None
            }
        }
    }

    /// Reads `buf.len()` bytes at `offset` into `buf`, returning the buffer.
    pub async fn read(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.read_buf(offset, buf).await
    }

    /// Writes `buf` at `offset`, returning the buffer.
    pub async fn write(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.write_buf(offset, buf, false).await
    }

    /// Writes `buf` at `offset` and makes it durable before returning
    /// (NVMe Force Unit Access): on stable media, not in a volatile cache.
    pub async fn write_fua(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.write_buf(offset, buf, true).await
    }

    /// [`Bdev::read`] into a view of a buffer, which comes back with the
    /// result (other views of the same buffer may be in other operations
    /// meanwhile). The view must start at a multiple of the block size (or
    /// of 4096 for larger blocks), else [`BdevError::InvalidArgument`]. If
    /// the device lost the view with a failure, the error comes with a
    /// stand-in view of a new buffer, which [`BufView::reunite`] refuses.
    pub async fn read_view(&self, offset: u64, view: BufView) -> (BufView, Result<()>) {
        self.read_buf(offset, view).await
    }

    /// [`Bdev::write`] from a view of a buffer; as [`Bdev::read_view`].
    pub async fn write_view(&self, offset: u64, view: BufView) -> (BufView, Result<()>) {
        self.write_buf(offset, view, false).await
    }

    /// [`Bdev::write_fua`] from a view of a buffer; as [`Bdev::read_view`].
    pub async fn write_fua_view(&self, offset: u64, view: BufView) -> (BufView, Result<()>) {
        self.write_buf(offset, view, true).await
    }

    /// Whether [`Self::read_inline`] always reads (RAM) rather than
    /// handing the buffer back.
    pub fn reads_inline(&self) -> bool {
        matches!(self, Bdev::Malloc(_))
    }

    /// Whether [`Self::read_inline`] may read (RAM always, a layered bdev
    /// sometimes): any other device hands every buffer back, so a caller
    /// need not try (nor read the clock for it).
    pub fn may_read_inline(&self) -> bool {
        matches!(self, Bdev::Malloc(_) | Bdev::Layered(_))
    }

    /// A read that completes before this returns: always on a device that
    /// never waits (RAM), sometimes on a layered bdev
    /// ([`layered::LayeredBdev::read_inline`]); otherwise the buffer comes back
    /// untouched. Callers holding a lock the read must finish under use
    /// it: an `await` would let other work run between.
    pub fn read_inline(
        &self,
        offset: u64,
        buf: DmaBuf,
    ) -> std::result::Result<(DmaBuf, Result<()>), DmaBuf> {
        self.read_inline_timed(offset, buf, None)
            .map(|(buf, r, _)| (buf, r))
    }

    /// [`Self::read_inline`] of a request taken at `arrived` (now if
    /// `None`), with the instant it ended when the device read that instant
    /// anyway (a layered read), as [`Self::read_buf_timed`].
    pub(crate) fn read_inline_timed(
        &self,
        offset: u64,
        mut buf: DmaBuf,
        arrived: Option<Instant>,
    ) -> std::result::Result<(DmaBuf, Result<()>, Option<Instant>), DmaBuf> {
        let checked = self.check_io(offset, &buf);
        match self {
            Bdev::Malloc(_) | Bdev::Layered(_) if checked.is_err() => Ok((buf, checked, None)),
            Bdev::Malloc(b) => {
                b.read_now(offset, &mut buf);
                Ok((buf, Ok(()), None))
            }
            Bdev::Layered(l) => l
                .read_inline(offset, buf, arrived.unwrap_or_else(Instant::now))
                .map(|(buf, r, ended)| (buf, r, Some(ended))),
            _ => Err(buf),
        }
    }

    /// The one read path, for whole buffers and views.
    pub(crate) async fn read_buf<B: IoBuf>(&self, offset: u64, buf: B) -> (B, Result<()>) {
        let (buf, r, _) = self.read_buf_timed(offset, buf, None).await;
        (buf, r)
    }

    /// [`Self::read_buf`] of a request taken at `arrived` (now if `None`),
    /// with the instant it ended when the device read that instant anyway
    /// (a layered read completed inline): a counting caller then reads the
    /// clock neither for the layer nor after it.
    pub(crate) async fn read_buf_timed<B: IoBuf>(
        &self,
        offset: u64,
        buf: B,
        arrived: Option<Instant>,
    ) -> (B, Result<()>, Option<Instant>) {
        if let Err(e) = self.check_io(offset, &buf) {
            return (buf, Err(e), None);
        }
        let (buf, r) = match self {
            Bdev::Malloc(b) => b.read_buf(offset, buf).await,
            Bdev::File(b) => b.read_buf(offset, buf).await,
            Bdev::Rbd(b) => b.read_buf(offset, buf).await,
            Bdev::Delay(b) => b.read_buf(offset, buf).await,
            Bdev::Error(b) => b.read_buf(offset, buf).await,
            // A layered read that can complete at once needs no boxed
            // future.
            Bdev::Layered(b) => {
                let arrived = arrived.unwrap_or_else(Instant::now);
                match B::layered_read_inline(b.as_ref(), offset, buf, arrived) {
                    Ok((buf, r, ended)) => return (buf, r, Some(ended)),
                    Err(buf) => B::layered_read(b.as_ref(), offset, buf).await,
                }
            }
        };
        (buf, r, None)
    }

    /// The one write path, durable before completion when `fua`.
    pub(crate) async fn write_buf<B: IoBuf>(
        &self,
        offset: u64,
        buf: B,
        fua: bool,
    ) -> (B, Result<()>) {
        if let Err(e) = self.check_io(offset, &buf) {
            return (buf, Err(e));
        }
        match self {
            Bdev::Malloc(b) => b.write_buf(offset, buf, fua).await,
            Bdev::File(b) => b.write_buf(offset, buf, fua).await,
            Bdev::Rbd(b) => b.write_buf(offset, buf, fua).await,
            Bdev::Delay(b) => b.write_buf(offset, buf, fua).await,
            Bdev::Error(b) => b.write_buf(offset, buf, fua).await,
            Bdev::Layered(b) => B::layered_write(b.as_ref(), offset, buf, fua).await,
        }
    }

    /// The range is block-aligned and inside the device, and the memory
    /// aligned for it.
    fn check_io<B: IoBuf>(&self, offset: u64, buf: &B) -> Result<()> {
        let info = self.info();
        info.check_range(offset, buf.len() as u64)?;
        buf.check_aligned(info.block_size)
    }

    /// Makes every completed write durable.
    pub async fn flush(&self) -> Result<()> {
        dispatch!(self, b => b.flush().await)
    }

    /// Zeroes `[offset, offset + len)`.
    pub async fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        self.info().check_range(offset, len)?;
        dispatch!(self, b => b.write_zeroes(offset, len).await)
    }

    /// Deallocates `[offset, offset + len)`; reads of it return zeroes after.
    pub async fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        self.info().check_range(offset, len)?;
        dispatch!(self, b => b.unmap(offset, len).await)
    }

    /// A mirror's clean mark for `[offset, offset + len)` (see
    /// [`IoKind::MarkClean`]).
    pub async fn mark_clean(&self, offset: u64, len: u64) -> Result<()> {
        self.info().check_range(offset, len)?;
        match self {
            Bdev::Layered(l) => l.mark_clean(offset, len).await,
            _ => Err(BdevError::Unsupported(IoKind::MarkClean)),
        }
    }
}

/// A stable name-based UUID (RFC 9562 version 5: SHA-1 of `namespace`
/// and `name` in a fixed namespace of this project) for bdevs that have no
/// identity of their own: the same name gives the same UUID across restarts
/// and versions, which NVMe hosts rely on (NGUID/UUID must not change).
pub fn uuid_from_name(namespace: &str, name: &str) -> [u8; 16] {
    // The NUL separator keeps ("ab", "c") and ("a", "bc") apart.
    let key = format!("{namespace}\0{name}");
    uuid::Uuid::new_v5(&RACKCACHE_UUID_NAMESPACE, key.as_bytes()).into_bytes()
}

/// The namespace of [`uuid_from_name`]: the version 5 UUID of
/// "rackcache.io/bdev" in the URL namespace. Never change it: every
/// derived identity would change with it.
const RACKCACHE_UUID_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0xe4ff_e766_8a6a_5bf4_bf59_57ce_80b0_3ba7);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_checks() {
        let info = BdevInfo {
            name: "x".into(),
            product_name: "test",
            block_size: 512,
            blocks: BlockCount::new(8),
            uuid: [0; 16],
        };
        assert!(info.check_range(0, 4096).is_ok());
        assert!(matches!(
            info.check_range(512, 4096),
            Err(BdevError::OutOfRange { .. })
        ));
        assert!(matches!(
            info.check_range(100, 512),
            Err(BdevError::Misaligned { .. })
        ));
        assert!(matches!(
            info.check_range(u64::MAX - 511, 512),
            Err(BdevError::OutOfRange { .. })
        ));
    }

    #[test]
    fn uuids_are_stable_and_distinct() {
        let a = uuid_from_name("malloc", "Malloc0");
        assert_eq!(a, uuid_from_name("malloc", "Malloc0"));
        assert_ne!(a, uuid_from_name("malloc", "Malloc1"));
        assert_ne!(a, uuid_from_name("aio", "Malloc0"));
        assert_ne!(
            uuid_from_name("ab", "c"),
            uuid_from_name("a", "bc"),
            "the separator keeps namespace and name apart"
        );
        let u = uuid::Uuid::from_bytes(a);
        assert_eq!(u.get_version(), Some(uuid::Version::Sha1), "version 5");
        assert_eq!(u.get_variant(), uuid::Variant::RFC4122);
        // Pinned: an identity hosts have seen must never change.
        assert_eq!(u.to_string(), PINNED_MALLOC0);
    }

    /// uuid_from_name("malloc", "Malloc0"), computed once.
    const PINNED_MALLOC0: &str = "db64e890-cfbf-591a-a055-dd27a06489ef";

    #[test]
    fn uuid_namespace_is_the_v5_uuid_of_its_url() {
        let want = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, b"rackcache.io/bdev");
        assert_eq!(RACKCACHE_UUID_NAMESPACE, want);
    }
}
