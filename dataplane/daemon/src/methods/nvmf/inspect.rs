//! Inspecting the NVMe-oF target with SPDK's methods and result shapes:
//! `nvmf_subsystem_get_controllers`, `nvmf_subsystem_get_qpairs`,
//! `nvmf_subsystem_get_listeners` (an NVM subsystem or discovery, by NQN
//! or as `discovery`) and `nvmf_get_stats`.
//!
//! Where SPDK reports something this target does not have, the value is
//! fixed and documented in docs/dataplane.md: one poll group (the runtime
//! serving every queue pair) named [`POLL_GROUP`], qpair state `enabled`
//! (a closed queue pair is not listed), and 0 for queue pairs not yet
//! connected and for I/O waiting on bdev resources (there is no such
//! queue).

use serde::Deserialize;
use serde_json::{json, Value};

use nvmf_tgt::{Controller, Subsystem, Target};

use super::super::registry::uuid_string;
use super::json::trid_json;
use super::target::{check_tgt_name, listenable, resolve_nqn};
use crate::app::App;
use crate::rpc::error::RpcError;

/// The name of the one poll group `nvmf_get_stats` and
/// `nvmf_subsystem_get_qpairs` report (SPDK names its poll group threads
/// this way).
pub const POLL_GROUP: &str = "nvmf_tgt_poll_group_000";

/// SPDK's ticks per second for `tick_rate`: this target counts nothing in
/// ticks, so it reports nanoseconds' rate, as `bdev_get_iostat` does.
const TICK_RATE: u64 = 1_000_000_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ByNqn {
    nqn: String,
    tgt_name: Option<String>,
}

/// The subsystem the call names, and its controllers in cntlid order.
async fn controllers(
    app: &App,
    p: ByNqn,
) -> Result<(std::sync::Arc<Subsystem>, Vec<std::sync::Arc<Controller>>), RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let state = app.state.lock().await;
    let s = listenable(&state.nvmf, resolve_nqn(&p.nqn))?;
    let ctrls = s
        .live_controllers()
        .into_iter()
        .filter(|c| !c.is_torn_down())
        .collect();
    Ok((s, ctrls))
}

pub(crate) async fn get_controllers(app: &App, p: ByNqn) -> Result<Value, RpcError> {
    let (s, ctrls) = controllers(app, p).await?;
    let out: Vec<Value> = ctrls
        .iter()
        .map(|c| {
            json!({
                "cntlid": c.cntlid,
                "cntrltype": if s.is_discovery { "discovery" } else { "io" },
                "hostnqn": c.hostnqn,
                "hostid": uuid_string(&c.host_id),
                "num_io_qpairs": c.io_queues().len(),
            })
        })
        .collect();
    Ok(Value::Array(out))
}

pub(crate) async fn get_qpairs(app: &App, p: ByNqn) -> Result<Value, RpcError> {
    let (_, ctrls) = controllers(app, p).await?;
    let mut out = Vec::new();
    for c in &ctrls {
        let queues = std::iter::once((0, c.admin_path)).chain(c.io_queues());
        for (qid, path) in queues {
            let mut q = json!({
                "cntlid": c.cntlid,
                "qid": qid,
                "state": "enabled",
                "thread": POLL_GROUP,
                "hostnqn": c.hostnqn,
                "listen_address": trid_json(&path.listen),
                "peer_address": trid_json(&path.peer),
            });
            // SPDK's "auth" object, for queues whose host authenticates.
            if let Some(a) = c.auth_of(qid) {
                q["auth"] = json!({
                    "state": a.state.name(),
                    "digest": a.digest.unwrap_or("unknown"),
                    "dhgroup": a.dhgroup.unwrap_or("unknown"),
                });
            }
            out.push(q);
        }
    }
    Ok(Value::Array(out))
}

pub(crate) async fn get_listeners(app: &App, p: ByNqn) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let state = app.state.lock().await;
    let s = listenable(&state.nvmf, resolve_nqn(&p.nqn))?;
    let out: Vec<Value> = s
        .listeners()
        .iter()
        .map(|l| {
            let mut v = json!({ "address": trid_json(&l.listen) });
            // With ANA reporting, SPDK lists every group's state.
            if s.ana_reporting {
                let ana = s.ana_states(l.listen);
                v["ana_states"] = (1..=s.max_namespaces)
                    .map(|g| json!({ "ana_group": g, "ana_state": ana.state(g).name() }))
                    .collect();
            }
            v
        })
        .collect();
    Ok(Value::Array(out))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetStats {
    tgt_name: Option<String>,
}

pub(crate) async fn get_stats(app: &App, p: GetStats) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let state = app.state.lock().await;
    // Before nvmf_create_transport there is nothing to count yet.
    let st = state
        .nvmf
        .target
        .as_ref()
        .map(Target::stats)
        .unwrap_or_default();
    Ok(json!({
        "tick_rate": TICK_RATE,
        "poll_groups": [{
            "name": POLL_GROUP,
            "admin_qpairs": st.qpairs.admin_total,
            "io_qpairs": st.qpairs.io_total,
            "current_admin_qpairs": st.qpairs.admin_current,
            "current_io_qpairs": st.qpairs.io_current,
            "current_unassociated_qpairs": 0,
            "pending_bdev_io": 0,
            "completed_nvme_io": st.completed_io,
            "transports": [{ "trtype": "TCP" }],
        }],
    }))
}
