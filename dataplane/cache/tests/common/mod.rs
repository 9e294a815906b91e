//! Fixture for cached-volume tests: RAM core and cache devices (optionally
//! behind error-injection bdevs), a model of the bytes a host reads back,
//! and a small deterministic random source.

#![allow(dead_code)]

use std::sync::Arc;

use bdev::delay::{DelayBdev, Latencies};
use bdev::error_inject::ErrorBdev;
use bdev::malloc::MallocBdev;
use bdev::{Bdev, CountedBdev, DmaBuf, IoStats};
use cache::device::CacheDevice;
use cache::volume::{CachedVolume, VolumeParams};
use metrics::Registry;

pub const SECTOR: u32 = 512;

/// xorshift64*: reproducible sequences without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

pub fn counted(b: Bdev) -> CountedBdev {
    let reg = Registry::new();
    let name = b.info().name.clone();
    CountedBdev::new(Arc::new(b), IoStats::register(&reg, &name))
}

/// RAM core and cache devices; with `faults`, each behind an error bdev
/// whose handle the test keeps.
pub struct Devices {
    /// What the volume uses as core.
    pub core: CountedBdev,
    /// The RAM under core (to check core's own copy).
    pub core_ram: CountedBdev,
    /// The cache bdev.
    pub cache: CountedBdev,
}

impl Devices {
    pub fn new(volume_mib: u64, cache_dev_mib: u64, faults: bool) -> Devices {
        Self::build(volume_mib, cache_dev_mib, faults, false)
    }

    /// Core and cache behind delay bdevs with different latencies, so that
    /// completions come back in other orders than submissions.
    pub fn delayed(volume_mib: u64, cache_dev_mib: u64) -> Devices {
        Self::build(volume_mib, cache_dev_mib, false, true)
    }

    fn build(volume_mib: u64, cache_dev_mib: u64, faults: bool, delays: bool) -> Devices {
        let core_ram = counted(Bdev::Malloc(
            MallocBdev::new("core", volume_mib << 11, SECTOR).unwrap(),
        ));
        let cache_ram = counted(Bdev::Malloc(
            MallocBdev::new("nvme", cache_dev_mib << 11, SECTOR).unwrap(),
        ));
        let (core, cache) = if faults {
            (
                counted(Bdev::Error(ErrorBdev::new("EE_core", core_ram.clone()))),
                counted(Bdev::Error(ErrorBdev::new("EE_nvme", cache_ram))),
            )
        } else if delays {
            let lat = |r, w| Latencies {
                avg_read_us: r,
                p99_read_us: r * 10,
                avg_write_us: w,
                p99_write_us: w * 10,
            };
            (
                counted(Bdev::Delay(
                    DelayBdev::new("core", core_ram.clone(), lat(300, 500)).unwrap(),
                )),
                counted(Bdev::Delay(
                    DelayBdev::new("nvme", cache_ram, lat(20, 40)).unwrap(),
                )),
            )
        } else {
            (core_ram.clone(), cache_ram)
        };
        Devices {
            core,
            core_ram,
            cache,
        }
    }

    pub fn error_bdev(b: &CountedBdev) -> &ErrorBdev {
        match b.bdev().as_ref() {
            Bdev::Error(e) => e,
            _ => panic!("not an error bdev"),
        }
    }

    pub async fn open_cache(&self) -> Arc<CacheDevice> {
        CacheDevice::open(self.cache.clone(), true).await.unwrap()
    }
}

pub fn params(json: serde_json::Value) -> VolumeParams {
    let mut base = serde_json::json!({
        "name": "Cache0", "core_bdev_name": "core", "cache_bdev_name": "nvme",
        "cache_size_mib": 4
    });
    for (k, v) in json.as_object().unwrap() {
        base[k] = v.clone();
    }
    serde_json::from_value(base).unwrap()
}

pub async fn create(
    d: &Devices,
    dev: &Arc<CacheDevice>,
    p: VolumeParams,
) -> (CachedVolume, Arc<Bdev>) {
    let v = CachedVolume::create(p, d.core.clone(), dev.clone())
        .await
        .unwrap();
    let b = Arc::new(v.bdev());
    (v, b)
}

/// What a host must read back: bytes, and sectors whose content is
/// undefined (a failed write may have landed or not).
pub struct Model {
    pub bytes: Vec<u8>,
    pub undefined: Vec<bool>,
}

impl Model {
    pub fn new(size: usize) -> Model {
        Model {
            bytes: vec![0; size],
            undefined: vec![false; size / SECTOR as usize],
        }
    }

    pub fn write(&mut self, off: u64, data: &[u8]) {
        let o = off as usize;
        self.bytes[o..o + data.len()].copy_from_slice(data);
        self.mark(off, data.len() as u64, false);
    }

    pub fn zero(&mut self, off: u64, len: u64) {
        let o = off as usize;
        self.bytes[o..o + len as usize].fill(0);
        self.mark(off, len, false);
    }

    pub fn mark(&mut self, off: u64, len: u64, undefined: bool) {
        let s = (off / u64::from(SECTOR)) as usize;
        let n = (len / u64::from(SECTOR)) as usize;
        self.undefined[s..s + n].fill(undefined);
    }

    /// Panics with the first differing sector.
    pub fn check(&self, off: u64, got: &[u8], what: &str) {
        let sec = SECTOR as usize;
        for (i, chunk) in got.chunks(sec).enumerate() {
            let s = off as usize / sec + i;
            if self.undefined[s] {
                continue;
            }
            let want = &self.bytes[s * sec..(s + 1) * sec];
            assert!(
                chunk == want,
                "{what}: sector {s} (byte {}) differs from the model: got {:?}.. want {:?}..",
                s * sec,
                &chunk[..8],
                &want[..8]
            );
        }
    }
}

pub async fn read(b: &Bdev, off: u64, len: u64) -> (DmaBuf, bdev::Result<()>) {
    b.read(off, DmaBuf::new(len as usize)).await
}

/// `len` bytes of `b` at `offset`, as on the device.
pub async fn raw(b: &Bdev, offset: u64, len: u64) -> Vec<u8> {
    let (buf, r) = b.read(offset, DmaBuf::new(len as usize)).await;
    r.unwrap();
    buf.to_vec()
}

/// Writes `bytes` at `offset` of `b` (a fault injected on the device).
pub async fn poke(b: &Bdev, offset: u64, bytes: &[u8]) {
    let (_, r) = b.write(offset, DmaBuf::from_slice(bytes)).await;
    r.unwrap();
}
