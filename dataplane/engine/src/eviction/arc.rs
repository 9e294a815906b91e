//! ARC (Megiddo and Modha, FAST'03): T1 holds entries seen once recently,
//! T2 entries seen at least twice; ghost lists B1 and B2 remember what each
//! evicted. A miss on a B1 ghost says T1 was too small and grows the target
//! `p` of T1; a B2 ghost shrinks it.
//!
//! Weights are bytes, so `p` and the list lengths of the paper are bytes
//! here (at a single block size this is the paper's algorithm scaled by the
//! block size). REPLACE evicts T1's LRU entry when T1 holds more than `p`
//! (or exactly `p` after a B2 ghost hit, or T2 is empty), otherwise T2's.
//! Ghost lists are trimmed so that T1 + B1 <= c and the four lists <= 2c.
//!
//! Without tags (groups) there are no ghosts and `p` stays 0: groups hit
//! only once are replaced before groups hit again.

use super::nodes::{Held, Nodes, Queue};
use super::{ghost::Ghost, owned::Replacer, Offer};
use crate::lru::NIL;

const T1: u8 = 1;
const T2: u8 = 2;

/// ARC over one key space.
pub(crate) struct Arc {
    nodes: Nodes,
    t1: Queue,
    t2: Queue,
    /// B1 and B2, when keys have identities.
    ghosts: Option<(Ghost, Ghost)>,
    /// Target bytes of T1.
    p: u64,
    capacity: u64,
    /// The tag of the current miss if it was a ghost, and whether of B2.
    ghost_hit: Option<(u32, bool)>,
    held: Held,
}

impl Arc {
    pub fn new(capacity: u64, tags: bool) -> Arc {
        Arc {
            nodes: Nodes::default(),
            t1: Queue::new(T1),
            t2: Queue::new(T2),
            ghosts: tags.then(|| (Ghost::new(capacity), Ghost::new(capacity))),
            p: 0,
            capacity,
            ghost_hit: None,
            held: Held::default(),
        }
    }

    pub fn boxed(capacity: u64, _entries: u64, tags: bool) -> Box<dyn Replacer> {
        Box::new(Arc::new(capacity, tags))
    }

    fn trim_ghosts(&mut self) {
        let c = self.capacity;
        let resident = self.t1.weight + self.t2.weight;
        if let Some((b1, b2)) = &mut self.ghosts {
            b1.trim(c.saturating_sub(self.t1.weight));
            b2.trim((2 * c).saturating_sub(resident + b1.weight()));
        }
    }

    /// ARC's REPLACE; keys the engine cannot evict now are held aside.
    fn scan(&mut self, offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        let b2_hit = self.ghost_hit.is_some_and(|(_, b2)| b2);
        let mut steps = self.t1.list.len as u64 + self.t2.list.len as u64 + 2;
        while steps > 0 {
            steps -= 1;
            let from_t1 = !self.t1.is_empty()
                && (self.t1.weight > self.p
                    || (b2_hit && self.t1.weight == self.p)
                    || self.t2.is_empty());
            let k = if from_t1 {
                self.t1.tail()
            } else {
                self.t2.tail()
            };
            if k == NIL {
                return None;
            }
            match offer(k) {
                Offer::Take => return Some(k),
                Offer::Skip => {
                    let list = if from_t1 { &mut self.t1 } else { &mut self.t2 };
                    self.held.hold(list, &mut self.nodes, k);
                }
                Offer::Stop => return None,
            }
        }
        None
    }
}

impl Replacer for Arc {
    fn insert(&mut self, key: u32, tag: u32, weight: u32) {
        self.nodes.init(key, tag, weight);
        let seen_before = self.ghost_hit.take().is_some_and(|(t, _)| t == tag);
        if seen_before {
            self.t2.push_front(&mut self.nodes, key);
        } else {
            self.t1.push_front(&mut self.nodes, key);
        }
    }

    fn hit(&mut self, key: u32) {
        if self.nodes.get(key).queue == T1 {
            self.t1.transfer(&mut self.t2, &mut self.nodes, key);
        } else {
            self.t2.move_to_front(&mut self.nodes, key);
        }
    }

    fn remove(&mut self, key: u32, evicted: bool) {
        let n = *self.nodes.get(key);
        let weight = self.nodes.weight(key);
        let from_t1 = n.queue == T1;
        if from_t1 {
            self.t1.remove(&mut self.nodes, key);
        } else {
            self.t2.remove(&mut self.nodes, key);
        }
        if let (true, Some((b1, b2))) = (evicted, &mut self.ghosts) {
            if from_t1 {
                b1.insert(n.tag, weight);
            } else {
                b2.insert(n.tag, weight);
            }
            self.trim_ghosts();
        }
    }

    fn miss(&mut self, tag: u32) {
        let Some((b1, b2)) = &mut self.ghosts else {
            return;
        };
        let (w1, w2) = (b1.weight(), b2.weight());
        if let Some(w) = b1.take(tag) {
            let delta = (w2 / w1.max(1)).max(1) * w as u64;
            self.p = (self.p + delta).min(self.capacity);
            self.ghost_hit = Some((tag, false));
        } else if let Some(w) = b2.take(tag) {
            let delta = (w1 / w2.max(1)).max(1) * w as u64;
            self.p = self.p.saturating_sub(delta);
            self.ghost_hit = Some((tag, true));
        } else {
            self.ghost_hit = None;
        }
    }

    fn victim(&mut self, offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        let v = self.scan(offer);
        for (q, key) in self.held.take_all() {
            let list = if q == T1 { &mut self.t1 } else { &mut self.t2 };
            list.push_back(&mut self.nodes, key);
        }
        v
    }

    fn set_capacity(&mut self, capacity: u64) {
        self.capacity = capacity;
        self.p = self.p.min(capacity);
        self.trim_ghosts();
    }

    fn memory_bytes(&self) -> usize {
        self.nodes.memory_bytes()
            + self
                .ghosts
                .as_ref()
                .map_or(0, |(a, b)| a.memory_bytes() + b.memory_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::testing::Sim;

    #[test]
    fn scan_does_not_flush_frequent_entries() {
        let mut a = Arc::new(4, true);
        let mut sim = Sim::new(4);
        for _ in 0..2 {
            for k in [1, 2] {
                sim.access(&mut a, k);
            }
        }
        for k in 100..120 {
            sim.access(&mut a, k);
        }
        assert!(sim.cached(1) && sim.cached(2), "T2 survives a scan");
    }

    #[test]
    fn b1_ghost_hit_grows_t1_target() {
        let mut a = Arc::new(2, true);
        let mut sim = Sim::new(2);
        for k in [1, 2, 3] {
            sim.access(&mut a, k);
        }
        assert_eq!(a.p, 0);
        sim.access(&mut a, 1); // 1 was evicted from T1: a B1 ghost
        assert_eq!(a.p, 1);
        assert_eq!(a.nodes.get(sim.slot(1)).queue, T2);
    }
}
