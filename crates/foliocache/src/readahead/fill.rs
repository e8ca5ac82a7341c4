//! Instantiating a readahead window: `page_cache_ra_unbounded` with the seed's batched
//! insertion (`ra_fill_folios_batched`) and the vanilla loop (`ra_fill_folios_single`),
//! `read_pages`, and `filemap_create_folio` for a single page.

use std::io;
use std::ops::Range;

use super::{InsertMode, RaProbe, RaRequest};
use crate::backing::{self, Backing};
use crate::cache::{CacheInner, Event};
use crate::folio::flags::PG_READAHEAD;
use crate::folio::{FolioLocked, FolioRef, PAGE_SHIFT, PAGE_SIZE};
use crate::index::Index;

/// Where a window is read into and from: one file of one cache.
pub(crate) struct RaTarget<'a> {
    pub(crate) cache: &'a CacheInner,
    pub(crate) pages: &'a Index,
    pub(crate) backing: &'a dyn Backing,
    /// The mapping id (for debugging; the index sets it on the folios).
    #[allow(dead_code)]
    pub(crate) mapping: u64,
    pub(crate) file_size: u64,
    pub(crate) mode: InsertMode,
}

/// What one window did.
#[derive(Debug, Default)]
pub(crate) struct RaOutcome {
    /// Pages this call inserted (whether their read then succeeded or not).
    pub(crate) inserted: usize,
    /// The first failed run: its first byte and the backing's error.
    pub(crate) error: Option<(u64, io::Error)>,
    /// The pages of the first failed run.
    pub(crate) failed_range: Range<u64>,
    /// The arena ran out before the window was complete.
    pub(crate) out_of_memory: bool,
}

/// [`RaProbe`] over a file's index (`page_cache_prev_miss`, `page_cache_next_miss`), read
/// without references under RCU.
pub(crate) struct IndexProbe<'a>(pub(crate) &'a Index);

impl RaProbe for IndexProbe<'_> {
    fn prev_miss(&self, index: u64, max_scan: usize) -> Option<u64> {
        let mut i = index;
        for _ in 0..max_scan {
            if !self.0.contains(i) {
                return Some(i);
            }
            if i == 0 {
                return None;
            }
            i -= 1;
        }
        None
    }

    fn next_miss(&self, index: u64, max_scan: usize) -> u64 {
        (index..index + max_scan as u64)
            .find(|&i| !self.0.contains(i))
            .unwrap_or(index + max_scan as u64)
    }
}

/// `page_cache_ra_unbounded`: inserts the window's pages that are not cached yet (locked,
/// not uptodate), marks the lookahead page, reads every contiguous run with one backing read
/// and unlocks the folios (uptodate, or removed and flagged on error).
pub(crate) fn page_cache_ra_unbounded(t: &RaTarget<'_>, req: RaRequest) -> RaOutcome {
    let mut out = RaOutcome::default();
    let mark = req.mark();
    match t.mode {
        InsertMode::Batched => match preallocate(t, req.nr_to_read) {
            Some(folios) => fill_batched(t, req, mark, folios, &mut out),
            None => {
                // `ractl_alloc_folios` failed: the seed falls back to the vanilla loop, which
                // inserts as many pages as memory allows.
                t.cache.counters.inc(Event::RaFallbacks);
                fill_single(t, req, mark, &mut out);
            }
        },
        InsertMode::Single => fill_single(t, req, mark, &mut out),
    }
    t.cache.counters.add(Event::RaPages, out.inserted as u64);
    out
}

/// `ractl_alloc_folios`: the whole window or nothing (what was allocated is given back).
fn preallocate<'a>(t: &RaTarget<'a>, nr: usize) -> Option<Vec<FolioLocked<'a>>> {
    let mut folios = Vec::with_capacity(nr);
    for _ in 0..nr {
        match t.cache.alloc_folio_noretry(0) {
            Ok(f) => folios.push(lock_new(f)),
            Err(_) => return None, // dropping `folios` unlocks and frees them
        }
    }
    Some(folios)
}

/// `__folio_set_locked` on a folio nobody else can see yet.
fn lock_new(f: FolioRef<'_>) -> FolioLocked<'_> {
    f.try_lock()
        .unwrap_or_else(|_| unreachable!("a freshly allocated folio is unlocked"))
}

/// `ra_fill_folios_batched`: insert each contiguous run of free slots with one
/// `add_folio_range` (one index lock hold), then read the runs.
fn fill_batched<'a>(
    t: &RaTarget<'a>,
    req: RaRequest,
    mark: Option<usize>,
    folios: Vec<FolioLocked<'a>>,
    out: &mut RaOutcome,
) {
    let end = req.index + req.nr_to_read as u64;
    // (first page, folios) of every inserted run; folios are taken from the front of the
    // preallocated array in order, as the kernel passes `folios + added_folios`.
    let mut runs: Vec<(u64, usize)> = Vec::new();
    // The shadow entries each run's folios replaced (`__filemap_add_folio`'s `shadowp`).
    let mut shadows = vec![None; folios.len()];
    let mut used = 0usize;
    let mut i = 0usize;
    while i < req.nr_to_read {
        let idx = req.index + i as u64;
        // A cached page is skipped after a lockless peek, as the vanilla loop does with
        // `xa_load`: taking the lock only to learn that the slot is occupied would cost the
        // batched path one lock hold per cached page (the seed's version does).
        if t.pages.contains(idx) {
            i += 1;
            continue;
        }
        // Stops at the first occupied slot; an error means nothing was inserted.
        let n = t
            .pages
            .add_folio_range_shadows(idx, end, &folios[used..], &mut shadows[used..])
            .map_or(0, |pages| pages as usize);
        if n == 0 {
            // Raced: another reader inserted this page since the peek. Skip it.
            i += 1;
            continue;
        }
        if let Some(m) = mark.filter(|&m| m >= i && m < i + n) {
            folios[used + (m - i)].set_flag(PG_READAHEAD);
        }
        // `filemap_add_folio` ends with `workingset_refault` and `folio_add_lru`.
        for (f, &shadow) in folios[used..used + n].iter().zip(&shadows[used..used + n]) {
            t.cache.workingset_refault(f, shadow);
            t.cache.add_lru(f);
        }
        runs.push((idx, n));
        used += n;
        i += n;
    }
    out.inserted += used;
    let mut folios = folios.into_iter();
    for (first, n) in runs {
        read_pages(t, first, folios.by_ref().take(n).collect(), out);
    }
    // `ractl_free_folios`: the unused rest is unlocked and freed as `folios` drops.
}

/// `ra_fill_folios_single`: the vanilla loop, one allocation and one index insertion (one
/// lock hold) per page; a run is read when a cached page interrupts it and at the end.
fn fill_single<'a>(t: &RaTarget<'a>, req: RaRequest, mark: Option<usize>, out: &mut RaOutcome) {
    let mut run: Vec<FolioLocked<'a>> = Vec::new();
    let mut run_start = req.index;
    for i in 0..req.nr_to_read {
        let idx = req.index + i as u64;
        if t.pages.contains(idx) {
            read_pages(t, run_start, std::mem::take(&mut run), out);
            continue;
        }
        let folio = match t.cache.alloc_folio_noretry(0) {
            Ok(f) => lock_new(f),
            Err(_) => {
                out.out_of_memory = true;
                break;
            }
        };
        let Ok(shadow) = t.pages.add_folio_shadow(&folio, idx) else {
            // Raced: another reader inserted this page since the peek.
            drop(folio);
            read_pages(t, run_start, std::mem::take(&mut run), out);
            continue;
        };
        if mark == Some(i) {
            folio.set_flag(PG_READAHEAD);
        }
        t.cache.workingset_refault(&folio, shadow);
        t.cache.add_lru(&folio);
        if run.is_empty() {
            run_start = idx;
        }
        run.push(folio);
        out.inserted += 1;
    }
    read_pages(t, run_start, run, out);
}

/// `read_pages`: one backing read for a contiguous run of locked folios starting at page
/// `first`, then `folio_end_read` on each: uptodate, or, on error, removed from the index
/// and flagged PG_error so that waiters fail and a later read retries.
fn read_pages<'a>(
    t: &RaTarget<'a>,
    first: u64,
    mut run: Vec<FolioLocked<'a>>,
    out: &mut RaOutcome,
) {
    if run.is_empty() {
        return;
    }
    let offset = first << PAGE_SHIFT;
    let bytes: usize = run.iter().map(|f| f.size()).sum();
    let expected = (t.file_size.saturating_sub(offset)).min(bytes as u64) as usize;
    let result = {
        let mut bufs: Vec<&mut [u8]> = run
            .iter_mut()
            .map(|f| {
                f.data_mut()
                    .expect("folios under readahead are not uptodate")
            })
            .collect();
        backing::read_run(t.backing, &mut bufs, offset, expected)
    };
    let c = &t.cache.counters;
    c.inc(Event::IoReads);
    match result {
        Ok(n) => {
            c.add(Event::IoBytes, n as u64);
            for f in run {
                drop(f.end_read(true));
            }
        }
        Err(e) => {
            c.inc(Event::IoErrors);
            let pages = run.len() as u64;
            for f in run {
                t.pages.delete(&f);
                drop(f.end_read(false));
            }
            if out.error.is_none() {
                out.error = Some((offset, e));
                out.failed_range = first..first + pages;
            }
        }
    }
}

/// Why [`read_one`] failed.
pub(crate) enum ReadOneError {
    /// No free page in the budget.
    OutOfMemory,
    /// The backing read failed at this byte offset.
    Io(u64, io::Error),
}

/// `filemap_create_folio` + `filemap_read_folio`: allocate, insert and read the single page
/// `index`. `Ok(None)` if another reader inserted it first (look it up again).
pub(crate) fn read_one<'a>(
    t: &RaTarget<'a>,
    index: u64,
) -> Result<Option<FolioRef<'a>>, ReadOneError> {
    let mut folio = match t.cache.alloc_folio(0) {
        Ok(f) => lock_new(f),
        Err(_) => return Err(ReadOneError::OutOfMemory),
    };
    let Ok(shadow) = t.pages.add_folio_shadow(&folio, index) else {
        // Another reader inserted it first.
        return Ok(None);
    };
    t.cache.workingset_refault(&folio, shadow);
    t.cache.add_lru(&folio);
    let offset = index << PAGE_SHIFT;
    let expected = (t.file_size.saturating_sub(offset)).min(PAGE_SIZE as u64) as usize;
    let result = {
        let buf = folio.data_mut().expect("a new folio is not uptodate");
        backing::read_run(t.backing, &mut [buf], offset, expected)
    };
    let c = &t.cache.counters;
    c.inc(Event::IoReads);
    match result {
        Ok(n) => {
            c.add(Event::IoBytes, n as u64);
            Ok(Some(folio.end_read(true)))
        }
        Err(e) => {
            c.inc(Event::IoErrors);
            t.pages.delete(&folio);
            drop(folio.end_read(false));
            Err(ReadOneError::Io(offset, e))
        }
    }
}

/// The insertion phase alone, for measurement: inserts `folios` (preallocated, locked, not
/// yet visible) at pages `start..start + folios.len()` the way `mode` does during readahead,
/// without reading anything. Returns the pages inserted (fewer if slots were occupied); the
/// inserted folios stay locked in the caller's hands.
///
/// `single` checks each slot and inserts one folio per index lock hold; `batched` inserts the
/// whole run under one hold (`filemap_add_folio_range`).
pub fn insert_preallocated(
    pages: &Index,
    start: u64,
    folios: &[FolioLocked<'_>],
    mode: InsertMode,
) -> usize {
    match mode {
        InsertMode::Batched => {
            let end = start + folios.len() as u64;
            pages
                .add_folio_range(start, end, folios)
                .map_or(0, |pages| pages as usize)
        }
        InsertMode::Single => {
            let mut n = 0;
            for (i, f) in folios.iter().enumerate() {
                let idx = start + i as u64;
                if !pages.contains(idx) && pages.add_folio(f, idx).is_ok() {
                    n += 1;
                }
            }
            n
        }
    }
}
