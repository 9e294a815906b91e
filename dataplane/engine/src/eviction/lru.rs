//! Plain LRU over one key space: the shadow-cache stand-in for the engine's
//! two-level LRU (at one block size the two choose the same victims).

use super::nodes::{Nodes, Queue};
use super::{owned::Replacer, Offer};
use crate::lru::NIL;

const QUEUE: u8 = 1;

/// LRU over one key space.
pub(crate) struct Lru {
    nodes: Nodes,
    queue: Queue,
}

impl Lru {
    pub fn new() -> Lru {
        Lru {
            nodes: Nodes::default(),
            queue: Queue::new(QUEUE),
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
        for _ in 0..self.queue.list.len {
            let t = self.queue.tail();
            if t == NIL {
                break;
            }
            match offer(t) {
                Offer::Take => return Some(t),
                Offer::Skip => self.hit(t),
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
    fn evicts_least_recently_used() {
        let mut l = Lru::new();
        let mut sim = Sim::new(2);
        for k in [1, 2, 1, 3] {
            sim.access(&mut l, k);
        }
        assert!(sim.cached(1) && !sim.cached(2) && sim.cached(3));
    }
}
