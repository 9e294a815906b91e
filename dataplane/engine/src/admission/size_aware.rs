//! `size-aware`: SACache's admission filter (SACache section 3.1).
//!
//! A candidate of `size` bytes is admitted when its recent visit count `K`
//! reaches `v(size) / v(c)`, with `v(s) = s / ((t_s - t_c) + (k_s - k_c) s)`
//! (SACache Eq. 2; the benefit bound `e` cancels in the ratio). Large blocks
//! must therefore be requested more often than small ones before they take
//! cache space. Visit counts live in a FIFO of the `fifo_len` most recent
//! missed identities; an admitted identity leaves the FIFO.
//!
//! `c` is re-tuned every `retune_interval` requests: the last `window`
//! requests are replayed through a shadow LRU cache (with its own visit
//! counter) for candidate values of `c`, and the value with the lowest
//! modelled access time per byte wins. The search is SACache's greedy
//! log-space search (Appendix A): `search_points` values evenly spaced in
//! `log c` over `[1, capacity]`, then `search_rounds - 1` more rounds over a
//! range half as wide centred on the best value so far (the paper's text
//! halves the range in log space; we follow the text rather than the
//! pseudo-code's linear bounds).
//!
//! Identities are granules (volume offset / smallest block size): the
//! shadow cache replays requests as objects of the request's size, the real
//! filter judges candidate blocks of the block's size.

use super::{AdmissionCounters, AdmissionPolicy, Candidate};
use crate::config::SizeAwareConfig;
use crate::lru::{List, NIL};
use crate::map::U32Map;
use crate::plan::Op;

/// Fixed-length FIFO of recent visit counts.
#[derive(Clone, Debug)]
struct VisitCounter {
    /// granule -> (count, sequence number of its FIFO record)
    counts: U32Map<(u32, u32)>,
    /// (granule, sequence) in arrival order, as a ring.
    ring: Vec<(u32, u32)>,
    head: usize,
    len: usize,
    seq: u32,
}

impl VisitCounter {
    fn new(len: u32) -> VisitCounter {
        VisitCounter {
            counts: U32Map::new((0, 0)),
            ring: vec![(0, 0); len as usize],
            head: 0,
            len: 0,
            seq: 0,
        }
    }

    fn clear(&mut self) {
        self.counts.clear();
        self.head = 0;
        self.len = 0;
    }

    /// Counts one more visit; returns the new count.
    fn visit(&mut self, id: u32) -> u32 {
        if let Some(e) = self.counts.get_mut(id) {
            e.0 += 1;
            return e.0;
        }
        if self.len == self.ring.len() {
            let (old, seq) = self.ring[self.head];
            if self.counts.get(old).is_some_and(|e| e.1 == seq) {
                self.counts.remove(old);
            }
            self.head = (self.head + 1) % self.ring.len();
            self.len -= 1;
        }
        self.seq = self.seq.wrapping_add(1);
        let tail = (self.head + self.len) % self.ring.len();
        self.ring[tail] = (id, self.seq);
        self.len += 1;
        self.counts.insert(id, (1, self.seq));
        1
    }

    /// Forgets `id` (it was admitted). Its ring record becomes stale.
    fn forget(&mut self, id: u32) {
        self.counts.remove(id);
    }

    fn memory_bytes(&self) -> usize {
        self.counts.memory_bytes() + self.ring.capacity() * 8
    }
}

#[derive(Clone, Copy, Debug)]
struct ShadowNode {
    size: u64,
    prev: u32,
    next: u32,
}

crate::lru::slice_links!(ShadowNode);

/// The shadow LRU cache and its scratch memory, reused across replays.
#[derive(Clone, Debug)]
struct Shadow {
    capacity: u64,
    nodes: Vec<ShadowNode>,
    ids: Vec<u32>,
    free: Vec<u32>,
    map: U32Map<u32>,
    lru: List,
    used: u64,
    visits: VisitCounter,
}

impl Shadow {
    fn reset(&mut self) {
        self.nodes.clear();
        self.ids.clear();
        self.free.clear();
        self.map.clear();
        self.lru = List::new();
        self.used = 0;
        self.visits.clear();
    }

    fn memory_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<ShadowNode>()
            + self.ids.capacity() * 4
            + self.free.capacity() * 4
            + self.map.memory_bytes()
            + self.visits.memory_bytes()
    }
}

/// SACache admission.
#[derive(Clone, Debug)]
pub struct SizeAware {
    cfg: SizeAwareConfig,
    capacity: u64,
    granule_shift: u32,
    c: f64,
    visits: VisitCounter,
    /// Recent (granule, request length) pairs, as a ring.
    window: Vec<(u32, u32)>,
    window_head: usize,
    window_len: usize,
    since_retune: u32,
    shadow: Shadow,
    admitted: u64,
    rejected: u64,
    retunes: u64,
}

impl SizeAware {
    /// `capacity` is the cache size in bytes (the upper bound of `c`).
    pub fn new(cfg: SizeAwareConfig, capacity: u64, granule_shift: u32) -> SizeAware {
        let shadow_capacity = if cfg.shadow_capacity == 0 {
            capacity
        } else {
            cfg.shadow_capacity
        };
        SizeAware {
            visits: VisitCounter::new(cfg.fifo_len),
            window: vec![(0, 0); cfg.window as usize],
            window_head: 0,
            window_len: 0,
            since_retune: 0,
            shadow: Shadow {
                capacity: shadow_capacity,
                nodes: Vec::new(),
                ids: Vec::new(),
                free: Vec::new(),
                map: U32Map::new(NIL),
                lru: List::new(),
                used: 0,
                visits: VisitCounter::new(cfg.fifo_len),
            },
            // Until the first re-tuning, c = capacity admits any block on its
            // first miss (v(size) < v(capacity)).
            c: capacity.max(1) as f64,
            capacity: capacity.max(1),
            granule_shift,
            cfg,
            admitted: 0,
            rejected: 0,
            retunes: 0,
        }
    }

    /// The current parameter `c` in bytes.
    pub fn c(&self) -> f64 {
        self.c
    }

    fn v(&self, s: f64) -> f64 {
        let dt = self.cfg.core_latency_ns - self.cfg.cache_latency_ns;
        let dk = 1.0 / self.cfg.core_bytes_per_ns - 1.0 / self.cfg.cache_bytes_per_ns;
        s / (dt + dk * s)
    }

    /// Visits a block of `size` bytes needs to be admitted under `c`.
    pub fn threshold(&self, size: f64, c: f64) -> f64 {
        self.v(size) / self.v(c)
    }

    /// Modelled access time per byte of the recorded window under `c`.
    fn replay(&mut self, c: f64) -> f64 {
        let cfg = &self.cfg;
        let (ts, tc) = (cfg.core_latency_ns, cfg.cache_latency_ns);
        let (ks, kc) = (1.0 / cfg.core_bytes_per_ns, 1.0 / cfg.cache_bytes_per_ns);
        let vc = self.v(c);
        self.shadow.reset();
        let (mut t, mut s) = (0.0f64, 0.0f64);
        for i in 0..self.window_len {
            let (id, len) = self.window[(self.window_head + i) % self.window.len()];
            let size = len as u64;
            s += size as f64;
            let sh = &mut self.shadow;
            if let Some(n) = sh.map.get(id) {
                t += tc + kc * size as f64;
                sh.lru.move_to_front(&mut sh.nodes[..], n);
                continue;
            }
            t += ts + ks * size as f64;
            let k = sh.visits.visit(id);
            let vs = {
                let dt = ts - tc;
                let dk = ks - kc;
                size as f64 / (dt + dk * size as f64)
            };
            if (k as f64) < vs / vc || size > sh.capacity {
                continue;
            }
            sh.visits.forget(id);
            while sh.used + size > sh.capacity {
                let victim = sh.lru.tail;
                sh.lru.remove(&mut sh.nodes[..], victim);
                sh.used -= sh.nodes[victim as usize].size;
                sh.map.remove(sh.ids[victim as usize]);
                sh.free.push(victim);
            }
            let node = ShadowNode {
                size,
                prev: NIL,
                next: NIL,
            };
            let n = match sh.free.pop() {
                Some(n) => {
                    sh.nodes[n as usize] = node;
                    sh.ids[n as usize] = id;
                    n
                }
                None => {
                    sh.nodes.push(node);
                    sh.ids.push(id);
                    sh.nodes.len() as u32 - 1
                }
            };
            sh.lru.push_front(&mut sh.nodes[..], n);
            sh.map.insert(id, n);
            sh.used += size;
        }
        if s == 0.0 {
            0.0
        } else {
            t / s
        }
    }

    /// SACache Appendix A in log space.
    fn retune(&mut self) {
        let top = (self.capacity as f64).ln();
        let (mut lo, mut hi) = (0.0f64, top);
        let mut best: Option<(f64, f64)> = None; // (score, log c)
        let points = self.cfg.search_points.max(2);
        for _ in 0..self.cfg.search_rounds {
            for i in 0..points {
                let x = lo + (hi - lo) * i as f64 / (points - 1) as f64;
                let score = self.replay(x.exp());
                if best.is_none_or(|(b, _)| score < b) {
                    best = Some((score, x));
                }
            }
            let x = best.expect("at least two points").1;
            let half = (hi - lo) / 4.0;
            lo = (x - half).max(0.0);
            hi = (x + half).min(top);
        }
        if let Some((_, x)) = best {
            self.c = x.exp();
        }
        self.retunes += 1;
    }
}

impl AdmissionPolicy for SizeAware {
    fn name(&self) -> &'static str {
        "size-aware"
    }

    fn on_request(&mut self, _op: Op, offset: u64, len: u64) {
        let rec = (
            (offset >> self.granule_shift) as u32,
            len.min(u32::MAX as u64) as u32,
        );
        if self.window_len == self.window.len() {
            self.window[self.window_head] = rec;
            self.window_head = (self.window_head + 1) % self.window.len();
        } else {
            let i = (self.window_head + self.window_len) % self.window.len();
            self.window[i] = rec;
            self.window_len += 1;
        }
        self.since_retune += 1;
        if self.since_retune >= self.cfg.retune_interval {
            self.since_retune = 0;
            self.retune();
        }
    }

    fn admit(&mut self, candidate: &Candidate, _victim: Option<u64>) -> bool {
        let id = (candidate.offset >> self.granule_shift) as u32;
        let k = self.visits.visit(id);
        if k as f64 >= self.threshold(candidate.size as f64, self.c) {
            self.visits.forget(id);
            self.admitted += 1;
            true
        } else {
            self.rejected += 1;
            false
        }
    }

    fn metadata_bytes(&self) -> usize {
        self.visits.memory_bytes() + self.window.capacity() * 8 + self.shadow.memory_bytes()
    }

    fn counters(&self) -> AdmissionCounters {
        AdmissionCounters {
            admitted: self.admitted,
            rejected: self.rejected,
            retunes: self.retunes,
            parameter: self.c,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(capacity: u64) -> SizeAware {
        SizeAware::new(
            SizeAwareConfig {
                fifo_len: 64,
                window: 4096,
                retune_interval: 4096,
                ..SizeAwareConfig::default()
            },
            capacity,
            12,
        )
    }

    #[test]
    fn threshold_grows_with_size() {
        let p = policy(1 << 30);
        let c = 64.0 * 1024.0;
        assert!(p.threshold(32768.0, c) < p.threshold(262144.0, c));
        assert!((p.threshold(c, c) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn visit_counter_is_a_bounded_fifo() {
        let mut v = VisitCounter::new(2);
        assert_eq!(v.visit(1), 1);
        assert_eq!(v.visit(1), 2);
        v.visit(2);
        v.visit(3); // pushes 1 out
        assert_eq!(v.visit(1), 1);
        v.forget(1);
        assert_eq!(v.visit(1), 1);
    }

    #[test]
    fn retuning_prefers_small_c_when_large_objects_pollute() {
        // Small hot objects re-requested constantly, large objects scanned
        // once: admitting the large ones evicts the small ones.
        let mut p = policy(1 << 20);
        let mut large = 10_000u64;
        for i in 0..4096u64 {
            if i % 2 == 0 {
                p.on_request(Op::Read, (i / 2 % 16) << 12, 4096);
            } else {
                large += 64;
                p.on_request(Op::Read, large << 12, 256 << 10);
            }
        }
        assert_eq!(p.counters().retunes, 1);
        assert!(p.c() < (256u64 << 10) as f64, "c = {}", p.c());
        let big = Candidate {
            op: Op::Read,
            offset: 1 << 40,
            size: 256 << 10,
        };
        assert!(
            !p.admit(&big, None),
            "a single visit of a large block is not enough"
        );
    }
}
