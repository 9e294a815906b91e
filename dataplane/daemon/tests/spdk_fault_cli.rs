//! The fault-injection bdevs driven by SPDK's stock command line
//! (`spdk-rpc` from the project's venv) with its default flags, against the
//! daemon process: what users type must work as it does with SPDK.

mod common;

use std::path::Path;
use std::process::Command;

use common::{unix_rpc, Daemon};
use serde_json::json;
use testkit::{spdk_python, TempDir};

/// Runs `spdk-rpc -s SOCKET args...`; returns stdout, panics on failure.
fn rpc(socket: &Path, args: &[&str]) -> String {
    let cli = spdk_python().with_file_name("spdk-rpc");
    let out = Command::new(&cli)
        .arg("-s")
        .arg(socket)
        .args(args)
        .output()
        .expect("run spdk-rpc");
    assert!(
        out.status.success(),
        "spdk-rpc {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn stock_cli_creates_updates_injects_and_deletes_fault_bdevs() {
    let work = TempDir::new("rackcache-fault-cli");
    let socket = work.path().join("spdk.sock");
    let d = Daemon::start(&socket, None);
    rpc(&socket, &["bdev_malloc_create", "-b", "M0", "8", "512"]);
    rpc(&socket, &["bdev_malloc_create", "-b", "M1", "8", "512"]);
    let out = rpc(
        &socket,
        &[
            "bdev_delay_create",
            "-b",
            "M0",
            "-d",
            "D0",
            "-r",
            "100",
            "-t",
            "200",
            "-w",
            "300",
            "-n",
            "400",
        ],
    );
    assert!(out.contains("D0"), "{out}");
    rpc(
        &socket,
        &["bdev_delay_update_latency", "D0", "avg_read", "150"],
    );
    let out = rpc(&socket, &["bdev_error_create", "M1"]);
    assert!(out.contains("EE_M1"), "{out}");
    rpc(
        &socket,
        &[
            "bdev_error_inject_error",
            "EE_M1",
            "read",
            "corrupt_data",
            "-n",
            "2",
            "-o",
            "7",
            "-v",
            "255",
        ],
    );
    rpc(
        &socket,
        &["bdev_error_inject_error", "EE_M1", "write", "pending"],
    );
    rpc(&socket, &["bdev_error_resume_pending", "EE_M1"]);
    rpc(
        &socket,
        &["bdev_error_inject_error", "EE_M1", "clear", "failure"],
    );

    let d0 = unix_rpc(&socket, "bdev_get_bdevs", json!({"name": "D0"})).unwrap();
    let delay = &d0[0]["driver_specific"]["delay"];
    assert_eq!(
        (&delay["base_bdev_name"], &delay["avg_read_latency"]),
        (&json!("M0"), &json!(150))
    );
    let m0 = unix_rpc(&socket, "bdev_get_bdevs", json!({"name": "M0"})).unwrap();
    assert_eq!(m0[0]["claimed"], json!(true));
    let saved = unix_rpc(&socket, "save_config", json!({})).unwrap();
    let calls: Vec<_> = saved["subsystems"][0]["config"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["method"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        calls,
        [
            "bdev_malloc_create",
            "bdev_malloc_create",
            "bdev_delay_create",
            "bdev_error_create"
        ]
    );

    rpc(&socket, &["bdev_delay_delete", "D0"]);
    rpc(&socket, &["bdev_error_delete", "EE_M1"]);
    rpc(&socket, &["bdev_malloc_delete", "M0"]);
    assert!(d.stop().success());
}
