//! The largest core a cached bdev accepts: `engine::config::max_volume_size`
//! of its smallest block size, 16 TiB - 8 KiB with 4 KiB blocks (the
//! engine's block keys are `u32` block numbers). One block more is refused
//! before the cache device is formatted; a core at the limit caches its
//! last block and writes it back to the right place. The cores are sparse
//! files, which take no space.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{aio, export, free_port, host_params, rpc, unix_rpc, Daemon};
use nvmf_host::host::HostController;
use serde_json::json;
use testkit::TempDir;

const NQN: &str = "nqn.2016-06.io.rackcache:limit";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000f3";
const BS: u64 = 4096;
/// `engine::config::max_volume_size(4096)`.
const LIMIT: u64 = (16 << 40) - 2 * BS;

/// A sparse file of `size` bytes, or `None` (with a skip message) when the
/// filesystem holds no file that large (ext4's limit is 16 TiB - 4 KiB).
fn sparse_file(path: &Path, size: u64) -> Option<()> {
    let f = std::fs::File::create(path).unwrap();
    match f.set_len(size) {
        Ok(()) => Some(()),
        Err(e) => {
            testkit::missing(&format!(
                "a {size}-byte sparse file in {}: {e}",
                path.display()
            ));
            None
        }
    }
}

fn create(socket: &Path, name: &str, core: &str) -> Result<serde_json::Value, serde_json::Value> {
    unix_rpc(
        socket,
        "bdev_adacache_create",
        json!({"name": name, "core_bdev_name": core, "cache_bdev_name": "Cache0",
               "cache_size_mib": 16, "write_mode": "wb", "mode": "fixed",
               "block_sizes_kib": [4], "cleaning": {"policy": "nop"}}),
    )
}

#[test]
fn a_core_beyond_the_engines_limit_is_refused_and_one_at_it_works() {
    let work = TempDir::new("rackcache-volume-limit");
    let socket = work.path().join("spdk.sock");
    let (over, at) = (work.path().join("over.img"), work.path().join("at.img"));
    if sparse_file(&over, LIMIT + BS).is_none() || sparse_file(&at, LIMIT).is_none() {
        return;
    }
    let d = Daemon::start(&socket, None);
    aio(&socket, "Over", &over, 0);
    aio(&socket, "At", &at, 0);
    aio(&socket, "Cache0", &work.path().join("cache.img"), 64 << 20);

    let e = create(&socket, "C0", "Over").expect_err("a core over the limit");
    let msg = e.to_string();
    assert!(msg.contains("Invalid argument: cached bdev C0"), "{msg}");
    assert!(msg.contains(&format!("at most {LIMIT} bytes")), "{msg}");
    // Refused before the blank cache device was formatted.
    assert_eq!(
        rpc(&socket, "bdev_adacache_get_devices", json!({})),
        json!([])
    );

    create(&socket, "C1", "At").expect("a core at the limit");
    let port = free_port();
    export(&socket, NQN, "C1", port);
    let mut c =
        HostController::connect(&host_params(port, NQN, HOST, 0xf3), 1).expect("the host connects");
    let last = LIMIT / BS - 1;
    let data: Vec<u8> = (0..BS as usize).map(|i| (i * 7 + 3) as u8).collect();
    c.io[0]
        .write_blocks(1, last, BS as usize, &data, 8192)
        .expect("write the last block");
    let mut back = vec![0u8; BS as usize];
    c.io[0]
        .read_blocks(1, last, BS as usize, &mut back)
        .expect("read the last block");
    assert_eq!(back, data);
    drop(c);
    let st = rpc(&socket, "bdev_adacache_get_stats", json!({"name": "C1"}));
    assert_eq!(st["requests"]["rd_hits"], json!(1), "{st}");
    assert_eq!(st["dirty_bytes"], json!(BS), "{st}");

    // Written back to the core's last block.
    rpc(&socket, "bdev_adacache_flush", json!({"name": "C1"}));
    let deadline = Instant::now() + Duration::from_secs(60);
    while rpc(&socket, "bdev_adacache_flush_status", json!({"name": "C1"}))["dirty_bytes"] != 0 {
        assert!(Instant::now() < deadline, "flush did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut on_core = vec![0u8; BS as usize];
    std::fs::File::open(&at)
        .unwrap()
        .read_exact_at(&mut on_core, last * BS)
        .unwrap();
    assert_eq!(on_core, data);
    assert!(d.stop().success());
}
