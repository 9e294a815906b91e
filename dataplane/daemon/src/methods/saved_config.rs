//! The saved configuration: the calls that recreate the state, section by
//! section (SPDK's `save_config` document), and `--config-persist`'s
//! rewrite of it after a change.

use serde_json::{json, Value};

use super::nvmf::config::config as nvmf_config;
use crate::app::{App, State};

/// The bdev subsystem's configuration: the calls that recreate every Ceph
/// cluster and bdev, clusters first, each kind in creation order.
pub(crate) fn bdev_config(state: &State) -> Value {
    let mut clusters: Vec<_> = state.clusters.values().collect();
    clusters.sort_by_key(|(seq, _)| *seq);
    let mut bdevs: Vec<_> = state.bdevs.values().collect();
    bdevs.sort_by_key(|(seq, _)| *seq);
    let mut out: Vec<Value> = clusters
        .iter()
        .map(|(_, c)| json!({ "method": "bdev_rbd_register_cluster", "params": c.params }))
        .collect();
    out.extend(
        bdevs
            .iter()
            .map(|(_, b)| b.config_call())
            .map(|(method, params)| json!({ "method": method, "params": params })),
    );
    Value::Array(out)
}

/// The nvmf subsystem's configuration, without the hosts whose keys the
/// keyring section does not save.
pub(crate) fn nvmf_section(state: &State) -> Value {
    Value::Array(nvmf_config(&state.nvmf, |name| {
        super::keyring::saved(&state.keyring, name)
    }))
}

/// The whole configuration (`save_config`'s answer, `--config-persist`'s
/// file) from one view of the state, so the nvmf section never names a
/// bdev the bdev section lacks.
pub(crate) fn snapshot(state: &State) -> Value {
    json!({ "subsystems": [
        { "subsystem": "keyring", "config": super::keyring::config(&state.keyring) },
        { "subsystem": "bdev", "config": bdev_config(state) },
        { "subsystem": "nvmf", "config": nvmf_section(state) }
    ] })
}

/// What `--config-persist` writes: [`snapshot`], plus the calls that failed
/// at start, at the end of their sections (after everything they may
/// depend on), so the next start tries them again.
pub(crate) fn persisted(state: &State) -> Value {
    let mut doc = snapshot(state);
    if state.config_errors.is_empty() {
        return doc;
    }
    for section in doc["subsystems"].as_array_mut().into_iter().flatten() {
        let name = section["subsystem"].as_str().unwrap_or_default().to_owned();
        if let Some(calls) = section["config"].as_array_mut() {
            calls.extend(state.config_errors.entries(&name));
        }
    }
    doc
}

/// Rewrites the persisted configuration (if `--config-persist` is set) from
/// one snapshot of the state. A failure is logged: the change it follows
/// has been made and is reported to its caller as made.
pub async fn persist(app: &App) {
    if let Err(e) = try_persist(app).await {
        tracing::error!(error = %e, "--config-persist: rewriting the configuration failed");
    }
}

/// [`persist`], returning the error.
pub async fn try_persist(app: &App) -> Result<(), String> {
    let Some(p) = app.persist.get() else {
        return Ok(());
    };
    p.rewrite(async { persisted(&*app.state.lock().await) })
        .await
}
