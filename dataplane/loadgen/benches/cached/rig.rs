//! The bench's rig: the project's NVMe/TCP target in this process (its
//! runtime pinned to one CPU, as `make bench` pins the daemon), a one-node
//! Ceph whose RBD images are the cores, one cache device shared by the
//! cached volumes, and the load generator on the other CPU.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bdev::file::FileBdev;
use bdev::malloc::MallocBdev;
use bdev::rbd::{ClusterConfig, RbdBdev, RbdCluster};
use bdev::{Bdev, CountedBdev, DmaBuf};
use cache::device::CacheDevice;
use cache::volume::{CachedVolume, VolumeParams, VolumeStats};
use loadgen::replay::{ReplayOptions, ReplayReport};
use loadgen::run::{run, Report, RunParams, DEFAULT_HOSTNQN};
use loadgen::workload::Pattern;
use nvmf_tgt::{SubsystemConfig, Target, TransportOptions};
use testkit::Ceph;

pub const TARGET_CPU: usize = 0;
pub const LOADGEN_CPU: usize = 1;
pub const MIB: u64 = 1 << 20;
/// LBA size of every namespace (and the sector size replays widen to).
pub const BLOCK: u32 = 4096;

pub use testkit::pin_current_thread;

/// Runs `f` on a thread pinned to the load generator's CPU.
pub fn on_loadgen_cpu<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_current_thread(LOADGEN_CPU)
                .unwrap_or_else(|e| panic!("pin to CPU {LOADGEN_CPU}: {e}"));
            f()
        })
        .join()
        .expect("load generator thread panicked")
    })
}

/// Which bdev holds the cache.
#[derive(Clone, Copy, PartialEq)]
pub enum CacheKind {
    /// A file on local disk (O_DIRECT where the filesystem allows it).
    File,
    /// RAM.
    Malloc,
}

/// An exported namespace.
pub struct Export {
    pub addr: SocketAddr,
    pub nqn: String,
}

pub struct Rig {
    rt: tokio::runtime::Runtime,
    /// Thread ids of the target runtime's threads (workers and blocking
    /// pool), for [`Rig::target_cpu_ns`].
    threads: Arc<Mutex<Vec<u32>>>,
    target: Target,
    pub cluster: Arc<RbdCluster>,
    pub pool: String,
    pub cache_bdev: Arc<Bdev>,
    pub cache: Arc<CacheDevice>,
    next_nqn: AtomicU32,
}

impl Rig {
    /// Starts the target and formats a cache device of `cache_mib` MiB
    /// (a file in `dir`, or RAM), first written over entirely so that
    /// reading it directly reads data, not holes or unbacked pages.
    pub fn start(ceph: &Ceph, dir: &Path, kind: CacheKind, cache_mib: u64) -> Result<Self, String> {
        let threads = Arc::new(Mutex::new(Vec::new()));
        let t = Arc::clone(&threads);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .on_thread_start(move || {
                // Blocking-pool threads and librados' threads (the cluster is
                // connected from here) inherit it, as under `taskset`.
                let _ = pin_current_thread(TARGET_CPU);
                if let Some(tid) = current_tid() {
                    t.lock().expect("thread list").push(tid);
                }
            })
            .enable_all()
            .build()
            .map_err(|e| format!("target runtime: {e}"))?;
        let opts = TransportOptions {
            // Trace requests up to 1 MiB stay one command each, so the
            // volume counts the requests the simulator counts.
            max_io_size: 1 << 20,
            ..TransportOptions::default()
        };
        let target =
            Target::new(opts, metrics::Registry::new()).map_err(|e| format!("target: {e}"))?;
        let cfg = ClusterConfig {
            user: ceph.var("RACKCACHE_CEPH_USER").into(),
            mon_host: Some(ceph.var("RACKCACHE_CEPH_MON_HOST").into()),
            key: Some(ceph.var("RACKCACHE_CEPH_KEY").into()),
            ..Default::default()
        };
        let cluster = rt
            .block_on(async {
                tokio::task::spawn_blocking(move || RbdCluster::connect("bench", &cfg)).await
            })
            .map_err(|e| format!("connect to Ceph: {e}"))?
            .map_err(|e| format!("connect to Ceph: {e}"))?;
        let blocks = cache_mib * MIB / u64::from(BLOCK);
        let cache_bdev = Arc::new(match kind {
            CacheKind::Malloc => Bdev::Malloc(
                MallocBdev::new("CacheMalloc", blocks, BLOCK).map_err(|e| e.to_string())?,
            ),
            CacheKind::File => {
                let path = dir.join("cache.img");
                let f = std::fs::File::create(&path)
                    .and_then(|f| f.set_len(cache_mib * MIB).map(|_| f))
                    .map_err(|e| format!("create {}: {e}", path.display()))?;
                drop(f);
                Bdev::File(FileBdev::open("CacheFile", &path, BLOCK).map_err(|e| e.to_string())?)
            }
        });
        let b = Arc::clone(&cache_bdev);
        let cache = rt.block_on(async move {
            let chunk = vec![0x5au8; MIB as usize];
            for i in 0..cache_mib {
                let (_, r) = b.write(i * MIB, DmaBuf::from_slice(&chunk)).await;
                r.map_err(|e| format!("fill the cache bdev: {e}"))?;
            }
            CacheDevice::open(CountedBdev::from(b), true)
                .await
                .map_err(|e| format!("format the cache device: {e}"))
        })?;
        Ok(Self {
            rt,
            threads,
            target,
            cluster,
            pool: ceph.var("RACKCACHE_CEPH_POOL").into(),
            cache_bdev,
            cache,
            next_nqn: AtomicU32::new(0),
        })
    }

    /// CPU time the target runtime's threads have used so far, in ns
    /// (user and system, from the scheduler's accounting). Unlike wall
    /// time it leaves out what other processes on the same CPU took: on a
    /// shared machine it is the steadier measure of what one I/O costs the
    /// target. Threads that have exited no longer count.
    pub fn target_cpu_ns(&self) -> u64 {
        let tids = self.threads.lock().expect("thread list").clone();
        tids.iter()
            .filter_map(|tid| {
                let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
                s.split_whitespace().next()?.parse::<u64>().ok()
            })
            .sum()
    }

    /// Runs `f` on the target's runtime and waits for it.
    pub fn on_target<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = T> + Send + 'static,
    ) -> T {
        let h = self.rt.handle();
        h.block_on(h.spawn(f))
            .expect("task on the target runtime panicked")
    }

    /// Opens `image` of the pool as a bdev.
    pub fn rbd(&self, image: &str) -> Result<Arc<Bdev>, String> {
        let b = RbdBdev::open(image, Arc::clone(&self.cluster), &self.pool, image, BLOCK)
            .map_err(|e| format!("open rbd image {image}: {e}"))?;
        Ok(Arc::new(Bdev::Rbd(b)))
    }

    /// Creates (or with `params.load` attaches) a cached volume on the
    /// cache device in front of `core`.
    pub fn volume(&self, params: VolumeParams, core: &Arc<Bdev>) -> Result<CachedVolume, String> {
        let core = CountedBdev::from(Arc::clone(core));
        let cache = Arc::clone(&self.cache);
        let name = params.name.clone();
        self.on_target(CachedVolume::create(params, core, cache))
            .map_err(|e| format!("create cached volume {name}: {e}"))
    }

    pub fn stats(&self, v: &CachedVolume) -> Result<VolumeStats, String> {
        let v = v.clone();
        self.on_target(async move { v.stats().await })
            .map_err(|e| format!("stats: {e}"))
    }

    pub fn reset_stats(&self, v: &CachedVolume) -> Result<(), String> {
        let v = v.clone();
        self.on_target(async move { v.reset_stats().await })
            .map_err(|e| format!("reset_stats: {e}"))
    }

    pub fn stop(&self, v: &CachedVolume, flush: bool) -> Result<(), String> {
        let v = v.clone();
        self.on_target(async move { v.stop(flush).await })
            .map_err(|e| format!("stop: {e}"))
    }

    /// Deletes the volume's cache, discarding dirty data (the bench's
    /// cores hold nothing anyone reads back).
    pub fn delete(&self, v: &CachedVolume) -> Result<(), String> {
        let v = v.clone();
        self.on_target(async move { v.delete(true).await })
            .map_err(|e| format!("delete: {e}"))
    }

    /// Exports `bdev` as namespace 1 of a new subsystem on a free port.
    pub fn export(&self, bdev: CountedBdev) -> Result<Export, String> {
        let n = self.next_nqn.fetch_add(1, Ordering::Relaxed);
        let nqn = format!("nqn.2016-06.io.rackcache:bench-cached-{n}");
        let mut cfg = SubsystemConfig::new(&nqn);
        cfg.allow_any_host = true;
        let sub = self.target.add_subsystem(cfg).map_err(|e| e.to_string())?;
        sub.add_namespace(Some(1), bdev, None, None)
            .map_err(|e| format!("add namespace: {e}"))?;
        let t = self.target.clone();
        let q = nqn.clone();
        let addr = self
            .on_target(async move {
                t.add_listener(&q, "127.0.0.1:0".parse().unwrap(), None, None)
                    .await
            })
            .map_err(|e| format!("listen: {e}"))?;
        Ok(Export { addr, nqn })
    }

    /// Removes the subsystem (its hosts have disconnected).
    pub fn unexport(&self, e: &Export) -> Result<(), String> {
        let revoked = self
            .target
            .remove_subsystem(&e.nqn)
            .map_err(|err| format!("remove {}: {err}", e.nqn))?;
        self.on_target(async move { revoked.wait(Duration::from_secs(10)).await });
        Ok(())
    }

    pub fn shutdown(self) {
        let t = self.target.clone();
        self.on_target(async move {
            let _ = tokio::time::timeout(Duration::from_secs(10), t.shutdown()).await;
        });
        self.rt.shutdown_timeout(Duration::from_secs(5));
    }
}

/// The calling thread's id, from `/proc/thread-self` (a link to
/// `<pid>/task/<tid>`).
fn current_tid() -> Option<u32> {
    std::fs::read_link("/proc/thread-self")
        .ok()?
        .file_name()?
        .to_str()?
        .parse()
        .ok()
}

/// A timed run and what it cost the target's threads.
pub struct Timed {
    pub report: Report,
    /// Target runtime CPU time per completed I/O, in µs.
    pub target_cpu_us: f64,
}

/// [`measure`], with the target runtime's CPU time per I/O.
pub fn measure_cpu(
    rig: &Rig,
    e: &Export,
    pattern: Pattern,
    block_size: usize,
    queue_depth: usize,
    duration: Duration,
) -> Result<Timed, String> {
    let before = rig.target_cpu_ns();
    let report = measure(e, pattern, block_size, queue_depth, duration)?;
    let used = rig.target_cpu_ns().saturating_sub(before);
    Ok(Timed {
        target_cpu_us: used as f64 / 1000.0 / report.ops.max(1) as f64,
        report,
    })
}

/// A timed loadgen workload against `e` from the load generator's CPU.
pub fn measure(
    e: &Export,
    pattern: Pattern,
    block_size: usize,
    queue_depth: usize,
    duration: Duration,
) -> Result<Report, String> {
    let p = RunParams {
        addr: e.addr.to_string(),
        nqn: e.nqn.clone(),
        hostnqn: DEFAULT_HOSTNQN.into(),
        nsid: 1,
        pattern,
        block_size,
        queues: 1,
        queue_depth,
        duration,
        // As the NVMe/TCP bench: the host's core spins, so the figures are
        // the target's, not the host's wake-up latency.
        busy_poll: true,
        dhchap: None,
    };
    on_loadgen_cpu(|| run(&p).map_err(|err| format!("{pattern:?} QD{queue_depth}: {err}")))
}

/// Replays `trace` unpaced against `e` from the load generator's CPU;
/// `after_warmup` runs once the first `warmup` requests completed.
pub fn replay(
    e: &Export,
    trace: &Path,
    queue_depth: usize,
    warmup: u64,
    max_requests: Option<u64>,
    after_warmup: impl FnMut() -> Result<(), String> + Send,
) -> Result<ReplayReport, String> {
    let o = replay_options(e, trace, queue_depth, warmup, max_requests);
    on_loadgen_cpu(|| loadgen::replay::run_with(&o, after_warmup))
        .map_err(|err| format!("replay {}: {err}", trace.display()))
}

pub fn replay_options(
    e: &Export,
    trace: &Path,
    queue_depth: usize,
    warmup: u64,
    max_requests: Option<u64>,
) -> ReplayOptions {
    let mut o = ReplayOptions::new(e.addr.to_string(), e.nqn.clone(), trace);
    o.speedup = 0.0;
    o.queue_depth = queue_depth;
    o.warmup_requests = warmup;
    o.max_requests = max_requests;
    o.sector_size = u64::from(BLOCK);
    o
}
