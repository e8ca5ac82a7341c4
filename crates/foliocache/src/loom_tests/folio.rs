//! Loom models of the folio lock and its hashed wait table: a thread that sleeps in `lock`
//! or `wait_locked` is always woken by the holder's unlock (no lost wake-up, whatever the
//! interleaving of its `PG_waiters` registration with the unlock), and sees the holder's
//! writes (`PG_uptodate` set by `end_read`) when it wakes. A deliberately broken unlock that
//! skips the wake-up leaves the sleeper blocked forever, which loom reports as a deadlock.
//!
//! And the access counter in the flags word (`racing_refs_never_leave_their_field`): readers
//! counting reads, aging spending one and a flag update of another layer, all on one word,
//! never lose an update or carry out of the counter's two bits; the weakened check-then-add
//! increment (`racy_refs_increment_is_caught`) carries into the next bit.

use crate::mm::folio::{Arena, ArenaConfig, FolioLocked, FolioRef, PAGE_SIZE};
use crate::mm::refcount::RefStrategy;
use crate::mm::sync::{thread, Arc};

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

/// A task waiting for the unlock (`FolioRef::poll_unlocked`) against the holder's unlock:
/// the task is always woken (loom's `block_on` parks the model thread until its waker runs,
/// so a lost wake-up is a deadlock), sees the holder's `end_read` when its poll says
/// `Ready`, and leaves no registration behind. `announce` false is the weakened
/// registration (the waker registered without `PG_waiters`), which the model must catch.
fn task_model(announce: bool) {
    use crate::mm::folio::flags::PG_LOCKED;
    use std::task::Poll;
    loom::model(move || {
        let (arena, pfn) = setup();
        let a2 = arena.clone();
        let t = thread::spawn(move || {
            // SAFETY: the locked reference leaked by `setup`.
            let l = unsafe { FolioLocked::from_raw_locked(&a2, a2.folio(pfn)) };
            drop(l.end_read(true));
        });
        {
            // SAFETY: the extra reference leaked by `setup`.
            let r = unsafe { FolioRef::from_raw(&arena, arena.folio(pfn)) };
            let mut slot = None;
            loom::future::block_on(std::future::poll_fn(|cx| {
                if announce {
                    r.poll_unlocked(cx, &mut slot)
                } else if r.flags() & PG_LOCKED == 0 {
                    Poll::Ready(())
                } else {
                    let f = arena.folio(pfn);
                    arena
                        .waits()
                        .poll_bit_unannounced(f, PG_LOCKED, cx, &mut slot)
                }
            }));
            arena.cancel_wait(&mut slot);
            assert!(
                r.is_uptodate(),
                "a task woken before the holder's end_read was visible"
            );
        }
        t.join().unwrap();
        assert_eq!(
            arena.wait_table_sleepers(),
            0,
            "a task's registration was left"
        );
        let st = arena.validate().unwrap();
        assert_eq!((st.allocated_pages, st.bad_pages), (0, 0));
    });
}

#[test]
fn task_waiting_for_unlock_is_woken() {
    task_model(true);
}

#[test]
#[should_panic(expected = "deadlock")]
fn task_registered_without_waiters_bit_is_caught() {
    task_model(false);
}

/// An async read's waker queued on a folio's lock by a thread that then lets go of its
/// reference (the readahead worker's `MissShared::inserted`), against the lock's holder,
/// reclaim, which frees the folio if the freeze finds its reference the only one left, or
/// else unlocks it. The task is always woken, by the free or by the unlock (loom's
/// `block_on` parks until its waker runs: a lost wake-up is a deadlock), and no
/// registration is left. `wake_on_free` false is the free that cleared the lock without a
/// wake-up, which the model must catch.
fn queued_waker_model(wake_on_free: bool) {
    use std::task::Poll;
    loom::model(move || {
        let (arena, pfn) = setup();
        let a2 = arena.clone();
        let t = thread::spawn(move || {
            // SAFETY: the locked reference leaked by `setup`.
            let l = unsafe { FolioLocked::from_raw_locked(&a2, a2.folio(pfn)) };
            // SAFETY: the lock holder's reference is the one we know of; another makes the
            // freeze fail, and the folio is unlocked instead.
            match unsafe { l.freeze(1) } {
                Ok(frozen) if wake_on_free => frozen.free(),
                Ok(frozen) => frozen.free_without_wake(),
                Err(l) => drop(l),
            }
        });
        {
            // SAFETY: the extra reference leaked by `setup`: the worker's.
            let mut worker = Some(unsafe { FolioRef::from_raw(&arena, arena.folio(pfn)) });
            let mut queued = false;
            loom::future::block_on(std::future::poll_fn(|cx| {
                if queued {
                    // Woken: the task looks at its page again (gone or unlocked).
                    return Poll::Ready(());
                }
                let mut slot = None;
                let r = worker.as_ref().expect("polled once before the wake");
                if r.poll_unlocked(cx, &mut slot).is_ready() {
                    return Poll::Ready(());
                }
                // The entry is the wait table's now; the worker lets go.
                queued = true;
                worker = None;
                Poll::Pending
            }));
            drop(worker);
        }
        t.join().unwrap();
        assert_eq!(arena.wait_table_sleepers(), 0, "a registration was left");
        let st = arena.validate().unwrap();
        assert_eq!((st.allocated_pages, st.bad_pages), (0, 0));
    });
}

#[test]
fn a_waker_queued_on_a_freed_folio_is_woken() {
    queued_waker_model(true);
}

#[test]
#[should_panic(expected = "deadlock")]
fn a_free_that_drops_queued_wakers_is_caught() {
    queued_waker_model(false);
}

/// The access counter in the flags word (`Folio::inc_lru_refs`, `dec_lru_refs`): two readers
/// count reads of a folio whose count is one short of full while aging spends one and
/// another layer sets and clears a flag bit. Every interleaving must leave the count in its
/// field (0 to `LRU_REFS_MAX`, here exactly 2 or 3 as the decrement falls), the flag's last
/// change in place, and no other bit touched.
fn refs_race(inc: fn(&crate::mm::folio::Folio) -> bool) {
    use crate::mm::folio::flags::{LRU_REFS_MASK, LRU_REFS_MAX, PG_REFERENCED};
    loom::model(move || {
        let mut c = ArenaConfig::new(PAGE_SIZE, RefStrategy::LockedBit);
        c.per_cpu_lists = false;
        let arena = Arc::new(Arena::new(c).unwrap());
        let r = arena.alloc(0).unwrap();
        let f = arena.folio(r.pfn());
        while f.lru_refs() < LRU_REFS_MAX - 1 {
            assert!(f.inc_lru_refs());
        }
        let pfn = r.pfn();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let a = arena.clone();
                thread::spawn(move || {
                    inc(a.folio(pfn));
                })
            })
            .collect();
        let a = arena.clone();
        let other = thread::spawn(move || {
            a.folio(pfn).set_flag(PG_REFERENCED);
        });
        let spent = f.dec_lru_refs();
        for t in readers {
            t.join().unwrap();
        }
        other.join().unwrap();
        let flags = f.flags();
        assert_eq!(
            flags & !(LRU_REFS_MASK | PG_REFERENCED),
            0,
            "a bit outside the counter changed: {flags:#x}"
        );
        assert!(flags & PG_REFERENCED != 0, "the flag's update was lost");
        assert!(spent, "aging found no count to spend");
        let refs = f.lru_refs();
        assert!(
            refs == LRU_REFS_MAX - 1 || refs == LRU_REFS_MAX,
            "count {refs} after one spend and two saturating reads from {}",
            LRU_REFS_MAX - 1
        );
        f.clear_flag(PG_REFERENCED);
        while f.dec_lru_refs() {}
        drop(r);
    });
}

#[test]
fn racing_refs_never_leave_their_field() {
    refs_race(|f| f.inc_lru_refs());
}

/// The weakened increment (check, then `fetch_add`): both readers see room for one more and
/// both add, carrying out of the field.
#[test]
#[should_panic(expected = "a bit outside the counter changed")]
fn racy_refs_increment_is_caught() {
    refs_race(|f| f.inc_lru_refs_racy());
}
