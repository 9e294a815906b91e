//! A userspace NVMe/TCP host (initiator): enough of one to connect to a
//! target, run admin commands and keep a queue full of reads or writes. The
//! target's tests, the daemon's tests, the benchmarks and the load
//! generator (`loadgen`) use it when they want a host without a kernel.
//!
//! - [`host`]: one queue pair over a blocking TCP stream: ICReq, Fabrics
//!   Connect, command capsules with in-capsule data or R2T/H2CData, C2HData.
//! - [`auth`]: DH-HMAC-CHAP on a connected queue, when the target asks.
//! - [`wire`]: host PDUs and commands as bytes, shared with the in-memory
//!   test harness (`nvmf-harness`).
//!
//! It depends on the `nvmf` codec only: no runtime, no simulator.

pub mod auth;
pub mod host;
pub mod wire;
