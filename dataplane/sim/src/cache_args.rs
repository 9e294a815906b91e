//! The cache configuration options of `rackcache-sim`, as one clap group so
//! that every tool replaying a trace through the engine (the simulator, and
//! `rackcache-loadgen replay --predict`) takes the same names and builds the
//! same [`SimConfig`]s from them.

use clap::Args;

use engine::{Config, FlushConfig};

use crate::options::{
    parse_admission, parse_eviction, parse_fill_size, parse_write_miss_fill, parse_write_mode,
};
use crate::replay::{comparison_set, FlushPolicy, SimConfig};
use crate::size::{format_bytes, parse_block_sizes, parse_cache_sizes, CacheSizes};

/// A cache to simulate: size, block sizes, policies.
#[derive(Args, Clone, Debug)]
pub struct CacheArgs {
    /// Cache size: bytes (256MiB, 2G, ...) or a percentage of the trace's
    /// working set (10%). rackcache-sim takes a comma-separated list
    /// (1%,5%,10%) and runs each size.
    #[arg(long, default_value = "10%", value_parser = parse_cache_sizes)]
    pub cache_size: CacheSizes,

    /// Block sizes, comma-separated powers of two from 4KiB to 1MiB.
    #[arg(long, default_value = "32K,64K,128K,256K", value_parser = block_size_list)]
    pub block_sizes: BlockSizes,

    /// adaptive (AdaCache's allocation over --block-sizes) or fixed (exactly
    /// one block size).
    #[arg(long, default_value = "adaptive", value_parser = ["adaptive", "fixed"])]
    pub mode: String,

    /// Run fixed 32/64/128/256 KiB and adaptive side by side (ignores --mode
    /// and --block-sizes).
    #[arg(long)]
    pub compare: bool,

    /// write-back, write-through or write-around.
    #[arg(long, default_value = "write-back", value_parser = parse_write_mode)]
    pub write_mode: engine::WriteMode,

    /// How a write miss fills the rest of its new block: whole-block (the
    /// paper), head-tail or sparse.
    #[arg(long, default_value = "sparse", value_parser = parse_write_miss_fill)]
    pub write_miss_fill: engine::WriteMissFill,

    /// How a miss picks its block size: request (AdaCache: the request's
    /// size, at least the smallest block) or locality (the largest size
    /// whose speculative fills were at least half read; give 4K among
    /// --block-sizes).
    #[arg(long, default_value = "request", value_parser = parse_fill_size)]
    pub fill_size: engine::FillSize,

    /// Admission: always, nhit[:N], tinylfu[:strict], size-aware.
    #[arg(long, default_value = "always", value_parser = parse_admission)]
    pub admission: engine::AdmissionConfig,

    /// Eviction: auto[:P+P...] (online choice by shadow caches, the
    /// engine's default), lru2 (two-level LRU), lazy[:PARA[:K]] (LEA),
    /// s3fifo, sieve, arc or wtinylfu.
    #[arg(long, default_value = "auto", value_parser = parse_eviction)]
    pub eviction: engine::EvictionConfig,

    /// Flushing besides eviction: none, lazy (a batch when the trace is idle
    /// for --idle-ms) or aggressive (a batch per request above --dirty-ratio).
    #[arg(long, default_value = "none", value_parser = ["none", "lazy", "aggressive"])]
    pub flush: String,

    /// Trace time between two requests that counts as idle (lazy flushing).
    #[arg(long, default_value_t = 100)]
    pub idle_ms: u64,

    /// Dirty bytes over capacity above which aggressive flushing writes back.
    #[arg(long, default_value_t = 0.2)]
    pub dirty_ratio: f64,

    /// Blocks per flush batch.
    #[arg(long, default_value_t = 128)]
    pub flush_batch: u32,
}

/// A parsed `--block-sizes` list (a newtype: clap would take a bare `Vec`
/// for a repeated option).
#[derive(Clone, Debug)]
pub struct BlockSizes(pub Vec<u64>);

fn block_size_list(s: &str) -> Result<BlockSizes, String> {
    parse_block_sizes(s).map(BlockSizes)
}

impl CacheArgs {
    /// The configurations the arguments ask for: one, or the `--compare`
    /// set.
    pub fn configurations(&self) -> Result<Vec<SimConfig>, String> {
        let (base, flush) = self.base();
        if self.compare {
            return Ok(comparison_set(&base, flush));
        }
        if self.mode == "fixed" && self.block_sizes.0.len() != 1 {
            return Err("--mode fixed needs exactly one --block-sizes value".into());
        }
        let sizes: Vec<u32> = self.block_sizes.0.iter().map(|&b| b as u32).collect();
        if self.mode == "fixed" {
            return Ok(vec![self.fixed(sizes[0])]);
        }
        let largest = *sizes
            .last()
            .expect("parse_block_sizes returns at least one size");
        Ok(vec![SimConfig {
            label: "adaptive".to_string(),
            engine: Config {
                block_sizes: sizes,
                group_size: largest.max(256 << 10),
                ..base
            },
            flush,
        }])
    }

    /// Fixed-size blocks of `block` bytes with every other option as given
    /// (`--compare-peers` adds fixed-4KiB: the block granularity its peers
    /// see).
    pub fn fixed(&self, block: u32) -> SimConfig {
        let (base, flush) = self.base();
        SimConfig {
            label: format!("fixed-{}", format_bytes(block as u64)),
            engine: Config {
                block_sizes: vec![block],
                group_size: block.max(256 << 10),
                ..base
            },
            flush,
        }
    }

    /// The engine settings shared by every configuration, block sizes
    /// aside, and the flushing besides eviction.
    fn base(&self) -> (Config, FlushPolicy) {
        let flush = match self.flush.as_str() {
            "lazy" => FlushPolicy::Lazy {
                idle_ns: self.idle_ms.saturating_mul(1_000_000),
            },
            "aggressive" => FlushPolicy::Aggressive,
            _ => FlushPolicy::None,
        };
        // volume_size and capacity are set from the trace by replay().
        let mut base = Config::adaptive(1, 1);
        base.write_mode = self.write_mode;
        base.write_miss_fill = self.write_miss_fill;
        base.fill_size = self.fill_size;
        base.admission = self.admission.clone();
        base.eviction = self.eviction.clone();
        base.flush = FlushConfig {
            dirty_ratio: self.dirty_ratio,
            batch_blocks: self.flush_batch,
        };
        (base, flush)
    }
}
