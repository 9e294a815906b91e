//! Namespaces: `nvmf_subsystem_add_ns` (claiming the bdev) and
//! `nvmf_subsystem_remove_ns`.

use serde::Deserialize;
use serde_json::{json, Value};

use super::target::{check_tgt_name, subsystem, unsupported};
use crate::app::App;
use crate::rpc::error::RpcError;

/// SPDK's `namespace` object.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NamespaceParams {
    bdev_name: String,
    nsid: Option<u32>,
    nguid: Option<String>,
    uuid: Option<String>,
    eui64: Option<String>,
    ptpl_file: Option<String>,
    anagrpid: Option<u32>,
    #[serde(default)]
    no_auto_visible: bool,
    #[serde(default)]
    hide_metadata: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddNs {
    nqn: String,
    namespace: NamespaceParams,
    tgt_name: Option<String>,
}

/// 32 hex digits (SPDK's NGUID string), big-endian.
pub(crate) fn parse_nguid(s: &str) -> Result<[u8; 16], RpcError> {
    let bad = || RpcError::invalid_params(format!("nguid {s:?} must be 32 hexadecimal digits"));
    if s.len() != 32 {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// An RFC 4122 UUID string (8-4-4-4-12 hex digits).
pub(crate) fn parse_uuid(s: &str) -> Result<[u8; 16], RpcError> {
    let bad = || RpcError::invalid_params(format!("uuid {s:?} is not an RFC 4122 UUID"));
    let groups: Vec<&str> = s.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lens != [8, 4, 4, 4, 12] {
        return Err(bad());
    }
    parse_nguid(&groups.concat()).map_err(|_| bad())
}

pub(crate) async fn add_ns(app: &App, p: AddNs) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let ns = p.namespace;
    for (set, what) in [
        (ns.eui64.is_some(), "eui64"),
        (
            ns.ptpl_file.is_some(),
            "ptpl_file (persistent reservations)",
        ),
        (ns.no_auto_visible, "no_auto_visible"),
        (ns.hide_metadata, "hide_metadata"),
    ] {
        if set {
            return Err(unsupported(what));
        }
    }
    let nguid = ns.nguid.as_deref().map(parse_nguid).transpose()?;
    let uuid = ns.uuid.as_deref().map(parse_uuid).transpose()?;
    let state = app.state.lock().await;
    let sub = subsystem(&state.nvmf, &p.nqn)?;
    let Some((_, bdev)) = state.bdevs.get(&ns.bdev_name) else {
        return Err(RpcError::invalid_params(format!(
            "bdev {} not found",
            ns.bdev_name
        )));
    };
    if let Some(user) = state.wrapper_of(&ns.bdev_name) {
        return Err(RpcError::invalid_params(format!(
            "bdev {} is already claimed by bdev {user}",
            ns.bdev_name
        )));
    }
    // A cached bdev may be in several namespaces (a mirror's volume is in
    // its hosts' subsystem and in the replication subsystem its owner
    // writes to): every request goes through the volume's owner task,
    // which orders them. Any other bdev is one namespace's.
    let shared = crate::cached_volumes::as_volume(&bdev.bdev).is_some();
    if let Some((nqn, nsid)) = state
        .nvmf
        .claims(&ns.bdev_name)
        .into_iter()
        .find(|_| !shared)
    {
        return Err(RpcError::invalid_params(format!(
            "bdev {} is already claimed by namespace {nsid} of subsystem {nqn}",
            ns.bdev_name
        )));
    }
    // SPDK's 0 is "the nsid", as no anagrpid.
    let group = ns.anagrpid.filter(|&g| g != 0);
    let nsid = sub.add_namespace_in_group(ns.nsid, bdev.counted(), nguid, uuid, group)?;
    tracing::info!(subnqn = %p.nqn, nsid, bdev = %ns.bdev_name, "NVMe-oF namespace added");
    Ok(json!(nsid))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RemoveNs {
    nqn: String,
    nsid: u32,
    tgt_name: Option<String>,
}

pub(crate) async fn remove_ns(app: &App, p: RemoveNs) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let state = app.state.lock().await;
    let ns = subsystem(&state.nvmf, &p.nqn)?.remove_namespace(p.nsid)?;
    tracing::info!(subnqn = %p.nqn, nsid = p.nsid, bdev = %ns.bdev_name, "NVMe-oF namespace removed");
    Ok(json!(true))
}

#[cfg(test)]
mod tests {
    use super::super::json::hex_upper;
    use super::*;
    use crate::methods::registry::uuid_string;

    #[test]
    fn identifiers_parse_as_spdk_writes_them() {
        let g = parse_nguid("000102030405060708090A0B0C0D0E0F").unwrap();
        assert_eq!(g[0], 0);
        assert_eq!(g[15], 15);
        assert_eq!(hex_upper(&g), "000102030405060708090A0B0C0D0E0F");
        assert!(parse_nguid("0001").is_err());
        assert!(parse_nguid("zz0102030405060708090A0B0C0D0E0F").is_err());
        let u = parse_uuid("ceccf520-691e-4b46-9546-34af789907c5").unwrap();
        assert_eq!(uuid_string(&u), "ceccf520-691e-4b46-9546-34af789907c5");
        assert!(parse_uuid("ceccf520691e4b46954634af789907c5").is_err());
        assert!(parse_uuid("ceccf520-691e-4b46-9546-34af789907cx").is_err());
    }
}
