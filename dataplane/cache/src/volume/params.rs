//! What a cached volume is created with: the parameters of
//! `bdev_adacache_create`, in SPDK's JSON style, and their translation into
//! the engine's configuration.
//!
//! Policies use the engine's names (`engine::names`, the simulator's
//! command-line syntax): `"admission": "nhit:2"`, `"eviction": "lazy:2:1.0"`.

use super::replica::Role;
use engine::config::max_volume_size;
use engine::{
    AdmissionConfig, Config, EvictionConfig, FillSize, FlushConfig, WriteMissFill, WriteMode,
};
use serde::{Deserialize, Serialize};

/// Where host writes go (OCF's cache modes, by their short names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// Write-through: cache and core; never dirty.
    Wt,
    /// Write-back: cache only; dirty data is cleaned later.
    Wb,
    /// Write-around: core only; cached blocks a write lands on are updated.
    Wa,
    /// Pass-through: the cache is bypassed; writes still update cached
    /// blocks they land on, so switching back never serves stale data.
    Pt,
}

impl CacheMode {
    /// The engine's write mode for this cache mode.
    pub fn engine_mode(self) -> WriteMode {
        match self {
            CacheMode::Wt => WriteMode::WriteThrough,
            CacheMode::Wb => WriteMode::WriteBack,
            CacheMode::Wa | CacheMode::Pt => WriteMode::WriteAround,
        }
    }

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::Wt => "wt",
            CacheMode::Wb => "wb",
            CacheMode::Wa => "wa",
            CacheMode::Pt => "pt",
        }
    }
}

/// Block size mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockMode {
    /// AdaCache: several block sizes, chosen per miss.
    Adaptive,
    /// One block size (the OCF-style baseline).
    Fixed,
}

/// How dirty data is cleaned (OCF's cleaning policies).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "lowercase", deny_unknown_fields)]
pub enum Cleaning {
    /// Never clean in the background (only flushes and evictions clean).
    Nop {},
    /// Clean when the volume is idle: OCF's ALRU.
    Lazy {
        /// Dirty data younger than this is left alone (OCF `stale_buffer_time`).
        #[serde(default = "default_staleness_ms")]
        staleness_ms: u64,
        /// Time between two cleaning rounds (OCF `wake_up_time`).
        #[serde(default = "default_wake_up_ms")]
        wake_up_ms: u64,
        /// Most blocks one round writes back (OCF `flush_max_buffers`).
        #[serde(default = "default_max_batch")]
        max_batch: u32,
        /// The volume counts as idle when no host I/O arrived for this long
        /// (OCF `activity_threshold`).
        #[serde(default = "default_activity_ms")]
        activity_threshold_ms: u64,
    },
    /// Clean whenever dirty data exceeds a share of the cache: OCF's ACP.
    Aggressive {
        /// Dirty bytes / cache bytes above which cleaning runs.
        #[serde(default = "default_dirty_ratio")]
        dirty_ratio: f64,
        /// Most blocks one round writes back.
        #[serde(default = "default_max_batch")]
        batch_blocks: u32,
        /// Time between two rounds.
        #[serde(default = "default_aggressive_wake_ms")]
        wake_up_ms: u64,
    },
}

fn default_staleness_ms() -> u64 {
    120_000
}
fn default_wake_up_ms() -> u64 {
    20_000
}
fn default_max_batch() -> u32 {
    100
}
fn default_activity_ms() -> u64 {
    10_000
}
fn default_dirty_ratio() -> f64 {
    0.2
}
fn default_aggressive_wake_ms() -> u64 {
    10
}

impl Default for Cleaning {
    fn default() -> Self {
        Cleaning::Lazy {
            staleness_ms: default_staleness_ms(),
            wake_up_ms: default_wake_up_ms(),
            max_batch: default_max_batch(),
            activity_threshold_ms: default_activity_ms(),
        }
    }
}

/// Which requests the sequential cutoff applies to (OCF's `seqcutoff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeqCutoffPolicy {
    /// Sequential streams past the threshold bypass the cache.
    Always,
    /// Only while the cache is full.
    Full,
    /// Never.
    Never,
}

/// Sequential cutoff: a stream of consecutive requests longer than the
/// threshold bypasses the cache (reads are not admitted, writes go around).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeqCutoff {
    /// When it applies.
    pub policy: SeqCutoffPolicy,
    /// Stream length in KiB from which requests bypass the cache.
    #[serde(default = "default_seq_threshold")]
    pub threshold_kib: u64,
}

fn default_seq_threshold() -> u64 {
    1024
}

impl Default for SeqCutoff {
    fn default() -> Self {
        SeqCutoff {
            policy: SeqCutoffPolicy::Full,
            threshold_kib: default_seq_threshold(),
        }
    }
}

/// The parameters of `bdev_adacache_create` (what `save_config` records).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeParams {
    /// Name of the cached bdev.
    pub name: String,
    /// The bdev cached (usually rbd).
    pub core_bdev_name: String,
    /// The bdev holding this server's cache space (shared by volumes).
    pub cache_bdev_name: String,
    /// This volume's share of the cache device, MiB.
    pub cache_size_mib: u64,
    /// Cache mode.
    #[serde(default = "default_mode")]
    pub write_mode: CacheMode,
    /// Owner, or mirror of another server's owner (mirrored write-back;
    /// see [`super::replica`]). Saved, so a restarted mirror stays one.
    #[serde(default, skip_serializing_if = "is_owner")]
    pub role: Role,
    /// The control plane's epoch of the volume when it last set this
    /// server's role (it rises with every change of owner). A volume
    /// loaded with one (`load`: a restart, a returning server) writes
    /// nothing back until `bdev_adacache_set_role` confirms its role with
    /// an epoch at least as new: a server that was replaced while it was
    /// away must not write its stale dirty data over the new owner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Adaptive or fixed block size.
    #[serde(default = "default_block_mode")]
    pub mode: BlockMode,
    /// Block sizes in KiB: several for adaptive (default 32, 64, 128, 256;
    /// 4, 32, 64, 128, 256 with `fill_size` `locality`), one for fixed
    /// (default 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_sizes_kib: Option<Vec<u32>>,
    /// How a miss sizes its block (adaptive only): `request` (AdaCache:
    /// after the request, at least the smallest size) or `locality` (at
    /// least the floor size whose sampled shadow cache hits most; see
    /// `docs/engine.md`).
    #[serde(
        default = "default_fill_size",
        skip_serializing_if = "is_default_fill_size"
    )]
    pub fill_size: String,
    /// How partial write misses are completed (`sparse`, `head-tail`,
    /// `whole-block`).
    #[serde(default = "default_fill")]
    pub write_miss_fill: String,
    /// Admission policy (`always`, `nhit[:N]`, `tinylfu[:strict]`,
    /// `size-aware`).
    #[serde(default = "default_admission")]
    pub admission: String,
    /// Eviction policy (`auto[:P+P...]`, `lru2`, `lazy[:PARA[:K]]`,
    /// `s3fifo`, `sieve`, `arc`, `wtinylfu`; `engine::names::parse_eviction`).
    #[serde(default = "default_eviction")]
    pub eviction: String,
    /// Cleaning policy and its parameters.
    #[serde(default)]
    pub cleaning: Cleaning,
    /// Sequential cutoff.
    #[serde(default)]
    pub seq_cutoff: SeqCutoff,
    /// Attach to this volume's existing cache on the device instead of
    /// creating it (what a restored configuration always does).
    #[serde(default)]
    pub load: bool,
    /// With `load`, keep clean blocks too. The volume turns it off itself
    /// when its cache device fails (pass-through writes may then change
    /// core under blocks whose removal could not be recorded) and back on
    /// once a load has dropped them durably.
    #[serde(default = "default_true")]
    pub load_clean: bool,
    /// Checksum dirty data (crc32c per block, in its metadata entry):
    /// verified before it is written back and when the volume loads, so
    /// that bit rot on the cache device never reaches core. Off only to
    /// measure what it costs.
    #[serde(default = "default_true")]
    pub data_checksums: bool,
    /// Format the cache device even though it is not blank (another
    /// system's signature, or a damaged format of ours): erases everything
    /// on it, every other volume's write-back data included. Only for a
    /// device no volume uses yet; never saved, so a restart never repeats it.
    #[serde(default, skip_serializing)]
    pub force_format: bool,
}

fn default_true() -> bool {
    true
}

fn default_mode() -> CacheMode {
    CacheMode::Wt
}
fn default_block_mode() -> BlockMode {
    BlockMode::Adaptive
}
fn default_fill() -> String {
    "sparse".into()
}
fn default_fill_size() -> String {
    "request".into()
}
fn is_default_fill_size(s: &str) -> bool {
    s == "request"
}
fn default_admission() -> String {
    "always".into()
}
/// `auto`, as the engine's own default: no one policy wins on every
/// workload, so a volume created without one starts with SIEVE and moves
/// to the two-level LRU when its sampled shadow caches show a lasting lead.
fn default_eviction() -> String {
    "auto".into()
}

/// A parameter that cannot work, and why.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct ParamError(pub String);

impl VolumeParams {
    /// Block sizes in bytes, smallest first.
    pub fn block_sizes(&self) -> Result<Vec<u32>, ParamError> {
        let kib = match (&self.block_sizes_kib, self.mode) {
            (Some(v), _) => v.clone(),
            // Fill sizing by locality starts at the smallest size and needs
            // 4 KiB among the floors to avoid waste on scattered reads.
            (None, BlockMode::Adaptive) if self.fill_size == "locality" => {
                vec![4, 32, 64, 128, 256]
            }
            (None, BlockMode::Adaptive) => vec![32, 64, 128, 256],
            (None, BlockMode::Fixed) => vec![32],
        };
        if self.mode == BlockMode::Fixed && kib.len() != 1 {
            return Err(ParamError(format!(
                "mode fixed takes exactly one block size, got {} (block_sizes_kib)",
                kib.len()
            )));
        }
        let mut sizes = Vec::with_capacity(kib.len());
        for k in kib {
            let b = k
                .checked_mul(1024)
                .filter(|b| b.is_power_of_two() && (4096..=1 << 20).contains(b))
                .ok_or_else(|| {
                    ParamError(format!(
                        "block size {k} KiB is not a power of two from 4 to 1024 KiB"
                    ))
                })?;
            sizes.push(b);
        }
        sizes.sort_unstable();
        if sizes.windows(2).any(|w| w[0] == w[1]) {
            return Err(ParamError("block_sizes_kib has a size twice".into()));
        }
        Ok(sizes)
    }

    /// The fill sizing rule; `locality` only for adaptive volumes (a fixed
    /// volume has one block size to fill).
    pub fn fill_size(&self) -> Result<FillSize, ParamError> {
        let f = engine::names::parse_fill_size(&self.fill_size).map_err(ParamError)?;
        if f == FillSize::Locality && self.mode == BlockMode::Fixed {
            return Err(ParamError(
                "fill_size locality needs mode adaptive (a fixed volume has one block size)".into(),
            ));
        }
        Ok(f)
    }

    /// Refuses a core larger than the engine caches with these block sizes
    /// (its block keys are `u32` numbers of the smallest block), so that
    /// callers can refuse before formatting a cache device or growing an
    /// image, and the refusal changes nothing.
    pub fn check_core_size(&self, core_bytes: u64) -> Result<(), ParamError> {
        let smallest = self.block_sizes()?[0];
        let max = max_volume_size(smallest);
        if core_bytes > max {
            return Err(ParamError(format!(
                "a cache with {} KiB blocks holds a core of at most {max} bytes (2^32-2 blocks of its smallest block size), not {core_bytes}; a larger smallest block size (block_sizes_kib) raises the limit",
                smallest >> 10
            )));
        }
        Ok(())
    }

    /// The engine configuration for a volume of `volume_size` bytes with
    /// `sector_size`-byte sectors and `capacity` bytes of cache.
    pub fn engine_config(
        &self,
        volume_size: u64,
        sector_size: u32,
        capacity: u64,
    ) -> Result<Config, ParamError> {
        let sizes = self.block_sizes()?;
        let largest = *sizes.last().expect("at least one size");
        let mut cfg = Config::adaptive(volume_size, capacity);
        cfg.block_sizes = sizes;
        cfg.group_size = largest.max(256 << 10);
        cfg.sector_size = sector_size;
        cfg.write_mode = self.write_mode.engine_mode();
        cfg.write_miss_fill = parse_fill(&self.write_miss_fill)?;
        cfg.fill_size = self.fill_size()?;
        cfg.admission = parse_admission(&self.admission)?;
        cfg.eviction = parse_eviction(&self.eviction)?;
        cfg.flush = self.cleaning.flush_config();
        cfg.validate()
            .map_err(|e| ParamError(format!("invalid cache configuration: {e}")))?;
        Ok(cfg)
    }

    /// Checks everything that does not need the bdevs.
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.cache_size_mib == 0 {
            return Err(ParamError("cache_size_mib must be at least 1".into()));
        }
        if self.load && self.force_format {
            return Err(ParamError(
                "force_format erases the cache device; load attaches to its cache: not both".into(),
            ));
        }
        self.block_sizes()?;
        parse_fill(&self.write_miss_fill)?;
        self.fill_size()?;
        parse_admission(&self.admission)?;
        parse_eviction(&self.eviction)?;
        self.cleaning.validate()?;
        Ok(())
    }
}

impl Cleaning {
    /// The engine's flush parameters for this policy.
    pub fn flush_config(&self) -> FlushConfig {
        match self {
            Cleaning::Nop {} => FlushConfig::default(),
            Cleaning::Lazy { max_batch, .. } => FlushConfig {
                batch_blocks: *max_batch,
                ..FlushConfig::default()
            },
            Cleaning::Aggressive {
                dirty_ratio,
                batch_blocks,
                ..
            } => FlushConfig {
                dirty_ratio: *dirty_ratio,
                batch_blocks: *batch_blocks,
            },
        }
    }

    /// Checks the parameters' ranges.
    pub fn validate(&self) -> Result<(), ParamError> {
        match self {
            Cleaning::Nop {} => Ok(()),
            Cleaning::Lazy {
                wake_up_ms,
                max_batch,
                ..
            } => {
                if *wake_up_ms == 0 || *max_batch == 0 {
                    return Err(ParamError(
                        "cleaning lazy: wake_up_ms and max_batch must be at least 1".into(),
                    ));
                }
                Ok(())
            }
            Cleaning::Aggressive {
                dirty_ratio,
                batch_blocks,
                wake_up_ms,
            } => {
                if !(0.0..=1.0).contains(dirty_ratio) || *batch_blocks == 0 || *wake_up_ms == 0 {
                    return Err(ParamError(
                        "cleaning aggressive: dirty_ratio must be in 0..=1, batch_blocks and wake_up_ms at least 1".into(),
                    ));
                }
                Ok(())
            }
        }
    }
}

fn parse_fill(s: &str) -> Result<WriteMissFill, ParamError> {
    engine::names::parse_write_miss_fill(s).map_err(ParamError)
}

fn parse_admission(s: &str) -> Result<AdmissionConfig, ParamError> {
    engine::names::parse_admission(s).map_err(ParamError)
}

fn parse_eviction(s: &str) -> Result<EvictionConfig, ParamError> {
    engine::names::parse_eviction(s).map_err(ParamError)
}

fn is_owner(r: &Role) -> bool {
    *r == Role::Owner
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(json: serde_json::Value) -> Result<VolumeParams, serde_json::Error> {
        serde_json::from_value(json)
    }

    #[test]
    fn defaults_are_write_through_adaptive_lazy_cleaning() {
        let p = params(serde_json::json!({
            "name": "C0", "core_bdev_name": "Ceph0", "cache_bdev_name": "Nvme0",
            "cache_size_mib": 64
        }))
        .unwrap();
        assert_eq!(p.write_mode, CacheMode::Wt);
        assert_eq!(
            p.block_sizes().unwrap(),
            vec![32 << 10, 64 << 10, 128 << 10, 256 << 10]
        );
        assert!(matches!(p.cleaning, Cleaning::Lazy { .. }));
        let cfg = p.engine_config(1 << 30, 512, 64 << 20).unwrap();
        assert_eq!(cfg.write_mode, WriteMode::WriteThrough);
        assert_eq!(cfg.group_size, 256 << 10);
    }

    #[test]
    fn bad_parameters_say_what_to_fix() {
        let base = serde_json::json!({
            "name": "C0", "core_bdev_name": "Ceph0", "cache_bdev_name": "Nvme0",
            "cache_size_mib": 64
        });
        let with = |k: &str, v: serde_json::Value| {
            let mut j = base.clone();
            j[k] = v;
            params(j)
        };
        assert!(with("write_mode", "xx".into()).is_err());
        assert!(with("bogus", 1.into()).is_err());
        let p = with("block_sizes_kib", serde_json::json!([32, 48])).unwrap();
        assert!(p.validate().unwrap_err().0.contains("48 KiB"));
        let p = with("mode", "fixed".into()).unwrap();
        assert_eq!(p.block_sizes().unwrap(), vec![32 << 10]);
        let mut p = with("mode", "fixed".into()).unwrap();
        p.block_sizes_kib = Some(vec![4, 8]);
        assert!(p.validate().unwrap_err().0.contains("exactly one"));
        let p = with("admission", "lfu".into()).unwrap();
        assert!(p.validate().unwrap_err().0.contains("unknown admission"));
        let p = with(
            "cleaning",
            serde_json::json!({"policy": "aggressive", "dirty_ratio": 2.0}),
        )
        .unwrap();
        assert!(p.validate().unwrap_err().0.contains("dirty_ratio"));
        assert!(with("cleaning", serde_json::json!({"policy": "nop", "x": 1})).is_err());
        let p = with("cache_size_mib", 0.into()).unwrap();
        assert!(p.validate().is_err());
        let p = with("fill_size", "largest".into()).unwrap();
        assert!(p.validate().unwrap_err().0.contains("largest"));
        let mut p = with("fill_size", "locality".into()).unwrap();
        p.mode = BlockMode::Fixed;
        assert!(p.validate().unwrap_err().0.contains("mode adaptive"));
    }

    #[test]
    fn fill_size_locality_adds_4k_blocks_unless_sizes_are_given() {
        let base = serde_json::json!({
            "name": "C0", "core_bdev_name": "Ceph0", "cache_bdev_name": "Nvme0",
            "cache_size_mib": 64, "fill_size": "locality"
        });
        let p = params(base.clone()).unwrap();
        let cfg = p.engine_config(1 << 30, 512, 64 << 20).unwrap();
        assert_eq!(cfg.fill_size, FillSize::Locality);
        assert_eq!(cfg.block_sizes[0], 4 << 10);
        assert_eq!(cfg.block_sizes.len(), 5);
        let mut j = base;
        j["block_sizes_kib"] = serde_json::json!([8, 64]);
        let p = params(j).unwrap();
        assert_eq!(p.block_sizes().unwrap(), vec![8 << 10, 64 << 10]);
        // The default is not written out, so saved configurations of
        // volumes without it stay as they were.
        let d = params(serde_json::json!({
            "name": "C0", "core_bdev_name": "Ceph0", "cache_bdev_name": "Nvme0",
            "cache_size_mib": 64
        }))
        .unwrap();
        assert_eq!(
            d.engine_config(1 << 30, 512, 64 << 20).unwrap().fill_size,
            FillSize::Request
        );
        assert!(serde_json::to_value(&d).unwrap().get("fill_size").is_none());
    }

    #[test]
    fn params_round_trip_through_json() {
        let p = params(serde_json::json!({
            "name": "C0", "core_bdev_name": "Ceph0", "cache_bdev_name": "Nvme0",
            "cache_size_mib": 64, "write_mode": "wb", "mode": "fixed", "block_sizes_kib": [4],
            "cleaning": {"policy": "aggressive"}, "seq_cutoff": {"policy": "always"}, "load": true
        }))
        .unwrap();
        let back: VolumeParams = serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }
}
