//! Splitting a large folio of a file's cache into pages before a write or a truncation
//! inside it (`split_folio`, `truncate_inode_partial_folio`).
//!
//! # Splitting
//!
//! The write path writes into large folios (see `cache::write`), but some changes work one
//! page at a time: a truncation that cuts a large folio in two splits it first, so the pages
//! below the cut stay cached (an invalidation, which only drops clean pages, keeps a large
//! folio it covers in part whole, as `invalidate_mapping_pages` does); a snapshot keeps pages,
//! not folios, so a change to a large folio a live snapshot still needs splits it; and a page
//! latch ([`FolioMut`](super::FolioMut)) latches one page. A dirty large folio splits into
//! dirty pages: each takes the folio's tags and log numbers (`writeback::split_dirty`), after
//! any write of the folio in flight has ended (stable pages).
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
use crate::mm::folio::flags::{PG_ACTIVE, PG_DIRTY, PG_WORKINGSET};
use crate::mm::folio::{FolioLocked, PAGE_SIZE};
use crate::mm::writeback;

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
        new.push(f.lock_new());
    }
    let Some(old) = m.mapping.pages.lookup(index) else {
        return Ok(());
    };
    let old = old.lock();
    if old.mapping() != m.id || old.nr_pages() != nr || !old.is_uptodate() {
        // Evicted, truncated or replaced meanwhile: the caller looks again.
        return Ok(());
    }
    // Stable pages: a write of the folio in flight ends first, so the dirty pages made below
    // are not under writeback (the folio lock keeps a new one from starting).
    writeback::wait_stable(&old);
    debug_assert!(
        !old.is_latched(),
        "a latched folio is split by no one: writers wait for the latch"
    );
    let dirty = old.test_flag(PG_DIRTY);
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
        if dirty {
            f.set_flag(PG_DIRTY);
        }
    }
    if m.mapping.pages.split_folio(&old, &new) {
        if dirty {
            // The pages are dirty (set before they were published, their locks held): the
            // tags follow, and the old folio, out of the index, is clean.
            writeback::split_dirty(&m.mapping.wb, old.index(), nr as u64);
            old.clear_flag(PG_DIRTY);
        }
        for f in &new {
            c.folio_added(f, None);
        }
        c.counters.inc(Event::FolioSplits);
    }
    // `old` is put here: freed (and off the LRU) unless a reader still pins it.
    Ok(())
}
