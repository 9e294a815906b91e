//! `rackcache-sim`: the trace simulator's command line. See `docs/simulator.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use engine::{Config, FlushConfig};
use rackcache_sim::options::{
    parse_admission, parse_eviction, parse_write_miss_fill, parse_write_mode,
};
use rackcache_sim::replay::{comparison_set, replay, FlushPolicy, Profile, SimConfig, TraceSpec};
use rackcache_sim::report::{render_ratios, render_table, Report};
use rackcache_sim::size::{
    format_bytes, parse_block_sizes, parse_bytes, parse_cache_size, CacheSize,
};

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

    /// Cache size: bytes (256MiB, 2G, ...) or a percentage of the trace's
    /// working set (10%).
    #[arg(long, default_value = "10%", value_parser = parse_cache_size)]
    cache_size: CacheSize,

    /// Block sizes, comma-separated powers of two from 4KiB to 1MiB.
    #[arg(long, default_value = "32K,64K,128K,256K", value_parser = block_size_list)]
    block_sizes: BlockSizes,

    /// adaptive (AdaCache's allocation over --block-sizes) or fixed (exactly
    /// one block size).
    #[arg(long, default_value = "adaptive", value_parser = ["adaptive", "fixed"])]
    mode: String,

    /// Run fixed 32/64/128/256 KiB and adaptive side by side (ignores --mode
    /// and --block-sizes).
    #[arg(long)]
    compare: bool,

    /// write-back, write-through or write-around.
    #[arg(long, default_value = "write-back", value_parser = parse_write_mode)]
    write_mode: engine::WriteMode,

    /// How a write miss fills the rest of its new block: whole-block (the
    /// paper), head-tail or sparse.
    #[arg(long, default_value = "sparse", value_parser = parse_write_miss_fill)]
    write_miss_fill: engine::WriteMissFill,

    /// Admission: always, nhit[:N], tinylfu[:strict], size-aware.
    #[arg(long, default_value = "always", value_parser = parse_admission)]
    admission: engine::AdmissionConfig,

    /// Eviction: lru2 (two-level LRU) or lazy[:PARA[:K]] (LEA).
    #[arg(long, default_value = "lru2", value_parser = parse_eviction)]
    eviction: engine::EvictionConfig,

    /// Flushing besides eviction: none, lazy (a batch when the trace is idle
    /// for --idle-ms) or aggressive (a batch per request above --dirty-ratio).
    #[arg(long, default_value = "none", value_parser = ["none", "lazy", "aggressive"])]
    flush: String,

    /// Trace time between two requests that counts as idle (lazy flushing).
    #[arg(long, default_value_t = 100)]
    idle_ms: u64,

    /// Dirty bytes over capacity above which aggressive flushing writes back.
    #[arg(long, default_value_t = 0.2)]
    dirty_ratio: f64,

    /// Blocks per flush batch.
    #[arg(long, default_value_t = 128)]
    flush_batch: u32,

    /// Sector size requests are aligned to (trace requests are widened).
    #[arg(long, default_value = "4K", value_parser = parse_bytes)]
    sector_size: u64,

    /// Replay only this volume of a multi-volume trace.
    #[arg(long)]
    volume: Option<u32>,

    /// Replay at most this many requests.
    #[arg(long)]
    limit: Option<u64>,

    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,

    /// Write PNG charts (I/O volumes, hit ratios, metadata, block vs request
    /// size) into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// A parsed `--block-sizes` list (a newtype: clap would take a bare `Vec`
/// for a repeated option).
#[derive(Clone, Debug)]
struct BlockSizes(Vec<u64>);

fn block_size_list(s: &str) -> Result<BlockSizes, String> {
    parse_block_sizes(s).map(BlockSizes)
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

    let profile = Profile::scan(&spec, args.sector_size).map_err(|e| e.to_string())?;
    let cache_bytes = args.cache_size.resolve(profile.working_set_bytes);
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
            args.cache_size,
            args.write_mode,
            policy_name(&format!("{:?}", args.admission)),
            policy_name(&format!("{:?}", args.eviction)),
            args.flush,
        );
    }

    let mut reports = Vec::with_capacity(configs.len());
    for sim in &configs {
        let bar = progress_bar(profile.requests, &sim.label);
        let report = replay(&spec, &profile, sim, cache_bytes, |n| bar.set_position(n))
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
    let flush = match args.flush.as_str() {
        "lazy" => FlushPolicy::Lazy {
            idle_ns: args.idle_ms.saturating_mul(1_000_000),
        },
        "aggressive" => FlushPolicy::Aggressive,
        _ => FlushPolicy::None,
    };
    // volume_size and capacity are set from the trace by replay().
    let mut base = Config::adaptive(1, 1);
    base.write_mode = args.write_mode;
    base.write_miss_fill = args.write_miss_fill;
    base.admission = args.admission.clone();
    base.eviction = args.eviction.clone();
    base.flush = FlushConfig {
        dirty_ratio: args.dirty_ratio,
        batch_blocks: args.flush_batch,
    };
    if args.compare {
        return Ok(comparison_set(&base, flush));
    }
    let sizes: Vec<u32> = args.block_sizes.0.iter().map(|&b| b as u32).collect();
    let largest = *sizes
        .last()
        .expect("parse_block_sizes returns at least one size");
    let label = if args.mode == "fixed" {
        if sizes.len() != 1 {
            return Err("--mode fixed needs exactly one --block-sizes value".into());
        }
        format!("fixed-{}", format_bytes(largest as u64))
    } else {
        "adaptive".to_string()
    };
    base.block_sizes = sizes;
    base.group_size = largest.max(256 << 10);
    Ok(vec![SimConfig {
        label,
        engine: base,
        flush,
    }])
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
