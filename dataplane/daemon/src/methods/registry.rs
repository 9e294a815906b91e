//! What every bdev-creating method shares: names (SPDK's rules and
//! defaults), registration in the daemon's state with counters, and the
//! UUID text form.

use std::sync::Arc;

use bdev::Bdev;
use serde_json::Value;

use crate::app::{App, IoStats, RegisteredBdev, State};
use crate::rpc::error::{libc_errno, RpcError};

pub(crate) fn check_name(name: &str) -> Result<(), RpcError> {
    if name.is_empty() || name.len() > 255 || name.chars().any(|c| c.is_control() || c == '/') {
        return Err(RpcError::invalid_params(format!(
            "bdev name {name:?} must be 1-255 characters without '/' or control characters"
        )));
    }
    Ok(())
}

pub(crate) fn exists(state: &State, name: &str) -> Result<(), RpcError> {
    if state.bdevs.contains_key(name) {
        return Err(RpcError::errno(
            libc_errno::EEXIST,
            format!("bdev {name} already exists"),
        ));
    }
    Ok(())
}

pub(crate) fn register(
    app: &App,
    state: &mut State,
    name: String,
    bdev: Bdev,
    method: &'static str,
    params: Value,
    cluster: Option<String>,
) {
    let seq = state.seq();
    let reg = RegisteredBdev {
        bdev: Arc::new(bdev),
        stats: IoStats::register(&app.metrics, &name),
        created_by: (method, params),
        cluster,
    };
    state.bdevs.insert(name, (seq, Arc::new(reg)));
}

pub(crate) fn uuid_string(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}
