//! `bdev_rbd_resize` on real Ceph: the image grows (Ceph's own `rbd info`
//! says so), the cached bdev on it follows, and a connected host gets a
//! Namespace Attribute Changed notice, reads the new size from Identify and
//! writes beyond the old end. Shrinking, non-rbd bdevs and growing past
//! what a cached bdev on the image indexes are refused and change
//! nothing. An image grown while the dataplane is down (or a resize cut
//! short by a crash) is picked up when the cached bdev loads, with its
//! dirty data, and the data reaches Ceph's copy after a flush.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{aio, export, free_port, host_params, rpc, unix_rpc, Daemon};
use nvmf_host::host::{Event, HostController};
use serde_json::{json, Value};
use testkit::{Ceph, TempDir};

const NQN: &str = "nqn.2016-06.io.rackcache:grow";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000e1";
const BS: usize = 4096;
const MIB: u64 = 1 << 20;

fn connect(port: u16) -> HostController {
    HostController::connect(&host_params(port, NQN, HOST, 0xe1), 1).expect("the host connects")
}

/// Namespace 1's size (NSZE) as Identify Namespace reports it.
fn nsze(c: &mut HostController) -> u64 {
    let id = c.admin.identify(0x00, 1).expect("identify namespace");
    u64::from_le_bytes(id[0..8].try_into().unwrap())
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i / 512) as u8 ^ seed.wrapping_mul(37) ^ (i as u8).rotate_left(5))
        .collect()
}

fn write(c: &mut HostController, lba: u64, data: &[u8]) {
    c.io[0].write_blocks(1, lba, BS, data, 8192).expect("write");
}

fn read(c: &mut HostController, lba: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    c.io[0].read_blocks(1, lba, BS, &mut b).expect("read");
    b
}

fn num_blocks(socket: &Path, name: &str) -> u64 {
    rpc(socket, "bdev_get_bdevs", json!({"name": name}))[0]["num_blocks"]
        .as_u64()
        .unwrap()
}

fn image_size(ceph: &Ceph) -> u64 {
    let info: Value =
        serde_json::from_str(&ceph.admin("rbd", &["info", "--format", "json", "rbd/grow"]))
            .unwrap();
    info["size"].as_u64().unwrap()
}

fn setup(socket: &Path, ceph: &Ceph, cache_img: &Path, port: u16) {
    let call = |m: &str, p: Value| rpc(socket, m, p);
    call(
        "bdev_rbd_register_cluster",
        json!({"name": "ceph0", "user_id": ceph.var("RACKCACHE_CEPH_USER"),
               "config_param": {"mon_host": ceph.var("RACKCACHE_CEPH_MON_HOST"),
                                "key": ceph.var("RACKCACHE_CEPH_KEY")}}),
    );
    call(
        "bdev_rbd_create",
        json!({"name": "Rbd0", "cluster_name": "ceph0", "pool_name": "rbd",
               "rbd_name": "grow", "block_size": 4096}),
    );
    aio(socket, "Cache0", cache_img, 32 * MIB);
    call(
        "bdev_adacache_create",
        json!({"name": "C0", "core_bdev_name": "Rbd0", "cache_bdev_name": "Cache0",
               "cache_size_mib": 8, "write_mode": "wb", "mode": "fixed",
               "block_sizes_kib": [32], "cleaning": {"policy": "nop"}}),
    );
    export(socket, NQN, "C0", port);
}

#[test]
fn rbd_resize_grows_the_image_the_cached_bdev_and_the_namespace() {
    let ceph = Ceph::start();
    ceph.admin("rbd", &["create", "--size", "16M", "rbd/grow"]);
    let work = TempDir::new("rackcache-rbd-resize");
    let socket = work.path().join("spdk.sock");
    let file = work.path().join("config.json");
    let persist = ["--config-persist", file.to_str().unwrap()];
    let d = Daemon::start_with(&socket, None, &persist);
    let port = free_port();
    setup(&socket, &ceph, &work.path().join("cache.img"), port);

    let mut c = connect(port);
    assert_eq!(nsze(&mut c), 16 * MIB / BS as u64);
    let last = pattern(1, BS);
    write(&mut c, 16 * MIB / BS as u64 - 1, &last);

    // Refusals change nothing.
    for (params, why) in [
        (json!({"name": "Rbd0", "new_size": 8}), "only grow"),
        (json!({"name": "Cache0", "new_size": 64}), "not an rbd bdev"),
        (json!({"name": "Nope", "new_size": 64}), "no bdev named"),
        (json!({"name": "Rbd0", "size": 64}), "unknown field"),
        // 128 TiB: more than C0's engine indexes with 32 KiB blocks.
        (
            json!({"name": "Rbd0", "new_size": 128u64 << 20}),
            "cached bdev C0 over it: a cache with 32 KiB blocks holds a core of at most 140737488289792 bytes",
        ),
    ] {
        let e = unix_rpc(&socket, "bdev_rbd_resize", params.clone())
            .expect_err(&format!("{params} was accepted"));
        assert!(e.to_string().contains(why), "{params}: {e}");
    }
    assert_eq!(image_size(&ceph), 16 * MIB);
    assert_eq!(num_blocks(&socket, "C0"), 16 * MIB / BS as u64);

    c.admin.arm_namespace_notices(901).unwrap();
    assert_eq!(
        rpc(
            &socket,
            "bdev_rbd_resize",
            json!({"name": "Rbd0", "new_size": 32})
        ),
        json!(true)
    );
    assert_eq!(image_size(&ceph), 32 * MIB, "Ceph's own view of the image");
    assert_eq!(num_blocks(&socket, "Rbd0"), 32 * MIB / BS as u64);
    assert_eq!(num_blocks(&socket, "C0"), 32 * MIB / BS as u64);
    match c.admin.recv().unwrap() {
        Event::Completion(cqe) => {
            assert_eq!(cqe.cid, 901);
            assert_eq!(cqe.dw0, 0x0004_0002, "Namespace Attribute Changed");
        }
        other => panic!("{other:?}"),
    }
    let log = c.admin.get_log_page(0x04, 0, 4096).unwrap();
    assert_eq!(u32::from_le_bytes(log[0..4].try_into().unwrap()), 1);
    assert_eq!(nsze(&mut c), 32 * MIB / BS as u64);
    // Beyond the old end, on the live connection.
    let beyond = pattern(2, 64 << 10);
    write(&mut c, 16 * MIB / BS as u64, &beyond);
    assert_eq!(read(&mut c, 16 * MIB / BS as u64, beyond.len()), beyond);
    assert_eq!(read(&mut c, 16 * MIB / BS as u64 - 1, BS), last);
    // The same size again is a no-op.
    rpc(
        &socket,
        "bdev_rbd_resize",
        json!({"name": "Rbd0", "new_size": 32}),
    );
    drop(c);

    // kill -9, then the image grows while the dataplane is down: the
    // cached bdev loads (its dirty data with it) at the image's new size.
    d.kill9();
    std::fs::remove_file(&socket).unwrap();
    ceph.admin(
        "rbd",
        &["resize", "--no-progress", "--size", "48M", "rbd/grow"],
    );
    let d = Daemon::start_with(&socket, None, &persist);
    assert_eq!(num_blocks(&socket, "C0"), 48 * MIB / BS as u64);
    let st = rpc(&socket, "bdev_adacache_get_stats", json!({"name": "C0"}));
    assert!(
        st["dirty_bytes"].as_u64().unwrap() >= beyond.len() as u64,
        "{st}"
    );
    let mut c = connect(port);
    assert_eq!(nsze(&mut c), 48 * MIB / BS as u64);
    assert_eq!(read(&mut c, 16 * MIB / BS as u64, beyond.len()), beyond);
    let end = pattern(3, BS);
    write(&mut c, 48 * MIB / BS as u64 - 1, &end);
    drop(c);

    // Flushed, Ceph's copy holds every write.
    rpc(&socket, "bdev_adacache_flush", json!({"name": "C0"}));
    let deadline = Instant::now() + Duration::from_secs(60);
    while rpc(&socket, "bdev_adacache_flush_status", json!({"name": "C0"}))["dirty_bytes"] != 0 {
        assert!(Instant::now() < deadline, "flush did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    let export = work.path().join("export.img");
    ceph.admin(
        "rbd",
        &[
            "export",
            "--no-progress",
            "rbd/grow",
            export.to_str().unwrap(),
        ],
    );
    let img = std::fs::read(&export).unwrap();
    assert_eq!(img.len() as u64, 48 * MIB);
    let at = |lba: u64, len: usize| &img[lba as usize * BS..lba as usize * BS + len];
    assert_eq!(at(16 * MIB / BS as u64 - 1, BS), &last[..]);
    assert_eq!(at(16 * MIB / BS as u64, beyond.len()), &beyond[..]);
    assert_eq!(at(48 * MIB / BS as u64 - 1, BS), &end[..]);
    assert!(d.stop().success());
}
