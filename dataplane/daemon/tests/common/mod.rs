//! Shared by the daemon's integration tests. Each test binary uses a
//! subset, hence the allow.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The daemon process, stopped with SIGTERM (then SIGKILL) on drop.
pub struct Daemon {
    child: Child,
}

impl Daemon {
    /// Starts the daemon on `socket` (optionally with --config and extra
    /// arguments) and waits for the socket to appear.
    pub fn start(socket: &Path, config: Option<&Path>) -> Self {
        Self::start_with(socket, config, &[])
    }

    /// Like `start`, with extra command-line arguments.
    pub fn start_with(socket: &Path, config: Option<&Path>, extra: &[&str]) -> Self {
        let log = std::fs::File::create(socket.with_extension("log")).expect("daemon log file");
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
        let d = Daemon { child };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "the daemon did not open {}",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    /// SIGTERM, then waits for the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: signalling our own child by PID.
        unsafe { libc_kill(self.child.id() as i32, 15) };
        let status = self.child.wait().expect("wait for the daemon");
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
