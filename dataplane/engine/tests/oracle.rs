//! Property test: random request sequences against an oracle of the bytes a
//! host would read back.
//!
//! Data is modelled as one version number per 4 KiB sector, in core, in the
//! cache space and in the host's view. Plans are executed the moment they
//! are made (some are dropped to model failed I/O) and completed later in
//! random order, successfully or not. After every step the engine's
//! invariant checker runs, and every read is compared with the host's view;
//! at the end everything is flushed and core must hold every defined sector.
//! Every block that leaves the cache must be reported (`plan.evicted`,
//! `Engine::dropped`, `resize`'s list). Steps also change the write mode,
//! resize the cache and restart the engine from `cached_blocks()` (the cache
//! device's contents survive), so restore is checked against the data.

use engine::{
    AdmissionConfig, Completion, Config, Engine, Evicted, EvictionConfig, FillSize, FlushKind, Op,
    Plan, PlanStatus, RestoredBlock, SizeAwareConfig, Ticket, WriteMissFill, WriteMode,
};
use proptest::prelude::*;
use std::collections::BTreeSet;

const SECTOR: u64 = 4096;
const VOLUME_SECTORS: u64 = 512; // 2 MiB

#[derive(Clone, Debug)]
enum Step {
    Read {
        sector: u64,
        sectors: u64,
        fate: u8,
    },
    Write {
        sector: u64,
        sectors: u64,
        fate: u8,
    },
    Deallocate {
        sector: u64,
        sectors: u64,
    },
    Complete {
        pick: usize,
        ok: bool,
    },
    Flush {
        kind: u8,
        fate: u8,
    },
    Mode {
        mode: u8,
    },
    /// Switch the eviction policy (as online choice does), cache in use.
    Policy {
        pick: u8,
    },
    Resize {
        tight: bool,
    },
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    // Half the requests go to a hot 256 KiB region so blocks are re-used.
    let place =
        (any::<bool>(), 0..VOLUME_SECTORS, 0..64u64, 1..20u64).prop_map(|(hot, any, h, n)| {
            let s = if hot { h } else { any };
            (s, n.min(VOLUME_SECTORS - s))
        });
    prop_oneof![
        4 => (place.clone(), any::<u8>()).prop_map(|((sector, sectors), fate)| Step::Read { sector, sectors, fate }),
        4 => (place.clone(), any::<u8>()).prop_map(|((sector, sectors), fate)| Step::Write { sector, sectors, fate }),
        1 => place.prop_map(|(sector, sectors)| Step::Deallocate { sector, sectors }),
        // Short deallocates in the hot region punch holes into blocks.
        1 => (0..64u64, 1..3u64).prop_map(|(sector, sectors)| Step::Deallocate { sector, sectors }),
        4 => (any::<usize>(), prop::bool::weighted(0.85)).prop_map(|(pick, ok)| Step::Complete { pick, ok }),
        1 => (0..3u8, any::<u8>()).prop_map(|(kind, fate)| Step::Flush { kind, fate }),
        1 => prop_oneof![
            (0..3u8).prop_map(|mode| Step::Mode { mode }),
            any::<u8>().prop_map(|pick| Step::Policy { pick }),
            any::<bool>().prop_map(|tight| Step::Resize { tight }),
            Just(Step::Restart),
        ],
    ]
}

fn config(choice: (u8, u8, u8, u8, u8, bool)) -> Config {
    let (sizes, write, fill, admission, eviction, tight) = choice;
    let mut c = Config::adaptive(
        VOLUME_SECTORS * SECTOR,
        if tight { 64 << 10 } else { 256 << 10 },
    );
    c.block_sizes = match sizes % 3 {
        0 => vec![4 << 10, 8 << 10, 16 << 10, 32 << 10],
        1 => vec![16 << 10],
        _ => vec![8 << 10, 32 << 10],
    };
    // Fill sizing by locality on half of the multi-size configurations.
    c.fill_size = if sizes / 3 % 2 == 1 {
        FillSize::Locality
    } else {
        FillSize::Request
    };
    // Small groups so a tight cache has several and reclaims often.
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
    c.admission = match admission % 4 {
        0 => AdmissionConfig::Always,
        1 => AdmissionConfig::NHit {
            n: 2,
            table_slots: 64,
        },
        2 => AdmissionConfig::TinyLfu {
            width: 64,
            sample_size: 50,
            admit_on_tie: true,
        },
        _ => AdmissionConfig::SizeAware(SizeAwareConfig {
            fifo_len: 16,
            window: 32,
            retune_interval: 40,
            search_points: 4,
            search_rounds: 2,
            ..SizeAwareConfig::default()
        }),
    };
    c.eviction = match eviction % 7 {
        0 => EvictionConfig::TwoLevelLru,
        1 => EvictionConfig::Lazy { para: 2, k: 1.0 },
        2 => EvictionConfig::S3Fifo,
        3 => EvictionConfig::Sieve,
        4 => EvictionConfig::Arc,
        5 => EvictionConfig::WTinyLfu,
        // Every candidate, so that switches happen in a short run.
        _ => EvictionConfig::Auto {
            candidates: vec![
                EvictionConfig::S3Fifo,
                EvictionConfig::TwoLevelLru,
                EvictionConfig::Arc,
                EvictionConfig::Sieve,
                EvictionConfig::WTinyLfu,
            ],
        },
    };
    c.flush.batch_blocks = 3;
    c.flush.dirty_ratio = 0.1;
    c.max_victim_scan = 2;
    c
}

/// Undefined sector content (a failed write or deallocate).
const UNDEFINED: Option<u64> = None;

/// A ticket in flight, the host range its failure makes undefined, and
/// whether its I/O was skipped.
type Tracked = (Ticket, Option<(u64, u64)>, bool);

struct World {
    engine: Engine,
    core: Vec<u64>,
    cache: Vec<u64>,
    host: Vec<Option<u64>>,
    version: u64,
    /// Tickets in flight: the host range a failure makes undefined, and
    /// whether the I/O was skipped (the ticket must then fail).
    tickets: Vec<Tracked>,
    plan: Plan,
    skipped_writebacks: bool,
    /// Refused requests in arrival order: (op, offset, len, fate, place).
    queue: Vec<(Op, u64, u64, u8, u64)>,
}

impl World {
    fn new(cfg: Config) -> World {
        let engine = Engine::new(cfg).unwrap();
        // Room for the largest capacity a resize picks.
        let cache_sectors = ((256 << 10).max(engine.capacity()) / SECTOR) as usize;
        World {
            engine,
            core: vec![0; VOLUME_SECTORS as usize],
            cache: vec![u64::MAX; cache_sectors],
            host: vec![Some(0); VOLUME_SECTORS as usize],
            version: 0,
            tickets: Vec::new(),
            plan: Plan::new(),
            skipped_writebacks: false,
            queue: Vec::new(),
        }
    }

    fn sectors(offset: u64, len: u64) -> std::ops::Range<usize> {
        assert_eq!(offset % SECTOR, 0);
        assert_eq!(len % SECTOR, 0);
        (offset / SECTOR) as usize..((offset + len) / SECTOR) as usize
    }

    fn cache_sectors(&self, addr: u64, len: u64) -> std::ops::Range<usize> {
        assert!(
            addr + len <= self.engine.capacity(),
            "cache address out of range"
        );
        Self::sectors(addr, len)
    }

    /// Executes the plan's write-backs, or skips them: the write-back ticket
    /// must then fail.
    fn writebacks(&mut self, execute: bool) {
        self.skipped_writebacks = !execute;
        if !execute {
            return;
        }
        for w in self.plan.writebacks.clone() {
            let src = self.cache_sectors(w.cache_addr, w.len);
            let dst = Self::sectors(w.offset, w.len);
            for (d, s) in dst.zip(src) {
                self.core[d] = self.cache[s];
            }
        }
    }

    fn fills(&mut self) {
        for f in self.plan.fills.clone() {
            let dst = self.cache_sectors(f.cache_addr, f.len);
            for (d, s) in dst.zip(Self::sectors(f.offset, f.len)) {
                self.cache[d] = self.core[s];
            }
        }
    }

    /// Plans a request (a retry when `waiting` is its place); returns its
    /// place if it was refused.
    fn request(
        &mut self,
        op: Op,
        offset: u64,
        len: u64,
        fate: u8,
        waiting: Option<u64>,
    ) -> Result<Option<u64>, String> {
        self.plan.waiting = waiting;
        match op {
            Op::Read => self.read(offset, len, fate),
            Op::Write => self.write(offset, len, fate),
            Op::Deallocate => self.deallocate(offset, len),
        }?;
        let place = self.plan.waiting.take();
        if self.plan.status == PlanStatus::Ready {
            return Ok(None);
        }
        if waiting.is_some() && place != waiting {
            return Err(format!("retry moved from place {waiting:?} to {place:?}"));
        }
        Ok(place)
    }

    /// A new request: refused ones join the queue.
    fn arrive(&mut self, op: Op, offset: u64, len: u64, fate: u8) -> Result<(), String> {
        if let Some(place) = self.request(op, offset, len, fate, None)? {
            self.queue.push((op, offset, len, fate, place));
        }
        Ok(())
    }

    /// After a completion: every queued request again, in arrival order;
    /// those refused again keep their place.
    fn retry_queue(&mut self) -> Result<(), String> {
        let queue = std::mem::take(&mut self.queue);
        for (op, offset, len, fate, place) in queue {
            if let Some(p) = self.request(op, offset, len, fate, Some(place))? {
                self.queue.push((op, offset, len, fate, p));
            }
        }
        Ok(())
    }

    /// The blocks one engine call removed are exactly those it reported.
    fn removals(
        &self,
        before: &BTreeSet<(u64, u32, u64)>,
        reported: &[Evicted],
    ) -> Result<(), String> {
        let after = self.blocks();
        let removed: BTreeSet<_> = before.difference(&after).copied().collect();
        let listed: BTreeSet<_> = reported
            .iter()
            .map(|e| (e.offset, e.size, e.cache_addr))
            .collect();
        if removed != listed || listed.len() != reported.len() {
            return Err(format!("blocks removed {removed:?}, reported {reported:?}"));
        }
        Ok(())
    }

    fn blocks(&self) -> BTreeSet<(u64, u32, u64)> {
        self.engine
            .cached_blocks()
            .iter()
            .map(|b| (b.offset, b.size, b.cache_addr))
            .collect()
    }

    fn mode(&mut self, mode: u8) -> Result<(), String> {
        let mode = [
            WriteMode::WriteBack,
            WriteMode::WriteThrough,
            WriteMode::WriteAround,
        ][mode as usize % 3];
        let dirty = self.engine.dirty_bytes();
        let from = self.engine.config().write_mode;
        match self.engine.set_write_mode(mode) {
            Ok(()) if from == WriteMode::WriteBack && mode != from && dirty > 0 => {
                Err("left write-back with dirty data".into())
            }
            Err(e) if !(from == WriteMode::WriteBack && dirty > 0) => Err(e.to_string()),
            _ => Ok(()),
        }
    }

    /// A new policy adopts every cached block; none may be lost.
    fn policy(&mut self, pick: u8) -> Result<(), String> {
        let policy = [
            EvictionConfig::TwoLevelLru,
            EvictionConfig::S3Fifo,
            EvictionConfig::Sieve,
            EvictionConfig::Arc,
            EvictionConfig::WTinyLfu,
            EvictionConfig::auto(),
        ][pick as usize % 6]
            .clone();
        let before = self.engine.stats().cached_blocks;
        self.engine
            .set_eviction(policy)
            .map_err(|e| e.to_string())?;
        if self.engine.stats().cached_blocks != before {
            return Err("a policy switch changed the cached blocks".into());
        }
        Ok(())
    }

    fn resize(&mut self, tight: bool) -> Result<(), String> {
        let mut evicted = Vec::new();
        let capacity = if tight { 64 << 10 } else { 256 << 10 };
        let before = self.blocks();
        if self.engine.resize(capacity, &mut evicted).is_ok() && self.engine.capacity() != capacity
        {
            return Err("resize did not take".into());
        }
        self.removals(&before, &evicted)
    }

    /// A restart: the engine is rebuilt from its blocks, the cache space
    /// keeps its bytes. Only between requests.
    fn restart(&mut self) -> Result<(), String> {
        if !self.tickets.is_empty() {
            return Ok(());
        }
        let blocks: Vec<RestoredBlock> = self
            .engine
            .cached_blocks()
            .into_iter()
            .map(Into::into)
            .collect();
        let before = self.blocks();
        let mut e = Engine::new(self.engine.config().clone()).map_err(|e| e.to_string())?;
        e.restore(&blocks).map_err(|e| e.to_string())?;
        if e.dirty_bytes() != self.engine.dirty_bytes() {
            return Err("restore changed the dirty bytes".into());
        }
        self.engine = e;
        if self.blocks() != before {
            return Err("restore changed the blocks".into());
        }
        Ok(())
    }

    fn track(&mut self, failed_write: Option<(u64, u64)>) {
        if let Some(t) = self.plan.ticket {
            self.tickets.push((t, failed_write, false));
        }
        if let Some(t) = self.plan.writeback_ticket {
            self.tickets.push((t, None, self.skipped_writebacks));
        }
    }

    /// A refused request names a ticket in flight to wait for and its
    /// place in the queue.
    fn check_retry(&mut self) -> Result<(), String> {
        if self.plan.waiting.is_none() {
            return Err("a refused request has no place in the queue".into());
        }
        match self.plan.retry_after {
            Some(t) if self.tickets.iter().any(|x| x.0 == t) => Ok(()),
            other => Err(format!("retry after {other:?}, not a ticket in flight")),
        }
    }

    fn read(&mut self, offset: u64, len: u64, fate: u8) -> Result<(), String> {
        let mut plan = std::mem::take(&mut self.plan);
        let before = self.blocks();
        self.engine
            .plan(Op::Read, offset, len, &mut plan)
            .map_err(|e| e.to_string())?;
        self.removals(&before, &plan.evicted)?;
        self.plan = plan;
        if self.plan.status == PlanStatus::Retry {
            return self.check_retry();
        }
        // fate % 8 == 0: the request's I/O fails before doing anything.
        let execute = !fate.is_multiple_of(8);
        self.writebacks(fate % 16 != 1);
        let range = Self::sectors(offset, len);
        let mut got: Vec<Option<u64>> = vec![None; range.len()];
        let base = range.start;
        let mut put = |s: usize, v: u64| -> Result<(), String> {
            if range.contains(&s) {
                if got[s - base].is_some() {
                    return Err(format!("sector {s} read twice"));
                }
                got[s - base] = Some(v);
            }
            Ok(())
        };
        for r in &self.plan.cache_reads {
            let src = self.cache_sectors(r.cache_addr, r.len);
            for (d, s) in Self::sectors(r.offset, r.len).zip(src) {
                put(d, self.cache[s])?;
            }
        }
        for f in &self.plan.fills {
            for s in Self::sectors(f.offset, f.len) {
                put(s, self.core[s])?;
            }
        }
        for r in &self.plan.core_reads {
            for s in Self::sectors(r.offset, r.len) {
                put(s, self.core[s])?;
            }
        }
        if execute {
            self.fills();
            for (i, g) in got.iter().enumerate() {
                let s = base + i;
                let g = g.ok_or(format!("sector {s} not read"))?;
                if let Some(want) = self.host[s] {
                    if g != want {
                        return Err(format!("sector {s}: read version {g}, host wrote {want}"));
                    }
                }
            }
        }
        self.track(None);
        if !execute {
            if let Some(t) = self.plan.ticket {
                self.finish(t, false)?;
            }
        }
        Ok(())
    }

    fn write(&mut self, offset: u64, len: u64, fate: u8) -> Result<(), String> {
        let mut plan = std::mem::take(&mut self.plan);
        let before = self.blocks();
        self.engine
            .plan(Op::Write, offset, len, &mut plan)
            .map_err(|e| e.to_string())?;
        self.removals(&before, &plan.evicted)?;
        self.plan = plan;
        if self.plan.status == PlanStatus::Retry {
            return self.check_retry();
        }
        self.writebacks(fate % 16 != 1);
        self.version += 1;
        let v = self.version;
        let range = Self::sectors(offset, len);
        if fate.is_multiple_of(8) {
            // Nothing happened, the host gets an error: the range is undefined.
            for s in range {
                self.host[s] = UNDEFINED;
            }
            self.track(None);
            if let Some(t) = self.plan.ticket {
                self.finish(t, false)?;
            }
            return Ok(());
        }
        // Every written sector lands exactly once in core or cache (or both).
        let mut covered = vec![0u8; range.len()];
        if !self.plan.fills_before_cache_writes {
            for f in &self.plan.fills {
                for w in &self.plan.cache_writes {
                    if f.offset < w.end() && w.offset < f.end() {
                        return Err("fill overlaps a cache write without ordering".into());
                    }
                }
            }
        }
        self.fills();
        for w in self.plan.cache_writes.clone() {
            let dst = self.cache_sectors(w.cache_addr, w.len);
            for (d, s) in dst.zip(Self::sectors(w.offset, w.len)) {
                self.cache[d] = v;
                covered[s - range.start] |= 1;
            }
        }
        for w in self.plan.core_writes.clone() {
            for s in Self::sectors(w.offset, w.len) {
                self.core[s] = v;
                covered[s - range.start] |= 2;
            }
        }
        if let Some(i) = covered.iter().position(|&c| c == 0) {
            return Err(format!("written sector {} went nowhere", range.start + i));
        }
        for s in range {
            self.host[s] = Some(v);
        }
        self.track(Some((offset, len)));
        Ok(())
    }

    fn deallocate(&mut self, offset: u64, len: u64) -> Result<(), String> {
        let mut plan = std::mem::take(&mut self.plan);
        let before = self.blocks();
        self.engine
            .plan(Op::Deallocate, offset, len, &mut plan)
            .map_err(|e| e.to_string())?;
        self.removals(&before, &plan.evicted)?;
        self.plan = plan;
        if self.plan.status == PlanStatus::Retry {
            return self.check_retry();
        }
        if self.plan.writeback_ticket.is_some()
            || self.plan.ticket.is_some() == self.plan.cache_zeroes.is_empty()
        {
            return Err("deallocate holds a ticket without zeroing the cache".into());
        }
        // Deallocated ranges read as zeroes (version 0) afterwards.
        for d in &self.plan.discards {
            for s in Self::sectors(d.offset, d.len) {
                self.core[s] = 0;
                self.host[s] = Some(0);
            }
        }
        for z in self.plan.cache_zeroes.clone() {
            if z.offset < offset || z.end() > offset + len {
                return Err("cache zeroes outside the deallocated range".into());
            }
            for d in self.cache_sectors(z.cache_addr, z.len) {
                self.cache[d] = 0;
            }
        }
        self.track(Some((offset, len)));
        Ok(())
    }

    fn flush(&mut self, kind: u8, fate: u8) -> Result<(), String> {
        let kind = [FlushKind::Lazy, FlushKind::Aggressive, FlushKind::All][kind as usize % 3];
        let mut plan = std::mem::take(&mut self.plan);
        let before = self.blocks();
        let n = self.engine.plan_flush(kind, &mut plan);
        self.removals(&before, &plan.evicted)?;
        self.plan = plan;
        if (n == 0) != self.plan.writeback_ticket.is_none() {
            return Err("flush ticket mismatch".into());
        }
        self.writebacks(!fate.is_multiple_of(4));
        self.track(None);
        Ok(())
    }

    fn finish(&mut self, t: Ticket, ok: bool) -> Result<(), String> {
        let i = self
            .tickets
            .iter()
            .position(|(x, ..)| *x == t)
            .ok_or("untracked ticket")?;
        let (_, write, skipped) = self.tickets.swap_remove(i);
        let ok = ok && !skipped;
        if !ok {
            if let Some((o, l)) = write {
                for s in Self::sectors(o, l) {
                    self.host[s] = UNDEFINED;
                }
            }
        }
        let outcome = if ok {
            Completion::Ok
        } else {
            Completion::Failed
        };
        let before = self.blocks();
        self.engine
            .complete(t, outcome)
            .map_err(|e| e.to_string())?;
        let dropped = self.engine.dropped().to_vec();
        self.removals(&before, &dropped)?;
        if self.engine.complete(t, outcome).is_ok() {
            return Err("ticket completed twice".into());
        }
        Ok(())
    }

    fn run(&mut self, step: &Step) -> Result<(), String> {
        match *step {
            Step::Read {
                sector,
                sectors,
                fate,
            } => self.arrive(Op::Read, sector * SECTOR, sectors * SECTOR, fate),
            Step::Write {
                sector,
                sectors,
                fate,
            } => self.arrive(Op::Write, sector * SECTOR, sectors * SECTOR, fate),
            Step::Deallocate { sector, sectors } => {
                self.arrive(Op::Deallocate, sector * SECTOR, sectors * SECTOR, 1)
            }
            Step::Complete { pick, ok } => {
                if self.tickets.is_empty() {
                    return Ok(());
                }
                let t = self.tickets[pick % self.tickets.len()].0;
                self.finish(t, ok)?;
                self.retry_queue()
            }
            Step::Flush { kind, fate } => self.flush(kind, fate),
            Step::Mode { mode } => self.mode(mode),
            Step::Policy { pick } => self.policy(pick),
            Step::Resize { tight } => self.resize(tight),
            Step::Restart => self.restart(),
        }?;
        self.engine.check_invariants()?;
        if self.engine.inflight() != self.tickets.len() {
            return Err(format!(
                "{} tickets in flight, {} tracked",
                self.engine.inflight(),
                self.tickets.len()
            ));
        }
        Ok(())
    }

    /// Completes everything, flushes everything, and checks core.
    fn drain(&mut self) -> Result<(), String> {
        // Every refused request gets through once the work ahead of it
        // completes.
        while let Some(&(t, ..)) = self.tickets.first() {
            self.finish(t, true)?;
            self.retry_queue()?;
        }
        if !self.queue.is_empty() {
            return Err(format!("requests starved: {:?}", self.queue));
        }
        for _ in 0..10_000 {
            if self.engine.dirty_bytes() == 0 {
                break;
            }
            self.flush(2, 1)?;
            while let Some(&(t, ..)) = self.tickets.first() {
                self.finish(t, true)?;
            }
        }
        self.engine.check_invariants()?;
        if std::env::var("ORACLE_STATS").is_ok() {
            let st = self.engine.stats();
            eprintln!(
                "STATS evg={} rep={} lazy={} wb={} retry={} fail={} inval={} novictim={} rej={} hitr={}",
                st.evicted_groups, st.replaced_blocks, st.lazy_keeps, st.writeback_blocks, st.retries,
                st.failed_completions, st.invalidated_blocks, st.no_victim, st.admission_rejects, st.read.hit_requests
            );
        }
        if self.engine.dirty_bytes() != 0 || self.engine.writebacks_inflight() != 0 {
            return Err("flushing did not clean the cache".into());
        }
        for s in 0..VOLUME_SECTORS as usize {
            if let Some(v) = self.host[s] {
                if self.core[s] != v {
                    return Err(format!(
                        "after flush, core sector {s} has {} not {v}",
                        self.core[s]
                    ));
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_oracle(
        choice in (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>(), any::<bool>()),
        steps in prop::collection::vec(step(), 1..120),
    ) {
        let mut w = World::new(config(choice));
        for (i, s) in steps.iter().enumerate() {
            if let Err(e) = w.run(s) {
                prop_assert!(false, "step {i} {s:?}: {e}");
            }
        }
        if let Err(e) = w.drain() {
            prop_assert!(false, "drain: {e}");
        }
    }
}
