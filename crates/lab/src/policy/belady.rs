//! Belady's optimum (L. A. Belady, "A study of replacement algorithms for a virtual-storage
//! computer", IBM Systems Journal 5(2), 1966; the MIN/OPT stack algorithm of R. L. Mattson et
//! al., 1970): on a miss with the cache full, evict the block whose next read is farthest in
//! the future, and do not admit the missed block at all if its own next read is farther
//! than every cached block's (a block never read again is never admitted).
//!
//! With that bypass it is optimal among all policies, those with admission control
//! included: the floor of every table, and a lower bound that the tests check every policy
//! against. It knows the future, so it is built from the whole trace ([`Belady::new`]
//! computes every read's next use, backwards) and must be replayed on that same trace.

use std::collections::BTreeSet;

use super::{FastMap, Policy};

/// Belady's optimum over a known trace.
#[derive(Debug)]
pub struct Belady {
    capacity: usize,
    /// `next[i]`: where the block of read `i` is read next (`usize::MAX`: never).
    next: Vec<usize>,
    trace: Vec<u64>,
    at: usize,
    /// Cached blocks by next use; the last is the victim.
    order: BTreeSet<(usize, u64)>,
    cached: FastMap<u64, usize>,
}

impl Belady {
    /// The optimum of `capacity` blocks (at least 1) for `trace`.
    pub fn new(trace: &[u64], capacity: usize) -> Belady {
        let mut next = vec![usize::MAX; trace.len()];
        let mut seen: FastMap<u64, usize> = FastMap::default();
        for (i, &b) in trace.iter().enumerate().rev() {
            if let Some(n) = seen.insert(b, i) {
                next[i] = n;
            }
        }
        Belady {
            capacity: capacity.max(1),
            next,
            trace: trace.to_vec(),
            at: 0,
            order: BTreeSet::new(),
            cached: FastMap::default(),
        }
    }
}

impl Policy for Belady {
    /// # Panics
    ///
    /// If `key` is not the next read of the trace the optimum was built for.
    fn access(&mut self, key: u64) -> bool {
        let i = self.at;
        assert_eq!(
            self.trace.get(i),
            Some(&key),
            "Belady replayed on another trace"
        );
        self.at += 1;
        let next = self.next[i];
        if let Some(at) = self.cached.remove(&key) {
            self.order.remove(&(at, key));
            self.order.insert((next, key));
            self.cached.insert(key, next);
            return true;
        }
        if self.order.len() == self.capacity {
            let &(far, v) = self.order.last().expect("a full cache has a last entry");
            if far <= next {
                // Bypass: the missed block is read again no sooner than every cached one.
                return false;
            }
            self.order.pop_last();
            self.cached.remove(&v);
        }
        self.order.insert((next, key));
        self.cached.insert(key, next);
        false
    }

    fn resident(&self) -> usize {
        self.order.len()
    }
}

/// The hit ratio of `trace[half..]` under Belady's optimum with `cap` blocks, after
/// `trace[..half]` warmed it up (the `peers` sweep's reference column).
pub fn hit_ratio_after(trace: &[u32], half: usize, cap: usize) -> f64 {
    let keys: Vec<u64> = trace.iter().map(|&b| u64::from(b)).collect();
    let mut p = Belady::new(&keys, cap);
    let mut hits = 0u64;
    for (i, &k) in keys.iter().enumerate() {
        hits += u64::from(p.access(k) && i >= half);
    }
    hits as f64 / (trace.len() - half).max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cycle one longer than the cache: the optimum keeps all but one block and misses
    /// once per pass (after the first), where LRU misses every read.
    #[test]
    fn cycle_one_longer_than_the_cache() {
        let trace: Vec<u64> = (0..1100).map(|i| i % 11).collect();
        let mut b = Belady::new(&trace, 10);
        let misses = trace.iter().filter(|&&k| !b.access(k)).count();
        // 11 cold misses, then one miss per 10 reads.
        assert!((110..=125).contains(&misses), "{misses}");
    }

    #[test]
    #[should_panic(expected = "another trace")]
    fn refuses_another_trace() {
        let mut b = Belady::new(&[1, 2, 3], 2);
        b.access(2);
    }
}
