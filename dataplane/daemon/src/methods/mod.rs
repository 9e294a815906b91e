//! The JSON-RPC methods, with SPDK's names and parameters. Handlers are
//! thin: parse and validate (unknown parameters are rejected), act on the
//! state, map errors in one place ([`crate::rpc::error`]).

pub mod adacache;
mod bdev;
mod bdev_inspect;
mod fault;
mod framework;
mod nvmf;
mod params;
mod registry;
mod resize;
pub mod saved_config;

use serde_json::Value;

use crate::app::App;
use crate::rpc::error::{RpcError, METHOD_NOT_FOUND};
use crate::rpc::server::Dispatch;

/// Every method this daemon serves, in the order `rpc_get_methods` lists them.
pub const METHODS: &[&str] = &[
    "spdk_get_version",
    "rpc_get_methods",
    "framework_get_subsystems",
    "framework_get_config",
    "save_config",
    "bdev_get_bdevs",
    "bdev_get_iostat",
    "bdev_malloc_create",
    "bdev_malloc_delete",
    "bdev_aio_create",
    "bdev_aio_delete",
    "bdev_rbd_register_cluster",
    "bdev_rbd_unregister_cluster",
    "bdev_rbd_create",
    "bdev_rbd_delete",
    "bdev_rbd_resize",
    "bdev_delay_create",
    "bdev_delay_delete",
    "bdev_delay_update_latency",
    "bdev_error_create",
    "bdev_error_delete",
    "bdev_error_inject_error",
    "bdev_error_resume_pending",
    "bdev_adacache_create",
    "bdev_adacache_delete",
    "bdev_adacache_get_bdevs",
    "bdev_adacache_get_stats",
    "bdev_adacache_get_mrc",
    "bdev_adacache_reset_stats",
    "bdev_adacache_flush",
    "bdev_adacache_flush_status",
    "bdev_adacache_set_mode",
    "bdev_adacache_set_policy",
    "bdev_adacache_resize",
    "bdev_adacache_get_devices",
    "nvmf_create_transport",
    "nvmf_get_transports",
    "nvmf_create_subsystem",
    "nvmf_delete_subsystem",
    "nvmf_get_subsystems",
    "nvmf_subsystem_add_listener",
    "nvmf_subsystem_remove_listener",
    "nvmf_subsystem_add_ns",
    "nvmf_subsystem_remove_ns",
    "nvmf_subsystem_add_host",
    "nvmf_subsystem_remove_host",
    "nvmf_subsystem_allow_any_host",
    "nvmf_subsystem_get_controllers",
    "nvmf_subsystem_get_qpairs",
    "nvmf_subsystem_get_listeners",
    "nvmf_get_stats",
];

impl Dispatch for App {
    async fn dispatch(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        match method {
            "spdk_get_version" => framework::spdk_get_version(params),
            "rpc_get_methods" => framework::rpc_get_methods(params),
            "framework_get_subsystems" => framework::framework_get_subsystems(params),
            "framework_get_config" => framework::framework_get_config(self, params).await,
            "save_config" => framework::save_config(self, params).await,
            "bdev_get_bdevs" => bdev_inspect::get_bdevs(self, params).await,
            "bdev_get_iostat" => bdev_inspect::get_iostat(self, params).await,
            "bdev_malloc_create" => bdev::malloc_create(self, params).await,
            "bdev_malloc_delete" => bdev::delete(self, params, "Malloc disk").await,
            "bdev_aio_create" => bdev::aio_create(self, params).await,
            "bdev_aio_delete" => bdev::delete(self, params, "AIO disk").await,
            "bdev_rbd_register_cluster" => bdev::rbd_register_cluster(self, params).await,
            "bdev_rbd_unregister_cluster" => bdev::rbd_unregister_cluster(self, params).await,
            "bdev_rbd_create" => bdev::rbd_create(self, params).await,
            "bdev_rbd_delete" => bdev::delete(self, params, "Ceph Rbd Disk").await,
            "bdev_rbd_resize" => resize::rbd_resize(self, params).await,
            "bdev_delay_create" => fault::delay_create(self, params).await,
            "bdev_delay_delete" => bdev::delete(self, params, "delay").await,
            "bdev_delay_update_latency" => fault::delay_update_latency(self, params).await,
            "bdev_error_create" => fault::error_create(self, params).await,
            "bdev_error_delete" => bdev::delete(self, params, "error").await,
            "bdev_error_inject_error" => fault::error_inject(self, params).await,
            "bdev_error_resume_pending" => fault::error_resume_pending(self, params).await,
            "bdev_adacache_create" => adacache::create(self, params).await,
            "bdev_adacache_delete" => adacache::delete(self, params).await,
            "bdev_adacache_get_bdevs" => adacache::get_bdevs(self, params).await,
            "bdev_adacache_get_stats" => adacache::get_stats(self, params).await,
            "bdev_adacache_get_mrc" => adacache::get_mrc(self, params).await,
            "bdev_adacache_reset_stats" => adacache::reset_stats(self, params).await,
            "bdev_adacache_flush" => adacache::flush(self, params).await,
            "bdev_adacache_flush_status" => adacache::flush_status(self, params).await,
            "bdev_adacache_set_mode" => adacache::set_mode(self, params).await,
            "bdev_adacache_set_policy" => adacache::set_policy(self, params).await,
            "bdev_adacache_resize" => adacache::resize(self, params).await,
            "bdev_adacache_get_devices" => adacache::get_devices(self, params).await,
            "nvmf_create_transport" => nvmf::transport::create_transport(self, params).await,
            "nvmf_get_transports" => nvmf::transport::get_transports(self, params).await,
            "nvmf_create_subsystem" => nvmf::subsystem::create_subsystem(self, params).await,
            "nvmf_delete_subsystem" => nvmf::subsystem::delete_subsystem(self, params).await,
            "nvmf_get_subsystems" => nvmf::subsystem::get_subsystems(self, params).await,
            "nvmf_subsystem_add_listener" => nvmf::listener::add_listener(self, params).await,
            "nvmf_subsystem_remove_listener" => nvmf::listener::remove_listener(self, params).await,
            "nvmf_subsystem_add_ns" => nvmf::namespace::add_ns(self, params).await,
            "nvmf_subsystem_remove_ns" => nvmf::namespace::remove_ns(self, params).await,
            "nvmf_subsystem_add_host" => nvmf::host::add_host(self, params).await,
            "nvmf_subsystem_remove_host" => nvmf::host::remove_host(self, params).await,
            "nvmf_subsystem_allow_any_host" => nvmf::subsystem::allow_any_host(self, params).await,
            "nvmf_subsystem_get_controllers" => nvmf::inspect::get_controllers(self, params).await,
            "nvmf_subsystem_get_qpairs" => nvmf::inspect::get_qpairs(self, params).await,
            "nvmf_subsystem_get_listeners" => nvmf::inspect::get_listeners(self, params).await,
            "nvmf_get_stats" => nvmf::inspect::get_stats(self, params).await,
            _ => Err(RpcError::new(METHOD_NOT_FOUND, "Method not found")),
        }
    }

    async fn changed(&self) {
        saved_config::persist(self).await
    }
}
