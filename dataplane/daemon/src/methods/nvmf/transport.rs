//! `nvmf_create_transport` and `nvmf_get_transports`: the one TCP
//! transport, its options fixed at creation with SPDK's defaults.

use std::sync::Arc;

use nvmf_tgt::{Target, TransportOptions};
use serde::Deserialize;
use serde_json::{json, Value};

use super::target::{check_tgt_name, unsupported};
use crate::app::App;
use crate::rpc::error::{ErrorKind, RpcError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTransport {
    trtype: String,
    tgt_name: Option<String>,
    max_queue_depth: Option<u16>,
    max_io_qpairs_per_ctrlr: Option<u16>,
    in_capsule_data_size: Option<u32>,
    max_io_size: Option<u32>,
    io_unit_size: Option<u32>,
    max_aq_depth: Option<u16>,
    c2h_success: Option<bool>,
    #[serde(default)]
    dif_insert_or_strip: bool,
    masked_oncs: Option<Vec<String>>,
    masked_fuses: Option<Vec<String>>,
    /// The data buffer budget: `num_shared_buffers` units of
    /// `io_unit_size` bytes shared by every queue pair.
    num_shared_buffers: Option<u32>,
    /// Freed buffers a queue pair keeps for reuse.
    buf_cache_size: Option<u32>,
    /// Extensions (not SPDK's): how long a solicited write's data may
    /// stall, how long a socket write may block, how many hosts one
    /// listener serves at once, the caps and deadline of sockets that have
    /// not identified themselves yet, and TCP keep-alive.
    rackcache_h2c_data_timeout_ms: Option<u64>,
    rackcache_write_timeout_ms: Option<u64>,
    rackcache_max_connections_per_listener: Option<u32>,
    rackcache_max_unidentified_per_listener: Option<u32>,
    rackcache_max_unidentified_per_peer: Option<u32>,
    rackcache_identify_timeout_ms: Option<u64>,
    rackcache_auth_timeout_ms: Option<u64>,
    rackcache_tcp_keepalive_ms: Option<u64>,
    // SPDK's iobuf caches, sockets, pollers and timeouts, and knobs of
    // its RDMA and vfio-user transports: no counterpart here.
    #[serde(rename = "iobuf_small_cache_size")]
    _iobuf_small_cache_size: Option<u32>,
    #[serde(rename = "iobuf_large_cache_size")]
    _iobuf_large_cache_size: Option<u32>,
    #[serde(rename = "zcopy")]
    _zcopy: Option<bool>,
    #[serde(rename = "num_cqe")]
    _num_cqe: Option<i32>,
    #[serde(rename = "max_srq_depth")]
    _max_srq_depth: Option<u32>,
    #[serde(rename = "no_srq")]
    _no_srq: Option<bool>,
    #[serde(rename = "sock_priority")]
    _sock_priority: Option<u32>,
    #[serde(rename = "acceptor_backlog")]
    _acceptor_backlog: Option<i32>,
    #[serde(rename = "abort_timeout_sec")]
    _abort_timeout_sec: Option<u32>,
    #[serde(rename = "no_wr_batching")]
    _no_wr_batching: Option<bool>,
    #[serde(rename = "control_msg_num")]
    _control_msg_num: Option<u16>,
    #[serde(rename = "disable_mappable_bar0")]
    _disable_mappable_bar0: Option<bool>,
    #[serde(rename = "disable_adaptive_irq")]
    _disable_adaptive_irq: Option<bool>,
    #[serde(rename = "disable_shadow_doorbells")]
    _disable_shadow_doorbells: Option<bool>,
    #[serde(rename = "acceptor_poll_rate")]
    _acceptor_poll_rate: Option<u32>,
    #[serde(rename = "ack_timeout")]
    _ack_timeout: Option<u32>,
    #[serde(rename = "data_wr_pool_size")]
    _data_wr_pool_size: Option<u32>,
    // There is no passthrough to disable.
    #[serde(rename = "disable_command_passthru")]
    _disable_command_passthru: Option<bool>,
    #[serde(rename = "kas")]
    _kas: Option<u16>,
    #[serde(rename = "min_kato")]
    _min_kato: Option<u32>,
}

/// SPDK's TCP transport defaults.
mod tcp_defaults {
    pub const MAX_QUEUE_DEPTH: u16 = 128;
    pub const MAX_IO_QPAIRS_PER_CTRLR: u16 = 127;
    pub const IN_CAPSULE_DATA_SIZE: u32 = 4096;
    pub const MAX_IO_SIZE: u32 = 131072;
    pub const IO_UNIT_SIZE: u32 = 131072;
    pub const MAX_AQ_DEPTH: u16 = 128;
    pub const C2H_SUCCESS: bool = true;
    pub const NUM_SHARED_BUFFERS: u32 = 511;
    pub const BUF_CACHE_SIZE: u32 = 32;
}

pub(crate) async fn create_transport(app: &App, p: CreateTransport) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    if !p.trtype.eq_ignore_ascii_case("tcp") {
        return Err(RpcError::new(
            ErrorKind::InvalidParams,
            format!(
                "Invalid transport type '{}': only TCP is supported",
                p.trtype
            ),
        ));
    }
    if p.dif_insert_or_strip {
        return Err(unsupported("dif_insert_or_strip"));
    }
    if p.masked_oncs.is_some_and(|v| !v.is_empty()) {
        return Err(unsupported("masked_oncs"));
    }
    if p.masked_fuses.is_some_and(|v| !v.is_empty()) {
        return Err(unsupported("masked_fuses"));
    }
    use tcp_defaults as d;
    let ours = TransportOptions::default();
    let ms = |v: Option<u64>, default: std::time::Duration| {
        v.map_or(default, std::time::Duration::from_millis)
    };
    let max_io_size = p.max_io_size.unwrap_or(d::MAX_IO_SIZE);
    let opts = TransportOptions {
        max_queue_depth: p.max_queue_depth.unwrap_or(d::MAX_QUEUE_DEPTH),
        max_aq_depth: p.max_aq_depth.unwrap_or(d::MAX_AQ_DEPTH),
        max_io_qpairs_per_ctrlr: p
            .max_io_qpairs_per_ctrlr
            .unwrap_or(d::MAX_IO_QPAIRS_PER_CTRLR),
        in_capsule_data_size: p.in_capsule_data_size.unwrap_or(d::IN_CAPSULE_DATA_SIZE),
        max_io_size,
        c2h_success: p.c2h_success.unwrap_or(d::C2H_SUCCESS),
        num_shared_buffers: p.num_shared_buffers.unwrap_or(d::NUM_SHARED_BUFFERS),
        buf_cache_size: p.buf_cache_size.unwrap_or(d::BUF_CACHE_SIZE),
        io_unit_size: p.io_unit_size.unwrap_or(d::IO_UNIT_SIZE.min(max_io_size)),
        h2c_data_timeout: ms(p.rackcache_h2c_data_timeout_ms, ours.h2c_data_timeout),
        write_timeout: ms(p.rackcache_write_timeout_ms, ours.write_timeout),
        max_connections_per_listener: p
            .rackcache_max_connections_per_listener
            .unwrap_or(ours.max_connections_per_listener),
        max_unidentified_per_listener: p
            .rackcache_max_unidentified_per_listener
            .unwrap_or(ours.max_unidentified_per_listener),
        max_unidentified_per_peer: p
            .rackcache_max_unidentified_per_peer
            .unwrap_or(ours.max_unidentified_per_peer),
        identify_timeout: ms(p.rackcache_identify_timeout_ms, ours.identify_timeout),
        auth_timeout: ms(p.rackcache_auth_timeout_ms, ours.auth_timeout),
        tcp_keepalive: ms(p.rackcache_tcp_keepalive_ms, ours.tcp_keepalive),
        ..ours
    };
    if opts.io_unit_size > opts.max_io_size {
        return Err(RpcError::invalid_params(format!(
            "io_unit_size {} must be from 512 to max_io_size ({})",
            opts.io_unit_size, opts.max_io_size
        )));
    }
    let mut state = app.state.lock().await;
    if state.nvmf.target.is_some() {
        return Err(RpcError::new(
            ErrorKind::Internal,
            "Transport type 'TCP' already exists",
        ));
    }
    let saved = json!({
        "trtype": "TCP",
        "max_queue_depth": opts.max_queue_depth,
        "max_io_qpairs_per_ctrlr": opts.max_io_qpairs_per_ctrlr,
        "in_capsule_data_size": opts.in_capsule_data_size,
        "max_io_size": opts.max_io_size,
        "io_unit_size": opts.io_unit_size,
        "max_aq_depth": opts.max_aq_depth,
        "c2h_success": opts.c2h_success,
        "num_shared_buffers": opts.num_shared_buffers,
        "buf_cache_size": opts.buf_cache_size,
        "rackcache_h2c_data_timeout_ms": opts.h2c_data_timeout.as_millis() as u64,
        "rackcache_write_timeout_ms": opts.write_timeout.as_millis() as u64,
        "rackcache_max_connections_per_listener": opts.max_connections_per_listener,
        "rackcache_max_unidentified_per_listener": opts.max_unidentified_per_listener,
        "rackcache_max_unidentified_per_peer": opts.max_unidentified_per_peer,
        "rackcache_identify_timeout_ms": opts.identify_timeout.as_millis() as u64,
        "rackcache_auth_timeout_ms": opts.auth_timeout.as_millis() as u64,
        "rackcache_tcp_keepalive_ms": opts.tcp_keepalive.as_millis() as u64,
    });
    let target = Target::with_poller(opts, Arc::clone(&app.metrics), app.poller.clone())?;
    if let Some((digests, groups)) = &state.nvmf.dhchap {
        target.auth_policy().set(digests, groups);
    }
    app.lease.attach(&target);
    state.nvmf.target = Some(target);
    state.nvmf.transport = Some(saved);
    tracing::info!("NVMe/TCP transport created");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetTransports {
    trtype: Option<String>,
    tgt_name: Option<String>,
}

pub(crate) async fn get_transports(app: &App, p: GetTransports) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let state = app.state.lock().await;
    let t = state.nvmf.transport.clone();
    match (p.trtype, t) {
        (Some(tt), t) if !tt.eq_ignore_ascii_case("tcp") || t.is_none() => Err(RpcError::errno(
            crate::rpc::error::libc_errno::ENODEV,
            format!("transport '{tt}'"),
        )),
        (_, t) => Ok(Value::Array(t.into_iter().collect())),
    }
}
