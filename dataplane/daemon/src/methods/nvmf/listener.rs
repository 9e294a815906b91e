//! Listeners: `nvmf_subsystem_add_listener` (with rackcache's
//! `rackcache_advertised`), `nvmf_subsystem_remove_listener` and
//! `nvmf_subsystem_listener_set_ana_state`.

use std::net::{IpAddr, SocketAddr};

use nvmf_tgt::ana::AnaState;
use nvmf_tgt::ListenAddress;
use serde::Deserialize;
use serde_json::{json, Value};

use super::revoke::{persist_then_wait, REVOKE_TIMEOUT};
use super::target::{check_tgt_name, listenable, resolve_nqn, target, unsupported};
use crate::app::App;
use crate::rpc::error::RpcError;

/// SPDK's `listen_address` object.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListenAddressParams {
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
pub(crate) struct Advertised {
    traddr: Option<String>,
    trsvcid: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddListener {
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

pub(crate) fn advertised(a: Option<Advertised>) -> Result<(Option<String>, Option<u16>), RpcError> {
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

pub(crate) async fn add_listener(app: &App, p: AddListener) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let ana_state = p.ana_state.as_deref().map(ana_state).transpose()?;
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
    let sub = listenable(&state.nvmf, nqn)?;
    // Checked before the listener exists: the target's own check would
    // come only after it was added.
    if ana_state.is_some() && !sub.ana_reporting {
        return Err(RpcError::invalid_params(format!(
            "subsystem {nqn} does not report ANA states (create it with ana_reporting)"
        )));
    }
    let bound = target(&state.nvmf)?
        .add_listener_at(
            ListenAddress {
                listen: addr,
                advertised_addr: adv_addr,
                advertised_port: adv_port,
                secure_channel: p.secure_channel,
            },
            nqn,
        )
        .await?;
    if let Some(s) = ana_state {
        sub.set_ana_state(bound, None, s)?;
    }
    tracing::info!(subnqn = %nqn, listen = %bound, secure_channel = p.secure_channel, "NVMe-oF listener added");
    Ok(json!(true))
}

/// SPDK's ANA state names; `persistent_loss` and `change` are the
/// target's own to report.
fn ana_state(name: &str) -> Result<AnaState, RpcError> {
    match AnaState::from_name(name) {
        Some(s @ (AnaState::Optimized | AnaState::NonOptimized | AnaState::Inaccessible)) => Ok(s),
        _ => Err(RpcError::invalid_params(format!(
            "ana_state {name:?}: one of optimized, non_optimized, inaccessible"
        ))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetAnaState {
    nqn: String,
    tgt_name: Option<String>,
    listen_address: ListenAddressParams,
    ana_state: String,
    anagrpid: Option<u32>,
}

/// Sets the ANA state one listener reports for one group (every group
/// without `anagrpid`). Not saved: a restarted server's listeners come
/// back inaccessible (docs/dataplane.md, "Asymmetric Namespace Access").
pub(crate) async fn set_ana_state(app: &App, p: SetAnaState) -> Result<Value, RpcError> {
    check_tgt_name(&p.tgt_name)?;
    let addr = p.listen_address.socket_addr()?;
    let s = ana_state(&p.ana_state)?;
    let state = app.state.lock().await;
    listenable(&state.nvmf, &p.nqn)?.set_ana_state(addr, p.anagrpid, s)?;
    Ok(json!(true))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RemoveListener {
    nqn: String,
    tgt_name: Option<String>,
    listen_address: ListenAddressParams,
}

pub(crate) async fn remove_listener(app: &App, p: RemoveListener) -> Result<Value, RpcError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
