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

/// Makes pages `index..index + nr` of `m` (a block: `nr` a power of two, `index` a multiple
/// of it) one folio, for a block latch: reads in the pages not cached, then copies the
/// folios caching the block into a new folio of its size and puts it in their place
/// ([`Index::collapse_folios`](crate::mm::index::Index::collapse_folios), the page cache's
/// side of khugepaged's `collapse_file`). Dirty pieces make it dirty, with their tags and log
/// numbers; pieces a live snapshot still needs are captured first (as pages). A reader
/// holding a piece keeps reading its bytes, which stay the file's bytes of that moment.
///
/// `Ok` also when something changed meanwhile (a piece went, or a larger folio holds the
/// block now): the caller looks again. The caller holds `i_rwsem` and has checked that no
/// page of the block is latched.
#[cold]
pub(crate) fn collapse_block(
    c: &CacheInner,
    m: &Inode,
    index: u64,
    nr: u64,
) -> Result<(), CacheError> {
    use super::write::{create_page, lookup_stable, lookup_stable_folio};
    let order = nr.trailing_zeros();
    let new = c
        .alloc_folio(order)
        .map_err(|_| c.out_of_memory(nr as usize))?;
    let mut new = new
        .try_lock()
        .unwrap_or_else(|_| unreachable!("a freshly allocated folio is unlocked"));
    // Every page cached first (no folio lock held while reading).
    for i in index..index + nr {
        if !m.mapping.pages.contains(i) {
            drop(create_page(c, m, i, 0, &[])?);
        }
    }
    // The pieces, locked in page order (as the kernel locks a range's folios), each out of
    // writeback; as pages if a live snapshot may need them (it keeps pages, not folios).
    let snapshots = super::cow::any(&m.snapshots);
    let mut pieces: Vec<FolioLocked<'_>> = Vec::new();
    let mut i = index;
    while i < index + nr {
        let f = if snapshots {
            lookup_stable(c, m, i)?
        } else {
            lookup_stable_folio(c, m, i)?
        };
        let Some(f) = f else {
            return Ok(()); // evicted meanwhile: look again
        };
        if f.index() < index || f.index() + f.nr_pages() as u64 > index + nr {
            return Ok(()); // a folio larger than the block holds it now
        }
        super::cow::capture(c, &m.snapshots, &m.path, &f, false)?;
        i = f.index() + f.nr_pages() as u64;
        pieces.push(f);
    }
    if pieces.len() < 2 {
        return Ok(()); // one folio holds the block already
    }
    let dst = new.data_mut().expect("a fresh folio is not uptodate");
    let mut dirty = false;
    let mut keep = 0;
    for f in &pieces {
        let at = ((f.index() - index) as usize) << crate::mm::folio::PAGE_SHIFT;
        let src = f.data().expect("uptodate");
        dst[at..at + src.len()].copy_from_slice(src);
        dirty |= f.test_flag(PG_DIRTY);
        keep |= f.flags() & (PG_ACTIVE | PG_WORKINGSET);
    }
    new.mark_uptodate();
    if keep != 0 {
        new.set_flag(keep);
    }
    if dirty {
        new.set_flag(PG_DIRTY);
    }
    if !m.mapping.pages.collapse_folios(&pieces, &new) {
        debug_assert!(false, "locked pieces of this index collapse");
        return Ok(());
    }
    if dirty {
        let list: Vec<(u64, u64)> = pieces
            .iter()
            .map(|f| (f.index(), f.nr_pages() as u64))
            .collect();
        writeback::collapse_dirty(&m.mapping.wb, &c.dirty, &list, index, nr);
        for f in &pieces {
            f.clear_flag(PG_DIRTY);
        }
    }
    // Every live snapshot has its copy of each page: the folio needs no capture.
    super::cow::stamp(&m.snapshots, &new);
    c.folio_added(&new, None);
    c.counters.inc(Event::FolioCollapses);
    // The pieces are put with `pieces`: freed (and off the LRU) unless a reader holds one.
    Ok(())
}
