//! `error` bdev (SPDK's `bdev_error_create` and `bdev_error_inject_error`):
//! another bdev whose next N I/Os of a kind can be made to fail, never
//! complete, or return (or store) corrupted data.
//!
//! SPDK names the bdev `EE_<base>`; the daemon does too. Error types:
//! - `failure`: the I/O completes with an error without reaching the base;
//! - `nomem`: the same, reported as out of memory (SPDK retries such I/O
//!   inside its bdev layer; there is no such retry here, so the host sees
//!   the error);
//! - `pending`: the I/O is held (for timeout, abort and drain paths) until
//!   `bdev_error_resume_pending`, then goes to the base as usual;
//! - `corrupt_data`: reads return the base's data with the byte at
//!   `corrupt_offset` XORed with `corrupt_value`; writes store data
//!   corrupted the same way.
//!
//! Each injection affects the next `num` I/Os of its kind and then expires;
//! a new injection for a kind replaces the old one, `clear` removes all.

use std::sync::Mutex;

use crate::buf::IoBuf;
use crate::{BdevError, BdevInfo, BoxFuture, CountedBdev, DmaBuf, IoKind, Result};

/// What happens to an affected I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    /// Fails.
    Failure,
    /// Fails as out of memory.
    NoMem,
    /// Held until [`ErrorBdev::resume_pending`].
    Pending,
    /// Completes with corrupted data.
    CorruptData {
        /// Byte offset in the I/O's data.
        offset: u64,
        /// XORed into that byte (not 0).
        value: u8,
    },
}

/// Which I/Os an injection affects (SPDK's `io_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoTypeSel {
    /// One kind.
    Kind(IoKind),
    /// Every kind.
    All,
}

impl IoTypeSel {
    /// Parses SPDK's names (`clear` is handled by the caller).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "read" => Self::Kind(IoKind::Read),
            "write" => Self::Kind(IoKind::Write),
            "flush" => Self::Kind(IoKind::Flush),
            "unmap" => Self::Kind(IoKind::Unmap),
            "write_zeroes" => Self::Kind(IoKind::WriteZeroes),
            "all" => Self::All,
            _ => return None,
        })
    }

    fn matches(self, k: IoKind) -> bool {
        match self {
            Self::All => true,
            Self::Kind(x) => x == k,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Injection {
    sel: IoTypeSel,
    err: ErrorType,
    left: u32,
}

/// A bdev with injectable errors.
pub struct ErrorBdev {
    info: BdevInfo,
    base: CountedBdev,
    injections: Mutex<Vec<Injection>>,
    /// Bumped by `resume_pending`: held I/O waits for a change.
    resumed: tokio::sync::watch::Sender<u64>,
}

impl ErrorBdev {
    /// An error bdev `name` over `base`, injecting nothing yet.
    pub fn new(name: &str, base: CountedBdev) -> Self {
        let b = base.info();
        Self {
            info: BdevInfo {
                name: name.to_owned(),
                product_name: "error",
                block_size: b.block_size,
                blocks: b.blocks.clone(),
                uuid: crate::uuid_from_name("error", name),
            },
            base,
            injections: Mutex::new(Vec::new()),
            resumed: tokio::sync::watch::channel(0).0,
        }
    }

    /// Name, size, block size and identity.
    pub fn info(&self) -> &BdevInfo {
        &self.info
    }

    /// The base bdev.
    pub fn base(&self) -> &CountedBdev {
        &self.base
    }

    /// What the base supports.
    pub fn supports(&self, kind: IoKind) -> bool {
        self.base.supports(kind)
    }

    /// Makes the next `num` I/Os selected by `sel` meet `err`.
    pub fn inject(&self, sel: IoTypeSel, err: ErrorType, num: u32) -> Result<()> {
        if let ErrorType::CorruptData { value: 0, .. } = err {
            return Err(BdevError::InvalidArgument(
                "corrupt_value must not be 0 (XOR with 0 corrupts nothing)".into(),
            ));
        }
        let mut v = self.injections.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|i| i.sel != sel);
        if num > 0 {
            v.push(Injection {
                sel,
                err,
                left: num,
            });
        }
        Ok(())
    }

    /// Lets every held (`pending`) I/O go on to the base (SPDK's
    /// `bdev_error_resume_pending`).
    pub fn resume_pending(&self) {
        self.resumed.send_modify(|g| *g += 1);
    }

    /// Removes every injection (SPDK's `io_type` "clear").
    pub fn clear(&self) {
        self.injections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The error the next I/O of `kind` meets, counting it down.
    fn take(&self, kind: IoKind) -> Option<ErrorType> {
        let mut v = self.injections.lock().unwrap_or_else(|p| p.into_inner());
        let i = v.iter().position(|i| i.sel.matches(kind))?;
        let err = v[i].err;
        v[i].left -= 1;
        if v[i].left == 0 {
            v.remove(i);
        }
        Some(err)
    }

    fn injected(&self, op: &'static str, err: ErrorType) -> BdevError {
        let errno = if err == ErrorType::NoMem {
            libc::ENOMEM
        } else {
            libc::EIO
        };
        BdevError::Os {
            op,
            path: format!("{} (injected error)", self.info.name),
            source: std::io::Error::from_raw_os_error(errno),
        }
    }

    /// What a held I/O waits on. Taken before [`Self::take`]: a
    /// `resume_pending` that comes after the injection was taken is then
    /// seen, never lost.
    fn arm(&self) -> tokio::sync::watch::Receiver<u64> {
        self.resumed.subscribe()
    }

    /// Applies a non-corrupting error: `Err` with the failure, or `Ok`
    /// once a held I/O is resumed (it then goes to the base). `resumed`
    /// is from [`Self::arm`], called before the error was taken.
    async fn fail(
        &self,
        op: &'static str,
        err: ErrorType,
        mut resumed: tokio::sync::watch::Receiver<u64>,
    ) -> std::result::Result<(), BdevError> {
        if err == ErrorType::Pending {
            // The sender lives as long as `self`.
            let _ = resumed.changed().await;
            return Ok(());
        }
        Err(self.injected(op, err))
    }

    /// Reads from the base unless an error is injected.
    pub fn read(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)> {
        self.read_buf(offset, buf)
    }

    /// Writes to the base unless an error is injected.
    pub fn write(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)> {
        self.write_buf(offset, buf, false)
    }

    /// Writes durably (FUA) to the base unless an error is injected.
    pub fn write_fua(&self, offset: u64, buf: DmaBuf) -> BoxFuture<'_, (DmaBuf, Result<()>)> {
        self.write_buf(offset, buf, true)
    }

    /// Reads a buffer or view from the base unless an error is injected.
    pub(crate) fn read_buf<B: IoBuf>(&self, offset: u64, buf: B) -> BoxFuture<'_, (B, Result<()>)> {
        Box::pin(async move {
            let armed = self.arm();
            match self.take(IoKind::Read) {
                None => self.base.read_buf(offset, buf).await,
                Some(ErrorType::CorruptData { offset: at, value }) => {
                    let (mut buf, r) = self.base.read_buf(offset, buf).await;
                    if r.is_ok() {
                        corrupt(&mut buf, at, value);
                    }
                    (buf, r)
                }
                Some(e) => match self.fail("read", e, armed).await {
                    Ok(()) => self.base.read_buf(offset, buf).await,
                    Err(err) => (buf, Err(err)),
                },
            }
        })
    }

    /// Writes a buffer or view to the base (durably when `fua`) unless an
    /// error is injected.
    pub(crate) fn write_buf<B: IoBuf>(
        &self,
        offset: u64,
        mut buf: B,
        fua: bool,
    ) -> BoxFuture<'_, (B, Result<()>)> {
        Box::pin(async move {
            let to_base = |buf| self.base.write_buf(offset, buf, fua);
            let armed = self.arm();
            match self.take(IoKind::Write) {
                None => to_base(buf).await,
                Some(ErrorType::CorruptData { offset: at, value }) => {
                    corrupt(&mut buf, at, value);
                    to_base(buf).await
                }
                Some(e) => match self.fail("write", e, armed).await {
                    Ok(()) => to_base(buf).await,
                    Err(err) => (buf, Err(err)),
                },
            }
        })
    }

    /// Flushes the base unless an error is injected (corruption does not
    /// apply: a flush has no data).
    pub fn flush(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let armed = self.arm();
            match self.take(IoKind::Flush) {
                None | Some(ErrorType::CorruptData { .. }) => self.base.flush().await,
                Some(e) => {
                    self.fail("flush", e, armed).await?;
                    self.base.flush().await
                }
            }
        })
    }

    /// Zeroes on the base unless an error is injected.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let armed = self.arm();
            match self.take(IoKind::WriteZeroes) {
                None | Some(ErrorType::CorruptData { .. }) => {
                    self.base.write_zeroes(offset, len).await
                }
                Some(e) => {
                    self.fail("write zeroes", e, armed).await?;
                    self.base.write_zeroes(offset, len).await
                }
            }
        })
    }

    /// Deallocates on the base unless an error is injected.
    pub fn unmap(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let armed = self.arm();
            match self.take(IoKind::Unmap) {
                None | Some(ErrorType::CorruptData { .. }) => self.base.unmap(offset, len).await,
                Some(e) => {
                    self.fail("unmap", e, armed).await?;
                    self.base.unmap(offset, len).await
                }
            }
        })
    }
}

fn corrupt(buf: &mut [u8], at: u64, value: u8) {
    if let Some(b) = usize::try_from(at).ok().and_then(|i| buf.get_mut(i)) {
        *b ^= value;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::malloc::MallocBdev;
    use crate::Bdev;

    fn bdev() -> ErrorBdev {
        let m = MallocBdev::new("m", 16, 512).unwrap();
        ErrorBdev::new("EE_m", CountedBdev::from(Arc::new(Bdev::Malloc(m))))
    }

    #[tokio::test(start_paused = true)]
    async fn failures_expire_corruption_flips_pending_hangs() {
        let b = bdev();
        b.inject(IoTypeSel::Kind(IoKind::Write), ErrorType::Failure, 1)
            .unwrap();
        let (buf, r) = b.write(0, DmaBuf::from_slice(&[1u8; 512])).await;
        assert!(r.is_err(), "first write fails");
        let (buf, r) = b.write(0, buf).await;
        r.unwrap();
        b.inject(
            IoTypeSel::All,
            ErrorType::CorruptData {
                offset: 3,
                value: 0xff,
            },
            1,
        )
        .unwrap();
        let (buf, r) = b.read(0, buf).await;
        r.unwrap();
        assert_eq!((buf[2], buf[3]), (1, 0xfe));
        b.inject(IoTypeSel::Kind(IoKind::Read), ErrorType::Pending, 1)
            .unwrap();
        let held = b.read(0, buf);
        tokio::pin!(held);
        assert!(
            tokio::time::timeout(Duration::from_secs(60), &mut held)
                .await
                .is_err(),
            "pending is held"
        );
        b.resume_pending();
        let (_, r) = held.await;
        r.unwrap();
        b.inject(IoTypeSel::Kind(IoKind::Flush), ErrorType::NoMem, 5)
            .unwrap();
        b.clear();
        b.flush().await.unwrap();
    }

    /// A `resume_pending` that arrives while a write is still picking its
    /// injection (the injection list locked here) releases it: the write
    /// waits on a receiver taken before the injection.
    #[test]
    fn a_resume_while_the_io_takes_its_injection_is_not_lost() {
        let b = Arc::new(bdev());
        b.inject(IoTypeSel::Kind(IoKind::Write), ErrorType::Pending, 1)
            .unwrap();
        let list = b.injections.lock().unwrap();
        let (done_tx, done) = std::sync::mpsc::channel();
        let io = b.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let (_, r) = rt.block_on(io.write(0, DmaBuf::from_slice(&[7u8; 512])));
            let _ = done_tx.send(r.is_ok());
        });
        // The write has started and waits for the list (bounded wait).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while b.resumed.receiver_count() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the write never armed its resume signal before taking its injection"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        b.resume_pending();
        drop(list);
        assert_eq!(
            done.recv_timeout(Duration::from_secs(30)),
            Ok(true),
            "the held write was resumed"
        );
    }
}
