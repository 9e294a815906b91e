//! `rackcache-loadgen replay`: options and output.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use loadgen::replay::{predict_run, run, CacheModel, Prediction, ReplayOptions, ReplayReport};
use loadgen::run::{RunError, DEFAULT_HOSTNQN};
use loadgen::workload::LatencySummary;
use rackcache_sim::cache_args::CacheArgs;
use rackcache_sim::size::{format_bytes, parse_bytes};
use serde::Serialize;

/// Replay a block I/O trace against an NVMe/TCP namespace.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// Target address (host:port).
    #[arg(long, default_value = "127.0.0.1:4420")]
    addr: String,
    /// Subsystem NQN.
    #[arg(long)]
    nqn: String,
    /// Host NQN to connect as.
    #[arg(long, default_value = DEFAULT_HOSTNQN)]
    hostnqn: String,
    /// Namespace id.
    #[arg(long, default_value_t = 1)]
    nsid: u32,
    /// The trace, in any format rackcache-sim reads (detected from the
    /// content).
    #[arg(long)]
    trace: PathBuf,
    /// Read the trace as this format instead of detecting it.
    #[arg(long)]
    format: Option<traces::Format>,
    /// Bytes per oracleGeneral object id (512 for converted block traces).
    #[arg(long, default_value_t = 1)]
    oracle_id_unit: u64,
    /// Replay only this volume of a multi-volume trace.
    #[arg(long)]
    volume: Option<u32>,
    /// Sector size requests are widened to (as rackcache-sim's).
    #[arg(long, default_value = "4K", value_parser = parse_bytes)]
    sector_size: u64,
    /// Times the trace's own speed; 0: as fast as the queue depth allows.
    #[arg(long, default_value_t = 1.0)]
    speedup: f64,
    /// Commands in flight at most.
    #[arg(long, default_value_t = 32)]
    qd: usize,
    /// Requests read from the trace at most, warm-up included (as
    /// rackcache-sim's --limit).
    #[arg(long)]
    max_requests: Option<u64>,
    /// Stop sending this many seconds after the measured requests started.
    #[arg(long)]
    max_seconds: Option<f64>,
    /// The first N requests warm the cache (sent unpaced, not counted; as
    /// rackcache-sim's --warmup).
    #[arg(long, default_value_t = 0)]
    warmup_requests: u64,
    /// Stamp written blocks and check that reads return them.
    #[arg(long)]
    verify: bool,
    /// Also replay the sent requests through the cache engine configured by
    /// the options below and print its prediction beside the run.
    #[arg(long)]
    predict: bool,
    #[command(flatten)]
    cache: CacheArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// What `--json` prints.
#[derive(Serialize)]
struct JsonOutput<'a> {
    run: &'a ReplayReport,
    predictions: &'a [Prediction],
}

pub fn main(args: &ReplayArgs) -> ExitCode {
    match replay(args) {
        Ok(failed) => {
            if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("rackcache-loadgen replay: {e}");
            ExitCode::FAILURE
        }
    }
}

fn options(a: &ReplayArgs) -> Result<ReplayOptions, RunError> {
    let max_duration = match a.max_seconds {
        Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
        Some(s) => return Err(format!("--max-seconds {s} is not a positive number").into()),
        None => None,
    };
    Ok(ReplayOptions {
        addr: a.addr.clone(),
        nqn: a.nqn.clone(),
        hostnqn: a.hostnqn.clone(),
        nsid: a.nsid,
        trace: a.trace.clone(),
        format: a.format,
        oracle_id_unit: a.oracle_id_unit,
        volume: a.volume,
        sector_size: a.sector_size,
        speedup: a.speedup,
        queue_depth: a.qd,
        max_requests: a.max_requests,
        max_duration,
        warmup_requests: a.warmup_requests,
        verify: a.verify,
    })
}

/// Runs the replay and prints it; `Ok(true)` when requests failed or
/// data did not verify.
fn replay(a: &ReplayArgs) -> Result<bool, RunError> {
    let opts = options(a)?;
    // Parse the cache options before sending anything.
    let caches = if a.predict {
        CacheModel::from_args(&a.cache)?
    } else {
        Vec::new()
    };
    let report = run(&opts)?;
    let predictions = caches
        .iter()
        .map(|c| predict_run(&opts, c, &report))
        .collect::<Result<Vec<_>, _>>()?;
    if a.json {
        let out = JsonOutput {
            run: &report,
            predictions: &predictions,
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", render(&report, &predictions));
    }
    Ok(report.errors > 0 || report.verify_errors > 0)
}

fn latency(l: &LatencySummary) -> String {
    format!(
        "p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} µs",
        l.p50_us, l.p99_us, l.p999_us, l.max_us
    )
}

/// The human-readable report.
fn render(r: &ReplayReport, predictions: &[Prediction]) -> String {
    let mut s = format!(
        "replay {}: {} volume(s) laid out over {} of a {} namespace, speed-up {}, QD {}, stopped by {}\n",
        r.trace,
        r.volumes,
        format_bytes(r.address_space),
        format_bytes(r.namespace_bytes),
        r.speedup,
        r.queue_depth,
        r.stopped_by,
    );
    s += &format!(
        "  {} requests (after {} warm-up) in {:.3} s: {:.0} IOPS, {:.1} MiB/s, {} errors\n",
        r.requests, r.warmup_requests, r.elapsed_s, r.iops, r.mib_per_s, r.errors
    );
    s += &format!(
        "  reads {} ({}), writes {} ({}); {} commands, {} requests split at {}\n",
        r.reads,
        format_bytes(r.read_bytes),
        r.writes,
        format_bytes(r.write_bytes),
        r.commands,
        r.split_requests,
        format_bytes(r.max_transfer),
    );
    s += &format!("  read latency  {}\n", latency(&r.read_latency));
    s += &format!("  write latency {}\n", latency(&r.write_latency));
    if r.verified_blocks > 0 || r.verify_errors > 0 {
        s += &format!(
            "  verified {} blocks, {} reads wrong{}\n",
            r.verified_blocks,
            r.verify_errors,
            r.first_verify_error
                .as_ref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        );
    }
    for p in predictions {
        let m = &p.report;
        s += &format!(
            "  predicted {} (cache {}): read hit ratio {:.4}, write hit ratio {:.4}; core read {} written {}, cache read {} written {}\n",
            m.config,
            format_bytes(m.cache_bytes),
            m.read_hit_ratio,
            m.write_hit_ratio,
            format_bytes(m.read_from_core),
            format_bytes(m.write_to_core),
            format_bytes(m.read_from_cache),
            format_bytes(m.write_to_cache),
        );
    }
    s
}
