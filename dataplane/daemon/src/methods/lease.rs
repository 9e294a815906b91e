//! `rackcache_lease_renew` and `rackcache_lease_get`: the control plane's
//! lease on this server's ANA paths ([`crate::lease`]). Neither is saved:
//! a lease is renewed, never replayed.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::app::App;
use crate::rpc::error::RpcError;

/// Shortest and longest grant: a second (renewals every few hundred
/// milliseconds are what a busy control plane can keep up) to ten minutes.
const DURATION_MS: std::ops::RangeInclusive<u64> = 1_000..=600_000;

/// Longest holder name (it only goes to logs).
const MAX_HOLDER_LEN: usize = 256;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Renew {
    duration_ms: u64,
    holder: String,
}

/// Grants or renews the lease for `duration_ms` on behalf of `holder`,
/// lifting the ANA fence if it ran out before. Answers the time left.
pub(crate) async fn renew(app: &App, p: Renew) -> Result<Value, RpcError> {
    if !DURATION_MS.contains(&p.duration_ms) {
        return Err(RpcError::invalid_params(format!(
            "duration_ms {} outside {}..={}",
            p.duration_ms,
            DURATION_MS.start(),
            DURATION_MS.end()
        )));
    }
    if p.holder.is_empty()
        || p.holder.len() > MAX_HOLDER_LEN
        || !p.holder.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(RpcError::invalid_params(format!(
            "holder must be 1 to {MAX_HOLDER_LEN} printable ASCII characters without spaces"
        )));
    }
    let left = app
        .lease
        .renew(&p.holder, Duration::from_millis(p.duration_ms));
    Ok(json!({ "expires_in_ms": left.as_millis() as u64 }))
}

/// The lease: whether one was ever granted, whether it ran out (the ANA
/// fence is up), the time left and its last holder.
pub(crate) async fn get(app: &App, _: super::params::NoParams) -> Result<Value, RpcError> {
    let s = app.lease.status();
    Ok(json!({
        "granted": s.granted,
        "fenced": s.fenced,
        "expires_in_ms": s.expires_in.as_millis() as u64,
        "holder": s.holder,
    }))
}
