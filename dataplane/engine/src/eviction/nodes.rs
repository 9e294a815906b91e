//! Per-key records and weighted queues shared by the policies that order
//! blocks (or groups) themselves.
//!
//! Keys are dense `u32`s (a block's slot and class, or a group id), so the
//! records live in one `Vec` indexed by key and queues are intrusive lists
//! over it ([`crate::lru::List`]): ordering costs no allocation per access.

use crate::lru::{List, NIL};

/// "No queue": the key is not tracked.
pub(crate) const NONE: u8 = 0;

/// One tracked key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub prev: u32,
    pub next: u32,
    /// Identity across evictions (a granule of the volume) for ghosts and
    /// sketches, or `NO_TAG`.
    pub tag: u32,
    /// Bytes for blocks, 1 for groups.
    pub weight: u32,
    /// Which of the policy's queues holds the key (`NONE` when untracked).
    pub queue: u8,
    /// Policy-specific: access count, visited bit.
    pub freq: u8,
}

/// The tag of keys that have no identity across reuse (groups).
pub(crate) const NO_TAG: u32 = u32::MAX;

const UNTRACKED: Node = Node {
    prev: NIL,
    next: NIL,
    tag: NO_TAG,
    weight: 0,
    queue: NONE,
    freq: 0,
};

crate::lru::slice_links!(Node);

/// Records of every key seen so far; grows to the largest key.
#[derive(Clone, Debug, Default)]
pub(crate) struct Nodes(pub Vec<Node>);

impl Nodes {
    /// Starts tracking `key` (which must be untracked) with a fresh record.
    pub fn init(&mut self, key: u32, tag: u32, weight: u32) -> &mut Node {
        let i = key as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, UNTRACKED);
        }
        debug_assert_eq!(self.0[i].queue, NONE, "key {key} tracked twice");
        self.0[i] = Node {
            tag,
            weight,
            ..UNTRACKED
        };
        &mut self.0[i]
    }

    pub fn get(&self, key: u32) -> &Node {
        &self.0[key as usize]
    }

    pub fn get_mut(&mut self, key: u32) -> &mut Node {
        &mut self.0[key as usize]
    }

    pub fn memory_bytes(&self) -> usize {
        self.0.capacity() * std::mem::size_of::<Node>()
    }
}

/// An intrusive list that also knows its total weight and its queue id.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Queue {
    pub id: u8,
    pub list: List,
    pub weight: u64,
}

impl Queue {
    pub const fn new(id: u8) -> Queue {
        Queue {
            id,
            list: List::new(),
            weight: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.list.len == 0
    }

    /// The eviction end (oldest), or `NIL`.
    pub fn tail(&self) -> u32 {
        self.list.tail
    }

    pub fn push_front(&mut self, nodes: &mut Nodes, key: u32) {
        self.list.push_front(&mut nodes.0[..], key);
        let n = nodes.get_mut(key);
        n.queue = self.id;
        self.weight += n.weight as u64;
    }

    pub fn remove(&mut self, nodes: &mut Nodes, key: u32) {
        debug_assert_eq!(nodes.get(key).queue, self.id);
        self.list.remove(&mut nodes.0[..], key);
        let n = nodes.get_mut(key);
        n.queue = NONE;
        self.weight -= n.weight as u64;
    }

    pub fn move_to_front(&mut self, nodes: &mut Nodes, key: u32) {
        self.list.move_to_front(&mut nodes.0[..], key);
    }

    /// Moves `key` from this queue to the head of `to`.
    pub fn transfer(&mut self, to: &mut Queue, nodes: &mut Nodes, key: u32) {
        self.remove(nodes, key);
        to.push_front(nodes, key);
    }
}
