//! `malloc` bdev: a RAM disk, for tests and benchmarks of the layers above.

use std::sync::RwLock;

use crate::buf::IoBuf;
use crate::huge::{HugeChunk, HUGE_PAGE};
use crate::{uuid_from_name, BdevError, BdevInfo, DmaBuf, IoKind, Result};

/// Memory is kept in chunks, each behind its own lock, so that concurrent
/// I/O from different queues to different places never contends, and
/// overlapping I/O is ordered rather than racing (which Rust forbids).
/// One huge page each (see [`crate::huge`]).
const CHUNK: u64 = HUGE_PAGE as u64;

/// A RAM-backed bdev.
pub struct MallocBdev {
    info: BdevInfo,
    chunks: Vec<RwLock<HugeChunk>>,
}

impl MallocBdev {
    /// A zeroed RAM disk of `num_blocks` blocks of `block_size` bytes.
    pub fn new(name: &str, num_blocks: u64, block_size: u32) -> Result<Self> {
        if !block_size.is_power_of_two() || !(512..=65536).contains(&block_size) {
            return Err(BdevError::InvalidArgument(format!(
                "block size {block_size} must be a power of two from 512 to 65536"
            )));
        }
        if num_blocks == 0 {
            return Err(BdevError::InvalidArgument(
                "a bdev needs at least one block".into(),
            ));
        }
        let size = num_blocks
            .checked_mul(u64::from(block_size))
            .ok_or_else(|| BdevError::InvalidArgument("size overflows".into()))?;
        let n_chunks = size.div_ceil(CHUNK);
        let chunks = (0..n_chunks)
            .map(|i| {
                let len = CHUNK.min(size - i * CHUNK) as usize;
                HugeChunk::try_zeroed(len).map(RwLock::new)
            })
            .collect::<std::io::Result<_>>()
            .map_err(|e| {
                BdevError::OutOfMemory(format!(
                    "malloc bdev {name}: cannot map its {size} bytes: {e} (memory limits, or vm.max_map_count: one mapping per {CHUNK} bytes)"
                ))
            })?;
        Ok(Self {
            info: BdevInfo {
                name: name.to_owned(),
                product_name: "Malloc disk",
                block_size,
                blocks: crate::BlockCount::new(num_blocks),
                uuid: uuid_from_name("malloc", name),
            },
            chunks,
        })
    }

    /// Name, size, block size and identity.
    pub fn info(&self) -> &BdevInfo {
        &self.info
    }

    /// Every operation is supported.
    pub fn supports(&self, _kind: IoKind) -> bool {
        true
    }

    /// Calls `f(chunk index, offset in chunk, range in the caller's buffer)`
    /// for each chunk `[offset, offset + len)` touches, in ascending order.
    fn for_each_chunk(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(usize, usize, std::ops::Range<usize>),
    ) {
        let mut done = 0usize;
        while done < len {
            let pos = offset + done as u64;
            let idx = (pos / CHUNK) as usize;
            let in_chunk = (pos % CHUNK) as usize;
            let n = (CHUNK as usize - in_chunk).min(len - done);
            f(idx, in_chunk, done..done + n);
            done += n;
        }
    }

    /// Copies out of RAM.
    pub async fn read(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.read_buf(offset, buf).await
    }

    /// Copies into RAM.
    pub async fn write(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.write_buf(offset, buf, false).await
    }

    /// A write to RAM is as durable as this device gets: complete at once.
    pub async fn write_fua(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.write_buf(offset, buf, true).await
    }

    /// Copies out of RAM into a buffer or view.
    pub(crate) async fn read_buf<B: IoBuf>(&self, offset: u64, mut buf: B) -> (B, Result<()>) {
        self.read_now(offset, &mut buf);
        (buf, Ok(()))
    }

    /// The copy of a read, done before returning: RAM never waits.
    pub(crate) fn read_now<B: IoBuf>(&self, offset: u64, buf: &mut B) {
        let len = buf.len();
        self.for_each_chunk(offset, len, |idx, at, range| {
            let chunk = self.chunks[idx].read().unwrap_or_else(|p| p.into_inner());
            let n = range.len();
            buf[range].copy_from_slice(&chunk[at..at + n]);
        });
    }

    /// Copies into RAM from a buffer or view; `_fua` changes nothing (RAM
    /// is as durable as this device gets).
    pub(crate) async fn write_buf<B: IoBuf>(
        &self,
        offset: u64,
        buf: B,
        _fua: bool,
    ) -> (B, Result<()>) {
        self.for_each_chunk(offset, buf.len(), |idx, at, range| {
            let mut chunk = self.chunks[idx].write().unwrap_or_else(|p| p.into_inner());
            let n = range.len();
            chunk[at..at + n].copy_from_slice(&buf[range]);
        });
        (buf, Ok(()))
    }

    /// RAM is as durable as it gets here.
    pub async fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Fills with zeroes.
    pub async fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        self.for_each_chunk(offset, len as usize, |idx, at, range| {
            let mut chunk = self.chunks[idx].write().unwrap_or_else(|p| p.into_inner());
            chunk[at..at + range.len()].fill(0);
        });
        Ok(())
    }

    /// Deallocated RAM reads back as zeroes.
    pub async fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        self.write_zeroes(offset, len).await
    }
}

/// Bytes of memory the kernel reckons available for new allocations
/// (`MemAvailable` in `/proc/meminfo`), if it says.
pub fn memory_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
