//! SPDK's result shapes of subsystems and listeners, shared by
//! `nvmf_get_subsystems`, the inspection methods and the saved config.

use std::net::SocketAddr;

use nvmf_tgt::{ListenAddress, Subsystem, DISCOVERY_NQN};
use serde_json::{json, Value};

use super::super::registry::uuid_string;

/// The discovery subsystem lets anyone in; it answers on its own
/// listeners (listed) and on every NVM subsystem's (not listed).
pub(crate) fn discovery_json(listeners: &[ListenAddress]) -> Value {
    json!({
        "nqn": DISCOVERY_NQN,
        "subtype": "Discovery",
        "listen_addresses": listeners.iter().map(listener_json).collect::<Vec<_>>(),
        "allow_any_host": true,
        "hosts": [],
    })
}

pub(crate) fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

pub(crate) fn subsystem_json(s: &Subsystem) -> Value {
    let namespaces: Vec<Value> = s
        .namespaces()
        .values()
        .map(|ns| {
            let mut v = json!({
                "nsid": ns.nsid,
                "bdev_name": ns.bdev_name,
                "name": ns.bdev_name,
                "nguid": hex_upper(&ns.nguid),
                "uuid": uuid_string(&ns.uuid),
            });
            if s.ana_reporting {
                v["anagrpid"] = json!(ns.anagrpid);
            }
            v
        })
        .collect();
    json!({
        "nqn": s.nqn,
        "subtype": "NVMe",
        "listen_addresses": s.listeners().iter().map(listener_json).collect::<Vec<_>>(),
        "allow_any_host": s.allow_any_host(),
        "hosts": s
            .hosts_with_keys()
            .iter()
            .map(|(h, keys)| {
                let mut v = host_json(&s.nqn, h, keys);
                let o = v.as_object_mut().expect("an object");
                o.remove("host");
                o.insert("nqn".into(), json!(h));
                v
            })
            .collect::<Vec<_>>(),
        "serial_number": s.serial,
        "model_number": s.model,
        "max_namespaces": s.max_namespaces,
        // Not in SPDK's answer: a control plane needs it to tell a
        // subsystem that can take a second path from one that cannot.
        "ana_reporting": s.ana_reporting,
        "passthrough": false,
        "min_cntlid": s.cntlid_range().start(),
        "max_cntlid": s.cntlid_range().end(),
        "namespaces": namespaces,
    })
}

/// SPDK's transport id of a TCP address.
pub(crate) fn trid_json(a: &SocketAddr) -> Value {
    json!({
        "trtype": "TCP",
        "adrfam": if a.is_ipv6() { "IPv6" } else { "IPv4" },
        "traddr": a.ip().to_string(),
        "trsvcid": a.port().to_string(),
    })
}

/// SPDK's transport id of a listener, plus the advertised override if any.
pub(crate) fn listener_json(l: &ListenAddress) -> Value {
    let mut v = trid_json(&l.listen);
    if let Some(a) = advertised_json(l) {
        v["rackcache_advertised"] = a;
    }
    v
}

pub(crate) fn advertised_json(l: &ListenAddress) -> Option<Value> {
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

/// `nvmf_subsystem_add_host`'s parameters for host `h` of subsystem
/// `nqn`: its keys by keyring name, never their value.
pub(crate) fn host_json(nqn: &str, h: &str, keys: &nvmf_tgt::HostKeys) -> Value {
    let mut v = json!({ "nqn": nqn, "host": h });
    if let Some(k) = &keys.host {
        v["dhchap_key"] = json!(k.name);
    }
    if let Some(k) = &keys.ctrlr {
        v["dhchap_ctrlr_key"] = json!(k.name);
    }
    if let Some(k) = &keys.psk {
        v["psk"] = json!(k.name);
    }
    if keys.pending {
        v["rackcache_keys_pending"] = json!(true);
    }
    v
}
