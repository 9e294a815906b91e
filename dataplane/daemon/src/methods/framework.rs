//! Framework methods: version and configuration (the method list is
//! the table's own, in `table.rs`).

use serde::Deserialize;
use serde_json::{json, Value};

use super::params::NoParams;
use super::saved_config::{bdev_config, nvmf_section, snapshot};
use crate::app::App;
use crate::rpc::error::{libc_errno, RpcError};

/// The SPDK release whose RPC names and parameters this daemon follows.
const SPDK_COMPAT: (u32, u32, u32) = (26, 9, 0);

pub(crate) async fn spdk_get_version(_app: &App, _: NoParams) -> Result<Value, RpcError> {
    let (major, minor, patch) = SPDK_COMPAT;
    Ok(json!({
        "version": format!("rackcache-dataplane {} (SPDK v{major}.{minor} RPC compatible)", env!("CARGO_PKG_VERSION")),
        "fields": { "major": major, "minor": minor, "patch": patch, "suffix": "-rackcache" }
    }))
}

/// `rackcache_get_addresses`: the server's interface addresses, for a
/// control plane that serves the data path on a chosen interface or
/// network (a CachePool's `dataPath.interface` or `dataPath.network`).
/// Loopback addresses are listed too (tests and single-node setups).
pub(crate) async fn rackcache_get_addresses(_app: &App, _: NoParams) -> Result<Value, RpcError> {
    let ifaces = if_addrs::get_if_addrs().map_err(|e| {
        RpcError::new(
            crate::rpc::error::ErrorKind::Internal,
            format!("list the interface addresses: {e}"),
        )
    })?;
    Ok(Value::Array(
        ifaces
            .into_iter()
            .map(|i| {
                json!({
                    "interface": i.name,
                    "address": i.ip().to_string(),
                    "up": i.is_oper_up(),
                })
            })
            .collect(),
    ))
}

/// The subsystems `save_config` covers, with their dependencies (SPDK's
/// `framework_get_subsystems`; its Python `save_config` walks this list).
pub(crate) async fn framework_get_subsystems(_app: &App, _: NoParams) -> Result<Value, RpcError> {
    Ok(json!([
        { "subsystem": "keyring", "depends_on": [] },
        { "subsystem": "bdev", "depends_on": [] },
        { "subsystem": "nvmf", "depends_on": ["bdev", "keyring"] }
    ]))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetConfig {
    name: String,
    // Batching only changes how SPDK's client replays the calls.
    #[serde(default, rename = "with_batches")]
    _with_batches: bool,
}

pub(crate) async fn framework_get_config(
    app: &App,
    GetConfig { name, .. }: GetConfig,
) -> Result<Value, RpcError> {
    match name.as_str() {
        "keyring" => Ok(super::keyring::config(&app.state.lock().await.keyring)),
        "bdev" => Ok(bdev_config(&*app.state.lock().await)),
        "nvmf" => Ok(nvmf_section(&*app.state.lock().await)),
        _ => Err(RpcError::errno(
            libc_errno::ENOENT,
            format!("subsystem {name}"),
        )),
    }
}

pub(crate) async fn save_config(app: &App, _: NoParams) -> Result<Value, RpcError> {
    // One lock for both sections: see `snapshot`.
    Ok(snapshot(&*app.state.lock().await))
}
