//! A mirror's engine: dirty data cleaned only by marks
//! ([`Engine::plan_flush_range`]), never written back to make room
//! ([`Engine::set_hold_dirty`]).

use crate::*;

const K: u64 = 1024;

fn mirror_engine(cache: u64) -> Engine {
    let mut cfg = Config::fixed(1 << 30, cache, 32 << 10);
    cfg.group_size = 32 << 10;
    cfg.write_mode = WriteMode::WriteBack;
    let mut e = Engine::new(cfg).unwrap();
    e.set_hold_dirty(true);
    e
}

fn run(e: &mut Engine, op: Op, offset: u64, len: u64) -> Plan {
    let mut p = Plan::new();
    e.plan(op, offset, len, &mut p).unwrap();
    assert_eq!(p.status, PlanStatus::Ready);
    if let Some(t) = p.ticket {
        e.complete(t, Completion::Ok).unwrap();
    }
    p
}

#[test]
fn a_mark_cleans_only_blocks_whose_dirty_bytes_it_covers() {
    let mut e = mirror_engine(128 * K);
    run(&mut e, Op::Write, 0, 8 * K);
    run(&mut e, Op::Write, 32 * K, 32 * K);
    assert_eq!(e.dirty_bytes(), 40 * K);
    let mut p = Plan::new();
    // Covers the second block's dirty bytes in part only: nothing.
    assert_eq!(e.plan_flush_range(32 * K, 16 * K, &mut p), 0);
    assert!(p.writeback_ticket.is_none());
    // Covers the first block's whole dirty range (and clean bytes around).
    assert_eq!(e.plan_flush_range(0, 16 * K, &mut p), 1);
    e.complete(p.writeback_ticket.unwrap(), Completion::Ok)
        .unwrap();
    assert_eq!(e.dirty_bytes(), 32 * K);
    assert_eq!(e.lookup(0).unwrap().dirty, None, "clean, still cached");
    assert_eq!(e.stats().write_to_core, 0, "a mark writes nothing");
    e.check_invariants().unwrap();
}

#[test]
fn a_block_a_write_holds_is_left_dirty() {
    let mut e = mirror_engine(128 * K);
    run(&mut e, Op::Write, 0, 8 * K);
    let mut w = Plan::new();
    e.plan(Op::Write, 0, 4 * K, &mut w).unwrap();
    let mut p = Plan::new();
    assert_eq!(
        e.plan_flush_range(0, 32 * K, &mut p),
        0,
        "the write's data is newer"
    );
    e.complete(w.ticket.unwrap(), Completion::Ok).unwrap();
    assert_eq!(e.dirty_bytes(), 8 * K);
}

#[test]
fn a_full_mirror_never_writes_dirty_victims_back() {
    let mut e = mirror_engine(64 * K);
    run(&mut e, Op::Write, 0, 32 * K);
    run(&mut e, Op::Write, 32 * K, 32 * K);
    // Full of dirty blocks: the miss bypasses and nothing is written back.
    let p = run(&mut e, Op::Write, 1 << 20, 32 * K);
    assert!(p.writebacks.is_empty() && p.writeback_ticket.is_none());
    assert_eq!(p.core_writes.len(), 1, "the write goes to core");
    assert_eq!(e.dirty_bytes(), 64 * K);
    // Marked clean, the blocks are victims like any clean block.
    let mut m = Plan::new();
    assert_eq!(e.plan_flush_range(0, 64 * K, &mut m), 2);
    e.complete(m.writeback_ticket.unwrap(), Completion::Ok)
        .unwrap();
    let p = run(&mut e, Op::Write, 1 << 20, 32 * K);
    assert_eq!(p.evicted.len(), 1);
    assert!(p.core_writes.is_empty());
    e.check_invariants().unwrap();
}
