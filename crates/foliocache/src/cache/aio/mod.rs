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
//! task's [`Waker`](std::task::Waker) in the folio wait table (`mm/folio/wait.rs`), and the readahead is run by
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

mod blocking;
#[cfg(feature = "tokio")]
mod cursor;
mod read;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use self::blocking::{Blocking, Serial};
#[cfg(feature = "tokio")]
pub use self::cursor::AsyncCursor;
use self::read::fault_pages;
pub(crate) use self::read::read_misses;
pub use self::read::ReadAt;
use super::error::CacheError;
use super::file::CachedFile;
use super::guard::PinnedFolio;
use super::range::PinnedRange;
use super::sb::FolioCache;
use super::write::OpenOptions;
use crate::mm::folio::PAGE_SHIFT;
/// The most worker threads a cache starts for the async calls' blocking parts.
pub(super) const AIO_WORKERS: usize = 8;

/// A handle for async code: every call of [`CachedFile`] that may wait for the device, a
/// lock or the dirty limit, as a future that never blocks the thread polling it (the
/// module docs of the crate, "Async calls", say which calls run where and what dropping a
/// future does).
///
/// It works with any executor (only [`Waker`](std::task::Waker)s are used; the library starts no runtime).
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
        ReadAt::new(&self.inner.file, buf, offset)
    }

    /// What a read of `buf` at `offset` can copy from the cache without waiting: `Some` with
    /// the bytes copied (0 at the end of the file) if the first page is cached, else `None`.
    #[cfg(feature = "tokio")]
    fn read_cached_now(&self, buf: &mut [u8], offset: u64) -> Option<usize> {
        let f = &self.inner.file;
        match f.hit_section(|m, section| f.read_cached(m, section, buf, offset)) {
            super::file::Fast::Done(n) => Some(n),
            super::file::Fast::Partial(0) => None,
            super::file::Fast::Partial(n) => Some(n),
        }
    }

    /// [`CachedFile::read_exact_at`] as a future: exactly `buf.len()` bytes at `offset`, or
    /// [`CacheError::UnexpectedEof`] past the end of the file.
    pub async fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), CacheError> {
        let mut done = 0;
        while done < buf.len() {
            match self.read_at(&mut buf[done..], offset + done as u64).await? {
                0 => return Err(self.inner.file.eof_error(offset, buf.len())),
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
        fault_pages(&self.inner.file, ranges).await;
    }

    /// [`CachedFile::write_at`] as a future. What can be written without waiting (pages
    /// cached, unlocked and not under writeback, room under the dirty limit: the kernel's
    /// `IOCB_NOWAIT`) is written at the first poll; the rest runs on a worker thread with a
    /// copy of its bytes, where a writer throttled at the dirty limit waits instead of the
    /// executor's thread. Once polled, the write runs to its end even if the future is
    /// dropped.
    pub async fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize, CacheError> {
        self.write_at_lsn(buf, offset, 0).await
    }

    /// [`CachedFile::write_at_lsn`] as a future: [`AsyncFile::write_at`] of a change the
    /// engine logged at `lsn` (the pages reach the file only once the log is durable up to
    /// it).
    pub async fn write_at_lsn(
        &self,
        buf: &[u8],
        offset: u64,
        lsn: u64,
    ) -> Result<usize, CacheError> {
        let f = &self.inner.file;
        let done = f.write_nowait(buf, offset, lsn)?;
        if done == buf.len() {
            return Ok(done);
        }
        let (me, rest, at) = (
            self.inner.clone(),
            buf[done..].to_vec(),
            offset + done as u64,
        );
        match Blocking::new(&f.cache, move || me.file.write_at_lsn(&rest, at, lsn)).await {
            Ok(n) => Ok(done + n),
            // Bytes were written: report them, the error with the next call (pwrite).
            Err(_) if done > 0 => Ok(done),
            Err(e) => Err(e),
        }
    }

    /// [`CachedFile::write_all_at`] as a future: [`AsyncFile::write_at`]'s inline part,
    /// then the rest as one job on a worker (the write happened whole, or failed as the
    /// synchronous call fails).
    pub async fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), CacheError> {
        self.write_all_at_lsn(buf, offset, 0).await
    }

    /// [`CachedFile::write_all_at_lsn`] as a future ([`AsyncFile::write_all_at`] of a change
    /// logged at `lsn`).
    pub async fn write_all_at_lsn(
        &self,
        buf: &[u8],
        offset: u64,
        lsn: u64,
    ) -> Result<(), CacheError> {
        let f = &self.inner.file;
        let done = f.write_nowait(buf, offset, lsn)?;
        if done == buf.len() {
            return Ok(());
        }
        let (me, rest, at) = (
            self.inner.clone(),
            buf[done..].to_vec(),
            offset + done as u64,
        );
        Blocking::new(&f.cache, move || me.file.write_all_at_lsn(&rest, at, lsn)).await
    }

    /// [`CachedFile::append`] on a worker thread: returns the offset `buf` landed at.
    pub async fn append(&self, buf: &[u8]) -> Result<u64, CacheError> {
        let (me, data) = (self.inner.clone(), buf.to_vec());
        Blocking::new(&self.inner.file.cache, move || me.file.append(&data)).await
    }

    /// [`CachedFile::snapshot`]: at once when no change of the file is under way, else on a
    /// worker thread (taking one waits for the change in progress to end). The snapshot's
    /// own reads are synchronous: a miss reads the page on the calling thread, so an async
    /// engine reads a snapshot (a backup's copy) from a blocking task.
    pub async fn snapshot(&self) -> Result<crate::Snapshot, CacheError> {
        if let Some(r) = self.inner.file.take_snapshot(false) {
            return r;
        }
        let me = self.inner.clone();
        Blocking::new(&self.inner.file.cache, move || me.file.snapshot()).await
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
