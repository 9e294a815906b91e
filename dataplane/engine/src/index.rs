//! The per-block-size index: block number -> slab slot.
//!
//! One open-addressing table of `u32` slot numbers per block size (AdaCache's
//! `H_B`). The key is not stored in the table: it is read from the slab entry
//! the slot number points at, so an index costs 4 bytes per slot. The table
//! size is not a power of two (`fastrange` maps a hash onto it) and grows by
//! half, so the load stays between 7/12 and 7/8 instead of halving on growth.

use crate::map::mix32;

const EMPTY: u32 = u32::MAX;

/// Index of one block size.
#[derive(Clone, Debug, Default)]
pub(crate) struct Index {
    slots: Vec<u32>,
    len: u32,
}

impl Index {
    pub fn new() -> Index {
        Index::default()
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn memory_bytes(&self) -> usize {
        self.slots.capacity() * 4
    }

    #[inline]
    fn home(&self, key: u32) -> usize {
        ((mix32(key) as u64 * self.slots.len() as u64) >> 32) as usize
    }

    #[inline]
    fn step(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// The slot holding `key`; `key_of` reads the key of a slab slot.
    #[inline]
    pub fn get(&self, key: u32, key_of: impl Fn(u32) -> u32) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mut i = self.home(key);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if key_of(s) == key {
                return Some(s);
            }
            i = self.step(i);
        }
    }

    /// Adds `slot` under `key`, which must not be present.
    pub fn insert(&mut self, key: u32, slot: u32, key_of: impl Fn(u32) -> u32) {
        if (self.len as usize + 1) * 8 > self.slots.len() * 7 {
            self.grow(&key_of);
        }
        let mut i = self.home(key);
        while self.slots[i] != EMPTY {
            debug_assert_ne!(key_of(self.slots[i]), key, "duplicate key");
            i = self.step(i);
        }
        self.slots[i] = slot;
        self.len += 1;
    }

    /// Removes `key`; returns its slot.
    pub fn remove(&mut self, key: u32, key_of: impl Fn(u32) -> u32) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mut hole = self.home(key);
        loop {
            let s = self.slots[hole];
            if s == EMPTY {
                return None;
            }
            if key_of(s) == key {
                break;
            }
            hole = self.step(hole);
        }
        let out = self.slots[hole];
        let mut j = hole;
        loop {
            j = self.step(j);
            let s = self.slots[j];
            if s == EMPTY {
                break;
            }
            let h = self.home(key_of(s));
            let movable = if hole <= j {
                h <= hole || h > j
            } else {
                h <= hole && h > j
            };
            if movable {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
        Some(out)
    }

    fn grow(&mut self, key_of: &impl Fn(u32) -> u32) {
        let cap = (self.slots.len() + self.slots.len() / 2).max(16);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; cap]);
        self.slots.shrink_to_fit();
        for s in old {
            if s != EMPTY {
                let mut i = self.home(key_of(s));
                while self.slots[i] != EMPTY {
                    i = self.step(i);
                }
                self.slots[i] = s;
            }
        }
    }

    /// Every slot number in the table.
    pub fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().copied().filter(|&s| s != EMPTY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_reference_map() {
        // keys[slot] plays the slab.
        let mut keys: Vec<u32> = Vec::new();
        let mut idx = Index::new();
        let mut reference = std::collections::BTreeMap::new();
        let mut x = 7u32;
        for i in 0..30_000u32 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let key = x % 5000;
            if i % 4 == 0 {
                let got = idx.remove(key, |s| keys[s as usize]);
                assert_eq!(got, reference.remove(&key));
            } else if let std::collections::btree_map::Entry::Vacant(v) = reference.entry(key) {
                let slot = keys.len() as u32;
                keys.push(key);
                idx.insert(key, slot, |s| keys[s as usize]);
                v.insert(slot);
            }
            assert_eq!(idx.len() as usize, reference.len());
        }
        for key in 0..5000 {
            assert_eq!(
                idx.get(key, |s| keys[s as usize]),
                reference.get(&key).copied()
            );
        }
        assert_eq!(idx.slots().count(), reference.len());
    }
}
