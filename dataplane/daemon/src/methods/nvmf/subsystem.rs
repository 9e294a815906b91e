//! NVM subsystems: `nvmf_create_subsystem`, `nvmf_delete_subsystem`,
//! `nvmf_get_subsystems`, `nvmf_subsystem_allow_any_host`.

use nvmf_tgt::{SubsystemConfig, Target, DISCOVERY_NQN};
use serde::Deserialize;
use serde_json::{json, Value};

use super::json::{discovery_json, subsystem_json};
use super::revoke::{persist_then_wait, REVOKE_TIMEOUT};
use super::target::{
    check_tgt_name, subsystem, target, unsupported, DEFAULT_MAX_NAMESPACES, MAX_CNTLID, MIN_CNTLID,
};
use crate::app::App;
use crate::rpc::error::{ErrorKind, RpcError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateSubsystem {
    nqn: String,
    tgt_name: Option<String>,
    serial_number: Option<String>,
    model_number: Option<String>,
    #[serde(default)]
    allow_any_host: bool,
    max_namespaces: Option<u32>,
    #[serde(default)]
    ana_reporting: bool,
    min_cntlid: Option<u16>,
    max_cntlid: Option<u16>,
    dmrsl: Option<u32>,
    wzsl: Option<u8>,
    #[serde(default)]
    passthrough: bool,
    #[serde(default)]
    enable_nssr: bool,
    admin_label: Option<String>,
}

pub(crate) async fn create_subsystem(app: &App, p: CreateSubsystem) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    for (set, what) in [
        (p.passthrough, "passthrough"),
        (p.enable_nssr, "enable_nssr"),
        (p.admin_label.is_some(), "admin_label"),
        (p.dmrsl.is_some_and(|v| v != 0), "dmrsl"),
        (p.wzsl.is_some_and(|v| v != 0), "wzsl"),
    ] {
        if set {
            return Err(unsupported(what));
        }
    }
    let (min, max) = (
        p.min_cntlid.unwrap_or(MIN_CNTLID),
        p.max_cntlid.unwrap_or(MAX_CNTLID),
    );
    if min < MIN_CNTLID || max > MAX_CNTLID || min > max {
        return Err(RpcError::invalid_params(format!(
            "min_cntlid {min} and max_cntlid {max} must make a range within [{MIN_CNTLID}-{MAX_CNTLID}]"
        )));
    }
    let mut cfg = SubsystemConfig::new(&p.nqn);
    // Servers exporting one subsystem (ANA paths) get disjoint ranges.
    cfg.cntlid_range = min..=max;
    if let Some(sn) = p.serial_number {
        cfg.serial = sn;
    }
    if let Some(mn) = p.model_number {
        cfg.model = mn;
    }
    cfg.allow_any_host = p.allow_any_host;
    cfg.ana_reporting = p.ana_reporting;
    cfg.max_namespaces = match p.max_namespaces {
        None | Some(0) => DEFAULT_MAX_NAMESPACES,
        Some(n) => n,
    };
    let state = app.state.lock().await;
    let t = target(&state.nvmf)?;
    if p.nqn == DISCOVERY_NQN || t.subsystem(&p.nqn).is_some() {
        return Err(RpcError::new(
            ErrorKind::Internal,
            format!("Unable to create subsystem {}: it already exists", p.nqn),
        ));
    }
    t.add_subsystem(cfg)?;
    tracing::info!(subnqn = %p.nqn, "NVMe-oF subsystem created");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ByNqn {
    nqn: String,
    tgt_name: Option<String>,
}

pub(crate) async fn delete_subsystem(app: &App, p: ByNqn) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let revoked = {
        let state = app.state.lock().await;
        subsystem(&state.nvmf, &p.nqn)?;
        target(&state.nvmf)?.remove_subsystem(&p.nqn)?
    };
    tracing::info!(subnqn = %p.nqn, "NVMe-oF subsystem deleted");
    // The subsystem is gone either way; a late queue only gets a warning.
    persist_then_wait(app, revoked, REVOKE_TIMEOUT, "nvmf_delete_subsystem").await;
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetSubsystems {
    nqn: Option<String>,
    tgt_name: Option<String>,
}

pub(crate) async fn get_subsystems(app: &App, p: GetSubsystems) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let state = app.state.lock().await;
    let subs = state
        .nvmf
        .target
        .as_ref()
        .map(Target::subsystems)
        .unwrap_or_default();
    let discovery_listeners = state
        .nvmf
        .target
        .as_ref()
        .and_then(|t| t.subsystem(DISCOVERY_NQN))
        .map(|d| d.listeners())
        .unwrap_or_default();
    let mut out = vec![discovery_json(&discovery_listeners)];
    out.extend(subs.iter().map(|s| subsystem_json(s)));
    match p.nqn {
        None => Ok(Value::Array(out)),
        Some(nqn) => match out.into_iter().find(|s| s["nqn"] == nqn.as_str()) {
            Some(s) => Ok(json!([s])),
            None => Err(RpcError::new(
                ErrorKind::InvalidParams,
                format!("Subsystem with NQN '{nqn}' not found"),
            )),
        },
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AllowAnyHost {
    nqn: String,
    allow_any_host: bool,
    tgt_name: Option<String>,
}

pub(crate) async fn allow_any_host(app: &App, p: AllowAnyHost) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let revoked = {
        let state = app.state.lock().await;
        subsystem(&state.nvmf, &p.nqn)?;
        target(&state.nvmf)?.set_allow_any_host(&p.nqn, p.allow_any_host)?
    };
    tracing::info!(subnqn = %p.nqn, allow_any_host = p.allow_any_host, "NVMe-oF host policy set");
    persist_then_wait(
        app,
        revoked,
        REVOKE_TIMEOUT,
        "nvmf_subsystem_allow_any_host",
    )
    .await;
    Ok(json!(true))
}
