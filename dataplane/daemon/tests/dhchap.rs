//! DH-HMAC-CHAP through the daemon, configured only over JSON-RPC with
//! SPDK's methods (keys in 0600 files named in the keyring), against the
//! repository's own host over real TCP: the right keys (both ways) do I/O,
//! no key and a wrong key get nothing, `nvmf_subsystem_set_keys` rotates
//! the key for new connections while connected queues keep working, and
//! no secret shows in `save_config`. (The Linux host's side is
//! test/dataplane/auth_test.go.)

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{free_port, host_params, rpc, subsystem, tcp_listen_address, unix_rpc, Daemon};
use nvmf::keys::DhchapSecret;
use nvmf_host::auth::DhchapKeys;
use nvmf_host::host::{ConnectParams, HostController};
use serde_json::json;
use testkit::TempDir;

const NQN: &str = "nqn.2016-06.io.rackcache:dhchap";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000d1";
const BS: usize = 512;

fn secret(fill: u8) -> DhchapSecret {
    DhchapSecret::from_key(Some(nvmf::keys::Hash::Sha256), &[fill; 32]).unwrap()
}

/// Writes `s` to `dir/name`, mode `mode`; returns the path.
fn key_file(dir: &Path, name: &str, s: &DhchapSecret, mode: u32) -> String {
    let path = dir.join(name);
    std::fs::write(&path, s.encode().as_bytes()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.display().to_string()
}

/// Serves a malloc namespace on subsystem NQN to HOST with the keyring's
/// keys `host_key` and `ctrl_key`, on a free loopback port; returns how
/// the host (id byte `id`) connects.
fn serve_malloc(socket: &Path, host_key: &str, ctrl_key: &str, id: u8) -> ConnectParams {
    let port = free_port();
    rpc(
        socket,
        "bdev_malloc_create",
        json!({"name": "Malloc0", "num_blocks": 2048, "block_size": BS}),
    );
    rpc(socket, "nvmf_create_transport", json!({"trtype": "TCP"}));
    rpc(socket, "nvmf_create_subsystem", json!({"nqn": NQN}));
    rpc(
        socket,
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}),
    );
    rpc(
        socket,
        "nvmf_subsystem_add_host",
        json!({"nqn": NQN, "host": HOST, "dhchap_key": host_key, "dhchap_ctrlr_key": ctrl_key}),
    );
    rpc(
        socket,
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": tcp_listen_address(port)}),
    );
    host_params(port, NQN, HOST, id)
}

#[test]
fn keyed_hosts_authenticate_rotate_and_keep_their_secrets_out_of_the_config() {
    let work = TempDir::new("rackcache-dhchap");
    let socket = work.path().join("spdk.sock");
    let _daemon = Daemon::start(&socket, None);
    let (hk, ck, hk2) = (secret(1), secret(2), secret(3));
    // A key file others may read is refused, as SPDK's keyring_file does.
    let loose = key_file(work.path(), "loose", &hk, 0o644);
    let e = unix_rpc(
        &socket,
        "keyring_file_add_key",
        json!({"name": "loose", "path": loose}),
    )
    .expect_err("a 0644 key file");
    assert!(e.to_string().contains("Invalid permissions"), "{e}");
    for (name, s) in [("key0", &hk), ("ckey0", &ck), ("key1", &hk2)] {
        let path = key_file(work.path(), name, s, 0o600);
        rpc(
            &socket,
            "keyring_file_add_key",
            json!({"name": name, "path": path}),
        );
    }
    let params = serve_malloc(&socket, "key0", "ckey0", 0xd1);
    let both = DhchapKeys {
        host: hk.clone(),
        ctrlr: Some(ck.clone()),
    };
    let mut c = HostController::connect_with_keys(&params, 1, Some(&both)).expect("the right keys");
    let data = vec![0xd1; BS];
    c.io[0].write_blocks(1, 9, BS, &data, 8192).unwrap();
    let qpairs = rpc(&socket, "nvmf_subsystem_get_qpairs", json!({"nqn": NQN}));
    for q in qpairs.as_array().unwrap() {
        assert_eq!(
            q["auth"],
            json!({"state": "completed", "digest": "sha512", "dhgroup": "ffdhe8192"}),
            "{q}"
        );
    }
    // The NQN alone, or with another key, gets nothing.
    assert!(HostController::connect(&params, 1).is_err(), "no key");
    let wrong = DhchapKeys {
        host: secret(9),
        ctrlr: None,
    };
    assert!(
        HostController::connect_with_keys(&params, 1, Some(&wrong)).is_err(),
        "a wrong key"
    );
    // A controller that proves itself with another key is refused by the host.
    let fake_ctrlr = DhchapKeys {
        host: hk.clone(),
        ctrlr: Some(secret(8)),
    };
    assert!(
        HostController::connect_with_keys(&params, 1, Some(&fake_ctrlr)).is_err(),
        "a wrong controller key"
    );

    // Rotation: new connections need key1; the connected queues go on.
    rpc(
        &socket,
        "nvmf_subsystem_set_keys",
        json!({"nqn": NQN, "host": HOST, "dhchap_key": "key1", "dhchap_ctrlr_key": "ckey0"}),
    );
    assert!(
        HostController::connect_with_keys(&params, 1, Some(&both)).is_err(),
        "the old key"
    );
    let rotated = DhchapKeys {
        host: hk2.clone(),
        ctrlr: Some(ck.clone()),
    };
    let mut c2 =
        HostController::connect_with_keys(&params, 1, Some(&rotated)).expect("the new key");
    let mut back = vec![0; BS];
    c.io[0].read_blocks(1, 9, BS, &mut back).unwrap();
    assert_eq!(back, data, "the first controller still does I/O");
    c2.io[0].read_blocks(1, 9, BS, &mut back).unwrap();
    assert_eq!(back, data);
    // key0 is no longer used and may go; ckey0 is and may not.
    rpc(&socket, "keyring_file_remove_key", json!({"name": "key0"}));
    let e =
        unix_rpc(&socket, "keyring_file_remove_key", json!({"name": "ckey0"})).expect_err("in use");
    assert!(e.to_string().contains("in use"), "{e}");

    // The saved configuration names keys and their files, never a secret.
    let saved = rpc(&socket, "save_config", json!({})).to_string();
    assert!(
        saved.contains("\"keyring_file_add_key\"") && saved.contains("\"dhchap_key\":\"key1\""),
        "{saved}"
    );
    for s in [&hk, &ck, &hk2] {
        let text = s.encode();
        let b64 = text.split(':').nth(2).unwrap();
        assert!(!saved.contains(b64), "a secret in save_config");
    }
}

/// Keys a control plane delivers over the RPC (`keyring_memory_add_key`)
/// authenticate like file keys, but are never saved: a daemon restarted
/// from its saved configuration has the host waiting for its keys, answers
/// its Connects Controller Busy (retried, not given up on) until the keys
/// come again, and never lets it in keyless.
#[test]
fn memory_keys_authenticate_and_are_never_saved() {
    let work = TempDir::new("rackcache-dhchap-memory");
    let socket = work.path().join("spdk.sock");
    let persist = work.path().join("config.json");
    let daemon = Daemon::start_with(
        &socket,
        None,
        &["--config-persist", persist.to_str().unwrap()],
    );
    let (hk, ck) = (secret(4), secret(5));
    let e = unix_rpc(
        &socket,
        "keyring_memory_add_key",
        json!({"name": "bad", "secret": "DHHC-1:00:notbase64:"}),
    )
    .expect_err("a malformed secret");
    assert!(e.to_string().contains("key 'bad'"), "{e}");
    for (name, s) in [("mem-host", &hk), ("mem-ctrl", &ck)] {
        rpc(
            &socket,
            "keyring_memory_add_key",
            json!({"name": name, "secret": s.encode().as_str()}),
        );
    }
    let keys = rpc(&socket, "keyring_get_keys", json!(null));
    assert_eq!(keys[0]["module"], "memory", "{keys}");
    assert!(keys[0].get("path").is_none(), "{keys}");
    let params = serve_malloc(&socket, "mem-host", "mem-ctrl", 0xd2);
    let keys = DhchapKeys {
        host: hk.clone(),
        ctrlr: Some(ck.clone()),
    };
    let c = HostController::connect_with_keys(&params, 1, Some(&keys)).expect("memory keys");
    drop(c);
    assert!(HostController::connect(&params, 1).is_err(), "no key");
    let e = unix_rpc(
        &socket,
        "keyring_memory_remove_key",
        json!({"name": "mem-host"}),
    )
    .expect_err("a key in use");
    assert!(e.to_string().contains("in use"), "{e}");

    let saved = std::fs::read_to_string(&persist).unwrap();
    assert!(saved.contains("nvmf_create_subsystem"), "{saved}");
    // The host is saved waiting for its keys, which are not saved.
    assert!(
        !saved.contains("mem-host") && saved.contains("\"rackcache_keys_pending\": true"),
        "{saved}"
    );
    for s in [&hk, &ck] {
        let b64 = s.encode().split(':').nth(2).unwrap().to_owned();
        assert!(!saved.contains(&b64), "a secret in the persisted config");
    }

    // Restarted from that file: the subsystem is back, the host is not.
    assert!(daemon.stop().success());
    let _daemon = Daemon::start_with(
        &socket,
        Some(&persist),
        &["--config-persist", persist.to_str().unwrap()],
    );
    let sub = subsystem(&socket, NQN).expect("the subsystem is restored");
    // The host is back waiting for its keys: no key names, and Connects
    // answered Controller Busy (SCT 1, SC 0x81, no DNR: a host retries),
    // with its keys or without.
    assert_eq!(
        sub["hosts"],
        json!([{"nqn": HOST, "rackcache_keys_pending": true}]),
        "{sub}"
    );
    for (what, k) in [("with its keys", Some(&keys)), ("keyless", None)] {
        let e = HostController::connect_with_keys(&params, 1, k)
            .err()
            .unwrap_or_else(|| panic!("the host got in {what} before its keys came again"));
        assert!(e.to_string().contains("type 1 code 0x81"), "{what}: {e}");
    }
    // The control plane delivers the keys again: the host is back.
    for (name, s) in [("mem-host", &hk), ("mem-ctrl", &ck)] {
        rpc(
            &socket,
            "keyring_memory_add_key",
            json!({"name": name, "secret": s.encode().as_str()}),
        );
    }
    rpc(
        &socket,
        "nvmf_subsystem_set_keys",
        json!({"nqn": NQN, "host": HOST, "dhchap_key": "mem-host", "dhchap_ctrlr_key": "mem-ctrl"}),
    );
    HostController::connect_with_keys(&params, 1, Some(&keys)).expect("keys delivered again");
}
