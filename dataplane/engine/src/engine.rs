//! The per-volume cache engine: planning, completion and the block life cycle.
//!
//! Planning a request is two phases. Phase 1 only reads: Algorithm 1 splits
//! the aligned request range into cached blocks and missing intervals, and
//! every cached block is checked against in-flight pins and older refused
//! requests; a conflict answers `Retry` naming a ticket to wait for, with
//! nothing changed except the request's place in the FIFO of refused
//! requests (`Waiter`), which refuses later conflicting requests so it
//! cannot be starved. Phase 2 pins and promotes the cached blocks first (so
//! reclaiming space for the misses can never evict them), then walks the
//! segments in order, covering missing intervals with Algorithm 2 and
//! producing the plan's I/O.
//!
//! Block life cycle:
//! - inserted by a miss: exclusively pinned until its ticket completes, so
//!   nobody reads it before its fill lands; a failed ticket removes it;
//! - cached: readable (shared pins), writable (exclusive pin);
//! - dirty (write-back): never evicted; eviction and flushing first write it
//!   back under a shared pin (reads continue, also while it starts; writes
//!   retry), and only a clean block or group is reclaimed;
//! - removed: evicted (space reused at once), or invalidated (deallocate,
//!   failed I/O), which leaves a hole its size reuses first. Every removal
//!   is reported with its cache address (`Plan::evicted`, `dropped`).

use crate::admission::{self, AdmissionCounters, AdmissionPolicy, Candidate};
use crate::alloc::{greedy_cover, missing_intervals, Seg};
use crate::blocks::{
    id_class, id_index, make_id, Blocks, Ext, PinKind, FREE_KEY, F_DIRTY, F_EXT, F_PINNED, F_REUSED,
};
use crate::choice::{ChoiceReport, Chooser};
use crate::config::{Config, ConfigError, EvictionConfig, FillSize, WriteMissFill, WriteMode};
use crate::eviction::{self, BlockRef, EvictionPolicy, Verdict};
use crate::fill::{FillChooser, FillReport};
use crate::group::Groups;
use crate::lru::NIL;
use crate::mrc::{Curve, RateCap, Shards, ShardsConfig};
use crate::plan::{CacheIo, Completion, Evicted, Extent, Op, Plan, PlanStatus, Ticket};
use crate::stats::{AllocStats, Metadata, Stats};
use std::fmt;

/// A touched block's extents before the request changed them.
#[derive(Clone, Copy, Debug)]
struct Undo {
    id: u32,
    before: Ext,
}

/// A refused request, in the FIFO of refused requests: later requests that
/// conflict with it (overlap its blocks, one of the two writing) are
/// refused too, so it cannot be overtaken. It expires when the ticket it
/// waits for completes; the runtime retries refused requests in order
/// before new ones, which renews it if the request is refused again.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Waiter {
    /// Place in the queue (arrival order of first refusal).
    pub seq: u64,
    /// Volume range of the blocks the request touches.
    pub begin: u64,
    pub end: u64,
    /// The request writes (or completes partial blocks).
    pub exclusive: bool,
    /// The in-flight ticket it waits for.
    pub ticket: u32,
}

/// What a ticket holds until it completes.
#[derive(Debug, Default)]
struct Inflight {
    active: bool,
    /// A write-back ticket (pins are shared, completion cleans).
    writeback: bool,
    op: Option<Op>,
    /// (block, exclusive)
    pins: Vec<(u32, bool)>,
    /// Blocks this request inserted.
    new_blocks: Vec<u32>,
    undo: Vec<Undo>,
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// Zero length.
    Empty,
    /// Offset or length not a multiple of the sector size.
    Unaligned,
    /// Beyond the end of the volume.
    OutOfRange,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequestError::Empty => "empty request",
            RequestError::Unaligned => "request not aligned to the sector size",
            RequestError::OutOfRange => "request beyond the end of the volume",
        })
    }
}

impl std::error::Error for RequestError {}

/// Why a completion was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionError {
    /// The ticket is not in flight (completed twice, or never issued).
    UnknownTicket,
}

impl fmt::Display for CompletionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown or already completed ticket")
    }
}

impl std::error::Error for CompletionError {}

/// A cached block, for tools and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    /// Volume offset.
    pub offset: u64,
    /// Block size.
    pub size: u32,
    /// Byte address in the volume's cache space.
    pub cache_addr: u64,
    /// The block's valid bytes (volume range).
    pub valid: Extent,
    /// Its dirty bytes, if any (volume range).
    pub dirty: Option<Extent>,
    /// In-flight work holds it.
    pub pinned: bool,
}

/// One cached volume's cache engine. Single-threaded: the dataplane owns one
/// per volume on the volume's thread.
pub struct Engine {
    pub(crate) cfg: Config,
    /// Block sizes, smallest first.
    pub(crate) sizes: Vec<u32>,
    pub(crate) sector_shift: u32,
    pub(crate) capacity: u64,
    pub(crate) blocks: Blocks,
    pub(crate) groups: Groups,
    pub(crate) admission: Box<dyn AdmissionPolicy>,
    pub(crate) eviction: Box<dyn EvictionPolicy>,
    pub(crate) stats: Stats,
    inflight: Vec<Inflight>,
    free_tickets: Vec<u32>,
    segs: Vec<Seg>,
    cover: Vec<(u64, usize)>,
    /// The write-back ticket of the plan being made, if any.
    wb_ticket: Option<u32>,
    /// Where flushing resumes its scan: (class, slot).
    pub(crate) flush_cursor: (usize, u32),
    /// Blocks the last `complete` dropped.
    dropped: Vec<Evicted>,
    /// Write-back tickets in flight.
    wb_inflight: u32,
    /// Refused requests still waiting, oldest first.
    pub(crate) waiters: Vec<Waiter>,
    next_seq: u64,
    /// Dirty blocks or groups a victim scan passed over (reused buffer).
    pub(crate) skipped: Vec<u32>,
    /// Shadow caches choosing the eviction policy (`EvictionConfig::Auto`).
    pub(crate) chooser: Option<Chooser>,
    /// The volume's LRU miss-ratio curve, sampled (SHARDS).
    mrc: Shards,
    /// Shadow caches choosing the fill floor (`FillSize::Locality`, more
    /// than one block size).
    pub(crate) fill: Option<FillChooser>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("block_sizes", &self.sizes)
            .field("capacity", &self.capacity)
            .field("admission", &self.admission.name())
            .field("eviction", &self.eviction.name())
            .field("cached_blocks", &self.stats.cached_blocks)
            .finish()
    }
}

impl Engine {
    /// An empty cache for one volume.
    pub fn new(cfg: Config) -> Result<Engine, ConfigError> {
        cfg.validate()?;
        let mut sizes = cfg.block_sizes.clone();
        sizes.sort_unstable();
        let group_size = cfg.group_size;
        let n_groups = (cfg.capacity / group_size as u64) as u32;
        let mut stats = Stats::default();
        for (a, &s) in stats.alloc.iter_mut().zip(&sizes) {
            *a = AllocStats {
                size: s,
                ..AllocStats::default()
            };
        }
        let sizes_min = sizes[0];
        let mut e = Engine {
            blocks: Blocks::new(&sizes, group_size, cfg.sector_size),
            groups: Groups::new(n_groups, sizes.len()),
            admission: admission::build(&cfg),
            eviction: eviction::build(&cfg),
            sector_shift: cfg.sector_size.trailing_zeros(),
            capacity: n_groups as u64 * group_size as u64,
            sizes,
            stats,
            inflight: Vec::new(),
            free_tickets: Vec::new(),
            segs: Vec::new(),
            cover: Vec::new(),
            wb_ticket: None,
            flush_cursor: (0, 0),
            dropped: Vec::new(),
            wb_inflight: 0,
            waiters: Vec::new(),
            next_seq: 0,
            skipped: Vec::new(),
            chooser: None,
            mrc: Shards::new(mrc_config(sizes_min)).expect("a valid fixed configuration"),
            fill: None,
            cfg,
        };
        e.chooser = e.new_chooser();
        if e.cfg.fill_size == FillSize::Locality && e.sizes.len() > 1 {
            e.fill = Some(FillChooser::new(e.capacity, &e.sizes));
        }
        Ok(e)
    }

    /// A chooser when the configuration asks for online choice.
    pub(crate) fn new_chooser(&self) -> Option<Chooser> {
        match &self.cfg.eviction {
            EvictionConfig::Auto { candidates } => Some(Chooser::new(
                self.capacity,
                self.sizes[0].trailing_zeros(),
                candidates,
            )),
            _ => None,
        }
    }

    /// The volume's LRU miss-ratio curve over blocks of the smallest size,
    /// estimated by SHARDS from every read and write planned so far:
    /// what the miss ratio would be at other cache sizes.
    pub fn miss_ratio_curve(&mut self) -> Curve {
        self.mrc.settle();
        self.mrc.curve()
    }

    /// The online policy choice's state, when the eviction policy is
    /// `auto`.
    pub fn choice(&self) -> Option<ChoiceReport> {
        self.chooser
            .as_ref()
            .map(|c| c.report(self.eviction.name()))
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Usable cache bytes (whole groups).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The admission policy's counters.
    pub fn admission_counters(&self) -> AdmissionCounters {
        self.admission.counters()
    }

    /// Names of the admission and eviction policies.
    pub fn policy_names(&self) -> (&'static str, &'static str) {
        (self.admission.name(), self.eviction.name())
    }

    /// Tickets in flight.
    pub fn inflight(&self) -> usize {
        self.inflight.len() - self.free_tickets.len()
    }

    /// Write-back tickets (flush or eviction) in flight. With
    /// [`Engine::dirty_bytes`] zero too, the cache holds no data core lacks.
    pub fn writebacks_inflight(&self) -> u32 {
        self.wb_inflight
    }

    /// Exact bytes of the engine's structures.
    pub fn metadata(&self) -> Metadata {
        let inflight = self.inflight.capacity() * std::mem::size_of::<Inflight>()
            + self
                .inflight
                .iter()
                .map(|r| {
                    r.pins.capacity() * 8
                        + r.new_blocks.capacity() * 4
                        + r.undo.capacity() * std::mem::size_of::<Undo>()
                })
                .sum::<usize>()
            + self.free_tickets.capacity() * 4
            + self.dropped.capacity() * std::mem::size_of::<Evicted>()
            + self.waiters.capacity() * std::mem::size_of::<Waiter>()
            + self.segs.capacity() * std::mem::size_of::<Seg>()
            + self.cover.capacity() * 16;
        Metadata {
            blocks: self.blocks.classes.iter().map(|c| c.memory_bytes()).sum(),
            side_tables: self.blocks.ext.memory_bytes() + self.blocks.pins.memory_bytes(),
            groups: self.groups.memory_bytes(),
            inflight,
            admission: self.admission.metadata_bytes(),
            eviction: self.eviction.metadata_bytes()
                + self.chooser.as_ref().map_or(0, |c| c.memory_bytes())
                + self.fill.as_ref().map_or(0, |f| f.memory_bytes()),
            mrc: self.mrc.memory_bytes(),
            cached_blocks: self.stats.cached_blocks,
        }
    }

    /// The cached block covering `offset`, if any.
    pub fn lookup(&self, offset: u64) -> Option<BlockInfo> {
        self.block_at(offset).map(|(id, _)| self.block_info(id))
    }

    /// Whether `offset` and `len` are whole sectors. Sectors are a power of
    /// two (`Config::validate`): a mask, not two divisions per request.
    #[inline]
    pub(crate) fn sector_aligned(&self, offset: u64, len: u64) -> bool {
        (offset | len) & ((1u64 << self.sector_shift) - 1) == 0
    }

    /// The id of the cached block holding byte `offset`, and the block's
    /// volume offset: the smallest size first, as planning looks.
    pub(crate) fn block_at(&self, offset: u64) -> Option<(u32, u64)> {
        self.blocks
            .classes
            .iter()
            .enumerate()
            .find_map(|(c, class)| {
                let key = (offset >> class.shift) as u32;
                class
                    .lookup(key)
                    .map(|slot| (make_id(c, slot), u64::from(key) << class.shift))
            })
    }

    pub(crate) fn block_info(&self, id: u32) -> BlockInfo {
        let start = self.blocks.offset(id);
        let e = self.blocks.ext(id);
        let s = self.sector_shift;
        BlockInfo {
            offset: start,
            size: self.blocks.size(id),
            cache_addr: self.blocks.cache_addr(id),
            valid: Extent {
                offset: start + ((e.valid_lo as u64) << s),
                len: ((e.valid_hi - e.valid_lo) as u64) << s,
            },
            dirty: e.is_dirty().then(|| Extent {
                offset: start + ((e.dirty_lo as u64) << s),
                len: (e.dirty_sectors() as u64) << s,
            }),
            pinned: self.blocks.flags(id) & F_PINNED != 0,
        }
    }

    // ---------------------------------------------------------------- plan

    /// Plans one host request into `plan` (cleared first). On
    /// `PlanStatus::Retry` nothing changed; plan it again after a completion.
    pub fn plan(
        &mut self,
        op: Op,
        offset: u64,
        len: u64,
        plan: &mut Plan,
    ) -> Result<(), RequestError> {
        let waiting = plan.waiting;
        plan.reset(op, offset, len);
        if len == 0 {
            return Err(RequestError::Empty);
        }
        if !self.sector_aligned(offset, len) {
            return Err(RequestError::Unaligned);
        }
        match offset.checked_add(len) {
            Some(e) if e <= self.cfg.volume_size => {}
            _ => return Err(RequestError::OutOfRange),
        }
        let granule = self.sizes[0] as u64;
        let begin = offset / granule * granule;
        let end = (offset + len).div_ceil(granule) * granule;
        let mut segs = std::mem::take(&mut self.segs);
        segs.clear();
        let class = match self.fill.as_ref() {
            Some(f) if op != Op::Deallocate => f.class(),
            _ => 0,
        };
        if class > 0 {
            let window = self.sizes[class] as u64;
            let wb = begin / window * window;
            let we = end.div_ceil(window) * window;
            missing_intervals(
                &self.blocks.classes,
                wb,
                we.min(self.cfg.volume_size),
                &mut segs,
            );
            // The floor's window, else the largest smaller one missing whole.
            widen_to_window(&mut segs, begin, end, &self.sizes[1..=class]);
        } else {
            missing_intervals(&self.blocks.classes, begin, end, &mut segs);
        }

        // Phase 1: conflicts with in-flight work, and with older refused
        // requests (FIFO fairness, see `Waiter`).
        let mut conflict = None;
        let mut writes = op != Op::Read;
        for seg in &segs {
            if let Seg::Cached { id, start, .. } = *seg {
                let pin = self.blocks.pin(id);
                let exclusive = self.needs_exclusive(op, id, start, offset, len);
                writes |= exclusive;
                if conflict.is_none() && (pin.exclusive || (exclusive && pin.shared > 0)) {
                    conflict = self.holder(id);
                    debug_assert!(conflict.is_some(), "pinned without a ticket");
                }
            }
        }
        let (fb, fe) = match (segs.first(), segs.last()) {
            (Some(f), Some(l)) => (f.start(), l.end()),
            _ => (begin, end),
        };
        let seq = waiting.unwrap_or(u64::MAX);
        if conflict.is_none() {
            conflict = self
                .waiters
                .iter()
                .find(|w| w.seq < seq && w.begin < fe && fb < w.end && (w.exclusive || writes))
                .map(|w| w.ticket);
        }
        if let Some(ticket) = conflict {
            let seq = waiting.unwrap_or_else(|| {
                self.next_seq += 1;
                self.next_seq
            });
            let w = Waiter {
                seq,
                begin: fb,
                end: fe,
                exclusive: writes,
                ticket,
            };
            match self.waiters.iter().position(|x| x.seq >= seq) {
                Some(i) if self.waiters[i].seq == seq => self.waiters[i] = w,
                Some(i) => self.waiters.insert(i, w),
                None => self.waiters.push(w),
            }
            plan.status = PlanStatus::Retry;
            plan.retry_after = Some(Ticket(ticket));
            plan.waiting = Some(seq);
            self.stats.retries += 1;
            self.segs = segs;
            return Ok(());
        }
        if waiting.is_some() {
            self.waiters.retain(|w| w.seq != seq);
        }

        // Phase 2.
        if op != Op::Deallocate {
            self.observe(op, offset, len);
        }
        let t = self.take_ticket(op, false);
        if op != Op::Deallocate {
            for seg in &segs {
                if let Seg::Cached { id, start, .. } = *seg {
                    let exclusive = self.needs_exclusive(op, id, start, offset, len);
                    self.pin(t, id, exclusive);
                    self.touch(id);
                }
            }
        }
        let (hit, miss) = match op {
            Op::Read => self.plan_read(t, &segs, plan),
            Op::Write => self.plan_write(t, &segs, plan),
            Op::Deallocate => {
                self.plan_deallocate(t, &segs, plan);
                (0, 0)
            }
        };
        self.segs = segs;

        let rec = &self.inflight[t as usize];
        if rec.pins.is_empty() && rec.new_blocks.is_empty() {
            self.put_ticket(t);
        } else {
            plan.ticket = Some(Ticket(t));
        }
        plan.writeback_ticket = self.wb_ticket.take().map(Ticket);
        let s = match op {
            Op::Read => &mut self.stats.read,
            Op::Write => &mut self.stats.write,
            Op::Deallocate => {
                self.stats.deallocate_requests += 1;
                self.count_volumes(plan);
                return Ok(());
            }
        };
        s.requests += 1;
        s.bytes += len;
        s.hit_bytes += hit;
        s.miss_bytes += miss;
        if miss == 0 {
            s.hit_requests += 1;
        } else {
            s.miss_requests += 1;
            self.stats.missed_requests += 1;
            self.stats.missed_request_bytes += len;
        }
        self.count_volumes(plan);
        Ok(())
    }

    /// What every read and write tells the policies and samplers, hit or
    /// miss, before its blocks are touched.
    pub(crate) fn observe(&mut self, op: Op, offset: u64, len: u64) {
        self.admission.on_request(op, offset, len);
        self.eviction.on_request();
        // Settled before the curve is read (`miss_ratio_curve`).
        self.mrc.access_bytes_deferred(offset, len);
        if let Some(next) = self.chooser.as_mut().and_then(|c| c.observe(offset, len)) {
            self.install_eviction(next);
        }
        if let Some(f) = self.fill.as_mut() {
            f.observe(op == Op::Read, offset, len);
        }
    }

    /// A request found block `id` cached: it and its group move up, and
    /// the eviction policy hears of the hit.
    pub(crate) fn touch(&mut self, id: u32) {
        self.promote(id);
        self.eviction.on_hit(self.block_ref(id));
    }

    /// A ticket in flight that pins `id`. Only asked on a retry, so a scan of
    /// the tickets costs nothing on the hot path and no per-pin memory.
    fn holder(&self, id: u32) -> Option<u32> {
        self.inflight
            .iter()
            .position(|r| r.active && r.pins.iter().any(|&(p, _)| p == id))
            .map(|t| t as u32)
    }

    /// Reads need a block exclusively only to complete a partial block.
    pub(crate) fn needs_exclusive(
        &self,
        op: Op,
        id: u32,
        start: u64,
        offset: u64,
        len: u64,
    ) -> bool {
        if op != Op::Read {
            return true;
        }
        if self.blocks.flags(id) & F_EXT == 0 {
            return false;
        }
        let e = self.blocks.ext(id);
        let end = start + self.blocks.size(id) as u64;
        let (rs, re) = (start.max(offset), end.min(offset + len));
        let s = self.sector_shift;
        let (vs, ve) = (
            start + ((e.valid_lo as u64) << s),
            start + ((e.valid_hi as u64) << s),
        );
        !(rs >= vs && re <= ve)
    }

    fn plan_read(&mut self, t: u32, segs: &[Seg], plan: &mut Plan) -> (u64, u64) {
        let (o, e) = (plan.request.offset, plan.request.end());
        let s = self.sector_shift;
        let (mut hit, mut miss) = (0u64, 0u64);
        for seg in segs {
            match *seg {
                Seg::Cached { id, start, end } => {
                    let (rs, re) = (start.max(o), end.min(e));
                    let addr = self.blocks.cache_addr(id);
                    let ex = self.blocks.ext(id);
                    let vs = start + ((ex.valid_lo as u64) << s);
                    let ve = start + ((ex.valid_hi as u64) << s);
                    let (cs, ce) = (rs.max(vs), re.min(ve));
                    if cs < ce {
                        Plan::push_io(&mut plan.cache_reads, cs, ce - cs, addr + cs - start);
                        hit += ce - cs;
                    }
                    if rs >= vs && re <= ve {
                        continue;
                    }
                    // Complete the partial block just enough to cover the
                    // read: it stays one contiguous valid extent.
                    miss += (re - rs) - ce.saturating_sub(cs);
                    let (hs, he) = (rs.min(vs), re.max(ve));
                    if hs < vs {
                        Plan::push_io(&mut plan.fills, hs, vs - hs, addr + hs - start);
                    }
                    if ve < he {
                        Plan::push_io(&mut plan.fills, ve, he - ve, addr + ve - start);
                    }
                    self.inflight[t as usize].undo.push(Undo { id, before: ex });
                    self.set_ext(
                        id,
                        Ext {
                            valid_lo: ((hs - start) >> s) as u16,
                            valid_hi: ((he - start) >> s) as u16,
                            ..ex
                        },
                    );
                }
                Seg::Missing { start, end } => {
                    let mut cover = std::mem::take(&mut self.cover);
                    cover.clear();
                    greedy_cover(&self.sizes, start, end, &mut cover);
                    for &(boff, class) in &cover {
                        let size = self.sizes[class] as u64;
                        let (hs, he) = (boff.max(o), (boff + size).min(e));
                        miss += he.saturating_sub(hs);
                        match self.try_insert(t, Op::Read, boff, class, plan) {
                            Some(id) => {
                                // AdaCache fills the whole block on a read
                                // miss; the block size already follows the
                                // request size (or, under fill sizing by
                                // locality, the observed locality).
                                let addr = self.blocks.cache_addr(id);
                                Plan::push_io(&mut plan.fills, boff, size, addr);
                            }
                            None if he > hs => {
                                Plan::push_extent(&mut plan.core_reads, hs, he - hs);
                                self.stats.bypassed_bytes += he - hs;
                            }
                            None => {}
                        }
                    }
                    self.cover = cover;
                }
            }
        }
        (hit, miss)
    }

    fn plan_write(&mut self, t: u32, segs: &[Seg], plan: &mut Plan) -> (u64, u64) {
        let (o, e) = (plan.request.offset, plan.request.end());
        let s = self.sector_shift;
        let mode = self.cfg.write_mode;
        let write_back = mode == WriteMode::WriteBack;
        let (mut hit, mut miss) = (0u64, 0u64);
        for seg in segs {
            match *seg {
                Seg::Cached { id, start, end } => {
                    let (ws, we) = (start.max(o), end.min(e));
                    hit += we - ws;
                    let addr = self.blocks.cache_addr(id);
                    let ex = self.blocks.ext(id);
                    self.inflight[t as usize].undo.push(Undo { id, before: ex });
                    let a = ((ws - start) >> s) as u16;
                    let b = ((we - start) >> s) as u16;
                    // A write disjoint from a partial block's valid extent
                    // fills the gap so the extent stays contiguous.
                    let gap = if b < ex.valid_lo {
                        Some((b, ex.valid_lo))
                    } else if a > ex.valid_hi {
                        Some((ex.valid_hi, a))
                    } else {
                        None
                    };
                    if let Some((gl, gh)) = gap {
                        let gs = start + ((gl as u64) << s);
                        let len = ((gh - gl) as u64) << s;
                        Plan::push_io(&mut plan.fills, gs, len, addr + gs - start);
                    }
                    let mut n = ex;
                    n.valid_lo = ex.valid_lo.min(a);
                    n.valid_hi = ex.valid_hi.max(b);
                    if write_back {
                        if ex.is_dirty() {
                            n.dirty_lo = ex.dirty_lo.min(a);
                            n.dirty_hi = ex.dirty_hi.max(b);
                        } else {
                            n.dirty_lo = a;
                            n.dirty_hi = b;
                        }
                    }
                    self.set_ext(id, n);
                    Plan::push_io(&mut plan.cache_writes, ws, we - ws, addr + ws - start);
                }
                Seg::Missing { start, end } => {
                    if mode == WriteMode::WriteAround {
                        miss += end.min(e) - start.max(o);
                        continue;
                    }
                    let mut cover = std::mem::take(&mut self.cover);
                    cover.clear();
                    greedy_cover(&self.sizes, start, end, &mut cover);
                    for &(boff, class) in &cover {
                        let size = self.sizes[class] as u64;
                        let bend = boff + size;
                        let (hs, he) = (boff.max(o), bend.min(e));
                        if he <= hs {
                            // Not under fill sizing's widened windows, which
                            // always cover the request.
                            continue;
                        }
                        miss += he - hs;
                        let Some(id) = self.try_insert(t, Op::Write, boff, class, plan) else {
                            if write_back {
                                Plan::push_extent(&mut plan.core_writes, hs, he - hs);
                            }
                            self.stats.bypassed_bytes += he - hs;
                            continue;
                        };
                        let addr = self.blocks.cache_addr(id);
                        Plan::push_io(&mut plan.cache_writes, hs, he - hs, addr + hs - boff);
                        let a = ((hs - boff) >> s) as u16;
                        let b = ((he - boff) >> s) as u16;
                        let mut n = Ext::full(self.blocks.classes[class].sectors, false);
                        let partial = hs > boff || he < bend;
                        match self.cfg.write_miss_fill {
                            WriteMissFill::WholeBlock if partial => {
                                Plan::push_io(&mut plan.fills, boff, size, addr);
                                plan.fills_before_cache_writes = true;
                            }
                            WriteMissFill::HeadTail if partial => {
                                Plan::push_io(&mut plan.fills, boff, hs - boff, addr);
                                Plan::push_io(&mut plan.fills, he, bend - he, addr + he - boff);
                            }
                            WriteMissFill::Sparse => {
                                n.valid_lo = a;
                                n.valid_hi = b;
                            }
                            _ => {}
                        }
                        if write_back {
                            n.dirty_lo = a;
                            n.dirty_hi = b;
                        }
                        self.set_ext(id, n);
                    }
                    self.cover = cover;
                }
            }
        }
        if !write_back {
            Plan::push_extent(&mut plan.core_writes, o, e - o);
        }
        (hit, miss)
    }

    /// Deallocated ranges read as zeroes afterwards (core does after its
    /// discard): blocks fully covered are invalidated, a range at an edge
    /// of a block's valid extent trims it, and a hole in the middle is
    /// zeroed in the cache under an exclusive pin (dirty data around it
    /// stays dirty; a dirty hole writes zeroes back later, as core has).
    fn plan_deallocate(&mut self, t: u32, segs: &[Seg], plan: &mut Plan) {
        let (o, e) = (plan.request.offset, plan.request.end());
        let s = self.sector_shift;
        for seg in segs {
            let Seg::Cached { id, start, end } = *seg else {
                continue;
            };
            let (ds, de) = (start.max(o), end.min(e));
            let ex = self.blocks.ext(id);
            let a = ((ds - start) >> s) as u16;
            let b = ((de - start) >> s) as u16;
            let (vl, vh) = (ex.valid_lo, ex.valid_hi);
            let (nl, nh) = if b <= vl || a >= vh {
                continue;
            } else if a <= vl && b >= vh {
                plan.evicted.push(Evicted {
                    offset: start,
                    size: self.blocks.size(id),
                    cache_addr: self.blocks.cache_addr(id),
                });
                self.remove_block(id, true);
                self.stats.invalidated_blocks += 1;
                continue;
            } else if a <= vl && b > vl {
                (b, vh)
            } else if a < vh && b >= vh {
                (vl, a)
            } else {
                let addr = self.blocks.cache_addr(id);
                Plan::push_io(&mut plan.cache_zeroes, ds, de - ds, addr + ds - start);
                self.pin(t, id, true);
                self.inflight[t as usize].undo.push(Undo { id, before: ex });
                continue;
            };
            let mut n = ex;
            n.valid_lo = nl;
            n.valid_hi = nh;
            if ex.is_dirty() {
                n.dirty_lo = ex.dirty_lo.max(nl);
                n.dirty_hi = ex.dirty_hi.min(nh);
                if n.dirty_lo >= n.dirty_hi {
                    n.dirty_lo = 0;
                    n.dirty_hi = 0;
                }
                let dropped = ex.dirty_sectors() - n.dirty_sectors();
                self.stats.discarded_dirty_bytes += (dropped as u64) << s;
            }
            self.set_ext(id, n);
        }
        Plan::push_extent(&mut plan.discards, o, e - o);
    }

    fn count_volumes(&mut self, plan: &Plan) {
        let sum_io = |v: &[CacheIo]| v.iter().map(|x| x.len).sum::<u64>();
        let sum_ext = |v: &[Extent]| v.iter().map(|x| x.len).sum::<u64>();
        let fills = sum_io(&plan.fills);
        let wbs = sum_io(&plan.writebacks);
        self.stats.read_from_core += fills + sum_ext(&plan.core_reads);
        self.stats.write_to_cache +=
            fills + sum_io(&plan.cache_writes) + sum_io(&plan.cache_zeroes);
        self.stats.read_from_cache += sum_io(&plan.cache_reads) + wbs;
        self.stats.write_to_core += sum_ext(&plan.core_writes) + wbs;
    }

    // ---------------------------------------------------------- completion

    /// Reports the outcome of a ticket's I/O.
    ///
    /// `Ok` makes inserted blocks readable and releases pins; for a
    /// write-back ticket it marks the written-back data clean. `Failed` rolls
    /// back: inserted blocks are dropped, completed partial blocks return to
    /// their previous extent, blocks a failed write touched are dropped if
    /// they were clean (their cached bytes are unknown) and keep their old
    /// dirty extent otherwise (the written range is undefined, as after any
    /// failed write); a failed write-back leaves its blocks dirty.
    pub fn complete(&mut self, ticket: Ticket, outcome: Completion) -> Result<(), CompletionError> {
        let t = ticket.0 as usize;
        if t >= self.inflight.len() || !self.inflight[t].active {
            return Err(CompletionError::UnknownTicket);
        }
        let mut rec = std::mem::take(&mut self.inflight[t]);
        self.dropped.clear();
        if !self.waiters.is_empty() {
            self.waiters.retain(|w| w.ticket != t as u32);
        }
        if outcome == Completion::Failed {
            self.stats.failed_completions += 1;
        }
        if rec.writeback {
            self.wb_inflight -= 1;
            for &(id, _) in &rec.pins {
                if outcome == Completion::Ok {
                    let mut e = self.blocks.ext(id);
                    e.dirty_lo = 0;
                    e.dirty_hi = 0;
                    self.set_ext(id, e);
                }
                self.unpin(id, PinKind::Writeback);
            }
        } else {
            for &(id, exclusive) in &rec.pins {
                let kind = if exclusive {
                    PinKind::Exclusive
                } else {
                    PinKind::Shared
                };
                self.unpin(id, kind);
            }
            if outcome == Completion::Failed {
                for &id in &rec.new_blocks {
                    self.drop_block(id);
                }
                for u in &rec.undo {
                    // A failed write or cache zeroing leaves the range
                    // undefined: a clean block can no longer be trusted.
                    if rec.op != Some(Op::Read) && !u.before.is_dirty() {
                        self.drop_block(u.id);
                    } else {
                        self.set_ext(u.id, u.before);
                    }
                }
            }
        }
        rec.pins.clear();
        rec.new_blocks.clear();
        rec.undo.clear();
        rec.active = false;
        self.inflight[t] = rec;
        self.free_tickets.push(t as u32);
        Ok(())
    }

    /// The blocks the last [`Engine::complete`] dropped (a failed ticket's
    /// new blocks, and clean blocks a failed write touched). The runtime
    /// persists their removal like a plan's `evicted`.
    pub fn dropped(&self) -> &[Evicted] {
        &self.dropped
    }

    /// Invalidates a block a failed ticket leaves undefined.
    fn drop_block(&mut self, id: u32) {
        self.dropped.push(Evicted {
            offset: self.blocks.offset(id),
            size: self.blocks.size(id),
            cache_addr: self.blocks.cache_addr(id),
        });
        self.remove_block(id, true);
        self.stats.invalidated_blocks += 1;
    }

    /// The pins of every ticket in flight, and whether it is a write-back
    /// (for the invariant checker).
    pub(crate) fn inflight_records(&self) -> impl Iterator<Item = (&[(u32, bool)], bool)> {
        self.inflight
            .iter()
            .filter(|r| r.active)
            .map(|r| (&r.pins[..], r.writeback))
    }

    fn take_ticket(&mut self, op: Op, writeback: bool) -> u32 {
        let t = match self.free_tickets.pop() {
            Some(t) => t,
            None => {
                self.inflight.push(Inflight::default());
                self.inflight.len() as u32 - 1
            }
        };
        self.wb_inflight += writeback as u32;
        let r = &mut self.inflight[t as usize];
        r.active = true;
        r.writeback = writeback;
        r.op = Some(op);
        t
    }

    fn put_ticket(&mut self, t: u32) {
        self.inflight[t as usize].active = false;
        self.free_tickets.push(t);
    }

    // ------------------------------------------------------ block life cycle

    pub(crate) fn block_ref(&self, id: u32) -> BlockRef {
        BlockRef {
            id,
            class: id_class(id),
            slot: id_index(id),
            offset: self.blocks.offset(id),
            group: self.blocks.group(id),
            reused: self.blocks.flags(id) & F_REUSED != 0,
        }
    }

    /// Moves a block and its group to the heads of the LRU lists.
    fn promote(&mut self, id: u32) {
        *self.blocks.flags_mut(id) |= F_REUSED;
        self.blocks
            .lru
            .move_to_front(&mut self.blocks.classes[..], id);
        let g = self.blocks.group(id);
        self.groups.touch(g);
    }

    fn pin(&mut self, t: u32, id: u32, exclusive: bool) {
        let kind = if self.inflight[t as usize].writeback {
            PinKind::Writeback
        } else if exclusive {
            PinKind::Exclusive
        } else {
            PinKind::Shared
        };
        if self.blocks.add_pin(id, kind) {
            let g = self.blocks.group(id);
            self.groups.groups[g as usize].pinned += 1;
        }
        self.inflight[t as usize].pins.push((id, exclusive));
    }

    fn unpin(&mut self, id: u32, kind: PinKind) {
        if self.blocks.drop_pin(id, kind) {
            let g = self.blocks.group(id);
            self.groups.groups[g as usize].pinned -= 1;
        }
    }

    /// Stores extents and keeps the dirty counters in step: the one place
    /// block state changes.
    pub(crate) fn set_ext(&mut self, id: u32, e: Ext) {
        let old = self.blocks.ext(id);
        let s = self.sector_shift;
        self.stats.dirty_bytes -= (old.dirty_sectors() as u64) << s;
        self.stats.dirty_bytes += (e.dirty_sectors() as u64) << s;
        if old.is_dirty() != e.is_dirty() {
            let g = self.blocks.group(id) as usize;
            if e.is_dirty() {
                self.groups.groups[g].dirty += 1;
            } else {
                self.groups.groups[g].dirty -= 1;
            }
        }
        self.blocks.store_ext(id, e);
    }

    /// Admission, space and insertion for one Algorithm 2 block.
    fn try_insert(
        &mut self,
        t: u32,
        op: Op,
        offset: u64,
        class: usize,
        plan: &mut Plan,
    ) -> Option<u32> {
        self.eviction.on_miss(offset);
        let needs_reclaim = self.needs_reclaim(class);
        let tail = self.blocks.lru.tail;
        let victim = (needs_reclaim && tail != NIL).then(|| self.blocks.offset(tail));
        let candidate = Candidate {
            op,
            offset,
            size: self.sizes[class],
        };
        if !self.admission.admit(&candidate, victim) {
            self.stats.admission_rejects += 1;
            return None;
        }
        let id = if needs_reclaim {
            if tail != NIL && !self.eviction.chooses_victims() {
                let cached = self.stats.cached_blocks as u32;
                let verdict = self
                    .eviction
                    .on_full_miss(offset, self.block_ref(tail), cached);
                if verdict == Verdict::Keep {
                    self.stats.lazy_keeps += 1;
                    self.promote(tail);
                    return None;
                }
            }
            match self.reclaim(class, plan) {
                Some(id) => id,
                None => {
                    self.stats.no_victim += 1;
                    return None;
                }
            }
        } else {
            self.alloc_free(class).expect("free space was found")
        };
        self.insert_block(id, (offset >> self.blocks.classes[class].shift) as u32);
        self.pin(t, id, true);
        self.inflight[t as usize].new_blocks.push(id);
        Some(id)
    }

    fn open_has_room(&self, class: usize) -> bool {
        let g = self.groups.open[class];
        g != NIL
            && (self.groups.groups[g as usize].cursor as u32) < self.blocks.classes[class].per_group
    }

    fn needs_reclaim(&self, class: usize) -> bool {
        self.blocks.holes[class].len == 0
            && !self.open_has_room(class)
            && self.groups.free.is_empty()
    }

    /// A slot from a hole, the open group or a free group.
    fn alloc_free(&mut self, class: usize) -> Option<u32> {
        if let Some(id) = self.blocks.holes[class].pop_front(&mut self.blocks.classes[..]) {
            return Some(id);
        }
        if let Some(id) = self.take_open_slot(class) {
            return Some(id);
        }
        let g = *self.groups.free.last()?;
        let chunk = self.blocks.classes[class].take_chunk(g);
        self.groups.open_free(class, chunk);
        self.take_open_slot(class)
    }

    pub(crate) fn take_open_slot(&mut self, class: usize) -> Option<u32> {
        let g = self.groups.open[class];
        if g == NIL {
            return None;
        }
        let per = self.blocks.classes[class].per_group;
        let grp = &mut self.groups.groups[g as usize];
        if grp.cursor as u32 >= per {
            self.groups.open[class] = NIL;
            return None;
        }
        let idx = grp.chunk * per + grp.cursor as u32;
        grp.cursor += 1;
        if grp.cursor as u32 == per {
            self.groups.open[class] = NIL;
        }
        Some(make_id(class, idx))
    }

    /// AdaCache III.D on a full cache: the block LRU tail if it has the
    /// wanted size, else the group LRU tail. Dirty victims are written back
    /// (and skipped) instead of waiting: the scan moves on to the next group,
    /// up to `max_victim_scan` groups, and a miss that finds nothing clean
    /// bypasses the cache (io-caches-fast-devices 5.3, Fig. 11c).
    fn reclaim(&mut self, class: usize, plan: &mut Plan) -> Option<u32> {
        if self.eviction.chooses_victims() {
            return self.reclaim_chosen(class, plan);
        }
        let tail = self.blocks.lru.tail;
        if tail != NIL && id_class(tail) == class {
            let f = self.blocks.flags(tail);
            if f & (F_PINNED | F_DIRTY) == 0 {
                let g = self.blocks.group(tail);
                self.evict_block(tail, &mut plan.evicted);
                self.groups.touch(g);
                self.stats.replaced_blocks += 1;
                return Some(tail);
            }
            if self.can_write_back(tail) {
                self.start_writeback(tail, plan);
            }
        }
        let mut g = self.groups.lru.tail;
        let mut scanned = 0;
        while g != NIL && scanned < self.cfg.max_victim_scan {
            scanned += 1;
            let grp = self.groups.groups[g as usize];
            if grp.pinned == 0 && grp.dirty == 0 {
                self.evict_group(g, &mut plan.evicted);
                let chunk = self.blocks.classes[class].take_chunk(g);
                self.groups.assign(g, class, chunk);
                self.stats.evicted_groups += 1;
                return self.take_open_slot(class);
            }
            if grp.dirty > 0 {
                // Pinned or not: readers do not stop a write-back.
                self.clean_group(g, plan);
            }
            g = grp.prev;
        }
        None
    }

    pub(crate) fn evict_block(&mut self, id: u32, out: &mut Vec<Evicted>) {
        let size = self.blocks.size(id);
        out.push(Evicted {
            offset: self.blocks.offset(id),
            size,
            cache_addr: self.blocks.cache_addr(id),
        });
        self.stats.evicted_blocks += 1;
        self.stats.evicted_bytes += size as u64;
        self.remove_block(id, false);
    }

    /// Evicts every block of `g` and takes it off the LRU; the caller reuses it.
    pub(crate) fn evict_group(&mut self, g: u32, out: &mut Vec<Evicted>) {
        let grp = self.groups.groups[g as usize];
        let class = grp.class as usize;
        let per = self.blocks.classes[class].per_group;
        for slot in 0..grp.cursor as u32 {
            let id = make_id(class, grp.chunk * per + slot);
            if self.blocks.entry(id).key != FREE_KEY {
                self.evict_block(id, out);
            } else {
                self.blocks.holes[class].remove(&mut self.blocks.classes[..], id);
            }
        }
        self.blocks.classes[class].release_chunk(grp.chunk);
        self.groups.unlink(g);
    }

    /// Returns an empty, non-open group to the free list.
    fn free_group(&mut self, g: u32) {
        let grp = self.groups.groups[g as usize];
        let class = grp.class as usize;
        let per = self.blocks.classes[class].per_group;
        for slot in 0..grp.cursor as u32 {
            let id = make_id(class, grp.chunk * per + slot);
            self.blocks.holes[class].remove(&mut self.blocks.classes[..], id);
        }
        self.blocks.classes[class].release_chunk(grp.chunk);
        self.groups.release(g);
    }

    pub(crate) fn clean_group(&mut self, g: u32, plan: &mut Plan) {
        let grp = self.groups.groups[g as usize];
        let class = grp.class as usize;
        let per = self.blocks.classes[class].per_group;
        for slot in 0..grp.cursor as u32 {
            let id = make_id(class, grp.chunk * per + slot);
            if self.blocks.entry(id).key != FREE_KEY && self.can_write_back(id) {
                self.start_writeback(id, plan);
            }
        }
    }

    /// A dirty block can be written back unless a write owns it, a
    /// write-back is already in flight, or a refused write waits for it. A
    /// write-back only reads the cache, so readers do not stop it: a dirty
    /// block that is read all the time still gets cleaned.
    pub(crate) fn can_write_back(&self, id: u32) -> bool {
        let f = self.blocks.flags(id);
        if f & F_DIRTY == 0 {
            return false;
        }
        if f & F_PINNED != 0 {
            let p = self.blocks.pin(id);
            if p.exclusive || p.writeback {
                return false;
            }
        }
        if self.waiters.is_empty() {
            return true;
        }
        let start = self.blocks.offset(id);
        let end = start + self.blocks.size(id) as u64;
        !self
            .waiters
            .iter()
            .any(|w| w.exclusive && w.begin < end && start < w.end)
    }

    /// Refused requests still waiting, oldest first (for the checker).
    pub(crate) fn waiters(&self) -> &[Waiter] {
        &self.waiters
    }

    pub(crate) fn ticket_active(&self, t: u32) -> bool {
        self.inflight.get(t as usize).is_some_and(|r| r.active)
    }

    /// Adds a block's dirty extent to the plan's write-backs.
    pub(crate) fn start_writeback(&mut self, id: u32, plan: &mut Plan) {
        let w = match self.wb_ticket {
            Some(w) => w,
            None => {
                let w = self.take_ticket(Op::Write, true);
                self.wb_ticket = Some(w);
                w
            }
        };
        let e = self.blocks.ext(id);
        let start = self.blocks.offset(id);
        let s = self.sector_shift;
        let ds = start + ((e.dirty_lo as u64) << s);
        let len = (e.dirty_sectors() as u64) << s;
        let addr = self.blocks.cache_addr(id);
        Plan::push_io(&mut plan.writebacks, ds, len, addr + ds - start);
        self.pin(w, id, false);
        self.stats.writeback_blocks += 1;
        self.stats.writeback_bytes += len;
    }

    /// Finishes the write-back ticket of a flush plan.
    pub(crate) fn finish_flush_plan(&mut self, plan: &mut Plan) {
        plan.writeback_ticket = self.wb_ticket.take().map(Ticket);
        self.count_volumes(plan);
    }

    pub(crate) fn insert_block(&mut self, id: u32, key: u32) {
        let class = id_class(id);
        let idx = id_index(id);
        let c = &mut self.blocks.classes[class];
        c.entries[idx as usize].key = key;
        c.flags[idx as usize] = 0;
        let entries = &c.entries;
        c.index.insert(key, idx, |s| entries[s as usize].key);
        self.blocks.lru.push_front(&mut self.blocks.classes[..], id);
        let g = self.blocks.group(id);
        self.groups.groups[g as usize].live += 1;
        self.groups.touch(g);
        self.eviction.on_insert(self.block_ref(id));
        let size = self.sizes[class] as u64;
        self.stats.cached_blocks += 1;
        self.stats.cached_bytes += size;
        self.stats.alloc[class].blocks += 1;
        self.stats.alloc[class].cached += 1;
    }

    /// Fill sizing's state: the active floor and each candidate's shadow.
    /// `None` unless the configuration sizes fills by locality.
    pub fn fill_report(&self) -> Option<FillReport> {
        self.fill.as_ref().map(|f| f.report(&self.sizes))
    }

    /// Forgets a block. `to_hole`: the slot becomes a hole (and an emptied
    /// group is freed); otherwise the caller reuses the slot or the group.
    fn remove_block(&mut self, id: u32, to_hole: bool) {
        let class = id_class(id);
        let idx = id_index(id);
        debug_assert_eq!(
            self.blocks.flags(id) & F_PINNED,
            0,
            "removing a pinned block"
        );
        let block = self.block_ref(id);
        let e = self.blocks.ext(id);
        let g = self.blocks.group(id);
        if e.is_dirty() {
            debug_assert!(to_hole, "evicting dirty data");
            let bytes = (e.dirty_sectors() as u64) << self.sector_shift;
            self.stats.dirty_bytes -= bytes;
            self.stats.discarded_dirty_bytes += bytes;
            self.groups.groups[g as usize].dirty -= 1;
        }
        if self.blocks.flags(id) & F_EXT != 0 {
            self.blocks.ext.remove(id);
        }
        let c = &mut self.blocks.classes[class];
        let key = c.entries[idx as usize].key;
        let entries = &c.entries;
        c.index.remove(key, |s| entries[s as usize].key);
        self.blocks.lru.remove(&mut self.blocks.classes[..], id);
        let c = &mut self.blocks.classes[class];
        c.entries[idx as usize].key = FREE_KEY;
        c.flags[idx as usize] = 0;
        self.eviction.on_remove(block, !to_hole);
        self.groups.groups[g as usize].live -= 1;
        let size = self.sizes[class] as u64;
        self.stats.cached_blocks -= 1;
        self.stats.cached_bytes -= size;
        self.stats.alloc[class].cached -= 1;
        if to_hole {
            self.blocks.holes[class].push_front(&mut self.blocks.classes[..], id);
            if self.groups.groups[g as usize].live == 0 && self.groups.open[class] != g {
                self.free_group(g);
            }
        }
    }
}

/// Fill sizing by locality: `segs` cover the request's aligned range
/// `[begin, end)` widened to bounds aligned to the largest of `windows`
/// (block sizes, smallest first). Keeps the segments that overlap the
/// request; a missing one is widened to the largest window size whose
/// windows around its part of the request are missing whole, else clipped
/// to the request (a window holding a cached block is not filled around
/// it, so no fill is split into small speculative blocks).
fn widen_to_window(segs: &mut Vec<Seg>, begin: u64, end: u64, windows: &[u32]) {
    segs.retain(|s| s.start() < end && s.end() > begin);
    for seg in segs.iter_mut() {
        if let Seg::Missing { start, end: stop } = *seg {
            let (s, e) = (start.max(begin), stop.min(end));
            let (a, b) = windows
                .iter()
                .rev()
                .map(|&w| {
                    let w = w as u64;
                    (s / w * w, e.div_ceil(w) * w)
                })
                .find(|&(a, b)| a >= start && b <= stop)
                .unwrap_or((s, e));
            *seg = Seg::Missing { start: a, end: b };
        }
    }
}

/// Blocks a volume's miss-ratio curve tracks at most: with the histogram
/// bound below, about 150 KiB per volume whatever its size.
const MRC_MAX_KEYS: u32 = 4096;
/// Reuse-distance buckets of a volume's curve.
const MRC_BUCKETS: u32 = 1024;
/// Past this many blocks tracked, at most 1 block in 8 is sampled: every
/// reference of a working set of 8,192 blocks (256 MiB of 32 KiB blocks)
/// was otherwise sampled at rate 1/2, and a sampled reference costs a read
/// hit more than the rest of the engine's bookkeeping (docs/benchmarks.md,
/// "A cap on the curve's sampling rate"). 1,024 sampled blocks still give
/// a close curve (unit test `a_capped_rate_stays_close_to_the_exact_curve`);
/// the online policy choice caps its shadows' rate at 1/8 for the same
/// reason.
const MRC_RATE_CAP: RateCap = RateCap {
    keys: 1024,
    rate: 1.0 / 8.0,
};

/// The curve sampler of a volume whose smallest block is `block` bytes:
/// fixed-size SHARDS, exact until the volume has touched
/// `MRC_RATE_CAP.keys` blocks, then at most 1 in 8 of them, and at most
/// `MRC_MAX_KEYS` blocks.
fn mrc_config(block: u32) -> ShardsConfig {
    ShardsConfig {
        max_buckets: Some(MRC_BUCKETS),
        rate_cap: Some(MRC_RATE_CAP),
        ..ShardsConfig::fixed_size(block, 1.0, MRC_MAX_KEYS)
    }
}
