//! Views of one buffer (`DmaBuf::into_views`) in concurrent bdev
//! operations: every kind reads and writes the right bytes through them,
//! the buffer comes back whole without a copy, and a view held by an
//! operation its caller abandoned keeps the buffer from being reunited
//! (or freed) until the device is done with it.

// `[a..b]` is a list of one view's range here, not a range to collect.
#![allow(clippy::single_range_in_vec_init)]

use std::sync::Arc;
use std::time::Duration;

use bdev::delay::{DelayBdev, Latencies};
use bdev::error_inject::{ErrorBdev, ErrorType, IoTypeSel};
use bdev::file::FileBdev;
use bdev::layered::LayeredBdev;
use bdev::malloc::MallocBdev;
use bdev::{
    Bdev, BdevError, BdevInfo, BoxFuture, BufView, CountedBdev, DmaBuf, IoKind, Result, ViewError,
};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

/// Writes a pattern to `[0, 64 KiB)` of `b`, then reads it back into one
/// buffer split three ways, each view from a different place and by its own
/// task, and checks every byte. Then writes through views (plain and FUA)
/// and reads the result back whole.
async fn exercise(b: Arc<Bdev>) {
    let disk = pattern(64 << 10, 3);
    let (_, r) = b.write(0, DmaBuf::from_slice(&disk)).await;
    r.unwrap();

    // One 16 KiB host buffer: its first 4 KiB from disk offset 32 KiB, the
    // middle 8 KiB from offset 0, the last 4 KiB from offset 60 KiB.
    let buf = DmaBuf::new(16 << 10);
    let base = buf.as_ptr();
    let plan = [(0..4096, 32768u64), (4096..12288, 0), (12288..16384, 61440)];
    let views = buf.into_views(plan.iter().map(|(r, _)| r.clone())).unwrap();
    let mut tasks = Vec::new();
    for (view, (_, at)) in views.into_iter().zip(plan.iter()) {
        let b = Arc::clone(&b);
        let at = *at;
        tasks.push(tokio::spawn(async move { b.read_view(at, view).await }));
    }
    let mut back = Vec::new();
    for t in tasks {
        let (view, r) = t.await.unwrap();
        r.unwrap();
        back.push(view);
    }
    let got = BufView::reunite(back).unwrap();
    assert_eq!(got.as_ptr(), base, "the same buffer, not a copy");
    for (range, at) in plan {
        let at = at as usize;
        assert_eq!(
            &got[range.clone()],
            &disk[at..at + range.len()],
            "view {range:?}"
        );
    }

    // Writes from views of one buffer, concurrently: the first half to
    // offset 16 KiB (FUA), the second to offset 4 KiB.
    let src = DmaBuf::from_slice(&pattern(8192, 99));
    let mut views = src.into_views([0..4096, 4096..8192]).unwrap();
    let second = views.pop().unwrap();
    let first = views.pop().unwrap();
    let (b1, b2) = (Arc::clone(&b), Arc::clone(&b));
    let w1 = tokio::spawn(async move { b1.write_fua_view(16384, first).await });
    let w2 = tokio::spawn(async move { b2.write_view(4096, second).await });
    let (first, r1) = w1.await.unwrap();
    let (second, r2) = w2.await.unwrap();
    r1.unwrap();
    r2.unwrap();
    let src = BufView::reunite(vec![first, second]).unwrap();
    let (now, r) = b.read(0, DmaBuf::new(20480)).await;
    r.unwrap();
    assert_eq!(&now[16384..20480], &src[..4096], "the FUA write landed");
    assert_eq!(&now[4096..8192], &src[4096..], "the write landed");
    assert_eq!(&now[..4096], &disk[..4096], "neighbours untouched");
    assert_eq!(&now[8192..16384], &disk[8192..16384]);

    // Refusals come back with the view and touch nothing.
    let size = b.info().size_bytes();
    let mut views = DmaBuf::new(8192).into_views([0..4096, 4096..8192]).unwrap();
    let v = views.pop().unwrap();
    let (v, r) = b.write_view(size, v).await;
    assert!(matches!(r, Err(BdevError::OutOfRange { .. })), "{r:?}");
    let (v, r) = b.read_view(1, v).await;
    assert!(matches!(r, Err(BdevError::Misaligned { .. })), "{r:?}");
    views.push(v);
    assert_eq!(BufView::reunite(views).unwrap().len(), 8192);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malloc_views() {
    let b = Arc::new(Bdev::Malloc(MallocBdev::new("m", 256, 512).unwrap()));
    exercise(Arc::clone(&b)).await;

    // With 512-byte blocks a view may start at any multiple of 512.
    let views = DmaBuf::new(2048).into_views([512..1536]).unwrap();
    let (v, r) = b.read_view(0, views.into_iter().next().unwrap()).await;
    r.unwrap();
    assert_eq!(&v[..], &pattern(64 << 10, 3)[..1024]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_views_through_io_uring_and_the_blocking_pool() {
    let dir = testkit::TempDir::new("bdev-views");
    let path = dir.path().join("disk.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let ring = FileBdev::open("aio0", &path, 4096).unwrap();
    if !ring.direct() {
        eprintln!(
            "note: {} refuses O_DIRECT; views use buffered I/O",
            dir.path().display()
        );
    }
    let mut pool = FileBdev::open("aio1", &path, 4096).unwrap();
    pool.disable_uring();
    for fb in [ring, pool] {
        let b = Arc::new(Bdev::File(fb));
        exercise(Arc::clone(&b)).await;

        // O_DIRECT needs memory aligned to the block: a view starting
        // inside a block is refused on every kind, before the kernel sees
        // it (it would fail there with EINVAL only under O_DIRECT).
        let mut views = DmaBuf::new(8192).into_views([512..4608]).unwrap();
        let (v, r) = b.read_view(0, views.pop().unwrap()).await;
        match r {
            Err(BdevError::InvalidArgument(m)) => assert!(m.contains("not aligned"), "{m}"),
            other => panic!("a misaligned view: {other:?}"),
        }
        assert_eq!(v.range(), 512..4608);
    }
}

/// The same refusal on RAM, where nothing would fail without the check:
/// code tested on malloc then behaves the same on files.
#[tokio::test]
async fn a_view_inside_a_block_is_refused_on_ram_too() {
    let b = Bdev::Malloc(MallocBdev::new("m", 16, 4096).unwrap());
    let mut views = DmaBuf::new(8192).into_views([2048..6144]).unwrap();
    let (_, r) = b.write_view(0, views.pop().unwrap()).await;
    assert!(matches!(r, Err(BdevError::InvalidArgument(_))), "{r:?}");
}

fn counted_malloc() -> CountedBdev {
    CountedBdev::from(Arc::new(Bdev::Malloc(
        MallocBdev::new("m", 64, 4096).unwrap(),
    )))
}

#[tokio::test]
async fn counted_views_count_like_buffers() {
    let c = counted_malloc();
    let views = DmaBuf::new(12288)
        .into_views([0..4096, 4096..12288])
        .unwrap();
    let mut it = views.into_iter();
    let (a, b) = (it.next().unwrap(), it.next().unwrap());
    let (a, r) = c.write_view(0, a).await;
    r.unwrap();
    let (b, r) = c.write_fua_view(4096, b).await;
    r.unwrap();
    let (b, r) = c.write_maybe_fua_view(4096, b, false).await;
    r.unwrap();
    let (a, r) = c.read_view(0, a).await;
    r.unwrap();
    let (a, r) = c.read_view(64 * 4096, a).await;
    assert!(r.is_err());
    BufView::reunite(vec![a, b]).unwrap();
    let s = c.stats();
    assert_eq!(
        [
            s.num_write_ops.get(),
            s.bytes_written.get(),
            s.num_fua_write_ops.get(),
            s.num_read_ops.get(),
            s.bytes_read.get(),
            s.io_errors.get(),
        ],
        [3, 4096 + 8192 + 8192, 1, 1, 4096, 1]
    );
}

/// The delay and error bdevs pass views through to their base, and the
/// error bdev corrupts the view's bytes as it would a buffer's.
#[tokio::test(start_paused = true)]
async fn wrappers_pass_views_through() {
    let base = counted_malloc();
    let lat = Latencies {
        avg_read_us: 1000,
        p99_read_us: 1000,
        avg_write_us: 1000,
        p99_write_us: 1000,
    };
    let delay = Arc::new(Bdev::Delay(DelayBdev::new("d", base.clone(), lat).unwrap()));
    let err = ErrorBdev::new("EE_m", base.clone());
    err.inject(
        IoTypeSel::Kind(IoKind::Read),
        ErrorType::CorruptData {
            offset: 5,
            value: 0x0f,
        },
        1,
    )
    .unwrap();
    let err = Arc::new(Bdev::Error(err));

    let data = pattern(8192, 1);
    let mut views = DmaBuf::from_slice(&data)
        .into_views([0..4096, 4096..8192])
        .unwrap();
    let hi = views.pop().unwrap();
    let lo = views.pop().unwrap();
    let (lo, r) = delay.write_view(0, lo).await;
    r.unwrap();
    let (hi, r) = err.write_fua_view(4096, hi).await;
    r.unwrap();
    assert_eq!(base.stats().num_write_ops.get(), 2);
    assert_eq!(base.stats().num_fua_write_ops.get(), 1);
    let (hi, r) = delay.read_view(4096, hi).await;
    r.unwrap();
    let (lo, r) = err.read_view(0, lo).await;
    r.unwrap();
    let got = BufView::reunite(vec![lo, hi]).unwrap();
    assert_eq!(got[5], data[5] ^ 0x0f, "corrupted through the view");
    assert_eq!(&got[6..], &data[6..]);
    assert_eq!(&got[..5], &data[..5]);
}

/// A read abandoned by its caller (a cancelled request) still owns its
/// view until the device completes: the buffer cannot be reunited (nor is
/// it freed) meanwhile, and can be once the read has landed.
#[tokio::test(start_paused = true)]
async fn an_abandoned_view_keeps_the_buffer_until_the_device_is_done() {
    let base = counted_malloc();
    let lat = Latencies {
        avg_read_us: 1_000_000,
        p99_read_us: 1_000_000,
        ..Latencies::default()
    };
    let delay = Bdev::Delay(DelayBdev::new("d", base.clone(), lat).unwrap());
    let mut views = DmaBuf::new(8192).into_views([0..4096, 4096..8192]).unwrap();
    let slow = views.pop().unwrap();
    let read = delay.read_view(0, slow);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), read)
            .await
            .is_err(),
        "the caller gives up"
    );
    let e = BufView::reunite(views).unwrap_err();
    assert_eq!(e.reason, ViewError::Outstanding(1), "the device holds one");
    let views = e.views;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(base.stats().num_read_ops.get(), 1, "the read ran");
    let buf = BufView::reunite(views).unwrap();
    assert_eq!(buf.len(), 8192);
}

/// A layered bdev that implements only the `DmaBuf` operations: views go
/// through the trait's default methods (a temporary buffer and a copy).
struct OnlyBuffers(Bdev);

impl LayeredBdev for OnlyBuffers {
    fn info(&self) -> &BdevInfo {
        self.0.info()
    }
    fn supports(&self, kind: IoKind) -> bool {
        self.0.supports(kind)
    }
    fn base_names(&self) -> Vec<String> {
        vec![self.0.info().name.clone()]
    }
    fn read(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)> {
        Box::pin(self.0.read(offset, buf))
    }
    fn write(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)> {
        Box::pin(self.0.write(offset, buf))
    }
    fn write_fua(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)> {
        Box::pin(self.0.write_fua(offset, buf))
    }
    fn flush(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.0.flush())
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.0.write_zeroes(offset, len))
    }
    fn unmap(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.0.unmap(offset, len))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layered_bdevs_get_views_by_default() {
    let inner = Bdev::Malloc(MallocBdev::new("m", 256, 512).unwrap());
    exercise(Arc::new(Bdev::Layered(Box::new(OnlyBuffers(inner))))).await;
}
