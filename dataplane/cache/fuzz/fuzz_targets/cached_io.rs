//! Drives a cached volume (RAM core and cache device) with the operations a
//! host's commands become: reads, writes, FUA writes, flushes, deallocates,
//! write-zeroes, and restarts (stop without flushing, attach again with
//! `load`), at any offset and length the input picks, aligned or not,
//! inside the volume or past its end.
//!
//! Nothing may panic. A request inside the volume and aligned to its
//! sectors succeeds; any other is refused and changes nothing. Every read
//! returns what the model of the bytes holds, deallocated ranges read as
//! zeroes, and at the end a full flush leaves the core holding every byte.
//!
//! Input: one byte choosing the policies (write mode, block mode, eviction),
//! then 8 bytes per operation.
#![no_main]

use std::sync::{Arc, OnceLock};

use bdev::malloc::MallocBdev;
use bdev::{Bdev, CountedBdev, DmaBuf, IoStats};
use cache::device::CacheDevice;
use cache::volume::{CachedVolume, VolumeParams};
use libfuzzer_sys::fuzz_target;

const SECTOR: u64 = 512;
const VOLUME: u64 = 4 << 20;
const CACHE_DEVICE: u64 = 8 << 20;
/// The longest request: 64 sectors past a 128 KiB block, so requests
/// straddle blocks.
const MAX_SECTORS: u64 = 320;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
    })
}

/// The policies the first input byte picks among.
fn params(choice: u8, load: bool) -> VolumeParams {
    let write_mode = ["wt", "wb", "wa", "wb"][usize::from(choice & 3)];
    let mut p = serde_json::json!({
        "name": "Fuzz0", "core_bdev_name": "core", "cache_bdev_name": "nvme",
        "cache_size_mib": 1, "write_mode": write_mode, "load": load,
    });
    if choice & 4 != 0 {
        p["mode"] = "fixed".into();
        p["block_sizes_kib"] = serde_json::json!([4]);
    }
    if choice & 8 != 0 {
        p["eviction"] = "lazy".into();
    }
    if choice & 16 != 0 {
        p["admission"] = "nhit:2".into();
    }
    serde_json::from_value(p).expect("valid parameters")
}

/// One operation, decoded from 8 input bytes.
struct Op {
    kind: u8,
    offset: u64,
    len: u64,
    seed: u8,
}

impl Op {
    fn decode(b: &[u8]) -> Op {
        let misaligned = b[0] & 0x80 != 0;
        let raw_off = u64::from(u32::from_le_bytes([b[1], b[2], b[3], 0]));
        let raw_len = u64::from(u16::from_le_bytes([b[4], b[5]]));
        // Mostly sector-aligned, a little past the end now and then.
        let (offset, len) = if misaligned {
            (raw_off % (VOLUME + 4096), raw_len % (MAX_SECTORS * SECTOR))
        } else {
            (
                (raw_off % (VOLUME / SECTOR + 8)) * SECTOR,
                (raw_len % (MAX_SECTORS + 1)) * SECTOR,
            )
        };
        Op {
            kind: b[0] & 0x7f,
            offset,
            len,
            seed: b[6] ^ b[7],
        }
    }

    /// Whether the volume must accept it.
    fn valid(&self) -> bool {
        self.offset.is_multiple_of(SECTOR)
            && self.len.is_multiple_of(SECTOR)
            && self.len > 0
            && self.offset + self.len <= VOLUME
    }

    /// Checks the volume's answer `r` to this request: a valid one must
    /// succeed, any other be refused (an empty one may pass: it changes
    /// nothing). True when the request took effect.
    fn accepted(&self, r: bdev::Result<()>, what: &str) -> bool {
        if self.valid() {
            r.unwrap_or_else(|e| panic!("a valid {what} {}+{} failed: {e}", self.offset, self.len));
            return true;
        }
        assert!(
            r.is_err() || self.len == 0,
            "{what} {}+{} accepted",
            self.offset,
            self.len
        );
        false
    }

    fn data(&self) -> Vec<u8> {
        (0..self.len)
            .map(|i| (i as u8).wrapping_mul(31) ^ self.seed | 1)
            .collect()
    }
}

/// A bdev with its I/O counted, as the daemon registers every bdev.
fn counted(b: Arc<Bdev>) -> CountedBdev {
    let name = b.info().name.clone();
    CountedBdev::new(b, IoStats::register(&metrics::Registry::new(), &name))
}

struct Fixture {
    core: Arc<Bdev>,
    dev: Arc<CacheDevice>,
    choice: u8,
}

async fn attach(f: &Fixture, load: bool) -> (CachedVolume, Bdev) {
    let core = counted(Arc::clone(&f.core));
    let v = CachedVolume::create(params(f.choice, load), core, Arc::clone(&f.dev))
        .await
        .expect("the volume attaches");
    let b = v.bdev();
    (v, b)
}

async fn run(data: &[u8]) {
    let Some((&choice, ops)) = data.split_first() else {
        return;
    };
    let core = Bdev::Malloc(MallocBdev::new("core", VOLUME / SECTOR, SECTOR as u32).unwrap());
    let cache =
        Bdev::Malloc(MallocBdev::new("nvme", CACHE_DEVICE / SECTOR, SECTOR as u32).unwrap());
    let dev = CacheDevice::open(counted(Arc::new(cache)), true)
        .await
        .expect("the cache device formats");
    let f = Fixture {
        core: Arc::new(core),
        dev,
        choice,
    };
    let (mut vol, mut b) = attach(&f, false).await;
    let mut model = vec![0u8; VOLUME as usize];

    for raw in ops.chunks_exact(8).take(64) {
        let op = Op::decode(raw);
        let (o, l) = (op.offset as usize, op.len as usize);
        match op.kind % 8 {
            0 | 1 => {
                let (got, r) = b.read(op.offset, DmaBuf::new(l)).await;
                if op.accepted(r, "read") {
                    assert!(
                        got[..] == model[o..o + l],
                        "read {}+{} differs from what was written",
                        op.offset,
                        op.len
                    );
                }
            }
            2..=4 => {
                let data = op.data();
                let buf = DmaBuf::from_slice(&data);
                let (_, r) = if op.kind % 8 == 4 {
                    b.write_fua(op.offset, buf).await
                } else {
                    b.write(op.offset, buf).await
                };
                if op.accepted(r, "write") {
                    model[o..o + l].copy_from_slice(&data);
                }
            }
            5 => b.flush().await.expect("flush succeeds"),
            6 => {
                let r = if op.seed & 1 == 0 {
                    b.write_zeroes(op.offset, op.len).await
                } else {
                    b.unmap(op.offset, op.len).await
                };
                // Both read back as zeroes afterwards.
                if op.accepted(r, "deallocate or write-zeroes") {
                    model[o..o + l].fill(0);
                }
            }
            _ => {
                // A restart without flushing: dirty data must come back.
                vol.stop(false).await.expect("stop");
                drop(b);
                (vol, b) = attach(&f, true).await;
            }
        }
    }

    // Every byte through the cache, then the core's own copy after a flush.
    let (got, r) = b.read(0, DmaBuf::new(VOLUME as usize)).await;
    r.expect("read the whole volume");
    assert!(got[..] == model[..], "the volume differs from the model");
    vol.flush_all().await.expect("flush_all");
    let (got, r) = f.core.read(0, DmaBuf::new(VOLUME as usize)).await;
    r.expect("read the core");
    assert!(
        got[..] == model[..],
        "the core differs from the model after flush_all"
    );
    vol.delete(false).await.expect("delete");
}

fuzz_target!(|data: &[u8]| {
    runtime().block_on(run(data));
});
