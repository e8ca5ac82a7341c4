//! Collapsing the folios that cache a block into one folio of its size, for a block latch
//! ([`CachedFile::get_block_mut_in_place`](super::CachedFile::get_block_mut_in_place)): the
//! page cache's side of khugepaged's `collapse_file` (`mm/khugepaged.c`), by copy.
//!
//! The kernel collapses a file's small folios into a PMD-sized one in the background, to
//! map it with one huge page; here a block latch needs its block in exactly one folio (so
//! that readers, writeback and the commit treat it as one unit), and makes it so when it
//! finds the block in pieces: pages written or read one at a time, or split by a truncation
//! or a page latch. The pieces' bytes are copied into a new folio, which replaces them in the
//! index under one lock hold ([`Index::collapse_folios`](crate::mm::index::Index::collapse_folios));
//! dirty pieces make it dirty, with their tags and log numbers
//! (`writeback::collapse_dirty`).

use super::error::CacheError;
use super::inode::Inode;
use super::sb::CacheInner;
use super::stats::Event;
use crate::mm::folio::flags::{PG_ACTIVE, PG_DIRTY, PG_WORKINGSET};
use crate::mm::folio::FolioLocked;
use crate::mm::writeback;

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
    let mut new = new.lock_new();
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
