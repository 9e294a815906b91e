//! Deleting an rbd bdev closes the image before the call returns (librbd's
//! blocking close runs off the I/O threads), so the image can be removed
//! right after, as with SPDK.

mod common;

use common::{unix_rpc, Daemon};
use serde_json::json;
use testkit::{Ceph, TempDir};

#[test]
fn rbd_image_can_be_removed_right_after_bdev_rbd_delete() {
    let ceph = Ceph::start();
    ceph.admin("rbd", &["create", "--size", "8M", "rbd/gone"]);
    let work = TempDir::new("rackcache-rbd-delete");
    let socket = work.path().join("spdk.sock");
    let d = Daemon::start(&socket, None);
    unix_rpc(
        &socket,
        "bdev_rbd_register_cluster",
        json!({
            "name": "ceph0",
            "user_id": ceph.var("RACKCACHE_CEPH_USER"),
            "config_param": {
                "mon_host": ceph.var("RACKCACHE_CEPH_MON_HOST"),
                "key": ceph.var("RACKCACHE_CEPH_KEY"),
            },
        }),
    )
    .unwrap();
    unix_rpc(
        &socket,
        "bdev_rbd_create",
        json!({"name": "Rbd0", "cluster_name": "ceph0", "pool_name": "rbd",
               "rbd_name": "gone", "block_size": 4096}),
    )
    .unwrap();
    unix_rpc(&socket, "bdev_rbd_delete", json!({"name": "Rbd0"})).unwrap();
    // No watcher is left: `rbd rm` refuses an image that is still open.
    ceph.admin("rbd", &["rm", "--no-progress", "rbd/gone"]);
    unix_rpc(
        &socket,
        "bdev_rbd_unregister_cluster",
        json!({"name": "ceph0"}),
    )
    .unwrap();
    assert!(d.stop().success());
}
