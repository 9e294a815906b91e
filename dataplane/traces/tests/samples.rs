//! Parses every real trace sample under `$RACKCACHE_TRACES` (default: the
//! `shared/traces` directory beside the repository). The samples' licenses
//! forbid copying them into the repository, so where the samples are absent
//! these tests skip with a message, and fail under `CI=true`.
//!
//! Run with `--nocapture` to see a one-line summary per sample.

use std::fs;
use std::path::{Path, PathBuf};

use traces::detect::detect_from_name;
use traces::{Format, Op, OpenOptions, Request, TraceReader, WorkingSet};

/// The samples directory, or `None` (after saying why) when absent.
fn samples_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("RACKCACHE_TRACES") {
        Some(dir) => PathBuf::from(dir),
        // dataplane/traces -> repository root -> its sibling shared/traces.
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces"),
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        testkit::missing(&format!(
            "no trace samples at {} (set RACKCACHE_TRACES to a directory of traces)",
            dir.display()
        ));
        None
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_lowercase();
            if path.is_dir() {
                pending.push(path);
            } else if !name.starts_with('.')
                && !name.ends_with(".md")
                && !name.ends_with(".txt")
                && !name.starts_with("license")
                && !name.starts_with("readme")
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_sample_parses_with_plausible_contents() {
    let Some(dir) = samples_dir() else { return };
    let files = files_under(&dir);
    assert!(!files.is_empty(), "{} holds no trace files", dir.display());
    for path in files {
        let mut reader = TraceReader::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let format = reader.format();
        let name = path.file_name().unwrap().to_string_lossy();
        if let Some(expected) = detect_from_name(&name) {
            assert_eq!(format, expected, "{}: detected format", path.display());
        }
        let mut working_set = WorkingSet::default();
        let (mut reads, mut writes) = (0u64, 0u64);
        for request in reader.by_ref() {
            let request = request.unwrap_or_else(|e| panic!("{e}"));
            assert!(request.length > 0, "{}: {request:?}", path.display());
            match request.op {
                Op::Read => reads += 1,
                Op::Write => writes += 1,
            }
            working_set.add(&request);
        }
        let records = reads + writes;
        println!(
            "{}: {format}, {records} requests ({reads} reads, {writes} writes, {} skipped), \
             working set {} x 4 KiB = {:.1} MiB",
            path.display(),
            reader.skipped(),
            working_set.blocks(),
            working_set.bytes() as f64 / (1 << 20) as f64
        );
        assert!(records > 0, "{}: no requests", path.display());
        assert_eq!(records, reader.records());
        assert!(working_set.blocks() > 0);
        // oracleGeneral has no operation field: everything reads.
        if format != Format::OracleGeneral {
            assert!(
                reads > 0 && writes > 0,
                "{}: expected both reads and writes",
                path.display()
            );
        }
    }
}

fn read_all(path: &Path, options: &OpenOptions) -> Vec<Request> {
    options
        .open(path)
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|r| r.unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// The CloudPhysics sample comes as csv, vscsi and oracleGeneral conversions
/// of the same requests: they must agree record for record.
#[test]
fn cloudphysics_conversions_agree() {
    let Some(dir) = samples_dir() else { return };
    let dir = dir.join("cloudphysics");
    let (csv, vscsi, oracle) = (
        dir.join("cloudPhysicsIO.csv"),
        dir.join("cloudPhysicsIO.vscsi"),
        dir.join("cloudPhysicsIO.oracleGeneral.bin"),
    );
    if !(csv.is_file() && vscsi.is_file() && oracle.is_file()) {
        testkit::missing(&format!(
            "{} lacks the three CloudPhysics conversions",
            dir.display()
        ));
        return;
    }
    let csv = read_all(&csv, &OpenOptions::new());
    let vscsi = read_all(&vscsi, &OpenOptions::new());
    // The oracleGeneral conversion keys objects by sector number.
    let oracle = read_all(&oracle, &OpenOptions::new().oracle_id_unit(512));
    assert_eq!(csv.len(), vscsi.len());
    assert_eq!(csv.len(), oracle.len());
    let second = 1_000_000_000;
    let mut oracle_sizes_differ = 0;
    for ((c, v), o) in csv.iter().zip(&vscsi).zip(&oracle) {
        assert_eq!((c.op, c.offset, c.length), (v.op, v.offset, v.length));
        // csv and oracleGeneral keep whole seconds of vscsi's microseconds.
        assert_eq!(c.timestamp_ns, v.timestamp_ns / second * second);
        assert_eq!(o.timestamp_ns, c.timestamp_ns);
        assert_eq!(o.offset, c.offset);
        // oracleGeneral's obj_size is the size of the object's first request.
        oracle_sizes_differ += u64::from(o.length != c.length);
    }
    assert!(oracle_sizes_differ < csv.len() as u64 / 4);
}

#[test]
fn msr_sample_names_its_volume() {
    let Some(dir) = samples_dir() else { return };
    let path = dir.join("msr_cambridge/msr-cambridge1-sample.csv");
    if !path.is_file() {
        testkit::missing(&format!("{} absent", path.display()));
        return;
    }
    let mut reader = TraceReader::open(&path).unwrap();
    let first = reader.next().unwrap().unwrap();
    assert_eq!(first.volume, 0);
    // 2007-02-22 .. 2007-02-23 (UTC), when MSR collected the traces.
    let day = first.timestamp_ns / 1_000_000_000 / 86_400;
    assert!((13_566..=13_573).contains(&day), "day {day}");
    assert!(reader.all(|r| r.is_ok()));
    assert_eq!(reader.volume_names().unwrap(), ["hm_0"]);
}
