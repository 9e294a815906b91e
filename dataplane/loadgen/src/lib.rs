//! A load generator and trace replayer over the userspace NVMe/TCP host of
//! the `nvmf-host` crate, for the benchmark (`rackcache-loadgen`).
//!
//! - [`workload`]: the pipelined load loop and its latency statistics.
//! - [`run`]: a whole run (controller, namespace, queues in threads).
//! - [`spdk_perf`]: SPDK's `spdk_nvme_perf` output read into a run's report.
//! - [`replay`]: a block I/O trace replayed against a namespace, laid out
//!   as the simulator lays it out, and the simulator's prediction for it.

pub mod keys;
pub mod replay;
pub mod run;
pub mod spdk_perf;
pub mod workload;
