//! Engine configuration and its validation.
//!
//! Everything the engine does is decided by this struct and the sequence of
//! calls made on it, which is what makes the simulator and the dataplane agree.

use std::fmt;

/// Smallest block size the engine accepts (4 KiB).
pub const MIN_BLOCK_SIZE: u32 = 4 << 10;
/// Largest block size the engine accepts (1 MiB).
pub const MAX_BLOCK_SIZE: u32 = 1 << 20;
/// Most distinct block sizes (4 KiB .. 1 MiB are nine powers of two).
pub const MAX_CLASSES: usize = 9;

/// Most blocks of the smallest size a volume may hold: block keys are `u32`
/// block numbers (offset / block size) and `u32::MAX` marks a free slot, so
/// the last block's number must stay below it.
pub const MAX_VOLUME_BLOCKS: u64 = u32::MAX as u64 - 1;

/// The largest volume the engine caches when its smallest block size is
/// `smallest_block`: 16 TiB - 8 KiB at 4 KiB, 128 TiB - 64 KiB at 32 KiB,
/// 4 PiB - 2 MiB at 1 MiB.
pub const fn max_volume_size(smallest_block: u32) -> u64 {
    MAX_VOLUME_BLOCKS * smallest_block as u64
}

/// Where host writes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// Write to cache and core; blocks are never dirty.
    WriteThrough,
    /// Write to cache only; dirty data is written back by flushing or before
    /// its space is reused.
    WriteBack,
    /// Write to core only; a write miss allocates nothing. A write that lands
    /// on cached blocks also updates them so the cache never serves stale data
    /// (updating is cheaper than invalidating a block that is likely re-read).
    WriteAround,
}

/// How a write miss makes its newly allocated block consistent with core
/// when the write covers only part of the block. See `docs/engine.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMissFill {
    /// AdaCache's behaviour: read the whole block from core, then write the
    /// host data over it. The plan's fills must complete before its cache
    /// writes ([`crate::Plan::fills_before_cache_writes`]).
    WholeBlock,
    /// Read only the unwritten head and tail of the block from core. Fills and
    /// cache writes never overlap, so they may run concurrently.
    HeadTail,
    /// Read nothing: the block remembers one contiguous valid extent (in
    /// sectors) and is completed lazily when a read needs the rest.
    Sparse,
}

/// How a miss chooses the size of the block it fills. See `docs/engine.md`
/// and [`crate::fill`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillSize {
    /// AdaCache's rule: the largest aligned blocks inside the missing part
    /// of the request, aligned to the smallest block size.
    Request,
    /// At least the *floor* size whose sampled shadow cache (an LRU of
    /// blocks of that size) hits most: the missing part of the request is
    /// widened to blocks of the floor's size where the whole block is
    /// missing. Starts at the smallest size.
    Locality,
}

/// Admission policy selection (see [`crate::admission`]).
#[derive(Clone, Debug, PartialEq)]
pub enum AdmissionConfig {
    /// Admit every miss.
    Always,
    /// Admit a block on its `n`-th miss.
    NHit {
        /// Misses needed, at least 1 (1 behaves like `Always`).
        n: u32,
        /// Slots in the direct-mapped miss counter table (power of two).
        table_slots: u32,
    },
    /// TinyLFU: admit when the candidate is at least as frequent as the
    /// would-be victim, according to a count-min sketch with 4-bit counters.
    TinyLfu {
        /// Counters per row (rounded up to a power of two, at least 64).
        width: u32,
        /// Increments between two halvings of every counter.
        sample_size: u32,
        /// What to do when both estimates are equal (BiDiFilter 3.4 admits).
        admit_on_tie: bool,
    },
    /// SACache: admit when the recent visit count reaches v(size)/v(c), with c
    /// re-tuned by a shadow cache.
    SizeAware(SizeAwareConfig),
}

/// Parameters of the size-aware (SACache) admission policy.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeAwareConfig {
    /// Length of the FIFO of recent visit counts.
    pub fifo_len: u32,
    /// Most recent requests kept for the shadow cache to replay.
    pub window: u32,
    /// Requests between two re-tunings of `c` (each replays `window`
    /// requests `search_points * search_rounds` times).
    pub retune_interval: u32,
    /// Shadow cache capacity in bytes; 0 means the engine's capacity.
    pub shadow_capacity: u64,
    /// Points per round of the log-space search (the paper uses 16).
    pub search_points: u32,
    /// Rounds of the log-space search (the paper uses 5).
    pub search_rounds: u32,
    /// Latency of core (Ceph) in nanoseconds: the paper's `t_s`.
    pub core_latency_ns: f64,
    /// Latency of the cache device in nanoseconds: `t_c`.
    pub cache_latency_ns: f64,
    /// Core bandwidth in bytes per nanosecond: `1 / k_s`.
    pub core_bytes_per_ns: f64,
    /// Cache bandwidth in bytes per nanosecond: `1 / k_c`.
    pub cache_bytes_per_ns: f64,
}

impl Default for SizeAwareConfig {
    fn default() -> Self {
        // Ceph RBD over TCP vs a local NVMe SSD: roughly 500 us and 1 GB/s
        // against 80 us and 3 GB/s.
        SizeAwareConfig {
            fifo_len: 4096,
            window: 8192,
            retune_interval: 65536,
            shadow_capacity: 0,
            search_points: 16,
            search_rounds: 5,
            core_latency_ns: 500_000.0,
            cache_latency_ns: 80_000.0,
            core_bytes_per_ns: 1.0,
            cache_bytes_per_ns: 3.0,
        }
    }
}

/// Eviction policy selection (see [`crate::eviction`]).
#[derive(Clone, Debug, PartialEq)]
pub enum EvictionConfig {
    /// AdaCache III.D: replace the global LRU tail block when its size
    /// matches, otherwise the LRU group.
    TwoLevelLru,
    /// LEA (lazy eviction) deciding whether the two-level victim is replaced
    /// at all.
    Lazy {
        /// Initial `flag` of an inserted block (`PARA`, default 2).
        para: u32,
        /// Laziness of re-accessed blocks (`K`, default 1.0).
        k: f64,
    },
    /// S3-FIFO: small and main FIFO queues with a ghost queue.
    S3Fifo,
    /// SIEVE: one FIFO queue, visited bits and a sweeping hand.
    Sieve,
    /// ARC: recency and frequency lists sized by ghost hits.
    Arc,
    /// W-TinyLFU: LRU window, segmented-LRU main space, frequency sketch.
    WTinyLfu,
    /// Online choice among `candidates` (the first is used until a shadow
    /// takes over) by sampled shadow caches ([`crate::choice`]).
    Auto {
        /// Policies to choose among; none of them `Auto`.
        candidates: Vec<EvictionConfig>,
    },
}

/// Flushing (dirty write-back) parameters; see [`crate::flush`].
#[derive(Clone, Debug, PartialEq)]
pub struct FlushConfig {
    /// Dirty bytes / capacity above which aggressive flushing writes back.
    pub dirty_ratio: f64,
    /// Most blocks one flush plan writes back.
    pub batch_blocks: u32,
}

impl Default for FlushConfig {
    fn default() -> Self {
        // OpenCAS's ACP flushes 128 blocks per batch; io-caches-fast-devices
        // 5.3 found small batches hurt tail latency least.
        FlushConfig {
            dirty_ratio: 0.2,
            batch_blocks: 128,
        }
    }
}

/// Configuration of one cached volume.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Size of the cached volume in bytes (requests must stay inside it).
    pub volume_size: u64,
    /// Cache space for this volume in bytes; rounded down to whole groups.
    pub capacity: u64,
    /// Block sizes in bytes: distinct powers of two in 4 KiB ..= 1 MiB. One
    /// size is the fixed-size baseline.
    pub block_sizes: Vec<u32>,
    /// Group size in bytes: a power of two from the largest block size to
    /// 1 MiB. AdaCache uses the largest block size; a larger group only
    /// amortises the group record over more blocks (the fixed-size baseline
    /// uses 256 KiB groups: with one size, two-level replacement always
    /// replaces the LRU block, so it behaves as plain LRU whatever the group).
    pub group_size: u32,
    /// Host sector (LBA) size; requests must be multiples of it and the valid
    /// and dirty extents of a block are kept in these units.
    pub sector_size: u32,
    /// Where writes go.
    pub write_mode: WriteMode,
    /// How a partial write miss is completed.
    pub write_miss_fill: WriteMissFill,
    /// How a miss picks the size of the block it fills.
    pub fill_size: FillSize,
    /// Admission policy.
    pub admission: AdmissionConfig,
    /// Eviction policy.
    pub eviction: EvictionConfig,
    /// Flushing parameters.
    pub flush: FlushConfig,
    /// Groups inspected from the group LRU tail for a clean, unpinned victim
    /// before a miss gives up and bypasses the cache.
    pub max_victim_scan: u32,
}

/// The policies `auto` picks among by default, the first being the initial
/// one. SIEVE first: while a cache warms up it does as well as LRU, it
/// keeps no ghost tags (less metadata than S3-FIFO), and on the simulator's
/// suite (engine.md) it was the better start: against S3-FIFO first, fill
/// sizing by locality gained 1-5 points on CloudPhysics and the clustered
/// Zipf stream and beat fixed 4 KiB LRU lines on the scattered one, while
/// the defaults moved by less than a point either way. LRU second: it wins
/// on small caches and short reuse distances. S3-FIFO, ARC and W-TinyLFU
/// are candidates on request (`auto:sieve+lru2+s3fifo+...`): on the
/// CloudPhysics sample their shadows lead one another by a few percent in
/// turns, and each switch costs more than the lead was worth.
pub fn default_candidates() -> Vec<EvictionConfig> {
    vec![EvictionConfig::Sieve, EvictionConfig::TwoLevelLru]
}

impl EvictionConfig {
    /// Online choice among the default candidates
    /// ([`default_candidates`]).
    pub fn auto() -> EvictionConfig {
        EvictionConfig::Auto {
            candidates: default_candidates(),
        }
    }
}

impl Config {
    /// AdaCache's blocks (32/64/128/256 KiB), write-back, always admit, and
    /// online eviction choice (`auto`: SIEVE or the two-level LRU).
    pub fn adaptive(volume_size: u64, capacity: u64) -> Config {
        Config {
            volume_size,
            capacity,
            block_sizes: vec![32 << 10, 64 << 10, 128 << 10, 256 << 10],
            group_size: 256 << 10,
            sector_size: 4096,
            write_mode: WriteMode::WriteBack,
            write_miss_fill: WriteMissFill::Sparse,
            fill_size: FillSize::Request,
            admission: AdmissionConfig::Always,
            eviction: EvictionConfig::auto(),
            flush: FlushConfig::default(),
            max_victim_scan: 8,
        }
    }

    /// The fixed-size baseline: one block size, groups of at least 256 KiB.
    pub fn fixed(volume_size: u64, capacity: u64, block_size: u32) -> Config {
        Config {
            block_sizes: vec![block_size],
            group_size: block_size.max(256 << 10),
            ..Config::adaptive(volume_size, capacity)
        }
    }

    /// Checks every constraint the engine relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.block_sizes.is_empty() || self.block_sizes.len() > MAX_CLASSES {
            return Err(ConfigError::BlockSizes("between 1 and 9 sizes"));
        }
        let mut sorted = self.block_sizes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != self.block_sizes.len() {
            return Err(ConfigError::BlockSizes("sizes must be distinct"));
        }
        for &b in &sorted {
            if !b.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&b) {
                return Err(ConfigError::BlockSizes(
                    "sizes must be powers of two in 4 KiB ..= 1 MiB",
                ));
            }
        }
        if !self.sector_size.is_power_of_two()
            || self.sector_size < 512
            || self.sector_size > sorted[0]
        {
            return Err(ConfigError::SectorSize);
        }
        let largest = sorted[sorted.len() - 1];
        // Extents are u16 sector counts.
        if largest / self.sector_size > u16::MAX as u32 {
            return Err(ConfigError::SectorSize);
        }
        if !self.group_size.is_power_of_two()
            || self.group_size < largest
            || self.group_size > MAX_BLOCK_SIZE
        {
            return Err(ConfigError::GroupSize);
        }
        if self.volume_size == 0 || !self.volume_size.is_multiple_of(sorted[0] as u64) {
            return Err(ConfigError::VolumeSize(
                "must be a non-zero multiple of the smallest block size",
            ));
        }
        if self.volume_size > max_volume_size(sorted[0]) {
            return Err(ConfigError::VolumeTooLarge {
                volume_size: self.volume_size,
                smallest_block: sorted[0],
            });
        }
        let groups = self.capacity / self.group_size as u64;
        if groups == 0 {
            return Err(ConfigError::Capacity("at least one group"));
        }
        // Group and slab indices are u32 with the top bits reserved.
        if groups >= 1 << 27 {
            return Err(ConfigError::Capacity("at most 2^27 groups"));
        }
        // Block ids carry a 28-bit slab index.
        if groups * (self.group_size / sorted[0]) as u64 >= 1 << 28 {
            return Err(ConfigError::Capacity(
                "at most 2^28 blocks of the smallest size",
            ));
        }
        if self.max_victim_scan == 0 {
            return Err(ConfigError::Policy("max_victim_scan must be at least 1"));
        }
        match &self.admission {
            AdmissionConfig::NHit { n, table_slots } => {
                if *n == 0 || !table_slots.is_power_of_two() {
                    return Err(ConfigError::Policy(
                        "nhit: n >= 1 and table_slots a power of two",
                    ));
                }
            }
            AdmissionConfig::TinyLfu { sample_size, .. } => {
                if *sample_size == 0 {
                    return Err(ConfigError::Policy("tinylfu: sample_size >= 1"));
                }
            }
            AdmissionConfig::SizeAware(s) => {
                if s.fifo_len == 0
                    || s.window == 0
                    || s.retune_interval == 0
                    || s.core_latency_ns <= s.cache_latency_ns
                    || s.search_points < 2
                    || s.search_rounds == 0
                    || s.core_bytes_per_ns <= 0.0
                    || s.cache_bytes_per_ns <= 0.0
                {
                    return Err(ConfigError::Policy("size-aware: invalid parameters"));
                }
            }
            AdmissionConfig::Always => {}
        }
        if let EvictionConfig::Auto { candidates } = &self.eviction {
            if candidates.is_empty()
                || candidates
                    .iter()
                    .any(|c| matches!(c, EvictionConfig::Auto { .. }))
            {
                return Err(ConfigError::Policy(
                    "auto: one or more candidates, none of them auto",
                ));
            }
        }
        if let EvictionConfig::Lazy { para, k } = &self.eviction {
            if *para == 0 || k.is_nan() || *k <= 0.0 {
                return Err(ConfigError::Policy("lazy: para >= 1 and k > 0"));
            }
        }
        if !(self.flush.dirty_ratio >= 0.0 && self.flush.dirty_ratio <= 1.0)
            || self.flush.batch_blocks == 0
        {
            return Err(ConfigError::Policy(
                "flush: dirty_ratio in [0, 1], batch_blocks >= 1",
            ));
        }
        Ok(())
    }
}

/// Why a [`Config`] was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// The block size list is unusable.
    BlockSizes(&'static str),
    /// The sector size is not a power of two between 512 bytes and the
    /// smallest block size.
    SectorSize,
    /// The volume size is unusable.
    VolumeSize(&'static str),
    /// The volume has more blocks of the smallest size than the engine's
    /// `u32` block keys number ([`max_volume_size`]).
    VolumeTooLarge {
        /// The volume's size in bytes.
        volume_size: u64,
        /// The smallest configured block size.
        smallest_block: u32,
    },
    /// The group size is not a power of two between the largest block size
    /// and 1 MiB.
    GroupSize,
    /// The capacity is unusable.
    Capacity(&'static str),
    /// A policy parameter is out of range.
    Policy(&'static str),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::BlockSizes(s) => write!(f, "block sizes: {s}"),
            ConfigError::SectorSize => write!(
                f,
                "sector size must be a power of two between 512 and the smallest block size"
            ),
            ConfigError::VolumeSize(s) => write!(f, "volume size: {s}"),
            ConfigError::VolumeTooLarge {
                volume_size,
                smallest_block,
            } => write!(
                f,
                "volume size: {volume_size} bytes is more than the {} bytes the engine caches with {smallest_block}-byte blocks (2^32-2 blocks of the smallest size; a larger smallest block size raises the limit)",
                max_volume_size(*smallest_block)
            ),
            ConfigError::GroupSize => write!(
                f,
                "group size must be a power of two between the largest block size and 1 MiB"
            ),
            ConfigError::Capacity(s) => write!(f, "capacity: {s}"),
            ConfigError::Policy(s) => write!(f, "policy: {s}"),
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        Config::adaptive(1 << 40, 1 << 30).validate().unwrap();
        Config::fixed(1 << 40, 1 << 30, 32 << 10)
            .validate()
            .unwrap();
    }

    #[test]
    fn rejects_bad_sizes() {
        let mut c = Config::adaptive(1 << 40, 1 << 30);
        c.block_sizes = vec![48 << 10];
        assert!(c.validate().is_err());
        c.block_sizes = vec![2 << 20];
        assert!(c.validate().is_err());
        c.block_sizes = vec![32 << 10, 32 << 10];
        assert!(c.validate().is_err());
        let mut c = Config::adaptive(1 << 40, 1 << 30);
        c.group_size = 128 << 10;
        assert_eq!(c.validate(), Err(ConfigError::GroupSize));
        let mut c = Config::adaptive(1 << 40, 1 << 17);
        assert_eq!(
            c.validate(),
            Err(ConfigError::Capacity("at least one group"))
        );
        c.capacity = 1 << 30;
        c.sector_size = 64 << 10;
        assert_eq!(c.validate(), Err(ConfigError::SectorSize));
    }

    #[test]
    fn volume_limit_scales_with_the_smallest_block() {
        assert_eq!(max_volume_size(4 << 10), (16 << 40) - (8 << 10));
        assert_eq!(max_volume_size(32 << 10), (128 << 40) - (64 << 10));
        assert_eq!(max_volume_size(1 << 20), (4 << 50) - (2 << 20));
        for smallest in [4u32 << 10, 32 << 10, 1 << 20] {
            let mut c = Config::fixed(max_volume_size(smallest), 1 << 30, smallest);
            c.validate().unwrap();
            c.volume_size += smallest as u64;
            let e = c.validate().unwrap_err();
            assert_eq!(
                e,
                ConfigError::VolumeTooLarge {
                    volume_size: c.volume_size,
                    smallest_block: smallest
                }
            );
            // The message names the limit in bytes.
            let limit = max_volume_size(smallest).to_string();
            assert!(e.to_string().contains(&limit), "{e}");
        }
        // Adaptive: the smallest of the sizes decides.
        let mut c = Config::adaptive(max_volume_size(32 << 10), 1 << 30);
        c.validate().unwrap();
        c.block_sizes.push(4 << 10);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::VolumeTooLarge { .. })
        ));
    }
}
