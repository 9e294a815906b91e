//! Limits one host cannot get around, on tokio's paused clock through the
//! in-memory host (`nvmf_harness::mem`): per-request H2CData deadlines and
//! a per-host share of the buffer budget, a buffer wait that keeps its place
//! in line, a target-wide cap on cached buffers, a write timeout that counts
//! from the last progress, shutdown that a blocked write cannot hold, and a
//! reconnect that cannot be overtaken by abandoned writes.

use std::sync::Arc;
use std::time::Duration;

use bdev::delay::LatencyKind;
use nvmf::sqe::{opcode, Sqe};
use nvmf_harness::mem::{Event, MemHost};
use nvmf_host::wire;
use nvmf_tgt::TransportOptions;

mod paused;

use paused::{fixture, options, Fixture, Queue, BS, HOST, NQN, OTHER_HOST};

/// An enabled controller of `hostnqn` (no keep-alive timeout) and `ios`
/// I/O queues, with the tasks serving the I/O queues.
async fn controller(f: &Fixture, hostnqn: &str, ios: u16, pipe: usize) -> (MemHost, Vec<Queue>) {
    let ((admin, _), queues) = paused::controller(f, hostnqn, 0, ios, pipe).await;
    (admin, queues)
}

/// R2Ts that arrive on `h` until it is quiet for 100 ms.
async fn r2ts(h: &mut MemHost) -> Vec<nvmf::pdu::R2t> {
    let mut v = Vec::new();
    while let Ok(Ok(Event::R2t(r))) =
        tokio::time::timeout(Duration::from_millis(100), h.recv()).await
    {
        v.push(r);
    }
    v
}

#[tokio::test(start_paused = true)]
async fn a_host_trickling_data_on_several_queues_cannot_hold_the_budget() {
    let opts = TransportOptions {
        num_shared_buffers: 16,
        io_unit_size: 8192,
        h2c_data_timeout: Duration::from_secs(10),
        ..options()
    };
    let budget = 16 * 8192;
    let f = fixture(opts, Duration::ZERO).await;
    let (_a1, mut hog) = controller(&f, HOST, 2, 1 << 20).await;
    // Four 32 KiB writes by R2T on each of the host's two queues.
    for (q, _) in hog.iter_mut() {
        for i in 0..4u64 {
            q.submit(MemHost::write_sqe(i * 64, 32 << 10, BS, false), None)
                .await
                .unwrap();
        }
    }
    let mut first = Vec::new();
    for (q, _) in hog.iter_mut() {
        first.push(r2ts(q).await);
    }
    let granted: usize = first.iter().map(Vec::len).sum();
    assert_eq!(
        granted, 2,
        "all queues of one host share half of the budget: {first:?}"
    );
    assert!(f.target.buffer_bytes_in_use() <= budget / 2);
    let (q, r) = if first[0].is_empty() {
        (1, first[1][0])
    } else {
        (0, first[0][0])
    };
    // The host trickles data for one request, never completing it; another
    // host is served all along, and the trickle does not keep the stalled
    // requests (the trickled one included) alive past their deadline.
    let (_a2, mut other) = controller(&f, OTHER_HOST, 1, 1 << 20).await;
    let (other, _) = &mut other[0];
    let mut sent = 0u32;
    let mut rounds = 0;
    while !hog[q].1.is_finished() {
        rounds += 1;
        assert!(rounds <= 30, "the trickling host's queue is still open");
        let mut out = Vec::new();
        wire::put_h2c(
            &mut out,
            r.cccid,
            r.ttag,
            sent,
            &[7; 512],
            false,
            wire::Digests::default(),
        );
        if hog[q].0.send(&out).await.is_ok() {
            sent += 512;
        }
        let mut b = vec![0u8; 32 << 10];
        let c = tokio::time::timeout(
            Duration::from_secs(5),
            other.execute(MemHost::read_sqe(0, 32 << 10, BS), None, Some(&mut b)),
        )
        .await
        .expect("the other host is served while the first holds its share")
        .unwrap();
        assert!(c.status.is_success());
        assert!(f.target.buffer_bytes_in_use() <= budget);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_waiting_for_buffers_keeps_its_place_in_line() {
    // 8 units of 4 KiB; each host may hold 4 (one 16 KiB transfer).
    let opts = TransportOptions {
        num_shared_buffers: 8,
        io_unit_size: 4096,
        max_io_size: 16 << 10,
        h2c_data_timeout: Duration::from_secs(60),
        ..options()
    };
    let f = fixture(opts, Duration::ZERO).await;
    f.latency(
        [LatencyKind::P99Read, LatencyKind::AvgRead],
        Duration::from_millis(10),
    );
    // A third host holds 4 units with a write whose data never comes.
    let (_ad, mut d) = controller(&f, "nqn.2014-08.org.nvmexpress:uuid:d", 1, 1 << 20).await;
    d[0].0
        .submit(MemHost::write_sqe(512, 16 << 10, BS, false), None)
        .await
        .unwrap();
    assert_eq!(r2ts(&mut d[0].0).await.len(), 1);
    // Another keeps the other 4 busy with 4 KiB reads, one after another
    // on each of 8 queues.
    let (_ab, b) = controller(&f, OTHER_HOST, 8, 1 << 20).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut busy = Vec::new();
    for (mut q, _) in b {
        let stop = stop.clone();
        busy.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let c = q
                    .execute(MemHost::read_sqe(0, 4096, BS), None, Some(&mut buf))
                    .await
                    .unwrap();
                assert!(c.status.is_success());
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // This host needs 4 units at once, and keeps its queue busy with
    // writes in capsules (no buffer units) meanwhile.
    let (_aa, mut a) = controller(&f, HOST, 1, 1 << 20).await;
    let (a, _) = &mut a[0];
    let read = a
        .submit(MemHost::read_sqe(0, 16 << 10, BS), None)
        .await
        .unwrap();
    let mut done = None;
    for i in 0..2000u64 {
        let w = a
            .execute(
                MemHost::write_sqe(600 + i % 64, BS, BS, true),
                Some(&[1; BS]),
                None,
            )
            .await
            .unwrap();
        assert!(w.status.is_success());
        tokio::time::sleep(Duration::from_millis(1)).await;
        while let Ok(Ok(e)) = tokio::time::timeout(Duration::ZERO, a.recv()).await {
            if let Event::Completion(c) = e {
                if c.cid == read {
                    done = Some(c);
                }
            }
        }
        if done.is_some() {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let c = done.expect("the 16 KiB read got its units while the other host kept reading");
    assert!(c.status.is_success(), "{c:?}");
    for t in busy {
        t.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_that_never_gets_buffers_is_interrupted() {
    let opts = TransportOptions {
        num_shared_buffers: 8,
        io_unit_size: 4096,
        max_io_size: 16 << 10,
        h2c_data_timeout: Duration::from_secs(10),
        ..options()
    };
    let f = fixture(opts, Duration::ZERO).await;
    let (_a, mut q) = controller(&f, HOST, 1, 1 << 20).await;
    let (q, _) = &mut q[0];
    // Two writes whose data never comes: the first holds the host's share,
    // the second waits for buffers.
    q.submit(MemHost::write_sqe(0, 16 << 10, BS, false), None)
        .await
        .unwrap();
    let second = q
        .submit(MemHost::write_sqe(64, 16 << 10, BS, false), None)
        .await
        .unwrap();
    let mut got = None;
    let r = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match q.recv().await {
                Ok(Event::Completion(c)) if c.cid == second => break c,
                Ok(_) => {}
                Err(e) => panic!("queue ended before the waiting write was answered: {e}"),
            }
        }
    })
    .await;
    if let Ok(c) = r {
        got = Some(c);
    }
    let c = got.expect("the waiting write is answered");
    assert_eq!(
        (c.status.sct, c.status.sc, c.status.dnr),
        (0, 0x21, false),
        "Command Interrupted: {c:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn buffer_caches_of_many_queues_stay_within_the_budget() {
    let opts = TransportOptions {
        num_shared_buffers: 16,
        io_unit_size: 8192,
        ..options()
    };
    let budget = 16 * 8192;
    let f = fixture(opts, Duration::ZERO).await;
    let (_a, mut queues) = controller(&f, HOST, 16, 1 << 20).await;
    // Each queue frees (and would keep) two 32 KiB buffers: 1 MiB in all.
    for (q, _) in queues.iter_mut() {
        let x = q
            .submit(MemHost::read_sqe(0, 32 << 10, BS), None)
            .await
            .unwrap();
        let y = q
            .submit(MemHost::read_sqe(64, 32 << 10, BS), None)
            .await
            .unwrap();
        let mut left = vec![x, y];
        while !left.is_empty() {
            if let Event::Completion(c) = q.recv().await.unwrap() {
                assert!(c.status.is_success());
                left.retain(|&cid| cid != c.cid);
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let cached = f.target.buffer_cache_bytes();
    assert!(cached > 0, "buffers are kept for reuse");
    assert!(cached <= budget, "{cached} bytes cached, budget {budget}");
    drop(queues);
    let (_b, q) = controller(&f, OTHER_HOST, 1, 1 << 20).await;
    drop(q);
}

#[tokio::test(start_paused = true)]
async fn a_slow_reader_keeps_its_queue_while_bytes_move() {
    let opts = TransportOptions {
        write_timeout: Duration::from_secs(2),
        ..options()
    };
    let f = fixture(opts, Duration::ZERO).await;
    let (_a, mut q) = controller(&f, HOST, 1, 4096).await;
    let (q, _) = &mut q[0];
    let cid = q
        .submit(MemHost::read_sqe(0, 32 << 10, BS), None)
        .await
        .unwrap();
    // 1 KiB a second: the 32 KiB batch takes far longer than the write
    // timeout, but it never stops moving.
    let mut got = 0;
    while got < 32 << 10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let n = q.read_some(1024).await.unwrap();
        assert!(n > 0, "the target closed the queue of a host that reads");
        got += n;
    }
    loop {
        match q.recv().await.expect("the queue is still open") {
            Event::Completion(c) if c.cid == cid => {
                assert!(c.status.is_success());
                break;
            }
            _ => {}
        }
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_is_not_held_by_a_queue_blocked_writing() {
    let opts = TransportOptions {
        write_timeout: nvmf_tgt::MAX_TIMEOUT,
        ..options()
    };
    let f = fixture(opts, Duration::ZERO).await;
    // An admin queue (nothing else would tear its controller down) with a
    // 4 KiB pipe towards a host that never reads it.
    let (mut admin, task) = MemHost::open(&f.target, f.listen, 4096);
    let c = admin.connect(&paused::params(HOST, 0), 0, 0).await.unwrap();
    assert!(c.status.is_success());
    assert!(admin.enable().await.unwrap().status.is_success());
    for _ in 0..8 {
        let sqe = Sqe::build(
            opcode::IDENTIFY,
            0,
            0,
            wire::transport(4096),
            [1, 0, 0, 0, 0, 0],
        );
        admin.submit(sqe, None).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    f.target.shutdown().await;
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the queue blocked in a write ended with the drain")
        .unwrap();
    assert!(f
        .target
        .subsystem(NQN)
        .unwrap()
        .live_controllers()
        .is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_reconnect_waits_for_writes_abandoned_by_the_drain() {
    // Writes outlast the drain timeout (5 s) and the parked Connect's
    // bound (10 s).
    let f = fixture(options(), Duration::from_secs(15)).await;
    let sub = f.target.subsystem(NQN).unwrap();
    let (admin, mut q) = controller(&f, HOST, 1, 1 << 20).await;
    const N: u64 = 8;
    for i in 0..N {
        let sqe = MemHost::write_sqe(i * 8, 4096, BS, true);
        q[0].0.submit(sqe, Some(&[0xAA; 4096])).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop((admin, q));
    let r = tokio::time::timeout(Duration::from_secs(1), async {
        while !sub.live_controllers().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "the controller ends");
    f.latency(
        [LatencyKind::AvgWrite, LatencyKind::P99Write],
        Duration::ZERO,
    );
    // The host reconnects, retrying while told Controller Busy.
    let mut busy = 0;
    let (mut admin, _) = loop {
        let (mut h, t) = MemHost::open(&f.target, f.listen, 64 << 10);
        let c = h.connect(&paused::params(HOST, 0), 0, 0).await.unwrap();
        if c.status.is_success() {
            break (h, t);
        }
        assert_eq!(
            (c.status.sct, c.status.sc, c.status.dnr),
            (1, 0x81, false),
            "only Controller Busy: {c:?}"
        );
        busy += 1;
        assert!(busy < 10);
    };
    assert!(
        busy >= 1,
        "the Connect was not let through while writes ran"
    );
    assert!(admin.enable().await.unwrap().status.is_success());
    let (mut io, _) = MemHost::open(&f.target, f.listen, 1 << 20);
    let c = io
        .connect(&paused::params(HOST, 0), 1, admin.cntlid)
        .await
        .unwrap();
    assert!(c.status.is_success());
    for i in 0..N {
        let sqe = MemHost::write_sqe(i * 8, 4096, BS, true);
        let c = io.execute(sqe, Some(&[0xBB; 4096]), None).await.unwrap();
        assert!(c.status.is_success());
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    for i in 0..N {
        assert_eq!(
            f.base_block(i * 8).await,
            0xBB,
            "block {} is the rewrite",
            i * 8
        );
    }
    assert_eq!(f.target.abandoned_requests(), N);
}
