//! Replaying a block I/O trace against an NVMe/TCP namespace
//! (`rackcache-loadgen replay`), and predicting what a cache would make of
//! the same requests.
//!
//! The trace is read and laid out exactly as `rackcache-sim` does it (its
//! [`TraceSpec`] and [`Profile`]: volumes one after another on 1 MiB
//! boundaries, requests widened to the sector size), so that the namespace
//! sees the byte ranges the simulator's engine sees, in the same order.
//! [`run`] sends them; [`predict`] replays the same selection through the
//! engine in-process with the simulator's code. A bench that reads the
//! cache's own counters between the two can put the measured hit ratio
//! beside the predicted one; [`run_with`] calls back after the warm-up so
//! it can reset those counters there.

mod pace;
mod session;
mod verify;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rackcache_sim::cache_args::CacheArgs;
use rackcache_sim::replay::{replay_from, Profile, SimConfig, SimError, TraceSpec};
use rackcache_sim::report::Report;
use rackcache_sim::size::CacheSize;
use serde::Serialize;

use crate::run::{identify, RunError, DEFAULT_HOSTNQN};
use crate::workload::{summarize, LatencySummary};
use nvmf_host::host::{ConnectParams, HostError, HostQueue};

pub use pace::Pacer;
use session::{Limits, Session};

/// Largest command when the target sets no MDTS.
const UNLIMITED_TRANSFER: u64 = 1 << 20;

/// What to replay where.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Target address (host:port).
    pub addr: String,
    /// Subsystem NQN.
    pub nqn: String,
    /// Host NQN to connect as.
    pub hostnqn: String,
    /// Namespace id.
    pub nsid: u32,
    /// The trace file (any format the simulator reads).
    pub trace: PathBuf,
    /// Its format; detected from the content when `None`.
    pub format: Option<traces::Format>,
    /// Bytes per oracleGeneral object id.
    pub oracle_id_unit: u64,
    /// Only this volume's requests.
    pub volume: Option<u32>,
    /// Requests are widened to this (the simulator's `--sector-size`).
    pub sector_size: u64,
    /// Times the trace's own speed; 0 sends as fast as the queue depth
    /// allows.
    pub speedup: f64,
    /// Commands in flight at most.
    pub queue_depth: usize,
    /// Requests read from the trace at most, warm-up included (the
    /// simulator's `--limit`).
    pub max_requests: Option<u64>,
    /// Stop sending this long after the measured requests started.
    pub max_duration: Option<Duration>,
    /// The first requests, sent unpaced and drained before the measured
    /// ones, not counted (the simulator's `--warmup`).
    pub warmup_requests: u64,
    /// Stamp written blocks and check that reads return them.
    pub verify: bool,
}

impl ReplayOptions {
    /// A replay of all of `trace` to namespace 1 of `nqn` at `addr`, at the
    /// trace's own speed, 32 commands deep, 4 KiB sectors.
    pub fn new(addr: impl Into<String>, nqn: impl Into<String>, trace: impl Into<PathBuf>) -> Self {
        Self {
            addr: addr.into(),
            nqn: nqn.into(),
            hostnqn: DEFAULT_HOSTNQN.into(),
            nsid: 1,
            trace: trace.into(),
            format: None,
            oracle_id_unit: 1,
            volume: None,
            sector_size: 4096,
            speedup: 1.0,
            queue_depth: 32,
            max_requests: None,
            max_duration: None,
            warmup_requests: 0,
            verify: false,
        }
    }

    /// The requests selected, as the simulator selects them.
    pub fn spec(&self) -> TraceSpec {
        TraceSpec {
            path: self.trace.clone(),
            format: self.format,
            oracle_id_unit: self.oracle_id_unit,
            volume: self.volume,
            limit: self.max_requests,
        }
    }

    /// The simulator's first pass over the selection: working set and the
    /// volumes' layout (the namespace must hold `address_space` bytes).
    pub fn profile(&self) -> Result<Profile, RunError> {
        Ok(Profile::scan(&self.spec(), self.sector_size)?)
    }

    fn check(&self) -> Result<(), RunError> {
        if self.queue_depth == 0 || self.queue_depth > 1023 {
            return Err(format!("queue depth {} is not in 1..=1023", self.queue_depth).into());
        }
        if !self.sector_size.is_power_of_two() || !(512..=4096).contains(&self.sector_size) {
            return Err(
                format!("sector size {} is not 512, 1K, 2K or 4K", self.sector_size).into(),
            );
        }
        if !self.speedup.is_finite() || self.speedup < 0.0 {
            return Err(format!("speed-up {} is not a number >= 0", self.speedup).into());
        }
        if self.oracle_id_unit == 0 {
            return Err("oracleGeneral id unit must be at least 1".into());
        }
        if let Some(max) = self.max_requests {
            if self.warmup_requests >= max {
                return Err(format!(
                    "{} warm-up requests leave none of the {max} requests to measure",
                    self.warmup_requests
                )
                .into());
            }
        }
        Ok(())
    }
}

/// What a replay measured (warm-up requests excluded).
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    /// The trace file.
    pub trace: String,
    /// Volumes in the selection.
    pub volumes: usize,
    /// Bytes the volumes span when laid out (the namespace holds at least
    /// this).
    pub address_space: u64,
    /// The selection's working set (4 KiB blocks), bytes.
    pub working_set_bytes: u64,
    /// The namespace's size, bytes.
    pub namespace_bytes: u64,
    /// Its LBA size.
    pub lba_size: u32,
    /// Largest command sent (the target's MDTS), bytes.
    pub max_transfer: u64,
    /// Speed-up over the trace's timing (0: unpaced).
    pub speedup: f64,
    /// Commands in flight at most.
    pub queue_depth: usize,
    /// Warm-up requests completed before the measured ones.
    pub warmup_requests: u64,
    /// Measured requests completed.
    pub requests: u64,
    /// Of which reads.
    pub reads: u64,
    /// Of which writes.
    pub writes: u64,
    /// Bytes of successful reads.
    pub read_bytes: u64,
    /// Bytes of successful writes.
    pub write_bytes: u64,
    /// NVMe commands sent for the measured requests.
    pub commands: u64,
    /// Requests larger than `max_transfer`, sent as several commands.
    pub split_requests: u64,
    /// Requests that failed (some command completed with an error status).
    pub errors: u64,
    /// LBAs whose read data was checked (`verify`).
    pub verified_blocks: u64,
    /// Reads that returned other data than this run wrote.
    pub verify_errors: u64,
    /// What the first of them read.
    pub first_verify_error: Option<String>,
    /// From the first measured request to the last completion, seconds.
    pub elapsed_s: f64,
    /// Requests per second.
    pub iops: f64,
    /// MiB per second, reads and writes.
    pub mib_per_s: f64,
    /// Latency of reads, from the first command sent to the last completed.
    pub read_latency: LatencySummary,
    /// Latency of writes.
    pub write_latency: LatencySummary,
    /// Why the replay ended: `trace` (no more requests), `max-requests`,
    /// `max-seconds`.
    pub stopped_by: &'static str,
}

/// Why the loop over the trace ended early.
enum Flow {
    Stop,
    Fail(RunError),
}

impl From<SimError> for Flow {
    fn from(e: SimError) -> Self {
        Flow::Fail(e.into())
    }
}

impl From<HostError> for Flow {
    fn from(e: HostError) -> Self {
        Flow::Fail(e.into())
    }
}

/// Replays `opts` to completion.
pub fn run(opts: &ReplayOptions) -> Result<ReplayReport, RunError> {
    run_with(opts, || Ok(()))
}

/// [`run`], calling `after_warmup` once every warm-up request has completed
/// and before the first measured one is sent (with no warm-up: before the
/// first request), e.g. to reset a cache's counters.
pub fn run_with(
    opts: &ReplayOptions,
    mut after_warmup: impl FnMut() -> Result<(), String>,
) -> Result<ReplayReport, RunError> {
    opts.check()?;
    let spec = opts.spec();
    let profile = opts.profile()?;
    let params = ConnectParams {
        addr: opts.addr.clone(),
        subnqn: opts.nqn.clone(),
        hostnqn: opts.hostnqn.clone(),
        host_id: *b"rackcache-loadgn",
        queue_size: 32,
        kato_ms: 0,
    };
    let mut admin = HostQueue::connect(&params, 0, 0)?;
    admin.enable()?;
    admin.set_queue_count(1)?;
    let info = identify(&mut admin, opts.nsid)?;
    let lba = u64::from(info.lba_size);
    if !opts.sector_size.is_multiple_of(lba) {
        return Err(format!(
            "namespace {} has {lba}-byte LBAs, larger than the {}-byte sectors requests are widened to (raise --sector-size)",
            opts.nsid, opts.sector_size
        )
        .into());
    }
    let namespace_bytes = info.ns_lbas.saturating_mul(lba);
    if namespace_bytes < profile.address_space {
        return Err(format!(
            "namespace {} holds {namespace_bytes} bytes; {} laid out as the simulator does ({} volume(s), {}) needs {} bytes",
            opts.nsid,
            opts.trace.display(),
            profile.volumes(),
            profile.layout,
            profile.address_space
        )
        .into());
    }
    let queue_size = opts.queue_depth as u32 + 1;
    if queue_size > info.max_queue_entries {
        return Err(format!(
            "queue depth {} needs {queue_size} queue entries, the target allows {}",
            opts.queue_depth, info.max_queue_entries
        )
        .into());
    }
    let max_transfer = info
        .max_transfer
        .unwrap_or(UNLIMITED_TRANSFER)
        .min(u64::from(u32::MAX))
        / lba
        * lba;
    if max_transfer == 0 {
        return Err(format!("the target's MDTS is smaller than an LBA ({lba} bytes)").into());
    }
    let io = HostQueue::connect(
        &ConnectParams {
            queue_size: queue_size as u16,
            ..params
        },
        1,
        admin.cntlid,
    )?;
    let mut s = Session::new(
        io,
        Limits {
            nsid: opts.nsid,
            lba_size: info.lba_size,
            max_transfer,
            in_capsule_max: info.in_capsule_max,
            queue_depth: opts.queue_depth,
        },
        opts.verify,
    );

    let mut pacer = Pacer::new(opts.speedup);
    let mut started: Option<Instant> = None;
    let mut issued = 0u64;
    let mut out_of_time = false;
    let r = spec.for_each(|index, r| -> Result<(), Flow> {
        let measured = index >= opts.warmup_requests;
        if measured && started.is_none() {
            s.drain()?;
            after_warmup().map_err(|e| Flow::Fail(format!("after the warm-up: {e}").into()))?;
            started = Some(Instant::now());
        }
        if let Some(t0) = started {
            let end = opts.max_duration.map(|d| t0 + d);
            if pacer.paced() {
                let due = t0 + pacer.due(r.timestamp_ns);
                s.wait_until(end.map_or(due, |e| e.min(due)))?;
            }
            if end.is_some_and(|e| Instant::now() >= e) {
                out_of_time = true;
                return Err(Flow::Stop);
            }
        }
        let (offset, len) = profile.place(r);
        s.submit(r.op == traces::Op::Write, offset, len, measured)?;
        issued += 1;
        Ok(())
    });
    match r {
        Ok(()) | Err(Flow::Stop) => {}
        Err(Flow::Fail(e)) => return Err(e),
    }
    s.drain()?;
    let elapsed = started.map_or(Duration::ZERO, |t| t.elapsed());
    let c = &mut s.counters;
    let requests = c.reads + c.writes;
    let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    Ok(ReplayReport {
        trace: opts.trace.display().to_string(),
        volumes: profile.volumes(),
        address_space: profile.address_space,
        working_set_bytes: profile.working_set_bytes,
        namespace_bytes,
        lba_size: info.lba_size,
        max_transfer,
        speedup: opts.speedup,
        queue_depth: opts.queue_depth,
        warmup_requests: issued.min(opts.warmup_requests),
        requests,
        reads: c.reads,
        writes: c.writes,
        read_bytes: c.read_bytes,
        write_bytes: c.write_bytes,
        commands: c.commands,
        split_requests: c.split_requests,
        errors: c.errors,
        verified_blocks: c.verified_blocks,
        verify_errors: c.verify_errors,
        first_verify_error: c.first_verify_error.take(),
        elapsed_s: elapsed.as_secs_f64(),
        iops: requests as f64 / secs,
        mib_per_s: (c.read_bytes + c.write_bytes) as f64 / secs / f64::from(1 << 20),
        read_latency: summarize(&mut c.read_latency_ns),
        write_latency: summarize(&mut c.write_latency_ns),
        stopped_by: if out_of_time {
            "max-seconds"
        } else if opts.max_requests == Some(issued) {
            "max-requests"
        } else {
            "trace"
        },
    })
}

/// A cache to predict for: its size and the simulator's configuration.
#[derive(Clone, Debug)]
pub struct CacheModel {
    /// Bytes, or a share of the selection's working set.
    pub cache_size: CacheSize,
    /// Block sizes, policies, write mode (`volume_size` and `capacity` are
    /// set from the trace).
    pub config: SimConfig,
}

impl CacheModel {
    /// The caches the simulator's options name (one, or the `--compare`
    /// set).
    pub fn from_args(args: &CacheArgs) -> Result<Vec<CacheModel>, String> {
        // One run is predicted for one cache (the simulator takes a list).
        let cache_size = args.cache_size.single()?;
        Ok(args
            .configurations()?
            .into_iter()
            .map(|config| CacheModel { cache_size, config })
            .collect())
    }
}

/// What the engine makes of the replayed requests.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    /// Requests replayed, warm-up included.
    pub requests: u64,
    /// Of which warm-up (replayed, not counted in `report`).
    pub warmup_requests: u64,
    /// The simulator's figures: hit ratios, the four I/O volumes, ...
    pub report: Report,
}

/// Replays the requests `opts` selects (same layout, bounds and order as
/// [`run`]) through the engine configured as `cache`.
pub fn predict(opts: &ReplayOptions, cache: &CacheModel) -> Result<Prediction, RunError> {
    predict_requests(opts, cache, None)
}

/// [`predict`] for the requests `run` actually sent (fewer than `opts`
/// selects when it stopped on `max_duration`).
pub fn predict_run(
    opts: &ReplayOptions,
    cache: &CacheModel,
    run: &ReplayReport,
) -> Result<Prediction, RunError> {
    predict_requests(opts, cache, Some(run.warmup_requests + run.requests))
}

fn predict_requests(
    opts: &ReplayOptions,
    cache: &CacheModel,
    requests: Option<u64>,
) -> Result<Prediction, RunError> {
    opts.check()?;
    // The layout is the whole selection's, as in the run, even when only
    // its first requests are replayed.
    let profile = opts.profile()?;
    let mut spec = opts.spec();
    if let Some(n) = requests {
        spec.limit = Some(spec.limit.map_or(n, |l| l.min(n)));
    }
    let cache_bytes = cache.cache_size.resolve(profile.working_set_bytes);
    let report = replay_from(
        &spec,
        &profile,
        &cache.config,
        cache_bytes,
        opts.warmup_requests,
        |_| {},
    )?;
    let replayed = spec.limit.unwrap_or(profile.requests).min(profile.requests);
    Ok(Prediction {
        requests: replayed,
        warmup_requests: opts.warmup_requests.min(replayed),
        report,
    })
}
