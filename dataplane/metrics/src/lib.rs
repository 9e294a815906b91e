//! Prometheus metrics for the dataplane.
//!
//! The I/O path only touches atomics: a [`Counter`] is one `AtomicU64`, a
//! [`Histogram`] a fixed array of them (buckets are powers of two of
//! microseconds, so finding a bucket is a leading-zeros count, not a search).
//! Rendering walks the [`Registry`] under a lock only the scraper takes.
//!
//! - [`registry`]: families of labelled series, and the text exposition
//!   format (version 0.0.4).
//! - [`http`]: `GET /metrics` on a TCP port.

pub mod http;
pub mod registry;

pub use registry::{Counter, Gauge, Histogram, Registry};
