//! Shared by the daemon's integration tests. Each test binary uses a
//! subset, hence the allow.
#![allow(dead_code)]

pub mod cached;
pub mod tls;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The daemon process, stopped with SIGTERM (then SIGKILL) on drop.
pub struct Daemon {
    child: Child,
    /// Its stderr, shown when it exits with a failure.
    log: std::path::PathBuf,
}

impl Daemon {
    /// Starts the daemon on `socket` (optionally with --config and extra
    /// arguments) and waits for the socket to appear.
    pub fn start(socket: &Path, config: Option<&Path>) -> Self {
        Self::start_with(socket, config, &[])
    }

    /// Like `start`, with extra command-line arguments.
    pub fn start_with(socket: &Path, config: Option<&Path>, extra: &[&str]) -> Self {
        let log_path = socket.with_extension("log");
        let log = std::fs::File::create(&log_path).expect("daemon log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rackcache-dataplane"));
        cmd.arg("--rpc-socket")
            .arg(socket)
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        cmd.args(extra);
        let child = cmd.spawn().expect("start rackcache-dataplane");
        let d = Daemon {
            child,
            log: log_path,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        // The file appears at bind(), a moment before listen(): wait until
        // a connection is accepted.
        while std::os::unix::net::UnixStream::connect(socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "the daemon did not open {}",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    /// SIGKILL (`kill -9`: no shutdown code runs), then waits.
    pub fn kill9(mut self) {
        // SAFETY: signalling our own child by PID.
        unsafe { libc_kill(self.child.id() as i32, 9) };
        let _ = self.child.wait();
        std::mem::forget(self);
    }

    /// SIGTERM, then waits for the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: signalling our own child by PID.
        unsafe { libc_kill(self.child.id() as i32, 15) };
        let status = self.child.wait().expect("wait for the daemon");
        if !status.success() {
            // The test's assertion says that it failed; the log says why.
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "daemon exited with {status}; the end of its log:\n{}",
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
        let log = std::mem::take(&mut self.log);
        drop(log);
        std::mem::forget(self);
        status
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// A free TCP port on 127.0.0.1 (free when asked; tests bind it soon after).
/// A host's connect parameters for `subnqn` on 127.0.0.1:`port`; `id`
/// fills the host identifier.
pub fn host_params(
    port: u16,
    subnqn: &str,
    hostnqn: &str,
    id: u8,
) -> nvmf_host::host::ConnectParams {
    nvmf_host::host::ConnectParams {
        addr: format!("127.0.0.1:{port}"),
        subnqn: subnqn.into(),
        hostnqn: hostnqn.into(),
        host_id: [id; 16],
        queue_size: 32,
        kato_ms: 0,
    }
}

/// Creates an aio bdev `name` (4 KiB blocks) on `file`, made `size` bytes
/// long when it does not exist yet.
pub fn aio(socket: &Path, name: &str, file: &Path, size: u64) {
    if !file.exists() {
        std::fs::File::create(file).unwrap().set_len(size).unwrap();
    }
    rpc(
        socket,
        "bdev_aio_create",
        serde_json::json!({"name": name, "filename": file, "block_size": 4096}),
    );
}

/// Exports `bdev` as namespace 1 of subsystem `nqn` (any host allowed) on
/// a TCP listener at 127.0.0.1:`port`, creating the transport if needed.
pub fn export(socket: &Path, nqn: &str, bdev: &str, port: u16) {
    use serde_json::json;
    let call = |m: &str, p: Value| rpc(socket, m, p);
    if call("nvmf_get_transports", json!({})) == json!([]) {
        call("nvmf_create_transport", json!({"trtype": "TCP"}));
    }
    call(
        "nvmf_create_subsystem",
        json!({"nqn": nqn, "allow_any_host": true}),
    );
    call(
        "nvmf_subsystem_add_ns",
        json!({"nqn": nqn, "namespace": {"bdev_name": bdev, "nsid": 1}}),
    );
    call(
        "nvmf_subsystem_add_listener",
        json!({"nqn": nqn, "listen_address": tcp_listen_address(port)}),
    );
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One JSON-RPC call over the daemon's Unix socket: the `result`, or the
/// `error` object.
pub fn unix_rpc(socket: &Path, method: &str, params: Value) -> Result<Value, Value> {
    use std::io::Write;
    let mut s = std::os::unix::net::UnixStream::connect(socket).expect("connect to the daemon");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let req = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    s.write_all(req.to_string().as_bytes()).unwrap();
    let mut resp = serde_json::Deserializer::from_reader(&mut s).into_iter::<Value>();
    let mut v = resp.next().expect("a response").expect("a JSON response");
    match v.get("error") {
        Some(e) => Err(e.clone()),
        None => Ok(v["result"].take()),
    }
}

/// [`unix_rpc`] for calls that must succeed: the `result`; an error fails
/// the test.
pub fn rpc(socket: &Path, method: &str, params: Value) -> Value {
    unix_rpc(socket, method, params).unwrap_or_else(|e| panic!("{method} failed: {e}"))
}

/// The `listen_address` of a TCP listener on 127.0.0.1:`port`, as the
/// daemon takes and reports it.
/// Subsystem `nqn` as `nvmf_get_subsystems` shows it; None when absent.
pub fn subsystem(socket: &Path, nqn: &str) -> Option<Value> {
    rpc(socket, "nvmf_get_subsystems", serde_json::json!({}))
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["nqn"] == nqn)
        .cloned()
}

pub fn tcp_listen_address(port: impl std::fmt::Display) -> Value {
    serde_json::json!({
        "trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": port.to_string()
    })
}

/// Runs the daemon (socket `s.sock` in `dir`) with `args`, which must make
/// it refuse to start; returns its standard error.
pub fn start_fails(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rackcache-dataplane"))
        .arg("--rpc-socket")
        .arg(dir.join("s.sock"))
        .args(args)
        .output()
        .expect("run rackcache-dataplane");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "started with {args:?}:\n{err}");
    err
}
