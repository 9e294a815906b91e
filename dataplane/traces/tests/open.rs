//! Opening trace files from disk: format detection (plain and gzip), explicit
//! formats, and the errors of files that are empty or in no known format.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;
use traces::cloudphysics::{encode_vscsi, VscsiVersion};
use traces::oracle_general::{encode, OracleGeneralRecord};
use traces::{Error, Format, Op, Request, TraceReader};

/// A fresh directory for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("traces-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, data: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, data).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn read(path: &Path) -> (Format, Vec<Request>) {
    let reader = TraceReader::open(path).unwrap_or_else(|e| panic!("{e}"));
    let format = reader.format();
    (format, reader.map(|r| r.unwrap()).collect())
}

fn fixtures() -> Vec<(Format, Vec<u8>)> {
    let request = Request {
        timestamp_ns: 5_000_000,
        op: Op::Write,
        offset: 4096,
        length: 8192,
        volume: 0,
    };
    vec![
        (
            Format::MsrCambridge,
            b"128166372003061629,hm,0,Read,7014609920,24576,41286\n\
              128166372016382155,hm,0,Write,1317441536,8192,1963\n"
                .to_vec(),
        ),
        (
            Format::Systor17,
            b"Timestamp,Response,IOType,LUN,Offset,Size\n\
              1455591804.310701000,0.006475000,R,0,203468398592,32768\n"
                .to_vec(),
        ),
        (
            Format::Alibaba,
            b"419,W,8792731648,16384,1577808144228654\n".to_vec(),
        ),
        (
            Format::TencentCbs,
            b"1538323200,12003600,8,1,1283\n".to_vec(),
        ),
        (
            Format::CloudPhysicsCsv,
            b"1,5633898,2a,512,42932745\n1,5633898,28,512,42932746\n".to_vec(),
        ),
        (
            Format::CloudPhysicsVscsi,
            [
                encode_vscsi(VscsiVersion::V2, 0x2a, &request),
                encode_vscsi(VscsiVersion::V2, 0x28, &request),
            ]
            .concat(),
        ),
        (
            Format::OracleGeneral,
            (0..3)
                .flat_map(|i| {
                    encode(&OracleGeneralRecord {
                        timestamp: i,
                        obj_id: 100 + u64::from(i),
                        obj_size: 4096,
                        next_access_vtime: -1,
                    })
                })
                .collect(),
        ),
    ]
}

#[test]
fn detects_every_format_plain_and_gzipped_under_neutral_names() {
    let dir = TempDir::new("detect");
    for (format, data) in fixtures() {
        // Neutral names: detection must come from content alone.
        let plain = dir.write(&format!("{}.dat", format.name()), &data);
        let gz = dir.write(&format!("{}-z.dat", format.name()), &gzip(&data));
        let (found, requests) = read(&plain);
        assert_eq!(found, format, "{}", plain.display());
        assert!(!requests.is_empty());
        let (found_gz, requests_gz) = read(&gz);
        assert_eq!(found_gz, format, "{}", gz.display());
        assert_eq!(requests, requests_gz);
        assert_eq!(traces::detect(&plain).unwrap(), format);
    }
}

#[test]
fn explicit_format_overrides_detection() {
    let dir = TempDir::new("explicit");
    // Tencent-looking data that is meant as CloudPhysics csv.
    let path = dir.write("t.csv", b"1,5633898,8,512,42932745\n");
    assert_eq!(
        TraceReader::open(&path).unwrap().format(),
        Format::CloudPhysicsCsv
    );
    let path = dir.write("t2.csv", b"1,5633898,8,1,42932745\n");
    assert_eq!(
        TraceReader::open(&path).unwrap().format(),
        Format::TencentCbs
    );
    let reader = TraceReader::open_as(&path, Format::CloudPhysicsCsv).unwrap();
    assert_eq!(reader.format(), Format::CloudPhysicsCsv);
    let requests: Vec<Request> = reader.map(Result::unwrap).collect();
    assert_eq!(requests[0].op, Op::Read);
    assert_eq!(requests[0].offset, 42932745 * 512);
}

#[test]
fn empty_and_unknown_files_are_errors_naming_the_file() {
    let dir = TempDir::new("errors");
    let empty = dir.write("empty.csv", b"");
    let err = TraceReader::open(&empty).unwrap_err();
    assert!(matches!(err, Error::Empty { .. }), "{err}");
    assert!(err.to_string().contains("empty.csv"), "{err}");

    let empty_gz = dir.write("empty.csv.gz", &gzip(b""));
    assert!(matches!(
        TraceReader::open(&empty_gz).unwrap_err(),
        Error::Empty { .. }
    ));

    let text = dir.write("notes.csv", b"hello,world\n");
    let err = TraceReader::open(&text).unwrap_err();
    assert!(matches!(err, Error::UnknownFormat { .. }), "{err}");
    assert!(err.to_string().contains("notes.csv"), "{err}");
    assert!(err.to_string().contains("hello,world"), "{err}");

    let missing = dir.0.join("missing.csv");
    let err = TraceReader::open(&missing).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(err.to_string().contains("missing.csv"), "{err}");
}

#[test]
fn wrong_name_loses_to_content_but_a_malformed_line_is_reported() {
    let dir = TempDir::new("names");
    // Named like MSR, holds Alibaba records.
    let path = dir.write("hm_0.csv", b"419,W,8792731648,16384,1577808144228654\n");
    assert_eq!(TraceReader::open(&path).unwrap().format(), Format::Alibaba);
    // Named like MSR and matching nothing: read as MSR, error on line 2.
    let path = dir.write(
        "hm_1.csv",
        b"128166372003061629,hm,0,Read,7014609920,24576,41286\n\
          128166372003061629,hm,0,Read,7014609920,24576\n",
    );
    let mut reader = TraceReader::open(&path).unwrap();
    assert_eq!(reader.format(), Format::MsrCambridge);
    assert!(reader.next().unwrap().is_ok());
    let err = reader.next().unwrap().unwrap_err();
    assert!(matches!(err, Error::Line { line: 2, .. }), "{err}");
    assert!(reader.next().is_none());
}
