//! How a fenced connection's writes end. librbd 16.2 never completes a
//! zero-copy write that it fails before the OSDs, as it fails every
//! write of a blocklisted client whose image needs a refresh or the
//! exclusive lock back: it keeps the caller's buffer, and the completion
//! waits for the buffer (a later flush waits for that write, too). So a
//! write, flush or Write Zeroes unanswered for a while has its image ask
//! an OSD whether this client is blocklisted (a stat of an object: an
//! OSD refuses every operation of a blocklisted client with ESHUTDOWN)
//! and ends with that error once it is, its buffer left to librbd. A
//! write that is only slow (recovery, a full cluster) goes on waiting:
//! Ceph's own semantics, never a timeout.

use std::ffi::{c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::ffi::rados_ioctx_t;

/// How long an operation waits before its image first asks, then between
/// asks: Ceph answers a write in milliseconds, so one this late is behind
/// recovery, a full cluster or a fence, and only a fence ends it.
const FIRST_ASK_AFTER: Duration = Duration::from_secs(5);
const ASK_EVERY: Duration = Duration::from_secs(1);

/// What the probe stats. Absent on a healthy connection (ENOENT); the
/// OSD refuses a blocklisted client before it looks.
const PROBE_OBJECT: &CStr = c"rackcache.fence_probe";

#[allow(non_camel_case_types)]
mod ffi {
    use std::ffi::{c_char, c_int, c_void};

    use super::super::ffi::rados_ioctx_t;

    pub type rados_completion_t = *mut c_void;
    pub type rados_callback_t = extern "C" fn(rados_completion_t, *mut c_void);

    extern "C" {
        pub fn rados_aio_create_completion2(
            arg: *mut c_void,
            cb: rados_callback_t,
            c: *mut rados_completion_t,
        ) -> c_int;
        pub fn rados_aio_stat(
            io: rados_ioctx_t,
            oid: *const c_char,
            c: rados_completion_t,
            psize: *mut u64,
            pmtime: *mut libc::time_t,
        ) -> c_int;
        pub fn rados_aio_get_return_value(c: rados_completion_t) -> c_int;
        pub fn rados_aio_release(c: rados_completion_t);
    }
}

/// One image's answer to "is this client fenced?" (clones share it).
#[derive(Clone, Default)]
pub(super) struct FenceProbe {
    state: Arc<ProbeState>,
}

#[derive(Default)]
struct ProbeState {
    /// An OSD refused this client as blocklisted. Sticky: a blocklisted
    /// client instance never serves again (a new connection is a new
    /// instance).
    fenced: AtomicBool,
    /// A probe is in flight on the image's ioctx (at most one).
    probing: AtomicBool,
}

/// What the probe's callback owns: the state to update and where
/// librados writes the stat's results.
struct Probe {
    state: Arc<ProbeState>,
    size: u64,
    mtime: libc::time_t,
}

extern "C" fn on_probed(c: ffi::rados_completion_t, arg: *mut c_void) {
    // SAFETY: arg is the Box<Probe> leaked in `ask`, reclaimed once here.
    let probe = unsafe { Box::from_raw(arg as *mut Probe) };
    // SAFETY: c is the completion this callback was registered on,
    // released once, after reading its value.
    let rv = unsafe {
        let rv = ffi::rados_aio_get_return_value(c);
        ffi::rados_aio_release(c);
        rv
    };
    if rv == -libc::ESHUTDOWN {
        probe.state.fenced.store(true, Ordering::Release);
    }
    // Last: once it reads false, the image's close may destroy the ioctx.
    probe.state.probing.store(false, Ordering::Release);
}

impl FenceProbe {
    /// Waits for `rx`; `None` when this client turned out fenced first.
    /// `ask` starts a probe ([`FenceProbe::ask`] on the image's ioctx).
    /// Needs tokio's timer inside a runtime (every runtime here enables
    /// it).
    pub(super) async fn answer<T>(
        &self,
        mut rx: oneshot::Receiver<T>,
        ask: impl Fn(),
    ) -> Option<Result<T, oneshot::error::RecvError>> {
        if tokio::runtime::Handle::try_current().is_err() {
            // Polled by hand, outside a runtime: no timer to ask with.
            return Some(rx.await);
        }
        let mut wait = FIRST_ASK_AFTER;
        loop {
            if let Ok(r) = tokio::time::timeout(wait, &mut rx).await {
                return Some(r);
            }
            if self.fenced() {
                return None;
            }
            ask();
            wait = ASK_EVERY;
        }
    }

    /// Whether an OSD refused this client as blocklisted.
    pub(super) fn fenced(&self) -> bool {
        self.state.fenced.load(Ordering::Acquire)
    }

    /// Whether a probe may still use the ioctx: the image's close then
    /// leaks the ioctx rather than destroy it under librados.
    pub(super) fn in_flight(&self) -> bool {
        self.state.probing.load(Ordering::Acquire)
    }

    /// Starts a probe on `ioctx` unless one is in flight.
    pub(super) fn ask(&self, ioctx: rados_ioctx_t) {
        if self.state.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let probe = Box::into_raw(Box::new(Probe {
            state: Arc::clone(&self.state),
            size: 0,
            mtime: 0,
        }));
        let mut c: ffi::rados_completion_t = ptr::null_mut();
        // SAFETY: probe stays valid until on_probed reclaims it; its
        // fields receive the stat's results.
        let rc: c_int = unsafe {
            let rc = ffi::rados_aio_create_completion2(probe as *mut c_void, on_probed, &mut c);
            if rc < 0 {
                rc
            } else {
                let rc = ffi::rados_aio_stat(
                    ioctx,
                    PROBE_OBJECT.as_ptr(),
                    c,
                    &mut (*probe).size,
                    &mut (*probe).mtime,
                );
                if rc < 0 {
                    ffi::rados_aio_release(c);
                }
                rc
            }
        };
        if rc < 0 {
            // No callback will run: the probe is ours again.
            // SAFETY: leaked above, not handed to librados.
            drop(unsafe { Box::from_raw(probe) });
            self.state.probing.store(false, Ordering::Release);
        }
    }
}
