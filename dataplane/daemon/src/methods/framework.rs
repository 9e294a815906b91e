//! Framework methods: version, method list, configuration.

use serde::Deserialize;
use serde_json::{json, Value};

use super::params::{parse, NoParams};
use super::saved_config::{bdev_config, nvmf_section, snapshot};
use super::METHODS;
use crate::app::App;
use crate::rpc::error::{libc_errno, RpcError};

/// The SPDK release whose RPC names and parameters this daemon follows.
const SPDK_COMPAT: (u32, u32, u32) = (26, 9, 0);

pub(crate) fn spdk_get_version(params: Option<Value>) -> Result<Value, RpcError> {
    parse::<NoParams>(params)?;
    let (major, minor, patch) = SPDK_COMPAT;
    Ok(json!({
        "version": format!("rackcache-dataplane {} (SPDK v{major}.{minor} RPC compatible)", env!("CARGO_PKG_VERSION")),
        "fields": { "major": major, "minor": minor, "patch": patch, "suffix": "-rackcache" }
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetMethods {
    // Every method is callable in every state here and none has aliases, so
    // these flags change nothing; they are still validated.
    #[serde(default, rename = "current")]
    _current: bool,
    #[serde(default, rename = "include_aliases")]
    _include_aliases: bool,
}

pub(crate) fn rpc_get_methods(params: Option<Value>) -> Result<Value, RpcError> {
    parse::<GetMethods>(params)?;
    Ok(json!(METHODS))
}

/// The subsystems `save_config` covers, with their dependencies (SPDK's
/// `framework_get_subsystems`; its Python `save_config` walks this list).
pub(crate) fn framework_get_subsystems(params: Option<Value>) -> Result<Value, RpcError> {
    parse::<NoParams>(params)?;
    Ok(json!([
        { "subsystem": "bdev", "depends_on": [] },
        { "subsystem": "nvmf", "depends_on": ["bdev"] }
    ]))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetConfig {
    name: String,
    // Batching only changes how SPDK's client replays the calls.
    #[serde(default, rename = "with_batches")]
    _with_batches: bool,
}

pub(crate) async fn framework_get_config(
    app: &App,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let GetConfig { name, .. } = parse(params)?;
    match name.as_str() {
        "bdev" => Ok(bdev_config(&*app.state.lock().await)),
        "nvmf" => Ok(nvmf_section(&*app.state.lock().await)),
        _ => Err(RpcError::errno(
            libc_errno::ENOENT,
            format!("subsystem {name}"),
        )),
    }
}

pub(crate) async fn save_config(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    parse::<NoParams>(params)?;
    // One lock for both sections: see `snapshot`.
    Ok(snapshot(&*app.state.lock().await))
}
