//! Cached bdevs (`bdev_adacache_*`) through the daemon's JSON-RPC and
//! NVMe/TCP: creation on malloc cache bdevs, refusals that change
//! nothing, claims, statistics on /metrics, delete writing dirty data
//! back, and changes of mode, policy and size. Restarts are in
//! `adacache_restart.rs`, the miss-ratio curve in `adacache_mrc.rs`.

mod common;

use common::cached::*;
use common::{free_port, rpc, unix_rpc, Daemon};
use serde_json::{json, Value};
use testkit::TempDir;

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
    malloc(&socket, "Core0", 65536, BS);
    malloc(&socket, "Cache0", 131072, BS);
    malloc(&socket, "Core1", 2048, BS);
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

#[test]
fn set_mode_set_policy_and_resize() {
    let work = TempDir::new("rackcache-adacache-tune");
    let socket = work.path().join("spdk.sock");
    let d = Daemon::start(&socket, None);
    let call = |m: &str, p: Value| rpc(&socket, m, p);
    malloc(&socket, "Core0", 16384, 512);
    malloc(&socket, "Cache0", 131072, 512);
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
