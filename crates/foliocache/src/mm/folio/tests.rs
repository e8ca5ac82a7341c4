//! Unit tests of the arena, the folio handles and the folio lock.

use super::flags::*;
use super::*;
use crate::mm::refcount::RefStrategy;
use crate::mm::sync::{thread, Arc};
use std::time::Duration;

fn arena(pages: usize, s: RefStrategy) -> Arena {
    let mut c = ArenaConfig::new(pages * PAGE_SIZE, s);
    c.panic_on_bad_page = false;
    Arena::new(c).unwrap()
}

#[test]
fn header_is_one_cache_line() {
    assert_eq!(std::mem::size_of::<Folio>(), 64);
}

#[test]
fn config_errors_explain_the_fix() {
    let e = Arena::new(ArenaConfig::new(100, RefStrategy::CasLoop)).unwrap_err();
    assert!(matches!(
        e,
        ArenaError::BudgetTooSmall { budget_bytes: 100 }
    ));
    assert!(e.to_string().contains("at least 4096"));
}

#[test]
fn alloc_and_free_every_order_returns_to_baseline() {
    for s in RefStrategy::ALL {
        let a = arena(1024 + 3, s);
        let base = a.validate().unwrap();
        assert_eq!(base.free_pages, 1027);
        for order in 0..=MAX_ORDER {
            let f = a.alloc(order).unwrap();
            assert_eq!(f.order(), order);
            assert_eq!(f.nr_pages(), 1 << order);
            assert_eq!(f.pfn() % (1 << order), 0, "naturally aligned");
            assert_eq!(f.ref_count(s), 1);
            assert_eq!(f.flags(), 0);
            assert_eq!(f.mapping(), 0);
            let st = a.validate().unwrap();
            assert_eq!(st.allocated_folios[order as usize], 1);
            assert_eq!(st.allocated_pages, 1 << order);
            let pfn = f.pfn();
            drop(f);
            assert!(a.folio(pfn).is_frozen(s));
            assert_eq!(a.folio(pfn).state(), STATE_FREE);
        }
        let end = a.validate().unwrap();
        assert_eq!(end.free_pages, base.free_pages);
        assert_eq!(end.allocated_pages, 0);
        assert_eq!(end.allocations, (MAX_ORDER + 1) as u64);
        assert_eq!(end.frees, end.allocations);
        assert_eq!(end.bad_pages, 0);
        assert_eq!(
            a.alloc(MAX_ORDER + 1).unwrap_err(),
            AllocError::OrderTooLarge {
                order: MAX_ORDER + 1
            }
        );
    }
}

#[test]
fn budget_exhaustion_is_a_typed_error_and_recovers() {
    let a = arena(64, RefStrategy::LockedBit);
    let held: Vec<_> = (0..16).map(|_| a.alloc(2).unwrap()).collect();
    let err = a.alloc(0).unwrap_err();
    assert_eq!(
        err,
        AllocError::OutOfMemory {
            order: 0,
            free_pages: 0
        }
    );
    assert!(err.to_string().contains("larger memory budget"));
    assert_eq!(a.stats().alloc_failures, 1);
    drop(held);
    // Everything merged back (after the per-CPU lists drain on the failing path).
    let big = a.alloc(6).unwrap();
    assert_eq!(big.nr_pages(), 64);
    drop(big);
    let st = a.validate().unwrap();
    assert_eq!(st.free_pages, 64);
}

#[test]
fn fragmentation_reports_free_pages() {
    let mut c = ArenaConfig::new(8 * PAGE_SIZE, RefStrategy::CasLoop);
    c.per_cpu_lists = false;
    let a = Arena::new(c).unwrap();
    let mut v: Vec<_> = (0..8).map(|_| a.alloc(0).unwrap()).collect();
    // Free every other one: 4 pages free but no order-1 block.
    let mut i = 0;
    v.retain(|_| {
        i += 1;
        i % 2 == 0
    });
    assert_eq!(
        a.alloc(1).unwrap_err(),
        AllocError::OutOfMemory {
            order: 1,
            free_pages: 4
        }
    );
    drop(v);
    assert_eq!(a.alloc(3).unwrap().nr_pages(), 8);
}

#[test]
fn bad_page_flags_at_free_are_counted_then_sanitised() {
    for s in RefStrategy::ALL {
        let a = arena(16, s);
        let f = a.alloc(0).unwrap();
        let pfn = f.pfn();
        f.set_flag(PG_LRU | PG_ACTIVE);
        drop(f);
        let st = a.validate().unwrap();
        assert_eq!(st.bad_pages, 1);
        assert_eq!(st.allocated_pages, 0, "freed anyway");
        let report = a.last_bad_page().unwrap();
        assert!(report.contains("lru|active"), "{report}");
        assert_eq!(a.folio(pfn).flags(), 0);
        // Flags that are not checked at free are simply cleared.
        let f = a.alloc(0).unwrap();
        f.set_flag(PG_REFERENCED | PG_READAHEAD | PG_WORKINGSET);
        drop(f);
        assert_eq!(a.validate().unwrap().bad_pages, 1);
    }
}

#[test]
fn bad_page_mapping_left_and_locked_at_free() {
    let a = arena(16, RefStrategy::CasLoop);
    let f = a.alloc(0).unwrap();
    f.set_mapping(7, 3);
    drop(f);
    assert_eq!(a.stats().bad_pages, 1);
    assert!(a.last_bad_page().unwrap().contains("still in mapping 7"));
    // Frozen while locked is fine (the freezer drops the lock) ...
    let l = a.alloc(0).unwrap().lock();
    // SAFETY: the handle owns the only reference.
    unsafe { l.freeze(1) }.unwrap().free();
    assert_eq!(a.stats().bad_pages, 1);
    // ... but leaking the lock into the free path is a bad page.
    let l = a.alloc(0).unwrap().lock();
    let r = l.folio_ref().clone();
    std::mem::forget(l); // lock bit and one reference leaked
                         // SAFETY: we own the reference leaked by `forget` (counted once) plus `r`'s.
    let leaked = unsafe { FolioRef::from_raw(&a, r.folio()) };
    drop(leaked);
    drop(r);
    assert_eq!(a.stats().bad_pages, 2);
    assert!(a.last_bad_page().unwrap().contains("locked"));
    a.validate().unwrap();
}

#[test]
fn mlocked_and_anon_are_cleared_not_bad() {
    let a = arena(16, RefStrategy::LockedBit);
    let mut l = a.alloc(0).unwrap().lock();
    let id = a.new_mapping_id();
    l.set_anon(id, 0);
    l.set_flag(PG_MLOCKED);
    drop(l);
    let st = a.validate().unwrap();
    assert_eq!(st.bad_pages, 0);
    assert_eq!(st.mlocked_freed, 1);
}

#[test]
#[should_panic(expected = "Bad page state")]
fn bad_page_panics_when_configured() {
    let mut c = ArenaConfig::new(16 * PAGE_SIZE, RefStrategy::CasLoop);
    c.panic_on_bad_page = true;
    let a = Arena::new(c).unwrap();
    let f = a.alloc(0).unwrap();
    f.set_flag(PG_UNEVICTABLE);
    drop(f);
}

#[test]
#[should_panic(expected = "folio lock holder")]
fn protected_flags_are_refused() {
    let a = arena(4, RefStrategy::CasLoop);
    a.alloc(0).unwrap().set_flag(PG_UPTODATE);
}

#[test]
fn bad_page_at_prep_catches_writes_to_free_folios() {
    let mut c = ArenaConfig::new(PAGE_SIZE, RefStrategy::CasLoop);
    c.panic_on_bad_page = false;
    c.per_cpu_lists = false;
    let a = Arena::new(c).unwrap();
    // A stale pointer writes a flag on a free folio.
    a.folio(0).set_flag(PG_REFERENCED);
    let f = a.alloc(0).unwrap();
    assert_eq!(f.flags(), 0);
    drop(f);
    let st = a.validate().unwrap();
    assert_eq!(st.bad_pages, 1);
    assert!(a.last_bad_page().unwrap().contains("allocation"));
}

#[test]
fn try_get_fails_on_free_and_frozen_folios() {
    for s in RefStrategy::ALL {
        let a = arena(4, s);
        assert!(a.try_get(a.folio(0)).is_none(), "never allocated");
        let f = a.alloc(0).unwrap();
        let pfn = f.pfn();
        let g = a.try_get(a.folio(pfn)).unwrap();
        assert_eq!(f.ref_count(s), 2);
        drop(g);
        let frozen = f.freeze_sole().unwrap();
        assert!(a.try_get(a.folio(pfn)).is_none(), "frozen");
        // SAFETY: one reference: ours.
        let f = unsafe { frozen.unfreeze(1) };
        assert_eq!(f.ref_count(s), 1);
        let extra = f.clone();
        let f = f.freeze_sole().unwrap_err();
        drop(extra);
        drop(f);
        assert!(a.try_get(a.folio(pfn)).is_none(), "freed");
        a.validate().unwrap();
    }
}

#[test]
fn data_discipline() {
    let a = arena(8, RefStrategy::LockedBit);
    let mut l = a.alloc(1).unwrap().lock();
    assert!(l.data().is_none(), "not uptodate yet");
    let buf = l.data_mut().unwrap();
    assert_eq!(buf.len(), 2 * PAGE_SIZE);
    for (i, b) in buf.iter_mut().enumerate() {
        *b = i as u8;
    }
    let r = l.end_read(true);
    assert!(r.is_uptodate() && !r.is_locked());
    let d = r.data().unwrap();
    assert_eq!(d[4097], 4097u16 as u8);
    let mut l = r.lock();
    assert!(l.data_mut().is_none(), "uptodate bytes are final");
    let mut out = [0u8; 3];
    assert!(l.read_racy(10, &mut out, &a));
    assert_eq!(out, [10, 11, 12]);
    assert!(
        !l.write_racy(0, &[1], &a),
        "page-cache folios are not racy-writable"
    );
    drop(l);
    // Failed read: error set, not uptodate.
    let l = a.alloc(0).unwrap().lock();
    let r = l.end_read(false);
    assert!(r.test_flag(PG_ERROR) && !r.is_uptodate() && r.data().is_none());
    drop(r);
    a.validate().unwrap();
}

#[test]
fn anon_folios_use_racy_copies() {
    let a = arena(8, RefStrategy::CasLoop);
    let mut l = a.alloc(0).unwrap().lock();
    l.set_anon(a.new_mapping_id(), 0);
    l.data_mut().unwrap().fill(0);
    l.mark_uptodate();
    let r = l.unlock();
    assert!(r.data().is_none(), "anon bytes are not a shared slice");
    assert!(r.write_racy(100, b"hello", &a));
    let mut out = [0u8; 7];
    assert!(r.read_racy(99, &mut out, &a));
    assert_eq!(&out, b"\0hello\0");
    assert!(!r.read_racy(PAGE_SIZE - 2, &mut out, &a), "out of range");
}

#[test]
fn lock_waiters_sleep_and_wake() {
    let a = Arc::new(arena(8, RefStrategy::LockedBit));
    let pfn;
    let held = {
        let l = a.alloc(0).unwrap().lock();
        pfn = l.pfn();
        l.into_raw_locked()
    };
    let mut waiters = Vec::new();
    for i in 0..3 {
        let a = a.clone();
        waiters.push(thread::spawn(move || {
            let r = a.try_get(a.folio(pfn)).unwrap();
            if i == 0 {
                r.wait_locked();
                assert!(r.is_uptodate(), "woken after end_read");
            } else {
                let l = r.lock();
                assert!(l.is_uptodate());
            }
        }));
    }
    // Let them go to sleep (not required for correctness; makes the slow path likely).
    while a.waits().sleepers() < 3 {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(a.folio(pfn).flags() & PG_WAITERS != 0);
    // SAFETY: `held` is the reference leaked above, still locked.
    let l = unsafe { FolioLocked::from_raw_locked(&a, held) };
    drop(l.end_read(true));
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(a.folio(pfn).flags() & (PG_LOCKED | PG_WAITERS), 0);
    a.validate().unwrap();
}

#[test]
fn concurrent_alloc_free_stress() {
    let a = Arc::new(arena(512, RefStrategy::LockedBit));
    let iters = if cfg!(miri) {
        200
    } else if cfg!(debug_assertions) {
        3_000
    } else {
        50_000
    };
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let a = a.clone();
            thread::spawn(move || {
                let mut held = Vec::new();
                let mut x = 0x9E37_79B9u32.wrapping_mul(t + 1);
                for _ in 0..iters {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let order = [0, 0, 0, 1, 2, 3, 4, 6][(x % 8) as usize];
                    if held.len() > 16 || (x >> 8) % 3 == 0 {
                        if !held.is_empty() {
                            let i = (x as usize >> 4) % held.len();
                            let f: FolioRef<'_> = held.swap_remove(i);
                            assert!(!f.is_frozen(a.strategy()));
                            drop(f);
                        }
                    } else if let Ok(f) = a.alloc(order) {
                        assert_eq!(f.order(), order);
                        assert_eq!(f.ref_count(a.strategy()), 1);
                        held.push(f);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = a.validate().unwrap();
    assert_eq!(st.allocated_pages, 0);
    assert_eq!(st.free_pages, 512);
    assert_eq!(st.bad_pages, 0);
    assert_eq!(st.allocations, st.frees);
    a.drain_per_cpu_lists();
    assert_eq!(a.alloc(MAX_ORDER).unwrap().nr_pages(), 512, "fully merged");
}

/// Regression: a waker queued on a folio's lock on a task's behalf, by a thread that then
/// dropped its reference (an async read's readahead worker, `MissShared::inserted`), must be
/// woken when the locked folio is frozen and freed (eviction), not silently dropped with the
/// lock bit: the task would sleep forever (an async test's executor parked with every task
/// pending, seen once in a debug CI run).
#[test]
fn freeing_a_locked_frozen_folio_wakes_a_waker_queued_on_its_lock() {
    struct Flag(std::sync::atomic::AtomicBool);
    impl std::task::Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let a = arena(16, RefStrategy::LockedBit);
    let f = a.alloc(0).unwrap();
    let other = f.clone();
    let locked = f.try_lock().unwrap(); // the evictor's lock
    let flag = Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
    let waker = std::task::Waker::from(flag.clone());
    let mut slot = None;
    // The worker queues the task's waker, then lets go of its reference.
    assert!(other
        .poll_unlocked(&mut std::task::Context::from_waker(&waker), &mut slot)
        .is_pending());
    drop(other);
    // The entry now belongs to the wait table (`inserted` lets its registration go too).
    let _ = slot;
    // SAFETY: the only reference left is the lock holder's.
    let frozen = unsafe { locked.freeze(1) }.unwrap_or_else(|_| panic!("one reference"));
    frozen.free();
    assert!(
        flag.0.load(std::sync::atomic::Ordering::SeqCst),
        "the queued waker was not woken"
    );
    assert_eq!(a.validate().unwrap().allocated_pages, 0);
}
