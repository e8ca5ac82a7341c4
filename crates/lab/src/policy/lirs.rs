//! LIRS, the Low Inter-reference Recency Set (S. Jiang and X. Zhang, "LIRS: An Efficient Low
//! Inter-reference Recency Set Replacement Policy to Improve Buffer Cache Performance", ACM
//! SIGMETRICS 2002, section 3).
//!
//! Blocks are ranked by their inter-reference recency (IRR: distinct blocks read between a
//! block's last two reads). Blocks of low IRR (LIR) hold most of the cache and are always
//! resident; the rest (HIR) share a small resident part, the queue `Q`, and may stay in the
//! stack as non-resident entries (keys only) that remember a recent first read.
//!
//! - The stack `S` is an LRU stack of LIR blocks and of HIR blocks (resident or not) more
//!   recent than the least recent LIR block; *pruning* removes HIR entries from its bottom
//!   so that its bottom is always a LIR block.
//! - A read of a LIR block moves it to the top of `S` (pruning if it was the bottom).
//! - A read of a resident HIR block in `S` makes it LIR (its new IRR is below the oldest LIR
//!   block's recency), and the bottom LIR block becomes a resident HIR at the end of `Q`.
//!   A resident HIR block not in `S` moves to the top of `S` and the end of `Q`, still HIR.
//! - A miss evicts the front of `Q` (leaving a non-resident entry if the block is in `S`).
//!   A block read again while a non-resident entry in `S` becomes LIR (demoting the bottom
//!   LIR block into `Q`); any other missed block enters as a resident HIR at the top of `S`
//!   and the end of `Q`. While the LIR set is not full, missed blocks become LIR at once.
//!
//! **Parameters.** The resident HIR share is 1% of the cache (at least one block): the
//! paper's recommended `L_hirs`, and libCacheSim's `hirs_ratio`. The paper leaves the stack
//! unbounded; a long run of cold reads would fill it with non-resident entries. Here, as in
//! libCacheSim, the stack holds at most **twice the capacity** in entries: past that, the
//! non-resident entry that became non-resident longest ago is dropped (a list of
//! non-resident entries in eviction order gives it in O(1)). Every LIR block and resident
//! HIR block in the stack is kept, so the bound only shortens how long a cold block's first
//! read is remembered: to about one cache size of later evictions.

use super::list::KeyList;
use super::{FastMap, Policy};

/// A block's LIRS status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// Low IRR, resident.
    Lir,
    /// High IRR, resident (in `Q`, maybe in `S`).
    Hir,
    /// High IRR, evicted, remembered in `S` only.
    NonResident,
}

/// LIRS over `capacity` blocks.
#[derive(Debug)]
pub struct Lirs {
    capacity: usize,
    lir_cap: usize,
    hir_cap: usize,
    lir: usize,
    status: FastMap<u64, Status>,
    /// The stack `S`; front = top (most recent).
    s: KeyList,
    /// Resident HIR blocks; back = the front of the paper's `Q` (next victim).
    q: KeyList,
    /// Non-resident entries of `S` in the order they were evicted; back = longest ago.
    nr: KeyList,
}

/// Share of the cache for resident HIR blocks.
pub const HIR_SHARE: f64 = 0.01;

/// The stack holds at most this many times the capacity in entries.
pub const STACK_LIMIT: usize = 2;

impl Lirs {
    /// An empty LIRS of `capacity` blocks (at least 2: one LIR and one HIR).
    pub fn new(capacity: usize) -> Lirs {
        let capacity = capacity.max(2);
        let hir_cap = ((capacity as f64 * HIR_SHARE) as usize).max(1);
        Lirs {
            capacity,
            lir_cap: capacity - hir_cap,
            hir_cap,
            lir: 0,
            status: FastMap::default(),
            s: KeyList::new(),
            q: KeyList::new(),
            nr: KeyList::new(),
        }
    }

    /// Removes HIR entries from the bottom of `S` until a LIR block is there.
    fn prune(&mut self) {
        while let Some(b) = self.s.back() {
            match self.status[&b] {
                Status::Lir => break,
                Status::Hir => {
                    self.s.remove(b);
                }
                Status::NonResident => {
                    self.s.remove(b);
                    self.nr.remove(b);
                    self.status.remove(&b);
                }
            }
        }
    }

    /// The bottom LIR block of `S` becomes a resident HIR at the end of `Q`.
    fn demote_bottom_lir(&mut self) {
        let b = self.s.pop_back().expect("a full LIR set has a bottom");
        debug_assert_eq!(self.status[&b], Status::Lir);
        self.status.insert(b, Status::Hir);
        self.lir -= 1;
        self.q.push_front(b);
        self.prune();
    }

    /// Evicts the front of `Q`.
    fn evict_hir(&mut self) {
        let v = self.q.pop_back().expect("Q has a resident HIR block");
        if self.s.contains(v) {
            self.status.insert(v, Status::NonResident);
            self.nr.push_front(v);
        } else {
            self.status.remove(&v);
        }
    }

    /// Drops the oldest non-resident entries while `S` is over its bound.
    fn limit_stack(&mut self) {
        while self.s.len() > STACK_LIMIT * self.capacity {
            let Some(v) = self.nr.pop_back() else { break };
            self.s.remove(v);
            self.status.remove(&v);
        }
    }

    /// Checks the invariants (for tests): resident blocks within the capacity, LIR and HIR
    /// within their shares, the bottom of `S` a LIR block, the stack within its bound.
    pub fn check(&self) {
        assert!(self.lir <= self.lir_cap && self.q.len() <= self.hir_cap);
        assert!(self.resident() <= self.capacity);
        if let Some(b) = self.s.back() {
            assert_eq!(self.status[&b], Status::Lir, "bottom of S");
        }
        assert!(self.s.len() <= STACK_LIMIT * self.capacity + 1);
        let lir = self.status.values().filter(|s| **s == Status::Lir).count();
        assert_eq!(lir, self.lir);
    }
}

impl Policy for Lirs {
    fn access(&mut self, x: u64) -> bool {
        let hit = match self.status.get(&x).copied() {
            Some(Status::Lir) => {
                self.s.move_to_front(x);
                self.prune();
                true
            }
            Some(Status::Hir) => {
                if self.s.move_to_front(x) {
                    // Its IRR is below the oldest LIR block's recency: it becomes LIR.
                    self.q.remove(x);
                    self.status.insert(x, Status::Lir);
                    self.lir += 1;
                    if self.lir > self.lir_cap {
                        self.demote_bottom_lir();
                    }
                } else {
                    self.s.push_front(x);
                    self.q.move_to_front(x);
                }
                true
            }
            Some(Status::NonResident) => {
                if self.q.len() >= self.hir_cap {
                    self.evict_hir();
                }
                self.nr.remove(x);
                self.s.move_to_front(x);
                self.status.insert(x, Status::Lir);
                self.lir += 1;
                if self.lir > self.lir_cap {
                    self.demote_bottom_lir();
                }
                false
            }
            None => {
                if self.lir < self.lir_cap {
                    self.status.insert(x, Status::Lir);
                    self.lir += 1;
                    self.s.push_front(x);
                } else {
                    if self.q.len() >= self.hir_cap {
                        self.evict_hir();
                    }
                    self.status.insert(x, Status::Hir);
                    self.s.push_front(x);
                    self.q.push_front(x);
                }
                false
            }
        };
        self.limit_stack();
        hit
    }

    fn resident(&self) -> usize {
        self.lir + self.q.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::traces::Rng;

    /// The paper's point: on a loop slightly larger than the cache, LIRS keeps a fixed set
    /// of LIR blocks and hits on them every pass, where LRU hits nothing.
    #[test]
    fn a_loop_longer_than_the_cache_hits_its_lir_blocks() {
        let mut l = Lirs::new(100);
        let mut hits = 0;
        for i in 0..20_000u64 {
            hits += u64::from(l.access(i % 110));
            l.check();
        }
        // About 98 of 110 blocks hit per pass, once the LIR set has formed.
        assert!(hits > 15_000, "{hits}");
    }

    /// A resident HIR block read again while in the stack becomes LIR, and the bottom LIR
    /// block is demoted (hand-checked on a cache of 3: 2 LIR, 1 HIR).
    #[test]
    fn hir_in_stack_is_promoted() {
        let mut l = Lirs::new(3);
        assert_eq!((l.lir_cap, l.hir_cap), (2, 1));
        for k in [1, 2, 3] {
            assert!(!l.access(k));
        }
        // 1, 2 LIR; 3 resident HIR in S and Q.
        assert!(l.access(3));
        assert_eq!(l.status[&3], Status::Lir);
        assert_eq!(l.status[&1], Status::Hir, "1 was the bottom LIR");
        assert_eq!(l.q.keys(), [1]);
        l.check();
        // A new block evicts 1, the only resident HIR; 1 left S when it was demoted from
        // its bottom, so no non-resident entry remembers it.
        assert!(!l.access(4));
        assert!(!l.status.contains_key(&1));
        l.check();
    }

    /// Resident blocks never exceed the capacity and the stack stays bounded on random
    /// reads with a cold stream.
    #[test]
    fn invariants_hold_on_random_reads() {
        let mut l = Lirs::new(50);
        let mut rng = Rng::new(9);
        for _ in 0..40_000 {
            let k = if rng.below(3) == 0 {
                rng.below(40)
            } else {
                rng.below(1_000_000)
            };
            l.access(k);
            l.check();
        }
    }
}
