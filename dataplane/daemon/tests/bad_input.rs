//! Bad input through SPDK's stock command line (`spdk-rpc`, SPDK's own
//! `rpc.py` from the project's venv), as an operator would type it: a
//! clear error, nothing changed, and the daemon still serving. A malloc
//! bdev far past the machine's memory used to abort the daemon (one
//! mapping per 2 MiB went past `vm.max_map_count`); bdev names took
//! Unicode direction overrides.

mod common;

use std::path::Path;
use std::process::Command;

use common::cached::bdev_names;
use common::Daemon;
use testkit::{repo_root, TempDir};

/// `spdk-rpc -s SOCKET ARGS...`: stdout on success, stdout and stderr on
/// failure (rpc.py prints the error response to stdout).
fn spdk_rpc(socket: &Path, args: &[&str]) -> Result<String, String> {
    let cli = repo_root().join("bin/venv/bin/spdk-rpc");
    if !cli.exists() {
        testkit::missing(&format!("{} (hack/deps.sh python)", cli.display()));
        return Err("no spdk-rpc".into());
    }
    let out = Command::new(cli)
        .arg("-s")
        .arg(socket)
        .args(args)
        .output()
        .expect("run spdk-rpc");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stdout) + &text(&out.stderr))
    }
}

#[test]
fn a_malloc_bdev_past_the_machines_memory_is_refused_and_the_daemon_lives() {
    let dir = TempDir::new("bad-input-malloc");
    let socket = dir.path().join("rpc.sock");
    let _d = Daemon::start(&socket, None);
    // 1 TiB in 4 KiB blocks (`bdev_malloc_create -b NAME SIZE_MB BLOCK_SIZE`).
    let Err(e) = spdk_rpc(
        &socket,
        &["bdev_malloc_create", "-b", "Big", "1048576", "4096"],
    ) else {
        panic!("a 1 TiB malloc bdev was created");
    };
    if e == "no spdk-rpc" {
        return;
    }
    assert!(
        e.contains("Cannot allocate memory") && e.contains("MemAvailable"),
        "{e}"
    );
    assert!(bdev_names(&socket).is_empty(), "nothing was created");
    // Still serving, and a bdev that fits is created.
    spdk_rpc(&socket, &["bdev_malloc_create", "-b", "Small", "8", "4096"]).unwrap();
    assert_eq!(bdev_names(&socket), ["Small"]);
}

#[test]
fn bdev_names_outside_printable_ascii_are_refused() {
    let dir = TempDir::new("bad-input-names");
    let socket = dir.path().join("rpc.sock");
    let _d = Daemon::start(&socket, None);
    for bad in ["evil\u{202e}gpj", "\u{430}dmin", "tab\there"] {
        let Err(e) = spdk_rpc(&socket, &["bdev_malloc_create", "-b", bad, "8", "4096"]) else {
            panic!("{bad:?} was accepted");
        };
        if e == "no spdk-rpc" {
            return;
        }
        assert!(e.contains("printable ASCII"), "{bad:?}: {e}");
    }
    assert!(bdev_names(&socket).is_empty(), "nothing was created");
}
