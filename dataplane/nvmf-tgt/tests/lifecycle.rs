//! How queue pairs end, on tokio's paused clock through the in-memory host
//! (`nvmf_harness::mem`): commands already handed to a bdev are drained
//! before the controller is released, keep-alive expiry and teardown do not
//! depend on the host reading its socket, and data buffers stay within the
//! configured budget.

use std::sync::Arc;
use std::time::Duration;

use bdev::delay::LatencyKind;
use bdev::Bdev;
use nvmf_harness::mem::{Event, MemHost};
use nvmf_tgt::TransportOptions;

mod paused;

use paused::{fixture, options, until, Fixture, BS, HOST, NQN, OTHER_HOST};

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
    let ((admin, at), mut ios) = paused::controller(f, hostnqn, kato_ms, 1, pipe).await;
    let (io, it) = ios.pop().expect("one I/O queue");
    (admin, io, at, it)
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
    f.latency(
        [LatencyKind::AvgWrite, LatencyKind::P99Write],
        Duration::ZERO,
    );
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
            f.base_block(i * 8).await,
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
    assert_eq!(f.base_block(16).await, 0x5A, "write landed before close");
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
    let c = again
        .connect(&paused::params(HOST, 0), 1, cntlid)
        .await
        .unwrap();
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
    let base = paused::malloc();
    let ee = ErrorBdev::new("EE_Malloc0", base.clone());
    ee.inject(IoTypeSel::Kind(bdev::IoKind::Write), ErrorType::Pending, 1)
        .unwrap();
    let f = paused::with_namespace(options(), base, Arc::new(Bdev::Error(ee))).await;
    let target = f.target.clone();
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
    use nvmf_host::wire;
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
                    assert_eq!(f.base_block(40).await, 0x77);
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
    assert_eq!(f.base_block(24).await, 0x3C, "write landed before close");
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
        sub.add_host(HOST, Default::default()).unwrap();
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
    assert_eq!(f.base_block(64).await, 0, "writes still in flight");
    let r = revoke(&f);
    assert_eq!(r.len(), 0, "nothing live to tear down");
    assert!(r.wait(Duration::from_secs(60)).await);
    for i in 0..4u64 {
        assert_eq!(
            f.base_block(64 + i * 8).await,
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

/// An H2CData PDU whose payload arrives in pieces (the first with its
/// header) is read straight into the request's buffer: the data reaches
/// the bdev whole and in place, and what the host sends next is read as
/// usual.
#[tokio::test(start_paused = true)]
async fn an_h2c_payload_arriving_in_pieces_lands_whole() {
    use nvmf_host::wire::{self, Digests};
    let f = fixture(options(), Duration::ZERO).await;
    let (_admin, mut io, _, _) = controller(&f, HOST, 0, 1 << 20).await;
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 + i / 256) as u8).collect();
    let cid = io
        .submit(MemHost::write_sqe(16, data.len(), BS, false), None)
        .await
        .unwrap();
    let r2t = match io.recv().await.unwrap() {
        Event::R2t(r) => r,
        other => panic!("expected an R2T, got {other:?}"),
    };
    assert_eq!((r2t.r2to, r2t.r2tl as usize), (0, data.len()));
    let mut pdu = Vec::new();
    wire::put_h2c(&mut pdu, cid, r2t.ttag, 0, &data, true, Digests::default());
    let header = pdu.len() - data.len();
    // The header with 100 bytes of payload, then the rest in three pieces,
    // each read by the target before the next is sent.
    for (from, to) in [
        (0, header + 100),
        (header + 100, header + 3000),
        (header + 3000, header + 3001),
        (header + 3001, pdu.len()),
    ] {
        io.send(&pdu[from..to]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    match io.recv().await.unwrap() {
        Event::Completion(c) => {
            assert_eq!(c.cid, cid);
            assert!(c.status.is_success(), "write failed: {:?}", c.status);
        }
        other => panic!("expected the write's completion, got {other:?}"),
    }
    let mut back = vec![0u8; data.len()];
    let c = io
        .execute(MemHost::read_sqe(16, data.len(), BS), None, Some(&mut back))
        .await
        .unwrap();
    assert!(c.status.is_success(), "read failed: {:?}", c.status);
    assert!(
        back == data,
        "the data read back differs from the data written"
    );
}
