//! `rackcache-sim`: the trace simulator's command line. See `docs/simulator.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use engine::mrc::{ShardsConfig, DEFAULT_BUCKETS, DEFAULT_MAX_KEYS};
use rackcache_sim::cache_args::CacheArgs;
use rackcache_sim::mrc::MrcOptions;
use rackcache_sim::mrc_report::{render_curves, CurveJson};
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
    /// size; with --mrc, the miss-ratio curves) into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,

    /// Instead of replaying, print each volume's LRU miss-ratio curve over
    /// 4 KiB blocks, computed by SHARDS sampling.
    #[arg(long)]
    mrc: bool,

    /// With --mrc: also compute the exact curves and the sampled ones'
    /// error (done anyway for working sets up to 4 GiB).
    #[arg(long, requires = "mrc")]
    mrc_exact: bool,

    /// With --mrc: the sampling rate to start at, in (0, 1].
    #[arg(long, default_value_t = 1.0, requires = "mrc")]
    mrc_rate: f64,

    /// With --mrc: at most this many sampled blocks per curve (fixed-size
    /// SHARDS: the rate falls as the working set grows); 0 keeps the rate
    /// fixed and the blocks unbounded.
    #[arg(long, default_value_t = DEFAULT_MAX_KEYS, requires = "mrc")]
    mrc_max_keys: u32,
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
    cache_bytes_requested: u64,
    reports: &'a [Report],
}

/// What `--mrc --json` prints.
#[derive(Serialize)]
struct MrcJsonOutput {
    trace: String,
    requests: u64,
    working_set_bytes: u64,
    volumes: usize,
    initial_rate: f64,
    max_keys: Option<u32>,
    curves: Vec<CurveJson>,
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
    if args.mrc && args.warmup > 0 {
        return Err("--warmup does not apply to --mrc".into());
    }
    // Options are checked before the trace is read.
    let (configs, mrc) = if args.mrc {
        (Vec::new(), Some(mrc_options(args)?))
    } else {
        (configurations(args)?, None)
    };

    let profile = Profile::scan(&spec, args.sector_size).map_err(|e| e.to_string())?;
    if let Some(opts) = mrc {
        return run_mrc(args, &spec, &profile, &opts);
    }
    let cache_bytes = args.cache.cache_size.resolve(profile.working_set_bytes);
    if !args.json {
        println!(
            "trace {}: {} requests, {} volume(s), working set {}, read {}, written {}",
            args.trace.display(),
            profile.requests,
            profile.volume_base.len(),
            format_bytes(profile.working_set_bytes),
            format_bytes(profile.read_bytes),
            format_bytes(profile.write_bytes),
        );
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
            volumes: profile.volume_base.len(),
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
        let written = rackcache_sim::plot::write_charts(dir, &trace_name(args), &reports)?;
        for p in written {
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}

/// The `--mrc-*` options.
fn mrc_options(args: &Args) -> Result<MrcOptions, String> {
    let sampler = ShardsConfig {
        block_size: rackcache_sim::mrc::BLOCK,
        rate: args.mrc_rate,
        max_keys: (args.mrc_max_keys > 0).then_some(args.mrc_max_keys),
        max_buckets: Some(DEFAULT_BUCKETS),
    };
    sampler
        .validate()
        .map_err(|e| format!("--mrc-rate/--mrc-max-keys: {e}"))?;
    Ok(MrcOptions {
        sampler,
        exact: args.mrc_exact,
    })
}

/// `--mrc`: the curves instead of the replay.
fn run_mrc(
    args: &Args,
    spec: &TraceSpec,
    profile: &Profile,
    opts: &MrcOptions,
) -> Result<(), String> {
    let sampler = opts.sampler;
    let bar = progress_bar(profile.requests, "miss ratios");
    let curves = rackcache_sim::mrc::curves(spec, profile, opts, |n| bar.set_position(n))
        .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    if args.json {
        let out = MrcJsonOutput {
            trace: args.trace.display().to_string(),
            requests: profile.requests,
            working_set_bytes: profile.working_set_bytes,
            volumes: profile.volume_base.len(),
            initial_rate: sampler.rate,
            max_keys: sampler.max_keys,
            curves: curves.iter().map(CurveJson::new).collect(),
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| format!("encode JSON: {e}"))?
        );
    } else {
        print_mrc_header(args, profile, opts);
        print!("{}", render_curves(&curves));
    }
    if let Some(dir) = &args.plot {
        let written = rackcache_sim::plot_mrc::write_mrc_charts(dir, &trace_name(args), &curves)?;
        for p in written {
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}

fn print_mrc_header(args: &Args, profile: &Profile, opts: &MrcOptions) {
    println!(
        "trace {}: {} requests, {} volume(s), working set {}",
        args.trace.display(),
        profile.requests,
        profile.volume_base.len(),
        format_bytes(profile.working_set_bytes),
    );
    let s = &opts.sampler;
    let mode = match s.max_keys {
        Some(k) => format!(
            "fixed-size, at most {k} blocks per curve, starting at rate {}",
            s.rate
        ),
        None => format!("fixed rate {}", s.rate),
    };
    println!("LRU miss ratio per 4 KiB block reference, SHARDS {mode}\n");
}

fn trace_name(args: &Args) -> String {
    args.trace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
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

    #[test]
    fn mrc_options_need_mrc() {
        let args = Args::try_parse_from(["rackcache-sim", "t.csv", "--mrc", "--mrc-rate", "0.1"]);
        let args = args.unwrap();
        assert!(args.mrc && !args.mrc_exact);
        assert_eq!((args.mrc_rate, args.mrc_max_keys), (0.1, DEFAULT_MAX_KEYS));
        for opt in [
            &["--mrc-exact"][..],
            &["--mrc-rate", "0.1"],
            &["--mrc-max-keys", "0"],
        ] {
            let mut argv = vec!["rackcache-sim", "t.csv"];
            argv.extend_from_slice(opt);
            assert!(Args::try_parse_from(&argv).is_err(), "{opt:?}");
        }
    }
}
