//! Allowed hosts: `nvmf_subsystem_add_host` and
//! `nvmf_subsystem_remove_host` (which ends the host's controllers).

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::revoke::{persist_then_wait, REVOKE_TIMEOUT};
use super::target::{check_tgt_name, subsystem, target, unsupported};
use crate::app::App;
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
}

pub(crate) async fn add_host(app: &App, p: AddHost) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    if p.psk.is_some() {
        return Err(unsupported("psk (TLS)"));
    }
    if p.dhchap_key.is_some() || p.dhchap_ctrlr_key.is_some() {
        return Err(unsupported("DH-HMAC-CHAP authentication"));
    }
    let state = app.state.lock().await;
    subsystem(&state.nvmf, &p.nqn)?;
    target(&state.nvmf)?.add_host(&p.nqn, &p.host)?;
    tracing::info!(subnqn = %p.nqn, hostnqn = %p.host, "NVMe-oF host allowed");
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
