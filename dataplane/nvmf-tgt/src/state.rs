//! The state every queue pair and the [`crate::Target`] handle share: the
//! subsystem registry, the listener table, the controllers still
//! draining, the shutdown and drain signals, the buffer budget. Its fields
//! are private: queue pairs and configuration calls go through its
//! methods, which say what each may do.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use metrics::{Counter, Registry};
use tokio::sync::{mpsc, watch};

use crate::ana_fence::AnaFence;
use crate::auth::AuthPolicy;
use crate::ctrlr::controller::{Controller, QpairCounts, QpairCountsSnapshot};
use crate::ctrlr::log_page::DiscoveryEntry;
use crate::options::TransportOptions;
use crate::poller::Poller;
use crate::stats::SubsystemStats;
use crate::subsystem::{Subsystem, SubsystemConfig, DISCOVERY_NQN};
use crate::tcp::bufpool::SharedBuffers;
use crate::TargetError;
use gate::PeerLog;

/// A bound listener.
struct Listener {
    portid: u16,
    stop: watch::Sender<bool>,
    /// TLS only (a secure-channel listener).
    secure: bool,
}

/// Shared by the target handle and every connection task.
pub(crate) struct TargetState {
    opts: TransportOptions,
    subsystems: RwLock<BTreeMap<String, Arc<Subsystem>>>,
    discovery: Arc<Subsystem>,
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
    shutdown: watch::Sender<bool>,
    /// Every connection and accept loop holds a clone; shutdown waits until
    /// all are dropped.
    drain_tx: Mutex<Option<mpsc::Sender<()>>>,
    drain_rx: tokio::sync::Mutex<mpsc::Receiver<()>>,
    /// The data buffer budget.
    buffers: Arc<SharedBuffers>,
    /// Commands abandoned by queue pairs whose drain timed out.
    abandoned: Arc<Counter>,
    /// Controllers torn down whose queue pairs are still draining.
    releasing: Mutex<Vec<Releasing>>,
    /// Told of every connection's activity (busy polling's window).
    poller: Poller,
    /// The budget of log lines each peer address can cause.
    peer_log: PeerLog,
    /// The hashes and groups DH-HMAC-CHAP accepts.
    auth_policy: AuthPolicy,
    /// DH key pairs for DH-HMAC-CHAP challenges, per peer address: each
    /// costs a modular exponentiation, and a party that has not
    /// authenticated can ask for them.
    dh_budget: PeerLog,
    /// The ANA fence every subsystem reports under.
    ana_fence: Arc<AnaFence>,
}

/// DH-HMAC-CHAP challenges with a DH group per peer address: a burst as
/// large as a host reconnecting every queue at once, then this many a
/// minute (an 8192-bit key pair takes a few milliseconds).
const DH_CHALLENGES_PER_MINUTE: u32 = 256;

/// I/O commands a subsystem completed successfully.
pub(crate) fn completed_io(st: &SubsystemStats) -> u64 {
    st.read_ops.get() + st.write_ops.get() + st.flush_ops.get() + st.unmap_ops.get()
}

fn metrics_error(e: impl std::fmt::Display) -> TargetError {
    TargetError::InvalidArgument(format!("metrics: {e}"))
}

impl TargetState {
    /// The state of a target with no subsystem but discovery and no
    /// listener; registers the target-wide metrics.
    pub(crate) fn new(
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
        let ana_fence = Arc::new(AnaFence::default());
        let in_use = metrics
            .gauge(
                "rackcache_nvmf_buffer_bytes_in_use",
                "Bytes of the NVMe/TCP data buffer budget granted to commands.",
                &[],
            )
            .map_err(metrics_error)?;
        metrics
            .gauge(
                "rackcache_nvmf_buffer_bytes_budget",
                "Bytes of the NVMe/TCP data buffer budget (num_shared_buffers * io_unit_size).",
                &[],
            )
            .map_err(metrics_error)?
            .set(i64::from(opts.num_shared_buffers) * i64::from(opts.io_unit_size));
        let abandoned = metrics
            .counter(
                "rackcache_nvmf_abandoned_requests_total",
                "Commands still running on a bdev when their queue pair's drain timed out.",
                &[],
            )
            .map_err(metrics_error)?;
        let cached = metrics
            .gauge(
                "rackcache_nvmf_buffer_bytes_cached",
                "Bytes of freed NVMe/TCP data buffers kept for reuse (at most the budget).",
                &[],
            )
            .map_err(metrics_error)?;
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
            ana_fence.clone(),
        ));
        Ok(Self {
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
            peer_log: PeerLog::default(),
            auth_policy: AuthPolicy::default(),
            dh_budget: PeerLog::with_rate(DH_CHALLENGES_PER_MINUTE, DH_CHALLENGES_PER_MINUTE),
            ana_fence,
        })
    }

    /// The ANA fence (see [`crate::ana_fence`]).
    pub(crate) fn ana_fence(&self) -> &AnaFence {
        &self.ana_fence
    }

    /// The transport options.
    pub(crate) fn opts(&self) -> &TransportOptions {
        &self.opts
    }

    /// The discovery subsystem.
    pub(crate) fn discovery(&self) -> &Arc<Subsystem> {
        &self.discovery
    }

    /// The data buffer budget.
    pub(crate) fn buffers(&self) -> &Arc<SharedBuffers> {
        &self.buffers
    }

    /// The budget of log lines each peer address can cause.
    pub(crate) fn peer_log(&self) -> &PeerLog {
        &self.peer_log
    }

    /// What connections report their activity to.
    pub(crate) fn auth_policy(&self) -> &AuthPolicy {
        &self.auth_policy
    }

    /// Whether `peer` may have another DH-HMAC-CHAP challenge with a DH
    /// key pair now.
    pub(crate) fn allow_dh_challenge(&self, peer: std::net::IpAddr) -> bool {
        self.dh_budget.allow(peer)
    }

    pub(crate) fn poller(&self) -> &Poller {
        &self.poller
    }

    /// Counts commands a queue pair abandoned when its drain timed out.
    pub(crate) fn count_abandoned(&self, n: u64) {
        self.abandoned.add(n);
    }

    /// Commands abandoned so far.
    pub(crate) fn abandoned(&self) -> u64 {
        self.abandoned.get()
    }

    /// A receiver that turns true when shutdown starts.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Shutdown starts: accept loops stop, connections drain; every
    /// listener is stopped and the drain token released.
    pub(crate) fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
        let listeners =
            std::mem::take(&mut *self.listeners.lock().unwrap_or_else(|p| p.into_inner()));
        for (_, l) in listeners {
            l.stop.send_replace(true);
        }
        drop(
            self.drain_tx
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
    }

    /// Waits (at most `timeout`) until every connection and accept loop
    /// has dropped its drain token; false when some are still there.
    pub(crate) async fn drained(&self, timeout: Duration) -> bool {
        let mut rx = self.drain_rx.lock().await;
        tokio::time::timeout(timeout, rx.recv()).await.is_ok()
    }

    /// A drain token for a new connection or accept loop, unless shutdown
    /// has begun.
    pub(crate) fn drain_token(&self) -> Option<mpsc::Sender<()>> {
        self.drain_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every NVM subsystem (not discovery), by NQN.
    pub(crate) fn subsystems(&self) -> Vec<Arc<Subsystem>> {
        self.subsystems
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The NVM subsystem `nqn` (not discovery).
    pub(crate) fn nvm_subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.subsystems
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(nqn)
            .cloned()
    }

    /// Creates NVM subsystem `cfg.nqn` (checked by the caller), its
    /// metrics registered.
    pub(crate) fn insert_subsystem(
        &self,
        cfg: SubsystemConfig,
    ) -> Result<Arc<Subsystem>, TargetError> {
        let mut subs = self.subsystems.write().unwrap_or_else(|p| p.into_inner());
        if subs.contains_key(&cfg.nqn) {
            return Err(TargetError::Exists(format!("subsystem {}", cfg.nqn)));
        }
        let stats = SubsystemStats::register(&self.metrics, &cfg.nqn);
        let s = Arc::new(Subsystem::new(
            cfg,
            false,
            stats,
            self.qpair_counts.clone(),
            self.ana_fence.clone(),
        ));
        subs.insert(s.nqn.clone(), s.clone());
        Ok(s)
    }

    /// Forgets NVM subsystem `nqn`.
    pub(crate) fn take_subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.subsystems
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(nqn)
    }

    /// Keeps a deleted subsystem's completed I/O count and unregisters its
    /// metrics.
    pub(crate) fn retire(&self, s: &Subsystem) {
        self.retired_io
            .fetch_add(completed_io(&s.stats), Ordering::Relaxed);
        SubsystemStats::unregister(&self.metrics, &s.nqn);
    }

    /// Queue pair counts and I/O completed by deleted subsystems.
    pub(crate) fn counts(&self) -> (QpairCountsSnapshot, u64) {
        (
            self.qpair_counts.snapshot(),
            self.retired_io.load(Ordering::Relaxed),
        )
    }

    /// Whether a listener is bound at `addr`: `Some(true)` for a
    /// secure-channel (TLS) listener.
    pub(crate) fn listener_secure(&self, addr: SocketAddr) -> Option<bool> {
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&addr)
            .map(|l| l.secure)
    }

    /// Records the listener bound at `addr` (stopped through `stop`);
    /// returns its port id.
    pub(crate) fn add_listener(
        &self,
        addr: SocketAddr,
        stop: watch::Sender<bool>,
        secure: bool,
    ) -> u16 {
        let portid = {
            let mut p = self.next_portid.lock().unwrap_or_else(|p| p.into_inner());
            let id = *p;
            *p = p.wrapping_add(1).max(1);
            id
        };
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                addr,
                Listener {
                    portid,
                    stop,
                    secure,
                },
            );
        portid
    }

    /// Stops and forgets the listener at `addr`.
    pub(crate) fn stop_listener(&self, addr: SocketAddr) {
        if let Some(l) = self
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&addr)
        {
            l.stop.send_replace(true);
        }
    }

    /// The subsystem named `nqn` (the discovery subsystem included).
    pub(crate) fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        if nqn == DISCOVERY_NQN {
            return Some(self.discovery.clone());
        }
        self.nvm_subsystem(nqn)
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
                r.ctrl.is_torn_down() && r.ctrl.hostnqn == hostnqn && r.ctrl.subnqn() == subnqn
            })
            .map(|r| r.done.subscribe())
    }

    /// Torn-down controllers `which` selects whose queue pairs are still
    /// draining: a revocation waits for them too, since their writes have
    /// not all landed yet.
    pub(crate) fn draining(&self, which: impl Fn(&Controller) -> bool) -> Vec<Arc<Controller>> {
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

/// A controller with open queue pairs, tracked until the last closes.
struct Releasing {
    ctrl: Arc<Controller>,
    queues: usize,
    done: watch::Sender<bool>,
}

/// Resolves once the watched flag is true (or its sender is gone).
pub(crate) async fn until_true(rx: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not Send: drop it here.
    let _ = rx.wait_for(|v| *v).await.is_ok();
}
