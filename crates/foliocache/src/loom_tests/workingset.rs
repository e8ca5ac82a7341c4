//! Loom models of shadow entries in the page-cache index: the lockless lookup (RCU walk,
//! speculative `try_get`, re-check) against reclaim replacing a folio by its shadow
//! (`evict_with_shadow`: freeze, then the value entry) and an insertion replacing the shadow
//! by a new folio in the same frame (`add_folio_shadow`, which must hand the shadow back).
//!
//! The arena has one frame, so the refaulting folio reuses the evicted one's frame at once: a
//! lookup that kept the wrong life is visible as the wrong `private` tag. A deliberately
//! wrong eviction, which publishes the shadow before it tries the freeze, must be caught: a
//! reader holding the folio sees it vanish from the index although it stays cached.

use super::index_world::{cache_first, world, World, FIRST, SECOND};
use crate::mm::folio::FolioRef;
use crate::mm::index::{Index, Shadow};
use crate::mm::refcount::RefStrategy;
use crate::mm::sync::{thread, Ordering};

fn shadow() -> Shadow {
    Shadow::new(0x5ad).unwrap()
}

/// The reclaimer's isolated folio.
fn isolated(w: &World, pfn: u32) -> FolioRef<'_> {
    // SAFETY: the reference leaked by `cache_first`.
    unsafe { FolioRef::from_raw(&w.arena, w.arena.folio(pfn)) }
}

fn finish(w: &World) {
    w.rcu.barrier();
    w.index.validate().unwrap();
    assert_eq!(w.arena.stats().bad_pages, 0);
}

/// Reclaim replaces the folio by its shadow, then a read brings the page back in the same
/// frame, replacing the shadow. A concurrent lookup returns nothing, or one of the two lives
/// of index 0, with the right identity, and keeps it alive while holding it; a lookup that
/// starts after the refault finds the new folio. The insertion gets the shadow back exactly
/// when reclaim left one.
#[test]
fn lookup_vs_shadow_replacement_and_refault() {
    for s in [RefStrategy::CasLoop, RefStrategy::LockedBit] {
        loom::model(move || {
            let w = world(1, s);
            let pfn = cache_first(&w);
            let w2 = w.clone();
            let r = thread::spawn(move || {
                let refaulted = w2.settled.load(Ordering::SeqCst);
                let found = w2.index.lookup(0);
                if refaulted {
                    let f = found.as_ref().expect("the refaulted folio is cached");
                    assert_eq!(f.private(), SECOND);
                }
                if let Some(f) = found {
                    let tag = f.private();
                    assert!(tag == FIRST || tag == SECOND, "tag {tag}");
                    assert_eq!((f.mapping(), f.index()), (w2.index.mapping_id(), 0));
                    thread::yield_now();
                    assert_eq!(f.private(), tag, "folio freed or reused under a reader");
                }
            });
            let evicted = w
                .index
                .evict_with_shadow(isolated(&w, pfn).lock(), |_| Some(shadow()))
                .is_ok();
            if evicted {
                // The page is read again: a new folio in the same (only) frame.
                let l = w.arena.alloc(0).unwrap().lock();
                l.set_private(SECOND);
                assert_eq!(w.index.add_folio_shadow(&l, 0), Ok(Some(shadow())));
                drop(l);
                w.settled.store(true, Ordering::SeqCst);
            }
            r.join().unwrap();
            finish(&w);
            let st = w.index.stats();
            assert_eq!((st.nr_pages, st.nr_shadows), (1, 0));
        });
    }
}

/// A reader that holds the folio keeps it cached: reclaim's freeze fails and the slot never
/// changes, so a second lookup by the same reader finds the same folio. `evict` is the
/// reclaimer under test.
fn pinned_folio_stays_visible(evict: fn(&Index, crate::mm::folio::FolioLocked<'_>) -> bool) {
    loom::model(move || {
        let w = world(1, RefStrategy::LockedBit);
        let pfn = cache_first(&w);
        let w2 = w.clone();
        let r = thread::spawn(move || {
            if let Some(f) = w2.index.lookup(0) {
                let again = w2.index.lookup(0);
                assert_eq!(
                    again.map(|g| g.pfn()),
                    Some(f.pfn()),
                    "a folio this reader holds vanished from the index"
                );
            }
        });
        let evicted = evict(&w.index, isolated(&w, pfn).lock());
        r.join().unwrap();
        finish(&w);
        let st = w.index.stats();
        assert_eq!(
            (st.nr_pages, st.nr_shadows),
            if evicted { (0, 1) } else { (1, 0) }
        );
    });
}

#[test]
fn a_held_folio_is_never_replaced_by_its_shadow() {
    pinned_folio_stays_visible(|i, f| i.evict_with_shadow(f, |_| Some(shadow())).is_ok());
}

/// The weakened eviction (shadow stored before the freeze, put back if the freeze fails):
/// loom must find the reader's second lookup missing a folio it holds.
#[test]
#[should_panic(expected = "vanished from the index")]
fn shadow_before_freeze_is_caught() {
    pinned_folio_stays_visible(|i, f| i.evict_shadow_before_freeze(f, shadow()).is_ok());
}

/// The same under reclaim's batched eviction (`evict_batch_with_shadow`, one index-lock hold
/// for a step's folios of a file): a folio the reader holds is handed back in `kept`, never
/// replaced by its shadow.
#[test]
fn a_held_folio_is_never_replaced_by_its_shadow_in_a_batch() {
    pinned_folio_stays_visible(|i, f| {
        let mut kept = Vec::new();
        let freed = i.evict_batch_with_shadow(vec![f], |_| Some(shadow()), &mut kept);
        assert_eq!((freed, kept.len()), if freed > 0 { (1, 0) } else { (0, 1) });
        drop(kept);
        freed > 0
    });
}
