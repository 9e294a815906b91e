//! `aio` bdev: a file or a block device. Opened with O_DIRECT where the
//! filesystem allows it (the cache must not be cached again by the page
//! cache); on filesystems that refuse O_DIRECT (tmpfs) it falls back to
//! buffered I/O and says so in [`FileBdev::direct`].
//!
//! I/O goes through io_uring ([`crate::uring`]) where the kernel offers it,
//! and otherwise as positional reads and writes on tokio's blocking pool,
//! the portable path. [`FileBdev::engine`] says which. Views of a buffer
//! ([`crate::BufView`]) take the same path on the view's pointer; O_DIRECT
//! needs that aligned to the block, which [`crate::Bdev`] checks first.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::buf::{back, IoBuf};
use crate::uring::{Uring, UringOp};
use crate::{uuid_from_name, BdevError, BdevInfo, DmaBuf, IoKind, Result};

/// Ring size: enough SQEs for a deep queue from several NVMe queues.
const URING_ENTRIES: u32 = 256;

/// A bdev on a file or block device.
pub struct FileBdev {
    info: BdevInfo,
    file: Arc<File>,
    path: PathBuf,
    direct: bool,
    readonly: bool,
    uring: Option<Uring>,
}

fn os_err(op: &'static str, path: &Path, source: std::io::Error) -> BdevError {
    BdevError::Os {
        op,
        path: path.display().to_string(),
        source,
    }
}

// From linux/fs.h: the size of a block device in bytes, and its logical
// block size.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
const BLKSSZGET: libc::c_ulong = 0x1268;

impl FileBdev {
    /// Opens `path`. `block_size` 0 means: the device's logical block size
    /// for a block device, 512 for a regular file. A regular file's size
    /// must be a multiple of the block size.
    pub fn open(name: &str, path: &Path, block_size: u32) -> Result<Self> {
        Self::open_with(name, path, block_size, false)
    }

    /// [`FileBdev::open`], read-only when `readonly`: the file is opened
    /// O_RDONLY and every write, Write Zeroes and unmap fails with
    /// [`BdevError::Unsupported`] before touching it (SPDK's `readonly`).
    pub fn open_with(name: &str, path: &Path, block_size: u32, readonly: bool) -> Result<Self> {
        let mut b = Self::open_inner(name, path, block_size, readonly)?;
        b.uring = Uring::new(URING_ENTRIES).ok();
        Ok(b)
    }

    /// Like [`FileBdev::open`], but always on the blocking pool (the
    /// portable path, also where io_uring is disabled by policy).
    pub fn open_blocking(name: &str, path: &Path, block_size: u32) -> Result<Self> {
        Self::open_inner(name, path, block_size, false)
    }

    fn open_inner(name: &str, path: &Path, block_size: u32, readonly: bool) -> Result<Self> {
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(!readonly);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (file, direct) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                (open(false).map_err(|e| os_err("open", path, e))?, false)
            }
            Err(e) => return Err(os_err("open", path, e)),
        };
        let meta = file.metadata().map_err(|e| os_err("stat", path, e))?;
        let is_block = {
            use std::os::unix::fs::FileTypeExt;
            meta.file_type().is_block_device()
        };
        let (size, device_block) = if is_block {
            let mut size: u64 = 0;
            let mut bs: libc::c_int = 0;
            // SAFETY: both ioctls write one value of the given type.
            unsafe {
                if libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size) != 0 {
                    return Err(os_err(
                        "BLKGETSIZE64",
                        path,
                        std::io::Error::last_os_error(),
                    ));
                }
                if libc::ioctl(file.as_raw_fd(), BLKSSZGET, &mut bs) != 0 {
                    return Err(os_err("BLKSSZGET", path, std::io::Error::last_os_error()));
                }
            }
            (size, bs as u32)
        } else if meta.is_file() {
            (meta.len(), 512)
        } else {
            return Err(BdevError::InvalidArgument(format!(
                "{} is neither a regular file nor a block device",
                path.display()
            )));
        };
        let block_size = if block_size == 0 {
            device_block
        } else {
            block_size
        };
        if !block_size.is_power_of_two() || block_size < device_block || block_size > 65536 {
            return Err(BdevError::InvalidArgument(format!(
                "block size {block_size} must be a power of two from {device_block} to 65536"
            )));
        }
        if size == 0 || !size.is_multiple_of(u64::from(block_size)) {
            return Err(BdevError::InvalidArgument(format!(
                "{} has {size} bytes, not a positive multiple of the {block_size}-byte block size",
                path.display()
            )));
        }
        Ok(Self {
            info: BdevInfo {
                name: name.to_owned(),
                product_name: "AIO disk",
                block_size,
                blocks: crate::BlockCount::new(size / u64::from(block_size)),
                uuid: uuid_from_name("aio", name),
            },
            file: Arc::new(file),
            path: path.to_owned(),
            direct,
            readonly,
            uring: None,
        })
    }

    /// Name, size, block size and identity.
    pub fn info(&self) -> &BdevInfo {
        &self.info
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether I/O bypasses the page cache (O_DIRECT).
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// "io_uring" or "blocking-pool": how reads, writes and flushes run.
    pub fn engine(&self) -> &'static str {
        if self.uring.is_some() {
            "io_uring"
        } else {
            "blocking-pool"
        }
    }

    /// Replaces the name-derived UUID with one the user chose (SPDK's
    /// `bdev_aio_create --uuid`).
    pub fn set_uuid(&mut self, uuid: [u8; 16]) {
        self.info.uuid = uuid;
    }

    /// Runs every operation on the blocking pool from now on (tests of
    /// the portable path; the ring stops when the last operation on it
    /// completed).
    pub fn disable_uring(&mut self) {
        self.uring = None;
    }

    /// Whether it was opened read-only.
    pub fn readonly(&self) -> bool {
        self.readonly
    }

    /// Every operation is supported (zeroes and unmap through fallocate,
    /// with a written-zeroes fallback), except those that change data on a
    /// read-only bdev.
    pub fn supports(&self, kind: IoKind) -> bool {
        !self.readonly || matches!(kind, IoKind::Read | IoKind::Flush)
    }

    fn writable(&self, kind: IoKind) -> Result<()> {
        if self.readonly {
            return Err(BdevError::Unsupported(kind));
        }
        Ok(())
    }

    async fn blocking<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&File) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T> {
        let file = Arc::clone(&self.file);
        let path = self.path.clone();
        match tokio::task::spawn_blocking(move || f(&file)).await {
            Ok(r) => r.map_err(|e| os_err(op, &path, e)),
            Err(join) => Err(os_err(op, &path, std::io::Error::other(join.to_string()))),
        }
    }

    /// Runs `op` on the ring and maps a short transfer or a negative result
    /// to an error.
    async fn ring_io<B: IoBuf>(
        &self,
        ring: &Uring,
        what: &'static str,
        op: UringOp,
        buf: Option<B>,
        len: usize,
    ) -> (Option<B>, Result<()>) {
        let buf = buf.map(B::into_any);
        let (res, buf) = ring.run(self.file.as_raw_fd(), op, buf).await;
        let buf = buf.map(|b| back(Some(b), len));
        let r = if res < 0 {
            Err(os_err(
                what,
                &self.path,
                std::io::Error::from_raw_os_error(-res),
            ))
        } else if res as usize != len {
            Err(os_err(
                what,
                &self.path,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("short transfer: {res} of {len} bytes"),
                ),
            ))
        } else {
            Ok(())
        };
        (buf, r)
    }

    /// Positional read.
    pub async fn read(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.read_buf(offset, buf).await
    }

    /// Positional write.
    pub async fn write(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.write_buf(offset, buf, false).await
    }

    /// Positional write that is durable when it completes: RWF_DSYNC on
    /// the ring (the kernel writes with FUA or flushes the device cache), or
    /// write then fdatasync on the blocking pool.
    pub async fn write_fua(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.write_buf(offset, buf, true).await
    }

    /// Positional read into a buffer or view (whose memory the caller
    /// checked is aligned for O_DIRECT).
    pub(crate) async fn read_buf<B: IoBuf>(&self, offset: u64, buf: B) -> (B, Result<()>) {
        if let Some(ring) = &self.uring {
            let len = buf.len();
            let (b, r) = self
                .ring_io(ring, "read", UringOp::Read { offset }, Some(buf), len)
                .await;
            return (b.unwrap_or_else(|| B::stand_in(len)), r);
        }
        self.blocking_buf("read", buf, move |f, buf| f.read_exact_at(buf, offset))
            .await
    }

    /// Positional write from a buffer or view, durable on completion when
    /// `dsync` (see [`FileBdev::write_fua`]).
    pub(crate) async fn write_buf<B: IoBuf>(
        &self,
        offset: u64,
        buf: B,
        dsync: bool,
    ) -> (B, Result<()>) {
        if let Err(e) = self.writable(IoKind::Write) {
            return (buf, Err(e));
        }
        if let Some(ring) = &self.uring {
            let len = buf.len();
            let op = UringOp::Write { offset, dsync };
            let (b, r) = self.ring_io(ring, "write", op, Some(buf), len).await;
            let b = b.unwrap_or_else(|| B::stand_in(len));
            // A kernel that refuses RWF_DSYNC on the ring: the data is
            // written or not, so write again the portable way, which is
            // idempotent for the same buffer.
            let refused = matches!(&r, Err(BdevError::Os { source, .. })
                if matches!(source.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)));
            if !(dsync && refused) {
                return (b, r);
            }
            return self.blocking_write(offset, b, true).await;
        }
        self.blocking_write(offset, buf, dsync).await
    }

    async fn blocking_write<B: IoBuf>(&self, offset: u64, buf: B, dsync: bool) -> (B, Result<()>) {
        self.blocking_buf("write", buf, move |f, buf| {
            f.write_all_at(buf, offset)?;
            if dsync {
                f.sync_data()?;
            }
            Ok(())
        })
        .await
    }

    /// Runs `f` on the blocking pool with the buffer's bytes and gives the
    /// buffer back. If the task cannot finish (the runtime is shutting
    /// down, or it panicked) the request fails with an error and a fresh
    /// buffer of the same length: an I/O path never panics.
    async fn blocking_buf<B: IoBuf>(
        &self,
        op: &'static str,
        buf: B,
        f: impl FnOnce(&File, &mut [u8]) -> std::io::Result<()> + Send + 'static,
    ) -> (B, Result<()>) {
        let len = buf.len();
        let file = Arc::clone(&self.file);
        let joined = tokio::task::spawn_blocking(move || {
            let mut buf = buf;
            let r = f(&file, &mut buf);
            (buf, r)
        })
        .await;
        joined_io(op, &self.path, len, joined)
    }

    /// fdatasync.
    pub async fn flush(&self) -> Result<()> {
        if let Some(ring) = &self.uring {
            return self
                .ring_io::<DmaBuf>(ring, "fdatasync", UringOp::Fdatasync, None, 0)
                .await
                .1;
        }
        self.blocking("fdatasync", |f| f.sync_data()).await
    }

    /// fallocate(ZERO_RANGE), or written zeroes where that is unsupported.
    pub async fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        self.writable(IoKind::WriteZeroes)?;
        let direct = self.direct;
        self.blocking("write zeroes", move |f| {
            if fallocate(
                f,
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                offset,
                len,
            )
            .is_ok()
            {
                return Ok(());
            }
            write_zeroes_by_hand(f, offset, len, direct)
        })
        .await
    }

    /// fallocate(PUNCH_HOLE), or written zeroes where that is unsupported:
    /// either way the range reads back as zeroes.
    pub async fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        self.writable(IoKind::Unmap)?;
        let direct = self.direct;
        self.blocking("unmap", move |f| {
            if fallocate(
                f,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset,
                len,
            )
            .is_ok()
            {
                return Ok(());
            }
            write_zeroes_by_hand(f, offset, len, direct)
        })
        .await
    }
}

/// The result of a blocking-pool I/O task, or an error when the task did
/// not finish (then the buffer is lost with it and a fresh one stands in).
fn joined_io<B: IoBuf>(
    op: &'static str,
    path: &Path,
    len: usize,
    joined: std::result::Result<(B, std::io::Result<()>), tokio::task::JoinError>,
) -> (B, Result<()>) {
    match joined {
        Ok((buf, r)) => (buf, r.map_err(|e| os_err(op, path, e))),
        Err(join) => (
            B::stand_in(len),
            Err(os_err(
                op,
                path,
                std::io::Error::other(format!("blocking task did not finish: {join}")),
            )),
        ),
    }
}

fn fallocate(f: &File, mode: libc::c_int, offset: u64, len: u64) -> std::io::Result<()> {
    // SAFETY: plain syscall on a valid fd.
    let r = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            mode,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn write_zeroes_by_hand(f: &File, offset: u64, len: u64, _direct: bool) -> std::io::Result<()> {
    const STEP: u64 = 1 << 20;
    // An aligned buffer keeps this valid under O_DIRECT.
    let zeroes = DmaBuf::new(STEP.min(len) as usize);
    let mut done = 0;
    while done < len {
        let n = STEP.min(len - done) as usize;
        f.write_all_at(&zeroes[..n], offset + done)?;
        done += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blocking task that panicked (or was cancelled at shutdown) used to
    /// panic the I/O path that awaited it; now it is an I/O error.
    #[tokio::test]
    async fn a_failed_blocking_task_is_an_error_not_a_panic() {
        let joined = tokio::task::spawn_blocking(|| -> (DmaBuf, std::io::Result<()>) {
            panic!("simulated failure in the blocking pool")
        })
        .await;
        assert!(joined.is_err());
        let (buf, r) = joined_io("read", Path::new("/x"), 4096, joined);
        assert_eq!(buf.len(), 4096);
        match r {
            Err(BdevError::Os { op, source, .. }) => {
                assert_eq!(op, "read");
                assert!(source.to_string().contains("did not finish"), "{source}");
            }
            other => panic!("expected an OS error, got {other:?}"),
        }
    }
}
