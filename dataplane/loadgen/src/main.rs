//! `rackcache-loadgen`: drive an NVMe/TCP target from userspace and report
//! IOPS, throughput and latency percentiles; `rackcache-loadgen replay`
//! replays a block I/O trace (see docs/loadgen.md).

mod replay_cli;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use loadgen::run::{Report, RunError, RunParams, DEFAULT_HOSTNQN};
use loadgen::workload::Pattern;

#[derive(Clone, Copy, ValueEnum)]
enum PatternArg {
    Randread,
    Randwrite,
    Read,
    Write,
}

/// Load generator for NVMe/TCP targets (a userspace host).
#[derive(Parser)]
#[command(
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: Option<Args>,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a block I/O trace against a namespace, laid out as
    /// rackcache-sim lays it out, optionally with the simulator's prediction.
    Replay(Box<replay_cli::ReplayArgs>),
}

/// A synthetic workload (the default command).
#[derive(clap::Args)]
struct Args {
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
    /// Access pattern.
    #[arg(long, value_enum, default_value = "randread")]
    pattern: PatternArg,
    /// Bytes per I/O.
    #[arg(long, default_value_t = 4096)]
    bs: usize,
    /// I/O queues (one thread each).
    #[arg(long, default_value_t = 1)]
    queues: u16,
    /// Commands in flight per queue.
    #[arg(long, default_value_t = 32)]
    qd: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Spin on the sockets instead of sleeping (one busy core per queue,
    /// as SPDK's perf; no wake-up latency in the figures).
    #[arg(long)]
    busy_poll: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// DH-HMAC-CHAP: a file holding the host's secret (DHHC-1:..., as
    /// `nvme gen-dhchap-key` writes it), for a target that asks the host
    /// to authenticate; kept off the command line.
    #[arg(long)]
    dhchap_key_file: Option<std::path::PathBuf>,
    /// DH-HMAC-CHAP: a file holding the controller's secret, to
    /// authenticate the target too (needs --dhchap-key-file).
    #[arg(long, requires = "dhchap_key_file")]
    dhchap_ctrl_key_file: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Replay(r)) = &cli.command {
        return replay_cli::main(r);
    }
    let Some(args) = cli.run else {
        eprintln!("rackcache-loadgen: --nqn is required");
        return ExitCode::FAILURE;
    };
    match run(&args) {
        Ok(r) => {
            if args.json {
                println!("{}", serde_json::to_string(&r).expect("serializable"));
            } else {
                println!(
                    "{:?} bs={} queues={} qd={}: {:.0} IOPS, {:.1} MiB/s, latency avg {:.1} µs p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}",
                    r.pattern,
                    r.block_size,
                    r.queues,
                    r.queue_depth,
                    r.iops,
                    r.mib_per_s,
                    r.latency.avg_us,
                    r.latency.p50_us,
                    r.latency.p99_us,
                    r.latency.p999_us,
                    r.latency.max_us
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rackcache-loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<Report, RunError> {
    let pattern = match args.pattern {
        PatternArg::Randread => Pattern::RandRead,
        PatternArg::Randwrite => Pattern::RandWrite,
        PatternArg::Read => Pattern::Read,
        PatternArg::Write => Pattern::Write,
    };
    let dhchap = loadgen::keys::dhchap_keys(
        args.dhchap_key_file.as_deref(),
        args.dhchap_ctrl_key_file.as_deref(),
    )?;
    loadgen::run::run(&RunParams {
        addr: args.addr.clone(),
        nqn: args.nqn.clone(),
        hostnqn: args.hostnqn.clone(),
        nsid: args.nsid,
        pattern,
        block_size: args.bs,
        queues: args.queues,
        queue_depth: args.qd,
        duration: Duration::from_secs_f64(args.seconds),
        busy_poll: args.busy_poll,
        dhchap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn arguments_are_consistent() {
        Cli::command().debug_assert();
        // The synthetic workload needs no subcommand, replay no --nqn twice.
        assert!(Cli::try_parse_from(["rackcache-loadgen", "--nqn", "n"]).is_ok());
        assert!(Cli::try_parse_from(["rackcache-loadgen"]).is_err());
        let c = Cli::try_parse_from([
            "rackcache-loadgen",
            "replay",
            "--nqn",
            "n",
            "--trace",
            "t.csv",
            "--predict",
            "--mode",
            "fixed",
            "--block-sizes",
            "64K",
        ])
        .unwrap();
        assert!(matches!(c.command, Some(Command::Replay(_))));
    }
}
