//! The cache's side of writeback: one pass over an inode's dirty pages with its effects on
//! the cache (counters, `EFBIG`, the cache-wide error sequence), and the cache as the
//! dirty-file passes see it ([`DirtyHost`]). The mechanism itself (tags, `writepages`,
//! accounting, the dirty-file list, and the passes over it: `balance_dirty_pages` and the
//! flusher's) is [`crate::mm::writeback`].

use super::core::Core;
use super::inode::Inode;
use super::stats::Event;
use crate::mm::filemap::AddressSpace;
use crate::mm::sync::{Arc, Ordering};
use crate::mm::writeback::balance::{self, DirtyFiles};
use crate::mm::writeback::{self, DirtyAccount, SyncMode, WbOutcome};

/// One writeback pass over the pages `first..=last` of `m` (the file's writer backing), with
/// its effects on the mapping: the backing's known size grows, and its attributes are ours.
pub(crate) fn writeback_mapping(
    c: &Core,
    m: &Inode,
    first: u64,
    last: u64,
    mode: SyncMode,
) -> WbOutcome {
    crate::trace::span!("writeback_pages", path = %m.path.display());
    let out = writeback::writepages(c, &m.mapping, first, last, mode);
    account(c, m, out)
}

/// The pages reclaim queued for pageout ([`Config::pageout`](super::Config::pageout)),
/// written by the flusher before its other passes: each file of `files` (the dirty ones)
/// that has queued pages, those pages.
pub(crate) fn pageout(c: &Core, files: &[Arc<Inode>]) {
    for (id, pages) in c.take_pageout(usize::MAX) {
        if let Some(m) = files.iter().find(|m| m.id == id) {
            crate::trace::span!("pageout", path = %m.path.display());
            // ORDERING: Relaxed; a hint (an allocation waits at most a few passes longer).
            let urgent = c.alloc_waiting.load(Ordering::Relaxed) != 0;
            let out = writeback::pageout(c, &m.mapping, &pages, urgent);
            c.counters.add(Event::Pageouts, out.pages);
            account(c, m, out);
        }
    }
}

/// The pageout of an allocation that found no clean page: the [`DIRECT_PAGEOUT_BATCH`]
/// coldest queued pages of `files` (the dirty ones), written by this thread without waiting
/// for anything ([`writeback::pageout_direct`]: a page it would have to wait for, or whose
/// change is not yet logged durably, goes back at the head of the queue, for the flusher).
/// Returns what it did.
pub(crate) fn pageout_direct(c: &Core, files: &[Arc<Inode>]) -> DirectPageout {
    let mut done = DirectPageout::default();
    let queued = c.take_pageout(DIRECT_PAGEOUT_BATCH);
    done.taken = !queued.is_empty();
    for (id, pages) in queued {
        if let Some(m) = files.iter().find(|m| m.id == id) {
            crate::trace::span!("pageout_direct", path = %m.path.display());
            let mut out = writeback::pageout_direct(c, &m.mapping, &pages);
            done.held |= !out.held.is_empty();
            c.requeue_pageout(id, &std::mem::take(&mut out.held));
            c.counters.add(Event::Pageouts, out.pages);
            c.counters.add(Event::PageoutsDirect, out.pages);
            done.written += out.pages;
            account(c, m, out);
        }
    }
    done
}

/// What a [`pageout_direct`] did.
#[derive(Debug, Default)]
pub(crate) struct DirectPageout {
    /// Pages written.
    pub(crate) written: u64,
    /// It took queued pages (written, held, or written by someone else since they were
    /// queued).
    pub(crate) taken: bool,
    /// Some pages it took it could not write and queued again, for the flusher.
    pub(crate) held: bool,
}

/// The most queued pages one allocation writes itself: enough for the allocation and a few
/// after it (each written page is rotated to the inactive tail, where the next scans free it),
/// few enough that one caller's stall stays a few writes long.
pub(crate) const DIRECT_PAGEOUT_BATCH: usize = 32;

/// A pass's effects on the cache.
fn account(c: &Core, m: &Inode, out: WbOutcome) -> WbOutcome {
    if out.writes > 0 {
        c.counters.add(Event::WritebackPages, out.pages);
        c.counters.add(Event::WritebackWrites, out.writes);
        c.counters.add(Event::WritebackBytes, out.bytes);
    }
    if let Some((at, e)) = &out.error {
        if e.raw_os_error() == Some(libc::EFBIG) {
            c.note_efbig(m, *at);
        }
        c.counters.inc(Event::WritebackErrors);
        c.sb_err.set(e.raw_os_error().unwrap_or(libc::EIO), &m.path);
    }
    out
}
/// The cache as the dirty-file passes of [`crate::mm::writeback::balance`] see it: its core,
/// and `live`, which lists its dirty files, oldest dirtied first
/// (`CacheInner::dirty_inodes`, the dirty-file list).
pub(crate) struct DirtyHost<'a, L> {
    pub(crate) core: &'a Core,
    pub(crate) live: L,
}

impl<L: Fn() -> Vec<Arc<Inode>>> DirtyFiles for DirtyHost<'_, L> {
    type File = Inode;
    type Handle = Arc<Inode>;

    fn account(&self) -> &DirtyAccount {
        &self.core.dirty
    }

    fn dirty_files(&self) -> Vec<Arc<Inode>> {
        (self.live)()
    }

    fn space<'a>(&self, f: &'a Inode) -> &'a AddressSpace {
        &f.mapping
    }

    fn write_back(&self, f: &Inode, mode: SyncMode) -> WbOutcome {
        writeback_mapping(self.core, f, 0, u64::MAX, mode)
    }

    fn throttled(&self) {
        self.core.counters.inc(Event::DirtyThrottled);
    }
}

/// `balance_dirty_pages` for a writer of `m` ([`balance::balance_dirty_pages`]), with `live`
/// listing the cache's dirty files.
pub(super) fn balance_dirty_pages(c: &Core, m: &Inode, n: u64, live: impl Fn() -> Vec<Arc<Inode>>) {
    balance::balance_dirty_pages(&DirtyHost { core: c, live }, m, n);
}
