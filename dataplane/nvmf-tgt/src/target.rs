//! The target handle: the configuration API (subsystems, hosts,
//! listeners), statistics and graceful shutdown, over the shared
//! [`TargetState`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::auth::{AuthPolicy, HostKeys};
use crate::ctrlr::controller::{QpairCountsSnapshot, Revocation};
use crate::options::TransportOptions;
use crate::poller::Poller;
use crate::state::{completed_io, TargetState};
use crate::subsystem::{validate_nqn, ListenAddress, Subsystem, SubsystemConfig, DISCOVERY_NQN};
use crate::tcp::listener::accept_loop;
use crate::tcp::tls::TlsAcceptor;
use crate::TargetError;

/// What `nvmf_get_stats` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetStats {
    /// Queue pairs.
    pub qpairs: QpairCountsSnapshot,
    /// I/O commands completed successfully (reads, writes, flushes,
    /// deallocates), deleted subsystems included.
    pub completed_io: u64,
}

/// The NVMe-oF target. Cloning gives another handle to the same target.
#[derive(Clone)]
pub struct Target {
    inner: Arc<TargetState>,
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
        Ok(Self {
            inner: Arc::new(TargetState::new(opts, metrics, poller)?),
        })
    }

    /// Commands abandoned so far because a queue pair's drain timed out.
    pub fn abandoned_requests(&self) -> u64 {
        self.inner.abandoned()
    }

    /// Bytes of the data buffer budget granted to commands now.
    pub fn buffer_bytes_in_use(&self) -> i64 {
        self.inner.buffers().in_use.get()
    }

    /// Bytes of freed data buffers the connections keep for reuse now.
    pub fn buffer_cache_bytes(&self) -> usize {
        self.inner.buffers().cached.get()
    }

    #[cfg(test)]
    pub(crate) fn state(&self) -> Arc<TargetState> {
        self.inner.clone()
    }

    /// The transport options.
    pub fn options(&self) -> &TransportOptions {
        self.inner.opts()
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
        let s = self.inner.insert_subsystem(cfg)?;
        self.inner.discovery_changed();
        Ok(s)
    }

    /// Deletes a subsystem: its controllers are torn down (their queues
    /// close; wait for that with the returned [`Revocation`]), its
    /// listeners forgotten.
    pub fn remove_subsystem(&self, nqn: &str) -> Result<Revocation, TargetError> {
        let s = self
            .inner
            .take_subsystem(nqn)
            .ok_or_else(|| TargetError::NotFound(format!("subsystem {nqn}")))?;
        // Connect finds the subsystem no more, a Connect that found it
        // before registers nothing, what is connected goes.
        s.mark_removed();
        let mut revoked = s.revoke(|_| true, "subsystem deleted");
        revoked.wait_also(self.inner.draining(|c| c.subnqn() == nqn));
        for l in s.listeners() {
            if let Ok(r) = s.remove_listener(l.listen) {
                revoked.merge(r);
            }
            self.release_listener_if_unused(l.listen);
        }
        self.inner.retire(&s);
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
        let (qpairs, retired) = self.inner.counts();
        TargetStats {
            qpairs,
            completed_io: live + retired,
        }
    }

    /// The subsystem named `nqn` (including discovery).
    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.inner.subsystem(nqn)
    }

    /// Every subsystem except discovery, by NQN.
    pub fn subsystems(&self) -> Vec<Arc<Subsystem>> {
        self.inner.subsystems()
    }

    /// Adds a host to a subsystem's allow list; with a host key in
    /// `keys` it must authenticate (DH-HMAC-CHAP) on every queue.
    pub fn add_host(&self, nqn: &str, hostnqn: &str, keys: HostKeys) -> Result<(), TargetError> {
        self.existing(nqn)?.add_host(hostnqn, keys)?;
        self.inner.discovery_changed();
        Ok(())
    }

    /// Replaces a listed host's DH-HMAC-CHAP keys (rotation): connected
    /// queues stay, the next authentication needs the new keys.
    pub fn set_host_keys(
        &self,
        nqn: &str,
        hostnqn: &str,
        keys: HostKeys,
    ) -> Result<(), TargetError> {
        self.existing(nqn)?.set_host_keys(hostnqn, keys)
    }

    /// Raises (`true`) or lifts the target's ANA fence
    /// ([`crate::ana_fence`]): while it is up, every subsystem reporting
    /// ANA states reports every group inaccessible on every listener, the
    /// states set kept for when it is lifted. Each transition sends an
    /// ANA change notice to those subsystems' controllers. Whether it
    /// changed.
    pub fn set_ana_fenced(&self, up: bool) -> bool {
        crate::ana_fence::set(&self.inner, up)
    }

    /// Whether the target's ANA fence is up.
    pub fn ana_fenced(&self) -> bool {
        self.inner.ana_fence().snapshot().0
    }

    /// The hashes and groups DH-HMAC-CHAP accepts.
    pub fn auth_policy(&self) -> &AuthPolicy {
        self.inner.auth_policy()
    }

    /// Removes a host from a subsystem's allow list and tears down its
    /// controllers (wait for their queues with the returned value).
    pub fn remove_host(&self, nqn: &str, hostnqn: &str) -> Result<Revocation, TargetError> {
        let mut revoked = self.existing(nqn)?.remove_host(hostnqn)?;
        revoked.wait_also(
            self.inner
                .draining(|c| c.subnqn() == nqn && c.hostnqn == hostnqn),
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
                .draining(|c| c.subnqn() == nqn && !sub.host_allowed(&c.hostnqn)),
        );
        self.inner.discovery_changed();
        Ok(revoked)
    }

    fn existing(&self, nqn: &str) -> Result<Arc<Subsystem>, TargetError> {
        self.inner
            .nvm_subsystem(nqn)
            .ok_or_else(|| TargetError::NotFound(format!("subsystem {nqn}")))
    }

    /// The subsystem `nqn` a listener may be added to: an NVM subsystem, or
    /// the discovery subsystem (its own listeners, port 8009 by convention,
    /// as in SPDK).
    fn listenable(&self, nqn: &str) -> Result<Arc<Subsystem>, TargetError> {
        if nqn == DISCOVERY_NQN {
            return Ok(self.inner.discovery().clone());
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
        self.add_listener_at(
            ListenAddress {
                listen,
                advertised_addr,
                advertised_port,
                secure_channel: false,
            },
            nqn,
        )
        .await
    }

    /// [`Target::add_listener`] with every setting of the listener: with
    /// `secure_channel`, hosts reach it only through TLS with a PSK
    /// (`tcp::tls`). Subsystems that share an address share its setting.
    pub async fn add_listener_at(
        &self,
        addr: ListenAddress,
        nqn: &str,
    ) -> Result<SocketAddr, TargetError> {
        let sub = self.listenable(nqn)?;
        let bound = self.listen(addr.listen, addr.secure_channel).await?;
        if let Err(e) = sub.add_listener(ListenAddress {
            listen: bound,
            ..addr
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
                .draining(|c| c.subnqn() == nqn && c.uses_listener(listen)),
        );
        self.release_listener_if_unused(listen);
        self.inner.discovery_changed();
        Ok(revoked)
    }

    fn release_listener_if_unused(&self, listen: SocketAddr) {
        let used = self
            .subsystems()
            .iter()
            .chain(std::iter::once(self.inner.discovery()))
            .any(|s| s.listeners().iter().any(|l| l.listen == listen));
        if !used {
            self.inner.stop_listener(listen);
        }
    }

    /// Binds `addr` (if not bound yet) and starts its accept loop; returns
    /// the bound address.
    async fn listen(&self, addr: SocketAddr, secure: bool) -> Result<SocketAddr, TargetError> {
        if addr.port() != 0 {
            match self.inner.listener_secure(addr) {
                Some(s) if s == secure => return Ok(addr),
                Some(s) => {
                    return Err(TargetError::InvalidArgument(format!(
                        "listener {addr} is already bound {} a secure channel: subsystems on one address share it",
                        if s { "with" } else { "without" }
                    )))
                }
                None => {}
            }
        }
        let tls = if secure {
            let acceptor = TlsAcceptor::new(Arc::downgrade(&self.inner), addr)
                .map_err(|e| TargetError::InvalidArgument(format!("TLS for {addr}: {e}")))?;
            Some(Arc::new(acceptor))
        } else {
            None
        };
        let drain = self.inner.drain_token().ok_or(TargetError::ShuttingDown)?;
        let sock = TcpListener::bind(addr)
            .await
            .map_err(|source| TargetError::Listen { addr, source })?;
        let bound = sock
            .local_addr()
            .map_err(|source| TargetError::Listen { addr, source })?;
        let (stop, stop_rx) = watch::channel(false);
        let portid = self.inner.add_listener(bound, stop, secure);
        tokio::spawn(accept_loop(
            sock,
            bound,
            self.inner.clone(),
            stop_rx,
            drain,
            tls,
        ));
        tracing::info!(%bound, portid, secure_channel = secure, "NVMe/TCP listener started");
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
        let Some(drain) = self.inner.drain_token() else {
            return;
        };
        let (rd, wr) = tokio::io::split(stream);
        let arrival = crate::tcp::serve::Arrival {
            peer,
            listen,
            admission: crate::tcp::admission::Admission::unlimited(),
            secure: None,
        };
        crate::tcp::serve(rd, wr, arrival, self.inner.clone(), drain).await;
    }

    /// Graceful shutdown: stop accepting, let queues finish their in-flight
    /// commands (up to the drain timeout), then flush every namespace's bdev.
    pub async fn shutdown(&self) {
        self.inner.begin_shutdown();
        let drain_timeout = self.inner.opts().drain_timeout;
        if !self
            .inner
            .drained(drain_timeout + Duration::from_secs(1))
            .await
        {
            tracing::warn!("NVMe/TCP connections did not drain in time");
        }
        // The flushes run together under one deadline: one that waits on
        // something gone (a cached volume holding a Flush for its lost
        // mirror) must not hold the shutdown; the bdevs' own stop makes
        // their data durable.
        let mut flushes = Vec::new();
        for s in self.subsystems() {
            for ns in s.namespaces().values() {
                let (nqn, nsid, bdev) = (s.nqn.clone(), ns.nsid, ns.bdev.clone());
                flushes.push(async move { (nqn, nsid, bdev.flush().await) });
            }
        }
        let all = futures_util::future::join_all(flushes);
        match tokio::time::timeout(drain_timeout, all).await {
            Ok(done) => {
                for (nqn, nsid, r) in done {
                    if let Err(e) = r {
                        tracing::warn!(subnqn = %nqn, nsid, "flush at shutdown: {e}");
                    }
                }
            }
            Err(_) => tracing::warn!(
                "flush at shutdown: not all done within the drain timeout; left to the bdevs' stop"
            ),
        }
    }
}
