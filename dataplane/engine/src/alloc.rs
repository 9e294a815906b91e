//! AdaCache's adaptive allocation: Algorithm 1 (missing intervals) and
//! Algorithm 2 (greedy block allocation), as pure functions of the indexes.
//!
//! Two deliberate differences from the pseudo-code, both matching the
//! paper's text and Figure 5:
//! - Algorithm 1 line 6 sets `end = A(O + L) + B1`, which adds one granule
//!   too many when `O + L` is already aligned; the text's "aligned request
//!   range" is `[A(O), align_up(O + L))`, which is what we scan.
//! - Algorithm 2's inner loop has no `break` after allocating, so it would
//!   continue with *smaller* sizes at the advanced position (for
//!   `[32K, 256K)` it would allocate 32K@128K instead of 128K@128K). The text
//!   says each position gets "the largest possible cache block size", so we
//!   restart from the largest size after each allocation.

use crate::blocks::Class;

/// One piece of the aligned request range, in address order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seg {
    /// A cached block `[start, end)`.
    Cached { id: u32, start: u64, end: u64 },
    /// A merged run of missing granules `[start, end)`.
    Missing { start: u64, end: u64 },
}

impl Seg {
    pub fn start(&self) -> u64 {
        match *self {
            Seg::Cached { start, .. } | Seg::Missing { start, .. } => start,
        }
    }

    pub fn end(&self) -> u64 {
        match *self {
            Seg::Cached { end, .. } | Seg::Missing { end, .. } => end,
        }
    }
}

/// Algorithm 1: walks `[begin, end)` (aligned to the smallest size) and
/// appends cached blocks and merged missing intervals to `out`. `classes`
/// are sorted by size, smallest first.
pub(crate) fn missing_intervals(classes: &[Class], begin: u64, end: u64, out: &mut Vec<Seg>) {
    let granule = classes[0].size as u64;
    debug_assert!(begin.is_multiple_of(granule) && end.is_multiple_of(granule));
    let mut pos = begin;
    'walk: while pos < end {
        for (c, class) in classes.iter().enumerate() {
            let key = (pos >> class.shift) as u32;
            if let Some(slot) = class.lookup(key) {
                let start = (key as u64) << class.shift;
                let stop = start + class.size as u64;
                out.push(Seg::Cached {
                    id: crate::blocks::make_id(c, slot),
                    start,
                    end: stop,
                });
                pos = stop;
                continue 'walk;
            }
        }
        match out.last_mut() {
            Some(Seg::Missing { end: e, .. }) if *e == pos => *e += granule,
            _ => out.push(Seg::Missing {
                start: pos,
                end: pos + granule,
            }),
        }
        pos += granule;
    }
}

/// Algorithm 2: covers the missing interval `[begin, end)` with the largest
/// aligned blocks that fit, appending `(offset, class)` pairs. `sizes` are
/// sorted smallest first.
pub(crate) fn greedy_cover(sizes: &[u32], begin: u64, end: u64, out: &mut Vec<(u64, usize)>) {
    let mut pos = begin;
    while pos < end {
        let class = (0..sizes.len())
            .rev()
            .find(|&c| {
                let b = sizes[c] as u64;
                pos.is_multiple_of(b) && b <= end - pos
            })
            .expect("intervals are aligned to the smallest size");
        out.push((pos, class));
        pos += sizes[class] as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::Blocks;

    const K: u64 = 1024;

    #[test]
    fn greedy_cover_uses_the_largest_aligned_block() {
        let sizes = [32 << 10, 64 << 10, 128 << 10, 256 << 10];
        let mut out = Vec::new();
        greedy_cover(&sizes, 32 * K, 256 * K, &mut out);
        assert_eq!(out, vec![(32 * K, 0), (64 * K, 1), (128 * K, 2)]);
        out.clear();
        greedy_cover(&sizes, 0, 608 * K, &mut out);
        assert_eq!(out, vec![(0, 3), (256 * K, 3), (512 * K, 1), (576 * K, 0)]);
    }

    #[test]
    fn figure_5_missing_interval() {
        // Request at 48 KiB, length 184 KiB; a 128 KiB block cached at 128 KiB.
        let mut b = Blocks::new(&[32 << 10, 64 << 10, 128 << 10, 256 << 10], 256 << 10, 4096);
        let class = &mut b.classes[2];
        let chunk = class.take_chunk(0);
        class.entries[chunk as usize].key = 1; // 128 KiB / 128 KiB
        let entries = class.entries.clone();
        class.index.insert(1, chunk, |s| entries[s as usize].key);
        let (o, l) = (48 * K, 184 * K);
        let begin = o / (32 * K) * (32 * K);
        let end = (o + l).div_ceil(32 * K) * (32 * K);
        assert_eq!((begin, end), (32 * K, 256 * K), "the paper's aligned range");
        let mut segs = Vec::new();
        missing_intervals(&b.classes, begin, end, &mut segs);
        assert_eq!(
            segs,
            vec![
                Seg::Missing {
                    start: 32 * K,
                    end: 128 * K
                },
                Seg::Cached {
                    id: crate::blocks::make_id(2, chunk),
                    start: 128 * K,
                    end: 256 * K
                },
            ]
        );
        let mut cover = Vec::new();
        greedy_cover(
            &[32 << 10, 64 << 10, 128 << 10, 256 << 10],
            32 * K,
            128 * K,
            &mut cover,
        );
        // "one 32KiB cache block from 32KiB to 64KiB and one 64KiB cache
        // block from 64KiB to 128KiB"
        assert_eq!(cover, vec![(32 * K, 0), (64 * K, 1)]);
    }
}
