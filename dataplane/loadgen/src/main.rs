//! `rackcache-loadgen`: drive an NVMe/TCP target from userspace and report
//! IOPS, throughput and latency percentiles.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use loadgen::host::{ConnectParams, HostQueue};
use loadgen::workload::{run_queue, summarize, Job, Pattern};
use nvmf::sqe::opcode;
use serde::Serialize;

#[derive(Clone, Copy, ValueEnum)]
enum PatternArg {
    Randread,
    Randwrite,
    Read,
    Write,
}

/// Load generator for NVMe/TCP targets (a userspace host).
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Target address (host:port).
    #[arg(long, default_value = "127.0.0.1:4420")]
    addr: String,
    /// Subsystem NQN.
    #[arg(long)]
    nqn: String,
    /// Host NQN to connect as.
    #[arg(
        long,
        default_value = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-72616b6c6f61"
    )]
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
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    pattern: Pattern,
    block_size: usize,
    queues: u16,
    queue_depth: usize,
    seconds: f64,
    ops: u64,
    iops: f64,
    mib_per_s: f64,
    latency: loadgen::workload::LatencySummary,
}

fn main() -> ExitCode {
    let args = Args::parse();
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

fn run(args: &Args) -> Result<Report, Box<dyn std::error::Error>> {
    let pattern = match args.pattern {
        PatternArg::Randread => Pattern::RandRead,
        PatternArg::Randwrite => Pattern::RandWrite,
        PatternArg::Read => Pattern::Read,
        PatternArg::Write => Pattern::Write,
    };
    if args.queues == 0 || args.qd == 0 || args.bs == 0 {
        return Err("--queues, --qd and --bs must be positive".into());
    }
    let params = ConnectParams {
        addr: args.addr.clone(),
        subnqn: args.nqn.clone(),
        hostnqn: args.hostnqn.clone(),
        host_id: *b"rackcache-loadgn",
        queue_size: 32,
        kato_ms: 0,
    };
    let mut admin = HostQueue::connect(&params, 0, 0)?;
    admin.enable()?;
    let granted = admin.set_queue_count(args.queues)?;
    if granted < args.queues {
        return Err(format!(
            "the target granted {granted} I/O queues, {} asked",
            args.queues
        )
        .into());
    }
    let ctrl = admin.admin_read(
        opcode::IDENTIFY,
        0,
        [1, 0, 0, 0, 0, 0],
        4096,
        "Identify Controller",
    )?;
    let ioccsz = u32::from_le_bytes(ctrl[1792..1796].try_into()?) as usize;
    let ns = admin.admin_read(
        opcode::IDENTIFY,
        args.nsid,
        [0, 0, 0, 0, 0, 0],
        4096,
        "Identify Namespace",
    )?;
    let ns_lbas = u64::from_le_bytes(ns[0..8].try_into()?);
    let lbaf = (ns[26] & 0x0f) as usize;
    let lba_size = 1u32 << ns[128 + lbaf * 4 + 2];
    if ns_lbas == 0 {
        return Err(format!("namespace {} is not active", args.nsid).into());
    }
    if !args.bs.is_multiple_of(lba_size as usize) {
        return Err(format!(
            "--bs {} is not a multiple of the {lba_size}-byte LBA",
            args.bs
        )
        .into());
    }
    let queue_size = (args.qd + 1).min(1024) as u16;
    let job = Job {
        pattern,
        block_size: args.bs,
        queue_depth: args.qd,
        duration: Duration::from_secs_f64(args.seconds),
        nsid: args.nsid,
        lba_size,
        ns_lbas,
        seed: 0,
        in_capsule_max: (ioccsz * 16).saturating_sub(64),
    };
    let cntlid = admin.cntlid;
    let workers: Vec<_> = (1..=args.queues)
        .map(|qid| {
            let p = ConnectParams {
                queue_size,
                ..params.clone()
            };
            let job = Job {
                seed: 0x9e37_79b9_7f4a_7c15 ^ u64::from(qid),
                ..job.clone()
            };
            std::thread::spawn(move || -> Result<_, String> {
                let mut q = HostQueue::connect(&p, qid, cntlid).map_err(|e| e.to_string())?;
                run_queue(&mut q, &job).map_err(|e| e.to_string())
            })
        })
        .collect();
    let mut ops = 0;
    let mut bytes = 0;
    let mut elapsed = Duration::ZERO;
    let mut lat = Vec::new();
    for w in workers {
        let r = w.join().map_err(|_| "a worker panicked")??;
        ops += r.ops;
        bytes += r.bytes;
        elapsed = elapsed.max(r.elapsed);
        lat.extend(r.latencies_ns);
    }
    let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    Ok(Report {
        pattern,
        block_size: args.bs,
        queues: args.queues,
        queue_depth: args.qd,
        seconds: secs,
        ops,
        iops: ops as f64 / secs,
        mib_per_s: bytes as f64 / secs / f64::from(1 << 20),
        latency: summarize(&mut lat),
    })
}
