//! The largest volume the engine caches (`config::max_volume_size`): the
//! last block of a volume at the limit is cached and found again like any
//! other, and one block more is refused, at creation and when growing.

use engine::config::max_volume_size;
use engine::{
    Completion, Config, ConfigError, Engine, Op, Plan, PlanStatus, ReconfigureError, WriteMode,
};

/// Writes then reads `len` bytes at `offset`; returns whether the read hit.
fn write_then_read(e: &mut Engine, offset: u64, len: u64) -> bool {
    let mut plan = Plan::new();
    for op in [Op::Write, Op::Read] {
        e.plan(op, offset, len, &mut plan).unwrap();
        assert_eq!(plan.status, PlanStatus::Ready);
        for t in [plan.ticket, plan.writeback_ticket].into_iter().flatten() {
            e.complete(t, Completion::Ok).unwrap();
        }
    }
    e.stats().read.hit_requests == 1
}

#[test]
fn the_last_block_of_the_largest_volume_is_cached() {
    for (sizes, group) in [
        (vec![4u32 << 10], 256u32 << 10),
        (vec![4 << 10, 64 << 10, 1 << 20], 1 << 20),
        (vec![32 << 10, 64 << 10, 128 << 10, 256 << 10], 256 << 10),
    ] {
        let volume = max_volume_size(sizes[0]);
        let mut cfg = Config::adaptive(volume, 16 << 20);
        cfg.block_sizes = sizes.clone();
        cfg.group_size = group;
        cfg.write_mode = WriteMode::WriteThrough;
        // The last 4 KiB and the last 1 MiB of the volume: the largest block
        // numbers each size class can hold.
        for len in [4096, 1 << 20] {
            let mut e = Engine::new(cfg.clone()).unwrap();
            assert!(write_then_read(&mut e, volume - len, len), "{sizes:?}");
            let mut plan = Plan::new();
            assert!(e.plan(Op::Read, volume, 4096, &mut plan).is_err());
        }
    }
}

#[test]
fn one_block_more_is_refused_with_the_limit() {
    let limit = max_volume_size(4096);
    let mut cfg = Config::fixed(limit + 4096, 1 << 20, 4096);
    cfg.sector_size = 4096;
    let err = Engine::new(cfg.clone()).expect_err("over the limit");
    assert_eq!(
        err,
        ConfigError::VolumeTooLarge {
            volume_size: limit + 4096,
            smallest_block: 4096
        }
    );
    assert!(err.to_string().contains(&limit.to_string()), "{err}");

    cfg.volume_size = 1 << 40;
    let mut e = Engine::new(cfg).unwrap();
    e.grow_volume(limit).unwrap();
    assert!(matches!(
        e.grow_volume(limit + 4096),
        Err(ReconfigureError::Invalid(
            ConfigError::VolumeTooLarge { .. }
        ))
    ));
    // Refused growth changes nothing.
    let mut plan = Plan::new();
    assert!(e.plan(Op::Read, limit, 4096, &mut plan).is_err());
    e.plan(Op::Read, limit - 4096, 4096, &mut plan).unwrap();
}
