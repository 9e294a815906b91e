//! Planning reads, writes and deallocates over the segments a request's
//! range probed to: cache reads and fills, cache and core writes, trims.

use crate::alloc::{greedy_cover, Seg};
use crate::blocks::Ext;
use crate::config::{WriteMissFill, WriteMode};
use crate::plan::{Evicted, Op, Plan};

use super::tickets::Undo;
use super::Engine;

impl Engine {
    pub(super) fn plan_read(&mut self, t: u32, segs: &[Seg], plan: &mut Plan) -> (u64, u64) {
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
                    self.tickets.push_undo(t, Undo { id, before: ex });
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
                    let mut cover = std::mem::take(&mut self.scratch.cover);
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
                    self.scratch.cover = cover;
                }
            }
        }
        (hit, miss)
    }

    pub(super) fn plan_write(&mut self, t: u32, segs: &[Seg], plan: &mut Plan) -> (u64, u64) {
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
                    self.tickets.push_undo(t, Undo { id, before: ex });
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
                    let mut cover = std::mem::take(&mut self.scratch.cover);
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
                    self.scratch.cover = cover;
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
    pub(super) fn plan_deallocate(&mut self, t: u32, segs: &[Seg], plan: &mut Plan) {
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
                self.tickets.push_undo(t, Undo { id, before: ex });
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
}
