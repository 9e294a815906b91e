//! Prometheus metrics for the dataplane, on the `prometheus-client` crate.
//!
//! Counters and gauges are atomics; a [`Histogram`] observation takes an
//! uncontended lock in prometheus-client plus two atomics here.
//!
//! - [`registry`]: families of labelled series, the OpenMetrics text.
//! - [`http`]: `GET /metrics` on a TCP port (hyper).

pub mod http;
pub mod registry;

pub use registry::{Counter, Gauge, Histogram, Registry};
