//! SPDK's own initiator, `spdk_nvme_perf`, in place of loadgen for the
//! malloc rows, when `RACKCACHE_BENCH_SPDK_PERF` names it (the binary, or
//! an SPDK tree holding `build/bin/spdk_nvme_perf`). SPDK's perf is how
//! SPDK measures its own target, so with it every target is judged by the
//! same initiator SPDK's figures come from. perf polls its socket on its
//! own core, as loadgen's busy-poll does; `RACKCACHE_BENCH_SPDK_PERF_ARGS`
//! adds arguments (e.g. `--no-huge -s 512` without huge pages).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use loadgen::run::Report;
use loadgen::spdk_perf::{parse_report, RunShape};
use loadgen::workload::Pattern;

use crate::{Workload, LOADGEN_CPU};

/// `$RACKCACHE_BENCH_SPDK_PERF` resolved once, if set.
pub(crate) fn perf_binary() -> Result<Option<&'static PathBuf>, String> {
    static BIN: OnceLock<Result<Option<PathBuf>, String>> = OnceLock::new();
    BIN.get_or_init(|| crate::daemon::spdk_program("RACKCACHE_BENCH_SPDK_PERF", "spdk_nvme_perf"))
        .as_ref()
        .map(Option::as_ref)
        .map_err(Clone::clone)
}

/// Runs `w` with SPDK's perf on [`LOADGEN_CPU`] against `addr`
/// (`127.0.0.1:PORT`), software latency tracking on (`-L`).
pub(crate) fn measure(
    perf: &PathBuf,
    addr: &str,
    nqn: &str,
    w: Workload,
    duration: Duration,
) -> Result<Report, String> {
    let (ip, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("{addr}: not HOST:PORT"))?;
    let mode = match w.pattern {
        Pattern::RandRead => "randread",
        Pattern::RandWrite => "randwrite",
        Pattern::Read => "read",
        Pattern::Write => "write",
    };
    let secs = duration.as_secs().max(1);
    let mut cmd = Command::new(perf);
    cmd.args(["-q", &w.queue_depth.to_string()])
        .args(["-o", &w.block_size.to_string()])
        .args(["-w", mode, "-t", &secs.to_string(), "-L"])
        .args(["-c", &format!("{:#x}", 1u64 << LOADGEN_CPU)])
        .arg("-r")
        .arg(format!(
            "trtype:TCP adrfam:IPv4 traddr:{ip} trsvcid:{port} subnqn:{nqn}"
        ));
    if let Ok(extra) = std::env::var("RACKCACHE_BENCH_SPDK_PERF_ARGS") {
        cmd.args(extra.split_whitespace());
    }
    let out = cmd
        .output()
        .map_err(|e| format!("{}: start {}: {e}", w.name, perf.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{}: spdk_nvme_perf failed ({}):\n{text}\n{}",
            w.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let workload = RunShape {
        pattern: w.pattern,
        block_size: w.block_size,
        queue_depth: w.queue_depth,
        seconds: secs as f64,
    };
    parse_report(&text, &workload).map_err(|e| format!("{}: {e}:\n{text}", w.name))
}
