//! The daemon, configured only over JSON-RPC, serves a malloc bdev over
//! NVMe/TCP on 127.0.0.1 to the repository's own host (`nvmf_host::host`):
//! discovery shows the advertised address, data written comes back, a host
//! that was not added is refused, the I/O is counted exactly per subsystem
//! and per bdev (`bdev_get_iostat` and /metrics, latency histograms
//! included), the exported bdev cannot be deleted,
//! and SIGTERM with a host still connected stops the daemon cleanly.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{free_port, rpc, tcp_listen_address, unix_rpc, Daemon};
use nvmf_host::host::{ConnectParams, HostController, HostQueue};
use serde_json::json;
use testkit::TempDir;

const NQN: &str = "nqn.2016-06.io.rackcache:test-vol";
const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000a1";
const STRANGER: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000b2";
const BS: usize = 512;

fn metrics(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The value of the series `name{subnqn="NQN"}`.
fn series(body: &str, name: &str) -> f64 {
    labelled(body, name, "subnqn", NQN)
}

/// The value of the series `name{label="value"}`.
fn labelled(body: &str, name: &str, label: &str, value: &str) -> f64 {
    let key = format!("{name}{{{label}=\"{value}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .unwrap_or_else(|| panic!("no {key} in\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn daemon_serves_a_malloc_bdev_to_the_allowed_host_only() {
    let work = TempDir::new("rackcache-nvmf");
    let socket = work.path().join("spdk.sock");
    let metrics_port = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let d = Daemon::start_with(&socket, None, &["--metrics-listen", &metrics_addr]);
    let call = |m: &str, p: serde_json::Value| rpc(&socket, m, p);

    let port = free_port();
    call(
        "bdev_malloc_create",
        json!({"name": "Malloc0", "num_blocks": 32768, "block_size": BS}),
    );
    call("nvmf_create_transport", json!({"trtype": "TCP"}));
    call(
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "serial_number": "RCTEST01", "allow_any_host": false}),
    );
    assert_eq!(
        call(
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}})
        ),
        json!(1)
    );
    call("nvmf_subsystem_add_host", json!({"nqn": NQN, "host": HOST}));
    // Guests reach the listener through port forwarding: discovery tells
    // them the forwarded address.
    call(
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": tcp_listen_address(port),
               "rackcache_advertised": {"traddr": "10.0.2.100", "trsvcid": "14420"}}),
    );

    let params = |hostnqn: &str| ConnectParams {
        addr: format!("127.0.0.1:{port}"),
        subnqn: NQN.into(),
        hostnqn: hostnqn.into(),
        host_id: [0xa1; 16],
        queue_size: 64,
        kato_ms: 0,
    };

    // A host not on the list is refused at Connect.
    assert!(
        HostController::connect(&params(STRANGER), 1).is_err(),
        "a host that was not added connected"
    );

    // Discovery on the same port lists the subsystem at the advertised
    // address for the allowed host, and nothing for others.
    for (host, entries) in [(HOST, 1), (STRANGER, 0)] {
        let mut p = params(host);
        p.subnqn = DISCOVERY_NQN.into();
        p.queue_size = 32;
        let mut q = HostQueue::connect(&p, 0, 0).expect("connect to discovery");
        q.enable().unwrap();
        let log = q.get_log_page(0x70, 0, 2048).unwrap();
        assert_eq!(u64::from_le_bytes(log[8..16].try_into().unwrap()), entries);
        if entries == 1 {
            let e = &log[1024..];
            assert_eq!(&e[256..256 + NQN.len()], NQN.as_bytes());
            assert_eq!(&e[32..37], b"14420", "advertised trsvcid");
            assert_eq!(&e[512..522], b"10.0.2.100", "advertised traddr");
        }
    }

    let mut c = HostController::connect(&params(HOST), 2).expect("the allowed host connects");
    assert_eq!(c.io.len(), 2);
    // One write in the capsule (4 KiB, SPDK's default in_capsule_data_size),
    // one through R2T/H2CData (64 KiB), read back on the other queue.
    let small = pattern(4096, 7);
    let large = pattern(64 << 10, 91);
    c.io[0].write_blocks(1, 8, BS, &small, 4096).unwrap();
    c.io[0].write_blocks(1, 1024, BS, &large, 4096).unwrap();
    let mut back = vec![0u8; small.len()];
    c.io[1].read_blocks(1, 8, BS, &mut back).unwrap();
    assert!(back == small, "in-capsule write did not read back");
    let mut back = vec![0u8; large.len()];
    c.io[1].read_blocks(1, 1024, BS, &mut back).unwrap();
    assert!(back == large, "R2T write did not read back");

    // One deallocate of 8 blocks.
    c.io[0].deallocate(1, &[(4096, 8)]).unwrap();

    // The subsystem's counters are on the daemon's /metrics: exactly the
    // two writes, two reads and one deallocate above, each in its latency
    // histogram.
    let moved = (small.len() + large.len()) as f64;
    let body = metrics(metrics_port);
    for (name, want) in [
        ("rackcache_nvmf_written_bytes_total", moved),
        ("rackcache_nvmf_read_bytes_total", moved),
        ("rackcache_nvmf_write_ops_total", 2.0),
        ("rackcache_nvmf_read_ops_total", 2.0),
        ("rackcache_nvmf_unmap_ops_total", 1.0),
        ("rackcache_nvmf_flush_ops_total", 0.0),
        ("rackcache_nvmf_write_latency_seconds_count", 2.0),
        ("rackcache_nvmf_read_latency_seconds_count", 2.0),
    ] {
        assert_eq!(series(&body, name), want, "{name}");
    }
    // Reads of a malloc bdev complete inline, timed by the bdev's own end
    // instant: still a latency, not zero.
    for name in [
        "rackcache_nvmf_write_latency_seconds_sum",
        "rackcache_nvmf_read_latency_seconds_sum",
    ] {
        assert!(series(&body, name) > 0.0, "{name}");
    }
    assert!(series(&body, "rackcache_nvmf_connections") >= 3.0);

    // The same I/O reached the bdev through its counted handle: in
    // bdev_get_iostat and on /metrics with the label bdev.
    let iostat = call("bdev_get_iostat", json!({"name": "Malloc0"}));
    let b = &iostat["bdevs"][0];
    assert_eq!(b["name"], "Malloc0");
    for (field, want) in [
        ("bytes_written", moved as u64),
        ("num_write_ops", 2),
        ("bytes_read", moved as u64),
        ("num_read_ops", 2),
        ("bytes_unmapped", 8 * BS as u64),
        ("num_unmap_ops", 1),
        ("io_error", 0),
    ] {
        assert_eq!(b[field], json!(want), "{field} in {iostat}");
    }
    for field in ["read_latency_ticks", "write_latency_ticks"] {
        assert!(b[field].as_u64().unwrap() > 0, "{field} in {iostat}");
    }
    let bdev = |name: &str| labelled(&body, name, "bdev", "Malloc0");
    for (name, want) in [
        ("rackcache_bdev_written_bytes_total", moved),
        ("rackcache_bdev_write_ops_total", 2.0),
        ("rackcache_bdev_read_bytes_total", moved),
        ("rackcache_bdev_read_ops_total", 2.0),
        ("rackcache_bdev_unmapped_bytes_total", 8.0 * BS as f64),
        ("rackcache_bdev_unmap_ops_total", 1.0),
        ("rackcache_bdev_io_errors_total", 0.0),
        ("rackcache_bdev_write_latency_seconds_count", 2.0),
        ("rackcache_bdev_read_latency_seconds_count", 2.0),
        ("rackcache_bdev_unmap_latency_seconds_count", 1.0),
    ] {
        assert_eq!(bdev(name), want, "{name}");
    }

    // The exported bdev is claimed.
    let e = unix_rpc(&socket, "bdev_malloc_delete", json!({"name": "Malloc0"})).unwrap_err();
    assert_eq!(e["code"], -16, "{e}");
    assert!(e["message"].as_str().unwrap().contains(NQN), "{e}");

    // SIGTERM with the host still connected: the target drains and the
    // daemon exits cleanly.
    let start = Instant::now();
    let status = d.stop();
    assert!(status.success(), "daemon exit on SIGTERM: {status}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "shutdown took {:?}",
        start.elapsed()
    );
    drop(c);
}
