//! Per-key records and weighted queues shared by the policies that order
//! blocks (or groups) themselves.
//!
//! Keys are the engine's block ids (class and slot) or group ids, so the
//! records live in one dense `Vec` per class and queues are intrusive lists
//! over them ([`crate::lru::List`]): ordering costs no allocation per
//! access, and 16 bytes per cached block.

use crate::blocks::{id_class, id_index};
use crate::lru::{Links, List, NIL};

/// "No queue": the key is not tracked.
pub(crate) const NONE: u8 = 0;

/// One tracked key: 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub prev: u32,
    pub next: u32,
    /// Identity across evictions (a granule of the volume) for ghosts and
    /// sketches, or `NO_TAG`.
    pub tag: u32,
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
    queue: NONE,
    freq: 0,
};

/// Records of every key seen so far, one array per class, each grown to the
/// largest index used: memory follows the slots each class really has.
/// Every key of a class has the same weight (its block size).
#[derive(Clone, Debug, Default)]
pub(crate) struct Nodes {
    classes: Vec<Vec<Node>>,
    weights: Vec<u32>,
}

/// Keys carry their class in the top bits, as the engine's block ids do
/// (a group or a shadow slot is class 0).
#[inline]
fn split(key: u32) -> (usize, usize) {
    (id_class(key), id_index(key) as usize)
}

impl Nodes {
    /// Starts tracking `key` (which must be untracked) with a fresh record.
    pub fn init(&mut self, key: u32, tag: u32, weight: u32) -> &mut Node {
        let (c, i) = split(key);
        if self.classes.len() <= c {
            self.classes.resize(c + 1, Vec::new());
            self.weights.resize(c + 1, 0);
        }
        self.weights[c] = weight;
        let v = &mut self.classes[c];
        if v.len() <= i {
            v.resize(i + 1, UNTRACKED);
        }
        debug_assert_eq!(v[i].queue, NONE, "key {key} tracked twice");
        v[i] = Node { tag, ..UNTRACKED };
        &mut v[i]
    }

    pub fn get(&self, key: u32) -> &Node {
        let (c, i) = split(key);
        &self.classes[c][i]
    }

    pub fn get_mut(&mut self, key: u32) -> &mut Node {
        let (c, i) = split(key);
        &mut self.classes[c][i]
    }

    /// The weight of `key`'s class.
    pub fn weight(&self, key: u32) -> u32 {
        self.weights[split(key).0]
    }

    pub fn memory_bytes(&self) -> usize {
        self.classes
            .iter()
            .map(|v| v.capacity() * std::mem::size_of::<Node>())
            .sum::<usize>()
            + self.weights.capacity() * 4
    }
}

impl Links for Nodes {
    fn prev(&self, id: u32) -> u32 {
        self.get(id).prev
    }
    fn next(&self, id: u32) -> u32 {
        self.get(id).next
    }
    fn set_prev(&mut self, id: u32, to: u32) {
        self.get_mut(id).prev = to;
    }
    fn set_next(&mut self, id: u32, to: u32) {
        self.get_mut(id).next = to;
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
        self.list.push_front(nodes, key);
        nodes.get_mut(key).queue = self.id;
        self.weight += nodes.weight(key) as u64;
    }

    /// Inserts `key` at the eviction end (it is offered first next time).
    pub fn push_back(&mut self, nodes: &mut Nodes, key: u32) {
        self.list.push_back(nodes, key);
        nodes.get_mut(key).queue = self.id;
        self.weight += nodes.weight(key) as u64;
    }

    pub fn remove(&mut self, nodes: &mut Nodes, key: u32) {
        debug_assert_eq!(nodes.get(key).queue, self.id);
        self.list.remove(nodes, key);
        nodes.get_mut(key).queue = NONE;
        self.weight -= nodes.weight(key) as u64;
    }

    pub fn move_to_front(&mut self, nodes: &mut Nodes, key: u32) {
        self.list.move_to_front(nodes, key);
    }

    /// Moves `key` from this queue to the head of `to`.
    pub fn transfer(&mut self, to: &mut Queue, nodes: &mut Nodes, key: u32) {
        self.remove(nodes, key);
        to.push_front(nodes, key);
    }
}

/// Keys a victim scan set aside because the engine cannot evict them now
/// (pinned, or dirty and being written back). They go back to the eviction
/// end of their queue, in their order, when the scan ends: they keep their
/// place and are offered first next time, instead of being treated as used
/// (which would promote every freshly written block).
#[derive(Clone, Debug, Default)]
pub(crate) struct Held(Vec<(u8, u32)>);

impl Held {
    /// Takes `key` off `queue` until [`Held::restore`].
    pub fn hold(&mut self, queue: &mut Queue, nodes: &mut Nodes, key: u32) {
        queue.remove(nodes, key);
        self.0.push((queue.id, key));
    }

    /// The held keys and their queue ids, newest first: pushing each back
    /// at its queue's eviction end leaves the oldest there.
    pub fn take_all(&mut self) -> impl Iterator<Item = (u8, u32)> + '_ {
        self.0.drain(..).rev()
    }
}
