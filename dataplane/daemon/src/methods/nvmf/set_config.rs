//! `nvmf_set_config`: the target-wide settings. Of SPDK's, the
//! DH-HMAC-CHAP hashes and groups the target accepts (`dhchap_digests`,
//! `dhchap_dhgroups`; default all, the strongest both ends accept is
//! chosen); the others are accepted at the value that matches what this
//! target does, refused otherwise.

use nvmf::auth::{hash_from_name, DhGroup};
use nvmf::keys::Hash;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::target::unsupported;
use crate::app::{App, NvmfState};
use crate::rpc::error::RpcError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetConfig {
    dhchap_digests: Option<Vec<String>>,
    dhchap_dhgroups: Option<Vec<String>>,
    admin_cmd_passthru: Option<Map<String, Value>>,
    discovery_filter: Option<String>,
    dup_host_policy: Option<String>,
    /// SPDK's poll group CPU mask: this target has no poll groups.
    #[serde(rename = "poll_groups_mask")]
    _poll_groups_mask: Option<String>,
}

fn parse_list<T>(
    names: &[String],
    what: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Vec<T>, RpcError> {
    if names.is_empty() {
        return Err(RpcError::invalid_params(format!("{what}: an empty list")));
    }
    names
        .iter()
        .map(|n| parse(n).ok_or_else(|| RpcError::invalid_params(format!("{what}: unknown '{n}'"))))
        .collect()
}

pub(crate) async fn set_config(app: &App, p: SetConfig) -> Result<Value, RpcError> {
    if p.admin_cmd_passthru
        .as_ref()
        .is_some_and(|m| m.values().any(|v| v != &json!(false)))
    {
        return Err(unsupported("admin_cmd_passthru"));
    }
    if p.discovery_filter
        .as_deref()
        .is_some_and(|f| f != "match_any")
    {
        return Err(unsupported("discovery_filter other than match_any"));
    }
    if p.dup_host_policy.as_deref().is_some_and(|d| d != "allow") {
        return Err(unsupported("dup_host_policy other than allow"));
    }
    let mut state = app.state.lock().await;
    let (mut digests, mut groups) = current(&state.nvmf);
    if let Some(d) = &p.dhchap_digests {
        digests = parse_list(d, "dhchap_digests", hash_from_name)?;
    }
    if let Some(g) = &p.dhchap_dhgroups {
        groups = parse_list(g, "dhchap_dhgroups", DhGroup::from_name)?;
    }
    if let Some(t) = &state.nvmf.target {
        t.auth_policy().set(&digests, &groups);
    }
    tracing::info!(dhchap_digests = ?names(&digests), dhchap_dhgroups = ?groups.iter().map(|g| g.name()).collect::<Vec<_>>(), "NVMe-oF target configuration set");
    state.nvmf.dhchap = Some((digests, groups));
    Ok(json!(true))
}

fn names(digests: &[Hash]) -> Vec<&'static str> {
    digests.iter().map(|h| nvmf::auth::hash_name(*h)).collect()
}

/// The accepted hashes and groups.
fn current(nvmf: &NvmfState) -> (Vec<Hash>, Vec<DhGroup>) {
    nvmf.dhchap.clone().unwrap_or_else(|| {
        (
            vec![Hash::Sha256, Hash::Sha384, Hash::Sha512],
            DhGroup::ALL.to_vec(),
        )
    })
}

/// The `nvmf_set_config` call of a saved configuration, when one was made.
pub(crate) fn config_call(nvmf: &NvmfState) -> Option<Value> {
    nvmf.dhchap.as_ref()?;
    let (digests, groups) = current(nvmf);
    Some(json!({
        "method": "nvmf_set_config",
        "params": {
            "dhchap_digests": names(&digests),
            "dhchap_dhgroups": groups.iter().map(|g| g.name()).collect::<Vec<_>>(),
        }
    }))
}
