//! The fixture of the target's paused-clock tests (`lifecycle`, `limits`):
//! a target whose namespace 1 sits over a malloc bdev (through a delay bdev
//! unless a test brings its own), a listener on an ephemeral 127.0.0.1 port
//! that in-memory connections (`nvmf_harness::mem`) count as arriving on,
//! and enabled controllers on it.

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bdev::delay::{DelayBdev, Latencies, LatencyKind};
use bdev::malloc::MallocBdev;
use bdev::{Bdev, CountedBdev, DmaBuf};
use nvmf_harness::mem::{MemHost, Params};
use nvmf_tgt::{SubsystemConfig, Target, TransportOptions};
use tokio::task::JoinHandle;

pub const NQN: &str = "nqn.2016-06.io.rackcache:paused";
pub const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-0000-4000-8000-000000000001";
pub const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:22222222-0000-4000-8000-000000000002";
pub const BS: usize = 512;
pub const BLOCKS: u64 = 1024;

/// Small transfers (32 KiB, H2CData in 8 KiB), so budgets are easy to fill.
pub fn options() -> TransportOptions {
    TransportOptions {
        max_queue_depth: 64,
        in_capsule_data_size: 4096,
        max_io_size: 32 << 10,
        max_h2c_data: 8192,
        drain_timeout: Duration::from_secs(5),
        ..TransportOptions::default()
    }
}

pub struct Fixture {
    pub target: Target,
    pub listen: SocketAddr,
    /// The malloc bdev under namespace 1.
    pub base: CountedBdev,
    /// The delay bdev, when namespace 1 is one.
    pub delay: Option<Arc<Bdev>>,
}

/// A malloc bdev of `BLOCKS` blocks of `BS` bytes.
pub fn malloc() -> CountedBdev {
    CountedBdev::from(Arc::new(Bdev::Malloc(
        MallocBdev::new("Malloc0", BLOCKS, BS as u32).unwrap(),
    )))
}

/// A target whose namespace 1 is a delay bdev (`write_latency`) over malloc.
pub async fn fixture(opts: TransportOptions, write_latency: Duration) -> Fixture {
    let base = malloc();
    let us = write_latency.as_micros() as u64;
    let lat = Latencies {
        avg_write_us: us,
        p99_write_us: us,
        ..Latencies::default()
    };
    let delay = Arc::new(Bdev::Delay(
        DelayBdev::new("Delay0", base.clone(), lat).unwrap(),
    ));
    let mut f = with_namespace(opts, base, delay.clone()).await;
    f.delay = Some(delay);
    f
}

/// A target (any host allowed) whose namespace 1 is `ns`, built over `base`.
pub async fn with_namespace(opts: TransportOptions, base: CountedBdev, ns: Arc<Bdev>) -> Fixture {
    let target = Target::new(opts, metrics::Registry::new()).unwrap();
    let mut cfg = SubsystemConfig::new(NQN);
    cfg.allow_any_host = true;
    let sub = target.add_subsystem(cfg).unwrap();
    sub.add_namespace(Some(1), ns, None, None).unwrap();
    // Port 0 binds an ephemeral port; in-memory connections name it.
    let listen = target
        .add_listener(NQN, "127.0.0.1:0".parse().unwrap(), None, None)
        .await
        .unwrap();
    Fixture {
        target,
        listen,
        base,
        delay: None,
    }
}

impl Fixture {
    /// Sets the delay bdev's latencies of `kinds` to `d`.
    pub fn latency(&self, kinds: [LatencyKind; 2], d: Duration) {
        let Some(Bdev::Delay(b)) = self.delay.as_deref() else {
            unreachable!("namespace 1 is a delay bdev")
        };
        for k in kinds {
            b.update(k, d.as_micros() as u64).unwrap();
        }
    }

    /// The first byte of block `slba` on the base bdev, which the test
    /// wrote with one pattern.
    pub async fn base_block(&self, slba: u64) -> u8 {
        let (buf, r) = self.base.read(slba * BS as u64, DmaBuf::new(BS)).await;
        r.unwrap();
        assert!(
            buf.iter().all(|&b| b == buf[0]),
            "block {slba} is one pattern"
        );
        buf[0]
    }
}

pub fn params(hostnqn: &str, kato_ms: u32) -> Params {
    Params {
        subnqn: NQN.into(),
        hostnqn: hostnqn.into(),
        entries: 64,
        kato_ms,
    }
}

/// A served queue: the host's end and the task serving the target's end.
pub type Queue = (MemHost, JoinHandle<()>);

/// An enabled controller of `hostnqn` (keep-alive timeout `kato_ms`) with
/// `ios` I/O queues, each piped through `pipe` bytes.
pub async fn controller(
    f: &Fixture,
    hostnqn: &str,
    kato_ms: u32,
    ios: u16,
    pipe: usize,
) -> (Queue, Vec<Queue>) {
    let (mut admin, admin_task) = MemHost::open(&f.target, f.listen, 64 << 10);
    let c = admin
        .connect(&params(hostnqn, kato_ms), 0, 0)
        .await
        .unwrap();
    assert!(c.status.is_success(), "admin Connect: {c:?}");
    assert!(admin.enable().await.unwrap().status.is_success());
    let mut queues = Vec::new();
    for qid in 1..=ios {
        let (mut io, task) = MemHost::open(&f.target, f.listen, pipe);
        let c = io
            .connect(&params(hostnqn, 0), qid, admin.cntlid)
            .await
            .unwrap();
        assert!(c.status.is_success(), "I/O Connect {qid}: {c:?}");
        queues.push((io, task));
    }
    ((admin, admin_task), queues)
}

/// Waits (on paused time) until `cond` holds; panics after `limit`.
pub async fn until(limit: Duration, mut cond: impl FnMut() -> bool) {
    let r = tokio::time::timeout(limit, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "condition not reached within {limit:?}");
}
