//! Registered Ceph cluster connections as the control plane needs them for
//! fencing (docs/dataplane.md, "Fencing another server's Ceph client"):
//! what each connection is (`bdev_rbd_get_clusters_info`, with the client
//! address Ceph knows it by) and blocklisting another server's connection
//! through one of ours (`bdev_rbd_blocklist_add`), before a mirror takes
//! a volume over from a server it can no longer reach.

use std::sync::Arc;

use bdev::rbd::{CephClientAddr, RbdCluster, MAX_BLOCKLIST_SECONDS};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::app::{App, RegisteredCluster};
use crate::rpc::error::{libc_errno, RpcError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetClustersInfo {
    name: Option<String>,
}

/// SPDK's entry (`cluster_name`, `user_id`, `config_param`, `config_file`,
/// `key_file`) without the cephx key, plus the connection's
/// `client_address` (null when librados cannot tell it).
fn entry(name: &str, c: &RegisteredCluster) -> Value {
    let mut e = json!({ "cluster_name": name });
    for k in ["user_id", "config_file", "key_file"] {
        if let Some(v) = c.params.get(k) {
            e[k] = v.clone();
        }
    }
    if let Some(Value::Object(cp)) = c.params.get("config_param") {
        let shown: serde_json::Map<String, Value> = cp
            .iter()
            .filter(|(k, _)| k.as_str() != "key")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        e["config_param"] = Value::Object(shown);
    }
    e["client_address"] = match c.cluster.client_address() {
        Ok(a) => json!(a),
        Err(err) => {
            tracing::warn!(cluster = %name, error = %err, "client address unknown");
            Value::Null
        }
    };
    e
}

/// SPDK's `bdev_rbd_get_clusters_info`: the cluster named (an object), or
/// every cluster (an array; empty when there is none, where SPDK answers
/// ENOENT).
pub(crate) async fn get_clusters_info(app: &App, p: GetClustersInfo) -> Result<Value, RpcError> {
    let state = app.state.lock().await;
    match p.name {
        Some(name) => {
            let (_, c) = state.clusters.get(&name).ok_or_else(|| {
                RpcError::errno(libc_errno::ENOENT, format!("no cluster named {name}"))
            })?;
            Ok(entry(&name, c))
        }
        None => Ok(Value::Array(
            state
                .clusters
                .iter()
                .map(|(n, (_, c))| entry(n, c))
                .collect(),
        )),
    }
}

/// Default blocklisting: an hour, Ceph's own default, long past any
/// takeover; the fenced server reconnects as a new client anyway.
const DEFAULT_EXPIRE_SECONDS: u32 = 3600;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BlocklistAdd {
    cluster_name: String,
    client_address: String,
    #[serde(default = "default_expire")]
    expire_seconds: u32,
}

fn default_expire() -> u32 {
    DEFAULT_EXPIRE_SECONDS
}

/// `bdev_rbd_blocklist_add`: blocklists another Ceph client (another
/// server's connection, as its `bdev_rbd_get_clusters_info` reported it)
/// through registered cluster `cluster_name`. When it returns, no OSD
/// serving this server after it will apply anything that client sends.
/// Refused, changing nothing: an address naming no single client
/// instance, an expiry outside 1 to a year, an unknown cluster, and any
/// connection of this server itself.
pub(crate) async fn blocklist_add(app: &App, p: BlocklistAdd) -> Result<Value, RpcError> {
    let addr = CephClientAddr::parse(&p.client_address).map_err(RpcError::invalid_params)?;
    if !(1..=MAX_BLOCKLIST_SECONDS).contains(&p.expire_seconds) {
        return Err(RpcError::invalid_params(format!(
            "expire_seconds {} outside 1..={MAX_BLOCKLIST_SECONDS}",
            p.expire_seconds
        )));
    }
    let cluster: Arc<RbdCluster> = {
        let state = app.state.lock().await;
        let (_, c) = state.clusters.get(&p.cluster_name).ok_or_else(|| {
            RpcError::errno(
                libc_errno::ENOENT,
                format!("no cluster named {}", p.cluster_name),
            )
        })?;
        if let Some(own) = state.clusters.iter().find(|(_, (_, c))| {
            c.cluster
                .client_address()
                .ok()
                .and_then(|a| CephClientAddr::parse(&a).ok())
                .is_some_and(|a| a.same_client(&addr))
        }) {
            return Err(RpcError::invalid_params(format!(
                "{addr} is this server's own connection (cluster {}): a server cannot fence itself",
                own.0
            )));
        }
        Arc::clone(&c.cluster)
    };
    // A monitor command (seconds when the monitors are busy): off the
    // async threads, and without the control lock.
    let expire = p.expire_seconds;
    tokio::task::spawn_blocking(move || cluster.blocklist_add(&addr, expire))
        .await
        .map_err(|e| RpcError::errno(libc_errno::EIO, format!("blocklist {addr}: {e}")))??;
    tracing::warn!(cluster = %p.cluster_name, client_address = %addr, expire_seconds = expire,
        "Ceph client blocklisted (fenced)");
    Ok(json!(true))
}
