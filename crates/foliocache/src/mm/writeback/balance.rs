//! The passes over a cache's dirty files: the dirty throttle's entry, `balance_dirty_pages`
//! (`mm/page-writeback.c`), which a writer calls before it dirties a page, and the flusher's
//! two passes, kupdate and background (`wb_check_old_data_flush` and
//! `wb_check_background_flush` under `wb_do_writeback`, `fs/fs-writeback.c`). Both walk the
//! dirty-file list ([`DirtyAccount::dirty_files`], the kernel's `b_dirty`), oldest dirtied
//! first, never every file of the cache.
//!
//! The cache supplies the files and one writeback pass over a file with its effects on the
//! cache (counters, the cache-wide error sequence) through [`DirtyFiles`]; the flusher's
//! thread and the writers' calls stay in the cache.

use std::time::{Duration, Instant};

use super::{DirtyAccount, SyncMode, WbOutcome, WB_BACKGROUND_CHUNK};
use crate::mm::filemap::AddressSpace;

/// What the dirty-file passes need from a cache.
pub(crate) trait DirtyFiles {
    /// A file of the cache (its inode).
    type File: ?Sized;
    /// A counted reference on a file, as the dirty-file list hands them out.
    type Handle: std::ops::Deref<Target = Self::File>;

    /// The cache's dirty and writeback accounting, and its dirty-file list.
    fn account(&self) -> &DirtyAccount;

    /// The files on the dirty-file list now, oldest dirtied first.
    fn dirty_files(&self) -> Vec<Self::Handle>;

    /// A file's address space.
    fn space<'a>(&self, f: &'a Self::File) -> &'a AddressSpace;

    /// One writeback pass over every page of `f` (`writepages` with the cache's bookkeeping).
    fn write_back(&self, f: &Self::File, mode: SyncMode) -> WbOutcome;

    /// A writer met the dirty limit (counted).
    fn throttled(&self);
}

/// The longest a throttled writer sleeps before it looks for dirty files to write back again.
const THROTTLE_PAUSE: Duration = Duration::from_millis(1);

/// `balance_dirty_pages`, before `n` pages of `this` are dirtied (a page, or a large folio's):
/// reserves their dirtiness under the dirty limit (given back by the caller if nothing was
/// dirtied). At the limit,
/// writes dirty folios back in this thread, this file's first, then the other dirty files',
/// oldest dirtied first, until the count is under the background threshold, and tries
/// again. A file another pass is writing back already is left to it; if every dirty file is,
/// the writer sleeps until those passes have made room (the flusher's I/O then overlaps this
/// writer's copies).
pub(crate) fn balance_dirty_pages<H: DirtyFiles>(h: &H, this: &H::File, n: u64) {
    let acct = h.account();
    // A folio larger than half the limit (a 2 MiB folio in a small cache) waits for half the
    // limit's worth of room, and the rest of it goes over once that is reserved: waiting for
    // room the other writers' reservations may never leave could not end.
    let over = n.saturating_sub((acct.limit() / 2).max(1));
    reserve(h, this, n - over);
    if over > 0 {
        acct.reserve_over(over);
    }
}

/// [`balance_dirty_pages`] for `n` pages, at most half the limit.
fn reserve<H: DirtyFiles>(h: &H, this: &H::File, n: u64) {
    let acct = h.account();
    if acct.try_reserve(n) {
        return;
    }
    h.throttled();
    let own = h.space(this).wb.id;
    loop {
        let out = h.write_back(this, SyncMode::Background);
        let (mut wrote, mut held) = (out.pages, out.log_error.is_some() || out.latched > 0);
        for other in h.dirty_files() {
            if acct.dirty() < acct.background() {
                break;
            }
            if h.space(&other).wb.id != own {
                let out = h.write_back(&other, SyncMode::Background);
                wrote += out.pages;
                held |= out.log_error.is_some() || out.latched > 0;
            }
        }
        if acct.try_reserve(n) {
            return;
        }
        if wrote == 0 && held {
            // The dirty pages wait for the write-ahead log, which could not be flushed (or
            // there is none to ask), or for exclusive latches to commit: waiting for room
            // could wait for this very thread's next commit. Go over the limit instead; the
            // budget still bounds the pages.
            acct.reserve_over(n);
            return;
        }
        if wrote == 0 {
            // Every dirty file is being written back by another pass (or its pages are under
            // writeback already): sleep until those passes clean some (the timeout bounds a
            // missed wake-up and lets this thread look again at files that became free).
            acct.wait_for_room(THROTTLE_PAUSE);
        } else {
            // Other writers took the room first, or their pages are under writeback now.
            std::thread::yield_now();
        }
        if acct.try_reserve(n) {
            return;
        }
    }
}

/// One wake-up of the flusher: the kupdate pass (every file dirty for `expire` or longer,
/// written until clean), then the background pass (files, oldest dirtied first, while the
/// cache's dirty pages are at or above the background threshold).
pub(crate) fn flush_pass<H: DirtyFiles>(h: &H, expire: Duration) {
    let now = Instant::now();
    let mut dirty: Vec<_> = h
        .dirty_files()
        .into_iter()
        .filter_map(|f| h.space(&f).wb.dirtied_when().map(|t| (t, f)))
        .collect();
    // The list is kept in `dirtied_when` order; sorted again in case a file was cleaned and
    // dirtied again since the snapshot.
    dirty.sort_by_key(|(t, _)| *t);
    let acct = h.account();
    for (t, f) in &dirty {
        if now.duration_since(*t) >= expire {
            write_chunks(h, f, || true);
        }
    }
    for (_, f) in &dirty {
        write_chunks(h, f, || acct.dirty() >= acct.background());
    }
}

/// Background passes over `f` while `more()` says so and a pass wrote a whole chunk (a pass
/// stops after `WB_BACKGROUND_CHUNK` pages, so that a sync waiting for the file gets its
/// turn between two); a file another pass has, or one a sync waits for, is left to it.
fn write_chunks<H: DirtyFiles>(h: &H, f: &H::File, more: impl Fn() -> bool) {
    while more() {
        let out = h.write_back(f, SyncMode::Background);
        if out.busy || out.pages < WB_BACKGROUND_CHUNK {
            break;
        }
    }
}
