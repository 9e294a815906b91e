//! Miss-ratio curves of a trace (`rackcache-sim --mrc`): each volume's
//! 4 KiB block references go through a SHARDS sampler
//! ([`engine::mrc::Shards`]), and through an exact one when asked or when
//! the trace is small enough to afford it.
//!
//! The block stream: every request, read or write, is placed and widened as
//! the replay does ([`Profile::place`]) and split into the 4 KiB blocks it
//! overlaps, in order. A multi-volume trace also gets the curve of all its
//! volumes together, as the replay's one shared cache sees them.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use engine::mrc::{Curve, Shards, ShardsConfig};

use crate::replay::{Profile, SimError, TraceSpec};

/// Block size of the curves (the working set's granularity).
pub const BLOCK: u32 = 4096;

/// Working sets up to this many blocks (4 GiB) get their exact curve
/// without `--mrc-exact`: the exact sampler costs about 40 bytes per block,
/// so 40 MiB at most.
pub const EXACT_AUTO_BLOCKS: u64 = 1 << 20;

/// Cache sizes the curves are printed at, in percent of the working set.
pub const SIZES_PERCENT: [f64; 18] = [
    0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0,
    100.0,
];

/// What to compute; the default is the default sampler, exact curves only
/// for small working sets.
#[derive(Clone, Copy, Debug, Default)]
pub struct MrcOptions {
    /// The sampler (block size [`BLOCK`]).
    pub sampler: ShardsConfig,
    /// Also compute exact curves, whatever the working set.
    pub exact: bool,
}

/// One curve: of a volume, or of all volumes sharing one cache.
#[derive(Clone, Debug)]
pub struct VolumeCurve {
    /// The volume; `None` for all volumes together.
    pub volume: Option<u32>,
    /// Distinct blocks referenced, in bytes (exact, from the profile).
    pub working_set_bytes: u64,
    /// The SHARDS curve.
    pub sampled: Curve,
    /// The sampler's rate at the end.
    pub rate: f64,
    /// Block references the sampler sampled.
    pub sampled_references: u64,
    /// Blocks it tracked at the end.
    pub tracked_blocks: usize,
    /// Bytes of its whole state.
    pub memory_bytes: usize,
    /// The exact curve, when computed.
    pub exact: Option<Curve>,
    /// Bytes of the exact sampler's state.
    pub exact_memory_bytes: Option<usize>,
}

impl VolumeCurve {
    /// A label for tables and file names: `volume 3`, `all volumes`.
    pub fn label(&self) -> String {
        match self.volume {
            Some(v) => format!("volume {v}"),
            None => "all volumes".into(),
        }
    }

    /// The cache sizes of [`SIZES_PERCENT`], in bytes.
    pub fn sizes(&self) -> Vec<u64> {
        sizes(self.working_set_bytes)
    }

    /// Mean absolute error of the SHARDS curve against the exact one over
    /// [`VolumeCurve::sizes`].
    pub fn mean_absolute_error(&self) -> Option<f64> {
        let exact = self.exact.as_ref()?;
        Some(self.sampled.mean_absolute_error(exact, &self.sizes()))
    }
}

/// [`SIZES_PERCENT`] of `working_set_bytes`.
pub fn sizes(working_set_bytes: u64) -> Vec<u64> {
    SIZES_PERCENT
        .iter()
        .map(|p| (working_set_bytes as f64 * p / 100.0).round() as u64)
        .collect()
}

/// Whether exact curves are computed: asked for, or a working set of at
/// most [`EXACT_AUTO_BLOCKS`].
pub fn wants_exact(profile: &Profile, opts: &MrcOptions) -> bool {
    opts.exact || profile.working_set_bytes <= EXACT_AUTO_BLOCKS * BLOCK as u64
}

/// Streams the selected requests' block references: `f(index, volume,
/// blocks)` per request, with its index (as in [`TraceSpec::for_each`]) and
/// the 4 KiB block numbers it overlaps, in the replay's address space
/// (distinct volumes never share a block).
pub fn for_each_block(
    spec: &TraceSpec,
    profile: &Profile,
    mut f: impl FnMut(u64, u32, RangeInclusive<u64>),
) -> Result<(), SimError> {
    let bs = BLOCK as u64;
    spec.for_each(|index, r| -> Result<(), SimError> {
        // place() never returns an empty range: requests carry data.
        let (offset, len) = profile.place(r);
        f(index, r.volume, offset / bs..=(offset + len - 1) / bs);
        Ok(())
    })
}

/// The samplers of one curve.
struct Samplers {
    sampled: Shards,
    exact: Option<Shards>,
}

impl Samplers {
    fn new(config: ShardsConfig, exact: bool) -> Result<Samplers, SimError> {
        let sampled = Shards::new(config).map_err(|e| SimError::Mrc(e.to_string()))?;
        Ok(Samplers {
            sampled,
            exact: exact.then(|| Shards::exact(config.block_size)),
        })
    }

    fn access(&mut self, block: u64) {
        self.sampled.access(block);
        if let Some(e) = &mut self.exact {
            e.access(block);
        }
    }

    fn finish(self, volume: Option<u32>, working_set_bytes: u64) -> VolumeCurve {
        let s = &self.sampled;
        VolumeCurve {
            volume,
            working_set_bytes,
            sampled: s.curve(),
            rate: s.rate(),
            sampled_references: s.sampled_references(),
            tracked_blocks: s.tracked_blocks(),
            memory_bytes: s.memory_bytes(),
            exact_memory_bytes: self.exact.as_ref().map(Shards::memory_bytes),
            exact: self.exact.as_ref().map(Shards::curve),
        }
    }
}

/// One curve per volume, in volume order, then one of all volumes together
/// when there are several. `progress` is called every few thousand requests
/// with the count so far.
pub fn curves(
    spec: &TraceSpec,
    profile: &Profile,
    opts: &MrcOptions,
    mut progress: impl FnMut(u64),
) -> Result<Vec<VolumeCurve>, SimError> {
    let mut config = opts.sampler;
    config.block_size = BLOCK;
    let exact = wants_exact(profile, opts);
    let mut volumes = BTreeMap::new();
    for &v in profile.volume_working_set.keys() {
        volumes.insert(v, Samplers::new(config, exact)?);
    }
    let mut all = match volumes.len() {
        1 => None,
        _ => Some(Samplers::new(config, exact)?),
    };
    for_each_block(spec, profile, |index, volume, blocks| {
        let s = volumes
            .get_mut(&volume)
            .expect("the profile has every volume");
        for block in blocks {
            s.access(block);
            if let Some(a) = &mut all {
                a.access(block);
            }
        }
        if index % 4096 == 0 {
            progress(index);
        }
    })?;
    progress(profile.requests);
    let mut out: Vec<VolumeCurve> = volumes
        .into_iter()
        .map(|(v, s)| s.finish(Some(v), profile.volume_working_set[&v]))
        .collect();
    if let Some(a) = all {
        out.push(a.finish(None, profile.working_set_bytes));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// An MSR-format trace: volume 0 reads 8 KiB at 0 twice, volume 1
    /// writes 4 KiB at 1 MiB, then reads it back with a 512-byte read.
    fn fixture(dir: &std::path::Path) -> std::path::PathBuf {
        let p = dir.join("fixture.csv");
        let mut f = std::fs::File::create(&p).unwrap();
        for l in [
            "128166372003061629,hm,0,Read,0,8192,100",
            "128166372003061630,hm,1,Write,1048576,4096,100",
            "128166372003061631,hm,0,Read,0,8192,100",
            "128166372003061632,hm,1,Read,1049088,512,100",
        ] {
            writeln!(f, "{l}").unwrap();
        }
        p
    }

    #[test]
    fn a_curve_per_volume_and_one_of_all() {
        let dir = testkit::TempDir::new("rackcache-sim-mrc");
        let spec = TraceSpec::new(fixture(dir.path()));
        let profile = Profile::scan(&spec, 4096).unwrap();
        let curves = curves(&spec, &profile, &MrcOptions::default(), |_| {}).unwrap();
        let labels: Vec<String> = curves.iter().map(VolumeCurve::label).collect();
        assert_eq!(labels, ["volume 0", "volume 1", "all volumes"]);
        let refs: Vec<u64> = curves.iter().map(|c| c.sampled.references()).collect();
        assert_eq!(refs, [4, 2, 6]);
        // Volume 0: blocks 0, 1, 0, 1: hits need both blocks cached.
        let v0 = &curves[0];
        assert_eq!(v0.working_set_bytes, 8192);
        assert_eq!(v0.sampled.miss_ratio(4096), 1.0);
        assert_eq!(v0.sampled.miss_ratio(8192), 0.5);
        // Small: exact curves come without asking, and equal the sampled.
        assert_eq!(v0.exact.as_ref(), Some(&v0.sampled));
        assert_eq!(v0.mean_absolute_error(), Some(0.0));
        // All volumes: 0, 1, X, 0, 1, X, with X volume 1's block: each
        // reuse comes after the two other blocks, so it hits with all three
        // cached.
        let all = &curves[2];
        assert_eq!(all.sampled.miss_ratio(2 * 4096), 1.0);
        assert_eq!(all.sampled.miss_ratio(3 * 4096), 0.5);
        assert_eq!(all.sizes().last(), Some(&(3 * 4096)));
    }

    #[test]
    fn sizes_span_half_a_percent_to_the_working_set() {
        let s = sizes(1 << 30);
        assert_eq!(s.len(), SIZES_PERCENT.len());
        assert_eq!(s[0], (1u64 << 30) / 200);
        assert_eq!(*s.last().unwrap(), 1 << 30);
    }
}
