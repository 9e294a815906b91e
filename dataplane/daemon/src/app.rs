//! The daemon's control-plane state: registered bdevs and Ceph clusters, and
//! the parameters each was created with (so `save_config` can recreate it),
//! and the NVMe-oF target.
//!
//! Control calls take one async mutex; the I/O path never does: it holds
//! `Arc`s to the bdevs it uses and per-bdev atomic counters.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bdev::rbd::RbdCluster;
use bdev::{Bdev, DmaBuf};
use metrics::{Counter, Histogram, Registry};
use nvmf_tgt::Target;
use serde_json::Value;
use tokio::sync::Mutex;

/// I/O counters of one bdev (SPDK's `bdev_get_iostat` fields), registered
/// in the Prometheus registry with the label `bdev`.
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
    /// Read latency.
    pub read_latency: Arc<Histogram>,
    /// Write latency.
    pub write_latency: Arc<Histogram>,
    /// Failed operations.
    pub io_errors: Arc<Counter>,
}

/// Names of the per-bdev metric families, for removal on delete.
const BDEV_FAMILIES: [&str; 9] = [
    "rackcache_bdev_read_bytes_total",
    "rackcache_bdev_read_ops_total",
    "rackcache_bdev_written_bytes_total",
    "rackcache_bdev_write_ops_total",
    "rackcache_bdev_unmapped_bytes_total",
    "rackcache_bdev_unmap_ops_total",
    "rackcache_bdev_read_latency_seconds",
    "rackcache_bdev_write_latency_seconds",
    "rackcache_bdev_io_errors_total",
];

impl IoStats {
    /// Registers the series of bdev `name`.
    pub fn register(registry: &Registry, name: &str) -> Self {
        let l = [("bdev", name)];
        let c = |n: &str, h: &str| registry.counter(n, h, &l).expect("valid metric names");
        let h = |n: &str, d: &str| registry.histogram(n, d, &l).expect("valid metric names");
        Self {
            bytes_read: c(BDEV_FAMILIES[0], "Bytes read from the bdev."),
            num_read_ops: c(BDEV_FAMILIES[1], "Read operations completed by the bdev."),
            bytes_written: c(BDEV_FAMILIES[2], "Bytes written to the bdev."),
            num_write_ops: c(BDEV_FAMILIES[3], "Write operations completed by the bdev."),
            bytes_unmapped: c(BDEV_FAMILIES[4], "Bytes deallocated on the bdev."),
            num_unmap_ops: c(
                BDEV_FAMILIES[5],
                "Deallocate operations completed by the bdev.",
            ),
            read_latency: h(BDEV_FAMILIES[6], "Read latency of the bdev."),
            write_latency: h(BDEV_FAMILIES[7], "Write latency of the bdev."),
            io_errors: c(BDEV_FAMILIES[8], "Failed operations of the bdev."),
        }
    }

    /// Removes bdev `name`'s series.
    pub fn unregister(registry: &Registry, name: &str) {
        for f in BDEV_FAMILIES {
            registry.remove(f, &[("bdev", name)]);
        }
    }
}

/// A bdev as the daemon knows it.
pub struct RegisteredBdev {
    /// The device (shared with the NVMe-oF namespaces exporting it).
    pub bdev: Arc<Bdev>,
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
            &self.stats.read_latency,
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
            &self.stats.write_latency,
            len,
            start,
        );
        (buf, r)
    }

    fn count(
        &self,
        r: &bdev::Result<()>,
        bytes: &Counter,
        ops: &Counter,
        latency: &Histogram,
        len: u64,
        start: Instant,
    ) {
        if r.is_ok() {
            bytes.add(len);
            ops.inc();
            latency.observe_ns(start.elapsed().as_nanos() as u64);
        } else {
            self.stats.io_errors.inc();
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
    /// The NVMe-oF target.
    pub nvmf: NvmfState,
}

/// The NVMe-oF side. The target itself is the record of its subsystems,
/// namespaces, hosts and listeners; only what it does not keep is here.
#[derive(Default)]
pub struct NvmfState {
    /// The target, made by `nvmf_create_transport` (its options are fixed
    /// at creation, as an SPDK transport's are).
    pub target: Option<Target>,
    /// The transport's parameters with every default filled in, as
    /// `nvmf_get_transports` and `save_config` show them.
    pub transport: Option<Value>,
}

impl NvmfState {
    /// The namespaces exporting bdev `name`, as (subsystem NQN, nsid): a
    /// bdev with any is claimed and cannot be deleted or exported again.
    pub fn claims(&self, name: &str) -> Vec<(String, u32)> {
        let Some(t) = &self.target else {
            return Vec::new();
        };
        t.subsystems()
            .iter()
            .flat_map(|s| {
                s.namespaces()
                    .values()
                    .filter(|ns| ns.bdev_name == name)
                    .map(|ns| (s.nqn.clone(), ns.nsid))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
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
    /// Prometheus metrics (served on --metrics-listen).
    pub metrics: Arc<Registry>,
}

impl App {
    /// An empty daemon.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State::default()),
            started: Instant::now(),
            metrics: Registry::new(),
        }
    }
}

impl Default for App {
    fn default() -> Self {
        Self::new()
    }
}
