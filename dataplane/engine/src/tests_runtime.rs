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

fn rb(offset: u64, size: u32, cache_addr: u64) -> RestoredBlock {
    RestoredBlock {
        offset,
        size,
        cache_addr,
        valid: Extent {
            offset,
            len: size as u64,
        },
        dirty: None,
    }
}

#[test]
fn restore_puts_blocks_at_their_addresses_in_lru_order() {
    // Two 256 KiB groups; 32 KiB blocks in the second, a 64 KiB one in the first.
    let mut e = Engine::new(Config::adaptive(1 << 30, 512 * K)).unwrap();
    let mut dirty = rb(1 << 20, 64 << 10, 0);
    dirty.valid = Extent {
        offset: (1 << 20) + 4 * K,
        len: 32 * K,
    };
    dirty.dirty = Some(Extent {
        offset: (1 << 20) + 8 * K,
        len: 8 * K,
    });
    let given = [
        rb(0, 32 << 10, 256 * K + 64 * K),
        dirty,
        rb(64 * K, 32 << 10, 256 * K),
    ];
    e.restore(&given).unwrap();
    e.check_invariants().unwrap();
    let got: Vec<RestoredBlock> = e.cached_blocks().into_iter().map(Into::into).collect();
    assert_eq!(got, given, "same blocks, same LRU order");
    assert_eq!(e.stats().cached_blocks, 3);
    assert_eq!(e.stats().dirty_bytes, 8 * K);
    // The 32 KiB slot between the two given ones is a hole, reused first.
    let p = run(&mut e, Op::Read, 8 << 20, 32 * K);
    assert_eq!(p.fills[0].cache_addr, 256 * K + 32 * K);
    // The 64 KiB group's other slots are holes too.
    let p = run(&mut e, Op::Read, 16 << 20, 64 * K);
    assert_eq!(p.fills[0].cache_addr, 64 * K);
    // A read of the restored dirty block hits its valid bytes.
    let p = run(&mut e, Op::Read, (1 << 20) + 8 * K, 4 * K);
    assert_eq!(p.cache_reads[0].cache_addr, 8 * K);
}

#[test]
fn restore_refuses_inconsistent_input_and_changes_nothing() {
    use RestoreError::*;
    let cfg = Config::adaptive(1 << 30, 512 * K);
    let ok = rb(0, 32 << 10, 0);
    let mut bad_valid = rb(64 * K, 32 << 10, 32 * K);
    bad_valid.valid.len = 40 * K;
    let mut bad_dirty = rb(64 * K, 32 << 10, 32 * K);
    bad_dirty.valid.len = 8 * K;
    bad_dirty.dirty = Some(Extent {
        offset: 68 * K,
        len: 8 * K,
    });
    let cases: Vec<(RestoredBlock, RestoreError)> = vec![
        (
            rb(64 * K, 16 << 10, 32 * K),
            SizeNotConfigured {
                index: 1,
                size: 16 << 10,
            },
        ),
        (
            rb(48 * K, 32 << 10, 32 * K),
            MisalignedOffset {
                index: 1,
                offset: 48 * K,
            },
        ),
        (
            rb((1 << 30) - 32 * K, 64 << 10, 64 * K),
            MisalignedOffset {
                index: 1,
                offset: (1 << 30) - 32 * K,
            },
        ),
        (
            rb(64 * K, 32 << 10, 40 * K),
            MisalignedCacheAddr {
                index: 1,
                cache_addr: 40 * K,
            },
        ),
        (
            rb(64 * K, 32 << 10, 512 * K),
            BeyondCapacity {
                index: 1,
                cache_addr: 512 * K,
            },
        ),
        (
            rb(128 * K, 64 << 10, 64 * K),
            MixedGroup {
                index: 1,
                group_addr: 0,
            },
        ),
        (
            rb(0, 32 << 10, 32 * K),
            OverlapInVolume {
                first: 0,
                second: 1,
            },
        ),
        (
            rb(64 * K, 32 << 10, 0),
            OverlapInCache {
                first: 0,
                second: 1,
            },
        ),
        (
            bad_valid,
            BadExtent {
                index: 1,
                why: "valid extent empty, unaligned or outside the block",
            },
        ),
        (
            bad_dirty,
            BadExtent {
                index: 1,
                why: "dirty extent empty, unaligned or not inside the valid extent",
            },
        ),
    ];
    for (block, want) in cases {
        let mut e = Engine::new(cfg.clone()).unwrap();
        assert_eq!(e.restore(&[ok, block]), Err(want), "{block:?}");
        assert!(!want.to_string().is_empty());
        assert_eq!(e.stats().cached_blocks, 0);
        assert!(e.cached_blocks().is_empty());
        e.check_invariants().unwrap();
        // Nothing changed: a correct restore still works.
        e.restore(&[ok]).unwrap();
        e.check_invariants().unwrap();
    }
    // Only before anything is cached.
    let mut e = Engine::new(cfg).unwrap();
    run(&mut e, Op::Read, 0, 4 * K);
    assert_eq!(e.restore(&[]), Err(NotFresh));
    // Beyond the volume.
    let mut e = Engine::new(Config::adaptive(1 << 20, 512 * K)).unwrap();
    assert_eq!(
        e.restore(&[rb(1 << 20, 32 << 10, 0)]),
        Err(BeyondVolume {
            index: 0,
            offset: 1 << 20
        })
    );
}

#[test]
fn blocks_in_lists_the_blocks_overlapping_a_range() {
    let mut e = Engine::new(Config::adaptive(1 << 30, 1 << 20)).unwrap();
    // 32 KiB at 32 KiB, 64 KiB at 64 KiB, 128 KiB at 128 KiB (figure 5).
    run(&mut e, Op::Read, 128 * K, 128 * K);
    run(&mut e, Op::Read, 48 * K, 184 * K);
    let mut out = Vec::with_capacity(8);
    e.blocks_in(60 * K, 72 * K, &mut out);
    let got: Vec<(u64, u32)> = out.iter().map(|b| (b.offset, b.size)).collect();
    assert_eq!(
        got,
        vec![(32 * K, 32 << 10), (64 * K, 64 << 10), (128 * K, 128 << 10)]
    );
    assert_eq!(out[1], e.lookup(64 * K).unwrap());
    out.clear();
    e.blocks_in(0, 32 * K, &mut out);
    assert!(out.is_empty());
    e.blocks_in(256 * K, 1 << 20, &mut out);
    assert!(out.is_empty());
}

#[test]
fn flush_all_drains_every_dirty_block_in_batches() {
    let mut cfg = Config::fixed(1 << 30, 1 << 20, 32 << 10);
    cfg.flush.batch_blocks = 3;
    cfg.flush.dirty_ratio = 0.9;
    let mut e = Engine::new(cfg).unwrap();
    for i in 0..10 {
        run(&mut e, Op::Write, i * 64 * K, 4 * K);
    }
    assert_eq!(e.dirty_bytes(), 40 * K);
    // Aggressive flushing does nothing below its threshold; All does.
    let mut p = Plan::new();
    assert_eq!(e.plan_flush(FlushKind::Aggressive, &mut p), 0);
    // A write in flight owns one dirty block: the drain skips it and waits.
    let mut w = Plan::new();
    e.plan(Op::Write, 0, 4 * K, &mut w).unwrap();
    let mut batches = Vec::new();
    let mut waited = false;
    while e.dirty_bytes() > 0 || e.writebacks_inflight() > 0 {
        // Two batches in flight at once: the second takes other blocks.
        let n = e.plan_flush(FlushKind::All, &mut p);
        assert!(n <= 3);
        let first = p.writeback_ticket;
        let mut q = Plan::new();
        let m = e.plan_flush(FlushKind::All, &mut q);
        for a in &p.writebacks {
            assert!(q.writebacks.iter().all(|b| b.offset != a.offset));
        }
        assert_eq!(e.writebacks_inflight(), (n > 0) as u32 + (m > 0) as u32);
        e.check_invariants().unwrap();
        if n + m == 0 {
            // Only the block the write owns is dirty.
            assert_eq!(e.dirty_bytes(), 4 * K);
            e.complete(w.ticket.take().unwrap(), Completion::Ok)
                .unwrap();
            waited = true;
            continue;
        }
        for t in [first, q.writeback_ticket].into_iter().flatten() {
            e.complete(t, Completion::Ok).unwrap();
        }
        batches.push(n + m);
    }
    assert!(waited);
    assert_eq!(batches.iter().sum::<u32>(), 10);
    assert_eq!(e.writebacks_inflight(), 0);
    e.check_invariants().unwrap();
}

#[test]
fn a_hole_deallocated_inside_a_block_reads_as_zeroes() {
    // A dirty 32 KiB block; deallocate 8 KiB in its middle.
    let mut e = small(1 << 20);
    run(&mut e, Op::Write, 0, 32 * K);
    let addr = e.lookup(0).unwrap().cache_addr;
    let mut p = Plan::new();
    e.plan(Op::Deallocate, 8 * K, 8 * K, &mut p).unwrap();
    assert_eq!(
        p.cache_zeroes,
        vec![CacheIo {
            offset: 8 * K,
            len: 8 * K,
            cache_addr: addr + 8 * K
        }]
    );
    assert_eq!(
        p.discards,
        vec![Extent {
            offset: 8 * K,
            len: 8 * K
        }]
    );
    // Nobody reads the block before the zeroes land.
    let mut r = Plan::new();
    e.plan(Op::Read, 8 * K, 4 * K, &mut r).unwrap();
    assert_eq!(r.status, PlanStatus::Retry);
    assert_eq!(r.retry_after, p.ticket);
    e.complete(p.ticket.unwrap(), Completion::Ok).unwrap();
    // The block keeps its data around the hole and stays dirty: the
    // write-back carries the zeroes to core too.
    let b = e.lookup(0).unwrap();
    assert_eq!(b.valid.len, 32 * K);
    assert_eq!(b.dirty.unwrap().len, 32 * K);
    let r = run(&mut e, Op::Read, 8 * K, 4 * K);
    assert_eq!(r.cache_reads[0].cache_addr, addr + 8 * K);
    // A failed zeroing leaves a clean block untrusted: it is dropped.
    let mut cfg = Config::fixed(1 << 30, 1 << 20, 32 << 10);
    cfg.group_size = 32 << 10;
    cfg.write_mode = WriteMode::WriteThrough;
    let mut e = Engine::new(cfg).unwrap();
    run(&mut e, Op::Read, 0, 32 * K);
    e.plan(Op::Deallocate, 8 * K, 4 * K, &mut p).unwrap();
    e.complete(p.ticket.unwrap(), Completion::Failed).unwrap();
    assert!(e.lookup(0).is_none());
    assert_eq!(e.dropped().len(), 1);
    e.check_invariants().unwrap();
}

#[test]
fn readers_do_not_stop_write_backs() {
    let mut cfg = Config::fixed(1 << 30, 64 * K, 32 << 10);
    cfg.group_size = 32 << 10;
    let mut e = Engine::new(cfg).unwrap();
    run(&mut e, Op::Write, 0, 32 * K);
    run(&mut e, Op::Write, 32 * K, 32 * K);
    // Overlapping readers keep both blocks pinned all the time.
    let mut r0 = Plan::new();
    let mut r1 = Plan::new();
    e.plan(Op::Read, 0, 64 * K, &mut r0).unwrap();
    // Flushing writes the read block back anyway, once.
    let mut f = Plan::new();
    assert_eq!(e.plan_flush(FlushKind::Lazy, &mut f), 2);
    let mut again = Plan::new();
    assert_eq!(
        e.plan_flush(FlushKind::All, &mut again),
        0,
        "already in flight"
    );
    e.plan(Op::Read, 0, 64 * K, &mut r1).unwrap();
    assert_eq!(r1.status, PlanStatus::Ready, "write-backs only read");
    e.complete(r0.ticket.unwrap(), Completion::Ok).unwrap();
    e.complete(f.writeback_ticket.unwrap(), Completion::Ok)
        .unwrap();
    assert_eq!(e.dirty_bytes(), 0);
    e.check_invariants().unwrap();
    e.complete(r1.ticket.unwrap(), Completion::Ok).unwrap();
    // Eviction too: a full cache of dirty blocks under a reader cleans them
    // for the next miss.
    run(&mut e, Op::Write, 0, 64 * K);
    e.plan(Op::Read, 0, 64 * K, &mut r0).unwrap();
    let mut m = Plan::new();
    e.plan(Op::Read, 1 << 20, 32 * K, &mut m).unwrap();
    assert_eq!(m.core_reads.len(), 1, "nothing clean to replace yet");
    assert_eq!(m.writebacks.iter().map(|w| w.len).sum::<u64>(), 64 * K);
    e.check_invariants().unwrap();
}

#[test]
fn a_reader_after_a_refused_writer_waits_its_turn() {
    let mut e = small(1 << 20);
    run(&mut e, Op::Write, 0, 32 * K);
    let mut r1 = Plan::new();
    e.plan(Op::Read, 0, 4 * K, &mut r1).unwrap();
    assert_eq!(r1.status, PlanStatus::Ready);
    // The writer is refused while r1 reads.
    let mut w = Plan::new();
    e.plan(Op::Write, 4 * K, 4 * K, &mut w).unwrap();
    assert_eq!(w.status, PlanStatus::Retry);
    assert_eq!(w.retry_after, r1.ticket);
    // A reader arriving after it does not get in ahead of it...
    let mut r2 = Plan::new();
    e.plan(Op::Read, 8 * K, 4 * K, &mut r2).unwrap();
    assert_eq!(r2.status, PlanStatus::Retry);
    assert_eq!(r2.retry_after, r1.ticket);
    // ...nor does a write-back (it would prolong the writer's wait).
    let mut f = Plan::new();
    assert_eq!(e.plan_flush(FlushKind::All, &mut f), 0);
    assert_eq!(e.dirty_bytes(), 32 * K);
    e.check_invariants().unwrap();
    // After r1, the runtime retries in arrival order: the writer first.
    e.complete(r1.ticket.unwrap(), Completion::Ok).unwrap();
    e.plan(Op::Write, 4 * K, 4 * K, &mut w).unwrap();
    assert_eq!(w.status, PlanStatus::Ready);
    e.plan(Op::Read, 8 * K, 4 * K, &mut r2).unwrap();
    assert_eq!(r2.status, PlanStatus::Retry);
    assert_eq!(r2.retry_after, w.ticket);
    e.complete(w.ticket.unwrap(), Completion::Ok).unwrap();
    e.plan(Op::Read, 8 * K, 4 * K, &mut r2).unwrap();
    assert_eq!(r2.status, PlanStatus::Ready);
    assert_eq!(e.plan_flush(FlushKind::All, &mut f), 1);
    e.check_invariants().unwrap();
}

#[test]
fn an_abandoned_refused_writer_stops_blocking_when_the_readers_finish() {
    let mut e = small(1 << 20);
    run(&mut e, Op::Read, 0, 32 * K);
    let mut r1 = Plan::new();
    e.plan(Op::Read, 0, 4 * K, &mut r1).unwrap();
    let mut w = Plan::new();
    e.plan(Op::Write, 0, 4 * K, &mut w).unwrap();
    assert_eq!(w.status, PlanStatus::Retry);
    // The writer is never retried (its host went away). The mark dies with
    // the last reader's pin.
    e.complete(r1.ticket.unwrap(), Completion::Ok).unwrap();
    let p = run(&mut e, Op::Read, 0, 4 * K);
    assert_eq!(p.cache_reads.len(), 1);
}

#[test]
fn live_reconfiguration_keeps_cached_blocks() {
    let mut e = small(256 * K);
    run(&mut e, Op::Write, 0, 32 * K);
    run(&mut e, Op::Read, 64 * K, 32 * K);
    let before = e.cached_blocks();
    // Leaving write-back with dirty data is refused until it is flushed.
    let err = e.set_write_mode(WriteMode::WriteThrough).unwrap_err();
    assert_eq!(
        err,
        ReconfigureError::Dirty {
            dirty_bytes: 32 * K
        }
    );
    assert!(err.to_string().contains("flush first"), "{err}");
    assert_eq!(e.config().write_mode, WriteMode::WriteBack);
    let mut p = Plan::new();
    assert_eq!(e.plan_flush(FlushKind::All, &mut p), 1);
    e.complete(p.writeback_ticket.unwrap(), Completion::Ok)
        .unwrap();
    e.set_write_mode(WriteMode::WriteThrough).unwrap();
    let p = run(&mut e, Op::Write, 0, 4 * K);
    assert_eq!(p.core_writes.len(), 1);
    assert_eq!(p.cache_writes.len(), 1, "the cached block is updated");
    // Written through with dirty data cached: it stays dirty and is
    // cleaned as before; new writes go to core.
    e.set_write_mode(WriteMode::WriteBack).unwrap();
    run(&mut e, Op::Write, 0, 8 * K);
    e.set_write_mode_keeping_dirty(WriteMode::WriteThrough)
        .unwrap();
    let p = run(&mut e, Op::Write, 0, 4 * K);
    assert_eq!((p.core_writes.len(), p.cache_writes.len()), (1, 1));
    assert_eq!(e.stats().dirty_bytes, 8 * K, "the dirty extent stays");
    let mut p = Plan::new();
    e.plan_flush(FlushKind::All, &mut p);
    e.complete(p.writeback_ticket.unwrap(), Completion::Ok)
        .unwrap();
    assert_eq!(e.stats().dirty_bytes, 0);
    e.check_invariants().unwrap();
    assert_eq!(e.dirty_bytes(), 0);
    // Entering write-back needs nothing.
    e.set_write_mode(WriteMode::WriteBack).unwrap();
    // Policies and flushing parameters change; the blocks stay.
    e.set_admission(AdmissionConfig::NHit {
        n: 2,
        table_slots: 64,
    })
    .unwrap();
    e.set_eviction(EvictionConfig::Lazy { para: 2, k: 1.0 })
        .unwrap();
    assert_eq!(e.policy_names(), ("nhit", "lazy"));
    let bad = FlushConfig {
        dirty_ratio: 2.0,
        batch_blocks: 1,
    };
    assert!(matches!(
        e.set_flush(bad),
        Err(ReconfigureError::Invalid(_))
    ));
    e.set_flush(FlushConfig {
        dirty_ratio: 0.0,
        batch_blocks: 1,
    })
    .unwrap();
    let offsets = |v: Vec<BlockInfo>| {
        v.iter()
            .map(|b| b.offset)
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(offsets(e.cached_blocks()), offsets(before));
    e.check_invariants().unwrap();
    // The new policies run: a hit, then misses that fill the cache and
    // make the lazy policy judge victims it was told about.
    let p = run(&mut e, Op::Read, 64 * K, 4 * K);
    assert_eq!(p.cache_reads.len(), 1);
    for i in 0..40 {
        for _ in 0..2 {
            run(&mut e, Op::Read, (1 << 20) + i * 32 * K, 32 * K);
        }
    }
    assert!(e.stats().evicted_blocks > 0 || e.stats().lazy_keeps > 0);
    e.check_invariants().unwrap();
}

#[test]
fn resize_grows_and_shrinks_keeping_what_fits() {
    let mut e = small(128 * K); // four 32 KiB groups
    for i in 0..4 {
        run(&mut e, Op::Read, i * 32 * K, 32 * K);
    }
    let mut evicted = Vec::new();
    // Growing adds free space: the next miss evicts nothing.
    e.resize(256 * K, &mut evicted).unwrap();
    assert!(evicted.is_empty());
    assert_eq!(e.capacity(), 256 * K);
    e.check_invariants().unwrap();
    let p = run(&mut e, Op::Read, 1 << 20, 32 * K);
    assert!(p.evicted.is_empty());
    assert!(p.fills[0].cache_addr >= 128 * K);
    // A dirty block beyond the new capacity refuses the shrink.
    run(&mut e, Op::Write, 1 << 20, 4 * K);
    let dirty_addr = e.lookup(1 << 20).unwrap().cache_addr;
    assert_eq!(
        e.resize(128 * K, &mut evicted),
        Err(ResizeError::Dirty {
            group_addr: dirty_addr
        })
    );
    assert!(e
        .resize(128 * K, &mut evicted)
        .unwrap_err()
        .to_string()
        .contains("flush first"));
    let mut f = Plan::new();
    e.plan_flush(FlushKind::All, &mut f);
    e.complete(f.writeback_ticket.unwrap(), Completion::Ok)
        .unwrap();
    // So does in-flight work.
    let mut r = Plan::new();
    e.plan(Op::Read, 1 << 20, 4 * K, &mut r).unwrap();
    assert_eq!(
        e.resize(128 * K, &mut evicted),
        Err(ResizeError::Pinned {
            group_addr: dirty_addr
        })
    );
    assert_eq!(e.capacity(), 256 * K);
    e.complete(r.ticket.unwrap(), Completion::Ok).unwrap();
    // Too small for one group.
    assert!(matches!(
        e.resize(16 * K, &mut evicted),
        Err(ResizeError::Invalid(_))
    ));
    e.resize(128 * K, &mut evicted).unwrap();
    assert_eq!(
        evicted,
        vec![Evicted {
            offset: 1 << 20,
            size: 32 << 10,
            cache_addr: dirty_addr
        }]
    );
    assert!(e.lookup(1 << 20).is_none());
    assert_eq!(e.stats().cached_blocks, 4);
    e.check_invariants().unwrap();
    // Everything allocated afterwards lies inside the new capacity.
    for i in 0..8 {
        let p = run(&mut e, Op::Read, (2 << 20) + i * 32 * K, 32 * K);
        assert!(p.fills.iter().all(|f| f.cache_addr < 128 * K));
    }
}

#[test]
fn a_refused_writer_is_not_overtaken_on_blocks_nobody_held() {
    let mut e = small(1 << 20);
    run(&mut e, Op::Read, 0, 64 * K); // blocks A = 0..32K, B = 32..64K
    let mut r1 = Plan::new();
    e.plan(Op::Read, 0, 4 * K, &mut r1).unwrap();
    // The writer needs A (held by r1) and B (free).
    let mut w = Plan::new();
    e.plan(Op::Write, 0, 64 * K, &mut w).unwrap();
    assert_eq!(w.status, PlanStatus::Retry);
    assert!(w.waiting.is_some());
    // A reader of B arriving later would otherwise hold B when the writer
    // retries after r1, and so on for ever.
    let mut r2 = Plan::new();
    e.plan(Op::Read, 40 * K, 4 * K, &mut r2).unwrap();
    assert_eq!(r2.status, PlanStatus::Retry);
    assert_eq!(r2.retry_after, r1.ticket);
    // Unrelated requests are not held up.
    let p = run(&mut e, Op::Read, 1 << 20, 4 * K);
    assert_eq!(p.status, PlanStatus::Ready);
    e.check_invariants().unwrap();
    e.complete(r1.ticket.unwrap(), Completion::Ok).unwrap();
    // In arrival order: the writer, then the reader (behind the writer).
    e.plan(Op::Write, 0, 64 * K, &mut w).unwrap();
    assert_eq!(w.status, PlanStatus::Ready);
    assert_eq!(w.waiting, None);
    e.plan(Op::Read, 40 * K, 4 * K, &mut r2).unwrap();
    assert_eq!(r2.status, PlanStatus::Retry);
    assert_eq!(r2.retry_after, w.ticket);
    e.complete(w.ticket.unwrap(), Completion::Ok).unwrap();
    e.plan(Op::Read, 40 * K, 4 * K, &mut r2).unwrap();
    assert_eq!(r2.status, PlanStatus::Ready);
    e.check_invariants().unwrap();
}

#[test]
fn grow_volume_keeps_blocks_and_accepts_the_new_end() {
    let mut e = small(128 * K);
    let end = 1u64 << 30;
    run(&mut e, Op::Write, end - 32 * K, 32 * K);
    let mut p = Plan::new();
    assert_eq!(
        e.plan(Op::Read, end, 4 * K, &mut p),
        Err(RequestError::OutOfRange)
    );
    e.grow_volume(2 << 30).unwrap();
    assert!(e.lookup(end - 32 * K).is_some(), "a cached block was lost");
    run(&mut e, Op::Read, end, 32 * K);
    assert!(e.lookup(end).is_some());
    e.check_invariants().unwrap();
    // Never smaller, and the size must stay sector-aligned; nothing changes.
    assert!(matches!(
        e.grow_volume(1 << 30),
        Err(ReconfigureError::Invalid(_))
    ));
    assert!(e.grow_volume((2 << 30) + 1).is_err());
    let mut p = Plan::new();
    assert_eq!(
        e.plan(Op::Read, (2 << 30) - 4 * K, 8 * K, &mut p),
        Err(RequestError::OutOfRange)
    );
}
