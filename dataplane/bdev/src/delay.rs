//! `delay` bdev (SPDK's `bdev_delay_create`): another bdev with latency
//! added, to drive timeout, drain and queueing paths in tests.
//!
//! Reads wait the read latency, writes (and Write Zeroes and Unmap, which
//! change data too) the write latency; flushes pass through. One I/O in a
//! hundred of each kind waits the p99 latency instead of the average, as
//! SPDK's does on average.
//!
//! The wait comes *before* the base bdev sees the I/O, and the I/O runs in
//! its own task: like a request already handed to librbd or io_uring, it
//! lands on the base bdev even when the caller stops waiting for it. That
//! is what makes the delay bdev useful for testing that the target drains
//! submitted I/O before it lets a host reconnect.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::buf::IoBuf;
use crate::{BdevError, BdevInfo, BoxFuture, CountedBdev, DmaBuf, IoKind, Result};

/// Which latency an update sets (SPDK's `latency_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatencyKind {
    /// `avg_read`.
    AvgRead,
    /// `p99_read`.
    P99Read,
    /// `avg_write`.
    AvgWrite,
    /// `p99_write`.
    P99Write,
}

impl LatencyKind {
    /// Parses SPDK's names.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "avg_read" => Self::AvgRead,
            "p99_read" => Self::P99Read,
            "avg_write" => Self::AvgWrite,
            "p99_write" => Self::P99Write,
            _ => return None,
        })
    }
}

/// Latencies in microseconds (SPDK's parameters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latencies {
    /// Average read latency.
    pub avg_read_us: u64,
    /// 99th percentile read latency.
    pub p99_read_us: u64,
    /// Average write latency.
    pub avg_write_us: u64,
    /// 99th percentile write latency.
    pub p99_write_us: u64,
}

/// A bdev whose I/O waits before it reaches its base.
pub struct DelayBdev {
    info: BdevInfo,
    base: CountedBdev,
    lat: [AtomicU64; 4],
    reads: AtomicU64,
    writes: AtomicU64,
}

impl DelayBdev {
    /// A delay bdev `name` over `base`. SPDK requires each p99 latency to be
    /// at least its average; so does this.
    pub fn new(name: &str, base: CountedBdev, l: Latencies) -> Result<Self> {
        check(&l)?;
        let b = base.info();
        let info = BdevInfo {
            name: name.to_owned(),
            product_name: "delay",
            block_size: b.block_size,
            blocks: b.blocks.clone(),
            uuid: crate::uuid_from_name("delay", name),
        };
        Ok(Self {
            info,
            base,
            lat: [
                AtomicU64::new(l.avg_read_us),
                AtomicU64::new(l.p99_read_us),
                AtomicU64::new(l.avg_write_us),
                AtomicU64::new(l.p99_write_us),
            ],
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        })
    }

    /// Name, size, block size and identity (size and block size are the
    /// base's).
    pub fn info(&self) -> &BdevInfo {
        &self.info
    }

    /// The base bdev.
    pub fn base(&self) -> &CountedBdev {
        &self.base
    }

    /// The current latencies.
    pub fn latencies(&self) -> Latencies {
        let g = |i: usize| self.lat[i].load(Ordering::Relaxed);
        Latencies {
            avg_read_us: g(0),
            p99_read_us: g(1),
            avg_write_us: g(2),
            p99_write_us: g(3),
        }
    }

    /// Sets one latency (SPDK's `bdev_delay_update_latency`); I/O already
    /// waiting keeps its delay.
    pub fn update(&self, kind: LatencyKind, us: u64) -> Result<()> {
        let mut l = self.latencies();
        match kind {
            LatencyKind::AvgRead => l.avg_read_us = us,
            LatencyKind::P99Read => l.p99_read_us = us,
            LatencyKind::AvgWrite => l.avg_write_us = us,
            LatencyKind::P99Write => l.p99_write_us = us,
        }
        check(&l)?;
        self.lat[kind as usize].store(us, Ordering::Relaxed);
        Ok(())
    }

    /// What the base supports.
    pub fn supports(&self, kind: IoKind) -> bool {
        self.base.supports(kind)
    }

    fn delay(&self, write: bool) -> Duration {
        let (n, avg, p99) = if write {
            (&self.writes, 2, 3)
        } else {
            (&self.reads, 0, 1)
        };
        let i = if n.fetch_add(1, Ordering::Relaxed) % 100 == 99 {
            p99
        } else {
            avg
        };
        Duration::from_micros(self.lat[i].load(Ordering::Relaxed))
    }

    /// Runs `op` on the base after `wait`, in its own task; the result comes
    /// back even if the caller has gone (it is then dropped).
    async fn later<T, F>(wait: Duration, op: F) -> Option<T>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let _ = tx.send(op.await);
        });
        rx.await.ok()
    }

    /// Reads from the base after the read latency.
    pub fn read(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)> {
        self.read_buf(offset, buf)
    }

    /// Writes to the base after the write latency.
    pub fn write(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)> {
        self.write_buf(offset, buf, false)
    }

    /// Writes durably (FUA) to the base after the write latency.
    pub fn write_fua(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)> {
        self.write_buf(offset, buf, true)
    }

    /// Reads a buffer or view from the base after the read latency.
    pub(crate) fn read_buf<B: IoBuf>(&self, offset: u64, buf: B) -> BoxFuture<'_, (B, Result<()>)> {
        let base = self.base.clone();
        let len = buf.len();
        let wait = self.delay(false);
        Box::pin(async move {
            let r = Self::later(wait, async move { base.read_buf(offset, buf).await }).await;
            r.unwrap_or_else(|| (B::stand_in(len), Err(gone("read"))))
        })
    }

    /// Writes a buffer or view to the base after the write latency.
    pub(crate) fn write_buf<B: IoBuf>(
        &self,
        offset: u64,
        buf: B,
        fua: bool,
    ) -> BoxFuture<'_, (B, Result<()>)> {
        let base = self.base.clone();
        let len = buf.len();
        let wait = self.delay(true);
        Box::pin(async move {
            let r = Self::later(wait, async move { base.write_buf(offset, buf, fua).await }).await;
            r.unwrap_or_else(|| (B::stand_in(len), Err(gone("write"))))
        })
    }

    /// Flushes the base at once.
    pub fn flush(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.base.flush())
    }

    /// Zeroes on the base after the write latency.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<()>> {
        let base = self.base.clone();
        let wait = self.delay(true);
        Box::pin(async move {
            Self::later(wait, async move { base.write_zeroes(offset, len).await })
                .await
                .unwrap_or_else(|| Err(gone("write zeroes")))
        })
    }

    /// Deallocates on the base after the write latency.
    pub fn unmap(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<()>> {
        let base = self.base.clone();
        let wait = self.delay(true);
        Box::pin(async move {
            Self::later(wait, async move { base.unmap(offset, len).await })
                .await
                .unwrap_or_else(|| Err(gone("unmap")))
        })
    }
}

fn check(l: &Latencies) -> Result<()> {
    if l.p99_read_us < l.avg_read_us || l.p99_write_us < l.avg_write_us {
        return Err(BdevError::InvalidArgument(format!(
            "p99 latencies must be at least the averages (read {} < {} or write {} < {})",
            l.p99_read_us, l.avg_read_us, l.p99_write_us, l.avg_write_us
        )));
    }
    Ok(())
}

/// The task running the I/O ended without a result (its runtime shut down).
fn gone(op: &'static str) -> BdevError {
    BdevError::Os {
        op,
        path: "delay bdev".into(),
        source: std::io::Error::from(std::io::ErrorKind::Interrupted),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::malloc::MallocBdev;
    use crate::Bdev;

    fn base() -> CountedBdev {
        CountedBdev::from(Arc::new(Bdev::Malloc(
            MallocBdev::new("m", 16, 512).unwrap(),
        )))
    }

    #[tokio::test(start_paused = true)]
    async fn waits_then_writes_even_when_the_caller_gives_up() {
        let lat = Latencies {
            avg_write_us: 1_000_000,
            p99_write_us: 1_000_000,
            ..Latencies::default()
        };
        let b = base();
        let d = DelayBdev::new("d", b.clone(), lat).unwrap();
        let w = d.write(0, DmaBuf::from_slice(&[7u8; 512]));
        // The caller stops waiting after 100 ms: the write still lands.
        assert!(tokio::time::timeout(Duration::from_millis(100), w)
            .await
            .is_err());
        let (buf, r) = b.read(0, DmaBuf::new(512)).await;
        r.unwrap();
        assert_eq!(buf[0], 0, "not yet");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (buf, r) = b.read(0, DmaBuf::new(512)).await;
        r.unwrap();
        assert_eq!(buf[0], 7, "landed after the delay");
    }

    #[test]
    fn p99_below_average_is_refused() {
        let lat = Latencies {
            avg_read_us: 10,
            p99_read_us: 5,
            ..Latencies::default()
        };
        assert!(DelayBdev::new("d", base(), lat).is_err());
        let d = DelayBdev::new("d", base(), Latencies::default()).unwrap();
        assert!(d.update(LatencyKind::AvgWrite, 10).is_err());
        d.update(LatencyKind::P99Write, 10).unwrap();
        d.update(LatencyKind::AvgWrite, 10).unwrap();
        assert_eq!(d.latencies().avg_write_us, 10);
    }
}
