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

const ROWS: usize = 4;
const SEEDS: [u64; ROWS] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0xD6E8_FEB8_6659_FD93,
];
/// Granules counted per request at most: a 1 MiB request of 32 KiB granules.
const MAX_GRANULES_PER_REQUEST: u64 = 32;

/// Count-min sketch admission.
#[derive(Clone, Debug)]
pub struct TinyLfu {
    /// `ROWS` rows of `width` 4-bit counters, row after row.
    words: Vec<u64>,
    width_mask: u64,
    sample_size: u32,
    increments: u32,
    admit_on_tie: bool,
    granule_shift: u32,
    admitted: u64,
    rejected: u64,
    halvings: u64,
}

impl TinyLfu {
    /// `width` counters per row (rounded up to a power of two, at least 64).
    pub fn new(width: u32, sample_size: u32, admit_on_tie: bool, granule_shift: u32) -> TinyLfu {
        let width = width.max(64).next_power_of_two() as usize;
        TinyLfu {
            words: vec![0; ROWS * width / 16],
            width_mask: width as u64 - 1,
            sample_size: sample_size.max(1),
            increments: 0,
            admit_on_tie,
            granule_shift,
            admitted: 0,
            rejected: 0,
            halvings: 0,
        }
    }

    #[inline]
    fn counter(&self, row: usize, granule: u64) -> (usize, u32) {
        let h = (granule ^ (row as u64) << 59).wrapping_mul(SEEDS[row]);
        let i = ((h >> 32) & self.width_mask) as usize;
        let width = self.width_mask as usize + 1;
        let bit = row * width + i;
        (bit / 16, (bit % 16) as u32 * 4)
    }

    /// Frequency estimate of a granule: the smallest of its counters.
    pub fn estimate(&self, granule: u64) -> u32 {
        (0..ROWS)
            .map(|r| {
                let (w, s) = self.counter(r, granule);
                ((self.words[w] >> s) & 0xF) as u32
            })
            .min()
            .unwrap_or(0)
    }

    fn increment(&mut self, granule: u64) {
        for r in 0..ROWS {
            let (w, s) = self.counter(r, granule);
            if (self.words[w] >> s) & 0xF < 15 {
                self.words[w] += 1 << s;
            }
        }
        self.increments += 1;
        if self.increments >= self.sample_size {
            self.increments = 0;
            self.halvings += 1;
            for w in &mut self.words {
                *w = (*w >> 1) & 0x7777_7777_7777_7777;
            }
        }
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
            self.increment(g);
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
        self.words.capacity() * 8
    }

    fn counters(&self) -> AdmissionCounters {
        AdmissionCounters {
            admitted: self.admitted,
            rejected: self.rejected,
            retunes: self.halvings,
            parameter: self.sample_size as f64,
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
    fn counts_saturate_and_halve() {
        let mut t = TinyLfu::new(64, 1000, true, 15);
        for _ in 0..20 {
            t.on_request(Op::Read, 7 << 15, 4096);
        }
        assert_eq!(t.estimate(7), 15);
        t.sample_size = 21;
        t.on_request(Op::Read, 7 << 15, 4096);
        assert_eq!(t.estimate(7), 7, "halved after sample_size increments");
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
