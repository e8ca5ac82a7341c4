//! Loom models of the LRU's drain-time dead-folio filter (seed 004).
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p foliocache
//! --lib loom_tests::lru`. The models use the real [`Arena`] and [`Lru`]; a one-slot "index" (an
//! atomic holding the folio's pfn + 1) stands in for the page cache, read the way
//! `filemap_get_entry` reads it: load, `try_get`, re-check.
//!
//! | model | what it proves |
//! |---|---|
//! | `drain_vs_lookup_*` | truncation + drain racing a speculative lookup of the same folio: either the lookup's `try_get` comes first (the freeze fails, the folio is linked, and the lookup's put may be the final put that unlinks it) or the freeze comes first (the `try_get` fails); a holder never sees its folio frozen or freed; the folio is freed exactly once, with no bad page; the LRU and the arena validate |
//! | `drain_vs_final_put_vanilla` | the vanilla drain linking a folio whose last other holder puts concurrently: the final put (ours or theirs) unlinks it under the lock before the free |
//!
//! Weakened variant that must fail: `RacyCheck`, a filter that tests `count == 1` with a load
//! and then drops the batch's reference as if it had won (check-then-act instead of the
//! freeze's single CAS). A lookup's `try_get` between the two makes it free a folio the lookup
//! holds; the holder's put then frees it a second time, which the arena refuses.

use crate::mm::folio::{Arena, ArenaConfig, FolioRef, PAGE_SIZE};
use crate::mm::lru::{DrainFilter, Lru, LruConfig};
use crate::mm::refcount::RefStrategy;
use crate::mm::sync::{model, thread, Arc, AtomicU32, Ordering};

fn setup(filter: DrainFilter, s: RefStrategy) -> (Arc<Arena>, Arc<Lru>) {
    let mut c = ArenaConfig::new(2 * PAGE_SIZE, s);
    c.per_cpu_lists = false;
    c.panic_on_bad_page = true;
    let arena = Arc::new(Arena::new(c).unwrap());
    let lru = Arc::new(Lru::new(
        &arena,
        LruConfig {
            filter,
            batch_slots: 1,
            ..LruConfig::default()
        },
    ));
    (arena, lru)
}

/// A folio in the one-slot index (the cache's reference) and in the add batch (the batch's);
/// the allocating caller's reference is gone. Returns the index slot.
fn cached_and_batched(arena: &Arena, lru: &Lru) -> (u32, Arc<AtomicU32>) {
    let f = arena.alloc(0).unwrap();
    let pfn = f.pfn();
    let _cache_ref = f.clone().into_raw();
    lru.add(arena, &f);
    drop(f);
    // ORDERING: Release; the lookup's Acquire load sees the folio published.
    let slot = Arc::new(AtomicU32::new(pfn + 1));
    (pfn, slot)
}

/// `filemap_get_entry` on the one-slot index: load, `try_get`, re-check. Returns whether a
/// reference was obtained at all.
fn lookup(arena: &Arena, slot: &AtomicU32, s: RefStrategy) -> bool {
    // ORDERING: Acquire; pairs with the Release stores of the slot.
    let p = slot.load(Ordering::Acquire);
    if p == 0 {
        return false;
    }
    let folio = arena.folio(p - 1);
    let Some(r) = arena.try_get(folio) else {
        return false;
    };
    // A holder's folio is never frozen or freed under it.
    assert!(!r.is_frozen(s), "got a reference on a frozen folio");
    // Re-check (a miss would retry in the real lookup); either way the reference is put,
    // and that put may be the folio's final one.
    // ORDERING: Acquire; as above.
    let _hit = slot.load(Ordering::Acquire) == p;
    assert!(r.ref_count(s) >= 1, "our reference vanished");
    drop(r);
    true
}

fn drain_vs_lookup(filter: DrainFilter, s: RefStrategy) {
    model(move || {
        let (arena, lru) = setup(filter, s);
        let (pfn, slot) = cached_and_batched(&arena, &lru);
        let t = {
            let (arena, slot) = (arena.clone(), slot.clone());
            thread::spawn(move || lookup(&arena, &slot, s))
        };
        // Truncate: delete from the index, drop the cache's reference; then drain.
        // ORDERING: Release; pairs with the lookup's Acquire loads.
        slot.store(0, Ordering::Release);
        // SAFETY: the index owned this reference and just gave it up.
        drop(unsafe { FolioRef::from_raw(&arena, arena.folio(pfn)) });
        lru.drain(&arena);
        let _got = t.join().unwrap();
        let st = lru.validate(&arena).unwrap();
        // Exactly one fate at the drain: linked (the lookup held it), or filtered.
        assert_eq!(st.inserted + st.dead_filtered, 1);
        if filter == DrainFilter::Vanilla {
            assert_eq!(st.dead_filtered, 0);
        }
        // Freed exactly once, cleanly, and off every list.
        let a = arena.validate().unwrap();
        assert_eq!(a.allocated_pages, 0);
        assert_eq!(a.frees, 1);
        assert_eq!(a.bad_pages, 0);
        assert_eq!(st.folios, [0; 3]);
    });
}

#[test]
fn drain_vs_lookup_filtered_locked_bit() {
    drain_vs_lookup(DrainFilter::Filtered, RefStrategy::LockedBit);
}

#[test]
fn drain_vs_lookup_filtered_cas_loop() {
    drain_vs_lookup(DrainFilter::Filtered, RefStrategy::CasLoop);
}

#[test]
fn drain_vs_lookup_vanilla() {
    drain_vs_lookup(DrainFilter::Vanilla, RefStrategy::LockedBit);
}

/// The weakened filter: caught freeing a folio under a lookup that holds it.
#[test]
#[should_panic]
fn drain_vs_lookup_racy_check_is_caught() {
    drain_vs_lookup(DrainFilter::RacyCheck, RefStrategy::CasLoop);
}

/// Vanilla drain against a concurrent final put by the folio's last other holder.
#[test]
fn drain_vs_final_put_vanilla() {
    model(|| {
        let s = RefStrategy::LockedBit;
        let (arena, lru) = setup(DrainFilter::Vanilla, s);
        let f = arena.alloc(0).unwrap();
        lru.add(&arena, &f);
        let pfn = f.pfn();
        let holder = f.into_raw();
        let _ = holder;
        let t = {
            let arena = arena.clone();
            thread::spawn(move || {
                // SAFETY: the caller's reference, moved to this thread.
                drop(unsafe { FolioRef::from_raw(&arena, arena.folio(pfn)) });
            })
        };
        lru.drain(&arena);
        t.join().unwrap();
        let st = lru.validate(&arena).unwrap();
        assert_eq!(st.inserted, 1);
        assert_eq!(st.released, 1, "whoever put last unlinked it");
        let a = arena.validate().unwrap();
        assert_eq!((a.allocated_pages, a.frees, a.bad_pages), (0, 1, 0));
    });
}
