//! A cached bdev on an aio cache device in write-back across
//! `--config-persist` restarts (SIGTERM and `kill -9`): the restart
//! attaches to the cache on the device with `load` and reads back what was
//! written.

mod common;

use common::cached::*;
use common::{aio, free_port, rpc, Daemon};
use serde_json::{json, Value};
use testkit::TempDir;

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
