//! SIEVE (Zhang et al., NSDI'24): one FIFO queue, a visited bit per entry
//! and a hand that sweeps from the oldest entry towards the newest.
//!
//! - Insert at the head, unvisited. Hit: set the visited bit (no list move).
//! - Evict: from the hand (the tail when it has none), clear visited bits
//!   while moving towards the head; evict the first unvisited entry and leave
//!   the hand at its newer neighbour. Past the head the hand wraps to the
//!   tail. Survivors keep their position, which is what separates SIEVE from
//!   CLOCK (which reinserts them at the head).
//!
//! A key the engine cannot evict now is passed over like a visited one.

use super::nodes::{Nodes, Queue};
use super::{owned::Replacer, Offer};
use crate::lru::{Links, NIL};

const QUEUE: u8 = 1;

/// SIEVE over one key space.
pub(crate) struct Sieve {
    nodes: Nodes,
    queue: Queue,
    hand: u32,
}

impl Sieve {
    pub fn new() -> Sieve {
        Sieve {
            nodes: Nodes::default(),
            queue: Queue::new(QUEUE),
            hand: NIL,
        }
    }

    pub fn boxed(_capacity: u64, _entries: u64, _tags: bool) -> Box<dyn Replacer> {
        Box::new(Sieve::new())
    }

    /// The newer neighbour of `key` (towards the head), or `NIL`.
    fn newer(&self, key: u32) -> u32 {
        self.nodes.prev(key)
    }
}

impl Replacer for Sieve {
    fn insert(&mut self, key: u32, tag: u32, weight: u32) {
        self.nodes.init(key, tag, weight);
        self.queue.push_front(&mut self.nodes, key);
    }

    fn hit(&mut self, key: u32) {
        self.nodes.get_mut(key).freq = 1;
    }

    fn remove(&mut self, key: u32, _evicted: bool) {
        if self.hand == key {
            self.hand = self.newer(key);
        }
        self.queue.remove(&mut self.nodes, key);
    }

    fn miss(&mut self, _tag: u32) {}

    fn victim(&mut self, offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        // Two sweeps clear every visited bit; skips count like visits.
        let mut steps = 2 * self.queue.list.len as u64 + 2;
        while steps > 0 && !self.queue.is_empty() {
            steps -= 1;
            if self.hand == NIL {
                self.hand = self.queue.tail();
            }
            let k = self.hand;
            if self.nodes.get(k).freq != 0 {
                self.nodes.get_mut(k).freq = 0;
                self.hand = self.newer(k);
                continue;
            }
            match offer(k) {
                Offer::Take => {
                    self.hand = self.newer(k);
                    return Some(k);
                }
                Offer::Skip => self.hand = self.newer(k),
                Offer::Stop => return None,
            }
        }
        None
    }

    fn set_capacity(&mut self, _capacity: u64) {}

    fn memory_bytes(&self) -> usize {
        self.nodes.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::testing::Sim;

    #[test]
    fn visited_entries_survive_in_place() {
        let mut s = Sieve::new();
        let mut sim = Sim::new(3);
        for k in [1, 2, 3] {
            sim.access(&mut s, k);
        }
        sim.access(&mut s, 1); // visited
        sim.access(&mut s, 4); // hand: 1 visited (cleared), 2 evicted
        assert!(sim.cached(1) && !sim.cached(2) && sim.cached(3));
        sim.access(&mut s, 5); // hand at 3: unvisited, evicted
        assert!(sim.cached(1) && !sim.cached(3) && sim.cached(4));
        sim.access(&mut s, 6); // hand at 4 (newer than 3): evicted
        assert!(sim.cached(1) && !sim.cached(4) && sim.cached(5));
        sim.access(&mut s, 7); // hand at 5: evicted; 1 keeps its place
        assert!(sim.cached(1) && !sim.cached(5));
        // A scan: the hand now evicts each newcomer in turn; 1 stays until
        // the hand wraps, which a scan never lets it do.
        for k in 8..20 {
            sim.access(&mut s, k);
        }
        assert!(sim.cached(1) && sim.cached(19));
    }
}
