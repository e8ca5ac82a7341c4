//! [`KeyList`]: an ordered set of block numbers with O(1) insertion at the front, removal of
//! any member, and access to the back: the LRU stacks and FIFO queues every reference policy
//! is made of.
//!
//! Nodes live in one vector (a slab with a free list) and are linked by index; a hash map
//! finds a key's node. The front is the most recent end (an LRU's MRU position, a FIFO's
//! tail where new entries join), the back the oldest (the LRU victim, the FIFO head).

use super::FastMap;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    key: u64,
    prev: u32,
    next: u32,
}

/// An ordered set of keys (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct KeyList {
    map: FastMap<u64, u32>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// Most recent end.
    head: Option<u32>,
    /// Oldest end.
    tail: Option<u32>,
}

impl KeyList {
    /// An empty list.
    pub fn new() -> KeyList {
        KeyList::default()
    }

    /// Members.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when it has no member.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether `key` is a member.
    pub fn contains(&self, key: u64) -> bool {
        self.map.contains_key(&key)
    }

    /// Adds `key`, which must not be a member, at the front (most recent end).
    pub fn push_front(&mut self, key: u64) {
        let node = Node {
            key,
            prev: NIL,
            next: self.head.unwrap_or(NIL),
        };
        let at = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        let old = self.map.insert(key, at);
        debug_assert!(old.is_none(), "key {key} pushed twice");
        match self.head {
            Some(h) => self.nodes[h as usize].prev = at,
            None => self.tail = Some(at),
        }
        self.head = Some(at);
    }

    fn unlink(&mut self, at: u32) {
        let Node { prev, next, .. } = self.nodes[at as usize];
        if prev == NIL {
            self.head = (next != NIL).then_some(next);
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = (prev != NIL).then_some(prev);
        } else {
            self.nodes[next as usize].prev = prev;
        }
    }

    /// Removes `key`; false if it was not a member.
    pub fn remove(&mut self, key: u64) -> bool {
        match self.map.remove(&key) {
            Some(at) => {
                self.unlink(at);
                self.free.push(at);
                true
            }
            None => false,
        }
    }

    /// Moves `key` to the front; false (and nothing done) if it is not a member.
    pub fn move_to_front(&mut self, key: u64) -> bool {
        let Some(&at) = self.map.get(&key) else {
            return false;
        };
        if self.head != Some(at) {
            self.unlink(at);
            let node = &mut self.nodes[at as usize];
            node.prev = NIL;
            node.next = self.head.unwrap_or(NIL);
            if let Some(h) = self.head {
                self.nodes[h as usize].prev = at;
            }
            self.head = Some(at);
            if self.tail.is_none() {
                self.tail = Some(at);
            }
        }
        true
    }

    /// The oldest member.
    pub fn back(&self) -> Option<u64> {
        self.tail.map(|t| self.nodes[t as usize].key)
    }

    /// Removes and returns the oldest member.
    pub fn pop_back(&mut self) -> Option<u64> {
        let key = self.back()?;
        self.remove(key);
        Some(key)
    }

    /// The members from the most recent to the oldest (for tests and checks).
    pub fn keys(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.len());
        let mut at = self.head.unwrap_or(NIL);
        while at != NIL {
            out.push(self.nodes[at as usize].key);
            at = self.nodes[at as usize].next;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_moves_and_removal() {
        let mut l = KeyList::new();
        for k in [1, 2, 3, 4] {
            l.push_front(k);
        }
        assert_eq!(l.keys(), [4, 3, 2, 1]);
        assert!(l.move_to_front(1));
        assert_eq!(l.keys(), [1, 4, 3, 2]);
        assert!(l.remove(3) && !l.remove(3));
        assert_eq!(l.back(), Some(2));
        assert_eq!(l.pop_back(), Some(2));
        assert_eq!(l.keys(), [1, 4]);
        assert!(l.move_to_front(4) && l.move_to_front(4));
        assert_eq!(l.keys(), [4, 1]);
        l.push_front(9);
        assert_eq!((l.len(), l.back()), (3, Some(1)));
        while l.pop_back().is_some() {}
        assert!(l.is_empty() && l.keys().is_empty() && !l.move_to_front(4));
        l.push_front(5);
        assert_eq!(l.keys(), [5]);
    }
}
