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
/// coldest queued pages of the files `files` lists (the dirty ones; called only if a page is
/// queued), written by this thread without waiting
/// for anything ([`writeback::pageout_direct`]: a page it would have to wait for, or whose
/// change is not yet logged durably, goes back at the head of the queue, for the flusher).
/// Returns what it did.
pub(crate) fn pageout_direct(c: &Core, files: impl FnOnce() -> Vec<Arc<Inode>>) -> DirectPageout {
    let mut done = DirectPageout::default();
    let queued = c.take_pageout(DIRECT_PAGEOUT_BATCH);
    if queued.is_empty() {
        return done;
    }
    done.taken = true;
    let files = files();
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

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::mm::folio::flags::{PG_ACTIVE, PG_REFERENCED};
    use crate::mm::folio::PAGE_SIZE;
    use crate::mm::sync::Ordering;
    use crate::{Config, FolioCache, OpenOptions};

    /// The flusher's pageout writes a queued page still unused since reclaim queued it, and
    /// leaves dirty one read or activated meanwhile (`folio_check_references` before
    /// `pageout()`); while an allocation waits for pages, it writes that one too.
    #[test]
    fn the_flushers_pageout_skips_pages_used_since_they_were_queued() {
        let c = FolioCache::new(Config::buffer_pool(64 * PAGE_SIZE).background_writeback(false))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        std::fs::write(&path, vec![0; 16 * PAGE_SIZE]).unwrap();
        let f = c.open_with(&path, OpenOptions::new().write(true)).unwrap();
        for i in 0..3 {
            f.get_folio_mut_in_place(i).unwrap()[0] = 1;
        }
        assert_eq!(f.dirty_pages(), 3);
        let m = f.mapping_ref();
        let flags = |i: u64, set: u64| {
            let folio = m.mapping.pages.lookup(i).unwrap();
            folio.clear_flag(PG_REFERENCED | PG_ACTIVE);
            if set != 0 {
                folio.set_flag(set);
            }
        };
        flags(0, 0);
        flags(1, PG_REFERENCED);
        flags(2, PG_ACTIVE);
        let core = &c.inner;
        let queue = |pages: &[u64]| {
            let mut q = core.pageout.lock();
            q.extend(pages.iter().map(|&i| (m.id, i)));
            core.pageout_queued.store(q.len() as u64, Ordering::Relaxed);
        };
        queue(&[0, 1, 2]);
        super::pageout(core, &core.dirty_inodes());
        assert_eq!(
            f.dirty_pages(),
            2,
            "page 0 written, pages 1 and 2 used since"
        );
        assert_eq!(c.stats().pageouts, 1);
        // An allocation waits: every queued page goes.
        core.alloc_waiting.fetch_add(1, Ordering::Relaxed);
        queue(&[1, 2]);
        super::pageout(core, &core.dirty_inodes());
        core.alloc_waiting.fetch_sub(1, Ordering::Relaxed);
        assert_eq!(f.dirty_pages(), 0);
        assert_eq!(c.stats().pageouts, 3);
        drop(f);
        c.drop_caches();
        assert_eq!(c.validate().unwrap().allocated_pages, 0);
    }
}
