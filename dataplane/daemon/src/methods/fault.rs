//! Fault-injection bdevs with SPDK's methods and parameters: `delay`
//! (`bdev_delay_create`, `bdev_delay_update_latency`, `bdev_delay_delete`)
//! and `error` (`bdev_error_create`, `bdev_error_inject_error`,
//! `bdev_error_resume_pending`, `bdev_error_delete`). Each wraps a base bdev and claims it: the base can
//! be neither deleted nor exported while the wrapper exists. Both are saved
//! by `save_config` (a delay bdev with its current latencies); injected
//! errors are not, as in SPDK.

use std::sync::Arc;

use bdev::delay::{DelayBdev, Latencies, LatencyKind};
use bdev::error_inject::{ErrorBdev, ErrorType, IoTypeSel};
use bdev::Bdev;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::registry::{check_name, exists, register};
use crate::app::{App, RegisteredBdev, State};
use crate::rpc::error::{libc_errno, RpcError};

/// `driver_specific` of `bdev_get_bdevs` for the wrapper kinds.
pub(crate) fn driver_specific(b: &Bdev) -> Value {
    match b {
        Bdev::Delay(d) => {
            let l = d.latencies();
            json!({ "delay": {
                "base_bdev_name": d.base().info().name,
                "avg_read_latency": l.avg_read_us,
                "p99_read_latency": l.p99_read_us,
                "avg_write_latency": l.avg_write_us,
                "p99_write_latency": l.p99_write_us,
            }})
        }
        Bdev::Error(e) => json!({ "error": { "base_bdev_name": e.base().info().name } }),
        _ => json!({}),
    }
}

/// The base bdev `name`, which must exist and be unclaimed.
fn base(state: &State, name: &str) -> Result<Arc<RegisteredBdev>, RpcError> {
    let Some((_, b)) = state.bdevs.get(name) else {
        return Err(RpcError::errno(
            libc_errno::ENODEV,
            format!("base bdev {name} not found"),
        ));
    };
    if state.is_claimed(name) {
        return Err(RpcError::errno(
            libc_errno::EBUSY,
            format!("base bdev {name} is already claimed"),
        ));
    }
    Ok(b.clone())
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DelayCreate {
    base_bdev_name: String,
    name: String,
    avg_read_latency: u64,
    p99_read_latency: u64,
    avg_write_latency: u64,
    p99_write_latency: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uuid: Option<String>,
}

pub(crate) async fn delay_create(app: &App, p: DelayCreate) -> Result<Value, RpcError> {
    if p.uuid.is_some() {
        return Err(RpcError::invalid_params(
            "uuid is not supported (delay bdevs derive theirs from the name)",
        ));
    }
    check_name(&p.name)?;
    let mut state = app.state.lock().await;
    exists(&state, &p.name)?;
    let b = base(&state, &p.base_bdev_name)?;
    let lat = Latencies {
        avg_read_us: p.avg_read_latency,
        p99_read_us: p.p99_read_latency,
        avg_write_us: p.avg_write_latency,
        p99_write_us: p.p99_write_latency,
    };
    let d = DelayBdev::new(&p.name, b.counted(), lat)?;
    let name = p.name.clone();
    tracing::info!(bdev = %name, base = %p.base_bdev_name, "delay bdev created");
    register(
        app,
        &mut state,
        name.clone(),
        Bdev::Delay(d),
        "bdev_delay_create",
        json!(p),
        None,
    );
    Ok(json!(name))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateLatency {
    delay_bdev_name: String,
    latency_type: String,
    latency_us: u64,
}

pub(crate) async fn delay_update_latency(app: &App, p: UpdateLatency) -> Result<Value, RpcError> {
    let kind = LatencyKind::parse(&p.latency_type).ok_or_else(|| {
        RpcError::invalid_params(format!(
            "latency_type {:?} must be avg_read, p99_read, avg_write or p99_write",
            p.latency_type
        ))
    })?;
    let mut state = app.state.lock().await;
    let Some((seq, reg)) = state.bdevs.get(&p.delay_bdev_name).cloned() else {
        return Err(RpcError::errno(
            libc_errno::ENODEV,
            format!("no delay bdev named {}", p.delay_bdev_name),
        ));
    };
    let Bdev::Delay(d) = reg.bdev.as_ref() else {
        return Err(RpcError::errno(
            libc_errno::ENODEV,
            format!("{} is not a delay bdev", p.delay_bdev_name),
        ));
    };
    d.update(kind, p.latency_us)?;
    // save_config recreates the bdev with the latencies it has now.
    let l = d.latencies();
    let mut params = reg.created_by.1.clone();
    params["avg_read_latency"] = json!(l.avg_read_us);
    params["p99_read_latency"] = json!(l.p99_read_us);
    params["avg_write_latency"] = json!(l.avg_write_us);
    params["p99_write_latency"] = json!(l.p99_write_us);
    let updated = RegisteredBdev {
        bdev: reg.bdev.clone(),
        stats: reg.stats.clone(),
        created_by: (reg.created_by.0, params),
        cluster: None,
    };
    state
        .bdevs
        .insert(p.delay_bdev_name.clone(), (seq, Arc::new(updated)));
    tracing::info!(bdev = %p.delay_bdev_name, latency_type = %p.latency_type, us = p.latency_us, "delay bdev latency updated");
    Ok(json!(true))
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ErrorCreate {
    base_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uuid: Option<String>,
}

pub(crate) async fn error_create(app: &App, p: ErrorCreate) -> Result<Value, RpcError> {
    if p.uuid.is_some() {
        return Err(RpcError::invalid_params(
            "uuid is not supported (error bdevs derive theirs from the name)",
        ));
    }
    // SPDK's name for the error bdev over `base_name`.
    let name = format!("EE_{}", p.base_name);
    check_name(&name)?;
    let mut state = app.state.lock().await;
    exists(&state, &name)?;
    let b = base(&state, &p.base_name)?;
    let e = ErrorBdev::new(&name, b.counted());
    tracing::info!(bdev = %name, base = %p.base_name, "error bdev created");
    register(
        app,
        &mut state,
        name.clone(),
        Bdev::Error(e),
        "bdev_error_create",
        json!(p),
        None,
    );
    Ok(json!(name))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Inject {
    name: String,
    io_type: String,
    error_type: String,
    #[serde(default = "one")]
    num: u32,
    #[serde(default)]
    queue_depth: u64,
    #[serde(default)]
    corrupt_offset: u64,
    #[serde(default)]
    corrupt_value: u8,
    // Only for `nvme_failure`, which needs an NVMe bdev under it: refused.
    nvme_sct: Option<u8>,
    nvme_sc: Option<u8>,
}

fn one() -> u32 {
    1
}

pub(crate) async fn error_inject(app: &App, p: Inject) -> Result<Value, RpcError> {
    if p.queue_depth != 0 {
        return Err(RpcError::invalid_params(
            "queue_depth is not supported (errors apply to the next num I/Os)",
        ));
    }
    let err = match p.error_type.as_str() {
        "failure" => ErrorType::Failure,
        "nomem" => ErrorType::NoMem,
        "pending" => ErrorType::Pending,
        "corrupt_data" => ErrorType::CorruptData {
            offset: p.corrupt_offset,
            value: p.corrupt_value,
        },
        other => {
            return Err(RpcError::invalid_params(format!(
                "error_type {other:?} must be failure, pending, corrupt_data or nomem (nvme_failure is not supported)"
            )))
        }
    };
    if p.nvme_sct.is_some() || p.nvme_sc.is_some() {
        return Err(RpcError::invalid_params(
            "nvme_sct and nvme_sc apply only to nvme_failure, which is not supported",
        ));
    }
    let state = app.state.lock().await;
    let Some(Bdev::Error(e)) = state.bdevs.get(&p.name).map(|(_, r)| r.bdev.as_ref()) else {
        return Err(RpcError::errno(
            libc_errno::ENODEV,
            format!("no error bdev named {}", p.name),
        ));
    };
    if p.io_type == "clear" {
        e.clear();
    } else {
        let sel = IoTypeSel::parse(&p.io_type).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "io_type {:?} must be read, write, flush, unmap, write_zeroes, all or clear",
                p.io_type
            ))
        })?;
        e.inject(sel, err, p.num)?;
    }
    tracing::info!(bdev = %p.name, io_type = %p.io_type, error_type = %p.error_type, num = p.num, "error injection set");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ByName {
    name: String,
}

pub(crate) async fn error_resume_pending(
    app: &App,
    ByName { name }: ByName,
) -> Result<Value, RpcError> {
    let state = app.state.lock().await;
    let Some(Bdev::Error(e)) = state.bdevs.get(&name).map(|(_, r)| r.bdev.as_ref()) else {
        return Err(RpcError::errno(
            libc_errno::ENODEV,
            format!("no error bdev named {name}"),
        ));
    };
    e.resume_pending();
    Ok(json!(true))
}
