//! Exact LRU: on a miss with the cache full, evict the block read least recently.
//!
//! The baseline of every replacement paper, and what foliocache's two lists approximate
//! (the kernel's active/inactive lists are a two-queue CLOCK that tends to LRU when nothing
//! is read twice). Its failure cases are the harness's loop traces: a loop one block longer
//! than the cache misses every read.

use super::list::KeyList;
use super::Policy;

/// An exact LRU of `capacity` blocks.
#[derive(Debug)]
pub struct Lru {
    capacity: usize,
    list: KeyList,
}

impl Lru {
    /// An empty LRU of `capacity` blocks (at least 1).
    pub fn new(capacity: usize) -> Lru {
        Lru {
            capacity: capacity.max(1),
            list: KeyList::new(),
        }
    }
}

impl Policy for Lru {
    fn access(&mut self, key: u64) -> bool {
        if self.list.move_to_front(key) {
            return true;
        }
        if self.list.len() == self.capacity {
            self.list.pop_back();
        }
        self.list.push_front(key);
        false
    }

    fn resident(&self) -> usize {
        self.list.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recent() {
        let mut l = Lru::new(2);
        let hits: Vec<bool> = [1, 2, 1, 3, 2, 1, 3].iter().map(|&k| l.access(k)).collect();
        // 1 2 | 1 hit | 3 evicts 2 | 2 evicts 1 | 1 evicts 3 | 3 evicts 2.
        assert_eq!(hits, [false, false, true, false, false, false, false]);
        assert_eq!(l.resident(), 2);
    }
}
