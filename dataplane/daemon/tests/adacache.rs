//! Cached bdevs (`bdev_adacache_*`) through the daemon's JSON-RPC and
//! NVMe/TCP: creation on malloc and aio cache bdevs, refusals that change
//! nothing, claims, statistics on /metrics, delete writing dirty data
//! back, and `--config-persist` restarts (SIGTERM and `kill -9`) that
//! attach to the cache on the device with `load` and read back what was
//! written in write-back.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{aio, free_port, host_params, rpc, unix_rpc, Daemon};
use nvmf_host::host::HostController;
use serde_json::{json, Value};
use testkit::TempDir;

const NQN: &str = "nqn.2016-06.io.rackcache:cached";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000d1";

fn connect(port: u16) -> HostController {
    HostController::connect(&host_params(port, NQN, HOST, 0xd1), 1).expect("the host connects")
}

/// Exports `bdev` as namespace 1 of NQN on a TCP listener at `port`.
fn export(socket: &Path, bdev: &str, port: u16) {
    common::export(socket, NQN, bdev, port);
}

fn unexport(socket: &Path) {
    rpc(socket, "nvmf_delete_subsystem", json!({"nqn": NQN}));
}

/// A pattern no two (seed, block) pairs share.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i / 512) as u8 ^ seed.wrapping_mul(31) ^ (i as u8).rotate_left(3))
        .collect()
}

fn read(c: &mut HostController, lba: u64, bs: usize, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    c.io[0].read_blocks(1, lba, bs, &mut b).expect("read");
    b
}

fn write(c: &mut HostController, lba: u64, bs: usize, data: &[u8]) {
    c.io[0].write_blocks(1, lba, bs, data, 8192).expect("write");
}

fn bdev_names(socket: &Path) -> Vec<String> {
    rpc(socket, "bdev_get_bdevs", json!({}))
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The error of a call that must fail.
fn refused(socket: &Path, method: &str, params: Value) -> Value {
    unix_rpc(socket, method, params.clone()).expect_err(&format!("{method} {params} was accepted"))
}

/// The value of the series `name{labels}` in a /metrics text.
fn metric(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().expect("a number"))
}

fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Waits (bounded) until /metrics shows `want` for `name{labels}`: the
/// series are refreshed once a second.
fn wait_metric(port: u16, name: &str, labels: &str, want: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = scrape(port);
        if metric(&text, name, labels) == Some(want) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{name}{{{labels}}} never became {want}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn malloc_cache_refusals_claims_metrics_and_delete_flushes() {
    let work = TempDir::new("rackcache-adacache");
    let socket = work.path().join("spdk.sock");
    let mport = free_port();
    let d = Daemon::start_with(
        &socket,
        None,
        &["--metrics-listen", &format!("127.0.0.1:{mport}")],
    );
    let call = |m: &str, p: Value| rpc(&socket, m, p);
    const BS: usize = 512;
    call(
        "bdev_malloc_create",
        json!({"name": "Core0", "num_blocks": 65536, "block_size": BS}),
    );
    call(
        "bdev_malloc_create",
        json!({"name": "Cache0", "num_blocks": 131072, "block_size": BS}),
    );
    call(
        "bdev_malloc_create",
        json!({"name": "Core1", "num_blocks": 2048, "block_size": BS}),
    );
    let good = json!({"name": "C0", "core_bdev_name": "Core0", "cache_bdev_name": "Cache0",
        "cache_size_mib": 16, "write_mode": "wb"});
    let with = |k: &str, v: Value| {
        let mut p = good.clone();
        p[k] = v;
        p
    };

    // Refusals, each leaving the bdevs and the devices as they were.
    let bdevs = bdev_names(&socket);
    let cases = [
        (with("bogus", json!(1)), -32602, "bogus"),
        (with("write_mode", json!("xx")), -32602, "xx"),
        (
            with("core_bdev_name", json!("Nope")),
            -19,
            "core bdev Nope does not exist",
        ),
        (
            with("cache_bdev_name", json!("Nope")),
            -19,
            "cache bdev Nope does not exist",
        ),
        (
            with("cache_bdev_name", json!("Core0")),
            -32602,
            "both Core0",
        ),
        (with("cache_size_mib", json!(0)), -32602, "cache_size_mib"),
        (with("admission", json!("lfu")), -32602, "admission"),
        // Before anything is written to the blank cache bdev.
        (with("cache_size_mib", json!(4096)), -28, "at most"),
        // load never formats: the device has no cache yet.
        (with("load", json!(true)), -19, "not formatted"),
    ];
    for (p, code, text) in &cases {
        let e = refused(&socket, "bdev_adacache_create", p.clone());
        assert_eq!(e["code"], json!(code), "{p}: {e}");
        assert!(e["message"].as_str().unwrap().contains(text), "{p}: {e}");
        assert_eq!(bdev_names(&socket), bdevs, "{p} changed the bdevs");
        assert_eq!(call("bdev_adacache_get_devices", json!({})), json!([]));
    }

    assert_eq!(call("bdev_adacache_create", good.clone()), json!("C0"));
    let devices = call("bdev_adacache_get_devices", json!({}));
    assert_eq!(devices[0]["cache_bdev_name"], "Cache0");
    assert_eq!(
        devices[0]["volumes"],
        json!([{"name": "C0", "cache_size_mib": 16, "attached": true}])
    );
    let free = devices[0]["free_mib"].as_u64().unwrap();
    assert_eq!(devices[0]["total_mib"].as_u64().unwrap() - free, 16);

    // More refusals now that C0 exists.
    let bdevs = bdev_names(&socket);
    let cases = [
        (good.clone(), -17, "bdev C0 already exists"),
        (with("name", json!("Core0")), -17, "already exists"),
        (with("name", json!("C1")), -16, "claimed by bdev C0"),
        (
            json!({"name": "C1", "core_bdev_name": "Core1", "cache_bdev_name": "Cache0",
                   "cache_size_mib": 1_000_000}),
            -28,
            "free",
        ),
    ];
    for (p, code, text) in &cases {
        let e = refused(&socket, "bdev_adacache_create", p.clone());
        assert_eq!(e["code"], json!(code), "{p}: {e}");
        assert!(e["message"].as_str().unwrap().contains(text), "{p}: {e}");
        assert_eq!(bdev_names(&socket), bdevs, "{p} changed the bdevs");
        assert_eq!(call("bdev_adacache_get_devices", json!({})), devices);
    }

    // A second cached bdev shares the cache device.
    let c1 = json!({"name": "C1", "core_bdev_name": "Core1", "cache_bdev_name": "Cache0",
                    "cache_size_mib": 4});
    assert_eq!(call("bdev_adacache_create", c1), json!("C1"));
    let shared = call("bdev_adacache_get_devices", json!({}));
    assert_eq!(shared.as_array().unwrap().len(), 1, "{shared}");
    assert_eq!(shared[0]["free_mib"].as_u64().unwrap(), free - 4);
    assert_eq!(shared[0]["volumes"][1]["name"], "C1");
    assert_eq!(call("bdev_adacache_delete", json!({"name": "C1"})), true);
    assert_eq!(call("bdev_adacache_get_devices", json!({})), devices);

    // Claims: core and cache are claimed by C0.
    for base in ["Core0", "Cache0"] {
        let b = call("bdev_get_bdevs", json!({"name": base}));
        assert_eq!(b[0]["claimed"], true, "{base}");
        let e = refused(&socket, "bdev_malloc_delete", json!({"name": base}));
        assert_eq!(e["code"], -16);
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("claimed by bdev C0"),
            "{e}"
        );
    }
    let c0 = call("bdev_get_bdevs", json!({"name": "C0"}));
    let ds = &c0[0]["driver_specific"]["adacache"];
    assert_eq!(
        (ds["core_bdev_name"].clone(), ds["cache_bdev_name"].clone()),
        (json!("Core0"), json!("Cache0"))
    );
    assert_eq!(ds["write_mode"], "wb");
    assert_eq!(c0[0]["product_name"], "AdaCache disk");
    let listed = call("bdev_adacache_get_bdevs", json!({}));
    assert_eq!(listed[0]["name"], "C0");
    assert_eq!(listed[0]["params"]["load"], true);
    let e = refused(&socket, "bdev_adacache_get_bdevs", json!({"name": "Core0"}));
    assert_eq!(e["code"], -19);

    // Exported: the cached bdev cannot be deleted, its core not exported.
    let port = free_port();
    export(&socket, "C0", port);
    let e = refused(
        &socket,
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Core0"}}),
    );
    assert!(e["message"].as_str().unwrap().contains("C0"), "{e}");
    let e = refused(&socket, "bdev_adacache_delete", json!({"name": "C0"}));
    assert_eq!(e["code"], -16);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("nvmf_subsystem_remove_ns"),
        "{e}"
    );

    // Write-back I/O through NVMe/TCP.
    let data = pattern(1, 128 << 10);
    let mut c = connect(port);
    write(&mut c, 8, BS, &data);
    assert_eq!(read(&mut c, 8, BS, data.len()), data);
    assert_eq!(read(&mut c, 8, BS, data.len()), data);
    drop(c);
    let io = call("bdev_get_iostat", json!({"name": "C0"}));
    assert_eq!(io["bdevs"][0]["bytes_written"], json!(data.len()));
    assert_eq!(io["bdevs"][0]["bytes_read"], json!(2 * data.len()));
    let st = call("bdev_adacache_get_stats", json!({"name": "C0"}));
    assert_eq!(st["blocks"]["volume_wr"], json!(data.len()), "{st}");
    assert_eq!(st["blocks"]["volume_rd"], json!(2 * data.len()), "{st}");
    assert!(
        st["dirty_bytes"].as_u64().unwrap() >= data.len() as u64,
        "{st}"
    );
    assert_eq!(st["requests"]["rd_hits"], json!(2), "{st}");

    // /metrics shows the same figures, labelled with bdev and volume.
    let l = "bdev=\"C0\",volume=\"Core0\"";
    let text = wait_metric(
        mport,
        "rackcache_cache_host_written_bytes_total",
        l,
        data.len() as f64,
    );
    let m = |n: &str| metric(&text, n, l).unwrap_or_else(|| panic!("{n} missing:\n{text}"));
    assert_eq!(
        m("rackcache_cache_host_read_bytes_total"),
        2.0 * data.len() as f64
    );
    assert_eq!(m("rackcache_cache_read_hits_total"), 2.0);
    assert_eq!(
        m("rackcache_cache_dirty_bytes"),
        st["dirty_bytes"].as_f64().unwrap()
    );
    assert_eq!(
        m("rackcache_cache_cache_written_bytes_total"),
        st["blocks"]["cache_volume_wr"].as_f64().unwrap()
    );
    assert_eq!(m("rackcache_cache_read_hit_ratio"), 1.0);
    assert_eq!(
        m("rackcache_cache_capacity_bytes"),
        st["usage"]["capacity_bytes"].as_f64().unwrap()
    );

    // A reset restarts get_stats; the counters on /metrics never go down.
    assert_eq!(
        call("bdev_adacache_reset_stats", json!({"name": "C0"})),
        true
    );
    let st = call("bdev_adacache_get_stats", json!({"name": "C0"}));
    assert_eq!(st["blocks"]["volume_wr"], 0, "{st}");
    let mut c = connect(port);
    assert_eq!(read(&mut c, 8, BS, 4096), data[..4096]);
    drop(c);
    let text = wait_metric(
        mport,
        "rackcache_cache_host_read_bytes_total",
        l,
        2.0 * data.len() as f64 + 4096.0,
    );
    assert_eq!(
        metric(&text, "rackcache_cache_host_written_bytes_total", l),
        Some(data.len() as f64)
    );

    let e = refused(&socket, "bdev_adacache_set_policy", json!({"name": "C0"}));
    assert_eq!(e["code"], -32602);
    let e = refused(
        &socket,
        "bdev_adacache_set_mode",
        json!({"name": "C0", "write_mode": "wb", "x": 1}),
    );
    assert_eq!(e["code"], -32602);

    // Delete writes the dirty data back: core holds it afterwards.
    unexport(&socket);
    assert_eq!(call("bdev_adacache_delete", json!({"name": "C0"})), true);
    assert!(!bdev_names(&socket).contains(&"C0".to_owned()));
    assert!(
        !scrape(mport).contains("bdev=\"C0\""),
        "C0's series are gone from /metrics"
    );
    let devices = call("bdev_adacache_get_devices", json!({}));
    assert_eq!(devices[0]["volumes"], json!([]));
    assert_eq!(devices[0]["free_mib"], devices[0]["total_mib"]);
    let port = free_port();
    export(&socket, "Core0", port);
    let mut c = connect(port);
    assert_eq!(read(&mut c, 8, BS, data.len()), data, "core has the data");
    drop(c);
    unexport(&socket);
    // Unclaimed again: both can go.
    call("bdev_malloc_delete", json!({"name": "Core0"}));
    call("bdev_malloc_delete", json!({"name": "Cache0"}));
    assert_eq!(call("bdev_adacache_get_devices", json!({})), json!([]));
    assert!(d.stop().success());
}

/// The params `save_config` records for cached bdev `name`.
fn saved_params(socket: &Path, name: &str) -> Value {
    let cfg = rpc(socket, "save_config", json!({}));
    cfg["subsystems"][0]["config"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["method"] == "bdev_adacache_create" && c["params"]["name"] == name)
        .map(|c| c["params"].clone())
        .unwrap_or_else(|| panic!("{name} not saved: {cfg}"))
}

#[test]
fn set_mode_set_policy_and_resize() {
    let work = TempDir::new("rackcache-adacache-tune");
    let socket = work.path().join("spdk.sock");
    let d = Daemon::start(&socket, None);
    let call = |m: &str, p: Value| rpc(&socket, m, p);
    call(
        "bdev_malloc_create",
        json!({"name": "Core0", "num_blocks": 16384, "block_size": 512}),
    );
    call(
        "bdev_malloc_create",
        json!({"name": "Cache0", "num_blocks": 131072, "block_size": 512}),
    );
    call(
        "bdev_adacache_create",
        json!({"name": "C0", "core_bdev_name": "Core0", "cache_bdev_name": "Cache0",
               "cache_size_mib": 16, "write_mode": "wb"}),
    );
    let info = || call("bdev_adacache_get_bdevs", json!({"name": "C0"}))[0].clone();
    let free = || {
        call("bdev_adacache_get_devices", json!({}))[0]["free_mib"]
            .as_u64()
            .unwrap()
    };
    let free_before = free();
    let outcome = |m: &str, p: Value| match unix_rpc(&socket, m, p) {
        Ok(v) => assert_eq!(v, true),
        Err(e) => panic!("{m}: {e}"),
    };

    outcome(
        "bdev_adacache_set_mode",
        json!({"name": "C0", "write_mode": "wt"}),
    );
    let want = "wt";
    assert_eq!(info()["write_mode"], want);
    assert_eq!(saved_params(&socket, "C0")["write_mode"], want);
    let f = call("bdev_adacache_flush_status", json!({"name": "C0"}));
    assert_eq!(f["dirty_bytes"], 0, "leaving wb flushed: {f}");

    outcome(
        "bdev_adacache_set_policy",
        json!({"name": "C0", "admission": "nhit:2", "cleaning": {"policy": "nop"}}),
    );
    let want = ("nhit:2", "nop");
    for p in [info()["params"].clone(), saved_params(&socket, "C0")] {
        assert_eq!(
            (p["admission"].clone(), p["cleaning"]["policy"].clone()),
            (json!(want.0), json!(want.1)),
            "{p}"
        );
    }

    outcome(
        "bdev_adacache_resize",
        json!({"name": "C0", "cache_size_mib": 8}),
    );
    let want = 8;
    assert_eq!(info()["cache_size_mib"], want);
    assert_eq!(saved_params(&socket, "C0")["cache_size_mib"], want);
    assert_eq!(free(), free_before + 16 - want);
    let st = call("bdev_adacache_get_stats", json!({"name": "C0"}));
    assert_eq!(st["usage"]["capacity_bytes"], json!(want << 20));

    // Bad values are refused.
    for (m, p) in [
        (
            "bdev_adacache_set_mode",
            json!({"name": "C0", "write_mode": "xx"}),
        ),
        ("bdev_adacache_set_policy", json!({"name": "C0"})),
        (
            "bdev_adacache_set_policy",
            json!({"name": "C0", "admission": "lfu"}),
        ),
        (
            "bdev_adacache_resize",
            json!({"name": "C0", "cache_size_mib": 0}),
        ),
        (
            "bdev_adacache_resize",
            json!({"name": "Nope", "cache_size_mib": 4}),
        ),
    ] {
        let e = refused(&socket, m, p.clone());
        assert!(
            e["code"] == -32602 || e["code"] == -22 || e["code"] == -19,
            "{m} {p}: {e}"
        );
    }
    assert!(d.stop().success());
}

/// The configuration's calls, in order, as (method, params).
fn config_calls(file: &Path) -> Vec<(String, Value)> {
    let v: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    v["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["config"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            (
                c["method"].as_str().unwrap().to_owned(),
                c["params"].clone(),
            )
        })
        .collect()
}

#[test]
fn aio_cache_write_back_survives_restart_and_kill_9() {
    const BS: usize = 4096;
    let work = TempDir::new("rackcache-adacache-persist");
    let socket = work.path().join("spdk.sock");
    let file = work.path().join("config.json");
    let (core_img, cache_img) = (work.path().join("core.img"), work.path().join("cache.img"));
    let persist = ["--config-persist", file.to_str().unwrap()];
    let d = Daemon::start_with(&socket, None, &persist);
    let call = |m: &str, p: Value| rpc(&socket, m, p);
    aio(&socket, "Core0", &core_img, 64 << 20);
    aio(&socket, "Cache0", &cache_img, 64 << 20);
    call(
        "bdev_adacache_create",
        json!({"name": "C0", "core_bdev_name": "Core0", "cache_bdev_name": "Cache0",
               "cache_size_mib": 16, "write_mode": "wb", "mode": "fixed",
               "block_sizes_kib": [32], "cleaning": {"policy": "nop"}}),
    );
    let port = free_port();
    export(&socket, "C0", port);

    // Recorded after its core and cache, before the namespace, with load.
    let calls = config_calls(&file);
    let pos = |m: &str, name: &str| {
        calls
            .iter()
            .position(|(cm, p)| {
                cm == m && (p["name"] == name || p["namespace"]["bdev_name"] == name)
            })
            .unwrap_or_else(|| panic!("{m} {name} not in {calls:?}"))
    };
    let create = pos("bdev_adacache_create", "C0");
    assert!(pos("bdev_aio_create", "Core0") < create);
    assert!(pos("bdev_aio_create", "Cache0") < create);
    assert!(create < pos("nvmf_subsystem_add_ns", "C0"));
    assert_eq!(calls[create].1["load"], true);
    assert_eq!(calls[create].1["write_mode"], "wb");
    assert_eq!(calls[create].1["cleaning"]["policy"], "nop");

    // Written in write-back (dirty, core does not have it), then SIGTERM.
    let a = pattern(2, 128 << 10);
    let mut c = connect(port);
    write(&mut c, 4, BS, &a);
    drop(c);
    let st = call("bdev_adacache_get_stats", json!({"name": "C0"}));
    assert!(
        st["dirty_bytes"].as_u64().unwrap() >= a.len() as u64,
        "{st}"
    );
    assert!(d.stop().success());
    let log = std::fs::read_to_string(socket.with_extension("log")).unwrap();
    assert!(
        log.contains("cached bdev stopped"),
        "SIGTERM stops the cached bdev:\n{log}"
    );

    let d = Daemon::start_with(&socket, None, &persist);
    let st = call("bdev_adacache_get_stats", json!({"name": "C0"}));
    assert!(
        st["dirty_bytes"].as_u64().unwrap() >= a.len() as u64,
        "dirty data loaded: {st}"
    );
    let mut c = connect(port);
    assert_eq!(read(&mut c, 4, BS, a.len()), a, "after SIGTERM");
    // Acknowledged, never flushed, then kill -9.
    let b = pattern(3, 64 << 10);
    write(&mut c, 100, BS, &b);
    drop(c);
    d.kill9();
    std::fs::remove_file(&socket).unwrap();

    let d = Daemon::start_with(&socket, None, &persist);
    let mut c = connect(port);
    assert_eq!(read(&mut c, 4, BS, a.len()), a, "after kill -9");
    assert_eq!(read(&mut c, 100, BS, b.len()), b, "after kill -9");
    let st = call("bdev_adacache_get_stats", json!({"name": "C0"}));
    assert_eq!(
        st["requests"]["rd_hits"],
        json!(2),
        "warm after kill -9: {st}"
    );
    drop(c);
    d.kill9();
    std::fs::remove_file(&socket).unwrap();

    // A daemon without the configuration: the cache is on the device, a
    // create without load is refused, one with load attaches.
    let d = Daemon::start(&socket, None);
    aio(&socket, "Core0", &core_img, 64 << 20);
    aio(&socket, "Cache0", &cache_img, 64 << 20);
    let p = json!({"name": "C0", "core_bdev_name": "Core0", "cache_bdev_name": "Cache0",
                   "cache_size_mib": 16, "write_mode": "wb", "mode": "fixed",
                   "block_sizes_kib": [32]});
    let e = refused(&socket, "bdev_adacache_create", p.clone());
    assert!(e["message"].as_str().unwrap().contains("load=true"), "{e}");
    assert_eq!(bdev_names(&socket), ["Core0", "Cache0"]);
    let devices = call("bdev_adacache_get_devices", json!({}));
    assert_eq!(
        devices[0]["volumes"],
        json!([{"name": "C0", "cache_size_mib": 16, "attached": false}])
    );
    // Another volume with load: nothing of that name on the device.
    let mut other = p.clone();
    other["name"] = json!("C9");
    other["load"] = json!(true);
    let e = refused(&socket, "bdev_adacache_create", other);
    assert!(
        e["message"].as_str().unwrap().contains("holds no cache"),
        "{e}"
    );
    let mut load = p.clone();
    load["load"] = json!(true);
    call("bdev_adacache_create", load);
    let port = free_port();
    export(&socket, "C0", port);
    let mut c = connect(port);
    assert_eq!(read(&mut c, 100, BS, b.len()), b);
    drop(c);
    unexport(&socket);
    // A delete that discards: the core never got b.
    call("bdev_adacache_delete", json!({"name": "C0", "force": true}));
    let port = free_port();
    export(&socket, "Core0", port);
    let mut c = connect(port);
    assert_ne!(read(&mut c, 100, BS, b.len()), b, "force discarded it");
    drop(c);
    assert!(d.stop().success());
}

/// `spdk-rpc` (SPDK's stock command line from the project's venv) with
/// rackcache's plugin (python/rackcache_rpc_plugin.py): its standard
/// output, or standard output and error when it fails.
fn plugin_cli(socket: &Path, args: &[&str]) -> Result<String, String> {
    let root = testkit::repo_root();
    let cli = root.join("bin/venv/bin/spdk-rpc");
    assert!(
        cli.exists(),
        "{} is missing: run `hack/deps.sh python` (or `make deps`)",
        cli.display()
    );
    let out = std::process::Command::new(cli)
        .arg("-s")
        .arg(socket)
        .env("PYTHONPATH", root.join("python"))
        .args(["--plugin", "rackcache_rpc_plugin"])
        .args(args)
        .output()
        .expect("run spdk-rpc");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// The samples of the cached-volume families (`rackcache_cache_*`) of
/// the daemon's /metrics (on `port`) as prometheus-client's OpenMetrics
/// parser (from the project's venv) reads them: `type name labels value`
/// lines, labels sorted. Only those families: the page as a whole is
/// refused while the NVMe-oF target's `rackcache_nvmf_connections` gauge
/// and `rackcache_nvmf_connections_total` counter share a family name.
fn parsed_samples(port: u16) -> String {
    const PARSE: &str = r##"
import sys, urllib.request
from prometheus_client.openmetrics.parser import text_string_to_metric_families
body = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
def family(line):
    return line.split(" ")[2] if line.startswith("# ") else line
body = "".join(l + "\n" for l in body.splitlines()
               if l == "# EOF" or family(l).startswith("rackcache_cache_"))
for fam in text_string_to_metric_families(body):
    for s in fam.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print(f"{fam.type} {s.name} {labels} {s.value}")
"##;
    let out = std::process::Command::new(testkit::spdk_python())
        .args(["-c", PARSE, &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .expect("run the parser");
    assert!(
        out.status.success(),
        "prometheus-client refused /metrics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the parsed sample `prefix` (type, name and labels).
fn parsed(samples: &str, prefix: &str) -> Option<f64> {
    samples
        .lines()
        .find_map(|l| l.strip_prefix(prefix)?.strip_prefix(' '))
        .map(|v| v.parse().expect("a number"))
}

/// `bdev_adacache_get_mrc` and the curve and eviction figures of
/// `get_stats` and /metrics, after a cyclic scan whose LRU curve is known
/// exactly: `PASSES` reads of each of `N` blocks of the volume's smallest
/// block size, in order. An LRU cache of fewer than `N` blocks misses
/// every reference; from `N` blocks on only the first pass misses. The
/// engine's curve is exact below 4096 tracked blocks and 1024 blocks of
/// distance.
#[test]
fn miss_ratio_curve_and_eviction_choice() {
    const SECTOR: usize = 512;
    const N: u64 = 256;
    const PASSES: u64 = 3;
    const CACHE_MIB: u64 = 16;
    let work = TempDir::new("rackcache-adacache-mrc");
    let socket = work.path().join("spdk.sock");
    let mport = free_port();
    let d = Daemon::start_with(
        &socket,
        None,
        &["--metrics-listen", &format!("127.0.0.1:{mport}")],
    );
    let call = |m: &str, p: Value| rpc(&socket, m, p);
    call(
        "bdev_malloc_create",
        json!({"name": "Core0", "num_blocks": 65536, "block_size": SECTOR}),
    );
    call(
        "bdev_malloc_create",
        json!({"name": "Cache0", "num_blocks": 131072, "block_size": SECTOR}),
    );
    // Default block sizes, online eviction choice (asked for explicitly,
    // although it is the default); no sequential cutoff, so that every read goes
    // through the engine.
    call(
        "bdev_adacache_create",
        json!({"name": "C0", "core_bdev_name": "Core0", "cache_bdev_name": "Cache0",
               "cache_size_mib": CACHE_MIB, "eviction": "auto",
               "seq_cutoff": {"policy": "never"}}),
    );
    // The curve's blocks are the smallest of the default sizes (32, 64,
    // 128 and 256 KiB).
    let block: u64 = 32 << 10;
    let capacity = CACHE_MIB << 20;
    assert!(N * block < capacity, "the scan fits the cache");

    // Before any I/O: no references, no points.
    let mrc = call("bdev_adacache_get_mrc", json!({"name": "C0"}));
    assert_eq!(
        mrc,
        json!({"name": "C0", "block_size": block, "references": 0,
               "capacity_bytes": capacity, "miss_ratio_at_capacity": 0.0, "points": []})
    );

    // The scan, through NVMe/TCP.
    let port = free_port();
    export(&socket, "C0", port);
    let mut c = connect(port);
    let per_block = (block as usize) / SECTOR;
    for _ in 0..PASSES {
        for b in 0..N {
            read(&mut c, b * per_block as u64, SECTOR, block as usize);
        }
    }
    drop(c);

    let mrc = call("bdev_adacache_get_mrc", json!({"name": "C0"}));
    assert_eq!(mrc["name"], "C0");
    assert_eq!(mrc["block_size"], json!(block));
    assert_eq!(mrc["references"], json!(N * PASSES), "{mrc}");
    assert_eq!(mrc["capacity_bytes"], json!(capacity));
    let points: Vec<(u64, f64)> = mrc["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["cache_bytes"].as_u64().unwrap(),
                p["miss_ratio"].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(!points.is_empty());
    assert_eq!(points[0], (0, 1.0));
    for w in points.windows(2) {
        assert!(w[0].0 < w[1].0, "sizes increase: {w:?}");
        assert!(w[0].1 >= w[1].1, "miss ratios do not increase: {w:?}");
    }
    let cold = 1.0 / PASSES as f64;
    let at = |bytes: u64| {
        points
            .iter()
            .find(|p| p.0 == bytes)
            .unwrap_or_else(|| panic!("no point at {bytes}: {mrc}"))
            .1
    };
    assert_eq!(at((N - 1) * block), 1.0, "just below the scan: all misses");
    assert_eq!(at(N * block), cold, "the scan fits: first references only");
    assert_eq!(points.last().unwrap().1, cold);
    assert_eq!(mrc["miss_ratio_at_capacity"].as_f64().unwrap(), cold);

    // The same through SPDK's command line and the plugin.
    let out = plugin_cli(&socket, &["bdev_adacache_get_mrc", "C0"]).expect("get_mrc");
    let cli: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(cli, mrc);

    // get_stats: the curve at multiples of the capacity, the eviction.
    let st = call("bdev_adacache_get_stats", json!({"name": "C0"}));
    assert_eq!(st["mrc"]["references"], json!(N * PASSES), "{st}");
    assert_eq!(st["mrc"]["block_size"], json!(block));
    let compact: Vec<(f64, u64, f64)> = st["mrc"]["miss_ratio"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["multiple"].as_f64().unwrap(),
                p["cache_bytes"].as_u64().unwrap(),
                p["miss_ratio"].as_f64().unwrap(),
            )
        })
        .collect();
    // The scan is half the capacity: a quarter of it misses everything.
    assert_eq!(N * block, capacity / 2);
    assert_eq!(
        compact,
        vec![
            (0.25, capacity / 4, 1.0),
            (0.5, capacity / 2, cold),
            (1.0, capacity, cold),
            (2.0, 2 * capacity, cold),
            (4.0, 4 * capacity, cold),
        ],
        "{st}"
    );
    let ev = &st["eviction"];
    assert_eq!(ev["configured"], "auto", "{st}");
    let policy = ev["policy"].as_str().unwrap();
    assert!(["sieve", "lru2"].contains(&policy), "{st}");
    assert_eq!(ev["auto"]["active"], policy);
    let shadows = ev["auto"]["shadows"].as_array().unwrap();
    assert_eq!(shadows.len(), 2, "{st}");
    for s in shadows {
        let m = s["miss_ratio"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&m), "{st}");
    }
    assert!(ev["auto"]["sampling_rate"].as_f64().unwrap() > 0.0);
    assert!(ev["auto"]["memory_bytes"].as_u64().unwrap() > 0);
    let switches = ev["auto"]["switches"].as_u64().unwrap();
    let out = plugin_cli(&socket, &["bdev_adacache_get_stats", "C0"]).expect("get_stats");
    let cli: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(cli["mrc"], st["mrc"]);
    assert_eq!(cli["eviction"]["policy"], ev["policy"]);

    // /metrics: one miss-ratio series per multiple, and the switches.
    let l = "bdev=\"C0\",volume=\"Core0\"";
    let text = wait_metric(
        mport,
        "rackcache_cache_mrc_miss_ratio",
        &format!("{l},multiple=\"0.25\""),
        1.0,
    );
    for m in ["0.5", "1", "2", "4"] {
        let v = metric(
            &text,
            "rackcache_cache_mrc_miss_ratio",
            &format!("{l},multiple=\"{m}\""),
        )
        .unwrap_or_else(|| panic!("multiple {m} missing:\n{text}"));
        assert!((v - cold).abs() < 1e-12, "multiple {m}: {v}");
    }
    assert_eq!(
        metric(&text, "rackcache_cache_eviction_switches_total", l),
        Some(switches as f64)
    );
    // prometheus-client's parser reads the new families.
    let samples = parsed_samples(mport);
    assert_eq!(
        parsed(
            &samples,
            "gauge rackcache_cache_mrc_miss_ratio bdev=C0,multiple=0.25,volume=Core0"
        ),
        Some(1.0),
        "{samples}"
    );
    assert_eq!(
        parsed(
            &samples,
            "counter rackcache_cache_eviction_switches_total bdev=C0,volume=Core0"
        ),
        Some(switches as f64),
        "{samples}"
    );
    assert_eq!(
        samples
            .lines()
            .filter(|s| s.starts_with("gauge rackcache_cache_mrc_miss_ratio bdev=C0,"))
            .count(),
        5
    );

    // A reset restarts get_stats, not the curve (nor the switches).
    assert_eq!(
        call("bdev_adacache_reset_stats", json!({"name": "C0"})),
        true
    );
    let st = call("bdev_adacache_get_stats", json!({"name": "C0"}));
    assert_eq!(st["requests"]["rd_total"], 0, "{st}");
    assert_eq!(st["mrc"]["references"], json!(N * PASSES), "{st}");
    assert_eq!(st["eviction"]["auto"]["switches"], json!(switches));

    // A pinned policy: no online choice.
    call(
        "bdev_adacache_set_policy",
        json!({"name": "C0", "eviction": "lru2"}),
    );
    let st = call("bdev_adacache_get_stats", json!({"name": "C0"}));
    assert_eq!(
        st["eviction"],
        json!({"policy": "lru2", "configured": "lru2", "auto": null})
    );

    // Refusals change nothing.
    let before = call("bdev_adacache_get_mrc", json!({"name": "C0"}));
    for (p, code, text) in [
        (json!({"name": "Nope"}), -19, "no cached bdev named Nope"),
        (json!({"name": "Core0"}), -19, "no cached bdev named Core0"),
        (json!({}), -32602, "name"),
        (json!({"name": "C0", "x": 1}), -32602, "x"),
        (json!({"name": 7}), -32602, "invalid type"),
    ] {
        let e = refused(&socket, "bdev_adacache_get_mrc", p.clone());
        assert_eq!(e["code"], json!(code), "{p}: {e}");
        assert!(e["message"].as_str().unwrap().contains(text), "{p}: {e}");
    }
    let e = plugin_cli(&socket, &["bdev_adacache_get_mrc", "Nope"]).unwrap_err();
    assert!(e.contains("no cached bdev named Nope"), "{e}");
    assert_eq!(call("bdev_adacache_get_mrc", json!({"name": "C0"})), before);

    // Deleted: its series go, and so does its curve.
    unexport(&socket);
    assert_eq!(call("bdev_adacache_delete", json!({"name": "C0"})), true);
    let e = refused(&socket, "bdev_adacache_get_mrc", json!({"name": "C0"}));
    assert_eq!(e["code"], -19);
    assert!(!scrape(mport).contains("bdev=\"C0\""));
    assert!(d.stop().success());
}
