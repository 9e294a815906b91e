//! A trace as the stream of 4 KiB blocks its requests touch, in libCacheSim's
//! oracleGeneral format, so that libCacheSim's policies see exactly the
//! block accesses whose misses the engine counts in `Report::miss_ratio`.
//!
//! Each request, laid out and sector-aligned by [`Profile::place`] as the
//! replay does, becomes one record per 4 KiB block it covers, in address
//! order: object id = address / 4096 (so blocks of different volumes stay
//! apart), size 4096, the operation dropped (the format has none; every
//! access fills the cache on a miss, as the engine's write-back and
//! write-through modes do for writes). The record layout is the one
//! `traces::oracle_general` reads.
//!
//! - timestamp: seconds since the trace's first request (the format has 32
//!   bits; absolute epochs such as MSR's do not fit), saturating.
//! - next access: the 1-based position of the next record of the same
//!   block, -1 if none, as libCacheSim's own converter writes it (its
//!   CloudPhysics sample has them so). Only oracle policies (Belady) read
//!   it; it is filled in by a backward pass over the written file
//!   ([`fill_next_access`]), whose memory is one map entry per distinct
//!   block rather than per record.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use traces::oracle_general::{decode, encode, OracleGeneralRecord, RECORD_SIZE};

use crate::replay::{Profile, SimError, TraceSpec};

/// The block size of the stream (and of the working set `N%` refers to).
pub const BLOCK: u64 = 4096;

/// Records per read/write in [`fill_next_access`] (192 KiB).
const CHUNK: usize = 8192;

/// Turns requests into block records, written to `out`.
#[derive(Debug)]
pub struct BlockStreamWriter<W: Write> {
    out: W,
    first_ns: Option<u64>,
    records: u64,
}

impl<W: Write> BlockStreamWriter<W> {
    /// Writes records to `out` (buffer it: records are 24 bytes).
    pub fn new(out: W) -> Self {
        BlockStreamWriter {
            out,
            first_ns: None,
            records: 0,
        }
    }

    /// Appends the blocks of the request at `offset`, `len` bytes (the
    /// engine's address space), issued at `timestamp_ns`. A range not
    /// aligned to 4 KiB (sectors below 4 KiB) yields every block it touches.
    pub fn push(&mut self, timestamp_ns: u64, offset: u64, len: u64) -> io::Result<()> {
        let first = *self.first_ns.get_or_insert(timestamp_ns);
        let secs = timestamp_ns.saturating_sub(first) / 1_000_000_000;
        let timestamp = u32::try_from(secs).unwrap_or(u32::MAX);
        for obj_id in offset / BLOCK..(offset + len).div_ceil(BLOCK) {
            let r = OracleGeneralRecord {
                timestamp,
                obj_id,
                obj_size: BLOCK as u32,
                next_access_vtime: -1,
            };
            self.out.write_all(&encode(&r))?;
            self.records += 1;
        }
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Sets every record's next-access field of an oracleGeneral `file`,
/// reading it backwards in chunks and rewriting each chunk in place.
pub fn fill_next_access(file: &mut File) -> io::Result<()> {
    let total = file.metadata()?.len() / RECORD_SIZE as u64;
    let mut next: HashMap<u64, u64> = HashMap::new();
    let mut buf = vec![0u8; CHUNK * RECORD_SIZE];
    let mut end = total;
    while end > 0 {
        let start = end.saturating_sub(CHUNK as u64);
        let bytes = &mut buf[..(end - start) as usize * RECORD_SIZE];
        let at = SeekFrom::Start(start * RECORD_SIZE as u64);
        file.seek(at)?;
        file.read_exact(bytes)?;
        for (i, rec) in bytes.chunks_exact_mut(RECORD_SIZE).enumerate().rev() {
            let raw: &mut [u8; RECORD_SIZE] = rec.try_into().expect("whole records");
            let mut r = decode(raw);
            let index = start + i as u64;
            r.next_access_vtime = next
                .insert(r.obj_id, index)
                .map_or(-1, |later| later as i64 + 1);
            *raw = encode(&r);
        }
        file.seek(at)?;
        file.write_all(bytes)?;
        end = start;
    }
    file.flush()
}

/// A new, empty file open for writing and reading (the next-access pass
/// reads back what was written).
pub fn create_rw(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

/// What [`write_block_stream`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockStream {
    /// Records (4 KiB block accesses), warm-up included.
    pub blocks: u64,
    /// Records of the first `warmup` requests: libCacheSim replays them
    /// without counting them, as the engine's report does.
    pub warmup_blocks: u64,
}

/// Why writing the stream stopped: the trace, or the output file.
enum Failure {
    Trace(SimError),
    Io(io::Error),
}

impl From<SimError> for Failure {
    fn from(e: SimError) -> Self {
        Failure::Trace(e)
    }
}

/// Writes the block stream of the requests `spec` selects, laid out as
/// `profile` lays them out for the replay, to `path`.
pub fn write_block_stream(
    spec: &TraceSpec,
    profile: &Profile,
    warmup: u64,
    path: &Path,
) -> Result<BlockStream, String> {
    let io_err = |e: io::Error| format!("write {}: {e}", path.display());
    let file = create_rw(path).map_err(io_err)?;
    let mut w = BlockStreamWriter::new(BufWriter::with_capacity(1 << 20, file));
    let mut warmup_blocks = 0;
    spec.for_each(|index, r| -> Result<(), Failure> {
        let (offset, len) = profile.place(r);
        w.push(r.timestamp_ns, offset, len).map_err(Failure::Io)?;
        if index < warmup {
            warmup_blocks = w.records();
        }
        Ok(())
    })
    .map_err(|e| match e {
        Failure::Trace(e) => e.to_string(),
        Failure::Io(e) => io_err(e),
    })?;
    let blocks = w.records();
    let mut file = w
        .finish()
        .map_err(io_err)?
        .into_inner()
        .map_err(|e| io_err(e.into_error()))?;
    fill_next_access(&mut file).map_err(io_err)?;
    Ok(BlockStream {
        blocks,
        warmup_blocks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;
    use traces::oracle_general::OracleGeneralReader;
    use traces::{Op, Request};

    use testkit::TempDir;

    fn raw_records(path: &Path) -> Vec<OracleGeneralRecord> {
        std::fs::read(path)
            .unwrap()
            .chunks_exact(RECORD_SIZE)
            .map(|c| decode(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn round_trip_through_the_oracle_general_reader() {
        let dir = TempDir::new("rackcache-sim-stream");
        let path = dir.path().join("blocks.oracleGeneral");
        let mut w = BlockStreamWriter::new(create_rw(&path).unwrap());
        let s = 1_000_000_000;
        w.push(5 * s, 8192, 8192).unwrap(); // blocks 2, 3
        w.push(7 * s, 0, 4096).unwrap(); // block 0
        w.push(9 * s + s / 2, 12288, 4096).unwrap(); // block 3
        w.push(10 * s, 512, 4096).unwrap(); // unaligned: blocks 0, 1
        w.push(10 * s, 8192, 4096).unwrap(); // block 2
        assert_eq!(w.records(), 7);
        let mut f = w.finish().unwrap();
        fill_next_access(&mut f).unwrap();

        // The traces crate reads it back as 4 KiB reads at the blocks'
        // addresses (id unit 4096), seconds since the first request.
        let reader = OracleGeneralReader::new(BufReader::new(File::open(&path).unwrap()), &path)
            .with_id_unit(BLOCK);
        let got: Vec<Request> = reader.map(Result::unwrap).collect();
        let want: Vec<Request> = [(0, 2), (0, 3), (2, 0), (4, 3), (5, 0), (5, 1), (5, 2)]
            .iter()
            .map(|&(secs, block)| Request {
                timestamp_ns: secs * s,
                op: Op::Read,
                offset: block * BLOCK,
                length: 4096,
                volume: 0,
            })
            .collect();
        assert_eq!(got, want);

        // Next access: the 1-based position of the block's next record.
        let next: Vec<i64> = raw_records(&path)
            .iter()
            .map(|r| r.next_access_vtime)
            .collect();
        assert_eq!(next, [7, 4, 5, -1, -1, -1, -1]);
    }

    #[test]
    fn next_access_across_chunks() {
        let dir = TempDir::new("rackcache-sim-stream");
        let path = dir.path().join("blocks.oracleGeneral");
        let n = CHUNK as u64 * 2 + 100;
        let mut w = BlockStreamWriter::new(BufWriter::new(create_rw(&path).unwrap()));
        for i in 0..n {
            w.push(0, (i % 7) * BLOCK, BLOCK).unwrap();
        }
        let mut f = w.finish().unwrap().into_inner().unwrap();
        fill_next_access(&mut f).unwrap();
        let recs = raw_records(&path);
        assert_eq!(recs.len() as u64, n);
        for (i, r) in recs.iter().enumerate() {
            let i = i as u64;
            let want = if i + 7 < n { (i + 7 + 1) as i64 } else { -1 };
            assert_eq!((r.obj_id, r.next_access_vtime), (i % 7, want), "record {i}");
        }
    }

    #[test]
    fn stream_of_a_trace_follows_the_replay_layout() {
        let dir = TempDir::new("rackcache-sim-stream");
        let trace = dir.path().join("t.csv");
        // MSR: two volumes; volume 1 starts at 1 MiB in the engine's space.
        std::fs::write(
            &trace,
            "128166372003061629,hm,0,Read,0,8192,100\n\
             128166372013061629,hm,1,Write,4096,512,100\n\
             128166372023061629,hm,0,Read,4096,4096,100\n",
        )
        .unwrap();
        let spec = TraceSpec::new(&trace);
        let profile = Profile::scan(&spec, 4096).unwrap();
        let out = dir.path().join("blocks");
        let s = write_block_stream(&spec, &profile, 1, &out).unwrap();
        assert_eq!(
            s,
            BlockStream {
                blocks: 4,
                warmup_blocks: 2
            }
        );
        let recs: Vec<(u32, u64, u32, i64)> = raw_records(&out)
            .iter()
            .map(|r| (r.timestamp, r.obj_id, r.obj_size, r.next_access_vtime))
            .collect();
        let v1 = (1 << 20) / BLOCK + 1;
        assert_eq!(
            recs,
            [
                (0, 0, 4096, -1),
                (0, 1, 4096, 4),
                (1, v1, 4096, -1),
                (2, 1, 4096, -1)
            ]
        );
        let all = write_block_stream(&spec, &profile, 9, &out).unwrap();
        assert_eq!(all.warmup_blocks, 4);
    }
}
