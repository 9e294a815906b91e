//! Changing a live volume's cache without dropping its cached blocks:
//! write mode, policies, flushing parameters, capacity and the volume's
//! own size.

use crate::admission;
use crate::config::{AdmissionConfig, ConfigError, EvictionConfig, FlushConfig, WriteMode};
use crate::engine::Engine;
use crate::eviction;
use crate::lru::NIL;
use crate::plan::Evicted;
use std::fmt;

/// Why a live change was refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconfigureError {
    /// The resulting configuration is invalid.
    Invalid(ConfigError),
    /// Leaving write-back with dirty data cached would strand it: flush
    /// first (`plan_flush(FlushKind::All)` until `dirty_bytes()` is zero).
    Dirty {
        /// Dirty bytes still cached.
        dirty_bytes: u64,
    },
}

impl fmt::Display for ReconfigureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReconfigureError::Invalid(e) => write!(f, "invalid configuration: {e}"),
            ReconfigureError::Dirty { dirty_bytes } => write!(
                f,
                "cannot leave write-back with {dirty_bytes} dirty bytes cached: flush first"
            ),
        }
    }
}

impl std::error::Error for ReconfigureError {}

/// Why a resize was refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResizeError {
    /// The new capacity is invalid for this configuration.
    Invalid(ConfigError),
    /// A group beyond the new capacity holds dirty data: flush first.
    Dirty {
        /// Cache address of the group.
        group_addr: u64,
    },
    /// A group beyond the new capacity is used by in-flight work: wait for
    /// its completions.
    Pinned {
        /// Cache address of the group.
        group_addr: u64,
    },
}

impl fmt::Display for ResizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResizeError::Invalid(e) => write!(f, "invalid capacity: {e}"),
            ResizeError::Dirty { group_addr } => write!(
                f,
                "cannot shrink: the group at cache address {group_addr} holds dirty data; flush first"
            ),
            ResizeError::Pinned { group_addr } => write!(
                f,
                "cannot shrink: the group at cache address {group_addr} is in use by in-flight I/O; retry after it completes"
            ),
        }
    }
}

impl std::error::Error for ResizeError {}

impl Engine {
    /// Switches from write-back to write-through or write-around while
    /// dirty blocks are cached: from now on writes go to core, and writes
    /// into dirty blocks keep their dirty extents, which cleaning writes
    /// back as before (the way out of write-back under a steady stream of
    /// writes, which a flush alone may never catch up with). Other modes
    /// are [`Engine::set_write_mode`]'s.
    pub fn set_write_mode_keeping_dirty(
        &mut self,
        mode: WriteMode,
    ) -> Result<(), ReconfigureError> {
        match mode {
            WriteMode::WriteThrough | WriteMode::WriteAround => {
                self.cfg.write_mode = mode;
                Ok(())
            }
            _ => self.set_write_mode(mode),
        }
    }

    /// Switches the write mode. Leaving write-back is refused while dirty
    /// bytes are cached (in-flight writes count: they are dirty already).
    pub fn set_write_mode(&mut self, mode: WriteMode) -> Result<(), ReconfigureError> {
        if self.cfg.write_mode == WriteMode::WriteBack
            && mode != WriteMode::WriteBack
            && self.stats.dirty_bytes > 0
        {
            return Err(ReconfigureError::Dirty {
                dirty_bytes: self.stats.dirty_bytes,
            });
        }
        self.cfg.write_mode = mode;
        Ok(())
    }

    /// Replaces the admission policy; its history starts afresh.
    pub fn set_admission(&mut self, admission: AdmissionConfig) -> Result<(), ReconfigureError> {
        let mut cfg = self.cfg.clone();
        cfg.admission = admission;
        cfg.validate().map_err(ReconfigureError::Invalid)?;
        self.admission = admission::build(&cfg);
        self.cfg = cfg;
        Ok(())
    }

    /// Replaces the eviction policy. It is told about every cached block,
    /// least recently used first; its history (LEA's ghosts, hit flags)
    /// starts afresh. `auto` starts online choice with fresh shadows.
    pub fn set_eviction(&mut self, eviction: EvictionConfig) -> Result<(), ReconfigureError> {
        let mut cfg = self.cfg.clone();
        cfg.eviction = eviction.clone();
        cfg.validate().map_err(ReconfigureError::Invalid)?;
        self.cfg = cfg;
        self.observers.chooser = self.new_chooser();
        self.install_eviction(eviction);
        Ok(())
    }

    /// Makes `policy` the one choosing victims, without touching the cached
    /// blocks (online choice switches this way): the new policy is told
    /// about every cached block, least recently used first.
    pub(crate) fn install_eviction(&mut self, policy: EvictionConfig) {
        let mut cfg = self.cfg.clone();
        cfg.eviction = policy;
        cfg.capacity = self.capacity;
        self.eviction = eviction::build(&cfg);
        let mut id = self.blocks.lru.tail;
        while id != NIL {
            self.eviction.on_adopt(self.block_ref(id));
            id = self.blocks.entry(id).prev;
        }
    }

    /// Replaces the flushing parameters.
    pub fn set_flush(&mut self, flush: FlushConfig) -> Result<(), ReconfigureError> {
        let mut cfg = self.cfg.clone();
        cfg.flush = flush;
        cfg.validate().map_err(ReconfigureError::Invalid)?;
        self.cfg = cfg;
        Ok(())
    }

    /// Grows the cached volume (the core device's address space) to
    /// `volume_size` bytes: requests up to the new end are accepted from now
    /// on; cached blocks and policies stay. A smaller size is refused: its
    /// cached blocks beyond the end would be stranded.
    pub fn grow_volume(&mut self, volume_size: u64) -> Result<(), ReconfigureError> {
        if volume_size < self.cfg.volume_size {
            return Err(ReconfigureError::Invalid(ConfigError::VolumeSize(
                "a volume can grow, not shrink",
            )));
        }
        let mut cfg = self.cfg.clone();
        cfg.volume_size = volume_size;
        cfg.validate().map_err(ReconfigureError::Invalid)?;
        self.cfg = cfg;
        Ok(())
    }

    /// Changes the cache capacity (whole groups). Growing adds free groups.
    /// Shrinking drops the groups beyond the new capacity and appends their
    /// blocks to `evicted` (with their cache addresses: persist the
    /// removals); it is refused while any of them holds dirty data (flush
    /// first) or in-flight work. The size-aware admission policy, which
    /// tunes itself to the capacity, starts afresh.
    pub fn resize(
        &mut self,
        new_capacity: u64,
        evicted: &mut Vec<Evicted>,
    ) -> Result<(), ResizeError> {
        let mut cfg = self.cfg.clone();
        cfg.capacity = new_capacity;
        cfg.validate().map_err(ResizeError::Invalid)?;
        let gsize = cfg.group_size as u64;
        let count = (new_capacity / gsize) as u32;
        let old = self.groups.groups.len() as u32;
        for g in count..old {
            let grp = self.groups.groups[g as usize];
            let group_addr = g as u64 * gsize;
            if grp.in_use && grp.dirty > 0 {
                return Err(ResizeError::Dirty { group_addr });
            }
            if grp.in_use && grp.pinned > 0 {
                return Err(ResizeError::Pinned { group_addr });
            }
        }
        for g in count..old {
            if self.groups.groups[g as usize].in_use {
                self.evict_group(g, evicted);
            }
        }
        if count < old {
            self.groups.shrink(count);
        } else {
            self.groups.grow(count);
        }
        self.capacity = count as u64 * gsize;
        self.eviction.set_capacity(self.capacity, count);
        if self.observers.chooser.is_some() {
            // Shadows are sized by the capacity: start them afresh.
            self.observers.chooser = self.new_chooser();
            let first = self.observers.chooser.as_ref().map(|c| c.active().clone());
            if let Some(first) = first {
                self.install_eviction(first);
            }
        }
        let size_aware = matches!(cfg.admission, AdmissionConfig::SizeAware(_));
        self.cfg = cfg;
        if size_aware {
            self.admission = admission::build(&self.cfg);
        }
        Ok(())
    }
}
