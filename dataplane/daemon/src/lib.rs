//! rackcache's cache server (`rackcache-dataplane`): one process per cache
//! server, modelled on SPDK's storage target and driven by SPDK-compatible
//! JSON-RPC. See `docs/dataplane.md`.
//!
//! - [`app`]: control-plane state (bdevs, Ceph clusters, the NVMe-oF target).
//! - [`cached_volumes`]: the cached bdevs among the registered ones.
//! - [`cache_metrics`]: cached bdevs' statistics on /metrics.
//! - [`lease`]: the control plane's lease on the ANA paths, and the fence
//!   when it runs out.
//! - [`methods`]: the JSON-RPC methods, SPDK names and parameters, listed
//!   once in [`methods::table`].
//! - [`rpc`]: JSON-RPC 2.0 framing, the Unix socket server, error codes.
//! - [`config`]: `--config FILE` (a `save_config` output) replayed at start.

pub mod app;
pub mod cache_metrics;
pub mod cached_volumes;
pub mod config;
pub mod lease;
pub mod methods;
pub mod mirror;
pub mod rpc;
