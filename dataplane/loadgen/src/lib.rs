//! A userspace NVMe/TCP host: enough of an initiator to connect to a target,
//! run admin commands and keep a queue full of reads or writes, for the
//! benchmark (`rackcache-loadgen`) and for tests that want a host without a
//! kernel.
//!
//! - [`host`]: one queue pair over a blocking TCP stream: ICReq, Fabrics
//!   Connect, command capsules with in-capsule data or R2T/H2CData, C2HData.
//! - [`wire`]: host PDUs and commands as bytes, shared with the in-memory
//!   test harness.
//! - [`workload`]: the pipelined load loop and its latency statistics.
//! - [`run`]: a whole run (controller, namespace, queues in threads).
//! - [`replay`]: a block I/O trace replayed against a namespace, laid out
//!   as the simulator lays it out, and the simulator's prediction for it.

pub mod host;
pub mod replay;
pub mod run;
pub mod wire;
pub mod workload;
