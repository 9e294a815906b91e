//! Saved configurations: the `{"subsystems": [{"subsystem", "config":
//! [{"method", "params"}]}]}` document `save_config` produces, replayed
//! call by call through the same handlers as live RPCs (`--config`,
//! `--config-persist`), and rewritten atomically after every change
//! (`--config-persist`).

use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::rpc::server::Dispatch;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    subsystems: Vec<Subsystem>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Subsystem {
    subsystem: String,
    config: Option<Vec<Call>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call {
    method: String,
    params: Option<Value>,
}

/// What replaying a configuration did.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Calls that succeeded.
    pub applied: usize,
    /// Calls that failed, in file order.
    pub failed: Vec<FailedCall>,
}

/// A configuration call that failed: kept, with its parameters, so that
/// the persisted file still holds it and it can be retried.
#[derive(Clone, Debug, PartialEq)]
pub struct FailedCall {
    /// The section it belongs to (`bdev`, `nvmf`, `keyring`).
    pub subsystem: String,
    /// The method and its parameters, as in the file.
    pub method: String,
    /// Its parameters.
    pub params: Option<Value>,
    /// The error's code and message.
    pub code: i32,
    /// The error's message.
    pub message: String,
}

impl FailedCall {
    /// One line for logs and errors: the method, a summary of its
    /// parameters without secrets, and the error.
    pub fn line(&self) -> String {
        let summary = self.params.as_ref().map(summarize).unwrap_or_default();
        format!(
            "{} {}({summary}): {} (code {})",
            self.subsystem, self.method, self.message, self.code
        )
    }
}

/// Failed calls, each with an id that stays while the daemon runs.
#[derive(Default)]
pub struct ConfigErrors {
    next_id: u64,
    list: Vec<(u64, FailedCall)>,
}

impl ConfigErrors {
    /// Keeps `calls` (in order).
    pub fn add(&mut self, calls: impl IntoIterator<Item = FailedCall>) {
        for c in calls {
            self.next_id += 1;
            self.list.push((self.next_id, c));
        }
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The kept calls of section `subsystem`, in order, as saved-config
    /// entries.
    pub fn entries(&self, subsystem: &str) -> Vec<Value> {
        self.list
            .iter()
            .filter(|(_, c)| c.subsystem == subsystem)
            .map(|(_, c)| match &c.params {
                Some(p) => json!({ "method": c.method, "params": p }),
                None => json!({ "method": c.method }),
            })
            .collect()
    }

    /// The kept calls with their ids, in order.
    pub fn calls(&self) -> &[(u64, FailedCall)] {
        &self.list
    }

    /// Forgets call `id`, returning it.
    pub fn remove(&mut self, id: u64) -> Option<FailedCall> {
        let pos = self.list.iter().position(|(k, _)| *k == id)?;
        Some(self.list.remove(pos).1)
    }

    /// Records call `id`'s latest error.
    pub fn failed_again(&mut self, id: u64, code: i32, message: &str) {
        if let Some((_, c)) = self.list.iter_mut().find(|(k, _)| *k == id) {
            c.code = code;
            c.message = message.to_owned();
        }
    }

    /// Forgets the kept calls equal to one that just succeeded live: the
    /// object they would make exists now.
    pub fn superseded_by(&mut self, method: &str, params: &Option<Value>) -> bool {
        let before = self.list.len();
        self.list
            .retain(|(_, c)| !(c.method == method && &c.params == params));
        self.list.len() != before
    }
}

/// Replays every call of the configuration in `path`, continuing after a
/// failing call so that all failures are reported (each is also logged).
/// Fails only when the file cannot be read or parsed.
pub async fn load(path: &Path, dispatcher: &impl Dispatch) -> Result<Loaded, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let cfg: ConfigFile =
        serde_json::from_str(&text).map_err(|e| format!("parse {}: {e}", path.display()))?;
    let mut out = Loaded::default();
    for sub in cfg.subsystems {
        for (i, call) in sub.config.unwrap_or_default().into_iter().enumerate() {
            let summary = call.params.as_ref().map(summarize).unwrap_or_default();
            match dispatcher.dispatch(&call.method, call.params.clone()).await {
                Ok(_) => out.applied += 1,
                Err(e) => {
                    tracing::error!(
                        config = %path.display(), subsystem = %sub.subsystem, entry = i,
                        method = %call.method, params = %summary, code = e.code(), error = %e.message,
                        "configuration call failed"
                    );
                    out.failed.push(FailedCall {
                        subsystem: sub.subsystem.clone(),
                        method: call.method,
                        params: call.params,
                        code: e.code(),
                        message: e.message,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Parameters shown with their values when a call fails: names, addresses
/// and sizes. Any other parameter (cephx keys, keyrings, config_param, PSKs)
/// is listed by name only.
const SHOWN: &[&str] = &[
    "name",
    "nqn",
    "bdev_name",
    "base_bdev_name",
    "filename",
    "block_size",
    "num_blocks",
    "cluster_name",
    "pool_name",
    "rbd_name",
    "user_id",
    "trtype",
    "adrfam",
    "traddr",
    "trsvcid",
    "host",
    "nsid",
];

/// `k=v, ...` for [`SHOWN`] keys (nested objects such as `listen_address`
/// and `namespace` included), `k=<...>` for the rest.
pub fn summarize(params: &Value) -> String {
    let Value::Object(map) = params else {
        return String::new();
    };
    map.iter()
        .map(|(k, v)| match v {
            Value::Object(_) => format!("{k}={{{}}}", summarize(v)),
            Value::String(s) if SHOWN.contains(&k.as_str()) => format!("{k}={s:?}"),
            Value::Number(_) | Value::Bool(_) if SHOWN.contains(&k.as_str()) => format!("{k}={v}"),
            _ => format!("{k}=<...>"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where `--config-persist` keeps the configuration.
pub struct Persist {
    path: PathBuf,
    // Rewrites are serialised, each from a fresh snapshot, so the last
    // file written reflects every change that completed before it.
    serial: tokio::sync::Mutex<()>,
}

impl Persist {
    /// Persists to `path`.
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            serial: tokio::sync::Mutex::new(()),
        }
    }

    /// Rewrites the file with the document `snapshot` yields, taken once
    /// every earlier rewrite is done, so that the last file written
    /// reflects every change that completed before it.
    pub async fn rewrite(&self, snapshot: impl Future<Output = Value>) -> Result<(), String> {
        let _serial = self.serial.lock().await;
        let doc = snapshot.await;
        let mut bytes =
            serde_json::to_vec_pretty(&doc).map_err(|e| format!("encode configuration: {e}"))?;
        bytes.push(b'\n');
        let path = self.path.clone();
        // fsync blocks: keep it off the runtime that serves the queues.
        tokio::task::spawn_blocking(move || write_atomic(&path, &bytes))
            .await
            .map_err(|e| format!("configuration writer: {e}"))?
    }
}

/// Replaces `path` with `bytes` so that a crash at any point leaves either
/// the old or the new file: a temporary file in the same directory, mode
/// 0600 (it holds cephx keys), fsync, rename, fsync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| format!("{} names no file", path.display()))?;
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let write = || -> std::io::Result<()> {
        // A leftover from a crash may have another mode: start afresh.
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("write {} atomically: {e}", path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn summaries_hide_secrets() {
        let s = summarize(&json!({
            "name": "ceph0", "user_id": "admin", "key": "AQBsecret==",
            "config_param": {"mon_host": "127.0.0.1", "key": "AQBsecret=="},
            "listen_address": {"traddr": "127.0.0.1", "trsvcid": "4420"}
        }));
        assert!(!s.contains("AQB"), "{s}");
        assert!(s.contains("name=\"ceph0\""), "{s}");
        assert!(s.contains("traddr=\"127.0.0.1\""), "{s}");
        assert!(s.contains("key=<...>"), "{s}");
    }

    #[test]
    fn atomic_writes_are_private_and_replace() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("rc-persist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("config.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temp file left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
