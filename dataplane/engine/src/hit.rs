//! Read hits answered at once. A caller whose cache reads complete before
//! it calls the engine again (a RAM cache device read under the volume's
//! lock) needs no plan, ticket or pin for a read that one cached block
//! holds whole: the usual request of a warm volume. Everything else goes
//! through [`Engine::plan`], which records the same hit the same way.

use crate::engine::{BlockInfo, Engine};
use crate::plan::Op;

/// A read hit answered at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HitNow {
    /// Cache address of the read's first byte.
    pub cache_addr: u64,
    /// The block that holds the read, when some of its bytes are dirty
    /// (a caller that keeps checksums of dirty data verifies them);
    /// `None` for a clean block, so that reads of clean data need no
    /// second lookup to learn that.
    pub dirty_block: Option<BlockInfo>,
}

impl Engine {
    /// Where the `len` bytes at `offset` are in the cache when one cached
    /// block holds them all, valid, with no fill or write holding the block
    /// and no refused request waiting; the read is then recorded as
    /// [`Engine::plan`] records a hit. `None` records nothing: plan the
    /// request instead (it may still be a hit, or be refused).
    ///
    /// Nothing is pinned: the caller must have read the bytes before its
    /// next call into this engine.
    pub fn read_hit_now(&mut self, offset: u64, len: u64) -> Option<HitNow> {
        // A waiting request goes first (FIFO), and planning says why.
        if len == 0 || !self.waiters.is_empty() {
            return None;
        }
        if !self.sector_aligned(offset, len) {
            return None;
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.cfg.volume_size)?;
        let (id, start) = self.block_at(offset)?;
        if end > start + u64::from(self.blocks.size(id))
            || self.blocks.pin(id).exclusive
            || self.needs_exclusive(Op::Read, id, start, offset, len)
        {
            return None;
        }
        let cache_addr = self.blocks.cache_addr(id) + (offset - start);
        let dirty_block = self.blocks.ext(id).is_dirty().then(|| self.block_info(id));
        self.observe(Op::Read, offset, len);
        self.touch(id);
        let s = &mut self.stats.read;
        s.requests += 1;
        s.bytes += len;
        s.hit_bytes += len;
        s.hit_requests += 1;
        self.stats.read_from_cache += len;
        Some(HitNow {
            cache_addr,
            dirty_block,
        })
    }
}
