//! Prometheus metrics for the dataplane, on the `prometheus-client` crate.
//!
//! Recording never takes a lock: counters, gauges and [`Histogram`]s are
//! atomics (gauges prometheus-client's, counters and histograms our own
//! types, encoded through prometheus-client). A hot path that one writer
//! at a time runs may count into a share of a counter or histogram
//! ([`LocalCounter`], [`LocalHistogram`]) with no locked instruction;
//! readers add the shares in.
//!
//! - [`registry`]: families of labelled series, the OpenMetrics text.
//! - [`histogram`]: the lock-free latency histogram.
//! - [`http`]: `GET /metrics` on a TCP port (hyper), with the `/healthz`
//!   and `/readyz` probes.

pub mod counter;
pub mod histogram;
pub mod http;
mod local;
pub mod registry;

pub use counter::{Counter, LocalCounter};
pub use histogram::{Histogram, LocalHistogram};
pub use registry::{FloatGauge, Gauge, Registry};
