//! Loom model of a fill against a shrinking truncation (`cache::truncate`'s `set_len`, the fills of
//! `mm::readahead::fill`): the bytes a truncation cuts never come back.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p foliocache
//! --lib loom_tests::truncate`.
//!
//! The file is two bytes long, both `0xAB`, in one page. One thread fills the page on a miss;
//! the other cuts the file to one byte and grows it back to two, which must read as
//! `[0xAB, 0]` through the cache and on disk. The model keeps the real code's shape:
//!
//! | step | real code | model |
//! |---|---|---|
//! | the fill's insertion | `add_folio_*` under the index lock (Release store of the slot) | `slot` stored under `slot_lock` |
//! | the truncation's look at the tail page | `zero_cached_tail` -> a lockless lookup (Acquire), then the folio lock, which waits for the fill | `slot` loaded Acquire, then a wait for `uptodate` |
//! | the fill's read | `read_run` up to the size read after the insertion, zeroing past it | the disk's bytes below `size`, zeros past |
//! | the cut | `ftruncate` after the size is published | `disk` shortened |
//! | the order between them | `invalidate_lock`: fills shared, the truncation exclusive until the cut | `RwLock` |
//!
//! Weakened variants that must fail: a fill that uses the size it was planned with (read
//! before its insertion) and takes no invalidate lock, the pre-fix code, caches the cut byte;
//! and a fill that re-reads the size after its insertion but takes no invalidate lock still
//! does (the size store and the lockless lookup form a store-buffering pair with the
//! insertion and the size load: each side may miss the other).

use crate::mm::sync::{
    model, thread, Arc, AtomicBool, AtomicU64, Mutex, Ordering, RwLock, UnsafeCell,
};

const OLD: u8 = 0xAB;

struct File {
    /// `i_size`.
    size: AtomicU64,
    /// The backing file's bytes.
    disk: Mutex<Vec<u8>>,
    /// `mapping->invalidate_lock`.
    invalidate: RwLock<()>,
    /// The index lock, under which insertions happen.
    slot_lock: Mutex<()>,
    /// Whether page 0 is in the index (1) or not (0), read locklessly.
    slot: AtomicU64,
    /// The page's bytes and its uptodate flag (Release after the bytes).
    bytes: [UnsafeCell<u8>; 2],
    uptodate: AtomicBool,
}

impl File {
    fn new() -> File {
        File {
            size: AtomicU64::new(2),
            disk: Mutex::new(vec![OLD, OLD]),
            invalidate: RwLock::new(()),
            slot_lock: Mutex::new(()),
            slot: AtomicU64::new(0),
            bytes: [UnsafeCell::new(0), UnsafeCell::new(0)],
            uptodate: AtomicBool::new(false),
        }
    }

    /// A miss on page 0: insert, read the backing below the size, mark uptodate.
    /// `recheck`: read the size after the insertion (else before it); `lock`: hold the
    /// invalidate lock shared throughout.
    fn fill(&self, recheck: bool, lock: bool) {
        let _g = lock.then(|| self.invalidate.read());
        let planned = self.size.load(Ordering::Acquire);
        {
            let _l = self.slot_lock.lock();
            if self.slot.load(Ordering::Relaxed) == 1 {
                return;
            }
            self.slot.store(1, Ordering::Release);
        }
        let size = if recheck {
            self.size.load(Ordering::Acquire)
        } else {
            planned
        };
        let disk = self.disk.lock().clone();
        for (i, b) in self.bytes.iter().enumerate() {
            let v = if (i as u64) < size {
                disk.get(i).copied().unwrap_or(0)
            } else {
                0
            };
            // SAFETY: the page is not uptodate: only its filler touches the bytes (loom
            // reports an unordered access otherwise).
            b.with_mut(|p| unsafe { *p = v });
        }
        self.uptodate.store(true, Ordering::Release);
    }

    /// `set_len(1)` then `set_len(2)`.
    fn shrink_and_grow(&self) {
        {
            let _g = self.invalidate.write();
            self.size.store(1, Ordering::Release);
            // `zero_cached_tail`: a lockless lookup, then the folio lock (the fill's end).
            if self.slot.load(Ordering::Acquire) == 1 {
                while !self.uptodate.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                // SAFETY: uptodate (Acquire) orders this after the fill's stores.
                self.bytes[1].with_mut(|p| unsafe { *p = 0 });
            }
            self.disk.lock().truncate(1);
        }
        self.disk.lock().resize(2, 0);
        self.size.store(2, Ordering::Release);
    }

    /// Byte 1 as a read after both threads finished gets it: from the cached page, or from
    /// the backing.
    fn byte_1(&self) -> u8 {
        if self.slot.load(Ordering::Acquire) == 1 {
            assert!(self.uptodate.load(Ordering::Acquire));
            // SAFETY: both threads were joined.
            self.bytes[1].with(|p| unsafe { *p })
        } else {
            self.disk.lock()[1]
        }
    }
}

fn fill_against_truncation(recheck: bool, lock: bool) {
    model(move || {
        let f = Arc::new(File::new());
        let filler = {
            let f = f.clone();
            thread::spawn(move || f.fill(recheck, lock))
        };
        f.shrink_and_grow();
        filler.join().unwrap();
        assert_eq!(f.byte_1(), 0, "cut bytes came back");
        assert_eq!(*f.disk.lock(), vec![OLD, 0]);
    });
}

#[test]
fn fill_against_truncation_under_the_invalidate_lock() {
    fill_against_truncation(true, true);
}

#[test]
#[should_panic(expected = "cut bytes came back")]
fn fill_with_its_planned_size_and_no_lock_is_caught() {
    fill_against_truncation(false, false);
}

#[test]
#[should_panic(expected = "cut bytes came back")]
fn fill_that_rechecks_the_size_without_the_lock_is_caught() {
    fill_against_truncation(true, false);
}
