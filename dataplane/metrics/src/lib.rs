//! Prometheus metrics for the dataplane, on the `prometheus-client` crate.
//!
//! Recording never takes a lock: counters and gauges are prometheus-client's
//! atomics, and a [`Histogram`] observation is two atomic adds (our own type,
//! encoded through prometheus-client).
//!
//! - [`registry`]: families of labelled series, the OpenMetrics text.
//! - [`histogram`]: the lock-free latency histogram.
//! - [`http`]: `GET /metrics` on a TCP port (hyper), with the `/healthz`
//!   and `/readyz` probes.

pub mod histogram;
pub mod http;
pub mod registry;

pub use histogram::Histogram;
pub use registry::{Counter, FloatGauge, Gauge, Registry};
