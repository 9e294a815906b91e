//! A controller: what one host's association with one subsystem shares
//! across its queue pairs (the admin queue creates it, I/O queues attach to
//! it by controller id).
//!
//! Queue pairs run as separate tasks; what they share is here behind small
//! locks that only admin commands and Connect take. The I/O path reads
//! nothing from the controller except the teardown signal, which it awaits
//! in its select loop, and the write-cache flag (one relaxed atomic load
//! per write).
//!
//! Ownership: a subsystem owns a `ControllerTable` holding its
//! controllers weakly; queue pairs own their controller; a controller
//! points back at the table (to leave it when torn down), never at the
//! subsystem, so this file does not depend on `subsystem`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

// tokio's clock, so that keep-alive follows paused time in tests.
use tokio::time::Instant;

use tokio::sync::{watch, Notify};

use super::events::AsyncEvents;
pub use super::events::{
    AEN_ANA_CHANGED, AEN_CFG_ANA_CHANGE, AEN_CFG_DISCOVERY_CHANGE, AEN_CFG_NS_ATTRIBUTE,
    AEN_DISCOVERY_CHANGED, AEN_NS_CHANGED,
};

/// Property offsets (NVMe base specification, "Controller Registers").
pub mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version.
    pub const VS: u32 = 0x08;
    /// Controller Configuration.
    pub const CC: u32 = 0x14;
    /// Controller Status.
    pub const CSTS: u32 = 0x1c;
    /// NVM Subsystem Reset.
    pub const NSSR: u32 = 0x20;
}

/// CC.EN.
pub const CC_EN: u32 = 1;
/// CC.SHN field mask.
pub const CC_SHN_MASK: u32 = 0x3 << 14;
/// CSTS.RDY.
pub const CSTS_RDY: u32 = 1;
/// CSTS.SHST: shutdown processing occurring.
pub const CSTS_SHST_OCCURRING: u32 = 1 << 2;
/// CSTS.SHST: shutdown processing complete.
pub const CSTS_SHST_COMPLETE: u32 = 2 << 2;
/// CSTS.SHST mask.
pub const CSTS_SHST_MASK: u32 = 3 << 2;

/// The register pair Fabrics hosts drive with Property Set/Get.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Registers {
    /// Controller Configuration.
    pub cc: u32,
    /// Controller Status.
    pub csts: u32,
}

/// What a CC write asks the controller to do, besides storing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CcTransition {
    /// Nothing beyond storing the value.
    None,
    /// EN 0 -> 1: the controller is ready.
    Enable,
    /// EN 1 -> 0: reset; outstanding AERs end.
    Reset,
    /// SHN set: flush, then report shutdown complete.
    Shutdown,
}

impl Registers {
    /// Applies a CC write and says what it means.
    pub fn write_cc(&mut self, new: u32) -> CcTransition {
        let old = self.cc;
        self.cc = new;
        if new & CC_SHN_MASK != 0 && old & CC_SHN_MASK == 0 {
            self.csts = (self.csts & !CSTS_SHST_MASK) | CSTS_SHST_OCCURRING;
            return CcTransition::Shutdown;
        }
        match (old & CC_EN != 0, new & CC_EN != 0) {
            (false, true) => {
                self.csts = CSTS_RDY;
                CcTransition::Enable
            }
            (true, false) => {
                self.csts &= !(CSTS_RDY | CSTS_SHST_MASK);
                CcTransition::Reset
            }
            _ => CcTransition::None,
        }
    }

    /// Marks shutdown processing complete.
    pub fn shutdown_complete(&mut self) {
        self.csts = (self.csts & !CSTS_SHST_MASK) | CSTS_SHST_COMPLETE;
    }
}

/// Where one queue pair of a controller came from: the listener it arrived
/// on (what `nvmf_subsystem_remove_listener` matches) and the host's
/// address (`nvmf_subsystem_get_qpairs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpairPath {
    /// The listener's address (as bound, so a wildcard stays a wildcard).
    pub listen: SocketAddr,
    /// The host's address.
    pub peer: SocketAddr,
}

/// One host's controller.
pub struct Controller {
    /// Controller id.
    pub cntlid: u16,
    /// The table of the subsystem's controllers (and its NQN).
    table: Arc<ControllerTable>,
    /// Host NQN given at admin Connect; I/O queues must present the same.
    pub hostnqn: String,
    /// Host identifier.
    pub host_id: [u8; 16],
    /// Keep-alive timeout, ms (0: none).
    kato_ms: AtomicU32,
    /// When the last Keep Alive (or admin command) arrived, ms since `epoch`.
    last_keep_alive_ms: AtomicU64,
    epoch: Instant,
    /// CC and CSTS.
    regs: Mutex<Registers>,
    /// I/O queues granted by Set Features Number of Queues.
    io_queues_granted: AtomicU32,
    /// The admin queue's path.
    pub admin_path: QpairPath,
    /// I/O queues currently connected, by queue id.
    io_queues: Mutex<BTreeMap<u16, QpairPath>>,
    events: Mutex<AsyncEvents>,
    /// Wakes the admin queue when an event is pending.
    event_notify: Notify,
    /// Becomes true when the controller is torn down (keep-alive expiry,
    /// admin queue gone, subsystem deleted, host or listener revoked):
    /// every queue pair closes.
    teardown_tx: watch::Sender<bool>,
    /// Dropped with the controller, which happens once every queue pair
    /// holding it has closed: receivers from [`Controller::gone_signal`]
    /// see their sender go, which is how revocation waits for the queues.
    gone_tx: watch::Sender<()>,
    /// Volatile write cache enable (feature 0x06, bit 0 WCE). Off: every
    /// write is made durable before it completes.
    write_cache: AtomicU32,
    /// The DH-HMAC-CHAP state of each queue that authenticates, by queue
    /// id (what `nvmf_subsystem_get_qpairs` shows as `auth`).
    auth: Mutex<BTreeMap<u16, QueueAuth>>,
}

/// Where a queue's DH-HMAC-CHAP authentication stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthState {
    /// Not authenticated yet: only authentication and Disconnect.
    Negotiate,
    /// Authenticated (or, for a host without keys, nothing to do).
    Completed,
    /// A transaction failed: the queue closes once the answer is out.
    Failed,
}

impl AuthState {
    /// SPDK's name (`nvmf_subsystem_get_qpairs`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Negotiate => "negotiate",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }
}

/// A queue's authentication as `nvmf_subsystem_get_qpairs` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueAuth {
    pub state: AuthState,
    /// The hash and group of the last successful transaction.
    pub digest: Option<&'static str>,
    pub dhgroup: Option<&'static str>,
}

/// What the admin queue's Connect gives a new controller.
pub(crate) struct NewController {
    /// Host NQN.
    pub(crate) hostnqn: String,
    /// Host identifier.
    pub(crate) host_id: [u8; 16],
    /// Keep-alive timeout, ms.
    pub(crate) kato_ms: u32,
    /// I/O queues granted until Set Features Number of Queues.
    pub(crate) io_queues: u32,
    /// Where the admin queue came from.
    pub(crate) admin_path: QpairPath,
}

impl Controller {
    fn new(cntlid: u16, table: Arc<ControllerTable>, p: NewController) -> Self {
        Self {
            cntlid,
            table,
            hostnqn: p.hostnqn,
            host_id: p.host_id,
            admin_path: p.admin_path,
            kato_ms: AtomicU32::new(p.kato_ms),
            last_keep_alive_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            regs: Mutex::new(Registers::default()),
            io_queues_granted: AtomicU32::new(p.io_queues),
            io_queues: Mutex::new(BTreeMap::new()),
            events: Mutex::new(AsyncEvents::default()),
            event_notify: Notify::new(),
            teardown_tx: watch::channel(false).0,
            gone_tx: watch::channel(()).0,
            write_cache: AtomicU32::new(1),
            auth: Mutex::new(BTreeMap::new()),
        }
    }

    /// The NQN of the subsystem this controller belongs to.
    pub fn subnqn(&self) -> &str {
        &self.table.subnqn
    }

    /// CC and CSTS now.
    pub fn registers(&self) -> Registers {
        *self.regs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether CSTS.RDY is set (the host enabled the controller).
    pub fn is_ready(&self) -> bool {
        self.registers().csts & CSTS_RDY != 0
    }

    /// Applies a Property Set of CC.
    pub fn write_cc(&self, cc: u32) -> CcTransition {
        self.regs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_cc(cc)
    }

    /// Reports shutdown processing complete (the namespaces are flushed).
    pub fn shutdown_complete(&self) {
        self.regs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .shutdown_complete();
    }

    /// I/O queues the host may connect (Set Features Number of Queues).
    pub fn io_queues_granted(&self) -> u32 {
        self.io_queues_granted.load(Ordering::Relaxed)
    }

    /// Records the I/O queues granted by Set Features Number of Queues.
    pub fn grant_io_queues(&self, n: u32) {
        self.io_queues_granted.store(n, Ordering::Relaxed);
    }

    /// Volatile Write Cache (feature 0x06) as the host set it.
    pub fn write_cache(&self) -> u32 {
        self.write_cache.load(Ordering::Relaxed)
    }

    /// Sets Volatile Write Cache (feature 0x06, bit 0 WCE).
    pub fn set_write_cache(&self, v: u32) {
        self.write_cache.store(v, Ordering::Relaxed);
    }

    /// Resolves when an asynchronous event may be pending.
    pub async fn event_pending(&self) {
        self.event_notify.notified().await
    }

    /// Whether the host lets writes complete before they are durable
    /// (Volatile Write Cache enabled, the default).
    pub fn write_cache_enabled(&self) -> bool {
        self.write_cache.load(Ordering::Relaxed) & 1 != 0
    }

    /// Keep-alive timeout in ms (0: disabled).
    pub fn kato_ms(&self) -> u32 {
        self.kato_ms.load(Ordering::Relaxed)
    }

    /// Sets the keep-alive timeout (Set Features 0x0F) and restarts it.
    pub fn set_kato_ms(&self, ms: u32) {
        self.kato_ms.store(ms, Ordering::Relaxed);
        self.keep_alive();
    }

    /// Records a Keep Alive.
    pub fn keep_alive(&self) {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.last_keep_alive_ms.store(now, Ordering::Relaxed);
    }

    /// When the keep-alive timer expires, if it is enabled.
    pub fn keep_alive_deadline(&self) -> Option<Instant> {
        let kato = self.kato_ms();
        if kato == 0 {
            return None;
        }
        let last = self.last_keep_alive_ms.load(Ordering::Relaxed);
        Some(self.epoch + std::time::Duration::from_millis(last + u64::from(kato)))
    }

    /// A receiver that sees the teardown.
    pub fn teardown_signal(&self) -> watch::Receiver<bool> {
        self.teardown_tx.subscribe()
    }

    /// A receiver whose `changed()` fails once the controller is gone
    /// (every queue pair holding it closed); see [`Revocation`].
    pub fn gone_signal(&self) -> watch::Receiver<()> {
        self.gone_tx.subscribe()
    }

    /// Ends the controller: every queue pair closes, and the subsystem
    /// forgets it.
    pub fn tear_down(&self, why: &str) {
        if !self.teardown_tx.send_replace(true) {
            tracing::info!(
                subnqn = %self.table.subnqn,
                cntlid = self.cntlid,
                hostnqn = %self.hostnqn,
                "controller torn down: {why}"
            );
            self.table.qpair_counts.admin_closed();
        }
        self.table.unregister(self.cntlid);
    }

    /// Whether the controller has been torn down.
    pub fn is_torn_down(&self) -> bool {
        *self.teardown_tx.borrow()
    }

    /// Claims I/O queue `qid`, which arrived through `path`; false when it
    /// is taken, or when `reachable` (the subsystem's check) says the
    /// subsystem is no longer reachable that way (checked under the lock
    /// revocation scans, see `Subsystem::revoke`).
    pub fn attach_io_queue(
        &self,
        qid: u16,
        path: QpairPath,
        reachable: impl FnOnce(SocketAddr) -> bool,
    ) -> bool {
        let mut q = self.io_queues.lock().unwrap_or_else(|p| p.into_inner());
        if q.contains_key(&qid) || !reachable(path.listen) {
            return false;
        }
        q.insert(qid, path);
        self.table.qpair_counts.io_opened();
        true
    }

    /// Releases I/O queue `qid`.
    pub fn detach_io_queue(&self, qid: u16) {
        let removed = self
            .io_queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&qid);
        if removed.is_some() {
            self.table.qpair_counts.io_closed();
        }
        self.auth
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&qid);
    }

    /// Records queue `qid`'s authentication state.
    pub(crate) fn note_auth(&self, qid: u16, a: QueueAuth) {
        self.auth
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(qid, a);
    }

    /// Queue `qid`'s authentication state, if it authenticates.
    pub fn auth_of(&self, qid: u16) -> Option<QueueAuth> {
        self.auth
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&qid)
            .copied()
    }

    /// The connected I/O queues and their paths, by queue id.
    pub fn io_queues(&self) -> Vec<(u16, QpairPath)> {
        self.io_queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(q, p)| (*q, *p))
            .collect()
    }

    /// Whether any of the controller's queue pairs arrived on `listen`.
    pub fn uses_listener(&self, listen: SocketAddr) -> bool {
        self.admin_path.listen == listen
            || self
                .io_queues
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .any(|p| p.listen == listen)
    }

    /// Records a namespace change and, when enabled and not masked, queues
    /// a notice for the next outstanding AER.
    pub fn namespace_changed(&self, nsid: u32) {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        ev.changed_ns.insert(nsid);
        if ev.config & AEN_CFG_NS_ATTRIBUTE != 0 && !ev.ns_notice_masked {
            ev.ns_notice_masked = true;
            ev.pending.push_back(AEN_NS_CHANGED);
            drop(ev);
            self.event_notify.notify_one();
        }
    }

    /// Queues an ANA change notice when the host enabled them and has read
    /// the ANA log page since the last one.
    pub fn ana_changed(&self) {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if ev.config & AEN_CFG_ANA_CHANGE != 0 && !ev.ana_notice_masked {
            ev.ana_notice_masked = true;
            ev.pending.push_back(AEN_ANA_CHANGED);
            drop(ev);
            self.event_notify.notify_one();
        }
    }

    /// The host read the ANA log page: unless `retain`, ANA notices are
    /// unmasked.
    pub fn ana_log_read(&self, retain: bool) {
        if !retain {
            self.events
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .ana_notice_masked = false;
        }
    }

    /// Queues a discovery log change notice when the host enabled them
    /// (discovery controllers only).
    pub fn discovery_changed(&self) {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if ev.config & AEN_CFG_DISCOVERY_CHANGE != 0 && !ev.pending.contains(&AEN_DISCOVERY_CHANGED)
        {
            ev.pending.push_back(AEN_DISCOVERY_CHANGED);
            drop(ev);
            self.event_notify.notify_one();
        }
    }

    /// The next event to report, if any.
    pub fn take_event(&self) -> Option<u32> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pending
            .pop_front()
    }

    /// Reads (and, unless `retain`, clears) the changed namespace list;
    /// reading it unmasks namespace notices.
    pub fn changed_namespaces(&self, retain: bool) -> Vec<u32> {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let list = ev.changed_ns.iter().copied().collect();
        if !retain {
            ev.changed_ns.clear();
            ev.ns_notice_masked = false;
        }
        list
    }

    /// Asynchronous Event Configuration.
    pub fn aen_config(&self) -> u32 {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).config
    }

    /// Sets the Asynchronous Event Configuration.
    pub fn set_aen_config(&self, v: u32) {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).config = v;
    }
}

/// Why [`ControllerTable::register`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RegisterError {
    /// The host is not allowed (any more).
    NotAllowed,
    /// The subsystem was deleted, or is not reachable through the listener
    /// the Connect arrived on (any more).
    Unreachable,
    /// Every controller id is taken.
    Busy,
}

/// The largest id a dynamic controller may get (0xFFF0.. are reserved).
pub const MAX_CNTLID: u16 = 0xffef;

/// One subsystem's controllers by id, held weakly: a controller lives as
/// long as a queue pair holds it, and leaves the table when torn down.
pub(crate) struct ControllerTable {
    subnqn: String,
    controllers: Mutex<BTreeMap<u16, Weak<Controller>>>,
    /// The ids this subsystem hands out (several servers exporting one
    /// subsystem must never give a host two controllers with one id).
    range: RangeInclusive<u16>,
    next_cntlid: Mutex<u16>,
    /// The target's queue pair counts (shared by all its subsystems).
    qpair_counts: Arc<QpairCounts>,
}

impl ControllerTable {
    /// An empty table for subsystem `subnqn`, handing out ids in `range`
    /// (within 1..=MAX_CNTLID).
    pub(crate) fn new(
        subnqn: &str,
        range: RangeInclusive<u16>,
        qpair_counts: Arc<QpairCounts>,
    ) -> Self {
        Self {
            subnqn: subnqn.to_owned(),
            controllers: Mutex::new(BTreeMap::new()),
            next_cntlid: Mutex::new(*range.start()),
            range,
            qpair_counts,
        }
    }

    /// The target's queue pair counts.
    #[cfg(test)]
    pub(crate) fn qpair_counts(&self) -> &QpairCounts {
        &self.qpair_counts
    }

    /// Registers a new controller under a fresh dynamic id, if `admit`
    /// (the subsystem's access check, run under the table's lock so that a
    /// revocation either sees the new controller or refuses it) allows.
    pub(crate) fn register(
        self: &Arc<Self>,
        admit: impl FnOnce() -> Result<(), RegisterError>,
        new: NewController,
    ) -> Result<Arc<Controller>, RegisterError> {
        let mut ctrls = self.controllers.lock().unwrap_or_else(|p| p.into_inner());
        admit()?;
        ctrls.retain(|_, w| w.strong_count() > 0);
        let mut next = self.next_cntlid.lock().unwrap_or_else(|p| p.into_inner());
        let (first, last) = (*self.range.start(), *self.range.end());
        for _ in first..=last {
            let id = *next;
            *next = if id >= last { first } else { id + 1 };
            if let std::collections::btree_map::Entry::Vacant(slot) = ctrls.entry(id) {
                let c = Arc::new(Controller::new(id, self.clone(), new));
                slot.insert(Arc::downgrade(&c));
                self.qpair_counts.admin_opened();
                return Ok(c);
            }
        }
        Err(RegisterError::Busy)
    }

    /// The ids it hands out.
    pub(crate) fn range(&self) -> RangeInclusive<u16> {
        self.range.clone()
    }

    /// Forgets controller `cntlid`.
    fn unregister(&self, cntlid: u16) {
        self.controllers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&cntlid);
    }

    /// The controller `cntlid`, if it is alive.
    pub(crate) fn get(&self, cntlid: u16) -> Option<Arc<Controller>> {
        self.controllers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&cntlid)
            .and_then(Weak::upgrade)
            .filter(|c| !c.is_torn_down())
    }

    /// Every live controller.
    pub(crate) fn live(&self) -> Vec<Arc<Controller>> {
        self.controllers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

/// Queue pairs of the whole target, for `nvmf_get_stats` (SPDK counts them
/// per poll group; this target has one). Shared by every subsystem.
#[derive(Debug, Default)]
pub struct QpairCounts {
    admin_total: AtomicU64,
    io_total: AtomicU64,
    admin_current: AtomicU64,
    io_current: AtomicU64,
}

/// A snapshot of [`QpairCounts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpairCountsSnapshot {
    /// Admin queue pairs ever connected (one per controller).
    pub admin_total: u64,
    /// I/O queue pairs ever connected.
    pub io_total: u64,
    /// Admin queue pairs of controllers not torn down.
    pub admin_current: u64,
    /// I/O queue pairs connected now.
    pub io_current: u64,
}

impl QpairCounts {
    fn admin_opened(&self) {
        self.admin_total.fetch_add(1, Ordering::Relaxed);
        self.admin_current.fetch_add(1, Ordering::Relaxed);
    }

    fn admin_closed(&self) {
        self.admin_current.fetch_sub(1, Ordering::Relaxed);
    }

    fn io_opened(&self) {
        self.io_total.fetch_add(1, Ordering::Relaxed);
        self.io_current.fetch_add(1, Ordering::Relaxed);
    }

    fn io_closed(&self) {
        self.io_current.fetch_sub(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> QpairCountsSnapshot {
        QpairCountsSnapshot {
            admin_total: self.admin_total.load(Ordering::Relaxed),
            io_total: self.io_total.load(Ordering::Relaxed),
            admin_current: self.admin_current.load(Ordering::Relaxed),
            io_current: self.io_current.load(Ordering::Relaxed),
        }
    }
}

/// Controllers a configuration change (host removed, listener removed,
/// subsystem deleted) has torn down. Their queue pairs see the teardown
/// signal at once; [`Revocation::wait`] resolves when every one of them has
/// closed, so the RPC that revoked access answers only once the host has
/// lost it, as SPDK's does. It also waits for controllers of the same
/// host (or listener) that had already been torn down (keep-alive expiry,
/// disconnect) and are still draining writes: until those land, the host
/// has not lost the volume either.
#[derive(Debug, Default)]
pub struct Revocation {
    gone: Vec<watch::Receiver<()>>,
    /// Controllers torn down before, still draining; not counted by `len`.
    draining: Vec<watch::Receiver<()>>,
}

impl Revocation {
    /// Tears down `ctrls` for `why`.
    pub fn tear_down(ctrls: impl IntoIterator<Item = Arc<Controller>>, why: &str) -> Self {
        let gone = ctrls
            .into_iter()
            .map(|c| {
                c.tear_down(why);
                c.gone_signal()
            })
            .collect();
        Self {
            gone,
            draining: Vec::new(),
        }
    }

    /// Adds `other`'s controllers.
    pub fn merge(&mut self, other: Revocation) {
        self.gone.extend(other.gone);
        self.draining.extend(other.draining);
    }

    /// Also waits for `ctrls`, torn down earlier and still draining.
    pub(crate) fn wait_also(&mut self, ctrls: impl IntoIterator<Item = Arc<Controller>>) {
        self.draining
            .extend(ctrls.into_iter().map(|c| c.gone_signal()));
    }

    /// How many controllers were torn down (by this change; not those
    /// already draining it also waits for).
    pub fn len(&self) -> usize {
        self.gone.len()
    }

    /// Whether there is nothing to wait for: none torn down, none
    /// draining.
    pub fn is_empty(&self) -> bool {
        self.gone.is_empty() && self.draining.is_empty()
    }

    /// Waits until every torn-down controller is gone (all its queue pairs
    /// closed), at most `timeout`; false when some are still there.
    pub async fn wait(self, timeout: std::time::Duration) -> bool {
        let all_gone = async {
            for mut rx in self.gone.into_iter().chain(self.draining) {
                // Nothing is ever sent: `changed` fails once the sender,
                // owned by the controller, is dropped with it.
                while rx.changed().await.is_ok() {}
            }
        };
        tokio::time::timeout(timeout, all_gone).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn revocation_waits_until_the_controller_is_gone() {
        let table = Arc::new(ControllerTable::new(
            "nqn.2016-06.io.x:r",
            1..=MAX_CNTLID,
            Arc::new(QpairCounts::default()),
        ));
        let admin_path = QpairPath {
            listen: "127.0.0.1:4420".parse().unwrap(),
            peer: "127.0.0.1:5000".parse().unwrap(),
        };
        let new = NewController {
            hostnqn: "h".into(),
            host_id: [0; 16],
            kato_ms: 0,
            io_queues: 1,
            admin_path,
        };
        let c = table.register(|| Ok(()), new).unwrap();
        assert_eq!(table.live().len(), 1);
        // A queue pair still holds the controller: not gone, whatever the
        // bound (zero: one poll, no clock involved).
        let queue_pair = c.clone();
        let r = Revocation::tear_down([c], "test");
        assert_eq!(r.len(), 1);
        assert!(queue_pair.is_torn_down());
        let r2 = Revocation::tear_down([queue_pair.clone()], "again");
        assert!(!r2.wait(std::time::Duration::ZERO).await);
        // The queue pair closes: the wait resolves.
        drop(queue_pair);
        assert!(r.wait(std::time::Duration::from_secs(60)).await);
    }

    #[test]
    fn cc_transitions() {
        let mut r = Registers::default();
        assert_eq!(
            r.write_cc(CC_EN | (6 << 16) | (4 << 20)),
            CcTransition::Enable
        );
        assert_eq!(r.csts & CSTS_RDY, CSTS_RDY);
        // Writing the same value again changes nothing.
        assert_eq!(r.write_cc(r.cc), CcTransition::None);
        // Normal shutdown notification.
        assert_eq!(r.write_cc(r.cc | (1 << 14)), CcTransition::Shutdown);
        assert_eq!(r.csts & CSTS_SHST_MASK, CSTS_SHST_OCCURRING);
        r.shutdown_complete();
        assert_eq!(r.csts & CSTS_SHST_MASK, CSTS_SHST_COMPLETE);
        // Disable resets RDY and SHST.
        assert_eq!(r.write_cc(0), CcTransition::Reset);
        assert_eq!(r.csts, 0);
    }
}

#[cfg(test)]
mod cntlid_range_tests {
    use super::*;

    fn new_controller() -> NewController {
        NewController {
            hostnqn: "h".into(),
            host_id: [0; 16],
            kato_ms: 0,
            io_queues: 1,
            admin_path: QpairPath {
                listen: "127.0.0.1:4420".parse().unwrap(),
                peer: "127.0.0.1:5000".parse().unwrap(),
            },
        }
    }

    /// Ids stay in the subsystem's range, wrap within it, and a full range
    /// refuses a new controller.
    #[test]
    fn controller_ids_stay_in_the_subsystems_range() {
        let table = Arc::new(ControllerTable::new(
            "nqn.2016-06.io.x:range",
            4096..=4098,
            Arc::new(QpairCounts::default()),
        ));
        let held: Vec<_> = (0..3)
            .map(|_| table.register(|| Ok(()), new_controller()).unwrap())
            .collect();
        let ids: Vec<u16> = held.iter().map(|c| c.cntlid).collect();
        assert_eq!(ids, [4096, 4097, 4098]);
        assert!(matches!(
            table.register(|| Ok(()), new_controller()),
            Err(RegisterError::Busy)
        ));
        drop(held);
        let again = table.register(|| Ok(()), new_controller()).unwrap();
        assert!((4096..=4098).contains(&again.cntlid));
    }
}
