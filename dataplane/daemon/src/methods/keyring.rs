//! The keyring: named keys. SPDK's `keyring_file` module keeps them in
//! files (`keyring_file_add_key`, `keyring_file_remove_key`,
//! `keyring_get_keys`); rackcache's `keyring_memory_add_key` and
//! `keyring_memory_remove_key` hold a secret in memory only, for a control
//! plane that delivers keys over the authenticated RPC and must not leave
//! them on the server's disk. Other methods name keys, never carry them:
//! `nvmf_subsystem_add_host --dhchap-key key0` reads key0 then. So secrets
//! stay out of logs and the saved configuration, which records names and
//! paths only: memory keys, and the hosts that use them, are not saved, so
//! a restarted daemon refuses those hosts until the keys come again.
//!
//! As SPDK's: a path must be absolute and its file readable by its owner
//! only (mode 0600 or 0400). Unlike SPDK, a key that a host still uses
//! cannot be removed: the saved configuration would name a key that no
//! longer exists and fail to load.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nvmf::keys::{DhchapSecret, TlsPsk};
use serde::Deserialize;
use serde_json::{json, Value};

use std::collections::BTreeMap;

use crate::app::{App, Key, KeySource};
use crate::rpc::error::{libc_errno, RpcError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddKey {
    name: String,
    path: String,
}

/// Checks that `path` is absolute, a regular file, and private to its
/// owner; returns its content.
fn read_key_file(path: &str) -> Result<String, RpcError> {
    if !Path::new(path).is_absolute() {
        return Err(RpcError::invalid_params(format!(
            "key file path '{path}' is not absolute"
        )));
    }
    let meta = std::fs::metadata(path)
        .map_err(|e| RpcError::invalid_params(format!("key file '{path}': {e}")))?;
    let mode = meta.permissions().mode() & 0o777;
    if !meta.is_file() || mode & 0o077 != 0 {
        return Err(RpcError::invalid_params(format!(
            "Invalid permissions for key file '{path}': 0{mode:o} (it must be a file only its owner may read: 0600 or 0400)"
        )));
    }
    std::fs::read_to_string(path)
        .map_err(|e| RpcError::invalid_params(format!("key file '{path}': {e}")))
}

fn check_name(name: &str) -> Result<(), RpcError> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(RpcError::invalid_params(
            "key name must be printable ASCII without spaces",
        ));
    }
    Ok(())
}

/// Adds key `name` unless the keyring has one by that name.
async fn insert(app: &App, name: &str, source: KeySource) -> Result<(), RpcError> {
    let mut state = app.state.lock().await;
    if state.keyring.contains_key(name) {
        return Err(RpcError::errno(
            libc_errno::EEXIST,
            format!("Key '{name}' already exists"),
        ));
    }
    let seq = state.next_seq;
    state.next_seq += 1;
    state.keyring.insert(name.to_owned(), Key { seq, source });
    Ok(())
}

pub(crate) async fn add_key(app: &App, p: AddKey) -> Result<Value, RpcError> {
    check_name(&p.name)?;
    read_key_file(&p.path)?;
    insert(app, &p.name, KeySource::File(p.path.clone())).await?;
    tracing::info!(key = %p.name, path = %p.path, "key added to the keyring");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddMemoryKey {
    name: String,
    /// The secret in its interchange format (`DHHC-1:...` or
    /// `NVMeTLSkey-1:...`).
    secret: String,
}

/// `keyring_memory_add_key`: the secret must parse as a DH-HMAC-CHAP
/// secret or a TLS PSK, so a bad one is refused here rather than at the
/// host's Connect.
pub(crate) async fn add_memory_key(app: &App, p: AddMemoryKey) -> Result<Value, RpcError> {
    check_name(&p.name)?;
    // The parse error names the format's fault, never the secret's bytes.
    let parsed = if p.secret.trim_start().starts_with("NVMeTLSkey-") {
        TlsPsk::parse(&p.secret).map(drop)
    } else {
        DhchapSecret::parse(&p.secret).map(drop)
    };
    parsed.map_err(|e| RpcError::invalid_params(format!("key '{}': {e}", p.name)))?;
    insert(app, &p.name, KeySource::Memory(p.secret)).await?;
    tracing::info!(key = %p.name, "key added to the keyring (memory)");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RemoveKey {
    name: String,
}

pub(crate) async fn remove_key(app: &App, p: RemoveKey) -> Result<Value, RpcError> {
    let mut state = app.state.lock().await;
    if !state.keyring.contains_key(&p.name) {
        // Either method removes either kind: a name is one key.
        return Err(RpcError::errno(
            libc_errno::ENOKEY,
            format!("Key '{}' not found", p.name),
        ));
    }
    if let Some(users) = key_users(&state.nvmf, &p.name) {
        return Err(RpcError::errno(
            libc_errno::EBUSY,
            format!(
                "Key '{}' is in use by {users}: set other keys first",
                p.name
            ),
        ));
    }
    state.keyring.remove(&p.name);
    tracing::info!(key = %p.name, "key removed from the keyring");
    Ok(json!(true))
}

/// The hosts using key `name`, described, or None.
fn key_users(nvmf: &crate::app::NvmfState, name: &str) -> Option<String> {
    let t = nvmf.target.as_ref()?;
    let users: Vec<String> = t
        .subsystems()
        .iter()
        .flat_map(|s| {
            s.hosts_with_keys()
                .into_iter()
                .filter(|(_, k)| {
                    [&k.host, &k.ctrlr]
                        .into_iter()
                        .flatten()
                        .any(|n| n.name == name)
                        || k.psk.as_ref().is_some_and(|p| p.name == name)
                })
                .map(|(h, _)| format!("host {h} of {}", s.nqn))
                .collect::<Vec<_>>()
        })
        .collect();
    (!users.is_empty()).then(|| users.join(", "))
}

pub(crate) async fn get_keys(app: &App, _: super::params::NoParams) -> Result<Value, RpcError> {
    let state = app.state.lock().await;
    let mut keys: Vec<_> = state.keyring.iter().collect();
    keys.sort_by_key(|(_, k)| k.seq);
    Ok(Value::Array(
        keys.into_iter()
            .map(|(name, k)| {
                let mut v = json!({
                    "name": name,
                    "removed": false,
                    "probed": false,
                    "in_use": key_users(&state.nvmf, name).is_some(),
                });
                match &k.source {
                    KeySource::File(path) => v["path"] = json!(path),
                    KeySource::Memory(_) => v["module"] = json!("memory"),
                }
                v
            })
            .collect(),
    ))
}

/// The DH-HMAC-CHAP secret of key `name`, read from its file now (or
/// from memory).
pub(crate) fn dhchap_secret(
    keyring: &BTreeMap<String, Key>,
    name: &str,
) -> Result<DhchapSecret, RpcError> {
    let (text, from) = key_text(keyring, name)?;
    DhchapSecret::parse(&text)
        .map_err(|e| RpcError::invalid_params(format!("key '{name}'{from}: {e}")))
}

/// The TLS PSK (`NVMeTLSkey-1:...`) of key `name`, read from its file now
/// (or from memory).
pub(crate) fn tls_psk(keyring: &BTreeMap<String, Key>, name: &str) -> Result<TlsPsk, RpcError> {
    let (text, from) = key_text(keyring, name)?;
    TlsPsk::parse(&text).map_err(|e| RpcError::invalid_params(format!("key '{name}'{from}: {e}")))
}

/// Key `name`'s text, and where it came from for error messages.
fn key_text(
    keyring: &BTreeMap<String, Key>,
    name: &str,
) -> Result<(zeroize::Zeroizing<String>, String), RpcError> {
    let k = keyring.get(name).ok_or_else(|| {
        RpcError::invalid_params(format!(
            "Key '{name}' not found: add it with keyring_file_add_key first"
        ))
    })?;
    Ok(match &k.source {
        KeySource::File(path) => (
            zeroize::Zeroizing::new(read_key_file(path)?),
            format!(" ({path})"),
        ),
        KeySource::Memory(text) => (zeroize::Zeroizing::new(text.to_string()), String::new()),
    })
}

/// Whether the saved configuration has key `name`: memory keys are never
/// saved, nor is anything that names them.
pub(crate) fn saved(keyring: &BTreeMap<String, Key>, name: &str) -> bool {
    matches!(
        keyring.get(name).map(|k| &k.source),
        Some(KeySource::File(_))
    )
}

/// The "keyring" section of a saved configuration: names and paths of
/// file keys.
pub(crate) fn config(keyring: &BTreeMap<String, Key>) -> Value {
    let mut keys: Vec<_> = keyring.iter().collect();
    keys.sort_by_key(|(_, k)| k.seq);
    Value::Array(
        keys.into_iter()
            .filter_map(|(name, k)| match &k.source {
                KeySource::File(path) => Some(json!({
                    "method": "keyring_file_add_key",
                    "params": { "name": name, "path": path }
                })),
                KeySource::Memory(_) => None,
            })
            .collect(),
    )
}
