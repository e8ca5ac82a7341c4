//! S3-FIFO (J. Yang, Y. Zhang, Z. Qiu, Y. Yue and R. Vinayak, "FIFO queues are all you need
//! for cache eviction", ACM SOSP 2023, section 4).
//!
//! Three FIFO queues: a small one `S` (10% of the cache) that new blocks enter, a main one
//! `M` (the rest), and a ghost queue `G` of keys recently evicted from `S`. Each resident
//! block has a small read counter, bumped on a hit (no queue moves on a hit).
//!
//! - A miss whose key is in `G` inserts into `M`; any other miss inserts into `S`.
//! - Evicting from `S` (when `M` is within its size): the oldest block of `S` moves to `M`
//!   if it was read at least `move_to_main_threshold` times while in `S`, else it is evicted
//!   and its key joins `G`; repeated until one block has left the cache.
//! - Evicting from `M` (when `M` is over its size, or `S` is empty): the oldest block of
//!   `M`, if read since it was (re)inserted, is reinserted with its counter (capped at 3)
//!   less one, a CLOCK with a two-bit counter; the first one found unread is evicted.
//!
//! **Parameters**, libCacheSim's defaults (its `S3FIFO.c`, which the paper's evaluation
//! used): `S` is `floor(0.1 c)` blocks, `G` remembers `floor(0.9 c)` keys, and a block moves
//! from `S` to `M` after **two** reads while in `S` (`move-to-main-threshold=2`; the
//! paper's figure describes one). One more libCacheSim rule is kept, so the two replay
//! alike: until the first eviction, a miss that finds `S` full inserts into `M`, so the
//! cache fills without evicting from a full `S` into an empty `M`.

use std::collections::VecDeque;

use super::{FastMap, Policy};

/// The share of the cache given to the small queue.
pub const SMALL_SHARE: f64 = 0.1;

/// The ghost queue remembers this share of the cache in keys.
pub const GHOST_SHARE: f64 = 0.9;

/// Reads in `S` that move a block to `M` instead of evicting it.
pub const MOVE_TO_MAIN_THRESHOLD: u8 = 2;

/// Where a resident block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

/// S3-FIFO over `capacity` blocks.
#[derive(Debug)]
pub struct S3Fifo {
    capacity: usize,
    small_cap: usize,
    main_cap: usize,
    ghost_cap: usize,
    /// Resident blocks: their queue and read counter.
    resident: FastMap<u64, (Queue, u8)>,
    small: VecDeque<u64>,
    main: VecDeque<u64>,
    /// Ghost keys with the sequence number of their insertion: a key removed from the map
    /// (a ghost hit) leaves a stale entry in the queue, skipped when it reaches the front.
    ghost: VecDeque<(u64, u64)>,
    ghost_map: FastMap<u64, u64>,
    ghost_seq: u64,
    has_evicted: bool,
}

impl S3Fifo {
    /// An empty S3-FIFO of `capacity` blocks (at least 2).
    pub fn new(capacity: usize) -> S3Fifo {
        let capacity = capacity.max(2);
        let small_cap = ((capacity as f64 * SMALL_SHARE) as usize).max(1);
        S3Fifo {
            capacity,
            small_cap,
            main_cap: capacity - small_cap,
            ghost_cap: (capacity as f64 * GHOST_SHARE) as usize,
            resident: FastMap::default(),
            small: VecDeque::new(),
            main: VecDeque::new(),
            ghost: VecDeque::new(),
            ghost_map: FastMap::default(),
            ghost_seq: 0,
            has_evicted: false,
        }
    }

    fn ghost_insert(&mut self, key: u64) {
        if self.ghost_cap == 0 {
            return;
        }
        self.ghost_seq += 1;
        self.ghost_map.insert(key, self.ghost_seq);
        self.ghost.push_back((key, self.ghost_seq));
        while self.ghost_map.len() > self.ghost_cap {
            let (k, seq) = self.ghost.pop_front().expect("ghost keys are queued");
            if self.ghost_map.get(&k) == Some(&seq) {
                self.ghost_map.remove(&k);
            }
        }
        // Stale entries are bounded by the live ones: compact when they dominate.
        if self.ghost.len() > 4 * self.ghost_cap.max(16) {
            let map = &self.ghost_map;
            self.ghost.retain(|(k, s)| map.get(k) == Some(s));
        }
    }

    fn evict_small(&mut self) {
        while let Some(k) = self.small.pop_front() {
            let (_, freq) = self.resident[&k];
            if freq >= MOVE_TO_MAIN_THRESHOLD {
                self.resident.insert(k, (Queue::Main, 0));
                self.main.push_back(k);
            } else {
                self.resident.remove(&k);
                self.ghost_insert(k);
                return;
            }
        }
    }

    fn evict_main(&mut self) {
        while let Some(k) = self.main.pop_front() {
            let (_, freq) = self.resident[&k];
            if freq >= 1 {
                self.resident.insert(k, (Queue::Main, freq.min(3) - 1));
                self.main.push_back(k);
            } else {
                self.resident.remove(&k);
                return;
            }
        }
    }

    fn evict(&mut self) {
        self.has_evicted = true;
        if self.main.len() > self.main_cap || self.small.is_empty() {
            self.evict_main();
        } else {
            self.evict_small();
        }
    }
}

impl Policy for S3Fifo {
    fn access(&mut self, key: u64) -> bool {
        if let Some((_, freq)) = self.resident.get_mut(&key) {
            *freq = freq.saturating_add(1);
            return true;
        }
        let ghost_hit = self.ghost_map.remove(&key).is_some();
        while self.resident.len() >= self.capacity {
            self.evict();
        }
        let queue = if ghost_hit || (!self.has_evicted && self.small.len() >= self.small_cap) {
            self.main.push_back(key);
            Queue::Main
        } else {
            self.small.push_back(key);
            Queue::Small
        };
        self.resident.insert(key, (queue, 0));
        false
    }

    fn resident(&self) -> usize {
        self.resident.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One-hit wonders pass through S and leave without touching M; a block read twice in S
    /// moves to M and outlives them.
    #[test]
    fn one_hit_wonders_are_filtered() {
        let mut s = S3Fifo::new(10); // S: 1 block, M: 9, G: 9 keys.
        for k in 0..10 {
            s.access(k); // fills: 0 in S, then 1..9 in M (S full, nothing evicted yet).
        }
        assert_eq!((s.small.len(), s.main.len()), (1, 9));
        // A read of 1 sets its counter; a stream of new blocks then cycles through S (M is
        // within its size) and leaves M alone.
        assert!(s.access(1));
        for k in 100..120 {
            assert!(!s.access(k));
        }
        assert!(s.access(1), "1 was read in M and keeps its place");
        assert!(s.resident() <= 10);
        // A key evicted from S is a ghost; reading it again inserts into M.
        let ghost = *s.ghost_map.keys().next().expect("S evicted into G");
        assert!(!s.access(ghost));
        assert_eq!(s.resident[&ghost].0, Queue::Main);
    }
}
