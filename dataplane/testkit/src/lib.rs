//! Helpers for the dataplane's integration tests. Like the Go test framework
//! (`test/framework`), they start real parts through the repository's own
//! `hack/` scripts and stop them when dropped, also when a test panics.

mod bench;

pub use bench::{
    bench_rounds, bench_seconds, ceph_cpus, client_cpus, median_by, process_cpu, rbd_bench_seconds,
    RbdBenchIo, RbdBenchRun,
};

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (this crate lives in `dataplane/testkit`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The cache outside the clone (same rule as hack/lib.sh).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RACKCACHE_CACHE") {
        return d.into();
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
        });
    base.join("rackcache")
}

/// The Python of the venv with SPDK's RPC client (hack/deps.sh python).
pub fn spdk_python() -> PathBuf {
    let p = repo_root().join("bin/venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run `hack/deps.sh python` (or `make deps`)",
        p.display()
    );
    p
}

/// A fresh temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/<prefix>-<pid>-<n>`.
    pub fn new(prefix: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        Self(p)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The first port the kernel hands to outgoing connections
/// (net.ipv4.ip_local_port_range; Linux's default 32768).
fn ephemeral_port_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

fn port_range_free(base: u16, n: u16) -> bool {
    (base..base + n).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok())
}

/// A one-node Ceph (hack/ceph.sh) for one test, stopped by PID on drop.
pub struct Ceph {
    dir: PathBuf,
    env: HashMap<String, String>,
}

impl Ceph {
    /// Starts a cluster on free loopback ports. Panics with hack/ceph.sh's
    /// output when it cannot.
    pub fn start() -> Self {
        Self::start_on(None)
    }

    /// As [`Ceph::start`], with the daemons on `cpus` (a taskset list)
    /// when given (see [`ceph_cpus`]).
    pub fn start_on(cpus: Option<&str>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "rackcache-test-ceph-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        ));
        // hack/ceph.sh uses PORT..PORT+40; probe pseudo-random bases below
        // the kernel's ephemeral range, where no outgoing connection can
        // take a port between the probe and Ceph's bind.
        let seed = std::process::id() as u64
            ^ u64::from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0),
            );
        let span = u64::from(ephemeral_port_start().saturating_sub(20000 + 41)).max(1000);
        let port = (0..64)
            .map(|i| 20000 + ((seed.wrapping_mul(2654435761).wrapping_add(i * 7919)) % span) as u16)
            .find(|&p| port_range_free(p, 41))
            .expect("41 free consecutive loopback ports");
        let mut up = Command::new(repo_root().join("hack/ceph.sh"));
        up.args([
            "up",
            dir.to_str().expect("utf-8 temp dir"),
            "--mon-port",
            &port.to_string(),
        ]);
        if let Some(cpus) = cpus {
            up.args(["--cpus", cpus]);
        }
        let out = up.output().expect("run hack/ceph.sh");
        let ceph = Ceph {
            dir,
            env: String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        };
        assert!(
            out.status.success(),
            "hack/ceph.sh up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ceph
    }

    /// A setting hack/ceph.sh printed (CEPH_CONF, RACKCACHE_CEPH_*).
    pub fn var(&self, k: &str) -> &str {
        self.env
            .get(k)
            .unwrap_or_else(|| panic!("hack/ceph.sh printed no {k}"))
    }

    /// Runs `ceph` or `rbd` as client.admin; panics on failure.
    pub fn admin(&self, prog: &str, args: &[&str]) -> String {
        let out = Command::new(prog)
            .arg("--conf")
            .arg(self.var("CEPH_CONF"))
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {prog}: {e}"));
        assert!(
            out.status.success(),
            "{prog} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates `pool/image` of `bytes` and writes it whole (4 MiB
    /// sequential writes): reads of never-written RADOS objects would be
    /// unrealistically cheap in a benchmark.
    pub fn create_filled_image(&self, image: &str, bytes: u64) {
        let size = format!("{}M", bytes.div_ceil(1 << 20));
        self.admin("rbd", &["create", "--size", &size, image]);
        let total = bytes.to_string();
        self.admin(
            "rbd",
            &[
                "bench",
                "--io-type",
                "write",
                "--io-size",
                "4M",
                "--io-pattern",
                "seq",
                "--io-total",
                &total,
                image,
            ],
        );
    }
}

/// Pins the calling thread (and the threads it starts) to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    pin_current_thread_to(&[cpu])
}

/// Pins the calling thread (and the threads and processes it starts) to
/// `cpus`.
pub fn pin_current_thread_to(cpus: &[usize]) -> std::io::Result<()> {
    extern "C" {
        fn sched_setaffinity(pid: i32, size: usize, mask: *const u64) -> i32;
    }
    let mut mask = [0u64; 16];
    for &cpu in cpus {
        mask[cpu / 64] |= 1 << (cpu % 64);
    }
    // SAFETY: a valid cpu_set_t-sized mask for the calling thread (pid 0).
    let rc = unsafe { sched_setaffinity(0, std::mem::size_of_val(&mask), mask.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Drop for Ceph {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("hack/ceph.sh"))
            .args(["down", self.dir.to_str().unwrap_or_default()])
            .output();
    }
}

/// Reports a test dependency that is absent (a trace sample, a tool). Under
/// `CI=true` nothing may skip, so this panics with `what`; elsewhere it
/// prints a visible skip message and the caller returns early.
pub fn missing(what: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("missing test dependency under CI=true: {what}");
    }
    eprintln!("SKIPPED (set CI=true to make this fail): {what}");
}
