//! S3-FIFO (Yang et al., SOSP'23): a small FIFO queue S (10% of the cache)
//! that filters one-hit wonders, a main FIFO queue M with lazy promotion,
//! and a ghost queue G of tags evicted from S.
//!
//! - Insert: into M when the tag is a ghost (it was evicted from S too
//!   early), otherwise into S. A new entry's counter is 0. Until the first
//!   eviction, entries that find S holding its share go to M (libCacheSim's
//!   current S3FIFO): otherwise S would hold the whole cache when it first
//!   fills, and the first evictions would drain every entry not yet hit
//!   twice, warm ones included (0.34 points of misses on part 6's Zipf
//!   stream, 5-12 points under fill sizing by locality on the MSR and
//!   Systor'17 samples).
//! - Hit: the counter grows, up to 3. Nothing moves (FIFO queues: a hit
//!   costs no list update).
//! - Evict while S holds at least its share (or M is empty): S's oldest
//!   entry moves to M if it was hit at least twice since insertion
//!   (libCacheSim's default threshold, which missed less than one hit on
//!   the CloudPhysics sample at every size we tried), otherwise it is
//!   evicted and its tag becomes a ghost. Otherwise M's oldest entry, if its counter
//!   is above 0, goes back to M's head with the counter decremented, else is
//!   evicted.
//!
//! G holds as many bytes as M can. A key the engine cannot evict now
//! (pinned, dirty) keeps its place and is offered first next time.

use super::nodes::{Held, Nodes, Queue};
use super::{ghost::Ghost, owned::Replacer, Offer};
use crate::lru::NIL;

const SMALL: u8 = 1;
const MAIN: u8 = 2;
/// S's share of the capacity, in percent.
const SMALL_PERCENT: u64 = 10;
const MAX_FREQ: u8 = 3;
/// Hits in S that move an entry to M.
const MOVE_TO_MAIN: u8 = 2;

/// S3-FIFO over one key space.
pub(crate) struct S3Fifo {
    nodes: Nodes,
    small: Queue,
    main: Queue,
    ghost: Option<Ghost>,
    small_capacity: u64,
    /// Set by the first eviction: the cache has been full.
    evicted: bool,
    held: Held,
}

impl S3Fifo {
    pub fn new(capacity: u64, tags: bool) -> S3Fifo {
        let mut s = S3Fifo {
            nodes: Nodes::default(),
            small: Queue::new(SMALL),
            main: Queue::new(MAIN),
            ghost: tags.then(|| Ghost::new(0)),
            small_capacity: 0,
            evicted: false,
            held: Held::default(),
        };
        s.set_capacity(capacity);
        s
    }

    pub fn boxed(capacity: u64, _entries: u64, tags: bool) -> Box<dyn Replacer> {
        Box::new(S3Fifo::new(capacity, tags))
    }

    fn promote(&mut self, key: u32) {
        self.small.transfer(&mut self.main, &mut self.nodes, key);
        self.nodes.get_mut(key).freq = 0;
    }

    /// S3-FIFO's eviction loop; keys the engine cannot evict now are held
    /// aside ([`Held`]).
    fn scan(&mut self, offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        // Each step either evicts, moves an S entry to M (at most once per
        // entry) or decrements an M counter, so this bound is never reached
        // by a consistent state; it guards against a broken one.
        let mut steps = 4 * (self.small.list.len as u64 + self.main.list.len as u64) + 8;
        while steps > 0 {
            steps -= 1;
            let from_small = !self.small.is_empty()
                && (self.small.weight >= self.small_capacity || self.main.is_empty());
            if from_small {
                let t = self.small.tail();
                if self.nodes.get(t).freq >= MOVE_TO_MAIN {
                    self.promote(t);
                    continue;
                }
                match offer(t) {
                    Offer::Take => return Some(t),
                    Offer::Skip => self.held.hold(&mut self.small, &mut self.nodes, t),
                    Offer::Stop => return None,
                }
            } else {
                let t = self.main.tail();
                if t == NIL {
                    return None;
                }
                let n = self.nodes.get_mut(t);
                if n.freq > 0 {
                    n.freq -= 1;
                    self.main.move_to_front(&mut self.nodes, t);
                    continue;
                }
                match offer(t) {
                    Offer::Take => return Some(t),
                    Offer::Skip => self.held.hold(&mut self.main, &mut self.nodes, t),
                    Offer::Stop => return None,
                }
            }
        }
        None
    }
}

impl Replacer for S3Fifo {
    fn insert(&mut self, key: u32, tag: u32, weight: u32) {
        let ghost_hit = self.ghost.as_mut().is_some_and(|g| g.take(tag).is_some());
        let filling = !self.evicted && self.small.weight >= self.small_capacity;
        self.nodes.init(key, tag, weight);
        if ghost_hit || filling {
            self.main.push_front(&mut self.nodes, key);
        } else {
            self.small.push_front(&mut self.nodes, key);
        }
    }

    /// Blocks cached before S3-FIFO took over: those hit since insertion go
    /// to M (they would have been promoted), the others to S, where the
    /// one-hit wonders among them leave first.
    fn adopt(&mut self, key: u32, tag: u32, weight: u32, reused: bool) {
        self.nodes.init(key, tag, weight);
        if reused {
            self.main.push_front(&mut self.nodes, key);
            self.nodes.get_mut(key).freq = 1;
        } else {
            self.small.push_front(&mut self.nodes, key);
        }
    }

    fn hit(&mut self, key: u32) {
        let n = self.nodes.get_mut(key);
        n.freq = (n.freq + 1).min(MAX_FREQ);
    }

    fn remove(&mut self, key: u32, evicted: bool) {
        let n = *self.nodes.get(key);
        let weight = self.nodes.weight(key);
        if n.queue == SMALL {
            self.small.remove(&mut self.nodes, key);
            if evicted {
                if let Some(g) = &mut self.ghost {
                    g.insert(n.tag, weight);
                }
            }
        } else {
            self.main.remove(&mut self.nodes, key);
        }
    }

    fn miss(&mut self, _tag: u32) {}

    fn victim(&mut self, offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        self.evicted = true;
        let v = self.scan(offer);
        for (q, key) in self.held.take_all() {
            let queue = if q == SMALL {
                &mut self.small
            } else {
                &mut self.main
            };
            queue.push_back(&mut self.nodes, key);
        }
        v
    }

    fn set_capacity(&mut self, capacity: u64) {
        self.small_capacity = (capacity * SMALL_PERCENT / 100).max(1);
        if let Some(g) = &mut self.ghost {
            g.set_capacity(capacity - capacity * SMALL_PERCENT / 100);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.nodes.memory_bytes() + self.ghost.as_ref().map_or(0, |g| g.memory_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::testing::{evict, Sim};

    /// A 10-slot S3-FIFO (S holds 1) filled with keys 0-9, no eviction yet.
    fn filled() -> (S3Fifo, Sim) {
        let mut s = S3Fifo::new(10, true);
        let mut sim = Sim::new(10);
        for k in 0..10 {
            sim.access(&mut s, k);
        }
        (s, sim)
    }

    #[test]
    fn one_hit_wonders_never_reach_main() {
        // A scan of new keys passes through S only.
        let (mut s, mut sim) = filled();
        sim.access(&mut s, 0);
        sim.access(&mut s, 0); // hit twice in S: it will be promoted
        for k in 100..150 {
            sim.access(&mut s, k);
        }
        assert!(sim.cached(0), "a key hit twice in S moves to M and stays");
        assert_eq!(s.nodes.get(sim.slot(0)).queue, MAIN);
        for k in 100..149 {
            assert!(!sim.cached(k) || s.nodes.get(sim.slot(k)).queue == SMALL);
        }
    }

    #[test]
    fn entries_go_to_main_while_the_cache_first_fills() {
        // Key 0 fills S, keys 1-9 find it full before any eviction and go
        // to M.
        let (mut s, mut sim) = filled();
        assert_eq!(s.nodes.get(sim.slot(0)).queue, SMALL);
        for k in 1..10 {
            assert_eq!(s.nodes.get(sim.slot(k)).queue, MAIN, "key {k}");
        }
        // The first miss evicts S's unhit entry; from then on new keys
        // start in S again.
        sim.access(&mut s, 10);
        assert!(!sim.cached(0));
        assert_eq!(s.nodes.get(sim.slot(10)).queue, SMALL);
        sim.access(&mut s, 11);
        assert_eq!(s.nodes.get(sim.slot(11)).queue, SMALL);
    }

    #[test]
    fn ghost_hit_goes_to_main() {
        let mut s = S3Fifo::new(4, true);
        let mut sim = Sim::new(4);
        for k in 0..5 {
            sim.access(&mut s, k);
        }
        assert!(!sim.cached(0), "0 was S's oldest unhit entry");
        sim.access(&mut s, 0);
        assert_eq!(s.nodes.get(sim.slot(0)).queue, MAIN, "ghost hit");
    }

    #[test]
    fn skipped_keys_survive() {
        let mut s = S3Fifo::new(4, false);
        let mut sim = Sim::new(4);
        for k in 0..4 {
            sim.access(&mut s, k);
        }
        // Key 0's slot is unevictable: the next victim is another.
        let pinned = sim.slot(0);
        let v = evict(&mut s, |k| {
            if k == pinned {
                Offer::Skip
            } else {
                Offer::Take
            }
        });
        assert_ne!(v, Some(pinned));
        assert!(v.is_some());
    }
}
