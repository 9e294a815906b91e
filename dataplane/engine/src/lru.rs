//! Intrusive doubly-linked lists over `u32` slot indices.
//!
//! The block LRU, the group LRU, the per-size hole lists and LEA's ghost list
//! all keep their links inside the records they order, so ordering costs
//! eight bytes per record and no allocation. Head is the most recently used
//! end (LEA's insertion point), tail the least recently used (eviction point).

/// The "no record" link value.
pub(crate) const NIL: u32 = u32::MAX;

/// Access to the `prev`/`next` fields of the records a [`List`] orders.
pub(crate) trait Links {
    fn prev(&self, id: u32) -> u32;
    fn next(&self, id: u32) -> u32;
    fn set_prev(&mut self, id: u32, to: u32);
    fn set_next(&mut self, id: u32, to: u32);
}

/// Head, tail and length of one intrusive list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct List {
    pub head: u32,
    pub tail: u32,
    pub len: u32,
}

impl Default for List {
    fn default() -> Self {
        List::new()
    }
}

impl List {
    pub const fn new() -> List {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    /// Inserts `id` (not on any list) at the head.
    pub fn push_front<L: Links + ?Sized>(&mut self, s: &mut L, id: u32) {
        s.set_prev(id, NIL);
        s.set_next(id, self.head);
        if self.head != NIL {
            s.set_prev(self.head, id);
        } else {
            self.tail = id;
        }
        self.head = id;
        self.len += 1;
    }

    /// Inserts `id` (not on any list) at the tail.
    pub fn push_back<L: Links + ?Sized>(&mut self, s: &mut L, id: u32) {
        s.set_next(id, NIL);
        s.set_prev(id, self.tail);
        if self.tail != NIL {
            s.set_next(self.tail, id);
        } else {
            self.head = id;
        }
        self.tail = id;
        self.len += 1;
    }

    /// Unlinks `id`, which must be on this list.
    pub fn remove<L: Links + ?Sized>(&mut self, s: &mut L, id: u32) {
        let (p, n) = (s.prev(id), s.next(id));
        if p != NIL {
            s.set_next(p, n);
        } else {
            debug_assert_eq!(self.head, id);
            self.head = n;
        }
        if n != NIL {
            s.set_prev(n, p);
        } else {
            debug_assert_eq!(self.tail, id);
            self.tail = p;
        }
        s.set_prev(id, NIL);
        s.set_next(id, NIL);
        self.len -= 1;
    }

    /// Moves `id`, which must be on this list, to the head.
    pub fn move_to_front<L: Links + ?Sized>(&mut self, s: &mut L, id: u32) {
        if self.head == id {
            return;
        }
        self.remove(s, id);
        self.push_front(s, id);
    }

    /// Removes and returns the head.
    pub fn pop_front<L: Links + ?Sized>(&mut self, s: &mut L) -> Option<u32> {
        let h = self.head;
        if h == NIL {
            return None;
        }
        self.remove(s, h);
        Some(h)
    }

    /// Checks the links from both ends; returns the ids head to tail.
    pub fn collect<L: Links + ?Sized>(&self, s: &L) -> Result<Vec<u32>, String> {
        let mut out = Vec::with_capacity(self.len as usize);
        let mut prev = NIL;
        let mut cur = self.head;
        while cur != NIL {
            if s.prev(cur) != prev {
                return Err(format!("list: prev of {cur} is {} not {prev}", s.prev(cur)));
            }
            out.push(cur);
            if out.len() > self.len as usize {
                return Err("list: longer than its length (cycle?)".into());
            }
            prev = cur;
            cur = s.next(cur);
        }
        if prev != self.tail {
            return Err(format!(
                "list: tail is {} but walk ended at {prev}",
                self.tail
            ));
        }
        if out.len() != self.len as usize {
            return Err(format!(
                "list: length {} but {} linked",
                self.len,
                out.len()
            ));
        }
        Ok(out)
    }
}

/// Implements [`Links`] for a slice of records that keep their own `prev`
/// and `next` fields (groups, ghost entries, shadow-cache nodes).
macro_rules! slice_links {
    ($t:ty) => {
        impl $crate::lru::Links for [$t] {
            fn prev(&self, id: u32) -> u32 {
                self[id as usize].prev
            }
            fn next(&self, id: u32) -> u32 {
                self[id as usize].next
            }
            fn set_prev(&mut self, id: u32, to: u32) {
                self[id as usize].prev = to;
            }
            fn set_next(&mut self, id: u32, to: u32) {
                self[id as usize].next = to;
            }
        }
    };
}
pub(crate) use slice_links;

#[cfg(test)]
mod tests {
    use super::*;

    struct Nodes(Vec<(u32, u32)>);
    impl Links for Nodes {
        fn prev(&self, id: u32) -> u32 {
            self.0[id as usize].0
        }
        fn next(&self, id: u32) -> u32 {
            self.0[id as usize].1
        }
        fn set_prev(&mut self, id: u32, to: u32) {
            self.0[id as usize].0 = to;
        }
        fn set_next(&mut self, id: u32, to: u32) {
            self.0[id as usize].1 = to;
        }
    }

    #[test]
    fn push_move_remove() {
        let mut n = Nodes(vec![(NIL, NIL); 4]);
        let mut l = List::new();
        for i in 0..4 {
            l.push_front(&mut n, i);
        }
        assert_eq!(l.collect(&n).unwrap(), vec![3, 2, 1, 0]);
        l.move_to_front(&mut n, 0);
        assert_eq!(l.collect(&n).unwrap(), vec![0, 3, 2, 1]);
        l.remove(&mut n, 2);
        assert_eq!(l.collect(&n).unwrap(), vec![0, 3, 1]);
        assert_eq!(l.tail, 1);
        assert_eq!(l.pop_front(&mut n), Some(0));
        l.push_back(&mut n, 2);
        assert_eq!(l.collect(&n).unwrap(), vec![3, 1, 2]);
        l.remove(&mut n, 2);
        l.remove(&mut n, 1);
        l.remove(&mut n, 3);
        assert_eq!(l, List::new());
    }
}
