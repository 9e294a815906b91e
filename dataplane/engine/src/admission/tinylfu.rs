//! `tinylfu`: frequency-based admission (TinyLFU as used by BiDiFilter 3.1).
//!
//! A count-min sketch of 4 rows with 4-bit counters (16 per `u64`) estimates
//! how often each granule was requested. After `sample_size` increments every
//! counter is halved, so old popularity fades. A candidate is admitted when
//! its estimate is at least the would-be victim's; equal estimates admit or
//! reject according to `admit_on_tie` (BiDiFilter 3.4 admits: it favours
//! recency, while rejecting saves cache writes).

use super::{AdmissionCounters, AdmissionPolicy, Candidate};
use crate::plan::Op;
use crate::sketch::CountMin;

/// Granules counted per request at most: a 1 MiB request of 32 KiB granules.
const MAX_GRANULES_PER_REQUEST: u64 = 32;

/// Count-min sketch admission.
#[derive(Clone, Debug)]
pub struct TinyLfu {
    sketch: CountMin,
    admit_on_tie: bool,
    granule_shift: u32,
    admitted: u64,
    rejected: u64,
}

impl TinyLfu {
    /// `width` counters per row (rounded up to a power of two, at least 64).
    pub fn new(width: u32, sample_size: u32, admit_on_tie: bool, granule_shift: u32) -> TinyLfu {
        TinyLfu {
            sketch: CountMin::new(width, sample_size),
            admit_on_tie,
            granule_shift,
            admitted: 0,
            rejected: 0,
        }
    }

    /// Frequency estimate of a granule.
    pub fn estimate(&self, granule: u64) -> u32 {
        self.sketch.estimate(granule)
    }
}

impl AdmissionPolicy for TinyLfu {
    fn name(&self) -> &'static str {
        "tinylfu"
    }

    fn on_request(&mut self, _op: Op, offset: u64, len: u64) {
        let first = offset >> self.granule_shift;
        let last = (offset + len.max(1) - 1) >> self.granule_shift;
        for g in first..=last.min(first + MAX_GRANULES_PER_REQUEST - 1) {
            self.sketch.increment(g);
        }
    }

    fn admit(&mut self, candidate: &Candidate, victim: Option<u64>) -> bool {
        let ok = match victim {
            None => true,
            Some(v) => {
                let c = self.estimate(candidate.offset >> self.granule_shift);
                let v = self.estimate(v >> self.granule_shift);
                c > v || (c == v && self.admit_on_tie)
            }
        };
        if ok {
            self.admitted += 1;
        } else {
            self.rejected += 1;
        }
        ok
    }

    fn metadata_bytes(&self) -> usize {
        self.sketch.memory_bytes()
    }

    fn counters(&self) -> AdmissionCounters {
        AdmissionCounters {
            admitted: self.admitted,
            rejected: self.rejected,
            retunes: self.sketch.halvings(),
            parameter: self.sketch.sample_size() as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(granule: u64) -> Candidate {
        Candidate {
            op: Op::Read,
            offset: granule << 15,
            size: 32 << 10,
        }
    }

    #[test]
    fn frequent_candidate_beats_rare_victim_and_ties_follow_config() {
        let mut t = TinyLfu::new(1024, 1 << 20, true, 15);
        for _ in 0..5 {
            t.on_request(Op::Read, 1 << 15, 4096);
        }
        t.on_request(Op::Read, 2 << 15, 4096);
        assert!(t.admit(&cand(1), Some(2 << 15)));
        assert!(!t.admit(&cand(2), Some(1 << 15)));
        assert!(t.admit(&cand(3), Some(4 << 15)), "tie admits");
        let mut strict = TinyLfu::new(1024, 1 << 20, false, 15);
        assert!(!strict.admit(&cand(3), Some(4 << 15)), "tie rejects");
        assert!(strict.admit(&cand(3), None), "free space admits");
    }
}
