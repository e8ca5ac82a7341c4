//! ARC, the Adaptive Replacement Cache (N. Megiddo and D. S. Modha, "ARC: A Self-Tuning, Low
//! Overhead Replacement Cache", USENIX FAST 2003, figure 4).
//!
//! Two LRU lists of resident blocks, `T1` (seen once recently) and `T2` (seen at least
//! twice), and two ghost lists of the blocks last evicted from each, `B1` and `B2` (keys
//! only), with `|T1| + |B1| <= c` and `|T1| + |T2| + |B1| + |B2| <= 2c`. The target size `p`
//! of `T1` adapts: a hit in `B1` (a block evicted from `T1` too early) grows it by
//! `max(|B2| / |B1|, 1)`, a hit in `B2` shrinks it by `max(|B1| / |B2|, 1)`. `REPLACE`
//! evicts from `T1` when `|T1|` exceeds `p` (or equals it and the miss was a `B2` hit), else
//! from `T2`, and the evicted block's key goes to the matching ghost list.
//!
//! Written from the paper's pseudo-code; `p` is a real number as there (the deltas are
//! ratios), so no rounding choice is left.

use super::list::KeyList;
use super::Policy;

/// ARC over `capacity` blocks.
#[derive(Debug)]
pub struct Arc {
    c: usize,
    p: f64,
    t1: KeyList,
    t2: KeyList,
    b1: KeyList,
    b2: KeyList,
}

impl Arc {
    /// An empty ARC of `capacity` blocks (at least 1).
    pub fn new(capacity: usize) -> Arc {
        Arc {
            c: capacity.max(1),
            p: 0.0,
            t1: KeyList::new(),
            t2: KeyList::new(),
            b1: KeyList::new(),
            b2: KeyList::new(),
        }
    }

    /// The paper's `REPLACE(x, p)`: evicts one resident block into its ghost list.
    fn replace(&mut self, in_b2: bool) {
        let t1 = self.t1.len() as f64;
        if !self.t1.is_empty() && ((in_b2 && t1 == self.p) || t1 > self.p) {
            let v = self.t1.pop_back().expect("T1 is not empty");
            self.b1.push_front(v);
        } else if let Some(v) = self.t2.pop_back() {
            self.b2.push_front(v);
        } else if let Some(v) = self.t1.pop_back() {
            // T2 empty and |T1| <= p: only T1 has a block to give.
            self.b1.push_front(v);
        }
    }

    /// The target size of `T1` (for tests).
    pub fn target(&self) -> f64 {
        self.p
    }

    /// Checks the paper's invariants (for tests).
    pub fn check(&self) {
        let (t1, t2, b1, b2) = (self.t1.len(), self.t2.len(), self.b1.len(), self.b2.len());
        assert!(t1 + t2 <= self.c, "resident {t1}+{t2} over {}", self.c);
        assert!(t1 + b1 <= self.c, "L1 {t1}+{b1} over {}", self.c);
        assert!(t1 + t2 + b1 + b2 <= 2 * self.c, "directory over 2c");
        assert!((0.0..=self.c as f64).contains(&self.p));
    }
}

impl Policy for Arc {
    fn access(&mut self, x: u64) -> bool {
        // Case I: a hit in T1 or T2 moves x to the MRU end of T2.
        if self.t1.remove(x) {
            self.t2.push_front(x);
            return true;
        }
        if self.t2.move_to_front(x) {
            return true;
        }
        let c = self.c as f64;
        if self.b1.contains(x) {
            // Case II: T1 was too small.
            let delta = (self.b2.len() as f64 / self.b1.len() as f64).max(1.0);
            self.p = (self.p + delta).min(c);
            self.replace(false);
            self.b1.remove(x);
            self.t2.push_front(x);
            return false;
        }
        if self.b2.contains(x) {
            // Case III: T2 was too small.
            let delta = (self.b1.len() as f64 / self.b2.len() as f64).max(1.0);
            self.p = (self.p - delta).max(0.0);
            self.replace(true);
            self.b2.remove(x);
            self.t2.push_front(x);
            return false;
        }
        // Case IV: x is in no list.
        let l1 = self.t1.len() + self.b1.len();
        let total = l1 + self.t2.len() + self.b2.len();
        if l1 == self.c {
            if self.t1.len() < self.c {
                self.b1.pop_back();
                self.replace(false);
            } else {
                self.t1.pop_back();
            }
        } else if total >= self.c {
            if total == 2 * self.c {
                self.b2.pop_back();
            }
            self.replace(false);
        }
        self.t1.push_front(x);
        false
    }

    fn resident(&self) -> usize {
        self.t1.len() + self.t2.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::traces::Rng;

    /// A block read twice lands in T2 and survives a one-time scan as long as the cache,
    /// which LRU would not.
    #[test]
    fn frequent_blocks_survive_a_scan() {
        let mut a = Arc::new(4);
        for k in [1, 2, 1, 2] {
            a.access(k);
        }
        for k in 100..104 {
            assert!(!a.access(k));
        }
        assert!(a.access(1) && a.access(2));
        a.check();
    }

    /// The invariants hold on a random trace, and `p` moves.
    #[test]
    fn invariants_hold_on_random_reads() {
        let mut a = Arc::new(64);
        let mut rng = Rng::new(3);
        let mut moved = false;
        for i in 0..50_000u64 {
            // A hot set and a cold stream, shifting every 5,000 reads.
            let k = if rng.below(2) == 0 {
                rng.below(48) + (i / 5000) * 7
            } else {
                1000 + rng.below(5000)
            };
            a.access(k);
            a.check();
            moved |= a.target() > 0.0;
        }
        assert!(moved);
    }
}
