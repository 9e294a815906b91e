//! The sampled blocks' last access times: an open-addressing table from a
//! block's hash to its timestamp.
//!
//! Written here rather than taken from `std` so that its memory is exact
//! (the SHARDS state has a byte budget) and its behaviour has no random
//! seed. The keys are already `mix`ed, so their low bits pick the home slot
//! directly (the high bits are not uniform: fixed-size sampling keeps the
//! smallest hashes).
//!
//! A slot holds its key and time together, 12 bytes: a probe of a table
//! too large for the CPU's caches (beside a target's buffers) then misses
//! once, where separate key and time arrays missed twice.

/// Marks an empty slot (timestamps stay below 2^31).
const EMPTY: u32 = u32::MAX;

/// One entry: the key in two halves, so that the slot is 4-byte aligned
/// and 12 bytes long.
#[derive(Clone, Copy, Debug)]
struct Slot {
    key_lo: u32,
    key_hi: u32,
    time: u32,
}

impl Slot {
    const VACANT: Slot = Slot {
        key_lo: 0,
        key_hi: 0,
        time: EMPTY,
    };

    fn new(key: u64, time: u32) -> Self {
        Slot {
            key_lo: key as u32,
            key_hi: (key >> 32) as u32,
            time,
        }
    }

    #[inline]
    fn key(&self) -> u64 {
        u64::from(self.key_hi) << 32 | u64::from(self.key_lo)
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.time == EMPTY
    }
}

/// Linear probing with backward-shift deletion (no tombstones), at most 3/4
/// full.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyTable {
    slots: Vec<Slot>,
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
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    fn find(&self, key: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mut i = key as usize & self.mask();
        loop {
            let s = &self.slots[i];
            if s.is_empty() {
                return None;
            }
            if s.key() == key {
                return Some(i);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Asks the CPU to bring `key`'s home slot into its cache, so that
    /// the lookups of a batch of keys miss together instead of one after
    /// another.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        if self.slots.is_empty() {
            return;
        }
        let slot = &self.slots[key as usize & self.mask()];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint; the address is a live slot.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>((slot as *const Slot).cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    pub fn get(&self, key: u64) -> Option<u32> {
        self.find(key).map(|i| self.slots[i].time)
    }

    /// Inserts `key` or replaces its time.
    pub fn insert(&mut self, key: u64, time: u32) {
        debug_assert_ne!(time, EMPTY);
        if self.slots.is_empty() || (self.len + 1) * 4 > self.slots.len() * 3 {
            self.resize((self.slots.len() * 2).max(16));
        }
        let mut i = key as usize & self.mask();
        loop {
            let s = &mut self.slots[i];
            if s.is_empty() {
                *s = Slot::new(key, time);
                self.len += 1;
                return;
            }
            if s.key() == key {
                s.time = time;
                return;
            }
            i = (i + 1) & self.mask();
        }
    }

    pub fn remove(&mut self, key: u64) -> Option<u32> {
        let mut hole = self.find(key)?;
        let out = self.slots[hole].time;
        let mask = self.mask();
        // Pull later members of the probe run back into the hole, so that
        // a lookup can stop at the first empty slot.
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if self.slots[j].is_empty() {
                break;
            }
            let home = self.slots[j].key() as usize & mask;
            // The entry at j may move to the hole unless its home lies
            // cyclically in (hole, j].
            let stays = if hole < j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = Slot::VACANT;
        self.len -= 1;
        Some(out)
    }

    /// Calls `f` on every stored time (compaction renumbers them).
    pub fn for_each_time(&mut self, mut f: impl FnMut(&mut u32)) {
        for s in self.slots.iter_mut().filter(|s| !s.is_empty()) {
            f(&mut s.time);
        }
    }

    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![Slot::VACANT; slots]);
        self.len = 0;
        for s in old.into_iter().filter(|s| !s.is_empty()) {
            self.insert(s.key(), s.time);
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
