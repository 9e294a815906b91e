//! The set-up every crash test shares: RAM core and cache devices behind
//! steered bdevs ([`crate::device`]), a cached volume over them, requests
//! run as tasks, the crash, and the restart from what reached the media.
//!
//! Events are ordered by gates and by [`settle`], never by a delay: under
//! the paused clock the tests run with, [`settle`] returns only once no
//! task can run, so whatever the events so far set off has happened.

use std::sync::Arc;
use std::time::Duration;

use bdev::malloc::MallocBdev;
use bdev::{Bdev, DmaBuf};
use cache::device::CacheDevice;
use cache::volume::CachedVolume;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::task::JoinHandle;

use crate::common::{params, SECTOR};
use crate::device::{steered, Steer};
use crate::gate::Gate;

/// Size of core (the cached volume).
pub const VOLUME_MIB: u64 = 24;
/// Size of the cache device: ten 1 MiB units.
const CACHE_DEVICE_MIB: u64 = 12;

/// Returns once every task waits (on a gate, a channel, or a timer later
/// than the clock's next step): whatever the events so far set off has
/// happened, and a request not answered now waits for something the test
/// holds. It needs the paused clock of `#[tokio::test(start_paused =
/// true)]`, which moves only when nothing can run: the sleep is that
/// signal, not a delay.
pub async fn settle() {
    assert_eq!(
        Handle::current().runtime_flavor(),
        RuntimeFlavor::CurrentThread,
        "settle needs #[tokio::test(start_paused = true)]"
    );
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// Scheduler turns [`answered`] gives a future before it calls it hung. In
/// a turn every other task that can run runs (a few dozen polls at most):
/// what these tests wait for takes one or two.
const TURNS: usize = 1_000;

/// `fut`'s output, or `None` when it hangs: when other tasks have had
/// [`TURNS`] turns and it is still not done, whether they spin (a hot loop,
/// which would never let a paused clock move) or wait for something that
/// never comes. The clock does not move meanwhile, so what `fut` waits for
/// must not need a timer (the cleaning tick).
pub async fn answered<F: std::future::Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    for _ in 0..TURNS {
        tokio::select! {
            biased;
            out = &mut fut => return Some(out),
            () = tokio::task::yield_now() => {}
        }
    }
    None
}

/// `fut`'s output; fails the test when it hangs (see [`answered`]), so
/// that a regression fails instead of running the paused clock on forever.
pub async fn must<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    match answered(fut).await {
        Some(out) => out,
        None => panic!("{what} never completes"),
    }
}

/// Lets the other tasks have [`TURNS`] turns with the clock held: only
/// work that needs no timer happens.
pub async fn busy() {
    for _ in 0..TURNS {
        tokio::task::yield_now().await;
    }
}

/// What a [`Rig`] is built from.
pub struct RigBuilder {
    json: serde_json::Value,
    core_data: Vec<(u64, Vec<u8>)>,
}

impl RigBuilder {
    /// Bytes core holds before the volume starts.
    pub fn core_data(mut self, offset: u64, data: &[u8]) -> RigBuilder {
        self.core_data.push((offset, data.to_vec()));
        self
    }

    /// Formats the cache device and creates the volume.
    pub async fn build(self) -> Rig {
        let core_ram = Arc::new(Bdev::Malloc(
            MallocBdev::new("core", VOLUME_MIB << 11, SECTOR).unwrap(),
        ));
        for (offset, data) in &self.core_data {
            let (_, r) = core_ram.write(*offset, DmaBuf::from_slice(data)).await;
            r.unwrap();
        }
        let cache_ram = Arc::new(Bdev::Malloc(
            MallocBdev::new("nvme", CACHE_DEVICE_MIB << 11, SECTOR).unwrap(),
        ));
        Rig::start(core_ram, cache_ram, self.json, false).await
    }
}

/// A cached volume over steered RAM devices.
pub struct Rig {
    pub vol: CachedVolume,
    /// The volume's bdev.
    pub bdev: Arc<Bdev>,
    /// Gates, faults and the crash of core.
    pub core: Arc<Steer>,
    /// Gates, faults and the crash of the cache device.
    pub cache: Arc<Steer>,
    core_ram: Arc<Bdev>,
    cache_ram: Arc<Bdev>,
    json: serde_json::Value,
}

impl Rig {
    /// A rig whose volume has `json`'s parameters (over [`params`]'
    /// defaults).
    pub fn builder(json: serde_json::Value) -> RigBuilder {
        RigBuilder {
            json,
            core_data: Vec::new(),
        }
    }

    /// The volume over fresh steered bdevs of the RAM devices: formatted,
    /// or attached with `load` (what a restart with a persisted
    /// configuration does).
    async fn start(
        core_ram: Arc<Bdev>,
        cache_ram: Arc<Bdev>,
        json: serde_json::Value,
        load: bool,
    ) -> Rig {
        let (core_bdev, core) = steered(&core_ram, false);
        let (cache_bdev, cache) = steered(&cache_ram, true);
        let dev = CacheDevice::open(cache_bdev, !load).await.unwrap();
        let mut p = params(json.clone());
        p.load = load;
        let vol = CachedVolume::create(p, core_bdev, dev).await.unwrap();
        Rig {
            bdev: Arc::new(vol.bdev()),
            vol,
            core,
            cache,
            core_ram,
            cache_ram,
            json,
        }
    }

    /// `kill -9`: from now on no write reaches either device, those held
    /// at a gate included. The volume runs on, so that its requests end
    /// and it can be stopped; nothing it writes lands.
    pub fn crash(&self) {
        self.core.crash();
        self.cache.crash();
    }

    /// The restart: the volume stops (without flushing), and a new one
    /// attaches with `load` to what is on the media, through a cache
    /// device opened again.
    pub async fn restart(self) -> Rig {
        must("stopping the volume", self.vol.stop(false))
            .await
            .unwrap();
        Rig::start(self.core_ram, self.cache_ram, self.json, true).await
    }

    /// Stops the volume without flushing.
    pub async fn stop(self) {
        must("stopping the volume", self.vol.stop(false))
            .await
            .unwrap();
    }

    /// Reads through the volume; the read must succeed.
    pub async fn read(&self, offset: u64, len: usize) -> DmaBuf {
        let (got, r) = must("a read", self.bdev.read(offset, DmaBuf::new(len))).await;
        r.unwrap();
        got
    }

    /// Writes through the volume; the write must succeed.
    pub async fn write(&self, offset: u64, data: &[u8]) {
        let (_, r) = must("a write", self.bdev.write(offset, DmaBuf::from_slice(data))).await;
        r.unwrap();
    }

    /// A read running as its own task.
    pub fn submit_read(&self, offset: u64, len: usize) -> JoinHandle<bdev::Result<()>> {
        let b = self.bdev.clone();
        tokio::spawn(async move { b.read(offset, DmaBuf::new(len)).await.1 })
    }

    /// A write running as its own task.
    pub fn submit_write(&self, offset: u64, data: &[u8]) -> JoinHandle<bdev::Result<()>> {
        let (b, buf) = (self.bdev.clone(), DmaBuf::from_slice(data));
        tokio::spawn(async move { b.write(offset, buf).await.1 })
    }

    /// A deallocate running as its own task.
    pub fn submit_unmap(&self, offset: u64, len: u64) -> JoinHandle<bdev::Result<()>> {
        let b = self.bdev.clone();
        tokio::spawn(async move { b.unmap(offset, len).await })
    }

    /// Crashes the moment `req` is acknowledged, with `held` holding
    /// metadata the request may depend on. Once nothing can run, a request
    /// already answered was answered before those writes reached the
    /// media: the crash comes now and they are lost. Otherwise it waits for
    /// them; they are let through, and the crash follows its answer.
    pub async fn crash_at_ack<T>(&self, req: JoinHandle<T>, held: &Gate) -> T {
        settle().await;
        assert!(
            held.held() > 0,
            "nothing is held at the gate while the request is decided: the window is not open"
        );
        let early = req.is_finished();
        if early {
            self.crash();
        }
        held.open();
        let out = must("the request", req).await.expect("the request's task");
        if !early {
            self.crash();
        }
        eprintln!(
            "{}",
            if early {
                "acknowledged while the held writes were still held: they are lost"
            } else {
                "acknowledged once the held writes were let through: they landed"
            }
        );
        out
    }
}
