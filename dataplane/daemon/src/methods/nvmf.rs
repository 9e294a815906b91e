//! NVMe-oF methods (SPDK's `nvmf_*`): the TCP transport, subsystems,
//! listeners, namespaces and allowed hosts, and the "nvmf" section of
//! `save_config`.
//!
//! Parameters are SPDK's. Those of SPDK's that name a feature this target
//! lacks (ANA, TLS, DH-HMAC-CHAP, passthrough, EUI-64, ...) are accepted at
//! their "off" value, so SPDK's `rpc.py`, which sends them explicitly, works,
//! and refused otherwise; SPDK tunables of its own pollers and buffer pools,
//! or of other transports, are accepted and have no effect here (SPDK's TCP
//! transport ignores the RDMA-only ones too). Anything else is unknown and
//! refused.
//!
//! One extension: `nvmf_subsystem_add_listener` takes an optional
//! `rackcache_advertised: {"traddr", "trsvcid"}` (either or both), the
//! address the discovery log tells hosts to use when they reach the
//! listener through port forwarding at another address. It is saved with
//! the listener and shown in `nvmf_get_subsystems` under the same name.
//!
//! Access is revocable as in SPDK: `nvmf_subsystem_remove_host`,
//! `nvmf_subsystem_remove_listener` and `nvmf_delete_subsystem` tear down
//! the controllers that lose access (and `nvmf_subsystem_allow_any_host`
//! false those of hosts not listed, which SPDK does not) and answer once
//! their queue pairs have closed, waiting at most [`REVOKE_TIMEOUT`]
//! (`timeout_ms` for `remove_host`).
//!
//! The discovery subsystem takes listeners of its own (SPDK's
//! `nvmf_subsystem_add_listener discovery -t tcp -a ADDR -s 8009`; both its
//! NQN and the literal `discovery` name it), and still answers on every
//! NVM subsystem's listener.
//!
//! Error codes follow SPDK's nvmf RPCs: -32602 for bad input and unknown or
//! duplicate objects (with what is wrong in the message), -32603 for an
//! existing subsystem or transport, a negative errno for a failed bind.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use nvmf_tgt::DISCOVERY_NQN;
use nvmf_tgt::{ListenAddress, Revocation, Subsystem, SubsystemConfig, Target, TransportOptions};
use serde::Deserialize;
use serde_json::{json, Value};

use super::bdev::uuid_string;
use super::parse;
use crate::app::{App, NvmfState};
use crate::rpc::error::{RpcError, INTERNAL_ERROR, INVALID_PARAMS};

/// How long a revoking call waits for the queue pairs it ended to close:
/// SPDK's default for `nvmf_subsystem_remove_host` (CAP.TO plus 5 s).
pub(super) const REVOKE_TIMEOUT: Duration = Duration::from_millis(15_000);

/// Persists the change that revoked access (`--config-persist`), then
/// waits for `revoked` (after the state lock is released, so other calls
/// go on meanwhile); false when some queue pair outlived `timeout`. The
/// change is on disk before the wait, so a daemon killed during the wait,
/// or a call that then reports a timeout, cannot bring the revoked access
/// back on restart. (The RPC server rewrites the file again when the call
/// succeeds: harmless.)
async fn persist_then_wait(app: &App, revoked: Revocation, timeout: Duration, what: &str) -> bool {
    if revoked.is_empty() {
        return true;
    }
    crate::config::persist(app).await;
    let n = revoked.len();
    let done = revoked.wait(timeout).await;
    if done {
        tracing::info!(controllers = n, "{what}: revoked controllers closed");
    } else {
        tracing::warn!(
            controllers = n,
            ?timeout,
            "{what}: revoked controllers still open"
        );
    }
    done
}

/// The NQN a listener call names: the discovery subsystem also goes by
/// `discovery`, as on SPDK's command line.
pub(super) fn resolve_nqn(nqn: &str) -> &str {
    if nqn == "discovery" {
        DISCOVERY_NQN
    } else {
        nqn
    }
}

/// SPDK's default namespace limit of a subsystem (`max_namespaces` 0).
const DEFAULT_MAX_NAMESPACES: u32 = 32;
/// The controller ids this target hands out (SPDK's default range).
const MIN_CNTLID: u16 = 1;
const MAX_CNTLID: u16 = 0xffef;

fn unsupported(what: &str) -> RpcError {
    RpcError::invalid_params(format!("{what} is not supported by rackcache-dataplane"))
}

/// There is one target; SPDK's `tgt_name` selects among several.
pub(super) fn check_tgt_name(tgt_name: &Option<String>) -> Result<(), RpcError> {
    match tgt_name {
        None => Ok(()),
        Some(n) => Err(RpcError::new(
            INVALID_PARAMS,
            format!("NVMf target '{n}' not found (this daemon has one, unnamed target)"),
        )),
    }
}

fn target(nvmf: &NvmfState) -> Result<&Target, RpcError> {
    nvmf.target.as_ref().ok_or_else(|| {
        RpcError::invalid_params("no NVMe-oF transport: create it first with nvmf_create_transport")
    })
}

/// The NVM subsystem `nqn` (not discovery), with SPDK's message if absent.
fn subsystem(nvmf: &NvmfState, nqn: &str) -> Result<Arc<Subsystem>, RpcError> {
    nvmf.target
        .as_ref()
        .and_then(|t| t.subsystem(nqn))
        .filter(|s| !s.is_discovery)
        .ok_or_else(|| {
            RpcError::new(
                INVALID_PARAMS,
                format!("Subsystem with NQN '{nqn}' not found"),
            )
        })
}

// ---------------------------------------------------------------- transport

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateTransport {
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
    /// stall, how long a socket write may block, and how many connections
    /// one listener serves at once.
    rackcache_h2c_data_timeout_ms: Option<u64>,
    rackcache_write_timeout_ms: Option<u64>,
    rackcache_max_connections_per_listener: Option<u32>,
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

pub(super) async fn create_transport(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: CreateTransport = parse(params)?;
    check_tgt_name(&p.tgt_name)?;
    if !p.trtype.eq_ignore_ascii_case("tcp") {
        return Err(RpcError::new(
            INVALID_PARAMS,
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
            INTERNAL_ERROR,
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
    });
    let target = Target::with_poller(opts, Arc::clone(&app.metrics), app.poller.clone())?;
    state.nvmf.target = Some(target);
    state.nvmf.transport = Some(saved);
    tracing::info!("NVMe/TCP transport created");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetTransports {
    trtype: Option<String>,
    tgt_name: Option<String>,
}

pub(super) async fn get_transports(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: GetTransports = parse(params)?;
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

// ---------------------------------------------------------------- subsystems

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateSubsystem {
    nqn: String,
    tgt_name: Option<String>,
    serial_number: Option<String>,
    model_number: Option<String>,
    #[serde(default)]
    allow_any_host: bool,
    max_namespaces: Option<u32>,
    #[serde(default)]
    ana_reporting: bool,
    min_cntlid: Option<u16>,
    max_cntlid: Option<u16>,
    dmrsl: Option<u32>,
    wzsl: Option<u8>,
    #[serde(default)]
    passthrough: bool,
    #[serde(default)]
    enable_nssr: bool,
    admin_label: Option<String>,
}

pub(super) async fn create_subsystem(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: CreateSubsystem = parse(params)?;
    check_tgt_name(&p.tgt_name)?;
    for (set, what) in [
        (p.ana_reporting, "ana_reporting"),
        (p.passthrough, "passthrough"),
        (p.enable_nssr, "enable_nssr"),
        (p.admin_label.is_some(), "admin_label"),
        (p.dmrsl.is_some_and(|v| v != 0), "dmrsl"),
        (p.wzsl.is_some_and(|v| v != 0), "wzsl"),
    ] {
        if set {
            return Err(unsupported(what));
        }
    }
    if p.min_cntlid.is_some_and(|v| v != MIN_CNTLID)
        || p.max_cntlid.is_some_and(|v| v != MAX_CNTLID)
    {
        return Err(RpcError::invalid_params(format!(
            "the controller id range is fixed at [{MIN_CNTLID}-{MAX_CNTLID}]"
        )));
    }
    let mut cfg = SubsystemConfig::new(&p.nqn);
    if let Some(sn) = p.serial_number {
        cfg.serial = sn;
    }
    if let Some(mn) = p.model_number {
        cfg.model = mn;
    }
    cfg.allow_any_host = p.allow_any_host;
    cfg.max_namespaces = match p.max_namespaces {
        None | Some(0) => DEFAULT_MAX_NAMESPACES,
        Some(n) => n,
    };
    let state = app.state.lock().await;
    let t = target(&state.nvmf)?;
    if p.nqn == DISCOVERY_NQN || t.subsystem(&p.nqn).is_some() {
        return Err(RpcError::new(
            INTERNAL_ERROR,
            format!("Unable to create subsystem {}: it already exists", p.nqn),
        ));
    }
    t.add_subsystem(cfg)?;
    tracing::info!(subnqn = %p.nqn, "NVMe-oF subsystem created");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ByNqn {
    nqn: String,
    tgt_name: Option<String>,
}

pub(super) async fn delete_subsystem(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: ByNqn = parse(params)?;
    check_tgt_name(&p.tgt_name)?;
    let revoked = {
        let state = app.state.lock().await;
        subsystem(&state.nvmf, &p.nqn)?;
        target(&state.nvmf)?.remove_subsystem(&p.nqn)?
    };
    tracing::info!(subnqn = %p.nqn, "NVMe-oF subsystem deleted");
    // The subsystem is gone either way; a late queue only gets a warning.
    persist_then_wait(app, revoked, REVOKE_TIMEOUT, "nvmf_delete_subsystem").await;
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetSubsystems {
    nqn: Option<String>,
    tgt_name: Option<String>,
}

pub(super) async fn get_subsystems(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: GetSubsystems = parse(params)?;
    check_tgt_name(&p.tgt_name)?;
    let state = app.state.lock().await;
    let subs = state
        .nvmf
        .target
        .as_ref()
        .map(Target::subsystems)
        .unwrap_or_default();
    let discovery_listeners = state
        .nvmf
        .target
        .as_ref()
        .and_then(|t| t.subsystem(DISCOVERY_NQN))
        .map(|d| d.listeners())
        .unwrap_or_default();
    let mut out = vec![discovery_json(&discovery_listeners)];
    out.extend(subs.iter().map(|s| subsystem_json(s)));
    match p.nqn {
        None => Ok(Value::Array(out)),
        Some(nqn) => match out.into_iter().find(|s| s["nqn"] == nqn.as_str()) {
            Some(s) => Ok(json!([s])),
            None => Err(RpcError::new(
                INVALID_PARAMS,
                format!("Subsystem with NQN '{nqn}' not found"),
            )),
        },
    }
}

/// The discovery subsystem lets anyone in; it answers on its own
/// listeners (listed) and on every NVM subsystem's (not listed).
fn discovery_json(listeners: &[ListenAddress]) -> Value {
    json!({
        "nqn": DISCOVERY_NQN,
        "subtype": "Discovery",
        "listen_addresses": listeners.iter().map(listener_json).collect::<Vec<_>>(),
        "allow_any_host": true,
        "hosts": [],
    })
}

fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

fn subsystem_json(s: &Subsystem) -> Value {
    let namespaces: Vec<Value> = s
        .namespaces()
        .values()
        .map(|ns| {
            json!({
                "nsid": ns.nsid,
                "bdev_name": ns.bdev_name,
                "name": ns.bdev_name,
                "nguid": hex_upper(&ns.nguid),
                "uuid": uuid_string(&ns.uuid),
            })
        })
        .collect();
    json!({
        "nqn": s.nqn,
        "subtype": "NVMe",
        "listen_addresses": s.listeners().iter().map(listener_json).collect::<Vec<_>>(),
        "allow_any_host": s.allow_any_host(),
        "hosts": s.hosts().iter().map(|h| json!({ "nqn": h })).collect::<Vec<_>>(),
        "serial_number": s.serial,
        "model_number": s.model,
        "max_namespaces": s.max_namespaces,
        "passthrough": false,
        "min_cntlid": MIN_CNTLID,
        "max_cntlid": MAX_CNTLID,
        "namespaces": namespaces,
    })
}

/// SPDK's transport id of a TCP address.
pub(super) fn trid_json(a: &SocketAddr) -> Value {
    json!({
        "trtype": "TCP",
        "adrfam": if a.is_ipv6() { "IPv6" } else { "IPv4" },
        "traddr": a.ip().to_string(),
        "trsvcid": a.port().to_string(),
    })
}

/// SPDK's transport id of a listener, plus the advertised override if any.
fn listener_json(l: &ListenAddress) -> Value {
    let mut v = trid_json(&l.listen);
    if let Some(a) = advertised_json(l) {
        v["rackcache_advertised"] = a;
    }
    v
}

fn advertised_json(l: &ListenAddress) -> Option<Value> {
    if l.advertised_addr.is_none() && l.advertised_port.is_none() {
        return None;
    }
    let mut a = json!({});
    if let Some(addr) = &l.advertised_addr {
        a["traddr"] = json!(addr);
    }
    if let Some(port) = l.advertised_port {
        a["trsvcid"] = json!(port.to_string());
    }
    Some(a)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowAnyHost {
    nqn: String,
    allow_any_host: bool,
    tgt_name: Option<String>,
}

pub(super) async fn allow_any_host(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: AllowAnyHost = parse(params)?;
    check_tgt_name(&p.tgt_name)?;
    let revoked = {
        let state = app.state.lock().await;
        subsystem(&state.nvmf, &p.nqn)?;
        target(&state.nvmf)?.set_allow_any_host(&p.nqn, p.allow_any_host)?
    };
    tracing::info!(subnqn = %p.nqn, allow_any_host = p.allow_any_host, "NVMe-oF host policy set");
    persist_then_wait(
        app,
        revoked,
        REVOKE_TIMEOUT,
        "nvmf_subsystem_allow_any_host",
    )
    .await;
    Ok(json!(true))
}

// ---------------------------------------------------------------- listeners

/// SPDK's `listen_address` object.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListenAddressParams {
    trtype: String,
    adrfam: Option<String>,
    traddr: String,
    trsvcid: Option<String>,
}

impl ListenAddressParams {
    /// The socket address, checking the transport and address family.
    fn socket_addr(&self) -> Result<SocketAddr, RpcError> {
        if !self.trtype.eq_ignore_ascii_case("tcp") {
            return Err(RpcError::invalid_params(format!(
                "trtype {}: only TCP is supported",
                self.trtype
            )));
        }
        let ip: IpAddr = self.traddr.parse().map_err(|_| {
            RpcError::invalid_params(format!("traddr {:?} is not an IP address", self.traddr))
        })?;
        match self
            .adrfam
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None => {}
            Some("ipv4") if ip.is_ipv4() => {}
            Some("ipv6") if ip.is_ipv6() => {}
            Some(f) => {
                return Err(RpcError::invalid_params(format!(
                    "adrfam {f} does not fit traddr {ip} (TCP takes IPv4 or IPv6)"
                )))
            }
        }
        let Some(svc) = &self.trsvcid else {
            return Err(RpcError::invalid_params(
                "trsvcid (the port) is required for TCP",
            ));
        };
        let port: u16 = svc.parse().map_err(|_| {
            RpcError::invalid_params(format!("trsvcid {svc:?} is not a port number"))
        })?;
        Ok(SocketAddr::new(ip, port))
    }
}

/// rackcache's extension: what the discovery log advertises instead of
/// the listen address.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Advertised {
    traddr: Option<String>,
    trsvcid: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddListener {
    nqn: String,
    tgt_name: Option<String>,
    listen_address: ListenAddressParams,
    #[serde(default)]
    secure_channel: bool,
    ana_state: Option<String>,
    sock_impl: Option<String>,
    numa_id: Option<i32>,
    rackcache_advertised: Option<Advertised>,
}

fn advertised(a: Option<Advertised>) -> Result<(Option<String>, Option<u16>), RpcError> {
    let Some(a) = a else {
        return Ok((None, None));
    };
    if a.traddr.is_none() && a.trsvcid.is_none() {
        return Err(RpcError::invalid_params(
            "rackcache_advertised needs traddr, trsvcid or both",
        ));
    }
    if let Some(t) = &a.traddr {
        // TRADDR is a 256-byte printable field of the discovery log entry.
        if t.is_empty() || t.len() > 255 || !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(RpcError::invalid_params(format!(
                "rackcache_advertised.traddr {t:?} must be 1 to 255 printable ASCII characters"
            )));
        }
    }
    let port = match &a.trsvcid {
        None => None,
        Some(s) => Some(s.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "rackcache_advertised.trsvcid {s:?} is not a port number"
            ))
        })?),
    };
    Ok((a.traddr, port))
}

pub(super) async fn add_listener(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: AddListener = parse(params)?;
    check_tgt_name(&p.tgt_name)?;
    if p.secure_channel {
        return Err(unsupported("secure_channel (TLS)"));
    }
    if p.ana_state.is_some() {
        return Err(unsupported("ana_state"));
    }
    if p.sock_impl.as_deref().is_some_and(|s| s != "posix") {
        return Err(unsupported("sock_impl other than posix"));
    }
    if p.numa_id.is_some_and(|n| n != -1) {
        return Err(unsupported("numa_id"));
    }
    let addr = p.listen_address.socket_addr()?;
    let (adv_addr, adv_port) = advertised(p.rackcache_advertised)?;
    let nqn = resolve_nqn(&p.nqn);
    let state = app.state.lock().await;
    listenable(&state.nvmf, nqn)?;
    let bound = target(&state.nvmf)?
        .add_listener(nqn, addr, adv_addr, adv_port)
        .await?;
    tracing::info!(subnqn = %nqn, listen = %bound, "NVMe-oF listener added");
    Ok(json!(true))
}

/// A subsystem that takes listeners: an NVM subsystem or discovery.
pub(super) fn listenable(nvmf: &NvmfState, nqn: &str) -> Result<Arc<Subsystem>, RpcError> {
    if nqn == DISCOVERY_NQN {
        return target(nvmf)?
            .subsystem(DISCOVERY_NQN)
            .ok_or_else(|| RpcError::new(INTERNAL_ERROR, "no discovery subsystem"));
    }
    subsystem(nvmf, nqn)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveListener {
    nqn: String,
    tgt_name: Option<String>,
    listen_address: ListenAddressParams,
}

pub(super) async fn remove_listener(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: RemoveListener = parse(params)?;
    check_tgt_name(&p.tgt_name)?;
    let addr = p.listen_address.socket_addr()?;
    let nqn = resolve_nqn(&p.nqn);
    let revoked = {
        let state = app.state.lock().await;
        listenable(&state.nvmf, nqn)?;
        target(&state.nvmf)?.remove_listener(nqn, addr)?
    };
    tracing::info!(subnqn = %nqn, listen = %addr, "NVMe-oF listener removed");
    persist_then_wait(
        app,
        revoked,
        REVOKE_TIMEOUT,
        "nvmf_subsystem_remove_listener",
    )
    .await;
    Ok(json!(true))
}

// ---------------------------------------------------------------- namespaces

/// SPDK's `namespace` object.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespaceParams {
    bdev_name: String,
    nsid: Option<u32>,
    nguid: Option<String>,
    uuid: Option<String>,
    eui64: Option<String>,
    ptpl_file: Option<String>,
    anagrpid: Option<u32>,
    #[serde(default)]
    no_auto_visible: bool,
    #[serde(default)]
    hide_metadata: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddNs {
    nqn: String,
    namespace: NamespaceParams,
    tgt_name: Option<String>,
}

/// 32 hex digits (SPDK's NGUID string), big-endian.
fn parse_nguid(s: &str) -> Result<[u8; 16], RpcError> {
    let bad = || RpcError::invalid_params(format!("nguid {s:?} must be 32 hexadecimal digits"));
    if s.len() != 32 {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// An RFC 4122 UUID string (8-4-4-4-12 hex digits).
fn parse_uuid(s: &str) -> Result<[u8; 16], RpcError> {
    let bad = || RpcError::invalid_params(format!("uuid {s:?} is not an RFC 4122 UUID"));
    let groups: Vec<&str> = s.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lens != [8, 4, 4, 4, 12] {
        return Err(bad());
    }
    parse_nguid(&groups.concat()).map_err(|_| bad())
}

pub(super) async fn add_ns(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: AddNs = parse(params)?;
    check_tgt_name(&p.tgt_name)?;
    let ns = p.namespace;
    for (set, what) in [
        (ns.eui64.is_some(), "eui64"),
        (
            ns.ptpl_file.is_some(),
            "ptpl_file (persistent reservations)",
        ),
        (ns.anagrpid.is_some_and(|g| g != 0), "anagrpid"),
        (ns.no_auto_visible, "no_auto_visible"),
        (ns.hide_metadata, "hide_metadata"),
    ] {
        if set {
            return Err(unsupported(what));
        }
    }
    let nguid = ns.nguid.as_deref().map(parse_nguid).transpose()?;
    let uuid = ns.uuid.as_deref().map(parse_uuid).transpose()?;
    let state = app.state.lock().await;
    let sub = subsystem(&state.nvmf, &p.nqn)?;
    let Some((_, bdev)) = state.bdevs.get(&ns.bdev_name) else {
        return Err(RpcError::invalid_params(format!(
            "bdev {} not found",
            ns.bdev_name
        )));
    };
    if let Some(user) = state.wrapper_of(&ns.bdev_name) {
        return Err(RpcError::invalid_params(format!(
            "bdev {} is already claimed by bdev {user}",
            ns.bdev_name
        )));
    }
    if let Some((nqn, nsid)) = state.nvmf.claims(&ns.bdev_name).into_iter().next() {
        return Err(RpcError::invalid_params(format!(
            "bdev {} is already claimed by namespace {nsid} of subsystem {nqn}",
            ns.bdev_name
        )));
    }
    let nsid = sub.add_namespace(ns.nsid, bdev.counted(), nguid, uuid)?;
    tracing::info!(subnqn = %p.nqn, nsid, bdev = %ns.bdev_name, "NVMe-oF namespace added");
    Ok(json!(nsid))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveNs {
    nqn: String,
    nsid: u32,
    tgt_name: Option<String>,
}

pub(super) async fn remove_ns(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: RemoveNs = parse(params)?;
    check_tgt_name(&p.tgt_name)?;
    let state = app.state.lock().await;
    let ns = subsystem(&state.nvmf, &p.nqn)?.remove_namespace(p.nsid)?;
    tracing::info!(subnqn = %p.nqn, nsid = p.nsid, bdev = %ns.bdev_name, "NVMe-oF namespace removed");
    Ok(json!(true))
}

// ---------------------------------------------------------------- hosts

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddHost {
    nqn: String,
    host: String,
    tgt_name: Option<String>,
    psk: Option<String>,
    dhchap_key: Option<String>,
    dhchap_ctrlr_key: Option<String>,
}

pub(super) async fn add_host(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: AddHost = parse(params)?;
    check_tgt_name(&p.tgt_name)?;
    if p.psk.is_some() {
        return Err(unsupported("psk (TLS)"));
    }
    if p.dhchap_key.is_some() || p.dhchap_ctrlr_key.is_some() {
        return Err(unsupported("DH-HMAC-CHAP authentication"));
    }
    let state = app.state.lock().await;
    subsystem(&state.nvmf, &p.nqn)?;
    target(&state.nvmf)?.add_host(&p.nqn, &p.host)?;
    tracing::info!(subnqn = %p.nqn, hostnqn = %p.host, "NVMe-oF host allowed");
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveHost {
    nqn: String,
    host: String,
    tgt_name: Option<String>,
    /// How long to wait for the host's queue pairs to close (0 or absent:
    /// SPDK's default).
    timeout_ms: Option<u64>,
}

pub(super) async fn remove_host(app: &App, params: Option<Value>) -> Result<Value, RpcError> {
    let p: RemoveHost = parse(params)?;
    check_tgt_name(&p.tgt_name)?;
    let revoked = {
        let state = app.state.lock().await;
        subsystem(&state.nvmf, &p.nqn)?;
        target(&state.nvmf)?.remove_host(&p.nqn, &p.host)?
    };
    tracing::info!(subnqn = %p.nqn, hostnqn = %p.host, controllers = revoked.len(), "NVMe-oF host removed");
    let timeout = match p.timeout_ms {
        None | Some(0) => REVOKE_TIMEOUT,
        Some(ms) => Duration::from_millis(ms),
    };
    // As SPDK: the host is off the list either way, but the caller learns
    // that its queues were still open.
    if !persist_then_wait(app, revoked, timeout, "nvmf_subsystem_remove_host").await {
        return Err(RpcError::new(
            INTERNAL_ERROR,
            "Timeout reached during host removal",
        ));
    }
    Ok(json!(true))
}

// ---------------------------------------------------------------- config

/// The nvmf subsystem's configuration in SPDK's order: the transport, then
/// subsystems, their hosts, their namespaces (with their identifiers, so a
/// restart keeps them), their listeners.
pub(super) fn config(nvmf: &NvmfState) -> Vec<Value> {
    let (Some(t), Some(transport)) = (&nvmf.target, &nvmf.transport) else {
        return Vec::new();
    };
    let subs = t.subsystems();
    let discovery = t.subsystem(DISCOVERY_NQN);
    let call = |method: &str, params: Value| json!({ "method": method, "params": params });
    let mut out = vec![call("nvmf_create_transport", transport.clone())];
    for s in &subs {
        out.push(call(
            "nvmf_create_subsystem",
            json!({
                "nqn": s.nqn,
                "allow_any_host": s.allow_any_host(),
                "serial_number": s.serial,
                "model_number": s.model,
                "max_namespaces": s.max_namespaces,
            }),
        ));
    }
    for s in &subs {
        for h in s.hosts() {
            out.push(call(
                "nvmf_subsystem_add_host",
                json!({ "nqn": s.nqn, "host": h }),
            ));
        }
    }
    for s in &subs {
        for ns in s.namespaces().values() {
            out.push(call(
                "nvmf_subsystem_add_ns",
                json!({
                    "nqn": s.nqn,
                    "namespace": {
                        "nsid": ns.nsid,
                        "bdev_name": ns.bdev_name,
                        "nguid": hex_upper(&ns.nguid),
                        "uuid": uuid_string(&ns.uuid),
                    }
                }),
            ));
        }
    }
    // Listeners last, the discovery subsystem's first (its NQN sorts first
    // in SPDK's subsystem tree too).
    for s in discovery.iter().chain(&subs) {
        for l in s.listeners() {
            let mut params = json!({
                "nqn": s.nqn,
                "listen_address": listener_json(&ListenAddress {
                    advertised_addr: None,
                    advertised_port: None,
                    ..l.clone()
                }),
                "secure_channel": false,
            });
            if let Some(a) = advertised_json(&l) {
                params["rackcache_advertised"] = a;
            }
            out.push(call("nvmf_subsystem_add_listener", params));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_parse_as_spdk_writes_them() {
        let g = parse_nguid("000102030405060708090A0B0C0D0E0F").unwrap();
        assert_eq!(g[0], 0);
        assert_eq!(g[15], 15);
        assert_eq!(hex_upper(&g), "000102030405060708090A0B0C0D0E0F");
        assert!(parse_nguid("0001").is_err());
        assert!(parse_nguid("zz0102030405060708090A0B0C0D0E0F").is_err());
        let u = parse_uuid("ceccf520-691e-4b46-9546-34af789907c5").unwrap();
        assert_eq!(uuid_string(&u), "ceccf520-691e-4b46-9546-34af789907c5");
        assert!(parse_uuid("ceccf520691e4b46954634af789907c5").is_err());
        assert!(parse_uuid("ceccf520-691e-4b46-9546-34af789907cx").is_err());
    }

    #[test]
    fn listen_addresses_are_checked() {
        let la = |trtype: &str, adrfam: Option<&str>, traddr: &str, svc: Option<&str>| {
            ListenAddressParams {
                trtype: trtype.into(),
                adrfam: adrfam.map(Into::into),
                traddr: traddr.into(),
                trsvcid: svc.map(Into::into),
            }
            .socket_addr()
        };
        assert_eq!(
            la("tcp", Some("IPv4"), "127.0.0.1", Some("4420")).unwrap(),
            "127.0.0.1:4420".parse().unwrap()
        );
        assert!(la("TCP", None, "::1", Some("4420")).unwrap().is_ipv6());
        assert!(la("RDMA", None, "127.0.0.1", Some("4420")).is_err());
        assert!(la("TCP", Some("ipv6"), "127.0.0.1", Some("4420")).is_err());
        assert!(la("TCP", None, "localhost", Some("4420")).is_err());
        assert!(la("TCP", None, "127.0.0.1", None).is_err());
        assert!(la("TCP", None, "127.0.0.1", Some("70000")).is_err());
    }
}
