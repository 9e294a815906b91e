//! Admission: whether a missed block is worth cache space.
//!
//! Every policy implements [`AdmissionPolicy`], lives in its own file and
//! keeps its own counters; [`tests`](self#testing) run each one through the
//! same harness. Identities are *granules*: volume offsets divided by the
//! smallest block size, so a policy's memory does not depend on block sizes.

mod always;
mod nhit;
mod size_aware;
mod tinylfu;

pub use always::Always;
pub use nhit::NHit;
pub use size_aware::SizeAware;
pub use tinylfu::TinyLfu;

use crate::config::{AdmissionConfig, Config};
use crate::plan::Op;

/// A block the engine would allocate for a miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The request's operation.
    pub op: Op,
    /// Volume offset of the block.
    pub offset: u64,
    /// Block size in bytes.
    pub size: u32,
}

/// What a policy reports about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AdmissionCounters {
    /// Candidates admitted.
    pub admitted: u64,
    /// Candidates rejected.
    pub rejected: u64,
    /// Times the policy re-tuned its parameter (size-aware).
    pub retunes: u64,
    /// The policy's current parameter, if it has one (size-aware: `c`).
    pub parameter: f64,
}

/// Decides whether a missed block is inserted into the cache.
///
/// Contract:
/// - The engine calls [`on_request`](Self::on_request) exactly once per
///   planned request (not for retried or rejected requests), before any
///   [`admit`](Self::admit) call of that request.
/// - The engine calls `admit` once per block Algorithm 2 proposes for a miss,
///   in request order. `victim` is the volume offset of the block that would
///   be evicted to make room (the global LRU tail), or `None` when the cache
///   has free space.
/// - A policy MUST be deterministic: the same calls give the same answers
///   (no clocks, no random seeds, no hash-map iteration order).
/// - A policy MUST NOT assume an admitted block gets cached: the eviction
///   policy may still decline, or no space may be reclaimable.
/// - A policy MUST bound its memory by its configuration, never by the number
///   of distinct blocks seen, and MUST report it in
///   [`metadata_bytes`](Self::metadata_bytes).
/// - `admit` MUST be O(1) amortised; periodic work (halving, re-tuning)
///   MUST be amortised over at least as many calls as it costs.
pub trait AdmissionPolicy: Send {
    /// Short name for logs and reports (`always`, `nhit`, `tinylfu`, `size-aware`).
    fn name(&self) -> &'static str;
    /// Sees every planned request.
    fn on_request(&mut self, op: Op, offset: u64, len: u64);
    /// Whether to insert `candidate`.
    fn admit(&mut self, candidate: &Candidate, victim: Option<u64>) -> bool;
    /// Bytes of memory the policy holds.
    fn metadata_bytes(&self) -> usize;
    /// The policy's counters.
    fn counters(&self) -> AdmissionCounters;
}

/// Builds the policy `config` selects.
pub fn build(config: &Config) -> Box<dyn AdmissionPolicy> {
    let min_block = *config.block_sizes.iter().min().expect("validated");
    let granule_shift = min_block.trailing_zeros();
    match &config.admission {
        AdmissionConfig::Always => Box::new(Always::default()),
        AdmissionConfig::NHit { n, table_slots } => {
            Box::new(NHit::new(*n, *table_slots, granule_shift))
        }
        AdmissionConfig::TinyLfu {
            width,
            sample_size,
            admit_on_tie,
        } => Box::new(TinyLfu::new(
            *width,
            *sample_size,
            *admit_on_tie,
            granule_shift,
        )),
        AdmissionConfig::SizeAware(s) => {
            let groups = config.capacity / config.group_size as u64;
            let capacity = groups * config.group_size as u64;
            Box::new(SizeAware::new(s.clone(), capacity, granule_shift))
        }
    }
}

#[cfg(test)]
mod tests {
    //! The harness every policy runs through.
    use super::*;
    use crate::config::SizeAwareConfig;

    fn policies() -> Vec<Box<dyn AdmissionPolicy>> {
        let g = 15; // 32 KiB granules
        vec![
            Box::new(Always::default()),
            Box::new(NHit::new(2, 1024, g)),
            Box::new(TinyLfu::new(1024, 10_000, true, g)),
            Box::new(SizeAware::new(
                SizeAwareConfig {
                    window: 512,
                    retune_interval: 1000,
                    ..SizeAwareConfig::default()
                },
                64 << 20,
                g,
            )),
        ]
    }

    fn cand(offset: u64) -> Candidate {
        Candidate {
            op: Op::Read,
            offset,
            size: 32 << 10,
        }
    }

    #[test]
    fn deterministic_and_bounded() {
        for mk in 0..policies().len() {
            let run = || {
                let mut p = policies().swap_remove(mk);
                let mut answers = Vec::new();
                let mut x = 1u64;
                for i in 0..20_000u64 {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    // A hot set of 64 blocks and a cold tail.
                    let blk = if x >> 60 < 12 {
                        (x >> 32) % 64
                    } else {
                        (x >> 20) % 100_000
                    };
                    let off = blk << 15;
                    p.on_request(Op::Read, off, 32 << 10);
                    let victim = if i % 3 == 0 {
                        None
                    } else {
                        Some(((x >> 8) % 100_000) << 15)
                    };
                    answers.push(p.admit(&cand(off), victim));
                }
                let c = p.counters();
                assert_eq!(c.admitted + c.rejected, 20_000, "{}", p.name());
                assert!(p.metadata_bytes() < 8 << 20, "{}", p.name());
                answers
            };
            assert_eq!(run(), run(), "policy {mk} is not deterministic");
        }
    }

    #[test]
    fn admit_when_cache_has_room_or_hot() {
        for mut p in policies() {
            // A block seen many times is admitted by every policy.
            let mut admitted = false;
            for _ in 0..16 {
                p.on_request(Op::Read, 0, 32 << 10);
                admitted |= p.admit(&cand(0), Some(1 << 30));
            }
            assert!(admitted, "{} never admits a hot block", p.name());
        }
    }
}
