//! A small open-addressing map from `u32` keys to `Copy` values.
//!
//! Used for the side tables that only a minority of blocks need (partial or
//! partially dirty extents, pins of in-flight I/O) and by policies. Unlike
//! `std::collections::HashMap` its memory use is exact and its behaviour does
//! not depend on a random seed.

const EMPTY: u32 = u32::MAX;

/// Open-addressing (linear probing, backward-shift deletion) map.
#[derive(Clone, Debug)]
pub(crate) struct U32Map<V: Copy> {
    keys: Vec<u32>,
    vals: Vec<V>,
    len: usize,
    fill: V,
}

#[inline]
pub(crate) fn mix32(key: u32) -> u32 {
    // Fibonacci hashing: the high half of the product is well mixed.
    ((key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32
}

impl<V: Copy> U32Map<V> {
    /// `fill` is the value stored in empty slots (never returned).
    pub fn new(fill: V) -> Self {
        U32Map {
            keys: Vec::new(),
            vals: Vec::new(),
            len: 0,
            fill,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Empties the map, keeping its memory.
    pub fn clear(&mut self) {
        if self.len > 0 {
            self.keys.fill(EMPTY);
            self.vals.fill(self.fill);
            self.len = 0;
        }
    }

    /// Bytes of the slot arrays.
    pub fn memory_bytes(&self) -> usize {
        self.keys.capacity() * 4 + self.vals.capacity() * std::mem::size_of::<V>()
    }

    #[inline]
    fn home(&self, key: u32) -> usize {
        mix32(key) as usize & (self.keys.len() - 1)
    }

    fn find(&self, key: u32) -> Option<usize> {
        if self.keys.is_empty() {
            return None;
        }
        let mask = self.keys.len() - 1;
        let mut i = self.home(key);
        loop {
            let k = self.keys[i];
            if k == key {
                return Some(i);
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    pub fn get(&self, key: u32) -> Option<V> {
        self.find(key).map(|i| self.vals[i])
    }

    pub fn get_mut(&mut self, key: u32) -> Option<&mut V> {
        self.find(key).map(move |i| &mut self.vals[i])
    }

    pub fn contains(&self, key: u32) -> bool {
        self.find(key).is_some()
    }

    /// Inserts or replaces.
    pub fn insert(&mut self, key: u32, val: V) {
        debug_assert_ne!(key, EMPTY);
        if (self.len + 1) * 8 > self.keys.len() * 7 {
            self.grow();
        }
        let mask = self.keys.len() - 1;
        let mut i = self.home(key);
        loop {
            let k = self.keys[i];
            if k == key {
                self.vals[i] = val;
                return;
            }
            if k == EMPTY {
                self.keys[i] = key;
                self.vals[i] = val;
                self.len += 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    pub fn remove(&mut self, key: u32) -> Option<V> {
        let mut hole = self.find(key)?;
        let out = self.vals[hole];
        let mask = self.keys.len() - 1;
        // Backward shift: pull later members of the probe run into the hole
        // so lookups never need tombstones.
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let k = self.keys[j];
            if k == EMPTY {
                break;
            }
            let h = self.home(k);
            let movable = if hole <= j {
                h <= hole || h > j
            } else {
                h <= hole && h > j
            };
            if movable {
                self.keys[hole] = k;
                self.vals[hole] = self.vals[j];
                hole = j;
            }
        }
        self.keys[hole] = EMPTY;
        self.vals[hole] = self.fill;
        self.len -= 1;
        Some(out)
    }

    fn grow(&mut self) {
        let cap = (self.keys.len() * 2).max(16);
        let keys = std::mem::replace(&mut self.keys, vec![EMPTY; cap]);
        let vals = std::mem::replace(&mut self.vals, vec![self.fill; cap]);
        self.len = 0;
        for (k, v) in keys.into_iter().zip(vals) {
            if k != EMPTY {
                self.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_matches_std() {
        let mut m = U32Map::new(0u64);
        let mut s = std::collections::BTreeMap::new();
        let mut x = 12345u32;
        for i in 0..20_000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let k = x % 3000;
            if i % 3 == 0 {
                assert_eq!(m.remove(k), s.remove(&k));
            } else {
                m.insert(k, i as u64);
                s.insert(k, i as u64);
            }
            assert_eq!(m.len(), s.len());
        }
        for k in 0..3000 {
            assert_eq!(m.get(k), s.get(&k).copied());
        }
    }
}
