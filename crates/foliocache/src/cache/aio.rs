//! Async calls ([`AsyncFile`]): the handle's reads, writes, syncs and opens as futures that
//! never block the thread polling them, for storage engines that run on an async executor.
//!
//! # What it models
//!
//! The kernel's `IOCB_NOWAIT` / `IOCB_WAITQ` reads (io_uring's buffered reads since 5.9):
//! `filemap_read` first copies what is cached; a folio under I/O is waited for with a
//! `wait_page_queue` entry whose wake function re-queues the request instead of waking a
//! sleeping thread (`folio_wait_locked_async`), and a missing page is handed to readahead,
//! whose completion unlocks the folio and so wakes the entry. Here the wait entry is the
//! task's [`Waker`] in the folio wait table (`mm/folio/wait.rs`), and the readahead is run by
//! the cache's readahead workers (`cache/async_ra.rs`):
//!
//! | step | the task's future | a readahead worker |
//! |---|---|---|
//! | hit | copies under RCU, `Ready` at the first poll, no allocation | |
//! | miss | queues `(file, window, waker)`, `Pending` | takes every queued miss at once |
//! | | | inserts each file's windows (`page_cache_ra_many`), wakes the tasks |
//! | woken | finds its folio locked: registers the waker on the folio lock, `Pending` | issues the batch's reads through the engine |
//! | woken | the folio's read completed (its unlock woke the task): copies, `Ready` | |
//!
//! So a thousand tasks' misses become one batch of requests in flight (the queue depth an
//! io_uring engine needs), while the executor thread goes on serving hits. A window's pages
//! are the same window a synchronous miss would read (`page_cache_sync_ra`, the handle's
//! readahead state), and a task that reaches a `PG_readahead` marker starts the next window
//! on a worker without waiting for it.
//!
//! The calls with no wait-queue form in the kernel either (writes that may be throttled,
//! syncs, truncation, `open`) run on a small pool of worker threads (io_uring's `io-wq`) and
//! complete the future when they return; a write carries a copy of its bytes.
//!
//! # Cancellation
//!
//! Dropping a future at any await point leaves the cache consistent; no future holds a lock
//! across a `Pending`. A dropped read's miss is still read (the folios are filled for the
//! next reader) and its wait-table entry is taken out. A write, append, `set_len` or sync
//! that was polled once runs to its end on its worker even if its future is dropped
//! (the write happened whole, or failed as a synchronous call would); one dropped before
//! its first poll did nothing. A sync error whose future was dropped before the caller saw
//! it is reported by the handle's next sync, so no error is lost.

use std::future::Future;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use super::error::CacheError;
use super::file::{copy_out, holds_page, CachedFile, Fast, FAST_READ_MAX};
use super::guard::PinnedFolio;
use super::inode::Inode;
use super::range::PinnedRange;
use super::sb::{CacheInner, FolioCache};
use super::stats::Event;
use super::write::OpenOptions;
use crate::mm::folio::flags::{PG_ERROR, PG_READAHEAD};
use crate::mm::folio::{FolioRef, TaskWait, PAGE_SHIFT};
use crate::mm::readahead::{self, RaRequest};
use crate::mm::sync::Mutex;

/// The most worker threads a cache starts for the async calls' blocking parts.
pub(super) const AIO_WORKERS: usize = 8;

/// A handle for async code: every call of [`CachedFile`] that may wait for the device, a
/// lock or the dirty limit, as a future that never blocks the thread polling it (the
/// module docs of the crate, "Async calls", say which calls run where and what dropping a
/// future does).
///
/// It works with any executor (only [`Waker`]s are used; the library starts no runtime).
/// A read that hits the cache is complete at its first poll, without an allocation or a
/// context switch; a miss queues its window for the cache's readahead workers and wakes
/// the task when the folio's read completes.
///
/// Cloning is cheap (a shared handle). [`AsyncFile::file`] is the synchronous handle
/// underneath, for calls that never wait (length, statistics, `advise`).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("data");
/// # std::fs::write(&path, vec![7u8; 1 << 20])?;
/// use foliocache::{AsyncFile, Config, FolioCache, OpenOptions};
///
/// let cache = FolioCache::new(Config::new(16 << 20))?;
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// rt.block_on(async {
///     let file = AsyncFile::open(&cache, &path).await?;
///     let mut block = [0u8; 4096];
///     file.read_exact_at(&mut block, 8192).await?;      // a miss: the task waits, the thread does not
///     assert!(block.iter().all(|&b| b == 7));
///     let db = AsyncFile::open_with(&cache, &path, OpenOptions::new().write(true)).await?;
///     db.write_all_at(&[1u8; 4096], 0).await?;
///     db.sync_data().await?;                             // durable once this returns
///     Ok::<_, foliocache::CacheError>(())
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncFile {
    inner: Arc<AsyncInner>,
}

struct AsyncInner {
    file: CachedFile,
    /// A sync's error whose future was dropped before the caller saw it: the next sync of
    /// this handle reports it.
    lost_sync_error: std::sync::Mutex<Option<CacheError>>,
    /// This handle's syncs, run one after another in the order they were polled.
    syncs: Arc<Serial>,
}

/// Jobs run one at a time, in the order queued, on the pool's workers: while one runs, the
/// next ones wait in this queue, not in a worker.
#[derive(Default)]
struct Serial {
    /// The queued jobs, and whether a worker is draining them.
    state: std::sync::Mutex<(std::collections::VecDeque<Job>, bool)>,
}

type Job = Box<dyn FnOnce() + Send>;

impl Serial {
    /// Queues `job`; starts a worker on the queue if none is draining it.
    fn submit(self: &Arc<Self>, pool: &std::sync::Arc<super::async_ra::AsyncRa>, job: Job) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0.push_back(job);
        if st.1 {
            return;
        }
        st.1 = true;
        drop(st);
        let me = self.clone();
        let drain: Job = Box::new(move || me.drain());
        if let Err(drain) = pool.submit(drain, true) {
            drain(); // no worker could be started: run them here
        }
    }

    fn drain(&self) {
        loop {
            let job = {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                match st.0.pop_front() {
                    Some(j) => j,
                    None => {
                        st.1 = false;
                        return;
                    }
                }
            };
            // A panicking job (its future reports the lost worker) stops no later one.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        }
    }
}

impl std::fmt::Debug for AsyncFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncFile")
            .field("file", &self.inner.file)
            .finish()
    }
}

impl From<CachedFile> for AsyncFile {
    fn from(file: CachedFile) -> AsyncFile {
        AsyncFile::new(file)
    }
}

impl AsyncFile {
    /// The async form of an open handle.
    pub fn new(file: CachedFile) -> AsyncFile {
        AsyncFile {
            inner: Arc::new(AsyncInner {
                file,
                lost_sync_error: std::sync::Mutex::new(None),
                syncs: Arc::default(),
            }),
        }
    }

    /// [`FolioCache::open`] on a worker thread (`open(2)` and `statx(2)` may wait for the
    /// disk, and a reopened file's revalidation for its pages).
    pub async fn open(cache: &FolioCache, path: impl AsRef<Path>) -> Result<AsyncFile, CacheError> {
        AsyncFile::open_with(cache, path, &OpenOptions::new()).await
    }

    /// [`FolioCache::open_with`] on a worker thread.
    pub async fn open_with(
        cache: &FolioCache,
        path: impl AsRef<Path>,
        options: &OpenOptions,
    ) -> Result<AsyncFile, CacheError> {
        let (c, path, options) = (cache.clone(), path.as_ref().to_path_buf(), options.clone());
        let inner = cache.inner.clone();
        Blocking::new(&inner, move || {
            c.open_with(&path, &options).map(AsyncFile::new)
        })
        .await
    }

    /// The synchronous handle underneath (its calls block the calling thread when they wait).
    pub fn file(&self) -> &CachedFile {
        &self.inner.file
    }

    /// The file's path as opened.
    pub fn path(&self) -> PathBuf {
        self.inner.file.path()
    }

    /// The file's size in bytes, as the cache knows it ([`CachedFile::len`]).
    pub fn len(&self) -> u64 {
        self.inner.file.len()
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.file.is_empty()
    }

    /// [`CachedFile::read_at`] as a future: reads up to `buf.len()` bytes at `offset`
    /// (`pread` semantics: a short count only at the end of the file, or before an error
    /// that the next call reports).
    ///
    /// A read whose pages are all cached is `Ready` at its first poll. Dropping the future
    /// leaves the reads it started running: their pages are cached for the next reader.
    pub fn read_at<'a>(&'a self, buf: &'a mut [u8], offset: u64) -> ReadAt<'a> {
        ReadAt {
            file: &self.inner.file,
            buf,
            offset,
            done: 0,
            end: 0,
            started: false,
            page: PageWait::Idle,
            uncached: None,
        }
    }

    /// [`CachedFile::read_exact_at`] as a future: exactly `buf.len()` bytes at `offset`, or
    /// [`CacheError::UnexpectedEof`] past the end of the file.
    pub async fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), CacheError> {
        let mut done = 0;
        while done < buf.len() {
            match self.read_at(&mut buf[done..], offset + done as u64).await? {
                0 => {
                    return Err(CacheError::UnexpectedEof {
                        path: self.path(),
                        offset,
                        len: buf.len(),
                        file_size: self.len(),
                    })
                }
                n => done += n,
            }
        }
        Ok(())
    }

    /// [`CachedFile::read_ranges`] as a future: every page that misses in any range is read
    /// in one batch, then each range is copied into its buffer exactly.
    pub async fn read_ranges(&self, reads: &mut [(u64, &mut [u8])]) -> Result<(), CacheError> {
        self.fault_in(reads.iter().map(|(o, b)| *o..*o + b.len() as u64))
            .await;
        for (offset, buf) in reads.iter_mut() {
            self.read_exact_at(buf, *offset).await?;
        }
        Ok(())
    }

    /// [`CachedFile::prefetch`]: starts reading the ranges' missing pages on a readahead
    /// worker and returns at once (never waits, so it is not a future).
    pub fn prefetch(&self, ranges: &[Range<u64>]) -> Result<(), CacheError> {
        self.inner.file.prefetch(ranges)
    }

    /// [`CachedFile::get_folio`] as a future: the folio holding page `index`, pinned, read
    /// in first if needed (the read awaits; the pin is taken once the page is cached).
    ///
    /// The pin itself may still wait in the calling thread in two cases, both documented on
    /// the synchronous call: the budget's pinned share is full (up to
    /// [`Config::pin_wait`](crate::Config::pin_wait)), or the page was evicted between its
    /// read and the pin (it is then read again synchronously). A guard held across a long
    /// await keeps its pages out of reclaim and counts against the pinned share.
    pub async fn get_folio(&self, index: u64) -> Result<PinnedFolio<'_>, CacheError> {
        let f = &self.inner.file;
        if index < f.mapping_ref().nr_pages() {
            self.fault_in(std::iter::once(
                index << PAGE_SHIFT..(index + 1) << PAGE_SHIFT,
            ))
            .await;
        }
        f.get_folio(index)
    }

    /// [`CachedFile::get_range`] as a future: the bytes `offset..offset + len`, pinned, read
    /// in first if needed (as [`AsyncFile::get_folio`], whose notes apply).
    pub async fn get_range(&self, offset: u64, len: usize) -> Result<PinnedRange<'_>, CacheError> {
        if let Some(end) = offset.checked_add(len as u64) {
            self.fault_in(std::iter::once(offset..end)).await;
        }
        self.inner.file.get_range(offset, len)
    }

    /// Reads the missing pages of `ranges` in one batch and waits until none is under
    /// I/O. Errors are left to the reads that follow (a failed page is retried there, and
    /// reported).
    async fn fault_in(&self, ranges: impl Iterator<Item = Range<u64>>) {
        let f = &self.inner.file;
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
            let _ =
                std::future::poll_fn(|cx| wait.poll(cx, f, m, index, 1).map(|r| r.map(drop))).await;
        }
    }

    /// [`CachedFile::write_at`] on a worker thread, with a copy of `buf`. A write throttled
    /// at the dirty limit awaits instead of sleeping in the executor's thread. Once polled,
    /// the write runs to its end even if the future is dropped.
    pub async fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize, CacheError> {
        let (me, data) = (self.inner.clone(), buf.to_vec());
        Blocking::new(&self.inner.file.cache, move || {
            me.file.write_at(&data, offset)
        })
        .await
    }

    /// [`CachedFile::write_all_at`] on a worker thread (one job for the whole buffer: the
    /// write happened whole, or failed as the synchronous call fails).
    pub async fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), CacheError> {
        let (me, data) = (self.inner.clone(), buf.to_vec());
        Blocking::new(&self.inner.file.cache, move || {
            me.file.write_all_at(&data, offset)
        })
        .await
    }

    /// [`CachedFile::append`] on a worker thread: returns the offset `buf` landed at.
    pub async fn append(&self, buf: &[u8]) -> Result<u64, CacheError> {
        let (me, data) = (self.inner.clone(), buf.to_vec());
        Blocking::new(&self.inner.file.cache, move || me.file.append(&data)).await
    }

    /// [`CachedFile::set_len`] on a worker thread.
    pub async fn set_len(&self, size: u64) -> Result<(), CacheError> {
        let me = self.inner.clone();
        Blocking::new(&self.inner.file.cache, move || me.file.set_len(size)).await
    }

    /// [`CachedFile::sync_data`] (`fdatasync`) on a worker thread: durable once it returns
    /// `Ok`. An error of an earlier sync whose future was dropped is reported here first.
    pub async fn sync_data(&self) -> Result<(), CacheError> {
        self.sync(|f| f.sync_data()).await
    }

    /// [`CachedFile::sync_all`] (`fsync`) on a worker thread.
    pub async fn sync_all(&self) -> Result<(), CacheError> {
        self.sync(|f| f.sync_all()).await
    }

    /// [`CachedFile::sync_range`] on a worker thread.
    pub async fn sync_range(&self, range: Range<u64>) -> Result<(), CacheError> {
        self.sync(move |f| f.sync_range(range)).await
    }

    /// A sync on a worker: reports an earlier dropped sync's error first, and keeps its own
    /// error for the next sync if its future is dropped before the caller sees it.
    async fn sync(
        &self,
        f: impl FnOnce(&CachedFile) -> Result<(), CacheError> + Send + 'static,
    ) -> Result<(), CacheError> {
        let me = self.inner.clone();
        let job = move || {
            let r = f(&me.file);
            let earlier = me
                .lost_sync_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            match (earlier, r) {
                (Some(e), Ok(())) => Err(e),
                (Some(e), Err(now)) => {
                    // Both are reported, one per sync: this one by the next.
                    *me.lost_sync_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
                    Err(e)
                }
                (None, r) => r,
            }
        };
        let keep = self.inner.clone();
        let mut b = Blocking::new(&self.inner.file.cache, job);
        b.serial = Some(self.inner.syncs.clone());
        b.on_lost = Some(Box::new(move |r: Result<(), CacheError>| {
            if let Err(e) = r {
                let mut lost = keep
                    .lost_sync_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                lost.get_or_insert(e);
            }
        }));
        b.await
    }
}

// ----------------------------------------------------------------------------------------
// Reads

/// The future of [`AsyncFile::read_at`].
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
    /// The folio is locked (under I/O): the task waits for its unlock.
    Locked {
        folio: FolioRef<'a>,
        wait: LockWait<'a>,
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
                PageWait::Locked {
                    folio,
                    mut wait,
                    missed: was_missed,
                } => {
                    missed |= was_missed;
                    if folio.poll_unlocked(cx, &mut wait.slot).is_pending() {
                        *self = PageWait::Locked {
                            folio,
                            wait,
                            missed,
                        };
                        return Poll::Pending;
                    }
                    if folio.is_uptodate() {
                        return Poll::Ready(Ok((folio, missed)));
                    }
                    if folio.test_flag(PG_ERROR) {
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
                        if !missed {
                            c.counters.inc(Event::Hit);
                        }
                        return Poll::Ready(Ok((folio, missed)));
                    }
                    c.counters.inc(Event::WaitLocked);
                    *self = PageWait::Locked {
                        folio,
                        wait: LockWait {
                            arena: &c.arena,
                            slot: None,
                        },
                        missed,
                    };
                }
                None => {
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
    /// The batch's folios are in the index: wake the task to wait on its folio instead.
    fn inserted(&self) {
        let w = {
            let mut st = self.state.lock();
            st.inserted = true;
            st.waker.take()
        };
        if let Some(w) = w {
            w.wake();
        }
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
    _inflight: super::async_ra::InflightGuard,
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
        _inflight: m.ra_inflight.enter(),
    };
    if let Err(miss) = f.cache.async_ra.submit_miss(miss) {
        read_misses(vec![miss]);
    }
}

/// A readahead worker's batch of misses: each file's windows inserted at once and their
/// tasks woken (they then wait on their folios' locks), the reads issued as one batch; a
/// page still missing afterwards is read alone (`filemap_create_folio`), as a synchronous
/// miss does, and its task told how that went.
pub(crate) fn read_misses(mut batch: Vec<Miss>) {
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
                x.shared.inserted();
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

// ----------------------------------------------------------------------------------------
// Calls run on a worker

/// A call run on one of the cache's async workers; the future completes with its result.
/// The job is queued at the first poll; once queued it runs to its end whether or not the
/// future is still there.
struct Blocking<T: Send + 'static> {
    pool: std::sync::Arc<super::async_ra::AsyncRa>,
    job: Option<Box<dyn FnOnce() -> T + Send>>,
    slot: Arc<Slot<T>>,
    /// What to do with a result nobody will read (the future was dropped first).
    on_lost: Option<Box<dyn FnOnce(T) + Send>>,
    /// Run after the jobs queued before it on this queue, not beside them.
    serial: Option<Arc<Serial>>,
}

struct Slot<T> {
    state: std::sync::Mutex<SlotState<T>>,
}

struct SlotState<T> {
    result: Option<T>,
    waker: Option<Waker>,
    /// The job ended without a result (it panicked).
    lost: bool,
    /// The future was dropped: the result goes to `on_lost`.
    abandoned: Option<Box<dyn FnOnce(T) + Send>>,
    dropped: bool,
}

impl<T: Send + 'static> Blocking<T> {
    fn new(c: &CacheInner, f: impl FnOnce() -> T + Send + 'static) -> Self {
        Blocking {
            pool: c.aio_pool.clone(),
            job: Some(Box::new(f)),
            slot: Arc::new(Slot {
                state: std::sync::Mutex::new(SlotState {
                    result: None,
                    waker: None,
                    lost: false,
                    abandoned: None,
                    dropped: false,
                }),
            }),
            on_lost: None,
            serial: None,
        }
    }
}

impl<T> Slot<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Completes a slot when the job ends, by returning or by unwinding.
struct Complete<T: Send + 'static> {
    slot: Arc<Slot<T>>,
    result: Option<T>,
}

impl<T: Send + 'static> Drop for Complete<T> {
    fn drop(&mut self) {
        let mut st = self.slot.lock();
        match self.result.take() {
            Some(r) if st.dropped => {
                let f = st.abandoned.take();
                drop(st);
                if let Some(f) = f {
                    f(r);
                }
                return;
            }
            Some(r) => st.result = Some(r),
            None => st.lost = true,
        }
        let w = st.waker.take();
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
    }
}

impl<T: Send + 'static> Future for Blocking<T>
where
    T: From<WorkerLost>,
{
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        if let Some(job) = this.job.take() {
            this.slot.lock().waker = Some(cx.waker().clone());
            let slot = this.slot.clone();
            let run = Box::new(move || {
                let mut done = Complete { slot, result: None };
                // The job's captures (a handle, a copy of the bytes) are dropped inside `job`
                // before the task is woken: a task that then drops its last handle finds
                // no worker still holding it.
                done.result = Some(job());
            });
            match &this.serial {
                Some(q) => q.submit(&this.pool, run),
                None => {
                    if let Err(run) = this.pool.submit(run, true) {
                        // No worker could be started: run it here (blocking this thread).
                        run();
                    }
                }
            }
        }
        let mut st = this.slot.lock();
        if let Some(r) = st.result.take() {
            return Poll::Ready(r);
        }
        if st.lost {
            return Poll::Ready(T::from(WorkerLost));
        }
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T: Send + 'static> Drop for Blocking<T> {
    fn drop(&mut self) {
        if self.job.is_some() {
            return; // never queued: nothing happened
        }
        let mut st = self.slot.lock();
        st.dropped = true;
        st.waker = None;
        let on_lost = self.on_lost.take();
        if let Some(r) = st.result.take() {
            drop(st);
            if let Some(f) = on_lost {
                f(r);
            }
        } else {
            st.abandoned = on_lost;
        }
    }
}

/// A worker ended a call without a result (it panicked).
struct WorkerLost;

impl<T> From<WorkerLost> for Result<T, CacheError> {
    fn from(_: WorkerLost) -> Self {
        Err(CacheError::Spawn(io::Error::other(
            "the worker thread running this call panicked",
        )))
    }
}
