//! [`Engine::read_hit_now`] against [`Engine::plan`]: the same hits, the
//! same records, and nothing answered at once that planning would refuse
//! or fill.

use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};

use crate::*;

const K: u64 = 1024;

/// The same requests for both engines.
fn rng() -> TestRng {
    TestRng::deterministic_rng(RngAlgorithm::ChaCha)
}

fn below(rng: &mut TestRng, n: u64) -> u64 {
    rng.next_u64() % n
}

fn plan_and_complete(e: &mut Engine, op: Op, offset: u64, len: u64) -> Plan {
    let mut p = Plan::new();
    e.plan(op, offset, len, &mut p).unwrap();
    assert_eq!(p.status, PlanStatus::Ready);
    for t in [p.ticket, p.writeback_ticket].into_iter().flatten() {
        e.complete(t, Completion::Ok).unwrap();
    }
    p
}

fn cached(e: &Engine) -> Vec<(u64, u32, u64)> {
    let mut v: Vec<_> = e
        .cached_blocks()
        .iter()
        .map(|b| (b.offset, b.size, b.cache_addr))
        .collect();
    v.sort_unstable();
    v
}

/// Two engines see the same mixed requests; one answers reads at once
/// where it can. Every read answered at once is one the other plans as a
/// single cache read at the same address, and both end with the same
/// blocks, addresses and counters (evictions and the online choice of
/// policy included).
#[test]
fn reads_answered_at_once_match_planned_hits() {
    for cfg in [
        Config::adaptive(64 << 20, 4 << 20),
        Config {
            fill_size: FillSize::Locality,
            ..Config::adaptive(64 << 20, 4 << 20)
        },
        Config::fixed(64 << 20, 4 << 20, 4096),
    ] {
        let (mut planned, mut fast) =
            (Engine::new(cfg.clone()).unwrap(), Engine::new(cfg).unwrap());
        let mut rng = rng();
        let (mut at_once, mut dirty_at_once) = (0, 0);
        for i in 0..20_000 {
            // A hot 2 MiB and a cold 64 MiB, 4-64 KiB requests, 1 in 8 writes.
            let span = if below(&mut rng, 4) == 0 {
                64 << 20
            } else {
                2 << 20
            };
            let len = (1 + below(&mut rng, 16)) * 4 * K;
            let offset = below(&mut rng, (span - len) / 4096) * 4096;
            let op = if below(&mut rng, 8) == 0 {
                Op::Write
            } else {
                Op::Read
            };
            let p = plan_and_complete(&mut planned, op, offset, len);
            if op == Op::Read {
                if let Some(hit) = fast.read_hit_now(offset, len) {
                    at_once += 1;
                    dirty_at_once += usize::from(hit.dirty_block.is_some());
                    let one = vec![CacheIo {
                        offset,
                        len,
                        cache_addr: hit.cache_addr,
                    }];
                    let block = fast.lookup(offset).expect("a hit's block");
                    assert_eq!(
                        hit.dirty_block,
                        block.dirty.is_some().then_some(block),
                        "request {i}"
                    );
                    assert_eq!(p.cache_reads, one, "request {i}");
                    assert!(p.fills.is_empty() && p.core_reads.is_empty(), "request {i}");
                    continue;
                }
            }
            plan_and_complete(&mut fast, op, offset, len);
        }
        assert!(at_once > 500, "{at_once} reads answered at once");
        // Write-back (the default): some of them read dirty blocks.
        assert!(dirty_at_once > 50, "{dirty_at_once} of dirty blocks");
        assert_eq!(fast.stats(), planned.stats());
        assert_eq!(cached(&fast), cached(&planned));
        assert_eq!(fast.policy_names(), planned.policy_names());
        fast.check_invariants().unwrap();
    }
}

/// Reads that need more than one cached block's valid bytes, or whose
/// block a write holds, or that come after a refused request, or that are
/// not whole sectors inside the volume: planned, with nothing recorded.
#[test]
fn reads_planning_must_see_are_not_answered_at_once() {
    let mut e = Engine::new(Config::adaptive(64 << 20, 4 << 20)).unwrap();
    plan_and_complete(&mut e, Op::Read, 0, 64 * K);
    plan_and_complete(&mut e, Op::Read, 64 * K, 32 * K);
    let before = e.stats().clone();
    assert_eq!(e.read_hit_now(32 * K, 48 * K), None, "two blocks");
    assert_eq!(e.read_hit_now(1 << 20, 4 * K), None, "not cached");
    assert_eq!(e.read_hit_now(512, 4 * K), None, "not sector-aligned");
    assert_eq!(
        e.read_hit_now((64 << 20) - 4 * K, 8 * K),
        None,
        "past the end"
    );
    assert_eq!(e.read_hit_now(0, 0), None, "empty");
    // Write-back: a 4 KiB write miss leaves a partly valid block.
    plan_and_complete(&mut e, Op::Write, 2 << 20, 4 * K);
    assert_eq!(
        e.read_hit_now((2 << 20) + 4 * K, 4 * K),
        None,
        "invalid part"
    );
    assert_eq!(e.stats().read, before.read, "nothing recorded");

    // A write in flight holds block 0; a read of it is refused and waits.
    let mut w = Plan::new();
    e.plan(Op::Write, 0, 4 * K, &mut w).unwrap();
    assert_eq!(e.read_hit_now(8 * K, 4 * K), None, "held by a write");
    let mut r = Plan::new();
    e.plan(Op::Read, 8 * K, 4 * K, &mut r).unwrap();
    assert_eq!(r.status, PlanStatus::Retry);
    assert_eq!(e.read_hit_now(64 * K, 4 * K), None, "a refused read waits");
    e.complete(w.ticket.unwrap(), Completion::Ok).unwrap();
    e.plan(Op::Read, 8 * K, 4 * K, &mut r).unwrap();
    assert_eq!(r.status, PlanStatus::Ready);
    e.complete(r.ticket.unwrap(), Completion::Ok).unwrap();
    let block = e.lookup(64 * K).unwrap();
    assert_eq!(
        e.read_hit_now(68 * K, 4 * K),
        Some(HitNow {
            cache_addr: block.cache_addr + 4 * K,
            dirty_block: None,
        }),
        "a clean block"
    );
}
