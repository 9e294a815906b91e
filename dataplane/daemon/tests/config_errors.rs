//! A server whose persisted configuration has failing entries starts
//! degraded, not dead: with one volume's cache metadata damaged and another
//! bdev's backing file gone while the daemon was down, every other object
//! is served, each failed call is reported (`rackcache_get_config_errors`,
//! /metrics) and kept in the persisted file, a retry picks up what can now
//! succeed, and a dropped entry is forgotten. On today's main the daemon
//! exited on every start instead.

mod common;

use std::path::Path;

use cache::layout::pick::{self, Choice, Copy};
use cache::layout::{self, Geometry};
use common::cached::*;
use common::{aio, free_port, rpc, Daemon};
use serde_json::{json, Value};
use testkit::TempDir;

const BS: usize = 4096;

/// Flips one bit in the newest metadata copy of every unit of `volume`
/// that records blocks; returns their unit indices.
fn damage_newest_metadata(cache_img: &Path, volume: &str) -> Vec<u32> {
    let mut img = std::fs::read(cache_img).unwrap();
    let max = Geometry::for_device(img.len() as u64).units;
    let half = layout::SB_COPY_SIZE as usize;
    let copies = [0, 1].map(|c| layout::judge_superblock(&img[c * half..(c + 1) * half], max).1);
    let Choice::Use { value: sb, .. } = pick::choose(copies) else {
        panic!("no usable superblock");
    };
    let region = sb
        .volumes
        .iter()
        .find(|v| v.name == volume)
        .expect("volume on the device");
    let mut damaged = Vec::new();
    for (index, &unit) in region.units.iter().enumerate() {
        let mut newest: Option<(u64, usize)> = None;
        for c in 0..2 {
            let at = sb.geometry.meta_copy_offset(unit, c) as usize;
            let copy = &img[at..at + layout::META_COPY_SIZE as usize];
            if let Copy::Valid { seq, value } = layout::judge_unit_meta(copy, region, index as u32)
            {
                if !value.is_empty() && newest.is_none_or(|(s, _)| seq > s) {
                    newest = Some((seq, at));
                }
            }
        }
        if let Some((_, at)) = newest {
            img[at + layout::frame::SECTOR + 100] ^= 0x04;
            damaged.push(index as u32);
        }
    }
    std::fs::write(cache_img, &img).unwrap();
    damaged
}

fn errors(socket: &Path) -> Vec<Value> {
    rpc(socket, "rackcache_get_config_errors", json!({}))
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn failing_entries_are_kept_and_reported_while_the_rest_is_served() {
    let work = TempDir::new("rackcache-config-errors");
    let socket = work.path().join("spdk.sock");
    let file = work.path().join("config.json");
    let img = |n: &str| work.path().join(n);
    let metrics_port = free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let args = [
        "--config-persist",
        file.to_str().unwrap(),
        "--metrics-listen",
        &metrics,
    ];
    let d = Daemon::start_with(&socket, None, &args);
    let call = |m: &str, p: Value| rpc(&socket, m, p);
    for (name, size) in [
        ("Core0", 64 << 20),
        ("Core1", 64 << 20),
        ("Cache0", 64 << 20),
    ] {
        aio(&socket, name, &img(&format!("{name}.img")), size);
    }
    aio(&socket, "Spare", &img("Spare.img"), 16 << 20);
    for (name, core, mode) in [("C0", "Core0", "wb"), ("C1", "Core1", "wt")] {
        call(
            "bdev_adacache_create",
            json!({"name": name, "core_bdev_name": core, "cache_bdev_name": "Cache0",
                   "cache_size_mib": 8, "write_mode": mode, "cleaning": {"policy": "nop"}}),
        );
    }
    let (a, b) = (pattern(7, 64 << 10), pattern(8, 64 << 10));
    for (bdev, data) in [("C0", &a), ("C1", &b)] {
        let port = free_port();
        export(&socket, bdev, port);
        let mut c = connect(port);
        write(&mut c, 8, BS, data);
        drop(c);
        unexport(&socket);
    }
    d.kill9();
    std::fs::remove_file(&socket).unwrap();

    // While the server was away: C0's newest metadata is damaged, Spare's
    // backing file is gone.
    let damaged = damage_newest_metadata(&img("Cache0.img"), "C0");
    assert!(!damaged.is_empty());
    std::fs::remove_file(img("Spare.img")).unwrap();

    let d = Daemon::start_with(&socket, None, &args);
    let errs = errors(&socket);
    let methods: Vec<&str> = errs.iter().map(|e| e["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        ["bdev_aio_create", "bdev_adacache_create"],
        "{errs:?}"
    );
    assert!(
        errs[0]["params"].as_str().unwrap().contains("Spare"),
        "{errs:?}"
    );
    let c0 = &errs[1];
    assert_eq!(c0["code"], json!(-117), "EUCLEAN: {c0}");
    let msg = c0["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("unit(s) {damaged:?}")) && msg.contains("dirty bytes"),
        "{msg}"
    );
    // The rest is served: C1 reads back what was written.
    let port = free_port();
    export(&socket, "C1", port);
    let mut c = connect(port);
    assert_eq!(read(&mut c, 8, BS, b.len()), b);
    drop(c);
    unexport(&socket);
    // Reported on /metrics.
    wait_metric(metrics_port, "rackcache_config_errors", "", 2.0);
    let text = scrape(metrics_port);
    let checksum = metric(
        &text,
        "rackcache_cache_metadata_errors_total",
        "device=\"Cache0\",kind=\"checksum\"",
    );
    assert!(
        checksum.is_some_and(|n| n >= damaged.len() as f64),
        "{text}"
    );
    // Kept in the persisted file, after what they depend on.
    let saved: Vec<String> = config_calls(&file)
        .iter()
        .filter(|(_, p)| p["name"] == "C0" || p["name"] == "Spare")
        .map(|(m, p)| format!("{m} {}", p["name"]))
        .collect();
    assert_eq!(
        saved,
        ["bdev_aio_create \"Spare\"", "bdev_adacache_create \"C0\""]
    );

    // The file is back: a retry makes Spare; C0 still fails.
    std::fs::File::create(img("Spare.img"))
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let r = call("rackcache_retry_config_errors", json!({}));
    assert_eq!(r, json!({"retried": 2, "succeeded": 1, "failing": 1}));
    assert!(bdev_names(&socket).contains(&"Spare".to_string()));
    let errs = errors(&socket);
    assert_eq!(errs.len(), 1);
    // C0's cache is on the device, not loaded: a delete without force
    // refuses (its dirty data would be lost), with force it is discarded.
    let e = refused(&socket, "bdev_adacache_delete", json!({"name": "C0"}));
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("force=true to discard"),
        "{e}"
    );
    let on_device = |n: &str| {
        call("bdev_adacache_get_devices", json!({}))[0]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == n)
    };
    assert!(on_device("C0") && on_device("C1"));
    call("bdev_adacache_delete", json!({"name": "C0", "force": true}));
    assert!(!on_device("C0") && on_device("C1"));
    // Dropped with SPDK's command line and the plugin: forgotten, also by
    // the persisted file.
    let shown = plugin_cli(&socket, &["rackcache_get_config_errors"]).unwrap();
    assert!(
        shown.contains("EUCLEAN") || shown.contains("-117"),
        "{shown}"
    );
    let id = errs[0]["id"].to_string();
    plugin_cli(&socket, &["rackcache_drop_config_error", &id]).unwrap();
    assert!(errors(&socket).is_empty());
    assert!(!config_calls(&file).iter().any(|(_, p)| p["name"] == "C0"));
    assert!(d.stop().success());
}
