//! Per-bdev I/O statistics (SPDK's `bdev_get_iostat` fields) and
//! [`CountedBdev`], the handle every user of a bdev goes through so that
//! all of its I/O is counted: the control plane's own reads and writes and
//! the NVMe-oF target's namespaces alike.
//!
//! Counting touches only atomics (the `metrics` crate's counters and
//! histograms); the registry's lock is taken when a bdev's series are
//! registered or removed, never on the I/O path.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

use metrics::{Counter, Histogram, LocalCounter, LocalHistogram, Registry};

use crate::buf::IoBuf;
use crate::layered::ReadInline;
use crate::{Bdev, BdevInfo, BufView, DmaBuf, IoKind, Result};

/// I/O counters of one bdev. Successful operations count bytes, operations
/// and latency; failed ones count only `io_errors`. Write Zeroes moves no
/// data and has no field of its own (as in SPDK): only its failures show.
#[derive(Default, Debug)]
pub struct IoStats {
    /// Bytes read.
    pub bytes_read: Arc<Counter>,
    /// Read operations.
    pub num_read_ops: Arc<Counter>,
    /// Bytes written.
    pub bytes_written: Arc<Counter>,
    /// Write operations.
    pub num_write_ops: Arc<Counter>,
    /// Bytes unmapped.
    pub bytes_unmapped: Arc<Counter>,
    /// Unmap operations.
    pub num_unmap_ops: Arc<Counter>,
    /// Flush operations.
    pub num_flush_ops: Arc<Counter>,
    /// Writes made durable before completion (Force Unit Access, or any
    /// write while the host turned the volatile write cache off); also
    /// counted in `num_write_ops` and `bytes_written`.
    pub num_fua_write_ops: Arc<Counter>,
    /// Read latency.
    pub read_latency: Arc<Histogram>,
    /// Write latency.
    pub write_latency: Arc<Histogram>,
    /// Unmap latency.
    pub unmap_latency: Arc<Histogram>,
    /// Failed operations.
    pub io_errors: Arc<Counter>,
}

/// Names of the per-bdev metric families, for removal on delete.
const FAMILIES: [&str; 12] = [
    "rackcache_bdev_read_bytes_total",
    "rackcache_bdev_read_ops_total",
    "rackcache_bdev_written_bytes_total",
    "rackcache_bdev_write_ops_total",
    "rackcache_bdev_unmapped_bytes_total",
    "rackcache_bdev_unmap_ops_total",
    "rackcache_bdev_flush_ops_total",
    "rackcache_bdev_read_latency_seconds",
    "rackcache_bdev_write_latency_seconds",
    "rackcache_bdev_unmap_latency_seconds",
    "rackcache_bdev_io_errors_total",
    "rackcache_bdev_fua_write_ops_total",
];

impl IoStats {
    /// Registers the series of bdev `name` (label `bdev`).
    pub fn register(registry: &Registry, name: &str) -> Arc<Self> {
        let l = [("bdev", name)];
        let c = |i: usize, h: &str| registry.counter(FAMILIES[i], h, &l).expect("valid names");
        let h = |i: usize, d: &str| registry.histogram(FAMILIES[i], d, &l).expect("valid names");
        Arc::new(Self {
            bytes_read: c(0, "Bytes read from the bdev."),
            num_read_ops: c(1, "Read operations completed by the bdev."),
            bytes_written: c(2, "Bytes written to the bdev."),
            num_write_ops: c(3, "Write operations completed by the bdev."),
            bytes_unmapped: c(4, "Bytes deallocated on the bdev."),
            num_unmap_ops: c(5, "Deallocate operations completed by the bdev."),
            num_flush_ops: c(6, "Flush operations completed by the bdev."),
            read_latency: h(7, "Read latency of the bdev."),
            write_latency: h(8, "Write latency of the bdev."),
            unmap_latency: h(9, "Deallocate latency of the bdev."),
            io_errors: c(10, "Failed operations of the bdev."),
            num_fua_write_ops: c(
                11,
                "Write operations the bdev completed as durable (FUA or write cache off).",
            ),
        })
    }

    /// A share of the read counters for one writer at a time
    /// ([`CountedBdev::read_inline_into`]).
    pub fn local_reads(self: &Arc<Self>) -> LocalReads {
        LocalReads {
            ops: self.num_read_ops.local(),
            bytes: self.bytes_read.local(),
            latency: self.read_latency.local(),
            untimed: Cell::new(0),
            of: Arc::clone(self),
        }
    }

    /// Removes bdev `name`'s series.
    pub fn unregister(registry: &Registry, name: &str) {
        for f in FAMILIES {
            registry.remove(f, &[("bdev", name)]);
        }
    }

    /// Counts an operation that ran from `start` to `end`.
    fn count(
        &self,
        r: &Result<()>,
        ops: &Counter,
        bytes: Option<(&Counter, u64)>,
        (start, end): (Instant, Instant),
        latency: Option<&Histogram>,
    ) {
        if r.is_err() {
            self.io_errors.inc();
            return;
        }
        ops.inc();
        if let Some((c, n)) = bytes {
            c.add(n);
        }
        if let Some(h) = latency {
            h.observe_ns(end.saturating_duration_since(start).as_nanos() as u64);
        }
    }
}

/// A share of one bdev's read counters ([`IoStats::local_reads`]): a
/// caller that reads the bdev on its hot path under a lock of its own (a
/// cached volume's owner, for its hits on a RAM cache device) counts
/// there with plain stores instead of locked `fetch_add`s. Readers of the
/// bdev's counters see these reads at once; failures still count in the
/// shared `io_errors`.
///
/// Such reads are copies out of RAM, so their latency is timed for one
/// read in [`INLINE_TIMED_EVERY`] (the first included): the clock read
/// that starts the timing cost about a tenth of the read itself. Every
/// read counts in the operations and bytes; the latency histogram's count
/// is the timed reads, an unbiased sample of the distribution.
pub struct LocalReads {
    ops: LocalCounter,
    bytes: LocalCounter,
    latency: LocalHistogram,
    /// Reads left before the next timed one.
    untimed: Cell<u32>,
    of: Arc<IoStats>,
}

/// One read of a [`LocalReads`] share in this many is timed.
pub const INLINE_TIMED_EVERY: u32 = 16;

impl LocalReads {
    /// Whether the next read is timed (one in [`INLINE_TIMED_EVERY`]).
    fn times_next(&self) -> bool {
        let left = self.untimed.get();
        self.untimed
            .set(left.checked_sub(1).unwrap_or(INLINE_TIMED_EVERY - 1));
        left == 0
    }
}

/// A bdev and its counters: the same operations as [`Bdev`], each counted
/// in [`IoStats`] when it completes. Cloning gives another handle to the
/// same device and counters.
#[derive(Clone)]
pub struct CountedBdev {
    bdev: Arc<Bdev>,
    stats: Arc<IoStats>,
}

impl From<Arc<Bdev>> for CountedBdev {
    /// A handle with counters of its own, registered nowhere.
    fn from(bdev: Arc<Bdev>) -> Self {
        Self::new(bdev, Arc::default())
    }
}

impl CountedBdev {
    /// A handle counting `bdev`'s I/O in `stats`.
    pub fn new(bdev: Arc<Bdev>, stats: Arc<IoStats>) -> Self {
        Self { bdev, stats }
    }

    /// The device.
    pub fn bdev(&self) -> &Arc<Bdev> {
        &self.bdev
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<IoStats> {
        &self.stats
    }

    /// Name, size, block size and identity.
    pub fn info(&self) -> &BdevInfo {
        self.bdev.info()
    }

    /// Whether the device supports `kind`.
    pub fn supports(&self, kind: IoKind) -> bool {
        self.bdev.supports(kind)
    }

    /// [`Bdev::read`], counted.
    pub async fn read(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.read_buf(offset, buf).await
    }

    /// [`Self::read`], also returning the instant the read completed (the
    /// end of the latency it counted): a caller that times the same read
    /// takes it instead of reading the clock once more, which on a VM
    /// costs tens of nanoseconds per read.
    pub async fn read_ended(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>, Instant) {
        self.read_buf_ended(offset, buf).await
    }

    /// [`Bdev::read_inline`], counted, with the instant it ended (as
    /// [`Self::read_ended`]); `Err` gives the buffer back, uncounted, when
    /// the device must wait.
    pub fn read_inline_ended(&self, offset: u64, buf: DmaBuf) -> ReadInline<DmaBuf> {
        let start = Instant::now();
        self.read_inline_counted(offset, buf, Some(start), |r, len, end| {
            self.count_read(r, len, (start, end))
        })
    }

    /// [`Self::read_inline_ended`], counted into `local`, a share of this
    /// bdev's counters.
    pub fn read_inline_into(
        &self,
        offset: u64,
        buf: DmaBuf,
        local: &LocalReads,
    ) -> ReadInline<DmaBuf> {
        debug_assert!(Arc::ptr_eq(&local.of, &self.stats), "another bdev's share");
        let start = local.times_next().then(Instant::now);
        self.read_inline_counted(offset, buf, start, |r, len, end| {
            if r.is_err() {
                self.stats.io_errors.inc();
                return;
            }
            local.ops.inc();
            local.bytes.add(len);
            if let Some(start) = start {
                local
                    .latency
                    .observe_ns(end.saturating_duration_since(start).as_nanos() as u64);
            }
        })
    }

    /// An inline read, then `count`ed (result, bytes, and the instant it
    /// ended); `start` is when its timing began, if it is timed.
    fn read_inline_counted(
        &self,
        offset: u64,
        buf: DmaBuf,
        start: Option<Instant>,
        count: impl FnOnce(&Result<()>, u64, Instant),
    ) -> ReadInline<DmaBuf> {
        let len = buf.len() as u64;
        let (buf, r, ended) = self.bdev.read_inline_timed(offset, buf, start)?;
        let end = ended.unwrap_or_else(Instant::now);
        count(&r, len, end);
        Ok((buf, r, end))
    }

    /// [`Bdev::write`], counted.
    pub async fn write(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.write_buf(offset, buf, false).await
    }

    /// [`Bdev::write_fua`], counted as a write and as a durable write.
    pub async fn write_fua(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.write_buf(offset, buf, true).await
    }

    /// [`Self::write_fua`] if `fua`, else [`Self::write`]: for callers that
    /// pass a command's FUA bit through.
    pub async fn write_maybe_fua(
        &self,
        offset: u64,
        buf: DmaBuf,
        fua: bool,
    ) -> (DmaBuf, Result<()>) {
        self.write_buf(offset, buf, fua).await
    }

    /// [`Bdev::read_view`], counted as a read.
    pub async fn read_view(&self, offset: u64, view: BufView) -> (BufView, Result<()>) {
        self.read_buf(offset, view).await
    }

    /// [`Bdev::write_view`], counted as a write.
    pub async fn write_view(&self, offset: u64, view: BufView) -> (BufView, Result<()>) {
        self.write_buf(offset, view, false).await
    }

    /// [`Bdev::write_fua_view`], counted as a write and a durable write.
    pub async fn write_fua_view(&self, offset: u64, view: BufView) -> (BufView, Result<()>) {
        self.write_buf(offset, view, true).await
    }

    /// [`Self::write_fua_view`] if `fua`, else [`Self::write_view`].
    pub async fn write_maybe_fua_view(
        &self,
        offset: u64,
        view: BufView,
        fua: bool,
    ) -> (BufView, Result<()>) {
        self.write_buf(offset, view, fua).await
    }

    /// The counted read of a buffer or view.
    pub(crate) async fn read_buf<B: IoBuf>(&self, offset: u64, buf: B) -> (B, Result<()>) {
        let (buf, r, _) = self.read_buf_ended(offset, buf).await;
        (buf, r)
    }

    /// The counted read, and the instant it ended.
    async fn read_buf_ended<B: IoBuf>(&self, offset: u64, buf: B) -> (B, Result<()>, Instant) {
        let (start, len) = (Instant::now(), buf.len() as u64);
        let (buf, r, ended) = self.bdev.read_buf_timed(offset, buf, Some(start)).await;
        let end = ended.unwrap_or_else(Instant::now);
        self.count_read(&r, len, (start, end));
        (buf, r, end)
    }

    /// Counts a read of `len` bytes over `(start, end)`.
    fn count_read(&self, r: &Result<()>, len: u64, (start, end): (Instant, Instant)) {
        let s = &*self.stats;
        s.count(
            r,
            &s.num_read_ops,
            Some((&s.bytes_read, len)),
            (start, end),
            Some(&s.read_latency),
        );
    }

    /// The counted write of a buffer or view (durable when `fua`).
    pub(crate) async fn write_buf<B: IoBuf>(
        &self,
        offset: u64,
        buf: B,
        fua: bool,
    ) -> (B, Result<()>) {
        let (start, len) = (Instant::now(), buf.len() as u64);
        let (buf, r) = self.bdev.write_buf(offset, buf, fua).await;
        let s = &*self.stats;
        s.count(
            &r,
            &s.num_write_ops,
            Some((&s.bytes_written, len)),
            (start, Instant::now()),
            Some(&s.write_latency),
        );
        if fua && r.is_ok() {
            s.num_fua_write_ops.inc();
        }
        (buf, r)
    }

    /// [`Bdev::flush`], counted.
    pub async fn flush(&self) -> Result<()> {
        let start = Instant::now();
        let r = self.bdev.flush().await;
        let s = &*self.stats;
        s.count(&r, &s.num_flush_ops, None, (start, Instant::now()), None);
        r
    }

    /// [`Bdev::write_zeroes`]; only a failure is counted.
    pub async fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        let r = self.bdev.write_zeroes(offset, len).await;
        if r.is_err() {
            self.stats.io_errors.inc();
        }
        r
    }

    /// [`Bdev::unmap`], counted.
    pub async fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        let start = Instant::now();
        let r = self.bdev.unmap(offset, len).await;
        let s = &*self.stats;
        s.count(
            &r,
            &s.num_unmap_ops,
            Some((&s.bytes_unmapped, len)),
            (start, Instant::now()),
            Some(&s.unmap_latency),
        );
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::malloc::MallocBdev;

    #[test]
    fn a_share_counts_every_inline_read_and_times_one_in_sixteen() {
        let b = Arc::new(Bdev::Malloc(MallocBdev::new("m", 16, 512).unwrap()));
        let c = CountedBdev::from(b);
        let local = c.stats().local_reads();
        let n = 2 * INLINE_TIMED_EVERY + 1;
        let mut buf = DmaBuf::new(512);
        for _ in 0..n {
            let Ok((b, r, _)) = c.read_inline_into(0, buf, &local) else {
                panic!("RAM reads inline");
            };
            r.unwrap();
            buf = b;
        }
        let s = c.stats();
        assert_eq!(s.num_read_ops.get(), u64::from(n));
        assert_eq!(s.bytes_read.get(), u64::from(n) * 512);
        assert_eq!(s.read_latency.count(), 3, "the 1st, 17th and 33rd");
        let Ok((_, r, _)) = c.read_inline_into(16 * 512, DmaBuf::new(512), &local) else {
            panic!("RAM reads inline");
        };
        assert!(r.is_err(), "out of range");
        assert_eq!((s.num_read_ops.get(), s.io_errors.get()), (u64::from(n), 1));
    }

    #[tokio::test]
    async fn every_operation_is_counted_and_failures_only_as_errors() {
        let registry = Registry::new();
        let b = Arc::new(Bdev::Malloc(MallocBdev::new("m", 16, 512).unwrap()));
        let c = CountedBdev::new(b, IoStats::register(&registry, "m"));
        let (buf, r) = c.write(512, DmaBuf::from_slice(&[7u8; 1024])).await;
        r.unwrap();
        let (_, r) = c.read(0, buf).await;
        r.unwrap();
        c.unmap(0, 2048).await.unwrap();
        c.flush().await.unwrap();
        c.write_zeroes(0, 512).await.unwrap();
        let (_, r) = c.write_fua(0, DmaBuf::from_slice(&[1u8; 512])).await;
        r.unwrap();
        // Out of range: an error, no bytes.
        let (_, r) = c.read(16 * 512, DmaBuf::new(512)).await;
        assert!(r.is_err());
        let s = c.stats();
        let got = [
            s.bytes_read.get(),
            s.num_read_ops.get(),
            s.bytes_written.get(),
            s.num_write_ops.get(),
            s.bytes_unmapped.get(),
            s.num_unmap_ops.get(),
            s.num_flush_ops.get(),
            s.num_fua_write_ops.get(),
            s.io_errors.get(),
        ];
        assert_eq!(got, [1024, 1, 1536, 2, 2048, 1, 1, 1, 1]);
        assert_eq!(
            (
                s.read_latency.count(),
                s.write_latency.count(),
                s.unmap_latency.count()
            ),
            (1, 2, 1)
        );
        // `read_ended` counts as a read, and its end is after its start.
        let before = Instant::now();
        let (_, r, end) = c.read_ended(512, DmaBuf::new(512)).await;
        r.unwrap();
        assert!(end >= before);
        assert_eq!((s.num_read_ops.get(), s.bytes_read.get()), (2, 1536));
        assert_eq!(s.read_latency.count(), 2);
        let (_, r, _) = c.read_ended(16 * 512, DmaBuf::new(512)).await;
        assert!(r.is_err(), "out of range");
        assert_eq!((s.num_read_ops.get(), s.io_errors.get()), (2, 2));
        let text = registry.render();
        assert!(
            text.contains("rackcache_bdev_written_bytes_total{bdev=\"m\"} 1536"),
            "{text}"
        );
        assert!(
            text.contains("rackcache_bdev_fua_write_ops_total{bdev=\"m\"} 1"),
            "{text}"
        );
        IoStats::unregister(&registry, "m");
        assert!(!registry.render().contains("bdev=\"m\""));
    }
}
