//! Open files: the mapping (`struct address_space` + inode) shared by every handle of a file,
//! the handle (`struct file`, with its readahead state), and the read path
//! (`filemap_read`, `filemap_get_pages`, `filemap_create_folio`).

use std::io;
use std::ops::Range;
use std::path::PathBuf;

use super::stats::Event;
use super::{CacheError, CacheInner};
use crate::backing::{Backing, RunError};
use crate::folio::flags::{PG_ERROR, PG_READAHEAD};
use crate::folio::{FolioRef, PAGE_SHIFT, PAGE_SIZE};
use crate::index::Index;
use crate::rcu::RcuReadGuard;
use crate::readahead::{self, RaOutcome, RaRequest, RaState, RaTarget};
use crate::sync::{Arc, AtomicU64, Mutex, Ordering};

/// One file's cached pages: the inode and its `address_space`.
///
/// Shared by every [`CachedFile`] handle of the file; dropped (and its folios freed, as
/// `truncate_inode_pages_final` does when an inode is evicted) when the last handle and the
/// last pinned folio are gone.
pub(crate) struct Mapping {
    pub(crate) cache: Arc<CacheInner>,
    /// Mapping id stored in every folio of this file (`folio->mapping`).
    pub(crate) id: u64,
    /// The path given to `open` (error messages).
    pub(crate) path: PathBuf,
    /// The registry key (canonical path) when opened by path.
    pub(crate) key: Option<PathBuf>,
    pub(crate) backing: Box<dyn Backing>,
    /// `i_size`, read at open.
    pub(crate) size: u64,
    /// The page index (`i_pages`).
    pub(crate) pages: Index,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("id", &self.id)
            .field("path", &self.path)
            .field("size", &self.size)
            .finish()
    }
}

impl Mapping {
    /// Pages of the file (the last one may be partial).
    pub(crate) fn nr_pages(&self) -> u64 {
        self.size.div_ceil(PAGE_SIZE as u64)
    }

    /// The readahead target of this mapping.
    pub(crate) fn ra_target(&self) -> RaTarget<'_> {
        RaTarget {
            cache: &self.cache,
            pages: &self.pages,
            backing: &*self.backing,
            mapping: self.id,
            file_size: self.size,
            mode: self.cache.config.insert_mode,
        }
    }

    fn io_error(&self, offset: u64, source: io::Error) -> CacheError {
        CacheError::Io {
            path: self.path.clone(),
            offset,
            source,
        }
    }

    /// The error of a fill whose run started at byte `offset`: an I/O error, or the file
    /// changed behind the cache.
    fn fill_error(&self, offset: u64, e: RunError) -> CacheError {
        match e {
            RunError::Io(source) => self.io_error(offset, source),
            RunError::Changed {
                offset,
                expected_size,
                actual_size,
            } => CacheError::FileChanged {
                path: self.path.clone(),
                offset,
                expected_size,
                actual_size,
            },
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // The inode is evicted: drop every cached page (nobody can hold one: a pinned folio
        // keeps the mapping alive) and fold the index's counters into the cache's totals.
        let dropped = self.pages.truncate(0, u64::MAX);
        self.cache
            .counters
            .add(Event::Invalidated, dropped.pages_freed);
        self.cache.retire_index_stats(self.pages.stats());
        if let Some(key) = &self.key {
            let mut files = self.cache.files.lock();
            if files
                .get(key)
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), self as *const Mapping))
            {
                files.remove(key);
            }
        }
    }
}

/// An open file of a [`FolioCache`](super::FolioCache): the analog of `struct file`.
///
/// Every handle has its own readahead stream; handles of the same path share the cached pages.
/// A handle may be used from many threads at once (`read_at` takes `&self`), though a
/// sequential reader per thread should open its own handle, as it would its own file
/// descriptor, so that the streams do not confuse each other's readahead.
///
/// A handle is a number in the cache's file table (a file descriptor): every call resolves it
/// there, under the table reference variant the cache was configured with
/// ([`Config::file_table`](super::Config::file_table)).
pub struct CachedFile {
    cache: Arc<CacheInner>,
    /// The handle's key in the file table (`fd`).
    id: u64,
    ra: Mutex<RaState>,
    /// `ra->prev_pos`: the byte after the previous read of this handle.
    prev_pos: AtomicU64,
}

impl std::fmt::Debug for CachedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedFile")
            .field("id", &self.id)
            .field("path", &self.path())
            .finish()
    }
}

/// What the hit-only fast path of `read_at` managed.
enum Fast {
    /// Everything was cached: the read is complete.
    Done(usize),
    /// Stopped before a folio that needs the slow path, after copying this many bytes.
    Partial(usize),
}

/// Reads larger than this skip the fast path (it runs inside the file-table lookup's RCU read
/// section, which should be short).
const FAST_READ_MAX: usize = 64 << 10;

impl CachedFile {
    /// `fd_install`: a new handle on `mapping`, entered in the cache's file table.
    pub(crate) fn new(mapping: Arc<Mapping>) -> CachedFile {
        let cache = mapping.cache.clone();
        let id = cache.next_handle.fetch_add(1, Ordering::Relaxed);
        let ra_pages = cache.config.ra_pages;
        cache.table.insert_arc(id, mapping);
        CachedFile {
            cache,
            id,
            ra: Mutex::new(RaState::new(ra_pages)),
            prev_pos: AtomicU64::new(0),
        }
    }

    /// `fdget`: the mapping this handle resolves to, taken out of the file table (an `Arc`
    /// clone: it may be held across I/O; the table reference is held only for the lookup).
    #[inline]
    fn mapping(&self) -> Arc<Mapping> {
        self.cache
            .table
            .get(self.id)
            .expect("an open handle is in the file table")
    }

    /// Runs `f` on this handle's mapping inside the file-table lookup (reference held, RCU
    /// section, no lock): no `Arc` clone, so nothing shared is written. Only for short,
    /// non-blocking work.
    #[inline]
    fn with_mapping<R>(&self, f: impl FnOnce(&Mapping) -> R) -> R {
        self.cache
            .table
            .read(self.id, |m, _| f(m))
            .expect("an open handle is in the file table")
    }

    /// The path the file was opened with.
    pub fn path(&self) -> PathBuf {
        self.with_mapping(|m| m.path.clone())
    }

    /// The file size in bytes (`i_size`, read when the file was first opened).
    pub fn len(&self) -> u64 {
        self.with_mapping(|m| m.size)
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pages of this file in the cache right now.
    pub fn cached_pages(&self) -> u64 {
        self.with_mapping(|m| m.pages.stats().nr_pages)
    }

    /// Another handle on the same cached file, with a fresh readahead stream (`open` again).
    pub fn reopen(&self) -> CachedFile {
        CachedFile::new(self.mapping())
    }

    /// `filemap_read` (`pread(2)`): copies the file's bytes at `offset` into `buf` through
    /// the cache, reading missing pages (and readahead) from the backing file.
    ///
    /// Returns the bytes copied: `buf.len()` unless the read reaches EOF (a short read), 0 at
    /// or past EOF. If an error stops the read after some bytes were copied, those bytes are
    /// reported (like `pread`); the error comes with the next call.
    ///
    /// A hit makes no system call and takes no lock: lock-free file-table lookup (per-CPU
    /// table reference, the bucket's published list) and, in the same RCU section, the index
    /// lookup of the folio, speculative reference, re-check, uptodate check, copy, put.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, CacheError> {
        self.cache.counters.inc(Event::ReadCalls);
        let done = if buf.len() <= FAST_READ_MAX {
            let fast = self
                .cache
                .table
                .read(self.id, |m, section| {
                    self.read_cached(m, section, buf, offset)
                })
                .expect("an open handle is in the file table");
            match fast {
                Fast::Done(n) => {
                    self.cache.counters.add(Event::BytesCopied, n as u64);
                    return Ok(n);
                }
                Fast::Partial(n) => n,
            }
        } else {
            0
        };
        let m = self.mapping();
        let r = match self.read_slow(&m, &mut buf[done..], offset + done as u64) {
            Ok(n) => Ok(done + n),
            // Bytes were copied: report them now, the error with the next call (pread).
            Err(_) if done > 0 => Ok(done),
            Err(e) => Err(e),
        };
        if let Ok(n) = r {
            self.cache.counters.add(Event::BytesCopied, n as u64);
        }
        r
    }

    /// `filemap_read_fast`-like: copies from folios that are cached, uptodate and unmarked,
    /// stopping at the first one that is not (readahead, I/O and waiting need the slow path).
    #[inline]
    fn read_cached(
        &self,
        m: &Mapping,
        section: &RcuReadGuard<'_>,
        buf: &mut [u8],
        offset: u64,
    ) -> Fast {
        if buf.is_empty() || offset >= m.size {
            return Fast::Done(0);
        }
        let end = offset + (buf.len() as u64).min(m.size - offset);
        let last = self.last_page();
        let mut pos = offset;
        while pos < end {
            let Some(folio) = m.pages.lookup_in(pos >> PAGE_SHIFT, section) else {
                break;
            };
            if folio.flags() & PG_READAHEAD != 0 {
                break;
            }
            let Some(data) = folio.data() else {
                break;
            };
            m.cache.counters.inc(Event::Hit);
            if Some(folio.index()) != last {
                m.cache.mark_accessed(&folio);
            }
            pos += copy_out(buf, offset, pos, end, folio.index(), data);
        }
        // Nothing copied (a miss at `offset`): leave `prev_pos` to the slow path, which
        // decides from it whether the folio it reads in counts as a new access.
        if pos != offset {
            self.set_prev_pos(pos);
        }
        if pos == end {
            Fast::Done((pos - offset) as usize)
        } else {
            Fast::Partial((pos - offset) as usize)
        }
    }

    /// The full read path: misses, readahead, waiting for folios under I/O.
    fn read_slow(&self, m: &Mapping, buf: &mut [u8], offset: u64) -> Result<usize, CacheError> {
        if buf.is_empty() || offset >= m.size {
            return Ok(0);
        }
        let end = offset + (buf.len() as u64).min(m.size - offset);
        let last_index = (end - 1) >> PAGE_SHIFT;
        let last = self.last_page();
        let mut pos = offset;
        while pos < end {
            let index = pos >> PAGE_SHIFT;
            let (folio, filled) = match self.get_page(m, index, (last_index - index + 1) as usize) {
                Ok(f) => f,
                Err(e) if pos == offset => return Err(e),
                Err(_) => break,
            };
            if Some(folio.index()) != last {
                m.cache.mark_accessed_after(&folio, filled);
            }
            let data = folio.data().expect("get_page returns uptodate folios");
            pos += copy_out(buf, offset, pos, end, folio.index(), data);
        }
        self.set_prev_pos(pos);
        Ok((pos - offset) as usize)
    }

    /// The page holding the last byte the previous read of this handle copied, if any:
    /// `filemap_read` marks a folio accessed only when a read moves on to it
    /// (`pos_same_folio`), so re-reading one spot writes no flag.
    #[inline]
    fn last_page(&self) -> Option<u64> {
        let prev = self.prev_pos.load(Ordering::Relaxed);
        prev.checked_sub(1).map(|b| b >> PAGE_SHIFT)
    }

    /// `ra->prev_pos = last_pos`, stored only when it changes so that a handle re-reading one
    /// spot (the pread benchmark) writes nothing.
    #[inline]
    fn set_prev_pos(&self, pos: u64) {
        if self.prev_pos.load(Ordering::Relaxed) != pos {
            self.prev_pos.store(pos, Ordering::Relaxed);
        }
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails (`InvalidArgument` if the range
    /// runs past EOF).
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), CacheError> {
        let n = self.read_at(buf, offset)?;
        if n != buf.len() {
            return Err(CacheError::InvalidArgument {
                what: format!(
                    "read of {} bytes at {offset} runs past the end of {} ({} bytes)",
                    buf.len(),
                    self.path().display(),
                    self.len()
                ),
            });
        }
        Ok(())
    }

    /// `filemap_get_folio` + `filemap_read_folio`: pins the folio holding page `index`
    /// (reading it in if needed) and returns a guard giving its bytes without a copy.
    ///
    /// The folio cannot be freed or invalidated away while the guard lives (invalidation
    /// skips pinned folios). `index` must be a page of the file.
    ///
    /// The guard borrows this handle, as a kernel folio reference lives under its caller's
    /// file reference: a hit writes nothing shared but the folio's refcount (lock-free
    /// file-table lookup, index lookup and speculative reference in one RCU section). For a
    /// guard that outlives the handle, or moves into a `'static` task, use
    /// [`PinnedFolio::into_owned`].
    pub fn get_folio(&self, index: u64) -> Result<PinnedFolio<'_>, CacheError> {
        let fast = self
            .cache
            .table
            .read(self.id, |m, section| {
                if index >= m.nr_pages() {
                    return None;
                }
                let folio = m.pages.lookup_in(index, section)?;
                // Readahead marks and folios under I/O take the full path.
                if folio.flags() & PG_READAHEAD != 0 || !folio.is_uptodate() {
                    return None;
                }
                m.cache.counters.inc(Event::Hit);
                // `FGP_ACCESSED`.
                m.cache.mark_accessed(&folio);
                let valid = valid_bytes(m, &folio);
                Some((std::ptr::NonNull::from(folio.into_raw()), valid))
            })
            .expect("an open handle is in the file table");
        if let Some((folio, valid)) = fast {
            return Ok(PinnedFolio {
                file: self,
                pin: Pin { folio, valid },
            });
        }
        let m = self.mapping();
        if index >= m.nr_pages() {
            return Err(CacheError::InvalidArgument {
                what: format!(
                    "page {index} is past the end of {} ({} pages of 4 KiB)",
                    m.path.display(),
                    m.nr_pages()
                ),
            });
        }
        let (folio, filled) = self.get_page(&m, index, 1)?;
        m.cache.mark_accessed_after(&folio, filled);
        let valid = valid_bytes(&m, &folio);
        let folio = std::ptr::NonNull::from(folio.into_raw());
        // `m` may go now: this handle keeps the mapping (and the arena) alive for the guard.
        Ok(PinnedFolio {
            file: self,
            pin: Pin { folio, valid },
        })
    }

    /// `readahead(2)` / `force_page_cache_ra`: reads the pages of the byte range `range` into
    /// the cache now, in windows of at most 2 MiB. Returns the pages newly cached.
    ///
    /// Pages already cached are skipped. The range is clamped to the file.
    pub fn readahead(&self, range: Range<u64>) -> Result<usize, CacheError> {
        check_range(&range)?;
        let m = self.mapping();
        let end = range.end.min(m.size);
        if range.start >= end {
            return Ok(0);
        }
        let mut index = range.start >> PAGE_SHIFT;
        let last = (end - 1) >> PAGE_SHIFT;
        let mut inserted = 0;
        while index <= last {
            let nr = (last - index + 1).min(512) as usize;
            let req = RaRequest {
                index,
                nr_to_read: nr,
                lookahead: 0,
            };
            let out = do_page_cache_ra(&m, req);
            inserted += out.inserted;
            if let Some((offset, e)) = out.error {
                return Err(m.fill_error(offset, e));
            }
            if out.out_of_memory && out.inserted == 0 {
                return Err(m.cache.out_of_memory(1));
            }
            index += nr as u64;
        }
        Ok(inserted)
    }

    /// `invalidate_mapping_pages`: drops the cached pages overlapping the byte range `range`
    /// that nobody uses right now (pinned folios and folios under I/O stay). Returns the pages
    /// dropped.
    pub fn invalidate(&self, range: Range<u64>) -> Result<usize, CacheError> {
        check_range(&range)?;
        if range.is_empty() {
            return Ok(0);
        }
        let m = self.mapping();
        let first = range.start >> PAGE_SHIFT;
        let last = (range.end - 1) >> PAGE_SHIFT;
        // As `fadvise(POSIX_FADV_DONTNEED)` does: a folio still in a per-CPU LRU batch holds
        // the batch's reference and would look busy, so drain this CPU's batches first, and
        // every CPU's if some folios were still busy.
        let c = &m.cache;
        c.lru.drain(&c.arena);
        let mut out = m.pages.invalidate(first, last + 1);
        if out.busy > 0 {
            c.lru.drain_all(&c.arena);
            out.pages_freed += m.pages.invalidate(first, last + 1).pages_freed;
        }
        c.counters.add(Event::Invalidated, out.pages_freed);
        Ok(out.pages_freed as usize)
    }

    /// `filemap_get_pages` for one folio: the uptodate folio holding page `index`, for a read
    /// of `req_count` pages starting there, and whether this read missed it (the folio was
    /// filled for this read, by it or by a concurrent one).
    #[inline]
    fn get_page<'m>(
        &self,
        m: &'m Mapping,
        index: u64,
        req_count: usize,
    ) -> Result<(FolioRef<'m>, bool), CacheError> {
        let c = &m.cache;
        let mut missed = false;
        loop {
            let folio = match m.pages.lookup(index) {
                Some(f) => f,
                None => {
                    if !missed {
                        c.counters.inc(Event::Miss);
                        missed = true;
                    }
                    match self.fill_missing(m, index, req_count)? {
                        Some(f) => f,
                        None => continue,
                    }
                }
            };
            // `filemap_readahead`: the reader reached the marked folio; one reader wins the
            // test-and-clear and pushes the window forward. (A plain load first: the common
            // unmarked case writes nothing.)
            if folio.flags() & PG_READAHEAD != 0 && folio.test_clear_flag(PG_READAHEAD) {
                self.async_readahead(m, folio.index(), req_count);
            }
            if folio.is_uptodate() {
                if !missed {
                    c.counters.inc(Event::Hit);
                }
                return Ok((folio, missed));
            }
            // Under I/O: sleep until the filler unlocks it (`folio_wait_locked`).
            c.counters.inc(Event::WaitLocked);
            folio.wait_locked();
            if folio.is_uptodate() {
                return Ok((folio, missed));
            }
            if folio.test_flag(PG_ERROR) {
                let offset = folio.index() << PAGE_SHIFT;
                return Err(m.io_error(
                    offset,
                    io::Error::other("reading this page failed in a concurrent reader"),
                ));
            }
            // Removed before it was filled (invalidated): look again.
        }
    }

    /// A miss: synchronous readahead, then, if the page is still missing, a single-folio read
    /// (`filemap_create_folio`). Returns the folio, or `None` to look again (raced).
    #[cold]
    fn fill_missing<'m>(
        &self,
        m: &'m Mapping,
        index: u64,
        req_count: usize,
    ) -> Result<Option<FolioRef<'m>>, CacheError> {
        let c = &m.cache;
        // `page_cache_sync_ra` with readahead off reads just the missing page: no need to
        // take the stream's lock (the window size never changes after open).
        let req = if c.config.ra_pages == 0 {
            None
        } else {
            let prev_pos = self.prev_pos.load(Ordering::Relaxed);
            let probe = readahead::IndexProbe(&m.pages);
            self.ra.lock().sync_ra(index, req_count, prev_pos, &probe)
        };
        if let Some(req) = req {
            c.counters.inc(Event::SyncRa);
            let out = do_page_cache_ra(m, req);
            if let Some(f) = m.pages.lookup(index) {
                return Ok(Some(f));
            }
            if let Some((offset, e)) = out.error {
                if out.failed_range.contains(&index) {
                    return Err(m.fill_error(offset, e));
                }
            }
        }
        // `filemap_create_folio`: just this page.
        c.counters.inc(Event::SinglePageReads);
        match readahead::read_one(&m.ra_target(), index) {
            Ok(Some(f)) => Ok(Some(f)),
            Ok(None) => Ok(None),
            Err(readahead::ReadOneError::OutOfMemory) => Err(c.out_of_memory(1)),
            Err(readahead::ReadOneError::Read(offset, e)) => Err(m.fill_error(offset, e)),
        }
    }

    /// `page_cache_async_ra` after this reader cleared PG_readahead on the folio at `index`.
    #[cold]
    fn async_readahead(&self, m: &Mapping, index: u64, req_count: usize) {
        let req = {
            let probe = readahead::IndexProbe(&m.pages);
            self.ra.lock().async_ra(index, req_count, &probe)
        };
        if let Some(req) = req {
            m.cache.counters.inc(Event::AsyncRa);
            // Errors of readahead are not the reader's: the pages are dropped and a later read
            // of them retries (and reports).
            let _ = do_page_cache_ra(m, req);
        }
    }
}

impl Drop for CachedFile {
    /// `close(2)`: the handle leaves the file table; the mapping goes with its last user.
    fn drop(&mut self) {
        drop(self.cache.table.remove(self.id));
    }
}

/// Copies the part of a folio's `data` (first page `folio_index`) that `pos..end` covers into
/// `buf` (which starts at file byte `offset`); returns the bytes copied.
#[inline]
fn copy_out(buf: &mut [u8], offset: u64, pos: u64, end: u64, folio_index: u64, data: &[u8]) -> u64 {
    let within = (pos - (folio_index << PAGE_SHIFT)) as usize;
    let n = ((end - pos) as usize).min(data.len() - within);
    let at = (pos - offset) as usize;
    buf[at..at + n].copy_from_slice(&data[within..within + n]);
    n as u64
}

/// `do_page_cache_ra`: clamp to EOF, then instantiate and read.
fn do_page_cache_ra(m: &Mapping, req: RaRequest) -> RaOutcome {
    match req.clamp_to_eof(m.nr_pages()) {
        Some(req) => readahead::page_cache_ra_unbounded(&m.ra_target(), req),
        None => RaOutcome::default(),
    }
}

fn check_range(range: &Range<u64>) -> Result<(), CacheError> {
    if range.start > range.end {
        return Err(CacheError::InvalidArgument {
            what: format!(
                "byte range {}..{} is reversed: give start <= end",
                range.start, range.end
            ),
        });
    }
    Ok(())
}

/// The file bytes `folio` holds (the part past EOF excluded).
fn valid_bytes(m: &Mapping, folio: &FolioRef<'_>) -> usize {
    let start = folio.index() << PAGE_SHIFT;
    (m.size.saturating_sub(start)).min(folio.size() as u64) as usize
}

/// What both folio guards hold: one counted reference on an uptodate folio, and how many of
/// its bytes are the file's.
struct Pin {
    folio: std::ptr::NonNull<crate::folio::Folio>,
    valid: usize,
}

impl Pin {
    /// # Safety
    /// `arena` is the arena of the folio, alive for `'a`.
    unsafe fn folio<'a>(&self, _arena: &'a crate::folio::Arena) -> &'a crate::folio::Folio {
        // SAFETY: headers live as long as their arena (per the caller), and our reference
        // keeps this one allocated to its file.
        unsafe { self.folio.as_ref() }
    }

    /// # Safety
    /// As [`Pin::folio`].
    unsafe fn bytes<'a>(&self, arena: &'a crate::folio::Arena) -> &'a [u8] {
        // SAFETY: forwarded; we own one reference, given back by `release` only.
        let folio = unsafe { self.folio(arena) };
        // SAFETY: as above; the temporary handle is never dropped (no put).
        let r = std::mem::ManuallyDrop::new(unsafe { FolioRef::from_raw(arena, folio) });
        let data = r.data().expect("pinned folios are uptodate");
        // SAFETY: `data` points into the arena's frames, which live as long as the arena;
        // the bytes are immutable while our reference exists, and the caller ties the borrow
        // to the guard holding it.
        let data: &[u8] = unsafe { std::slice::from_raw_parts(data.as_ptr(), data.len()) };
        &data[..self.valid]
    }

    /// # Safety
    /// As [`Pin::folio`]; called once, from the guard's drop.
    unsafe fn release(&self, arena: &crate::folio::Arena) {
        // SAFETY: we own exactly one reference on this folio, put here once.
        drop(unsafe { FolioRef::from_raw(arena, self.folio(arena)) });
    }
}

/// The accessors, `Deref`, `Debug` and `Drop` of a folio guard (`PinnedFolio`, `OwnedFolio`):
/// each type supplies `arena()` (alive as long as the guard) and `path()`.
macro_rules! guard_methods {
    ($guard:ty, $name:literal) => {
        impl $guard {
            /// The first page index the folio covers.
            pub fn index(&self) -> u64 {
                // SAFETY: `arena()` is the folio's arena, alive as long as the guard.
                unsafe { self.pin.folio(self.arena()) }.index()
            }

            /// The byte offset in the file of the folio's first byte.
            pub fn offset(&self) -> u64 {
                self.index() << PAGE_SHIFT
            }

            /// The file bytes the folio holds (the part past EOF excluded).
            pub fn bytes(&self) -> &[u8] {
                // SAFETY: as in `index`; the borrow is tied to `&self`, which holds the
                // folio reference.
                unsafe { self.pin.bytes(self.arena()) }
            }

            /// The folio's reference count right now (this guard's included): a diagnostic.
            pub fn ref_count(&self) -> u32 {
                let arena = self.arena();
                // SAFETY: as in `index`.
                unsafe { self.pin.folio(arena) }.ref_count(arena.strategy())
            }
        }

        impl std::ops::Deref for $guard {
            type Target = [u8];

            fn deref(&self) -> &[u8] {
                self.bytes()
            }
        }

        impl std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct($name)
                    .field("path", &self.path())
                    .field("index", &self.index())
                    .field("len", &self.bytes().len())
                    .finish()
            }
        }

        impl Drop for $guard {
            fn drop(&mut self) {
                // SAFETY: the arena outlives the guard; the reference is put once, here.
                unsafe { self.pin.release(self.arena()) }
            }
        }
    };
}

/// A pinned folio of a cached file, borrowed from its handle: its bytes, without a copy
/// (`filemap_get_folio` + `kmap_local_folio`), from [`CachedFile::get_folio`].
///
/// Holds a reference on the folio (put on drop), so the bytes stay valid and unchanged
/// however long the guard lives; the cache cannot evict or invalidate a pinned folio.
/// Holding many guards uses up the memory budget: once reclaim has evicted every unpinned
/// folio, reads fail with [`CacheError::OutOfMemory`] instead of waiting.
///
/// Dereferences to the file's bytes in the folio (`&guard[..]`). The guard cannot outlive
/// the handle it came from:
///
/// ```compile_fail
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("data");
/// # std::fs::write(&path, vec![7u8; 8192])?;
/// let cache = foliocache::FolioCache::new(foliocache::Config::new(1 << 20))?;
/// let page = {
///     let file = cache.open(&path)?;
///     let page = file.get_folio(0)?;
///     page                              // error: `file` does not live long enough
/// };
/// # Ok(()) }
/// ```
///
/// but its owned form can, and may move to another thread:
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("data");
/// # std::fs::write(&path, vec![7u8; 8192])?;
/// let cache = foliocache::FolioCache::new(foliocache::Config::new(1 << 20))?;
/// let page = {
///     let file = cache.open(&path)?;
///     let owned = file.get_folio(1)?.into_owned();
///     owned                             // `file` closes here; the page stays
/// };
/// let sum = std::thread::spawn(move || page.iter().map(|&b| b as u64).sum::<u64>()).join();
/// assert_eq!(sum.unwrap(), 7 * 4096);
/// # Ok(()) }
/// ```
pub struct PinnedFolio<'f> {
    file: &'f CachedFile,
    pin: Pin,
}

// SAFETY: the guard owns a counted reference, which may be used and dropped from any thread
// (folio headers are shared, atomically accessed state); the bytes it exposes are immutable;
// `CachedFile` is `Sync`.
unsafe impl Send for PinnedFolio<'_> {}
// SAFETY: as above; `&PinnedFolio` only reads immutable bytes and atomic header fields.
unsafe impl Sync for PinnedFolio<'_> {}

impl<'f> PinnedFolio<'f> {
    /// The arena the folio lives in: the handle keeps the cache, hence the arena, alive for
    /// `'f`.
    fn arena(&self) -> &'f crate::folio::Arena {
        &self.file.cache.arena
    }

    fn path(&self) -> PathBuf {
        self.file.path()
    }

    /// A guard that owns its file instead of borrowing the handle: it may outlive the handle
    /// (and every other handle of the file) and move into `'static` tasks. Costs one shared
    /// reference on the file's state, taken here and put when the owned guard drops.
    pub fn into_owned(self) -> OwnedFolio {
        let this = std::mem::ManuallyDrop::new(self);
        OwnedFolio {
            mapping: this.file.mapping(),
            pin: Pin {
                folio: this.pin.folio,
                valid: this.pin.valid,
            },
        }
    }
}

guard_methods!(PinnedFolio<'_>, "PinnedFolio");

/// A pinned folio that owns a reference on its file ([`PinnedFolio::into_owned`]): valid
/// after every handle of the file is closed; the folio is freed when the guard drops.
pub struct OwnedFolio {
    mapping: Arc<Mapping>,
    pin: Pin,
}

// SAFETY: as for `PinnedFolio`; the mapping is shared state behind an `Arc`.
unsafe impl Send for OwnedFolio {}
// SAFETY: as above.
unsafe impl Sync for OwnedFolio {}

impl OwnedFolio {
    /// The arena the folio lives in, kept alive by the mapping we hold.
    fn arena(&self) -> &crate::folio::Arena {
        &self.mapping.cache.arena
    }

    fn path(&self) -> PathBuf {
        self.mapping.path.clone()
    }
}

guard_methods!(OwnedFolio, "OwnedFolio");
