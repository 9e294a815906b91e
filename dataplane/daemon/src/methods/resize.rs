//! `bdev_rbd_resize`: growing an RBD bdev under everything built on it, as
//! SPDK's resize event does: the image, then every cached volume whose core
//! grew (delay and error bdevs share their base's size), then every
//! namespace exporting a bdev that grew, whose hosts are told with a
//! Namespace Attribute Changed notice and see the new capacity.

use std::sync::Arc;

use bdev::Bdev;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::app::{App, State};
use crate::cached_volumes::volumes;
use crate::rpc::error::{libc_errno, ErrorKind, RpcError};

/// SPDK's parameters: `new_size` in MiB.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RbdResize {
    name: String,
    new_size: u64,
}

pub(crate) async fn rbd_resize(app: &App, p: RbdResize) -> Result<Value, RpcError> {
    let state = app.state.lock().await;
    let Some((_, reg)) = state.bdevs.get(&p.name) else {
        return Err(RpcError::errno(
            libc_errno::ENODEV,
            format!("no bdev named {}", p.name),
        ));
    };
    if !matches!(reg.bdev.as_ref(), Bdev::Rbd(_)) {
        return Err(RpcError::invalid_params(format!(
            "bdev {} is not an rbd bdev",
            p.name
        )));
    }
    let bytes = p.new_size.checked_mul(1 << 20).ok_or_else(|| {
        RpcError::invalid_params(format!("new_size {} MiB is too large", p.new_size))
    })?;
    // A cached bdev over the image must follow it (below). One that cannot
    // (its engine indexes a bounded volume) is found before the image
    // grows: afterwards the refusal would leave it unable to load, its
    // dirty data stranded, until the image is shrunk back.
    for v in volumes(&state) {
        if rests_on(&state, &v.core_name(), &p.name) {
            v.params().check_core_size(bytes).map_err(|e| {
                RpcError::errno(
                    libc_errno::EINVAL,
                    format!(
                        "bdev {} cannot grow to {bytes} bytes: cached bdev {} over it: {e}",
                        p.name,
                        v.params().name
                    ),
                )
            })?;
        }
    }
    // librbd's resize blocks: off the runtime's threads, which serve I/O.
    let bdev = Arc::clone(&reg.bdev);
    let size = tokio::task::spawn_blocking(move || match bdev.as_ref() {
        Bdev::Rbd(rbd) => rbd.grow(bytes),
        _ => unreachable!("checked to be an rbd bdev above, under the same lock"),
    })
    .await
    .map_err(|e| {
        RpcError::new(
            ErrorKind::Internal,
            format!("resize of {} ended: {e}", p.name),
        )
    })??;
    tracing::info!(bdev = %p.name, size, "rbd bdev grown");
    for v in volumes(&state) {
        v.follow_core_size()
            .await
            .map_err(|e| RpcError::cache(format!("grow cached bdev over {}", p.name), &e))?;
    }
    if let Some(t) = &state.nvmf.target {
        for s in t.subsystems() {
            s.refresh_namespace_sizes();
        }
    }
    Ok(json!(true))
}

/// Whether bdev `name` is `base`, or is built on it through delay and error
/// bdevs (which share their base's size).
fn rests_on(state: &State, name: &str, base: &str) -> bool {
    let mut cur = name.to_owned();
    loop {
        if cur == base {
            return true;
        }
        let Some((_, reg)) = state.bdevs.get(&cur) else {
            return false;
        };
        cur = match reg.bdev.as_ref() {
            Bdev::Delay(d) => d.base().info().name.clone(),
            Bdev::Error(e) => e.base().info().name.clone(),
            _ => return false,
        };
    }
}
