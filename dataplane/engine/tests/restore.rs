//! Property test: an engine rebuilt by `restore` from `cached_blocks()`
//! answers lookups and plans exactly like the engine it was taken from.
//!
//! The random state is built without invalidations (deallocate, failed
//! I/O): those leave hole orders and group LRU positions that the persisted
//! metadata does not carry (documented in `restore.rs`). A second property
//! includes them and checks lookups, stats and invariants only.

use engine::{
    Completion, Config, Engine, EvictionConfig, Op, Plan, PlanStatus, RestoredBlock, WriteMissFill,
    WriteMode,
};
use proptest::prelude::*;

const SECTOR: u64 = 4096;
const VOLUME_SECTORS: u64 = 1024; // 4 MiB

#[derive(Clone, Debug)]
struct Req {
    op: u8,
    sector: u64,
    sectors: u64,
    ok: bool,
}

fn req() -> impl Strategy<Value = Req> {
    (
        0..4u8,
        0..VOLUME_SECTORS,
        1..24u64,
        prop::bool::weighted(0.9),
    )
        .prop_map(|(op, sector, n, ok)| Req {
            op,
            sector,
            sectors: n.min(VOLUME_SECTORS - sector),
            ok,
        })
}

fn config(sizes: u8, write: u8, fill: u8) -> Config {
    let mut c = Config::adaptive(VOLUME_SECTORS * SECTOR, 512 << 10);
    // Restoring keeps the blocks and their LRU order, not a policy's
    // history (S3-FIFO's queues, sketches, the chooser's shadows): only
    // the two-level LRU plans exactly as before a restart.
    c.eviction = EvictionConfig::TwoLevelLru;
    c.block_sizes = match sizes % 3 {
        0 => vec![4 << 10, 8 << 10, 16 << 10, 32 << 10],
        1 => vec![16 << 10],
        _ => vec![8 << 10, 64 << 10],
    };
    c.group_size = *c.block_sizes.iter().max().unwrap();
    c.write_mode = [
        WriteMode::WriteBack,
        WriteMode::WriteThrough,
        WriteMode::WriteAround,
    ][write as usize % 3];
    c.write_miss_fill = [
        WriteMissFill::Sparse,
        WriteMissFill::HeadTail,
        WriteMissFill::WholeBlock,
    ][fill as usize % 3];
    c.max_victim_scan = 2;
    c
}

/// Plans one request and completes its tickets; `invalidate` allows
/// deallocates and failed completions.
fn apply(e: &mut Engine, r: &Req, invalidate: bool, plan: &mut Plan) {
    let op = match r.op {
        0 | 1 => Op::Read,
        3 if invalidate => Op::Deallocate,
        _ => Op::Write,
    };
    e.plan(op, r.sector * SECTOR, r.sectors * SECTOR, plan)
        .unwrap();
    assert_eq!(plan.status, PlanStatus::Ready, "nothing is in flight");
    let outcome = if r.ok || !invalidate {
        Completion::Ok
    } else {
        Completion::Failed
    };
    if let Some(t) = plan.writeback_ticket {
        e.complete(t, Completion::Ok).unwrap();
    }
    if let Some(t) = plan.ticket {
        e.complete(t, outcome).unwrap();
    }
}

fn restored(e: &Engine) -> Engine {
    let mut fresh = Engine::new(e.config().clone()).unwrap();
    let blocks: Vec<RestoredBlock> = e.cached_blocks().into_iter().map(Into::into).collect();
    fresh.restore(&blocks).unwrap();
    fresh.check_invariants().unwrap();
    fresh
}

/// What two plans must agree on (tickets are numbered from different pools).
fn shape(p: &Plan) -> String {
    format!(
        "{:?} r{:?} f{:?} cr{:?} cw{:?} kw{:?} wb{:?} d{:?} ev{:?} {} t{} w{}",
        p.status,
        p.cache_reads,
        p.fills,
        p.core_reads,
        p.cache_writes,
        p.core_writes,
        p.writebacks,
        p.discards,
        p.evicted,
        p.fills_before_cache_writes,
        p.ticket.is_some(),
        p.writeback_ticket.is_some()
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn restored_engine_plans_like_the_original(
        choice in (any::<u8>(), any::<u8>(), any::<u8>()),
        before in prop::collection::vec(req(), 1..150),
        after in prop::collection::vec(req(), 1..60),
    ) {
        let mut a = Engine::new(config(choice.0, choice.1, choice.2)).unwrap();
        let mut plan = Plan::new();
        for r in &before {
            apply(&mut a, r, false, &mut plan);
        }
        let mut b = restored(&a);
        prop_assert_eq!(a.cached_blocks(), b.cached_blocks());
        prop_assert_eq!(a.stats().dirty_bytes, b.stats().dirty_bytes);
        prop_assert_eq!(a.stats().cached_bytes, b.stats().cached_bytes);
        let mut q = Plan::new();
        for (i, r) in after.iter().enumerate() {
            apply(&mut a, r, false, &mut plan);
            apply(&mut b, r, false, &mut q);
            prop_assert_eq!(shape(&plan), shape(&q), "request {} {:?}", i, r);
        }
        prop_assert_eq!(a.cached_blocks(), b.cached_blocks());
        b.check_invariants().unwrap();
    }

    #[test]
    fn restore_after_invalidations_keeps_every_block(
        choice in (any::<u8>(), any::<u8>(), any::<u8>()),
        before in prop::collection::vec(req(), 1..150),
        after in prop::collection::vec(req(), 1..60),
    ) {
        let mut a = Engine::new(config(choice.0, choice.1, choice.2)).unwrap();
        let mut plan = Plan::new();
        for r in &before {
            apply(&mut a, r, true, &mut plan);
        }
        let mut b = restored(&a);
        let mut x = a.cached_blocks();
        let mut y = b.cached_blocks();
        x.sort_by_key(|b| b.offset);
        y.sort_by_key(|b| b.offset);
        prop_assert_eq!(x, y);
        prop_assert_eq!(a.stats().dirty_bytes, b.stats().dirty_bytes);
        for r in &after {
            apply(&mut b, r, true, &mut plan);
            b.check_invariants().unwrap();
        }
    }
}
