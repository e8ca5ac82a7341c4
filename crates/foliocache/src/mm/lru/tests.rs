//! Unit tests of the LRU: batching, the drain filter, flags, activation, reclaim.

use std::collections::HashMap;

use super::*;
use crate::mm::folio::flags::{FLAGS_CHECK_AT_FREE, PG_WORKINGSET};
use crate::mm::folio::{AllocError, ArenaConfig, FolioLocked, PAGE_SIZE};
use crate::mm::refcount::RefStrategy;

fn arena(pages: usize, s: RefStrategy) -> Arena {
    let mut c = ArenaConfig::new(pages * PAGE_SIZE, s);
    c.panic_on_bad_page = false;
    Arena::new(c).unwrap()
}

fn lru(arena: &Arena, filter: DrainFilter) -> Lru {
    Lru::new(
        arena,
        LruConfig {
            filter,
            batch_slots: 1,
            ..LruConfig::default()
        },
    )
}

/// An LRU that adds folios as active (every folio starts on the active list, so aging is
/// what tests see), one batch slot, the active second chance on or off.
fn lru_add_as_active(arena: &Arena, active_second_chance: bool) -> Lru {
    Lru::new(
        arena,
        LruConfig {
            add_as_active: true,
            batch_slots: 1,
            active_second_chance,
            ..LruConfig::default()
        },
    )
}

/// A one-file page cache: holds one reference per cached folio, with the folio's mapping set;
/// its mutex plays the index lock.
struct Cache<'a> {
    arena: &'a Arena,
    id: u64,
    pages: Mutex<HashMap<u64, u32>>,
}

impl<'a> Cache<'a> {
    fn new(arena: &'a Arena) -> Self {
        Self {
            arena,
            id: arena.new_mapping_id(),
            pages: Mutex::new(HashMap::new()),
        }
    }

    /// `filemap_add_folio` + `folio_add_lru`: returns the caller's reference.
    fn add(&self, lru: &Lru, index: u64) -> FolioRef<'a> {
        let f = self.arena.alloc(0).unwrap();
        f.set_mapping(self.id, index);
        self.pages.lock().insert(index, f.clone().into_raw().pfn());
        lru.add(self.arena, &f);
        f
    }

    /// `truncate_inode_folio`: deletes from the index and drops the cache's reference.
    fn truncate(&self, index: u64) {
        let pfn = self.pages.lock().remove(&index).unwrap();
        let folio = self.arena.folio(pfn);
        folio.set_mapping(0, 0);
        // SAFETY: the cache owned one reference on the folio, removed from it just now.
        drop(unsafe { FolioRef::from_raw(self.arena, folio) });
    }

    fn cached(&self) -> usize {
        self.pages.lock().len()
    }

    /// Truncates every cached page, then checks that the LRU is consistent and the arena
    /// back at its baseline (nothing allocated).
    fn truncate_all_and_check(&self, lru: &Lru) {
        let cached: Vec<u64> = self.pages.lock().keys().copied().collect();
        for i in cached {
            self.truncate(i);
        }
        lru.validate(self.arena).unwrap();
        assert_eq!(self.arena.validate().unwrap().allocated_pages, 0);
    }
}

impl Evict for Cache<'_> {
    fn evict<'b>(&self, folio: FolioLocked<'b>) -> Result<(), FolioRef<'b>> {
        let mut pages = self.pages.lock();
        if pages.get(&folio.index()) != Some(&folio.pfn()) {
            return Err(folio.unlock());
        }
        // SAFETY: the cache's reference (we hold the index lock) plus the caller's.
        let frozen = unsafe { folio.freeze(2) }.map_err(FolioLocked::unlock)?;
        pages.remove(&frozen.index());
        frozen.set_mapping(0, 0);
        frozen.free();
        Ok(())
    }
}

#[test]
fn lru_flags_at_free_are_checked_at_free() {
    assert_eq!(LRU_FLAGS_AT_FREE & !FLAGS_CHECK_AT_FREE, 0);
    assert_ne!(LRU_FLAGS_AT_FREE & PG_ACTIVE, 0);
    assert_eq!("filtered".parse::<DrainFilter>(), Ok(DrainFilter::Filtered));
    let e = "mglru".parse::<DrainFilter>().unwrap_err();
    assert!(e.to_string().contains("vanilla, filtered, naive"), "{e}");
}

#[test]
fn a_full_batch_drains_under_one_lock_hold() {
    for s in RefStrategy::ALL {
        let a = arena(64, s);
        let l = lru(&a, DrainFilter::Filtered);
        let c = Cache::new(&a);
        let mut held = Vec::new();
        for i in 0..FOLIO_BATCH_SIZE as u64 - 1 {
            held.push(c.add(&l, i));
            assert!(!held[i as usize].test_flag(PG_LRU));
            // cache + caller + batch
            assert_eq!(held[i as usize].ref_count(s), 3);
        }
        assert_eq!(l.stats().lock_acquisitions, 0);
        assert_eq!(l.stats().batched, 30);
        held.push(c.add(&l, 30));
        let st = l.validate(&a).unwrap();
        assert_eq!(st.lock_acquisitions, 1);
        assert_eq!((st.queued, st.drained, st.inserted), (31, 31, 31));
        assert_eq!(st.folios[LruList::Inactive as usize], 31);
        assert!(held
            .iter()
            .all(|f| f.test_flag(PG_LRU) && f.ref_count(s) == 2));
        // Oldest at the tail.
        let order = l.list_snapshot(LruList::Inactive);
        assert_eq!(*order.last().unwrap(), held[0].pfn());
        assert_eq!(order[0], held[30].pfn());
        drop(held);
        for i in 0..31 {
            c.truncate(i);
        }
        // Every final put unlinked its folio.
        let st = l.validate(&a).unwrap();
        assert_eq!(st.released, 31);
        assert_eq!(st.folios, [0; NR_LRU_LISTS]);
        assert_eq!(a.validate().unwrap().allocated_pages, 0);
        assert_eq!(a.stats().bad_pages, 0);
    }
}

/// Folios truncated while in the batch: vanilla links them and unlinks them again (two lock
/// holds); filtered frees them without the lock.
#[test]
fn dead_folios_cost_vanilla_two_lock_holds_and_filtered_none() {
    for filter in [DrainFilter::Vanilla, DrainFilter::Filtered] {
        for s in RefStrategy::ALL {
            let a = arena(64, s);
            let l = lru(&a, filter);
            let c = Cache::new(&a);
            for i in 0..10 {
                drop(c.add(&l, i));
                c.truncate(i);
            }
            assert_eq!(a.stats().allocated_pages, 10, "the batch keeps them alive");
            l.drain(&a);
            let st = l.validate(&a).unwrap();
            assert_eq!(a.validate().unwrap().allocated_pages, 0, "{filter}");
            match filter {
                DrainFilter::Vanilla => {
                    assert_eq!(st.lock_acquisitions, 2);
                    assert_eq!((st.inserted, st.dead_inserted, st.released), (10, 10, 10));
                    assert_eq!(st.dead_filtered, 0);
                }
                _ => {
                    assert_eq!(st.lock_acquisitions, 0);
                    assert_eq!((st.inserted, st.dead_filtered), (0, 10));
                }
            }
            assert_eq!(a.stats().bad_pages, 0);
        }
    }
}

#[test]
fn live_and_dead_mixed_filtered_links_only_the_live() {
    let s = RefStrategy::LockedBit;
    let a = arena(64, s);
    let l = lru(&a, DrainFilter::Filtered);
    let c = Cache::new(&a);
    let mut live = Vec::new();
    for i in 0..8 {
        let f = c.add(&l, i);
        if i % 2 == 0 {
            drop(f);
            c.truncate(i);
        } else {
            live.push(f);
        }
    }
    l.drain_all(&a);
    let st = l.validate(&a).unwrap();
    assert_eq!((st.inserted, st.dead_filtered, st.dead_inserted), (4, 4, 0));
    assert_eq!(st.lock_acquisitions, 1);
    assert_eq!(a.stats().allocated_pages, 4);
    assert!(live.iter().all(|f| f.test_flag(PG_LRU)));
}

#[test]
fn mark_accessed_references_then_activates() {
    let a = arena(64, RefStrategy::LockedBit);
    let l = lru(&a, DrainFilter::Filtered);
    let c = Cache::new(&a);
    // Accessed twice while still batched: PG_active, lands on the active list.
    let f = c.add(&l, 0);
    l.mark_accessed(&a, &f);
    assert!(f.test_flag(PG_REFERENCED) && !f.test_flag(PG_ACTIVE));
    l.mark_accessed(&a, &f);
    assert!(f.test_flag(PG_ACTIVE) && !f.test_flag(PG_REFERENCED));
    // Accessed twice after reaching the inactive list: promoted by the activate batch.
    let g = c.add(&l, 1);
    l.drain(&a);
    assert_eq!(l.list_of(&f), Some(LruList::Active));
    assert_eq!(l.list_of(&g), Some(LruList::Inactive));
    l.mark_accessed(&a, &g);
    l.mark_accessed(&a, &g);
    assert_eq!(l.list_of(&g), Some(LruList::Inactive), "still batched");
    l.drain(&a);
    assert_eq!(l.list_of(&g), Some(LruList::Active));
    let st = l.validate(&a).unwrap();
    assert_eq!(st.activated, 1);
    // Further accesses of an active folio change nothing.
    l.mark_accessed(&a, &g);
    l.mark_accessed(&a, &g);
    assert_eq!(l.stats().batched, 0);
}

#[test]
fn mlocked_folios_go_to_the_unevictable_list() {
    let a = arena(64, RefStrategy::CasLoop);
    let l = lru(&a, DrainFilter::Filtered);
    let c = Cache::new(&a);
    let f = c.add(&l, 0);
    f.set_flag(PG_MLOCKED);
    l.drain(&a);
    assert_eq!(l.list_of(&f), Some(LruList::Unevictable));
    assert!(f.test_flag(PG_UNEVICTABLE));
    let st = l.validate(&a).unwrap();
    assert_eq!(st.culled, 1);
    // Reclaim never looks at it.
    let r = l.reclaim(&a, &c, 10);
    assert_eq!(r.reclaimed, 0);
    drop(f);
    c.truncate(0);
    assert_eq!(a.stats().bad_pages, 0);
    assert_eq!(a.stats().mlocked_freed, 1);
}

/// The seed's bug: with folios added as active (MGLRU's fault path), the naive filter frees
/// them with PG_active set and the bad-page detector fires; ours clears it first.
#[test]
fn naive_filter_frees_active_folios_as_bad_pages_and_ours_does_not() {
    for (filter, bad) in [
        (DrainFilter::Naive, true),
        (DrainFilter::Filtered, false),
        (DrainFilter::Vanilla, false),
    ] {
        let a = arena(64, RefStrategy::LockedBit);
        let l = Lru::new(
            &a,
            LruConfig::DEFAULT
                .filter(filter)
                .add_as_active(true)
                .batch_slots(1),
        );
        let c = Cache::new(&a);
        for i in 0..20 {
            drop(c.add(&l, i));
            c.truncate(i);
        }
        l.drain_all(&a);
        assert_eq!(a.stats().bad_pages > 0, bad, "{filter}");
        if bad {
            assert!(a.last_bad_page().unwrap().contains("active"));
        }
        l.validate(&a).unwrap();
        assert_eq!(a.validate().unwrap().allocated_pages, 0);
    }
}

/// The classic path to PG_active in a batch: an access while the folio waits.
#[test]
fn naive_filter_also_trips_on_mark_accessed_in_the_batch() {
    let a = arena(64, RefStrategy::CasLoop);
    let l = lru(&a, DrainFilter::Naive);
    let c = Cache::new(&a);
    let f = c.add(&l, 0);
    l.mark_accessed(&a, &f);
    l.mark_accessed(&a, &f);
    drop(f);
    c.truncate(0);
    l.drain(&a);
    assert_eq!(a.stats().bad_pages, 1);
}

#[test]
fn reclaim_frees_cold_folios_second_chances_referenced_and_skips_pinned() {
    for s in RefStrategy::ALL {
        let a = arena(64, s);
        let l = lru(&a, DrainFilter::Filtered);
        let c = Cache::new(&a);
        let mut pinned = Vec::new();
        for i in 0..40u64 {
            let f = c.add(&l, i);
            match i % 4 {
                0 => pinned.push(f),
                1 => l.mark_accessed(&a, &f),
                _ => {}
            }
        }
        l.drain_all(&a);
        // Ask for everything: cold ones go at once, referenced ones on their second trip,
        // pinned ones never.
        let r = l.reclaim(&a, &c, 64);
        assert_eq!(r.reclaimed, 30, "{s}");
        assert_eq!(c.cached(), 10);
        let st = l.validate(&a).unwrap();
        assert_eq!(st.rotated, 10);
        assert_eq!(st.folios[LruList::Inactive as usize], 10);
        assert!(pinned.iter().all(|f| f.test_flag(PG_LRU)));
        assert_eq!(a.validate().unwrap().allocated_pages, 10);
        drop(pinned);
        for i in (0..40).step_by(4) {
            c.truncate(i);
        }
        l.validate(&a).unwrap();
        assert_eq!(a.validate().unwrap().allocated_pages, 0);
        assert_eq!(a.stats().bad_pages, 0);
    }
}

#[test]
fn a_short_inactive_list_is_refilled_from_the_active_tail() {
    let a = arena(64, RefStrategy::LockedBit);
    let l = lru_add_as_active(&a, true);
    let c = Cache::new(&a);
    for i in 0..20 {
        drop(c.add(&l, i));
    }
    l.drain(&a);
    assert_eq!(l.stats().folios[LruList::Active as usize], 20);
    let r = l.reclaim(&a, &c, 5);
    assert!(r.reclaimed >= 5);
    let st = l.validate(&a).unwrap();
    assert!(st.deactivated >= 5);
    // Aged folios carry PG_workingset.
    for pfn in l.list_snapshot(LruList::Inactive) {
        assert!(a.folio(pfn).test_flag(PG_WORKINGSET));
    }
}

/// Active aging with and without the second chance: 100 folios added as active, the 50
/// with even indices read once since; a reclaim that frees 5 ages the active tail. With the second
/// chance (the default) the read ones are rotated (flag cleared) and only unread ones go down;
/// with the kernel's aging (`active_second_chance: false`) they go down in list order.
#[test]
fn active_aging_keeps_referenced_folios_active_unless_configured_like_the_kernel() {
    for second_chance in [true, false] {
        let a = arena(128, RefStrategy::LockedBit);
        let l = lru_add_as_active(&a, second_chance);
        let c = Cache::new(&a);
        let mut read = Vec::new();
        for i in 0..100 {
            let f = c.add(&l, i);
            if i % 2 == 0 {
                read.push(f.pfn());
                f.set_flag(PG_REFERENCED);
            }
        }
        l.drain(&a);
        let r = l.reclaim(&a, &c, 5);
        assert!(r.reclaimed >= 5, "{r:?}");
        let st = l.validate(&a).unwrap();
        let active = l.list_snapshot(LruList::Active);
        let read_still_active = read.iter().filter(|p| active.contains(p)).count();
        if second_chance {
            assert_eq!(read_still_active, 50, "second chance: {st:?}");
            assert!(st.rotated_active > 0 && st.deactivated >= 5, "{st:?}");
            // The rotated ones used their chance up; the others still have theirs.
            let used = read
                .iter()
                .filter(|&&p| !a.folio(p).test_flag(PG_REFERENCED))
                .count();
            assert_eq!(used as u64, st.rotated_active, "{st:?}");
        } else {
            assert!(read_still_active < 50, "kernel aging: {st:?}");
            assert_eq!(st.rotated_active, 0, "{st:?}");
        }
        c.truncate_all_and_check(&l);
    }
}

/// Reads of an active folio are counted (up to 3 beyond the one that set `PG_referenced`)
/// and aging spends them one per pass, the counted ones first; with the kernel's aging they
/// are not counted at all.
#[test]
fn aging_spends_one_counted_read_per_pass() {
    for second_chance in [true, false] {
        let a = arena(128, RefStrategy::LockedBit);
        let l = lru_add_as_active(&a, second_chance);
        let c = Cache::new(&a);
        for i in 0..100 {
            drop(c.add(&l, i));
        }
        l.drain(&a);
        let tail = *l.list_snapshot(LruList::Active).last().unwrap();
        let x = a.try_get(a.folio(tail)).unwrap();
        for _ in 0..5 {
            l.mark_accessed(&a, &x);
        }
        assert!(x.test_flag(PG_REFERENCED));
        if !second_chance {
            assert_eq!(x.lru_refs(), 0, "the kernel's aging counts nothing");
            drop(x);
            c.truncate_all_and_check(&l);
            continue;
        }
        assert_eq!(x.lru_refs(), 3, "saturated at the field's capacity");
        drop(x);
        // The first aging step looks at the tail first: one counted read is spent.
        let r = l.reclaim(&a, &c, 5);
        assert!(r.reclaimed >= 5, "{r:?}");
        let x = a.folio(tail);
        assert_eq!(l.list_of(x), Some(LruList::Active));
        assert_eq!(x.lru_refs(), 2);
        assert!(x.test_flag(PG_REFERENCED));
        c.truncate_all_and_check(&l);
    }
}

/// Every folio active and referenced, nothing inactive: the first aging steps only clear
/// flags, yet a reclaim (and an allocation through it) still frees, instead of counting the
/// pass as fruitless and failing: clearing 1024 flags takes 32 steps, more than the
/// allocation's 16 fruitless passes would allow if aging did not count as progress.
#[test]
fn reclaim_frees_when_every_active_folio_is_referenced() {
    let a = arena(1024, RefStrategy::LockedBit);
    let l = lru_add_as_active(&a, true);
    let c = Cache::new(&a);
    for i in 0..1024 {
        let f = c.add(&l, i);
        f.set_flag(PG_REFERENCED);
    }
    l.drain(&a);
    assert_eq!(l.stats().folios[LruList::Active as usize], 1024);
    let f = l
        .alloc(&a, &c, 0)
        .expect("aging clears the flags and moves folios down");
    drop(f);
    let st = l.validate(&a).unwrap();
    assert!(st.rotated_active >= 1024 && st.reclaimed > 0, "{st:?}");
    c.truncate_all_and_check(&l);
}

/// Regression: readers that keep reading every cached folio renew the second chances
/// (counted reads, `PG_referenced`) faster than reclaim's passes spend them, and an
/// allocation with nothing pinned failed. Its retries give no second chances, so it cannot.
#[test]
fn an_allocation_succeeds_while_readers_keep_every_folio_referenced() {
    const PAGES: u64 = 64;
    let a = arena(PAGES as usize, RefStrategy::LockedBit);
    let l = lru_add_as_active(&a, true);
    let c = Cache::new(&a);
    for i in 0..PAGES {
        drop(c.add(&l, i));
    }
    l.drain_all(&a);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (a, l, c, stop) = (&a, &l, &c, &stop);
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let pfns: Vec<u32> = c.pages.lock().values().copied().collect();
                for pfn in pfns {
                    // Read it (a reference for the access, dropped at once).
                    if let Some(f) = a.try_get(a.folio(pfn)) {
                        for _ in 0..4 {
                            l.mark_accessed(a, &f);
                        }
                    }
                }
                l.drain(a);
            }
        });
        let _stop = StopOnDrop(stop);
        for i in PAGES..PAGES + 2000 {
            let f = l
                .alloc(a, c, 0)
                .expect("nothing is pinned: reclaim must find a folio");
            f.set_mapping(c.id, i);
            c.pages.lock().insert(i, f.clone().into_raw().pfn());
            l.add(a, &f);
        }
    });
    assert_eq!(l.stats().oom, 0);
    l.drain_all(&a);
    c.truncate_all_and_check(&l);
}

/// Sets its flag when dropped (a failing assertion stops the helper threads too).
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn alloc_reclaims_when_the_budget_is_used_up_and_fails_only_when_all_is_pinned() {
    let a = arena(32, RefStrategy::LockedBit);
    let l = lru(&a, DrainFilter::Filtered);
    let c = Cache::new(&a);
    // Fill the budget with unpinned cached folios, then keep allocating through reclaim.
    for i in 0..200u64 {
        let f = l.alloc(&a, &c, 0).expect("reclaim makes room");
        f.set_mapping(c.id, i);
        c.pages.lock().insert(i, f.clone().into_raw().pfn());
        l.add(&a, &f);
    }
    let st = l.validate(&a).unwrap();
    assert!(st.alloc_stalls > 0 && st.reclaimed > 0);
    assert!(a.validate().unwrap().allocated_pages <= 32);
    // Pin everything that is cached: now allocation must fail, not hang.
    let pins: Vec<_> = c
        .pages
        .lock()
        .values()
        .map(|&pfn| a.try_get(a.folio(pfn)).unwrap())
        .collect();
    let mut rest = Vec::new();
    while let Ok(f) = a.alloc(0) {
        rest.push(f);
    }
    let e = l.alloc(&a, &c, 0).unwrap_err();
    assert!(matches!(e, AllocError::OutOfMemory { .. }));
    assert_eq!(l.stats().oom, 1);
    drop((pins, rest));
    let cached: Vec<u64> = c.pages.lock().keys().copied().collect();
    for i in cached {
        c.truncate(i);
    }
    l.validate(&a).unwrap();
    assert_eq!(a.validate().unwrap().allocated_pages, 0);
}

/// Runs `f` on a new thread pinned to the `cpu`-th CPU the test may run on (spawned from the
/// unpinned test thread, so the whole affinity mask is allowed) and returns its result.
fn on_cpu<R: Send>(cpu: usize, f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(|| {
            let target = crate::mm::sync::allowed_cpus()[cpu];
            assert!(crate::mm::sync::pin_to_cpu(cpu));
            assert_eq!(crate::mm::sync::current_cpu(), target);
            f()
        })
        .join()
        .unwrap()
    })
}

/// Whether "CPU 0" and "CPU 1" of [`on_cpu`] (the first two CPUs the test may run on)
/// exist and have different free lists; says so and returns false if not.
fn two_cpus_with_their_own_lists() -> bool {
    let (n, allowed) = (crate::mm::sync::num_cpus(), crate::mm::sync::allowed_cpus());
    let ok = allowed.len() >= 2 && allowed[0] % n != allowed[1] % n;
    if !ok {
        eprintln!("skipped: needs two CPUs with their own free lists to pin threads to");
    }
    ok
}

impl Cache<'_> {
    /// Caches pages `0..pages` from CPU 0 and drains its LRU batch, without keeping a
    /// reference: a full arena of reclaimable folios when `pages` is its size.
    fn fill_on_cpu0(&self, lru: &Lru, pages: u64) {
        on_cpu(0, || {
            for i in 0..pages {
                drop(self.add(lru, i));
            }
            lru.drain(self.arena);
        });
    }
}

#[test]
fn alloc_reclaims_before_taking_another_cpus_free_pages_and_drains_them_before_failing() {
    if !two_cpus_with_their_own_lists() {
        return;
    }
    let a = arena(256, RefStrategy::LockedBit);
    let l = lru(&a, DrainFilter::Filtered);
    let c = Cache::new(&a);
    c.fill_on_cpu0(&l, 256);
    assert_eq!(a.stats().free_pages, 0);
    // Truncated on CPU 1: their frames park on CPU 1's free list.
    on_cpu(1, || (0..8).for_each(|i| c.truncate(i)));
    assert_eq!(a.stats().free_pages, 8);

    // `get_page_from_freelist` first: CPU 0 finds nothing of its own and reclaims, leaving
    // CPU 1's eight pages where they are.
    let mut rest = on_cpu(0, || {
        let mut rest = vec![l.alloc(&a, &c, 0).expect("reclaim makes room")];
        while let Some(f) = a.alloc_local(0) {
            rest.push(f);
        }
        rest
    });
    let st = l.stats();
    assert_eq!(
        st.alloc_stalls, 1,
        "an allocation took another CPU's free pages"
    );
    assert!(st.reclaimed > 0);
    assert_eq!(a.stats().free_pages, 8, "CPU 1's pages were drained");

    // Everything cached pinned, nothing else free but two more pages parked on CPU 1:
    // reclaim frees nothing, and the allocation after it drains CPU 1's list instead of
    // failing.
    let mut pins: HashMap<u64, FolioRef<'_>> = c
        .pages
        .lock()
        .iter()
        .map(|(&i, &pfn)| (i, a.try_get(a.folio(pfn)).unwrap()))
        .collect();
    let first = *pins.keys().min().unwrap();
    let two: Vec<_> = (first..first + 2)
        .map(|i| pins.remove(&i).unwrap())
        .collect();
    on_cpu(1, || {
        for i in first..first + 2 {
            c.truncate(i);
        }
        drop(two);
    });
    assert_eq!(a.stats().free_pages, 10);
    let reclaimed = l.stats().reclaimed;
    on_cpu(0, || {
        for _ in 0..10 {
            rest.push(l.alloc(&a, &c, 0).expect("free pages parked on CPU 1"));
        }
        assert!(matches!(
            l.alloc_noretry(&a, &c, 0),
            Err(AllocError::OutOfMemory { .. })
        ));
    });
    let st = l.stats();
    assert_eq!((st.reclaimed, st.oom), (reclaimed, 0));
    assert_eq!(a.stats().free_pages, 0);
    drop((pins, rest));
    c.truncate_all_and_check(&l);
}

#[test]
fn pages_a_background_reclaimer_frees_reach_other_cpus_without_a_stall() {
    if !two_cpus_with_their_own_lists() {
        return;
    }
    // 2048 pages: up to 2048 / (8 * CPUs) may park on a CPU's list, but only 4 (four of
    // the kernel's batches for a zone this small) while reclaim is active.
    let a = arena(2048, RefStrategy::LockedBit);
    let l = lru(&a, DrainFilter::Filtered);
    let c = Cache::new(&a);
    c.fill_on_cpu0(&l, 2048);
    // kswapd's work, on CPU 1: reclaim until 64 pages are free.
    let wm = Watermarks {
        min: 0,
        low: 64,
        high: 64,
    };
    let r = on_cpu(1, || l.balance(&a, &c, wm));
    assert!(r.reclaimed >= 64);
    assert!(!a.reclaim_is_active(), "the guard ended with the balancing");
    // CPU 0 allocates all but the few pages CPU 1 kept, without reclaiming.
    let kept = on_cpu(0, || {
        let mut kept = Vec::new();
        while let Some(f) = a.alloc_local(0) {
            kept.push(f);
        }
        kept
    });
    assert!(
        kept.len() as u64 >= r.reclaimed - 4,
        "{} of {} reclaimed pages reached CPU 0",
        kept.len(),
        r.reclaimed
    );
    assert_eq!(l.stats().alloc_stalls, 0);
    drop(kept);
    c.truncate_all_and_check(&l);
}

// ---------------------------------------------------------------------------------------
// Workingset detection
// ---------------------------------------------------------------------------------------

impl<'a> Cache<'a> {
    /// `filemap_add_folio` of a folio replacing `shadow`: `workingset_refault` before
    /// `folio_add_lru`. Returns the caller's reference and whether it was activated.
    fn add_refaulted(&self, lru: &Lru, index: u64, shadow: Shadow) -> (FolioRef<'a>, bool) {
        let f = self.arena.alloc(0).unwrap();
        f.set_mapping(self.id, index);
        self.pages.lock().insert(index, f.clone().into_raw().pfn());
        let activated = lru.workingset_refault(&f, shadow);
        lru.add(self.arena, &f);
        (f, activated)
    }

    /// `n` folios on the active list (indices `first..first + n`).
    fn add_active(&self, lru: &Lru, first: u64, n: u64) {
        for i in first..first + n {
            let f = self.arena.alloc(0).unwrap();
            f.set_mapping(self.id, i);
            f.set_flag(PG_ACTIVE);
            self.pages.lock().insert(i, f.clone().into_raw().pfn());
            lru.add(self.arena, &f);
        }
        lru.drain(self.arena);
    }
}

use crate::mm::index::Shadow;

#[test]
fn a_refault_within_the_active_list_activates_and_one_beyond_does_not() {
    let a = arena(64, RefStrategy::LockedBit);
    let l = lru(&a, DrainFilter::Filtered);
    let c = Cache::new(&a);
    c.add_active(&l, 100, 8);
    assert_eq!(l.stats().pages[LruList::Active as usize], 8);
    // Evicted at clock 0 (the eviction moves it to 1), having been active once.
    let x = a.alloc(0).unwrap();
    x.set_flag(PG_WORKINGSET);
    let shadow = l.workingset_eviction(&a, &x).unwrap();
    drop(x);
    assert_eq!(l.nonresident_age(), 1);
    // Seven more evictions or activations: refault distance 8 = the active list.
    l.workingset_age_nonresident(7);
    assert_eq!(l.workingset_test_recent(shadow), (true, true));
    let (y, activated) = c.add_refaulted(&l, 0, shadow);
    assert!(activated && y.test_flag(PG_ACTIVE) && y.test_flag(PG_WORKINGSET));
    l.drain(&a);
    assert_eq!(l.list_of(&y), Some(LruList::Active));
    // The activation advanced the clock: the same shadow is now one tick too old.
    assert_eq!(l.nonresident_age(), 9);
    assert_eq!(l.stats().pages[LruList::Active as usize], 9);
    l.workingset_age_nonresident(1); // distance 10 > 9 active pages
    let (z, activated) = c.add_refaulted(&l, 1, shadow);
    assert!(!activated && !z.test_flag(PG_ACTIVE) && !z.test_flag(PG_WORKINGSET));
    l.drain(&a);
    assert_eq!(l.list_of(&z), Some(LruList::Inactive));
    let ws = l.workingset_stats();
    assert_eq!((ws.refault, ws.activate, ws.restore), (2, 1, 1));
    drop((y, z));
    for i in [0, 1].into_iter().chain(100..108) {
        c.truncate(i);
    }
    l.validate(&a).unwrap();
    assert_eq!(a.validate().unwrap().allocated_pages, 0);
}

/// With large folios the clock, the refault distance and the refault counters are all in
/// base pages (`workingset_eviction` and `workingset_refault` use `folio_nr_pages`): a
/// distance counted in folios would call a refault recent that the active list could not
/// have made room for.
#[test]
fn large_folios_move_the_clock_and_refault_by_their_pages() {
    let a = arena(64, RefStrategy::LockedBit);
    let l = lru(&a, DrainFilter::Filtered);
    let c = Cache::new(&a);
    c.add_active(&l, 100, 20);
    assert_eq!(l.stats().pages[LruList::Active as usize], 20);
    // An order-2 folio evicted at clock 0 moves the clock by its 4 pages.
    let x = a.alloc(2).unwrap();
    x.set_flag(PG_WORKINGSET);
    let shadow = l.workingset_eviction(&a, &x).unwrap();
    drop(x);
    assert_eq!(l.nonresident_age(), 4);
    // An order-4 folio evicted after it: 16 pages more. Distance 20 = the active pages.
    let y = a.alloc(4).unwrap();
    assert!(l.workingset_eviction(&a, &y).is_some());
    drop(y);
    assert_eq!(l.nonresident_age(), 20);
    assert_eq!(l.workingset_test_recent(shadow), (true, true));
    // One page more and it is too old; counted in folios the distance would be 3.
    l.workingset_age_nonresident(1);
    assert_eq!(l.workingset_test_recent(shadow), (false, true));
    // A large folio refaulting from a recent shadow counts its pages and, activated,
    // moves the clock by them too.
    let recent = {
        let z = a.alloc(0).unwrap();
        let s = l.workingset_eviction(&a, &z).unwrap();
        drop(z);
        s
    };
    let age = l.nonresident_age();
    let big = a.alloc(3).unwrap();
    assert!(l.workingset_refault(&big, recent));
    assert!(big.test_flag(PG_ACTIVE));
    assert_eq!(l.nonresident_age(), age + 8);
    let ws = l.workingset_stats();
    assert_eq!((ws.refault, ws.activate, ws.restore), (8, 8, 0));
    big.clear_flag(PG_ACTIVE);
    drop(big);
    for i in 100..120 {
        c.truncate(i);
    }
    l.validate(&a).unwrap();
    assert_eq!(a.validate().unwrap().allocated_pages, 0);
}

#[test]
fn refault_distance_survives_the_clock_wrapping() {
    let a = arena(64, RefStrategy::CasLoop);
    let l = lru(&a, DrainFilter::Filtered);
    let c = Cache::new(&a);
    c.add_active(&l, 100, 8);
    l.set_nonresident_age(u64::MAX - 3);
    let x = a.alloc(0).unwrap();
    let shadow = l.workingset_eviction(&a, &x).unwrap();
    drop(x);
    l.workingset_age_nonresident(4); // the clock passes u64::MAX: distance 5
    assert_eq!(l.nonresident_age(), 1);
    assert_eq!(l.workingset_test_recent(shadow), (true, false));
    l.workingset_age_nonresident(3); // distance 8: still within the 8 active pages
    assert!(l.workingset_test_recent(shadow).0);
    l.workingset_age_nonresident(1);
    assert!(!l.workingset_test_recent(shadow).0);
    for i in 100..108 {
        c.truncate(i);
    }
    assert_eq!(a.validate().unwrap().allocated_pages, 0);
}

#[test]
fn activations_advance_the_clock_and_off_means_no_shadows() {
    for on in [true, false] {
        let a = arena(64, RefStrategy::LockedBit);
        let l = Lru::new(
            &a,
            LruConfig {
                batch_slots: 1,
                workingset: on,
                ..LruConfig::default()
            },
        );
        let c = Cache::new(&a);
        let f = c.add(&l, 0);
        l.drain(&a);
        l.mark_accessed(&a, &f); // referenced
        assert_eq!(l.nonresident_age(), 0);
        l.mark_accessed(&a, &f); // promoted: `workingset_activation`
        assert_eq!(l.nonresident_age(), on as u64);
        assert_eq!(l.workingset_eviction(&a, &f).is_some(), on);
        assert_eq!(l.workingset_stats().enabled, on);
        drop(f);
        l.drain(&a);
        c.truncate(0);
        l.validate(&a).unwrap();
        assert_eq!(a.validate().unwrap().allocated_pages, 0);
    }
}

#[test]
fn the_default_inactive_ratio_is_the_kernels() {
    let gib = 1 << 18; // pages
    assert_eq!(super::kernel_inactive_ratio(0), 1);
    assert_eq!(super::kernel_inactive_ratio(gib - 1), 1);
    assert_eq!(super::kernel_inactive_ratio(gib), 3); // int_sqrt(10)
    assert_eq!(super::kernel_inactive_ratio(4 * gib), 6); // int_sqrt(40)
    assert_eq!(super::kernel_inactive_ratio(10 * gib), 10);
    assert_eq!(super::kernel_inactive_ratio(1000 * gib), 100);
}

#[test]
fn a_failed_allocation_with_everything_pinned_scans_a_small_multiple_of_the_budget() {
    // Regression: every fruitless retry scanned the lists twice over, so one failed
    // allocation with the whole budget pinned looked at about 40 folios per page of the
    // budget (130 ms per failed read at a 256 MiB budget).
    const PAGES: usize = 1024;
    let a = arena(PAGES, RefStrategy::LockedBit);
    let l = lru(&a, DrainFilter::Filtered);
    let c = Cache::new(&a);
    // Half of them read twice (active), half once (inactive), all pinned.
    let pins: Vec<_> = (0..PAGES as u64)
        .map(|i| {
            let f = c.add(&l, i);
            if i % 2 == 0 {
                l.mark_accessed(&a, &f);
                l.mark_accessed(&a, &f);
            }
            f
        })
        .collect();
    l.drain_all(&a);
    assert_eq!(a.stats().free_pages, 0);
    let before = l.stats();
    let e = l.alloc(&a, &c, 0).unwrap_err();
    assert!(matches!(e, AllocError::OutOfMemory { .. }));
    let after = l.stats();
    let looked_at = (after.scanned - before.scanned)
        + (after.deactivated - before.deactivated)
        + (after.rotated_active - before.rotated_active);
    assert!(
        looked_at <= 6 * PAGES as u64,
        "one failed allocation looked at {looked_at} folios for a budget of {PAGES} pages"
    );
    assert_eq!(after.oom, before.oom + 1);
    drop(pins);
    c.truncate_all_and_check(&l);
}

/// `folio_rotate_reclaimable`: a written-back folio reclaim wanted moves from wherever it is
/// on the inactive list to its tail, the end the next reclaim pass takes first; an active
/// folio, or one off the lists, stays where it is.
#[test]
fn rotate_reclaimable_moves_an_inactive_folio_to_the_tail() {
    let a = arena(64, RefStrategy::LockedBit);
    let l = lru(&a, DrainFilter::Filtered);
    let c = Cache::new(&a);
    let held: Vec<_> = (0..4).map(|i| c.add(&l, i)).collect();
    l.drain_all(&a);
    let order = l.list_snapshot(LruList::Inactive);
    assert_eq!(order[0], held[3].pfn(), "the newest at the head");
    assert!(l.rotate_reclaimable(&a, &held[3]));
    let order = l.list_snapshot(LruList::Inactive);
    assert_eq!(*order.last().unwrap(), held[3].pfn(), "moved to the tail");
    assert_eq!(order.len(), 4);
    l.validate(&a).unwrap();
    // Active: not moved.
    held[2].set_flag(PG_ACTIVE);
    assert!(!l.rotate_reclaimable(&a, &held[2]));
    held[2].clear_flag(PG_ACTIVE);
    drop(held);
    for i in 0..4 {
        c.truncate(i);
    }
    l.validate(&a).unwrap();
}

// ---------------------------------------------------------------------------------------
// The protected policy (`workingset` module docs)
// ---------------------------------------------------------------------------------------

fn lru_protected(arena: &Arena) -> Lru {
    Lru::new(
        arena,
        LruConfig::DEFAULT
            .batch_slots(1)
            .policy(LruPolicy::Protected),
    )
}

/// The shadow of a folio evicted under the protected policy carries its eviction clock and
/// the time since it last entered a list's head (its stamp, set when the add batch linked
/// it); a refault is admitted to the active list exactly when that reuse distance is below
/// the coldest active folio's age (it entered its head after the active tail did), when the
/// protected set is still filling, or when the active list is empty; never from past the
/// budget. The inactive target grows on a never-active refault within reach, shrinks on a
/// refault of a once-active folio, and stays within its bounds.
#[test]
fn protected_refaults_are_admitted_by_reuse_distance_and_adapt_the_inactive_target() {
    let a = arena(256, RefStrategy::LockedBit);
    let l = lru_protected(&a);
    let c = Cache::new(&a);
    let p = l.workingset.protection.clone().unwrap();
    let target = |l: &Lru| l.workingset_stats().cold_target;
    assert_eq!(target(&l), 2, "1% of 256 pages");
    l.workingset_age_nonresident(10);
    let x = c.add(&l, 0);
    l.drain(&a);
    assert_eq!(a.ext(&x).lru_stamp.load(Ordering::Relaxed), 10);
    l.workingset_age_nonresident(10);
    let shadow = l.workingset_eviction(&a, &x).unwrap();
    assert_eq!(
        workingset::unpack_shadow_protected(shadow, 0),
        (20, 10, false)
    );
    drop(x);
    c.truncate(0);
    // The clock reads 21: reuse distance 11 (entered its head at 10).
    let mut next = 100;
    let mut refault = |l: &Lru| {
        next += 1;
        let (f, activated) = c.add_refaulted(l, next, shadow);
        drop(f);
        c.truncate(next);
        activated
    };
    p.set_tail_stamp(Some(5), 0);
    assert!(
        refault(&l),
        "the tail entered its head at 5, before the folio"
    );
    assert_eq!(
        target(&l),
        3,
        "a never-active refault within 2 targets grows it"
    );
    p.set_tail_stamp(Some(15), 0);
    assert!(
        !refault(&l),
        "the tail entered its head at 15, after the folio"
    );
    p.set_tail_stamp(Some(15), 1000);
    assert!(
        refault(&l),
        "the inactive list is above its floor: still filling"
    );
    p.set_tail_stamp(None, 0);
    assert!(refault(&l), "no active folio to compare with");
    // Every refault so far came back from within reach: 2 + 4.
    assert_eq!(target(&l), 6);
    // The three admissions advanced the clock as activations do (to 24); ten ticks more
    // make the distance 14, past twice the target (12): the target stays.
    l.workingset_age_nonresident(10);
    p.set_tail_stamp(Some(5), 0);
    assert!(refault(&l));
    assert_eq!(target(&l), 6);
    // From past the history (two budgets): new, whatever the tail.
    l.workingset_age_nonresident(400);
    p.set_tail_stamp(None, 0);
    assert!(refault(&l), "a refault from within two budgets is judged");
    l.workingset_age_nonresident(200);
    p.set_tail_stamp(None, 0);
    assert!(!refault(&l), "a refault from past two budgets is new");
    // A once-active folio's refault shrinks the target, down to its floor.
    let y = c.add(&l, 1);
    l.drain(&a);
    y.set_flag(PG_WORKINGSET);
    let ws_shadow = l.workingset_eviction(&a, &y).unwrap();
    drop(y);
    c.truncate(1);
    for i in 0..10 {
        let (f, _) = c.add_refaulted(&l, 200 + i, ws_shadow);
        drop(f);
        c.truncate(200 + i);
    }
    assert_eq!(target(&l), 2, "shrunk to the floor and no further");
    l.drain(&a); // the batch held the refaulted folios' last references
    c.truncate_all_and_check(&l);
}

/// The resident age saturates instead of wrapping, in units that cover any budget.
#[test]
fn protected_shadows_keep_their_fields_and_saturate_the_age() {
    use workingset::{pack_shadow_protected, resident_age_shift, unpack_shadow_protected};
    assert_eq!(resident_age_shift(1 << 20), 0);
    assert_eq!(resident_age_shift((1 << 20) + 1), 1);
    assert_eq!(resident_age_shift(1 << 32), 12);
    for ws in [false, true] {
        let s = pack_shadow_protected(u64::MAX - 3, ws, 12_345, 0);
        assert_eq!(
            unpack_shadow_protected(s, 0),
            ((u64::MAX - 3) & ((1 << 40) - 1), 12_345, ws)
        );
    }
    let s = pack_shadow_protected(7, false, u64::MAX, 0);
    assert_eq!(unpack_shadow_protected(s, 0), (7, (1 << 20) - 1, false));
    let s = pack_shadow_protected(7, true, 4096 * 3 + 5, 12);
    assert_eq!(unpack_shadow_protected(s, 12), (7, 4096 * 3, true));
}
