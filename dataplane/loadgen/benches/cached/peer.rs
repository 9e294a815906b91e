//! Part 6 (issue 13, goal 4, "against a cache peer"): an OCF-style cache
//! of fixed 4 KiB cache lines with LRU replacement (OCF's and Open CAS'
//! defaults; here our `fixed` mode with one 4 KiB block size and the
//! two-level LRU, which at one block size is a plain block LRU) against
//! our adaptive mode with its defaults and with `fill_size` `locality`
//! (4 KiB to 256 KiB blocks, the fill floor chosen by shadow caches), all
//! in write-through with a
//! 256 MiB cache over a 1 GiB RBD core, on the same seeded stream of 4 KiB
//! random reads at QD32 whose block popularity is Zipf-like, the hot
//! blocks scattered over the image by a seeded permutation. Both volumes
//! replay the same unmeasured warm-up prefix, then the same measured
//! requests; the volume's counters are reset in between.
//!
//! Environment:
//! - `RACKCACHE_BENCH_PEER_REQUESTS` (100000): measured requests.
//! - `RACKCACHE_BENCH_PEER_WARMUP` (300000): warm-up requests before them.
//! - `RACKCACHE_BENCH_PEER_THETA` (0.99): the Zipf exponent.
//! - `RACKCACHE_BENCH_PEER_ROUNDS` (1): both sides this many times each
//!   (fresh volumes, alternately); the run of median IOPS of each side is
//!   printed.

use std::path::Path;

use serde_json::json;
use testkit::Ceph;

use crate::rig::{replay, Rig, MIB};
use crate::synth::{self, Req, Rng};
use crate::table::Row;
use crate::{env_u64, params, volume_export, QD};

/// The RBD image of the core.
const IMAGE: &str = "cbench-peer";
/// Size of the core.
pub const IMAGE_MIB: u64 = 1024;
/// Each side's cache.
pub const CACHE_MIB: u64 = 256;
const LINE: u64 = 4096;

pub struct Knobs {
    requests: u64,
    warmup: u64,
    theta: f64,
    rounds: u64,
}

impl Knobs {
    pub fn from_env() -> Result<Self, String> {
        let theta = match std::env::var("RACKCACHE_BENCH_PEER_THETA") {
            Err(_) => 0.99,
            Ok(v) => v
                .parse::<f64>()
                .ok()
                .filter(|t| (0.0..=2.0).contains(t))
                .ok_or_else(|| format!("RACKCACHE_BENCH_PEER_THETA={v}: a number in 0..=2"))?,
        };
        Ok(Knobs {
            requests: env_u64("RACKCACHE_BENCH_PEER_REQUESTS", 100_000),
            warmup: env_u64("RACKCACHE_BENCH_PEER_WARMUP", 300_000),
            theta,
            rounds: env_u64("RACKCACHE_BENCH_PEER_ROUNDS", 1),
        })
    }
}

/// A Zipf-like popularity over `items` ranks: rank `r` (from 0) is drawn
/// with probability proportional to `1 / (r + 1)^theta`, by inverting the
/// cumulative weights.
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(items: u64, theta: f64) -> Self {
        let mut sum = 0.0;
        let cdf = (0..items)
            .map(|r| {
                sum += 1.0 / ((r + 1) as f64).powf(theta);
                sum
            })
            .collect();
        Zipf { cdf }
    }

    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let total = *self.cdf.last().expect("at least one item");
        let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * total;
        let r = self.cdf.partition_point(|&c| c <= u);
        r.min(self.cdf.len() - 1) as u64
    }
}

/// `n` 4 KiB reads over `space` bytes, block popularity Zipf(`theta`)
/// over all of its 4 KiB blocks, ranks mapped to blocks by a seeded
/// random permutation, so that hot blocks are scattered over the space
/// instead of adjacent (no spatial locality for larger blocks to use).
pub fn zipf_reads(rng: &mut Rng, space: u64, theta: f64, n: u64) -> Vec<Req> {
    let blocks = space / LINE;
    let zipf = Zipf::new(blocks, theta);
    // Fisher-Yates: block of rank r = perm[r].
    let mut perm: Vec<u64> = (0..blocks).collect();
    for i in (1..perm.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        perm.swap(i, j);
    }
    (0..n)
        .map(|_| (false, perm[zipf.sample(rng) as usize] * LINE, LINE))
        .collect()
}

/// One side's measured window.
struct Side {
    iops: f64,
    p99_us: f64,
    stats: cache::volume::VolumeStats,
}

/// Creates the 1 GiB core image and writes it over (reads of never
/// written RADOS objects would be unrealistically cheap).
pub fn create_image(ceph: &Ceph) {
    let img = format!("{}/{IMAGE}", ceph.var("RACKCACHE_CEPH_POOL"));
    ceph.create_filled_image(&img, IMAGE_MIB * MIB);
}

pub fn part(
    rig: &Rig,
    k: &Knobs,
    dir: &Path,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let core = rig.rbd(IMAGE)?;
    let space = IMAGE_MIB * MIB;
    let reqs = zipf_reads(&mut Rng::new(6), space, k.theta, k.warmup + k.requests);
    let trace = synth::write_trace(dir, "peer-zipf.csv", &reqs, space)?;
    let sides = [
        (
            "fixed-4K lru2",
            json!({"mode": "fixed", "block_sizes_kib": [4], "eviction": "lru2"}),
        ),
        ("adaptive defaults", json!({"mode": "adaptive"})),
        (
            "adaptive locality",
            json!({"mode": "adaptive", "fill_size": "locality"}),
        ),
    ];
    let mut runs: [Vec<Side>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..k.rounds {
        // Rotate which side goes first, so that drift on a shared machine
        // falls on all alike.
        let first = round as usize % sides.len();
        for i in (0..sides.len()).map(|j| (first + j) % sides.len()) {
            let (label, extra) = &sides[i];
            let name = format!("peer-{i}");
            let v = rig.volume(params(&name, IMAGE, CACHE_MIB, extra.clone())?, &core)?;
            let ve = volume_export(rig, &v)?;
            let r = replay(&ve, &trace, QD, k.warmup, None, || rig.reset_stats(&v))?;
            let stats = rig.stats(&v)?;
            if r.errors > 0 || r.split_requests > 0 {
                notes.push(format!(
                    "part 6 {label}: {} failed requests, {} split at the MDTS",
                    r.errors, r.split_requests
                ));
            }
            runs[i].push(Side {
                iops: r.iops,
                p99_us: r.read_latency.p99_us,
                stats,
            });
            rig.unexport(&ve)?;
            rig.delete(&v)?;
        }
    }
    let median = |mut v: Vec<Side>| {
        v.sort_by(|x, y| x.iops.total_cmp(&y.iops));
        v.swap_remove(v.len() / 2)
    };
    let [fixed, adaptive, locality] = runs.map(median);
    for ((label, _), s) in sides.iter().zip([&fixed, &adaptive, &locality]) {
        let st = &s.stats;
        let fill = st.fill.as_ref().map(|f| {
            format!(
                "fill floor {} KiB after {} switch(es)",
                f.floor_bytes >> 10,
                f.switches
            )
        });
        let row = Row::new(
            "6 peer",
            format!("{label} {} MiB", st.usage.capacity_bytes / MIB),
        )
        .perf(s.iops, s.p99_us)
        .hit(st.hit_ratio.read)
        .note(format!(
            "core rd/host rd {:.2}",
            st.blocks.core_volume_rd as f64 / st.blocks.volume_rd.max(1) as f64
        ))
        .note(format!(
            "metadata {:.2} MiB ({:.1} B/block, {} blocks of avg {:.0} KiB)",
            st.metadata_bytes as f64 / MIB as f64,
            st.metadata_bytes as f64 / st.cached_blocks.max(1) as f64,
            st.cached_blocks,
            st.average_allocated_block_bytes / 1024.0
        ))
        .note(format!("eviction {}", st.eviction.policy));
        rows.push(match fill {
            Some(f) => row.note(f),
            None => row,
        });
    }
    let goal = |what: &str, ours: f64, theirs: f64| {
        let r = ours / theirs;
        let mark = if r > 1.0 { "ok" } else { "MISS" };
        format!("{what} {r:.3} (target > 1: {mark})")
    };
    for (label, s) in [("adaptive", &adaptive), ("locality", &locality)] {
        rows.push(
            Row::new("6 peer", format!("{label} vs fixed-4K"))
                .note(goal(
                    "read hit",
                    s.stats.hit_ratio.read,
                    fixed.stats.hit_ratio.read,
                ))
                .note(goal("IOPS", s.iops, fixed.iops)),
        );
    }
    notes.push(format!(
        "part 6: {} MiB RBD core, {} MiB cache, write-through; 4K reads QD{QD}, Zipf theta {} over its 4 KiB blocks (scattered, seed 6); {} warm-up + {} measured requests; {} round(s)",
        IMAGE_MIB, CACHE_MIB, k.theta, k.warmup, k.requests + 1, k.rounds
    ));
    Ok(())
}
