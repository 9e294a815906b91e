//! Groups: the unit of space management (AdaCache III.C).
//!
//! The cache space is cut into groups of the largest block size. A group
//! holds blocks of one size only, handed out front to back by a cursor; at
//! most one group per size is open (has unhanded slots). Reclaiming a whole
//! group frees a contiguous piece big enough for any block, so the space
//! never fragments. Groups are ordered by the group LRU (III.D).

use crate::lru::{List, NIL};

/// One group record: 24 bytes, amortised over the blocks it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    /// Block size class, meaningful when `in_use`.
    pub class: u8,
    /// On the group LRU (holds, or held, blocks) rather than free.
    pub in_use: bool,
    /// Slots handed out so far (slots beyond it were never used).
    pub cursor: u16,
    /// Slots holding a block.
    pub live: u16,
    /// Blocks pinned by in-flight work: the group must not be reclaimed.
    pub pinned: u16,
    /// Blocks with dirty data.
    pub dirty: u16,
    /// Slab chunk of this group's block entries (see `blocks`).
    pub chunk: u32,
    pub prev: u32,
    pub next: u32,
}

impl Group {
    const FREE: Group = Group {
        class: 0,
        in_use: false,
        cursor: 0,
        live: 0,
        pinned: 0,
        dirty: 0,
        chunk: NIL,
        prev: NIL,
        next: NIL,
    };
}

crate::lru::slice_links!(Group);

/// All groups of one volume's cache space.
#[derive(Clone, Debug)]
pub(crate) struct Groups {
    pub groups: Vec<Group>,
    /// Free groups, used last-freed first (deterministic, cache-warm).
    pub free: Vec<u32>,
    /// In-use groups, most recently used first.
    pub lru: List,
    /// The open group of each class, or NIL.
    pub open: Vec<u32>,
}

impl Groups {
    pub fn new(count: u32, classes: usize) -> Groups {
        Groups {
            groups: vec![Group::FREE; count as usize],
            free: (0..count).rev().collect(),
            lru: List::new(),
            open: vec![NIL; classes],
        }
    }

    pub fn memory_bytes(&self) -> usize {
        self.groups.capacity() * std::mem::size_of::<Group>()
            + self.free.capacity() * 4
            + self.open.capacity() * 4
    }

    /// Takes a free group for `class` and makes it that class's open group.
    pub fn open_free(&mut self, class: usize, chunk: u32) -> Option<u32> {
        let g = self.free.pop()?;
        self.assign(g, class, chunk);
        Some(g)
    }

    /// Makes the (just unlinked or free) group `g` the open group of `class`.
    pub fn assign(&mut self, g: u32, class: usize, chunk: u32) {
        let grp = &mut self.groups[g as usize];
        *grp = Group {
            class: class as u8,
            in_use: true,
            chunk,
            ..Group::FREE
        };
        self.lru.push_front(&mut self.groups[..], g);
        self.open[class] = g;
    }

    /// Takes `g` off the LRU (and the open slot); the caller reuses or frees it.
    pub fn unlink(&mut self, g: u32) {
        let class = self.groups[g as usize].class as usize;
        if self.open[class] == g {
            self.open[class] = NIL;
        }
        self.lru.remove(&mut self.groups[..], g);
        self.groups[g as usize] = Group::FREE;
    }

    /// Makes the free group `g` (already off the free list) an in-use group
    /// of `class` with `cursor` slots handed out, at the LRU head.
    pub fn restore(&mut self, g: u32, class: usize, chunk: u32, cursor: u16, open: bool) {
        self.groups[g as usize] = Group {
            class: class as u8,
            in_use: true,
            cursor,
            chunk,
            ..Group::FREE
        };
        self.lru.push_front(&mut self.groups[..], g);
        if open {
            self.open[class] = g;
        }
    }

    /// Adds free groups up to `count` (used after the free ones there are).
    pub fn grow(&mut self, count: u32) {
        let old = self.groups.len() as u32;
        self.groups.resize(count as usize, Group::FREE);
        let mut free: Vec<u32> = (old..count).rev().collect();
        free.extend_from_slice(&self.free);
        self.free = free;
    }

    /// Forgets groups from `count` on; they must be free.
    pub fn shrink(&mut self, count: u32) {
        debug_assert!(self.groups[count as usize..].iter().all(|g| !g.in_use));
        self.groups.truncate(count as usize);
        self.free.retain(|&g| g < count);
    }

    pub fn release(&mut self, g: u32) {
        self.unlink(g);
        self.free.push(g);
    }

    pub fn touch(&mut self, g: u32) {
        self.lru.move_to_front(&mut self.groups[..], g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_touch_release() {
        let mut g = Groups::new(3, 2);
        let a = g.open_free(0, 10).unwrap();
        let b = g.open_free(1, 11).unwrap();
        assert_eq!((a, b), (0, 1));
        assert_eq!(g.open, vec![0, 1]);
        assert_eq!(g.lru.collect(&g.groups[..]).unwrap(), vec![1, 0]);
        g.touch(a);
        assert_eq!(g.lru.tail, 1);
        g.release(b);
        assert_eq!(g.open, vec![0, NIL]);
        assert_eq!(g.free, vec![2, 1]);
        assert_eq!(g.open_free(1, 12), Some(1));
    }
}
