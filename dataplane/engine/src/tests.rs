//! Scenario tests of the whole engine: the paper's examples and each
//! mechanism in isolation. The random, oracle-checked test is
//! `tests/oracle.rs`.

use crate::*;

const K: u64 = 1024;

fn engine(cfg: Config) -> Engine {
    Engine::new(cfg).unwrap()
}

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

fn io(offset: u64, len: u64, cache_addr: u64) -> CacheIo {
    CacheIo {
        offset,
        len,
        cache_addr,
    }
}

#[test]
fn figure_5_through_the_engine() {
    let mut e = engine(Config::adaptive(1 << 30, 1 << 20));
    // Cache a 128 KiB block at 128 KiB: Algorithm 2 covers [128K, 256K)
    // with one 128 KiB block.
    let p = run(&mut e, Op::Read, 128 * K, 128 * K);
    assert_eq!(p.fills, vec![io(128 * K, 128 * K, 0)]);
    // The paper's request: 48 KiB at offset 184 KiB.
    let p = run(&mut e, Op::Read, 48 * K, 184 * K);
    let sizes: Vec<(u64, u32)> = e
        .cached_blocks()
        .iter()
        .map(|b| (b.offset, b.size))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        sizes,
        vec![(32 * K, 32 << 10), (64 * K, 64 << 10), (128 * K, 128 << 10)],
        "one 32 KiB block at 32 KiB and one 64 KiB block at 64 KiB"
    );
    // Each new block is filled whole; the host's 48..64 KiB and 64..128 KiB
    // come from those fills, 128..232 KiB from the cached block.
    assert_eq!(p.fills.len(), 2);
    assert_eq!((p.fills[0].offset, p.fills[0].len), (32 * K, 32 * K));
    assert_eq!((p.fills[1].offset, p.fills[1].len), (64 * K, 64 * K));
    assert_eq!(p.cache_reads, vec![io(128 * K, 104 * K, 0)]);
    assert!(p.core_reads.is_empty());
    // The 32 KiB and 64 KiB blocks live in open groups of their own sizes.
    let b32 = e.lookup(32 * K).unwrap();
    let b64 = e.lookup(64 * K).unwrap();
    assert_ne!(b32.cache_addr / (256 * K), b64.cache_addr / (256 * K));
    assert_eq!(e.stats().read.hit_requests, 0);
    assert_eq!(e.stats().read.hit_bytes, 104 * K);
}

#[test]
fn fixed_size_baseline_uses_one_block_size() {
    let mut e = engine(Config::fixed(1 << 30, 1 << 20, 32 << 10));
    let p = run(&mut e, Op::Read, 48 * K, 184 * K);
    // 32..256 KiB in 32 KiB blocks: 7 blocks, merged into contiguous fills.
    assert_eq!(e.stats().cached_blocks, 7);
    assert_eq!(p.fills.iter().map(|f| f.len).sum::<u64>(), 224 * K);
    assert_eq!(e.stats().alloc[0].blocks, 7);
}

#[test]
fn second_read_hits_only_after_the_fill_completes() {
    let mut e = engine(Config::adaptive(1 << 30, 1 << 20));
    let mut p = Plan::new();
    e.plan(Op::Read, 0, 4 * K, &mut p).unwrap();
    let t = p.ticket.unwrap();
    let mut q = Plan::new();
    e.plan(Op::Read, 8 * K, 4 * K, &mut q).unwrap();
    assert_eq!(
        q.status,
        PlanStatus::Retry,
        "the block is still being filled"
    );
    e.complete(t, Completion::Ok).unwrap();
    e.plan(Op::Read, 8 * K, 4 * K, &mut q).unwrap();
    assert_eq!(q.cache_reads, vec![io(8 * K, 4 * K, 8 * K)]);
    // Two readers share a block.
    let mut r = Plan::new();
    e.plan(Op::Read, 0, 4 * K, &mut r).unwrap();
    assert_eq!(r.status, PlanStatus::Ready);
    // A writer waits for them.
    let mut w = Plan::new();
    e.plan(Op::Write, 0, 4 * K, &mut w).unwrap();
    assert_eq!(w.status, PlanStatus::Retry);
    e.complete(q.ticket.unwrap(), Completion::Ok).unwrap();
    e.complete(r.ticket.unwrap(), Completion::Ok).unwrap();
    assert_eq!(e.inflight(), 0);
    assert_eq!(
        e.complete(t, Completion::Ok),
        Err(CompletionError::UnknownTicket)
    );
}

#[test]
fn failed_fill_rolls_back() {
    let mut e = engine(Config::adaptive(1 << 30, 1 << 20));
    let mut p = Plan::new();
    e.plan(Op::Read, 0, 64 * K, &mut p).unwrap();
    assert_eq!(e.stats().cached_blocks, 1);
    e.complete(p.ticket.unwrap(), Completion::Failed).unwrap();
    assert_eq!(e.stats().cached_blocks, 0);
    assert!(e.lookup(0).is_none());
    e.check_invariants().unwrap();
    // The emptied group went back to the free list: the whole space is free.
    let p = run(&mut e, Op::Read, 0, 1 << 20);
    assert!(p.core_reads.is_empty());
    assert_eq!(e.stats().cached_bytes, 1 << 20);
}

#[test]
fn two_level_replacement() {
    // Two 256 KiB groups.
    let mut e = engine(Config {
        eviction: EvictionConfig::TwoLevelLru,
        ..Config::adaptive(1 << 30, 512 * K)
    });
    run(&mut e, Op::Read, 0, 256 * K); // group A: one 256 KiB block
    for i in 0..8 {
        run(&mut e, Op::Read, (1 << 20) + i * 32 * K, 32 * K); // group B: 8 x 32 KiB
    }
    // Full. The block LRU tail is a 32 KiB block: a 32 KiB miss replaces it
    // in place.
    assert_eq!(e.lookup(0).unwrap().size, 256 << 10);
    run(&mut e, Op::Read, 0, 4 * K); // hit: the 256 KiB block becomes MRU
    let p = run(&mut e, Op::Read, 2 << 20, 32 * K);
    assert_eq!(
        p.evicted,
        vec![Evicted {
            offset: 1 << 20,
            size: 32 << 10,
            cache_addr: 256 * K,
        }]
    );
    assert_eq!(e.stats().replaced_blocks, 1);
    assert_eq!(p.fills[0].cache_addr, e.lookup(2 << 20).unwrap().cache_addr);
    // Replacing promoted group B too (III.D: "promotes both the cache block
    // and its group"), so a 64 KiB miss with a 32 KiB tail block reclaims
    // the LRU group, group A.
    let p = run(&mut e, Op::Read, 3 << 20, 64 * K);
    assert_eq!(
        p.evicted,
        vec![Evicted {
            offset: 0,
            size: 256 << 10,
            cache_addr: 0,
        }]
    );
    assert_eq!(e.stats().evicted_groups, 1);
    assert!(e.lookup(0).is_none());
    assert!(e.lookup(1 << 20).is_none());
    assert!(e.lookup((1 << 20) + 32 * K).is_some());
    assert_eq!(e.lookup(3 << 20).unwrap().size, 64 << 10);
}

#[test]
fn dirty_victims_are_written_back_before_reuse() {
    let mut cfg = Config::fixed(1 << 30, 64 * K, 32 << 10);
    cfg.group_size = 32 << 10;
    cfg.write_mode = WriteMode::WriteBack;
    let mut e = engine(cfg);
    run(&mut e, Op::Write, 0, 32 * K);
    run(&mut e, Op::Write, 32 * K, 32 * K);
    assert_eq!(e.stats().dirty_bytes, 64 * K);
    // Full of dirty blocks: the miss bypasses and both victims are cleaned.
    let mut p = Plan::new();
    e.plan(Op::Read, 1 << 20, 32 * K, &mut p).unwrap();
    assert_eq!(p.core_reads.len(), 1);
    assert!(p.fills.is_empty());
    assert_eq!(p.writebacks.len(), 1, "merged: {:?}", p.writebacks);
    assert_eq!(p.writebacks[0].len, 64 * K);
    e.check_invariants().unwrap();
    // Blocks being written back are readable, not writable.
    let mut q = Plan::new();
    e.plan(Op::Read, 0, 4 * K, &mut q).unwrap();
    assert_eq!(q.status, PlanStatus::Ready);
    e.complete(q.ticket.unwrap(), Completion::Ok).unwrap();
    e.plan(Op::Write, 0, 4 * K, &mut q).unwrap();
    assert_eq!(q.status, PlanStatus::Retry);
    e.complete(p.writeback_ticket.unwrap(), Completion::Ok)
        .unwrap();
    assert_eq!(e.stats().dirty_bytes, 0);
    // Now clean: the next miss replaces a block.
    let p = run(&mut e, Op::Read, 1 << 20, 32 * K);
    assert_eq!(p.evicted.len(), 1);
}

#[test]
fn failed_writeback_keeps_data_dirty() {
    let mut cfg = Config::fixed(1 << 30, 32 * K, 32 << 10);
    cfg.group_size = 32 << 10;
    cfg.write_mode = WriteMode::WriteBack;
    let mut e = engine(cfg);
    run(&mut e, Op::Write, 0, 4 * K);
    let mut p = Plan::new();
    assert_eq!(e.plan_flush(FlushKind::Lazy, &mut p), 1);
    assert_eq!(
        p.writebacks,
        vec![io(0, 4 * K, 0)],
        "only the dirty sectors"
    );
    e.complete(p.writeback_ticket.unwrap(), Completion::Failed)
        .unwrap();
    assert_eq!(e.stats().dirty_bytes, 4 * K);
    e.check_invariants().unwrap();
}

#[test]
fn a_writeback_failing_for_some_blocks_cleans_the_others() {
    let mut cfg = Config::fixed(1 << 30, 128 * K, 32 << 10);
    cfg.group_size = 32 << 10;
    cfg.write_mode = WriteMode::WriteBack;
    let mut e = engine(cfg);
    for i in 0..3 {
        run(&mut e, Op::Write, i * 32 * K, 4 * K);
    }
    let mut p = Plan::new();
    e.plan_flush(FlushKind::All, &mut p);
    assert_eq!(p.writebacks.len(), 3);
    let failed = crate::Extent {
        offset: 32 * K,
        len: 4 * K,
    };
    e.complete_writeback_except(p.writeback_ticket.unwrap(), &[failed])
        .unwrap();
    assert_eq!(
        e.stats().dirty_bytes,
        4 * K,
        "only the failed block stays dirty"
    );
    let mut blocks = Vec::new();
    e.blocks_in(32 * K, 4 * K, &mut blocks);
    assert!(blocks[0].dirty.is_some());
    e.check_invariants().unwrap();
}

#[test]
fn write_miss_fill_modes() {
    let mk = |fill| {
        let mut c = Config::fixed(1 << 30, 1 << 20, 32 << 10);
        c.write_mode = WriteMode::WriteThrough;
        c.write_miss_fill = fill;
        engine(c)
    };
    // A 4 KiB write at 8 KiB into a new 32 KiB block.
    let mut whole = mk(WriteMissFill::WholeBlock);
    let p = run(&mut whole, Op::Write, 8 * K, 4 * K);
    assert_eq!(p.fills, vec![io(0, 32 * K, 0)]);
    assert!(p.fills_before_cache_writes);
    assert_eq!(
        p.core_writes,
        vec![Extent {
            offset: 8 * K,
            len: 4 * K
        }]
    );

    let mut head_tail = mk(WriteMissFill::HeadTail);
    let p = run(&mut head_tail, Op::Write, 8 * K, 4 * K);
    assert_eq!(p.fills, vec![io(0, 8 * K, 0), io(12 * K, 20 * K, 12 * K)]);
    assert!(!p.fills_before_cache_writes);
    assert_eq!(head_tail.stats().read_from_core, 28 * K);

    let mut sparse = mk(WriteMissFill::Sparse);
    let p = run(&mut sparse, Op::Write, 8 * K, 4 * K);
    assert!(p.fills.is_empty());
    assert_eq!(
        sparse.lookup(0).unwrap().valid,
        Extent {
            offset: 8 * K,
            len: 4 * K
        }
    );
    // Reading the written part hits; reading beyond completes the block just
    // enough to cover the read.
    let p = run(&mut sparse, Op::Read, 8 * K, 4 * K);
    assert_eq!(p.cache_reads, vec![io(8 * K, 4 * K, 8 * K)]);
    let p = run(&mut sparse, Op::Read, 4 * K, 16 * K);
    assert_eq!(p.cache_reads, vec![io(8 * K, 4 * K, 8 * K)]);
    assert_eq!(
        p.fills,
        vec![io(4 * K, 4 * K, 4 * K), io(12 * K, 8 * K, 12 * K)]
    );
    assert_eq!(
        sparse.lookup(0).unwrap().valid,
        Extent {
            offset: 4 * K,
            len: 16 * K
        }
    );
    // A write beyond the valid extent fills the gap between them.
    let p = run(&mut sparse, Op::Write, 28 * K, 4 * K);
    assert_eq!(p.fills, vec![io(20 * K, 8 * K, 20 * K)]);
    assert_eq!(sparse.stats().read_from_core, 20 * K);
}

#[test]
fn write_modes_route_data() {
    let mk = |mode| {
        let mut c = Config::fixed(1 << 30, 1 << 20, 32 << 10);
        c.write_mode = mode;
        engine(c)
    };
    let mut wb = mk(WriteMode::WriteBack);
    let p = run(&mut wb, Op::Write, 0, 32 * K);
    assert!(p.core_writes.is_empty());
    assert_eq!(p.cache_writes.len(), 1);
    assert_eq!(
        wb.lookup(0).unwrap().dirty,
        Some(Extent {
            offset: 0,
            len: 32 * K
        })
    );

    let mut wt = mk(WriteMode::WriteThrough);
    let p = run(&mut wt, Op::Write, 0, 32 * K);
    assert_eq!(p.core_writes.len(), 1);
    assert_eq!(p.cache_writes.len(), 1);
    assert_eq!(wt.stats().dirty_bytes, 0);

    let mut wa = mk(WriteMode::WriteAround);
    let p = run(&mut wa, Op::Write, 0, 32 * K);
    assert!(p.cache_writes.is_empty());
    assert_eq!(wa.stats().cached_blocks, 0);
    // A write-around hit updates the cached copy as well as core.
    run(&mut wa, Op::Read, 0, 32 * K);
    let p = run(&mut wa, Op::Write, 0, 4 * K);
    assert_eq!(p.cache_writes.len(), 1);
    assert_eq!(p.core_writes.len(), 1);
}

#[test]
fn deallocate_invalidates_and_trims() {
    let mut cfg = Config::fixed(1 << 30, 1 << 20, 32 << 10);
    cfg.write_mode = WriteMode::WriteBack;
    let mut e = engine(cfg);
    run(&mut e, Op::Write, 0, 64 * K);
    let p = run(&mut e, Op::Deallocate, 0, 40 * K);
    assert_eq!(
        p.discards,
        vec![Extent {
            offset: 0,
            len: 40 * K
        }]
    );
    assert!(e.lookup(0).is_none(), "fully covered block dropped");
    let b = e.lookup(32 * K).unwrap();
    assert_eq!(
        b.valid,
        Extent {
            offset: 40 * K,
            len: 24 * K
        }
    );
    assert_eq!(
        b.dirty,
        Some(Extent {
            offset: 40 * K,
            len: 24 * K
        })
    );
    assert_eq!(e.stats().discarded_dirty_bytes, 40 * K);
    assert_eq!(e.stats().dirty_bytes, 24 * K);
}

#[test]
fn aggressive_flush_respects_the_threshold() {
    let mut cfg = Config::fixed(1 << 30, 1 << 20, 32 << 10);
    cfg.write_mode = WriteMode::WriteBack;
    cfg.flush.dirty_ratio = 0.25;
    cfg.flush.batch_blocks = 2;
    let mut e = engine(cfg);
    for i in 0..8 {
        run(&mut e, Op::Write, i * 32 * K, 32 * K); // 256 KiB dirty = 25%
    }
    let mut p = Plan::new();
    assert_eq!(e.plan_flush(FlushKind::Aggressive, &mut p), 0);
    run(&mut e, Op::Write, 8 * 32 * K, 32 * K);
    assert_eq!(e.plan_flush(FlushKind::Aggressive, &mut p), 2);
    e.complete(p.writeback_ticket.unwrap(), Completion::Ok)
        .unwrap();
    assert_eq!(e.stats().dirty_bytes, 7 * 32 * K);
    // Lazy flushing ignores the threshold and walks on from the cursor.
    let mut n = 0;
    while e.stats().dirty_bytes > 0 {
        n += e.plan_flush(FlushKind::Lazy, &mut p);
        e.complete(p.writeback_ticket.unwrap(), Completion::Ok)
            .unwrap();
    }
    assert_eq!(n, 7);
    assert_eq!(e.stats().writeback_blocks, 9);
}

#[test]
fn lazy_eviction_keeps_valuable_victims() {
    let mut cfg = Config::fixed(1 << 30, 64 * K, 32 << 10);
    cfg.group_size = 32 << 10;
    cfg.eviction = EvictionConfig::Lazy { para: 2, k: 1.0 };
    let mut e = engine(cfg);
    run(&mut e, Op::Read, 0, 32 * K);
    run(&mut e, Op::Read, 32 * K, 32 * K);
    // Full. The tail has flag PARA = 2: two misses are served from core.
    let p = run(&mut e, Op::Read, 1 << 20, 4 * K);
    assert_eq!(p.core_reads.len(), 1);
    assert_eq!(e.stats().lazy_keeps, 1);
    e.check_invariants().unwrap();
}

#[test]
fn admission_rejects_bypass_the_cache() {
    let mut cfg = Config::fixed(1 << 30, 1 << 20, 32 << 10);
    cfg.admission = AdmissionConfig::NHit {
        n: 2,
        table_slots: 1024,
    };
    let mut e = engine(cfg);
    let p = run(&mut e, Op::Read, 0, 4 * K);
    assert_eq!(
        p.core_reads,
        vec![Extent {
            offset: 0,
            len: 4 * K
        }]
    );
    assert_eq!(e.stats().cached_blocks, 0);
    let p = run(&mut e, Op::Read, 0, 4 * K);
    assert_eq!(p.fills.len(), 1);
    assert_eq!(e.stats().admission_rejects, 1);
}

#[test]
fn requests_are_validated() {
    let mut e = engine(Config::adaptive(1 << 20, 1 << 20));
    let mut p = Plan::new();
    assert_eq!(e.plan(Op::Read, 0, 0, &mut p), Err(RequestError::Empty));
    assert_eq!(
        e.plan(Op::Read, 512, 4096, &mut p),
        Err(RequestError::Unaligned)
    );
    assert_eq!(
        e.plan(Op::Read, 1 << 20, 4096, &mut p),
        Err(RequestError::OutOfRange)
    );
    assert_eq!(
        e.plan(Op::Read, u64::MAX - 4095, 4096, &mut p),
        Err(RequestError::OutOfRange)
    );
}

#[test]
fn metadata_is_compact() {
    // A full fixed-32K cache of 4096 blocks.
    let mut e = engine(Config::fixed(1 << 30, 128 << 20, 32 << 10));
    for i in 0..4096u64 {
        run(&mut e, Op::Read, i * 32 * K, 32 * K);
    }
    let m = e.metadata();
    assert_eq!(m.cached_blocks, 4096);
    let per_block = m.core_bytes_per_block();
    assert!(per_block <= 24.0, "{per_block} bytes per block: {m:?}");
}

#[test]
fn planning_does_not_allocate_in_steady_state() {
    // Warm up: buffers and tables reach their working size (the shadow
    // caches' ghost queues after a few turnovers of the cache).
    let mut e = engine(Config::adaptive(1 << 30, 4 << 20));
    let mut p = Plan::new();
    let mut x = 1u64;
    let mut step = |e: &mut Engine, p: &mut Plan| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let off = (x >> 33) % (64 << 20) / 4096 * 4096;
        let len = (1 + (x >> 20) % 16) * 4096;
        e.plan(Op::Read, off.min((1 << 30) - len), len, p).unwrap();
        for t in [p.ticket, p.writeback_ticket].into_iter().flatten() {
            e.complete(t, Completion::Ok).unwrap();
        }
    };
    for _ in 0..60_000 {
        step(&mut e, &mut p);
    }
    let before = e.metadata();
    for _ in 0..5_000 {
        step(&mut e, &mut p);
    }
    let after = e.metadata();
    assert!(
        after.total() <= before.total() + 4096,
        "{before:?} -> {after:?}"
    );
}

#[test]
fn miss_ratio_curve_follows_the_requests() {
    // 64 KiB blocks; a loop over 100 blocks, read 5 times.
    let mut e = engine(Config::fixed(1 << 30, 4 << 20, 64 << 10));
    for _ in 0..5 {
        for b in 0..100u64 {
            run(&mut e, Op::Read, b * 64 * K, 64 * K);
        }
    }
    let c = e.miss_ratio_curve();
    assert_eq!(c.block_size(), 64 << 10);
    assert_eq!(c.references(), 500);
    // LRU over a loop: every reference misses below 100 blocks, only the
    // 100 cold misses at or above.
    assert!((c.miss_ratio(99 * 64 * K) - 1.0).abs() < 1e-9);
    assert!((c.miss_ratio(100 * 64 * K) - 0.2).abs() < 1e-9);
    assert!(e.metadata().mrc > 0 && e.metadata().mrc < 256 << 10);
}

/// Plans and completes a read without checking invariants (long runs).
fn read_fast(e: &mut Engine, plan: &mut Plan, offset: u64, len: u64) {
    e.plan(Op::Read, offset, len, plan).unwrap();
    for t in [plan.ticket, plan.writeback_ticket].into_iter().flatten() {
        e.complete(t, Completion::Ok).unwrap();
    }
}

#[test]
fn auto_switches_policy_without_dropping_blocks() {
    // 4 KiB blocks, 16 MiB: 4096 blocks. A hot set S3-FIFO promotes to its
    // main queue, then keys read twice 2000 reads apart: its small queue
    // (10%) loses every second read, LRU keeps them.
    let mut e = engine(Config {
        eviction: EvictionConfig::Auto {
            candidates: vec![EvictionConfig::S3Fifo, EvictionConfig::TwoLevelLru],
        },
        ..Config::fixed(1 << 40, 16 << 20, 4096)
    });
    assert_eq!(e.policy_names().1, "s3fifo");
    let mut p = Plan::new();
    for k in 0..3600u64 {
        for _ in 0..3 {
            read_fast(&mut e, &mut p, k * 4 * K, 4 * K);
        }
    }
    let base = 1 << 30;
    let mut switched_at = None;
    for t in 0..200_000u64 {
        let cached = e.stats().cached_blocks;
        read_fast(&mut e, &mut p, base + t * 4 * K, 4 * K);
        if t >= 2000 {
            read_fast(&mut e, &mut p, base + (t - 2000) * 4 * K, 4 * K);
        }
        if switched_at.is_none() && e.policy_names().1 != "s3fifo" {
            switched_at = Some(t);
            // The switch keeps every cached block.
            assert!(e.stats().cached_blocks >= cached);
        }
    }
    e.check_invariants().unwrap();
    let c = e.choice().expect("auto reports its choice");
    assert!(switched_at.is_some(), "{c:?}");
    assert_eq!(c.active, "lru2", "{c:?}");
    let lru = c.shadows.iter().find(|s| s.0 == "lru2").unwrap().1;
    let s3 = c.shadows.iter().find(|s| s.0 == "s3fifo").unwrap().1;
    assert!(lru + 0.2 < s3, "{c:?}");
}

/// A 4 KiB/32 KiB engine under fill sizing by locality, 1 MiB of cache.
fn locality_engine() -> Engine {
    let mut c = Config::adaptive(64 << 20, 1 << 20);
    c.block_sizes = vec![4 << 10, 32 << 10];
    c.group_size = 32 << 10;
    c.eviction = EvictionConfig::TwoLevelLru;
    c.fill_size = FillSize::Locality;
    engine(c)
}

/// Sequential 4 KiB reads cycling over 32 MiB of a 1 MiB cache: only
/// prefetching hits, so the 32 KiB floor takes over.
fn read_sequentially(e: &mut Engine, from: u64, n: u64) {
    for i in 0..n {
        run(e, Op::Read, from + (i % 8192) * 4 * K, 4 * K);
    }
}

#[test]
fn fill_by_locality_widens_only_whole_missing_windows() {
    let mut e = locality_engine();
    assert_eq!(e.fill_report().unwrap().floor, 4 << 10);
    read_sequentially(&mut e, 0, 4096);
    let r = e.fill_report().unwrap();
    assert_eq!((r.floor, r.switches), (32 << 10, 1), "{r:?}");
    // A 4 KiB miss fills the whole missing window around it.
    let p = run(&mut e, Op::Read, (40 << 20) + 8 * K, 4 * K);
    assert_eq!(p.fills.len(), 1);
    assert_eq!((p.fills[0].offset, p.fills[0].len), (40 << 20, 32 * K));
    assert_eq!(e.lookup(40 << 20).unwrap().size, 32 << 10);
    // A window holding a cached block is not filled around it: a 4 KiB
    // block cached while the floor was 4 KiB (kept hot through the
    // sequential phase), then a read elsewhere in its window.
    let mut e = locality_engine();
    run(&mut e, Op::Read, 48 << 20, 4 * K);
    for i in 0..4096u64 {
        run(&mut e, Op::Read, (i % 8192) * 4 * K, 4 * K);
        if i % 64 == 0 {
            run(&mut e, Op::Read, 48 << 20, 4 * K);
        }
    }
    assert_eq!(e.fill_report().unwrap().floor, 32 << 10);
    assert_eq!(e.lookup(48 << 20).unwrap().size, 4 << 10);
    let p = run(&mut e, Op::Read, (48 << 20) + 16 * K, 4 * K);
    assert_eq!(
        (p.fills[0].offset, p.fills[0].len),
        ((48 << 20) + 16 * K, 4 * K)
    );
    // A write miss is widened too (its block is sparse until read).
    run(&mut e, Op::Write, 56 << 20, 4 * K);
    assert_eq!(e.lookup(56 << 20).unwrap().size, 32 << 10);
    e.check_invariants().unwrap();
}

#[test]
fn fill_by_locality_follows_the_workload_both_ways() {
    let mut e = locality_engine();
    read_sequentially(&mut e, 0, 4096);
    assert_eq!(e.fill_report().unwrap().floor, 32 << 10);
    // Then 4 KiB reads of 200 hot blocks 64 KiB apart: 800 KiB fits the
    // cache as 4 KiB blocks, not as 32 KiB ones.
    for _ in 0..64 {
        for i in 0..200u64 {
            run(&mut e, Op::Read, i * 64 * K, 4 * K);
        }
    }
    let r = e.fill_report().unwrap();
    assert_eq!((r.floor, r.switches), (4 << 10, 2), "{r:?}");
    assert!(r.shadows[0].1 > r.shadows[1].1, "{r:?}");
    let p = run(&mut e, Op::Read, 50 << 20, 4 * K);
    assert_eq!(p.fills[0].len, 4 * K);
    e.check_invariants().unwrap();
    assert!(Config::adaptive(1 << 20, 1 << 20).fill_size == FillSize::Request);
}
