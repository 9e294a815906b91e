//! The daemon's control-plane state: registered bdevs and Ceph clusters, and
//! the parameters each was created with (so `save_config` can recreate it),
//! and the NVMe-oF target.
//!
//! Control calls take one async mutex; the I/O path never does: it holds
//! counted handles ([`CountedBdev`]) to the bdevs it uses, whose counters
//! are atomics.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bdev::rbd::RbdCluster;
pub use bdev::IoStats;
use bdev::{Bdev, CountedBdev, DmaBuf};
use metrics::Registry;
use nvmf_tgt::Target;
use serde_json::Value;
use tokio::sync::Mutex;

use crate::config::Persist;

/// A bdev as the daemon knows it.
pub struct RegisteredBdev {
    /// The device (shared with the NVMe-oF namespaces exporting it).
    pub bdev: Arc<Bdev>,
    /// Its counters (SPDK's `bdev_get_iostat` fields; also on /metrics
    /// with the label `bdev`), shared by every [`RegisteredBdev::counted`]
    /// handle.
    pub stats: Arc<IoStats>,
    /// The RPC that created it and its parameters, for `save_config`.
    pub created_by: (&'static str, Value),
    /// For rbd bdevs: the cluster it uses.
    pub cluster: Option<String>,
}

impl RegisteredBdev {
    /// The call `save_config` records for this bdev: the one the bdev
    /// writes itself (a kind whose parameters change after creation, as a
    /// cached bdev), else the one that created it.
    pub fn config_call(&self) -> (&'static str, Value) {
        match self.bdev.config_call() {
            Some(c) => (c.method, c.params),
            None => self.created_by.clone(),
        }
    }

    /// A handle that counts its I/O in this bdev's statistics: what
    /// namespaces and every other user of the bdev's data path get.
    pub fn counted(&self) -> CountedBdev {
        CountedBdev::new(self.bdev.clone(), self.stats.clone())
    }

    /// Reads through the bdev, counting.
    pub async fn read(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, bdev::Result<()>) {
        self.counted().read(offset, buf).await
    }

    /// Writes through the bdev, counting.
    pub async fn write(&self, offset: u64, buf: DmaBuf) -> (DmaBuf, bdev::Result<()>) {
        self.counted().write(offset, buf).await
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

/// A key of the keyring.
pub struct Key {
    /// Creation order, for `save_config`.
    pub seq: u64,
    /// Where its secret is.
    pub source: KeySource,
}

/// Where a key's secret is kept.
pub enum KeySource {
    /// A file's absolute path (`keyring_file_add_key`), read when a method
    /// uses the key: the file is the key, and is saved by path.
    File(String),
    /// The secret itself, held in memory only (`keyring_memory_add_key`):
    /// never saved, so a restarted daemon has no such key until its
    /// control plane delivers it again.
    Memory(String),
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
    /// Named keys (`keyring_file_add_key`, `keyring_memory_add_key`).
    pub keyring: BTreeMap<String, Key>,
    /// Cache devices by their bdev's name, opened by the first
    /// `bdev_adacache_create` on them and shared by every cached volume
    /// on the bdev (dropped with the bdev).
    pub caches: BTreeMap<String, Arc<cache::device::CacheDevice>>,
    /// Configuration calls that failed at start, kept for a retry.
    pub config_errors: crate::config::ConfigErrors,
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
    /// `nvmf_set_config`'s DH-HMAC-CHAP hashes and groups (None: all),
    /// applied to the target when it is made.
    pub dhchap: Option<(Vec<nvmf::keys::Hash>, Vec<nvmf::auth::DhGroup>)>,
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

    /// The bdev built on bdev `name`, if any: a wrapper (delay, error) or
    /// a layered bdev (a cached bdev on its core and cache bdevs). It
    /// claims its base, which then cannot be deleted or exported.
    pub fn wrapper_of(&self, name: &str) -> Option<String> {
        self.bdevs.iter().find_map(|(n, (_, r))| {
            let uses = match r.bdev.as_ref() {
                bdev::Bdev::Delay(d) => d.base().info().name == name,
                bdev::Bdev::Error(e) => e.base().info().name == name,
                bdev::Bdev::Layered(l) => l.base_names().iter().any(|b| b == name),
                _ => false,
            };
            uses.then(|| n.clone())
        })
    }

    /// Whether a namespace or a wrapper bdev uses bdev `name`.
    pub fn is_claimed(&self, name: &str) -> bool {
        self.wrapper_of(name).is_some() || !self.nvmf.claims(name).is_empty()
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
    /// `--config-persist`: set once the configuration was loaded, so the
    /// calls replaying it do not rewrite the file one by one.
    pub persist: OnceLock<Persist>,
    /// The `rackcache_cache_*` series of every cached bdev (see
    /// [`crate::cache_metrics`]).
    pub cache_metrics: crate::cache_metrics::CacheMetrics,
    /// The per cache device series (see [`crate::cache_metrics::devices`]).
    pub device_metrics: crate::cache_metrics::devices::DeviceMetrics,
    /// Told of NVMe/TCP activity; `--busy-poll`'s spinners watch it.
    pub poller: nvmf_tgt::Poller,
    /// `--ceph-keyring`: the keyring of clusters registered without a key.
    pub ceph_keyring: Option<std::path::PathBuf>,
    /// The control plane's lease on the ANA paths (outside the control
    /// lock: running out must fence even while a long call holds it).
    pub lease: crate::lease::Lease,
}

impl App {
    /// An empty daemon.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State::default()),
            started: Instant::now(),
            metrics: Registry::new(),
            persist: OnceLock::new(),
            cache_metrics: Default::default(),
            device_metrics: Default::default(),
            poller: Default::default(),
            ceph_keyring: None,
            lease: Default::default(),
        }
    }
}

impl Default for App {
    fn default() -> Self {
        Self::new()
    }
}
