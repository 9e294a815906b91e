//! A temporary directory removed when dropped: `--compare-peers` writes its
//! block stream and the libCacheSim script there. The workspace has no
//! tempfile crate and this needs nothing beyond `std`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// `$TMPDIR/<prefix>-<pid>-<n>`, created empty, removed with its contents on
/// drop (also when the run fails or a test panics).
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates a fresh directory; the pid and a per-process counter keep
    /// concurrent runs and tests apart.
    pub fn new(prefix: &str) -> std::io::Result<TempDir> {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        // A directory left by a killed run with a recycled pid.
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
