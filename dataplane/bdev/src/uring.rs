//! An io_uring engine for the `aio` (file) bdev: one ring per bdev, shared by
//! every task that submits to it, with one completion thread.
//!
//! Submitters push an SQE under a per-ring lock (held for a push and one
//! `io_uring_enter`, never across I/O) and await a oneshot; the completion
//! thread waits in the kernel for completions and sends each result, with
//! the buffer it used, back to the waiting task. The buffer is owned by the
//! pending operation, so a cancelled task cannot free memory the kernel is
//! still writing into.

use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use io_uring::{opcode, squeue, types, IoUring};
use tokio::sync::oneshot;

use crate::buf::AnyBuf;

/// user_data of the no-op that tells the completion thread to stop.
const SHUTDOWN: u64 = u64::MAX;

struct Pending {
    tx: oneshot::Sender<(i32, Option<AnyBuf>)>,
    buf: Option<AnyBuf>,
}

struct Shared {
    ring: IoUring,
    /// Serialises access to the submission queue (io_uring's SQ is single
    /// producer). Per bdev, held only to push and enter.
    sq: Mutex<()>,
    in_flight: AtomicU64,
    stopping: AtomicBool,
}

/// A ring and its completion thread.
pub(crate) struct Uring {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// What to submit.
pub(crate) enum UringOp {
    Read {
        offset: u64,
    },
    /// `dsync`: RWF_DSYNC, durable on completion.
    Write {
        offset: u64,
        dsync: bool,
    },
    Fdatasync,
}

impl Uring {
    /// Sets up a ring of `entries` SQEs; fails where io_uring is unavailable
    /// (old kernels, seccomp), and the caller falls back to blocking I/O.
    pub(crate) fn new(entries: u32) -> std::io::Result<Self> {
        let ring = IoUring::new(entries)?;
        let shared = Arc::new(Shared {
            ring,
            sq: Mutex::new(()),
            in_flight: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("bdev-uring".into())
            .spawn(move || completion_loop(&s))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Runs one operation on `fd` with `buf` (read into / write from it; none
    /// for fdatasync) and returns the kernel's result and the buffer.
    pub(crate) async fn run(
        &self,
        fd: RawFd,
        op: UringOp,
        mut buf: Option<AnyBuf>,
    ) -> (i32, Option<AnyBuf>) {
        let (ptr, len) = match buf.as_mut() {
            Some(b) => (b.as_mut_ptr(), b.len() as u32),
            None => (std::ptr::null_mut(), 0),
        };
        let (tx, rx) = oneshot::channel();
        let pending = Box::into_raw(Box::new(Pending { tx, buf })) as u64;
        let entry = match op {
            UringOp::Read { offset } => opcode::Read::new(types::Fd(fd), ptr, len)
                .offset(offset)
                .build(),
            UringOp::Write { offset, dsync } => opcode::Write::new(types::Fd(fd), ptr, len)
                .offset(offset)
                .rw_flags(if dsync { libc::RWF_DSYNC } else { 0 })
                .build(),
            UringOp::Fdatasync => opcode::Fsync::new(types::Fd(fd))
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
        }
        .user_data(pending);
        if let Err(e) = self.push(&entry) {
            // Never submitted: the box is still ours.
            // SAFETY: `pending` came from Box::into_raw above and was not handed
            // to the kernel.
            let p = unsafe { Box::from_raw(pending as *mut Pending) };
            return (-e.raw_os_error().unwrap_or(libc::EIO), p.buf);
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => (-libc::EIO, None),
        }
    }

    fn push(&self, entry: &squeue::Entry) -> std::io::Result<()> {
        let _guard = self.shared.sq.lock().unwrap_or_else(|p| p.into_inner());
        self.shared.in_flight.fetch_add(1, Ordering::AcqRel);
        loop {
            // SAFETY: the SQ is only touched under `sq`; the entry's buffer
            // lives in the pending box until its completion.
            let pushed = unsafe { self.shared.ring.submission_shared().push(entry).is_ok() };
            if pushed {
                break;
            }
            // Full: hand what is queued to the kernel and retry.
            if let Err(e) = self.shared.ring.submitter().submit() {
                self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                return Err(e);
            }
        }
        // Once queued, the entry belongs to the ring: if this enter fails, the
        // completion thread's next enter submits it.
        let _ = self.shared.ring.submitter().submit();
        Ok(())
    }
}

fn completion_loop(s: &Shared) {
    loop {
        match s.ring.submitter().submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
            Err(e) => {
                tracing_free_warn(&e);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        // SAFETY: only this thread reads the completion queue.
        for cqe in unsafe { s.ring.completion_shared() } {
            if cqe.user_data() == SHUTDOWN {
                s.stopping.store(true, Ordering::Release);
                continue;
            }
            s.in_flight.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: user_data is a Box<Pending> leaked by `run`, completed once.
            let p = unsafe { Box::from_raw(cqe.user_data() as *mut Pending) };
            let Pending { tx, buf } = *p;
            let _ = tx.send((cqe.result(), buf));
        }
        if s.stopping.load(Ordering::Acquire) && s.in_flight.load(Ordering::Acquire) == 0 {
            return;
        }
    }
}

/// The bdev crate does not log (its callers do); a failing io_uring_enter
/// is reported on stderr once per occurrence.
fn tracing_free_warn(e: &std::io::Error) {
    eprintln!("bdev: io_uring_enter failed: {e}");
}

impl Drop for Uring {
    fn drop(&mut self) {
        let nop = opcode::Nop::new().build().user_data(SHUTDOWN);
        let _guard = self.shared.sq.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: under the SQ lock.
        let pushed = unsafe { self.shared.ring.submission_shared().push(&nop).is_ok() };
        if !pushed || self.shared.ring.submitter().submit().is_err() {
            // The thread never learns to stop; it is left to exit with the
            // process (waiting for it would hang).
            return;
        }
        // The completion thread owns the ring too and exits by itself once
        // the operations still in the kernel (those of cancelled callers)
        // have completed: it is detached, not joined, because the last
        // handle of a bdev can be dropped on an I/O thread, which must not
        // wait for a disk.
        drop(self.thread.take());
    }
}
