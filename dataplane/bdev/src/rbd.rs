//! `rbd` bdev: a Ceph RBD image through librbd's C API, with asynchronous
//! completions and cephx.
//!
//! A [`RbdCluster`] is one librados connection (SPDK's
//! `bdev_rbd_register_cluster`); any number of images share it. librbd runs
//! its own threads: an operation is submitted with `rbd_aio_*`, librbd calls
//! [`on_complete`] on one of its threads when it is done, and that wakes the
//! waiting task through a oneshot channel. The buffer stays owned by the
//! pending operation until then.
//!
//! Fencing: `fence` (a connection's client address, and blocklisting
//! another client through it) and `fenced` (how this connection's writes
//! end once another server has blocklisted it).

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::buf::{back, AnyBuf, IoBuf};
use crate::{uuid_from_name, BdevError, BdevInfo, DmaBuf, IoKind, Result};

mod fence;
mod fenced;
pub use fence::{CephClientAddr, MAX_BLOCKLIST_SECONDS};
use fenced::FenceProbe;

#[allow(non_camel_case_types)]
mod ffi {
    use std::ffi::{c_char, c_int, c_void};

    pub type rados_t = *mut c_void;
    pub type rados_ioctx_t = *mut c_void;
    pub type rbd_image_t = *mut c_void;
    pub type rbd_completion_t = *mut c_void;
    pub type rbd_callback_t = extern "C" fn(rbd_completion_t, *mut c_void);

    extern "C" {
        pub fn rados_create2(
            cluster: *mut rados_t,
            cluster_name: *const c_char,
            name: *const c_char,
            flags: u64,
        ) -> c_int;
        pub fn rados_conf_set(
            cluster: rados_t,
            option: *const c_char,
            value: *const c_char,
        ) -> c_int;
        pub fn rados_conf_read_file(cluster: rados_t, path: *const c_char) -> c_int;
        pub fn rados_connect(cluster: rados_t) -> c_int;
        pub fn rados_shutdown(cluster: rados_t);
        pub fn rados_ioctx_create(
            cluster: rados_t,
            pool: *const c_char,
            io: *mut rados_ioctx_t,
        ) -> c_int;
        pub fn rados_ioctx_destroy(io: rados_ioctx_t);

        pub fn rbd_open(
            io: rados_ioctx_t,
            name: *const c_char,
            image: *mut rbd_image_t,
            snap: *const c_char,
        ) -> c_int;
        pub fn rbd_close(image: rbd_image_t) -> c_int;
        pub fn rbd_get_size(image: rbd_image_t, size: *mut u64) -> c_int;
        pub fn rbd_resize(image: rbd_image_t, size: u64) -> c_int;
        pub fn rbd_get_id(image: rbd_image_t, id: *mut c_char, len: usize) -> c_int;
        pub fn rbd_aio_create_completion(
            arg: *mut c_void,
            cb: rbd_callback_t,
            c: *mut rbd_completion_t,
        ) -> c_int;
        pub fn rbd_aio_get_return_value(c: rbd_completion_t) -> isize;
        pub fn rbd_aio_release(c: rbd_completion_t);
        pub fn rbd_aio_read(
            image: rbd_image_t,
            off: u64,
            len: usize,
            buf: *mut c_char,
            c: rbd_completion_t,
        ) -> c_int;
        pub fn rbd_aio_write(
            image: rbd_image_t,
            off: u64,
            len: usize,
            buf: *const c_char,
            c: rbd_completion_t,
        ) -> c_int;
        pub fn rbd_aio_flush(image: rbd_image_t, c: rbd_completion_t) -> c_int;
        pub fn rbd_aio_write_zeroes(
            image: rbd_image_t,
            off: u64,
            len: usize,
            c: rbd_completion_t,
            zero_flags: c_int,
            op_flags: c_int,
        ) -> c_int;
    }
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| BdevError::InvalidArgument(format!("{what} contains a NUL byte")))
}

fn check(op: impl FnOnce() -> String, rc: c_int) -> Result<()> {
    if rc < 0 {
        Err(BdevError::Ceph {
            op: op(),
            errno: rc,
        })
    } else {
        Ok(())
    }
}

/// How to reach and authenticate to a Ceph cluster.
#[derive(Clone, Default)]
pub struct ClusterConfig {
    /// cephx user without `client.` (e.g. `csi`).
    pub user: String,
    /// Monitor addresses (`mon_host`); optional when `config_file` has them.
    pub mon_host: Option<String>,
    /// The user's cephx key; never logged. Optional when a keyring is given.
    pub key: Option<String>,
    /// A ceph.conf to read first.
    pub config_file: Option<String>,
    /// A keyring file.
    pub keyring: Option<String>,
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs and error messages.
        f.debug_struct("ClusterConfig")
            .field("user", &self.user)
            .field("mon_host", &self.mon_host)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("config_file", &self.config_file)
            .field("keyring", &self.keyring)
            .finish()
    }
}

/// One librados connection.
pub struct RbdCluster {
    handle: ffi::rados_t,
    name: String,
}

// SAFETY: librados cluster handles are thread-safe once connected.
unsafe impl Send for RbdCluster {}
// SAFETY: as above.
unsafe impl Sync for RbdCluster {}

impl RbdCluster {
    /// Connects as `cfg.user`. Fails with the cluster's errno (EACCES for a
    /// refused key, ETIMEDOUT for unreachable monitors).
    pub fn connect(name: &str, cfg: &ClusterConfig) -> Result<Arc<Self>> {
        if cfg.user.is_empty() {
            return Err(BdevError::InvalidArgument(
                "a Ceph user name is required".into(),
            ));
        }
        if cfg.mon_host.is_none() && cfg.config_file.is_none() {
            return Err(BdevError::InvalidArgument(
                "either monitors (mon_host) or a config file is required".into(),
            ));
        }
        let cluster_name = cstring("cluster name", "ceph")?;
        let user = cstring("user", &format!("client.{}", cfg.user))?;
        let mut handle: ffi::rados_t = ptr::null_mut();
        // SAFETY: out-pointer to a handle; strings are NUL-terminated.
        check(
            || format!("rados_create2 for client.{}", cfg.user),
            unsafe { ffi::rados_create2(&mut handle, cluster_name.as_ptr(), user.as_ptr(), 0) },
        )?;
        let cluster = Self {
            handle,
            name: name.to_owned(),
        };
        if let Some(path) = &cfg.config_file {
            let p = cstring("config file", path)?;
            // SAFETY: valid handle and string.
            check(|| format!("read ceph config {path}"), unsafe {
                ffi::rados_conf_read_file(handle, p.as_ptr())
            })?;
        }
        let mut options: Vec<(&str, &str)> = vec![
            // librbd's own cache, set here after any config file so that the
            // target's durability never depends on a ceph.conf the user
            // wrote: no write-back cache, so a write librbd completes is on
            // the OSDs (replicated, journaled) and Flush has nothing left to
            // write. The cache above this bdev is ours (docs/dataplane.md,
            // "Durability").
            ("rbd_cache", "false"),
            ("rbd_cache_policy", "writethrough"),
            ("rbd_cache_writethrough_until_flush", "true"),
            // librbd's C API copies every write buffer (on the submitting
            // thread: ours) unless zero-copy writes are on; with them, the
            // OSD messages point into our buffer and librbd holds the
            // completion back until the last reference to it is gone. The
            // buffer is owned by the pending operation until that
            // completion (see `Pending`), so nothing can change or free it
            // while librbd reads it. Saves a memcpy of every write on the
            // runtime thread (measured: 128K sequential writes at QD32 took
            // 14-30 µs less CPU per write on that thread; docs/dataplane.md,
            // "Benchmark").
            ("rbd_disable_zero_copy_writes", "false"),
            // Fail rather than hang when the cluster is unreachable.
            ("client_mount_timeout", "30"),
            ("rados_mon_op_timeout", "30"),
            ("log_to_stderr", "false"),
            ("err_to_stderr", "false"),
        ];
        if let Some(m) = &cfg.mon_host {
            options.push(("mon_host", m));
        }
        if let Some(k) = &cfg.keyring {
            options.push(("keyring", k));
        }
        if let Some(k) = &cfg.key {
            options.push(("key", k));
        }
        for (opt, value) in options {
            let o = cstring("option", opt)?;
            let v = cstring(opt, value)?;
            // SAFETY: valid handle and strings.
            check(|| format!("set ceph option {opt}"), unsafe {
                ffi::rados_conf_set(handle, o.as_ptr(), v.as_ptr())
            })?;
        }
        // SAFETY: configured handle.
        check(
            || format!("connect to Ceph as client.{}", cfg.user),
            unsafe { ffi::rados_connect(handle) },
        )?;
        Ok(Arc::new(cluster))
    }

    /// The name it was registered under.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for RbdCluster {
    fn drop(&mut self) {
        // SAFETY: every image holds an Arc to the cluster, so none is open.
        unsafe { ffi::rados_shutdown(self.handle) }
    }
}

/// An open RBD image.
pub struct RbdBdev {
    info: BdevInfo,
    image: ffi::rbd_image_t,
    /// The image's pool context, for the fence probe (see `fenced`).
    ioctx: ffi::rados_ioctx_t,
    fence: FenceProbe,
    pool: String,
    image_name: String,
    // The open handles and the connection they need, closed once (on
    // another thread) when the bdev goes; None only after that.
    closer: Option<Closer>,
}

// SAFETY: librbd image handles support concurrent aio from any thread.
unsafe impl Send for RbdBdev {}
// SAFETY: as above.
unsafe impl Sync for RbdBdev {}

/// What librbd's callback receives: the buffer the operation uses (if any)
/// and where to send the result. Owning the buffer here, not in the waiting
/// future, means a cancelled future cannot free memory librbd still reads
/// (zero-copy writes) or writes (reads).
struct Pending {
    tx: oneshot::Sender<(isize, Option<AnyBuf>)>,
    buf: Option<AnyBuf>,
}

extern "C" fn on_complete(c: ffi::rbd_completion_t, arg: *mut c_void) {
    // SAFETY: arg is the Box<Pending> leaked in `submit`, reclaimed once here.
    let pending = unsafe { Box::from_raw(arg as *mut Pending) };
    // SAFETY: c is the completion this callback was registered on.
    let rv = unsafe { ffi::rbd_aio_get_return_value(c) };
    // SAFETY: released once, after reading its value.
    unsafe { ffi::rbd_aio_release(c) };
    let Pending { tx, buf } = *pending;
    // If the waiting task is gone, the buffer is dropped here, after librbd
    // has finished with it.
    let _ = tx.send((rv, buf));
}

impl RbdBdev {
    /// Opens `pool/image` on `cluster` with the given logical block size
    /// (512 or 4096 are usual; 0 means 512).
    pub fn open(
        name: &str,
        cluster: Arc<RbdCluster>,
        pool: &str,
        image: &str,
        block_size: u32,
    ) -> Result<Self> {
        let block_size = if block_size == 0 { 512 } else { block_size };
        if !block_size.is_power_of_two() || !(512..=65536).contains(&block_size) {
            return Err(BdevError::InvalidArgument(format!(
                "block size {block_size} must be a power of two from 512 to 65536"
            )));
        }
        let pool_c = cstring("pool", pool)?;
        let image_c = cstring("image", image)?;
        let mut ioctx: ffi::rados_ioctx_t = ptr::null_mut();
        // SAFETY: connected cluster, valid string, out-pointer.
        check(|| format!("open pool {pool}"), unsafe {
            ffi::rados_ioctx_create(cluster.handle, pool_c.as_ptr(), &mut ioctx)
        })?;
        let mut handle: ffi::rbd_image_t = ptr::null_mut();
        // SAFETY: valid ioctx and strings; no snapshot.
        let rc = unsafe { ffi::rbd_open(ioctx, image_c.as_ptr(), &mut handle, ptr::null()) };
        if rc < 0 {
            // SAFETY: created above, not used after.
            unsafe { ffi::rados_ioctx_destroy(ioctx) };
            return Err(BdevError::Ceph {
                op: format!("open image {pool}/{image}"),
                errno: rc,
            });
        }
        let mut size = 0u64;
        // SAFETY: open image.
        let rc = unsafe { ffi::rbd_get_size(handle, &mut size) };
        let mut id = [0 as c_char; 64];
        // SAFETY: buffer of the given length.
        let id_rc = unsafe { ffi::rbd_get_id(handle, id.as_mut_ptr(), id.len()) };
        let fence = FenceProbe::default();
        let bdev = Self {
            info: BdevInfo {
                name: name.to_owned(),
                product_name: "Ceph Rbd Disk",
                block_size,
                blocks: crate::BlockCount::new(size / u64::from(block_size)),
                // The image id survives renames; the pool keeps ids unique.
                uuid: if id_rc >= 0 {
                    // SAFETY: rbd_get_id wrote a NUL-terminated string.
                    let id = unsafe { std::ffi::CStr::from_ptr(id.as_ptr()) };
                    uuid_from_name(&format!("rbd:{pool}"), &id.to_string_lossy())
                } else {
                    uuid_from_name(&format!("rbd:{pool}"), image)
                },
            },
            image: handle,
            ioctx,
            pool: pool.to_owned(),
            image_name: image.to_owned(),
            closer: Some(Closer::new(handle, ioctx, cluster, fence.clone())),
            fence,
        };
        check(|| format!("get size of {pool}/{image}"), rc)?;
        Ok(bdev)
    }

    /// Name, size, block size and identity.
    pub fn info(&self) -> &BdevInfo {
        &self.info
    }

    /// Grows the bdev to at least `new_size` bytes: the image is resized
    /// when it is smaller (an image already grown elsewhere, by the CSI
    /// controller or `rbd resize`, is only read again), then the bdev takes
    /// the image's size. Never shrinks: a size below the bdev's is refused,
    /// and so is one that is not a whole number of blocks. Returns the new
    /// size in bytes. librbd blocks here: call it off the async threads.
    pub fn grow(&self, new_size: u64) -> Result<u64> {
        let bs = u64::from(self.info.block_size);
        if !new_size.is_multiple_of(bs) || new_size < self.info.size_bytes() {
            return Err(BdevError::InvalidArgument(format!(
                "rbd bdev {} is {} bytes with {bs}-byte blocks: it can only grow, to a whole number of blocks ({new_size} bytes asked)",
                self.info.name,
                self.info.size_bytes()
            )));
        }
        let mut size = 0u64;
        // SAFETY: open image (closed only on drop), out-pointer.
        check(
            || format!("get size of {}/{}", self.pool, self.image_name),
            unsafe { ffi::rbd_get_size(self.image, &mut size) },
        )?;
        if size < new_size {
            // SAFETY: open image; librbd serialises resizes with I/O.
            check(
                || {
                    format!(
                        "resize {}/{} to {new_size} bytes",
                        self.pool, self.image_name
                    )
                },
                unsafe { ffi::rbd_resize(self.image, new_size) },
            )?;
            // SAFETY: as above.
            check(
                || format!("get size of {}/{}", self.pool, self.image_name),
                unsafe { ffi::rbd_get_size(self.image, &mut size) },
            )?;
        }
        self.info.blocks.grow_to(size / bs);
        Ok(self.info.size_bytes())
    }

    /// Pool and image name.
    pub fn image(&self) -> (&str, &str) {
        (&self.pool, &self.image_name)
    }

    /// librbd supports every operation.
    pub fn supports(&self, _kind: IoKind) -> bool {
        true
    }

    /// Submits one aio operation built by `start` (given the image, the
    /// completion and a pointer into `buf`, if any) and waits for it.
    /// Returns librbd's return value and the buffer. An operation that
    /// changes the image (`mutates`) ends with ESHUTDOWN, without its
    /// buffer, once this client turns out fenced (see `fenced`).
    async fn submit(
        &self,
        what: &'static str,
        mutates: bool,
        buf: Option<AnyBuf>,
        start: impl FnOnce(ffi::rbd_image_t, ffi::rbd_completion_t, *mut c_char) -> c_int,
    ) -> (Option<AnyBuf>, Result<isize>) {
        // Submission is synchronous, so no raw pointer lives across the await
        // and the future stays Send.
        let rx = match self.start_op(buf, start) {
            Ok(rx) => rx,
            Err((buf, rc)) => return (buf, Err(self.ceph_err(what, rc))),
        };
        let answer = if mutates {
            let ask = || self.fence.ask(self.ioctx);
            match self.fence.answer(rx, ask).await {
                Some(a) => a,
                None => {
                    let fenced = format!("{what} (this Ceph client is blocklisted)");
                    return (None, Err(self.ceph_err(&fenced, -libc::ESHUTDOWN)));
                }
            }
        } else {
            rx.await
        };
        match answer {
            Ok((rv, buf)) if rv < 0 => (buf, Err(self.ceph_err(what, rv as c_int))),
            Ok((rv, buf)) => (buf, Ok(rv)),
            Err(_) => (None, Err(self.ceph_err(what, -libc::EIO))),
        }
    }

    #[allow(clippy::type_complexity)]
    fn start_op(
        &self,
        mut buf: Option<AnyBuf>,
        start: impl FnOnce(ffi::rbd_image_t, ffi::rbd_completion_t, *mut c_char) -> c_int,
    ) -> std::result::Result<oneshot::Receiver<(isize, Option<AnyBuf>)>, (Option<AnyBuf>, c_int)>
    {
        let data = buf
            .as_mut()
            .map_or(ptr::null_mut(), |b| b.as_mut_ptr() as *mut c_char);
        let (tx, rx) = oneshot::channel();
        let arg = Box::into_raw(Box::new(Pending { tx, buf })) as *mut c_void;
        let mut c: ffi::rbd_completion_t = ptr::null_mut();
        // SAFETY: arg stays valid until on_complete reclaims it.
        let rc = unsafe { ffi::rbd_aio_create_completion(arg, on_complete, &mut c) };
        if rc < 0 {
            // SAFETY: the callback will never run; reclaim the box.
            let p = unsafe { Box::from_raw(arg as *mut Pending) };
            return Err((p.buf, rc));
        }
        // The buffer's heap memory did not move when the buffer (or view)
        // moved into the box, so `data` is still valid.
        let rc = start(self.image, c, data);
        if rc < 0 {
            // Submission failed: librbd will not call back.
            // SAFETY: the completion and the box are still ours.
            let p = unsafe {
                ffi::rbd_aio_release(c);
                Box::from_raw(arg as *mut Pending)
            };
            return Err((p.buf, rc));
        }
        Ok(rx)
    }

    fn ceph_err(&self, what: &str, errno: c_int) -> BdevError {
        BdevError::Ceph {
            op: format!("{what} on {}/{}", self.pool, self.image_name),
            errno,
        }
    }

    /// Reads through librbd into `buf`, which is returned when librbd has
    /// completed.
    pub async fn read(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.read_buf(offset, buf).await
    }

    /// Writes `buf` through librbd.
    pub async fn write(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.write_buf(offset, buf, false).await
    }

    /// Reads into a buffer or view (librbd takes a pointer and a length).
    pub(crate) async fn read_buf<B: IoBuf>(&self, offset: u64, buf: B) -> (B, Result<()>) {
        let len = buf.len();
        let (any, r) = self
            .submit("read", false, Some(buf.into_any()), |image, c, p| {
                // SAFETY: p points at len bytes owned by the pending operation.
                unsafe { ffi::rbd_aio_read(image, offset, len, p, c) }
            })
            .await;
        let r = r.and_then(|n| {
            if n as usize == len {
                Ok(())
            } else {
                Err(self.ceph_err("short read", -libc::EIO))
            }
        });
        (back(any, len), r)
    }

    /// Writes a buffer or view, then flushes when `fua` (see
    /// [`RbdBdev::write_fua`]).
    pub(crate) async fn write_buf<B: IoBuf>(
        &self,
        offset: u64,
        buf: B,
        fua: bool,
    ) -> (B, Result<()>) {
        let len = buf.len();
        let (any, r) = self
            .submit("write", true, Some(buf.into_any()), |image, c, p| {
                // SAFETY: as in `read_buf`.
                unsafe { ffi::rbd_aio_write(image, offset, len, p, c) }
            })
            .await;
        let buf = back(any, len);
        if r.is_err() || !fua {
            return (buf, r.map(|_| ()));
        }
        (buf, self.flush().await)
    }

    /// Writes `buf` and makes it durable before returning: the write, then
    /// a flush. With librbd's cache off (see [`RbdCluster::connect`]) the
    /// write alone is already on the OSDs; the flush keeps that true even if
    /// a librbd layer caches after all.
    pub async fn write_fua(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, Result<()>) {
        self.write_buf(offset, buf, true).await
    }

    /// Flushes librbd's cache to the OSDs.
    pub async fn flush(&self) -> Result<()> {
        // SAFETY: open image and fresh completion.
        self.submit("flush", true, None, |image, c, _| unsafe {
            ffi::rbd_aio_flush(image, c)
        })
        .await
        .1
        .map(|_| ())
    }

    /// rbd_aio_write_zeroes.
    pub async fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        self.submit("write zeroes", true, None, |image, c, _| {
            // SAFETY: open image and fresh completion.
            unsafe { ffi::rbd_aio_write_zeroes(image, offset, len as usize, c, 0, 0) }
        })
        .await
        .1
        .map(|_| ())
    }

    /// Deallocates through rbd_aio_write_zeroes, not rbd_aio_discard:
    /// librbd skips a discard smaller than `rbd_discard_granularity_bytes`
    /// or only partly covering an object (`rbd_skip_partial_discard`),
    /// leaving the old data readable, while the namespace promises that a
    /// deallocated range reads as zeroes (DLFEAT). Write Zeroes discards
    /// whole objects and zeroes the rest.
    pub async fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        self.write_zeroes(offset, len).await
    }
}

/// What closing an image needs, movable to another thread.
struct Closer {
    image: ffi::rbd_image_t,
    ioctx: ffi::rados_ioctx_t,
    // Released after the image: the last image may shut the connection down,
    // which blocks too.
    cluster: Arc<RbdCluster>,
    fence: FenceProbe,
}

// SAFETY: librbd handles may be closed from any thread.
unsafe impl Send for Closer {}

/// Images opened and not yet closed in this process: a process that exits
/// with one still open (or with its close still running) leaves the image's
/// watch and exclusive lock to expire on the OSDs, which stalls the image's
/// next user for 30 seconds, and races librbd's threads against the exit.
static OPEN_IMAGES: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

impl Closer {
    fn new(
        image: ffi::rbd_image_t,
        ioctx: ffi::rados_ioctx_t,
        cluster: Arc<RbdCluster>,
        fence: FenceProbe,
    ) -> Self {
        *OPEN_IMAGES.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Self {
            image,
            ioctx,
            cluster,
            fence,
        }
    }

    fn close(self) {
        // rbd_close waits for operations still in flight (whose buffers are
        // owned by their pending state) and for the OSDs: it blocks.
        // SAFETY: handles opened in `open`, closed once.
        unsafe {
            ffi::rbd_close(self.image);
            // A fence probe still in flight would use a destroyed ioctx:
            // leaked instead (a probe unanswered until the close).
            if !self.fence.in_flight() {
                ffi::rados_ioctx_destroy(self.ioctx);
            }
        }
        drop(self.cluster);
        let (count, closed) = &OPEN_IMAGES;
        *count.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        closed.notify_all();
    }
}

/// Blocks until every image this process opened is closed (background
/// closes included), or `timeout` passes; returns how many are still open.
/// For the end of a process, after it has dropped its bdevs.
pub fn wait_until_all_closed(timeout: Duration) -> usize {
    let (count, closed) = &OPEN_IMAGES;
    let guard = count.lock().unwrap_or_else(|e| e.into_inner());
    let (guard, _) = closed
        .wait_timeout_while(guard, timeout, |open| *open > 0)
        .unwrap_or_else(|e| e.into_inner());
    *guard
}

impl RbdBdev {
    /// Closes the image and waits until librbd has let go of it (for
    /// callers that must know, e.g. before removing the image).
    pub async fn close(self) {
        let (tx, rx) = oneshot::channel();
        self.close_in_background(Some(tx));
        let _ = rx.await;
    }

    /// Hands the blocking close to a thread of its own, so that dropping an
    /// image never stalls the runtime thread that dropped it (with a
    /// current-thread runtime, every queue). `done` hears when it is closed.
    fn close_in_background(mut self, done: Option<oneshot::Sender<()>>) {
        if let Some(closer) = self.closer.take() {
            spawn_close(closer, done);
        }
    }
}

fn spawn_close(closer: Closer, done: Option<oneshot::Sender<()>>) {
    // The closer goes to the thread through a channel, not the closure, so
    // that it is still ours when no thread can be spawned.
    let (tx, rx) = std::sync::mpsc::channel::<Closer>();
    let spawned = std::thread::Builder::new()
        .name("rbd-close".into())
        .spawn(move || {
            if let Ok(c) = rx.recv() {
                c.close();
            }
            if let Some(d) = done {
                let _ = d.send(());
            }
        });
    match spawned {
        Ok(_) => {
            let _ = tx.send(closer);
        }
        // No thread to be had: close here rather than leak the image.
        Err(_) => closer.close(),
    }
}

impl Drop for RbdBdev {
    fn drop(&mut self) {
        if let Some(closer) = self.closer.take() {
            spawn_close(closer, None);
        }
    }
}
