//! Tests of what the dataplane runtime relies on: removals it must persist,
//! what a refused request waits for, restore, block listing, flushing
//! everything, live reconfiguration and resizing.

use crate::*;

const K: u64 = 1024;

/// Plans, checks invariants, completes the tickets successfully.
fn run(e: &mut Engine, op: Op, offset: u64, len: u64) -> Plan {
    let mut p = Plan::new();
    e.plan(op, offset, len, &mut p).unwrap();
    assert_eq!(p.status, PlanStatus::Ready);
    e.check_invariants().unwrap();
    for t in [p.ticket, p.writeback_ticket].into_iter().flatten() {
        e.complete(t, Completion::Ok).unwrap();
    }
    e.check_invariants().unwrap();
    p
}

/// Fixed 32 KiB blocks in 32 KiB groups, write-back.
fn small(capacity: u64) -> Engine {
    let mut cfg = Config::fixed(1 << 30, capacity, 32 << 10);
    cfg.group_size = 32 << 10;
    Engine::new(cfg).unwrap()
}

#[test]
fn every_removal_while_planning_names_its_cache_address() {
    let mut e = small(64 * K);
    run(&mut e, Op::Read, 0, 32 * K);
    run(&mut e, Op::Read, 32 * K, 32 * K);
    let a0 = e.lookup(0).unwrap().cache_addr;
    // Replacement reuses the LRU block's slot.
    let p = run(&mut e, Op::Read, 1 << 20, 32 * K);
    assert_eq!(
        p.evicted,
        vec![Evicted {
            offset: 0,
            size: 32 << 10,
            cache_addr: a0
        }]
    );
    assert_eq!(p.fills[0].cache_addr, a0);
    // Deallocate invalidates a whole block: reported too.
    let a1 = e.lookup(32 * K).unwrap().cache_addr;
    let p = run(&mut e, Op::Deallocate, 32 * K, 32 * K);
    assert_eq!(
        p.evicted,
        vec![Evicted {
            offset: 32 * K,
            size: 32 << 10,
            cache_addr: a1
        }]
    );
    // A failed write drops the clean block it touched: reported by dropped().
    let a2 = e.lookup(1 << 20).unwrap().cache_addr;
    let mut p = Plan::new();
    e.plan(Op::Write, 1 << 20, 4 * K, &mut p).unwrap();
    e.complete(p.ticket.unwrap(), Completion::Failed).unwrap();
    assert_eq!(
        e.dropped(),
        &[Evicted {
            offset: 1 << 20,
            size: 32 << 10,
            cache_addr: a2
        }]
    );
    e.check_invariants().unwrap();
}

#[test]
fn retry_names_the_ticket_to_wait_for() {
    let mut e = small(1 << 20);
    let mut fill = Plan::new();
    e.plan(Op::Read, 0, 4 * K, &mut fill).unwrap();
    let mut p = Plan::new();
    e.plan(Op::Read, 8 * K, 4 * K, &mut p).unwrap();
    assert_eq!(p.status, PlanStatus::Retry);
    assert_eq!(p.retry_after, fill.ticket);
    e.complete(fill.ticket.unwrap(), Completion::Ok).unwrap();
    // Two readers; a writer waits for one of them.
    let mut r1 = Plan::new();
    e.plan(Op::Read, 0, 4 * K, &mut r1).unwrap();
    let mut r2 = Plan::new();
    e.plan(Op::Read, 0, 4 * K, &mut r2).unwrap();
    e.plan(Op::Write, 0, 4 * K, &mut p).unwrap();
    assert_eq!(p.status, PlanStatus::Retry);
    let first = p.retry_after.unwrap();
    assert!([r1.ticket, r2.ticket].contains(&Some(first)));
    e.complete(first, Completion::Ok).unwrap();
    e.plan(Op::Write, 0, 4 * K, &mut p).unwrap();
    assert_eq!(p.status, PlanStatus::Retry);
    let second = p.retry_after.unwrap();
    assert_ne!(second, first);
    e.complete(second, Completion::Ok).unwrap();
    e.plan(Op::Write, 0, 4 * K, &mut p).unwrap();
    assert_eq!(p.status, PlanStatus::Ready);
    assert_eq!(p.retry_after, None);
}
