//! Fencing one Ceph client through another, on a real one-node Ceph
//! (hack/ceph.sh): two connections (two servers' worth) write the same
//! images; once B has blocklisted A's address, A's writes fail (an error,
//! within a bound, never a hang) while B's go on, and Ceph's own copy
//! holds B's data, not A's. Both kinds of image: with the exclusive lock
//! (which A can no longer take back) and without (the CSI default).

use std::sync::Arc;
use std::time::Duration;

use bdev::rbd::{CephClientAddr, ClusterConfig, RbdBdev, RbdCluster};
use bdev::{Bdev, BdevError, DmaBuf};
use testkit::Ceph;

/// How long a fenced write may take to fail: it fails once the image has
/// asked an OSD (after seconds); this only turns a hang into a failure.
const FENCED_WRITE_BOUND: Duration = Duration::from_secs(60);

fn csi_user(ceph: &Ceph) -> ClusterConfig {
    ClusterConfig {
        user: ceph.var("RACKCACHE_CEPH_USER").into(),
        mon_host: Some(ceph.var("RACKCACHE_CEPH_MON_HOST").into()),
        key: Some(ceph.var("RACKCACHE_CEPH_KEY").into()),
        ..Default::default()
    }
}

/// `len` bytes at `offset` of `spec` from Ceph's own copy (`rbd export`
/// as client.admin), not through either connection.
fn ceph_copy(ceph: &Ceph, spec: &str, offset: usize, len: usize) -> Vec<u8> {
    let dir = testkit::TempDir::new("rbd-fence-export");
    let out = dir.path().join("image");
    ceph.admin(
        "rbd",
        &["export", "--no-progress", spec, out.to_str().unwrap()],
    );
    std::fs::read(&out).unwrap()[offset..offset + len].to_vec()
}

async fn write(b: &Bdev, offset: u64, fill: u8) -> bdev::Result<()> {
    b.write(offset, DmaBuf::from_slice(&[fill; 4096])).await.1
}

/// The images: one with Ceph's default features (exclusive lock
/// included), one with layering only.
const IMAGES: [(&str, &[&str]); 2] = [("locked", &[]), ("plain", &["--image-feature", "layering"])];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocklisted_client_cannot_write_and_the_other_can() {
    let ceph = Ceph::start();
    let ca = RbdCluster::connect("a", &csi_user(&ceph)).unwrap();
    let cb = RbdCluster::connect("b", &csi_user(&ceph)).unwrap();
    let addr_a = CephClientAddr::parse(&ca.client_address().unwrap()).expect("A's address");
    let addr_b = CephClientAddr::parse(&cb.client_address().unwrap()).expect("B's address");
    assert!(!addr_a.same_client(&addr_b), "two connections, two clients");

    let mut pairs = Vec::new();
    for (image, features) in IMAGES {
        let mut args = vec!["create", "--size", "8M"];
        args.extend_from_slice(features);
        let spec = format!("rbd/{image}");
        args.push(&spec);
        ceph.admin("rbd", &args);
        let open = |c: &Arc<RbdCluster>, n: &str| {
            Bdev::Rbd(RbdBdev::open(n, Arc::clone(c), "rbd", image, 4096).unwrap())
        };
        let (a, b) = (open(&ca, "a"), open(&cb, "b"));
        write(&a, 0, 0xaa).await.expect("A writes before the fence");
        write(&b, 4096, 0xbb)
            .await
            .expect("B writes before the fence");
        write(&a, 8192, 0xaa).await.expect("A again");
        pairs.push((spec, a, b));
    }

    // Refusals: itself, and a zero expiry.
    let e = cb.blocklist_add(&addr_b, 60).unwrap_err();
    assert!(e.to_string().contains("cannot fence itself"), "{e}");
    let e = cb.blocklist_add(&addr_a, 0).unwrap_err();
    assert!(e.to_string().contains("expire_seconds 0"), "{e}");
    write(&pairs[0].1, 0, 0xa1)
        .await
        .expect("the refusals fenced nothing");

    cb.blocklist_add(&addr_a, 600).expect("B blocklists A");
    let listed = ceph.admin("ceph", &["osd", "blocklist", "ls"]);
    assert!(listed.contains(&addr_a.to_string()), "{listed}");

    for (spec, a, b) in &pairs {
        // B first: the OSD serving it takes the map that fences A before it
        // applies B's write.
        write(b, 0, 0xb1).await.expect("B writes after the fence");
        let fenced = tokio::time::timeout(FENCED_WRITE_BOUND, write(a, 0, 0xa2))
            .await
            .unwrap_or_else(|_| panic!("{spec}: A's write hangs"));
        match fenced {
            Err(BdevError::Ceph { errno, .. }) => assert_eq!(errno, -libc::ESHUTDOWN, "{spec}"),
            other => panic!("{spec}: A's write after the fence: {other:?}"),
        }
        let flushed = tokio::time::timeout(FENCED_WRITE_BOUND, a.flush())
            .await
            .unwrap_or_else(|_| panic!("{spec}: A's flush hangs"));
        assert!(flushed.is_err(), "{spec}: A's flush");
        write(b, 8192, 0xb2).await.expect("B goes on writing");
        assert_eq!(ceph_copy(&ceph, spec, 0, 4096), [0xb1; 4096], "{spec}");
        assert_eq!(ceph_copy(&ceph, spec, 8192, 4096), [0xb2; 4096], "{spec}");
        let (got, r) = b.read(0, DmaBuf::new(12288)).await;
        r.unwrap();
        assert!(got[..4096].iter().all(|&x| x == 0xb1), "{spec}");
        assert!(got[4096..8192].iter().all(|&x| x == 0xbb), "{spec}");
        assert!(got[8192..].iter().all(|&x| x == 0xb2), "{spec}");
    }
    // A's images close in the background (librbd may wait for the writes
    // it kept); the test does not wait for them.
}
