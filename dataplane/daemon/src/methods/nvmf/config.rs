//! The "nvmf" section of a saved configuration (`save_config`,
//! `framework_get_config nvmf`, `--config-persist`).

use nvmf_tgt::{ListenAddress, DISCOVERY_NQN};
use serde_json::{json, Value};

use super::super::registry::uuid_string;
use super::json::{advertised_json, hex_upper, host_json, listener_json};
use crate::app::NvmfState;

/// The nvmf subsystem's configuration in SPDK's order: the transport, then
/// subsystems, their hosts, their namespaces (with their identifiers, so a
/// restart keeps them), their listeners. A host with a key that
/// `key_saved` says is not saved is saved as waiting for its keys
/// (`rackcache_keys_pending`): restored keyless it would be let in, and
/// left out it would be refused for good (Linux gives up reconnecting on
/// Connect Invalid Host), while Controller Busy keeps it retrying until
/// the control plane sets its keys again.
pub(crate) fn config(nvmf: &NvmfState, key_saved: impl Fn(&str) -> bool) -> Vec<Value> {
    let mut out: Vec<Value> = super::set_config::config_call(nvmf).into_iter().collect();
    let (Some(t), Some(transport)) = (&nvmf.target, &nvmf.transport) else {
        return out;
    };
    let subs = t.subsystems();
    let discovery = t.subsystem(DISCOVERY_NQN);
    let call = |method: &str, params: Value| json!({ "method": method, "params": params });
    out.push(call("nvmf_create_transport", transport.clone()));
    for s in &subs {
        out.push(call(
            "nvmf_create_subsystem",
            json!({
                "nqn": s.nqn,
                "allow_any_host": s.allow_any_host(),
                "serial_number": s.serial,
                "model_number": s.model,
                "max_namespaces": s.max_namespaces,
                "ana_reporting": s.ana_reporting,
                "min_cntlid": s.cntlid_range().start(),
                "max_cntlid": s.cntlid_range().end(),
            }),
        ));
    }
    for s in &subs {
        for (h, keys) in s.hosts_with_keys() {
            let saved = [&keys.host, &keys.ctrlr]
                .into_iter()
                .flatten()
                .map(|k| &k.name)
                .chain(keys.psk.iter().map(|k| &k.name))
                .all(|name| key_saved(name));
            let keys = if saved {
                keys
            } else {
                // Saved without the keys it has only in memory: restored,
                // the host waits (Controller Busy, retried) for them.
                nvmf_tgt::HostKeys {
                    pending: true,
                    ..Default::default()
                }
            };
            out.push(call(
                "nvmf_subsystem_add_host",
                host_json(&s.nqn, &h, &keys),
            ));
        }
    }
    for s in &subs {
        for ns in s.namespaces().values() {
            let mut params = json!({
                "nqn": s.nqn,
                "namespace": {
                    "nsid": ns.nsid,
                    "bdev_name": ns.bdev_name,
                    "nguid": hex_upper(&ns.nguid),
                    "uuid": uuid_string(&ns.uuid),
                }
            });
            if s.ana_reporting {
                params["namespace"]["anagrpid"] = json!(ns.anagrpid);
            }
            out.push(call("nvmf_subsystem_add_ns", params));
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
                "secure_channel": l.secure_channel,
            });
            if let Some(a) = advertised_json(&l) {
                params["rackcache_advertised"] = a;
            }
            // A restarted server does not claim any path: its listeners
            // come back inaccessible until the control plane, which knows
            // whether another server took the volume over meanwhile, sets
            // their states again (docs/dataplane.md, "Asymmetric Namespace
            // Access").
            if s.ana_reporting {
                params["ana_state"] = json!("inaccessible");
            }
            out.push(call("nvmf_subsystem_add_listener", params));
        }
    }
    out
}
