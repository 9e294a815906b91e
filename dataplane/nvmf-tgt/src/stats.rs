//! Per-subsystem counters, registered in the `metrics` registry with the
//! label `subnqn`. Queue pairs hold `Arc`s to the series and only touch
//! atomics.
//!
//! I/O commands are counted when they complete successfully; their latency
//! runs from the command capsule's arrival to its completion being queued
//! (for a write by R2T, the host's data transfer included). The bdevs under
//! the namespaces count their own operations as well (`bdev::IoStats`).

use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Registry};

/// Names of the per-subsystem families, for removal on delete.
const FAMILIES: [&str; 15] = [
    "rackcache_nvmf_connections_total",
    "rackcache_nvmf_connections",
    "rackcache_nvmf_commands_total",
    "rackcache_nvmf_read_bytes_total",
    "rackcache_nvmf_written_bytes_total",
    "rackcache_nvmf_errors_total",
    "rackcache_nvmf_protocol_errors_total",
    "rackcache_nvmf_read_ops_total",
    "rackcache_nvmf_write_ops_total",
    "rackcache_nvmf_unmap_ops_total",
    "rackcache_nvmf_flush_ops_total",
    "rackcache_nvmf_read_latency_seconds",
    "rackcache_nvmf_write_latency_seconds",
    "rackcache_nvmf_auth_successes_total",
    "rackcache_nvmf_auth_failures_total",
];

/// Counters of one subsystem.
#[derive(Clone)]
pub struct SubsystemStats {
    /// Queue pairs ever connected (admin and I/O).
    pub connections_total: Arc<Counter>,
    /// Queue pairs connected now.
    pub connections: Arc<Gauge>,
    /// Commands completed.
    pub commands: Arc<Counter>,
    /// Bytes read by hosts.
    pub read_bytes: Arc<Counter>,
    /// Bytes written by hosts.
    pub written_bytes: Arc<Counter>,
    /// Commands completed with an error status.
    pub errors: Arc<Counter>,
    /// Connections ended by a protocol error (TermReq).
    pub protocol_errors: Arc<Counter>,
    /// Read commands completed successfully.
    pub read_ops: Arc<Counter>,
    /// Write commands completed successfully.
    pub write_ops: Arc<Counter>,
    /// Dataset Management (deallocate) commands completed successfully.
    pub unmap_ops: Arc<Counter>,
    /// Flush commands completed successfully.
    pub flush_ops: Arc<Counter>,
    /// Latency of successful reads.
    pub read_latency: Arc<Histogram>,
    /// Latency of successful writes.
    pub write_latency: Arc<Histogram>,
    /// DH-HMAC-CHAP transactions that ended in success (re-authentication
    /// included).
    pub auth_successes: Arc<Counter>,
    /// DH-HMAC-CHAP transactions that failed.
    pub auth_failures: Arc<Counter>,
}

impl SubsystemStats {
    /// Registers the series of subsystem `nqn`.
    pub fn register(registry: &Registry, nqn: &str) -> Self {
        let l = [("subnqn", nqn)];
        let c = |n: &str, h: &str| registry.counter(n, h, &l).expect("valid metric names");
        let h = |n: &str, d: &str| registry.histogram(n, d, &l).expect("valid metric names");
        Self {
            connections_total: c(
                FAMILIES[0],
                "NVMe/TCP queue pairs connected to the subsystem.",
            ),
            connections: registry
                .gauge(FAMILIES[1], "NVMe/TCP queue pairs currently connected.", &l)
                .expect("valid metric names"),
            commands: c(FAMILIES[2], "NVMe commands completed by the subsystem."),
            read_bytes: c(FAMILIES[3], "Bytes read by hosts from the subsystem."),
            written_bytes: c(FAMILIES[4], "Bytes written by hosts to the subsystem."),
            errors: c(FAMILIES[5], "NVMe commands completed with an error status."),
            protocol_errors: c(
                FAMILIES[6],
                "NVMe/TCP connections ended by a protocol error.",
            ),
            read_ops: c(FAMILIES[7], "Read commands completed by the subsystem."),
            write_ops: c(FAMILIES[8], "Write commands completed by the subsystem."),
            unmap_ops: c(
                FAMILIES[9],
                "Deallocate commands completed by the subsystem.",
            ),
            flush_ops: c(FAMILIES[10], "Flush commands completed by the subsystem."),
            read_latency: h(
                FAMILIES[11],
                "Read command latency, capsule received to completion sent.",
            ),
            write_latency: h(
                FAMILIES[12],
                "Write command latency, capsule received to completion sent.",
            ),
            auth_successes: c(
                FAMILIES[13],
                "DH-HMAC-CHAP authentications of queue pairs that succeeded.",
            ),
            auth_failures: c(
                FAMILIES[14],
                "DH-HMAC-CHAP authentications of queue pairs that failed.",
            ),
        }
    }

    /// Removes subsystem `nqn`'s series.
    pub fn unregister(registry: &Registry, nqn: &str) {
        for f in FAMILIES {
            registry.remove(f, &[("subnqn", nqn)]);
        }
    }
}
