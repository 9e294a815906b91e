//! Configuration calls that failed at start (`--config-persist`,
//! `--config`): the daemon serves everything else, keeps these (in the
//! persisted file too, so a later start tries them again), and reports
//! them: `rackcache_get_config_errors`, the `rackcache_config_errors`
//! gauge on /metrics. `rackcache_retry_config_errors` tries them again
//! now; `rackcache_drop_config_error` forgets one (an object its owner
//! deleted while this server was away).

use serde::Deserialize;
use serde_json::{json, Value};

use super::params::NoParams;
use crate::app::App;
use crate::config::{summarize, FailedCall};
use crate::rpc::error::{libc_errno, RpcError};
use crate::rpc::server::Dispatch;

/// `rackcache_get_config_errors`: every kept call, its parameters
/// summarized (no secrets) and its last error.
pub(crate) async fn get(app: &App, _: NoParams) -> Result<Value, RpcError> {
    let state = app.state.lock().await;
    Ok(Value::Array(
        state
            .config_errors
            .calls()
            .iter()
            .map(|(id, c)| {
                json!({
                    "id": id,
                    "subsystem": c.subsystem,
                    "method": c.method,
                    "object": object(&c.params),
                    "params": c.params.as_ref().map(summarize).unwrap_or_default(),
                    "code": c.code,
                    "message": c.message,
                })
            })
            .collect(),
    ))
}

/// `rackcache_retry_config_errors`: tries every kept call again, in order;
/// those that succeed (or find their object there already) are forgotten.
pub(crate) async fn retry(app: &App, _: NoParams) -> Result<Value, RpcError> {
    let calls: Vec<(u64, FailedCall)> = app.state.lock().await.config_errors.calls().to_vec();
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for (id, c) in &calls {
        match app.dispatch(&c.method, c.params.clone()).await {
            Ok(_) => done.push(*id),
            Err(e) if e.code() == -libc_errno::EEXIST => done.push(*id),
            Err(e) => failed.push((*id, e)),
        }
    }
    let mut state = app.state.lock().await;
    let kept = &mut state.config_errors;
    for id in &done {
        kept.remove(*id);
    }
    for (id, e) in &failed {
        kept.failed_again(*id, e.code(), &e.message);
    }
    tracing::info!(
        retried = calls.len(),
        succeeded = done.len(),
        failing = failed.len(),
        "configuration errors retried"
    );
    Ok(json!({ "retried": calls.len(), "succeeded": done.len(), "failing": failed.len() }))
}

/// `rackcache_drop_config_error`'s parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DropError {
    /// The id `rackcache_get_config_errors` shows.
    pub id: u64,
}

/// `rackcache_drop_config_error`: forgets one kept call (it is no longer
/// in the persisted file either).
pub(crate) async fn drop_one(app: &App, DropError { id }: DropError) -> Result<Value, RpcError> {
    let mut state = app.state.lock().await;
    let Some(c) = state.config_errors.remove(id) else {
        return Err(RpcError::errno(
            libc_errno::ENOENT,
            format!("no configuration error {id} (see rackcache_get_config_errors)"),
        ));
    };
    tracing::warn!(id, call = %c.line(), "configuration error dropped: the call is forgotten");
    Ok(json!(true))
}

/// The object a call makes or changes: its `name` (bdevs, clusters,
/// keys), else its `nqn` (subsystems and what they hold); "" if neither.
fn object(params: &Option<Value>) -> &str {
    let p = params.as_ref();
    ["name", "nqn"]
        .iter()
        .find_map(|k| p.and_then(|p| p[*k].as_str()))
        .unwrap_or_default()
}
