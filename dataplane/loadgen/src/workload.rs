//! The load loop: one queue kept `queue_depth` commands deep for a fixed
//! time, with every command's latency recorded.

use std::time::{Duration, Instant};

use nvmf::sqe::{opcode, sgl, SglDescriptor, Sqe};
use serde::Serialize;

use nvmf_host::host::{Event, HostError, HostQueue, Result};

/// Access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Uniformly random reads.
    RandRead,
    /// Uniformly random writes.
    RandWrite,
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
}

impl Pattern {
    fn is_write(self) -> bool {
        matches!(self, Self::RandWrite | Self::Write)
    }
    fn is_random(self) -> bool {
        matches!(self, Self::RandRead | Self::RandWrite)
    }
}

/// What one queue runs.
#[derive(Clone, Debug)]
pub struct Job {
    /// Access pattern.
    pub pattern: Pattern,
    /// Bytes per command (a multiple of the LBA size).
    pub block_size: usize,
    /// Commands kept in flight.
    pub queue_depth: usize,
    /// How long to keep submitting.
    pub duration: Duration,
    /// Namespace id.
    pub nsid: u32,
    /// LBA size of the namespace.
    pub lba_size: u32,
    /// Namespace size in LBAs.
    pub ns_lbas: u64,
    /// Seed for random offsets (each queue its own).
    pub seed: u64,
    /// Largest write sent in the capsule; larger writes wait for R2T.
    pub in_capsule_max: usize,
}

/// What one queue measured.
#[derive(Debug, Default)]
pub struct QueueResult {
    /// Commands completed.
    pub ops: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Latency of every command, nanoseconds.
    pub latencies_ns: Vec<u32>,
    /// Wall time from first submission to last completion.
    pub elapsed: Duration,
}

struct Slot {
    started: Instant,
}

/// Runs `job` on `q`.
pub fn run_queue(q: &mut HostQueue, job: &Job) -> Result<QueueResult> {
    let lbas_per_io = (job.block_size / job.lba_size as usize) as u64;
    if lbas_per_io == 0 || job.ns_lbas < lbas_per_io {
        return Err(HostError::Protocol(
            "block size larger than the namespace or smaller than an LBA".into(),
        ));
    }
    let slots_in_ns = job.ns_lbas / lbas_per_io;
    let write_data: Vec<u8> = (0..job.block_size)
        .map(|i| (i as u8).wrapping_mul(13))
        .collect();
    let mut rng = job.seed | 1;
    let mut next_seq = 0u64;
    let mut next_lba = || {
        let slot = if job.pattern.is_random() {
            // xorshift64*: cheap and good enough to spread offsets.
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % slots_in_ns
        } else {
            let s = next_seq % slots_in_ns;
            next_seq += 1;
            s
        };
        slot * lbas_per_io
    };
    let in_capsule = job.pattern.is_write() && job.block_size <= job.in_capsule_max;
    let build = |cid: u16, lba: u64| {
        let (opc, kind) = if job.pattern.is_write() {
            (
                opcode::WRITE,
                if in_capsule {
                    sgl::IN_CAPSULE
                } else {
                    sgl::TRANSPORT
                },
            )
        } else {
            (opcode::READ, sgl::TRANSPORT)
        };
        Sqe::build(
            opc,
            cid,
            job.nsid,
            SglDescriptor {
                address: 0,
                length: job.block_size as u32,
                kind,
            },
            [
                lba as u32,
                (lba >> 32) as u32,
                (lbas_per_io - 1) as u32,
                0,
                0,
                0,
            ],
        )
    };

    let mut result = QueueResult {
        latencies_ns: Vec::with_capacity(1 << 20),
        ..QueueResult::default()
    };
    // Command ids are slot numbers: a slot is reused when its command completes.
    let mut slots: Vec<Slot> = Vec::with_capacity(job.queue_depth);
    let start = Instant::now();
    let deadline = start + job.duration;
    for cid in 0..job.queue_depth as u16 {
        slots.push(Slot {
            started: Instant::now(),
        });
        q.queue_command(
            &build(cid, next_lba()),
            in_capsule.then_some(&write_data[..]),
        );
    }
    q.flush()?;
    let mut outstanding = job.queue_depth;
    while outstanding > 0 {
        let completed = match q.recv()? {
            Event::Completion(c) => {
                if !c.status.is_success() {
                    return Err(HostError::Status {
                        what: "I/O",
                        cqe: c,
                    });
                }
                Some(c.cid)
            }
            // Read data lands in the receive buffer; the benchmark does not
            // look at it (the tests verify data). With the SUCCESS flag no
            // response capsule follows: the data completes the command.
            Event::Data { cccid, success, .. } => success.then_some(cccid),
            Event::R2t(r) => {
                let (off, len) = (r.r2to as usize, r.r2tl as usize);
                let chunk = q.maxh2cdata.max(4096) as usize;
                let mut done = 0;
                while done < len {
                    let n = chunk.min(len - done);
                    q.queue_h2c(
                        r.cccid,
                        r.ttag,
                        (off + done) as u32,
                        &write_data[off + done..off + done + n],
                        done + n == len,
                    );
                    done += n;
                }
                None
            }
        };
        if let Some(cid) = completed {
            let slot = slots
                .get_mut(cid as usize)
                .ok_or_else(|| HostError::Protocol(format!("completion for unknown cid {cid}")))?;
            let now = Instant::now();
            result.latencies_ns.push(
                now.duration_since(slot.started)
                    .as_nanos()
                    .min(u32::MAX as u128) as u32,
            );
            result.ops += 1;
            result.bytes += job.block_size as u64;
            if now < deadline {
                slot.started = now;
                q.queue_command(
                    &build(cid, next_lba()),
                    in_capsule.then_some(&write_data[..]),
                );
            } else {
                outstanding -= 1;
            }
        }
        if !q.pdu_buffered() {
            q.flush()?;
        }
    }
    result.elapsed = start.elapsed();
    Ok(result)
}

/// Latency summary in microseconds.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LatencySummary {
    /// Mean.
    pub avg_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
}

/// Summarises latencies (sorts them in place).
pub fn summarize(lat: &mut [u32]) -> LatencySummary {
    if lat.is_empty() {
        return LatencySummary {
            avg_us: 0.0,
            p50_us: 0.0,
            p99_us: 0.0,
            p999_us: 0.0,
            max_us: 0.0,
        };
    }
    lat.sort_unstable();
    let pct = |p: f64| {
        let idx = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        f64::from(lat[idx]) / 1000.0
    };
    let sum: u64 = lat.iter().map(|&x| u64::from(x)).sum();
    LatencySummary {
        avg_us: sum as f64 / lat.len() as f64 / 1000.0,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        p999_us: pct(0.999),
        max_us: f64::from(*lat.last().expect("non-empty")) / 1000.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let mut v: Vec<u32> = (1..=1000).map(|i| i * 1000).collect();
        v.reverse();
        let s = summarize(&mut v);
        assert_eq!(
            (s.p50_us, s.p99_us, s.p999_us, s.max_us),
            (500.0, 990.0, 999.0, 1000.0)
        );
        assert!((s.avg_us - 500.5).abs() < 1e-9);
        assert_eq!(summarize(&mut []).max_us, 0.0);
    }
}
