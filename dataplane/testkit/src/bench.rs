//! What the benches share: their knobs from the environment, and `rbd
//! bench`, the baseline every rbd row is judged by.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::Ceph;

/// `RACKCACHE_BENCH_SECONDS`: seconds per timed workload (default 3).
pub fn bench_seconds() -> Duration {
    seconds_from_env("RACKCACHE_BENCH_SECONDS", 3.0)
}

/// `RACKCACHE_BENCH_RBD_SECONDS`: seconds per timed workload on Ceph
/// (default 8). A one-node OSD's pace drifts by second (its own background
/// work lands in one turn or the other): with 3 s turns the same build's
/// rows against `rbd bench` moved by ±10% from run to run, with 8 s turns
/// by a few percent (docs/dataplane.md#benchmark).
pub fn rbd_bench_seconds() -> Duration {
    seconds_from_env("RACKCACHE_BENCH_RBD_SECONDS", 8.0)
}

fn seconds_from_env(name: &str, default: f64) -> Duration {
    let s = std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(default);
    Duration::from_secs_f64(s)
}

/// The element of median `key` (the upper one of an even count).
pub fn median_by<T>(mut runs: Vec<T>, key: impl Fn(&T) -> f64) -> Option<T> {
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let mid = runs.len() / 2;
    runs.into_iter().nth(mid)
}

/// The CPUs Ceph's daemons run on in the rbd benches, kept apart from
/// the clients' (targets, hosts, `rbd bench`), as a deployment runs Ceph
/// on machines of its own: `RACKCACHE_BENCH_CEPH_CPUS`, a taskset list
/// (`1`, `1,3`, `2-3`), by default the last CPU when there are two or
/// more; `shared`: none of their own (Ceph and the clients share every
/// CPU, as on a one-box test cluster). Panics on a list that names no CPU
/// of this machine or leaves the clients none: a bench must not measure
/// something other than what it was asked to.
pub fn ceph_cpus() -> Option<String> {
    let all = online_cpus();
    let list = match std::env::var("RACKCACHE_BENCH_CEPH_CPUS") {
        Ok(v) if v == "shared" => return None,
        Ok(v) if !v.is_empty() => v,
        _ if all.len() >= 2 => return Some(all[all.len() - 1].to_string()),
        _ => return None,
    };
    let ceph =
        parse_cpu_list(&list).unwrap_or_else(|e| panic!("RACKCACHE_BENCH_CEPH_CPUS={list}: {e}"));
    assert!(
        ceph.iter().all(|c| all.contains(c)) && all.iter().any(|c| !ceph.contains(c)),
        "RACKCACHE_BENCH_CEPH_CPUS={list}: must name some but not all of this machine's CPUs {all:?}"
    );
    Some(list)
}

/// The CPUs left to the clients (targets, hosts, `rbd bench`) when
/// [`ceph_cpus`] keeps Ceph apart; None when they share every CPU.
pub fn client_cpus() -> Option<Vec<usize>> {
    let ceph = parse_cpu_list(&ceph_cpus()?).expect("checked by ceph_cpus");
    Some(
        online_cpus()
            .into_iter()
            .filter(|c| !ceph.contains(c))
            .collect(),
    )
}

/// The machine's CPUs, whatever this thread's own mask (which
/// `available_parallelism` would count).
fn online_cpus() -> Vec<usize> {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    (0..n.max(1) as usize).collect()
}

/// Parses a taskset-style CPU list: numbers and ranges, comma-separated.
fn parse_cpu_list(list: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("'{s}' is not a CPU number"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("empty range {part}"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    Ok(cpus)
}

/// `RACKCACHE_BENCH_ROUNDS`: rounds of turns (default 3).
pub fn bench_rounds() -> usize {
    std::env::var("RACKCACHE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(3)
}

/// One `rbd bench` workload.
#[derive(Clone, Copy, Debug)]
pub struct RbdBenchIo {
    /// `read` or `write`.
    pub io_type: &'static str,
    /// Random offsets, or one sequential stream that every I/O in flight
    /// takes the next offset of (`--io-pattern full-seq`, as fio and
    /// loadgen run a sequential job: `seq` would give each of `rbd bench`'s
    /// threads a stretch of the image of its own, so that its I/Os in
    /// flight fall on as many RADOS objects, where one stream's fall on
    /// one or two).
    pub random: bool,
    pub io_size: usize,
    /// `--io-threads`: operations in flight.
    pub queue_depth: usize,
}

/// What one `rbd bench` run measured.
#[derive(Clone, Copy, Debug)]
pub struct RbdBenchRun {
    /// Its own summary's operations per second, over its whole run.
    pub iops: f64,
    /// Operations per second from its first per-second line to its last
    /// one before `duration` ran out: the steady state, without
    /// connecting, opening the image, the first second's ramp and the
    /// drain at the end. NaN when it printed fewer than two such lines.
    pub steady_iops: f64,
    /// CPU time of the whole `rbd bench` process (librbd and its messenger
    /// included) per operation, in µs, between the same two lines. NaN
    /// when unknown.
    pub cpu_us_per_op: f64,
}

/// The CPU time `pid` has used so far (user and system, all threads).
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces): state is
    // field 3, utime and stime fields 14 and 15, in clock ticks.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

/// A line of `rbd bench`'s output, parsed.
enum BenchLine {
    /// `  SEC  OPS  OPS/SEC  BYTES/SEC`: operations done so far.
    Second(u64),
    /// `elapsed: 2  ops: 29339  ops/sec: 10020.1  bytes/sec: 39 MiB/s`.
    Summary { iops: f64 },
}

fn parse_line(l: &str) -> Option<BenchLine> {
    if let Some(rest) = l.split_once("ops:").map(|(_, r)| r) {
        rest.split_whitespace().next()?.parse::<u64>().ok()?;
        let iops = l.split_once("ops/sec:")?.1.split_whitespace().next()?;
        return Some(BenchLine::Summary {
            iops: iops.parse().ok()?,
        });
    }
    let mut f = l.split_whitespace();
    f.next()?.parse::<u64>().ok()?;
    Some(BenchLine::Second(f.next()?.parse().ok()?))
}

impl Ceph {
    /// `rbd bench` as client.admin on `image` (pool/name) for about
    /// `duration`, with librbd's cache off as the rbd bdev runs it
    /// (docs/dataplane.md, "Durability"): both then read and write the OSDs.
    /// Stopped by SIGINT, when it prints its summary; killed by PID if it
    /// does not stop.
    pub fn rbd_bench(
        &self,
        image: &str,
        io: RbdBenchIo,
        duration: Duration,
    ) -> Result<RbdBenchRun, String> {
        let mut child = Command::new("rbd")
            .arg("--conf")
            .arg(self.var("CEPH_CONF"))
            .args(["--rbd-cache=false", "bench", "--io-type", io.io_type])
            .arg("--io-size")
            .arg(io.io_size.to_string())
            .arg("--io-threads")
            .arg(io.queue_depth.to_string())
            .args(["--io-pattern", if io.random { "rand" } else { "full-seq" }])
            .args(["--io-total", "1T", image])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("run rbd bench: {e}"))?;
        let pid = child.id();
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(p) = parse_line(&l) {
                    let _ = tx.send(p);
                }
            }
        });
        let end = Instant::now() + duration;
        // Per-second lines until `duration` runs out, each with the CPU time
        // and the instant it arrived: from the first one on it is doing I/O.
        let mut seconds = Vec::new();
        // A summary before then: it stopped by itself (an error).
        let mut summary = None;
        while let Ok(line) = rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            match line {
                BenchLine::Second(ops) => seconds.push((ops, process_cpu(pid), Instant::now())),
                BenchLine::Summary { iops } => summary = Some(iops),
            }
        }
        // SAFETY: signalling our own child by PID.
        unsafe { libc::kill(pid as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = reader.join();
        let iops = summary
            .or_else(|| {
                rx.try_iter().find_map(|l| match l {
                    BenchLine::Summary { iops } => Some(iops),
                    BenchLine::Second(_) => None,
                })
            })
            .ok_or_else(|| format!("rbd bench {io:?}: no summary"))?;
        let (steady_iops, cpu_us_per_op) = match (seconds.first(), seconds.last()) {
            (Some(&(ops0, cpu0, t0)), Some(&(ops1, cpu1, t1))) if ops1 > ops0 => {
                let ops = (ops1 - ops0) as f64;
                let cpu = match (cpu0, cpu1) {
                    (Some(c0), Some(c1)) => c1.saturating_sub(c0).as_secs_f64() * 1e6 / ops,
                    _ => f64::NAN,
                };
                (ops / (t1 - t0).as_secs_f64(), cpu)
            }
            _ => (f64::NAN, f64::NAN),
        };
        Ok(RbdBenchRun {
            iops,
            steady_iops,
            cpu_us_per_op,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("1"), Ok(vec![1]));
        assert_eq!(parse_cpu_list("0,2-4"), Ok(vec![0, 2, 3, 4]));
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("one").is_err());
        assert!(parse_cpu_list("").is_err());
    }

    #[test]
    fn rbd_bench_lines_parse() {
        assert!(matches!(
            parse_line("    2    478912    239952   937 MiB/s"),
            Some(BenchLine::Second(478912))
        ));
        match parse_line("elapsed: 3   ops: 895369   ops/sec: 228878   bytes/sec: 894 MiB/s") {
            Some(BenchLine::Summary { iops }) => assert_eq!(iops, 228878.0),
            _ => panic!("summary not parsed"),
        }
        assert!(parse_line("  SEC       OPS   OPS/SEC   BYTES/SEC").is_none());
        assert!(parse_line("bench  type read io_size 4096 io_threads 32").is_none());
    }

    #[test]
    fn own_cpu_time_is_read() {
        // The kernel's precise clock of this process's CPU time.
        let precise = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid out-pointer.
            unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
            Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        };
        let (t0, p0) = (
            process_cpu(std::process::id()).expect("our /proc stat"),
            precise(),
        );
        // Spin until 200 ms of CPU time were used (however busy the
        // machine is), then /proc must have counted most of them.
        let start = Instant::now();
        let mut x = 0u64;
        while precise() - p0 < Duration::from_millis(200) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no CPU time in 60 s"
            );
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let used = process_cpu(std::process::id()).unwrap() - t0;
        assert!(
            used >= Duration::from_millis(100) && used < Duration::from_secs(10),
            "/proc counted {used:?} for 200 ms of CPU"
        );
    }
}
