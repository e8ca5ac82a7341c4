//! The async read path: [`ReadAt`], the per-page wait ([`PageWait`]) and the misses the
//! readahead workers read in batches ([`read_misses`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use super::blocking::Blocking;
use crate::cache::error::CacheError;
use crate::cache::file::{copy_out, holds_page, CachedFile, Fast, FAST_READ_MAX};
use crate::cache::inode::Inode;
use crate::cache::sb::CacheInner;
use crate::cache::stats::Event;
use crate::mm::folio::flags::{PG_ERROR, PG_LATCHED, PG_LOCKED, PG_READAHEAD};
use crate::mm::folio::{FolioRef, TaskWait, PAGE_SHIFT};
use crate::mm::readahead::{self, RaRequest};
use crate::mm::sync::Mutex;

/// Reads the missing pages of `ranges` of `f` in one batch and waits until none is under
/// I/O. Errors are left to the reads that follow (a failed page is retried there, and
/// reported).
pub(super) async fn fault_pages(
    f: &CachedFile,
    ranges: impl Iterator<Item = std::ops::Range<u64>>,
) {
    let m = f.mapping_ref();
    let size = m.size();
    let mut pages: Vec<u64> = Vec::new();
    let mut windows: Vec<RaRequest> = Vec::new();
    for r in ranges {
        let end = r.end.min(size);
        if r.start >= end {
            continue;
        }
        let (first, last) = (r.start >> PAGE_SHIFT, (end - 1) >> PAGE_SHIFT);
        pages.extend(first..=last);
        windows.push(RaRequest {
            index: first,
            nr_to_read: (last - first + 1) as usize,
            lookahead: 0,
        });
    }
    if pages.iter().all(|&i| m.mapping.pages.contains(i)) {
        windows.clear();
    }
    if !windows.is_empty() {
        let shared = Arc::new(MissShared::default());
        for req in windows {
            f.cache.counters.inc(Event::Miss);
            submit_miss(f, m, req, req.index, &shared);
        }
        MissWait(&shared).await;
    }
    for index in pages {
        let mut wait = PageWait::Idle;
        // Errors are reported by the caller's read, which retries the page.
        let _ = std::future::poll_fn(|cx| wait.poll(cx, f, m, index, 1).map(|r| r.map(drop))).await;
    }
}

/// The future of [`AsyncFile::read_at`](super::AsyncFile::read_at).
#[must_use = "futures do nothing unless polled"]
pub struct ReadAt<'a> {
    file: &'a CachedFile,
    buf: &'a mut [u8],
    offset: u64,
    /// Bytes copied so far.
    done: usize,
    /// The end of the read in file bytes (clamped to the size), set at the first poll.
    end: u64,
    started: bool,
    page: PageWait<'a>,
    /// A page read uncached (the budget had no page to give): its bytes, read on a worker.
    uncached: Option<Blocking<Result<Vec<u8>, CacheError>>>,
}

impl std::fmt::Debug for ReadAt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAt")
            .field("offset", &self.offset)
            .field("len", &self.buf.len())
            .field("done", &self.done)
            .finish()
    }
}

impl Future for ReadAt<'_> {
    type Output = Result<usize, CacheError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let f = this.file;
        if !this.started {
            this.started = true;
            // The synchronous read's hit path, unchanged: a hit allocates nothing.
            if this.buf.len() <= FAST_READ_MAX {
                let (buf, offset) = (&mut *this.buf, this.offset);
                match f.hit_section(|m, section| f.read_cached(m, section, buf, offset)) {
                    Fast::Done(n) => return Poll::Ready(Ok(n)),
                    Fast::Partial(n) => this.done = n,
                }
            } else {
                f.cache.counters.inc(Event::ReadCalls);
            }
            let size = f.mapping_ref().size();
            if this.offset >= size {
                return Poll::Ready(Ok(this.done));
            }
            this.end = this.offset + (this.buf.len() as u64).min(size - this.offset);
        }
        let r = this.poll_slow(cx);
        if r.is_ready() {
            this.page = PageWait::Idle;
            f.set_prev_pos(this.offset + this.done as u64);
            // What the read's allocations evicted reaches the listener now.
            f.cache.deliver();
        }
        r
    }
}

impl<'a> ReadAt<'a> {
    /// A read of `buf.len()` bytes of `file` at `offset`.
    pub(super) fn new(file: &'a CachedFile, buf: &'a mut [u8], offset: u64) -> ReadAt<'a> {
        ReadAt {
            file,
            buf,
            offset,
            done: 0,
            end: 0,
            started: false,
            page: PageWait::Idle,
            uncached: None,
        }
    }

    /// Everything after the hit path: page by page, waiting for misses and folios under I/O.
    fn poll_slow(&mut self, cx: &mut Context<'_>) -> Poll<Result<usize, CacheError>> {
        let f = self.file;
        let m = f.mapping_ref();
        let last = f.last_page();
        loop {
            let pos = self.offset + self.done as u64;
            if pos >= self.end {
                return Poll::Ready(Ok(self.done));
            }
            if let Some(u) = &mut self.uncached {
                let r = std::task::ready!(Pin::new(u).poll(cx));
                self.uncached = None;
                match r {
                    Ok(bytes) => {
                        let at = self.done;
                        self.buf[at..at + bytes.len()].copy_from_slice(&bytes);
                        self.done += bytes.len();
                        f.cache.counters.add(Event::BytesCopied, bytes.len() as u64);
                        continue;
                    }
                    Err(e) => return Poll::Ready(self.fail(e)),
                }
            }
            let index = pos >> PAGE_SHIFT;
            let req_count = (((self.end - 1) >> PAGE_SHIFT) - index + 1) as usize;
            match std::task::ready!(self.page.poll(cx, f, m, index, req_count)) {
                Ok((folio, filled)) => {
                    if !holds_page(&folio, last) {
                        f.accessed_after(&folio, filled);
                    }
                    let data = folio.data().expect("PageWait returns uptodate folios");
                    let n = copy_out(self.buf, self.offset, pos, self.end, folio.index(), data);
                    self.done += n as usize;
                    f.cache.counters.add(Event::BytesCopied, n);
                }
                Err(PageError::OutOfMemory) => {
                    // No page to be had (pins and dirty pages hold the budget): this page's
                    // part is read uncached, on a worker (`cache/budget.rs`).
                    let (c, mm, end) = (f.cache.clone(), f.mapping(), self.end);
                    let stop = end.min((index + 1) << PAGE_SHIFT);
                    self.uncached = Some(Blocking::new(&f.cache, move || {
                        let mut bytes = vec![0u8; (stop - pos) as usize];
                        let n = c.read_uncached(&mm, &mut bytes, pos, pos, stop)?;
                        bytes.truncate(n as usize);
                        Ok(bytes)
                    }));
                }
                Err(PageError::Failed(e)) => return Poll::Ready(self.fail(e)),
                Err(PageError::PastEof) => return Poll::Ready(Ok(self.done)),
            }
        }
    }

    /// The read stops at an error: the bytes copied so far, or the error if none (`pread`).
    fn fail(&self, e: CacheError) -> Result<usize, CacheError> {
        if self.done > 0 {
            Ok(self.done)
        } else {
            Err(e)
        }
    }
}

/// Why [`PageWait`] gave no folio.
enum PageError {
    /// The page is past the end of the file (it shrank during the read): the read ends.
    PastEof,
    /// The budget had no page to give: the caller reads uncached.
    OutOfMemory,
    Failed(CacheError),
}

/// The async `filemap_get_pages` for one page: the steps of a wait for an uptodate folio,
/// kept between polls.
enum PageWait<'a> {
    /// Nothing in progress: look the page up.
    Idle,
    /// The page's miss is queued for a readahead worker.
    Queued(Queued),
    /// The task waits for `bit` to clear on the folio: `PG_LOCKED` (under I/O: then the
    /// folio is read, or failed), or `PG_LATCHED` (an exclusive latch updates the page in
    /// place: after its commit the page is looked up again).
    Waiting {
        folio: FolioRef<'a>,
        wait: LockWait<'a>,
        bit: u64,
        missed: bool,
    },
}

/// A queued miss the task waits for; dropping it takes the task's waker out.
struct Queued(Arc<MissShared>);

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.state.lock().waker = None;
    }
}

/// A task's entry in the folio wait table; dropping it takes the entry out.
struct LockWait<'a> {
    arena: &'a crate::mm::folio::Arena,
    slot: Option<TaskWait>,
}

impl Drop for LockWait<'_> {
    fn drop(&mut self) {
        self.arena.cancel_wait(&mut self.slot);
    }
}

impl<'a> PageWait<'a> {
    /// A wait for `bit` to clear on `folio`, not registered yet.
    fn waiting(
        arena: &'a crate::mm::folio::Arena,
        folio: FolioRef<'a>,
        bit: u64,
        missed: bool,
    ) -> PageWait<'a> {
        PageWait::Waiting {
            folio,
            wait: LockWait { arena, slot: None },
            bit,
            missed,
        }
    }

    /// Polls for the uptodate folio holding page `index` (for a read of `req_count` pages
    /// from there): `Ready` with the folio and whether this read missed it.
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        f: &'a CachedFile,
        m: &'a Inode,
        index: u64,
        req_count: usize,
    ) -> Poll<Result<(FolioRef<'a>, bool), PageError>> {
        let c = &f.cache;
        let mut missed = false;
        loop {
            match std::mem::replace(self, PageWait::Idle) {
                PageWait::Idle => {}
                PageWait::Queued(q) => {
                    missed = true;
                    let shared = &q.0;
                    // The waker is registered before the lookup: an insertion the lookup
                    // misses wakes it.
                    let outcome = {
                        let mut st = shared.state.lock();
                        st.set_waker(cx.waker());
                        st.outcome.take()
                    };
                    if !m.mapping.pages.contains(index) {
                        match outcome {
                            None => {
                                *self = PageWait::Queued(q);
                                return Poll::Pending;
                            }
                            Some(Err(e)) => {
                                if matches!(e, CacheError::Io { .. }) {
                                    f.shrink_readahead_size_eio();
                                }
                                return Poll::Ready(Err(if e.is_out_of_memory() {
                                    PageError::OutOfMemory
                                } else {
                                    PageError::Failed(e)
                                }));
                            }
                            // Read and gone again (evicted or invalidated): miss again.
                            Some(Ok(())) => {}
                        }
                    }
                }
                PageWait::Waiting {
                    folio,
                    mut wait,
                    bit,
                    missed: was_missed,
                } => {
                    missed |= was_missed;
                    let ready = if bit == PG_LATCHED {
                        folio.poll_unlatched(cx, &mut wait.slot)
                    } else {
                        folio.poll_unlocked(cx, &mut wait.slot)
                    };
                    if ready.is_pending() {
                        *self = PageWait::Waiting {
                            folio,
                            wait,
                            bit,
                            missed,
                        };
                        return Poll::Pending;
                    }
                    if bit == PG_LATCHED {
                        // Committed: look again.
                    } else if folio.is_uptodate() {
                        return Poll::Ready(Ok((folio, missed)));
                    } else if folio.test_flag(PG_ERROR) {
                        let offset = folio.index() << PAGE_SHIFT;
                        return Poll::Ready(Err(PageError::Failed(m.io_error(
                            offset,
                            io::Error::other("reading this page failed in a concurrent reader"),
                        ))));
                    }
                    // Removed before it was filled (invalidated): look again.
                }
            }
            match m.mapping.pages.lookup(index) {
                Some(folio) => {
                    if folio.flags() & PG_READAHEAD != 0 && folio.test_clear_flag(PG_READAHEAD) {
                        f.async_readahead_nowait(m, folio.index(), folio.nr_pages(), req_count);
                    }
                    if folio.is_uptodate() {
                        // ORDERING: Relaxed, as in `CachedFile::get_page`.
                        if folio.flags() & PG_LATCHED != 0 {
                            if folio.test_flag(PG_LATCHED) {
                                if let Err(e) = m.refuse_own_latch(index, index, "a read") {
                                    return Poll::Ready(Err(PageError::Failed(e)));
                                }
                            }
                            c.counters.inc(Event::WaitLatched);
                            *self = PageWait::waiting(&c.arena, folio, PG_LATCHED, missed);
                            continue;
                        }
                        if !missed {
                            c.counters.inc(Event::Hit);
                        }
                        return Poll::Ready(Ok((folio, missed)));
                    }
                    c.counters.inc(Event::WaitLocked);
                    *self = PageWait::waiting(&c.arena, folio, PG_LOCKED, missed);
                }
                None => {
                    if index >= m.nr_pages() {
                        // Truncated under the read: nothing to wait for.
                        return Poll::Ready(Err(PageError::PastEof));
                    }
                    if !missed {
                        c.counters.inc(Event::Miss);
                        missed = true;
                    }
                    let req = f.miss_request(m, index, req_count).unwrap_or(RaRequest {
                        index,
                        nr_to_read: 1,
                        lookahead: 0,
                    });
                    let shared = Arc::new(MissShared::default());
                    submit_miss(f, m, req, index, &shared);
                    *self = PageWait::Queued(Queued(shared));
                }
            }
        }
    }
}

/// A queued miss's state, shared by the task and the worker.
#[derive(Default)]
struct MissShared {
    state: Mutex<MissState>,
}

#[derive(Default)]
struct MissState {
    waker: Option<Waker>,
    /// The worker has put the batch's folios in the index.
    inserted: bool,
    /// Set when the worker is done with the miss: `Ok` if it read the page (or found it),
    /// the error if the page could not be read.
    outcome: Option<Result<(), CacheError>>,
}

impl MissState {
    fn set_waker(&mut self, w: &Waker) {
        match &self.waker {
            Some(old) if old.will_wake(w) => {}
            _ => self.waker = Some(w.clone()),
        }
    }
}

impl MissShared {
    /// The batch's folios are in the index: the task's waker moves to the lock of the folio
    /// holding page `index` (its read's completion wakes the task, once), or the task is
    /// woken now if that folio is not under I/O (already read, or not inserted).
    fn inserted(&self, pages: &crate::mm::index::Index, index: u64) {
        let w = {
            let mut st = self.state.lock();
            st.inserted = true;
            st.waker.take()
        };
        let Some(w) = w else {
            return; // the future was dropped, or is being polled and will look itself
        };
        if let Some(folio) = pages.lookup(index) {
            // The entry belongs to the wait table from here: the unlock takes it out and
            // wakes the task, which then finds its folio read (or, if the lock is reclaim's
            // and it evicts the folio, the free wakes it: `FrozenFolio`'s drop). A task
            // polled meanwhile registers again in its own name; a spare wake-up is harmless.
            let mut slot = None;
            if folio
                .poll_unlocked(&mut Context::from_waker(&w), &mut slot)
                .is_pending()
            {
                return;
            }
        }
        w.wake();
    }
}

/// An async read's miss, queued for the readahead workers (`cache/async_ra.rs`).
pub(crate) struct Miss {
    cache: crate::mm::sync::Arc<CacheInner>,
    m: crate::mm::sync::Arc<Inode>,
    req: RaRequest,
    /// The page the task waits for.
    index: u64,
    shared: Arc<MissShared>,
    /// Counts the miss in the inode's windows in flight (every handle's drop waits for them).
    _inflight: crate::cache::async_ra::InflightGuard,
}

/// Queues a miss of page `index`, read as part of `req`, for the readahead workers; reads
/// it in the calling thread only if no worker can run at all.
fn submit_miss(f: &CachedFile, m: &Inode, req: RaRequest, index: u64, shared: &Arc<MissShared>) {
    crate::trace::span!("async_miss", index = req.index, pages = req.nr_to_read);
    let miss = Miss {
        cache: f.cache.clone(),
        m: f.mapping(),
        req,
        index,
        shared: shared.clone(),
        _inflight: crate::cache::async_ra::InflightRa::enter(&m.ra_inflight),
    };
    if let Err(miss) =
        crate::cache::async_ra::AsyncRa::submit_batched(&f.cache.async_ra, Box::new(miss))
    {
        read_misses(vec![miss]);
    }
}

/// A readahead worker's batch of misses: each file's windows inserted at once and their
/// tasks woken (they then wait on their folios' locks), the reads issued as one batch; a
/// page still missing afterwards is read alone (`filemap_create_folio`), as a synchronous
/// miss does, and its task told how that went.
pub(crate) fn read_misses(batch: Vec<crate::cache::async_ra::BatchItem>) {
    let mut batch: Vec<Miss> = batch
        .into_iter()
        .map(|b| {
            *b.downcast::<Miss>()
                .expect("the readahead workers batch only misses")
        })
        .collect();
    while let Some(first) = batch.first() {
        // This file's misses.
        let m = first.m.clone();
        let (mine, rest): (Vec<Miss>, Vec<Miss>) = batch
            .into_iter()
            .partition(|x| crate::mm::sync::Arc::ptr_eq(&x.m, &m));
        batch = rest;
        let c = mine[0].cache.clone();
        let mut reqs: Vec<RaRequest> = mine.iter().map(|x| x.req).collect();
        reqs.sort_unstable_by_key(|r| (r.index, r.nr_to_read));
        reqs.dedup_by_key(|r| r.index);
        let wake_all = || {
            for x in &mine {
                x.shared.inserted(&m.mapping.pages, x.index);
            }
        };
        let out = readahead::page_cache_ra_many(&m.mapping, &*c, &reqs, Some(&wake_all));
        let mut outcomes: Vec<Result<(), CacheError>> = Vec::with_capacity(mine.len());
        for x in &mine {
            let r = if m.mapping.pages.contains(x.index) || x.index >= m.nr_pages() {
                Ok(())
            } else if out.out_of_memory && out.inserted == 0 {
                Err(c.out_of_memory(1))
            } else {
                c.counters.inc(Event::SinglePageReads);
                match readahead::read_one(&m.mapping, &*c, x.index) {
                    Ok(_) => Ok(()),
                    Err(readahead::ReadOneError::OutOfMemory) => Err(c.out_of_memory(1)),
                    Err(readahead::ReadOneError::Read(offset, e)) => Err(m.fill_error(offset, e)),
                }
            };
            outcomes.push(r);
        }
        drop((m, c));
        // The inode and cache references and the in-flight counts go before the tasks are
        // woken: a task that finishes and drops its handle waits for no worker.
        let tell: Vec<(Arc<MissShared>, Result<(), CacheError>)> = mine
            .into_iter()
            .zip(outcomes)
            .map(|(x, r)| (x.shared, r))
            .collect();
        for (shared, r) in tell {
            let w = {
                let mut st = shared.state.lock();
                st.outcome = Some(r);
                st.waker.take()
            };
            if let Some(w) = w {
                w.wake();
            }
        }
    }
}

/// Waits until a batch of misses is in the index (or done).
struct MissWait<'s>(&'s Arc<MissShared>);

impl Future for MissWait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.0.state.lock();
        if st.inserted || st.outcome.is_some() {
            st.waker = None;
            return Poll::Ready(());
        }
        st.set_waker(cx.waker());
        Poll::Pending
    }
}

impl Drop for MissWait<'_> {
    fn drop(&mut self) {
        self.0.state.lock().waker = None;
    }
}
