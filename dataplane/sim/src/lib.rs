//! rackcache-sim: replays block I/O traces through the same cache engine the
//! dataplane runs, and reports the AdaCache paper's metrics (hit ratios, the
//! four I/O volumes, metadata memory, missed request vs allocated block size,
//! per-request processing time) for fixed-size and adaptive configurations
//! side by side.
//!
//! - [`replay`]: the two passes over a trace (profile, then replay per
//!   configuration); [`layout`]: where each volume of a trace goes in the
//!   engine's one address space.
//! - [`report`]: the metrics of one configuration and the table they print as.
//! - [`plot`]: PNG charts in the manner of the paper's Figures 10-13;
//!   [`plot_mrc`]: miss-ratio curve charts.
//! - [`mrc`]: per-volume miss-ratio curves by SHARDS (`--mrc`);
//!   [`mrc_report`]: their table and JSON.
//! - [`options`], [`size`]: command-line values; [`cache_args`]: the cache
//!   options as one clap group (shared with `rackcache-loadgen replay`).
//! - [`latency`]: the per-request time histogram.
//! - [`peers`]: `--compare-peers`, libCacheSim's policies on the same 4 KiB
//!   block stream; [`temp`]: the temporary directory it works in.

pub mod cache_args;
pub mod latency;
pub mod layout;
pub mod mrc;
pub mod mrc_cli;
pub mod mrc_report;
pub mod options;
pub mod peers;
pub mod plot;
pub mod plot_mrc;
pub mod replay;
pub mod report;
pub mod size;

/// Where the sample traces are: `$RACKCACHE_TRACES`, or `shared/traces`
/// next to the repository (see docs/traces.md). Tests and benchmarks that
/// need them skip with a message when a file is missing (tests fail then
/// under `CI=true`).
pub fn traces_dir() -> std::path::PathBuf {
    std::env::var_os("RACKCACHE_TRACES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces")
        })
}
