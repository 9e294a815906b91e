//! Allowed hosts: `nvmf_subsystem_add_host` (with the keyring names of
//! its DH-HMAC-CHAP keys), `nvmf_subsystem_set_keys` (rotation) and
//! `nvmf_subsystem_remove_host` (which ends the host's controllers).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use nvmf::keys::Hash;
use nvmf_tgt::{HostKeys, NamedKey, NamedPsk};

use serde::Deserialize;
use serde_json::{json, Value};

use super::revoke::{persist_then_wait, REVOKE_TIMEOUT};
use super::target::{check_tgt_name, subsystem, target};
use crate::app::{App, Key};
use crate::methods::keyring::{dhchap_secret, tls_psk};
use crate::rpc::error::{ErrorKind, RpcError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddHost {
    nqn: String,
    host: String,
    tgt_name: Option<String>,
    psk: Option<String>,
    dhchap_key: Option<String>,
    dhchap_ctrlr_key: Option<String>,
    /// rackcache's: the host has keys the daemon does not hold yet (how a
    /// saved configuration restores a host whose keys lived in memory):
    /// its Connects get Controller Busy until `nvmf_subsystem_set_keys`.
    rackcache_keys_pending: Option<bool>,
}

pub(crate) async fn add_host(app: &App, p: AddHost) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let state = app.state.lock().await;
    subsystem(&state.nvmf, &p.nqn)?;
    let mut keys = host_keys(&state.keyring, &p.dhchap_key, &p.dhchap_ctrlr_key)?;
    keys.psk = named_psk(&state.keyring, &p.psk)?;
    if p.rackcache_keys_pending == Some(true) {
        if keys.required() || keys.psk.is_some() {
            return Err(RpcError::invalid_params(
                "rackcache_keys_pending is for a host added without keys",
            ));
        }
        keys.pending = true;
    }
    let authenticated = keys.required();
    let tls = keys.psk.is_some();
    target(&state.nvmf)?.add_host(&p.nqn, &p.host, keys)?;
    tracing::info!(subnqn = %p.nqn, hostnqn = %p.host, dhchap = authenticated, tls, "NVMe-oF host allowed");
    Ok(json!(true))
}

/// The keys named by `dhchap_key` and `dhchap_ctrlr_key`, read from the
/// keyring; a controller key needs a host key (SPDK's rule).
fn host_keys(
    keyring: &BTreeMap<String, Key>,
    host: &Option<String>,
    ctrlr: &Option<String>,
) -> Result<HostKeys, RpcError> {
    if ctrlr.is_some() && host.is_none() {
        return Err(RpcError::invalid_params(
            "dhchap_ctrlr_key needs dhchap_key: a controller authenticates only to a host that authenticates",
        ));
    }
    let named = |name: &Option<String>| -> Result<Option<Arc<NamedKey>>, RpcError> {
        name.as_ref()
            .map(|n| {
                Ok(Arc::new(NamedKey {
                    name: n.clone(),
                    secret: dhchap_secret(keyring, n)?,
                }))
            })
            .transpose()
    };
    Ok(HostKeys {
        host: named(host)?,
        ctrlr: named(ctrlr)?,
        psk: None,
        pending: false,
    })
}

/// The TLS PSK named `name`, read from the keyring. Only SHA-256 PSKs
/// (hash 01): the target's TLS library serves TLS 1.3 PSKs with SHA-256
/// cipher suites only.
fn named_psk(
    keyring: &BTreeMap<String, Key>,
    name: &Option<String>,
) -> Result<Option<Arc<NamedPsk>>, RpcError> {
    let Some(name) = name else {
        return Ok(None);
    };
    let psk = tls_psk(keyring, name)?;
    if psk.hash != Hash::Sha256 {
        return Err(RpcError::invalid_params(format!(
            "key '{name}': a TLS PSK with hash 02 (SHA-384) is not supported; use NVMeTLSkey-1:01 (SHA-256)"
        )));
    }
    Ok(Some(Arc::new(NamedPsk {
        name: name.clone(),
        psk,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetKeys {
    nqn: String,
    host: String,
    tgt_name: Option<String>,
    dhchap_key: Option<String>,
    dhchap_ctrlr_key: Option<String>,
    /// rackcache's: the TLS PSK from now on (a new secure channel needs
    /// it; open ones keep theirs). Absent: the host keeps its PSK.
    rackcache_psk: Option<String>,
}

/// `nvmf_subsystem_set_keys`: rotation. Connected queues keep running;
/// the host's next authentication (a new queue, or re-authentication)
/// needs the new keys. Without keys, the host no longer authenticates.
pub(crate) async fn set_keys(app: &App, p: SetKeys) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let state = app.state.lock().await;
    let sub = subsystem(&state.nvmf, &p.nqn)?;
    let mut keys = host_keys(&state.keyring, &p.dhchap_key, &p.dhchap_ctrlr_key)?;
    keys.psk = match named_psk(&state.keyring, &p.rackcache_psk)? {
        Some(psk) => Some(psk),
        None => sub.host_keys(&p.host).psk,
    };
    target(&state.nvmf)?.set_host_keys(&p.nqn, &p.host, keys)?;
    tracing::info!(subnqn = %p.nqn, hostnqn = %p.host, dhchap_key = ?p.dhchap_key, dhchap_ctrlr_key = ?p.dhchap_ctrlr_key, psk = ?p.rackcache_psk, "NVMe-oF host keys set");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RemoveHost {
    nqn: String,
    host: String,
    tgt_name: Option<String>,
    /// How long to wait for the host's queue pairs to close (0 or absent:
    /// SPDK's default).
    timeout_ms: Option<u64>,
}

pub(crate) async fn remove_host(app: &App, p: RemoveHost) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let revoked = {
        let state = app.state.lock().await;
        subsystem(&state.nvmf, &p.nqn)?;
        target(&state.nvmf)?.remove_host(&p.nqn, &p.host)?
    };
    tracing::info!(subnqn = %p.nqn, hostnqn = %p.host, controllers = revoked.len(), "NVMe-oF host removed");
    let timeout = match p.timeout_ms {
        None | Some(0) => REVOKE_TIMEOUT,
        Some(ms) => Duration::from_millis(ms),
    };
    // As SPDK: the host is off the list either way, but the caller learns
    // that its queues were still open.
    if !persist_then_wait(app, revoked, timeout, "nvmf_subsystem_remove_host").await {
        return Err(RpcError::new(
            ErrorKind::Internal,
            "Timeout reached during host removal",
        ));
    }
    Ok(json!(true))
}
