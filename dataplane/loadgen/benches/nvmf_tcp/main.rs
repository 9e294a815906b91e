//! The NVMe/TCP benchmark of `make bench`: the release `rackcache-dataplane`
//! pinned to CPU 0, loadgen's userspace host pinned to CPU 1, over
//! 127.0.0.1, against a malloc bdev and (when Ceph starts) an rbd bdev on a
//! one-node Ceph, with in the same run the baselines the figures are judged
//! by: the loopback TCP limit of this machine with the same pinning, `rbd
//! bench` straight to the same image, and the project's targets. Prints one
//! table. Figures of other targets measured elsewhere are not printed: a
//! comparison with SPDK's nvmf_tgt belongs in a run that measures it too.
//!
//! Environment:
//! - `RACKCACHE_BENCH_SECONDS`: seconds per workload on the malloc bdev
//!   (default 3); `RACKCACHE_BENCH_RBD_SECONDS` on the rbd bdev (default 8).
//! - `RACKCACHE_BENCH_CEPH=0`: skip the rbd rows.
//! - `RACKCACHE_BENCH_MALLOC=0`: skip the malloc rows (the rbd rows alone).
//! - `RACKCACHE_DATAPLANE_BIN`: the daemon to measure (default: the release
//!   build beside this bench, `cargo build --release --bins` first).
//! - `RACKCACHE_BENCH_ROUNDS`: rounds of turns (default 3); rows are medians.
//! - `RACKCACHE_BENCH_BEFORE`: a previous build of the daemon, measured in
//!   the same turns (malloc and rbd rows) for a before/after of one run.
//! - `RACKCACHE_BENCH_SPDK`, `RACKCACHE_BENCH_SPDK_ARGS`: SPDK's nvmf_tgt
//!   beside ours on the malloc bdev (docs/dataplane.md#benchmark).
//! - `RACKCACHE_BENCH_SPDK_PERF`, `RACKCACHE_BENCH_SPDK_PERF_ARGS`: SPDK's
//!   `spdk_nvme_perf` as the initiator of the malloc rows instead of
//!   loadgen (`perf.rs`), on the same CPU.
//! - `RACKCACHE_BENCH_CEPH_CPUS`: the CPUs of Ceph's daemons in the rbd
//!   rows (default: the last one), the clients (target, host, `rbd bench`)
//!   on the others, as a deployment runs Ceph on machines of its own;
//!   `shared`: all on every CPU (`testkit::ceph_cpus`).
//!
//! Every process started here (the daemon, Ceph's daemons through
//! hack/ceph.sh, `rbd bench`) is stopped by PID, also when a step fails.

mod daemon;
mod perf;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use daemon::Daemon;
use loadgen::run::{run, Report, RunParams, DEFAULT_HOSTNQN};
use loadgen::workload::Pattern;
use serde_json::json;
use testkit::{
    bench_rounds, bench_seconds, ceph_cpus, client_cpus, median_by, pin_current_thread,
    pin_current_thread_to, process_cpu, rbd_bench_seconds, Ceph, RbdBenchIo, TempDir,
};

const TARGET_CPU: usize = 0;
pub(crate) const LOADGEN_CPU: usize = 1;
const MALLOC_NQN: &str = "nqn.2016-06.io.rackcache:bench-malloc";
const RBD_NQN: &str = "nqn.2016-06.io.rackcache:bench-rbd";
/// Bdev size: small enough to fill before reading (reads of never-written
/// RAM or RADOS objects would be unrealistically cheap).
const BDEV_BYTES: u64 = 256 << 20;
const DEEP_QD: usize = 32;
/// The busy-poll window measured beside `off` and `on`.
const POLL_WINDOW: &str = "50us";

/// The project's targets for the malloc bdev.
const GOAL_RANDREAD_IOPS: f64 = 250_000.0;
const GOAL_RANDREAD_P99_US: f64 = 300.0;
const GOAL_SEQREAD_GIB: f64 = 2.0;
const GOAL_QD1_AVG_US: f64 = 30.0;
/// The rbd bdev over NVMe/TCP against `rbd bench` on the same image
/// (issue 13, goal 2).
const GOAL_VS_RBD_BENCH: f64 = 0.95;
/// Not counted at the start of each rbd turn (`rbd bench`'s first
/// per-second line is not either).
const RBD_WARM_UP: Duration = Duration::from_secs(1);

mod sys {
    extern "C" {
        pub fn kill(pid: i32, sig: i32) -> i32;
    }
    pub const SIGTERM: i32 = 15;
}

/// Runs `f` on a thread pinned to `cpus`.
fn on_cpus<T: Send>(cpus: &[usize], f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_current_thread_to(cpus).unwrap_or_else(|e| panic!("pin to CPUs {cpus:?}: {e}"));
            f()
        })
        .join()
        .expect("pinned thread panicked")
    })
}

/// One workload as loadgen runs it.
#[derive(Clone, Copy)]
pub(crate) struct Workload {
    pub(crate) name: &'static str,
    pub(crate) pattern: Pattern,
    pub(crate) block_size: usize,
    pub(crate) queue_depth: usize,
}

const RANDREAD_4K: Workload = Workload {
    name: "4K randread QD32",
    pattern: Pattern::RandRead,
    block_size: 4096,
    queue_depth: DEEP_QD,
};
const RANDWRITE_4K: Workload = Workload {
    name: "4K randwrite QD32",
    pattern: Pattern::RandWrite,
    block_size: 4096,
    queue_depth: DEEP_QD,
};
const RANDREAD_4K_QD1: Workload = Workload {
    name: "4K randread QD1",
    pattern: Pattern::RandRead,
    block_size: 4096,
    queue_depth: 1,
};
const SEQREAD_128K: Workload = Workload {
    name: "128K seqread QD32",
    pattern: Pattern::Read,
    block_size: 128 << 10,
    queue_depth: DEEP_QD,
};
pub(crate) const SEQWRITE_128K: Workload = Workload {
    name: "128K seqwrite QD32",
    pattern: Pattern::Write,
    block_size: 128 << 10,
    queue_depth: DEEP_QD,
};

/// Runs `w` from the load generator's CPU, spinning on its socket.
fn measure(addr: &str, nqn: &str, w: Workload, duration: Duration) -> Result<Report, String> {
    measure_with(addr, nqn, w, duration, true, &[LOADGEN_CPU])
}

/// Runs `w` from the load generator on `cpus`; `busy_poll` as SPDK's perf.
fn measure_with(
    addr: &str,
    nqn: &str,
    w: Workload,
    duration: Duration,
    busy_poll: bool,
    cpus: &[usize],
) -> Result<Report, String> {
    let p = RunParams {
        addr: addr.into(),
        nqn: nqn.into(),
        hostnqn: DEFAULT_HOSTNQN.into(),
        nsid: 1,
        pattern: w.pattern,
        block_size: w.block_size,
        queues: 1,
        queue_depth: w.queue_depth,
        duration,
        busy_poll,
        dhchap: None,
    };
    on_cpus(cpus, || run(&p).map_err(|e| e.to_string())).map_err(|e| format!("{}: {e}", w.name))
}

/// Writes the whole namespace once with 128 KiB sequential writes, so reads
/// read real data.
fn prefill(addr: &str, nqn: &str) -> Result<(), String> {
    let bytes_per_s = 512.0 * f64::from(1 << 20);
    let secs = (BDEV_BYTES as f64 / bytes_per_s).max(0.5);
    measure(addr, nqn, SEQWRITE_128K, Duration::from_secs_f64(secs)).map(|_| ())
}

fn gib_per_s(r: &Report) -> f64 {
    r.mib_per_s / 1024.0
}

/// The loopback TCP limit: one stream, 128 KiB writes from `TARGET_CPU`
/// read on `LOADGEN_CPU` (the direction of read data), GiB/s.
fn loopback_gib_per_s(duration: Duration) -> std::io::Result<f64> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    std::thread::scope(|s| {
        let sender = s.spawn(move || -> std::io::Result<()> {
            pin_current_thread(TARGET_CPU)?;
            let (mut c, _) = l.accept()?;
            c.set_nodelay(true)?;
            let chunk = vec![0x5au8; 128 << 10];
            let end = Instant::now() + duration;
            while Instant::now() < end {
                c.write_all(&chunk)?;
            }
            Ok(())
        });
        let received = on_cpus(&[LOADGEN_CPU], || -> std::io::Result<(u64, Duration)> {
            let mut c = TcpStream::connect(addr)?;
            let mut buf = vec![0u8; 1 << 20];
            let start = Instant::now();
            let mut total = 0u64;
            loop {
                match c.read(&mut buf)? {
                    0 => break,
                    n => total += n as u64,
                }
            }
            Ok((total, start.elapsed()))
        })?;
        sender.join().expect("loopback sender panicked")?;
        let (bytes, took) = received;
        Ok(bytes as f64 / took.as_secs_f64() / f64::from(1 << 30))
    })
}

/// One line of the table.
struct Row {
    target: String,
    workload: String,
    iops: Option<f64>,
    gib: Option<f64>,
    lat: Option<(f64, f64, f64, f64)>,
    /// CPU time per operation of the target's whole process (rbd rows; for
    /// `rbd bench`, its whole process), in µs.
    cpu_us: Option<f64>,
    /// `(what, ours / reference, lower is better, the goal it is judged by)`.
    versus: Vec<(String, f64, bool, Option<f64>)>,
}

impl Row {
    fn from_report(target: &str, w: Workload, r: &Report) -> Self {
        let l = &r.latency;
        Self {
            target: target.into(),
            workload: w.name.into(),
            iops: Some(r.iops),
            gib: Some(gib_per_s(r)),
            lat: Some((l.p50_us, l.p99_us, l.p999_us, l.avg_us)),
            cpu_us: None,
            versus: Vec::new(),
        }
    }

    /// A ratio shown as it is.
    fn versus(mut self, what: impl Into<String>, ours: f64, reference: f64, lower: bool) -> Self {
        self.versus
            .push((what.into(), ours / reference, lower, None));
        self
    }

    /// A ratio marked `ok` or `MISS` against a goal of 1.
    fn judged(self, what: impl Into<String>, ours: f64, reference: f64, lower: bool) -> Self {
        self.judged_by(what, ours, reference, lower, 1.0)
    }

    /// A ratio marked `ok` or `MISS` against `goal`.
    fn judged_by(
        mut self,
        what: impl Into<String>,
        ours: f64,
        reference: f64,
        lower: bool,
        goal: f64,
    ) -> Self {
        self.versus
            .push((what.into(), ours / reference, lower, Some(goal)));
        self
    }
}

fn print_table(rows: &[Row], notes: &[String]) {
    println!();
    println!(
        "{:<16} {:<20} {:>9} {:>7} {:>7} {:>7} {:>8} {:>7} {:>6}  vs (ours/reference; ok/MISS = meets the goal)",
        "target", "workload", "IOPS", "GiB/s", "p50 us", "p99 us", "p99.9 us", "avg us", "CPU us"
    );
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |v| format!("{v:.prec$}"));
    for r in rows {
        let (p50, p99, p999, avg) = match r.lat {
            Some((a, b, c, d)) => (Some(a), Some(b), Some(c), Some(d)),
            None => (None, None, None, None),
        };
        let vs: Vec<String> = r
            .versus
            .iter()
            .map(|(what, ratio, lower, goal)| {
                let mark = match goal {
                    None => "",
                    Some(g) if (*lower && *ratio <= *g) || (!*lower && *ratio >= *g) => " ok",
                    Some(_) => " MISS",
                };
                format!("{what} {ratio:.2}{mark}")
            })
            .collect();
        println!(
            "{:<16} {:<20} {:>9} {:>7} {:>7} {:>7} {:>8} {:>7} {:>6}  {}",
            r.target,
            r.workload,
            opt(r.iops, 0),
            opt(r.gib, 3),
            opt(p50, 1),
            opt(p99, 1),
            opt(p999, 1),
            opt(avg, 1),
            opt(r.cpu_us, 1),
            vs.join(", ")
        );
    }
    for n in notes {
        println!("note: {n}");
    }
}

/// The malloc workloads, in the order they run on each target.
const MALLOC_WORKLOADS: [Workload; 5] = [
    RANDREAD_4K,
    RANDWRITE_4K,
    RANDREAD_4K_QD1,
    SEQREAD_128K,
    SEQWRITE_128K,
];

/// The malloc rows of every target: ours in each wait mode, and SPDK's
/// (`RACKCACHE_BENCH_SPDK`) and a previous build of ours
/// (`RACKCACHE_BENCH_BEFORE`) when given. Each runs alone on CPU 0 (a
/// polling one would take the CPU from another left idle); they take turns
/// round after round, and each row is the round of median IOPS, so load
/// from elsewhere on a shared machine falls on every side alike.
fn malloc_section(
    bin: &std::path::Path,
    spdk: Option<&std::path::Path>,
    dir: &std::path::Path,
    loopback: f64,
    duration: Duration,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let before = std::env::var_os("RACKCACHE_BENCH_BEFORE").map(std::path::PathBuf::from);
    if let Some(perf) = perf::perf_binary()? {
        notes.push(format!(
            "initiator of the malloc rows: SPDK's {} (the prefill: loadgen)",
            perf.display()
        ));
    }
    if spdk.is_none() {
        notes.push(
            "no SPDK comparison: set RACKCACHE_BENCH_SPDK to a local SPDK build (docs/dataplane.md#benchmark)"
                .into(),
        );
    }
    // (label, how to start it); ours first, the references after.
    type Start<'a> = Box<dyn Fn() -> Result<Daemon, String> + 'a>;
    let mut targets: Vec<(String, Start)> = [
        ("off", "interrupt"),
        ("on", "poll"),
        (POLL_WINDOW, POLL_WINDOW),
    ]
    .into_iter()
    .map(|(flag, name)| {
        let start: Start = Box::new(move || Daemon::start(bin, dir, &["--busy-poll", flag]));
        (name.to_string(), start)
    })
    .collect();
    if let Some(s) = spdk {
        targets.push(("spdk".into(), Box::new(move || Daemon::start_spdk(s, dir))));
    }
    if let Some(b) = &before {
        notes.push(format!("before: {} (its default wait mode)", b.display()));
        targets.push((
            "before".into(),
            Box::new(move || Daemon::start(b, dir, &[])),
        ));
    }
    let mut runs: Vec<Vec<Vec<Report>>> = targets.iter().map(|_| Vec::new()).collect();
    let rounds = bench_rounds();
    for round in 1..=rounds {
        for (i, (name, start)) in targets.iter().enumerate() {
            println!("nvmf_tcp: malloc bdev, {name} (round {round} of {rounds}) ...");
            runs[i].push(on_malloc(&start()?, duration)?);
        }
    }
    let medians: Vec<(String, Vec<Report>)> = targets
        .into_iter()
        .map(|(name, _)| name)
        .zip(runs.into_iter().map(median_runs))
        .collect();
    let find = |n: &str| {
        medians
            .iter()
            .find(|(m, _)| m == n)
            .map(|(_, r)| r.as_slice())
    };
    let mut rows = Vec::new();
    for reference in ["spdk", "before"] {
        if let Some(r) = find(reference) {
            rows.extend(malloc_rows(
                &format!("malloc {reference}"),
                r,
                loopback,
                false,
                &[],
            ));
        }
    }
    for (name, reports) in &medians[..3] {
        let mut bases: Vec<(&str, &[Report], bool)> = Vec::new();
        if name != "interrupt" {
            bases.extend(find("interrupt").map(|r| ("interrupt", r, false)));
        }
        // Polling is what competes with SPDK's always-polling reactor.
        bases.extend(find("spdk").map(|r| ("spdk", r, name != "interrupt")));
        bases.extend(find("before").map(|r| ("before", r, false)));
        rows.extend(malloc_rows(
            &format!("malloc {name}"),
            reports,
            loopback,
            true,
            &bases,
        ));
    }
    Ok(rows)
}

/// [`malloc_reports`] with the target's log in the error.
fn on_malloc(d: &Daemon, duration: Duration) -> Result<Vec<Report>, String> {
    malloc_reports(d, duration).map_err(|e| format!("{e}\ntarget log:\n{}", d.log_tail()))
}

/// Per workload, the report of median IOPS among the rounds' runs.
fn median_runs(rounds: Vec<Vec<Report>>) -> Vec<Report> {
    (0..MALLOC_WORKLOADS.len())
        .map(|w| rounds.iter().filter_map(|r| r.get(w).cloned()).collect())
        .filter_map(|runs| median_by(runs, |r: &Report| r.iops))
        .collect()
}

/// Creates a malloc bdev on `d` (ours or SPDK's: the same RPCs), exports
/// it, fills it, and runs [`MALLOC_WORKLOADS`].
fn malloc_reports(d: &Daemon, duration: Duration) -> Result<Vec<Report>, String> {
    d.rpc("nvmf_create_transport", json!({"trtype": "TCP"}))?;
    d.rpc(
        "bdev_malloc_create",
        json!({"name": "Malloc0", "num_blocks": BDEV_BYTES / 4096, "block_size": 4096}),
    )?;
    let addr = d.export(MALLOC_NQN, "Malloc0")?;
    prefill(&addr, MALLOC_NQN)?;
    MALLOC_WORKLOADS
        .iter()
        .map(|&w| match perf::perf_binary()? {
            Some(perf) => perf::measure(perf, &addr, MALLOC_NQN, w, duration),
            None => measure(&addr, MALLOC_NQN, w, duration),
        })
        .collect()
}

/// One target's malloc rows: the project's goals when `goals`, the
/// loopback limit for sequential rows, and ratios to each of `bases`
/// (IOPS, and average latency at QD1), judged when the base is a peer.
fn malloc_rows(
    label: &str,
    reports: &[Report],
    loopback: f64,
    goals: bool,
    bases: &[(&str, &[Report], bool)],
) -> Vec<Row> {
    let mut rows = Vec::new();
    for (i, (w, r)) in MALLOC_WORKLOADS.iter().zip(reports).enumerate() {
        let mut row = Row::from_report(label, *w, r);
        let g = gib_per_s(r);
        if goals {
            row = match w.name {
                n if n == RANDREAD_4K.name => row
                    .judged("goal IOPS", r.iops, GOAL_RANDREAD_IOPS, false)
                    .judged("goal p99", r.latency.p99_us, GOAL_RANDREAD_P99_US, true),
                n if n == RANDREAD_4K_QD1.name => {
                    row.judged("goal avg", r.latency.avg_us, GOAL_QD1_AVG_US, true)
                }
                n if n == SEQREAD_128K.name => row.judged("goal GiB/s", g, GOAL_SEQREAD_GIB, false),
                _ => row,
            };
        }
        if w.block_size > 4096 {
            row = row.versus("loopback", g, loopback, false);
        }
        for (name, base, peer) in bases {
            let b = &base[i];
            let (iops, avg) = (format!("IOPS/{name}"), format!("avg/{name}"));
            row = if *peer {
                row.judged(iops, r.iops, b.iops, false)
            } else {
                row.versus(iops, r.iops, b.iops, false)
            };
            if w.queue_depth == 1 {
                row = if *peer {
                    row.judged(avg, r.latency.avg_us, b.latency.avg_us, true)
                } else {
                    row.versus(avg, r.latency.avg_us, b.latency.avg_us, true)
                };
            }
        }
        rows.push(row);
    }
    rows
}

/// Opens the image `pool/bench` on `d` as Rbd0 and exports it; the address.
fn rbd_export(d: &Daemon, ceph: &Ceph, pool: &str) -> Result<String, String> {
    d.rpc(
        "bdev_rbd_register_cluster",
        json!({"name": "bench", "user_id": ceph.var("RACKCACHE_CEPH_USER"), "config_param": {
            "mon_host": ceph.var("RACKCACHE_CEPH_MON_HOST"), "key": ceph.var("RACKCACHE_CEPH_KEY")}}),
    )?;
    d.rpc(
        "bdev_rbd_create",
        json!({"name": "Rbd0", "cluster_name": "bench", "pool_name": pool,
               "rbd_name": "bench", "block_size": 4096}),
    )?;
    d.export(RBD_NQN, "Rbd0")
}

/// One turn of a target on the rbd bdev, with the CPU time per operation
/// of the target's process and of this one (the host's threads: nothing
/// else runs here meanwhile). A second of the workload comes first and is
/// not counted, as `rbd bench`'s first second is not: connecting, taking
/// the image's exclusive lock back from `rbd bench` after a write turn,
/// and the ramp stay out of both sides' figures.
struct RbdTurn {
    report: Report,
    target_cpu_us: f64,
    host_cpu_us: f64,
}

impl RbdTurn {
    fn row(&self, target: &str, w: Workload) -> Row {
        Row {
            cpu_us: Some(self.target_cpu_us),
            ..Row::from_report(target, w, &self.report)
        }
    }
}

fn rbd_turn(
    addr: &str,
    d: &Daemon,
    w: Workload,
    duration: Duration,
    host_cpus: &[usize],
) -> Result<RbdTurn, String> {
    measure_with(addr, RBD_NQN, w, RBD_WARM_UP, false, host_cpus)?;
    let me = std::process::id();
    let cpu = || (process_cpu(d.pid()), process_cpu(me));
    let (t0, h0) = cpu();
    // The host sleeps between completions: a spinning host would take a
    // CPU from Ceph's daemons, which `rbd bench` does not.
    let report = measure_with(addr, RBD_NQN, w, duration, false, host_cpus)?;
    let (t1, h1) = cpu();
    let per_op = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
        (Some(a), Some(b)) if report.ops > 0 => {
            b.saturating_sub(a).as_secs_f64() * 1e6 / report.ops as f64
        }
        _ => f64::NAN,
    };
    Ok(RbdTurn {
        target_cpu_us: per_op(t0, t1),
        host_cpu_us: per_op(h0, h1),
        report,
    })
}

/// The rbd rows: ours (and `before`, a previous build, when given) beside
/// `rbd bench` on the same image, taking turns round after round.
fn rbd_rows(
    d: &Daemon,
    before: Option<&Daemon>,
    ceph: &Ceph,
    duration: Duration,
    host_cpus: &[usize],
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let pool = ceph.var("RACKCACHE_CEPH_POOL");
    let image = format!("{pool}/bench");
    ceph.create_filled_image(&image, BDEV_BYTES);
    let addr = rbd_export(d, ceph, pool)?;
    let before_addr = before.map(|b| rbd_export(b, ceph, pool)).transpose()?;
    let mut rows = Vec::new();
    for (w, io_type) in [
        (RANDREAD_4K, "read"),
        (RANDWRITE_4K, "write"),
        (SEQREAD_128K, "read"),
        (SEQWRITE_128K, "write"),
    ] {
        // Turns as on the malloc bdev; the median of each side. Ours and
        // the previous build swap places every round, so that neither
        // always follows `rbd bench` (a write workload moves the image's
        // exclusive lock to whoever writes first).
        let mut ours = Vec::new();
        let mut befores = Vec::new();
        let mut raws = Vec::new();
        let io = RbdBenchIo {
            io_type,
            random: matches!(w.pattern, Pattern::RandRead | Pattern::RandWrite),
            io_size: w.block_size,
            queue_depth: w.queue_depth,
        };
        for round in 0..bench_rounds() {
            let mut turns = vec![(addr.as_str(), d, &mut ours)];
            if let (Some(a), Some(b)) = (&before_addr, before) {
                turns.insert(1 - round % 2, (a.as_str(), b, &mut befores));
            }
            for (a, target, out) in turns {
                out.push(rbd_turn(a, target, w, duration, host_cpus)?);
            }
            raws.push(ceph.rbd_bench(&image, io, duration + RBD_WARM_UP)?);
        }
        let turn_iops = |t: &RbdTurn| t.report.iops;
        let raw = median_by(raws, |r| r.iops).ok_or("no rbd bench runs")?;
        let r = median_by(ours, turn_iops).ok_or("no rbd runs")?;
        let b = median_by(befores, turn_iops);
        if let Some(b) = &b {
            rows.push(
                b.row("rbd before", w)
                    .versus("rbd bench", b.report.iops, raw.iops, false),
            );
        }
        let mut row = r.row("rbd", w).judged_by(
            "rbd bench",
            r.report.iops,
            raw.iops,
            false,
            GOAL_VS_RBD_BENCH,
        );
        if let Some(b) = &b {
            row = row.versus("IOPS/before", r.report.iops, b.report.iops, false);
        }
        rows.push(row);
        notes.push(format!(
            "rbd {}: the host (loadgen) took {:.1} CPU us/op on top, which rbd bench does not have",
            w.name, r.host_cpu_us
        ));
        rows.push(Row {
            target: "rbd".into(),
            workload: format!("  rbd bench {io_type}"),
            iops: Some(raw.iops),
            gib: Some(raw.iops * w.block_size as f64 / f64::from(1 << 30)),
            lat: None,
            // Unknown (NaN) when the turn was too short for two of its
            // per-second lines.
            cpu_us: Some(raw.cpu_us_per_op).filter(|c| c.is_finite()),
            versus: Vec::new(),
        });
    }
    Ok(rows)
}

/// The text of a caught panic.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that excludes us skips.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| !"nvmf_tcp".contains(&f)) {
        return;
    }
    if let Err(e) = bench() {
        eprintln!("nvmf_tcp bench failed: {e}");
        std::process::exit(1);
    }
}

fn bench() -> Result<(), String> {
    let duration = bench_seconds();
    let rbd_duration = rbd_bench_seconds();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus <= LOADGEN_CPU {
        return Err(format!(
            "needs CPUs {TARGET_CPU} and {LOADGEN_CPU}, this machine has {cpus}"
        ));
    }
    let bin = daemon::daemon_binary()?;
    let spdk = daemon::spdk_binary()?;
    let mut notes = vec![format!(
        "{} s per workload ({} s on the rbd bdev); target on CPU {TARGET_CPU}, load generator on CPU {LOADGEN_CPU}; {}",
        duration.as_secs_f64(),
        rbd_duration.as_secs_f64(),
        bin.display()
    )];
    println!("nvmf_tcp: loopback TCP limit ...");
    let loopback = loopback_gib_per_s(duration).map_err(|e| format!("loopback: {e}"))?;
    let mut rows = vec![Row {
        target: "-".into(),
        workload: "loopback TCP 128K".into(),
        iops: None,
        gib: Some(loopback),
        lat: None,
        cpu_us: None,
        versus: Vec::new(),
    }];

    let work = TempDir::new("rackcache-bench-nvmf");
    if std::env::var("RACKCACHE_BENCH_MALLOC").as_deref() == Ok("0") {
        notes.push("malloc rows skipped: RACKCACHE_BENCH_MALLOC=0".into());
    } else {
        rows.extend(malloc_section(
            &bin,
            spdk.as_deref(),
            work.path(),
            loopback,
            duration,
            &mut notes,
        )?);
    }

    // Declared before the daemon so that it is stopped after it.
    let mut ceph: Option<Ceph> = None;
    if std::env::var("RACKCACHE_BENCH_CEPH").as_deref() == Ok("0") {
        notes.push("rbd rows skipped: RACKCACHE_BENCH_CEPH=0".into());
    } else {
        // In interrupt mode, on the CPUs Ceph's daemons leave: every
        // process started from here from now on (the targets, `rbd bench`)
        // inherits this thread's mask, and the host runs there too. With
        // RACKCACHE_BENCH_CEPH_CPUS=shared, the targets are unpinned and
        // share every CPU with Ceph's daemons, as `rbd bench` does.
        let host_cpus = match client_cpus() {
            Some(cpus) => {
                pin_current_thread_to(&cpus)
                    .map_err(|e| format!("pin to the clients' CPUs {cpus:?}: {e}"))?;
                notes.push(format!(
                    "rbd rows: Ceph's daemons on CPUs {}, the target, the host and rbd bench on {cpus:?}",
                    ceph_cpus().unwrap_or_default()
                ));
                cpus
            }
            None => vec![LOADGEN_CPU],
        };
        let daemon = Daemon::start_unpinned(&bin, work.path(), "dataplane-unpinned")?;
        daemon.rpc("nvmf_create_transport", json!({"trtype": "TCP"}))?;
        let before = match std::env::var_os("RACKCACHE_BENCH_BEFORE") {
            Some(b) => {
                let d = Daemon::start_unpinned(b.as_ref(), work.path(), "before-unpinned")?;
                d.rpc("nvmf_create_transport", json!({"trtype": "TCP"}))?;
                Some(d)
            }
            None => None,
        };
        println!("nvmf_tcp: starting a one-node Ceph ...");
        match std::panic::catch_unwind(|| Ceph::start_on(ceph_cpus().as_deref())) {
            Ok(c) => {
                println!("nvmf_tcp: rbd bdev and rbd bench ...");
                let c = ceph.insert(c);
                let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    rbd_rows(
                        &daemon,
                        before.as_ref(),
                        c,
                        rbd_duration,
                        &host_cpus,
                        &mut notes,
                    )
                }));
                match r {
                    Ok(Ok(r)) => rows.extend(r),
                    Ok(Err(e)) => notes.push(format!("rbd rows failed: {e}")),
                    Err(p) => notes.push(format!("rbd rows failed: {}", panic_text(p.as_ref()))),
                }
            }
            Err(p) => notes.push(format!(
                "rbd rows skipped: Ceph did not start: {}",
                panic_text(p.as_ref())
            )),
        }
        drop(before);
        drop(daemon);
    }
    drop(ceph);
    print_table(&rows, &notes);
    Ok(())
}
