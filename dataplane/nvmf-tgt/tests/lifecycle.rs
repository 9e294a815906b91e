//! How queue pairs end, on tokio's paused clock through the in-memory host
//! (`nvmf_harness::mem`): commands already handed to a bdev are drained
//! before the controller is released, keep-alive expiry and teardown do not
//! depend on the host reading its socket, and data buffers stay within the
//! configured budget.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bdev::delay::{DelayBdev, Latencies, LatencyKind};
use bdev::malloc::MallocBdev;
use bdev::{Bdev, CountedBdev, DmaBuf};
use nvmf_harness::mem::{Event, MemHost, Params};
use nvmf_tgt::{SubsystemConfig, Target, TransportOptions};

const NQN: &str = "nqn.2016-06.io.rackcache:lifecycle";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-0000-4000-8000-000000000001";
const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:22222222-0000-4000-8000-000000000002";
const BS: usize = 512;
const BLOCKS: u64 = 1024;

fn options() -> TransportOptions {
    TransportOptions {
        max_queue_depth: 64,
        in_capsule_data_size: 4096,
        max_io_size: 32 << 10,
        max_h2c_data: 8192,
        drain_timeout: Duration::from_secs(5),
        ..TransportOptions::default()
    }
}

struct Fixture {
    target: Target,
    listen: SocketAddr,
    /// The malloc bdev under the delay bdev.
    base: CountedBdev,
    /// The delay bdev, when namespace 1 is one.
    delay: Option<Arc<Bdev>>,
}

/// A target whose namespace 1 is a delay bdev over malloc, with a listener
/// on an ephemeral 127.0.0.1 port (in-memory connections count as arriving
/// there).
async fn fixture(opts: TransportOptions, write_latency: Duration) -> Fixture {
    let target = Target::new(opts, metrics::Registry::new()).unwrap();
    let mut cfg = SubsystemConfig::new(NQN);
    cfg.allow_any_host = true;
    let sub = target.add_subsystem(cfg).unwrap();
    let base = CountedBdev::from(Arc::new(Bdev::Malloc(
        MallocBdev::new("Malloc0", BLOCKS, BS as u32).unwrap(),
    )));
    let us = write_latency.as_micros() as u64;
    let lat = Latencies {
        avg_write_us: us,
        p99_write_us: us,
        ..Latencies::default()
    };
    let delay = Arc::new(Bdev::Delay(
        DelayBdev::new("Delay0", base.clone(), lat).unwrap(),
    ));
    sub.add_namespace(Some(1), delay.clone(), None, None)
        .unwrap();
    // Port 0 binds an ephemeral port; in-memory connections name it.
    let listen = target
        .add_listener(NQN, "127.0.0.1:0".parse().unwrap(), None, None)
        .await
        .unwrap();
    Fixture {
        target,
        listen,
        base,
        delay: Some(delay),
    }
}

fn params(hostnqn: &str, kato_ms: u32) -> Params {
    Params {
        subnqn: NQN.into(),
        hostnqn: hostnqn.into(),
        entries: 64,
        kato_ms,
    }
}

/// An enabled controller: its admin queue and one I/O queue, with the
/// tasks serving them.
async fn controller(
    f: &Fixture,
    hostnqn: &str,
    kato_ms: u32,
    pipe: usize,
) -> (
    MemHost,
    MemHost,
    tokio::task::JoinHandle<()>,
    tokio::task::JoinHandle<()>,
) {
    let (mut admin, at) = MemHost::open(&f.target, f.listen, 64 << 10);
    let c = admin
        .connect(&params(hostnqn, kato_ms), 0, 0)
        .await
        .unwrap();
    assert!(c.status.is_success(), "admin Connect: {c:?}");
    assert!(admin.enable().await.unwrap().status.is_success());
    let (mut io, it) = MemHost::open(&f.target, f.listen, pipe);
    let c = io
        .connect(&params(hostnqn, 0), 1, admin.cntlid)
        .await
        .unwrap();
    assert!(c.status.is_success(), "I/O Connect: {c:?}");
    (admin, io, at, it)
}

async fn base_block(f: &Fixture, slba: u64) -> u8 {
    let (buf, r) = f.base.read(slba * BS as u64, DmaBuf::new(BS)).await;
    r.unwrap();
    assert!(
        buf.iter().all(|&b| b == buf[0]),
        "block {slba} is one pattern"
    );
    buf[0]
}

/// Waits (on paused time) until `cond` holds; panics after `limit`.
async fn until(limit: Duration, mut cond: impl FnMut() -> bool) {
    let r = tokio::time::timeout(limit, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "condition not reached within {limit:?}");
}

#[tokio::test(start_paused = true)]
async fn stale_writes_drain_before_a_reconnected_host_rewrites() {
    let f = fixture(options(), Duration::from_secs(2)).await;
    let sub = f.target.subsystem(NQN).unwrap();
    let (admin, mut io, admin_task, io_task) = controller(&f, HOST, 0, 1 << 20).await;
    // Many writes of 0xAA in flight on the delayed bdev (2 s each).
    const N: u64 = 32;
    for i in 0..N {
        let sqe = MemHost::write_sqe(i * 8, 4096, BS, true);
        io.submit(sqe, Some(&[0xAA; 4096])).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The host goes away without waiting for them.
    drop((admin, io));
    until(Duration::from_secs(1), || sub.live_controllers().is_empty()).await;
    // Later I/O is fast: a stale write would now land after the rewrite.
    let Some(Bdev::Delay(d)) = f.delay.as_deref() else {
        unreachable!("namespace 1 is a delay bdev")
    };
    d.update(LatencyKind::AvgWrite, 0).unwrap();
    d.update(LatencyKind::P99Write, 0).unwrap();
    // It reconnects and rewrites the same blocks with 0xBB.
    let (_admin2, mut io2, _, _) = controller(&f, HOST, 0, 1 << 20).await;
    for i in 0..N {
        let sqe = MemHost::write_sqe(i * 8, 4096, BS, true);
        let c = io2.execute(sqe, Some(&[0xBB; 4096]), None).await.unwrap();
        assert!(c.status.is_success());
    }
    // Long after every stale write could have landed:
    tokio::time::sleep(Duration::from_secs(10)).await;
    for i in 0..N {
        assert_eq!(
            base_block(&f, i * 8).await,
            0xBB,
            "block {} is the rewrite",
            i * 8
        );
    }
    assert_eq!(f.target.abandoned_requests(), 0);
    admin_task.await.unwrap();
    io_task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn keep_alive_expiry_drains_io_in_flight_before_the_queue_closes() {
    let f = fixture(options(), Duration::from_secs(3)).await;
    let (_admin, mut io, admin_task, io_task) = controller(&f, HOST, 1000, 1 << 20).await;
    let sqe = MemHost::write_sqe(16, 4096, BS, true);
    io.submit(sqe, Some(&[0x5A; 4096])).await.unwrap();
    let start = tokio::time::Instant::now();
    // No Keep Alive: the controller expires after 1 s; the I/O queue ends
    // only once its write (3 s) has reached the base bdev.
    admin_task.await.unwrap();
    io_task.await.unwrap();
    assert!(start.elapsed() >= Duration::from_secs(3));
    assert_eq!(base_block(&f, 16).await, 0x5A, "write landed before close");
    assert_eq!(f.target.abandoned_requests(), 0);
    assert!(f
        .target
        .subsystem(NQN)
        .unwrap()
        .live_controllers()
        .is_empty());
}

#[tokio::test(start_paused = true)]
async fn keep_alives_keep_an_idle_controller_and_their_absence_ends_it() {
    let f = fixture(options(), Duration::ZERO).await;
    let (mut admin, mut io, admin_task, io_task) = controller(&f, HOST, 3000, 1 << 20).await;
    // Idle for less than the timeout between Keep Alives, well past it in
    // total: the controller stays.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(admin.keep_alive().await.unwrap().status.is_success());
    }
    let mut b = vec![0u8; BS];
    let c = io
        .execute(MemHost::read_sqe(0, BS, BS), None, Some(&mut b))
        .await
        .unwrap();
    assert!(c.status.is_success());
    // Silence: both queues end after the timeout, and the controller id
    // no longer takes I/O queues.
    let cntlid = admin.cntlid;
    admin_task.await.unwrap();
    io_task.await.unwrap();
    assert!(io.keep_alive().await.is_err(), "I/O queue closed");
    let (mut again, _) = MemHost::open(&f.target, f.listen, 64 << 10);
    let c = again.connect(&params(HOST, 0), 1, cntlid).await.unwrap();
    assert!(!c.status.is_success(), "controller {cntlid} is gone");
}

#[tokio::test(start_paused = true)]
async fn a_host_that_never_reads_cannot_hold_its_queue_open() {
    let f = fixture(options(), Duration::ZERO).await;
    // A pipe of 4 KiB towards the host, which never reads it.
    let (admin, mut io, admin_task, io_task) = controller(&f, HOST, 1000, 4096).await;
    for i in 0..32 {
        io.submit(MemHost::read_sqe(i * 64, 32 << 10, BS), None)
            .await
            .unwrap();
    }
    // Keep-alive expiry ends the controller, though the I/O queue's task
    // is stuck writing read data nobody reads.
    let r = tokio::time::timeout(Duration::from_secs(60), async {
        admin_task.await.unwrap();
        io_task.await.unwrap();
    })
    .await;
    assert!(r.is_ok(), "teardown blocked by a host that does not read");
    drop((admin, io));
    assert_eq!(f.target.buffer_bytes_in_use(), 0, "buffers given back");
}

#[tokio::test(start_paused = true)]
async fn stalled_r2t_writes_stay_within_the_buffer_budget() {
    let opts = TransportOptions {
        num_shared_buffers: 16,
        io_unit_size: 8192,
        h2c_data_timeout: Duration::from_secs(10),
        ..options()
    };
    let budget = 16 * 8192;
    let f = fixture(opts, Duration::ZERO).await;
    let (_a1, mut hog, _, hog_task) = controller(&f, HOST, 0, 1 << 20).await;
    // 32 writes of 32 KiB by R2T (1 MiB) whose data never comes.
    for i in 0..32u64 {
        let sqe = MemHost::write_sqe(i * 64, 32 << 10, BS, false);
        hog.submit(sqe, None).await.unwrap();
    }
    // Only what the host's share of the budget (half) allows gets an R2T.
    let mut r2ts = 0;
    while let Ok(Ok(Event::R2t(_))) =
        tokio::time::timeout(Duration::from_millis(100), hog.recv()).await
    {
        r2ts += 1;
    }
    assert_eq!(
        r2ts, 2,
        "two 32 KiB transfers fill half of a 128 KiB budget"
    );
    let in_use = f.target.buffer_bytes_in_use();
    assert!(in_use > 0 && in_use <= budget, "{in_use} bytes in use");
    // Another host is served meanwhile, reads and R2T writes alike.
    let (_a2, mut other, _, _) = controller(&f, OTHER_HOST, 0, 1 << 20).await;
    for i in 0..8u64 {
        let sqe = MemHost::write_sqe(900 + i, BS, BS, false);
        let data = [i as u8 + 1; BS];
        let c = other.execute(sqe, Some(&data), None).await.unwrap();
        assert!(c.status.is_success());
        let mut b = vec![0u8; 32 << 10];
        let c = other
            .execute(MemHost::read_sqe(0, 32 << 10, BS), None, Some(&mut b))
            .await
            .unwrap();
        assert!(c.status.is_success());
        assert!(f.target.buffer_bytes_in_use() <= budget);
    }
    // The stalled transfers time out: the hog's queue closes and gives
    // its units back.
    tokio::time::timeout(Duration::from_secs(30), hog_task)
        .await
        .expect("stalled queue closed after h2c_data_timeout")
        .unwrap();
    assert_eq!(f.target.buffer_bytes_in_use(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_command_that_never_completes_is_abandoned_and_counted() {
    use bdev::error_inject::{ErrorBdev, ErrorType, IoTypeSel};
    let target = Target::new(options(), metrics::Registry::new()).unwrap();
    let mut cfg = SubsystemConfig::new(NQN);
    cfg.allow_any_host = true;
    let sub = target.add_subsystem(cfg).unwrap();
    let base = CountedBdev::from(Arc::new(Bdev::Malloc(
        MallocBdev::new("Malloc0", BLOCKS, BS as u32).unwrap(),
    )));
    let ee = ErrorBdev::new("EE_Malloc0", base.clone());
    ee.inject(IoTypeSel::Kind(bdev::IoKind::Write), ErrorType::Pending, 1)
        .unwrap();
    sub.add_namespace(Some(1), Arc::new(Bdev::Error(ee)), None, None)
        .unwrap();
    let listen = target
        .add_listener(NQN, "127.0.0.1:0".parse().unwrap(), None, None)
        .await
        .unwrap();
    let f = Fixture {
        target: target.clone(),
        listen,
        delay: None,
        base,
    };
    let (admin, mut io, admin_task, io_task) = controller(&f, HOST, 0, 1 << 20).await;
    io.submit(MemHost::write_sqe(0, 4096, BS, true), Some(&[1; 4096]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let start = tokio::time::Instant::now();
    drop((admin, io));
    admin_task.await.unwrap();
    io_task.await.unwrap();
    // The queue waited the whole drain timeout, then gave up on the write.
    assert!(start.elapsed() >= options().drain_timeout);
    assert_eq!(target.abandoned_requests(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_reconnecting_hosts_connect_waits_for_its_old_controller_to_drain() {
    use loadgen::wire;
    let f = fixture(options(), Duration::from_secs(2)).await;
    let sub = f.target.subsystem(NQN).unwrap();
    let (admin, mut io, _, _) = controller(&f, HOST, 0, 1 << 20).await;
    io.submit(MemHost::write_sqe(40, 4096, BS, true), Some(&[0x77; 4096]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop((admin, io));
    until(Duration::from_secs(1), || sub.live_controllers().is_empty()).await;
    // Connect and the Property Set behind it, in one write.
    let (mut h, _) = MemHost::open(&f.target, f.listen, 64 << 10);
    h.initialize().await.unwrap();
    let (connect, data) = wire::connect(1, NQN, HOST, [0x33; 16], 0, 64, 0, 0);
    let mut out = Vec::new();
    wire::put_command(&mut out, &connect, Some(&data), wire::Digests::default());
    let enable = wire::property_set(2, wire::prop::CC, wire::prop::CC_ENABLE);
    wire::put_command(&mut out, &enable, None, wire::Digests::default());
    h.send(&out).await.unwrap();
    let start = tokio::time::Instant::now();
    let mut cids = Vec::new();
    for _ in 0..2 {
        match h.recv().await.unwrap() {
            Event::Completion(c) => {
                assert!(c.status.is_success(), "{c:?}");
                if cids.is_empty() {
                    // Answered only once the stale write has landed.
                    assert!(start.elapsed() >= Duration::from_millis(1900));
                    assert_eq!(base_block(&f, 40).await, 0x77);
                }
                cids.push(c.cid);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(cids, [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn deleting_the_subsystem_drains_io_in_flight_before_its_queues_close() {
    let f = fixture(options(), Duration::from_secs(3)).await;
    let (_admin, mut io, admin_task, io_task) = controller(&f, HOST, 0, 1 << 20).await;
    io.submit(MemHost::write_sqe(24, 4096, BS, true), Some(&[0x3C; 4096]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    f.target.remove_subsystem(NQN).unwrap();
    admin_task.await.unwrap();
    io_task.await.unwrap();
    assert_eq!(base_block(&f, 24).await, 0x3C, "write landed before close");
    assert_eq!(f.target.abandoned_requests(), 0);
}

/// A controller already torn down (its host went away) whose writes are
/// still in flight: a revocation answers only once they have landed, so the
/// volume can be handed to another node safely. `listed`: the host is on
/// the subsystem's list (otherwise it connects through allow_any_host).
async fn revocation_waits_for_a_draining_controller(
    listed: bool,
    revoke: impl FnOnce(&Fixture) -> nvmf_tgt::Revocation,
) {
    let f = fixture(options(), Duration::from_secs(2)).await;
    let sub = f.target.subsystem(NQN).unwrap();
    if listed {
        sub.add_host(HOST).unwrap();
    } else {
        f.target.set_allow_any_host(NQN, true).unwrap();
    }
    let (admin, mut io, admin_task, io_task) = controller(&f, HOST, 0, 1 << 20).await;
    for i in 0..4u64 {
        let sqe = MemHost::write_sqe(64 + i * 8, 4096, BS, true);
        io.submit(sqe, Some(&[0xC3; 4096])).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop((admin, io));
    until(Duration::from_secs(1), || sub.live_controllers().is_empty()).await;
    assert_eq!(base_block(&f, 64).await, 0, "writes still in flight");
    let r = revoke(&f);
    assert_eq!(r.len(), 0, "nothing live to tear down");
    assert!(r.wait(Duration::from_secs(60)).await);
    for i in 0..4u64 {
        assert_eq!(
            base_block(&f, 64 + i * 8).await,
            0xC3,
            "write landed before the revocation returned"
        );
    }
    admin_task.await.unwrap();
    io_task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn remove_host_waits_for_a_torn_down_controller_still_draining() {
    revocation_waits_for_a_draining_controller(true, |f| f.target.remove_host(NQN, HOST).unwrap())
        .await;
}

#[tokio::test(start_paused = true)]
async fn remove_listener_waits_for_a_torn_down_controller_still_draining() {
    revocation_waits_for_a_draining_controller(true, |f| {
        f.target.remove_listener(NQN, f.listen).unwrap()
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn delete_subsystem_waits_for_a_torn_down_controller_still_draining() {
    revocation_waits_for_a_draining_controller(true, |f| f.target.remove_subsystem(NQN).unwrap())
        .await;
}

#[tokio::test(start_paused = true)]
async fn allow_any_host_off_waits_for_a_torn_down_controller_still_draining() {
    revocation_waits_for_a_draining_controller(false, |f| {
        f.target.set_allow_any_host(NQN, false).unwrap()
    })
    .await;
}
