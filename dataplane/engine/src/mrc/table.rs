//! The sampled blocks' last access times: an open-addressing table from a
//! block's hash to its timestamp.
//!
//! Written here rather than taken from `std` so that its memory is exact
//! (the SHARDS state has a byte budget) and its behaviour has no random
//! seed. The keys are already `mix`ed, so their low bits pick the home slot
//! directly (the high bits are not uniform: fixed-size sampling keeps the
//! smallest hashes).

/// Marks an empty slot in `times` (timestamps stay below 2^31).
const EMPTY: u32 = u32::MAX;

/// Linear probing with backward-shift deletion (no tombstones), at most 3/4
/// full.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyTable {
    keys: Vec<u64>,
    times: Vec<u32>,
    len: usize,
}

impl KeyTable {
    /// A table that holds `n` keys without growing.
    pub fn with_capacity(n: usize) -> Self {
        let mut t = KeyTable::default();
        if n > 0 {
            t.resize(slots_for(n));
        }
        t
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn memory_bytes(&self) -> usize {
        self.keys.capacity() * 8 + self.times.capacity() * 4
    }

    #[inline]
    fn mask(&self) -> usize {
        self.keys.len() - 1
    }

    fn find(&self, key: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mut i = key as usize & self.mask();
        loop {
            if self.times[i] == EMPTY {
                return None;
            }
            if self.keys[i] == key {
                return Some(i);
            }
            i = (i + 1) & self.mask();
        }
    }

    pub fn get(&self, key: u64) -> Option<u32> {
        self.find(key).map(|i| self.times[i])
    }

    /// Inserts `key` or replaces its time.
    pub fn insert(&mut self, key: u64, time: u32) {
        debug_assert_ne!(time, EMPTY);
        if self.keys.is_empty() || (self.len + 1) * 4 > self.keys.len() * 3 {
            self.resize((self.keys.len() * 2).max(16));
        }
        let mut i = key as usize & self.mask();
        loop {
            if self.times[i] == EMPTY {
                self.keys[i] = key;
                self.times[i] = time;
                self.len += 1;
                return;
            }
            if self.keys[i] == key {
                self.times[i] = time;
                return;
            }
            i = (i + 1) & self.mask();
        }
    }

    pub fn remove(&mut self, key: u64) -> Option<u32> {
        let mut hole = self.find(key)?;
        let out = self.times[hole];
        let mask = self.mask();
        // Pull later members of the probe run back into the hole, so that
        // a lookup can stop at the first empty slot.
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if self.times[j] == EMPTY {
                break;
            }
            let home = self.keys[j] as usize & mask;
            // The entry at j may move to the hole unless its home lies
            // cyclically in (hole, j].
            let stays = if hole < j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.keys[hole] = self.keys[j];
                self.times[hole] = self.times[j];
                hole = j;
            }
        }
        self.times[hole] = EMPTY;
        self.len -= 1;
        Some(out)
    }

    /// Calls `f` on every stored time (compaction renumbers them).
    pub fn for_each_time(&mut self, mut f: impl FnMut(&mut u32)) {
        for t in self.times.iter_mut().filter(|t| **t != EMPTY) {
            f(t);
        }
    }

    fn resize(&mut self, slots: usize) {
        let keys = std::mem::replace(&mut self.keys, vec![0; slots]);
        let times = std::mem::replace(&mut self.times, vec![EMPTY; slots]);
        self.len = 0;
        for (k, t) in keys.into_iter().zip(times) {
            if t != EMPTY {
                self.insert(k, t);
            }
        }
    }
}

/// The power-of-two slot count that holds `n` keys at most 3/4 full.
fn slots_for(n: usize) -> usize {
    (n * 4).div_ceil(3).next_power_of_two().max(16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn behaves_like_a_map() {
        let mut t = KeyTable::default();
        let mut m = BTreeMap::new();
        let mut x = 99u64;
        for i in 0..50_000u32 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Few distinct low bits: long probe runs that wrap around.
            let k = (x >> 40) % 5_000 * 4096;
            if i % 3 == 0 {
                assert_eq!(t.remove(k), m.remove(&k));
            } else {
                t.insert(k, i);
                m.insert(k, i);
            }
            assert_eq!(t.len(), m.len());
        }
        for k in (0..5_000u64).map(|k| k * 4096) {
            assert_eq!(t.get(k), m.get(&k).copied());
        }
    }

    #[test]
    fn capacity_is_honoured() {
        let mut t = KeyTable::with_capacity(16_384);
        let bytes = t.memory_bytes();
        assert_eq!(bytes, 32_768 * 12);
        for k in 0..16_384u64 {
            t.insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 1);
        }
        assert_eq!(t.memory_bytes(), bytes);
    }
}
