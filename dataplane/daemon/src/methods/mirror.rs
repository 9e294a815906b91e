//! Mirrored write-back: `bdev_adacache_set_role` makes a cached volume
//! owner or mirror; `bdev_adacache_set_mirror` connects an owner to its
//! mirror's replication subsystem (or drops it). See
//! `cache::volume::replica` and docs/dataplane.md.

use std::sync::Arc;

use bdev::layered::LayeredBdev;
use cache::volume::replica::{Replica, Role};
use nvmf_host::auth::DhchapKeys;
use serde::Deserialize;
use serde_json::{json, Value};

use super::adacache::{volume, volume_error};
use super::keyring::dhchap_secret;
use crate::app::App;
use crate::mirror::{MirrorTarget, NvmfReplica};
use crate::rpc::error::{ErrorKind, RpcError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetRole {
    name: String,
    role: Role,
    /// The control plane's epoch of the volume; an older one than the
    /// volume has is refused.
    #[serde(default)]
    epoch: Option<u64>,
}

pub(crate) async fn set_role(
    app: &App,
    SetRole { name, role, epoch }: SetRole,
) -> Result<Value, RpcError> {
    let state = app.state.lock().await;
    let v = volume(&state, &name)?;
    v.set_role(role, epoch)
        .await
        .map_err(|e| volume_error(&format!("making {name} {}", role.name()), e))?;
    Ok(json!(true))
}

/// Where the mirror's replication subsystem listens, and how to log in.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MirrorParams {
    traddr: String,
    trsvcid: String,
    subnqn: String,
    hostnqn: String,
    #[serde(default = "first_namespace")]
    nsid: u32,
    /// Keyring key names (never secrets), as `nvmf_subsystem_add_host`'s.
    #[serde(default)]
    dhchap_key: Option<String>,
    #[serde(default)]
    dhchap_ctrlr_key: Option<String>,
}

fn first_namespace() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetMirror {
    name: String,
    /// `null` or absent: drop the mirror.
    #[serde(default)]
    mirror: Option<MirrorParams>,
}

pub(crate) async fn set_mirror(
    app: &App,
    SetMirror { name, mirror }: SetMirror,
) -> Result<Value, RpcError> {
    let (v, keys) = {
        let state = app.state.lock().await;
        let v = volume(&state, &name)?;
        let keys = match mirror.as_ref().and_then(|m| m.dhchap_key.as_deref()) {
            None => None,
            Some(k) => Some(DhchapKeys {
                host: dhchap_secret(&state.keyring, k)?,
                ctrlr: match mirror.as_ref().and_then(|m| m.dhchap_ctrlr_key.as_deref()) {
                    Some(c) => Some(dhchap_secret(&state.keyring, c)?),
                    None => None,
                },
            }),
        };
        (v, keys)
    };
    let replica: Option<Arc<dyn Replica>> = match mirror {
        None => None,
        Some(m) => {
            if m.nsid == 0 {
                return Err(RpcError::invalid_params("nsid must be 1 or more"));
            }
            let host = match m.traddr.contains(':') {
                true => format!("[{}]", m.traddr),
                false => m.traddr.clone(),
            };
            let target = MirrorTarget {
                addr: format!("{host}:{}", m.trsvcid),
                subnqn: m.subnqn,
                hostnqn: m.hostnqn,
                nsid: m.nsid,
            };
            let info = v.info();
            let (size, block) = (info.size_bytes(), info.block_size);
            let r = tokio::task::spawn_blocking(move || {
                NvmfReplica::connect(target, keys, size, block)
            })
            .await
            .map_err(|e| {
                RpcError::new(
                    ErrorKind::Internal,
                    format!("connecting to the mirror: {e}"),
                )
            })?
            .map_err(RpcError::invalid_params)?;
            Some(Arc::new(r.start()))
        }
    };
    v.set_replica(replica)
        .await
        .map_err(|e| volume_error(&format!("setting the mirror of {name}"), e))?;
    Ok(json!(true))
}
