//! The cache's side of writeback: one pass over an inode's dirty pages with its effects on
//! the cache (counters, `EFBIG`, the cache-wide error sequence), and the dirty throttle's
//! entry, `balance_dirty_pages` (`mm/page-writeback.c`), which writers call before they dirty
//! a page. The mechanism itself (tags, `writepages`, accounting) is [`crate::mm::writeback`].

use super::core::Core;
use super::inode::Inode;
use super::stats::Event;
use crate::mm::sync::Arc;
use crate::mm::writeback::{self, SyncMode, WbOutcome};

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
/// `balance_dirty_pages`, before a page is dirtied: reserves one page of dirtiness under the
/// dirty limit (given back by the caller if nothing was dirtied). At the limit, writes dirty
/// folios back in this thread, this file's first, then other files', until the count is
/// under the background threshold, and tries again. A file another pass is writing back
/// already is left to it; if every dirty file is, the writer sleeps until those passes have
/// made room (the flusher's I/O then overlaps this writer's copies). `live` lists the cache's
/// dirty files, oldest dirtied first (`CacheInner::dirty_inodes`, the dirty-file list),
/// looked at again at each round.
pub(super) fn balance_dirty_pages(c: &Core, m: &Inode, live: impl Fn() -> Vec<Arc<Inode>>) {
    let acct = &c.dirty;
    if acct.try_reserve(1) {
        return;
    }
    c.counters.inc(Event::DirtyThrottled);
    loop {
        let mut wrote = writeback_mapping(c, m, 0, u64::MAX, SyncMode::Background).pages;
        for other in live() {
            if acct.dirty() < acct.background() {
                break;
            }
            if other.id != m.id && other.mapping.wb.nr_dirty() > 0 {
                wrote += writeback_mapping(c, &other, 0, u64::MAX, SyncMode::Background).pages;
            }
        }
        if acct.try_reserve(1) {
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
        if acct.try_reserve(1) {
            return;
        }
    }
}

/// The longest a throttled writer sleeps before it looks for dirty files to write back again.
const THROTTLE_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);
