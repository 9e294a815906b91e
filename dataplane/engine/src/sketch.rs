//! A count-min sketch of 4-bit counters with periodic halving: the frequency
//! estimate behind TinyLFU admission ([`crate::admission::TinyLfu`]) and
//! W-TinyLFU eviction ([`crate::eviction::WTinyLfu`]).
//!
//! Four rows of `width` counters, 16 to a `u64`. An estimate is the smallest
//! of a key's four counters, so collisions only ever overestimate. After
//! `sample_size` increments every counter is halved (TinyLFU's "reset"), so
//! old popularity fades and the counters never stay saturated.

const ROWS: usize = 4;
const SEEDS: [u64; ROWS] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0xD6E8_FEB8_6659_FD93,
];

/// Count-min sketch with 4-bit counters and aging.
#[derive(Clone, Debug)]
pub(crate) struct CountMin {
    /// `ROWS` rows of `width` 4-bit counters, row after row.
    words: Vec<u64>,
    width_mask: u64,
    sample_size: u32,
    increments: u32,
    halvings: u64,
}

impl CountMin {
    /// `width` counters per row (rounded up to a power of two, at least 64);
    /// halves every counter after `sample_size` increments.
    pub fn new(width: u32, sample_size: u32) -> CountMin {
        let width = width.max(64).next_power_of_two() as usize;
        CountMin {
            words: vec![0; ROWS * width / 16],
            width_mask: width as u64 - 1,
            sample_size: sample_size.max(1),
            increments: 0,
            halvings: 0,
        }
    }

    #[inline]
    fn counter(&self, row: usize, key: u64) -> (usize, u32) {
        let h = (key ^ (row as u64) << 59).wrapping_mul(SEEDS[row]);
        let i = ((h >> 32) & self.width_mask) as usize;
        let width = self.width_mask as usize + 1;
        let bit = row * width + i;
        (bit / 16, (bit % 16) as u32 * 4)
    }

    /// Frequency estimate of `key` (0..=15).
    pub fn estimate(&self, key: u64) -> u32 {
        (0..ROWS)
            .map(|r| {
                let (w, s) = self.counter(r, key);
                ((self.words[w] >> s) & 0xF) as u32
            })
            .min()
            .unwrap_or(0)
    }

    /// Counts one occurrence of `key`.
    pub fn increment(&mut self, key: u64) {
        for r in 0..ROWS {
            let (w, s) = self.counter(r, key);
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

    /// Times every counter was halved.
    pub fn halvings(&self) -> u64 {
        self.halvings
    }

    /// Increments between two halvings.
    pub fn sample_size(&self) -> u32 {
        self.sample_size
    }

    /// Bytes of counters.
    pub fn memory_bytes(&self) -> usize {
        self.words.capacity() * 8
    }

    #[cfg(test)]
    pub fn set_sample_size(&mut self, n: u32) {
        self.sample_size = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_saturate_and_halve() {
        let mut s = CountMin::new(64, 1000);
        for _ in 0..20 {
            s.increment(7);
        }
        assert_eq!(s.estimate(7), 15);
        assert_eq!(s.estimate(8), 0);
        s.set_sample_size(21);
        s.increment(7);
        assert_eq!(s.estimate(7), 7, "halved after sample_size increments");
        assert_eq!(s.halvings(), 1);
    }
}
