//! Every JSON-RPC method through SPDK's stock command line (`spdk-rpc`
//! from the project's venv, SPDK's own `rpc.py`) with its default flags:
//! the command line sends flags the JSON interface calls optional (for
//! example `false` for every `store_true` option), and an operator who
//! knows SPDK types exactly these commands. Each row runs one command and
//! checks its effect through the daemon's JSON-RPC; the rows run in order
//! against one daemon and a one-node Ceph.
//!
//! The rows must cover the daemon's method table (`methods::METHODS`):
//! a method added without a row fails `the_rows_cover_the_method_table`
//! (no Ceph needed). To add one, add a [`rows::Row`] to [`rows::rows`]
//! where its prerequisites exist (and its cleanup further down).
//!
//! Revocation is part of it: a host connected with the repository's own
//! NVMe/TCP host (`nvmf_host::host`) appears in
//! `nvmf_subsystem_get_controllers`, and `nvmf_subsystem_remove_host` (or
//! `allow_any_host` off) ends its queues, shrinks the list and refuses its
//! next Connect.

mod common;

#[path = "spdk_cli/rows.rs"]
mod rows;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{free_port, unix_rpc, Daemon};
use rackcache_dataplane::methods::METHODS;
use rows::{rows, Ctx, NO_CLI_COMMAND};
use serde_json::json;
use testkit::{repo_root, Ceph, TempDir};

fn spdk_rpc() -> PathBuf {
    let p = repo_root().join("bin/venv/bin/spdk-rpc");
    assert!(
        p.exists(),
        "{} is missing: run `hack/deps.sh python` (or `make deps`)",
        p.display()
    );
    p
}

fn expand(arg: &str, vars: &HashMap<&'static str, String>) -> String {
    let mut s = arg.to_owned();
    for (k, v) in vars {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s
}

fn run(socket: &Path, args: &[String]) -> Result<String, String> {
    let mut cmd = Command::new(spdk_rpc());
    cmd.arg("-s").arg(socket);
    // rackcache's own methods come from its plugin; SPDK's from the stock
    // command line alone.
    if args[0].starts_with("bdev_adacache_")
        || args[0].starts_with("rackcache_")
        || args[0] == "bdev_rbd_blocklist_add"
    {
        cmd.env("PYTHONPATH", repo_root().join("python"))
            .args(["--plugin", "rackcache_rpc_plugin"]);
    }
    let out = cmd.args(args).output().expect("run spdk-rpc");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

#[test]
fn every_method_through_the_stock_spdk_rpc_command_line() {
    let ceph = Ceph::start();
    ceph.admin("rbd", &["create", "--size", "32M", "rbd/vol1"]);
    let work = TempDir::new("rackcache-cli");
    let img = work.path().join("aio0.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    std::fs::File::create(work.path().join("cache.img"))
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    // DH-HMAC-CHAP secrets for the keyring rows, private to their owner as
    // keyring_file requires.
    for (name, fill) in [("key0", 1u8), ("ckey0", 2)] {
        let secret = nvmf::keys::DhchapSecret::from_key(None, &[fill; 32]).unwrap();
        let path = work.path().join(name);
        std::fs::write(&path, secret.encode().as_bytes()).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
    }
    let socket = work.path().join("spdk.sock");
    let daemon = Daemon::start(&socket, None);

    let mut vars = HashMap::new();
    vars.insert("work", work.path().display().to_string());
    vars.insert("port", free_port().to_string());
    vars.insert("dport", free_port().to_string());
    vars.insert("aport", free_port().to_string());
    vars.insert("ceph_user", ceph.var("RACKCACHE_CEPH_USER").to_owned());
    vars.insert("ceph_mon", ceph.var("RACKCACHE_CEPH_MON_HOST").to_owned());
    vars.insert("ceph_key", ceph.var("RACKCACHE_CEPH_KEY").to_owned());
    vars.insert("ceph_pool", ceph.var("RACKCACHE_CEPH_POOL").to_owned());
    let mut ctx = Ctx {
        socket: socket.clone(),
        vars,
        host: None,
        other: None,
    };

    let rows = rows();
    let mut failures = Vec::new();
    for r in &rows {
        let mut args = vec![r.method.to_owned()];
        args.extend(r.args.iter().map(|a| expand(a, &ctx.vars)));
        let shown = format!("spdk-rpc {}", args.join(" "));
        match run(&socket, &args) {
            Ok(out) => {
                println!("ok: {shown}");
                (r.check)(&mut ctx, &out);
            }
            Err(e) => failures.push(format!("{shown} failed:\n{e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));

    // The daemon serves the table's methods, which the rows cover (above).
    let served = unix_rpc(&socket, "rpc_get_methods", json!({})).unwrap();
    let table: Vec<&str> = METHODS.iter().map(|m| m.name).collect();
    assert_eq!(served, json!(table));
    drop(ctx);
    assert!(daemon.stop().success());
}

/// The methods of the table the rows do not drive, and the rows (or
/// reasons) naming a method the table lacks.
fn uncovered() -> (Vec<&'static str>, Vec<&'static str>) {
    let covered: BTreeSet<&str> = rows()
        .iter()
        .map(|r| r.method)
        .chain(NO_CLI_COMMAND.iter().map(|(m, _)| *m))
        .collect();
    let table: BTreeSet<&str> = METHODS.iter().map(|m| m.name).collect();
    (
        table.difference(&covered).copied().collect(),
        covered.difference(&table).copied().collect(),
    )
}

#[test]
fn the_rows_cover_the_method_table() {
    let (missing, unknown) = uncovered();
    assert!(
        missing.is_empty(),
        "methods without a spdk-rpc row in daemon/tests/spdk_cli/rows.rs: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "rows of daemon/tests/spdk_cli/rows.rs for methods the table lacks: {unknown:?}"
    );
}
