//! The secure channel's configuration through the daemon's JSON-RPC
//! (SPDK's `--secure-channel` and `--psk`): saved and restored with the
//! key names only, a memory PSK never saved (its host waits for it), a
//! SHA-384 PSK and a plain listener on a secure address refused with the
//! reason. (The handshake with the Linux host and tlshd is
//! test/dataplane/tls_test.go.)

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{free_port, rpc, subsystem, tcp_listen_address, unix_rpc, Daemon};
use serde_json::json;
use testkit::TempDir;

const NQN: &str = "nqn.2016-06.io.rackcache:tls";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000e1";
const HOST2: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000e2";
const PSK: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";

/// A SHA-384 PSK (48 bytes and CRC) in the interchange format.
fn sha384_psk() -> String {
    use base64::Engine;
    let mut raw = vec![7u8; 48];
    raw.extend_from_slice(&crc32fast::hash(&raw).to_le_bytes());
    format!(
        "NVMeTLSkey-1:02:{}:",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

#[test]
fn secure_listeners_and_psks_are_saved_by_name_and_restored() {
    let work = TempDir::new("rackcache-tls-psk");
    let socket = work.path().join("spdk.sock");
    let persist = work.path().join("config.json");
    let args = ["--config-persist", persist.to_str().unwrap()];
    let daemon = Daemon::start_with(&socket, None, &args);
    let key_path = work.path().join("psk0");
    std::fs::write(&key_path, PSK).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let big_path = work.path().join("psk384");
    std::fs::write(&big_path, sha384_psk()).unwrap();
    std::fs::set_permissions(&big_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    rpc(
        &socket,
        "keyring_file_add_key",
        json!({"name": "psk0", "path": key_path.to_str().unwrap()}),
    );
    rpc(
        &socket,
        "keyring_file_add_key",
        json!({"name": "psk384", "path": big_path.to_str().unwrap()}),
    );
    rpc(
        &socket,
        "keyring_memory_add_key",
        json!({"name": "mem-psk", "secret": PSK}),
    );
    rpc(&socket, "nvmf_create_transport", json!({"trtype": "TCP"}));
    rpc(&socket, "nvmf_create_subsystem", json!({"nqn": NQN}));
    let port = free_port();
    rpc(
        &socket,
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": tcp_listen_address(port), "secure_channel": true}),
    );
    rpc(
        &socket,
        "nvmf_subsystem_add_host",
        json!({"nqn": NQN, "host": HOST, "psk": "psk0"}),
    );
    let e = unix_rpc(
        &socket,
        "nvmf_subsystem_add_host",
        json!({"nqn": NQN, "host": HOST2, "psk": "psk384"}),
    )
    .expect_err("a SHA-384 PSK");
    assert!(e.to_string().contains("SHA-384"), "{e}");
    rpc(
        &socket,
        "nvmf_subsystem_add_host",
        json!({"nqn": NQN, "host": HOST2, "psk": "mem-psk"}),
    );
    // The discovery subsystem on the secure address is a plain listener
    // there: refused, the address keeps its setting.
    let e = unix_rpc(
        &socket,
        "nvmf_subsystem_add_listener",
        json!({"nqn": "nqn.2014-08.org.nvmexpress.discovery", "listen_address": tcp_listen_address(port)}),
    )
    .expect_err("a plain listener on a secure address");
    assert!(e.to_string().contains("secure channel"), "{e}");
    // A key a host uses stays.
    let e = unix_rpc(&socket, "keyring_file_remove_key", json!({"name": "psk0"}))
        .expect_err("a PSK in use");
    assert!(e.to_string().contains("in use"), "{e}");

    let saved = std::fs::read_to_string(&persist).unwrap();
    assert!(saved.contains("\"secure_channel\": true"), "{saved}");
    assert!(saved.contains("\"psk\": \"psk0\""), "{saved}");
    assert!(
        !saved.contains("mem-psk"),
        "a memory key was saved: {saved}"
    );
    assert!(
        !saved.contains("VRLbtnN9AQb2WXW3c9"),
        "a PSK in the persisted config"
    );

    assert!(daemon.stop().success());
    let _daemon = Daemon::start_with(&socket, Some(&persist), &args);
    let sub = subsystem(&socket, NQN).expect("the subsystem is restored");
    let hosts = sub["hosts"].as_array().unwrap();
    assert!(
        hosts.contains(&json!({"nqn": HOST, "psk": "psk0"})),
        "{sub}"
    );
    assert!(
        hosts.contains(&json!({"nqn": HOST2, "rackcache_keys_pending": true})),
        "{sub}"
    );
    let saved = std::fs::read_to_string(&persist).unwrap();
    assert!(saved.contains("\"secure_channel\": true"), "{saved}");
    // The memory PSK comes again: set_keys gives it back to the host.
    rpc(
        &socket,
        "keyring_memory_add_key",
        json!({"name": "mem-psk", "secret": PSK}),
    );
    rpc(
        &socket,
        "nvmf_subsystem_set_keys",
        json!({"nqn": NQN, "host": HOST2, "rackcache_psk": "mem-psk"}),
    );
    let hosts = subsystem(&socket, NQN).unwrap()["hosts"].clone();
    assert!(
        hosts
            .as_array()
            .unwrap()
            .contains(&json!({"nqn": HOST2, "psk": "mem-psk"})),
        "{hosts}"
    );
}
