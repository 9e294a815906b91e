//! The daemon's control-plane state: registered bdevs and Ceph clusters, and
//! the parameters each was created with (so `save_config` can recreate it).
//!
//! Control calls take one async mutex; the I/O path never does: it holds
//! `Arc`s to the bdevs it uses and per-bdev atomic counters.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bdev::rbd::RbdCluster;
use bdev::{Bdev, DmaBuf};
use serde_json::Value;
use tokio::sync::Mutex;

/// I/O counters of one bdev (SPDK's `bdev_get_iostat` fields).
#[derive(Default)]
pub struct IoStats {
    /// Bytes read.
    pub bytes_read: AtomicU64,
    /// Read operations.
    pub num_read_ops: AtomicU64,
    /// Bytes written.
    pub bytes_written: AtomicU64,
    /// Write operations.
    pub num_write_ops: AtomicU64,
    /// Bytes unmapped.
    pub bytes_unmapped: AtomicU64,
    /// Unmap operations.
    pub num_unmap_ops: AtomicU64,
    /// Sum of read latencies, nanoseconds.
    pub read_latency_ns: AtomicU64,
    /// Sum of write latencies, nanoseconds.
    pub write_latency_ns: AtomicU64,
    /// Failed operations.
    pub io_errors: AtomicU64,
}

/// A bdev as the daemon knows it.
pub struct RegisteredBdev {
    /// The device.
    pub bdev: Bdev,
    /// Its counters.
    pub stats: IoStats,
    /// The RPC that created it and its parameters, for `save_config`.
    pub created_by: (&'static str, Value),
    /// For rbd bdevs: the cluster it uses.
    pub cluster: Option<String>,
}

impl RegisteredBdev {
    /// Reads through the bdev, counting.
    pub async fn read(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, bdev::Result<()>) {
        let start = Instant::now();
        let len = buf.len() as u64;
        let (buf, r) = self.bdev.read(offset, buf).await;
        self.count(
            &r,
            &self.stats.bytes_read,
            &self.stats.num_read_ops,
            &self.stats.read_latency_ns,
            len,
            start,
        );
        (buf, r)
    }

    /// Writes through the bdev, counting.
    pub async fn write(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, bdev::Result<()>) {
        let start = Instant::now();
        let len = buf.len() as u64;
        let (buf, r) = self.bdev.write(offset, buf).await;
        self.count(
            &r,
            &self.stats.bytes_written,
            &self.stats.num_write_ops,
            &self.stats.write_latency_ns,
            len,
            start,
        );
        (buf, r)
    }

    fn count(
        &self,
        r: &bdev::Result<()>,
        bytes: &AtomicU64,
        ops: &AtomicU64,
        latency: &AtomicU64,
        len: u64,
        start: Instant,
    ) {
        if r.is_ok() {
            bytes.fetch_add(len, Ordering::Relaxed);
            ops.fetch_add(1, Ordering::Relaxed);
            latency.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        } else {
            self.stats.io_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A registered Ceph cluster connection.
pub struct RegisteredCluster {
    /// The connection.
    pub cluster: Arc<RbdCluster>,
    /// `bdev_rbd_register_cluster` parameters, for `save_config` (they hold
    /// the cephx key: saved configs are written mode 0600 and never logged).
    pub params: Value,
}

/// Everything the control plane manages.
#[derive(Default)]
pub struct State {
    /// Bdevs by name, with creation order for `save_config`.
    pub bdevs: BTreeMap<String, (u64, Arc<RegisteredBdev>)>,
    /// Ceph clusters by name, with creation order.
    pub clusters: BTreeMap<String, (u64, RegisteredCluster)>,
    /// Creation counter.
    pub next_seq: u64,
}

impl State {
    /// The next creation sequence number.
    pub fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// The first free name `{prefix}{N}` (SPDK's default names: Malloc0,
    /// Ceph0, ...).
    pub fn default_name(&self, prefix: &str) -> String {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .find(|n| !self.bdevs.contains_key(n))
            .expect("an unused name exists")
    }
}

/// The daemon.
pub struct App {
    /// Control-plane state.
    pub state: Mutex<State>,
    /// When the process started (iostat's tick base).
    pub started: Instant,
}

impl App {
    /// An empty daemon.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State::default()),
            started: Instant::now(),
        }
    }
}

impl Default for App {
    fn default() -> Self {
        Self::new()
    }
}
