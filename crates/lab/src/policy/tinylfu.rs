//! W-TinyLFU (G. Einziger, R. Friedman and B. Manes, "TinyLFU: A Highly Efficient Cache
//! Admission Policy", ACM Transactions on Storage 13(4), 2017), with the structure and
//! defaults of Caffeine's `BoundedLocalCache` and `FrequencySketch`.
//!
//! - An admission **window**, an LRU of 1% of the cache (at least one block), takes every
//!   missed block.
//! - The **main** space, the rest, is a segmented LRU: *probation* (new arrivals from the
//!   window) and *protected* (at most 80% of main): a hit in probation promotes to
//!   protected, whose overflow is demoted to probation's most recent end.
//! - When the window overflows, its LRU block is a *candidate*: while main has room it
//!   enters probation; once main is full it competes with probation's LRU block (the
//!   *victim*, protected's if probation is empty) and is admitted, evicting the victim,
//!   only if its estimated frequency is **strictly higher**; otherwise the candidate is
//!   evicted.
//! - Frequencies come from a **count-min sketch** ([`Sketch`]): four rows of 4-bit counters
//!   (saturating at 15), a row width of the capacity rounded up to a power of two, every
//!   read counted (hit or miss, as Caffeine's `onAccess` does), and **aging**: after
//!   `10 x capacity` counted reads every counter is halved (Caffeine's `sampleSize` and
//!   `reset`). The TinyLFU paper's **doorkeeper** (a Bloom filter that absorbs a key's first
//!   read, cleared at each reset) is available ([`WTinyLfu::with_doorkeeper`]) but off by
//!   default, as in Caffeine's production sketch.
//!
//! Not modelled: Caffeine's hill climber that resizes the window at run time (the window
//! stays at 1%, the paper's and libCacheSim's setting), and its random admission of a
//! candidate of frequency 6 or more (a defence against hash flooding, irrelevant to a
//! trace).

use super::list::KeyList;
use super::{FastSet, Policy};
use crate::scenarios::peers::workload::splitmix64;

/// Share of the cache given to the admission window.
pub const WINDOW_SHARE: f64 = 0.01;

/// Share of the main space that protected may hold.
pub const PROTECTED_SHARE: f64 = 0.8;

/// Counted reads between two agings, per block of capacity.
pub const SAMPLE_PER_BLOCK: usize = 10;

/// A 4-bit saturating counter's ceiling.
const COUNTER_MAX: u8 = 15;

const ROWS: usize = 4;

/// A count-min sketch of 4-bit counters with periodic halving, and an optional doorkeeper.
#[derive(Debug)]
pub struct Sketch {
    rows: [Vec<u8>; ROWS],
    mask: u64,
    additions: usize,
    sample: usize,
    doorkeeper: Option<FastSet<u64>>,
}

impl Sketch {
    /// A sketch for a cache of `capacity` blocks.
    pub fn new(capacity: usize, doorkeeper: bool) -> Sketch {
        let width = capacity.max(16).next_power_of_two();
        Sketch {
            rows: std::array::from_fn(|_| vec![0; width]),
            mask: width as u64 - 1,
            additions: 0,
            sample: SAMPLE_PER_BLOCK * capacity.max(1),
            doorkeeper: doorkeeper.then(FastSet::default),
        }
    }

    #[inline]
    fn slot(&self, key: u64, row: usize) -> usize {
        (splitmix64(key ^ (0x5bd1_e995_u64 << (16 * row))) & self.mask) as usize
    }

    /// Counts one read of `key`, aging every counter when the sample is full.
    pub fn increment(&mut self, key: u64) {
        if let Some(dk) = &mut self.doorkeeper {
            if dk.insert(key) {
                // The first read since the last reset only sets the doorkeeper bit.
                self.tick();
                return;
            }
        }
        for row in 0..ROWS {
            let i = self.slot(key, row);
            let c = &mut self.rows[row][i];
            if *c < COUNTER_MAX {
                *c += 1;
            }
        }
        self.tick();
    }

    fn tick(&mut self) {
        self.additions += 1;
        if self.additions >= self.sample {
            for row in &mut self.rows {
                for c in row.iter_mut() {
                    *c >>= 1;
                }
            }
            self.additions /= 2;
            if let Some(dk) = &mut self.doorkeeper {
                dk.clear();
            }
        }
    }

    /// The estimated reads of `key`: the smallest of its counters (plus its doorkeeper bit).
    pub fn estimate(&self, key: u64) -> u32 {
        let min = (0..ROWS)
            .map(|row| self.rows[row][self.slot(key, row)])
            .min()
            .unwrap_or(0);
        let door = self.doorkeeper.as_ref().is_some_and(|dk| dk.contains(&key));
        u32::from(min) + u32::from(door)
    }
}

/// W-TinyLFU over `capacity` blocks.
#[derive(Debug)]
pub struct WTinyLfu {
    window_cap: usize,
    main_cap: usize,
    protected_cap: usize,
    window: KeyList,
    probation: KeyList,
    protected: KeyList,
    sketch: Sketch,
}

impl WTinyLfu {
    /// An empty W-TinyLFU of `capacity` blocks (at least 2), Caffeine's defaults.
    pub fn new(capacity: usize) -> WTinyLfu {
        WTinyLfu::build(capacity, false)
    }

    /// The same with the TinyLFU paper's doorkeeper in front of the sketch.
    pub fn with_doorkeeper(capacity: usize) -> WTinyLfu {
        WTinyLfu::build(capacity, true)
    }

    fn build(capacity: usize, doorkeeper: bool) -> WTinyLfu {
        let capacity = capacity.max(2);
        let window_cap = ((capacity as f64 * WINDOW_SHARE) as usize).max(1);
        let main_cap = capacity - window_cap;
        WTinyLfu {
            window_cap,
            main_cap,
            protected_cap: (main_cap as f64 * PROTECTED_SHARE) as usize,
            window: KeyList::new(),
            probation: KeyList::new(),
            protected: KeyList::new(),
            sketch: Sketch::new(capacity, doorkeeper),
        }
    }

    fn main_len(&self) -> usize {
        self.probation.len() + self.protected.len()
    }

    /// Moves the window's overflow into main, or evicts it, by the admission rule.
    fn admit_from_window(&mut self) {
        while self.window.len() > self.window_cap {
            let cand = self.window.pop_back().expect("the window overflows");
            if self.main_len() < self.main_cap {
                self.probation.push_front(cand);
                continue;
            }
            let victim = self
                .probation
                .back()
                .or_else(|| self.protected.back())
                .expect("main is full");
            if self.sketch.estimate(cand) > self.sketch.estimate(victim) {
                if !self.probation.remove(victim) {
                    self.protected.remove(victim);
                }
                self.probation.push_front(cand);
            }
        }
    }
}

impl Policy for WTinyLfu {
    fn access(&mut self, key: u64) -> bool {
        self.sketch.increment(key);
        if self.window.move_to_front(key) || self.protected.move_to_front(key) {
            return true;
        }
        if self.probation.remove(key) {
            self.protected.push_front(key);
            if self.protected.len() > self.protected_cap {
                let d = self.protected.pop_back().expect("protected overflows");
                self.probation.push_front(d);
            }
            return true;
        }
        self.window.push_front(key);
        self.admit_from_window();
        false
    }

    fn resident(&self) -> usize {
        self.window.len() + self.main_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sketch_counts_saturates_and_ages() {
        let mut s = Sketch::new(64, false);
        for _ in 0..20 {
            s.increment(7);
        }
        assert_eq!(s.estimate(7), 15, "4-bit counters saturate");
        assert_eq!(s.estimate(8), 0);
        // 640 counted reads in all trigger one halving.
        for k in 0..620 {
            s.increment(1000 + k);
        }
        assert!(s.estimate(7) <= 8, "{}", s.estimate(7));
    }

    #[test]
    fn doorkeeper_absorbs_first_reads() {
        let mut s = Sketch::new(64, true);
        s.increment(3);
        assert_eq!(s.estimate(3), 1);
        s.increment(3);
        assert_eq!(s.estimate(3), 2);
        assert!(s
            .rows
            .iter()
            .all(|r| r.iter().map(|&c| u32::from(c)).sum::<u32>() == 1));
    }

    /// A frequently read block keeps its place against a stream of blocks read once: the
    /// stream's candidates lose the admission contest.
    #[test]
    fn frequency_admission_resists_a_scan() {
        let mut w = WTinyLfu::new(100);
        for round in 0..5 {
            for k in 0..90 {
                let hit = w.access(k);
                assert!(round == 0 || hit, "block {k} round {round}");
            }
        }
        for k in 1000..3000 {
            assert!(!w.access(k));
            assert!(w.resident() <= 100);
        }
        // Protected (79 blocks) is never the victim while probation has blocks.
        let kept = (0..90).filter(|&k| w.access(k)).count();
        assert!(kept >= 79, "{kept}");
    }
}
