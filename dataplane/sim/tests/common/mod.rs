//! Synthetic traces for the layout tests, written in the Tencent CBS csv
//! format (`Timestamp,Offset,Size,IOType,VolumeID`, seconds and 512-byte
//! sectors), the format of the multi-volume traces that need the sparse
//! layout.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;

use engine::Config;
use rackcache_sim::replay::{FlushPolicy, SimConfig};

/// One request of a synthetic trace, in bytes (multiples of 512).
#[derive(Clone, Copy, Debug)]
pub struct Req {
    pub secs: u64,
    pub volume: u32,
    pub offset: u64,
    pub len: u64,
    pub write: bool,
}

/// Writes `reqs` to `path` as a Tencent CBS trace.
pub fn write_tencent(path: &Path, reqs: &[Req]) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for r in reqs {
        assert!(
            r.offset % 512 == 0 && r.len % 512 == 0 && r.len > 0,
            "{r:?}"
        );
        writeln!(
            f,
            "{},{},{},{},{}",
            1_538_323_200 + r.secs,
            r.offset / 512,
            r.len / 512,
            u8::from(r.write),
            r.volume
        )
        .unwrap();
    }
    f.flush().unwrap();
}

/// A small deterministic generator (xorshift64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A configuration labelled `label`.
pub fn sim(label: &str, engine: Config, flush: FlushPolicy) -> SimConfig {
    SimConfig {
        label: label.into(),
        engine,
        flush,
    }
}
