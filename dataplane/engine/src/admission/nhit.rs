//! `nhit(N)`: promote a block on its N-th miss (io-caches-fast-devices 5.2;
//! `nhit-2` balances load between a fast cache and a fast backend).
//!
//! Miss counts live in a direct-mapped table of `(granule, count)` pairs: a
//! colliding block takes the slot over, which only delays promotion, so the
//! memory is fixed by `table_slots`.

use super::{AdmissionCounters, AdmissionPolicy, Candidate};
use crate::map::mix32;
use crate::plan::Op;

/// Admits a candidate after `n` misses.
#[derive(Clone, Debug)]
pub struct NHit {
    n: u32,
    /// `granule << 32 | count`; granule `u32::MAX` marks an empty slot.
    table: Vec<u64>,
    granule_shift: u32,
    admitted: u64,
    rejected: u64,
}

const EMPTY: u64 = (u32::MAX as u64) << 32;

impl NHit {
    /// `table_slots` must be a power of two.
    pub fn new(n: u32, table_slots: u32, granule_shift: u32) -> NHit {
        NHit {
            n: n.max(1),
            table: vec![EMPTY; table_slots.max(1).next_power_of_two() as usize],
            granule_shift,
            admitted: 0,
            rejected: 0,
        }
    }
}

impl AdmissionPolicy for NHit {
    fn name(&self) -> &'static str {
        "nhit"
    }

    fn on_request(&mut self, _op: Op, _offset: u64, _len: u64) {}

    fn admit(&mut self, candidate: &Candidate, _victim: Option<u64>) -> bool {
        let granule = (candidate.offset >> self.granule_shift) as u32;
        let slot = mix32(granule) as usize & (self.table.len() - 1);
        let e = self.table[slot];
        let count = if (e >> 32) as u32 == granule {
            (e as u32).saturating_add(1)
        } else {
            1
        };
        if count >= self.n {
            // Start over: a block evicted later must earn its place again.
            self.table[slot] = EMPTY;
            self.admitted += 1;
            true
        } else {
            self.table[slot] = (granule as u64) << 32 | count as u64;
            self.rejected += 1;
            false
        }
    }

    fn metadata_bytes(&self) -> usize {
        self.table.capacity() * 8
    }

    fn counters(&self) -> AdmissionCounters {
        AdmissionCounters {
            admitted: self.admitted,
            rejected: self.rejected,
            parameter: self.n as f64,
            ..AdmissionCounters::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_on_the_nth_miss() {
        let mut p = NHit::new(3, 64, 15);
        let c = Candidate {
            op: Op::Read,
            offset: 5 << 15,
            size: 32 << 10,
        };
        assert!(!p.admit(&c, None));
        assert!(!p.admit(&c, None));
        assert!(p.admit(&c, None));
        assert!(!p.admit(&c, None), "count restarts after admission");
        let mut one = NHit::new(1, 64, 15);
        assert!(one.admit(&c, None));
    }
}
