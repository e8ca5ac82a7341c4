//! Unit tests of the index: insertion, multi-index entries, growth and shrink, removal.

use super::*;
use crate::mm::folio::{ArenaConfig, FolioLocked, PAGE_SIZE};
use crate::mm::refcount::RefStrategy;

fn setup(pages: usize, s: RefStrategy) -> (Arc<Arena>, Index) {
    let mut c = ArenaConfig::new(pages * PAGE_SIZE, s);
    c.panic_on_bad_page = true;
    let arena = Arc::new(Arena::new(c).unwrap());
    let index = Index::new(arena.clone());
    (arena, index)
}

fn locked(arena: &Arena, order: u32) -> FolioLocked<'_> {
    arena.alloc(order).unwrap().lock()
}

#[test]
fn add_lookup_delete_one() {
    for s in RefStrategy::ALL {
        let (arena, idx) = setup(64, s);
        let f = locked(&arena, 0);
        idx.add_folio(&f, 5).unwrap();
        assert_eq!(f.mapping(), idx.mapping_id());
        assert_eq!(f.index(), 5);
        assert_eq!(f.ref_count(s), 2, "caller + cache");
        assert_eq!(
            idx.add_folio(&f, 6),
            Err(AddError::AlreadyMapped {
                mapping: idx.mapping_id()
            })
        );
        let g = locked(&arena, 0);
        assert_eq!(idx.add_folio(&g, 5), Err(AddError::Exists { index: 5 }));
        assert_eq!(g.ref_count(s), 1, "failed insert leaves no reference");
        drop(g);
        let r = idx.lookup(5).unwrap();
        assert_eq!(r.pfn(), f.pfn());
        assert!(idx.lookup(4).is_none() && idx.lookup(6).is_none());
        assert!(idx.contains(5) && !idx.contains(1 << 40));
        drop(r);
        let st = idx.validate().unwrap();
        assert_eq!((st.nr_pages, st.nr_folios, st.nr_nodes), (1, 1, 1));
        assert!(idx.delete(&f));
        assert!(!idx.delete(&f));
        assert_eq!(f.mapping(), 0);
        assert_eq!(f.ref_count(s), 1);
        assert!(idx.lookup(5).is_none());
        let st = idx.validate().unwrap();
        assert_eq!((st.nr_pages, st.nr_nodes), (0, 0));
        drop(f);
        assert_eq!(arena.validate().unwrap().allocated_pages, 0);
    }
}

#[test]
fn large_folios_are_multi_index_entries() {
    let (arena, idx) = setup(2048, RefStrategy::LockedBit);
    let f2 = locked(&arena, 2);
    assert_eq!(
        idx.add_folio(&f2, 6),
        Err(AddError::Misaligned { index: 6, order: 2 })
    );
    idx.add_folio(&f2, 8).unwrap();
    for i in 8..12 {
        assert_eq!(idx.lookup(i).unwrap().pfn(), f2.pfn(), "index {i}");
    }
    assert!(idx.lookup(12).is_none() && idx.lookup(7).is_none());
    // An order-0 folio inside the order-2 range conflicts; so does an order-3 covering it.
    let g = locked(&arena, 0);
    assert_eq!(idx.add_folio(&g, 10), Err(AddError::Exists { index: 10 }));
    let g3 = locked(&arena, 3);
    assert_eq!(idx.add_folio(&g3, 8), Err(AddError::Exists { index: 8 }));
    // Orders 6..9 live one level up.
    let f9 = locked(&arena, 9);
    idx.add_folio(&f9, 1024).unwrap();
    for i in [1024, 1100, 1535] {
        assert_eq!(idx.lookup(i).unwrap().pfn(), f9.pfn());
    }
    assert!(idx.lookup(1536).is_none());
    let f6 = locked(&arena, 6);
    // 0..64 holds the order-2 folio in a leaf: an order-6 folio at 0 conflicts.
    assert_eq!(idx.add_folio(&f6, 0), Err(AddError::Exists { index: 0 }));
    idx.add_folio(&f6, 64).unwrap();
    assert_eq!(idx.lookup(127).unwrap().pfn(), f6.pfn());
    let st = idx.validate().unwrap();
    assert_eq!(st.nr_pages, 4 + 512 + 64);
    assert!(idx.delete(&f9));
    assert!(idx.lookup(1100).is_none());
    idx.validate().unwrap();
    drop((g, g3));
    // Still pinned by the test (unlocked): truncate detaches them instead of freeing.
    let pins = (f2.unlock(), f6.unlock());
    let r = idx.truncate(0, u64::MAX);
    assert_eq!(
        r,
        RemoveStats {
            folios_freed: 0,
            pages_freed: 0,
            busy: 2
        }
    );
    assert_eq!(idx.validate().unwrap().nr_nodes, 0);
    assert_eq!((pins.0.mapping(), pins.1.mapping()), (0, 0));
    drop((pins, f9));
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}

#[test]
fn tree_grows_and_shrinks_with_far_indices() {
    let (arena, idx) = setup(64, RefStrategy::CasLoop);
    let far = [0u64, 63, 64, 4095, 4096, 1 << 30, (1 << 40) + 7, u64::MAX];
    let folios: Vec<_> = far
        .iter()
        .map(|&i| {
            let f = locked(&arena, 0);
            idx.add_folio(&f, i).unwrap();
            f
        })
        .collect();
    let st = idx.validate().unwrap();
    assert_eq!(st.nr_pages, far.len() as u64);
    for (&i, f) in far.iter().zip(&folios) {
        assert_eq!(idx.lookup(i).unwrap().pfn(), f.pfn());
        assert!(!idx.contains(i ^ 1) || far.contains(&(i ^ 1)));
    }
    // Remove from the far end: the root shrinks back.
    for f in folios.iter().rev().take(far.len() - 1) {
        assert!(idx.delete(f));
        idx.validate().unwrap();
    }
    assert_eq!(
        idx.validate().unwrap().nr_nodes,
        1,
        "a single leaf for index 0"
    );
    drop(folios);
    assert_eq!(idx.invalidate(0, 1).folios_freed, 1);
    assert_eq!(idx.validate().unwrap().nr_nodes, 0);
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}

#[test]
fn add_folio_range_follows_the_seed() {
    let (arena, idx) = setup(256, RefStrategy::LockedBit);
    let batch: Vec<_> = (0..32).map(|_| locked(&arena, 0)).collect();
    let before = idx.stats().lock_acquisitions;
    assert_eq!(idx.add_folio_range(64, 96, &batch), Ok(32));
    assert_eq!(
        idx.stats().lock_acquisitions - before,
        1,
        "one lock hold for the batch"
    );
    for (i, f) in batch.iter().enumerate() {
        assert_eq!(f.index(), 64 + i as u64);
    }
    // A batch running into an occupied index stops there and reports the pages inserted.
    let batch2: Vec<_> = (0..8).map(|_| locked(&arena, 0)).collect();
    assert_eq!(idx.add_folio_range(60, 68, &batch2), Ok(4));
    assert!(batch2[..4].iter().all(|f| f.mapping() == idx.mapping_id()));
    assert!(batch2[4..].iter().all(|f| f.mapping() == 0));
    // Nothing inserted: the error.
    assert_eq!(
        idx.add_folio_range(64, 68, &batch2[4..]),
        Err(AddError::Exists { index: 64 })
    );
    assert_eq!(
        idx.add_folio_range(200, 208, &[]),
        Err(AddError::MissingFolio { index: 200 })
    );
    assert_eq!(idx.add_folio_range(5, 5, &batch2[4..]), Ok(0));
    // Large folios in a batch.
    let big: Vec<_> = (0..4).map(|_| locked(&arena, 2)).collect();
    assert_eq!(idx.add_folio_range(128, 144, &big), Ok(16));
    assert_eq!(idx.lookup(143).unwrap().pfn(), big[3].pfn());
    // A batch shorter than the range: inserted what it had.
    assert_eq!(idx.add_folio_range(144, 200, &batch2[4..]), Ok(4));
    let st = idx.validate().unwrap();
    assert_eq!(st.nr_pages, 32 + 4 + 16 + 4);
    assert_eq!(st.pages_inserted, st.nr_pages);
    drop((batch, batch2, big));
    let r = idx.truncate(0, u64::MAX);
    assert_eq!(r.pages_freed, 56);
    assert_eq!(r.busy, 0);
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}

#[test]
fn nomem_retry_keeps_progress() {
    let (arena, idx) = setup(1024, RefStrategy::CasLoop);
    // A batch spanning many leaves needs more nodes than the pre-lock top-up brings.
    let batch: Vec<_> = (0..640).map(|_| locked(&arena, 0)).collect();
    assert_eq!(
        idx.add_folio_range(1 << 20, (1 << 20) + 640, &batch),
        Ok(640)
    );
    let st = idx.validate().unwrap();
    assert_eq!(st.nr_pages, 640);
    assert!(st.lock_acquisitions >= 1);
    drop(batch);
    assert_eq!(idx.invalidate(0, u64::MAX).pages_freed, 640);
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}

#[test]
fn evict_and_invalidate_respect_pins() {
    for s in RefStrategy::ALL {
        let (arena, idx) = setup(64, s);
        let f = locked(&arena, 1);
        idx.add_folio(&f, 2).unwrap();
        let pin = idx.lookup(3).unwrap();
        // Pinned by a reader: evict refuses and gives the folio back.
        let f = idx.evict(f).unwrap_err();
        assert_eq!(f.mapping(), idx.mapping_id());
        let f = f.unlock();
        // Invalidate: busy, left in place.
        assert_eq!(
            idx.invalidate(0, 10),
            RemoveStats {
                folios_freed: 0,
                pages_freed: 0,
                busy: 1
            }
        );
        assert!(idx.contains(2));
        // Truncate: detached from the index, the pin keeps it alive.
        drop(f);
        assert_eq!(
            idx.truncate(0, 10),
            RemoveStats {
                folios_freed: 0,
                pages_freed: 0,
                busy: 1
            }
        );
        assert!(!idx.contains(2));
        assert_eq!(pin.mapping(), 0);
        assert_eq!(pin.ref_count(s), 1);
        assert_eq!(arena.stats().allocated_pages, 2);
        drop(pin);
        assert_eq!(arena.validate().unwrap().allocated_pages, 0);
        // Unpinned: evict frees.
        let f = locked(&arena, 0);
        idx.add_folio(&f, 0).unwrap();
        idx.evict(f).unwrap();
        assert!(idx.lookup(0).is_none());
        assert_eq!(arena.validate().unwrap().allocated_pages, 0);
        idx.validate().unwrap();
    }
}

#[test]
fn invalidate_skips_locked_truncate_waits() {
    let (arena, idx) = setup(64, RefStrategy::LockedBit);
    let f = locked(&arena, 0);
    idx.add_folio(&f, 0).unwrap();
    assert_eq!(idx.invalidate(0, 1).busy, 1, "locked: skipped");
    let idx = Arc::new(idx);
    let t = {
        let idx = idx.clone();
        crate::mm::sync::thread::spawn(move || idx.truncate(0, 1))
    };
    while arena.wait_table_sleepers() == 0 {
        std::thread::yield_now();
    }
    // Unlocking wakes the truncater, which may try to freeze the folio before this thread
    // has dropped its own reference: then the folio is detached and freed by our drop
    // (`busy`) instead of by truncate itself. Either way it leaves the index exactly once.
    drop(f.end_read(true));
    let r = t.join().unwrap();
    assert_eq!(r.folios_freed + r.busy, 1, "{r:?}");
    assert_eq!(idx.stats().nr_folios, 0);
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}

#[test]
fn drop_releases_the_cache_references() {
    let (arena, idx) = setup(64, RefStrategy::CasLoop);
    let kept = locked(&arena, 0);
    idx.add_folio(&kept, 1).unwrap();
    let kept = kept.unlock();
    for i in 2..10 {
        let f = locked(&arena, 0);
        idx.add_folio(&f, i * 100).unwrap();
    }
    drop(idx);
    assert_eq!(kept.mapping(), 0);
    assert_eq!(arena.stats().allocated_pages, 1);
    drop(kept);
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}

// ---------------------------------------------------------------------------------------
// Shadow entries (workingset)
// ---------------------------------------------------------------------------------------

fn shadow(v: u64) -> Shadow {
    Shadow::new(v).unwrap()
}

/// Caches a new folio of `order` at `index` and evicts it leaving `v` as its shadow.
fn cache_and_reclaim(arena: &Arena, idx: &Index, index: u64, order: u32, v: u64) {
    let f = locked(arena, order);
    idx.add_folio(&f, index).unwrap();
    idx.evict_with_shadow(f, |_| Some(shadow(v))).unwrap();
}

#[test]
fn shadow_values_are_checked() {
    assert!(Shadow::new(0).is_none(), "zero is the empty slot");
    assert!(Shadow::new(1 << Shadow::BITS).is_none());
    assert_eq!(
        Shadow::new((1 << Shadow::BITS) - 1).unwrap().value() >> 61,
        1
    );
}

#[test]
fn reclaim_leaves_a_shadow_that_no_lookup_returns() {
    for s in RefStrategy::ALL {
        let (arena, idx) = setup(64, s);
        let f = locked(&arena, 0);
        idx.add_folio(&f, 5).unwrap();
        let mut called = false;
        idx.evict_with_shadow(f, |frozen| {
            called = true;
            assert!(frozen.is_frozen(s), "the shadow is made after the freeze");
            Some(shadow(77))
        })
        .unwrap();
        assert!(called);
        assert!(idx.lookup(5).is_none() && !idx.contains(5));
        let st = idx.validate().unwrap();
        assert_eq!(
            (st.nr_pages, st.nr_folios, st.nr_shadows, st.nr_nodes),
            (0, 0, 1, 1)
        );
        assert_eq!(st.shadow_nodes, 1, "a leaf holding only the shadow");
        assert_eq!(idx.shadow_nodes().nodes(), 1);
        assert_eq!(arena.validate().unwrap().allocated_pages, 0);
        // The next insertion at 5 takes the shadow out and hands it back.
        let g = locked(&arena, 0);
        assert_eq!(idx.add_folio_shadow(&g, 5), Ok(Some(shadow(77))));
        assert_eq!(idx.lookup(5).unwrap().pfn(), g.pfn());
        let st = idx.validate().unwrap();
        assert_eq!(
            (st.nr_shadows, st.shadow_nodes, st.shadows_replaced),
            (0, 0, 1)
        );
        assert_eq!(idx.shadow_nodes().nodes(), 0);
        // An insertion over nothing finds no shadow.
        let h = locked(&arena, 0);
        assert_eq!(idx.add_folio_shadow(&h, 6), Ok(None));
    }
}

#[test]
fn a_pinned_folio_is_not_replaced_by_its_shadow() {
    let (arena, idx) = setup(64, RefStrategy::LockedBit);
    let f = locked(&arena, 0);
    idx.add_folio(&f, 3).unwrap();
    let pin = idx.lookup(3).unwrap();
    let f = idx
        .evict_with_shadow(f, |_| unreachable!("no shadow for a folio that stays"))
        .unwrap_err();
    assert_eq!(idx.lookup(3).unwrap().pfn(), pin.pfn());
    assert_eq!(idx.validate().unwrap().nr_shadows, 0);
    drop((f, pin));
}

#[test]
fn evict_without_shadow_and_delete_leave_nothing() {
    let (arena, idx) = setup(64, RefStrategy::CasLoop);
    let f = locked(&arena, 0);
    idx.add_folio(&f, 9).unwrap();
    idx.evict_with_shadow(f, |_| None).unwrap();
    let g = locked(&arena, 0);
    idx.add_folio(&g, 10).unwrap();
    idx.evict(g).unwrap();
    let st = idx.validate().unwrap();
    assert_eq!((st.nr_shadows, st.nr_nodes), (0, 0));
}

#[test]
fn truncate_and_invalidate_remove_shadows() {
    let (arena, idx) = setup(256, RefStrategy::LockedBit);
    for i in 0..200 {
        cache_and_reclaim(&arena, &idx, i, 0, i + 1);
    }
    // A folio read again at 100 replaces its shadow and stays cached.
    let kept = locked(&arena, 0);
    assert_eq!(idx.add_folio_shadow(&kept, 100), Ok(Some(shadow(101))));
    drop(kept);
    let st = idx.validate().unwrap();
    assert_eq!(st.nr_shadows, 199, "index 100's shadow was replaced");
    // 0..64 and 128..192 hold only shadows; 64..128 holds the folio at 100.
    assert_eq!(st.shadow_nodes, 3);
    // Invalidating 10..20 drops those shadows only.
    idx.invalidate(10, 20);
    let st = idx.validate().unwrap();
    assert_eq!(st.nr_shadows, 189);
    assert_eq!(st.shadows_cleared, 10);
    let g = locked(&arena, 0);
    assert_eq!(idx.add_folio_shadow(&g, 15), Ok(None));
    let h = locked(&arena, 0);
    assert_eq!(idx.add_folio_shadow(&h, 21), Ok(Some(shadow(22))));
    drop((g, h));
    // Truncation drops every shadow and every node (the folios go too).
    idx.truncate(0, u64::MAX);
    let st = idx.validate().unwrap();
    assert_eq!((st.nr_shadows, st.shadow_nodes, st.nr_nodes), (0, 0, 0));
    assert_eq!(idx.shadow_nodes().nodes(), 0);
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}

#[test]
fn shadow_nodes_are_listed_and_shrunk_oldest_first() {
    let (arena, idx) = setup(64, RefStrategy::LockedBit);
    // Three leaves of shadows, made shadow-only in the order 128.., 0.., 64...
    for base in [128u64, 0, 64] {
        for i in base..base + 64 {
            cache_and_reclaim(&arena, &idx, i, 0, i + 1);
        }
    }
    let st = idx.validate().unwrap();
    assert_eq!((st.shadow_nodes, st.nr_shadows, st.nr_nodes), (3, 192, 4));
    assert_eq!(idx.shadow_nodes().nodes(), 3);
    // A folio in the 0.. leaf takes it off the list; evicting it (no shadow) puts it back
    // as the newest.
    let f = locked(&arena, 0);
    assert_eq!(idx.add_folio_shadow(&f, 3), Ok(Some(shadow(4))));
    assert_eq!(idx.validate().unwrap().shadow_nodes, 2);
    idx.evict(f).unwrap();
    assert_eq!(idx.validate().unwrap().shadow_nodes, 3);
    // The shrinker frees the oldest first: the 128.. leaf, then the 64.. one.
    assert_eq!(idx.shrink_shadow_nodes(1), 1);
    let g = locked(&arena, 0);
    assert_eq!(
        idx.add_folio_shadow(&g, 130),
        Ok(None),
        "its shadows are gone"
    );
    assert!(idx.delete(&g));
    drop(g);
    assert_eq!(idx.shrink_shadow_nodes(1), 1);
    let h = locked(&arena, 0);
    assert_eq!(idx.add_folio_shadow(&h, 70), Ok(None));
    let k = locked(&arena, 0);
    assert_eq!(idx.add_folio_shadow(&k, 10), Ok(Some(shadow(11))));
    drop((h, k));
    let st = idx.validate().unwrap();
    assert_eq!(st.shadow_nodes_reclaimed, 2);
    assert_eq!(idx.shadow_nodes().reclaimed(), 2);
    // Asking for more than there is frees what there is; then the tree holds only folios.
    assert_eq!(
        idx.shrink_shadow_nodes(100),
        0,
        "the 0.. leaf holds a folio now"
    );
    idx.truncate(0, u64::MAX);
    let st = idx.validate().unwrap();
    assert_eq!((st.nr_nodes, st.shadow_nodes), (0, 0));
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}

#[test]
fn large_folio_shadows_split_and_merge() {
    let (arena, idx) = setup(2048, RefStrategy::LockedBit);
    // An order-2 shadow: one copy per slot; a small folio inside takes exactly its slot.
    cache_and_reclaim(&arena, &idx, 8, 2, 42);
    assert_eq!(idx.validate().unwrap().nr_shadows, 4);
    let a = locked(&arena, 0);
    assert_eq!(idx.add_folio_shadow(&a, 10), Ok(Some(shadow(42))));
    assert!(idx.lookup(9).is_none() && idx.lookup(11).is_none());
    assert_eq!(idx.validate().unwrap().nr_shadows, 3);
    // An order-3 folio over 8..16 conflicts with the folio at 10, not with shadows.
    let b = locked(&arena, 3);
    assert_eq!(
        idx.add_folio_shadow(&b, 8),
        Err(AddError::Exists { index: 8 })
    );
    assert!(idx.delete(&a));
    assert_eq!(idx.add_folio_shadow(&b, 8), Ok(Some(shadow(42))));
    assert_eq!(idx.validate().unwrap().nr_shadows, 0);
    drop((a, b));
    // An order-7 shadow one level up: a small folio below it splits it into a node of copies.
    cache_and_reclaim(&arena, &idx, 1024, 7, 99);
    let st = idx.validate().unwrap();
    assert_eq!(st.nr_shadows, 2, "two slots of 64 pages each");
    let c = locked(&arena, 0);
    assert_eq!(idx.add_folio_shadow(&c, 1100), Ok(Some(shadow(99))));
    let st = idx.validate().unwrap();
    assert_eq!(st.nr_shadows, 1 + 63);
    let d = locked(&arena, 0);
    assert_eq!(
        idx.add_folio_shadow(&d, 1030),
        Ok(Some(shadow(99))),
        "the split copy"
    );
    // An order-6 folio over the leaf of shadows left by the split frees it.
    assert!(idx.delete(&c));
    let e = locked(&arena, 6);
    assert_eq!(idx.add_folio_shadow(&e, 1088), Ok(Some(shadow(99))));
    let st = idx.validate().unwrap();
    assert_eq!(st.nr_shadows, 63, "only the leaf under 1024 remains");
    assert_eq!(idx.lookup(1100).unwrap().pfn(), e.pfn());
    drop((c, d, e));
    idx.truncate(0, u64::MAX);
    let st = idx.validate().unwrap();
    assert_eq!((st.nr_nodes, st.nr_shadows), (0, 0));
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}

#[test]
fn batched_insertion_hands_back_each_shadow() {
    let (arena, idx) = setup(64, RefStrategy::CasLoop);
    for i in [1u64, 3] {
        cache_and_reclaim(&arena, &idx, i, 0, 10 + i);
    }
    let batch: Vec<_> = (0..4).map(|_| locked(&arena, 0)).collect();
    let mut shadows = [Some(shadow(5)); 4];
    assert_eq!(
        idx.add_folio_range_shadows(0, 4, &batch, &mut shadows),
        Ok(4)
    );
    assert_eq!(shadows, [None, Some(shadow(11)), None, Some(shadow(13))]);
    let st = idx.validate().unwrap();
    assert_eq!((st.nr_shadows, st.shadow_nodes, st.nr_pages), (0, 0, 4));
}

#[test]
fn dropping_an_index_gives_back_its_shadow_nodes() {
    let (arena, idx) = setup(256, RefStrategy::LockedBit);
    let shared = idx.shadow_nodes().clone();
    let other = Index::with_shadow_nodes(arena.clone(), Arc::new(Rcu::new()), shared.clone());
    for i in 0..130 {
        cache_and_reclaim(&arena, &idx, i, 0, 1);
        cache_and_reclaim(&arena, &other, i * 64, 0, 1);
    }
    assert_eq!(shared.nodes(), 3 + 130);
    drop(idx);
    assert_eq!(shared.nodes(), 130);
    drop(other);
    assert_eq!(shared.nodes(), 0);
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}

#[test]
fn a_batch_eviction_frees_what_it_can_under_one_lock_hold() {
    for s in RefStrategy::ALL {
        let (arena, idx) = setup(64, s);
        let other = Index::new(arena.clone());
        let mut batch = Vec::new();
        for i in 0..6u64 {
            let f = locked(&arena, if i == 3 { 2 } else { 0 });
            idx.add_folio(&f, i * 8).unwrap();
            batch.push(f);
        }
        // Pinned by a reader: must stay, locked, and keep its slot.
        let pin = idx.lookup(8).unwrap();
        // Of another file: must be left alone.
        let stranger = locked(&arena, 0);
        other.add_folio(&stranger, 0).unwrap();
        batch.push(stranger);
        let before = idx.stats().lock_acquisitions;
        let mut kept = Vec::new();
        let mut shadows = 0;
        let freed = idx.evict_batch_with_shadow(
            batch,
            |f| {
                shadows += 1;
                assert!(f.is_frozen(s));
                Some(shadow(f.index() + 1))
            },
            &mut kept,
        );
        assert_eq!(idx.stats().lock_acquisitions - before, 1, "one lock hold");
        assert_eq!(freed, 4 + 4, "four order-0 folios and one order-2");
        assert_eq!(shadows, 5);
        let mut kept_at: Vec<_> = kept.iter().map(|f| (f.mapping(), f.index())).collect();
        kept_at.sort();
        let mut want = vec![(idx.mapping_id(), 8), (other.mapping_id(), 0)];
        want.sort();
        assert_eq!(kept_at, want);
        assert!(kept.iter().all(|f| f.is_locked()));
        assert_eq!(idx.lookup(8).unwrap().pfn(), pin.pfn());
        let st = idx.validate().unwrap();
        // The order-2 folio's shadow fills its four slots.
        assert_eq!((st.nr_folios, st.nr_shadows), (1, 4 + 4));
        for i in [0u64, 2, 3, 4, 5] {
            assert!(idx.lookup(i * 8).is_none());
        }
        drop(kept);
        drop(pin);
        idx.truncate(0, u64::MAX);
        other.truncate(0, u64::MAX);
        assert_eq!(arena.validate().unwrap().allocated_pages, 0);
    }
}

/// `split_folio` of a leaf-level (order 3) and a node-level (order 7) folio: every page of
/// the old folio then resolves to its own page-sized folio, the old one leaves the mapping
/// with only the holders' references, and the tree (new leaf nodes included) validates; a
/// pinned old folio survives the split and is freed by its holder.
#[test]
fn split_folio_gives_each_page_its_own_folio() {
    for (order, at) in [(3u32, 8u64), (7, 128)] {
        let (arena, idx) = setup(1024, RefStrategy::LockedBit);
        let s = arena.strategy();
        let nr = 1usize << order;
        let old = locked(&arena, order);
        idx.add_folio(&old, at).unwrap();
        let pin = idx.lookup(at + 1).unwrap();
        let pages: Vec<_> = (0..nr).map(|_| locked(&arena, 0)).collect();
        // Wrong counts or a foreign folio are refused without a change.
        assert!(!idx.split_folio(&old, &pages[1..]));
        assert!(!idx.split_folio(&pages[0], &pages[..1]));
        let nodes_before = idx.stats().nr_nodes;
        assert!(idx.split_folio(&old, &pages));
        assert_eq!(old.mapping(), 0);
        assert_eq!(old.ref_count(s), 2, "the caller and the pin");
        for (i, p) in pages.iter().enumerate() {
            let f = idx.lookup(at + i as u64).unwrap();
            assert_eq!(
                (f.pfn(), f.index(), f.nr_pages()),
                (p.pfn(), at + i as u64, 1)
            );
        }
        let st = idx.validate().unwrap();
        assert_eq!(
            (st.nr_pages, st.nr_folios, st.splits),
            (nr as u64, nr as u64, 1)
        );
        if order >= 6 {
            assert_eq!(
                st.nr_nodes,
                nodes_before + (nr / 64) as u64,
                "one leaf per slot"
            );
        }
        drop((old, pin));
        drop(pages);
        assert_eq!(idx.truncate(0, u64::MAX).pages_freed, nr as u64);
        idx.validate().unwrap();
        assert_eq!(arena.validate().unwrap().allocated_pages, 0);
    }
}

/// `collapse_folios` of two pages and an order-1 folio covering an aligned order-2 range: every page then resolves to the new
/// folio, the old ones leave the mapping with only the holders' references, and the tree
/// validates; ranges that are not whole, not aligned or not this index's are refused.
#[test]
fn collapse_folios_puts_one_large_folio_in_place_of_a_run() {
    let (arena, idx) = setup(1024, RefStrategy::LockedBit);
    let s = arena.strategy();
    // Pages 8 and 9 alone, 10..12 in an order-1 folio.
    let (a, b, c) = (locked(&arena, 0), locked(&arena, 0), locked(&arena, 1));
    idx.add_folio(&a, 8).unwrap();
    idx.add_folio(&b, 9).unwrap();
    idx.add_folio(&c, 10).unwrap();
    let pin = idx.lookup(11).unwrap();
    let new = locked(&arena, 2);
    let big = locked(&arena, 3);
    // Not the whole range, or a folio of the wrong size: refused without a change.
    assert!(!idx.collapse_folios(&[], &new));
    assert!(!idx.collapse_folios(std::slice::from_ref(&a), &new));
    let old = [a, b, c];
    assert!(!idx.collapse_folios(&old[..2], &new));
    assert!(!idx.collapse_folios(&old, &big));
    assert_eq!(idx.validate().unwrap().nr_folios, 3);
    assert!(idx.collapse_folios(&old, &new));
    for i in 8..12 {
        let f = idx.lookup(i).unwrap();
        assert_eq!((f.pfn(), f.index(), f.nr_pages()), (new.pfn(), 8, 4));
    }
    for f in &old {
        assert_eq!(f.mapping(), 0);
    }
    assert_eq!(old[2].ref_count(s), 2, "the caller and the pin");
    assert_eq!(old[0].ref_count(s), 1, "the caller");
    // Refused again: the old folios left the index.
    assert!(!idx.collapse_folios(&old, &locked(&arena, 2)));
    let st = idx.validate().unwrap();
    assert_eq!((st.nr_pages, st.nr_folios, st.collapses), (4, 1, 1));
    drop((old, pin, big));
    drop(new);
    assert_eq!(idx.truncate(0, u64::MAX).pages_freed, 4);
    idx.validate().unwrap();
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}
