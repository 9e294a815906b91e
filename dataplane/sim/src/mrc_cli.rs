//! `rackcache-sim --mrc`: print (and plot) each volume's miss-ratio curve
//! instead of replaying the trace.

use std::path::Path;

use serde::Serialize;

use engine::mrc::{ShardsConfig, DEFAULT_BUCKETS};

use crate::mrc::MrcOptions;
use crate::mrc_report::{render_curves, CurveJson};
use crate::replay::{Profile, TraceSpec};
use crate::size::format_bytes;

/// Where the curves go.
pub struct Output<'a> {
    /// The trace, as named on the command line.
    pub trace: &'a Path,
    /// JSON instead of the table.
    pub json: bool,
    /// Directory for the PNG charts.
    pub plot: Option<&'a Path>,
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

/// The sampler the `--mrc-*` options describe (`max_keys` 0: fixed rate).
pub fn options(rate: f64, max_keys: u32, exact: bool) -> Result<MrcOptions, String> {
    let sampler = ShardsConfig {
        block_size: crate::mrc::BLOCK,
        rate,
        max_keys: (max_keys > 0).then_some(max_keys),
        max_buckets: Some(DEFAULT_BUCKETS),
        rate_cap: None,
    };
    sampler
        .validate()
        .map_err(|e| format!("--mrc-rate/--mrc-max-keys: {e}"))?;
    Ok(MrcOptions { sampler, exact })
}

/// Computes and prints the curves.
pub fn run(
    out: &Output,
    spec: &TraceSpec,
    profile: &Profile,
    opts: &MrcOptions,
) -> Result<(), String> {
    let sampler = opts.sampler;
    let curves = crate::mrc::curves(spec, profile, opts, |_| {}).map_err(|e| e.to_string())?;
    if out.json {
        let j = MrcJsonOutput {
            trace: out.trace.display().to_string(),
            requests: profile.requests,
            working_set_bytes: profile.working_set_bytes,
            volumes: profile.volumes(),
            initial_rate: sampler.rate,
            max_keys: sampler.max_keys,
            curves: curves.iter().map(CurveJson::new).collect(),
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&j).map_err(|e| format!("encode JSON: {e}"))?
        );
    } else {
        print_header(out.trace, profile, opts);
        print!("{}", render_curves(&curves));
    }
    if let Some(dir) = out.plot {
        let name = out
            .trace
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for p in crate::plot_mrc::write_mrc_charts(dir, &name, &curves)? {
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}

fn print_header(trace: &Path, profile: &Profile, opts: &MrcOptions) {
    println!(
        "trace {}: {} requests, {} volume(s), working set {}",
        trace.display(),
        profile.requests,
        profile.volumes(),
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
