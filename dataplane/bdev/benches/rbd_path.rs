//! The Ceph path alone (issue 13, goal 2): the rbd bdev driven in this
//! process, on one runtime thread as the target drives it in the rbd rows
//! of loadgen's `nvmf_tcp` bench but without NVMe/TCP in front, beside
//! `rbd bench` on the same image. Both are then one librbd client each,
//! with librbd's cache off, on a one-node Ceph (hack/ceph.sh) kept on a
//! CPU of its own; they take turns round after round, and each row is
//! the median. The end-to-end figure, through the target and a host, is
//! the rbd rows of loadgen's `nvmf_tcp` bench.
//!
//! Printed per workload: IOPS of both in their steady state (after their
//! first second), and CPU time per operation of the whole process on each
//! side (librbd's and the messenger's threads included): the figure that
//! still resolves a few percent when the IOPS of one turn move by 20%.
//!
//! Environment: `RACKCACHE_BENCH_RBD_SECONDS` (8, after a second of warm-up),
//! `RACKCACHE_BENCH_ROUNDS` (3), `RACKCACHE_BENCH_CEPH=0` to skip,
//! `RACKCACHE_BENCH_WORKLOADS`: only the workloads whose names contain one
//! of these comma-separated words (e.g. `seqread`, for a profile).
//! `RACKCACHE_RUNTIME=multi-thread`: one runtime worker per CPU instead of
//! one runtime thread (the daemon takes the same variable).
//! `RACKCACHE_BENCH_CEPH_CPUS`: the CPUs of Ceph's daemons (default: the
//! last one), this process and `rbd bench` on the others; `shared`: all on
//! every CPU (`testkit::ceph_cpus`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bdev::rbd::{ClusterConfig, RbdBdev, RbdCluster};
use bdev::{Bdev, DmaBuf};
use testkit::{
    bench_rounds, ceph_cpus, client_cpus, median_by, pin_current_thread_to, process_cpu,
    rbd_bench_seconds, Ceph, RbdBenchIo,
};

/// The image both sides use, written whole first.
const IMAGE_BYTES: u64 = 256 << 20;
/// Goal 2: at least this fraction of `rbd bench`'s IOPS.
const GOAL_VS_RBD_BENCH: f64 = 0.95;

const WORKLOADS: [(&str, RbdBenchIo); 4] = [
    ("4K randread QD32", io("read", true, 4096)),
    ("4K randwrite QD32", io("write", true, 4096)),
    ("128K seqread QD32", io("read", false, 128 << 10)),
    ("128K seqwrite QD32", io("write", false, 128 << 10)),
];

const fn io(io_type: &'static str, random: bool, io_size: usize) -> RbdBenchIo {
    RbdBenchIo {
        io_type,
        random,
        io_size,
        queue_depth: 32,
    }
}

/// One side's figures in one turn.
#[derive(Clone, Copy)]
struct Turn {
    iops: f64,
    cpu_us_per_op: f64,
}

/// The offsets one in-flight slot visits: random aligned ones from its own
/// generator, or the next of one sequential stream all slots share (as
/// `rbd bench --io-pattern full-seq` runs, see `RbdBenchIo::random`).
enum Offsets {
    Random(u64),
    Sequential(Arc<AtomicU64>),
}

impl Offsets {
    fn next(&mut self, io_size: u64) -> u64 {
        let slots = IMAGE_BYTES / io_size;
        match self {
            Offsets::Random(state) => {
                // xorshift64: uniform enough, and no lock between slots.
                *state ^= *state << 13;
                *state ^= *state >> 7;
                *state ^= *state << 17;
                (*state % slots) * io_size
            }
            Offsets::Sequential(cursor) => {
                (cursor.fetch_add(1, Ordering::Relaxed) % slots) * io_size
            }
        }
    }
}

/// Runs `w` on the rbd bdev for a second of warm-up and then `window`,
/// counting operations and this process's CPU time over the window alone.
/// Everything runs inside the runtime, so that a current-thread runtime
/// drives its slots too.
async fn drive(b: &Arc<Bdev>, w: RbdBenchIo, window: Duration) -> Turn {
    let ops = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let cursor = Arc::new(AtomicU64::new(0));
    let write = w.io_type == "write";
    let mut slots = Vec::new();
    for slot in 0..w.queue_depth {
        let (b, ops, stop) = (Arc::clone(b), Arc::clone(&ops), Arc::clone(&stop));
        let mut offsets = if w.random {
            Offsets::Random(0x9E37_79B9_7F4A_7C15 ^ (slot as u64 + 1) << 32)
        } else {
            Offsets::Sequential(Arc::clone(&cursor))
        };
        slots.push(tokio::spawn(async move {
            let mut buf = DmaBuf::from_slice(&vec![slot as u8; w.io_size]);
            while !stop.load(Ordering::Relaxed) {
                let offset = offsets.next(w.io_size as u64);
                let (back, r) = if write {
                    b.write(offset, buf).await
                } else {
                    b.read(offset, buf).await
                };
                r.unwrap_or_else(|e| panic!("rbd bdev {} at {offset}: {e}", w.io_type));
                buf = back;
                ops.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let me = std::process::id();
    let sample = || (ops.load(Ordering::Relaxed), process_cpu(me), Instant::now());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (ops0, cpu0, t0) = sample();
    tokio::time::sleep(window).await;
    let (ops1, cpu1, t1) = sample();
    stop.store(true, Ordering::Relaxed);
    for s in slots {
        s.await.expect("an I/O slot panicked");
    }
    let done = (ops1 - ops0) as f64;
    let cpu = cpu1
        .zip(cpu0)
        .map(|(c1, c0)| c1.saturating_sub(c0).as_secs_f64());
    Turn {
        iops: done / (t1 - t0).as_secs_f64(),
        cpu_us_per_op: cpu.map_or(f64::NAN, |c| c * 1e6 / done.max(1.0)),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that excludes us skips.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| !"rbd_path".contains(&f)) {
        return;
    }
    if std::env::var("RACKCACHE_BENCH_CEPH").as_deref() == Ok("0") {
        println!("rbd_path: skipped (RACKCACHE_BENCH_CEPH=0)");
        return;
    }
    let window = rbd_bench_seconds();
    let rounds = bench_rounds();
    println!("rbd_path: starting a one-node Ceph ...");
    let ceph = Ceph::start_on(ceph_cpus().as_deref());
    let pool = ceph.var("RACKCACHE_CEPH_POOL");
    let image = format!("{pool}/bench");
    ceph.create_filled_image(&image, IMAGE_BYTES);
    // With Ceph on CPUs of its own, this process (librbd's threads, started
    // below, included) and `rbd bench` (started from here) get the rest.
    let clients = client_cpus();
    if let Some(cpus) = &clients {
        pin_current_thread_to(cpus).expect("pin the bench to the clients' CPUs");
    }
    // As the target connects: the restricted CSI user, librbd's cache off
    // (bdev::rbd sets the options, as for every rbd bdev).
    let cluster = RbdCluster::connect(
        "bench",
        &ClusterConfig {
            user: ceph.var("RACKCACHE_CEPH_USER").into(),
            mon_host: Some(ceph.var("RACKCACHE_CEPH_MON_HOST").into()),
            key: Some(ceph.var("RACKCACHE_CEPH_KEY").into()),
            ..Default::default()
        },
    )
    .expect("connect to Ceph");
    let rbd = RbdBdev::open("Rbd0", cluster, pool, "bench", 4096).expect("open the image");
    let b = Arc::new(Bdev::Rbd(rbd));
    // One runtime thread, as loadgen's nvmf_tcp bench runs the daemon for
    // its rbd rows; `RACKCACHE_RUNTIME=multi-thread`: one worker per CPU,
    // as the daemon runs unpinned by default.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let multi = std::env::var("RACKCACHE_RUNTIME").as_deref() == Ok("multi-thread");
    let rt = if multi {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(cpus);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    }
    .enable_all()
    .build()
    .expect("tokio runtime");

    let placement = match (&clients, ceph_cpus()) {
        (Some(c), Some(ceph)) => format!("clients on CPUs {c:?}, Ceph on {ceph}"),
        _ => format!("{cpus} CPUs shared with Ceph"),
    };
    println!(
        "rbd_path: {rounds} rounds of {:.1} s per side after 1 s of warm-up, {} runtime, {placement}",
        window.as_secs_f64(),
        if multi { "multi-thread" } else { "current-thread" }
    );
    println!(
        "{:<20} {:>9} {:>9} {:>7} {:>11} {:>11}  goal",
        "workload", "IOPS", "rbd bench", "ratio", "CPU us/op", "rbd bench"
    );
    let only = std::env::var("RACKCACHE_BENCH_WORKLOADS").unwrap_or_default();
    let chosen = |name: &str| only.is_empty() || only.split(',').any(|o| name.contains(o));
    for (name, w) in WORKLOADS.into_iter().filter(|(n, _)| chosen(n)) {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            // Alternate who goes first: a write moves the image's
            // exclusive lock to whoever writes first.
            for side in [round % 2, 1 - round % 2] {
                if side == 0 {
                    ours.push(rt.block_on(drive(&b, w, window)));
                } else {
                    let r = ceph
                        .rbd_bench(&image, w, window + Duration::from_secs(1))
                        .unwrap_or_else(|e| panic!("{e}"));
                    assert!(
                        !r.steady_iops.is_nan(),
                        "rbd bench printed no per-second line in {window:?} (+1 s)"
                    );
                    theirs.push(Turn {
                        iops: r.steady_iops,
                        cpu_us_per_op: r.cpu_us_per_op,
                    });
                }
            }
        }
        let iops = |t: &Turn| t.iops;
        let (o, t) = (median_by(ours, iops), median_by(theirs, iops));
        let (o, t) = (o.expect("rounds >= 1"), t.expect("rounds >= 1"));
        let ratio = o.iops / t.iops;
        println!(
            "{name:<20} {:>9.0} {:>9.0} {ratio:>7.2} {:>11.1} {:>11.1}  {}",
            o.iops,
            t.iops,
            o.cpu_us_per_op,
            t.cpu_us_per_op,
            if ratio >= GOAL_VS_RBD_BENCH {
                "ok"
            } else {
                "MISS"
            }
        );
    }
    // Close the image before Ceph stops (dropping the bdev would close it
    // on a thread of its own, racing `hack/ceph.sh down`).
    if let Some(Bdev::Rbd(rbd)) = Arc::into_inner(b) {
        rt.block_on(rbd.close());
    }
}
