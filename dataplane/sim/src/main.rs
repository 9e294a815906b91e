//! `rackcache-sim`: the trace simulator's command line. See `docs/simulator.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use engine::mrc::DEFAULT_MAX_KEYS;
use rackcache_sim::cache_args::CacheArgs;
use rackcache_sim::layout::LayoutKind;
use rackcache_sim::mrc_cli;
use rackcache_sim::peers::stream::write_block_stream;
use rackcache_sim::peers::table::{render_peer_table, PeerComparison};
use rackcache_sim::peers::Peers;
use rackcache_sim::replay::{replay_from, Profile, SimConfig, TraceSpec};
use rackcache_sim::report::{render_ratios, render_table, Report};
use rackcache_sim::size::{format_bytes, parse_bytes, CacheSize};
use tempfile::TempDir;

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
    /// size; with --mrc, the miss-ratio curves) into this directory (a
    /// subdirectory per cache size when there are several).
    #[arg(long)]
    plot: Option<PathBuf>,

    /// Also run libCacheSim's LRU, ARC, S3FIFO, WTinyLFU, LIRS and Sieve on
    /// the trace's 4 KiB block stream with the bytes the engine used, and
    /// print block miss ratios side by side. Adds fixed 4 KiB blocks to the
    /// configurations; needs the venv `hack/deps.sh python` makes (or
    /// $RACKCACHE_PYTHON).
    #[arg(long)]
    compare_peers: bool,

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

/// The block size `--compare-peers` gives libCacheSim's objects and the
/// engine configuration it adds.
const PEER_BLOCK: u32 = 4096;

/// What `--json` prints: with one cache size its results sit at the top
/// level (as before several sizes were possible), with several they are
/// listed under `sizes`.
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
    #[serde(flatten)]
    results: Results<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Results<'a> {
    One(&'a SizeResult),
    Several { sizes: &'a [SizeResult] },
}

/// Everything measured at one cache size.
#[derive(Serialize)]
struct SizeResult {
    /// As given: `10%`, `256MiB`.
    cache_size: String,
    /// As the text output describes it: `10% of the working set`.
    #[serde(skip)]
    described: String,
    cache_bytes_requested: u64,
    /// `Engine::capacity()` of the first configuration: the request rounded
    /// down to whole groups. Each report has its own (`cache_bytes`); they
    /// differ only when a block above 256 KiB makes groups larger.
    cache_bytes_used: u64,
    reports: Vec<Report>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peers: Option<PeerComparison>,
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
    if args.compare_peers && args.sector_size != PEER_BLOCK as u64 {
        // Miss bytes count 4 KiB blocks only when cached extents are whole
        // 4 KiB sectors (see Report::miss_ratio).
        return Err("--compare-peers needs --sector-size 4K".into());
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
        (
            Vec::new(),
            Some(mrc_cli::options(
                args.mrc_rate,
                args.mrc_max_keys,
                args.mrc_exact,
            )?),
        )
    } else {
        (configurations(args)?, None)
    };
    // libCacheSim is found before the replays, which can take minutes.
    let peers = if args.compare_peers && mrc.is_none() {
        let dir = tempfile::Builder::new()
            .prefix("rackcache-sim-peers-")
            .tempdir()
            .map_err(|e| format!("create a temporary directory: {e}"))?;
        let peers = Peers::locate(dir.path())?;
        Some((dir, peers))
    } else {
        None
    };

    let profile = Profile::scan_with_layout(&spec, args.sector_size, args.layout)
        .map_err(|e| e.to_string())?;
    if let Some(opts) = mrc {
        let out = mrc_cli::Output {
            trace: &args.trace,
            json: args.json,
            plot: args.plot.as_deref(),
        };
        return mrc_cli::run(&out, &spec, &profile, &opts);
    }
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
    }

    let mut results = Vec::new();
    for &size in &args.cache.cache_size.0 {
        results.push(run_size(args, &spec, &profile, &configs, size)?);
    }
    if let Some((dir, peers)) = &peers {
        compare_peers(args, &spec, &profile, dir, peers, &mut results)?;
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
            results: match results.as_slice() {
                [one] => Results::One(one),
                several => Results::Several { sizes: several },
            },
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| format!("encode JSON: {e}"))?
        );
    } else {
        for r in &results {
            print_size(args, r);
        }
    }

    if let Some(dir) = &args.plot {
        let name = args
            .trace
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for r in &results {
            let (dir, name) = match results.len() {
                1 => (dir.clone(), name.clone()),
                _ => (
                    dir.join(format!("cache-{}", r.cache_size.replace('%', "pct"))),
                    format!("{name}, cache {}", r.cache_size),
                ),
            };
            let written = rackcache_sim::plot::write_charts(&dir, &name, &r.reports)?;
            for p in written {
                eprintln!("wrote {}", p.display());
            }
        }
    }
    Ok(())
}

/// Replays every configuration with one cache size.
fn run_size(
    args: &Args,
    spec: &TraceSpec,
    profile: &Profile,
    configs: &[SimConfig],
    size: CacheSize,
) -> Result<SizeResult, String> {
    let cache_bytes = size.resolve(profile.working_set_bytes);
    let mut reports = Vec::with_capacity(configs.len());
    for sim in configs {
        let bar = progress_bar(profile.requests, &sim.label);
        let report = replay_from(spec, profile, sim, cache_bytes, args.warmup, |n| {
            bar.set_position(n)
        })
        .map_err(|e| e.to_string())?;
        bar.finish_and_clear();
        reports.push(report);
    }
    Ok(SizeResult {
        cache_size: size.short(),
        described: size.to_string(),
        cache_bytes_requested: cache_bytes,
        cache_bytes_used: reports[0].cache_bytes,
        reports,
        peers: None,
    })
}

/// Writes the block stream once, runs libCacheSim once for every size (at
/// the capacity the first configuration, fixed-4KiB, used) and attaches
/// each size's results.
fn compare_peers(
    args: &Args,
    spec: &TraceSpec,
    profile: &Profile,
    dir: &TempDir,
    peers: &Peers,
    results: &mut [SizeResult],
) -> Result<(), String> {
    let path = dir.path().join("blocks.oracleGeneral");
    let stream = write_block_stream(spec, profile, args.warmup, &path)?;
    if stream.blocks == stream.warmup_blocks {
        return Err("--compare-peers: --warmup leaves no requests to compare".into());
    }
    let mut sizes: Vec<u64> = results.iter().map(|r| r.reports[0].cache_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{prefix:>14} {spinner} {msg} ({elapsed})")
            .expect("valid template"),
    );
    bar.set_prefix("libCacheSim");
    bar.set_message(format!(
        "{} policies x {} sizes over {} blocks",
        rackcache_sim::peers::POLICIES.len(),
        sizes.len(),
        stream.blocks
    ));
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let got = peers.run(&path, stream.warmup_blocks, &sizes);
    bar.finish_and_clear();
    let got = got?;
    for r in results {
        r.peers = Some(PeerComparison::new(&peers.version, &r.reports[0], &got)?);
    }
    Ok(())
}

/// One cache size as text: the cache line, then the metrics table or, with
/// `--compare-peers`, the miss ratios beside libCacheSim's.
fn print_size(args: &Args, r: &SizeResult) {
    println!(
        "cache {} ({}), engine uses {}; write mode {:?}, admission {}, eviction {}, flush {}\n",
        format_bytes(r.cache_bytes_requested),
        r.described,
        used(&r.reports),
        args.cache.write_mode,
        policy_name(&format!("{:?}", args.cache.admission)),
        engine::names::eviction_name(&args.cache.eviction),
        args.cache.flush,
    );
    if let Some(peers) = &r.peers {
        print!("{}", render_peer_table(&r.reports, peers));
        println!();
        return;
    }
    print!("{}", render_table(&r.reports));
    for rep in &r.reports {
        if let Some(f) = &rep.fill {
            println!("{}: {}", rep.config, f.line());
        }
    }
    let adaptive = r.reports.iter().find(|r| r.config == "adaptive");
    if let (Some(adaptive), true) = (adaptive, r.reports.len() > 1) {
        println!();
        for fixed in r.reports.iter().filter(|r| r.config != "adaptive") {
            print!("{}", render_ratios(fixed, adaptive));
        }
    }
    println!();
}

/// The capacity the engine used (whole groups): one figure, or one per
/// configuration when they differ.
fn used(reports: &[Report]) -> String {
    let first = reports[0].cache_bytes;
    if reports.iter().all(|r| r.cache_bytes == first) {
        return format!("{} ({first} bytes)", format_bytes(first));
    }
    reports
        .iter()
        .map(|r| format!("{} {}", r.config, format_bytes(r.cache_bytes)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The configurations the arguments ask for. `--compare-peers` puts fixed
/// 4 KiB blocks first, with every other cache option as given: the
/// configuration that sees the same blocks as libCacheSim, whose capacity
/// the peers get; the ones `--mode`/`--block-sizes`/`--compare` select
/// follow (fixed-4KiB only once).
fn configurations(args: &Args) -> Result<Vec<SimConfig>, String> {
    let mut configs = args.cache.configurations()?;
    if args.compare_peers {
        let reference = args.cache.fixed(PEER_BLOCK);
        configs.retain(|c| c.label != reference.label);
        configs.insert(0, reference);
    }
    Ok(configs)
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
    fn compare_peers_puts_fixed_4k_first_once() {
        let labels = |extra: &[&str]| {
            let args = Args::try_parse_from(
                ["rackcache-sim", "t.csv", "--compare-peers"]
                    .iter()
                    .chain(extra),
            )
            .unwrap();
            let c = configurations(&args).unwrap();
            assert_eq!(c[0].engine.block_sizes, vec![4096]);
            assert_eq!(c[0].engine.eviction, args.cache.eviction);
            c.into_iter().map(|c| c.label).collect::<Vec<_>>()
        };
        assert_eq!(labels(&[]), ["fixed-4KiB", "adaptive"]);
        assert_eq!(
            labels(&["--mode", "fixed", "--block-sizes", "4K"]),
            ["fixed-4KiB"]
        );
        assert_eq!(labels(&["--compare"]).len(), 6);
        assert_eq!(labels(&["--eviction", "lazy"])[0], "fixed-4KiB");

        let args = Args::try_parse_from([
            "rackcache-sim",
            "t.csv",
            "--compare-peers",
            "--sector-size",
            "512",
        ])
        .unwrap();
        assert!(run(&args).unwrap_err().contains("--sector-size 4K"));
        let args =
            Args::try_parse_from(["rackcache-sim", "t.csv", "--cache-size", "1%,5%"]).unwrap();
        assert_eq!(args.cache.cache_size.0.len(), 2);
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
