//! Mirrored write-back between two daemons over real NVMe/TCP: the
//! owner forwards every write to the mirror's replication subsystem
//! (DH-HMAC-CHAP, the clean marks as vendor command 0x80) and answers the
//! host once both have it; after `kill -9` of the owner, the mirror made
//! owner brings the shared core file to every acknowledged write. A mirror
//! lost under load holds the owner's answers until it is dropped. (The
//! same in process, with every path checked: cache/tests/mirror.rs.)

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::cached::{malloc, pattern};
use common::{aio, export, free_port, host_params, rpc, tcp_listen_address, Daemon};
use nvmf::keys::DhchapSecret;
use nvmf_host::host::HostController;
use serde_json::{json, Value};
use testkit::TempDir;

const VOLUME_NQN: &str = "nqn.2016-06.io.rackcache:mirrored";
const REPLICA_NQN: &str = "nqn.2016-06.io.rackcache:mirrored:replica";
const OWNER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000a1";
const APP_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:8a1c0e2e-0000-4000-8000-0000000000a2";
const CORE_SIZE: u64 = 64 << 20;
const BS: usize = 4096;

fn volume_params(role: &str) -> Value {
    json!({"name": "Cache0", "core_bdev_name": "core", "cache_bdev_name": "nvme",
        "cache_size_mib": 16, "write_mode": "wb", "role": role,
        "cleaning": {"policy": "aggressive", "dirty_ratio": 0.02, "batch_blocks": 8, "wake_up_ms": 5}})
}

/// A daemon with the shared core file and a RAM cache device of its own.
fn server(dir: &Path, name: &str, core: &Path) -> (Daemon, std::path::PathBuf) {
    let socket = dir.join(format!("{name}.sock"));
    let d = Daemon::start(&socket, None);
    aio(&socket, "core", core, CORE_SIZE);
    malloc(&socket, "nvme", 64 << 11, 512);
    (d, socket)
}

/// The mirror: its volume in role mirror, exported to the owner's host NQN
/// only, with a DH-HMAC-CHAP key, on a replication subsystem.
fn serve_replica(socket: &Path, key_path: &str, port: u16) {
    rpc(socket, "bdev_adacache_create", volume_params("mirror"));
    rpc(
        socket,
        "keyring_file_add_key",
        json!({"name": "owner", "path": key_path}),
    );
    rpc(socket, "nvmf_create_transport", json!({"trtype": "TCP"}));
    rpc(socket, "nvmf_create_subsystem", json!({"nqn": REPLICA_NQN}));
    rpc(
        socket,
        "nvmf_subsystem_add_ns",
        json!({"nqn": REPLICA_NQN, "namespace": {"bdev_name": "Cache0", "nsid": 1}}),
    );
    rpc(
        socket,
        "nvmf_subsystem_add_host",
        json!({"nqn": REPLICA_NQN, "host": OWNER_HOST, "dhchap_key": "owner"}),
    );
    rpc(
        socket,
        "nvmf_subsystem_add_listener",
        json!({"nqn": REPLICA_NQN, "listen_address": tcp_listen_address(port)}),
    );
}

fn attach(socket: &Path, port: u16) {
    rpc(
        socket,
        "bdev_adacache_set_mirror",
        json!({"name": "Cache0", "mirror": {"traddr": "127.0.0.1", "trsvcid": port.to_string(),
            "subnqn": REPLICA_NQN, "hostnqn": OWNER_HOST, "dhchap_key": "owner"}}),
    );
}

fn stats(socket: &Path) -> Value {
    rpc(socket, "bdev_adacache_get_stats", json!({"name": "Cache0"}))
}

/// Writes of 4-64 KiB over the first 32 MiB, many overwriting earlier
/// ones; returns what the volume must hold (`model`).
fn write_load(host: &mut HostController, model: &mut [u8], seed: u64, n: usize, dir: &Path) {
    let mut x = seed;
    for i in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let blocks = 1 + (x >> 60) as usize;
        let lba = (x >> 20) % (8192 - blocks as u64);
        let data = pattern((i as u8) ^ (seed as u8), blocks * BS);
        if let Err(e) = host.io[0].write_blocks(1, lba, BS, &data, 8192) {
            // The daemons' logs say why.
            for f in ["owner.log", "mirror.log"] {
                eprintln!(
                    "== {f}\n{}",
                    std::fs::read_to_string(dir.join(f)).unwrap_or_default()
                );
            }
            panic!("write {i} was not acknowledged: {e}");
        }
        let at = lba as usize * BS;
        model[at..at + data.len()].copy_from_slice(&data);
    }
}

fn key_file(dir: &Path) -> String {
    let s = DhchapSecret::from_key(Some(nvmf::keys::Hash::Sha256), &[0x5a; 32]).unwrap();
    let path = dir.join("owner.key");
    std::fs::write(&path, s.encode().as_bytes()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

/// Two daemons on one core file: the mirror serving its replication
/// subsystem, the owner with its volume and the key, not attached yet.
struct Pair {
    mirror: Daemon,
    msock: std::path::PathBuf,
    owner: Daemon,
    osock: std::path::PathBuf,
    replica_port: u16,
}

fn pair(dir: &Path, core: &Path) -> Pair {
    let key = key_file(dir);
    let (mirror, msock) = server(dir, "mirror", core);
    let replica_port = free_port();
    serve_replica(&msock, &key, replica_port);
    let (owner, osock) = server(dir, "owner", core);
    rpc(&osock, "bdev_adacache_create", volume_params("owner"));
    rpc(
        &osock,
        "keyring_file_add_key",
        json!({"name": "owner", "path": key}),
    );
    Pair {
        mirror,
        msock,
        owner,
        osock,
        replica_port,
    }
}

/// Attaches the owner to its mirror, exports its volume and connects the
/// application's host to it.
fn serve_host(osock: &Path, replica_port: u16) -> HostController {
    attach(osock, replica_port);
    let volume_port = free_port();
    export(osock, VOLUME_NQN, "Cache0", volume_port);
    HostController::connect(&host_params(volume_port, VOLUME_NQN, APP_HOST, 0xa2), 1)
        .expect("the host connects to the owner")
}

#[test]
fn a_promoted_mirror_brings_core_to_every_write_the_killed_owner_acknowledged() {
    let work = TempDir::new("rackcache-mirror");
    let core = work.path().join("core.img");
    let p = pair(work.path(), &core);
    let (owner, osock, msock) = (p.owner, p.osock, p.msock);
    let mut host = serve_host(&osock, p.replica_port);
    let mut model = vec![0u8; CORE_SIZE as usize];
    write_load(&mut host, &mut model, 7, 1500, work.path());
    let st = stats(&osock);
    let r = &st["replica"];
    assert_eq!(r["state"], "in-sync", "{st}");
    assert_eq!(r["writes"], 1500);
    assert!(
        r["marks"].as_u64().unwrap() > 0,
        "the owner cleaned and told the mirror: {st}"
    );
    let owner_dirty = st["dirty_bytes"].as_u64().unwrap();
    assert!(
        owner_dirty > 0,
        "acknowledged writes are in the caches only: {st}"
    );
    let mst = stats(&msock);
    assert_eq!(mst["role"], "mirror");
    assert!(mst["marked_clean_bytes"].as_u64().unwrap() > 0, "{mst}");
    assert_eq!(
        mst["flushed_bytes"], 0,
        "a mirror writes nothing back: {mst}"
    );
    // The owner's cleaning goes on (and marks the mirror clean after it):
    // the owner read after the mirror has no more dirty data than then.
    let owner_after = stats(&osock)["dirty_bytes"].as_u64().unwrap();
    assert!(
        mst["dirty_bytes"].as_u64().unwrap() >= owner_after,
        "the mirror's dirty set covers the owner's: {mst} vs {owner_after} dirty bytes on the owner"
    );

    // The owner dies with its cache; core alone is stale.
    drop(host);
    owner.kill9();
    let on_core = std::fs::read(&core).unwrap();
    assert!(on_core != model, "core lacks writes only the caches had");
    rpc(
        &msock,
        "bdev_adacache_set_role",
        json!({"name": "Cache0", "role": "owner"}),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = rpc(
            &msock,
            "bdev_adacache_flush_status",
            json!({"name": "Cache0"}),
        );
        if s["dirty_bytes"] == 0 && s["in_progress"] == false {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the promoted mirror's write-back ends: {s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let on_core = std::fs::read(&core).unwrap();
    let bad = on_core
        .chunks(BS)
        .zip(model.chunks(BS))
        .position(|(a, b)| a != b);
    assert_eq!(
        bad, None,
        "core after the promoted mirror wrote back (first differing block)"
    );
}

#[test]
fn a_mirror_lost_under_load_holds_answers_until_it_is_dropped() {
    let work = TempDir::new("rackcache-mirror-lost");
    let core = work.path().join("core.img");
    let p = pair(work.path(), &core);
    let (mirror, osock, replica_port) = (p.mirror, p.osock.clone(), p.replica_port);
    // A wrong address is refused and changes nothing.
    let e = common::unix_rpc(
        &osock,
        "bdev_adacache_set_mirror",
        json!({"name": "Cache0", "mirror": {"traddr": "127.0.0.1", "trsvcid": free_port().to_string(),
            "subnqn": REPLICA_NQN, "hostnqn": OWNER_HOST, "dhchap_key": "owner"}}),
    )
    .expect_err("nothing listens there");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("connecting to mirror"),
        "{e}"
    );
    assert!(stats(&osock).get("replica").is_none());
    let mut host = serve_host(&osock, replica_port);
    let mut model = vec![0u8; CORE_SIZE as usize];
    write_load(&mut host, &mut model, 9, 200, work.path());

    mirror.kill9();
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        let data = pattern(0xee, BS);
        let r = host.io[0].write_blocks(1, 4, BS, &data, 8192);
        tx.send(()).unwrap();
        (r.map(|_| ()), host)
    });
    // Not acknowledged: it is on one server only.
    assert!(
        rx.recv_timeout(Duration::from_secs(4)).is_err(),
        "a write the lost mirror did not get is held"
    );
    let st = stats(&osock);
    assert_eq!(st["replica"]["state"], "broken", "{st}");
    rpc(
        &osock,
        "bdev_adacache_set_mirror",
        json!({"name": "Cache0"}),
    );
    rx.recv_timeout(Duration::from_secs(10))
        .expect("answered once the mirror is dropped");
    let (r, mut host) = writer.join().unwrap();
    r.expect("and successfully");
    let mut back = vec![0u8; BS];
    host.io[0].read_blocks(1, 4, BS, &mut back).unwrap();
    assert_eq!(back, pattern(0xee, BS));
    assert!(stats(&osock).get("replica").is_none());
}

#[test]
fn an_owner_stopped_while_its_lost_mirror_holds_answers_exits_without_giving_them() {
    let work = TempDir::new("rackcache-mirror-stop");
    let core = work.path().join("core.img");
    let p = pair(work.path(), &core);
    let (mirror, owner, osock, replica_port) = (p.mirror, p.owner, p.osock.clone(), p.replica_port);
    let mut host = serve_host(&osock, replica_port);
    let mut model = vec![0u8; CORE_SIZE as usize];
    write_load(&mut host, &mut model, 11, 50, work.path());
    mirror.kill9();
    let (tx, rx) = std::sync::mpsc::channel();
    let _writer = std::thread::spawn(move || {
        let data = pattern(0xdd, BS);
        let r = host.io[0].write_blocks(1, 4, BS, &data, 8192);
        let _ = tx.send(r.is_ok());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(4)).is_err(),
        "a write the lost mirror did not get is held"
    );
    // SIGTERM: the shutdown does not wait for a mirror nobody sets again
    // (the target's shutdown flush reaches the lost mirror too), and the
    // held write is never acknowledged.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(owner.stop());
    });
    let status = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the owner exits within the drain timeout and a little more");
    assert!(status.success(), "{status}");
    assert_ne!(
        rx.recv_timeout(Duration::from_secs(10)),
        Ok(true),
        "the held write was not acknowledged"
    );
}
