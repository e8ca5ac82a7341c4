//! Real-thread stress tests of the folio refcount, every strategy.
//!
//! `cache_churn`: a miniature page cache. A table maps keys to folios of a small arena with a
//! free list, so folios really are freed and reallocated under the feet of speculative
//! lookups. Threads mix lookups (speculative `try_get`, re-validation, `get`/`put` pairs
//! while holding), insertions (allocation: `init`), evictions (`freeze(1)`, then free),
//! busy-writeback (`freeze(1)` then `unfreeze(1)`) and truncation (unpublish, then drop the
//! cache's reference with `put`, racing the lookups for the last put). Checked on the fly: a
//! referenced folio never changes identity, a folio is never freed twice, the winner of a
//! last put always finds the word frozen. Checked at the end: every folio is either
//! published with exactly the cache's reference or on the free list, frozen, exactly once.
//!
//! `hot_counter`: many getters on one folio against a freezer, the lab's contention pattern
//! with freezes mixed in; the count must come back to its initial value.
//!
//! Iterations scale up in release builds (`scripts/test` runs both).

#![cfg(not(loom))]

use foliocache::mm::refcount::{RefCount, RefStrategy, LOCKED, WIPE_LIMIT};
use foliocache::mm::sync::{thread, Arc, AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering};

const NONE: u32 = u32::MAX;
const FOLIOS: usize = 8;
const KEYS: usize = 12;
const THREADS: usize = 4;

fn iterations() -> u64 {
    if cfg!(debug_assertions) {
        100_000
    } else {
        3_000_000
    }
}

struct Folio {
    rc: RefCount,
    /// The key this folio caches (written before `init`, so a getter's acquire sees it).
    key: AtomicU32,
    /// On the free list (double-free and use-after-free detector).
    free: AtomicBool,
    uses: AtomicU64,
}

struct Cache {
    s: RefStrategy,
    folios: Vec<Folio>,
    /// key -> folio index or NONE (the XArray).
    table: Vec<AtomicU32>,
    /// The XArray lock: serializes insertion and removal, never taken by lookups.
    xa_lock: Mutex<()>,
    free_list: Mutex<Vec<u32>>,
    allocs: AtomicU64,
    frees: AtomicU64,
    hits: AtomicU64,
    revalidation_misses: AtomicU64,
}

impl Cache {
    fn new(s: RefStrategy) -> Self {
        Cache {
            s,
            folios: (0..FOLIOS)
                .map(|_| Folio {
                    rc: RefCount::frozen(),
                    key: AtomicU32::new(NONE),
                    free: AtomicBool::new(true),
                    uses: AtomicU64::new(0),
                })
                .collect(),
            table: (0..KEYS).map(|_| AtomicU32::new(NONE)).collect(),
            xa_lock: Mutex::new(()),
            free_list: Mutex::new((0..FOLIOS as u32).collect()),
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            revalidation_misses: AtomicU64::new(0),
        }
    }

    /// The free path: decides nothing from the caller's beliefs, frees whatever the slot is.
    fn free(&self, idx: u32) {
        let f = &self.folios[idx as usize];
        assert!(
            f.rc.is_frozen(self.s),
            "freeing folio {idx} whose word {:#x} is not frozen",
            f.rc.raw()
        );
        assert!(
            !f.free.swap(true, Ordering::Relaxed),
            "folio {idx} freed twice"
        );
        f.key.store(NONE, Ordering::Relaxed);
        self.free_list.lock().push(idx);
        self.frees.fetch_add(1, Ordering::Relaxed);
    }

    fn put(&self, idx: u32) {
        if self.folios[idx as usize].rc.put(self.s) {
            self.free(idx);
        }
    }

    fn lookup(&self, key: u32) {
        let idx = self.table[key as usize].load(Ordering::Acquire);
        if idx == NONE {
            return;
        }
        let f = &self.folios[idx as usize];
        if !f.rc.try_get(self.s) {
            return;
        }
        // Re-validate: still published under this key, still this key.
        if self.table[key as usize].load(Ordering::Acquire) != idx
            || f.key.load(Ordering::Relaxed) != key
        {
            self.revalidation_misses.fetch_add(1, Ordering::Relaxed);
            self.put(idx);
            return;
        }
        assert!(!f.free.load(Ordering::Relaxed), "referenced a free folio");
        // Holding: extra references come and go, none of them can be the last.
        f.rc.get(self.s);
        f.rc.add(self.s, 2);
        assert!(!f.rc.sub_and_test(self.s, 2));
        assert!(!f.rc.put(self.s));
        f.uses.fetch_add(1, Ordering::Relaxed);
        assert_eq!(
            f.key.load(Ordering::Relaxed),
            key,
            "a referenced folio changed identity"
        );
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.put(idx);
    }

    fn insert(&self, key: u32) {
        let _xa = self.xa_lock.lock();
        if self.table[key as usize].load(Ordering::Relaxed) != NONE {
            return;
        }
        let Some(idx) = self.free_list.lock().pop() else {
            return;
        };
        let f = &self.folios[idx as usize];
        assert!(
            f.free.swap(false, Ordering::Relaxed),
            "allocated a live folio"
        );
        assert!(f.rc.is_frozen(self.s));
        f.key.store(key, Ordering::Relaxed);
        f.rc.init(self.s, 1);
        self.allocs.fetch_add(1, Ordering::Relaxed);
        self.table[key as usize].store(idx, Ordering::Release);
    }

    /// Reclaim: freeze the cache's single reference; then either evict and free, or (the
    /// folio turned out busy) unfreeze it back.
    fn evict(&self, key: u32, busy: bool) {
        let _xa = self.xa_lock.lock();
        let idx = self.table[key as usize].load(Ordering::Relaxed);
        if idx == NONE {
            return;
        }
        let f = &self.folios[idx as usize];
        if !f.rc.freeze(self.s, 1) {
            return;
        }
        assert!(!f.rc.try_get(self.s), "got a frozen folio");
        if busy {
            f.rc.unfreeze(self.s, 1);
        } else {
            self.table[key as usize].store(NONE, Ordering::Relaxed);
            self.free(idx);
        }
    }

    /// Truncate: unpublish, then drop the cache's reference, racing lookups for the last put.
    fn truncate(&self, key: u32) {
        let idx = {
            let _xa = self.xa_lock.lock();
            let idx = self.table[key as usize].load(Ordering::Relaxed);
            if idx == NONE {
                return;
            }
            self.table[key as usize].store(NONE, Ordering::Relaxed);
            idx
        };
        self.put(idx);
    }

    fn validate(&self) {
        let s = self.s;
        let free = self.free_list.lock().clone();
        let mut seen = [0u32; FOLIOS];
        for &idx in &free {
            seen[idx as usize] += 1;
            let f = &self.folios[idx as usize];
            assert!(f.rc.is_frozen(s), "{s}: free folio {idx} not frozen");
            assert_eq!(f.rc.count(s), 0);
            assert!(f.free.load(Ordering::Relaxed));
            if s == RefStrategy::LockedBit {
                assert!(f.rc.raw() & LOCKED != 0 && f.rc.raw() < WIPE_LIMIT);
            }
        }
        let mut published = 0u64;
        for key in 0..KEYS {
            let idx = self.table[key].load(Ordering::Relaxed);
            if idx == NONE {
                continue;
            }
            published += 1;
            seen[idx as usize] += 1;
            let f = &self.folios[idx as usize];
            assert_eq!(f.rc.count(s), 1, "{s}: published folio {idx} count");
            assert_eq!(f.rc.raw(), 1);
            assert_eq!(f.key.load(Ordering::Relaxed), key as u32);
            assert!(!f.free.load(Ordering::Relaxed));
        }
        assert!(
            seen.iter().all(|&n| n == 1),
            "{s}: every folio free or published exactly once: {seen:?}"
        );
        let allocs = self.allocs.load(Ordering::Relaxed);
        let frees = self.frees.load(Ordering::Relaxed);
        assert_eq!(allocs - frees, published, "{s}: allocations minus frees");
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn cache_churn(s: RefStrategy) {
    let cache = Arc::new(Cache::new(s));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let cache = cache.clone();
            thread::spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ ((t as u64 + 1) << 32);
                for _ in 0..iterations() {
                    let r = xorshift(&mut rng);
                    let key = (r >> 8) as u32 % KEYS as u32;
                    match r % 100 {
                        0..=69 => cache.lookup(key),
                        70..=81 => cache.insert(key),
                        82..=87 => cache.evict(key, false),
                        88..=93 => cache.evict(key, true),
                        _ => cache.truncate(key),
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    cache.validate();
    let hits = cache.hits.load(Ordering::Relaxed);
    let frees = cache.frees.load(Ordering::Relaxed);
    assert!(hits > 0 && frees > 0, "{s}: the churn did nothing");
    let uses: u64 = cache
        .folios
        .iter()
        .map(|f| f.uses.load(Ordering::Relaxed))
        .sum();
    assert_eq!(uses, hits);
    eprintln!(
        "{s}: {hits} hits, {} allocations, {frees} frees, {} re-validation misses",
        cache.allocs.load(Ordering::Relaxed),
        cache.revalidation_misses.load(Ordering::Relaxed)
    );
}

#[test]
fn cache_churn_cas_loop() {
    cache_churn(RefStrategy::CasLoop);
}

#[test]
fn cache_churn_optimistic() {
    cache_churn(RefStrategy::Optimistic);
}

#[test]
fn cache_churn_locked_bit() {
    cache_churn(RefStrategy::LockedBit);
}

/// Getters hammer one folio held by the cache (count 1) while a freezer freezes and unfreezes
/// it; at the end the count is back to 1 and no get ever succeeded while it was frozen.
fn hot_counter(s: RefStrategy) {
    let rc = Arc::new(RefCount::frozen());
    rc.init(s, 1);
    let frozen = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let getters: Vec<_> = (0..THREADS - 1)
        .map(|_| {
            let (rc, frozen, stop) = (rc.clone(), frozen.clone(), stop.clone());
            thread::spawn(move || {
                let mut got = 0u64;
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    if i % 64 == 0 {
                        // Leave the freezer windows with only the cache's reference.
                        thread::yield_now();
                    }
                    if rc.try_get(s) {
                        // The freezer sets `frozen` only between its freeze and unfreeze,
                        // and no freeze can succeed while we hold this reference.
                        assert!(!frozen.load(Ordering::Relaxed), "{s}: got a frozen folio");
                        assert!(!rc.put(s), "{s}: the cache's reference is still there");
                        got += 1;
                    }
                }
                // The freezer is done and left the folio unfrozen: every get succeeds now.
                for _ in 0..100 {
                    assert!(rc.try_get(s), "{s}: get failed on an unfrozen folio");
                    assert!(!rc.put(s));
                    got += 1;
                }
                got
            })
        })
        .collect();
    let mut freezes = 0u64;
    let mut attempts = 0u64;
    // Attempt until enough freezes succeeded (each needs a moment when no getter holds a
    // reference), with a generous cap so a broken freeze fails the assertion below instead of
    // hanging.
    while (attempts < iterations() / 4 || freezes < iterations() / 100) && attempts < 200_000_000 {
        attempts += 1;
        if rc.freeze(s, 1) {
            frozen.store(true, Ordering::Relaxed);
            freezes += 1;
            assert!(!rc.try_get(s));
            frozen.store(false, Ordering::Relaxed);
            rc.unfreeze(s, 1);
        }
        // Some work between reclaim attempts, so getters also meet the folio unfrozen.
        for _ in 0..16 {
            foliocache::mm::sync::spin_loop();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let got: u64 = getters.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(rc.count(s), 1, "{s}: balanced");
    assert_eq!(rc.raw(), 1);
    assert!(
        freezes >= iterations() / 100 && got > 0,
        "{s}: freezes {freezes} in {attempts} attempts, gets {got}"
    );
    assert!(rc.freeze(s, 1) && rc.is_frozen(s));
}

#[test]
fn hot_counter_cas_loop() {
    hot_counter(RefStrategy::CasLoop);
}

#[test]
fn hot_counter_optimistic() {
    hot_counter(RefStrategy::Optimistic);
}

#[test]
fn hot_counter_locked_bit() {
    hot_counter(RefStrategy::LockedBit);
}
