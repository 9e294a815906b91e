//! The rbd bdev against a real one-node Ceph (hack/ceph.sh), as the
//! restricted CSI user. Needs the Ceph packages (hack/deps.sh apt).

use std::sync::Arc;

use bdev::rbd::{ClusterConfig, RbdBdev, RbdCluster};
use bdev::{Bdev, BdevError, DmaBuf};
use testkit::Ceph;

/// The restricted CSI user's connection settings for `ceph`.
fn csi_user(ceph: &Ceph) -> ClusterConfig {
    ClusterConfig {
        user: ceph.var("RACKCACHE_CEPH_USER").into(),
        mon_host: Some(ceph.var("RACKCACHE_CEPH_MON_HOST").into()),
        key: Some(ceph.var("RACKCACHE_CEPH_KEY").into()),
        ..Default::default()
    }
}

/// A new 8 MiB image `rbd/<name>`, opened as the CSI user with 4 KiB
/// blocks (the bdev holds the only reference to its cluster connection).
fn new_image(ceph: &Ceph, name: &str) -> RbdBdev {
    ceph.admin("rbd", &["create", "--size", "8M", &format!("rbd/{name}")]);
    let cluster = RbdCluster::connect("test", &csi_user(ceph)).unwrap();
    RbdBdev::open("rbd0", cluster, "rbd", name, 4096).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbd_as_restricted_user() {
    let ceph = Ceph::start();
    ceph.admin("rbd", &["create", "--size", "64M", "rbd/bdev-test"]);

    let cfg = csi_user(&ceph);
    assert!(
        !format!("{cfg:?}").contains(ceph.var("RACKCACHE_CEPH_KEY")),
        "key leaked into Debug"
    );
    let cluster = RbdCluster::connect("test", &cfg).expect("connect as the csi user");
    let rbd = RbdBdev::open("rbd0", Arc::clone(&cluster), "rbd", "bdev-test", 4096).unwrap();
    assert_eq!(rbd.info().num_blocks(), 16384);
    let uuid = rbd.info().uuid;
    let b = Arc::new(Bdev::Rbd(rbd));

    // Concurrent writes of distinct ranges from several tasks, then read-back.
    let mut writers = tokio::task::JoinSet::new();
    for i in 0..16u64 {
        let b = Arc::clone(&b);
        writers.spawn(async move {
            let data: Vec<u8> = (0..65536).map(|j| (i as u8) ^ (j as u8)).collect();
            b.write(i * (1 << 20), DmaBuf::from_slice(&data)).await.1
        });
    }
    while let Some(r) = writers.join_next().await {
        r.unwrap().unwrap();
    }
    b.flush().await.unwrap();
    for i in 0..16u64 {
        let (got, r) = b.read(i * (1 << 20), DmaBuf::new(65536)).await;
        r.unwrap();
        assert!(
            got.iter()
                .enumerate()
                .all(|(j, &x)| x == (i as u8) ^ (j as u8)),
            "range {i}"
        );
    }

    b.write_zeroes(0, 4096).await.unwrap();
    b.unmap(1 << 20, 65536).await.unwrap();
    let (got, _) = b.read(0, DmaBuf::new(8192)).await;
    assert!(got[..4096].iter().all(|&x| x == 0));
    assert_eq!(got[4097], 1, "data after the zeroed block survives");
    let (got, _) = b.read(1 << 20, DmaBuf::new(65536)).await;
    assert!(got.iter().all(|&x| x == 0));

    let (_, r) = b.read(64 << 20, DmaBuf::new(4096)).await;
    assert!(matches!(r, Err(BdevError::OutOfRange { .. })));
    drop(b);

    // The identity is stable across reopen.
    let again = RbdBdev::open("rbd0", Arc::clone(&cluster), "rbd", "bdev-test", 4096).unwrap();
    assert_eq!(again.info().uuid, uuid);
    drop(again);

    // A pool the user has no caps for, a missing image, a wrong key.
    ceph.admin("ceph", &["osd", "pool", "create", "other", "8", "8"]);
    ceph.admin("rbd", &["pool", "init", "other"]);
    ceph.admin("rbd", &["create", "--size", "4M", "other/img"]);
    match RbdBdev::open("x", Arc::clone(&cluster), "other", "img", 4096) {
        Err(BdevError::Ceph { errno, .. }) => assert_eq!(errno, -libc::EPERM),
        other => panic!("open in a pool without caps: {:?}", other.err()),
    }
    match RbdBdev::open("x", Arc::clone(&cluster), "rbd", "missing", 4096) {
        Err(BdevError::Ceph { errno, .. }) => assert_eq!(errno, -libc::ENOENT),
        other => panic!("open a missing image: {:?}", other.err()),
    }
    let wrong = ClusterConfig {
        key: Some("AQBZwQJrAAAAABAAVGhpc2lzbm90YXJlYWxrZXk9PQ==".into()),
        ..cfg.clone()
    };
    match RbdCluster::connect("wrong", &wrong) {
        Err(BdevError::Ceph { errno, op }) => {
            assert_eq!(errno, -libc::EACCES);
            assert!(!op.contains("AQBZ"), "key in error message: {op}");
        }
        other => panic!("wrong key: {:?}", other.err()),
    }
}

/// Reads `len` bytes at `offset` of `pool/image` from Ceph's own copy
/// (`rbd export` by another client), not through our bdev.
fn ceph_copy(ceph: &Ceph, spec: &str, offset: usize, len: usize) -> Vec<u8> {
    let dir = testkit::TempDir::new("rbd-export");
    let out = dir.path().join("image");
    ceph.admin("rbd", &["export", spec, out.to_str().unwrap()]);
    std::fs::read(&out).unwrap()[offset..offset + len].to_vec()
}

/// Durability does not depend on the user's ceph.conf: with a config file
/// that turns librbd's write-back cache on (dirty data kept 30 s), a
/// completed write and a FUA write are in Ceph's own copy at once, and a
/// small deallocated range reads back as zeroes (librbd skips discards
/// under its 64 KiB granularity, leaving the old data).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbd_writes_are_durable_and_deallocated_ranges_read_zeroes() {
    let ceph = Ceph::start();
    ceph.admin("rbd", &["create", "--size", "8M", "rbd/durable"]);
    let dir = testkit::TempDir::new("rbd-conf");
    let conf = dir.path().join("ceph.conf");
    std::fs::write(
        &conf,
        "[client]\n\
         rbd cache = true\n\
         rbd cache policy = writeback\n\
         rbd cache writethrough until flush = false\n\
         rbd cache max dirty age = 30\n",
    )
    .unwrap();
    let cfg = ClusterConfig {
        config_file: Some(conf.to_str().unwrap().into()),
        ..csi_user(&ceph)
    };
    let cluster = RbdCluster::connect("test", &cfg).unwrap();
    let rbd = RbdBdev::open("rbd0", Arc::clone(&cluster), "rbd", "durable", 4096).unwrap();
    let counted = bdev::CountedBdev::from(Arc::new(Bdev::Rbd(rbd)));

    let data: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8 + 1).collect();
    let (_, r) = counted.write(0, DmaBuf::from_slice(&data)).await;
    r.unwrap();
    assert_eq!(
        ceph_copy(&ceph, "rbd/durable", 0, 16384),
        data,
        "a plain write"
    );
    let (_, r) = counted.write_fua(65536, DmaBuf::from_slice(&data)).await;
    r.unwrap();
    assert_eq!(
        ceph_copy(&ceph, "rbd/durable", 65536, 16384),
        data,
        "a FUA write"
    );
    assert_eq!(counted.stats().num_fua_write_ops.get(), 1);
    assert_eq!(counted.stats().num_write_ops.get(), 2);

    // Deallocate one 4 KiB block in the middle of written data.
    counted.unmap(4096, 4096).await.unwrap();
    let (got, r) = counted.read(0, DmaBuf::new(16384)).await;
    r.unwrap();
    assert!(
        got[4096..8192].iter().all(|&x| x == 0),
        "stale data after deallocate"
    );
    assert!(got[..4096] == data[..4096] && got[8192..] == data[8192..]);
    let copy = ceph_copy(&ceph, "rbd/durable", 0, 16384);
    assert!(copy[4096..8192].iter().all(|&x| x == 0), "Ceph's copy");
    assert!(copy[8192..] == data[8192..], "Ceph's copy after the range");
    counted.flush().await.unwrap();
    assert_eq!(counted.stats().num_flush_ops.get(), 1);

    // close() waits until librbd has let go: the image can be removed at
    // once (no watcher left).
    let b = Arc::clone(counted.bdev());
    drop(counted);
    let Ok(Bdev::Rbd(rbd)) = Arc::try_unwrap(b) else {
        panic!("the only handle is ours")
    };
    rbd.close().await;
    ceph.admin("rbd", &["rm", "--no-progress", "rbd/durable"]);
}

/// Dropping an image whose write is stuck (OSDs paused) returns at once:
/// librbd's blocking rbd_close runs on a thread of its own, not on the
/// runtime thread that dropped the bdev.
#[test]
fn dropping_an_image_with_a_stuck_write_does_not_block() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let ceph = Ceph::start();
    let b = Bdev::Rbd(new_image(&ceph, "stuck"));
    ceph.admin("ceph", &["osd", "pause"]);
    {
        // Submitted (librbd now owns the buffer), then abandoned.
        let mut fut = std::pin::pin!(b.write(0, DmaBuf::from_slice(&[1u8; 4096])));
        let polled = fut.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        assert!(
            matches!(polled, Poll::Pending),
            "a write with paused OSDs completed"
        );
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(b);
        let _ = tx.send(());
    });
    // A bound for liveness only: the old Drop waited for the OSDs.
    let returned = rx.recv_timeout(std::time::Duration::from_secs(60)).is_ok();
    ceph.admin("ceph", &["osd", "unpause"]);
    dropper.join().unwrap();
    assert!(returned, "dropping the bdev blocked on rbd_close");
}

/// One buffer, two views, two concurrent librbd reads from different
/// places of the image into it; then writes from views (plain and FUA)
/// that Ceph's own copy shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbd_reads_and_writes_views_of_one_buffer() {
    let ceph = Ceph::start();
    let b = bdev::CountedBdev::from(Arc::new(Bdev::Rbd(new_image(&ceph, "views"))));

    let disk: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i % 253) as u8 ^ (i >> 12) as u8)
        .collect();
    let (_, r) = b.write(0, DmaBuf::from_slice(&disk)).await;
    r.unwrap();

    // The host buffer's first 8 KiB come from offset 512 KiB, the last
    // 8 KiB from offset 4 KiB, read at the same time.
    let buf = DmaBuf::new(16384);
    let base = buf.as_ptr();
    let mut views = buf.into_views([0..8192, 8192..16384]).unwrap();
    let last = views.pop().unwrap();
    let first = views.pop().unwrap();
    let (b1, b2) = (b.clone(), b.clone());
    let r1 = tokio::spawn(async move { b1.read_view(512 << 10, first).await });
    let r2 = tokio::spawn(async move { b2.read_view(4096, last).await });
    let (first, e1) = r1.await.unwrap();
    let (last, e2) = r2.await.unwrap();
    e1.unwrap();
    e2.unwrap();
    let got = bdev::BufView::reunite(vec![first, last]).unwrap();
    assert_eq!(got.as_ptr(), base, "the same buffer");
    assert_eq!(&got[..8192], &disk[512 << 10..(512 << 10) + 8192]);
    assert_eq!(&got[8192..], &disk[4096..12288]);
    assert_eq!(b.stats().num_read_ops.get(), 2);

    // Write the two halves back swapped, one of them FUA, concurrently.
    let mut views = got.into_views([0..8192, 8192..16384]).unwrap();
    let last = views.pop().unwrap();
    let first = views.pop().unwrap();
    let (b1, b2) = (b.clone(), b.clone());
    let w1 = tokio::spawn(async move { b1.write_fua_view(65536, last).await });
    let w2 = tokio::spawn(async move { b2.write_view(65536 + 8192, first).await });
    w1.await.unwrap().1.unwrap();
    w2.await.unwrap().1.unwrap();
    let copy = ceph_copy(&ceph, "rbd/views", 65536, 16384);
    assert_eq!(&copy[..8192], &disk[4096..12288], "the FUA view");
    assert_eq!(
        &copy[8192..],
        &disk[512 << 10..(512 << 10) + 8192],
        "the view"
    );
    assert_eq!(b.stats().num_fua_write_ops.get(), 1);
}

/// librbd writes straight from our buffer (zero-copy writes, see
/// `RbdCluster::connect`) and completes only when it holds no reference
/// to it: one buffer, refilled as soon as each write returns it and
/// written again elsewhere, leaves every range with what it held when
/// written, in Ceph's own copy and read back through the bdev.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbd_write_buffers_are_free_again_at_completion() {
    let ceph = Ceph::start();
    let b = Bdev::Rbd(new_image(&ceph, "zerocopy"));
    const LEN: usize = 128 << 10;
    let fill = |i: usize| -> Vec<u8> { (0..LEN).map(|j| (j % 251) as u8 ^ (i as u8)).collect() };
    let mut buf = DmaBuf::new(LEN);
    for i in 0..8 {
        buf.copy_from_slice(&fill(i));
        let (back, r) = b.write((i * LEN) as u64, buf).await;
        r.unwrap();
        buf = back;
    }
    buf.fill(0xee);
    let copy = ceph_copy(&ceph, "rbd/zerocopy", 0, 8 * LEN);
    for i in 0..8 {
        assert!(
            copy[i * LEN..(i + 1) * LEN] == fill(i),
            "Ceph's copy of write {i}"
        );
        let (got, r) = b.read((i * LEN) as u64, DmaBuf::new(LEN)).await;
        r.unwrap();
        assert!(got[..] == fill(i)[..], "write {i} read back");
    }
    let Bdev::Rbd(rbd) = b else { unreachable!() };
    rbd.close().await;
}
