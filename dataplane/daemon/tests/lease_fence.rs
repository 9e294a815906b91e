//! The control plane's lease on the ANA paths, through a real daemon and
//! a userspace NVMe/TCP host: before the first grant nothing is fenced;
//! a lease that runs out without a renewal makes every ANA path report
//! inaccessible (`nvmf_subsystem_get_listeners`, the host's ANA log page)
//! and refuses the host's I/O with the retryable path status; the next
//! renewal brings back the states the control plane set. Bad calls are
//! refused and change nothing; nothing of it is saved. Waits are polls
//! with a deadline, never sleeps sized to the lease.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{free_port, host_params, rpc, tcp_listen_address, unix_rpc, Daemon};
use nvmf_host::host::{HostController, HostError};
use serde_json::{json, Value};
use testkit::TempDir;

const NQN: &str = "nqn.2016-06.io.rackcache:lease";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000f1";
const BS: usize = 512;
/// The ANA log page.
const LID_ANA: u8 = 0x0c;
/// How long the lease may take to run out and be noticed: it runs out
/// after 1.5 s; the rest is slack for a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);

fn lease(socket: &Path) -> Value {
    rpc(socket, "rackcache_lease_get", json!({}))
}

/// The ANA state of the subsystem's one listener for group 1.
fn listener_state(socket: &Path) -> String {
    let l = rpc(
        socket,
        "nvmf_subsystem_get_listeners",
        json!({ "nqn": NQN }),
    );
    l[0]["ana_states"][0]["ana_state"]
        .as_str()
        .expect("a state")
        .to_owned()
}

/// Group 1's state in the host's ANA log page (its controller's path).
fn host_ana_state(c: &mut HostController) -> u8 {
    let page = c
        .admin
        .get_log_page(LID_ANA, 0, 1024)
        .expect("ANA log page");
    page[32]
}

fn write(c: &mut HostController, fill: u8) -> Result<(), HostError> {
    c.io[0]
        .write_blocks(1, 0, BS, &[fill; BS], 8192)
        .map(|_| ())
}

/// Polls `what` until it holds, for at most [`DEADLINE`].
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + DEADLINE;
    while !f() {
        assert!(Instant::now() < until, "{what}: not within {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_lease_that_runs_out_fences_the_ana_paths_and_a_renewal_lifts_the_fence() {
    let work = TempDir::new("rackcache-lease");
    let socket = work.path().join("spdk.sock");
    let d = Daemon::start(&socket, None);
    let port = free_port();
    let call = |m: &str, p: Value| rpc(&socket, m, p);
    call(
        "bdev_malloc_create",
        json!({"name": "M0", "num_blocks": 2048, "block_size": BS}),
    );
    call("nvmf_create_transport", json!({"trtype": "TCP"}));
    call(
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "allow_any_host": true, "ana_reporting": true, "max_namespaces": 1}),
    );
    call(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "M0", "nsid": 1}}),
    );
    let listener = json!({"nqn": NQN, "listen_address": tcp_listen_address(port)});
    call("nvmf_subsystem_add_listener", listener.clone());
    let mut set = listener;
    set["ana_state"] = json!("non_optimized");
    call("nvmf_subsystem_listener_set_ana_state", set);
    let mut c = HostController::connect(&host_params(port, NQN, HOST, 0xf1), 1).expect("connect");
    write(&mut c, 1).expect("a write before any lease");

    // Before the first grant: nothing granted, nothing fenced; bad calls
    // change that not.
    assert_eq!(
        lease(&socket),
        json!({"granted": false, "fenced": false, "expires_in_ms": 0, "holder": null})
    );
    for (params, why) in [
        (
            json!({"holder": "op", "duration_ms": 999}),
            "duration_ms 999",
        ),
        (
            json!({"holder": "op", "duration_ms": 600_001}),
            "duration_ms 600001",
        ),
        (json!({"holder": "", "duration_ms": 5000}), "holder"),
        (
            json!({"holder": "two words", "duration_ms": 5000}),
            "holder",
        ),
        (json!({"duration_ms": 5000}), "holder"),
        (
            json!({"holder": "op", "duration_ms": 5000, "ttl": 1}),
            "ttl",
        ),
    ] {
        let e = unix_rpc(&socket, "rackcache_lease_renew", params.clone())
            .expect_err(&format!("{params} was accepted"));
        assert_eq!(e["code"], -32602, "{params}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(why),
            "{params}: {e}"
        );
    }
    assert_eq!(lease(&socket)["granted"], false);

    // A long grant first: granted, not fenced.
    let r = call(
        "rackcache_lease_renew",
        json!({"holder": "operator-0", "duration_ms": 600_000}),
    );
    assert!(r["expires_in_ms"].as_u64().unwrap() <= 600_000);
    let l = lease(&socket);
    assert_eq!((&l["granted"], &l["fenced"]), (&json!(true), &json!(false)));
    assert_eq!(l["holder"], "operator-0");
    assert_eq!(listener_state(&socket), "non_optimized");
    // Then a short one, left to run out.
    call(
        "rackcache_lease_renew",
        json!({"holder": "operator-0", "duration_ms": 1500}),
    );
    wait_until("the lease runs out", || lease(&socket)["fenced"] == true);
    assert_eq!(lease(&socket)["expires_in_ms"], 0);
    assert_eq!(listener_state(&socket), "inaccessible");
    assert_eq!(host_ana_state(&mut c), 0x03, "inaccessible in the log page");
    match write(&mut c, 2) {
        Err(HostError::Status { cqe, .. }) => assert_eq!(
            (cqe.status.sct, cqe.status.sc, cqe.status.dnr),
            (3, 2, false),
            "Asymmetric Access Inaccessible, retryable"
        ),
        other => panic!("a write through a fenced path: {other:?}"),
    }
    // Not saved: the saved configuration has no lease and the ANA
    // listener as it always is.
    let saved = rpc(&socket, "save_config", json!({})).to_string();
    assert!(!saved.contains("rackcache_lease"), "{saved}");

    let r = call(
        "rackcache_lease_renew",
        json!({"holder": "operator-1", "duration_ms": 600_000}),
    );
    assert!(r["expires_in_ms"].as_u64().unwrap() > 0);
    let l = lease(&socket);
    assert_eq!(
        (&l["fenced"], &l["holder"]),
        (&json!(false), &json!("operator-1"))
    );
    assert_eq!(
        listener_state(&socket),
        "non_optimized",
        "the state set is back"
    );
    assert_eq!(host_ana_state(&mut c), 0x02);
    write(&mut c, 3).expect("a write after the renewal");
    let mut back = vec![0u8; BS];
    c.io[0].read_blocks(1, 0, BS, &mut back).expect("read");
    assert_eq!(back, [3; BS], "the refused write changed nothing after");
    drop(c);
    assert!(d.stop().success());
}
