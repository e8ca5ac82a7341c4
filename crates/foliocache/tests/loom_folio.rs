//! Loom models of the folio lock and its hashed wait table: a thread that sleeps in `lock`
//! or `wait_locked` is always woken by the holder's unlock (no lost wake-up, whatever the
//! interleaving of its `PG_waiters` registration with the unlock), and sees the holder's
//! writes (`PG_uptodate` set by `end_read`) when it wakes. A deliberately broken unlock that
//! skips the wake-up leaves the sleeper blocked forever, which loom reports as a deadlock.
#![cfg(loom)]

use foliocache::folio::{Arena, ArenaConfig, FolioLocked, FolioRef, PAGE_SIZE};
use foliocache::refcount::RefStrategy;
use foliocache::sync::{thread, Arc};

/// A one-frame arena with a locked folio and a second reference for the other thread:
/// returns (arena, pfn); the lock and both references are leaked to be re-taken raw.
fn setup() -> (Arc<Arena>, u32) {
    let mut c = ArenaConfig::new(PAGE_SIZE, RefStrategy::LockedBit);
    c.per_cpu_lists = false;
    c.panic_on_bad_page = true;
    let arena = Arc::new(Arena::new(c).unwrap());
    let l = arena.alloc(0).unwrap().lock();
    let pfn = l.pfn();
    let _ = l.folio_ref().clone().into_raw();
    let _ = l.into_raw_locked();
    (arena, pfn)
}

fn model(take_lock: bool, unlock: fn(FolioLocked<'_>)) {
    loom::model(move || {
        let (arena, pfn) = setup();
        let a2 = arena.clone();
        // The holder runs on the spawned thread, the sleeper on the model's main thread (a
        // sleeper left blocked then ends the model with loom's deadlock report).
        let t = thread::spawn(move || {
            // SAFETY: the locked reference leaked by `setup`.
            let l = unsafe { FolioLocked::from_raw_locked(&a2, a2.folio(pfn)) };
            unlock(l);
        });
        {
            // SAFETY: the extra reference leaked by `setup`.
            let r = unsafe { FolioRef::from_raw(&arena, arena.folio(pfn)) };
            if take_lock {
                let l = r.lock();
                assert!(
                    l.is_uptodate(),
                    "locked before the holder's end_read was visible"
                );
            } else {
                r.wait_locked();
                assert!(
                    r.is_uptodate(),
                    "woken before the holder's end_read was visible"
                );
            }
        }
        t.join().unwrap();
        assert_eq!(arena.wait_table_sleepers(), 0);
        let st = arena.validate().unwrap();
        assert_eq!((st.allocated_pages, st.bad_pages), (0, 0));
    });
}

#[test]
fn lock_sleeper_is_woken() {
    model(true, |l| drop(l.end_read(true)));
}

#[test]
fn wait_locked_sleeper_is_woken() {
    model(false, |l| drop(l.end_read(true)));
}

#[test]
#[should_panic(expected = "deadlock")]
fn unlock_without_wake_is_caught() {
    model(false, |mut l| {
        l.mark_uptodate();
        drop(l.unlock_without_wake());
    });
}
