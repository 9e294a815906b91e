//! Spatial sampling in the manner of SHARDS (Waldspurger et al., FAST'15):
//! a granule is sampled when a hash of its number falls below a threshold,
//! so a sampled granule is sampled on every access and the sample is a
//! fixed fraction `rate` of the volume's address space. A cache of `c`
//! granules then behaves like a cache of `c * rate` sampled granules fed
//! only the sampled accesses.

/// Hash values are compared modulo this (2^24 buckets).
const MODULUS: u64 = 1 << 24;

/// Which granules are sampled.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sampler {
    threshold: u64,
}

impl Sampler {
    /// Samples about `rate` of all granules (clamped to 1 bucket..all).
    pub fn new(rate: f64) -> Sampler {
        let t = (rate * MODULUS as f64).round() as u64;
        Sampler {
            threshold: t.clamp(1, MODULUS),
        }
    }

    /// The fraction of granules sampled.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / MODULUS as f64
    }

    #[inline]
    pub fn sampled(&self, granule: u64) -> bool {
        mix(granule) % MODULUS < self.threshold
    }
}

/// A fixed 64-bit finalizer (splitmix64's): deterministic, and neighbouring
/// granules land far apart, so sequential runs are sampled evenly.
#[inline]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_the_asked_fraction_of_a_sequential_range() {
        let s = Sampler::new(1.0 / 64.0);
        let n = (0..1_000_000u64).filter(|&g| s.sampled(g)).count();
        assert!((15_000..16_300).contains(&n), "sampled {n} of 1e6");
        assert!(Sampler::new(1.0).sampled(12345));
    }
}
