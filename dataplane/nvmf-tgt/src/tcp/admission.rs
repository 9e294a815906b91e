//! Who may hold a socket on a listener. A socket that has not yet sent its
//! ICReq and a successful Fabrics Connect is *unidentified*: it passes the
//! listener's [`gate::Gate`] (a cap per peer address, and one per listener
//! at which the oldest gives way) and must identify itself within
//! `identify_timeout`. Only a Connect takes one of the listener's host
//! slots (`max_connections_per_listener`), so idle sockets, however many,
//! never take a host's place. A Connect whose host must authenticate
//! (DH-HMAC-CHAP) keeps its place at the gate instead, and trades it for a
//! host slot once it has authenticated: an allowed NQN without its key
//! takes no host's place either.

use std::net::IpAddr;
use std::sync::Arc;

use gate::{Gate, Pass, Refusal};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::TransportOptions;

/// A listener's host slots and its gate for unidentified sockets.
pub(crate) struct ListenerSlots {
    hosts: Arc<Semaphore>,
    gate: Gate,
}

impl ListenerSlots {
    pub(crate) fn new(opts: &TransportOptions) -> Self {
        Self {
            hosts: Arc::new(Semaphore::new(opts.max_connections_per_listener as usize)),
            gate: Gate::new(
                opts.max_unidentified_per_listener,
                opts.max_unidentified_per_peer,
            ),
        }
    }

    /// Admits a socket from `peer` as unidentified, or says why not.
    pub(crate) fn admit(&self, peer: IpAddr) -> Result<Admission, Refusal> {
        Ok(Admission {
            unidentified: Some(self.gate.admit(peer)?),
            host: None,
            hosts: Some(Arc::clone(&self.hosts)),
        })
    }
}

/// What one connection holds: its place at the gate until it connects,
/// then a host slot.
pub(crate) struct Admission {
    unidentified: Option<Pass>,
    host: Option<OwnedSemaphorePermit>,
    /// The listener's host slots; `None` for a connection that came some
    /// other way than a listener (tests, the fuzzer): never capped.
    hosts: Option<Arc<Semaphore>>,
}

impl Admission {
    /// A connection outside any listener's caps.
    pub(crate) fn unlimited() -> Self {
        Self {
            unidentified: None,
            host: None,
            hosts: None,
        }
    }

    /// What tells this unidentified socket to close to make room for a
    /// newer one; `None` once connected, or outside a listener.
    pub(crate) fn eviction(&self) -> Option<Arc<Notify>> {
        self.unidentified.as_ref().map(Pass::eviction)
    }

    /// Sets a host slot aside for a Connect; false when all are taken.
    pub(crate) fn reserve_host(&mut self) -> bool {
        let Some(hosts) = &self.hosts else {
            return true;
        };
        if self.host.is_none() {
            self.host = Arc::clone(hosts).try_acquire_owned().ok();
        }
        self.host.is_some()
    }

    /// The Connect succeeded: the place at the gate is given back.
    pub(crate) fn connected(&mut self) {
        self.unidentified = None;
    }

    /// Whether the socket still holds a place at the gate (it has not
    /// connected, or not authenticated).
    pub(crate) fn is_unidentified(&self) -> bool {
        self.unidentified.is_some()
    }

    /// The Connect failed: its host slot is given back.
    pub(crate) fn release_host(&mut self) {
        self.host = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_trades_its_place_at_the_gate_for_a_host_slot() {
        let s = ListenerSlots::new(&TransportOptions {
            max_unidentified_per_listener: 2,
            max_unidentified_per_peer: 2,
            max_connections_per_listener: 1,
            ..TransportOptions::default()
        });
        let peer: IpAddr = "127.0.0.2".parse().unwrap();
        let mut first = s.admit(peer).unwrap();
        let mut second = s.admit(peer).unwrap();
        assert!(s.admit(peer).is_err(), "the peer's two places are taken");
        assert!(first.reserve_host());
        first.connected();
        assert!(first.eviction().is_none());
        // The first's place is free again; the host slot is not.
        let _third = s.admit(peer).unwrap();
        assert!(!second.reserve_host(), "the one host slot is taken");
        drop(first);
        assert!(second.reserve_host());
        // A failed Connect gives its host slot back.
        second.release_host();
        assert_eq!(s.hosts.available_permits(), 1);
    }

    #[test]
    fn connections_outside_a_listener_are_never_capped() {
        let mut a = Admission::unlimited();
        assert!(a.reserve_host());
        assert!(a.eviction().is_none());
    }
}
