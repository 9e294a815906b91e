//! One load run against a target: connect a controller, look up the
//! namespace, run `queues` queues of [`run_queue`] in parallel threads and
//! merge their results. Used by `rackcache-loadgen` and the NVMe/TCP bench.

use std::time::Duration;

use nvmf::sqe::opcode;
use serde::Serialize;

use crate::workload::{run_queue, summarize, Job, LatencySummary, Pattern};
use nvmf_host::auth::DhchapKeys;
use nvmf_host::host::{ConnectParams, HostQueue};

/// The host NQN `rackcache-loadgen` connects as unless told otherwise.
pub const DEFAULT_HOSTNQN: &str =
    "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-72616b6c6f61";

/// What to run.
#[derive(Clone, Debug)]
pub struct RunParams {
    /// Target address (host:port).
    pub addr: String,
    /// Subsystem NQN.
    pub nqn: String,
    /// Host NQN to connect as.
    pub hostnqn: String,
    /// Namespace id.
    pub nsid: u32,
    /// Access pattern.
    pub pattern: Pattern,
    /// Bytes per I/O.
    pub block_size: usize,
    /// I/O queues (one thread each).
    pub queues: u16,
    /// Commands in flight per queue.
    pub queue_depth: usize,
    /// How long to keep submitting.
    pub duration: Duration,
    /// Busy-poll the I/O queues' sockets (see [`HostQueue::set_busy_poll`]).
    pub busy_poll: bool,
    /// DH-HMAC-CHAP keys, for a target that asks the host to authenticate.
    pub dhchap: Option<DhchapKeys>,
}

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Access pattern.
    pub pattern: Pattern,
    /// Bytes per I/O.
    pub block_size: usize,
    /// I/O queues.
    pub queues: u16,
    /// Commands in flight per queue.
    pub queue_depth: usize,
    /// Wall time of the longest queue.
    pub seconds: f64,
    /// Commands completed.
    pub ops: u64,
    /// Commands per second.
    pub iops: f64,
    /// MiB per second.
    pub mib_per_s: f64,
    /// Per-command latency.
    pub latency: LatencySummary,
}

/// Errors of a run (Send, so runs can happen on pinned threads).
pub type RunError = Box<dyn std::error::Error + Send + Sync>;

/// What a host learns from Identify and CAP before sending I/O.
#[derive(Clone, Copy, Debug)]
pub struct TargetInfo {
    /// Largest write sent in the capsule (IOCCSZ less the SQE).
    pub in_capsule_max: usize,
    /// Largest transfer of one command in bytes (MDTS), `None` when the
    /// target sets no limit.
    pub max_transfer: Option<u64>,
    /// Largest I/O queue the target accepts, entries (CAP.MQES + 1).
    pub max_queue_entries: u32,
    /// Namespace size in LBAs.
    pub ns_lbas: u64,
    /// LBA size of the namespace.
    pub lba_size: u32,
}

/// Reads CAP, Identify Controller and Identify Namespace `nsid` on an
/// enabled admin queue.
pub fn identify(admin: &mut HostQueue, nsid: u32) -> Result<TargetInfo, RunError> {
    let cap = admin.property_get(nvmf_host::wire::prop::CAP, true)?;
    let ctrl = admin.admin_read(
        opcode::IDENTIFY,
        0,
        [1, 0, 0, 0, 0, 0],
        4096,
        "Identify Controller",
    )?;
    let ioccsz = u32::from_le_bytes(ctrl[1792..1796].try_into()?) as usize;
    let mdts = ctrl[77];
    // MDTS counts pages of CAP.MPSMIN.
    let page = 4096u64 << ((cap >> 48) & 0xf);
    let ns = admin.admin_read(
        opcode::IDENTIFY,
        nsid,
        [0, 0, 0, 0, 0, 0],
        4096,
        "Identify Namespace",
    )?;
    let ns_lbas = u64::from_le_bytes(ns[0..8].try_into()?);
    let lbaf = (ns[26] & 0x0f) as usize;
    let lba_size = 1u32 << ns[128 + lbaf * 4 + 2];
    if ns_lbas == 0 {
        return Err(format!("namespace {nsid} is not active").into());
    }
    Ok(TargetInfo {
        in_capsule_max: (ioccsz * 16).saturating_sub(64),
        max_transfer: (mdts != 0).then(|| page << mdts),
        max_queue_entries: (cap & 0xffff) as u32 + 1,
        ns_lbas,
        lba_size,
    })
}

/// Runs `p` to completion.
pub fn run(p: &RunParams) -> Result<Report, RunError> {
    if p.queues == 0 || p.queue_depth == 0 || p.block_size == 0 {
        return Err("queues, queue depth and block size must be positive".into());
    }
    let params = ConnectParams {
        addr: p.addr.clone(),
        subnqn: p.nqn.clone(),
        hostnqn: p.hostnqn.clone(),
        host_id: *b"rackcache-loadgn",
        queue_size: 32,
        kato_ms: 0,
    };
    let mut admin = HostQueue::connect_with_keys(&params, 0, 0, p.dhchap.as_ref())?;
    admin.enable()?;
    let granted = admin.set_queue_count(p.queues)?;
    if granted < p.queues {
        return Err(format!(
            "the target granted {granted} I/O queues, {} asked",
            p.queues
        )
        .into());
    }
    let TargetInfo {
        in_capsule_max,
        ns_lbas,
        lba_size,
        ..
    } = identify(&mut admin, p.nsid)?;
    if !p.block_size.is_multiple_of(lba_size as usize) {
        return Err(format!(
            "block size {} is not a multiple of the {lba_size}-byte LBA",
            p.block_size
        )
        .into());
    }
    let queue_size = (p.queue_depth + 1).min(1024) as u16;
    let job = Job {
        pattern: p.pattern,
        block_size: p.block_size,
        queue_depth: p.queue_depth,
        duration: p.duration,
        nsid: p.nsid,
        lba_size,
        ns_lbas,
        seed: 0,
        in_capsule_max,
    };
    let cntlid = admin.cntlid;
    let busy_poll = p.busy_poll;
    let keys = p.dhchap.clone();
    let workers: Vec<_> = (1..=p.queues)
        .map(|qid| {
            let cp = ConnectParams {
                queue_size,
                ..params.clone()
            };
            let job = Job {
                seed: 0x9e37_79b9_7f4a_7c15 ^ u64::from(qid),
                ..job.clone()
            };
            let keys = keys.clone();
            std::thread::spawn(move || -> Result<_, String> {
                let mut q = HostQueue::connect_with_keys(&cp, qid, cntlid, keys.as_ref())
                    .map_err(|e| e.to_string())?;
                q.set_busy_poll(busy_poll).map_err(|e| e.to_string())?;
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
        pattern: p.pattern,
        block_size: p.block_size,
        queues: p.queues,
        queue_depth: p.queue_depth,
        seconds: secs,
        ops,
        iops: ops as f64 / secs,
        mib_per_s: bytes as f64 / secs / f64::from(1 << 20),
        latency: summarize(&mut lat),
    })
}
