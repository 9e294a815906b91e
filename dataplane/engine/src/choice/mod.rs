//! Online policy choice: per volume, sampled shadow caches replay the live
//! request stream under every candidate eviction policy, and the engine
//! switches the volume to the policy whose shadow misses least, without
//! flushing the cache.
//!
//! - Sampling (`sample.rs`): SHARDS-style spatial sampling of granules (the
//!   smallest block size). The rate is chosen so that each shadow holds
//!   about [`TARGET_SLOTS`] granules (SHARDS' fixed-size variant), at most
//!   [`MAX_RATE`] of them, except that a cache no larger than a shadow is
//!   shadowed whole: memory is bounded whatever the cache size, and the CPU
//!   cost is a hash per granule plus `rate` of a cache lookup per shadow.
//! - Shadows (`shadow.rs`): each candidate's algorithm over the sampled
//!   granules, in a cache of `capacity * rate` granules.
//! - Decision: every window of sampled accesses (twice the shadow's size,
//!   at least [`MIN_WINDOW`]), each shadow's hits feed an
//!   exponentially weighted score (decay [`DECAY`] per window). When the
//!   best score beats the active policy's by more than [`MARGIN`] (hits, so
//!   that a point of hit ratio counts for as much on a cache that hits 10%
//!   of the time as the difference matters), two windows in a row, the
//!   engine installs the best policy ([`crate::Engine::set_eviction`]'s
//!   mechanism: the cached blocks stay and are announced to the new policy,
//!   least recently used first).

pub(crate) mod sample;
pub(crate) mod shadow;

use sample::Sampler;
use shadow::ShadowCache;

use crate::config::EvictionConfig;

/// Granules each shadow aims to hold.
pub const TARGET_SLOTS: u64 = 2048;
/// The highest sampling rate (small caches): above it the shadows would
/// cost more CPU than they are worth.
pub const MAX_RATE: f64 = 1.0 / 8.0;
/// Sampled accesses per decision window at least: fewer give the shadows
/// too little to tell policies apart.
pub const MIN_WINDOW: u32 = 256;
/// Relative score advantage a shadow needs to take over.
pub const MARGIN: f64 = 0.03;
/// Weight of the past score at each window's end.
pub const DECAY: f64 = 0.9;

/// Every policy a shadow can replay.
pub fn all_candidates() -> Vec<EvictionConfig> {
    vec![
        EvictionConfig::S3Fifo,
        EvictionConfig::TwoLevelLru,
        EvictionConfig::Arc,
        EvictionConfig::Sieve,
        EvictionConfig::WTinyLfu,
    ]
}

/// The switching rule of every online choice here (eviction policy, fill
/// floor): after a window, the best score must lead the active
/// candidate's by more than [`MARGIN`], and the same candidate must lead
/// two windows in a row (a switch costs the new candidate's warm-up).
#[derive(Debug, Default)]
pub(crate) struct LeadRule {
    /// The candidate that led in the last window, if any.
    leader: Option<usize>,
}

impl LeadRule {
    /// The candidate to switch to after a window with these `scores`
    /// (indexed like the candidates), if any.
    pub(crate) fn next(
        &mut self,
        scores: impl IntoIterator<Item = f64>,
        active: usize,
    ) -> Option<usize> {
        let mut current = 0.0;
        let mut best: Option<(usize, f64)> = None;
        for (i, s) in scores.into_iter().enumerate() {
            if i == active {
                current = s;
            }
            // The last of equal scores, as `Iterator::max_by` picks.
            if best.is_none_or(|(_, b)| s >= b) {
                best = Some((i, s));
            }
        }
        let (best, best_score) = best?;
        if best == active || best_score <= current * (1.0 + MARGIN) {
            self.leader = None;
            return None;
        }
        if self.leader != Some(best) {
            self.leader = Some(best);
            return None;
        }
        self.leader = None;
        Some(best)
    }
}

/// What the chooser reports (stats, RPC, simulator).
#[derive(Clone, Debug, PartialEq)]
pub struct ChoiceReport {
    /// The policy in use.
    pub active: &'static str,
    /// Times the policy was switched.
    pub switches: u64,
    /// Fraction of granules sampled.
    pub rate: f64,
    /// Granules each shadow holds.
    pub shadow_slots: u32,
    /// Per candidate: name and its shadow's miss ratio since the start.
    pub shadows: Vec<(&'static str, f64)>,
    /// Bytes held by the sampler, shadows and scores.
    pub memory_bytes: usize,
}

/// Shadow caches and the decision rule of one volume.
pub struct Chooser {
    sampler: Sampler,
    granule_shift: u32,
    shadows: Vec<ShadowCache>,
    scores: Vec<f64>,
    window_hits: Vec<u64>,
    active: usize,
    slots: u32,
    window: u32,
    seen_in_window: u32,
    accesses: u64,
    switches: u64,
    lead: LeadRule,
}

impl Chooser {
    /// A chooser for a cache of `capacity` bytes of `granule_shift`-sized
    /// granules, starting with `candidates[0]`.
    pub fn new(capacity: u64, granule_shift: u32, candidates: &[EvictionConfig]) -> Chooser {
        let granules = (capacity >> granule_shift).max(1);
        // A cache no larger than a shadow is shadowed whole: sampling it
        // would leave a few dozen granules per shadow, too few to rank
        // policies, and its full replay costs no more memory than a
        // sampled large one.
        let rate = if granules <= TARGET_SLOTS {
            1.0
        } else {
            (TARGET_SLOTS as f64 / granules as f64).min(MAX_RATE)
        };
        Chooser::with_rate(capacity, granule_shift, candidates, rate)
    }

    /// A chooser sampling `rate` of the granules.
    pub(crate) fn with_rate(
        capacity: u64,
        granule_shift: u32,
        candidates: &[EvictionConfig],
        rate: f64,
    ) -> Chooser {
        let granules = (capacity >> granule_shift).max(1);
        let sampler = Sampler::new(rate);
        let slots = ((granules as f64 * sampler.rate()).round() as u32).max(16);
        Chooser {
            sampler,
            granule_shift,
            shadows: candidates
                .iter()
                .map(|c| ShadowCache::new(c.clone(), slots))
                .collect(),
            scores: vec![0.0; candidates.len()],
            window_hits: vec![0; candidates.len()],
            active: 0,
            slots,
            // Long enough for the shadows to turn over about twice.
            window: (2 * slots).max(MIN_WINDOW),
            seen_in_window: 0,
            accesses: 0,
            switches: 0,
            lead: LeadRule::default(),
        }
    }

    /// The policy in use.
    pub fn active(&self) -> &EvictionConfig {
        &self.shadows[self.active].policy
    }

    /// Feeds one request's range; returns the policy to switch to, if the
    /// window just ended with another policy clearly ahead.
    pub fn observe(&mut self, offset: u64, len: u64) -> Option<EvictionConfig> {
        let first = offset >> self.granule_shift;
        let last = (offset + len.max(1) - 1) >> self.granule_shift;
        let mut decide = false;
        for g in first..=last {
            if !self.sampler.sampled(g) {
                continue;
            }
            self.accesses += 1;
            for (s, m) in self.shadows.iter_mut().zip(&mut self.window_hits) {
                if s.access(g as u32) {
                    *m += 1;
                }
            }
            self.seen_in_window += 1;
            decide |= self.seen_in_window >= self.window;
        }
        if decide {
            self.seen_in_window = 0;
            return self.decide();
        }
        None
    }

    fn decide(&mut self) -> Option<EvictionConfig> {
        for (score, h) in self.scores.iter_mut().zip(&mut self.window_hits) {
            *score = DECAY * *score + *h as f64;
            *h = 0;
        }
        let best = self.lead.next(self.scores.iter().copied(), self.active)?;
        self.active = best;
        self.switches += 1;
        Some(self.shadows[best].policy.clone())
    }

    /// The chooser's state for reports.
    pub fn report(&self, active: &'static str) -> ChoiceReport {
        let n = self.accesses.max(1) as f64;
        ChoiceReport {
            active,
            switches: self.switches,
            rate: self.sampler.rate(),
            shadow_slots: self.slots,
            shadows: self
                .shadows
                .iter()
                .map(|s| (crate::names::eviction_name(&s.policy), s.misses as f64 / n))
                .collect(),
            memory_bytes: self.memory_bytes(),
        }
    }

    /// Bytes of shadows, scores and counters.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Chooser>()
            + self.shadows.iter().map(|s| s.memory_bytes()).sum::<usize>()
            + self.scores.capacity() * 8
            + self.window_hits.capacity() * 8
    }
}

#[cfg(test)]
mod tests;
