//! Synthetic traces in the MSR Cambridge format (one volume, laid out at
//! offset 0 by the replay), for the workloads loadgen's timed patterns do
//! not cover: a sequential warming pass, a 70/30 read/write mix, and a
//! skewed read workload larger than its cache. Seeded, so every run and
//! every side of a comparison replays the same requests.

use std::io::Write;
use std::path::{Path, PathBuf};

/// splitmix64: a small seeded generator (the figures need repeatable
/// offsets, not statistical quality).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One request: (is a write, offset, length).
pub type Req = (bool, u64, u64);

/// Writes `reqs` as an MSR trace at `dir/name`. The last line reads the
/// last block of `space` bytes, so that every trace over the same space
/// has the same layout (the replay sizes the volume by its largest end).
pub fn write_trace(dir: &Path, name: &str, reqs: &[Req], space: u64) -> Result<PathBuf, String> {
    let path = dir.join(name);
    let err = |e: std::io::Error| format!("write {}: {e}", path.display());
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).map_err(err)?);
    let last = (false, space - 4096, 4096);
    for (i, (write, off, len)) in reqs.iter().chain(std::iter::once(&last)).enumerate() {
        let op = if *write { "Write" } else { "Read" };
        // Timestamps in 100 ns units; replays here are unpaced.
        writeln!(
            f,
            "{},bench,0,{op},{off},{len},100",
            128_166_372_000_000_000u64 + i as u64
        )
        .map_err(err)?;
    }
    f.flush().map_err(err)?;
    Ok(path)
}

/// Sequential `block`-byte reads over `space` bytes.
pub fn sequential_reads(space: u64, block: u64) -> Vec<Req> {
    (0..space / block)
        .map(|i| (false, i * block, block))
        .collect()
}

/// `n` 4 KiB requests uniform over `space`, `read_pct` percent reads.
pub fn mix(rng: &mut Rng, space: u64, n: u64, read_pct: u64) -> Vec<Req> {
    (0..n)
        .map(|_| {
            let write = rng.below(100) >= read_pct;
            (write, rng.below(space / 4096) * 4096, 4096)
        })
        .collect()
}

/// `n` 4 KiB reads: `hot_pct` percent uniform in the first `hot` bytes,
/// the rest uniform over `space`.
pub fn skewed_reads(rng: &mut Rng, space: u64, hot: u64, hot_pct: u64, n: u64) -> Vec<Req> {
    (0..n)
        .map(|_| {
            let range = if rng.below(100) < hot_pct { hot } else { space };
            (false, rng.below(range / 4096) * 4096, 4096)
        })
        .collect()
}
