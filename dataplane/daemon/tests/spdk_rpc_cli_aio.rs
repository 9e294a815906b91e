//! `bdev_aio_create` through SPDK's stock command line (`spdk-rpc` from the
//! project's venv), which always sends `readonly`, `fallocate` and `nowait`:
//! accepted, and `--readonly` honoured (writes refused with a clear error).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{unix_rpc, Daemon};
use serde_json::{json, Value};
use testkit::{spdk_python, TempDir};

/// bin/venv/bin/spdk-rpc, next to the venv's Python.
fn spdk_rpc() -> PathBuf {
    spdk_python().with_file_name("spdk-rpc")
}

fn cli(socket: &Path, args: &[&str]) -> Output {
    Command::new(spdk_python())
        .arg(spdk_rpc())
        .arg("-s")
        .arg(socket)
        .args(args)
        .output()
        .expect("run spdk-rpc")
}

fn cli_ok(socket: &Path, args: &[&str]) -> String {
    let out = cli(socket, args);
    assert!(
        out.status.success(),
        "spdk-rpc {args:?}:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn stock_cli_creates_aio_bdevs_with_its_default_flags() {
    let work = TempDir::new("rackcache-aio-cli");
    let socket = work.path().join("spdk.sock");
    let file = work.path().join("disk.img");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(4 << 20)
        .unwrap();
    let f = file.to_str().unwrap();
    let d = Daemon::start(&socket, None);

    // The plain command line: readonly, fallocate and nowait all false.
    let out = cli_ok(&socket, &["bdev_aio_create", f, "aio0", "4096"]);
    assert_eq!(out.trim(), "aio0");
    // Every flag the CLI has, and a chosen UUID.
    let uuid = "5f3a1c2e-8d4b-4e6f-9a0b-1c2d3e4f5a6b";
    cli_ok(
        &socket,
        &[
            "bdev_aio_create",
            f,
            "aio1",
            "4096",
            "--readonly",
            "--fallocate",
            "--no-wait",
            "-u",
            uuid,
        ],
    );
    let bdevs: Value = serde_json::from_str(&cli_ok(&socket, &["bdev_get_bdevs"])).unwrap();
    let aio1 = bdevs
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "aio1")
        .expect("aio1 listed");
    assert_eq!(aio1["uuid"], uuid);
    assert_eq!(aio1["num_blocks"], 1024);
    assert_eq!(aio1["supported_io_types"]["write"], false);
    assert_eq!(aio1["supported_io_types"]["read"], true);
    assert_eq!(aio1["driver_specific"]["aio"]["readonly"], true);

    // The read-only bdev refuses writes through the target with a clear
    // status: exported, a host's write fails and the file is unchanged.
    let port = common::free_port().to_string();
    let nqn = "nqn.2016-06.io.spdk:ro";
    cli_ok(&socket, &["nvmf_create_transport", "-t", "TCP"]);
    cli_ok(&socket, &["nvmf_create_subsystem", nqn, "-a"]);
    cli_ok(&socket, &["nvmf_subsystem_add_ns", nqn, "aio1"]);
    cli_ok(
        &socket,
        &[
            "nvmf_subsystem_add_listener",
            nqn,
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
        ],
    );
    let p = nvmf_host::host::ConnectParams {
        addr: format!("127.0.0.1:{port}"),
        subnqn: nqn.into(),
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:0f8c1f3a-0000-4000-8000-0000000000e1".into(),
        host_id: [0x31; 16],
        queue_size: 32,
        kato_ms: 30_000,
    };
    let mut c = nvmf_host::host::HostController::connect(&p, 1).unwrap();
    let ns = c.admin.identify(0x00, 1).unwrap();
    assert_eq!(ns[99] & 1, 1, "NSATTR: write protected");
    // Namespace is Write Protected (generic status 0x20), for writes,
    // Write Zeroes and deallocate alike.
    let write_protected = |e: nvmf_host::host::HostError| match e {
        nvmf_host::host::HostError::Status { cqe, .. } => {
            (cqe.status.sct, cqe.status.sc) == (0, 0x20)
        }
        _ => false,
    };
    let err = c.io[0]
        .write_blocks(1, 0, 4096, &[9u8; 4096], 8192)
        .unwrap_err();
    assert!(write_protected(err));
    let err = c.io[0]
        .write_blocks(1, 0, 4096, &[9u8; 16384], 8192)
        .unwrap_err();
    assert!(write_protected(err), "a write through R2T");
    let err = c.io[0].deallocate(1, &[(0, 1)]).unwrap_err();
    assert!(write_protected(err), "deallocate");
    let mut back = vec![1u8; 4096];
    c.io[0].read_blocks(1, 0, 4096, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    drop(c);
    assert!(std::fs::read(&file).unwrap().iter().all(|&b| b == 0));

    // A UUID that does not parse is refused, naming the parameter.
    let e = unix_rpc(
        &socket,
        "bdev_aio_create",
        json!({"name": "aio2", "filename": f, "uuid": "not-a-uuid"}),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("uuid") && e["code"] == -32602,
        "bad uuid: {e}"
    );
    assert!(d.stop().success());
}
