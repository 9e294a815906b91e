//! Recognising a trace's format from its content and its file name.
//!
//! Content decides whenever it can, because trace files are routinely renamed
//! (`hm_0.csv`, `2016022219-LUN4.csv.gz`, `io_traces_17.csv` say little); the
//! name only breaks ties between formats the content cannot tell apart, or
//! chooses when the content matches nothing (the reader then reports the
//! exact line that does not parse, more useful than "unknown format").
//!
//! Text traces are recognised by their header line if they have one, else by
//! which parsers accept the first lines: field counts and field contents
//! differ enough (7 fields with `Read`/`Write`, 6 with `R`/`W`, 5 with `R`/`W`
//! in second place, 5 numeric with 0/1 in fourth place, 5 with a hex SCSI
//! opcode in third place). Binary traces are recognised by vscsi's layout
//! version bytes, else by oracleGeneral records being plausible.

use std::io::Read;
use std::path::Path;

use crate::cloudphysics::{scsi_op, CloudPhysicsCsvParser, VscsiVersion};
use crate::csv::CsvFormat;
use crate::msr::MsrParser;
use crate::oracle_general::{self, OracleGeneralRecord, RECORD_SIZE};
use crate::{alibaba, systor, tencent};
use crate::{open_input, Error, Format, Result};

/// How much of the (decompressed) file detection looks at.
const HEAD_BYTES: usize = 64 * 1024;

/// Lines or records checked; enough to rule out coincidences, few enough to
/// stay instant.
const SAMPLE: usize = 64;

/// Detects the format of the trace at `path` (gzip is looked through).
pub fn detect(path: impl AsRef<Path>) -> Result<Format> {
    let path = path.as_ref();
    let mut input = open_input(path)?;
    let mut head = Vec::with_capacity(HEAD_BYTES);
    input
        .by_ref()
        .take(HEAD_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| Error::io(path, e))?;
    if head.is_empty() {
        return Err(Error::Empty {
            path: path.to_path_buf(),
        });
    }
    let at_eof = head.len() < HEAD_BYTES;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let candidates = detect_from_content(&head, at_eof);
    let hint = detect_from_name(&name);
    choose(&candidates, hint).ok_or_else(|| Error::UnknownFormat {
        path: path.to_path_buf(),
        reason: if is_text(&head) {
            let first = head.split(|&b| b == b'\n').next().unwrap_or_default();
            format!(
                "text, but the first lines match no known csv layout (first line: {:?})",
                String::from_utf8_lossy(&first[..first.len().min(120)])
            )
        } else {
            "binary, but neither vscsi nor oracleGeneral records".to_string()
        },
    })
}

/// Picks a format: a content candidate the name agrees with, else the most
/// likely content candidate, else the name's guess.
pub fn choose(candidates: &[Format], name_hint: Option<Format>) -> Option<Format> {
    match name_hint {
        Some(hint) if candidates.is_empty() || candidates.contains(&hint) => Some(hint),
        _ => candidates.first().copied(),
    }
}

/// Formats whose usual file names `name` (the file name, not a directory)
/// looks like.
pub fn detect_from_name(name: &str) -> Option<Format> {
    let name = name.to_ascii_lowercase();
    // Most specific first: `cloudPhysicsIO.oracleGeneral.bin` is an
    // oracleGeneral trace, not a CloudPhysics csv.
    if name.contains("oraclegeneral") || name.contains("oracle_general") {
        return Some(Format::OracleGeneral);
    }
    if name.contains("vscsi") {
        return Some(Format::CloudPhysicsVscsi);
    }
    if name.contains("cloudphysics") && name.contains(".csv") {
        return Some(Format::CloudPhysicsCsv);
    }
    if name.contains("systor") || (name.contains("lun") && name.contains(".csv")) {
        return Some(Format::Systor17);
    }
    if name.contains("msr") || is_msr_volume_name(&name) {
        return Some(Format::MsrCambridge);
    }
    if name.contains("alibaba") {
        return Some(Format::Alibaba);
    }
    if name.contains("tencent") || name.contains("cbs") {
        return Some(Format::TencentCbs);
    }
    None
}

/// MSR Cambridge names its files `<host>_<disk>.csv`, e.g. `hm_0.csv`.
fn is_msr_volume_name(name: &str) -> bool {
    const HOSTS: [&str; 13] = [
        "hm", "mds", "prn", "proj", "prxy", "rsrch", "src1", "src2", "stg", "ts", "usr", "wdev",
        "web",
    ];
    name.split_once('_').is_some_and(|(host, rest)| {
        HOSTS.contains(&host) && rest.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// Formats `head` (the first bytes of the decompressed trace) is consistent
/// with, most likely first. `at_eof` says `head` is the whole trace, which
/// lets binary detection check that it holds whole records.
pub fn detect_from_content(head: &[u8], at_eof: bool) -> Vec<Format> {
    if head.is_empty() {
        return Vec::new();
    }
    if is_text(head) {
        detect_text(head, at_eof)
    } else {
        detect_binary(head, at_eof)
    }
}

fn is_text(head: &[u8]) -> bool {
    head.iter()
        .take(4096)
        .all(|&b| matches!(b, b'\t' | b'\n' | b'\r' | b' '..=b'~'))
}

fn detect_text(head: &[u8], at_eof: bool) -> Vec<Format> {
    let mut lines: Vec<&[u8]> = head.split(|&b| b == b'\n').collect();
    if !at_eof && lines.len() > 1 {
        // The last line may be cut in the middle.
        lines.pop();
    }
    let mut lines = lines
        .into_iter()
        .map(<[u8]>::trim_ascii)
        .filter(|l| !l.is_empty())
        .take(SAMPLE + 1)
        .peekable();
    let Some(&first) = lines.peek() else {
        return Vec::new();
    };

    let headers: [(Format, HeaderCheck); 5] = [
        (Format::MsrCambridge, MsrParser::is_header),
        (Format::Systor17, systor::SystorParser::is_header),
        (Format::Alibaba, alibaba::AlibabaParser::is_header),
        (Format::TencentCbs, tencent::TencentParser::is_header),
        (Format::CloudPhysicsCsv, CloudPhysicsCsvParser::is_header),
    ];
    if let Some((format, _)) = headers.iter().find(|(_, is_header)| is_header(first)) {
        return vec![*format];
    }

    let data: Vec<&[u8]> = lines.take(SAMPLE).collect();
    let mut found = Vec::new();
    if parses_all(MsrParser::default(), &data) {
        found.push(Format::MsrCambridge);
    }
    if parses_all(systor::SystorParser, &data) {
        found.push(Format::Systor17);
    }
    if parses_all(alibaba::AlibabaParser, &data) {
        found.push(Format::Alibaba);
    }
    // Tencent before CloudPhysics: a Tencent line also parses as CloudPhysics
    // when its sector count happens to be a SCSI opcode in hex, but never the
    // other way round (a CloudPhysics size is not 0 or 1).
    if parses_all(tencent::TencentParser, &data) {
        found.push(Format::TencentCbs);
    }
    if parses_all(CloudPhysicsCsvParser, &data) {
        found.push(Format::CloudPhysicsCsv);
    }
    found
}

/// A format's header recogniser, [`CsvFormat::is_header`].
type HeaderCheck = fn(&[u8]) -> bool;

fn parses_all<P: CsvFormat>(mut parser: P, lines: &[&[u8]]) -> bool {
    !lines.is_empty() && lines.iter().all(|l| parser.parse_line(l).is_ok())
}

fn detect_binary(head: &[u8], at_eof: bool) -> Vec<Format> {
    let mut found = Vec::new();
    if looks_like_vscsi(head, at_eof) {
        found.push(Format::CloudPhysicsVscsi);
    }
    if looks_like_oracle_general(head, at_eof) {
        found.push(Format::OracleGeneral);
    }
    found
}

fn looks_like_vscsi(head: &[u8], at_eof: bool) -> bool {
    let Some(version) = VscsiVersion::detect(head) else {
        return false;
    };
    let size = version.record_size();
    if at_eof && !head.len().is_multiple_of(size) {
        return false;
    }
    let mut data_commands = 0;
    for record in head.chunks_exact(size).take(SAMPLE) {
        let (ver, cmd) = match version {
            VscsiVersion::V1 => (record[15], u16::from_le_bytes([record[12], record[13]])),
            VscsiVersion::V2 => (record[3], u16::from_le_bytes([record[0], record[1]])),
        };
        if ver != version.number() {
            return false;
        }
        if scsi_op(cmd).is_some() {
            data_commands += 1;
        }
    }
    // A real trace is mostly reads and writes; zero of them is a coincidence.
    data_commands > 0
}

fn looks_like_oracle_general(head: &[u8], at_eof: bool) -> bool {
    if head.len() < RECORD_SIZE || (at_eof && !head.len().is_multiple_of(RECORD_SIZE)) {
        return false;
    }
    let mut previous: Option<OracleGeneralRecord> = None;
    for chunk in head.chunks_exact(RECORD_SIZE).take(SAMPLE) {
        let record = oracle_general::decode(chunk.try_into().expect("24-byte chunk"));
        // Timestamps never go backwards in libCacheSim's converted traces,
        // and next_access_vtime is -1 or a later request index.
        if record.next_access_vtime < -1 || record.obj_size == 0 {
            return false;
        }
        if previous.is_some_and(|p| p.timestamp > record.timestamp) {
            return false;
        }
        previous = Some(record);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloudphysics::encode_vscsi;
    use crate::oracle_general::encode;
    use crate::{Op, Request};

    const MSR: &str = "128166372003061629,hm,0,Read,7014609920,24576,41286\n\
                       128166372016382155,hm,0,Write,1317441536,8192,1963\n";
    const SYSTOR: &str = "1455591804.310701000,0.006475000,R,0,203468398592,32768\n";
    const ALIBABA: &str = "419,W,8792731648,16384,1577808144228654\n3,R,0,4096,1577808144228655\n";
    const TENCENT: &str = "1538323200,12003600,8,1,1283\n1538323200,12003608,16,0,1283\n";
    const CLOUDPHYSICS: &str = "1,5633898,2a,512,42932745\n1,5633898,28,512,42932746\n";

    #[test]
    fn text_formats_by_content() {
        for (text, format) in [
            (MSR, Format::MsrCambridge),
            (SYSTOR, Format::Systor17),
            (ALIBABA, Format::Alibaba),
            (TENCENT, Format::TencentCbs),
            (CLOUDPHYSICS, Format::CloudPhysicsCsv),
        ] {
            let found = detect_from_content(text.as_bytes(), true);
            assert_eq!(found.first(), Some(&format), "{text}: {found:?}");
        }
    }

    #[test]
    fn headers_decide() {
        for (header, format) in [
            (
                "Timestamp,Response,IOType,LUN,Offset,Size",
                Format::Systor17,
            ),
            ("Version,time,op,size,lbn", Format::CloudPhysicsCsv),
            ("device_id,opcode,offset,length,timestamp", Format::Alibaba),
            ("Timestamp,Offset,Size,IOType,VolumeID", Format::TencentCbs),
        ] {
            let text = format!("{header}\n");
            assert_eq!(detect_from_content(text.as_bytes(), true), [format]);
        }
    }

    #[test]
    fn partial_last_line_is_ignored() {
        let text = format!("{ALIBABA}419,W,87927");
        assert_eq!(
            detect_from_content(text.as_bytes(), false).first(),
            Some(&Format::Alibaba)
        );
    }

    #[test]
    fn binary_formats_by_content() {
        let r = Request {
            timestamp_ns: 1_000,
            op: Op::Read,
            offset: 4096,
            length: 4096,
            volume: 0,
        };
        for version in [VscsiVersion::V1, VscsiVersion::V2] {
            let bytes: Vec<u8> = (0..4)
                .flat_map(|_| encode_vscsi(version, 0x28, &r))
                .collect();
            assert_eq!(
                detect_from_content(&bytes, true).first(),
                Some(&Format::CloudPhysicsVscsi)
            );
        }
        let bytes: Vec<u8> = (0..4)
            .flat_map(|i| {
                encode(&OracleGeneralRecord {
                    timestamp: i,
                    obj_id: 7,
                    obj_size: 512,
                    next_access_vtime: -1,
                })
            })
            .collect();
        assert_eq!(detect_from_content(&bytes, true), [Format::OracleGeneral]);
        assert!(detect_from_content(&[0xffu8; 23], true).is_empty());
    }

    #[test]
    fn names() {
        for (name, format) in [
            (
                "cloudPhysicsIO.oracleGeneral.bin",
                Some(Format::OracleGeneral),
            ),
            ("cloudPhysicsIO.vscsi", Some(Format::CloudPhysicsVscsi)),
            ("cloudPhysicsIO.csv", Some(Format::CloudPhysicsCsv)),
            ("systor17-traces-sample.csv.gz", Some(Format::Systor17)),
            ("2016022219-LUN4.csv.gz", Some(Format::Systor17)),
            ("msr-cambridge1-sample.csv", Some(Format::MsrCambridge)),
            ("hm_0.csv", Some(Format::MsrCambridge)),
            ("src1_2.csv.gz", Some(Format::MsrCambridge)),
            ("alibaba_block_traces.csv", Some(Format::Alibaba)),
            ("tencent_cbs_1283.csv", Some(Format::TencentCbs)),
            ("trace.csv", None),
        ] {
            assert_eq!(detect_from_name(name), format, "{name}");
        }
    }

    #[test]
    fn name_breaks_ties_and_content_wins_over_a_wrong_name() {
        let both = [Format::TencentCbs, Format::CloudPhysicsCsv];
        assert_eq!(choose(&both, None), Some(Format::TencentCbs));
        assert_eq!(
            choose(&both, Some(Format::CloudPhysicsCsv)),
            Some(Format::CloudPhysicsCsv)
        );
        assert_eq!(
            choose(&[Format::Alibaba], Some(Format::MsrCambridge)),
            Some(Format::Alibaba)
        );
        assert_eq!(choose(&[], Some(Format::Systor17)), Some(Format::Systor17));
        assert_eq!(choose(&[], None), None);
    }
}
