//! `rackcache-sim`: the trace simulator's command line. See `docs/simulator.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use rackcache_sim::cache_args::CacheArgs;
use rackcache_sim::layout::LayoutKind;
use rackcache_sim::replay::{replay_from, Profile, SimConfig, TraceSpec};
use rackcache_sim::report::{render_ratios, render_table, Report};
use rackcache_sim::size::{format_bytes, parse_bytes};

/// Replays a block I/O trace through rackcache's cache engine and prints the
/// AdaCache paper's metrics.
#[derive(Parser, Debug)]
#[command(name = "rackcache-sim", version, about, long_about = None)]
struct Args {
    /// The trace: MSR Cambridge, Systor'17, Alibaba, Tencent CBS or
    /// CloudPhysics csv (optionally .gz), CloudPhysics vscsi, or libCacheSim
    /// oracleGeneral. The format is detected from the content.
    trace: PathBuf,

    /// Read the trace as this format instead of detecting it (msr, systor17,
    /// alibaba, tencent, cloudphysics-csv, vscsi, oracle-general).
    #[arg(long)]
    format: Option<traces::Format>,

    /// Bytes per oracleGeneral object id (512 for traces converted from
    /// block traces, such as the CloudPhysics sample).
    #[arg(long, default_value_t = 1)]
    oracle_id_unit: u64,

    #[command(flatten)]
    cache: CacheArgs,

    /// Sector size requests are aligned to (trace requests are widened).
    #[arg(long, default_value = "4K", value_parser = parse_bytes)]
    sector_size: u64,

    /// Replay only this volume of a multi-volume trace.
    #[arg(long)]
    volume: Option<u32>,

    /// How volumes share the engine's address space: dense (end to end),
    /// sparse (only the 1 MiB regions requests touch) or auto (dense when
    /// it fits the engine with 4 KiB blocks).
    #[arg(long, default_value = "auto", value_parser = str::parse::<LayoutKind>)]
    layout: LayoutKind,

    /// Replay at most this many requests.
    #[arg(long)]
    limit: Option<u64>,

    /// Replay the first N requests (of those --limit allows) to warm the
    /// cache without counting them in the figures.
    #[arg(long, default_value_t = 0)]
    warmup: u64,

    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,

    /// Write PNG charts (I/O volumes, hit ratios, metadata, block vs request
    /// size) into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// What `--json` prints.
#[derive(Serialize)]
struct JsonOutput<'a> {
    trace: String,
    requests: u64,
    working_set_bytes: u64,
    read_bytes: u64,
    write_bytes: u64,
    volumes: usize,
    layout: String,
    address_space: u64,
    cache_bytes_requested: u64,
    reports: &'a [Report],
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rackcache-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    if args.oracle_id_unit == 0 {
        return Err("--oracle-id-unit must be at least 1".into());
    }
    if !args.sector_size.is_power_of_two() || !(512..=4096).contains(&args.sector_size) {
        return Err("--sector-size must be 512, 1K, 2K or 4K".into());
    }
    let spec = TraceSpec {
        path: args.trace.clone(),
        format: args.format,
        oracle_id_unit: args.oracle_id_unit,
        volume: args.volume,
        limit: args.limit,
    };
    let configs = configurations(args)?;

    let profile = Profile::scan_with_layout(&spec, args.sector_size, args.layout)
        .map_err(|e| e.to_string())?;
    let cache_bytes = args.cache.cache_size.resolve(profile.working_set_bytes);
    if !args.json {
        println!(
            "trace {}: {} requests, {} volume(s), working set {}, read {}, written {}",
            args.trace.display(),
            profile.requests,
            profile.volumes(),
            format_bytes(profile.working_set_bytes),
            format_bytes(profile.read_bytes),
            format_bytes(profile.write_bytes),
        );
        println!("layout {}", profile.layout);
        println!(
            "cache {} ({}), write mode {:?}, admission {}, eviction {}, flush {}\n",
            format_bytes(cache_bytes),
            args.cache.cache_size,
            args.cache.write_mode,
            policy_name(&format!("{:?}", args.cache.admission)),
            policy_name(&format!("{:?}", args.cache.eviction)),
            args.cache.flush,
        );
    }

    let mut reports = Vec::with_capacity(configs.len());
    for sim in &configs {
        let bar = progress_bar(profile.requests, &sim.label);
        let report = replay_from(&spec, &profile, sim, cache_bytes, args.warmup, |n| {
            bar.set_position(n)
        })
        .map_err(|e| e.to_string())?;
        bar.finish_and_clear();
        reports.push(report);
    }

    if args.json {
        let out = JsonOutput {
            trace: args.trace.display().to_string(),
            requests: profile.requests,
            working_set_bytes: profile.working_set_bytes,
            read_bytes: profile.read_bytes,
            write_bytes: profile.write_bytes,
            volumes: profile.volumes(),
            layout: profile.layout.kind().to_string(),
            address_space: profile.address_space,
            cache_bytes_requested: cache_bytes,
            reports: &reports,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| format!("encode JSON: {e}"))?
        );
    } else {
        print!("{}", render_table(&reports));
        let adaptive = reports.iter().find(|r| r.config == "adaptive");
        if let (Some(adaptive), true) = (adaptive, reports.len() > 1) {
            println!();
            for fixed in reports.iter().filter(|r| r.config != "adaptive") {
                print!("{}", render_ratios(fixed, adaptive));
            }
        }
    }

    if let Some(dir) = &args.plot {
        let name = args
            .trace
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let written = rackcache_sim::plot::write_charts(dir, &name, &reports)?;
        for p in written {
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}

/// The configurations the arguments ask for.
fn configurations(args: &Args) -> Result<Vec<SimConfig>, String> {
    args.cache.configurations()
}

/// `NHit { n: 2, table_slots: .. }` -> `NHit { n: 2, .. }`-ish short names
/// for the header line.
fn policy_name(debug: &str) -> String {
    debug
        .split([' ', '(', '{'])
        .next()
        .unwrap_or(debug)
        .to_string()
}

fn progress_bar(total: u64, label: &str) -> ProgressBar {
    // indicatif draws only when stderr is a terminal, so CI logs stay clean.
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>14} [{bar:40}] {pos}/{len} requests ({per_sec}, eta {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn arguments_are_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn configurations_from_arguments() {
        let args = Args::try_parse_from(["rackcache-sim", "t.csv", "--compare"]).unwrap();
        assert_eq!(configurations(&args).unwrap().len(), 5);
        let args = Args::try_parse_from([
            "rackcache-sim",
            "t.csv",
            "--mode",
            "fixed",
            "--block-sizes",
            "64K",
        ])
        .unwrap();
        let c = configurations(&args).unwrap();
        assert_eq!(c[0].label, "fixed-64KiB");
        assert_eq!(c[0].engine.block_sizes, vec![64 << 10]);
        let args = Args::try_parse_from(["rackcache-sim", "t.csv", "--mode", "fixed"]).unwrap();
        assert!(configurations(&args).unwrap_err().contains("exactly one"));
        assert!(Args::try_parse_from(["rackcache-sim", "t.csv", "--block-sizes", "48K"]).is_err());
        assert!(Args::try_parse_from(["rackcache-sim", "t.csv", "--admission", "lfu"]).is_err());
    }
}
