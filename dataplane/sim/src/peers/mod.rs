//! `rackcache-sim --compare-peers`: the trace's 4 KiB block stream
//! ([`stream`]) through libCacheSim's LRU, ARC, S3FIFO, WTinyLFU, LIRS and
//! Sieve (PyPI `libcachesim`, in the venv `hack/deps.sh python` makes), at
//! exactly the bytes the engine used, and the block miss ratios side by side
//! with the engine's ([`table`]).
//!
//! libCacheSim runs as a Python script (`peers.py`, embedded in the binary
//! and written next to the stream, so an installed binary needs no checkout
//! beside it) and answers in JSON.

pub mod stream;
pub mod table;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The policies compared, by their class names in the `libcachesim`
/// package, in the order they are printed.
pub const POLICIES: [&str; 6] = ["LRU", "ARC", "S3FIFO", "WTinyLFU", "LIRS", "Sieve"];

const SCRIPT: &str = include_str!("peers.py");

/// peers.py's exit status when `import libcachesim` fails.
const NO_LIBCACHESIM: i32 = 3;

const INSTALL_HINT: &str = "run `hack/deps.sh python` (it makes bin/venv with libcachesim), or set RACKCACHE_PYTHON to a Python that has it";

/// The Python that runs libCacheSim (here and in the simulator
/// benchmark): `$RACKCACHE_PYTHON`, else `bin/python` of `$RACKCACHE_VENV`,
/// else of the repository's venv, `bin/venv` (`hack/deps.sh python`).
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("RACKCACHE_PYTHON") {
        return PathBuf::from(p);
    }
    std::env::var_os("RACKCACHE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bin/venv"))
        .join("bin/python")
}

/// libCacheSim's miss ratio for one policy at one cache size.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct PeerResult {
    /// Policy, e.g. `S3FIFO`.
    pub policy: String,
    /// Cache size in bytes.
    pub cache_bytes: u64,
    /// Missed block accesses / block accesses (after the warm-up).
    pub miss_ratio: f64,
}

#[derive(Deserialize)]
struct Check {
    libcachesim: String,
}

#[derive(Deserialize)]
struct Output {
    results: Vec<PeerResult>,
}

/// A Python that imports libcachesim, and the script written for it.
#[derive(Debug)]
pub struct Peers {
    python: PathBuf,
    script: PathBuf,
    /// libcachesim's version.
    pub version: String,
}

impl Peers {
    /// Finds the Python ([`python`]), writes the script into `dir` and
    /// checks that it imports libcachesim: done before the replays, which
    /// can take minutes, so that a missing venv fails at once.
    pub fn locate(dir: &Path) -> Result<Peers, String> {
        let python = python();
        if !python.is_file() {
            return Err(format!(
                "--compare-peers: no Python at {}: {INSTALL_HINT}",
                python.display()
            ));
        }
        let script = dir.join("peers.py");
        std::fs::write(&script, SCRIPT).map_err(|e| format!("write {}: {e}", script.display()))?;
        let mut peers = Peers {
            python,
            script,
            version: String::new(),
        };
        let check: Check = peers.call(&["--check".to_string()])?;
        peers.version = check.libcachesim;
        Ok(peers)
    }

    /// Every policy at each of `sizes` bytes over the block stream at
    /// `stream`, the first `warmup_blocks` records uncounted.
    pub fn run(
        &self,
        stream: &Path,
        warmup_blocks: u64,
        sizes: &[u64],
    ) -> Result<Vec<PeerResult>, String> {
        let mut args = vec![stream.display().to_string(), warmup_blocks.to_string()];
        args.extend(sizes.iter().map(u64::to_string));
        let out: Output = self.call(&args)?;
        Ok(out.results)
    }

    fn call<T: for<'de> Deserialize<'de>>(&self, args: &[String]) -> Result<T, String> {
        let out = Command::new(&self.python)
            .arg(&self.script)
            .args(args)
            .output()
            .map_err(|e| format!("run {}: {e}", self.python.display()))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(NO_LIBCACHESIM) {
            return Err(format!(
                "--compare-peers: {} cannot import libcachesim ({}): {INSTALL_HINT}",
                self.python.display(),
                stderr.trim()
            ));
        }
        if !out.status.success() {
            return Err(format!(
                "libCacheSim ({} {}) failed with {}: {}",
                self.python.display(),
                self.script.display(),
                out.status,
                stderr.trim()
            ));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "libCacheSim's answer is not the expected JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout).trim()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_names_the_same_policies() {
        // Rust's and Python's list literals of strings read the same.
        let listed = format!("POLICIES = {POLICIES:?}");
        assert!(SCRIPT.contains(&listed), "peers.py must list {listed}");
    }
}
