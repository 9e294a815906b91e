//! Fencing another server's Ceph client, with two daemons (two servers)
//! on one image of a real one-node Ceph: each reports its connection's
//! client address (`bdev_rbd_get_clusters_info`); B blocklists A's through
//! its own registered cluster (`bdev_rbd_blocklist_add`); then a host's
//! write through A fails (an error status, within a bound, not a hang)
//! while one through B succeeds, and Ceph's own copy holds B's data.
//! Bad calls are refused and fence nothing.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{export, free_port, host_params, rpc, unix_rpc, Daemon};
use nvmf_host::host::{HostController, HostError};
use serde_json::{json, Value};
use testkit::{Ceph, TempDir};

const NQN_A: &str = "nqn.2016-06.io.rackcache:server-a";
const NQN_B: &str = "nqn.2016-06.io.rackcache:server-b";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000f2";
const BS: usize = 4096;
/// How long a write through the fenced server may take to fail: its
/// image asks an OSD after seconds; this only turns a hang into a failure.
const FENCED_WRITE_BOUND: Duration = Duration::from_secs(90);

/// Registers cluster `ceph`, opens rbd/shared as `Rbd0` and exports it as
/// `nqn` on `port`.
fn serve_image(socket: &Path, ceph: &Ceph, nqn: &str, port: u16) {
    rpc(
        socket,
        "bdev_rbd_register_cluster",
        json!({"name": "ceph", "user_id": ceph.var("RACKCACHE_CEPH_USER"),
               "config_param": {"mon_host": ceph.var("RACKCACHE_CEPH_MON_HOST"),
                                "key": ceph.var("RACKCACHE_CEPH_KEY")}}),
    );
    rpc(
        socket,
        "bdev_rbd_create",
        json!({"name": "Rbd0", "cluster_name": "ceph", "pool_name": "rbd",
               "rbd_name": "shared", "block_size": BS}),
    );
    export(socket, nqn, "Rbd0", port);
}

fn write(c: &mut HostController, lba: u64, fill: u8) -> Result<(), HostError> {
    c.io[0]
        .write_blocks(1, lba, BS, &[fill; BS], 8192)
        .map(|_| ())
}

/// `len` bytes at `offset` of rbd/shared from Ceph's own copy.
fn ceph_copy(ceph: &Ceph, offset: usize, len: usize) -> Vec<u8> {
    let dir = TempDir::new("rackcache-blocklist-export");
    let out = dir.path().join("image");
    ceph.admin(
        "rbd",
        &[
            "export",
            "--no-progress",
            "rbd/shared",
            out.to_str().unwrap(),
        ],
    );
    std::fs::read(&out).unwrap()[offset..offset + len].to_vec()
}

fn client_address(socket: &Path) -> String {
    let info = rpc(
        socket,
        "bdev_rbd_get_clusters_info",
        json!({"name": "ceph"}),
    );
    assert_eq!(info["cluster_name"], "ceph");
    info["client_address"]
        .as_str()
        .expect("a client address")
        .to_owned()
}

#[test]
fn a_server_blocklisted_by_another_cannot_write_and_the_other_can() {
    let ceph = Ceph::start();
    ceph.admin("rbd", &["create", "--size", "16M", "rbd/shared"]);
    let work = TempDir::new("rackcache-blocklist");
    let (sa, sb) = (work.path().join("a.sock"), work.path().join("b.sock"));
    let (da, db) = (Daemon::start(&sa, None), Daemon::start(&sb, None));
    let (pa, pb) = (free_port(), free_port());
    serve_image(&sa, &ceph, NQN_A, pa);
    serve_image(&sb, &ceph, NQN_B, pb);
    let mut ha = HostController::connect(&host_params(pa, NQN_A, HOST, 0xa1), 1).unwrap();
    let mut hb = HostController::connect(&host_params(pb, NQN_B, HOST, 0xb1), 1).unwrap();
    write(&mut ha, 0, 0xaa).expect("A writes");
    write(&mut hb, 1, 0xbb).expect("B writes");

    let (addr_a, addr_b) = (client_address(&sa), client_address(&sb));
    assert_ne!(addr_a, addr_b, "two servers, two Ceph clients");
    let all = rpc(&sb, "bdev_rbd_get_clusters_info", json!({}));
    assert_eq!(all.as_array().map(Vec::len), Some(1));
    assert_eq!(all[0]["client_address"], json!(addr_b));
    assert!(
        !all.to_string().contains(ceph.var("RACKCACHE_CEPH_KEY")),
        "the cephx key is not shown: {all}"
    );
    let e = unix_rpc(&sb, "bdev_rbd_get_clusters_info", json!({"name": "nope"})).unwrap_err();
    assert_eq!(e["code"], -2, "{e}");

    // Refusals change nothing: A still writes after them.
    let blocklist = |params: Value| unix_rpc(&sb, "bdev_rbd_blocklist_add", params);
    for (params, code, why) in [
        (
            json!({"cluster_name": "ceph", "client_address": addr_b}),
            -32602,
            "cannot fence itself",
        ),
        (
            json!({"cluster_name": "ceph", "client_address": "127.0.0.1"}),
            -32602,
            "no /NONCE",
        ),
        (
            json!({"cluster_name": "ceph", "client_address": "127.0.0.1:0/0"}),
            -32602,
            "every client on that IP",
        ),
        (
            json!({"cluster_name": "ceph", "client_address": addr_a, "expire_seconds": 0}),
            -32602,
            "expire_seconds 0",
        ),
        (
            json!({"cluster_name": "nope", "client_address": addr_a}),
            -2,
            "no cluster named nope",
        ),
        (
            json!({"cluster_name": "ceph", "client_address": addr_a, "forever": true}),
            -32602,
            "forever",
        ),
    ] {
        let e = blocklist(params.clone()).expect_err(&format!("{params} was accepted"));
        assert_eq!(e["code"], code, "{params}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(why),
            "{params}: {e}"
        );
    }
    write(&mut ha, 2, 0xa1).expect("the refusals fenced nothing");
    let listed = ceph.admin("ceph", &["osd", "blocklist", "ls"]);
    assert!(!listed.contains(&addr_a), "{listed}");

    assert_eq!(
        blocklist(json!({"cluster_name": "ceph", "client_address": addr_a, "expire_seconds": 600}))
            .expect("B blocklists A"),
        json!(true)
    );
    let bare = addr_a.trim_start_matches("v2:").trim_start_matches("v1:");
    let listed = ceph.admin("ceph", &["osd", "blocklist", "ls"]);
    assert!(listed.contains(bare), "Ceph lists A: {listed}");
    // B first: the OSD serving it takes the map that fences A.
    write(&mut hb, 0, 0xb1).expect("B writes after the fence");
    ha.io[0].set_read_timeout(FENCED_WRITE_BOUND).unwrap();
    match write(&mut ha, 0, 0xa2) {
        Err(HostError::Status { cqe, .. }) => {
            println!(
                "A's write: status type {} code {:#x}",
                cqe.status.sct, cqe.status.sc
            )
        }
        other => panic!("a write through the fenced server: {other:?}"),
    }
    write(&mut hb, 2, 0xb2).expect("B goes on");
    assert_eq!(ceph_copy(&ceph, 0, BS), [0xb1; BS], "B's data, not A's");
    assert_eq!(ceph_copy(&ceph, 2 * BS, BS), [0xb2; BS]);

    drop((ha, hb));
    // The fenced server's image may never close (librbd keeps its failed
    // writes): it is killed, as a fenced server is restarted.
    da.kill9();
    assert!(db.stop().success());
}
