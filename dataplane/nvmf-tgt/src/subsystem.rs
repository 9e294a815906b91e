//! NVM subsystems: identity, namespaces, the hosts allowed in, the
//! listeners that expose them, and the controllers currently connected.
//!
//! Everything here is configuration, touched by RPCs and by Fabrics Connect,
//! never by an I/O command: a queue pair resolves its subsystem at Connect
//! time into an `Arc`, and reads the namespace table through a snapshot it
//! refreshes only when [`Subsystem::ns_generation`] moves (one relaxed atomic
//! load per command, no lock).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bdev::CountedBdev;

use crate::ana::ListenerAna;
use crate::ana_fence::AnaFence;
use crate::auth::HostKeys;
use crate::ctrlr::controller::{
    Controller, ControllerTable, NewController, QpairCounts, QpairPath, RegisterError, Revocation,
    MAX_CNTLID,
};
use crate::stats::SubsystemStats;
use crate::TargetError;

/// NQN of the discovery subsystem every target serves.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Largest NQN, in bytes (NVMe base specification: 223).
pub const MAX_NQN_LEN: usize = 223;

/// Checks an NQN's shape: `nqn.yyyy-mm.reverse.domain:anything`, or the
/// UUID form, at most 223 bytes, printable ASCII.
pub fn validate_nqn(nqn: &str) -> Result<(), TargetError> {
    let bad = |why: &str| Err(TargetError::InvalidArgument(format!("NQN {nqn:?}: {why}")));
    if nqn.is_empty() || nqn.len() > MAX_NQN_LEN {
        return bad("must be 1 to 223 bytes");
    }
    if !nqn.bytes().all(|b| b.is_ascii_graphic()) {
        return bad("must be printable ASCII without spaces");
    }
    let Some(rest) = nqn.strip_prefix("nqn.") else {
        return bad("must start with \"nqn.\"");
    };
    let date_ok = rest.len() > 8
        && rest.as_bytes()[..4].iter().all(u8::is_ascii_digit)
        && rest.as_bytes()[4] == b'-'
        && rest.as_bytes()[5..7].iter().all(u8::is_ascii_digit)
        && rest.as_bytes()[7] == b'.';
    if !date_ok {
        return bad("must continue with a yyyy-mm. date");
    }
    Ok(())
}

/// A namespace: an nsid bound to a bdev, with identifiers hosts use to
/// recognise it across restarts and paths.
pub struct Namespace {
    /// Namespace id (1-based).
    pub nsid: u32,
    /// The device I/O goes to, counted in the bdev's own statistics.
    pub bdev: CountedBdev,
    /// Name of the bdev (for RPC listings).
    pub bdev_name: String,
    /// NGUID (Identify Namespace and the descriptor list).
    pub nguid: [u8; 16],
    /// UUID (descriptor list).
    pub uuid: [u8; 16],
    /// Block size, cached from the bdev.
    pub block_size: u32,
    /// log2 of the block size.
    pub block_shift: u32,
    /// Size in blocks, as hosts were last told (see
    /// [`Subsystem::refresh_namespace_sizes`]).
    pub num_blocks: u64,
    /// Its ANA group (the nsid unless given; see [`crate::ana`]).
    pub anagrpid: u32,
}

impl Namespace {
    /// The same namespace at the bdev's current size.
    fn resized(&self) -> Self {
        Self {
            nsid: self.nsid,
            bdev: self.bdev.clone(),
            bdev_name: self.bdev_name.clone(),
            nguid: self.nguid,
            uuid: self.uuid,
            block_size: self.block_size,
            block_shift: self.block_shift,
            num_blocks: self.bdev.info().num_blocks(),
            anagrpid: self.anagrpid,
        }
    }
}

impl Namespace {
    /// A namespace on `bdev`; without explicit identifiers they are derived
    /// from the subsystem NQN and the nsid, so they are stable across
    /// restarts and identical on every path to the same subsystem.
    pub fn new(
        subnqn: &str,
        nsid: u32,
        bdev: impl Into<CountedBdev>,
        nguid: Option<[u8; 16]>,
        uuid: Option<[u8; 16]>,
    ) -> Self {
        let bdev = bdev.into();
        let info = bdev.info();
        let derived_uuid = bdev::uuid_from_name(subnqn, &format!("nsid-{nsid}"));
        let derived_nguid = bdev::uuid_from_name(subnqn, &format!("nguid-{nsid}"));
        Self {
            nsid,
            bdev_name: info.name.clone(),
            block_size: info.block_size,
            block_shift: info.block_size.trailing_zeros(),
            num_blocks: info.num_blocks(),
            nguid: nguid.unwrap_or(derived_nguid),
            uuid: uuid.unwrap_or(derived_uuid),
            bdev,
            anagrpid: nsid,
        }
    }
}

/// The namespace table as one immutable snapshot.
pub type NamespaceMap = BTreeMap<u32, Arc<Namespace>>;

/// A listener as the discovery log page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenAddress {
    /// Where the target listens.
    pub listen: SocketAddr,
    /// Address hosts should use (TRADDR), when they reach the target through
    /// port forwarding at another address; defaults to the listen address.
    pub advertised_addr: Option<String>,
    /// Service id hosts should use (TRSVCID); defaults to the listen port.
    pub advertised_port: Option<u16>,
    /// Hosts must reach this listener through TLS (`--secure-channel`).
    pub secure_channel: bool,
}

impl ListenAddress {
    /// TRADDR as the discovery log shows it.
    pub fn traddr(&self) -> String {
        self.advertised_addr
            .clone()
            .unwrap_or_else(|| self.listen.ip().to_string())
    }

    /// TRSVCID as the discovery log shows it.
    pub fn trsvcid(&self) -> String {
        self.advertised_port
            .unwrap_or(self.listen.port())
            .to_string()
    }

    /// Whether the advertised address is IPv6 (ADRFAM).
    pub fn is_ipv6(&self) -> bool {
        match &self.advertised_addr {
            Some(a) => a.contains(':'),
            None => self.listen.is_ipv6(),
        }
    }
}

/// Parameters of a new subsystem (SPDK `nvmf_create_subsystem`).
#[derive(Clone, Debug)]
pub struct SubsystemConfig {
    /// NQN.
    pub nqn: String,
    /// Serial number (Identify SN, 20 ASCII characters at most).
    pub serial: String,
    /// Model number (Identify MN, 40 characters at most).
    pub model: String,
    /// Any host may connect (off by default: only listed hosts).
    pub allow_any_host: bool,
    /// Largest nsid (Identify NN and MNAN).
    pub max_namespaces: u32,
    /// Asymmetric Namespace Access reporting (SPDK `--ana-reporting`):
    /// the subsystem is exported by several servers, each listener
    /// reporting a state per ANA group ([`crate::ana`]).
    pub ana_reporting: bool,
    /// The controller ids it hands out (SPDK's `min_cntlid`..`max_cntlid`):
    /// servers exporting one subsystem get disjoint ranges, or a host
    /// refuses its second path ("duplicate cntlid").
    pub cntlid_range: RangeInclusive<u16>,
}

impl SubsystemConfig {
    /// Defaults for `nqn`: SPDK's serial and model, 32 namespaces, no hosts.
    pub fn new(nqn: &str) -> Self {
        Self {
            nqn: nqn.to_owned(),
            serial: "00000000000000000000".into(),
            model: "rackcache Controller".into(),
            allow_any_host: false,
            max_namespaces: 32,
            ana_reporting: false,
            cntlid_range: 1..=MAX_CNTLID,
        }
    }
}

/// Who may connect.
#[derive(Default)]
struct Access {
    allow_any_host: bool,
    /// The listed hosts and their DH-HMAC-CHAP keys.
    hosts: BTreeMap<String, HostKeys>,
}

/// An NVM subsystem.
pub struct Subsystem {
    /// NQN.
    pub nqn: String,
    /// Serial number.
    pub serial: String,
    /// Model number.
    pub model: String,
    /// Largest nsid.
    pub max_namespaces: u32,
    /// Reports ANA states (see [`crate::ana`]).
    pub ana_reporting: bool,
    /// Each listener's ANA states (none listed: all optimized).
    pub(crate) ana: RwLock<BTreeMap<SocketAddr, Arc<ListenerAna>>>,
    /// Bumped on every ANA state change (the target's ANA fence's
    /// included); queue pairs compare it to refresh their listener's
    /// states.
    pub ana_generation: AtomicU64,
    /// The target's ANA fence, over the states set here.
    pub(crate) ana_fence: Arc<AnaFence>,
    /// Whether this is the discovery subsystem.
    pub is_discovery: bool,
    access: RwLock<Access>,
    namespaces: RwLock<Arc<NamespaceMap>>,
    /// Bumped on every namespace change; queue pairs compare it to refresh
    /// their snapshot.
    pub ns_generation: AtomicU64,
    listeners: RwLock<Vec<ListenAddress>>,
    /// Its controllers (held weakly; each points back at the table).
    controllers: Arc<ControllerTable>,
    /// Counters.
    pub stats: SubsystemStats,
    /// Set when the subsystem is deleted: a Connect that found it before
    /// registers nothing after.
    removed: AtomicBool,
}

impl Subsystem {
    pub(crate) fn new(
        cfg: SubsystemConfig,
        is_discovery: bool,
        stats: SubsystemStats,
        qpair_counts: Arc<QpairCounts>,
        ana_fence: Arc<AnaFence>,
    ) -> Self {
        Self {
            controllers: Arc::new(ControllerTable::new(
                &cfg.nqn,
                cfg.cntlid_range.clone(),
                qpair_counts,
            )),
            nqn: cfg.nqn,
            serial: cfg.serial,
            model: cfg.model,
            max_namespaces: cfg.max_namespaces,
            ana_reporting: cfg.ana_reporting,
            ana: RwLock::new(BTreeMap::new()),
            ana_generation: AtomicU64::new(0),
            ana_fence,
            is_discovery,
            access: RwLock::new(Access {
                allow_any_host: cfg.allow_any_host,
                hosts: BTreeMap::new(),
            }),
            namespaces: RwLock::new(Arc::new(NamespaceMap::new())),
            ns_generation: AtomicU64::new(0),
            listeners: RwLock::new(Vec::new()),
            stats,
            removed: AtomicBool::new(false),
        }
    }

    /// Marks the subsystem deleted (before its controllers are revoked).
    pub(crate) fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
    }

    /// Whether a queue pair arriving on `listen` may attach: the subsystem
    /// exists and listens there.
    pub(crate) fn reachable_through(&self, listen: SocketAddr) -> bool {
        !self.removed.load(Ordering::Acquire) && self.listens_on(listen)
    }

    /// Whether `hostnqn` may connect.
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        let a = self.access.read().unwrap_or_else(|p| p.into_inner());
        a.allow_any_host || a.hosts.contains_key(hostnqn)
    }

    /// The DH-HMAC-CHAP keys of `hostnqn` (none for a host that is not
    /// listed, let in by `allow_any_host`).
    pub fn host_keys(&self, hostnqn: &str) -> HostKeys {
        let a = self.access.read().unwrap_or_else(|p| p.into_inner());
        a.hosts.get(hostnqn).cloned().unwrap_or_default()
    }

    /// Replaces the keys of listed host `hostnqn`. Connected queues keep
    /// their authentication; the next one (a new queue, or the host's
    /// re-authentication) needs the new keys.
    pub fn set_host_keys(&self, hostnqn: &str, keys: HostKeys) -> Result<(), TargetError> {
        let mut a = self.access.write().unwrap_or_else(|p| p.into_inner());
        let k = a
            .hosts
            .get_mut(hostnqn)
            .ok_or_else(|| TargetError::NotFound(format!("host {hostnqn}")))?;
        *k = keys;
        Ok(())
    }

    /// Whether any host may connect.
    pub fn allow_any_host(&self) -> bool {
        self.access
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .allow_any_host
    }

    /// Lets any host in (true) or only listed hosts (false). Turning it
    /// off tears down the controllers of hosts not on the list, so that
    /// access ends the same way however it was granted (SPDK only updates
    /// the discovery log here).
    pub fn set_allow_any_host(&self, allow: bool) -> Revocation {
        self.access
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .allow_any_host = allow;
        if allow {
            return Revocation::default();
        }
        self.revoke(|c| !self.host_allowed(&c.hostnqn), "host no longer allowed")
    }

    /// Allows `hostnqn`, which must authenticate with `keys` when they
    /// hold a host key.
    pub fn add_host(&self, hostnqn: &str, keys: HostKeys) -> Result<(), TargetError> {
        validate_nqn(hostnqn)?;
        let mut a = self.access.write().unwrap_or_else(|p| p.into_inner());
        if a.hosts.contains_key(hostnqn) {
            return Err(TargetError::Exists(format!("host {hostnqn}")));
        }
        a.hosts.insert(hostnqn.to_owned(), keys);
        Ok(())
    }

    /// Disallows `hostnqn` and tears down its controllers, as SPDK does
    /// (even when any host may connect: the host reconnects if it may).
    pub fn remove_host(&self, hostnqn: &str) -> Result<Revocation, TargetError> {
        {
            let mut a = self.access.write().unwrap_or_else(|p| p.into_inner());
            if a.hosts.remove(hostnqn).is_none() {
                return Err(TargetError::NotFound(format!("host {hostnqn}")));
            }
        }
        Ok(self.revoke(|c| c.hostnqn == hostnqn, "host removed"))
    }

    /// Tears down the live controllers `which` selects. Runs after the
    /// access change it enforces, and [`Subsystem::register_controller`]
    /// (like [`Controller::attach_io_queue`]) checks access under the lock
    /// this takes, so a Connect racing with the change either is seen here
    /// or is refused.
    pub(crate) fn revoke(&self, which: impl Fn(&Controller) -> bool, why: &str) -> Revocation {
        let chosen: Vec<Arc<Controller>> = self
            .live_controllers()
            .into_iter()
            .filter(|c| !c.is_torn_down() && which(c))
            .collect();
        Revocation::tear_down(chosen, why)
    }

    /// The allowed hosts.
    pub fn hosts(&self) -> Vec<String> {
        let a = self.access.read().unwrap_or_else(|p| p.into_inner());
        a.hosts.keys().cloned().collect()
    }

    /// The allowed hosts with their keys.
    pub fn hosts_with_keys(&self) -> Vec<(String, HostKeys)> {
        let a = self.access.read().unwrap_or_else(|p| p.into_inner());
        a.hosts
            .iter()
            .map(|(h, k)| (h.clone(), k.clone()))
            .collect()
    }

    /// The current namespace table.
    pub fn namespaces(&self) -> Arc<NamespaceMap> {
        self.namespaces
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Adds a namespace on `bdev` at `nsid` (or the lowest free one) and
    /// tells connected controllers. Returns the nsid. I/O to it is counted
    /// in the handle's statistics (a bare `Arc<Bdev>` gets counters of its
    /// own, registered nowhere).
    pub fn add_namespace(
        &self,
        nsid: Option<u32>,
        bdev: impl Into<CountedBdev>,
        nguid: Option<[u8; 16]>,
        uuid: Option<[u8; 16]>,
    ) -> Result<u32, TargetError> {
        self.add_namespace_in_group(nsid, bdev, nguid, uuid, None)
    }

    /// [`Self::add_namespace`] into ANA group `anagrpid` (1 to
    /// `max_namespaces`; its nsid when `None`).
    pub fn add_namespace_in_group(
        &self,
        nsid: Option<u32>,
        bdev: impl Into<CountedBdev>,
        nguid: Option<[u8; 16]>,
        uuid: Option<[u8; 16]>,
        anagrpid: Option<u32>,
    ) -> Result<u32, TargetError> {
        if let Some(g) = anagrpid {
            self.check_ana_group(g)?;
        }
        if self.is_discovery {
            return Err(TargetError::InvalidArgument(
                "the discovery subsystem has no namespaces".into(),
            ));
        }
        let nsid = {
            let mut guard = self.namespaces.write().unwrap_or_else(|p| p.into_inner());
            let nsid = match nsid {
                Some(0) | None => (1..=self.max_namespaces)
                    .find(|n| !guard.contains_key(n))
                    .ok_or_else(|| {
                        TargetError::InvalidArgument(format!(
                            "subsystem {} has all {} namespaces in use",
                            self.nqn, self.max_namespaces
                        ))
                    })?,
                Some(n) if n > self.max_namespaces || n == u32::MAX => {
                    return Err(TargetError::InvalidArgument(format!(
                        "nsid {n} above max_namespaces {}",
                        self.max_namespaces
                    )))
                }
                Some(n) if guard.contains_key(&n) => {
                    return Err(TargetError::Exists(format!("namespace {n}")))
                }
                Some(n) => n,
            };
            let mut ns = Namespace::new(&self.nqn, nsid, bdev, nguid, uuid);
            ns.anagrpid = anagrpid.unwrap_or(nsid);
            let mut map = NamespaceMap::clone(&guard);
            map.insert(nsid, Arc::new(ns));
            *guard = Arc::new(map);
            self.ns_generation.fetch_add(1, Ordering::Release);
            nsid
        };
        self.notify_namespace_changed(nsid);
        Ok(nsid)
    }

    /// Removes namespace `nsid`; in-flight I/O keeps its `Arc` and finishes.
    pub fn remove_namespace(&self, nsid: u32) -> Result<Arc<Namespace>, TargetError> {
        let ns = {
            let mut guard = self.namespaces.write().unwrap_or_else(|p| p.into_inner());
            let mut map = NamespaceMap::clone(&guard);
            let ns = map
                .remove(&nsid)
                .ok_or_else(|| TargetError::NotFound(format!("namespace {nsid}")))?;
            *guard = Arc::new(map);
            self.ns_generation.fetch_add(1, Ordering::Release);
            ns
        };
        self.notify_namespace_changed(nsid);
        Ok(ns)
    }

    /// Brings every namespace whose bdev has grown to the bdev's size and
    /// tells connected controllers (Namespace Attribute Changed), as SPDK
    /// does on a bdev resize event; the host rereads Identify Namespace and
    /// sees the new capacity. Returns the nsids that changed.
    pub fn refresh_namespace_sizes(&self) -> Vec<u32> {
        let changed: Vec<u32> = {
            let mut guard = self.namespaces.write().unwrap_or_else(|p| p.into_inner());
            let changed: Vec<u32> = guard
                .values()
                .filter(|ns| ns.bdev.info().num_blocks() != ns.num_blocks)
                .map(|ns| ns.nsid)
                .collect();
            if changed.is_empty() {
                return changed;
            }
            let mut map = NamespaceMap::clone(&guard);
            for nsid in &changed {
                let ns = map[nsid].resized();
                map.insert(*nsid, Arc::new(ns));
            }
            *guard = Arc::new(map);
            self.ns_generation.fetch_add(1, Ordering::Release);
            changed
        };
        for &nsid in &changed {
            tracing::info!(nqn = %self.nqn, nsid, "namespace resized");
            self.notify_namespace_changed(nsid);
        }
        changed
    }

    fn notify_namespace_changed(&self, nsid: u32) {
        for c in self.live_controllers() {
            c.namespace_changed(nsid);
        }
    }

    /// Records that the subsystem is reachable through `addr`.
    pub(crate) fn add_listener(&self, addr: ListenAddress) -> Result<(), TargetError> {
        let mut l = self.listeners.write().unwrap_or_else(|p| p.into_inner());
        if l.iter().any(|x| x.listen == addr.listen) {
            return Err(TargetError::Exists(format!("listener {}", addr.listen)));
        }
        l.push(addr);
        Ok(())
    }

    /// Forgets listener `listen` and tears down the controllers with a
    /// queue pair that arrived through it (SPDK disconnects those queue
    /// pairs; a controller here lives and dies with all its queues, which
    /// is what a Linux host does on losing any one of them).
    pub(crate) fn remove_listener(&self, listen: SocketAddr) -> Result<Revocation, TargetError> {
        {
            let mut l = self.listeners.write().unwrap_or_else(|p| p.into_inner());
            let before = l.len();
            l.retain(|x| x.listen != listen);
            if l.len() == before {
                return Err(TargetError::NotFound(format!("listener {listen}")));
            }
        }
        self.forget_ana(listen);
        Ok(self.revoke(|c| c.uses_listener(listen), "listener removed"))
    }

    /// The listeners exposing this subsystem.
    pub fn listeners(&self) -> Vec<ListenAddress> {
        self.listeners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether connections accepted on `local` may reach this subsystem.
    pub fn listens_on(&self, local: SocketAddr) -> bool {
        self.is_discovery
            || self
                .listeners
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .any(|l| {
                    l.listen == local
                        || (l.listen.port() == local.port() && l.listen.ip().is_unspecified())
                })
    }

    /// Registers a new controller for the admin queue that arrived on
    /// `listen`, under a fresh dynamic id; access is checked under the
    /// table's lock (see [`Subsystem::revoke`]).
    pub(crate) fn register_controller(
        &self,
        listen: SocketAddr,
        new: NewController,
    ) -> Result<Arc<Controller>, RegisterError> {
        let hostnqn = new.hostnqn.clone();
        self.controllers.register(
            || {
                if !self.reachable_through(listen) {
                    return Err(RegisterError::Unreachable);
                }
                if !self.host_allowed(&hostnqn) {
                    return Err(RegisterError::NotAllowed);
                }
                Ok(())
            },
            new,
        )
    }

    /// Attaches I/O queue `qid` of `ctrl`, which arrived through `path`,
    /// if the subsystem is still reachable that way.
    pub(crate) fn attach_io_queue(&self, ctrl: &Controller, qid: u16, path: QpairPath) -> bool {
        ctrl.attach_io_queue(qid, path, |listen| self.reachable_through(listen))
    }

    /// The controller ids it hands out.
    pub fn cntlid_range(&self) -> RangeInclusive<u16> {
        self.controllers.range()
    }

    /// The controller `cntlid`, if it is alive.
    pub(crate) fn controller(&self, cntlid: u16) -> Option<Arc<Controller>> {
        self.controllers.get(cntlid)
    }

    /// Every live controller.
    pub fn live_controllers(&self) -> Vec<Arc<Controller>> {
        self.controllers.live()
    }

    /// The target's queue pair counts.
    #[cfg(test)]
    pub(crate) fn qpair_counts(&self) -> &QpairCounts {
        self.controllers.qpair_counts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nqn_validation() {
        assert!(validate_nqn("nqn.2016-06.io.spdk:cnode1").is_ok());
        assert!(validate_nqn(DISCOVERY_NQN).is_ok());
        assert!(validate_nqn(
            "nqn.2014-08.org.nvmexpress:uuid:1b4e28ba-2fa1-11d2-883f-0016d3cca427"
        )
        .is_ok());
        assert!(validate_nqn("iqn.2016-06.io.spdk:x").is_err());
        assert!(validate_nqn("nqn.16-06.io").is_err());
        assert!(validate_nqn("nqn.2016-06.io x").is_err());
        assert!(validate_nqn(&format!("nqn.2016-06.io:{}", "a".repeat(300))).is_err());
    }

    #[test]
    fn a_connect_racing_with_host_removal_is_refused() {
        let stats = SubsystemStats::register(&metrics::Registry::new(), "nqn.2016-06.io.x:a");
        let sub = Arc::new(Subsystem::new(
            SubsystemConfig::new("nqn.2016-06.io.x:a"),
            false,
            stats,
            Arc::new(QpairCounts::default()),
            Arc::default(),
        ));
        let host = "nqn.2014-08.org.example:h";
        sub.add_host(host, HostKeys::default()).unwrap();
        let path = QpairPath {
            listen: "127.0.0.1:4420".parse().unwrap(),
            peer: "127.0.0.1:5000".parse().unwrap(),
        };
        let make = || NewController {
            hostnqn: host.into(),
            host_id: [0; 16],
            kato_ms: 0,
            io_queues: 1,
            admin_path: path,
        };
        let listen = path.listen;
        let add_listener = || {
            sub.add_listener(ListenAddress {
                listen,
                advertised_addr: None,
                advertised_port: None,
                secure_channel: false,
            })
            .unwrap()
        };
        add_listener();
        let c = sub.register_controller(listen, make()).unwrap();
        // Connect checked access before the removal; registering after it
        // must fail, and the controller registered before is torn down.
        let r = sub.remove_host(host).unwrap();
        assert_eq!(r.len(), 1);
        assert!(c.is_torn_down());
        let again = sub.register_controller(listen, make());
        assert_eq!(again.err(), Some(RegisterError::NotAllowed));
        assert!(sub.live_controllers().is_empty());
        assert_eq!(sub.qpair_counts().snapshot().admin_current, 0);

        // The same for a listener removed, and for the subsystem deleted.
        sub.add_host(host, HostKeys::default()).unwrap();
        let c = sub.register_controller(listen, make()).unwrap();
        assert!(sub.attach_io_queue(&c, 1, path));
        assert_eq!(sub.remove_listener(listen).unwrap().len(), 1);
        let again = sub.register_controller(listen, make());
        assert_eq!(again.err(), Some(RegisterError::Unreachable));
        add_listener();
        let c = sub.register_controller(listen, make()).unwrap();
        sub.mark_removed();
        assert!(
            !sub.attach_io_queue(&c, 1, path),
            "no I/O queue into a deleted subsystem"
        );
        let again = sub.register_controller(listen, make());
        assert_eq!(again.err(), Some(RegisterError::Unreachable));
    }

    #[test]
    fn listen_address_advertised_override() {
        let l = ListenAddress {
            listen: "127.0.0.1:4420".parse().unwrap(),
            advertised_addr: Some("10.0.3.100".into()),
            advertised_port: Some(14420),
            secure_channel: false,
        };
        assert_eq!(
            (l.traddr(), l.trsvcid()),
            ("10.0.3.100".into(), "14420".into())
        );
        let l = ListenAddress {
            advertised_addr: None,
            advertised_port: None,
            ..l
        };
        assert_eq!(
            (l.traddr(), l.trsvcid()),
            ("127.0.0.1".into(), "4420".into())
        );
    }
}
