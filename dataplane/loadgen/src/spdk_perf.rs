//! What SPDK's own initiator, `spdk_nvme_perf`, prints, read into a
//! [`Report`]: the benchmark can measure every target with the initiator
//! SPDK's own figures come from (`RACKCACHE_BENCH_SPDK_PERF`).

use crate::run::Report;
use crate::workload::{LatencySummary, Pattern};

/// What perf was asked to run: its output does not repeat it.
#[derive(Clone, Copy, Debug)]
pub struct RunShape {
    /// Access pattern (`-w`).
    pub pattern: Pattern,
    /// Bytes per I/O (`-o`).
    pub block_size: usize,
    /// Commands in flight (`-q`).
    pub queue_depth: usize,
    /// Seconds run (`-t`).
    pub seconds: f64,
}

/// Reads perf's "Total" line (IOPS, MiB/s, average, min and max latency in
/// µs) and the percentiles of its latency summary (`-L`).
pub fn parse_report(text: &str, w: &RunShape) -> Result<Report, String> {
    let seconds = w.seconds;
    let total: Vec<f64> = text
        .lines()
        .find_map(|l| {
            let (name, figures) = l.split_once(':')?;
            (name.trim() == "Total").then(|| {
                figures
                    .split_whitespace()
                    .filter_map(|f| f.parse().ok())
                    .collect()
            })
        })
        .ok_or("no Total line in spdk_nvme_perf's output")?;
    let [iops, mib_per_s, avg_us, _min_us, max_us] = total[..] else {
        return Err(format!("a Total line of {} figures, not 5", total.len()));
    };
    let percentile = |pct: &str| -> Result<f64, String> {
        text.lines()
            .find_map(|l| {
                let (p, v) = l.split_once(':')?;
                (p.trim() == pct).then(|| v.trim().trim_end_matches("us").trim().parse().ok())?
            })
            .ok_or_else(|| format!("no {pct} line (perf's -L summary)"))
    };
    Ok(Report {
        pattern: w.pattern,
        block_size: w.block_size,
        queues: 1,
        queue_depth: w.queue_depth,
        seconds,
        ops: (iops * seconds) as u64,
        iops,
        mib_per_s,
        latency: LatencySummary {
            avg_us,
            p50_us: percentile("50.00000%")?,
            p99_us: percentile("99.00000%")?,
            p999_us: percentile("99.90000%")?,
            max_us,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEQWRITE_128K: RunShape = RunShape {
        pattern: Pattern::Write,
        block_size: 128 << 10,
        queue_depth: 32,
        seconds: 3.0,
    };

    #[test]
    fn reads_totals_and_percentiles() {
        let out = "\
========================================================
                                                                 Latency(us)
Device Information                     :       IOPS      MiB/s    Average        min        max
TCP (addr:127.0.0.1 subnqn:nqn.x) NSID 1 from core  1:   25000.00    3125.00    1279.00     300.00    5000.00
========================================================
Total                                  :   25000.00    3125.00    1279.00     300.00    5000.00

Summary latency data for TCP (addr:127.0.0.1 subnqn:nqn.x) NSID 1 from core 1:
=================================================================================
  1.00000% :   800.000us
 50.00000% :  1200.500us
 99.00000% :  2100.000us
 99.90000% :  3500.250us
";
        let r = parse_report(out, &SEQWRITE_128K).unwrap();
        assert_eq!(r.iops, 25000.0);
        assert_eq!(r.mib_per_s, 3125.0);
        assert_eq!(r.latency.avg_us, 1279.0);
        assert_eq!(r.latency.max_us, 5000.0);
        assert_eq!(r.latency.p50_us, 1200.5);
        assert_eq!(r.latency.p999_us, 3500.25);
        assert_eq!(r.ops, 75000);
    }

    #[test]
    fn output_without_totals_is_an_error() {
        let e = parse_report("Initializing NVMe Controllers\n", &SEQWRITE_128K).unwrap_err();
        assert!(e.contains("no Total line"), "{e}");
    }
}
