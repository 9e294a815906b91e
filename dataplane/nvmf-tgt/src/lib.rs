//! The NVMe-oF target over TCP: what the Linux kernel initiator (`nvme
//! discover`, `nvme connect -t tcp`) talks to.
//!
//! # Layers
//!
//! Two layers, as SPDK's `lib/nvmf` keeps them (`ctrlr.c` and `tcp.c`):
//!
//! - [`ctrlr`], the transport-neutral request and controller layer. A
//!   queue's `ctrlr::Queue` takes every command through one entry point,
//!   `exec(sqe, in-capsule data)`, and answers with an `Outcome`:
//!   complete (with reply data or not), needs data (a buffer, filled from
//!   the host for a write, before `run`), or submit (a bdev operation, a
//!   future the transport polls). Fabrics (Connect, Property Get/Set,
//!   Disconnect), admin and I/O commands and their execution against bdevs
//!   live here, with the per-association [`Controller`]. It knows nothing
//!   of PDUs or sockets, so its commands are tested without either.
//! - [`tcp`], the NVMe/TCP transport: queue pair tasks, PDU receive and
//!   send, request slots indexed by transfer tag, data buffers and their
//!   budget, the output batch. It only moves PDUs and calls the ctrlr
//!   layer.
//!
//! Beside them: [`subsystem`] (subsystems, namespaces on bdevs, hosts,
//! listeners; a subsystem owns its controllers' table, a controller points
//! back at the table, never at the subsystem), `state` (the state queue
//! pairs and the [`Target`] handle share, behind methods: the subsystem
//! registry, listener table, controllers still draining, shutdown and
//! drain signals, buffer budget), `target` (the configuration API),
//! `options` ([`TransportOptions`]), [`ana`] and [`ana_fence`] (Asymmetric
//! Namespace Access, and the target-wide gate over it), [`stats`]
//! (per-subsystem metrics) and
//! [`poller`] (busy polling). Dependencies point one way: `target` ->
//! `tcp` -> `ctrlr` -> `state`/`subsystem` -> `ctrlr::controller`.
//!
//! # Design
//!
//! - **One tokio task per queue pair** ([`tcp`]). It owns its socket,
//!   receive buffer, request slots, buffer pool and output batch; nothing on
//!   its I/O path is shared with other queues except the bdev (whose own
//!   locking is per chunk or per request) and atomic counters. The ctrlr
//!   layer adds no allocation, lock or dynamic dispatch per command: an
//!   outcome is returned by value, an operation is a plain enum run by one
//!   async function.
//! - **Lookups at Connect time.** Connect resolves the subsystem and the
//!   controller into `Arc`s held by the queue. Namespaces are read from a
//!   per-queue snapshot refreshed only when the subsystem's namespace
//!   generation changes. The target's registry (subsystems, listeners)
//!   sits behind locks that only Connect, discovery and configuration take.
//! - **Several commands in flight per queue.** Bdev operations run as
//!   futures in a `FuturesUnordered` polled by the queue's task, alongside
//!   the socket; completions are batched into one write.
//! - **Explicit states**: [`tcp::qpair::ConnState`] for the connection and
//!   [`tcp::qpair::ReqState`] for every request slot, with one `set_state`
//!   that keeps the per-state counts.
//! - **Failures stay local**: a malformed PDU ends that connection with a
//!   C2HTermReq; a host over its queue depth gets an error status for the
//!   extra commands; an expired keep-alive tears down that controller only.
//!
//! The in-memory host for tests and the fuzzer is the `nvmf-harness`
//! crate, outside the daemon.

pub mod ana;
pub mod ana_fence;
pub mod auth;
pub mod ctrlr;
mod options;
pub mod poller;
mod state;
pub mod stats;
pub mod subsystem;
mod subsystem_ana;
mod target;
pub mod tcp;

pub use auth::{AuthPolicy, HostKeys, NamedKey, NamedPsk};
pub use ctrlr::controller::{Controller, QpairCountsSnapshot, QpairPath, Revocation};
pub use options::{TransportOptions, MAX_TIMEOUT};
pub use poller::{PollMode, Poller};
pub use subsystem::{ListenAddress, Namespace, Subsystem, SubsystemConfig, DISCOVERY_NQN};
pub use target::{Target, TargetStats};

/// Errors of configuration calls.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A parameter is invalid.
    #[error("{0}")]
    InvalidArgument(String),
    /// The object already exists.
    #[error("{0} already exists")]
    Exists(String),
    /// The object does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// Binding a listener failed.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The target is shutting down.
    #[error("the target is shutting down")]
    ShuttingDown,
}
