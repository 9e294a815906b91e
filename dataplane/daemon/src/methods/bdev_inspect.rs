//! Inspecting bdevs with SPDK's methods and result shapes:
//! `bdev_get_bdevs` (with each kind's `driver_specific`) and
//! `bdev_get_iostat`.

use bdev::{Bdev, IoKind};
use serde::Deserialize;
use serde_json::{json, Value};

use super::registry::uuid_string;
use crate::app::{App, RegisteredBdev};
use crate::cached_volumes::as_volume;
use crate::rpc::error::{libc_errno, RpcError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetBdevs {
    name: Option<String>,
    /// SPDK waits this long for the bdev to appear; ours appear
    /// synchronously, so it is accepted and has nothing to wait for.
    #[serde(default, rename = "timeout")]
    _timeout: u64,
}

fn describe(r: &RegisteredBdev, claimed: bool) -> Value {
    let info = r.bdev.info();
    let io = |k| r.bdev.supports(k);
    let driver = match r.bdev.as_ref() {
        Bdev::Malloc(_) => json!({}),
        Bdev::File(f) => {
            json!({ "aio": {
                "filename": f.path(),
                "direct": f.direct(),
                "engine": f.engine(),
                "readonly": f.readonly(),
                "fallocate": true
            } })
        }
        Bdev::Rbd(b) => {
            let (pool, image) = b.image();
            json!({ "rbd": { "pool_name": pool, "rbd_name": image, "cluster_name": r.cluster } })
        }
        Bdev::Delay(_) | Bdev::Error(_) => super::fault::driver_specific(&r.bdev),
        Bdev::Layered(_) => match as_volume(&r.bdev) {
            Some(v) => super::adacache::driver_specific(v),
            None => json!({}),
        },
    };
    let mut d = json!({
        "name": info.name,
        "aliases": [],
        "product_name": info.product_name,
        "block_size": info.block_size,
        "num_blocks": info.num_blocks(),
        "uuid": uuid_string(&info.uuid),
        "claimed": claimed,
        "zoned": false,
        "supported_io_types": {
            "read": io(IoKind::Read),
            "write": io(IoKind::Write),
            "flush": io(IoKind::Flush),
            "write_zeroes": io(IoKind::WriteZeroes),
            "unmap": io(IoKind::Unmap),
            "reset": false,
            "nvme_admin": false,
            "nvme_io": false
        },
        "driver_specific": driver
    });
    if claimed {
        // An NVMe-oF namespace claims its bdev as SPDK's nvmf does.
        d["claim_type"] = json!("exclusive_write");
    }
    d
}

pub(crate) async fn get_bdevs(
    app: &App,
    GetBdevs { name, .. }: GetBdevs,
) -> Result<Value, RpcError> {
    let state = app.state.lock().await;
    let mut list: Vec<_> = state.bdevs.values().collect();
    list.sort_by_key(|(seq, _)| *seq);
    match name {
        Some(n) => match state.bdevs.get(&n) {
            Some((_, b)) => Ok(json!([describe(b, state.is_claimed(&n))])),
            None => Err(RpcError::errno(libc_errno::ENODEV, format!("bdev {n}"))),
        },
        None => Ok(Value::Array(
            list.iter()
                .map(|(_, b)| describe(b, state.is_claimed(&b.bdev.info().name)))
                .collect(),
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetIostat {
    name: Option<String>,
    /// SPDK's per-thread breakdown; the stock command line always sends
    /// it (false). There are no SPDK threads here to break down by.
    #[serde(default)]
    per_channel: bool,
    /// The stock command line's `--names a,b` (SPDK's newer form of `name`).
    names: Option<Vec<String>>,
}

pub(crate) async fn get_iostat(
    app: &App,
    GetIostat {
        name,
        per_channel,
        names,
    }: GetIostat,
) -> Result<Value, RpcError> {
    let wanted: Vec<String> = name
        .into_iter()
        .chain(names.into_iter().flatten())
        .collect();
    if per_channel {
        return Err(RpcError::invalid_params(
            "per_channel is not supported by rackcache-dataplane (no SPDK threads)",
        ));
    }
    let state = app.state.lock().await;
    let stat = |r: &RegisteredBdev| {
        let s = &r.stats;
        json!({
            "name": r.bdev.info().name,
            "bytes_read": s.bytes_read.get(),
            "num_read_ops": s.num_read_ops.get(),
            "bytes_written": s.bytes_written.get(),
            "num_write_ops": s.num_write_ops.get(),
            "bytes_unmapped": s.bytes_unmapped.get(),
            "num_unmap_ops": s.num_unmap_ops.get(),
            // Not in SPDK's output: durable operations that reached the bdev
            // (Flush, and writes durable before completion: FUA, or any
            // write while the host turned the write cache off).
            "num_flush_ops": s.num_flush_ops.get(),
            "num_fua_write_ops": s.num_fua_write_ops.get(),
            "read_latency_ticks": s.read_latency.sum_ns(),
            "write_latency_ticks": s.write_latency.sum_ns(),
            "unmap_latency_ticks": s.unmap_latency.sum_ns(),
            "io_error": s.io_errors.get()
        })
    };
    let bdevs: Vec<Value> = if wanted.is_empty() {
        let mut list: Vec<_> = state.bdevs.values().collect();
        list.sort_by_key(|(seq, _)| *seq);
        list.iter().map(|(_, b)| stat(b)).collect()
    } else {
        let mut out = Vec::new();
        for n in &wanted {
            match state.bdevs.get(n) {
                Some((_, b)) => out.push(stat(b)),
                None => return Err(RpcError::errno(libc_errno::ENODEV, format!("bdev {n}"))),
            }
        }
        out
    };
    // Ticks are nanoseconds: tick_rate is 1 GHz.
    Ok(json!({
        "tick_rate": 1_000_000_000u64,
        "ticks": app.started.elapsed().as_nanos() as u64,
        "bdevs": bdevs
    }))
}
