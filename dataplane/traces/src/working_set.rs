//! Working-set size of a trace: how many distinct blocks it touches.
//!
//! Cache sizes in the paper's experiments are given as a percentage of each
//! trace's working set, so the simulator needs it before it can size a cache;
//! it is computed in one streaming pass alongside (or before) the replay.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::Request;

/// Block granularity the simulator uses by default (4 KiB, the smallest I/O
/// unit of the cached devices).
pub const DEFAULT_BLOCK_SIZE: u64 = 4096;

/// Blocks per bitmap word of [`VolumeBlocks`].
const CHUNK_BLOCKS: u64 = 64;

/// Distinct blocks touched by a stream of requests, per volume.
#[derive(Debug, Clone)]
pub struct WorkingSet {
    block_size: u64,
    volumes: HashMap<u32, VolumeBlocks, BlockHash>,
    requests: u64,
    read_bytes: u64,
    write_bytes: u64,
    blocks: u64,
}

impl WorkingSet {
    /// An empty working set counted in blocks of `block_size` bytes.
    /// Panics if `block_size` is 0.
    pub fn new(block_size: u64) -> Self {
        assert!(block_size > 0, "block size must be positive");
        Self {
            block_size,
            volumes: HashMap::default(),
            requests: 0,
            read_bytes: 0,
            write_bytes: 0,
            blocks: 0,
        }
    }

    /// Adds one request: every block it overlaps, even partially, counts.
    pub fn add(&mut self, request: &Request) {
        self.requests += 1;
        match request.op {
            crate::Op::Read => self.read_bytes += u64::from(request.length),
            crate::Op::Write => self.write_bytes += u64::from(request.length),
        }
        if request.length == 0 {
            return;
        }
        let first = request.offset / self.block_size;
        let last = (request.end() - 1) / self.block_size;
        let volume = self.volumes.entry(request.volume).or_default();
        let added = volume.insert_range(first, last);
        self.blocks += added;
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// Distinct blocks touched, over all volumes.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Working-set size in bytes (`blocks * block_size`).
    pub fn bytes(&self) -> u64 {
        self.blocks.saturating_mul(self.block_size)
    }

    /// Distinct blocks touched on `volume`.
    pub fn volume_blocks(&self, volume: u32) -> u64 {
        self.volumes.get(&volume).map_or(0, |v| v.blocks)
    }

    /// Volumes seen.
    pub fn volumes(&self) -> usize {
        self.volumes.len()
    }

    /// Requests added.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Bytes read by the requests added (the trace's read volume).
    pub fn read_bytes(&self) -> u64 {
        self.read_bytes
    }

    /// Bytes written by the requests added.
    pub fn write_bytes(&self) -> u64 {
        self.write_bytes
    }
}

impl Default for WorkingSet {
    fn default() -> Self {
        Self::new(DEFAULT_BLOCK_SIZE)
    }
}

impl Extend<Request> for WorkingSet {
    fn extend<I: IntoIterator<Item = Request>>(&mut self, iter: I) {
        for request in iter {
            self.add(&request);
        }
    }
}

/// The blocks one volume touched, as a sparse bitmap: 64-block words keyed by
/// `block / 64`. Real traces are full of sequential runs and multi-block
/// requests, so one hash lookup usually covers a whole request, and dense
/// regions cost a quarter byte per block instead of the 8+ bytes of a set of
/// block numbers; scattered single blocks cost 16 bytes each.
#[derive(Debug, Clone, Default)]
struct VolumeBlocks {
    words: HashMap<u64, u64, BlockHash>,
    blocks: u64,
}

impl VolumeBlocks {
    /// Marks blocks `first..=last`; returns how many were new.
    fn insert_range(&mut self, first: u64, last: u64) -> u64 {
        let mut added = 0;
        for chunk in first / CHUNK_BLOCKS..=last / CHUNK_BLOCKS {
            let base = chunk * CHUNK_BLOCKS;
            let lo = first.max(base) - base;
            let hi = last.min(base + (CHUNK_BLOCKS - 1)) - base;
            let mask = (u64::MAX >> (63 - hi)) & (u64::MAX << lo);
            let word = self.words.entry(chunk).or_insert(0);
            added += u64::from((mask & !*word).count_ones());
            *word |= mask;
        }
        self.blocks += added;
        added
    }
}

/// Computes the working set of a whole trace in one pass, stopping at the
/// first error.
pub fn working_set<I, E>(requests: I, block_size: u64) -> Result<WorkingSet, E>
where
    I: IntoIterator<Item = Result<Request, E>>,
{
    let mut set = WorkingSet::new(block_size);
    for request in requests {
        set.add(&request?);
    }
    Ok(set)
}

/// Hasher for block numbers and volume ids. SipHash (std's default) resists
/// hash flooding, which trace files cannot mount, at several times the cost;
/// this is a multiply-xorshift finaliser (from SplitMix64) that spreads
/// sequential block numbers over all bits.
#[derive(Debug, Default, Clone, Copy)]
pub struct BlockHasher(u64);

impl Hasher for BlockHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
}

type BlockHash = BuildHasherDefault<BlockHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Op;

    fn req(volume: u32, offset: u64, length: u32) -> Request {
        Request {
            timestamp_ns: 0,
            op: Op::Read,
            offset,
            length,
            volume,
        }
    }

    #[test]
    fn counts_distinct_blocks_per_volume() {
        let requests = [
            req(0, 0, 4096),    // block 0
            req(0, 4095, 2),    // blocks 0, 1
            req(0, 8192, 8192), // blocks 2, 3
            req(1, 0, 512),     // volume 1 block 0
            req(0, 0, 16384),   // blocks 0..=3, nothing new
            req(0, 1 << 40, 1), // a far block
        ];
        let set = working_set(requests.map(Ok::<_, ()>), 4096).unwrap();
        assert_eq!(set.blocks(), 6);
        assert_eq!(set.bytes(), 6 * 4096);
        assert_eq!(set.volume_blocks(0), 5);
        assert_eq!(set.volume_blocks(1), 1);
        assert_eq!(set.volumes(), 2);
        assert_eq!(set.requests(), 6);
        assert_eq!(set.read_bytes(), 4096 + 2 + 8192 + 512 + 16384 + 1);
    }

    #[test]
    fn matches_a_plain_set_on_chunk_boundaries() {
        // Ranges that start, end and straddle 64-block words.
        let mut x: u64 = 12345;
        let mut set = WorkingSet::new(4096);
        let mut reference = std::collections::HashSet::new();
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let block = x % 2000;
            let blocks = 1 + (x >> 20) % 200;
            let offset = block * 4096 + (x >> 40) % 4096;
            let length = (blocks * 4096 - (x >> 50) % 4096) as u32;
            let r = req((x >> 60) as u32 % 2, offset, length);
            set.add(&r);
            for b in r.offset / 4096..=(r.end() - 1) / 4096 {
                reference.insert((r.volume, b));
            }
        }
        assert_eq!(set.blocks(), reference.len() as u64);
        assert_eq!(
            set.volume_blocks(0),
            reference.iter().filter(|(v, _)| *v == 0).count() as u64
        );
    }

    #[test]
    fn extreme_offsets() {
        let mut set = WorkingSet::new(1);
        set.add(&req(0, u64::MAX - 100, 100));
        set.add(&req(0, 0, 64));
        assert_eq!(set.blocks(), 164);
    }

    #[test]
    fn granularity_changes_the_count() {
        let set = working_set([Ok::<_, ()>(req(0, 0, 8192))], 512).unwrap();
        assert_eq!(set.blocks(), 16);
    }

    #[test]
    fn stops_at_the_first_error() {
        let items = [Ok(req(0, 0, 1)), Err("bad"), Ok(req(0, 8192, 1))];
        assert_eq!(working_set(items, 4096).unwrap_err(), "bad");
    }
}
