//! A trace of 2,000 volumes of 4 TiB each (8,000 TiB laid end to end, more
//! than the engine indexes even with 1 MiB blocks) replays at 4 KiB blocks
//! under the sparse layout, which `auto` picks, with every volume kept
//! apart: all volumes use the same offsets, so any two sharing an address
//! would turn first reads into hits.

mod common;

use common::{sim, write_tencent, Req};
use engine::Config;
use rackcache_sim::layout::LayoutKind;
use rackcache_sim::replay::{replay, FlushPolicy, Profile, SimError, TraceSpec};
use testkit::TempDir;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const TIB: u64 = 1 << 40;
const VOLUMES: u32 = 2000;

/// Per volume, in this order, each step for every volume before the next:
/// a 64 KiB read and its re-read (hit), an 8 KiB write at the volume's last
/// bytes and a read of it (hit), a 32 KiB read across the 1 MiB boundary at
/// 2 TiB + 1 MiB and its re-read (hit), a 1 KiB read at 3 TiB + 512 and a
/// 512-byte read in the same 4 KiB (hit). 5 regions of 1 MiB per volume.
fn steps() -> [(u64, u64, bool); 8] {
    [
        (TIB, 64 * KIB, false),
        (TIB, 64 * KIB, false),
        (4 * TIB - 8 * KIB, 8 * KIB, true),
        (4 * TIB - 8 * KIB, 8 * KIB, false),
        (2 * TIB + MIB - 16 * KIB, 32 * KIB, false),
        (2 * TIB + MIB - 16 * KIB, 32 * KIB, false),
        (3 * TIB + 512, KIB, false),
        (3 * TIB + 2 * KIB, 512, false),
    ]
}

/// The synthetic trace.
pub fn trace() -> Vec<Req> {
    let mut out = Vec::new();
    for (i, (offset, len, write)) in steps().into_iter().enumerate() {
        for volume in 0..VOLUMES {
            out.push(Req {
                secs: i as u64,
                volume: volume * 7 + 3,
                offset,
                len,
                write,
            });
        }
    }
    out
}

#[test]
fn two_thousand_volumes_of_4_tib_replay_at_4_kib() {
    let dir = TempDir::new("rackcache-sim-volumes");
    let path = dir.path().join("tencent-2000x4TiB.csv");
    write_tencent(&path, &trace());
    let mut spec = TraceSpec::new(&path);
    spec.format = Some(traces::Format::TencentCbs);

    let profile = Profile::scan(&spec, 4096).unwrap();
    assert_eq!(profile.layout.kind(), LayoutKind::Sparse);
    assert_eq!(profile.volumes(), VOLUMES as usize);
    assert_eq!(profile.address_space, VOLUMES as u64 * 5 * MIB);
    // 16 + 2 + 8 + 1 distinct 4 KiB blocks per volume.
    assert_eq!(profile.working_set_bytes, VOLUMES as u64 * 27 * 4096);

    let sims = [
        sim("fixed-4KiB", Config::fixed(1, 1, 4096), FlushPolicy::None),
        sim(
            "adaptive-4K-256K",
            Config {
                block_sizes: vec![4 << 10, 32 << 10, 256 << 10],
                ..Config::adaptive(1, 1)
            },
            FlushPolicy::None,
        ),
    ];
    for s in &sims {
        let r = replay(&spec, &profile, s, 1 << 30, |_| {}).unwrap();
        assert_eq!((r.reads, r.writes), (7 * VOLUMES as u64, VOLUMES as u64));
        // The 2nd, 4th, 6th and 7th read of each volume hit, no other.
        assert_eq!(r.read_hit_ratio, 4.0 / 7.0, "{}", s.label);
        // Misses read 64 + 32 + 4 KiB from core per volume.
        assert_eq!(r.read_from_core, VOLUMES as u64 * 100 * KIB, "{}", s.label);
        assert_eq!(r.dirty_bytes_end, VOLUMES as u64 * 8 * KIB, "{}", s.label);
    }

    // One volume alone: the same figures per volume. Its 4 TiB fit the
    // engine, so `auto` lays it out densely.
    spec.volume = Some(3 + 7 * 1234);
    let one = Profile::scan(&spec, 4096).unwrap();
    assert_eq!(one.layout.kind(), LayoutKind::Dense);
    assert_eq!((one.volumes(), one.address_space), (1, 4 * TIB));
    let r = replay(&spec, &one, &sims[0], 1 << 30, |_| {}).unwrap();
    assert_eq!((r.reads, r.read_hit_ratio), (7, 4.0 / 7.0));
    spec.volume = None;

    // Laid end to end, the volumes fit no block size.
    let dense = Profile::scan_with_layout(&spec, 4096, LayoutKind::Dense).unwrap();
    assert_eq!(dense.address_space, VOLUMES as u64 * 4 * TIB);
    let fixed_1m = sim(
        "fixed-1MiB",
        Config::fixed(1, 1, 1 << 20),
        FlushPolicy::None,
    );
    for s in [&sims[0], &fixed_1m] {
        let e = replay(&spec, &dense, s, 1 << 30, |_| {}).unwrap_err();
        assert!(matches!(e, SimError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("--layout sparse"), "{e}");
    }
}

#[test]
fn the_command_line_reports_the_sparse_layout() {
    let dir = TempDir::new("rackcache-sim-volumes-cli");
    let path = dir.path().join("tencent-2000x4TiB.csv");
    write_tencent(&path, &trace());
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rackcache-sim"))
            .args([
                "--format",
                "tencent",
                "--mode",
                "fixed",
                "--block-sizes",
                "4K",
            ])
            .args(["--cache-size", "1G"])
            .args(extra)
            .arg(&path)
            .output()
            .expect("run rackcache-sim");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, table, err) = run(&[]);
    assert!(ok, "{err}");
    assert!(table.contains("2000 volume(s)"), "{table}");
    assert!(
        table.contains("layout sparse over 9.77GiB (10000 regions of 1 MiB in 8000 runs)"),
        "{table}"
    );
    assert!(table.contains("57.14%"), "{table}");
    let (ok, json, err) = run(&["--json"]);
    assert!(ok, "{err}");
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["volumes"], 2000);
    assert_eq!(json["layout"], "sparse");
    assert_eq!(json["address_space"], 2000 * 5 * MIB);
    let (ok, _, err) = run(&["--layout", "dense"]);
    assert!(!ok);
    assert!(
        err.contains("dense layout spans 8796093022208000 bytes"),
        "{err}"
    );
}
