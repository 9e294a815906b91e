//! W-TinyLFU (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient
//! Cache Admission Policy", ACM ToS 2017; the design Caffeine implements):
//! a small LRU *window* that every new entry enters, a segmented-LRU *main*
//! space (probation and protected), and a count-min sketch with aging that
//! decides which of the window's victim and main's victim stays.
//!
//! - Insert: into the window's head.
//! - Hit: window entries move to the window head; probation entries are
//!   promoted to protected (whose LRU entries are demoted back to probation
//!   beyond its share); protected entries move to its head.
//! - Evict: when the window is at its share (the missed entry is about to
//!   join it), its LRU entry is the
//!   *candidate* and probation's LRU entry (protected's when probation is
//!   empty) the *victim*; the one the sketch estimates less frequent is
//!   evicted and a winning candidate moves to probation's head. Otherwise
//!   main's victim is evicted.
//!
//! Sizes are fixed ratios rather than Caffeine's hill climbing: the window
//! holds 1% of the capacity (Caffeine's starting point) and protected 80% of
//! main. Every access (hit or miss) increments the sketch, which has as many
//! counters per row as the cache holds blocks (rounded up to a power of two)
//! and halves them after ten times that many increments (TinyLFU's sample
//! size). Without tags (groups) the frequency is the key's own hit count.

use super::nodes::{Held, Nodes, Queue};
use super::{owned::Replacer, Offer};
use crate::lru::NIL;
use crate::sketch::CountMin;

const WINDOW: u8 = 1;
const PROBATION: u8 = 2;
const PROTECTED: u8 = 3;
const WINDOW_PERCENT: u64 = 1;
const PROTECTED_PERCENT: u64 = 80;

/// W-TinyLFU over one key space.
pub(crate) struct WTinyLfu {
    nodes: Nodes,
    window: Queue,
    probation: Queue,
    protected: Queue,
    sketch: Option<CountMin>,
    capacity: u64,
    window_capacity: u64,
    protected_capacity: u64,
    held: Held,
}

impl WTinyLfu {
    pub fn new(capacity: u64, entries: u64, tags: bool) -> WTinyLfu {
        let entries = entries.clamp(64, 1 << 28) as u32;
        let mut w = WTinyLfu {
            nodes: Nodes::default(),
            window: Queue::new(WINDOW),
            probation: Queue::new(PROBATION),
            protected: Queue::new(PROTECTED),
            sketch: tags.then(|| CountMin::new(entries, entries.saturating_mul(10))),
            capacity: 0,
            window_capacity: 0,
            protected_capacity: 0,
            held: Held::default(),
        };
        w.set_capacity(capacity);
        w
    }

    pub fn boxed(capacity: u64, entries: u64, tags: bool) -> Box<dyn Replacer> {
        Box::new(WTinyLfu::new(capacity, entries, tags))
    }

    fn frequency(&self, key: u32) -> u32 {
        let n = self.nodes.get(key);
        match &self.sketch {
            Some(s) => s.estimate(n.tag as u64),
            None => n.freq as u32,
        }
    }

    /// Takes `key` off whichever queue holds it.
    fn unlink(&mut self, key: u32) {
        let nodes = &mut self.nodes;
        match nodes.get(key).queue {
            WINDOW => self.window.remove(nodes, key),
            PROBATION => self.probation.remove(nodes, key),
            _ => self.protected.remove(nodes, key),
        }
    }

    /// Moves `key` from wherever it is to protected's head, demoting
    /// protected's LRU entries beyond its share to probation.
    fn protect(&mut self, key: u32) {
        self.unlink(key);
        self.protected.push_front(&mut self.nodes, key);
        while self.protected.weight > self.protected_capacity && self.protected.list.len > 1 {
            let t = self.protected.tail();
            self.protected
                .transfer(&mut self.probation, &mut self.nodes, t);
        }
    }

    /// Main below its share takes the window's overflow without a duel:
    /// the cache is still filling, or main lost entries to removals. Done
    /// on every insertion, so entries hit early get promoted in main.
    fn drain_window(&mut self) {
        let main_capacity = self.main_capacity();
        while self.window.weight > self.window_capacity {
            let t = self.window.tail();
            let main = self.probation.weight + self.protected.weight;
            if main + self.nodes.weight(t) as u64 > main_capacity {
                break;
            }
            self.window
                .transfer(&mut self.probation, &mut self.nodes, t);
        }
    }

    fn main_capacity(&self) -> u64 {
        self.capacity - self.window_capacity
    }

    /// Main's eviction end: probation's LRU, else protected's.
    fn main_victim(&self) -> u32 {
        match self.probation.tail() {
            NIL => self.protected.tail(),
            t => t,
        }
    }

    /// The duel loop; keys the engine cannot evict now are held aside.
    fn scan(&mut self, offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        let mut steps = 2
            * (self.window.list.len as u64
                + self.probation.list.len as u64
                + self.protected.list.len as u64)
            + 2;
        self.drain_window();
        while steps > 0 {
            steps -= 1;
            let victim = self.main_victim();
            // The missed entry joins the window right after this eviction,
            // so a window at its share overflows: its LRU entry duels.
            let window_over = !self.window.is_empty() && self.window.weight >= self.window_capacity;
            if window_over || victim == NIL {
                let candidate = self.window.tail();
                if candidate == NIL {
                    return None;
                }
                let candidate_wins =
                    victim != NIL && self.frequency(candidate) > self.frequency(victim);
                if !candidate_wins {
                    match offer(candidate) {
                        Offer::Take => return Some(candidate),
                        Offer::Skip => self.hold(candidate),
                        Offer::Stop => return None,
                    }
                    continue;
                }
                match offer(victim) {
                    Offer::Take => {
                        self.window
                            .transfer(&mut self.probation, &mut self.nodes, candidate);
                        return Some(victim);
                    }
                    Offer::Skip => self.hold(victim),
                    Offer::Stop => return None,
                }
            } else {
                match offer(victim) {
                    Offer::Take => return Some(victim),
                    Offer::Skip => self.hold(victim),
                    Offer::Stop => return None,
                }
            }
        }
        None
    }

    /// Sets `key` aside until the scan ends (see [`Held`]).
    fn hold(&mut self, key: u32) {
        let queue = match self.nodes.get(key).queue {
            WINDOW => &mut self.window,
            PROBATION => &mut self.probation,
            _ => &mut self.protected,
        };
        self.held.hold(queue, &mut self.nodes, key);
    }
}

impl Replacer for WTinyLfu {
    fn insert(&mut self, key: u32, tag: u32, weight: u32) {
        self.nodes.init(key, tag, weight);
        self.window.push_front(&mut self.nodes, key);
        self.drain_window();
    }

    /// Blocks cached before W-TinyLFU took over go to main: protected when
    /// hit since insertion (counted twice in the sketch), probation
    /// otherwise (counted once). With an empty sketch and everything in the
    /// window, every newcomer would win its duel against them.
    fn adopt(&mut self, key: u32, tag: u32, weight: u32, reused: bool) {
        if let Some(s) = &mut self.sketch {
            s.increment(tag as u64);
            if reused {
                s.increment(tag as u64);
            }
        }
        self.nodes.init(key, tag, weight);
        self.probation.push_front(&mut self.nodes, key);
        if reused {
            self.protect(key);
        }
    }

    fn hit(&mut self, key: u32) {
        let n = self.nodes.get_mut(key);
        n.freq = n.freq.saturating_add(1);
        let (queue, tag) = (n.queue, n.tag);
        if let Some(s) = &mut self.sketch {
            s.increment(tag as u64);
        }
        match queue {
            WINDOW => self.window.move_to_front(&mut self.nodes, key),
            PROBATION => self.protect(key),
            _ => self.protected.move_to_front(&mut self.nodes, key),
        }
    }

    fn remove(&mut self, key: u32, _evicted: bool) {
        self.unlink(key);
    }

    fn miss(&mut self, tag: u32) {
        if let Some(s) = &mut self.sketch {
            s.increment(tag as u64);
        }
    }

    fn victim(&mut self, offer: &mut dyn FnMut(u32) -> Offer) -> Option<u32> {
        let v = self.scan(offer);
        for (q, key) in self.held.take_all() {
            let queue = match q {
                WINDOW => &mut self.window,
                PROBATION => &mut self.probation,
                _ => &mut self.protected,
            };
            queue.push_back(&mut self.nodes, key);
        }
        v
    }

    fn set_capacity(&mut self, capacity: u64) {
        self.capacity = capacity;
        self.window_capacity = capacity * WINDOW_PERCENT / 100;
        let main = capacity - self.window_capacity;
        self.protected_capacity = main * PROTECTED_PERCENT / 100;
    }

    fn memory_bytes(&self) -> usize {
        self.nodes.memory_bytes() + self.sketch.as_ref().map_or(0, |s| s.memory_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::testing::Sim;

    #[test]
    fn frequent_entries_beat_a_scan() {
        // A wide sketch: no collisions and no aging in this short test.
        let mut w = WTinyLfu::new(100, 4096, true);
        let mut sim = Sim::new(100);
        for _ in 0..5 {
            for k in 0..50 {
                sim.access(&mut w, k);
            }
        }
        for k in 1000..3000 {
            sim.access(&mut w, k);
        }
        let kept = (0..50).filter(|&k| sim.cached(k)).count();
        assert_eq!(kept, 50, "a one-pass scan loses every duel");
    }

    #[test]
    fn window_candidate_enters_main_when_more_frequent() {
        // Window of 1% of 200 = 2 slots.
        let mut w = WTinyLfu::new(200, 4096, true);
        let mut sim = Sim::new(200);
        for k in 0..200 {
            sim.access(&mut w, k);
        }
        for _ in 0..3 {
            sim.miss_only(&mut w, 500); // 500 is popular before it is cached
        }
        // The window (2 slots) holds 198 and 199; they lose their duels
        // (equal counts), then 500 is the candidate.
        for k in 500..503 {
            sim.access(&mut w, k);
        }
        assert!(sim.cached(500), "500 won its duel against main's victim");
        assert_eq!(w.nodes.get(sim.slot(500)).queue, PROBATION);
    }
}
