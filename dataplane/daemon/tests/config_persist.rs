//! `--config-persist`: a dataplane killed with `kill -9` comes back by
//! itself with its bdevs, subsystems, namespaces, listeners and hosts, and
//! a host connects again; a configuration with failing calls is reported
//! call by call (without secrets) and the start fails.

mod common;

use common::{free_port, rpc, subsystem, tcp_listen_address, unix_rpc, Daemon};
use nvmf_host::host::{ConnectParams, HostController};
use serde_json::{json, Value};
use testkit::TempDir;

const NQN: &str = "nqn.2016-06.io.rackcache:persist";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000c3";
const BS: usize = 512;

/// HOST's controller on NQN at 127.0.0.1:`port` with `io_queues` I/O queues.
fn connect_host(port: u16, io_queues: u16) -> Result<HostController, String> {
    let p = ConnectParams {
        addr: format!("127.0.0.1:{port}"),
        subnqn: NQN.into(),
        hostnqn: HOST.into(),
        host_id: [0xc3; 16],
        queue_size: 32,
        kato_ms: 0,
    };
    HostController::connect(&p, io_queues).map_err(|e| format!("{e:?}"))
}

/// What the restored daemon must show again.
fn observable(socket: &std::path::Path) -> (Value, Value) {
    let mut bdevs = unix_rpc(socket, "bdev_get_bdevs", json!({})).unwrap();
    // Statistics-like fields may differ between runs; names and sizes not.
    let bdevs = bdevs
        .as_array_mut()
        .unwrap()
        .iter()
        .map(|b| json!([b["name"], b["num_blocks"], b["block_size"], b["uuid"]]))
        .collect();
    let subs = unix_rpc(socket, "nvmf_get_subsystems", json!({})).unwrap();
    (Value::Array(bdevs), subs)
}

#[test]
fn kill_9_and_restart_restores_everything() {
    let work = TempDir::new("rackcache-persist");
    let socket = work.path().join("spdk.sock");
    let file = work.path().join("state").join("config.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let persist = ["--config-persist", file.to_str().unwrap()];
    let d = Daemon::start_with(&socket, None, &persist);
    let call = |m: &str, p: Value| rpc(&socket, m, p);
    let port = free_port();
    call(
        "bdev_malloc_create",
        json!({"name": "Malloc0", "num_blocks": 2048, "block_size": BS}),
    );
    call(
        "bdev_malloc_create",
        json!({"name": "Malloc1", "num_blocks": 1024, "block_size": BS}),
    );
    call("nvmf_create_transport", json!({"trtype": "TCP"}));
    call(
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "serial_number": "RCPERSIST1"}),
    );
    call(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}),
    );
    call("nvmf_subsystem_add_host", json!({"nqn": NQN, "host": HOST}));
    call(
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": tcp_listen_address(port)}),
    );
    // The last change before the crash is a deletion: it must stick too.
    call("bdev_malloc_delete", json!({"name": "Malloc1"}));

    let mut c = connect_host(port, 1).expect("the host connects");
    let data = vec![0x5au8; 4096];
    c.io[0].write_blocks(1, 0, BS, &data, 4096).unwrap();
    drop(c);
    let before = observable(&socket);
    assert_eq!(before.0.as_array().unwrap().len(), 1, "{:?}", before.0);

    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the persisted file can hold cephx keys");
    d.kill9();
    // The dead process left its socket file (the new one replaces stale
    // files); removed here so that the start helper waits for the new one.
    std::fs::remove_file(&socket).unwrap();

    // Restarted with the same flags only: everything is back.
    let d = Daemon::start_with(&socket, None, &persist);
    assert_eq!(observable(&socket), before);
    let mut c = connect_host(port, 1).expect("the host connects to the restored target");
    let mut back = vec![0u8; 4096];
    c.io[0].read_blocks(1, 0, BS, &mut back).unwrap();
    drop(c);
    d.stop();
}

/// A subsystem reporting ANA states comes back with every listener
/// inaccessible, whatever they reported before the crash: a restarted
/// server serves no path until the control plane says which.
#[test]
fn ana_listeners_come_back_inaccessible() {
    let work = TempDir::new("rackcache-persist-ana");
    let socket = work.path().join("spdk.sock");
    let file = work.path().join("config.json");
    let persist = ["--config-persist", file.to_str().unwrap()];
    let d = Daemon::start_with(&socket, None, &persist);
    let call = |m: &str, p: Value| rpc(&socket, m, p);
    let port = free_port();
    call("nvmf_create_transport", json!({"trtype": "TCP"}));
    call(
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "ana_reporting": true, "max_namespaces": 2, "min_cntlid": 8191, "max_cntlid": 12285}),
    );
    let listener = json!({"nqn": NQN, "listen_address": tcp_listen_address(port)});
    call("nvmf_subsystem_add_listener", listener.clone());
    let states = || {
        let l = unix_rpc(&socket, "nvmf_subsystem_get_listeners", json!({"nqn": NQN})).unwrap();
        l[0]["ana_states"].clone()
    };
    let all = |s: &str| json!([{"ana_group": 1, "ana_state": s}, {"ana_group": 2, "ana_state": s}]);
    assert_eq!(states(), all("optimized"));
    d.kill9();
    std::fs::remove_file(&socket).unwrap();

    let d = Daemon::start_with(&socket, None, &persist);
    assert_eq!(states(), all("inaccessible"));
    // The controller id range comes back too: a host connected to another
    // server's path never meets one of its ids here.
    let subs = unix_rpc(&socket, "nvmf_get_subsystems", json!({"nqn": NQN})).unwrap();
    assert_eq!(
        (&subs[0]["min_cntlid"], &subs[0]["max_cntlid"]),
        (&json!(8191), &json!(12285))
    );
    let mut set = listener;
    set["ana_state"] = json!("optimized");
    unix_rpc(&socket, "nvmf_subsystem_listener_set_ana_state", set).unwrap();
    assert_eq!(states(), all("optimized"));
    d.stop();
}

/// A start whose configuration has failing calls serves the rest: each
/// failed call is reported (`rackcache_get_config_errors`, secrets left
/// out) and kept in the persisted file for the next start.
#[test]
fn a_configuration_with_failing_calls_serves_the_rest_and_keeps_each() {
    let work = TempDir::new("rackcache-restore-fail");
    let socket = work.path().join("s.sock");
    let cfg = work.path().join("config.json");
    let secret = "AQBSECRETSECRETSECRETSECRET==";
    std::fs::write(
        &cfg,
        json!({"subsystems": [
            {"subsystem": "bdev", "config": [
                {"method": "bdev_malloc_create", "params": {"name": "M0", "num_blocks": 64, "block_size": 512}},
                {"method": "bdev_malloc_create", "params": {"name": "M1", "num_blocks": 64, "block_size": 512, "key": secret}},
                {"method": "bdev_malloc_create", "params": {"name": "M2", "num_blocks": 64, "block_size": 512}}
            ]},
            {"subsystem": "nvmf", "config": [
                {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
                {"method": "nvmf_create_subsystem", "params": {"nqn": NQN}},
                {"method": "nvmf_subsystem_add_ns", "params": {"nqn": NQN, "namespace": {"bdev_name": "Missing"}}}
            ]}
        ]})
        .to_string(),
    )
    .unwrap();
    let persisted = work.path().join("persist.json");
    std::fs::copy(&cfg, &persisted).unwrap();
    let d = Daemon::start_with(
        &socket,
        None,
        &["--config-persist", persisted.to_str().unwrap()],
    );
    let call = |m: &str, p: Value| unix_rpc(&socket, m, p).unwrap_or_else(|e| panic!("{m}: {e}"));
    let errors = call("rackcache_get_config_errors", json!({}));
    let errors = errors.as_array().unwrap();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(errors[0]["method"], "bdev_malloc_create");
    assert_eq!(errors[0]["object"], "M1");
    assert!(
        errors[0]["params"].as_str().unwrap().contains("key=<...>"),
        "{errors:?}"
    );
    assert_eq!(errors[1]["method"], "nvmf_subsystem_add_ns");
    assert!(
        errors[1]["params"]
            .as_str()
            .unwrap()
            .contains("bdev_name=\"Missing\""),
        "{errors:?}"
    );
    assert!(
        !errors.iter().any(|e| e.to_string().contains(secret)),
        "a secret was reported"
    );
    // The rest is served.
    let names: Vec<String> = call("bdev_get_bdevs", json!({}))
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["M0", "M2"]);
    assert!(subsystem(&socket, NQN).is_some());
    let log = std::fs::read_to_string(socket.with_extension("log")).unwrap();
    assert!(log.contains("configuration loaded in part"), "{log}");
    assert!(!log.contains(secret), "a secret was logged");
    // Kept for the next start, after what they depend on.
    let file: Value = serde_json::from_slice(&std::fs::read(&persisted).unwrap()).unwrap();
    let bdevs = file["subsystems"][1]["config"].as_array().unwrap();
    let last = bdevs.last().unwrap();
    assert_eq!(
        (last["method"].as_str(), last["params"]["name"].as_str()),
        (Some("bdev_malloc_create"), Some("M1"))
    );
    let nvmf = file["subsystems"][2]["config"].as_array().unwrap();
    assert_eq!(nvmf.last().unwrap()["method"], "nvmf_subsystem_add_ns");
    assert!(d.stop().success());
}

/// `nvmf_subsystem_remove_host` whose wait for the host's queues times out
/// (a write held by the error bdev) reports the timeout, but the host is
/// off the list, on disk too: after `kill -9` it cannot come back.
#[test]
fn a_host_removal_that_times_out_is_persisted() {
    let work = TempDir::new("rackcache-persist-revoke");
    let socket = work.path().join("spdk.sock");
    let file = work.path().join("config.json");
    let persist = ["--config-persist", file.to_str().unwrap()];
    let d = Daemon::start_with(&socket, None, &persist);
    let call = |m: &str, p: Value| unix_rpc(&socket, m, p).unwrap_or_else(|e| panic!("{m}: {e}"));
    let port = free_port();
    call(
        "bdev_malloc_create",
        json!({"name": "Malloc0", "num_blocks": 2048, "block_size": BS}),
    );
    call("bdev_error_create", json!({"base_name": "Malloc0"}));
    call("nvmf_create_transport", json!({"trtype": "TCP"}));
    call("nvmf_create_subsystem", json!({"nqn": NQN}));
    call(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "EE_Malloc0"}}),
    );
    call("nvmf_subsystem_add_host", json!({"nqn": NQN, "host": HOST}));
    call(
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": {
            "trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": port.to_string()
        }}),
    );
    // The next write is held until resumed (never, here).
    call(
        "bdev_error_inject_error",
        json!({"name": "EE_Malloc0", "io_type": "write", "error_type": "pending", "num": 1}),
    );
    let mut c = connect_host(port, 2).expect("the host connects");
    // One write on each I/O queue: once one has completed, the other is
    // the one held.
    let (tx, rx) = std::sync::mpsc::channel();
    let writers: Vec<_> = std::mem::take(&mut c.io)
        .into_iter()
        .enumerate()
        .map(|(i, mut q)| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let data = vec![0x42u8; BS];
                let r = q.write_blocks(1, i as u64, BS, &data, BS);
                let _ = tx.send(r.map(|_| ()).map_err(|e| format!("{e:?}")));
            })
        })
        .collect();
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("a write completes")
        .expect("the write not held succeeds");
    assert!(std::fs::read_to_string(&file).unwrap().contains(HOST));

    let e = unix_rpc(
        &socket,
        "nvmf_subsystem_remove_host",
        json!({"nqn": NQN, "host": HOST, "timeout_ms": 1}),
    )
    .expect_err("the held write keeps the queue open past 1 ms");
    assert_eq!(e["message"], json!("Timeout reached during host removal"));
    assert!(
        !std::fs::read_to_string(&file).unwrap().contains(HOST),
        "the removed host is still in the persisted configuration"
    );
    d.kill9();
    std::fs::remove_file(&socket).unwrap();
    for w in writers {
        w.join().unwrap();
    }
    drop(c);

    let d = Daemon::start_with(&socket, None, &persist);
    let subs = unix_rpc(&socket, "nvmf_get_subsystems", json!({})).unwrap();
    let sub = subs
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["nqn"] == json!(NQN))
        .expect("the subsystem is restored");
    assert_eq!(sub["hosts"], json!([]), "{sub}");
    assert!(
        connect_host(port, 1).is_err(),
        "the removed host is refused"
    );
    d.stop();
}
