//! The SHARDS sampler: which references are sampled, their exact reuse
//! distances among the sampled blocks, and fixed-size mode's threshold.

use std::collections::BinaryHeap;

use super::config::{ShardsConfig, ShardsConfigError};
use super::curve::Curve;
use super::hash::{limit_for_rate, mix, rate_of_limit};
use super::histogram::Histogram;
use super::table::KeyTable;
use super::timeline::Timeline;

/// Sampled references [`Shards::access_deferred`] keeps before it
/// processes them together.
const BATCH: usize = 32;

/// Timestamps for a sampler whose tracked blocks are not bounded, before
/// the first compaction (it then keeps at least twice the live count).
const UNBOUNDED_TIMELINE: u32 = 1024;

/// Builds one volume's miss-ratio curve from its block references by
/// SHARDS (Waldspurger et al., FAST'15): a block is sampled when the hash of
/// its number is at most a threshold, every reference to a sampled block
/// gets its exact LRU reuse distance among the sampled blocks, scaled by
/// 1/R, and the histogram of those distances gives the curve.
///
/// Deterministic: no clock, no randomness; the same references give the
/// same curve.
#[derive(Clone, Debug)]
pub struct Shards {
    config: ShardsConfig,
    /// A block is sampled when `mix(block) <= limit`.
    limit: u64,
    /// `limit`'s rate R; a sampled reference weighs 1/R.
    rate: f64,
    /// Tracked blocks (by hash) -> their last access time.
    table: KeyTable,
    timeline: Timeline,
    /// Fixed-size mode: the tracked hashes, largest on top (the next to go).
    largest: BinaryHeap<u64>,
    histogram: Histogram,
    references: u64,
    sampled: u64,
    /// Hashes of sampled references not processed yet, in order
    /// ([`Shards::access_deferred`]).
    pending: Vec<u64>,
    /// log2 of the block size, when it is a power of two.
    block_shift: Option<u32>,
}

impl Shards {
    /// A sampler for `config`.
    pub fn new(config: ShardsConfig) -> Result<Shards, ShardsConfigError> {
        config.validate()?;
        let limit = limit_for_rate(config.rate);
        let (table, timeline, largest) = match config.max_keys {
            // Everything a full sampler needs is allocated up front, so its
            // memory does not grow after construction.
            Some(k) => (
                KeyTable::with_capacity(k as usize),
                Timeline::with_capacity(k * 4),
                BinaryHeap::with_capacity(k as usize),
            ),
            None => (
                KeyTable::default(),
                Timeline::with_capacity(UNBOUNDED_TIMELINE),
                BinaryHeap::new(),
            ),
        };
        let buckets = config.max_buckets.map_or(usize::MAX, |b| b as usize);
        Ok(Shards {
            config,
            limit,
            rate: rate_of_limit(limit),
            table,
            timeline,
            largest,
            histogram: Histogram::new(buckets),
            references: 0,
            sampled: 0,
            pending: Vec::with_capacity(BATCH),
            block_shift: config
                .block_size
                .is_power_of_two()
                .then(|| config.block_size.trailing_zeros()),
        })
    }

    /// The exact (unsampled) LRU curve's builder, for `block_size` blocks.
    pub fn exact(block_size: u32) -> Shards {
        Shards::new(ShardsConfig::exact(block_size)).expect("exact configuration is valid")
    }

    /// Its configuration.
    pub fn config(&self) -> &ShardsConfig {
        &self.config
    }

    /// The current sampling rate R (it only falls, in fixed-size mode).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Block references seen.
    pub fn references(&self) -> u64 {
        self.references
    }

    /// Block references that were sampled.
    pub fn sampled_references(&self) -> u64 {
        self.sampled
    }

    /// Sampled blocks whose last access is tracked.
    pub fn tracked_blocks(&self) -> usize {
        self.table.len()
    }

    /// Estimated distinct blocks referenced, in bytes (exact without
    /// sampling).
    pub fn working_set_bytes(&self) -> u64 {
        (self.histogram.cold() * self.config.block_size as f64).round() as u64
    }

    /// Bytes of the whole state: this struct and everything it allocated.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.table.memory_bytes()
            + self.timeline.memory_bytes()
            + self.largest.capacity() * 8
            + self.histogram.memory_bytes()
            + self.pending.capacity() * 8
    }

    /// Every block overlapping `len` bytes at `offset`, in order.
    pub fn access_bytes(&mut self, offset: u64, len: u64) {
        for block in self.blocks_of(offset, len) {
            self.access(block);
        }
    }

    /// The numbers of the blocks overlapping `len` bytes at `offset`.
    fn blocks_of(&self, offset: u64, len: u64) -> std::ops::RangeInclusive<u64> {
        if len == 0 {
            #[allow(clippy::reversed_empty_ranges)]
            return 1..=0;
        }
        let last = offset.saturating_add(len) - 1;
        match self.block_shift {
            // Block sizes are powers of two in the engine: a shift, not a
            // division per reference.
            Some(s) => offset >> s..=last >> s,
            None => {
                let bs = u64::from(self.config.block_size);
                offset / bs..=last / bs
            }
        }
    }

    /// One reference to block number `block`.
    #[inline]
    pub fn access(&mut self, block: u64) {
        if let Some(h) = self.count(block) {
            self.sample(h);
        }
    }

    /// Counts a reference to `block`; its hash when the block is sampled.
    #[inline]
    fn count(&mut self, block: u64) -> Option<u64> {
        self.references += 1;
        let h = mix(block);
        (h <= self.limit).then_some(h)
    }

    /// [`Shards::access`], except that a sampled reference may wait: up
    /// to `BATCH` of them are processed together, their key-table slots
    /// fetched from memory at once rather than one miss after another. A
    /// cached volume's hit path calls this; everything read from the
    /// sampler reflects the references up to the last
    /// [`Shards::settle`]. The result is the same as `access`'s: each
    /// waiting hash is checked again against the threshold as it is
    /// processed, as `access` would have checked it then.
    #[inline]
    pub fn access_deferred(&mut self, block: u64) {
        let Some(h) = self.count(block) else {
            return;
        };
        self.pending.push(h);
        if self.pending.len() == BATCH {
            self.settle();
        }
    }

    /// Like [`Shards::access_bytes`], through [`Shards::access_deferred`].
    pub fn access_bytes_deferred(&mut self, offset: u64, len: u64) {
        for block in self.blocks_of(offset, len) {
            self.access_deferred(block);
        }
    }

    /// Processes the references [`Shards::access_deferred`] kept.
    pub fn settle(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        for &h in &pending {
            self.table.prefetch(h);
        }
        for &h in &pending {
            // The threshold may have fallen since (fixed-size mode).
            if h <= self.limit {
                self.sample(h);
            }
        }
        self.pending = pending;
        self.pending.clear();
    }

    fn sample(&mut self, h: u64) {
        self.sampled += 1;
        let weight = 1.0 / self.rate;
        if self.timeline.is_full() {
            self.compact();
        }
        if let Some(t) = self.table.get(h) {
            let distance = self.timeline.newer_than(t);
            self.timeline.remove(t);
            let now = self.timeline.push();
            self.table.insert(h, now);
            self.histogram.add(distance as f64 * weight, weight);
            return;
        }
        // A first reference: a block fixed-size mode dropped never comes
        // back, its hash stays above the threshold for good.
        self.histogram.add_cold(weight);
        if let Some(max) = self.config.max_keys {
            if let Some(cap) = self.config.rate_cap {
                if self.table.len() >= cap.keys as usize && self.rate > cap.rate {
                    self.cap_rate(cap.rate);
                    if h > self.limit {
                        return;
                    }
                }
            }
            if self.table.len() == max as usize {
                let top = *self.largest.peek().expect("a full sampler tracks blocks");
                if h > top {
                    // The newcomer has the largest hash: it is the one left
                    // out, and the threshold drops below it.
                    self.lower_limit(h);
                    return;
                }
                self.largest.pop();
                let t = self.table.remove(top).expect("heap and table agree");
                self.timeline.remove(t);
                self.lower_limit(top);
            }
            self.largest.push(h);
        }
        let now = self.timeline.push();
        self.table.insert(h, now);
    }

    /// Lowers the threshold to `rate`'s, dropping every tracked block
    /// above it (largest hash first, as fixed-size mode drops one).
    fn cap_rate(&mut self, rate: f64) {
        let limit = limit_for_rate(rate);
        while let Some(&top) = self.largest.peek() {
            if top <= limit {
                break;
            }
            self.largest.pop();
            let t = self.table.remove(top).expect("heap and table agree");
            self.timeline.remove(t);
        }
        self.limit = self.limit.min(limit);
        self.rate = rate_of_limit(self.limit);
    }

    /// From now on, sample only hashes below `h`.
    fn lower_limit(&mut self, h: u64) {
        self.limit = h.saturating_sub(1);
        self.rate = rate_of_limit(self.limit);
    }

    /// Renumbers the live timestamps densely, in order, when they ran out.
    fn compact(&mut self) {
        let timeline = &self.timeline;
        self.table.for_each_time(|t| *t = timeline.rank(*t));
        let live = self.timeline.live() as u64;
        let mut capacity = self.timeline.capacity() as u64;
        while live * 2 > capacity {
            capacity *= 2;
        }
        assert!(
            capacity <= super::timeline::MAX_CAPACITY as u64,
            "more than 2^30 sampled blocks tracked"
        );
        self.timeline.reset_dense(capacity as u32);
    }

    /// The miss-ratio curve so far.
    ///
    /// SHARDS_adj: the sampled references stand for `sum(1/R)` references,
    /// which differs from the references seen by chance (a few hot blocks
    /// in or out of the sample move it a lot). The difference is counted
    /// at distance 0, as hits at every size, as the paper adds it to the
    /// first bucket; it can be negative. Without sampling it is 0.
    pub fn curve(&self) -> Curve {
        let adjust = self.references as f64 - self.histogram.total();
        self.histogram
            .curve(self.references, adjust, self.config.block_size)
    }
}
