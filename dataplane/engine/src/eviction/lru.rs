//! Plain LRU over one key space: the shadow-cache stand-in for the engine's
//! two-level LRU (at one block size the two choose the same victims).

use super::nodes::{Held, Nodes, Queue};
use super::{owned::Replacer, Offer};
use crate::lru::NIL;

const QUEUE: u8 = 1;

/// LRU over one key space.
pub(crate) struct Lru {
    nodes: Nodes,
    queue: Queue,
    held: Held,
}

impl Lru {
    pub fn new() -> Lru {
        Lru {
            nodes: Nodes::default(),
            queue: Queue::new(QUEUE),
            held: Held::default(),
        }
    }

    pub fn boxed(_capacity: u64, _entries: u64, _tags: bool) -> Box<dyn Replacer> {
        Box::new(Lru::new())
    }
}

impl Replacer for Lru {
    fn insert(&mut self, key: u32, tag: u32, weight: u32) {
        self.nodes.init(key, tag, weight);
        self.queue.push_front(&mut self.nodes, key);
    }

    fn hit(&mut self, key: u32) {
        self.queue.move_to_front(&mut self.nodes, key);
    }

    fn remove(&mut self, key: u32, _evicted: bool) {
        self.queue.remove(&mut self.nodes, key);
    }

    fn miss(&mut self, _tag: u32) {}

    fn victim(&mut self, offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        let mut v = None;
        loop {
            let t = self.queue.tail();
            if t == NIL {
                break;
            }
            match offer(t) {
                Offer::Take => {
                    v = Some(t);
                    break;
                }
                // Held aside, it keeps its place (offered first next time).
                Offer::Skip => self.held.hold(&mut self.queue, &mut self.nodes, t),
                Offer::Stop => break,
            }
        }
        for (_, key) in self.held.take_all() {
            self.queue.push_back(&mut self.nodes, key);
        }
        v
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
    fn evicts_least_recently_used() {
        let mut l = Lru::new();
        let mut sim = Sim::new(2);
        for k in [1, 2, 1, 3] {
            sim.access(&mut l, k);
        }
        assert!(sim.cached(1) && !sim.cached(2) && sim.cached(3));
    }
}
