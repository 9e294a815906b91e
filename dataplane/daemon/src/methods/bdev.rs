//! bdev methods: create, delete and inspect malloc, aio and rbd bdevs, and
//! register Ceph clusters.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use bdev::file::FileBdev;
use bdev::malloc::MallocBdev;
use bdev::rbd::{ClusterConfig, RbdBdev, RbdCluster};
use bdev::Bdev;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::registry::{check_name, exists, register};
use crate::app::{App, IoStats, RegisteredCluster, State};
use crate::rpc::error::{libc_errno, RpcError};

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MallocCreate {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    num_blocks: u64,
    block_size: u32,
    // SPDK's rpc.py always sends these two; metadata is not supported, so
    // only their "off" value is accepted.
    #[serde(default, skip_serializing)]
    md_interleave: bool,
    #[serde(default, skip_serializing)]
    dif_is_head_of_md: bool,
}

/// A malloc bdev's memory is taken as it is written, so a size past what
/// the machine has would be accepted and kill the daemon later: refused
/// unless it fits in the memory available now, less what the daemon's
/// other malloc bdevs may still take.
fn check_memory(state: &State, name: &str, blocks: u64, block_size: u32) -> Result<(), RpcError> {
    // A size that overflows is refused by MallocBdev::new.
    let (Some(size), Some(available)) = (
        blocks.checked_mul(u64::from(block_size)),
        bdev::malloc::memory_available(),
    ) else {
        return Ok(());
    };
    let held: u64 = state
        .bdevs
        .values()
        .map(|(_, b)| b)
        .filter(|b| matches!(b.bdev.as_ref(), Bdev::Malloc(_)))
        .map(|b| b.bdev.info().size_bytes())
        .sum();
    if size > available.saturating_sub(held) {
        return Err(RpcError::errno(
            libc_errno::ENOMEM,
            format!(
                "malloc bdev {name} of {size} bytes: {available} bytes of memory are available (MemAvailable), {held} of them set aside for the other malloc bdevs"
            ),
        ));
    }
    Ok(())
}

pub(crate) async fn malloc_create(app: &App, mut p: MallocCreate) -> Result<Value, RpcError> {
    if p.md_interleave || p.dif_is_head_of_md {
        return Err(RpcError::invalid_params(
            "metadata (md_interleave, dif_is_head_of_md) is not supported",
        ));
    }
    let mut state = app.state.lock().await;
    let name = p
        .name
        .clone()
        .unwrap_or_else(|| state.default_name("Malloc"));
    check_name(&name)?;
    exists(&state, &name)?;
    check_memory(&state, &name, p.num_blocks, p.block_size)?;
    let b = MallocBdev::new(&name, p.num_blocks, p.block_size)?;
    p.name = Some(name.clone());
    register(
        app,
        &mut state,
        name.clone(),
        Bdev::Malloc(b),
        "bdev_malloc_create",
        json!(p),
        None,
    );
    tracing::info!(bdev = %name, "malloc bdev created");
    Ok(json!(name))
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// SPDK's `bdev_aio_create`, with every parameter its stock client sends.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AioCreate {
    name: String,
    filename: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    block_size: Option<u32>,
    /// Opened O_RDONLY; writes, Write Zeroes and deallocate are refused.
    #[serde(default, skip_serializing_if = "is_false")]
    readonly: bool,
    /// SPDK: serve unmap and Write Zeroes with fallocate. Ours always does
    /// (falling back to written zeroes), so both values mean the same.
    #[serde(default, skip_serializing_if = "is_false")]
    fallocate: bool,
    /// SPDK: submit with RWF_NOWAIT. Ours never blocks the I/O threads
    /// either way (io_uring, or the blocking pool), so it changes nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    nowait: bool,
    /// The bdev's UUID instead of the one derived from its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uuid: Option<String>,
}

pub(crate) async fn aio_create(app: &App, p: AioCreate) -> Result<Value, RpcError> {
    check_name(&p.name)?;
    let uuid = p
        .uuid
        .as_deref()
        .map(|u| {
            uuid::Uuid::parse_str(u)
                .map(|u| u.into_bytes())
                .map_err(|e| RpcError::invalid_params(format!("uuid {u:?}: {e}")))
        })
        .transpose()?;
    let mut state = app.state.lock().await;
    exists(&state, &p.name)?;
    let mut b = FileBdev::open_with(&p.name, &p.filename, p.block_size.unwrap_or(0), p.readonly)?;
    if let Some(u) = uuid {
        b.set_uuid(u);
    }
    tracing::info!(
        bdev = %p.name,
        file = %p.filename.display(),
        direct = b.direct(),
        readonly = p.readonly,
        "aio bdev created"
    );
    let name = p.name.clone();
    register(
        app,
        &mut state,
        name.clone(),
        Bdev::File(b),
        "bdev_aio_create",
        json!(p),
        None,
    );
    Ok(json!(name))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ByName {
    name: String,
}

/// Deletes a bdev of the given product (as each SPDK module's delete call
/// only deletes its own kind).
pub(crate) async fn delete(
    app: &App,
    ByName { name }: ByName,
    product: &str,
) -> Result<Value, RpcError> {
    let mut state = app.state.lock().await;
    match state.bdevs.get(&name) {
        Some((_, b)) if b.bdev.info().product_name == product => {}
        _ => {
            return Err(RpcError::errno(
                libc_errno::ENODEV,
                format!("no {product} bdev named {name}"),
            ))
        }
    }
    if let Some(user) = state.wrapper_of(&name) {
        return Err(RpcError::errno(
            libc_errno::EBUSY,
            format!("bdev {name} is claimed by bdev {user}; delete that first"),
        ));
    }
    if let Some((nqn, nsid)) = state.nvmf.claims(&name).into_iter().next() {
        return Err(RpcError::errno(
            libc_errno::EBUSY,
            format!("bdev {name} is claimed by namespace {nsid} of NVMe-oF subsystem {nqn}; remove the namespace first (nvmf_subsystem_remove_ns)"),
        ));
    }
    let removed = state.bdevs.remove(&name);
    // A cache device on it goes with it (no cached bdev uses it: they
    // claim it); recreated, the bdev is opened afresh.
    state.caches.remove(&name);
    IoStats::unregister(&app.metrics, &name);
    drop(state);
    // An rbd image is closed before the call returns (as SPDK does), so that
    // the caller may remove the image at once; librbd's blocking close runs
    // on a thread of its own, not on this one. When another handle still
    // holds the bdev, it closes when that handle goes.
    if let Some((_, reg)) = removed {
        if let Some(Bdev::Rbd(rbd)) = Arc::try_unwrap(reg)
            .ok()
            .and_then(|r| Arc::try_unwrap(r.bdev).ok())
        {
            rbd.close().await;
        }
    }
    tracing::info!(bdev = %name, "bdev deleted");
    Ok(json!(true))
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RegisterCluster {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    config_param: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    config_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_file: Option<String>,
}

/// The `config_param` keys this daemon understands.
const CLUSTER_PARAMS: [&str; 3] = ["mon_host", "key", "keyring"];

pub(crate) async fn rbd_register_cluster(app: &App, p: RegisterCluster) -> Result<Value, RpcError> {
    check_name(&p.name)?;
    let cp = p.config_param.clone().unwrap_or_default();
    if let Some(k) = cp.keys().find(|k| !CLUSTER_PARAMS.contains(&k.as_str())) {
        return Err(RpcError::invalid_params(format!(
            "config_param {k} is not supported (supported: {})",
            CLUSTER_PARAMS.join(", ")
        )));
    }
    let key = cp.get("key").cloned();
    // A registration without a key of its own takes --ceph-keyring's; the
    // saved parameters stay as given, so no key is ever written with them.
    let keyring = p
        .key_file
        .clone()
        .or_else(|| cp.get("keyring").cloned())
        .or_else(|| match key {
            None => app.ceph_keyring.as_ref().map(|f| f.display().to_string()),
            Some(_) => None,
        });
    let cfg = ClusterConfig {
        user: p.user_id.clone().unwrap_or_else(|| "admin".into()),
        mon_host: cp.get("mon_host").cloned(),
        key,
        config_file: p.config_file.clone(),
        keyring,
    };
    let mut state = app.state.lock().await;
    if state.clusters.contains_key(&p.name) {
        return Err(RpcError::errno(
            libc_errno::EEXIST,
            format!("cluster {} already registered", p.name),
        ));
    }
    // Connecting can take seconds; holding the control lock meanwhile keeps
    // two registrations of one name from racing, and control calls are rare.
    let cluster = RbdCluster::connect(&p.name, &cfg)?;
    tracing::info!(cluster = %p.name, user = %cfg.user, "ceph cluster registered");
    let seq = state.seq();
    let name = p.name.clone();
    state.clusters.insert(
        name.clone(),
        (
            seq,
            RegisteredCluster {
                cluster,
                params: json!(p),
            },
        ),
    );
    Ok(json!(name))
}

pub(crate) async fn rbd_unregister_cluster(
    app: &App,
    ByName { name }: ByName,
) -> Result<Value, RpcError> {
    let mut state = app.state.lock().await;
    if !state.clusters.contains_key(&name) {
        return Err(RpcError::errno(
            libc_errno::ENOENT,
            format!("no cluster named {name}"),
        ));
    }
    if let Some((user, _)) = state
        .bdevs
        .iter()
        .find(|(_, (_, b))| b.cluster.as_deref() == Some(&name))
    {
        return Err(RpcError::errno(
            libc_errno::EBUSY,
            format!("cluster {name} is used by bdev {user}"),
        ));
    }
    state.clusters.remove(&name);
    Ok(json!(true))
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RbdCreate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    pool_name: String,
    rbd_name: String,
    block_size: u32,
    cluster_name: Option<String>,
    // SPDK's rpc.py always sends it; read-only bdevs are not supported.
    #[serde(default, skip_serializing)]
    read_only: bool,
}

pub(crate) async fn rbd_create(app: &App, mut p: RbdCreate) -> Result<Value, RpcError> {
    if p.read_only {
        return Err(RpcError::invalid_params(
            "read_only rbd bdevs are not supported",
        ));
    }
    let Some(cluster_name) = p.cluster_name.clone() else {
        return Err(RpcError::invalid_params(
            "cluster_name is required: register the cluster first with bdev_rbd_register_cluster",
        ));
    };
    let mut state = app.state.lock().await;
    let name = p.name.clone().unwrap_or_else(|| state.default_name("Ceph"));
    check_name(&name)?;
    exists(&state, &name)?;
    let Some((_, cluster)) = state.clusters.get(&cluster_name) else {
        return Err(RpcError::errno(
            libc_errno::ENOENT,
            format!("no cluster named {cluster_name}"),
        ));
    };
    let b = RbdBdev::open(
        &name,
        Arc::clone(&cluster.cluster),
        &p.pool_name,
        &p.rbd_name,
        p.block_size,
    )?;
    tracing::info!(bdev = %name, pool = %p.pool_name, image = %p.rbd_name, "rbd bdev created");
    p.name = Some(name.clone());
    register(
        app,
        &mut state,
        name.clone(),
        Bdev::Rbd(b),
        "bdev_rbd_create",
        json!(p),
        Some(cluster_name),
    );
    Ok(json!(name))
}
