//! The daemon driven by SPDK's own Python JSON-RPC client (`spdk.rpc` from
//! the project's venv): every object kind created and deleted, refusals with
//! SPDK's error codes, save_config, and a restart from the saved config.
//! Uses a real one-node Ceph for the rbd bdev.

mod common;

use std::path::Path;
use std::process::Command;

use common::Daemon;

use testkit::{spdk_python, Ceph, TempDir};

fn run_client(socket: &Path, work: &Path, phase: &str, ceph_env: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spdk_rpc_client.py");
    let out = Command::new(spdk_python())
        .arg(&script)
        .args([socket, work])
        .arg(phase)
        .arg(ceph_env)
        .output()
        .expect("run the SPDK client script");
    assert!(
        out.status.success(),
        "{phase} phase failed:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn spdk_client_creates_saves_and_restores() {
    let ceph = Ceph::start();
    ceph.admin("rbd", &["create", "--size", "32M", "rbd/vol1"]);
    let work = TempDir::new("rackcache-rpc");
    let ceph_env = work.path().join("ceph.env");
    let env: String = [
        "RACKCACHE_CEPH_MON_HOST",
        "RACKCACHE_CEPH_USER",
        "RACKCACHE_CEPH_KEY",
        "RACKCACHE_CEPH_POOL",
    ]
    .iter()
    .map(|k| format!("{k}={}\n", ceph.var(k)))
    .collect();
    std::fs::write(&ceph_env, env).unwrap();
    let socket = work.path().join("spdk.sock");

    let d = Daemon::start(&socket, None);
    run_client(&socket, work.path(), "first", &ceph_env);
    let status = d.stop();
    assert!(status.success(), "daemon exit on SIGTERM: {status}");
    assert!(!socket.exists(), "the daemon left its socket behind");
    assert_image_released(&ceph, "rbd/vol1");

    let config = work.path().join("config.json");
    let d = Daemon::start(&socket, Some(&config));
    run_client(&socket, work.path(), "restart", &ceph_env);
    let status = d.stop();
    assert!(status.success(), "daemon exit on SIGTERM: {status}");
    assert_image_released(&ceph, "rbd/vol1");
}

/// A daemon that stopped closed the image: Ceph lists no watcher on it (an
/// image left open keeps its watch, and its next user waits for the OSD to
/// time it out).
fn assert_image_released(ceph: &Ceph, image: &str) {
    let status = ceph.admin("rbd", &["status", image]);
    assert!(
        status.contains("Watchers: none"),
        "{image} is still watched after the daemon stopped:\n{status}"
    );
}

#[test]
fn a_failing_config_entry_is_reported_and_the_rest_served() {
    let work = TempDir::new("rackcache-badcfg");
    let cfg = work.path().join("bad.json");
    std::fs::write(
        &cfg,
        r#"{"subsystems":[{"subsystem":"bdev","config":[
            {"method":"bdev_malloc_create","params":{"name":"a","num_blocks":8,"block_size":512}},
            {"method":"bdev_malloc_create","params":{"name":"a","num_blocks":8,"block_size":512}}]}]}"#,
    )
    .unwrap();
    let socket = work.path().join("s.sock");
    let d = Daemon::start(&socket, Some(&cfg));
    let errors = common::rpc(
        &socket,
        "rackcache_get_config_errors",
        serde_json::json!({}),
    );
    let e = &errors.as_array().unwrap()[0];
    assert_eq!(
        (e["method"].as_str(), e["object"].as_str()),
        (Some("bdev_malloc_create"), Some("a"))
    );
    assert!(
        e["message"].as_str().unwrap().contains("File exists"),
        "{e}"
    );
    assert!(d.stop().success());
}
