//! Dirty folios and writeback: `mm/page-writeback.c` (`folio_mark_dirty`,
//! `tag_pages_for_writeback`, `writeback_iter`, `folio_start_writeback`,
//! `folio_end_writeback`, `balance_dirty_pages`), `mm/filemap.c`'s waiting side
//! (`filemap_write_and_wait_range`, `__filemap_fdatawait_range`, `folio_wait_writeback`) and
//! `lib/errseq.c` ([`errseq`]).
//!
//! # What it models
//!
//! A write to a cached file changes the folio in memory and marks it *dirty*; the bytes reach
//! the backing file later, in *writeback*: a pass over the file's dirty folios that clears
//! each one's dirty bit, flags it *under writeback*, writes contiguous runs of them with one
//! vectored write (`writepages`), and ends their writeback when the write returns. A sync
//! (`fsync`, `fdatasync`, `sync_file_range`) runs such a pass over its range, waits for every
//! folio already under writeback there, asks the backing to make the bytes durable
//! (`fdatasync`), and reports any error recorded since the handle last looked.
//!
//! # State
//!
//! A file's part of it (`WbState`: the tags, `I_SYNC`, the error sequence) lives in its
//! `AddressSpace` (`mm::filemap`), which a pass takes with the `WbHost` of its cache; this module holds the operations on it and the cache-wide
//! accounting (`DirtyAccount`).
//!
//! | state | where | set by | cleared by |
//! |---|---|---|---|
//! | `PG_dirty` | folio flags | `mark_dirty_reserved` (the writer, folio locked) | `writepages` before the I/O (`folio_clear_dirty_for_io`), `cancel_dirty` (truncation, replacement) |
//! | DIRTY tag | `WbState` | `mark_dirty_reserved` | `writepages` when it starts writeback, `cancel_dirty` |
//! | TOWRITE tag | `WbState` | a sync pass, copying the DIRTY tags of its range (`tag_pages_for_writeback`) | `writepages` when it starts writeback, or finds the folio clean |
//! | `PG_writeback` + WRITEBACK tag | flags + `WbState` | `writepages` (`folio_start_writeback`) | the end of the folio's write (`folio_end_writeback`), waking waiters |
//! | `PG_reclaim` | folio flags | reclaim meeting a dirty or writeback folio | the end of its writeback |
//! | error sequence | `WbState::err` | a failed write or sync ([`errseq::ErrSeq::set`]) | never: each handle advances its own sample |
//!
//! The tags are ordered sets of page indices beside the index, under a mutex of their own
//! (the kernel keeps them as XArray marks in the tree nodes, under the tree's lock; a set per
//! tag gives the same ordered, range-bounded tagged lookups, and keeps the seed's index
//! untouched). A dirty large folio is tagged once, at its first page (the kernel marks a
//! multi-index entry once, at its canonical slot), and counts all its pages; a split hands
//! the tags to each of its pages (`cache/split.rs`). As in the kernel, the dirty flag and the DIRTY tag disagree only while the
//! folio is locked, and every transition of both happens with the folio lock held, the tags'
//! mutex nested inside it. The counts of dirty and writeback pages, per file and for the
//! whole cache (`DirtyAccount`), change under the same mutex.
//!
//! # Sync cannot be livelocked
//!
//! A sync pass first copies the DIRTY tags of its range to TOWRITE, then walks TOWRITE only:
//! folios dirtied after the sync started are not its business, so a writer that keeps
//! dirtying pages ahead of the pass cannot keep it running (`tag_pages_for_writeback`). A
//! folio that is under writeback when the pass reaches it is waited for and written again if
//! it was redirtied meanwhile, since the write in flight may predate the newest bytes.
//!
//! # Stable pages
//!
//! While a folio is under writeback its bytes are being read by the vectored write, so nobody
//! changes them: a writer waits for the writeback to end before it modifies a folio
//! (`wait_stable`, `folio_wait_stable`). The writer holds the folio lock while it waits;
//! writeback never takes a folio lock after starting a folio's writeback, so the wait cannot
//! deadlock.
//!
//! # Errors
//!
//! A failed or short write records its errno in the file's [`errseq::ErrSeq`]; every handle
//! open at the time (and the next opener, if no one has seen it) reports it once at its next
//! sync. What becomes of the data is [`WbErrorPolicy`]'s choice: the kernel marks the failed
//! folios clean (`Clean`, the default: the data stays readable from the cache until reclaim
//! drops it, and is gone from the file); `KeepDirty` redirties them, so that the next
//! writeback retries the write. A failed `fdatasync` is recorded the same way, but nothing
//! can be redone for it: the kernel beneath may already have dropped the pages it could not
//! write (fsyncgate), so after a sync error a caller must assume that everything written since
//! its last successful sync is lost, and write it again.
//!
//! # One pass per file
//!
//! A file is written back by one pass at a time (`I_SYNC`, which `writeback_single_inode`
//! holds around `do_writepages`): an integrity sync waits for the pass in progress, a
//! background pass (the flusher, a throttled writer) that finds the file busy leaves it to
//! the pass that has it. Two passes walking one file's tags together would split each
//! other's runs (each skipping the folios the other put under writeback), so a file written
//! back by the flusher and a throttled writer at once went to the backing in runs of a few
//! pages instead of one vectored write per megabyte. A background pass stops after
//! `WB_BACKGROUND_CHUNK` pages (`writeback_chunk_size`) and stands aside while a sync
//! waits, so a writer that keeps dirtying a file cannot hold its sync off.
//!
//! # Dirty throttling
//!
//! `DirtyAccount` holds the cache-wide dirty and writeback page counts and two thresholds,
//! scaled from the kernel's defaults (`dirty_ratio` 20%, `dirty_background_ratio` 10%) to the
//! budget. The hard limit bounds dirty plus writeback pages, as the kernel's
//! `balance_dirty_pages` does (`domain_dirty_avail(dtc, true)`; the background threshold
//! counts dirty pages only, `wb_over_bg_thresh`): a writer reserves each page it is about to
//! dirty against one exact count of both (`charged`), which a page leaves when it is cleaned
//! (its writeback ends, or truncation cancels its dirtiness), not when it starts writeback.
//! A writer that cannot reserve first writes back dirty folios itself until the dirty count
//! is under the background threshold (`balance_dirty_pages`, in the direct form the kernel
//! used before 2.6.32's per-bdi flusher threads took the I/O over), so memory waiting for
//! the backing never exceeds the limit and reclaim always has clean pages to free. A file
//! that another pass is writing back already (the flusher's, usually) is not written by the
//! throttled writer: it sleeps until that pass has cleaned a batch of pages
//! (`DirtyAccount::wait_for_room`, the kernel's IO-less pause since 3.2), so the flusher's
//! I/O and the writer's copies overlap instead of queueing for the same file.

// The cache, which uses most of this module, is not compiled under loom (whose models use
// only the tag and error-sequence protocols).
#![cfg_attr(loom, allow(dead_code))]

/// The error sequence moved to [`crate::mm::errseq`] (the address space carries one); its
/// first path stays valid.
pub use crate::mm::errseq;

use std::collections::BTreeSet;

pub(crate) mod balance;
use std::io::{self, IoSlice};

use crate::io::Backing;
use crate::mm::errseq::ErrSeq;
use crate::mm::filemap::{AddressSpace, Tags, WbState};
use crate::mm::folio::flags::{PG_ACTIVE, PG_DIRTY, PG_RECLAIM, PG_REFERENCED, PG_WRITEBACK};
use crate::mm::folio::{Folio, FolioLocked, FolioRef, PAGE_SHIFT};
use crate::mm::index::Index;
use crate::mm::sync::{fence, AtomicU32, AtomicU64, Condvar, Mutex, Ordering};

/// What becomes of folios whose writeback failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WbErrorPolicy {
    /// The kernel's: the folios end writeback clean; the error is reported through the file's
    /// error sequence, and the data that failed to reach the file stays in the cache only
    /// until reclaim drops it.
    #[default]
    Clean,
    /// The folios are dirty again after a failed write, so the next writeback (a sync, the
    /// dirty limit) retries them; the error is reported all the same.
    KeepDirty,
}

impl crate::Variant for WbErrorPolicy {
    const KIND: &'static str = "writeback error policy";
    const ALL: &'static [Self] = &[WbErrorPolicy::Clean, WbErrorPolicy::KeepDirty];
    fn name(self) -> &'static str {
        match self {
            WbErrorPolicy::Clean => "clean",
            WbErrorPolicy::KeepDirty => "keep-dirty",
        }
    }
}
crate::variant::variant_traits!(WbErrorPolicy);

/// The cache's own writeback error sequence (`sb->s_wb_err`, which `mapping_set_error`
/// sets beside the file's): every writeback or sync error of any file, reported once per
/// [`FolioCache::sync_all`](crate::FolioCache::sync_all) (`syncfs`), whose sample it keeps,
/// with the file it happened to last.
#[derive(Debug, Default)]
pub(crate) struct SbErr {
    err: ErrSeq,
    /// `sync_all`'s sample (the cache's handles share one, as the descriptors `syncfs` is
    /// called on would share one file description).
    seen: Mutex<u32>,
    last: Mutex<Option<std::path::PathBuf>>,
}

impl SbErr {
    /// Records `errno`, which happened to `path`.
    pub(crate) fn set(&self, errno: i32, path: &std::path::Path) {
        *self.last.lock() = Some(path.to_path_buf());
        self.err.set(errno);
    }

    /// `errseq_check_and_advance` on `sync_all`'s sample: the error recorded since the
    /// previous call, once, with the file it last happened to.
    pub(crate) fn check_and_advance(&self) -> Option<(i32, std::path::PathBuf)> {
        let mut seen = self.seen.lock();
        let errno = self.err.check_and_advance(&mut seen)?;
        Some((errno, self.last.lock().clone().unwrap_or_default()))
    }
}

/// The cache-wide dirty accounting (`NR_FILE_DIRTY`, `NR_WRITEBACK`) and thresholds.
#[derive(Debug)]
pub(crate) struct DirtyAccount {
    dirty: AtomicU64,
    writeback: AtomicU64,
    /// Dirty plus writeback pages, the count the limit bounds: reservations are made against
    /// it, and a page's charge lasts from its reservation to its cleaning (a page dirty again
    /// while under writeback is charged twice, as the kernel counts it in both
    /// `NR_FILE_DIRTY` and `NR_WRITEBACK`).
    charged: AtomicU64,
    /// The hard limit in pages (`dirty_ratio` of the budget): no writer dirties past it.
    limit: AtomicU64,
    /// Throttled writers write back until under this (`dirty_background_ratio`).
    background: AtomicU64,
    /// The highest dirty + writeback count seen.
    high_water: AtomicU64,
    /// Throttled writers asleep in [`DirtyAccount::wait_for_room`].
    throttled: AtomicU32,
    throttle: Mutex<()>,
    room: Condvar,
    /// `wb->b_dirty`: the files with dirty pages, by when each went from clean to dirty
    /// (oldest first), named by their address space's id. A file joins when its first page
    /// is tagged DIRTY and leaves when its last DIRTY tag goes ([`tag_dirty`],
    /// [`untag_dirty`], under the file's tag mutex: this mutex nests inside it and is a
    /// leaf), or when it is evicted dirty ([`DirtyAccount::file_dropped`]).
    files: Mutex<BTreeSet<(std::time::Instant, u64)>>,
}

impl DirtyAccount {
    /// Thresholds for `budget_pages`: `ratio_pct` and `background_pct` percent of it (at
    /// least one page each, background at most the limit).
    pub(crate) fn new(budget_pages: u64, ratio_pct: u32, background_pct: u32) -> DirtyAccount {
        let a = DirtyAccount {
            dirty: AtomicU64::new(0),
            writeback: AtomicU64::new(0),
            charged: AtomicU64::new(0),
            limit: AtomicU64::new(0),
            background: AtomicU64::new(0),
            high_water: AtomicU64::new(0),
            throttled: AtomicU32::new(0),
            throttle: Mutex::new(()),
            room: Condvar::new(),
            files: Mutex::new(BTreeSet::new()),
        };
        a.set_budget(budget_pages, ratio_pct, background_pct);
        a
    }

    /// Recomputes the thresholds for a budget changed at run time. Pages dirty beyond a
    /// lowered limit stay dirty; writers meet the new limit at their next reservation.
    pub(crate) fn set_budget(&self, budget_pages: u64, ratio_pct: u32, background_pct: u32) {
        let limit = (budget_pages * ratio_pct as u64 / 100).max(1);
        let background = (budget_pages * background_pct as u64 / 100).clamp(1, limit);
        self.limit.store(limit, Ordering::Relaxed);
        self.background.store(background, Ordering::Relaxed);
    }

    /// The hard limit in pages.
    pub(crate) fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// The background threshold in pages.
    pub(crate) fn background(&self) -> u64 {
        self.background.load(Ordering::Relaxed)
    }

    /// The charged count at or under which a throttled writer resumes: the limit less a batch
    /// (half the gap to the background threshold, at most 1 MiB of pages), so that a writer
    /// woken by a pass has room for more than one page before it sleeps again.
    fn resume_at(&self) -> u64 {
        let (limit, background) = (self.limit(), self.background());
        let batch = (limit.saturating_sub(background) / 2).clamp(1, 256);
        limit.saturating_sub(batch)
    }

    /// `balance_dirty_pages`' pause: sleeps until a writeback pass in another thread has
    /// cleaned pages (the charged count at or under [`DirtyAccount::resume_at`]), or for
    /// `timeout` at most.
    pub(crate) fn wait_for_room(&self, timeout: std::time::Duration) {
        let g = self.throttle.lock();
        // ORDERING: the increment, a SeqCst fence, then the load of `charged`; pairs with
        // `uncharge`'s decrement, fence and load of `throttled` (a store-buffering pair: the
        // two fences are ordered, so at least one side sees the other's write). Either this
        // thread sees the room made, or the thread that made it sees a sleeper and notifies
        // it (under `throttle`, so not before the wait below has released it). The SeqCst
        // accesses alone would do (the language orders them in one total order), but loom
        // checks SeqCst accesses as AcqRel and fences exactly, so the fences make the pair
        // checkable (`loom_tests::write::throttle_*`); off the slow path they cost one
        // `mfence` per cleaning that leaves room.
        self.throttled.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.charged.load(Ordering::SeqCst) > self.resume_at() {
            drop(self.room.wait_timeout(g, timeout));
        }
        self.throttled.fetch_sub(1, Ordering::Relaxed);
    }

    // ORDERING (all counters): Relaxed; they are statistics and a throttling heuristic read
    // under no lock. The bound "charged never exceeds the limit" is kept by writers checking it
    // under their inode's write lock before they dirty (see `cache::write`), not by ordering.

    /// Dirty pages in the cache now.
    pub(crate) fn dirty(&self) -> u64 {
        self.dirty.load(Ordering::Relaxed)
    }

    /// Pages under writeback now.
    pub(crate) fn writeback(&self) -> u64 {
        self.writeback.load(Ordering::Relaxed)
    }

    /// Dirty plus writeback pages as the limit counts them (reservations included).
    pub(crate) fn charged(&self) -> u64 {
        self.charged.load(Ordering::Relaxed)
    }

    /// The highest dirty + writeback count seen.
    pub(crate) fn high_water(&self) -> u64 {
        self.high_water.load(Ordering::Relaxed)
    }

    /// Reserves `n` pages of dirtiness if dirty plus writeback pages stay within the limit (a
    /// writer calls it before dirtying, so that concurrent writers of different files cannot
    /// overshoot the limit together). The reservation becomes the dirty count of the page
    /// ([`mark_dirty_reserved`]) or is given back ([`DirtyAccount::unreserve`]).
    pub(crate) fn try_reserve(&self, n: u64) -> bool {
        let mut cur = self.charged.load(Ordering::Relaxed);
        loop {
            if cur + n > self.limit() {
                return false;
            }
            // ORDERING: Relaxed (see above): the CAS makes reservations exact, nothing is
            // published through the count.
            match self
                .charged
                .compare_exchange(cur, cur + n, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.dirty.fetch_add(n, Ordering::Relaxed);
                    self.note_high_water(cur + n);
                    return true;
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Reserves `n` pages of dirtiness past the limit: for a writer whose throttle cannot
    /// make room because the dirty pages wait for the engine's write-ahead log (`cache/wal.rs`)
    /// and whose own thread may be the one to make the log durable. The budget still bounds
    /// the pages (an allocation that finds every page dirty and held fails).
    pub(crate) fn reserve_over(&self, n: u64) {
        // ORDERING: Relaxed, as `try_reserve`'s.
        let now = self.charged.fetch_add(n, Ordering::Relaxed) + n;
        self.dirty.fetch_add(n, Ordering::Relaxed);
        self.note_high_water(now);
    }

    /// Gives back a reservation that dirtied nothing.
    pub(crate) fn unreserve(&self, n: u64) {
        self.sub_dirty(n);
    }

    /// Pages under writeback dirty again without a reservation (a failed write kept dirty
    /// for a retry): their writeback charge becomes their dirty charge, so their writeback
    /// must end with [`DirtyAccount::end_writeback_kept`].
    fn redirty_from_writeback(&self, n: u64) {
        self.dirty.fetch_add(n, Ordering::Relaxed);
    }

    /// Raises the high-water mark to `now` if it is higher: a plain load first, so that the
    /// writes below the mark (nearly all of them) do not take the line exclusive.
    #[inline]
    fn note_high_water(&self, now: u64) {
        if now > self.high_water.load(Ordering::Relaxed) {
            self.high_water.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Dirty pages cleaned without a write (a cancelled dirtiness, a reservation given back):
    /// their charge goes too.
    fn sub_dirty(&self, n: u64) {
        self.dirty.fetch_sub(n, Ordering::Relaxed);
        self.uncharge(n);
    }

    /// `folio_start_writeback`'s accounting: dirty pages become writeback pages; the charge
    /// stays (the writeback count goes up first, so the two never read as less than it).
    pub(crate) fn start_writeback(&self, n: u64) {
        self.writeback.fetch_add(n, Ordering::Relaxed);
        self.dirty.fetch_sub(n, Ordering::Relaxed);
    }

    /// `folio_end_writeback`'s accounting: the pages are clean, their charge goes.
    pub(crate) fn end_writeback(&self, n: u64) {
        self.writeback.fetch_sub(n, Ordering::Relaxed);
        self.uncharge(n);
    }

    /// The end of a writeback whose pages stayed dirty
    /// ([`DirtyAccount::redirty_from_writeback`]): their charge stays.
    fn end_writeback_kept(&self, n: u64) {
        self.writeback.fetch_sub(n, Ordering::Relaxed);
    }

    fn uncharge(&self, n: u64) {
        // ORDERING: the decrement, a SeqCst fence, then the load of `throttled`; pairs with
        // `wait_for_room` (see there).
        let now = self.charged.fetch_sub(n, Ordering::SeqCst) - n;
        if now <= self.resume_at() {
            fence(Ordering::SeqCst);
            if self.throttled.load(Ordering::SeqCst) > 0 {
                self.wake_throttled();
            }
        }
    }

    /// The weakened variant `loom_tests::write` must catch: the wake-up side without its
    /// fence and with Relaxed accesses, so that store buffering lets it miss a sleeper that
    /// in turn misses the room (a lost wake-up).
    #[cfg(loom)]
    pub(crate) fn end_writeback_unfenced(&self, n: u64) {
        self.writeback.fetch_sub(n, Ordering::Relaxed);
        let now = self.charged.fetch_sub(n, Ordering::Relaxed) - n;
        if now <= self.resume_at() && self.throttled.load(Ordering::Relaxed) > 0 {
            self.wake_throttled();
        }
    }

    #[cold]
    fn wake_throttled(&self) {
        let _g = self.throttle.lock();
        self.room.notify_all();
    }
}

/// `folio_mark_dirty` (`filemap_dirty_folio` -> `__folio_mark_dirty`) for a writer that
/// reserved `reserved` pages of dirtiness ([`DirtyAccount::try_reserve`]: the folio's pages
/// if it was clean, or one): sets PG_dirty and, if it was clean, tags the folio DIRTY at its
/// first page, the reservation becoming its count (pages of it not reserved are charged past
/// the limit); if the folio was dirty already the reservation is given back. A change logged at `lsn` (0: none) is noted for the
/// write-ahead rule ([`note_lsn`]) in the same hold of the tags. The caller holds the folio
/// lock (the one that covered the change) and the folio is in its file's index.
pub(crate) fn mark_dirty_reserved(
    folio: &FolioLocked<'_>,
    wb: &WbState,
    acct: &DirtyAccount,
    lsn: u64,
    reserved: u64,
) {
    let was_dirty = folio.test_set_flag(PG_DIRTY);
    let nr = folio.nr_pages() as u64;
    if was_dirty {
        acct.unreserve(reserved);
        if lsn == 0 {
            return;
        }
    } else if nr > reserved {
        acct.reserve_over(nr - reserved);
    } else if reserved > nr {
        acct.unreserve(reserved - nr);
    }
    let mut t = wb.tags.lock();
    if !was_dirty {
        tag_dirty(&mut t, folio.index(), folio.nr_pages() as u64, wb, acct);
    }
    note_lsn(&mut t, folio.index(), lsn);
}

/// A change to `folio`, dirty already, logged at `lsn` (0: none): its number is noted for the
/// write-ahead rule (what [`mark_dirty_reserved`] does for a dirty page, with no reservation
/// to give back). The caller holds the folio lock, or an exclusive latch on the page
/// (`PG_LATCHED`: no writeback of it starts until the latch ends).
pub(crate) fn note_change(folio: &Folio, wb: &WbState, lsn: u64) {
    debug_assert!(folio.test_flag(PG_DIRTY));
    if lsn != 0 {
        note_lsn(&mut wb.tags.lock(), folio.index(), lsn);
    }
}

/// A dirty large folio at `index` split into its `nr` pages, each dirty now (`cache/split.rs`):
/// every page gets the folio's DIRTY and TOWRITE tags and its log sequence numbers (the
/// first page has them already). The counts do not change: they were the folio's pages. The
/// caller holds the folio lock of the large folio and of each new page.
pub(crate) fn split_dirty(wb: &WbState, index: u64, nr: u64) {
    let mut t = wb.tags.lock();
    let towrite = t.towrite.contains(&index);
    let lsn = t.lsn.get(&index).copied();
    for i in index + 1..index + nr {
        t.dirty.insert(i);
        if towrite {
            t.towrite.insert(i);
        }
        if let Some(l) = lsn {
            t.lsn.insert(i, l);
        }
    }
}

/// Folios collapsed into one of `nr` pages at `index` (`cache/split.rs`): the dirty ones
/// among `pieces` ((first page, pages) each) hand their tags and log numbers to the new
/// folio, dirty as a whole now, and its pages that were clean are charged (past the limit:
/// the collapse cannot wait). Nothing happens if no piece was dirty. The caller holds the
/// folio locks of the pieces and of the new folio, dirty already if any piece was.
pub(crate) fn collapse_dirty(
    wb: &WbState,
    acct: &DirtyAccount,
    pieces: &[(u64, u64)],
    index: u64,
    nr: u64,
) {
    let mut t = wb.tags.lock();
    let (mut was_dirty, mut towrite, mut lsn) = (0, false, (u64::MAX, 0));
    for &(i, n) in pieces {
        if !t.dirty.remove(&i) {
            continue;
        }
        t.dirty_pages -= n;
        was_dirty += n;
        towrite |= t.towrite.remove(&i);
        if let Some((oldest, newest)) = t.lsn.remove(&i) {
            lsn = (lsn.0.min(oldest), lsn.1.max(newest));
        }
    }
    if was_dirty == 0 {
        return;
    }
    // The file stays on the dirty-file list (the list entry goes only with `untag_dirty`),
    // with its dirty age: the pages were dirty since then.
    t.dirty.insert(index);
    t.dirty_pages += nr;
    if towrite {
        t.towrite.insert(index);
    }
    if lsn.1 > 0 {
        t.lsn.insert(index, lsn);
    }
    drop(t);
    acct.reserve_over(nr - was_dirty);
}

/// Tags the folio of `nr` pages at page `index` DIRTY; a file's first dirty folio puts it
/// on the dirty-file list (`__mark_inode_dirty`: its dirty age starts now). The caller holds
/// the tag mutex.
pub(crate) fn tag_dirty(t: &mut Tags, index: u64, nr: u64, wb: &WbState, acct: &DirtyAccount) {
    if t.dirty.is_empty() {
        let now = std::time::Instant::now();
        t.dirtied_when = Some(now);
        acct.files.lock().insert((now, wb.id));
    }
    if t.dirty.insert(index) {
        t.dirty_pages += nr;
    }
}

/// Records that dirty page `index` holds a change logged at `lsn` (kept as the page's
/// highest): its writeback waits for the log to be durable up to it. The caller holds the
/// tag mutex, and either the page's folio lock with the page dirty (or about to be marked so
/// under the same lock), or the page under a writeback it is ending (no change and no other
/// writeback of it can start meanwhile: both wait for the writeback).
pub(crate) fn note_lsn(t: &mut Tags, index: u64, lsn: u64) {
    note_lsns(t, index, (lsn, lsn));
}

/// [`note_lsn`] of a page's (oldest, newest) pair (a page made dirty again keeps both).
fn note_lsns(t: &mut Tags, index: u64, (oldest, newest): (u64, u64)) {
    if newest > 0 {
        let e = t.lsn.entry(index).or_insert((oldest, newest));
        *e = (e.0.min(oldest), e.1.max(newest));
    }
}

/// Untags the folio of `nr` pages at page `index` (DIRTY and TOWRITE); a file's last dirty
/// folio takes it off the dirty-file list. The caller holds the tag mutex.
pub(crate) fn untag_dirty(t: &mut Tags, index: u64, nr: u64, wb: &WbState, acct: &DirtyAccount) {
    t.towrite.remove(&index);
    t.lsn.remove(&index);
    if t.dirty.remove(&index) {
        t.dirty_pages -= nr;
        if t.dirty.is_empty() {
            if let Some(when) = t.dirtied_when.take() {
                acct.files.lock().remove(&(when, wb.id));
            }
        }
    }
}

impl DirtyAccount {
    /// The files with dirty pages, oldest dirtied first (`b_dirty`): their address spaces'
    /// ids, a snapshot.
    pub(crate) fn dirty_files(&self) -> Vec<u64> {
        self.files.lock().iter().map(|&(_, id)| id).collect()
    }

    /// A file evicted with dirty pages (a deleted file, or one whose writeback failed and
    /// kept them) leaves the dirty-file list.
    pub(crate) fn file_dropped(&self, wb: &WbState) {
        let mut t = wb.tags.lock();
        if let Some(when) = t.dirtied_when.take() {
            self.files.lock().remove(&(when, wb.id));
        }
    }
}

/// `folio_cancel_dirty` (truncation) and the dirty hand-over of a replaced folio: clears
/// PG_dirty and, if it was set, the DIRTY and TOWRITE tags and the counts. Folio locked.
/// Returns whether it was dirty.
pub(crate) fn cancel_dirty(folio: &FolioLocked<'_>, wb: &WbState, acct: &DirtyAccount) -> bool {
    if !folio.test_clear_flag(PG_DIRTY) {
        return false;
    }
    let mut t = wb.tags.lock();
    untag_dirty(&mut t, folio.index(), folio.nr_pages() as u64, wb, acct);
    drop(t);
    acct.sub_dirty(folio.nr_pages() as u64);
    true
}

/// The part of `truncate_inode_pages_range` that ends the dirtiness of the pages of `m` from
/// page `first` on, before they are removed: each page that is dirty or under writeback
/// waits for its write in flight (stable pages), then its dirtiness is cancelled (its tags,
/// its count, its charge against the dirty limit). Returns the pages whose dirtiness was
/// cancelled; the pages themselves stay for the caller to remove.
pub(crate) fn cancel_dirty_from(m: &AddressSpace, first: u64, acct: &DirtyAccount) -> u64 {
    let mut cancelled = 0;
    for index in m.wb.unwritten_from(first) {
        if let Some(f) = m.pages.lookup(index) {
            let f = f.lock();
            if f.mapping() == m.pages.mapping_id() {
                wait_stable(&f);
                if cancel_dirty(&f, &m.wb, acct) {
                    cancelled += f.nr_pages() as u64;
                }
            }
        }
    }
    cancelled
}

/// `folio_wait_stable`: sleeps while the folio is under writeback (its bytes are being
/// written), so that a writer never changes bytes a write in flight is reading.
pub(crate) fn wait_stable(folio: &FolioLocked<'_>) {
    folio.folio_ref().wait_writeback();
}

/// Which tag a writeback pass walks (`enum writeback_sync_modes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyncMode {
    /// `WB_SYNC_NONE`: the DIRTY tag; folios under writeback are skipped (dirty throttling).
    Background,
    /// `WB_SYNC_ALL`: the TOWRITE snapshot taken at the start; folios under writeback are
    /// waited for and written again if redirtied (integrity sync).
    All,
    /// A fuzzy checkpoint up to this log sequence number: as [`SyncMode::All`], over the
    /// pages whose oldest logged change is at or below it (every change the log holds up to
    /// the point reaches the file; pages dirtied without a number are not included).
    Checkpoint(u64),
}

/// What writeback needs from the cache it writes for, as [`Evict`](crate::mm::lru::Evict)
/// is what reclaim needs and [`RaHost`](crate::mm::readahead::RaHost) what readahead needs:
/// the cache-wide accounting and policy, and the LRU's rotation of a folio reclaim wanted.
/// The file itself comes as its [`AddressSpace`].
pub(crate) trait WbHost {
    /// The cache-wide dirty and writeback counts and limits.
    fn dirty_account(&self) -> &DirtyAccount;

    /// What becomes of folios whose write failed.
    fn error_policy(&self) -> WbErrorPolicy;

    /// `folio_rotate_reclaimable`, for a folio reclaim marked while it was dirty or under
    /// writeback, once its writeback ends.
    fn rotate_reclaimable(&self, folio: &FolioRef<'_>);
    /// The I/O engine a pass's writes are issued with.
    fn engine(&self) -> &crate::io::engine::Engine;
    /// The write-ahead rule (`XLogFlush` before `FlushBuffer` writes a page): makes the
    /// engine's log durable up to `lsn` before pages holding changes logged up to it are
    /// written; `Ok` at once if it already is.
    fn flush_log(&self, lsn: u64) -> io::Result<()>;
    /// How far the engine's log is known to be durable (pages up to it may be written).
    fn durable_lsn(&self) -> u64;
}

/// One pass's view of its file and cache (`struct writeback_control` with the mapping):
/// built by [`writepages`], private to this module.
struct Wbc<'a> {
    host: &'a dyn WbHost,
    pages: &'a Index,
    backing: &'a dyn Backing,
    wb: &'a WbState,
    acct: &'a DirtyAccount,
    /// `i_size`, read under each folio's lock to clamp what is written.
    size: &'a AtomicU64,
    policy: WbErrorPolicy,
    /// The file's count of writes issued to its backing, bumped before each (revalidation
    /// tells the cache's own changes of the file from foreign ones by it).
    seq: &'a AtomicU64,
    /// The size the backing is known to hold, grown by each successful write before its
    /// folios end writeback (so a truncation that waited for them sets it last).
    disk_size: &'a AtomicU64,
    /// What the pass is: a [`Pass::Direct`] one never waits for a folio lock and never calls
    /// the log hook; a [`Pass::Pageout`] one skips folios used since reclaim queued them.
    pass: Pass,
}

/// What a writeback pass did.
#[derive(Debug, Default)]
pub(crate) struct WbOutcome {
    /// Pages written (or attempted).
    pub(crate) pages: u64,
    /// Vectored writes issued.
    pub(crate) writes: u64,
    /// Bytes written.
    pub(crate) bytes: u64,
    /// The first error (already recorded in the error sequence), with the byte at which the
    /// backing refused to go on (its run's bytes before it were written).
    pub(crate) error: Option<(u64, io::Error)>,
    /// The end of the furthest byte range written successfully (the backing file is at least
    /// this long now).
    pub(crate) end: u64,
    /// A background pass found another pass writing the file back and did nothing.
    pub(crate) busy: bool,
    /// The write-ahead log could not be made durable: the pages waiting for it were not
    /// written and are dirty again (the first such error).
    pub(crate) log_error: Option<io::Error>,
    /// Dirty pages a background pass skipped because an exclusive latch updates them in
    /// place (`PG_LATCHED`): they stay dirty until it commits.
    pub(crate) latched: u64,
    /// Of the pages a [`pageout_direct`] was given, those still dirty after it (locked,
    /// latched, holding a change the log does not yet hold durably, or the file busy).
    pub(crate) held: Vec<u64>,
}

/// Folios taken per look at the tags (`PAGEVEC_SIZE`-like: the mutex is not held for long).
const WB_BATCH: usize = 16;
/// The most folios one vectored write carries (`IOV_MAX` is 1024; 256 pages is 1 MiB).
const WB_RUN_MAX: usize = 256;
/// The most pages one background pass writes before it lets a waiting sync have the file
/// (`MAX_WRITEBACK_PAGES`, 4 MiB).
pub(crate) const WB_BACKGROUND_CHUNK: u64 = 1024;

/// A contiguous run of folios under writeback, waiting to be written with one call.
struct Run<'a> {
    start: u64,
    /// The page after the run's last folio.
    next: u64,
    folios: Vec<(FolioRef<'a>, usize)>,
    /// Each folio's (oldest, newest) log sequence numbers ((0, 0): none), parallel to
    /// `folios`.
    lsns: Vec<(u64, u64)>,
}

/// `do_writepages` -> `writeback_iter` over the page range `start..=end`: writes the file's
/// dirty folios (all of them, or in `SyncMode::All` those dirty when the pass started),
/// contiguous runs coalesced into one vectored write each.
///
/// Writes to the file's writer backing; a file no handle opened for writing has none, and
/// the pass does nothing.
pub(crate) fn writepages(
    host: &dyn WbHost,
    m: &AddressSpace,
    start: u64,
    end: u64,
    mode: SyncMode,
) -> WbOutcome {
    writepages_inner(host, m, start, end, mode, None, Pass::Plain)
}

/// Reclaim's `pageout()` for the pages `listed` (sorted, each once): a background pass over
/// those of them that are still dirty, in that order (runs coalesced as in [`writepages`]).
/// Reclaim met them dirty at the tail of the inactive list and marked them `PG_reclaim`, so
/// each is rotated back to the tail when its write ends (`folio_rotate_reclaimable`) and
/// freed by the next scan: the pages written are the cold ones reclaim is about to evict,
/// not the hot ones a pass in file order would write again and again.
///
/// The flusher writes them a while after reclaim queued them: one used again meanwhile
/// (referenced or activated) is skipped, as `shrink_folio_list` keeps a folio
/// `folio_check_references` finds used instead of paging it out; it stays dirty, and reclaim
/// queues it again if it comes back to the tail unused. Writing it would be wasted: it is
/// about to be changed again, not evicted. Not while an allocation waits for pages
/// (`urgent`): then every queued page is written, lest the skipped ones be all it has.
pub(crate) fn pageout(
    host: &dyn WbHost,
    m: &AddressSpace,
    listed: &[u64],
    urgent: bool,
) -> WbOutcome {
    debug_assert!(listed.windows(2).all(|w| w[0] < w[1]));
    let pass = if urgent { Pass::Plain } else { Pass::Pageout };
    writepages_inner(
        host,
        m,
        0,
        u64::MAX,
        SyncMode::Background,
        Some(listed),
        pass,
    )
}

/// [`pageout`] by the thread whose allocation found no clean page (InnoDB's single-page
/// flush from the LRU tail, `buf_LRU_get_free_block` -> `buf_flush_single_page_from_LRU`;
/// the kernel leaves file pages to kswapd and the flusher, but its writers can wait on
/// them, which a buffer pool's cannot afford). That thread may hold anything of its own
/// (a folio lock, a latch, the engine's log lock around its call into the cache), so the
/// pass never waits: it skips a page whose lock is taken, a file whose pass is running, and
/// a page holding a change logged past the durable point (it does not call the log hook,
/// which may need a lock its caller holds: the write-ahead rule holds by choosing another
/// page). Pages it writes end their writeback before it returns, rotated to the inactive
/// tail for the allocation's next scan. Unlike the flusher's [`pageout`], it writes a page
/// used since reclaim queued it: the allocation needs a page now, and the queue's first are
/// the coldest it has.
pub(crate) fn pageout_direct(host: &dyn WbHost, m: &AddressSpace, listed: &[u64]) -> WbOutcome {
    debug_assert!(listed.windows(2).all(|w| w[0] < w[1]));
    let mut out = writepages_inner(
        host,
        m,
        0,
        u64::MAX,
        SyncMode::Background,
        Some(listed),
        Pass::Direct,
    );
    let tags = m.wb.tags.lock();
    out.held = listed
        .iter()
        .filter(|i| tags.dirty.contains(i))
        .copied()
        .collect();
    out
}

/// Which kind of writeback pass a [`Wbc`] is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pass {
    /// A pass over a range of the file ([`writepages`]), or an urgent [`pageout`]: every
    /// dirty page it meets is written.
    Plain,
    /// The flusher's [`pageout`].
    Pageout,
    /// An allocation's [`pageout_direct`].
    Direct,
}

fn writepages_inner(
    host: &dyn WbHost,
    m: &AddressSpace,
    start: u64,
    end: u64,
    mode: SyncMode,
    listed: Option<&[u64]>,
    pass: Pass,
) -> WbOutcome {
    let Some(writer) = m.writer() else {
        return WbOutcome::default();
    };
    let t = &Wbc {
        host,
        pages: &m.pages,
        backing: &*writer,
        wb: &m.wb,
        acct: host.dirty_account(),
        size: &m.size,
        policy: host.error_policy(),
        seq: &m.wb_seq,
        disk_size: &m.disk_size,
        pass,
    };
    // A dirty large folio is tagged at its first page: a range starting inside one starts
    // at its first page (`writeback_iter` rounds to the folio too).
    let start = first_page_of(m, start);
    let mut out = WbOutcome::default();
    // `I_SYNC`: one pass per file. A sync waits for the pass in progress (it may be writing
    // pages this sync must see written); a background pass leaves a busy file, or one a sync
    // is waiting for, to that pass.
    let _io = match mode {
        SyncMode::All | SyncMode::Checkpoint(_) => {
            // ORDERING: Relaxed; only a hint to background passes, which look at it again
            // at each batch.
            t.wb.sync_waiting.fetch_add(1, Ordering::Relaxed);
            let g = t.wb.io.lock();
            t.wb.sync_waiting.fetch_sub(1, Ordering::Relaxed);
            g
        }
        SyncMode::Background => {
            let g = (t.wb.sync_waiting.load(Ordering::Relaxed) == 0)
                .then(|| t.wb.io.try_lock())
                .flatten();
            let Some(g) = g else {
                out.busy = true;
                return out;
            };
            g
        }
    };
    match mode {
        SyncMode::All => {
            // `tag_pages_for_writeback`: freeze the set this sync must write.
            let mut tags = t.wb.tags.lock();
            let Tags { dirty, towrite, .. } = &mut *tags;
            towrite.extend(dirty.range(start..=end).copied());
        }
        SyncMode::Checkpoint(upto) => {
            // The same freeze, of the pages holding a change logged at or below the point.
            let mut tags = t.wb.tags.lock();
            let Tags {
                dirty,
                towrite,
                lsn,
                ..
            } = &mut *tags;
            towrite.extend(
                dirty
                    .range(start..=end)
                    .filter(|i| lsn.get(i).is_some_and(|&(oldest, _)| oldest <= upto))
                    .copied(),
            );
        }
        SyncMode::Background => {}
    }
    let mut run: Option<Run<'_>> = None;
    // Runs prepared and not yet written (the plug): written together when it is full, before
    // the pass sleeps on another pass's write, and at the end.
    let mut plug: Vec<Run<'_>> = Vec::new();
    let mut cursor = start;
    let mut latched = 0;
    loop {
        let batch: Vec<u64> = {
            let tags = t.wb.tags.lock();
            let set = match mode {
                SyncMode::All | SyncMode::Checkpoint(_) => &tags.towrite,
                SyncMode::Background => &tags.dirty,
            };
            match listed {
                Some(list) => {
                    let from = list.partition_point(|&i| i < cursor);
                    list[from..]
                        .iter()
                        .filter(|i| set.contains(i))
                        .take(WB_BATCH)
                        .copied()
                        .collect()
                }
                None => set.range(cursor..=end).take(WB_BATCH).copied().collect(),
            }
        };
        let Some(&last) = batch.last() else { break };
        if mode == SyncMode::Background
            && (out.pages >= WB_BACKGROUND_CHUNK || t.wb.sync_waiting.load(Ordering::Relaxed) > 0)
        {
            // `writeback_chunk_size`: enough for one background pass; a sync may be waiting.
            break;
        }
        cursor = last + 1;
        for index in batch {
            let Some((folio, len, lsn)) =
                prepare_writeback(t, index, mode, &mut latched, &mut || {
                    // About to sleep on another pass's write: ours must not keep it waiting
                    // (two integrity syncs each waiting for the other's unsubmitted run).
                    plug.extend(run.take());
                    submit(t, std::mem::take(&mut plug), &mut out);
                })
            else {
                continue;
            };
            match &mut run {
                // Contiguous in the file, and the run so far all whole pages: a folio clamped
                // at EOF (`len` short of its size) ends a run, since the next buffer would
                // land right after its last byte, not at its page. (The size can grow between
                // two folios of one pass: a writer extended the file meanwhile.)
                Some(r)
                    if r.next == index
                        && r.folios.len() < WB_RUN_MAX
                        && r.folios.last().is_some_and(|(f, l)| *l == f.size()) =>
                {
                    r.next = index + folio.nr_pages() as u64;
                    r.folios.push((folio, len));
                    r.lsns.push(lsn);
                }
                _ => {
                    if let Some(r) = run.take() {
                        plug_run(t, &mut plug, r, &mut out);
                    }
                    run = Some(Run {
                        start: index,
                        next: index + folio.nr_pages() as u64,
                        folios: vec![(folio, len)],
                        lsns: vec![lsn],
                    });
                }
            }
        }
        if cursor > end || cursor == 0 {
            break;
        }
    }
    plug.extend(run.take());
    submit(t, plug, &mut out);
    out.latched = latched;
    out
}

/// The most runs, and pages, a pass holds in its plug before it writes them. A sync of
/// scattered pages (a B-tree's updates) is one run per page: the engine keeps its ring (128
/// entries) full from the plug, so the more runs a plug holds, the deeper the device's queue
/// stays. `write --dir` on ext4 (a virtio disk, 5 runs each), randwrite against the kernel's
/// buffered writes at 1 / 2 threads: 32 runs 0.80x / 0.76x, 128 runs 1.02x / 1.11x, 512
/// runs 1.22x / 1.20x. 4,096 pages (16 MiB) bounds how long a page waits under writeback for
/// its write to be issued.
const WB_PLUG_RUNS: usize = 512;
const WB_PLUG_PAGES: usize = 4096;

/// Adds a finished run to the plug, writing the plug out when it is full.
fn plug_run<'a>(t: &Wbc<'a>, plug: &mut Vec<Run<'a>>, run: Run<'a>, out: &mut WbOutcome) {
    plug.push(run);
    let pages: u64 = plug.iter().map(|r| r.next - r.start).sum();
    if plug.len() >= WB_PLUG_RUNS || pages >= WB_PLUG_PAGES as u64 {
        submit(t, std::mem::take(plug), out);
    }
}

/// `folio_prepare_writeback` + `folio_clear_dirty_for_io` + `folio_start_writeback` for the
/// folio at `index`: the folio under writeback (unlocked, referenced) with the bytes to write
/// and the (oldest, newest) log sequence numbers of its changes ((0, 0): none), or `None` if
/// there is nothing to write there. `before_wait` runs before it sleeps (on the
/// folio's lock, or on a write of it already in flight): it writes out the pass's plug.
///
/// A page an exclusive latch updates in place (`PG_LATCHED`) holds no bytes anyone may read
/// until the latch commits: a background pass skips it (still dirty, counted in `latched`),
/// an integrity pass waits for the commit (the cache refuses a sync from the latch's own
/// holder before it gets here: `cache/sync.rs`).
fn prepare_writeback<'a>(
    t: &Wbc<'a>,
    index: u64,
    mode: SyncMode,
    latched: &mut u64,
    before_wait: &mut dyn FnMut(),
) -> Option<(FolioRef<'a>, usize, (u64, u64))> {
    loop {
        let folio = lock_listed(t, index, before_wait)?;
        // ORDERING: Acquire; pairs with the Release clear of `FolioRef::end_latch`, which a
        // latch's commit may make without the folio lock: the bytes this pass writes are the
        // commit's. (The write's `data()` loads Acquire again.)
        if folio.test_flag(PG_DIRTY) && folio.is_latched() {
            if mode == SyncMode::Background {
                *latched += 1;
                return None;
            }
            before_wait();
            let folio = folio.unlock();
            folio.wait_unlatched();
            continue;
        }
        return start_writeback(t, folio, index, mode, before_wait);
    }
}

/// The folio at `index` of a writeback pass, locked and still there; `None` if the page left
/// (its stale tags dropped).
fn lock_listed<'a>(
    t: &Wbc<'a>,
    index: u64,
    before_wait: &mut dyn FnMut(),
) -> Option<FolioLocked<'a>> {
    loop {
        let Some(f) = t.pages.lookup(index) else {
            // Truncated away: its tags went with it (`cancel_dirty`); drop a stale TOWRITE.
            t.wb.tags.lock().towrite.remove(&index);
            return None;
        };
        // A task that sleeps flushes its plug first (`sched_submit_work`): the holder of this
        // lock may be waiting for the writeback of a page this pass has not written yet.
        let f = match f.try_lock() {
            Ok(f) => f,
            Err(_) if t.pass == Pass::Direct => return None,
            Err(f) => {
                before_wait();
                f.lock()
            }
        };
        if f.mapping() == t.pages.mapping_id() && f.index() == index {
            return Some(f);
        }
        if f.mapping() == t.pages.mapping_id() && f.nr_pages() > 1 {
            // A large folio starting before the page caches it now (the page was written
            // back or truncated since this pass listed it, and readahead filled the range;
            // or a block latch made the range one folio): the tag is stale, since a dirty
            // large folio is tagged at its first page. Looking again would find the same
            // folio forever, holding this file's pass (`I_SYNC`) and, with it, every writer
            // throttled on the file.
            t.wb.tags.lock().towrite.remove(&index);
            return None;
        }
        // Replaced or truncated while we locked it: look again.
    }
}

/// The rest of [`prepare_writeback`] for the locked, unlatched folio of `index`.
fn start_writeback<'a>(
    t: &Wbc<'a>,
    folio: FolioLocked<'a>,
    index: u64,
    mode: SyncMode,
    before_wait: &mut dyn FnMut(),
) -> Option<(FolioRef<'a>, usize, (u64, u64))> {
    if !folio.test_flag(PG_DIRTY) {
        // Written by someone else meanwhile.
        t.wb.tags.lock().towrite.remove(&index);
        return None;
    }
    if t.pass == Pass::Pageout && folio.flags() & (PG_ACTIVE | PG_REFERENCED) != 0 {
        // Used since reclaim queued it: about to change again, not to be evicted.
        return None;
    }
    if folio.test_flag(PG_WRITEBACK) {
        if mode == SyncMode::Background {
            return None;
        }
        // Redirtied while a write of older bytes is in flight: wait, then write it again.
        before_wait();
        folio.folio_ref().wait_writeback();
    }
    let nr = folio.nr_pages() as u64;
    let pos = index << PAGE_SHIFT;
    // ORDERING: Relaxed; `i_size` changes under the folio locks of the pages it cuts (the
    // truncation locks them after storing it), and we hold this folio's lock.
    let size = t.size.load(Ordering::Relaxed);
    let len = size.saturating_sub(pos).min(folio.size() as u64) as usize;
    if len == 0 {
        // Wholly past EOF (a truncation is cutting it): nothing of it belongs in the file.
        folio.clear_flag(PG_DIRTY);
        let mut tags = t.wb.tags.lock();
        untag_dirty(&mut tags, index, nr, t.wb, t.acct);
        drop(tags);
        t.acct.sub_dirty(nr);
        return None;
    }
    folio.clear_flag(PG_DIRTY);
    folio.set_flag(PG_WRITEBACK);
    let lsn = {
        let mut tags = t.wb.tags.lock();
        // Read under the folio lock, as every change noted it: the bytes written below hold
        // no change logged past this number.
        let lsn = tags.lsn.get(&index).copied().unwrap_or((0, 0));
        untag_dirty(&mut tags, index, nr, t.wb, t.acct);
        tags.writeback.insert(index);
        tags.writeback_pages += nr;
        lsn
    };
    t.acct.start_writeback(nr);
    Some((folio.unlock(), len, lsn))
}

/// Writes the runs of a plug (`blk_finish_plug`): with one vectored write each, issued
/// together through the cache's engine (completions in any order; more writes only for a run
/// the backing wrote short), then ends each run's writeback. A sync issued after the pass
/// covers them all: every write has completed when this returns.
fn submit(t: &Wbc<'_>, runs: Vec<Run<'_>>, out: &mut WbOutcome) {
    // The write-ahead rule, once for the plug: the log is made durable up to every change
    // the plug's pages hold before any of them is written. If it cannot be, the pages whose
    // changes it already covers are written and the others are dirty again, with their
    // numbers (reclaim and the dirty limit then find the former clean).
    let lsn = runs
        .iter()
        .flat_map(|r| r.lsns.iter().map(|&(_, newest)| newest))
        .max()
        .unwrap_or(0);
    let durable = t.host.durable_lsn();
    let runs = if lsn <= durable {
        runs
    } else if t.pass == Pass::Direct {
        // Never the log hook here: the pages past the durable point wait for the flusher.
        hold_back(t, runs, durable)
    } else {
        match t.host.flush_log(lsn) {
            Ok(()) => runs,
            Err(e) => {
                out.log_error.get_or_insert(e);
                hold_back(t, runs, t.host.durable_lsn())
            }
        }
    };
    // A run that ends in a folio clamped at EOF writes a partial block: under direct I/O the
    // backing writes that block whole and then cuts the file back to its size
    // (`FileBacking`'s bounce write), which would cut off a write beyond it still in flight
    // (the file grew during the pass, so pages past the old EOF are in the same plug). Such
    // runs go after the rest of the plug has completed.
    let (tails, whole): (Vec<Run<'_>>, Vec<Run<'_>>) = runs
        .into_iter()
        .partition(|r| r.folios.last().is_some_and(|(f, len)| *len < f.size()));
    submit_batch(t, whole, out);
    submit_batch(t, tails, out);
}

/// [`submit`] for runs that may be in flight together.
fn submit_batch(t: &Wbc<'_>, runs: Vec<Run<'_>>, out: &mut WbOutcome) {
    if runs.is_empty() {
        return;
    }
    // ORDERING: SeqCst; pairs with revalidation's loads around its `fstat` (cache::inode).
    t.seq.fetch_add(runs.len() as u64, Ordering::SeqCst);
    let bufs: Vec<Vec<&[u8]>> = runs
        .iter()
        .map(|run| {
            run.folios
                .iter()
                .map(|(f, len)| &f.data().expect("folios under writeback are uptodate")[..*len])
                .collect()
        })
        .collect();
    if runs.len() == 1 || !crate::io::engine::batches_help(t.backing) {
        // One run, or a buffered file (`batches_help`): written in order, in this thread.
        for (run, b) in runs.iter().zip(&bufs) {
            let mut written = 0;
            let offset = run.start << PAGE_SHIFT;
            let r = write_all_vectored(t.backing, b, offset, None, &mut out.writes, &mut written);
            end_run(t, run, written, r, out);
        }
        return;
    }
    use crate::io::copy_error;
    use crate::io::engine::Req;
    let mut reqs: Vec<Req<'_>> = runs
        .iter()
        .zip(&bufs)
        .map(|(run, b)| Req::write(run.start << PAGE_SHIFT, b.clone()))
        .collect();
    out.writes += reqs.len() as u64;
    // `folio_end_writeback` per completion (the bio's end_io): each run's pages end their
    // writeback as its write completes, while the rest of the plug is in flight, so a
    // throttled writer or a reclaimer waiting for them goes on at once.
    t.host.engine().run_each(t.backing, &mut reqs, &mut |i, r| {
        let (run, b) = (&runs[i], &bufs[i]);
        let mut written = 0;
        // The request's result is the first call's; a short write goes on with the backing's
        // own calls.
        let first = r.as_ref().map(|&n| n).map_err(copy_error);
        let r = write_all_vectored(
            t.backing,
            b,
            run.start << PAGE_SHIFT,
            Some(first),
            &mut out.writes,
            &mut written,
        );
        end_run(t, run, written, r, out);
    });
}

/// The end of one run's write: records what reached the file and any error, then ends the
/// writeback of every folio of the run.
fn end_run(t: &Wbc<'_>, run: &Run<'_>, written: usize, r: io::Result<()>, out: &mut WbOutcome) {
    let offset = run.start << PAGE_SHIFT;
    out.pages += run.next - run.start;
    // The bytes that reached the file count whether or not the rest of the run followed
    // them: a run cut short (`EFBIG` at a size limit, `ENOSPC`) leaves them in the file, and
    // a later fill must read them there, not take them for a hole of zeros.
    if written > 0 {
        out.bytes += written as u64;
        out.end = out.end.max(offset + written as u64);
        t.disk_size
            .fetch_max(offset + written as u64, Ordering::Relaxed);
    }
    let failed = match r {
        Ok(()) => false,
        Err(e) => {
            t.wb.err.set(e.raw_os_error().unwrap_or(libc::EIO));
            if out.error.is_none() {
                out.error = Some((offset + written as u64, e));
            }
            true
        }
    };
    for ((folio, _), &lsn) in run.folios.iter().zip(&run.lsns) {
        if failed && t.policy == WbErrorPolicy::KeepDirty {
            unwrite(t, folio, lsn);
        } else {
            end_writeback(t, folio, false);
        }
    }
}

/// Splits `runs` around the pages holding changes logged past `durable`: those are given
/// back ([`unwrite`]), and the contiguous stretches between them returned as runs to write.
fn hold_back<'a>(t: &Wbc<'a>, runs: Vec<Run<'a>>, durable: u64) -> Vec<Run<'a>> {
    let mut out = Vec::new();
    for run in runs {
        let mut cur: Option<Run<'a>> = None;
        for ((folio, len), lsn) in run.folios.into_iter().zip(run.lsns) {
            if lsn.1 > durable {
                unwrite(t, &folio, lsn);
                out.extend(cur.take());
                continue;
            }
            let r = cur.get_or_insert_with(|| Run {
                start: folio.index(),
                next: folio.index(),
                folios: Vec::new(),
                lsns: Vec::new(),
            });
            r.next = folio.index() + folio.nr_pages() as u64;
            r.folios.push((folio, len));
            r.lsns.push(lsn);
        }
        out.extend(cur);
    }
    out
}

/// Ends the writeback of a folio whose bytes did not reach the file (its log could not be
/// flushed, or its write failed and is kept for a retry): dirty again, with its log sequence
/// numbers back, as before the pass took it.
fn unwrite(t: &Wbc<'_>, folio: &FolioRef<'_>, lsn: (u64, u64)) {
    let mut kept = false;
    if !folio.test_set_flag(PG_DIRTY) {
        // Redirty before the writeback ends, so that truncation (which waits for it)
        // cancels this dirtiness if the page goes away meanwhile.
        let mut tags = t.wb.tags.lock();
        if folio.mapping() == t.pages.mapping_id() {
            tag_dirty(
                &mut tags,
                folio.index(),
                folio.nr_pages() as u64,
                t.wb,
                t.acct,
            );
            note_lsns(&mut tags, folio.index(), lsn);
            drop(tags);
            t.acct.redirty_from_writeback(folio.nr_pages() as u64);
            kept = true;
        } else {
            folio.clear_flag(PG_DIRTY);
        }
    }
    end_writeback(t, folio, kept);
}

/// `folio_end_writeback`: untags the folio and clears PG_writeback, waking its waiters; a
/// folio reclaim had picked loses PG_reclaim and moves to the inactive tail. `kept`: the
/// folio was made dirty again by the failed write it ends, and keeps its charge.
fn end_writeback(t: &Wbc<'_>, folio: &FolioRef<'_>, kept: bool) {
    let nr = folio.nr_pages() as u64;
    {
        let mut tags = t.wb.tags.lock();
        if tags.writeback.remove(&folio.index()) {
            tags.writeback_pages -= nr;
        }
    }
    if kept {
        t.acct.end_writeback_kept(nr);
    } else {
        t.acct.end_writeback(nr);
    }
    // `folio_end_writeback`: a folio reclaim wanted goes to the inactive tail to be freed
    // first (if the write failed and it is dirty again, it stays where it is).
    if folio.flags() & PG_RECLAIM != 0
        && folio.test_clear_flag(PG_RECLAIM)
        && !folio.test_flag(PG_DIRTY)
    {
        t.host.rotate_reclaimable(folio);
    }
    folio.end_writeback();
}

/// The first page of the folio caching page `index` of `m`, or `index` if none does: where
/// the tags of the folio holding `index` are.
fn first_page_of(m: &AddressSpace, index: u64) -> u64 {
    if index == 0 {
        return 0;
    }
    m.pages
        .lookup(index)
        .map_or(index, |f| f.index().min(index))
}

/// Writes every byte of `bufs` at `offset`, continuing after short writes; a write of zero
/// bytes is an error (`WriteZero`). `written` counts the bytes the backing took, also when
/// it then fails. `first`, if given, is the result of a first write already made (by the
/// engine), which the loop takes in place of its first call.
fn write_all_vectored(
    backing: &dyn Backing,
    bufs: &[&[u8]],
    mut offset: u64,
    mut first: Option<io::Result<usize>>,
    calls: &mut u64,
    written: &mut usize,
) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
    let mut rest: &mut [IoSlice<'_>] = &mut slices;
    while !rest.is_empty() {
        let r = first.take().unwrap_or_else(|| {
            *calls += 1;
            backing.write_vectored_at(rest, offset)
        });
        match r {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("{backing:?} wrote 0 bytes at offset {offset}"),
                ))
            }
            Ok(n) => {
                let left: usize = rest.iter().map(|s| s.len()).sum();
                if n > left {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{backing:?} reported {n} bytes written of {left} at offset {offset}"
                        ),
                    ));
                }
                offset += n as u64;
                *written += n;
                IoSlice::advance_slices(&mut rest, n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `__filemap_fdatawait_range`: waits for every folio of `start..=end` that is under
/// writeback now (a snapshot of the WRITEBACK tag: later writebacks are not waited for).
pub(crate) fn wait_writeback_range(m: &AddressSpace, start: u64, end: u64) {
    let start = first_page_of(m, start);
    let under: Vec<u64> =
        m.wb.tags
            .lock()
            .writeback
            .range(start..=end)
            .copied()
            .collect();
    for index in under {
        if let Some(f) = m.pages.lookup(index) {
            f.wait_writeback();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_dirty_file_list_holds_the_dirty_files_oldest_first() {
        let acct = DirtyAccount::new(100, 20, 10);
        let a = WbState {
            id: 1,
            ..WbState::default()
        };
        let b = WbState {
            id: 2,
            ..WbState::default()
        };
        let tag = |wb: &WbState, i| tag_dirty(&mut wb.tags.lock(), i, 1, wb, &acct);
        let untag = |wb: &WbState, i| untag_dirty(&mut wb.tags.lock(), i, 1, wb, &acct);
        tag(&a, 5);
        std::thread::sleep(std::time::Duration::from_millis(2));
        tag(&b, 0);
        tag(&b, 1);
        tag(&a, 6);
        assert_eq!(acct.dirty_files(), [1, 2], "a was dirtied first");
        untag(&a, 5);
        assert_eq!(acct.dirty_files(), [1, 2], "a still has page 6");
        untag(&a, 6);
        assert_eq!(acct.dirty_files(), [2]);
        assert_eq!(a.dirtied_when(), None);
        std::thread::sleep(std::time::Duration::from_millis(2));
        tag(&a, 7);
        assert_eq!(acct.dirty_files(), [2, 1], "dirtied again: the newest");
        acct.file_dropped(&b);
        assert_eq!(acct.dirty_files(), [1]);
        untag(&a, 7);
        assert!(acct.dirty_files().is_empty());
    }
}
