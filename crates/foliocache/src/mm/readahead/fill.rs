//! Instantiating a readahead window: `page_cache_ra_unbounded` with the seed's batched
//! insertion (`ra_fill_folios_batched`) and the vanilla loop (`ra_fill_folios_single`),
//! `read_pages`, and `filemap_create_folio` for a single page.
//!
//! # Unwind safety
//!
//! Between its insertion into the index and the end of its read, a folio is locked, not
//! uptodate and visible: readers that find it sleep until it is unlocked and then expect it
//! either uptodate or flagged PG_error. A backing that panics in the middle would unwind
//! through the fill and drop the locked folio, unlocking it with neither flag: it would stay
//! in the index forever and every later reader of the page would loop finding it. So every
//! inserted folio is held by a [`Filling`] guard from its insertion until its read ends; a
//! guard dropped without `finish` (unwinding) fails the folio as an I/O error does: PG_error,
//! out of the index, unlocked with waiters woken. The panic then goes on to the caller, and a
//! later read of the page retries it.

use std::cell::RefCell;
use std::ops::Range;

use super::{InsertMode, RaEvent, RaHost, RaProbe, RaRequest};
use crate::io::engine::RawBuf;
use crate::io::{read_run, read_runs_each, Backing, RunError, MAX_IO_BYTES};
use crate::mm::filemap::AddressSpace;
use crate::mm::folio::flags::PG_READAHEAD;
use crate::mm::folio::{FolioLocked, FolioRef, PAGE_SHIFT};
use crate::mm::index::Index;

/// A contiguous run of inserted folios being filled, and its first page.
type Run<'a> = (u64, Vec<Filling<'a>>);

/// One window's view of its file and cache (`struct readahead_control`): the address space,
/// the host, and the cache's choices for this file, looked up once per window.
struct Ractl<'a> {
    /// The cache the window is read into: allocation, the LRU, workingset, counters.
    host: &'a dyn RaHost,
    m: &'a AddressSpace,
    pages: &'a Index,
    backing: &'a dyn Backing,
    mode: InsertMode,
    /// The largest folio order readahead may allocate for this file (0: pages only; the
    /// cache's maximum unless the file opted out, `mapping_large_folio_support`).
    max_order: u32,
    /// Where the runs of several windows wait to be read as one batch
    /// ([`page_cache_ra_many`]); `None`: each window reads its runs itself.
    plug: Option<RefCell<Vec<Run<'a>>>>,
    /// Called once a window's folios are all in the index, before its reads are issued
    /// (an asynchronous window's requester waits for no more than that).
    on_inserted: Option<&'a (dyn Fn() + Sync)>,
}

impl<'a> Ractl<'a> {
    fn new(m: &'a AddressSpace, host: &'a dyn RaHost) -> Ractl<'a> {
        Ractl {
            host,
            m,
            pages: &m.pages,
            backing: &*m.backing,
            mode: host.insert_mode(),
            max_order: m.max_folio_order(),
            plug: None,
            on_inserted: None,
        }
    }

    /// The size the backing file is believed to hold, read when a run is about to be read
    /// ([`AddressSpace::backing_size`]).
    fn backing_size(&self) -> u64 {
        self.m.backing_size()
    }
}

/// What one window did.
#[derive(Debug, Default)]
pub(crate) struct RaOutcome {
    /// Pages this call inserted (whether their read then succeeded or not).
    pub(crate) inserted: usize,
    /// The first failed run: its first byte and why it failed.
    pub(crate) error: Option<(u64, RunError)>,
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
pub(crate) fn page_cache_ra_unbounded(
    m: &AddressSpace,
    host: &dyn RaHost,
    req: RaRequest,
) -> RaOutcome {
    let t = Ractl::new(m, host);
    // `filemap_invalidate_lock_shared`, as `page_cache_ra_unbounded` takes it: no truncation
    // runs between this window's insertions and the ends of its reads.
    let _invalidate = m.invalidate_lock.read();
    ra_window(&t, req)
}

/// [`do_page_cache_ra`] (the window clamped to EOF), calling `on_inserted` once the
/// window's folios are in the index and before its reads are issued, or when it ends if it
/// read nothing (so possibly twice: the callback must be idempotent).
pub(crate) fn page_cache_ra_notify(
    m: &AddressSpace,
    host: &dyn RaHost,
    req: RaRequest,
    on_inserted: Option<&(dyn Fn() + Sync)>,
) -> RaOutcome {
    let mut t = Ractl::new(m, host);
    t.on_inserted = on_inserted;
    // `filemap_invalidate_lock_shared`, as `page_cache_ra_unbounded` takes it: no truncation
    // runs between this window's insertions and the ends of its reads.
    let _invalidate = m.invalidate_lock.read();
    let out = match req.clamp_to_eof(m.nr_pages()) {
        Some(req) => ra_window(&t, req),
        None => RaOutcome::default(),
    };
    if let Some(f) = on_inserted {
        f(); // nothing was read (a window of cached pages): tell the requester anyway
    }
    out
}

/// Many windows of one file read as one batch: every window's folios inserted first, then
/// all their runs issued together and waited for once (a many-range read: a `MultiGet`, a
/// B-tree scan's next leaves). Windows are clamped to EOF. `on_inserted`, if any, is called
/// once every window's folios are in the index, before the reads are issued (an async
/// read's task then waits on its folio's lock rather than for the whole batch).
pub(crate) fn page_cache_ra_many(
    m: &AddressSpace,
    host: &dyn RaHost,
    reqs: &[RaRequest],
    on_inserted: Option<&(dyn Fn() + Sync)>,
) -> RaOutcome {
    let mut t = Ractl::new(m, host);
    t.plug = Some(RefCell::new(Vec::new()));
    let _invalidate = m.invalidate_lock.read();
    let mut out = RaOutcome::default();
    let nr_pages = m.nr_pages();
    for req in reqs {
        if let Some(req) = req.clamp_to_eof(nr_pages) {
            let o = ra_window(&t, req);
            out.inserted += o.inserted;
            out.out_of_memory |= o.out_of_memory;
        }
    }
    let runs = t.plug.take().map(RefCell::into_inner).unwrap_or_default();
    if let Some(f) = on_inserted {
        f();
    }
    read_batch_now(&t, runs, &mut out);
    out
}

/// One window: insertion, then its runs read (or left in the plug).
fn ra_window(t: &Ractl<'_>, req: RaRequest) -> RaOutcome {
    let mut out = RaOutcome::default();
    let mark = req.mark();
    if t.max_order > 0 && req.nr_to_read > 1 {
        page_cache_ra_order(t, req, mark, &mut out);
        t.host.count(RaEvent::RaPages, out.inserted as u64);
        return out;
    }
    match t.mode {
        InsertMode::Batched => match preallocate(t, req.nr_to_read) {
            Some(folios) => fill_batched(t, req, mark, folios, &mut out),
            None => {
                // `ractl_alloc_folios` failed: the seed falls back to the vanilla loop, which
                // inserts as many pages as memory allows.
                t.host.count(RaEvent::RaFallbacks, 1);
                fill_single(t, req, mark, &mut out);
            }
        },
        InsertMode::Single => fill_single(t, req, mark, &mut out),
    }
    t.host.count(RaEvent::RaPages, out.inserted as u64);
    t.host.count(RaEvent::RaFolios, out.inserted as u64);
    out
}

/// `do_page_cache_ra`: clamps the window to EOF, then instantiates and reads it.
pub(crate) fn do_page_cache_ra(m: &AddressSpace, host: &dyn RaHost, req: RaRequest) -> RaOutcome {
    match req.clamp_to_eof(m.nr_pages()) {
        Some(req) => page_cache_ra_unbounded(m, host, req),
        None => RaOutcome::default(),
    }
}

/// The order of the folio starting at page `index` of a window ending before `end`, at most
/// `max`: the largest whose folio is naturally aligned at `index`, ends inside the window
/// (`page_cache_ra_order`'s alignment and EOF rules; the window was clamped to EOF before),
/// and does not cover the page `mark` that gets PG_readahead unless it starts there.
///
/// The last rule keeps the mark where the window put it: the reader that triggers the next
/// window is the one that reaches the lookahead part. A folio reaching back over pages the
/// current read wants would carry the mark to them, and the very read that opened the window
/// would start the next one (the kernel gets the same effect by growing the order only
/// between windows, so the first window's folios are small).
pub(crate) fn ra_folio_order(index: u64, end: u64, max: u32, mark: Option<u64>) -> u32 {
    let mut order = max.min(index.trailing_zeros());
    let covers = |o: u32| {
        let last = index + (1u64 << o);
        last > end || mark.is_some_and(|m| m > index && m < last)
    };
    while order > 0 && covers(order) {
        order -= 1;
    }
    order
}

/// `page_cache_ra_order`: the window in folios as large as its size and each index's
/// alignment allow (up to `t.max_order`), skipping cached pages; a large allocation that fails
/// turns the rest of the window into single pages (the kernel's `do_page_cache_ra` fallback).
/// The folios are inserted as `t.mode` says (each contiguous run under one lock hold for
/// `batched`, one per hold for `single`), then every contiguous run is read with one vectored
/// backing read.
///
/// The order follows the window: `ilog2(nr_to_read)`, so a sequential stream's folios grow
/// as its window does (x4, then x2 per step), where the kernel keeps a separate `ra->order`
/// that grows by two per step; both start small and reach the maximum after a few windows.
fn page_cache_ra_order<'a>(
    t: &Ractl<'a>,
    req: RaRequest,
    mark: Option<usize>,
    out: &mut RaOutcome,
) {
    let end = req.index + req.nr_to_read as u64;
    let target = t.max_order.min(req.nr_to_read.ilog2());
    let mark = mark.map(|m| req.index + m as u64);
    // Plan and allocate: (first page, folio), in index order.
    let mut at: Vec<u64> = Vec::new();
    let mut folios: Vec<FolioLocked<'a>> = Vec::new();
    let mut fallback = false;
    let mut idx = req.index;
    while idx < end {
        if t.pages.contains(idx) {
            idx += 1;
            continue;
        }
        let order = if fallback {
            0
        } else {
            ra_folio_order(idx, end, target, mark)
        };
        let folio = match t.host.alloc_folio_noretry(order) {
            Ok(f) => f,
            Err(_) if order > 0 => {
                fallback = true;
                t.host.count(RaEvent::RaOrderFallbacks, 1);
                continue;
            }
            Err(_) => {
                out.out_of_memory = true;
                break;
            }
        };
        at.push(idx);
        folios.push(folio.lock_new());
        idx += 1u64 << order;
    }
    // Insert; `runs` collects the inserted folios, guarded, in contiguous runs
    // (first page, end, folios).
    let mut runs: Vec<(u64, u64, Vec<Filling<'a>>)> = Vec::new();
    let mut shadows = vec![None; folios.len()];
    let mut inserted: Vec<Option<u64>> = vec![None; folios.len()];
    match t.mode {
        InsertMode::Batched => {
            let mut k = 0;
            while k < folios.len() {
                // The contiguous stretch of the plan starting at `k`.
                let mut e = k + 1;
                while e < folios.len() && at[e] == at[e - 1] + folios[e - 1].nr_pages() as u64 {
                    e += 1;
                }
                let stop = at[e - 1] + folios[e - 1].nr_pages() as u64;
                while k < e {
                    let pages = t
                        .pages
                        .add_folio_range_shadows(at[k], stop, &folios[k..e], &mut shadows[k..e])
                        .unwrap_or(0);
                    if pages == 0 {
                        // Raced: another reader cached part of this folio since the peek.
                        k += 1;
                        continue;
                    }
                    let mut got = 0;
                    while got < pages {
                        inserted[k] = Some(at[k]);
                        got += folios[k].nr_pages() as u64;
                        k += 1;
                    }
                }
            }
        }
        InsertMode::Single => {
            for (k, f) in folios.iter().enumerate() {
                if let Ok(shadow) = t.pages.add_folio_shadow(f, at[k]) {
                    shadows[k] = shadow;
                    inserted[k] = Some(at[k]);
                }
            }
        }
    }
    for (k, folio) in folios.into_iter().enumerate() {
        let Some(first) = inserted[k] else {
            // `ractl_free_folios`: unlocked and freed.
            continue;
        };
        let f = Filling::new(t.pages, folio);
        let nr = f.locked().nr_pages() as u64;
        if mark.is_some_and(|m| m >= first && m < first + nr) {
            f.locked().set_flag(PG_READAHEAD);
        }
        t.host.count(RaEvent::RaFolios, 1);
        if nr > 1 {
            t.host.count(RaEvent::RaLargeFolios, 1);
        }
        t.host.folio_added(f.locked(), shadows[k]);
        out.inserted += nr as usize;
        match runs.last_mut() {
            Some((_, run_end, run)) if *run_end == first => {
                run.push(f);
                *run_end += nr;
            }
            _ => runs.push((first, first + nr, vec![f])),
        }
    }
    read_batch(t, runs.into_iter().map(|(first, _, run)| (first, run)), out);
}

/// `ractl_alloc_folios`: the whole window or nothing (what was allocated is given back).
fn preallocate<'a>(t: &Ractl<'a>, nr: usize) -> Option<Vec<FolioLocked<'a>>> {
    let mut folios = Vec::with_capacity(nr);
    for _ in 0..nr {
        match t.host.alloc_folio_noretry(0) {
            Ok(f) => folios.push(f.lock_new()),
            Err(_) => return None, // dropping `folios` unlocks and frees them
        }
    }
    Some(folios)
}

/// A locked folio this fill inserted into the index and has not finished reading.
///
/// [`Filling::finish`] ends the read (uptodate, or failed); dropping the guard without it, as
/// a panic unwinding through the fill does, fails the read, so no folio is ever left in the
/// index locked-then-unlocked without PG_uptodate or PG_error.
struct Filling<'a> {
    /// `None` once finished.
    folio: Option<FolioLocked<'a>>,
    pages: &'a Index,
}

impl<'a> Filling<'a> {
    /// Takes charge of `folio`, which was just inserted into `pages`.
    fn new(pages: &'a Index, folio: FolioLocked<'a>) -> Filling<'a> {
        Filling {
            folio: Some(folio),
            pages,
        }
    }

    fn locked(&self) -> &FolioLocked<'a> {
        self.folio
            .as_ref()
            .expect("a filling folio is held until finished")
    }

    /// The bytes to read into (the folio is not uptodate until `finish`).
    fn data_mut(&mut self) -> &mut [u8] {
        self.folio
            .as_mut()
            .and_then(|f| f.data_mut())
            .expect("a folio under its first read is not uptodate")
    }

    /// `folio_end_read`: uptodate on success; on failure removed from the index first (no
    /// later lookup finds it) and flagged PG_error. Unlocks and wakes waiters either way.
    fn finish(mut self, success: bool) -> FolioRef<'a> {
        let f = self.folio.take().expect("finished once");
        if !success {
            self.pages.delete(&f);
        }
        f.end_read(success)
    }
}

impl Drop for Filling<'_> {
    /// The read never ended (a panic unwinds through the fill): fail it.
    #[inline]
    fn drop(&mut self) {
        if let Some(f) = self.folio.take() {
            fail_unfinished(self.pages, f);
        }
    }
}

/// `folio_end_read(folio, false)` for a folio whose fill was abandoned: removed from the index,
/// PG_error, unlocked (waiters wake and fail).
#[cold]
fn fail_unfinished(pages: &Index, folio: FolioLocked<'_>) {
    pages.delete(&folio);
    drop(folio.end_read(false));
}

/// `ra_fill_folios_batched`: insert each contiguous run of free slots with one
/// `add_folio_range` (one index lock hold), then read the runs.
fn fill_batched<'a>(
    t: &Ractl<'a>,
    req: RaRequest,
    mark: Option<usize>,
    mut folios: Vec<FolioLocked<'a>>,
    out: &mut RaOutcome,
) {
    let end = req.index + req.nr_to_read as u64;
    // (first page, folios) of every inserted run; folios are taken from the front of the
    // preallocated array in order, as the kernel passes `folios + added_folios`, and guarded
    // from their insertion on.
    let mut runs: Vec<(u64, Vec<Filling<'a>>)> = Vec::new();
    // The shadow entries each run's folios replaced (`__filemap_add_folio`'s `shadowp`).
    let mut shadows = vec![None; folios.len()];
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
            .add_folio_range_shadows(idx, end, &folios, &mut shadows)
            .map_or(0, |pages| pages as usize);
        if n == 0 {
            // Raced: another reader inserted this page since the peek. Skip it.
            i += 1;
            continue;
        }
        let run: Vec<Filling<'a>> = folios
            .drain(..n)
            .map(|f| Filling::new(t.pages, f))
            .collect();
        if let Some(m) = mark.filter(|&m| m >= i && m < i + n) {
            run[m - i].locked().set_flag(PG_READAHEAD);
        }
        // `filemap_add_folio` ends with `workingset_refault` and `folio_add_lru`.
        for (f, &shadow) in run.iter().zip(&shadows[..n]) {
            t.host.folio_added(f.locked(), shadow);
        }
        out.inserted += n;
        runs.push((idx, run));
        i += n;
    }
    // `ractl_free_folios`: the unused rest is unlocked and freed.
    drop(folios);
    read_batch(t, runs, out);
}

/// `ra_fill_folios_single`: the vanilla loop, one allocation and one index insertion (one
/// lock hold) per page; a run is read when a cached page interrupts it and at the end.
fn fill_single<'a>(t: &Ractl<'a>, req: RaRequest, mark: Option<usize>, out: &mut RaOutcome) {
    // The runs inserted so far, read together at the end (the plug).
    let mut plug: Vec<(u64, Vec<Filling<'a>>)> = Vec::new();
    let mut run: Vec<Filling<'a>> = Vec::new();
    let mut run_start = req.index;
    let mut end_run = |run_start: u64, run: &mut Vec<Filling<'a>>| {
        if !run.is_empty() {
            plug.push((run_start, std::mem::take(run)));
        }
    };
    for i in 0..req.nr_to_read {
        let idx = req.index + i as u64;
        if t.pages.contains(idx) {
            end_run(run_start, &mut run);
            continue;
        }
        let folio = match t.host.alloc_folio_noretry(0) {
            Ok(f) => f.lock_new(),
            Err(_) => {
                out.out_of_memory = true;
                break;
            }
        };
        let Ok(shadow) = t.pages.add_folio_shadow(&folio, idx) else {
            // Raced: another reader inserted this page since the peek.
            drop(folio);
            end_run(run_start, &mut run);
            continue;
        };
        let folio = Filling::new(t.pages, folio);
        if mark == Some(i) {
            folio.locked().set_flag(PG_READAHEAD);
        }
        t.host.folio_added(folio.locked(), shadow);
        if run.is_empty() {
            run_start = idx;
        }
        run.push(folio);
        out.inserted += 1;
    }
    end_run(run_start, &mut run);
    read_batch(t, plug, out);
}

/// `read_pages` for every run a window inserted, as one batch: runs longer than
/// [`MAX_IO_BYTES`] are cut at folio boundaries into requests of at most that size (a larger
/// folio is a request of its own), and the cache's engine reads them all before any is waited
/// for, as the block layer dispatches a plugged window's bios together. Each request then
/// ends its own folios: uptodate, or failed, so an error fails only the folios of the request
/// that met it and the rest of the window is cached.
fn read_batch<'a>(
    t: &Ractl<'a>,
    runs: impl IntoIterator<Item = (u64, Vec<Filling<'a>>)>,
    out: &mut RaOutcome,
) {
    if let Some(plug) = &t.plug {
        plug.borrow_mut().extend(runs);
        return;
    }
    if let Some(f) = t.on_inserted {
        f();
    }
    read_batch_now(t, runs, out);
}

/// [`read_batch`]'s reads, issued now.
fn read_batch_now<'a>(
    t: &Ractl<'a>,
    runs: impl IntoIterator<Item = (u64, Vec<Filling<'a>>)>,
    out: &mut RaOutcome,
) {
    // The synchronous engine runs requests one by one, and a buffered file is read one run
    // at a time (`batches_help`): a run stays one vectored read.
    let batched = t.host.engine().kind() != crate::io::EngineKind::Sync
        && crate::io::engine::batches_help(t.backing);
    if !batched {
        for (first, run) in runs {
            read_pages(t, first, run, out);
        }
        return;
    }
    // Runs cut at folio boundaries into requests of at most `MAX_IO_BYTES`.
    let mut reqs: Vec<(u64, Vec<Filling<'a>>)> = Vec::new();
    for (first, run) in runs {
        let (mut start, mut cur, mut bytes) = (first, Vec::new(), 0usize);
        for f in run {
            let size = f.locked().size();
            if !cur.is_empty() && bytes + size > MAX_IO_BYTES {
                reqs.push((start, std::mem::take(&mut cur)));
                start += (bytes >> PAGE_SHIFT) as u64;
                bytes = 0;
            }
            bytes += size;
            cur.push(f);
        }
        if !cur.is_empty() {
            reqs.push((start, cur));
        }
    }
    match reqs.len() {
        0 => {}
        1 => {
            let (first, run) = reqs.pop().expect("one request");
            read_pages(t, first, run, out);
        }
        _ => {
            // Each request's folios end their read as it completes (`end_io` per bio): a
            // reader waiting on the first folio of a window goes on after its 128 KiB, not
            // after the window.
            let mut slots: Vec<Option<Run<'a>>> = reqs.into_iter().map(Some).collect();
            let raw: Vec<(u64, Vec<RawBuf>)> = slots
                .iter_mut()
                .map(|slot| {
                    let (first, run) = slot.as_mut().expect("filled above");
                    (
                        *first << PAGE_SHIFT,
                        run.iter_mut().map(|f| RawBuf::of(f.data_mut())).collect(),
                    )
                })
                .collect();
            // SAFETY: every buffer is the frame of a folio this fill holds locked and not
            // uptodate (so no reader looks at it and nothing else writes it) in `slots`,
            // until its request's `end_read` below; the frames stay in the arena as long as
            // the fill holds the folios. If the batch unwinds, the engine waits for its
            // requests before `slots` drops (and fails) the folios.
            unsafe {
                read_runs_each(
                    t.host.engine(),
                    t.backing,
                    raw,
                    t.backing_size(),
                    &mut |k, result| {
                        let (first, run) = slots[k].take().expect("one completion per request");
                        end_read(t, first, run, result, out);
                    },
                );
            }
        }
    }
}

/// `read_pages`: one backing read for a contiguous run of locked folios starting at page
/// `first`, then `folio_end_read` on each: uptodate, or, on error (a changed file included),
/// removed from the index and flagged PG_error so that waiters fail and a later read retries.
fn read_pages<'a>(t: &Ractl<'a>, first: u64, mut run: Vec<Filling<'a>>, out: &mut RaOutcome) {
    if run.is_empty() {
        return;
    }
    let offset = first << PAGE_SHIFT;
    let result = {
        let mut bufs: Vec<&mut [u8]> = run.iter_mut().map(Filling::data_mut).collect();
        read_run(t.backing, &mut bufs, offset, t.backing_size())
    };
    end_read(t, first, run, result, out);
}

/// The end of one run's read (`folio_end_read` on each of its folios): uptodate, or removed
/// and flagged PG_error; the first failure is recorded in `out`.
fn end_read<'a>(
    t: &Ractl<'a>,
    first: u64,
    run: Vec<Filling<'a>>,
    result: Result<usize, RunError>,
    out: &mut RaOutcome,
) {
    let offset = first << PAGE_SHIFT;
    let c = t.host;
    c.count(RaEvent::IoReads, 1);
    match result {
        Ok(n) => {
            c.count(RaEvent::IoBytes, n as u64);
            for f in run {
                drop(f.finish(true));
            }
        }
        Err(e) => {
            c.count(RaEvent::IoErrors, 1);
            let pages: u64 = run.iter().map(|f| f.locked().nr_pages() as u64).sum();
            for f in run {
                drop(f.finish(false));
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
    /// The backing read failed (or found the file changed) at this byte offset.
    Read(u64, RunError),
}

/// `filemap_create_folio` + `filemap_read_folio`: allocate, insert and read the single page
/// `index`. `Ok(None)` if another reader inserted it first (look it up again).
pub(crate) fn read_one<'a>(
    m: &'a AddressSpace,
    host: &'a dyn RaHost,
    index: u64,
) -> Result<Option<FolioRef<'a>>, ReadOneError> {
    let t = &Ractl::new(m, host);
    let folio = match t.host.alloc_folio(0) {
        Ok(f) => f.lock_new(),
        Err(_) => return Err(ReadOneError::OutOfMemory),
    };
    // `filemap_create_folio` takes the invalidate lock shared around the insertion and the
    // read, as readahead does (taken after the allocation: reclaim never waits for it).
    let _invalidate = m.invalidate_lock.read();
    let Ok(shadow) = t.pages.add_folio_shadow(&folio, index) else {
        // Another reader inserted it first.
        return Ok(None);
    };
    let mut folio = Filling::new(t.pages, folio);
    t.host.folio_added(folio.locked(), shadow);
    let offset = index << PAGE_SHIFT;
    let result = read_run(t.backing, &mut [folio.data_mut()], offset, t.backing_size());
    let c = t.host;
    c.count(RaEvent::IoReads, 1);
    match result {
        Ok(n) => {
            c.count(RaEvent::IoBytes, n as u64);
            Ok(Some(folio.finish(true)))
        }
        Err(e) => {
            c.count(RaEvent::IoErrors, 1);
            drop(folio.finish(false));
            Err(ReadOneError::Read(offset, e))
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

#[cfg(test)]
mod tests {
    use super::ra_folio_order;

    #[test]
    fn folio_orders_follow_alignment_the_window_end_and_the_mark() {
        // Alignment: page 3 takes a page, page 64 up to 64 pages.
        assert_eq!(ra_folio_order(3, 1000, 9, None), 0);
        assert_eq!(ra_folio_order(64, 1000, 9, None), 6);
        // The cap, and a window of 100 pages from 64: 32 fit, 64 would cross the end.
        assert_eq!(ra_folio_order(512, 2000, 4, None), 4);
        assert_eq!(ra_folio_order(64, 100, 9, None), 5);
        // The first window of a stream (8 pages, mark on page 4): two folios of 4, the mark
        // on the second's first page, not on the folio the reader is reading.
        assert_eq!(ra_folio_order(0, 8, 3, Some(4)), 2);
        assert_eq!(ra_folio_order(4, 8, 3, Some(4)), 2);
        // A mark exactly at the folio's start does not shrink it.
        assert_eq!(ra_folio_order(32, 64, 5, Some(32)), 5);
    }
}
