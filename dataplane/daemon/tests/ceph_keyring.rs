//! `--ceph-keyring`: a cluster registered without a key of its own
//! authenticates with the keyring file, and neither `save_config` nor the
//! `--config-persist` file ever holds the key; after `kill -9` the daemon
//! comes back with the rbd bdev by reading the keyring again. A registration
//! without a key and without the flag is refused by Ceph, not served.

mod common;

use common::cached::config_calls;
use common::{unix_rpc, Daemon};
use serde_json::json;
use testkit::{Ceph, TempDir};

#[test]
fn keyring_flag_keeps_the_key_out_of_saved_configurations() {
    let ceph = Ceph::start();
    ceph.admin("rbd", &["create", "--size", "8M", "rbd/keyring"]);
    let work = TempDir::new("rackcache-ceph-keyring");
    let socket = work.path().join("spdk.sock");
    let user = ceph.var("RACKCACHE_CEPH_USER");
    let key = ceph.var("RACKCACHE_CEPH_KEY");
    let keyring = work.path().join("keyring");
    std::fs::write(&keyring, format!("[client.{user}]\n\tkey = {key}\n")).unwrap();
    let persist = work.path().join("config.json");
    let args = [
        "--ceph-keyring",
        keyring.to_str().unwrap(),
        "--config-persist",
        persist.to_str().unwrap(),
    ];
    let register = json!({
        "name": "ceph0",
        "user_id": user,
        "config_param": {"mon_host": ceph.var("RACKCACHE_CEPH_MON_HOST")},
    });

    // Without the flag, nothing supplies the key: Ceph refuses.
    let bare_socket = work.path().join("bare.sock");
    let bare = Daemon::start(&bare_socket, None);
    let err = unix_rpc(&bare_socket, "bdev_rbd_register_cluster", register.clone())
        .expect_err("no key anywhere: the registration fails");
    assert!(
        !err.to_string().contains(key),
        "the error does not show the key: {err}"
    );
    assert!(bare.stop().success());

    let d = Daemon::start_with(&socket, None, &args);
    unix_rpc(&socket, "bdev_rbd_register_cluster", register).expect("registered with the keyring");
    unix_rpc(
        &socket,
        "bdev_rbd_create",
        json!({"name": "Rbd0", "cluster_name": "ceph0", "pool_name": "rbd",
               "rbd_name": "keyring", "block_size": 4096}),
    )
    .expect("the image opens with the keyring's key");
    let saved = unix_rpc(&socket, "save_config", json!({})).unwrap();
    assert!(
        !saved.to_string().contains(key),
        "save_config holds no key: {saved}"
    );
    let on_disk = std::fs::read_to_string(&persist).unwrap();
    assert!(
        !on_disk.contains(key),
        "the persisted file holds no key: {on_disk}"
    );
    assert!(
        config_calls(&persist)
            .iter()
            .any(|(m, p)| m == "bdev_rbd_create" && p["name"] == "Rbd0"),
        "the rbd bdev is persisted: {on_disk}"
    );

    // kill -9: the restart registers the cluster again from the keyring.
    d.kill9();
    let d = Daemon::start_with(&socket, None, &args);
    let bdevs = unix_rpc(&socket, "bdev_get_bdevs", json!({"name": "Rbd0"}))
        .expect("Rbd0 is back after the restart");
    assert_eq!(bdevs[0]["num_blocks"], 2048, "{bdevs}");
    unix_rpc(&socket, "bdev_rbd_delete", json!({"name": "Rbd0"})).unwrap();
    unix_rpc(
        &socket,
        "bdev_rbd_unregister_cluster",
        json!({"name": "ceph0"}),
    )
    .unwrap();
    assert!(d.stop().success());
}
