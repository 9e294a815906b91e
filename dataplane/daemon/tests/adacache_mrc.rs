//! A cached bdev's miss-ratio curve (`bdev_adacache_get_mrc`, through the
//! rackcache plugin of SPDK's command line too) and the eviction policy's
//! online choice, on /metrics.

mod common;

use common::cached::*;
use common::{free_port, rpc, Daemon};
use serde_json::{json, Value};
use testkit::TempDir;

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
    malloc(&socket, "Core0", 65536, SECTOR);
    malloc(&socket, "Cache0", 131072, SECTOR);
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
