//! The rbd bdev against a real one-node Ceph (hack/ceph.sh), as the
//! restricted CSI user. Needs the Ceph packages (hack/deps.sh apt).

use std::sync::Arc;

use bdev::rbd::{ClusterConfig, RbdBdev, RbdCluster};
use bdev::{Bdev, BdevError, DmaBuf};
use testkit::Ceph;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbd_as_restricted_user() {
    let ceph = Ceph::start();
    ceph.admin("rbd", &["create", "--size", "64M", "rbd/bdev-test"]);

    let cfg = ClusterConfig {
        user: ceph.var("RACKCACHE_CEPH_USER").into(),
        mon_host: Some(ceph.var("RACKCACHE_CEPH_MON_HOST").into()),
        key: Some(ceph.var("RACKCACHE_CEPH_KEY").into()),
        ..Default::default()
    };
    assert!(
        !format!("{cfg:?}").contains(ceph.var("RACKCACHE_CEPH_KEY")),
        "key leaked into Debug"
    );
    let cluster = RbdCluster::connect("test", &cfg).expect("connect as the csi user");
    let rbd = RbdBdev::open("rbd0", Arc::clone(&cluster), "rbd", "bdev-test", 4096).unwrap();
    assert_eq!(rbd.info().num_blocks, 16384);
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
