//! A model of foliocache's two lists (the kernel's active/inactive LRU with workingset
//! refault detection, `mm/vmscan.c` and `mm/workingset.c`), and a variant with a protected
//! set that loops cannot flush: the prototype for issue 26, measured here before it was built
//! into `mm::lru` as `LruPolicy::Protected` (`TwoList::protected_arc` is its model; the real
//! one keeps its inactive list a reclaim batch above the target, since reclaim isolates 32
//! folios at once, and counts one read beyond the reference bit).
//!
//! # The model (`TwoList::kernel`)
//!
//! - A first read joins the inactive head; a second read while inactive promotes to the
//!   active head (`folio_mark_accessed`); reads of active blocks set a reference bit.
//! - Reclaim keeps `inactive * ratio >= active` by moving the active tail down
//!   (`shrink_active_list`), a referenced one getting one more trip round the active list
//!   (foliocache's `active_second_chance`, simplified to one chance), then evicts from the
//!   inactive tail, a referenced block getting one more trip (foliocache's CLOCK second
//!   chance).
//! - An eviction leaves a shadow with the eviction clock (`nonresident_age`, advanced by
//!   evictions and activations); a refault whose distance is at most the active list's size
//!   joins the active list (`workingset_refault`).
//!
//! It is a model, not the cache: it ignores per-CPU batches, large folios and the order in
//! which batched blocks reach the lists. The `policy_models` example prints it beside the real
//! cache on the harness's traces, so its fidelity is a measured figure, not a claim.
//!
//! # Why loops defeat it
//!
//! A loop over 1.25x the cache refaults every block at a distance of about a quarter of the
//! cache, well inside the active list: every refault is activated, each activation pushes
//! the active tail down, and the lists cycle through the loop in order, as LRU does: every
//! read misses.
//!
//! # The variant (`TwoList::protected`): non-resident history as LIRS and CLOCK-Pro use it
//!
//! - The active list is the protected (hot, LIR) set. A block enters it on a refault only if
//!   it is hotter than the coldest protected block: its reuse distance (the refault distance
//!   plus the inactive list it went through before eviction) is smaller than the age of the
//!   active tail (eviction-clock ticks since the tail last entered the active head). While
//!   the protected set is below its target, any refault within the cache's size enters it
//!   (warm-up). A second read while inactive still promotes, as before.
//! - In a loop every block has the same reuse distance, one period, and the tail was read
//!   less than a period ago: refaults stay inactive, the protected set stays put and hits
//!   every period, as LIRS keeps its LIR set.
//! - The inactive (cold, HIR) target adapts as CLOCK-Pro's `m_c` does: it grows by one when a
//!   refault within the cache's size is refused entry (more cold room would have kept it),
//!   and shrinks by one when a shadow ages out unused (the cold room was wasted), between 1%
//!   and half of the cache.
//! - Shadows are kept for as many blocks as the cache holds (the non-resident bound of
//!   CLOCK-Pro's reference code and of the kernel's shadow-node shrinker).
//! - What the real cache would need: a clock stamp per folio set when it enters a list's
//!   head (not on hits), the stamp packed into the shadow beside the eviction clock, and the
//!   active tail's referenced folios rotated before the comparison (under the LRU lock, as
//!   aging already does).
//!
//! # Measured (the `policy_models` example, quick traces, miss %)
//!
//! | trace | foliocache | model | protected | LRU | LIRS |
//! |---|---|---|---|---|---|
//! | zipf-0.99 | 27.06 | 27.32 | 26.45 | 31.81 | 27.12 |
//! | zipf-0.6 | 64.72 | 65.46 | 64.26 | 72.18 | 65.50 |
//! | loop-1.25x | 100.00 | 100.00 | 22.78 | 100.00 | 21.76 |
//! | loop-1.25x-noise | 88.53 | 89.08 | 29.20 | 94.59 | 26.52 |
//! | loop-2x | 100.00 | 100.00 | 100.00 | 100.00 | 51.33 |
//! | moving-hot | 38.56 | 38.19 | 39.24 | 35.22 | 38.74 |
//! | recency-bursts | 34.17 | 28.04 | 35.97 | 28.03 | 33.95 |
//!
//! # The ARC-adapted variant (`TwoList::protected_arc`, session 19)
//!
//! The protected variant loses recency bursts and a moving hot set because its cold target
//! shrinks whenever a shadow ages out unused, which on Zipf background happens at almost
//! every eviction: the target sits at its 1% floor and a new block is evicted before its
//! second read. ARC's signals instead: grow on a refault of a block never protected
//! (the kernel keeps that bit in its shadows: `PG_workingset`), if it came back within
//! `GHOST_REACH` cold areas; shrink on a refault of one that had been protected. Quick
//! traces, miss % (protected, protected_arc, LRU, LIRS): Zipf 0.99 26.45, 26.50, 31.81,
//! 27.12; loop 1.25x 22.78, 22.78, 100, 21.76; noisy loop 1.1x 20.84, 18.03, 94.73, 17.05;
//! moving hot set 39.24, 36.68, 35.22, 38.74; recency bursts 35.97, 29.09, 28.03, 33.95;
//! readahead mix 59.49, 60.32, 64.30, 59.97. Full traces: Zipf within 0.12 of protected,
//! noisy loops 16.55 and 26.08 (18.59, 27.29), moving hot set 30.86 (33.86; LRU 29.62),
//! recency bursts 25.49 (25.43; LRU 25.10), readahead mix 58.34 (57.22: worse). Not yet
//! solved: the 2x loop, and 0.5 to 1 point of recency bursts and the moving hot set.
//!
//! The model follows the real cache within 0.8 points on every trace but two (loop-1.1x with
//! noise, recency bursts: the real cache's counted second chances keep old blocks longer
//! than the model's single one). The protected variant wins every Zipf trace and the loops
//! up to 1.25x, but not the 2x loop (its refault distance is the whole cache, past the
//! history kept), and loses on recency bursts and a moving hot set (its cold area stays near
//! 1%, so new blocks go before their second read). Tried and not kept (quick traces): a
//! cold floor of 5% (recency bursts 36.0 -> 30.2, loops 3 points worse, Zipf 0.2 worse); a
//! history of twice the cache (loop-2x 100 -> 54.3, but the noisy 1.1x and 1.25x loops 15-17
//! points worse and every Zipf trace about 1 point worse). Next: a cold target that grows
//! when a block leaves the inactive list before its second read and comes back within the
//! cold area's reach (the recency-burst signal), before it is built into `mm::lru`.

use super::list::KeyList;
use super::{FastMap, Policy};

/// How far past the cold target a never-protected block's refault may come and still grow
/// the target ([`TwoList::protected_arc`]): a loop's refaults come a fraction of the cache
/// later and must not grow it (the protected set would shrink to half the cache), a recency
/// burst's come within a few cold areas. Quick traces, miss %, by reach: 2: recency bursts
/// 29.09, Zipf 0.99 26.50, noisy 1.25x loop 27.52; 3: 28.88, 27.92, 27.53; 4: 28.66, 28.50,
/// 27.54; 16: 28.42, 28.73, 27.61 and the 1.1x loop 55.46 (11.88 below).
const GHOST_REACH: u64 = 2;

/// Per resident block: its reference bit and when it last entered its list's head.
#[derive(Clone, Copy, Debug, Default)]
struct Meta {
    referenced: bool,
    active: bool,
    stamp: u64,
    /// It was on the active list since it was last read in (the kernel's `PG_workingset`).
    workingset: bool,
}

/// The two-list model (see the module docs).
#[derive(Debug)]
pub struct TwoList {
    capacity: usize,
    inactive: KeyList,
    active: KeyList,
    meta: FastMap<u64, Meta>,
    /// Evicted blocks, oldest first, with the clock at their eviction and the clock when
    /// they last entered a list's head (their last known access).
    shadows: KeyList,
    shadow_at: FastMap<u64, (u64, u64, bool)>,
    /// `nonresident_age`.
    clock: u64,
    /// `active <= inactive * ratio` (the kernel's `inactive_ratio`).
    ratio: usize,
    /// The protected variant's adaptive inactive target, in blocks (`None`: the kernel's
    /// rules).
    cold_target: Option<usize>,
    /// The cold target adapts as ARC's does, on the shadows' workingset bit
    /// ([`TwoList::protected_arc`]); otherwise as CLOCK-Pro's.
    ghosts: bool,
}

impl TwoList {
    /// The kernel's rules as foliocache runs them, with `ratio` active blocks per inactive
    /// one at most (`Config::block_cache` uses 4).
    pub fn kernel(capacity: usize, ratio: usize) -> TwoList {
        TwoList {
            capacity: capacity.max(2),
            inactive: KeyList::new(),
            active: KeyList::new(),
            meta: FastMap::default(),
            shadows: KeyList::new(),
            shadow_at: FastMap::default(),
            clock: 0,
            ratio: ratio.max(1),
            cold_target: None,
            ghosts: false,
        }
    }

    /// The protected variant with ARC's adaptation of the cold target instead of
    /// CLOCK-Pro's: a refault of a block that was never protected (the shadow's workingset
    /// bit clear: ARC's hit in B1) grows the target by one if its refault distance is at most
    /// `GHOST_REACH` times the target; a refault of one that had been protected (B2)
    /// shrinks it by one; a shadow aging out changes nothing. Admission to the protected
    /// set is the protected variant's.
    pub fn protected_arc(capacity: usize) -> TwoList {
        let mut t = TwoList::protected(capacity);
        t.ghosts = true;
        t
    }

    /// The variant with a protected set and an adaptive inactive target.
    pub fn protected(capacity: usize) -> TwoList {
        let mut t = TwoList::kernel(capacity, 1);
        t.cold_target = Some(t.min_cold());
        t
    }

    fn min_cold(&self) -> usize {
        (self.capacity / 100).max(1)
    }

    fn max_cold(&self) -> usize {
        (self.capacity / 2).max(1)
    }

    fn inactive_is_low(&self) -> bool {
        match self.cold_target {
            Some(target) => self.inactive.len() < target,
            None => self.inactive.len() * self.ratio < self.active.len(),
        }
    }

    fn activate(&mut self, key: u64) {
        self.clock += 1;
        self.active.push_front(key);
        self.meta.insert(
            key,
            Meta {
                referenced: false,
                active: true,
                stamp: self.clock,
                workingset: true,
            },
        );
    }

    /// The age of the coldest protected block: the clock ticks since the active tail last
    /// entered the active head, after referenced tails are moved up (their reference is
    /// newer than their stamp: CLOCK-Pro's hot hand clearing reference bits as it passes).
    fn tail_age(&mut self) -> u64 {
        for _ in 0..self.active.len() {
            let Some(k) = self.active.back() else { break };
            let m = self.meta.get_mut(&k).expect("resident");
            if !m.referenced {
                return self.clock - m.stamp;
            }
            m.referenced = false;
            m.stamp = self.clock;
            self.active.move_to_front(k);
        }
        self.active
            .back()
            .map_or(u64::MAX, |k| self.clock - self.meta[&k].stamp)
    }

    /// Whether a refault of a block evicted at clock `evicted`, last entered a list's head
    /// at clock `stamp`, joins the active list.
    fn admit_refault(&mut self, evicted: u64, stamp: u64, workingset: bool) -> bool {
        let distance = self.clock - evicted;
        let Some(target) = self.cold_target else {
            return distance <= self.active.len() as u64;
        };
        if distance > self.capacity as u64 {
            return false;
        }
        if self.ghosts {
            // ARC's adaptation, on the shadow's workingset bit: a block evicted before its
            // second read, back soon enough that a little more cold room would have kept
            // it, wanted more cold room; one that had been protected wanted more protected
            // room.
            let t = if workingset {
                target.saturating_sub(1).max(self.min_cold())
            } else if distance <= GHOST_REACH * target as u64 {
                (target + 1).min(self.max_cold())
            } else {
                target
            };
            self.cold_target = Some(t);
        }
        if self.active.len() < self.capacity - target {
            // The protected set is still filling.
            return true;
        }
        // Hotter than the coldest protected block: in CLOCK-Pro's terms, accessed during its
        // test period. It is protected, and the cold area grows (it would have been a hit
        // with more cold room).
        let reuse = self.clock - stamp;
        if reuse < self.tail_age() {
            if !self.ghosts {
                self.cold_target = Some((target + 1).min(self.max_cold()));
            }
            return true;
        }
        false
    }

    fn remember(&mut self, key: u64, stamp: u64, workingset: bool) {
        if self.shadows.len() == self.capacity {
            if let Some(old) = self.shadows.pop_back() {
                self.shadow_at.remove(&old);
                // Aged out unused: the cold room did not pay.
                if let (Some(t), false) = (self.cold_target, self.ghosts) {
                    self.cold_target = Some(t.saturating_sub(1).max(self.min_cold()));
                }
            }
        }
        self.shadows.push_front(key);
        self.shadow_at.insert(key, (self.clock, stamp, workingset));
    }

    /// Frees one block: ages the active list while the inactive one is low, then evicts from
    /// the inactive tail.
    fn reclaim(&mut self) {
        let mut aged = 0;
        while self.inactive_is_low() && aged < self.capacity {
            let Some(k) = self.active.pop_back() else {
                break;
            };
            aged += 1;
            let m = self.meta.get_mut(&k).expect("resident");
            if m.referenced {
                m.referenced = false;
                m.stamp = self.clock;
                self.active.push_front(k);
            } else {
                m.active = false;
                self.inactive.push_front(k);
            }
        }
        loop {
            let k = match self.inactive.pop_back() {
                Some(k) => k,
                None => self.active.pop_back().expect("a full cache has a block"),
            };
            let m = self.meta.get_mut(&k).expect("resident");
            if m.referenced && !m.active {
                m.referenced = false;
                self.inactive.push_front(k);
                continue;
            }
            let (stamp, ws) = (m.stamp, m.workingset);
            self.meta.remove(&k);
            self.remember(k, stamp, ws);
            self.clock += 1;
            return;
        }
    }
}

impl Policy for TwoList {
    fn access(&mut self, key: u64) -> bool {
        if let Some(m) = self.meta.get_mut(&key) {
            if m.active || !m.referenced {
                m.referenced = true;
                return true;
            }
            // Second read while inactive: `folio_mark_accessed` promotes.
            self.inactive.remove(key);
            self.activate(key);
            return true;
        }
        if self.meta.len() == self.capacity {
            self.reclaim();
        }
        let refault = self.shadow_at.remove(&key);
        if refault.is_some() {
            self.shadows.remove(key);
        }
        if refault.is_some_and(|(evicted, stamp, ws)| self.admit_refault(evicted, stamp, ws)) {
            self.activate(key);
        } else {
            self.inactive.push_front(key);
            self.meta.insert(
                key,
                Meta {
                    stamp: self.clock,
                    ..Meta::default()
                },
            );
        }
        false
    }

    fn resident(&self) -> usize {
        self.meta.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{lru::Lru, replay};
    use super::*;

    fn looped(blocks: u64, rounds: usize) -> Vec<u64> {
        (0..rounds).flat_map(|_| 0..blocks).collect()
    }

    #[test]
    fn the_kernel_model_misses_every_read_of_a_loop_longer_than_the_cache() {
        let trace = looped(125, 40);
        let k = replay(&mut TwoList::kernel(100, 1), &trace);
        let l = replay(&mut Lru::new(100), &trace);
        assert_eq!(l.misses, l.reads);
        assert!(k.miss_pct() > 95.0, "{}", k.miss_pct());
        assert!(k.max_resident <= 100);
    }

    #[test]
    fn the_protected_set_keeps_most_of_a_loop() {
        let trace = looped(125, 40);
        let p = replay(&mut TwoList::protected(100), &trace);
        // LIRS keeps about 99 of 125 blocks: some 21% misses; allow the warm-up and the
        // adaptive cold target.
        assert!(p.miss_pct() < 40.0, "{}", p.miss_pct());
        assert!(p.max_resident <= 100);
    }

    /// The harness's recency bursts (quick size: groups of 48 new blocks, each read about
    /// four times within 400 reads, over Zipf 0.99): ARC's adaptation grows the cold area
    /// until a burst's blocks live to their second read, as LRU keeps them (29.09% misses
    /// against 28.03%); CLOCK-Pro's keeps it at its floor (35.97%).
    #[test]
    fn the_arc_adapted_cold_target_keeps_recency_bursts_as_lru_does() {
        use super::super::traces::{Size, Trace};
        let spec = Size::Quick.spec();
        let trace = Trace::RecencyBursts.generate(&spec, 42);
        let lru = replay(&mut Lru::new(spec.capacity), &trace).miss_pct();
        let clock_pro = replay(&mut TwoList::protected(spec.capacity), &trace).miss_pct();
        let arc = replay(&mut TwoList::protected_arc(spec.capacity), &trace).miss_pct();
        assert!(arc < lru + 1.5, "arc-adapted {arc}, LRU {lru}");
        assert!(
            arc + 3.0 < clock_pro,
            "arc-adapted {arc}, CLOCK-Pro-adapted {clock_pro}"
        );
        // And a loop longer than the cache stays mostly resident.
        let looped = looped(125, 40);
        assert!(replay(&mut TwoList::protected_arc(100), &looped).miss_pct() < 40.0);
    }

    #[test]
    fn both_stay_within_capacity_on_random_reads() {
        let mut rng = 0x1234_5678u64;
        let trace: Vec<u64> = (0..20_000)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % 300
            })
            .collect();
        for mut p in [
            TwoList::kernel(64, 4),
            TwoList::protected(64),
            TwoList::protected_arc(64),
        ] {
            let out = replay(&mut p, &trace);
            assert!(out.max_resident <= 64);
            assert!(out.misses > 0 && out.misses < out.reads);
        }
    }
}
