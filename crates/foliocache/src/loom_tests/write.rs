//! Loom models of the write path's atomic protocols.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p foliocache
//! --lib loom_tests::write`.
//!
//! | model | what it proves |
//! |---|---|
//! | `in_place_write_*` | a writer that changes an uptodate page only while its refcount is frozen at the references it owns (`cache::write`) never races a reader holding a reference: the reader sees the page whole, before or after, and loom finds no unordered access to the bytes; for every refcount strategy |
//! | `size_publication` | `i_size` stored with Release after the page's bytes and loaded with Acquire before them: a reader that sees the new size reads the new bytes |
//! | `errseq_*` | a writeback error recorded while two handles sync reaches each handle exactly once, and a handle opened after both saw it not at all |
//! | `writeback_*` | a thread waiting for a folio's writeback to end (stable pages, a sync) is always woken by `end_writeback` and sees the writeback's work |
//! | `throttle_*` | a writer paused at the dirty limit (`DirtyAccount::wait_for_room`) is always woken, or never sleeps, once a writeback ends and makes room (the fenced store-buffering pair of `throttled` and `charged`) |
//!
//! Weakened variants that must fail: the write without the freeze (loom reports the data race
//! on the page), the size stored `Relaxed` (the reader reads the page unordered with the
//! write), and the pre-4.13 error flag that its first reporter clears (the second handle never
//! hears of the error), a writeback end that clears the bit without waking (the waiter
//! sleeps forever: loom's deadlock), and a room-making end without its fence, with Relaxed
//! accesses (the paused writer misses the room and the end misses the sleeper: deadlock).
//!
//! The dirty and writeback bits themselves change only under the folio lock (writers,
//! writeback's start, truncation, reclaim's check before its freeze), whose protocol the
//! folio models cover.
//!
//! Page bytes are `UnsafeCell`s, so a missing happens-before edge is a causality error.

use crate::mm::refcount::{RefCount, RefStrategy};
use crate::mm::sync::{model, thread, Arc, AtomicU64, Ordering, UnsafeCell};
use crate::mm::writeback::errseq::{weakened::ClearOnReport, ErrSeq};
use crate::mm::writeback::DirtyAccount;

/// A cached page: its refcount (the index holds one reference) and two words of bytes, so a
/// torn read shows.
pub(super) struct Page {
    pub(super) rc: RefCount,
    lo: UnsafeCell<u32>,
    hi: UnsafeCell<u32>,
}

impl Page {
    pub(super) fn cached(s: RefStrategy) -> Page {
        let p = Page {
            rc: RefCount::frozen(),
            lo: UnsafeCell::new(1),
            hi: UnsafeCell::new(1),
        };
        p.rc.init(s, 1);
        p
    }

    pub(super) fn read(&self) -> (u32, u32) {
        // SAFETY: loom tracks the accesses and reports an unordered pair.
        let lo = self.lo.with(|p| unsafe { *p });
        // SAFETY: as above.
        let hi = self.hi.with(|p| unsafe { *p });
        (lo, hi)
    }

    pub(super) fn write(&self, v: u32) {
        // SAFETY: as above.
        self.lo.with_mut(|p| unsafe { *p = v });
        // SAFETY: as above.
        self.hi.with_mut(|p| unsafe { *p = v });
    }
}

/// The writer of `write_page`: take a reference, freeze at exactly the references known (the
/// index's and ours), write, unfreeze; if the freeze fails, the real writer writes a copy and
/// replaces the folio, which leaves this page untouched. Returns whether it wrote in place.
fn frozen_writer(p: &Page, s: RefStrategy) -> bool {
    assert!(p.rc.try_get(s), "the index's reference keeps it live");
    let wrote = if p.rc.freeze(s, 2) {
        p.write(2);
        p.rc.unfreeze(s, 2);
        true
    } else {
        false
    };
    let last = p.rc.put(s);
    assert!(!last);
    wrote
}

/// The writer without the freeze: the broken protocol.
fn unfrozen_writer(p: &Page, s: RefStrategy) -> bool {
    assert!(p.rc.try_get(s));
    p.write(2);
    let last = p.rc.put(s);
    assert!(!last);
    true
}

/// A lockless reader: speculative reference (retrying while frozen, as the index lookup
/// does), read, put.
fn reader(p: &Page, s: RefStrategy) -> (u32, u32) {
    while !p.rc.try_get(s) {
        thread::yield_now();
    }
    let seen = p.read();
    let last = p.rc.put(s);
    assert!(!last);
    seen
}

fn in_place_write(s: RefStrategy, writer: fn(&Page, RefStrategy) -> bool) {
    model(move || {
        let p = Arc::new(Page::cached(s));
        let r = {
            let p = p.clone();
            thread::spawn(move || reader(&p, s))
        };
        let wrote = writer(&p, s);
        let seen = r.join().unwrap();
        assert!(seen == (1, 1) || seen == (2, 2), "torn page {seen:?}");
        if wrote {
            assert_eq!(p.read(), (2, 2));
        }
    });
}

#[test]
fn in_place_write_locked_bit() {
    in_place_write(RefStrategy::LockedBit, frozen_writer);
}

#[test]
fn in_place_write_cas_loop() {
    in_place_write(RefStrategy::CasLoop, frozen_writer);
}

#[test]
fn in_place_write_optimistic() {
    in_place_write(RefStrategy::Optimistic, frozen_writer);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn in_place_write_without_the_freeze_is_caught() {
    in_place_write(RefStrategy::LockedBit, unfrozen_writer);
}

/// `write_end` extends the file: bytes, then the size; a reader loads the size, then reads.
fn size_publication(store: Ordering) {
    model(move || {
        let size = Arc::new(AtomicU64::new(0));
        let page = Arc::new(UnsafeCell::new(0u32));
        let w = {
            let (size, page) = (size.clone(), page.clone());
            thread::spawn(move || {
                // SAFETY: loom checks the access.
                page.with_mut(|p| unsafe { *p = 7 });
                size.store(4, store);
            })
        };
        if size.load(Ordering::Acquire) == 4 {
            // SAFETY: loom checks the access.
            let v = page.with(|p| unsafe { *p });
            assert_eq!(v, 7, "a reader that sees the size reads its bytes");
        }
        w.join().unwrap();
    });
}

#[test]
fn size_publication_release_acquire() {
    size_publication(Ordering::Release);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn size_publication_relaxed_is_caught() {
    size_publication(Ordering::Relaxed);
}

#[test]
fn errseq_reaches_each_handle_once() {
    model(|| {
        let e = Arc::new(ErrSeq::new());
        let (a0, b0) = (e.sample(), e.sample());
        let setter = {
            let e = e.clone();
            thread::spawn(move || {
                e.set(5);
            })
        };
        let b = {
            let e = e.clone();
            thread::spawn(move || {
                let mut since = b0;
                let first = e.check_and_advance(&mut since).is_some() as u32;
                (since, first)
            })
        };
        let mut a = a0;
        let mut seen_a = e.check_and_advance(&mut a).is_some() as u32;
        setter.join().unwrap();
        let (mut b, mut seen_b) = b.join().unwrap();
        // The next syncs, after the error is certainly recorded.
        seen_a += e.check_and_advance(&mut a).is_some() as u32;
        seen_b += e.check_and_advance(&mut b).is_some() as u32;
        assert_eq!(
            (seen_a, seen_b),
            (1, 1),
            "each handle hears of the error once"
        );
        let mut late = e.sample();
        assert_eq!(
            e.check_and_advance(&mut late),
            None,
            "not a later opener's error"
        );
    });
}

#[test]
#[should_panic(expected = "each handle")]
fn errseq_a_flag_cleared_by_its_first_reporter_is_caught() {
    model(|| {
        let e = Arc::new(ClearOnReport::default());
        let setter = {
            let e = e.clone();
            thread::spawn(move || e.set(5))
        };
        let b = {
            let e = e.clone();
            thread::spawn(move || e.check_and_clear().is_some() as u32)
        };
        let mut seen_a = e.check_and_clear().is_some() as u32;
        setter.join().unwrap();
        let mut seen_b = b.join().unwrap();
        seen_a += e.check_and_clear().is_some() as u32;
        seen_b += e.check_and_clear().is_some() as u32;
        assert_eq!(
            (seen_a, seen_b),
            (1, 1),
            "each handle hears of the error once"
        );
    });
}

/// `folio_wait_writeback` against `folio_end_writeback`: a writer waiting for stable pages
/// (or a sync waiting for a write in flight) is always woken by the end of the writeback and
/// sees what the writeback did before it ended. The broken end that clears the bit without
/// waking leaves the waiter asleep: loom reports the deadlock.
fn writeback_wait(end: fn(&crate::mm::folio::FolioRef<'_>)) {
    use crate::mm::folio::flags::PG_WRITEBACK;
    use crate::mm::folio::{Arena, ArenaConfig, FolioRef, PAGE_SIZE};
    use crate::mm::sync::AtomicBool;
    loom::model(move || {
        let mut c = ArenaConfig::new(PAGE_SIZE, RefStrategy::LockedBit);
        c.per_cpu_lists = false;
        c.panic_on_bad_page = true;
        let arena = Arc::new(Arena::new(c).unwrap());
        let r = arena.alloc(0).unwrap();
        r.set_flag(PG_WRITEBACK);
        let pfn = r.pfn();
        // A second reference for the writeback thread, re-taken raw there.
        let _ = r.clone().into_raw();
        let written = Arc::new(AtomicBool::new(false));
        let t = {
            let (a, written) = (arena.clone(), written.clone());
            thread::spawn(move || {
                // SAFETY: the reference leaked above, put when `w` drops.
                let w = unsafe { FolioRef::from_raw(&a, a.folio(pfn)) };
                written.store(true, Ordering::Relaxed);
                end(&w);
            })
        };
        r.wait_writeback();
        assert!(
            written.load(Ordering::Relaxed),
            "woken before the writeback's work was visible"
        );
        assert!(!r.test_flag(PG_WRITEBACK));
        drop(r);
        t.join().unwrap();
        assert_eq!(arena.wait_table_sleepers(), 0);
    });
}

#[test]
fn writeback_waiter_is_woken() {
    writeback_wait(|f| f.end_writeback());
}

#[test]
#[should_panic(expected = "deadlock")]
fn writeback_end_without_wake_is_caught() {
    writeback_wait(|f| f.clear_flag(crate::mm::folio::flags::PG_WRITEBACK));
}

/// `balance_dirty_pages`' pause against the writeback that makes room: a writer at the dirty
/// limit that goes to sleep in `DirtyAccount::wait_for_room` is always woken (or never
/// sleeps) once a writeback ends and takes the charged count under the resume mark. loom's
/// condition variable never times out, so a lost wake-up is a deadlock, which the weakened
/// end (no fence, Relaxed) must produce.
fn throttle(end: fn(&DirtyAccount, u64)) {
    loom::model(move || {
        // A budget of 20 pages: limit 10, background 2, resume mark 6.
        let acct = Arc::new(DirtyAccount::new(20, 50, 10));
        assert!(acct.try_reserve(10));
        acct.start_writeback(10);
        assert!(!acct.try_reserve(1), "at the limit");
        let t = {
            let a = acct.clone();
            thread::spawn(move || end(&a, 10))
        };
        while !acct.try_reserve(1) {
            acct.wait_for_room(std::time::Duration::from_millis(1));
        }
        t.join().unwrap();
        assert_eq!((acct.charged(), acct.writeback()), (1, 0));
    });
}

#[test]
fn throttle_sleeper_is_woken_by_the_room_made() {
    throttle(DirtyAccount::end_writeback);
}

#[test]
#[should_panic(expected = "deadlock")]
fn throttle_unfenced_wake_is_caught() {
    throttle(DirtyAccount::end_writeback_unfenced);
}
