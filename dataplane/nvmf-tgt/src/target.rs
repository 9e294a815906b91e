//! The target: transport options, the subsystem registry, listeners and
//! their accept loops, and graceful shutdown.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use metrics::{Counter, Registry};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};

use crate::ctrlr::controller::{Controller, QpairCounts, QpairCountsSnapshot, Revocation};
use crate::ctrlr::log_page::DiscoveryEntry;
use crate::poller::Poller;
use crate::stats::SubsystemStats;
use crate::subsystem::{validate_nqn, ListenAddress, Subsystem, SubsystemConfig, DISCOVERY_NQN};
use crate::tcp::bufpool::SharedBuffers;
use crate::TargetError;

/// The longest timeout an option may set: deadlines computed from them
/// stay far from overflow, and a host waits an hour at most.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Transport parameters (SPDK `nvmf_create_transport` for TCP).
#[derive(Clone, Debug)]
pub struct TransportOptions {
    /// Entries per I/O queue (CAP.MQES + 1, MAXCMD).
    pub max_queue_depth: u16,
    /// Entries of the admin queue at most.
    pub max_aq_depth: u16,
    /// I/O queues per controller at most (admin queue not included).
    pub max_io_qpairs_per_ctrlr: u16,
    /// In-capsule data accepted, bytes (IOCCSZ - 64).
    pub in_capsule_data_size: u32,
    /// Largest transfer of one command, bytes (a power of two of 4 KiB:
    /// MDTS).
    pub max_io_size: u32,
    /// Largest H2CData PDU payload (MAXH2CDATA).
    pub max_h2c_data: u32,
    /// Send read data with the C2HData SUCCESS flag and no response capsule
    /// (off by default: some initiators mishandle it).
    pub c2h_success: bool,
    /// How long a queue pair that ends waits for the commands it already
    /// handed to a bdev (graceful shutdown, host disconnect, keep-alive
    /// expiry, removal); commands still running then are abandoned and
    /// counted in `rackcache_nvmf_abandoned_requests_total`.
    pub drain_timeout: Duration,
    /// Data buffer units shared by every queue pair (SPDK's
    /// `num_shared_buffers`): the budget is `num_shared_buffers *
    /// io_unit_size` bytes.
    pub num_shared_buffers: u32,
    /// Freed buffers each queue pair keeps for reuse (SPDK's
    /// `buf_cache_size`; here per queue pair, holding no budget units; all
    /// caches together keep at most the budget's bytes).
    pub buf_cache_size: u32,
    /// Bytes of one buffer unit (SPDK's `io_unit_size`).
    pub io_unit_size: u32,
    /// A write whose data has not all arrived this long after its R2T was
    /// sent ends its queue pair, freeing its buffers (each request has its
    /// own deadline: data for one does not extend another's). A command
    /// that has waited this long for buffer units is failed with Command
    /// Interrupted (the host retries it).
    pub h2c_data_timeout: Duration,
    /// A socket write that makes no progress for this long (the host does
    /// not read) ends the queue pair.
    pub write_timeout: Duration,
    /// Connections accepted at once on one listener; more are closed at
    /// once.
    pub max_connections_per_listener: u32,
}

impl Default for TransportOptions {
    fn default() -> Self {
        Self {
            max_queue_depth: 128,
            max_aq_depth: 128,
            max_io_qpairs_per_ctrlr: 127,
            in_capsule_data_size: 8192,
            max_io_size: 1 << 20,
            max_h2c_data: 128 << 10,
            c2h_success: false,
            drain_timeout: Duration::from_secs(5),
            num_shared_buffers: 511,
            buf_cache_size: 32,
            io_unit_size: 128 << 10,
            h2c_data_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            max_connections_per_listener: 1024,
        }
    }
}

impl TransportOptions {
    /// Checks the options' ranges.
    pub fn validate(&self) -> Result<(), TargetError> {
        let bad = |m: String| Err(TargetError::InvalidArgument(m));
        if !(2..=4096).contains(&self.max_queue_depth) {
            return bad(format!(
                "max_queue_depth {} not in 2..=4096",
                self.max_queue_depth
            ));
        }
        if !(32..=4096).contains(&self.max_aq_depth) {
            return bad(format!(
                "max_aq_depth {} not in 32..=4096",
                self.max_aq_depth
            ));
        }
        if self.max_io_qpairs_per_ctrlr == 0 {
            return bad("max_io_qpairs_per_ctrlr must be at least 1".into());
        }
        if self.in_capsule_data_size < 4096
            || self.in_capsule_data_size > (128 << 10)
            || !self.in_capsule_data_size.is_multiple_of(16)
        {
            return bad(format!(
                "in_capsule_data_size {} must be a multiple of 16 from 4096 to 131072",
                self.in_capsule_data_size
            ));
        }
        if !self.max_io_size.is_power_of_two() || !(4096..=(8 << 20)).contains(&self.max_io_size) {
            return bad(format!(
                "max_io_size {} must be a power of two from 4 KiB to 8 MiB",
                self.max_io_size
            ));
        }
        if self.max_h2c_data < 4096
            || !self.max_h2c_data.is_multiple_of(4)
            || self.max_h2c_data > (1 << 20)
        {
            return bad(format!(
                "max_h2c_data {} must be a multiple of 4 from 4096 to 1 MiB",
                self.max_h2c_data
            ));
        }
        // A unit larger than max_io_size is allowed (SPDK clamps it): each
        // command then takes one unit.
        if !(512..=(8 << 20)).contains(&self.io_unit_size) {
            return bad(format!(
                "io_unit_size {} must be from 512 to 8 MiB",
                self.io_unit_size
            ));
        }
        let per_transfer = self.max_io_size.div_ceil(self.io_unit_size);
        if self.num_shared_buffers < per_transfer {
            return bad(format!(
                "num_shared_buffers {} cannot hold one max_io_size transfer ({per_transfer} units of io_unit_size)",
                self.num_shared_buffers
            ));
        }
        if self.max_connections_per_listener == 0 {
            return bad("max_connections_per_listener must be at least 1".into());
        }
        for (what, d) in [
            ("h2c_data_timeout", self.h2c_data_timeout),
            ("write_timeout", self.write_timeout),
            ("drain_timeout", self.drain_timeout),
        ] {
            if d.is_zero() || d > MAX_TIMEOUT {
                return bad(format!(
                    "{what} {} ms must be from 1 ms to {} ms",
                    d.as_millis(),
                    MAX_TIMEOUT.as_millis()
                ));
            }
        }
        Ok(())
    }

    /// MDTS: log2 of the largest transfer in 4 KiB pages.
    pub fn mdts(&self) -> u8 {
        (self.max_io_size / 4096).trailing_zeros() as u8
    }
}

/// What `nvmf_get_stats` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetStats {
    /// Queue pairs.
    pub qpairs: QpairCountsSnapshot,
    /// I/O commands completed successfully (reads, writes, flushes,
    /// deallocates), deleted subsystems included.
    pub completed_io: u64,
}

/// I/O commands a subsystem completed successfully.
fn completed_io(st: &SubsystemStats) -> u64 {
    st.read_ops.get() + st.write_ops.get() + st.flush_ops.get() + st.unmap_ops.get()
}

/// A bound listener.
struct Listener {
    portid: u16,
    stop: watch::Sender<bool>,
}

/// Shared by the target handle and every connection task.
pub(crate) struct Inner {
    pub(crate) opts: TransportOptions,
    subsystems: RwLock<BTreeMap<String, Arc<Subsystem>>>,
    pub(crate) discovery: Arc<Subsystem>,
    listeners: Mutex<BTreeMap<SocketAddr, Listener>>,
    next_portid: Mutex<u16>,
    /// Discovery log generation counter.
    genctr: AtomicU64,
    /// Queue pairs of every subsystem.
    qpair_counts: Arc<QpairCounts>,
    /// I/O commands completed by subsystems since deleted.
    retired_io: AtomicU64,
    metrics: Arc<Registry>,
    /// True once shutdown starts: accept loops stop, connections drain.
    pub(crate) shutdown: watch::Sender<bool>,
    /// Every connection and accept loop holds a clone; shutdown waits until
    /// all are dropped.
    drain_tx: Mutex<Option<mpsc::Sender<()>>>,
    drain_rx: tokio::sync::Mutex<mpsc::Receiver<()>>,
    /// The data buffer budget.
    pub(crate) buffers: Arc<SharedBuffers>,
    /// Commands abandoned by queue pairs whose drain timed out.
    pub(crate) abandoned: Arc<Counter>,
    /// Controllers torn down whose queue pairs are still draining.
    releasing: Mutex<Vec<Releasing>>,
    /// Told of every connection's activity (busy polling's window).
    pub(crate) poller: Poller,
}

/// A controller with open queue pairs, tracked until the last closes.
struct Releasing {
    ctrl: Arc<Controller>,
    queues: usize,
    done: watch::Sender<bool>,
}

impl Inner {
    /// The subsystem named `nqn` (the discovery subsystem included).
    pub(crate) fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        if nqn == DISCOVERY_NQN {
            return Some(self.discovery.clone());
        }
        self.subsystems
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(nqn)
            .cloned()
    }

    /// Discovery log entries `hostnqn` may see: the discovery subsystem's
    /// own listeners first (as SPDK lists them, "current discovery
    /// subsystem" entries), then every allowed NVM subsystem's.
    pub(crate) fn discovery_entries(&self, hostnqn: &str) -> (u64, Vec<DiscoveryEntry>) {
        let mut subs = vec![self.discovery.clone()];
        subs.extend(
            self.subsystems
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned(),
        );
        let listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for s in subs.iter().filter(|s| s.host_allowed(hostnqn)) {
            for addr in s.listeners() {
                let portid = listeners.get(&addr.listen).map_or(0, |l| l.portid);
                out.push(DiscoveryEntry {
                    subnqn: s.nqn.clone(),
                    addr,
                    portid,
                    current_discovery: s.is_discovery,
                });
            }
        }
        (self.genctr.load(Ordering::Relaxed), out)
    }

    /// Records a queue pair bound to `ctrl`.
    pub(crate) fn queue_opened(&self, ctrl: &Arc<Controller>) {
        let mut v = self.releasing.lock().unwrap_or_else(|p| p.into_inner());
        match v.iter_mut().find(|r| Arc::ptr_eq(&r.ctrl, ctrl)) {
            Some(r) => r.queues += 1,
            None => v.push(Releasing {
                ctrl: ctrl.clone(),
                queues: 1,
                done: watch::channel(false).0,
            }),
        }
    }

    /// Records that a queue pair of `ctrl` has drained and closed.
    pub(crate) fn queue_closed(&self, ctrl: &Arc<Controller>) {
        let mut v = self.releasing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = v.iter().position(|r| Arc::ptr_eq(&r.ctrl, ctrl)) {
            v[i].queues -= 1;
            if v[i].queues == 0 {
                v.swap_remove(i).done.send_replace(true);
            }
        }
    }

    /// A signal that becomes true once every torn-down controller of
    /// `hostnqn` on `subnqn` has drained its queue pairs, if any is still
    /// draining: a reconnecting host's new controller waits for it, so its
    /// writes cannot race the old controller's stale ones.
    pub(crate) fn releasing(&self, subnqn: &str, hostnqn: &str) -> Option<watch::Receiver<bool>> {
        let v = self.releasing.lock().unwrap_or_else(|p| p.into_inner());
        v.iter()
            .find(|r| {
                r.ctrl.is_torn_down() && r.ctrl.hostnqn == hostnqn && r.ctrl.subsystem.nqn == subnqn
            })
            .map(|r| r.done.subscribe())
    }

    /// Torn-down controllers `which` selects whose queue pairs are still
    /// draining: a revocation waits for them too, since their writes have
    /// not all landed yet.
    fn draining(&self, which: impl Fn(&Controller) -> bool) -> Vec<Arc<Controller>> {
        let v = self.releasing.lock().unwrap_or_else(|p| p.into_inner());
        v.iter()
            .filter(|r| r.ctrl.is_torn_down() && which(&r.ctrl))
            .map(|r| r.ctrl.clone())
            .collect()
    }

    /// Marks the discovery log changed.
    pub(crate) fn discovery_changed(&self) {
        self.genctr.fetch_add(1, Ordering::Relaxed);
        for c in self.discovery.live_controllers() {
            c.discovery_changed();
        }
    }
}

/// The NVMe-oF target. Cloning gives another handle to the same target.
#[derive(Clone)]
pub struct Target {
    inner: Arc<Inner>,
}

impl Target {
    /// A target with no subsystems but discovery, no listeners.
    pub fn new(opts: TransportOptions, metrics: Arc<Registry>) -> Result<Self, TargetError> {
        Self::with_poller(opts, metrics, Poller::default())
    }

    /// [`Target::new`], its connections reporting their activity to
    /// `poller` (whose spinners the caller runs: see [`crate::poller`]).
    pub fn with_poller(
        opts: TransportOptions,
        metrics: Arc<Registry>,
        poller: Poller,
    ) -> Result<Self, TargetError> {
        opts.validate()?;
        let (drain_tx, drain_rx) = mpsc::channel(1);
        let mut dcfg = SubsystemConfig::new(DISCOVERY_NQN);
        dcfg.allow_any_host = true;
        dcfg.max_namespaces = 0;
        let qpair_counts = Arc::new(QpairCounts::default());
        let in_use = metrics
            .gauge(
                "rackcache_nvmf_buffer_bytes_in_use",
                "Bytes of the NVMe/TCP data buffer budget granted to commands.",
                &[],
            )
            .map_err(|e| TargetError::InvalidArgument(format!("metrics: {e}")))?;
        metrics
            .gauge(
                "rackcache_nvmf_buffer_bytes_budget",
                "Bytes of the NVMe/TCP data buffer budget (num_shared_buffers * io_unit_size).",
                &[],
            )
            .map_err(|e| TargetError::InvalidArgument(format!("metrics: {e}")))?
            .set(i64::from(opts.num_shared_buffers) * i64::from(opts.io_unit_size));
        let abandoned = metrics
            .counter(
                "rackcache_nvmf_abandoned_requests_total",
                "Commands still running on a bdev when their queue pair's drain timed out.",
                &[],
            )
            .map_err(|e| TargetError::InvalidArgument(format!("metrics: {e}")))?;
        let cached = metrics
            .gauge(
                "rackcache_nvmf_buffer_bytes_cached",
                "Bytes of freed NVMe/TCP data buffers kept for reuse (at most the budget).",
                &[],
            )
            .map_err(|e| TargetError::InvalidArgument(format!("metrics: {e}")))?;
        let buffers = Arc::new(SharedBuffers::new(
            opts.num_shared_buffers,
            opts.io_unit_size,
            in_use,
            cached,
        ));
        let discovery = Arc::new(Subsystem::new(
            dcfg,
            true,
            SubsystemStats::register(&metrics, DISCOVERY_NQN),
            qpair_counts.clone(),
        ));
        Ok(Self {
            inner: Arc::new(Inner {
                opts,
                subsystems: RwLock::new(BTreeMap::new()),
                discovery,
                listeners: Mutex::new(BTreeMap::new()),
                next_portid: Mutex::new(1),
                genctr: AtomicU64::new(1),
                qpair_counts,
                retired_io: AtomicU64::new(0),
                metrics,
                shutdown: watch::channel(false).0,
                drain_tx: Mutex::new(Some(drain_tx)),
                drain_rx: tokio::sync::Mutex::new(drain_rx),
                buffers,
                abandoned,
                releasing: Mutex::new(Vec::new()),
                poller,
            }),
        })
    }

    /// Commands abandoned so far because a queue pair's drain timed out.
    pub fn abandoned_requests(&self) -> u64 {
        self.inner.abandoned.get()
    }

    /// Bytes of the data buffer budget granted to commands now.
    pub fn buffer_bytes_in_use(&self) -> i64 {
        self.inner.buffers.in_use.get()
    }

    /// Bytes of freed data buffers the connections keep for reuse now.
    pub fn buffer_cache_bytes(&self) -> usize {
        self.inner.buffers.cached.get()
    }

    #[cfg(test)]
    pub(crate) fn inner(&self) -> Arc<Inner> {
        self.inner.clone()
    }

    /// The transport options.
    pub fn options(&self) -> &TransportOptions {
        &self.inner.opts
    }

    /// Creates a subsystem.
    pub fn add_subsystem(&self, cfg: SubsystemConfig) -> Result<Arc<Subsystem>, TargetError> {
        validate_nqn(&cfg.nqn)?;
        if cfg.nqn == DISCOVERY_NQN {
            return Err(TargetError::Exists(format!("subsystem {}", cfg.nqn)));
        }
        if cfg.serial.is_empty() || cfg.serial.len() > 20 || !cfg.serial.is_ascii() {
            return Err(TargetError::InvalidArgument(format!(
                "serial number {:?} must be 1 to 20 ASCII characters",
                cfg.serial
            )));
        }
        if cfg.model.is_empty() || cfg.model.len() > 40 || !cfg.model.is_ascii() {
            return Err(TargetError::InvalidArgument(format!(
                "model number {:?} must be 1 to 40 ASCII characters",
                cfg.model
            )));
        }
        if cfg.max_namespaces == 0 || cfg.max_namespaces > 1024 {
            return Err(TargetError::InvalidArgument(format!(
                "max_namespaces {} must be 1 to 1024",
                cfg.max_namespaces
            )));
        }
        let mut subs = self
            .inner
            .subsystems
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if subs.contains_key(&cfg.nqn) {
            return Err(TargetError::Exists(format!("subsystem {}", cfg.nqn)));
        }
        let stats = SubsystemStats::register(&self.inner.metrics, &cfg.nqn);
        let s = Arc::new(Subsystem::new(
            cfg,
            false,
            stats,
            self.inner.qpair_counts.clone(),
        ));
        subs.insert(s.nqn.clone(), s.clone());
        drop(subs);
        self.inner.discovery_changed();
        Ok(s)
    }

    /// Deletes a subsystem: its controllers are torn down (their queues
    /// close; wait for that with the returned [`Revocation`]), its
    /// listeners forgotten.
    pub fn remove_subsystem(&self, nqn: &str) -> Result<Revocation, TargetError> {
        let s = self
            .inner
            .subsystems
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(nqn)
            .ok_or_else(|| TargetError::NotFound(format!("subsystem {nqn}")))?;
        // Connect finds the subsystem no more, a Connect that found it
        // before registers nothing, what is connected goes.
        s.mark_removed();
        let mut revoked = s.revoke(|_| true, "subsystem deleted");
        revoked.wait_also(self.inner.draining(|c| c.subsystem.nqn == nqn));
        for l in s.listeners() {
            if let Ok(r) = s.remove_listener(l.listen) {
                revoked.merge(r);
            }
            self.release_listener_if_unused(l.listen);
        }
        let io = completed_io(&s.stats);
        self.inner.retired_io.fetch_add(io, Ordering::Relaxed);
        SubsystemStats::unregister(&self.inner.metrics, nqn);
        self.inner.discovery_changed();
        Ok(revoked)
    }

    /// Queue pair counts and I/O commands completed, for `nvmf_get_stats`.
    pub fn stats(&self) -> TargetStats {
        let live: u64 = self
            .subsystems()
            .iter()
            .map(|s| completed_io(&s.stats))
            .sum();
        TargetStats {
            qpairs: self.inner.qpair_counts.snapshot(),
            completed_io: live + self.inner.retired_io.load(Ordering::Relaxed),
        }
    }

    /// The subsystem named `nqn` (including discovery).
    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.inner.subsystem(nqn)
    }

    /// Every subsystem except discovery, by NQN.
    pub fn subsystems(&self) -> Vec<Arc<Subsystem>> {
        self.inner
            .subsystems
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Adds a host to a subsystem's allow list.
    pub fn add_host(&self, nqn: &str, hostnqn: &str) -> Result<(), TargetError> {
        self.existing(nqn)?.add_host(hostnqn)?;
        self.inner.discovery_changed();
        Ok(())
    }

    /// Removes a host from a subsystem's allow list and tears down its
    /// controllers (wait for their queues with the returned value).
    pub fn remove_host(&self, nqn: &str, hostnqn: &str) -> Result<Revocation, TargetError> {
        let mut revoked = self.existing(nqn)?.remove_host(hostnqn)?;
        revoked.wait_also(
            self.inner
                .draining(|c| c.subsystem.nqn == nqn && c.hostnqn == hostnqn),
        );
        self.inner.discovery_changed();
        Ok(revoked)
    }

    /// Lets any host into subsystem `nqn`, or only listed ones; turning it
    /// off tears down the controllers of hosts not listed.
    pub fn set_allow_any_host(&self, nqn: &str, allow: bool) -> Result<Revocation, TargetError> {
        let sub = self.existing(nqn)?;
        let mut revoked = sub.set_allow_any_host(allow);
        revoked.wait_also(
            self.inner
                .draining(|c| c.subsystem.nqn == nqn && !sub.host_allowed(&c.hostnqn)),
        );
        self.inner.discovery_changed();
        Ok(revoked)
    }

    fn existing(&self, nqn: &str) -> Result<Arc<Subsystem>, TargetError> {
        self.inner
            .subsystems
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(nqn)
            .cloned()
            .ok_or_else(|| TargetError::NotFound(format!("subsystem {nqn}")))
    }

    /// The subsystem `nqn` a listener may be added to: an NVM subsystem, or
    /// the discovery subsystem (its own listeners, port 8009 by convention,
    /// as in SPDK).
    fn listenable(&self, nqn: &str) -> Result<Arc<Subsystem>, TargetError> {
        if nqn == DISCOVERY_NQN {
            return Ok(self.inner.discovery.clone());
        }
        self.existing(nqn)
    }

    /// Makes subsystem `nqn` (an NVM subsystem or [`DISCOVERY_NQN`])
    /// reachable at `listen` (binding it if no other subsystem does yet;
    /// port 0 picks a free port). `advertised` overrides the address and
    /// port the discovery log shows. Returns the bound address. The
    /// discovery subsystem also answers on every NVM subsystem's listener.
    pub async fn add_listener(
        &self,
        nqn: &str,
        listen: SocketAddr,
        advertised_addr: Option<String>,
        advertised_port: Option<u16>,
    ) -> Result<SocketAddr, TargetError> {
        let sub = self.listenable(nqn)?;
        let bound = self.listen(listen).await?;
        if let Err(e) = sub.add_listener(ListenAddress {
            listen: bound,
            advertised_addr,
            advertised_port,
        }) {
            self.release_listener_if_unused(bound);
            return Err(e);
        }
        self.inner.discovery_changed();
        Ok(bound)
    }

    /// Removes subsystem `nqn`'s listener at `listen` and tears down that
    /// subsystem's controllers connected through it; the socket closes when
    /// no subsystem uses it any more.
    pub fn remove_listener(
        &self,
        nqn: &str,
        listen: SocketAddr,
    ) -> Result<Revocation, TargetError> {
        let mut revoked = self.listenable(nqn)?.remove_listener(listen)?;
        revoked.wait_also(
            self.inner
                .draining(|c| c.subsystem.nqn == nqn && c.uses_listener(listen)),
        );
        self.release_listener_if_unused(listen);
        self.inner.discovery_changed();
        Ok(revoked)
    }

    fn release_listener_if_unused(&self, listen: SocketAddr) {
        let used = self
            .subsystems()
            .iter()
            .chain(std::iter::once(&self.inner.discovery))
            .any(|s| s.listeners().iter().any(|l| l.listen == listen));
        if !used {
            if let Some(l) = self
                .inner
                .listeners
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&listen)
            {
                l.stop.send_replace(true);
            }
        }
    }

    /// Binds `addr` (if not bound yet) and starts its accept loop; returns
    /// the bound address.
    async fn listen(&self, addr: SocketAddr) -> Result<SocketAddr, TargetError> {
        if addr.port() != 0
            && self
                .inner
                .listeners
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&addr)
        {
            return Ok(addr);
        }
        let drain = self
            .inner
            .drain_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(TargetError::ShuttingDown)?;
        let sock = TcpListener::bind(addr)
            .await
            .map_err(|source| TargetError::Listen { addr, source })?;
        let bound = sock
            .local_addr()
            .map_err(|source| TargetError::Listen { addr, source })?;
        let (stop, stop_rx) = watch::channel(false);
        let portid = {
            let mut p = self
                .inner
                .next_portid
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let id = *p;
            *p = p.wrapping_add(1).max(1);
            id
        };
        self.inner
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(bound, Listener { portid, stop });
        tokio::spawn(accept_loop(sock, bound, self.inner.clone(), stop_rx, drain));
        tracing::info!(%bound, portid, "NVMe/TCP listener started");
        Ok(bound)
    }

    /// Serves one connection that arrived some other way than through a
    /// listener of this target (an in-memory pipe in tests and the fuzzer):
    /// the same state machine as a TCP connection. `listen` is the address
    /// it counts as arriving on (Connect reaches only subsystems listening
    /// there). Returns when the connection ends; a connection started after
    /// shutdown began returns at once.
    pub async fn serve_stream<S>(&self, stream: S, peer: SocketAddr, listen: SocketAddr)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite,
    {
        let Some(drain) = self
            .inner
            .drain_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return;
        };
        let (rd, wr) = tokio::io::split(stream);
        crate::tcp::connection::serve(rd, wr, peer, listen, self.inner.clone(), drain).await;
    }

    /// Graceful shutdown: stop accepting, let queues finish their in-flight
    /// commands (up to the drain timeout), then flush every namespace's bdev.
    pub async fn shutdown(&self) {
        self.inner.shutdown.send_replace(true);
        for (_, l) in std::mem::take(
            &mut *self
                .inner
                .listeners
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        ) {
            l.stop.send_replace(true);
        }
        drop(
            self.inner
                .drain_tx
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        let mut rx = self.inner.drain_rx.lock().await;
        let drained = tokio::time::timeout(
            self.inner.opts.drain_timeout + Duration::from_secs(1),
            rx.recv(),
        )
        .await;
        if drained.is_err() {
            tracing::warn!("NVMe/TCP connections did not drain in time");
        }
        for s in self.subsystems() {
            for ns in s.namespaces().values() {
                if let Err(e) = ns.bdev.flush().await {
                    tracing::warn!(subnqn = %s.nqn, nsid = ns.nsid, "flush at shutdown: {e}");
                }
            }
        }
    }
}

async fn accept_loop(
    sock: TcpListener,
    bound: SocketAddr,
    inner: Arc<Inner>,
    mut stop: watch::Receiver<bool>,
    drain: mpsc::Sender<()>,
) {
    let mut shutdown = inner.shutdown.subscribe();
    let max = inner.opts.max_connections_per_listener;
    let open = Arc::new(Semaphore::new(max as usize));
    loop {
        tokio::select! {
            r = sock.accept() => match r {
                Ok((stream, peer)) => {
                    // Over the cap the connection is closed before any
                    // memory is set aside for it.
                    let Ok(slot) = open.clone().try_acquire_owned() else {
                        tracing::warn!(%bound, %peer, max, "connection refused: listener at max_connections_per_listener");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (rd, wr) = stream.into_split();
                    let serve = crate::tcp::connection::serve(
                        rd,
                        wr,
                        peer,
                        bound,
                        inner.clone(),
                        drain.clone(),
                    );
                    tokio::spawn(async move {
                        serve.await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::warn!(%bound, "accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = until_true(&mut stop) => break,
            _ = until_true(&mut shutdown) => break,
        }
    }
    tracing::info!(%bound, "NVMe/TCP listener stopped");
}

/// Resolves once the watched flag is true (or its sender is gone).
pub(crate) async fn until_true(rx: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not Send: drop it here.
    let _ = rx.wait_for(|v| *v).await.is_ok();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_bounded() {
        let ok = TransportOptions {
            h2c_data_timeout: MAX_TIMEOUT,
            write_timeout: MAX_TIMEOUT,
            drain_timeout: MAX_TIMEOUT,
            ..TransportOptions::default()
        };
        ok.validate().unwrap();
        // u64::MAX ms (as `rackcache_h2c_data_timeout_ms` may say) would
        // overflow a deadline computed from it.
        for set in [
            |o: &mut TransportOptions, d| o.h2c_data_timeout = d,
            |o: &mut TransportOptions, d| o.write_timeout = d,
            |o: &mut TransportOptions, d| o.drain_timeout = d,
        ] {
            for d in [
                Duration::from_millis(u64::MAX),
                MAX_TIMEOUT + Duration::from_millis(1),
            ] {
                let mut o = TransportOptions::default();
                set(&mut o, d);
                let e = o.validate().unwrap_err().to_string();
                assert!(e.contains("must be from 1 ms to 3600000 ms"), "{e}");
            }
        }
    }
}
