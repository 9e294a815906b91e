//! The targets under test as child processes: ours (the release
//! `rackcache-dataplane`, pinned with `taskset`) and, when
//! `RACKCACHE_BENCH_SPDK` names a local SPDK build, SPDK's `nvmf_tgt`
//! (pinned with its own core mask). Both speak the same JSON-RPC, so one
//! type drives them; each is stopped by PID on drop.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use crate::{sys, TARGET_CPU};

/// Newest modification time of the files under `dir`.
fn newest_mtime(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let t = if e.file_type().ok()?.is_dir() {
            newest_mtime(&e.path())
        } else {
            e.metadata().ok()?.modified().ok()
        };
        newest = newest.max(t);
    }
    newest
}

/// The daemon binary: $RACKCACHE_DATAPLANE_BIN, or the release build in
/// this bench's target directory. Warns when it is older than the sources
/// it is built from.
pub(crate) fn daemon_binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("RACKCACHE_DATAPLANE_BIN") {
        return Ok(p.into());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // target/release/deps/nvmf_tcp-HASH -> target/release/rackcache-dataplane
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("rackcache-dataplane"))
        .filter(|p| p.exists())
        .ok_or_else(|| {
            "no release rackcache-dataplane beside this bench: run `cargo build --release --workspace --bins` first (or set RACKCACHE_DATAPLANE_BIN)".to_string()
        })?;
    let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
    let dataplane = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sources = ["daemon", "nvmf-tgt", "nvmf", "bdev", "metrics", "httpd"]
        .iter()
        .filter_map(|c| newest_mtime(&dataplane.join(c).join("src")))
        .max();
    if let (Some(b), Some(s)) = (built, sources) {
        if s > b {
            eprintln!(
                "warning: {} is older than its sources: rebuild with `cargo build --release --workspace --bins`",
                bin.display()
            );
        }
    }
    Ok(bin)
}

/// SPDK's `nvmf_tgt` in `$RACKCACHE_BENCH_SPDK` (the binary, or a build
/// directory holding `build/bin/nvmf_tgt` or `bin/nvmf_tgt`), if set.
pub(crate) fn spdk_binary() -> Result<Option<PathBuf>, String> {
    spdk_program("RACKCACHE_BENCH_SPDK", "nvmf_tgt")
}

/// The SPDK program `name` that `$var` names: the binary itself, or an
/// SPDK tree (or its `build`) holding `build/bin/NAME` or `bin/NAME`.
pub(crate) fn spdk_program(var: &str, name: &str) -> Result<Option<PathBuf>, String> {
    let Some(p) = std::env::var_os(var).map(PathBuf::from) else {
        return Ok(None);
    };
    if p.is_file() {
        return Ok(Some(p));
    }
    [format!("build/bin/{name}"), format!("bin/{name}")]
        .iter()
        .map(|b| p.join(b))
        .find(|b| b.is_file())
        .map(Some)
        .ok_or_else(|| format!("{var}={}: no {name} there", p.display()))
}

/// A target under test, stopped by PID (SIGTERM, then SIGKILL) on drop.
pub(crate) struct Daemon {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Daemon {
    /// The target's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ours, on [`TARGET_CPU`], with `args` added (e.g. `--busy-poll on`).
    pub(crate) fn start(bin: &Path, dir: &Path, args: &[&str]) -> Result<Self, String> {
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", &TARGET_CPU.to_string()])
            .arg(bin)
            .args(args)
            .env("RACKCACHE_LOG", "warn");
        // taskset execs the daemon: the PID is the daemon's.
        Self::spawn(cmd, "--rpc-socket", dir, "dataplane")
    }

    /// Ours on the CPUs the calling thread may use (all of them, or those
    /// Ceph's daemons leave: see `testkit::ceph_cpus`), not pinned to one,
    /// in interrupt mode, its runtime on one thread (as when pinned) and
    /// librbd's threads free to run on any of them, as `rbd bench`'s do.
    /// `name` keeps the socket and log of each such daemon apart.
    pub(crate) fn start_unpinned(bin: &Path, dir: &Path, name: &str) -> Result<Self, String> {
        let mut cmd = Command::new(bin);
        cmd.args(["--busy-poll", "off"])
            .env("RACKCACHE_RUNTIME", "current-thread")
            .env("RACKCACHE_LOG", "warn");
        Self::spawn(cmd, "--rpc-socket", dir, name)
    }

    /// SPDK's `nvmf_tgt` on [`TARGET_CPU`] (its reactor polls, as SPDK
    /// always does), with `RACKCACHE_BENCH_SPDK_ARGS` added (e.g.
    /// `--no-huge -s 1024` where no huge pages are reserved).
    pub(crate) fn start_spdk(bin: &Path, dir: &Path) -> Result<Self, String> {
        // taskset keeps DPDK's service threads on the reactor's CPU too,
        // as ours are.
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", &TARGET_CPU.to_string()])
            .arg(bin)
            .args(["-m", &format!("{:#x}", 1u64 << TARGET_CPU)]);
        if let Ok(extra) = std::env::var("RACKCACHE_BENCH_SPDK_ARGS") {
            cmd.args(extra.split_whitespace());
        }
        Self::spawn(cmd, "-r", dir, "spdk")
    }

    fn spawn(mut cmd: Command, socket_flag: &str, dir: &Path, name: &str) -> Result<Self, String> {
        let socket = dir.join(format!("{name}.sock"));
        let log = dir.join(format!("{name}.log"));
        let _ = std::fs::remove_file(&socket);
        let stderr = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let stdout = stderr.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .arg(socket_flag)
            .arg(&socket)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("start {name} target: {e}"))?;
        let mut d = Daemon { child, socket, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !d.socket.exists() {
            if let Ok(Some(st)) = d.child.try_wait() {
                return Err(format!("the daemon exited ({st}):\n{}", d.log_tail()));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the daemon did not open its socket:\n{}",
                    d.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(d)
    }

    pub(crate) fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// One JSON-RPC call over the Unix socket.
    pub(crate) fn rpc(&self, method: &str, params: Value) -> Result<Value, String> {
        let mut s = std::os::unix::net::UnixStream::connect(&self.socket)
            .map_err(|e| format!("{method}: connect: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        let req = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        s.write_all(req.to_string().as_bytes())
            .map_err(|e| format!("{method}: {e}"))?;
        let mut v: Value = serde_json::Deserializer::from_reader(&mut s)
            .into_iter()
            .next()
            .ok_or_else(|| format!("{method}: no response"))?
            .map_err(|e| format!("{method}: {e}"))?;
        match v.get("error") {
            Some(e) => Err(format!("{method}: {e}")),
            None => Ok(v["result"].take()),
        }
    }

    /// Exports `bdev` as the only namespace of `nqn` on a fresh port.
    pub(crate) fn export(&self, nqn: &str, bdev: &str) -> Result<String, String> {
        let port = free_port();
        self.rpc(
            "nvmf_create_subsystem",
            json!({"nqn": nqn, "serial_number": "RCBENCH", "allow_any_host": true}),
        )?;
        self.rpc(
            "nvmf_subsystem_add_ns",
            json!({"nqn": nqn, "namespace": {"bdev_name": bdev}}),
        )?;
        self.rpc(
            "nvmf_subsystem_add_listener",
            json!({"nqn": nqn, "listen_address": {
                "trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": port.to_string()
            }}),
        )?;
        Ok(format!("127.0.0.1:{port}"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: signalling our own child by PID.
        unsafe { sys::kill(self.child.id() as i32, sys::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
