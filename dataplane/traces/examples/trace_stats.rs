//! Prints what a trace holds and how fast it parses:
//!
//! ```sh
//! cargo run --release -p traces --example trace_stats -- [--parse-only] FILE [FORMAT] [ORACLE_ID_UNIT]
//! ```
//!
//! `--parse-only` skips the working-set count, to time parsing alone.

use std::process::ExitCode;
use std::time::Instant;

use traces::{Format, Op, OpenOptions, WorkingSet};

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let parse_only = args.first().is_some_and(|a| a == "--parse-only");
    if parse_only {
        args.remove(0);
    }
    let Some(path) = args.first() else {
        eprintln!("usage: trace_stats [--parse-only] FILE [FORMAT] [ORACLE_ID_UNIT]");
        return ExitCode::from(2);
    };
    let mut options = OpenOptions::new();
    if let Some(format) = args.get(1) {
        match format.parse::<Format>() {
            Ok(f) => options = options.format(f),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(unit) = args.get(2) {
        match unit.parse::<u64>() {
            Ok(u) if u > 0 => options = options.oracle_id_unit(u),
            _ => {
                eprintln!("ORACLE_ID_UNIT must be a positive integer");
                return ExitCode::from(2);
            }
        }
    }
    let start = Instant::now();
    let mut reader = match options.open(path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let mut working_set = WorkingSet::default();
    let (mut reads, mut writes) = (0u64, 0u64);
    for request in reader.by_ref() {
        match request {
            Ok(r) => {
                match r.op {
                    Op::Read => reads += 1,
                    Op::Write => writes += 1,
                }
                if !parse_only {
                    working_set.add(&r);
                }
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let records = reads + writes;
    println!("file:        {path}");
    println!("format:      {}", reader.format());
    println!(
        "requests:    {records} ({reads} reads, {writes} writes, {} skipped)",
        reader.skipped()
    );
    println!("volumes:     {}", working_set.volumes());
    println!(
        "read/write:  {:.1} / {:.1} MiB",
        working_set.read_bytes() as f64 / 1048576.0,
        working_set.write_bytes() as f64 / 1048576.0
    );
    println!(
        "working set: {} blocks of 4 KiB = {:.1} MiB",
        working_set.blocks(),
        working_set.bytes() as f64 / 1048576.0
    );
    println!(
        "time:        {secs:.3} s ({:.2} M requests/s, {})",
        records as f64 / secs / 1e6,
        if parse_only {
            "parse only"
        } else {
            "parse + working set"
        }
    );
    ExitCode::SUCCESS
}
