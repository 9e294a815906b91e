//! The NVMe-oF target over TCP: what the Linux kernel initiator (`nvme
//! discover`, `nvme connect -t tcp`) talks to.
//!
//! # Design
//!
//! - **One tokio task per queue pair** ([`connection`]). It owns its socket,
//!   receive buffer, request slots, buffer pool and output batch; nothing on
//!   its I/O path is shared with other queues except the bdev (whose own
//!   locking is per chunk or per request) and atomic counters.
//! - **Lookups at Connect time.** Connect resolves the subsystem and the
//!   controller into `Arc`s held by the task. Namespaces are read from a
//!   per-connection snapshot refreshed only when the subsystem's namespace
//!   generation changes. The [`Target`] registry (subsystems, listeners)
//!   sits behind locks that only Connect, discovery and configuration take.
//! - **Several commands in flight per queue.** Bdev operations run as
//!   futures in a `FuturesUnordered` polled by the queue's task, alongside
//!   the socket; completions are batched into one write.
//! - **Explicit states**: [`connection::ConnState`] for the connection and
//!   [`connection::ReqState`] for every request slot, with one `set_state`
//!   that keeps the per-state counts.
//! - **Failures stay local**: a malformed PDU ends that connection with a
//!   C2HTermReq; a host over its queue depth gets an error status for the
//!   extra commands; an expired keep-alive tears down that controller only.
//!
//! Modules: [`subsystem`] (subsystems, namespaces, hosts, listeners),
//! [`controller`] (per-association state: registers, keep-alive, async
//! events), [`connection`] (the NVMe/TCP state machine and command
//! dispatch), [`identify`] and [`log_page`] (data structures), [`stats`]
//! (per-subsystem metrics), [`bufpool`] (the data buffer budget). The
//! in-memory host for tests and the fuzzer is the `nvmf-harness` crate,
//! outside the daemon.

pub mod ctrlr;
pub mod poller;
pub mod stats;
pub mod subsystem;
mod target;
pub mod tcp;

pub use ctrlr::{controller, identify, log_page};
pub use tcp::{bufpool, connection, outbox};

pub use controller::{Controller, QpairCountsSnapshot, QpairPath, Revocation};
pub use poller::{PollMode, Poller};
pub use subsystem::{ListenAddress, Namespace, Subsystem, SubsystemConfig, DISCOVERY_NQN};
pub use target::{Target, TargetStats, TransportOptions, MAX_TIMEOUT};

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
