//! The order-statistic structure behind exact LRU stack distances.
//!
//! Every sampled access takes the next timestamp; a timestamp is "live"
//! while it is some tracked block's last access. A block's reuse distance
//! (distinct other blocks accessed since its previous access) is then the
//! number of live timestamps after its previous one: each block has exactly
//! one live timestamp, and those newer than the block's were accessed since.
//!
//! Live timestamps are one bit each; a Fenwick tree over the 64-bit words
//! counts them, so "live timestamps before t" costs one word popcount plus
//! O(log(capacity / 64)) tree steps, and marking or clearing one costs the
//! same. Timestamps run out after `capacity` accesses: the owner then
//! renumbers the live ones densely, in order (`rank` gives each its new
//! number), and calls `reset_dense`. With the capacity kept at least twice
//! the live count, that happens at most once per `capacity / 2` accesses, so
//! its O(live · log) cost is O(log) per access amortised.
//!
//! Why not a balanced tree keyed by time: it needs a node (keys, links,
//! subtree size) per tracked block; the bitmap costs 1 bit per timestamp
//! plus 4 bytes per 64, which leaves the byte budget to the blocks
//! themselves.

#[derive(Clone, Debug, Default)]
pub(crate) struct Timeline {
    /// Bit `t % 64` of word `t / 64` is set while timestamp `t` is live.
    words: Vec<u64>,
    /// Fenwick tree over the words' popcounts, 1-based: `tree[i]` sums the
    /// words `i - lowbit(i) .. i`.
    tree: Vec<u32>,
    /// The next timestamp to hand out.
    next: u32,
    live: u32,
}

/// Timestamps are `u32` and `EMPTY` in the key table is `u32::MAX`.
pub(crate) const MAX_CAPACITY: u32 = 1 << 31;

impl Timeline {
    /// Room for `capacity` timestamps (rounded up to a power of two, at
    /// least 64) before the first compaction.
    pub fn with_capacity(capacity: u32) -> Self {
        let mut t = Timeline::default();
        t.reset_dense(capacity);
        t
    }

    pub fn capacity(&self) -> u32 {
        (self.words.len() * 64) as u32
    }

    pub fn live(&self) -> u32 {
        self.live
    }

    pub fn is_full(&self) -> bool {
        self.next == self.capacity()
    }

    pub fn memory_bytes(&self) -> usize {
        self.words.capacity() * 8 + self.tree.capacity() * 4
    }

    /// Takes the next timestamp and marks it live. The caller compacts
    /// first when the timeline is full.
    pub fn push(&mut self) -> u32 {
        assert!(!self.is_full(), "timeline full: compact first");
        let t = self.next;
        self.words[(t / 64) as usize] |= 1 << (t % 64);
        self.add(t / 64, 1);
        self.next += 1;
        self.live += 1;
        t
    }

    /// Clears a live timestamp (its block was accessed again or dropped).
    pub fn remove(&mut self, t: u32) {
        let bit = 1u64 << (t % 64);
        let w = &mut self.words[(t / 64) as usize];
        debug_assert!(*w & bit != 0, "timestamp {t} is not live");
        *w &= !bit;
        self.add(t / 64, u32::MAX); // -1, wrapping
        self.live -= 1;
    }

    /// Live timestamps before `t`: `t`'s position in the dense renumbering.
    pub fn rank(&self, t: u32) -> u32 {
        let w = (t / 64) as usize;
        let below = self.words[w] & ((1u64 << (t % 64)) - 1);
        self.prefix(w) + below.count_ones()
    }

    /// Live timestamps after the live timestamp `t`.
    pub fn newer_than(&self, t: u32) -> u32 {
        self.live - self.rank(t) - 1
    }

    /// After the live timestamps were renumbered `0..live` in order: marks
    /// exactly those live, with room for `capacity` in all.
    pub fn reset_dense(&mut self, capacity: u32) {
        let capacity = capacity.clamp(64, MAX_CAPACITY).next_power_of_two();
        assert!(self.live < capacity, "more live timestamps than capacity");
        let n = (capacity / 64) as usize;
        self.words.clear();
        self.words.resize(n, 0);
        let full = (self.live / 64) as usize;
        self.words[..full].fill(u64::MAX);
        let rest = self.live % 64;
        if rest > 0 {
            self.words[full] = (1u64 << rest) - 1;
        }
        // Linear-time Fenwick construction: each node passes its sum up to
        // its parent once.
        self.tree.clear();
        self.tree.resize(n + 1, 0);
        for i in 1..=n {
            self.tree[i] += self.words[i - 1].count_ones();
            let parent = i + (i & i.wrapping_neg());
            if parent <= n {
                self.tree[parent] += self.tree[i];
            }
        }
        self.next = self.live;
    }

    /// Live timestamps in the words before word `w`.
    fn prefix(&self, w: usize) -> u32 {
        let mut i = w;
        let mut sum = 0u32;
        while i > 0 {
            sum += self.tree[i];
            i &= i - 1;
        }
        sum
    }

    fn add(&mut self, w: u32, delta: u32) {
        let n = self.words.len();
        let mut i = w as usize + 1;
        while i <= n {
            self.tree[i] = self.tree[i].wrapping_add(delta);
            i += i & i.wrapping_neg();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_follow_pushes_and_removals() {
        let mut t = Timeline::with_capacity(256);
        let stamps: Vec<u32> = (0..200).map(|_| t.push()).collect();
        assert_eq!(stamps[199], 199);
        for s in (0..200).step_by(3) {
            t.remove(s);
        }
        // Live: the 133 stamps that are not multiples of 3.
        assert_eq!(t.live(), 133);
        for s in (0..200u32).filter(|s| s % 3 != 0) {
            assert_eq!(t.rank(s), s - s / 3 - 1, "rank of {s}");
            assert_eq!(t.newer_than(s), 133 - t.rank(s) - 1);
        }
    }

    #[test]
    fn reset_dense_keeps_the_live_count() {
        let mut t = Timeline::with_capacity(64);
        for _ in 0..64 {
            t.push();
        }
        assert!(t.is_full());
        for s in 0..40 {
            t.remove(s);
        }
        t.reset_dense(256);
        assert_eq!((t.live(), t.capacity()), (24, 256));
        assert_eq!(t.rank(23), 23);
        assert_eq!(t.push(), 24);
        assert_eq!(t.newer_than(0), 24);
    }
}
