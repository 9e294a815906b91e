//! What the benches share: their knobs from the environment, and `rbd
//! bench`, the baseline every rbd row is judged by.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::Ceph;

/// `RACKCACHE_BENCH_SECONDS`: seconds per timed workload (default 3).
pub fn bench_seconds() -> Duration {
    let s = std::env::var("RACKCACHE_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(3.0);
    Duration::from_secs_f64(s)
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
    /// Random offsets, or sequential ones.
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
    /// Operations per second from its first per-second line to the end:
    /// the steady state, without connecting, opening the image and the
    /// first second's ramp. NaN when it printed no per-second line within
    /// the run.
    pub steady_iops: f64,
    /// CPU time of the whole `rbd bench` process (librbd and its messenger
    /// included) per operation, in µs, counted from its first per-second
    /// line to the end: connecting and opening the image are left out. NaN
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
    Summary { ops: u64, iops: f64 },
}

fn parse_line(l: &str) -> Option<BenchLine> {
    if let Some(rest) = l.split_once("ops:").map(|(_, r)| r) {
        let mut f = rest.split_whitespace();
        let ops = f.next()?.parse().ok()?;
        let iops = l.split_once("ops/sec:")?.1.split_whitespace().next()?;
        return Some(BenchLine::Summary {
            ops,
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
            .args(["--io-pattern", if io.random { "rand" } else { "seq" }])
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
        // The first per-second line: from here on it is doing I/O.
        let first = loop {
            match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
                Ok(BenchLine::Second(ops)) => break Some((ops, process_cpu(pid), Instant::now())),
                Ok(BenchLine::Summary { .. }) => {}
                Err(_) => break None,
            }
        };
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        let cpu_end = process_cpu(pid);
        let stopped = Instant::now();
        // SAFETY: signalling our own child by PID.
        unsafe { libc::kill(pid as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = reader.join();
        let (ops, iops) = rx
            .try_iter()
            .find_map(|l| match l {
                BenchLine::Summary { ops, iops } => Some((ops, iops)),
                BenchLine::Second(_) => None,
            })
            .ok_or_else(|| format!("rbd bench {io:?}: no summary"))?;
        // Without a per-second line in `duration` (a slow start), only the
        // summary's figure is known.
        let (steady_iops, cpu_us_per_op) = match first {
            Some((ops0, cpu0, t0)) if ops > ops0 => {
                let steady_ops = (ops - ops0) as f64;
                let cpu = match (cpu0, cpu_end) {
                    (Some(c0), Some(c1)) => (c1 - c0).as_secs_f64() * 1e6 / steady_ops,
                    _ => f64::NAN,
                };
                (steady_ops / (stopped - t0).as_secs_f64(), cpu)
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
    fn rbd_bench_lines_parse() {
        assert!(matches!(
            parse_line("    2    478912    239952   937 MiB/s"),
            Some(BenchLine::Second(478912))
        ));
        match parse_line("elapsed: 3   ops: 895369   ops/sec: 228878   bytes/sec: 894 MiB/s") {
            Some(BenchLine::Summary { ops, iops }) => {
                assert_eq!(ops, 895369);
                assert_eq!(iops, 228878.0);
            }
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
