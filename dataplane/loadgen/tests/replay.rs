//! `loadgen::replay` against the project's NVMe/TCP target on loopback, on
//! a malloc bdev whose I/O counters (`bdev::IoStats`) show what the
//! namespace was asked to do. Each test starts its own target on an
//! ephemeral 127.0.0.1 port and shuts it down at the end.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bdev::delay::{DelayBdev, Latencies};
use bdev::malloc::MallocBdev;
use bdev::{Bdev, CountedBdev, IoStats};
use loadgen::replay::{predict, predict_run, run, run_with, CacheModel, ReplayOptions};
use nvmf_host::host::{ConnectParams, HostController};
use nvmf_tgt::{SubsystemConfig, Target, TransportOptions};
use testkit::TempDir;

const NQN: &str = "nqn.2016-06.io.rackcache:replay";
/// A second host (one NQN may not connect with two host ids).
const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000ff";
/// Commands the test target accepts at most (MDTS).
const SMALL_MDTS: u32 = 32 << 10;

struct Tgt {
    rt: tokio::runtime::Runtime,
    target: Target,
    addr: SocketAddr,
    stats: Arc<IoStats>,
}

impl Tgt {
    /// A target exporting a zeroed malloc bdev of `bytes` (512-byte blocks).
    fn start(bytes: u64, max_io_size: u32) -> Self {
        Self::start_with(bytes, max_io_size, None)
    }

    /// [`Tgt::start`], with a delay bdev of `delay` over the malloc one
    /// (whose counters [`Tgt::seen`] still reads).
    fn start_with(bytes: u64, max_io_size: u32, delay: Option<Latencies>) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let opts = TransportOptions {
            max_io_size,
            ..TransportOptions::default()
        };
        let target = Target::new(opts, metrics::Registry::new()).unwrap();
        let mut cfg = SubsystemConfig::new(NQN);
        cfg.allow_any_host = true;
        let sub = target.add_subsystem(cfg).unwrap();
        let bdev = Arc::new(Bdev::Malloc(
            MallocBdev::new("Malloc0", bytes / 512, 512).unwrap(),
        ));
        let stats = Arc::new(IoStats::default());
        let counted = CountedBdev::new(bdev, stats.clone());
        let exported = match delay {
            None => counted,
            Some(l) => CountedBdev::from(Arc::new(Bdev::Delay(
                DelayBdev::new("Delay0", counted, l).unwrap(),
            ))),
        };
        sub.add_namespace(Some(1), exported, None, None).unwrap();
        let addr = rt
            .block_on(target.add_listener(NQN, "127.0.0.1:0".parse().unwrap(), None, None))
            .unwrap();
        Self {
            rt,
            target,
            addr,
            stats,
        }
    }

    fn options(&self, trace: &Path) -> ReplayOptions {
        let mut o = ReplayOptions::new(self.addr.to_string(), NQN, trace);
        o.speedup = 0.0;
        o
    }

    /// (read ops, read bytes, write ops, written bytes) the bdev completed.
    fn seen(&self) -> (u64, u64, u64, u64) {
        let s = &self.stats;
        (
            s.num_read_ops.get(),
            s.bytes_read.get(),
            s.num_write_ops.get(),
            s.bytes_written.get(),
        )
    }

    fn stop(self) {
        let t = self.target.clone();
        self.rt.block_on(async move {
            tokio::time::timeout(Duration::from_secs(10), t.shutdown())
                .await
                .expect("target shut down in time")
        });
        self.rt.shutdown_timeout(Duration::from_secs(2));
    }
}

/// MSR Cambridge lines: timestamp (100 ns units), host, volume, op,
/// offset, size, response time.
fn msr_trace(dir: &Path, lines: &[(u64, u32, &str, u64, u64)]) -> PathBuf {
    let p = dir.join("trace.csv");
    let text: String = lines
        .iter()
        .map(|(t, vol, op, off, len)| {
            format!("{},hm,{vol},{op},{off},{len},100\n", 128166372000000000 + t)
        })
        .collect();
    std::fs::write(&p, text).unwrap();
    p
}

fn fixed_64k() -> CacheModel {
    let args = cache_args(&[
        "--cache-size",
        "1MiB",
        "--mode",
        "fixed",
        "--block-sizes",
        "64K",
    ]);
    CacheModel::from_args(&args).unwrap().remove(0)
}

#[test]
fn the_namespace_sees_exactly_the_requests_of_the_trace() {
    let dir = TempDir::new("loadgen-replay");
    // Two volumes; a 96 KiB write split at the 32 KiB MDTS into three
    // commands; a 1 KiB read at 512 widened to the 4 KiB sector.
    let trace = msr_trace(
        dir.path(),
        &[
            (0, 0, "Write", 0, 8192),
            (10, 0, "Read", 0, 8192),
            (20, 1, "Write", 4096, 96 << 10),
            (30, 1, "Read", 8192, 4096),
            (40, 0, "Read", 512, 1024),
            (50, 0, "Write", 65536, 4096),
        ],
    );
    let t = Tgt::start(8 << 20, SMALL_MDTS);
    let mut o = t.options(&trace);
    o.queue_depth = 4;
    let r = run(&o).unwrap();
    assert_eq!((r.requests, r.reads, r.writes), (6, 3, 3));
    assert_eq!((r.errors, r.split_requests, r.commands), (0, 1, 8));
    assert_eq!(r.max_transfer, u64::from(SMALL_MDTS));
    // Volume 0 ends at 68 KiB, so volume 1 starts at 1 MiB.
    assert_eq!(r.address_space, 2 << 20);
    let (read_bytes, write_bytes) = (8192 + 4096 + 4096, 8192 + (96 << 10) + 4096);
    assert_eq!((r.read_bytes, r.write_bytes), (read_bytes, write_bytes));
    assert_eq!(t.seen(), (3, read_bytes, 5, write_bytes));
    assert_eq!(r.stopped_by, "trace");
    t.stop();
}

#[test]
fn writes_then_reads_verify_in_trace_order() {
    let dir = TempDir::new("loadgen-replay");
    // One queue slot: each request completes before the next is sent, so
    // the last write of each block is what the reads must return.
    let trace = msr_trace(
        dir.path(),
        &[
            (0, 0, "Write", 0, 65536),
            (1, 0, "Write", 16384, 8192),
            (2, 0, "Read", 0, 65536),
            (3, 0, "Write", 0, 4096),
            (4, 0, "Read", 0, 32768),
        ],
    );
    let t = Tgt::start(4 << 20, SMALL_MDTS);
    let mut o = t.options(&trace);
    o.queue_depth = 1;
    o.verify = true;
    let r = run(&o).unwrap();
    assert_eq!(r.verify_errors, 0, "{:?}", r.first_verify_error);
    // 64 KiB and 32 KiB read, in 512-byte LBAs.
    assert_eq!(r.verified_blocks, 128 + 64);
    t.stop();
}

#[test]
fn verification_finds_data_the_namespace_did_not_keep() {
    let dir = TempDir::new("loadgen-replay");
    let trace = msr_trace(
        dir.path(),
        &[
            (0, 0, "Write", 0, 4096),
            (1, 0, "Read", 0, 4096),
            (2, 0, "Read", 4096, 4096),
        ],
    );
    let t = Tgt::start(1 << 20, SMALL_MDTS);
    let mut o = t.options(&trace);
    o.queue_depth = 1;
    o.verify = true;
    o.warmup_requests = 1;
    // Another host zeroes the first LBA after the warm-up wrote it.
    let r = run_with(&o, || {
        let p = ConnectParams {
            addr: t.addr.to_string(),
            subnqn: NQN.into(),
            hostnqn: OTHER_HOST.into(),
            host_id: [7; 16],
            queue_size: 32,
            kato_ms: 0,
        };
        let mut c = HostController::connect(&p, 1).map_err(|e| e.to_string())?;
        c.io[0]
            .write_blocks(1, 0, 512, &[0; 512], 4096)
            .map_err(|e| e.to_string())?;
        Ok(())
    })
    .unwrap();
    assert_eq!(r.verify_errors, 1);
    let e = r.first_verify_error.unwrap();
    assert!(
        e.contains("LBA 0: expected write 1") && e.contains("zeroes"),
        "{e}"
    );
    // A wrong read checks nothing more; LBAs never written are not checked.
    assert_eq!(r.verified_blocks, 0);
    t.stop();
}

#[test]
fn warmup_is_drained_and_not_counted() {
    let dir = TempDir::new("loadgen-replay");
    let trace = msr_trace(
        dir.path(),
        &[
            (0, 0, "Read", 0, 4096),
            (1, 0, "Read", 4096, 4096),
            (2, 0, "Write", 0, 4096),
            (3, 0, "Read", 0, 4096),
            (4, 0, "Read", 8192, 4096),
        ],
    );
    let t = Tgt::start(1 << 20, SMALL_MDTS);
    let mut o = t.options(&trace);
    o.warmup_requests = 2;
    o.max_requests = Some(4);
    let mut at_warmup = Vec::new();
    let r = run_with(&o, || {
        at_warmup.push(t.seen());
        Ok(())
    })
    .unwrap();
    // Both warm-up reads had completed when the hook ran.
    assert_eq!(at_warmup, [(2, 8192, 0, 0)]);
    assert_eq!(
        (r.warmup_requests, r.requests, r.reads, r.writes),
        (2, 2, 1, 1)
    );
    assert_eq!(r.stopped_by, "max-requests");
    assert_eq!(t.seen(), (3, 12288, 1, 4096));
    let p = predict(&o, &fixed_64k()).unwrap();
    assert_eq!((p.requests, p.warmup_requests), (4, 2));
    assert_eq!((p.report.reads, p.report.writes), (1, 1));
    // The warm-up filled block 0: the measured read of it hits.
    assert_eq!(p.report.read_hit_ratio, 1.0);
    o.warmup_requests = 4;
    assert!(run(&o).unwrap_err().to_string().contains("none of the 4"));
    t.stop();
}

#[test]
fn paced_replay_holds_requests_until_their_trace_time() {
    let dir = TempDir::new("loadgen-replay");
    // 200 ms of trace time (100 ns units) at twice the speed: the last
    // request cannot be sent before 100 ms.
    let trace = msr_trace(
        dir.path(),
        &[
            (0, 0, "Read", 0, 4096),
            (1_000_000, 0, "Write", 4096, 4096),
            (2_000_000, 0, "Read", 4096, 4096),
        ],
    );
    let t = Tgt::start(1 << 20, SMALL_MDTS);
    let mut o = t.options(&trace);
    o.speedup = 2.0;
    o.verify = true;
    o.queue_depth = 1;
    let r = run(&o).unwrap();
    assert!(r.elapsed_s >= 0.1, "elapsed {}", r.elapsed_s);
    assert_eq!((r.requests, r.verify_errors, r.verified_blocks), (3, 0, 8));
    t.stop();
}

#[test]
fn paced_replay_handles_completions_while_it_waits() {
    let dir = TempDir::new("loadgen-replay");
    // Reads 10 ms apart on a bdev that takes 50 ms: while the replay waits
    // for each next request's time, earlier ones are in flight.
    let trace = msr_trace(
        dir.path(),
        &[
            (0, 0, "Read", 0, 4096),
            (100_000, 0, "Read", 4096, 4096),
            (200_000, 0, "Read", 8192, 4096),
            (300_000, 0, "Write", 12288, 4096),
        ],
    );
    let l = Latencies {
        avg_read_us: 50_000,
        p99_read_us: 50_000,
        avg_write_us: 50_000,
        p99_write_us: 50_000,
    };
    let t = Tgt::start_with(1 << 20, SMALL_MDTS, Some(l));
    let mut o = t.options(&trace);
    o.speedup = 1.0;
    o.queue_depth = 4;
    let r = run(&o).unwrap();
    assert_eq!((r.requests, r.errors), (4, 0));
    assert_eq!(t.seen(), (3, 12288, 1, 4096));
    // The last request is due at 30 ms and takes 50 ms.
    assert!(r.elapsed_s >= 0.08, "elapsed {}", r.elapsed_s);
    assert!(r.read_latency.p50_us >= 50_000.0, "{:?}", r.read_latency);
    t.stop();
}

#[test]
fn max_seconds_stops_a_paced_replay_and_bounds_its_prediction() {
    let dir = TempDir::new("loadgen-replay");
    // The second request is due 100 s after the first.
    let trace = msr_trace(
        dir.path(),
        &[
            (0, 0, "Write", 0, 4096),
            (1_000_000_000, 0, "Read", 0, 4096),
        ],
    );
    let t = Tgt::start(1 << 20, SMALL_MDTS);
    let mut o = t.options(&trace);
    o.speedup = 1.0;
    o.max_duration = Some(Duration::from_millis(50));
    let r = run(&o).unwrap();
    assert_eq!((r.requests, r.writes, r.stopped_by), (1, 1, "max-seconds"));
    assert_eq!(t.seen(), (0, 0, 1, 4096));
    let p = predict_run(&o, &fixed_64k(), &r).unwrap();
    assert_eq!((p.requests, p.report.reads, p.report.writes), (1, 0, 1));
    // The layout is still the whole selection's.
    assert_eq!(predict(&o, &fixed_64k()).unwrap().report.reads, 1);
    t.stop();
}

#[test]
fn a_namespace_smaller_than_the_layout_is_refused() {
    let dir = TempDir::new("loadgen-replay");
    let trace = msr_trace(dir.path(), &[(0, 0, "Read", 3 << 20, 4096)]);
    let t = Tgt::start(2 << 20, SMALL_MDTS);
    let e = run(&t.options(&trace)).unwrap_err().to_string();
    assert!(
        e.contains("holds 2097152 bytes") && e.contains("needs 4194304 bytes"),
        "{e}"
    );
    assert_eq!(t.seen(), (0, 0, 0, 0));
    t.stop();
}

/// `rackcache-sim`'s binary beside this test's (cargo builds it for the
/// workspace's tests), or `None` with a skip message.
fn sim_binary() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_BIN_EXE_rackcache-loadgen"))
        .with_file_name(format!("rackcache-sim{}", std::env::consts::EXE_SUFFIX));
    if p.is_file() {
        Some(p)
    } else {
        testkit::missing(&format!(
            "{} (run `cargo build -p rackcache-sim` first)",
            p.display()
        ));
        None
    }
}

fn json_of(mut cmd: Command) -> serde_json::Value {
    let out = cmd.output().expect("run the binary");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

#[test]
fn cloudphysics_sample_replays_and_prediction_matches_the_simulator() {
    let trace = rackcache_sim::traces_dir().join("cloudphysics/cloudPhysicsIO.csv");
    if !trace.is_file() {
        testkit::missing(&format!(
            "{} (set RACKCACHE_TRACES; see docs/traces.md)",
            trace.display()
        ));
        return;
    }
    // The sample's first reads come after 3,800 writes.
    const LIMIT: u64 = 8000;
    const WARMUP: u64 = 4000;
    let mut o = ReplayOptions::new("", NQN, &trace);
    o.speedup = 0.0;
    o.max_requests = Some(LIMIT);
    o.warmup_requests = WARMUP;
    let profile = o.profile().unwrap();
    // A RAM disk as large as the layout: pages never written stay unbacked.
    let t = Tgt::start(profile.address_space, 1 << 20);
    o.addr = t.addr.to_string();
    let r = run(&o).unwrap();
    assert_eq!(
        (r.warmup_requests, r.requests, r.errors),
        (WARMUP, LIMIT - WARMUP, 0)
    );

    // What the trace asks for, laid out by the simulator's code and split
    // at the MDTS; and the part after the warm-up.
    let (mut want, mut measured) = ((0, 0, 0, 0), (0, 0));
    o.spec()
        .for_each(|i, req| -> Result<(), rackcache_sim::replay::SimError> {
            let (_, len) = profile.place(req);
            let cmds = len.div_ceil(r.max_transfer);
            let read = req.op == traces::Op::Read;
            if read {
                want.0 += cmds;
                want.1 += len;
            } else {
                want.2 += cmds;
                want.3 += len;
            }
            if i >= WARMUP {
                *if read {
                    &mut measured.0
                } else {
                    &mut measured.1
                } += len;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(t.seen(), want);
    assert_eq!((r.read_bytes, r.write_bytes), measured);
    assert!(r.reads > 0);

    // The prediction printed by `rackcache-loadgen replay --predict` is
    // the one `rackcache-sim --limit` prints for the same requests.
    let cache = [
        "--cache-size",
        "25%",
        "--mode",
        "fixed",
        "--block-sizes",
        "64K",
        "--write-mode",
        "write-through",
    ];
    let mut lg = Command::new(env!("CARGO_BIN_EXE_rackcache-loadgen"));
    lg.args(["replay", "--json", "--predict", "--speedup", "0", "--addr"])
        .arg(t.addr.to_string())
        .args(["--nqn", NQN, "--max-requests", &LIMIT.to_string()])
        .args(["--warmup-requests", &WARMUP.to_string(), "--trace"])
        .arg(&trace)
        .args(cache);
    let lg = json_of(lg);
    assert_eq!(lg["run"]["requests"], LIMIT - WARMUP);
    let predicted = &lg["predictions"][0]["report"];
    assert!(predicted["read_hit_ratio"].as_f64().unwrap() > 0.0);
    // The library's figure is the command's.
    let models = CacheModel::from_args(&cache_args(&cache)).unwrap();
    let p = predict_run(&o, &models[0], &r).unwrap();
    assert_eq!(predicted["read_hit_ratio"], p.report.read_hit_ratio);
    t.stop();

    let Some(sim) = sim_binary() else { return };
    let mut sc = Command::new(sim);
    sc.args(["--json", "--limit", &LIMIT.to_string()])
        .args(["--warmup", &WARMUP.to_string()])
        .args(cache)
        .arg(&trace);
    let sim = json_of(sc);
    let simulated = &sim["reports"][0];
    for k in [
        "read_hit_ratio",
        "write_hit_ratio",
        "read_from_core",
        "write_to_core",
        "read_from_cache",
        "write_to_cache",
    ] {
        assert_eq!(predicted[k], simulated[k], "{k}");
    }
}

/// The simulator's cache options parsed from `args`.
fn cache_args(args: &[&str]) -> rackcache_sim::cache_args::CacheArgs {
    use clap::Parser;
    #[derive(Parser)]
    struct P {
        #[command(flatten)]
        cache: rackcache_sim::cache_args::CacheArgs,
    }
    P::parse_from(std::iter::once("p").chain(args.iter().copied())).cache
}
