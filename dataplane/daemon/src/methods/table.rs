//! The one table of the daemon's methods: for each its name, whether a
//! successful call may change what `save_config` records, the type its
//! parameters parse into, and its handler. Everything that lists methods
//! reads it: dispatch, `rpc_get_methods`, the `--config-persist` rewrite
//! after a change, the stock command line's sweep test
//! (`tests/spdk_cli.rs`) and the check of the method list in
//! docs/dataplane.md (`tests/method_docs.rs`).

use std::future::Future;
use std::pin::Pin;

use serde::Deserialize;
use serde_json::{json, Value};

use super::nvmf::{host, inspect, listener, namespace, set_config, subsystem, transport};
use super::params::{parse, NoParams};
use super::{
    adacache, bdev, bdev_inspect, ceph, config_errors, fault, framework, keyring, lease, mirror,
    resize, saved_config,
};
use crate::app::App;
use crate::rpc::error::{ErrorKind, RpcError};
use crate::rpc::server::Dispatch;

/// What a handler returns: its result, borrowing the daemon.
pub type Call<'a> = Pin<Box<dyn Future<Output = Result<Value, RpcError>> + Send + 'a>>;

/// What a successful call does to the state `save_config` records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Effect {
    /// Only reads it: nothing is rewritten after the call.
    Reads,
    /// May change it: `--config-persist` rewrites the saved configuration
    /// after the call succeeds (a needless rewrite is harmless, a missed
    /// one is not, so a method that acts on the state is declared so).
    Changes,
    /// Acts on what is never saved (the lease, another Ceph client):
    /// nothing is rewritten after the call, and a restart does not replay
    /// it. For calls the control plane repeats every second or that must
    /// not happen again by themselves.
    Acts,
}

/// One method of the table.
pub struct Method {
    /// SPDK's name (or rackcache's, `bdev_adacache_*`).
    pub name: &'static str,
    /// Whether a successful call may change the saved configuration.
    pub effect: Effect,
    /// The type its parameters parse into (unknown members are refused),
    /// as written in the table.
    pub params: &'static str,
    /// Parses the parameters into that type and runs the handler.
    pub call: for<'a> fn(&'a App, Option<Value>) -> Call<'a>,
    /// Only parses the parameters into that type (refusing what `call`
    /// would refuse before it acts): validation without effects.
    pub check: fn(Option<Value>) -> Result<(), RpcError>,
}

/// A table row: `method!(name, effect, handler, ParamsType)`, with extra
/// arguments of the handler after the parameters.
macro_rules! method {
    ($name:literal, $effect:ident, $handler:path, $params:ty $(, $extra:expr)*) => {
        Method {
            name: $name,
            effect: Effect::$effect,
            params: stringify!($params),
            call: {
                fn call(app: &App, params: Option<Value>) -> Call<'_> {
                    Box::pin(async move {
                        let p = parse::<$params>(params)?;
                        $handler(app, p $(, $extra)*).await
                    })
                }
                call
            },
            check: |params| parse::<$params>(params).map(|_| ()),
        }
    };
}

/// Every method this daemon serves, in the order `rpc_get_methods` lists
/// them.
#[rustfmt::skip]
pub static METHODS: &[Method] = &[
    method!("spdk_get_version",               Reads,   framework::spdk_get_version,         NoParams),
    method!("rackcache_get_addresses",        Reads,   framework::rackcache_get_addresses,  NoParams),
    method!("rpc_get_methods",                Reads,   rpc_get_methods,                     GetMethods),
    method!("framework_get_subsystems",       Reads,   framework::framework_get_subsystems, NoParams),
    method!("framework_get_config",           Reads,   framework::framework_get_config,     framework::GetConfig),
    method!("save_config",                    Reads,   framework::save_config,              NoParams),
    method!("rackcache_get_config_errors",    Reads,   config_errors::get,                  NoParams),
    method!("rackcache_retry_config_errors",  Changes, config_errors::retry,                NoParams),
    method!("rackcache_drop_config_error",    Changes, config_errors::drop_one,             config_errors::DropError),
    method!("bdev_get_bdevs",                 Reads,   bdev_inspect::get_bdevs,             bdev_inspect::GetBdevs),
    method!("bdev_get_iostat",                Reads,   bdev_inspect::get_iostat,            bdev_inspect::GetIostat),
    method!("bdev_malloc_create",             Changes, bdev::malloc_create,                 bdev::MallocCreate),
    method!("bdev_malloc_delete",             Changes, bdev::delete,                        bdev::ByName, "Malloc disk"),
    method!("bdev_aio_create",                Changes, bdev::aio_create,                    bdev::AioCreate),
    method!("bdev_aio_delete",                Changes, bdev::delete,                        bdev::ByName, "AIO disk"),
    method!("bdev_rbd_register_cluster",      Changes, bdev::rbd_register_cluster,          bdev::RegisterCluster),
    method!("bdev_rbd_unregister_cluster",    Changes, bdev::rbd_unregister_cluster,        bdev::ByName),
    method!("bdev_rbd_create",                Changes, bdev::rbd_create,                    bdev::RbdCreate),
    method!("bdev_rbd_delete",                Changes, bdev::delete,                        bdev::ByName, "Ceph Rbd Disk"),
    method!("bdev_rbd_resize",                Changes, resize::rbd_resize,                  resize::RbdResize),
    method!("bdev_rbd_get_clusters_info",     Reads,   ceph::get_clusters_info,             ceph::GetClustersInfo),
    method!("bdev_rbd_blocklist_add",         Acts,    ceph::blocklist_add,                 ceph::BlocklistAdd),
    method!("bdev_delay_create",              Changes, fault::delay_create,                 fault::DelayCreate),
    method!("bdev_delay_delete",              Changes, bdev::delete,                        bdev::ByName, "delay"),
    method!("bdev_delay_update_latency",      Changes, fault::delay_update_latency,         fault::UpdateLatency),
    method!("bdev_error_create",              Changes, fault::error_create,                 fault::ErrorCreate),
    method!("bdev_error_delete",              Changes, bdev::delete,                        bdev::ByName, "error"),
    method!("bdev_error_inject_error",        Changes, fault::error_inject,                 fault::Inject),
    method!("bdev_error_resume_pending",      Changes, fault::error_resume_pending,         fault::ByName),
    method!("bdev_adacache_create",           Changes, adacache::create,                    cache::volume::VolumeParams),
    method!("bdev_adacache_delete",           Changes, adacache::delete,                    adacache::Delete),
    method!("bdev_adacache_get_bdevs",        Reads,   adacache::get_bdevs,                 adacache::OptName),
    method!("bdev_adacache_get_stats",        Reads,   adacache::get_stats,                 adacache::ByName),
    method!("bdev_adacache_get_mrc",          Reads,   adacache::get_mrc,                   adacache::ByName),
    method!("bdev_adacache_reset_stats",      Changes, adacache::reset_stats,               adacache::ByName),
    method!("bdev_adacache_flush",            Changes, adacache::flush,                     adacache::ByName),
    method!("bdev_adacache_flush_status",     Reads,   adacache::flush_status,              adacache::ByName),
    method!("bdev_adacache_set_mode",         Changes, adacache::set_mode,                  adacache::SetMode),
    method!("bdev_adacache_set_policy",       Changes, adacache::set_policy,                adacache::SetPolicy),
    method!("bdev_adacache_resize",           Changes, adacache::resize,                    adacache::Resize),
    method!("bdev_adacache_set_role",         Changes, mirror::set_role,                    mirror::SetRole),
    method!("bdev_adacache_set_mirror",       Acts,    mirror::set_mirror,                  mirror::SetMirror),
    method!("bdev_adacache_get_devices",      Reads,   adacache::get_devices,               NoParams),
    method!("nvmf_create_transport",          Changes, transport::create_transport,         transport::CreateTransport),
    method!("nvmf_get_transports",            Reads,   transport::get_transports,           transport::GetTransports),
    method!("nvmf_create_subsystem",          Changes, subsystem::create_subsystem,         subsystem::CreateSubsystem),
    method!("nvmf_delete_subsystem",          Changes, subsystem::delete_subsystem,         subsystem::ByNqn),
    method!("nvmf_get_subsystems",            Reads,   subsystem::get_subsystems,           subsystem::GetSubsystems),
    method!("nvmf_subsystem_add_listener",    Changes, listener::add_listener,              listener::AddListener),
    method!("nvmf_subsystem_remove_listener", Changes, listener::remove_listener,           listener::RemoveListener),
    // It changes the target, not what is saved (listeners come back
    // inaccessible): the rewrite after it writes the same file, harmless.
    method!("nvmf_subsystem_listener_set_ana_state", Changes, listener::set_ana_state,     listener::SetAnaState),
    method!("nvmf_subsystem_add_ns",          Changes, namespace::add_ns,                   namespace::AddNs),
    method!("nvmf_subsystem_remove_ns",       Changes, namespace::remove_ns,                namespace::RemoveNs),
    method!("nvmf_subsystem_add_host",        Changes, host::add_host,                      host::AddHost),
    method!("nvmf_subsystem_remove_host",     Changes, host::remove_host,                   host::RemoveHost),
    method!("nvmf_subsystem_set_keys",        Changes, host::set_keys,                      host::SetKeys),
    method!("nvmf_set_config",                Changes, set_config::set_config,              set_config::SetConfig),
    method!("keyring_file_add_key",           Changes, keyring::add_key,                    keyring::AddKey),
    method!("keyring_file_remove_key",        Changes, keyring::remove_key,                 keyring::RemoveKey),
    method!("keyring_memory_add_key",         Changes, keyring::add_memory_key,             keyring::AddMemoryKey),
    method!("keyring_memory_remove_key",      Changes, keyring::remove_key,                 keyring::RemoveKey),
    method!("keyring_get_keys",               Reads,   keyring::get_keys,                   NoParams),
    method!("nvmf_subsystem_allow_any_host",  Changes, subsystem::allow_any_host,           subsystem::AllowAnyHost),
    method!("nvmf_subsystem_get_controllers", Reads,   inspect::get_controllers,            inspect::ByNqn),
    method!("nvmf_subsystem_get_qpairs",      Reads,   inspect::get_qpairs,                 inspect::ByNqn),
    method!("nvmf_subsystem_get_listeners",   Reads,   inspect::get_listeners,              inspect::ByNqn),
    method!("nvmf_get_stats",                 Reads,   inspect::get_stats,                  inspect::GetStats),
    method!("rackcache_lease_renew",          Acts,    lease::renew,                        lease::Renew),
    method!("rackcache_lease_get",            Reads,   lease::get,                          NoParams),
];

/// The method called `name`.
pub fn find(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|m| m.name == name)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetMethods {
    // Every method is callable in every state here and none has aliases, so
    // these flags change nothing; they are still validated.
    #[serde(default, rename = "current")]
    _current: bool,
    #[serde(default, rename = "include_aliases")]
    _include_aliases: bool,
}

/// `rpc_get_methods`: the table's names, in its order.
async fn rpc_get_methods(_app: &App, _: GetMethods) -> Result<Value, RpcError> {
    Ok(json!(METHODS.iter().map(|m| m.name).collect::<Vec<_>>()))
}

impl Dispatch for App {
    async fn dispatch(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        let Some(m) = find(method) else {
            return Err(RpcError::new(ErrorKind::MethodNotFound, "Method not found"));
        };
        let kept = (m.effect == Effect::Changes).then(|| params.clone());
        let out = (m.call)(self, params).await?;
        // A kept failed start-up call that now succeeded live is done.
        if let Some(p) = kept {
            let mut state = self.state.lock().await;
            if !state.config_errors.is_empty() && state.config_errors.superseded_by(method, &p) {
                tracing::info!(
                    method,
                    "a failed configuration call was made live: forgotten"
                );
            }
        }
        Ok(out)
    }

    fn changes_state(&self, method: &str) -> bool {
        find(method).is_some_and(|m| m.effect == Effect::Changes)
    }

    async fn changed(&self) {
        saved_config::persist(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_name_their_type() {
        assert_eq!(
            find("bdev_malloc_create").unwrap().params,
            "bdev::MallocCreate"
        );
        assert_eq!(find("save_config").unwrap().params, "NoParams");
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = METHODS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), METHODS.len());
    }

    /// SPDK names its readers `*_get_*`: those, and the framework's
    /// readers, do not rewrite the saved configuration.
    #[test]
    fn readers_and_changers() {
        let changes = |m: &str| find(m).unwrap().effect == Effect::Changes;
        for m in [
            "bdev_get_bdevs",
            "nvmf_subsystem_get_controllers",
            "save_config",
            "bdev_adacache_get_bdevs",
            "bdev_adacache_get_stats",
            "bdev_adacache_get_mrc",
            "bdev_adacache_get_devices",
            "bdev_adacache_flush_status",
            "rpc_get_methods",
        ] {
            assert!(!changes(m), "{m}");
        }
        for m in [
            "bdev_malloc_create",
            "bdev_delay_create",
            "bdev_error_inject_error",
            "nvmf_subsystem_add_host",
            "bdev_adacache_create",
            "bdev_adacache_delete",
            "bdev_adacache_set_mode",
            "bdev_adacache_set_policy",
            "bdev_adacache_resize",
        ] {
            assert!(changes(m), "{m}");
        }
        for m in METHODS.iter().filter(|m| m.name.contains("_get")) {
            assert_eq!(m.effect, Effect::Reads, "{}", m.name);
        }
        // Nothing rewritten after them, nothing replayed at a restart.
        for m in ["rackcache_lease_renew", "bdev_rbd_blocklist_add"] {
            assert_eq!(find(m).unwrap().effect, Effect::Acts, "{m}");
        }
    }
}
