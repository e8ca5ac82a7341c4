//! Loom models of the page-cache index: the lockless lookup (RCU walk, speculative `try_get`,
//! re-check) against removal (`evict`'s freeze, `delete` + free + reuse of the frame) and
//! against batched insertion (`add_folio_range`).
//!
//! The arena has one or two frames, so a freed folio's frame is reused at once: a lookup that
//! keeps a reference to the wrong life of a frame is visible as the wrong `private` tag. The
//! index runs with 4-slot nodes under loom.

use super::index_world::{cache_first, world, World, FIRST, SECOND};
use crate::mm::folio::{FolioLocked, FolioRef};
use crate::mm::index::Index;
use crate::mm::refcount::RefStrategy;
use crate::mm::sync::{thread, Ordering};

/// The reader: a lookup of index 0 started after the removal completed finds nothing; a
/// folio it does return is the cached one, and stays alive (not freed, not reused) while held.
fn reader(w: &World, lookup: impl Fn(&Index) -> Option<FolioRef<'_>>) {
    let done = w.settled.load(Ordering::SeqCst);
    let found = lookup(&w.index);
    if done {
        assert!(
            found.is_none(),
            "a folio was returned after its removal completed"
        );
    }
    if let Some(f) = found {
        assert_eq!(
            f.private(),
            FIRST,
            "lookup returned another life of the frame"
        );
        thread::yield_now();
        assert_eq!(f.private(), FIRST, "folio freed or reused under a reader");
        assert!(!f.is_frozen(w.arena.strategy()));
    }
}

fn finish(w: &World) {
    w.index.validate().unwrap();
    let st = w.arena.stats();
    assert_eq!(st.bad_pages, 0);
}

/// Lookup against `evict` (lock, freeze at cache refs + 1, remove, free): either the reader's
/// `try_get` came first and the freeze fails (the folio stays), or the freeze won and the
/// reader retries and finds the slot empty. Never both.
#[test]
fn lookup_vs_evict() {
    for s in [RefStrategy::CasLoop, RefStrategy::LockedBit] {
        loom::model(move || {
            let w = world(1, s);
            let pfn = cache_first(&w);
            let w2 = w.clone();
            let r = thread::spawn(move || reader(&w2, |i| i.lookup(0)));
            // SAFETY: the reference leaked by `cache_one`.
            let x = unsafe { FolioRef::from_raw(&w.arena, w.arena.folio(pfn)) };
            let evicted = w.index.evict(x.lock()).is_ok();
            if evicted {
                w.settled.store(true, Ordering::SeqCst);
            }
            r.join().unwrap();
            finish(&w);
            let st = w.arena.validate().unwrap();
            assert_eq!(st.allocated_pages, if evicted { 0 } else { 1 });
        });
    }
}

/// The remover: lock, delete from the index, drop every reference (frees the folio unless a
/// reader holds one), free the emptied tree node after a grace period, then reuse the frame for a folio tagged SECOND and drop it again (its
/// final put may race with a reader's put after a failed re-check).
fn delete_and_reuse(w: &World, pfn: u32) {
    // SAFETY: the reference leaked by `cache_one`.
    let x = unsafe { FolioRef::from_raw(&w.arena, w.arena.folio(pfn)) };
    let l = x.lock();
    assert!(w.index.delete(&l));
    drop(l);
    w.settled.store(true, Ordering::SeqCst);
    // Folio frames are reused at once (not RCU-delayed, as in the kernel).
    if let Ok(y) = w.arena.alloc(0) {
        y.set_private(SECOND);
        drop(y);
    }
    // The emptied leaf was retired with call_rcu: run the callback (after a grace period that
    // waits for the reader's section) inside the model, so the node is really freed.
    w.rcu.barrier();
}

/// Lookup against delete + free + reuse of the same frame: the re-check rejects the new life
/// (and its put may be the final one, freeing that life correctly).
#[test]
fn lookup_vs_delete_and_reuse() {
    loom::model(|| {
        let w = world(1, RefStrategy::LockedBit);
        let pfn = cache_first(&w);
        let w2 = w.clone();
        let r = thread::spawn(move || reader(&w2, |i| i.lookup(0)));
        delete_and_reuse(&w, pfn);
        r.join().unwrap();
        finish(&w);
        assert_eq!(w.arena.validate().unwrap().allocated_pages, 0);
    });
}

/// The same model with the re-check removed: loom must find the schedule where the reader's
/// `try_get` lands on the frame's next life (walk, then the remover runs, then the get).
#[test]
#[should_panic]
fn lookup_without_recheck_is_caught() {
    loom::model(|| {
        let w = world(1, RefStrategy::LockedBit);
        let pfn = cache_first(&w);
        let w2 = w.clone();
        let r = thread::spawn(move || reader(&w2, |i| i.lookup_without_recheck(0)));
        delete_and_reuse(&w, pfn);
        r.join().unwrap();
    });
}

/// Lookup against `add_folio_range` of two locked folios: a reader that finds index 1 gets
/// the batch's second folio with its mapping and index already set, and after waiting for
/// the lock sees it uptodate; a lookup after the batch completed finds it.
#[test]
fn lookup_vs_add_folio_range() {
    loom::model(|| {
        let w = world(2, RefStrategy::LockedBit);
        let pfns: Vec<u32> = (0..2)
            .map(|_| w.arena.alloc(0).unwrap().lock().into_raw_locked().pfn())
            .collect();
        let w2 = w.clone();
        let want = pfns[1];
        let r = thread::spawn(move || {
            let done = w2.settled.load(Ordering::SeqCst);
            let found = w2.index.lookup(1);
            if done {
                assert!(found.is_some(), "inserted batch not visible");
            }
            if let Some(f) = found {
                assert_eq!(f.pfn(), want);
                assert_eq!((f.mapping(), f.index()), (w2.index.mapping_id(), 1));
                f.wait_locked();
                assert!(f.is_uptodate(), "woken before the folio was filled");
            }
        });
        let batch: Vec<FolioLocked<'_>> = pfns
            .iter()
            // SAFETY: the locked references leaked above.
            .map(|&p| unsafe { FolioLocked::from_raw_locked(&w.arena, w.arena.folio(p)) })
            .collect();
        assert_eq!(w.index.add_folio_range(0, 2, &batch), Ok(2));
        w.settled.store(true, Ordering::SeqCst);
        for l in batch {
            drop(l.end_read(true));
        }
        r.join().unwrap();
        finish(&w);
        assert_eq!(w.index.stats().nr_pages, 2);
    });
}

/// Regression (found by `tests/index_stress.rs`): an order-1 folio tagged FIRST covers indices
/// 0 and 1; the reader looks up 1, loads the sibling in slot 1, and before it loads the
/// canonical slot 0 the remover deletes the large folio and caches an order-0 folio at 0. The
/// reader then gets the small folio, which does not contain index 1. The full re-check
/// (reload from slot 1, then `folio_contains`) rejects it.
fn large_replaced_by_small(lookup: fn(&Index, u64) -> Option<FolioRef<'_>>) {
    let w = world(4, RefStrategy::LockedBit);
    // A neighbour at index 3 keeps the leaf alive, so the small folio lands in the same node.
    let keep = w.arena.alloc(0).unwrap().lock();
    w.index.add_folio(&keep, 3).unwrap();
    drop(keep);
    let l = w.arena.alloc(1).unwrap().lock();
    l.set_private(FIRST);
    w.index.add_folio(&l, 0).unwrap();
    let pfn = l.unlock().into_raw().pfn();
    let w2 = w.clone();
    let r = thread::spawn(move || {
        if let Some(f) = lookup(&w2.index, 1) {
            let covers = f.index() <= 1 && 1 < f.index() + f.nr_pages() as u64;
            assert!(
                covers,
                "lookup(1) returned a folio at {} of {} pages",
                f.index(),
                f.nr_pages()
            );
        }
    });
    // SAFETY: the reference leaked above.
    let x = unsafe { FolioRef::from_raw(&w.arena, w.arena.folio(pfn)) }.lock();
    assert!(w.index.delete(&x));
    drop(x);
    let small = w.arena.alloc(0).unwrap().lock();
    small.set_private(SECOND);
    w.index.add_folio(&small, 0).unwrap();
    drop(small);
    r.join().unwrap();
    finish(&w);
}

#[test]
fn lookup_of_a_sibling_vs_large_replaced_by_small() {
    loom::model(|| large_replaced_by_small(|i, n| i.lookup(n)));
}

#[test]
#[should_panic(expected = "lookup(1) returned a folio at 0 of 1 pages")]
fn canonical_only_recheck_is_caught() {
    loom::model(|| large_replaced_by_small(|i, n| i.lookup_with_canonical_recheck(n)));
}

/// `split_folio` against a lockless lookup of the large folio's second page: an order-1 folio
/// tagged FIRST at 0 is replaced by two pages tagged SECOND (page 0) and SECOND + 1 (page 1)
/// under one lock hold. The page is cached throughout, so the lookup never misses; it returns
/// the old folio (still covering index 1, alive while held) or the new page 1, and once the
/// split is complete only the new page.
#[test]
fn lookup_vs_split_folio() {
    loom::model(|| split_vs_lookup(|i, old, pages| i.split_folio(old, pages)));
}

/// The split that empties the slots before it stores the pages: loom must find the lookup
/// that runs in between and misses a page that was cached all along.
#[test]
#[should_panic(expected = "a split never leaves a page uncached")]
fn split_with_a_gap_is_caught() {
    loom::model(|| split_vs_lookup(|i, old, pages| i.split_folio_with_gap(old, pages)));
}

fn split_vs_lookup(split: fn(&Index, &FolioLocked<'_>, &[FolioLocked<'_>]) -> bool) {
    {
        let w = world(4, RefStrategy::LockedBit);
        let l = w.arena.alloc(1).unwrap().lock();
        l.set_private(FIRST);
        w.index.add_folio(&l, 0).unwrap();
        let pfn = l.unlock().into_raw().pfn();
        let w2 = w.clone();
        let r = thread::spawn(move || {
            let done = w2.settled.load(Ordering::SeqCst);
            let f = w2
                .index
                .lookup(1)
                .expect("a split never leaves a page uncached");
            let tag = f.private();
            assert!(f.index() <= 1 && 1 < f.index() + f.nr_pages() as u64);
            assert!(
                tag == FIRST || tag == SECOND + 1,
                "lookup(1) returned the folio tagged {tag}"
            );
            if done {
                assert_eq!(tag, SECOND + 1, "the old folio after the split completed");
            }
            thread::yield_now();
            assert_eq!(f.private(), tag, "folio freed or reused under a reader");
        });
        let pages: Vec<FolioLocked<'_>> = (0..2)
            .map(|i| {
                let p = w.arena.alloc(0).unwrap().lock();
                p.set_private(SECOND + i);
                p
            })
            .collect();
        // SAFETY: the reference leaked above.
        let old = unsafe { FolioRef::from_raw(&w.arena, w.arena.folio(pfn)) }.lock();
        assert!(split(&w.index, &old, &pages));
        w.settled.store(true, Ordering::SeqCst);
        drop(old);
        drop(pages);
        r.join().unwrap();
        finish(&w);
        assert_eq!(w.arena.validate().unwrap().allocated_pages, 2);
    }
}

/// `collapse_folios` against a lockless lookup of the second page: two pages tagged SECOND
/// (page 0) and SECOND + 1 (page 1) are replaced by an order-1 folio tagged FIRST under one
/// lock hold. The page is cached throughout, so the lookup never misses; it returns the old
/// page 1 (alive while held) or the new folio, and once the collapse is complete only the
/// new folio. (The canonical slot is stored first: a lookup that followed the new sibling to
/// the old page 0 fails `folio_contains` and looks again.)
#[test]
fn lookup_vs_collapse_folios() {
    loom::model(|| collapse_vs_lookup(|i, old, new| i.collapse_folios(old, new)));
}

/// The collapse that empties the slots before it stores the new entry: loom must find the
/// lookup that runs in between and misses a page that was cached all along.
#[test]
#[should_panic(expected = "a collapse never leaves a page uncached")]
fn collapse_with_a_gap_is_caught() {
    loom::model(|| collapse_vs_lookup(|i, old, new| i.collapse_folios_with_gap(old, new)));
}

fn collapse_vs_lookup(collapse: fn(&Index, &[FolioLocked<'_>], &FolioLocked<'_>) -> bool) {
    let w = world(4, RefStrategy::LockedBit);
    let mut pfns = Vec::new();
    for i in 0..2u64 {
        let p = w.arena.alloc(0).unwrap().lock();
        p.set_private(SECOND + i);
        w.index.add_folio(&p, i).unwrap();
        pfns.push(p.unlock().into_raw().pfn());
    }
    let w2 = w.clone();
    let r = thread::spawn(move || {
        let done = w2.settled.load(Ordering::SeqCst);
        let f = w2
            .index
            .lookup(1)
            .expect("a collapse never leaves a page uncached");
        let tag = f.private();
        assert!(f.index() <= 1 && 1 < f.index() + f.nr_pages() as u64);
        assert!(
            tag == FIRST || tag == SECOND + 1,
            "lookup(1) returned the folio tagged {tag}"
        );
        if done {
            assert_eq!(tag, FIRST, "an old page after the collapse completed");
        }
        thread::yield_now();
        assert_eq!(f.private(), tag, "folio freed or reused under a reader");
    });
    let new = w.arena.alloc(1).unwrap().lock();
    new.set_private(FIRST);
    // SAFETY: the references leaked above.
    let old: Vec<FolioLocked<'_>> = pfns
        .iter()
        .map(|&pfn| unsafe { FolioRef::from_raw(&w.arena, w.arena.folio(pfn)) }.lock())
        .collect();
    assert!(collapse(&w.index, &old, &new));
    w.settled.store(true, Ordering::SeqCst);
    drop(old);
    drop(new);
    r.join().unwrap();
    finish(&w);
    assert_eq!(w.arena.validate().unwrap().allocated_pages, 2);
}
