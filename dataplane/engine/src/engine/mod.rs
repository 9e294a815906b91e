//! The per-volume cache engine: the [`Engine`] type, its parts and what
//! it reports. Each job is a file:
//!
//! - `planning.rs`: a request's two phases (conflicts, then pins and
//!   per-op planning) and its statistics;
//! - `per_op.rs`: planning reads, writes and deallocates over the probed
//!   segments;
//! - `conflicts.rs`: in-flight conflicts and the FIFO of refused requests;
//! - `tickets.rs`: tickets, pins and completion (commit or roll back);
//! - `space.rs`: admission, free space and reclaiming it (AdaCache III.D);
//! - `writeback.rs`: which dirty blocks may be written back, and the
//!   write-back ticket;
//! - `lifecycle.rs`: a block's insertion, promotion, extents and removal.

mod conflicts;
mod lifecycle;
mod per_op;
mod planning;
mod space;
mod tickets;
mod writeback;

use crate::admission::{self, AdmissionCounters, AdmissionPolicy};
use crate::alloc::Seg;
use crate::blocks::{make_id, Blocks, F_PINNED};
use crate::choice::{ChoiceReport, Chooser};
use crate::config::{Config, ConfigError, EvictionConfig, FillSize};
use crate::eviction::{self, EvictionPolicy};
use crate::fill::{FillChooser, FillReport};
use crate::group::Groups;
use crate::mrc::{Curve, RateCap, Shards, ShardsConfig};
use crate::plan::Extent;
use crate::stats::{AllocStats, Metadata, Stats};
use std::fmt;

use conflicts::Waiters;
use tickets::Tickets;

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
    /// What watches every read and write besides the policies.
    pub(crate) observers: Observers,
    /// Tickets in flight and what they hold.
    tickets: Tickets,
    /// Refused requests still waiting, oldest first.
    pub(crate) waiters: Waiters,
    /// Buffers reused from request to request.
    pub(crate) scratch: Scratch,
    /// Where flushing resumes its scan: (class, slot).
    pub(crate) flush_cursor: (usize, u32),
    /// Dirty blocks are never written back to make room (a mirror's: see
    /// [`Engine::set_hold_dirty`]).
    pub(crate) hold_dirty: bool,
}

/// What watches the request stream besides the admission and eviction
/// policies: shadows that choose, and the curve the simulator prints.
pub(crate) struct Observers {
    /// Shadow caches choosing the eviction policy (`EvictionConfig::Auto`).
    pub(crate) chooser: Option<Chooser>,
    /// The volume's LRU miss-ratio curve, sampled (SHARDS).
    pub(crate) mrc: Shards,
    /// Shadow caches choosing the fill floor (`FillSize::Locality`, more
    /// than one block size).
    pub(crate) fill: Option<FillChooser>,
}

/// Buffers planning reuses, so that a request allocates nothing once they
/// have grown.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// A request's segments (Algorithm 1).
    pub(crate) segs: Vec<Seg>,
    /// A missing interval's cover: (block offset, class) (Algorithm 2).
    pub(crate) cover: Vec<(u64, usize)>,
    /// Dirty blocks or groups a victim scan passed over.
    pub(crate) skipped: Vec<u32>,
}

impl Scratch {
    /// Bytes of the buffers planning keeps (the victim scan's is not
    /// counted).
    fn memory_bytes(&self) -> usize {
        self.segs.capacity() * std::mem::size_of::<Seg>() + self.cover.capacity() * 16
    }
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
            observers: Observers {
                chooser: None,
                mrc: Shards::new(mrc_config(sizes_min)).expect("a valid fixed configuration"),
                fill: None,
            },
            tickets: Tickets::default(),
            waiters: Waiters::default(),
            scratch: Scratch::default(),
            flush_cursor: (0, 0),
            hold_dirty: false,
            cfg,
        };
        e.observers.chooser = e.new_chooser();
        if e.cfg.fill_size == FillSize::Locality && e.sizes.len() > 1 {
            e.observers.fill = Some(FillChooser::new(e.capacity, &e.sizes));
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
        self.observers.mrc.settle();
        self.observers.mrc.curve()
    }

    /// The online policy choice's state, when the eviction policy is
    /// `auto`.
    pub fn choice(&self) -> Option<ChoiceReport> {
        self.observers
            .chooser
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
        self.tickets.in_flight()
    }

    /// Write-back tickets (flush or eviction) in flight. With
    /// [`Engine::dirty_bytes`] zero too, the cache holds no data core lacks.
    pub fn writebacks_inflight(&self) -> u32 {
        self.tickets.writebacks_in_flight()
    }

    /// Exact bytes of the engine's structures.
    pub fn metadata(&self) -> Metadata {
        let inflight =
            self.tickets.memory_bytes() + self.waiters.memory_bytes() + self.scratch.memory_bytes();
        Metadata {
            blocks: self.blocks.classes.iter().map(|c| c.memory_bytes()).sum(),
            side_tables: self.blocks.ext.memory_bytes() + self.blocks.pins.memory_bytes(),
            groups: self.groups.memory_bytes(),
            inflight,
            admission: self.admission.metadata_bytes(),
            eviction: self.eviction.metadata_bytes()
                + self
                    .observers
                    .chooser
                    .as_ref()
                    .map_or(0, |c| c.memory_bytes())
                + self.observers.fill.as_ref().map_or(0, |f| f.memory_bytes()),
            mrc: self.observers.mrc.memory_bytes(),
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

    /// Fill sizing's state: the active floor and each candidate's shadow.
    /// `None` unless the configuration sizes fills by locality.
    pub fn fill_report(&self) -> Option<FillReport> {
        self.observers.fill.as_ref().map(|f| f.report(&self.sizes))
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
