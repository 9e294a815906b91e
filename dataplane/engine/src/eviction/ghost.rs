//! Ghost queues: identities (tags) of recently evicted blocks, without their
//! data, in FIFO order and bounded by the weight they stood for. S3-FIFO's
//! ghost queue and ARC's B1/B2 lists are ghosts.

use std::collections::VecDeque;

use crate::map::U32Map;

/// A FIFO of tags bounded by total weight.
#[derive(Clone, Debug)]
pub(crate) struct Ghost {
    /// Oldest first: (tag, sequence number at insertion).
    ring: VecDeque<(u32, u64)>,
    /// Live tags: the sequence number of their ring entry and their weight.
    /// A tag taken back out leaves a stale ring entry, skipped when it
    /// reaches the front.
    index: U32Map<(u64, u32)>,
    seq: u64,
    weight: u64,
    capacity: u64,
}

impl Ghost {
    pub fn new(capacity: u64) -> Ghost {
        Ghost {
            ring: VecDeque::new(),
            index: U32Map::new((0, 0)),
            seq: 0,
            weight: 0,
            capacity,
        }
    }

    /// Total weight of the live tags.
    pub fn weight(&self) -> u64 {
        self.weight
    }

    pub fn set_capacity(&mut self, capacity: u64) {
        self.capacity = capacity;
        self.trim(capacity);
    }

    /// Remembers `tag` as the newest ghost, forgetting the oldest beyond the
    /// capacity.
    pub fn insert(&mut self, tag: u32, weight: u32) {
        if self.capacity == 0 {
            return;
        }
        self.take(tag);
        self.seq += 1;
        self.ring.push_back((tag, self.seq));
        self.index.insert(tag, (self.seq, weight));
        self.weight += weight as u64;
        self.trim(self.capacity);
        if self.ring.len() > 2 * self.index.len() + 64 {
            // Many tags were taken back: drop their stale entries at once.
            let index = &self.index;
            self.ring
                .retain(|&(t, s)| index.get(t).is_some_and(|e| e.0 == s));
        }
    }

    /// Forgets `tag`; returns the weight it stood for if it was a ghost.
    pub fn take(&mut self, tag: u32) -> Option<u32> {
        let (_, w) = self.index.remove(tag)?;
        self.weight -= w as u64;
        Some(w)
    }

    /// Drops the oldest ghosts until at most `limit` weight is left.
    pub fn trim(&mut self, limit: u64) {
        while self.weight > limit {
            let Some((tag, seq)) = self.ring.pop_front() else {
                break;
            };
            if let Some((_, w)) = self.index.get(tag).filter(|e| e.0 == seq) {
                self.index.remove(tag);
                self.weight -= w as u64;
            }
        }
    }

    pub fn memory_bytes(&self) -> usize {
        self.ring.capacity() * 16 + self.index.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_bounded_by_weight_and_take() {
        let mut g = Ghost::new(3);
        for t in 0..5 {
            g.insert(t, 1);
        }
        assert_eq!(g.weight(), 3);
        assert_eq!(g.take(0), None, "oldest forgotten");
        assert_eq!(g.take(3), Some(1));
        assert_eq!(g.take(3), None, "taken once");
        g.insert(9, 2);
        assert_eq!(g.weight(), 3, "2 + 4's 1");
        assert_eq!(g.take(2), None);
        assert_eq!(g.take(4), Some(1));
        assert_eq!(g.take(9), Some(2));
    }
}
