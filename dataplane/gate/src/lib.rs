//! What a party that has not authenticated may hold on a server. Every
//! accepted socket passes the [`Gate`] first: a peer address may hold only
//! so many sockets that have not authenticated (more are refused at once),
//! and at the listener's cap the oldest such socket is told to close to
//! make room ([`Pass::eviction`]), so a flood of idle sockets can race a
//! real client's handshake but never lock it out. A socket leaves the gate
//! when its [`Pass`] drops (the client authenticated, or went).
//!
//! [`PeerLog`] limits the log lines a peer can cause.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

mod peer_log;

pub use peer_log::PeerLog;

/// The unauthenticated sockets of one listener.
pub struct Gate {
    waiting: Arc<Waiting>,
    per_peer: Arc<PeerCounts>,
}

/// Why an accepted socket was closed at once: its peer address already
/// holds `max` unauthenticated sockets.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub max: u32,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} sockets from this address have not identified themselves yet",
            self.max
        )
    }
}

impl Gate {
    /// At most `per_listener` sockets waiting, `per_peer` of one address.
    pub fn new(per_listener: u32, per_peer: u32) -> Self {
        Self {
            waiting: Arc::new(Waiting {
                max: per_listener as usize,
                sockets: Mutex::new((0, BTreeMap::new())),
            }),
            per_peer: Arc::new(PeerCounts {
                max: per_peer,
                counts: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Lets a socket from `peer` in, or says why not; at the listener's cap
    /// the oldest waiting socket is told to go.
    pub fn admit(&self, peer: IpAddr) -> Result<Pass, Refusal> {
        let peer_slot = PeerCounts::take(&self.per_peer, peer).ok_or(Refusal {
            max: self.per_peer.max,
        })?;
        let evicted = Arc::new(Notify::new());
        let id = {
            let mut w = self.waiting.sockets.lock().expect("waiting sockets");
            let (next, sockets) = &mut *w;
            let id = *next;
            *next += 1;
            if sockets.len() >= self.waiting.max {
                if let Some((_, oldest)) = sockets.pop_first() {
                    oldest.notify_one();
                }
            }
            sockets.insert(id, Arc::clone(&evicted));
            id
        };
        Ok(Pass {
            id,
            waiting: Arc::clone(&self.waiting),
            evicted,
            _peer: peer_slot,
        })
    }
}

/// One socket's place at the gate, until dropped.
pub struct Pass {
    id: u64,
    waiting: Arc<Waiting>,
    evicted: Arc<Notify>,
    _peer: PeerSlot,
}

impl Pass {
    /// Signalled when this socket must close to make room for a newer one
    /// (a signal given before anyone waits is kept).
    pub fn eviction(&self) -> Arc<Notify> {
        Arc::clone(&self.evicted)
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut w = self.waiting.sockets.lock().expect("waiting sockets");
        w.1.remove(&self.id);
    }
}

/// A listener's waiting sockets, oldest first.
struct Waiting {
    max: usize,
    /// The next id, and the eviction signal of each socket by id.
    sockets: Mutex<(u64, BTreeMap<u64, Arc<Notify>>)>,
}

/// Waiting sockets per peer address.
struct PeerCounts {
    max: u32,
    counts: Mutex<HashMap<IpAddr, u32>>,
}

impl PeerCounts {
    fn take(this: &Arc<Self>, peer: IpAddr) -> Option<PeerSlot> {
        let mut counts = this.counts.lock().expect("peer counts");
        let n = counts.entry(peer).or_insert(0);
        if *n >= this.max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            counts: Arc::clone(this),
            peer,
        })
    }
}

/// One unidentified socket of a peer; the entry goes when its last does.
struct PeerSlot {
    counts: Arc<PeerCounts>,
    peer: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.counts.lock().expect("peer counts");
        if let Some(n) = counts.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn evicted(p: &Pass) -> bool {
        p.eviction().notified().now_or_never().is_some()
    }

    #[test]
    fn a_peer_over_its_cap_is_refused_and_the_oldest_makes_room_at_the_listener_cap() {
        let g = Gate::new(3, 2);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let a1 = g.admit(a).unwrap();
        let a2 = g.admit(a).unwrap();
        assert_eq!(g.admit(a).err(), Some(Refusal { max: 2 }));
        let b1 = g.admit(b).unwrap();
        assert!(![&a1, &a2, &b1].iter().any(|x| evicted(x)), "under the cap");
        // The listener is at its cap: the oldest is told to go.
        let b2 = g.admit(b).unwrap();
        assert!(evicted(&a1));
        assert!(!evicted(&a2) && !evicted(&b1) && !evicted(&b2));
        // Until it has gone, its peer's count still holds it.
        assert_eq!(g.admit(a).err(), Some(Refusal { max: 2 }));
        drop(a1);
        let _a3 = g.admit(a).unwrap();
        assert!(evicted(&a2), "the next oldest");
    }

    #[test]
    fn a_pass_dropped_frees_its_places() {
        let g = Gate::new(2, 2);
        let peer: IpAddr = "127.0.0.2".parse().unwrap();
        let first = g.admit(peer).unwrap();
        let second = g.admit(peer).unwrap();
        drop(first);
        let third = g.admit(peer).unwrap();
        assert!(
            !evicted(&second) && !evicted(&third),
            "room was made by the drop"
        );
        drop((second, third));
        assert!(
            g.per_peer.counts.lock().unwrap().is_empty(),
            "no entry left behind"
        );
    }
}
