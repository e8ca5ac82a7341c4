//! Splitting a large folio of a file's cache into pages before a write or a truncation
//! inside it (`split_folio`, `truncate_inode_partial_folio`).
//!
//! # Splitting
//!
//! The write path changes bytes one page at a time, each page in a folio of its own (see
//! `cache::write`): before it writes into a large folio it splits it into pages
//! ([`split_folio_at`]), as the kernel's `write_begin` does for a filesystem without large
//! folio writes, and a truncation that cuts a large folio in two splits it first, so the pages
//! below the cut stay cached (an invalidation, which only drops clean pages, keeps a large
//! folio it covers in part whole, as `invalidate_mapping_pages` does). Large folios are
//! therefore never dirty: a dirty page is always
//! an order-0 folio, which keeps writeback's per-page tags exact.
//!
//! The split is a copy ([`Index::split_folio`](crate::mm::index::Index::split_folio)): new pages
//! take the large folio's bytes and its index slots under one index-lock hold, so a reader
//! never finds a page missing, and a reader that pinned the large folio keeps it, unchanged,
//! until it lets go. The kernel splits in place instead and fails while anyone else holds the
//! folio; a pinned block is this cache's normal use, so a split that a pin can block would make
//! writes wait on readers.

use super::error::CacheError;
use super::inode::Inode;
use super::sb::CacheInner;
use super::stats::Event;
use crate::mm::folio::flags::{PG_ACTIVE, PG_DIRTY, PG_WORKINGSET, PG_WRITEBACK};
use crate::mm::folio::{FolioLocked, PAGE_SIZE};

/// Splits the large folio that holds page `cut` of `m` and starts before it, if there is one
/// (`truncate_inode_partial_folio`): a truncation at `cut` then removes whole folios only.
pub(crate) fn split_across(c: &CacheInner, m: &Inode, cut: u64) -> Result<(), CacheError> {
    match m.mapping.pages.lookup(cut) {
        Some(f) if f.index() < cut => {
            drop(f);
            split_folio_at(c, m, cut)
        }
        _ => Ok(()),
    }
}

/// Splits the large folio holding page `index` of `m` into pages, if one does: afterwards
/// page `index` is cached (if it was) in a folio of its own. Allocates the pages before taking any folio lock. `Ok` also when the
/// folio went away meanwhile (the caller looks the page up again).
#[cold]
pub(crate) fn split_folio_at(c: &CacheInner, m: &Inode, index: u64) -> Result<(), CacheError> {
    let Some(folio) = m.mapping.pages.lookup(index) else {
        return Ok(());
    };
    let nr = folio.nr_pages();
    if nr == 1 {
        return Ok(());
    }
    drop(folio);
    let mut new: Vec<FolioLocked<'_>> = Vec::with_capacity(nr);
    for _ in 0..nr {
        let f = c.alloc_folio(0).map_err(|_| c.out_of_memory(nr))?;
        new.push(
            f.try_lock()
                .unwrap_or_else(|_| unreachable!("a freshly allocated folio is unlocked")),
        );
    }
    let Some(old) = m.mapping.pages.lookup(index) else {
        return Ok(());
    };
    let old = old.lock();
    if old.mapping() != m.id || old.nr_pages() != nr || !old.is_uptodate() {
        // Evicted, truncated or replaced meanwhile: the caller looks again.
        return Ok(());
    }
    debug_assert_eq!(
        old.flags() & (PG_DIRTY | PG_WRITEBACK),
        0,
        "large folios are never written: writes split them first"
    );
    let data = old.data().expect("uptodate");
    for (i, f) in new.iter_mut().enumerate() {
        f.data_mut()
            .expect("a fresh folio is not uptodate")
            .copy_from_slice(&data[i * PAGE_SIZE..][..PAGE_SIZE]);
        f.mark_uptodate();
        // The pages keep the folio's LRU standing (`lru_add_split_folio` puts them beside
        // it): active stays active.
        let keep = old.flags() & (PG_ACTIVE | PG_WORKINGSET);
        if keep != 0 {
            f.set_flag(keep);
        }
    }
    if m.mapping.pages.split_folio(&old, &new) {
        for f in &new {
            c.folio_added(f, None);
        }
        c.counters.inc(Event::FolioSplits);
    }
    // `old` is put here: freed (and off the LRU) unless a reader still pins it.
    Ok(())
}
