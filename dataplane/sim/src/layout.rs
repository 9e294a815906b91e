//! Where each volume of a trace goes in the engine's one address space.
//!
//! The simulator replays every volume of a multi-volume trace into one
//! engine, so the volumes share one cache. The engine's block keys are `u32`
//! block numbers, which bounds that space (`engine::config::max_volume_size`:
//! 16 TiB with 4 KiB blocks). Two layouts:
//!
//! - **dense**: each volume from offset 0 to the end of the last byte it
//!   touches, volumes one after another in volume order, each starting on a
//!   [`REGION`] boundary. Simple, but a trace of 2,000 cloud volumes of
//!   several TiB each spans PiB.
//! - **sparse**: only the [`REGION`]s (1 MiB, aligned) a volume touches,
//!   packed in (volume, offset) order. Touched regions that are consecutive
//!   in a volume (a *run*) stay consecutive, so a request spanning several
//!   regions lands on one contiguous range; runs follow each other without
//!   gaps.
//!
//! # Why the engine decides the same under both
//!
//! A request's volume offsets reach the engine's decisions only through
//! (1) which blocks it overlaps and where those start relative to it, and
//! (2) block numbers used as identities. Blocks are aligned to their size,
//! at most 1 MiB (`MAX_BLOCK_SIZE`), so no block ever straddles a `REGION`
//! boundary, and every block the engine looks at or allocates for a request
//! contains a byte of it (`alloc.rs`: the request widened to the smallest
//! block, cached blocks found inside that range, aligned blocks covering
//! its missing parts), so it lies in a region the request touches. Both
//! layouts move each touched region as a whole by a multiple of `REGION`,
//! and keep adjacent touched regions of a volume adjacent, so each block
//! maps to a block of the same size and alignment, one-to-one, and each
//! request to a range with the same shape. Identities stay distinct because
//! the mapping is injective. Exact identity of results therefore holds for
//! every policy that uses block numbers only as exact keys (always-admit,
//! two-level LRU, LEA's ghost list, flushing); `nhit`, `tinylfu` and
//! `size-aware` hash block numbers into fixed-size tables, so a different
//! placement changes their collisions and their results can differ
//! slightly. That is why [`LayoutKind::Auto`] keeps the dense layout
//! whenever it fits: results for traces that ran before stay the same.
//!
//! Why the largest block size and not the group size: groups are a
//! cache-space notion (which slots share a size), never a volume-space one;
//! a region smaller than the largest block would break the argument (a
//! block could cover part of an untouched neighbour region, which the
//! sparse layout gives to someone else). `REGION` is 1 MiB, the largest
//! block size the engine accepts, so one layout serves every configuration
//! of a `--compare`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use engine::config::{max_volume_size, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};

use crate::size::format_bytes;

/// Granularity of both layouts: 1 MiB, the engine's largest block size.
pub const REGION: u64 = MAX_BLOCK_SIZE as u64;

/// Which layout to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LayoutKind {
    /// Dense when it fits the engine with 4 KiB blocks (so one layout
    /// serves every block size), sparse otherwise.
    #[default]
    Auto,
    /// Volumes end to end.
    Dense,
    /// Only the touched regions.
    Sparse,
}

impl FromStr for LayoutKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(LayoutKind::Auto),
            "dense" => Ok(LayoutKind::Dense),
            "sparse" => Ok(LayoutKind::Sparse),
            _ => Err(format!("{s:?}: expected auto, dense or sparse")),
        }
    }
}

impl fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LayoutKind::Auto => "auto",
            LayoutKind::Dense => "dense",
            LayoutKind::Sparse => "sparse",
        })
    }
}

/// What the first pass records of each volume: the end of its highest
/// touched byte and the regions it touches.
#[derive(Clone, Debug, Default)]
pub struct Footprint {
    volumes: BTreeMap<u32, Touched>,
}

#[derive(Clone, Debug, Default)]
struct Touched {
    end: u64,
    regions: BTreeSet<u64>,
    /// The last region inserted: sequential requests skip the set.
    last: Option<u64>,
}

impl Footprint {
    /// An empty footprint.
    pub fn new() -> Footprint {
        Footprint::default()
    }

    /// Records that `volume` is accessed over `[start, end)` (`end > start`,
    /// already widened to sectors).
    pub fn add(&mut self, volume: u32, start: u64, end: u64) {
        debug_assert!(end > start);
        let t = self.volumes.entry(volume).or_default();
        t.end = t.end.max(end);
        for r in start / REGION..=(end - 1) / REGION {
            if t.last != Some(r) {
                t.regions.insert(r);
                t.last = Some(r);
            }
        }
    }

    /// Volumes seen.
    pub fn volumes(&self) -> usize {
        self.volumes.len()
    }

    /// The ids of the volumes seen, ascending.
    pub fn volume_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.volumes.keys().copied()
    }

    /// The engine's address space under the dense layout.
    pub fn dense_bytes(&self) -> u64 {
        self.volumes.values().fold(0u64, |acc, t| {
            acc.saturating_add(t.end.max(1).div_ceil(REGION).saturating_mul(REGION))
        })
    }

    /// The layout of the recorded volumes.
    pub fn layout(self, kind: LayoutKind) -> Layout {
        let dense = match kind {
            LayoutKind::Dense => true,
            LayoutKind::Sparse => false,
            LayoutKind::Auto => self.dense_bytes() <= max_volume_size(MIN_BLOCK_SIZE),
        };
        if dense {
            self.dense()
        } else {
            self.sparse()
        }
    }

    fn dense(self) -> Layout {
        let mut base = BTreeMap::new();
        let mut next = 0u64;
        for (v, t) in self.volumes {
            base.insert(v, next);
            next = next.saturating_add(t.end.max(1).div_ceil(REGION).saturating_mul(REGION));
        }
        Layout {
            map: Map::Dense(base),
            address_space: next,
        }
    }

    fn sparse(self) -> Layout {
        let mut runs: BTreeMap<u32, Vec<Run>> = BTreeMap::new();
        let mut next = 0u64;
        let mut count = 0usize;
        for (v, t) in self.volumes {
            let mut list: Vec<Run> = Vec::new();
            for r in t.regions {
                match list.last_mut() {
                    Some(run) if run.end == r * REGION => run.end += REGION,
                    _ => list.push(Run {
                        first: r * REGION,
                        end: (r + 1) * REGION,
                        base: next,
                    }),
                }
                next += REGION;
            }
            count += list.len();
            runs.insert(v, list);
        }
        Layout {
            map: Map::Sparse { runs, count },
            address_space: next,
        }
    }
}

/// Consecutive touched regions of one volume: volume bytes `[first, end)`
/// at engine address `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    first: u64,
    end: u64,
    base: u64,
}

#[derive(Clone, Debug)]
enum Map {
    /// Each volume's base address.
    Dense(BTreeMap<u32, u64>),
    /// Each volume's runs in offset order, and how many there are in all.
    Sparse {
        runs: BTreeMap<u32, Vec<Run>>,
        count: usize,
    },
}

/// Where every volume of a trace goes in the engine's address space.
#[derive(Clone, Debug)]
pub struct Layout {
    map: Map,
    address_space: u64,
}

impl Layout {
    /// The engine's volume size: every placed byte fits below it; a
    /// multiple of [`REGION`].
    pub fn address_space(&self) -> u64 {
        self.address_space
    }

    /// Volumes laid out.
    pub fn volumes(&self) -> usize {
        match &self.map {
            Map::Dense(b) => b.len(),
            Map::Sparse { runs, .. } => runs.len(),
        }
    }

    /// Dense or sparse (never `Auto`).
    pub fn kind(&self) -> LayoutKind {
        match self.map {
            Map::Dense(_) => LayoutKind::Dense,
            Map::Sparse { .. } => LayoutKind::Sparse,
        }
    }

    /// Engine address of byte `offset` of `volume`, for a request
    /// `[offset, offset + len)` recorded in the footprint this layout was
    /// made from (panics otherwise: the layout has no place for it).
    pub fn place(&self, volume: u32, offset: u64, len: u64) -> u64 {
        match &self.map {
            Map::Dense(base) => base[&volume] + offset,
            Map::Sparse { runs, .. } => {
                let list = &runs[&volume];
                let i = list.partition_point(|r| r.first <= offset);
                let run = list[i.checked_sub(1).expect("a region the profile saw")];
                assert!(
                    offset + len <= run.end,
                    "volume {volume} [{offset}, +{len}) is outside the regions the profile saw"
                );
                run.base + (offset - run.first)
            }
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.map {
            Map::Dense(_) => write!(f, "dense over {}", format_bytes(self.address_space)),
            Map::Sparse { count, .. } => write!(
                f,
                "sparse over {} ({} regions of 1 MiB in {count} runs)",
                format_bytes(self.address_space),
                self.address_space / REGION
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = REGION;
    const TIB: u64 = 1 << 40;

    fn footprint(reqs: &[(u32, u64, u64)]) -> Footprint {
        let mut f = Footprint::new();
        for &(v, o, l) in reqs {
            f.add(v, o, o + l);
        }
        f
    }

    #[test]
    fn sparse_packs_runs_of_touched_regions() {
        let reqs = [
            (3, 5 * TIB + 10, 4086),
            // Crosses from region k to k+1: one run of two.
            (3, TIB - 4096, 8192),
            (1, 7 * MIB + 512, 512),
            (3, 5 * TIB + 3 * MIB, 4096),
        ];
        let l = footprint(&reqs).layout(LayoutKind::Sparse);
        assert_eq!(l.kind(), LayoutKind::Sparse);
        assert_eq!(l.volumes(), 2);
        // Volume 1: one region; volume 3: [1 TiB - 1 MiB, 1 TiB + 1 MiB),
        // then 5 TiB's first region, then 5 TiB + 3 MiB's: 5 regions, 4 runs.
        assert_eq!(l.address_space(), 5 * MIB);
        assert_eq!(
            l.to_string(),
            "sparse over 5MiB (5 regions of 1 MiB in 4 runs)"
        );
        assert_eq!(l.place(1, 7 * MIB + 512, 512), 512);
        assert_eq!(l.place(3, TIB - 4096, 8192), 2 * MIB - 4096);
        assert_eq!(l.place(3, TIB, 4096), 2 * MIB);
        assert_eq!(l.place(3, 5 * TIB + 10, 4086), 3 * MIB + 10);
        assert_eq!(l.place(3, 5 * TIB + 3 * MIB, 4096), 4 * MIB);
    }

    #[test]
    fn dense_lays_volumes_end_to_end() {
        let reqs = [(0, 0, 65536), (1, MIB, 4096), (0, 512, 1024)];
        let f = footprint(&reqs);
        assert_eq!(f.dense_bytes(), 3 * MIB);
        let l = f.layout(LayoutKind::Auto);
        assert_eq!(l.kind(), LayoutKind::Dense);
        assert_eq!(l.address_space(), 3 * MIB);
        assert_eq!(l.place(0, 512, 1024), 512);
        assert_eq!(l.place(1, MIB, 4096), 2 * MIB);
    }

    #[test]
    fn auto_goes_sparse_beyond_the_engines_limit_at_4k() {
        // 5 volumes of 4 TiB: 20 TiB dense, more than 16 TiB - 8 KiB.
        let reqs: Vec<_> = (0..5).map(|v| (v, 4 * TIB - 4096, 4096)).collect();
        let l = footprint(&reqs).layout(LayoutKind::Auto);
        assert_eq!(l.kind(), LayoutKind::Sparse);
        assert_eq!(l.address_space(), 5 * MIB);
        // 4 volumes (16 TiB) do not fit either: the limit is 2 blocks short.
        let l = footprint(&reqs[..4]).layout(LayoutKind::Auto);
        assert_eq!(l.kind(), LayoutKind::Sparse);
        let l = footprint(&reqs[..3]).layout(LayoutKind::Auto);
        assert_eq!(l.kind(), LayoutKind::Dense);
    }

    /// Random requests: both layouts keep every offset's place in its
    /// region, keep each request contiguous, and never map two distinct
    /// (volume, offset) pairs to one address.
    #[test]
    fn sparse_keeps_alignment_contiguity_and_distinctness() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut reqs = Vec::new();
        for _ in 0..3000 {
            let v = (next() % 7) as u32;
            let o = next() % (64 * MIB) / 512 * 512;
            let l = (1 + next() % 1024) * 512;
            reqs.push((v, o, l));
        }
        let f = footprint(&reqs);
        let (dense, sparse) = (
            f.clone().layout(LayoutKind::Dense),
            f.layout(LayoutKind::Sparse),
        );
        let mut seen = std::collections::HashMap::new();
        for &(v, o, l) in &reqs {
            let (d, s) = (dense.place(v, o, l), sparse.place(v, o, l));
            assert_eq!(d % REGION, s % REGION);
            assert!(s + l <= sparse.address_space());
            // The last byte is where contiguity puts it.
            assert_eq!(sparse.place(v, o + l - 1, 1), s + l - 1);
            for p in [o, o + l - 1] {
                let a = sparse.place(v, p, 1);
                assert_eq!(*seen.entry(a).or_insert((v, p)), (v, p));
            }
        }
        assert!(sparse.address_space() <= dense.address_space());
    }
}
