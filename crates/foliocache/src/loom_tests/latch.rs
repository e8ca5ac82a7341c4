//! Loom models of the in-place latch (`InPlaceFolioMut`, `PG_LATCHED`: rule 6 of the folio
//! docs, `cache/latch.rs`).
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p foliocache
//! --lib loom_tests::latch`.
//!
//! | model | what it proves |
//! |---|---|
//! | `latch_against_a_reader_*` | a latch that marks the page `PG_LATCHED` while its refcount is frozen, writes with the refcount live, and ends with a Release clear, never races a lockless reader that takes a reference and reads only when `data()`'s Acquire load sees the bit clear: the reader sees the page whole, before or after; for every refcount strategy |
//! | `latch_against_writeback` | writeback, which starts under the folio lock only on an unlatched page and reads the bytes after unlocking (holding a reference), never reads a page a latch is changing, and a latch never starts on a page under writeback |
//!
//! Weakened variants that must fail (loom reports the unordered access to the bytes): the bit
//! set after the unfreeze (a reader's `try_get` slips in between and reads while the latch
//! writes), the commit's clear `Relaxed` (a reader that sees it clear reads bytes the
//! latch's stores are not ordered before), a writeback that does not look at the bit, and
//! one that looks `Relaxed` (the commit clears the bit without the folio lock, so the lock
//! orders nothing).
//!
//! Page bytes are `UnsafeCell`s (`write::Page`), so a missing happens-before edge is a
//! causality error.

use super::write::Page;
use crate::mm::folio::flags::{PG_LATCHED, PG_WRITEBACK};
use crate::mm::refcount::RefStrategy;
use crate::mm::sync::{model, thread, Arc, AtomicU64, Mutex, Ordering};

/// A cached page with its flags word and folio lock.
struct Folio {
    page: Page,
    flags: AtomicU64,
    lock: Mutex<()>,
}

impl Folio {
    fn cached(s: RefStrategy) -> Folio {
        Folio {
            page: Page::cached(s),
            flags: AtomicU64::new(0),
            lock: Mutex::new(()),
        }
    }
}

/// How the latch publishes and ends its hold.
#[derive(Clone, Copy)]
enum Latch {
    /// `latch`: PG_latched set while frozen, the unfreeze publishes it; Release clear.
    Correct,
    /// The bit set after the unfreeze.
    LateBit,
    /// The commit's clear `Relaxed`.
    RelaxedClear,
}

/// `get_folio_mut_in_place` + commit: take a reference; under the folio lock, if the page is
/// not under writeback, freeze at the two references known, set the bit, unfreeze; write
/// unlocked; clear the bit (without the lock, as the commit of a dirty page does). Returns
/// whether it latched in place (else the
/// real latch writes a copy, which leaves this page alone).
fn latch(f: &Folio, s: RefStrategy, how: Latch) -> bool {
    assert!(f.page.rc.try_get(s), "the index's reference keeps it live");
    let guard = f.lock.lock();
    // ORDERING: Relaxed under the lock, which writeback's start holds too.
    let latched = f.flags.load(Ordering::Relaxed) & PG_WRITEBACK == 0 && f.page.rc.freeze(s, 2);
    if latched {
        if !matches!(how, Latch::LateBit) {
            f.flags.fetch_or(PG_LATCHED, Ordering::Relaxed);
        }
        f.page.rc.unfreeze(s, 2);
        if matches!(how, Latch::LateBit) {
            f.flags.fetch_or(PG_LATCHED, Ordering::Relaxed);
        }
    }
    drop(guard);
    if latched {
        f.page.write(2);
        // The commit of a dirty page ends the latch without the folio lock (`commit_in_place`).
        let clear = match how {
            Latch::RelaxedClear => Ordering::Relaxed,
            _ => Ordering::Release,
        };
        f.flags.fetch_and(!PG_LATCHED, clear);
    }
    assert!(!f.page.rc.put(s));
    latched
}

/// `read_at`'s hit: a reference (retrying while frozen, as the lookup does), then `data()`:
/// the bytes only if the Acquire load sees no latch (the real reader then waits for the
/// commit and looks again; here it gives up). Returns what it read, if anything.
fn reader(f: &Folio, s: RefStrategy) -> Option<(u32, u32)> {
    while !f.page.rc.try_get(s) {
        thread::yield_now();
    }
    let seen = (f.flags.load(Ordering::Acquire) & PG_LATCHED == 0).then(|| f.page.read());
    assert!(!f.page.rc.put(s));
    seen
}

fn latch_against_a_reader(s: RefStrategy, how: Latch) {
    model(move || {
        let f = Arc::new(Folio::cached(s));
        let r = {
            let f = f.clone();
            thread::spawn(move || reader(&f, s))
        };
        let latched = latch(&f, s, how);
        if let Some(seen) = r.join().unwrap() {
            assert!(seen == (1, 1) || seen == (2, 2), "torn page {seen:?}");
        }
        if latched {
            assert_eq!(f.page.read(), (2, 2));
        }
    });
}

#[test]
fn latch_against_a_reader_locked_bit() {
    latch_against_a_reader(RefStrategy::LockedBit, Latch::Correct);
}

#[test]
fn latch_against_a_reader_cas_loop() {
    latch_against_a_reader(RefStrategy::CasLoop, Latch::Correct);
}

#[test]
fn latch_against_a_reader_optimistic() {
    latch_against_a_reader(RefStrategy::Optimistic, Latch::Correct);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn latch_bit_set_after_the_unfreeze_is_caught() {
    latch_against_a_reader(RefStrategy::LockedBit, Latch::LateBit);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn latch_relaxed_clear_is_caught() {
    latch_against_a_reader(RefStrategy::LockedBit, Latch::RelaxedClear);
}

/// `prepare_writeback` + the write: under the folio lock, start writeback only on an
/// unlatched page (`checks`), then read the bytes unlocked with a reference, and end the
/// writeback with a Release clear.
fn writeback(f: &Folio, s: RefStrategy, checks: Option<Ordering>) -> Option<(u32, u32)> {
    while !f.page.rc.try_get(s) {
        thread::yield_now();
    }
    let guard = f.lock.lock();
    // ORDERING: Acquire; pairs with the commit's Release clear, which does not take the lock
    // (with Relaxed here the model reports the race: the lock orders nothing then).
    let start = checks.is_none_or(|o| f.flags.load(o) & PG_LATCHED == 0);
    if start {
        f.flags.fetch_or(PG_WRITEBACK, Ordering::Relaxed);
    }
    drop(guard);
    let seen = start.then(|| {
        let seen = f.page.read();
        f.flags.fetch_and(!PG_WRITEBACK, Ordering::Release);
        seen
    });
    assert!(!f.page.rc.put(s));
    seen
}

fn latch_against_writeback(checks: Option<Ordering>) {
    model(move || {
        let s = RefStrategy::LockedBit;
        let f = Arc::new(Folio::cached(s));
        let wb = {
            let f = f.clone();
            thread::spawn(move || writeback(&f, s, checks))
        };
        latch(&f, s, Latch::Correct);
        if let Some(seen) = wb.join().unwrap() {
            assert!(seen == (1, 1) || seen == (2, 2), "torn write {seen:?}");
        }
    });
}

#[test]
fn latch_against_writeback_checked() {
    latch_against_writeback(Some(Ordering::Acquire));
}

#[test]
#[should_panic(expected = "Causality violation")]
fn latch_writeback_that_ignores_the_bit_is_caught() {
    latch_against_writeback(None);
}

/// The check under the folio lock, but `Relaxed`: the commit clears the bit without the
/// lock, so the lock orders nothing and the bytes written back race the latch's stores.
#[test]
#[should_panic(expected = "Causality violation")]
fn latch_writeback_relaxed_check_is_caught() {
    latch_against_writeback(Some(Ordering::Relaxed));
}
