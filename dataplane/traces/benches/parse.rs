//! Parse throughput (records/s) of every format on generated in-memory traces.
//!
//! Run with `cargo bench -p traces --bench parse`. Each group reports
//! elements/s = records/s; the MSR group also runs the boxed, auto-wrapped
//! `TraceReader` path so that its overhead shows as a ratio against the
//! monomorphised reader in the same run.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use traces::alibaba::AlibabaReader;
use traces::cloudphysics::{encode_vscsi, CloudPhysicsCsvReader, VscsiReader, VscsiVersion};
use traces::msr::MsrReader;
use traces::oracle_general::{encode, OracleGeneralReader, OracleGeneralRecord};
use traces::systor::SystorReader;
use traces::tencent::TencentReader;
use traces::{Format, Op, OpenOptions, Request, TraceReader};

const RECORDS: u64 = 200_000;

/// A deterministic pseudo-random sequence (xorshift), so fixtures look like
/// traces (varied digits and widths) without a rand dependency.
fn numbers() -> impl Iterator<Item = u64> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

fn text(line: impl Fn(u64, u64) -> String) -> Vec<u8> {
    numbers()
        .take(RECORDS as usize)
        .enumerate()
        .flat_map(|(i, r)| line(i as u64, r).into_bytes())
        .collect()
}

fn count<I: Iterator<Item = traces::Result<Request>>>(reader: I) -> u64 {
    let mut n = 0;
    for request in reader {
        black_box(request.expect("fixture parses"));
        n += 1;
    }
    assert_eq!(n, RECORDS);
    n
}

fn bench(c: &mut Criterion) {
    let msr = text(|i, r| {
        let op = if r & 1 == 0 { "Read" } else { "Write" };
        format!(
            "{},hm,0,{op},{},{},{}\n",
            128_166_372_003_061_629 + i * 1_000,
            (r >> 20) * 512,
            (1 + (r >> 8) % 128) * 512,
            r % 100_000
        )
    });
    let systor = text(|i, r| {
        let op = if r & 1 == 0 { 'R' } else { 'W' };
        format!(
            "1455591804.{:09},0.{:09},{op},{},{},{}\n",
            i * 1_000 % 1_000_000_000,
            r % 10_000_000,
            r % 6,
            (r >> 22) * 512,
            (1 + (r >> 8) % 128) * 512
        )
    });
    let alibaba = text(|i, r| {
        let op = if r & 1 == 0 { 'R' } else { 'W' };
        format!(
            "{},{op},{},{},{}\n",
            r % 1000,
            (r >> 24) * 4096,
            (1 + (r >> 8) % 64) * 4096,
            1_577_808_144_228_654 + i * 10
        )
    });
    let tencent = text(|i, r| {
        format!(
            "{},{},{},{},{}\n",
            1_538_323_200 + i / 1000,
            r >> 34,
            1 + (r >> 8) % 256,
            r & 1,
            r % 5000
        )
    });
    let cloudphysics = text(|i, r| {
        let op = if r & 1 == 0 { "28" } else { "2a" };
        format!(
            "1,{},{op},{},{}\n",
            5_633_898 + i / 1000,
            (1 + (r >> 8) % 128) * 512,
            r >> 36
        )
    });
    let vscsi: Vec<u8> = numbers()
        .take(RECORDS as usize)
        .flat_map(|r| {
            let request = Request {
                timestamp_ns: r >> 20,
                op: Op::Read,
                offset: (r >> 30) * 512,
                length: 4096,
                volume: 0,
            };
            encode_vscsi(VscsiVersion::V1, 0x28 | ((r & 1) as u16 * 2), &request)
        })
        .collect();
    let oracle: Vec<u8> = numbers()
        .take(RECORDS as usize)
        .enumerate()
        .flat_map(|(i, r)| {
            encode(&OracleGeneralRecord {
                timestamp: i as u32 / 1000,
                obj_id: r >> 30,
                obj_size: 4096,
                next_access_vtime: -1,
            })
        })
        .collect();

    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Elements(RECORDS));
    group.sample_size(20);
    group.bench_function("msr", |b| b.iter(|| count(MsrReader::new(&msr[..], "msr"))));
    // `from_reader` wants an owned ('static) stream; leaking the fixture
    // once keeps a copy of it out of the measured loop.
    let msr_static: &'static [u8] = msr.clone().leak();
    group.bench_function("msr_trace_reader", |b| {
        b.iter(|| {
            let reader = TraceReader::from_reader(
                msr_static,
                "msr",
                &OpenOptions::new(),
                Format::MsrCambridge,
            )
            .unwrap();
            count(reader)
        })
    });
    group.bench_function("systor17", |b| {
        b.iter(|| count(SystorReader::new(&systor[..], "systor")))
    });
    group.bench_function("alibaba", |b| {
        b.iter(|| count(AlibabaReader::new(&alibaba[..], "alibaba")))
    });
    group.bench_function("tencent", |b| {
        b.iter(|| count(TencentReader::new(&tencent[..], "tencent")))
    });
    group.bench_function("cloudphysics_csv", |b| {
        b.iter(|| count(CloudPhysicsCsvReader::new(&cloudphysics[..], "cp")))
    });
    group.bench_function("vscsi", |b| {
        b.iter(|| count(VscsiReader::new(&vscsi[..], "vscsi")))
    });
    group.bench_function("oracle_general", |b| {
        b.iter(|| count(OracleGeneralReader::new(&oracle[..], "oracle")))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
