//! Open files: the handle ([`CachedFile`], the kernel's `struct file`, with its readahead
//! state) on an inode (`cache/inode.rs`) shared by every handle of the file, and the read
//! path (`filemap_read`, `filemap_get_pages`, `filemap_create_folio`), which reaches the
//! mechanisms through the inode's address space and the cache's `RaHost`. The folio guards a
//! handle hands out are in `guard.rs`, `range.rs` and `latch.rs`.

use std::io;
use std::ops::Range;
use std::path::PathBuf;

use super::error::CacheError;
use super::inode::Inode;
use super::sb::CacheInner;
use super::stats::Event;
use crate::mm::folio::flags::{PG_ERROR, PG_LATCHED, PG_READAHEAD};
use crate::mm::folio::{FolioRef, PAGE_SHIFT};
use crate::mm::rcu::RcuReadGuard;
use crate::mm::readahead::{self, RaRequest, RaState, DEFAULT_RA_PAGES};
use crate::mm::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};

/// How a handle will read its file ([`CachedFile::advise`], `posix_fadvise(2)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Advice {
    /// The cache's defaults (`POSIX_FADV_NORMAL`).
    Normal,
    /// Reads from start to end: a larger readahead window (`POSIX_FADV_SEQUENTIAL`).
    Sequential,
    /// Reads at random: no readahead (`POSIX_FADV_RANDOM`).
    Random,
    /// The range will be read soon: start reading it (`POSIX_FADV_WILLNEED`).
    WillNeed,
    /// The range will not be read again soon: drop its clean pages (`POSIX_FADV_DONTNEED`).
    DontNeed,
    /// The data is read once: reads do not make pages look hot (`POSIX_FADV_NOREUSE`).
    NoReuse,
}

/// An open file of a [`FolioCache`](super::FolioCache), used like a file descriptor with
/// `pread`/`pwrite` (every call names its byte offset; the kernel's `struct file`).
///
/// Every handle has its own readahead stream; handles of the same path share the cached pages.
/// A handle may be used from many threads at once (`read_at` takes `&self`), though a
/// sequential reader per thread should open its own handle, as it would its own file
/// descriptor, so that the streams do not confuse each other's readahead.
///
/// A handle keeps its inode, which never changes for its life, so nothing resolves a
/// number to find it: a thread holding a handle is like a task holding its `struct file`
/// reference across calls, where `fdget` on every system call is the price of descriptors
/// being plain integers. The cache keeps no descriptor table (nothing would read it); the
/// table mechanism of seed 003 is [`crate::mm::filetable`], measured by the `hash` lab
/// scenario.
pub struct CachedFile {
    /// The inode, whose use the handle's drop hands to `iput`, so that an evicted inode's
    /// pages go (and the eviction listener hears of them) before `close` returns, while the
    /// cache lives.
    pub(super) m: std::mem::ManuallyDrop<Arc<Inode>>,
    pub(super) cache: Arc<CacheInner>,
    /// The handle's number (`fd`), distinct among the cache's handles: a latch names the
    /// handle its guard borrows by it.
    pub(super) id: u64,
    ra: Mutex<RaState>,
    /// This handle's largest readahead window in pages (`file->f_ra.ra_pages`, 0: off),
    /// also in `ra`; read without its lock on a miss ([`CachedFile::advise`] changes it).
    ra_pages: AtomicUsize,
    /// `FMODE_NOREUSE` ([`Advice::NoReuse`]): this handle's reads do not mark pages accessed.
    noreuse: AtomicBool,
    /// `ra->prev_pos`: the byte after the previous read of this handle.
    prev_pos: AtomicU64,
    /// Opened for writing (`FMODE_WRITE`).
    pub(super) writable: bool,
    /// Opened with `append` (`O_APPEND`): every write goes to the end of the file.
    pub(super) append: bool,
    /// `file->f_wb_err`: this handle's sample of the file's error sequence, advanced when a
    /// sync reports an error (under this lock, `f_lock`).
    pub(super) wb_err: Mutex<u32>,
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
pub(super) enum Fast {
    /// Everything was cached: the read is complete.
    Done(usize),
    /// Stopped before a folio that needs the slow path, after copying this many bytes.
    Partial(usize),
}

/// The most pages one miss reads with readahead off (a larger read takes several).
const MISS_READ_MAX_PAGES: usize = 512;

/// Reads larger than this skip the fast path (it runs inside one RCU read section, which
/// should be short).
pub(super) const FAST_READ_MAX: usize = 64 << 10;

impl CachedFile {
    /// `alloc_file`: a new handle on the inode `mapping`. The caller took the use of the
    /// inode this handle owns (put back by the handle's drop).
    pub(crate) fn new(cache: Arc<CacheInner>, mapping: Arc<Inode>) -> CachedFile {
        let id = cache.next_handle.fetch_add(1, Ordering::Relaxed);
        let ra_pages = mapping.ra_pages;
        // `errseq_sample` at open.
        let wb_err = mapping.mapping.wb.err.sample();
        CachedFile {
            cache,
            id,
            m: std::mem::ManuallyDrop::new(mapping),
            ra: Mutex::new(RaState::new(ra_pages)),
            ra_pages: AtomicUsize::new(ra_pages),
            noreuse: AtomicBool::new(false),
            prev_pos: AtomicU64::new(0),
            writable: false,
            append: false,
            wb_err: Mutex::new(wb_err),
        }
    }

    /// The handle's access mode (`f_mode`, `O_APPEND`).
    pub(crate) fn with_mode(mut self, writable: bool, append: bool) -> CachedFile {
        self.writable = writable || append;
        self.append = append;
        self
    }

    /// The mapping of this handle (an `Arc` clone: it may be held across I/O).
    #[inline]
    pub(super) fn mapping(&self) -> Arc<Inode> {
        Arc::clone(&self.m)
    }

    /// This handle's mapping, borrowed for the handle's life.
    #[inline]
    pub(super) fn mapping_ref(&self) -> &Inode {
        &self.m
    }

    /// Runs `f` on this handle's mapping.
    #[inline]
    fn with_mapping<R>(&self, f: impl FnOnce(&Inode) -> R) -> R {
        f(&self.m)
    }

    /// Runs `f` on this handle's mapping inside an RCU read section of the cache's domain
    /// (the indexes'): the section a hit's lookup runs in, entered once per call. Only for
    /// short, non-blocking work.
    #[inline(always)]
    pub(super) fn hit_section<R>(&self, f: impl FnOnce(&Inode, &RcuReadGuard<'_>) -> R) -> R {
        let section = self.cache.rcu.read_lock();
        f(&self.m, &section)
    }

    /// The path the file was opened with.
    pub fn path(&self) -> PathBuf {
        self.with_mapping(|m| m.path.clone())
    }

    /// The alignment of the file's direct I/O (`statx`'s `STATX_DIOALIGN`), or `None` if the
    /// cache reads and writes it through the kernel's page cache
    /// ([`Config::direct_io`](crate::Config::direct_io); a file opened with
    /// [`FolioCache::open_backing`](crate::FolioCache::open_backing) is its backing's business
    /// and reports `None`).
    pub fn direct_io(&self) -> Option<u32> {
        match self.mapping().mapping.dio_align {
            0 => None,
            a => Some(a),
        }
    }

    /// How the cache reads and writes this file: direct I/O, buffered with the kernel told to
    /// drop its copy, or plainly buffered ([`Config::direct_io`](crate::Config::direct_io)
    /// chooses; the file system decides what is possible).
    ///
    /// ```
    /// # use foliocache::{Config, FolioCache, IoMode};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # std::fs::write(dir.path().join("data"), b"hello")?;
    /// let cache = FolioCache::new(Config::new(1 << 20))?;
    /// let file = cache.open(dir.path().join("data"))?;
    /// match file.io_mode() {
    ///     IoMode::Direct { align } => println!("direct I/O, {align}-byte alignment"),
    ///     mode => println!("{mode}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn io_mode(&self) -> crate::IoMode {
        self.with_mapping(|m| match (m.key, m.mapping.dio_align, m.dontcache) {
            (None, _, _) => crate::IoMode::Backing,
            (_, 0, true) => crate::IoMode::Uncached,
            (_, 0, false) => crate::IoMode::Buffered,
            (_, align, _) => crate::IoMode::Direct { align },
        })
    }

    /// The file size in bytes (`i_size`): the size the file had when the cache last looked
    /// at it (at `open`, or [`CachedFile::refresh`]).
    pub fn len(&self) -> u64 {
        self.with_mapping(|m| m.size())
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether misses of this file may cache its pages in large folios (up to
    /// [`Config::max_folio_order`](super::Config::max_folio_order)): on by default; off, every
    /// page read in gets a folio of its own (`mapping_set_large_folios` not called). Applies
    /// to every handle of the file and to later misses; folios already cached stay as they
    /// are.
    pub fn set_large_folios(&self, on: bool) {
        self.with_mapping(|m| m.mapping.large_folios.store(on, Ordering::Relaxed));
    }

    /// Pages of this file in the cache right now.
    pub fn cached_pages(&self) -> u64 {
        self.with_mapping(|m| m.mapping.pages.stats().nr_pages)
    }

    /// Another handle on the same cached file, with a fresh readahead stream (`dup` with
    /// its own file position). Unlike [`FolioCache::open`](super::FolioCache::open) it does
    /// not look at the file again.
    pub fn reopen(&self) -> CachedFile {
        let m = self.mapping();
        // ORDERING: Relaxed; this handle holds a use, so the count cannot reach zero here.
        m.users.fetch_add(1, Ordering::Relaxed);
        CachedFile::new(self.cache.clone(), m).with_mode(self.writable, self.append)
    }

    /// Looks at the file again, as [`FolioCache::open`](super::FolioCache::open) does
    /// (close-to-open revalidation): if its size or modification time changed since the cache
    /// last looked (a write that bypassed the cache), its cached pages are dropped and
    /// [`CachedFile::len`] takes the new size. Returns whether the file had changed.
    ///
    /// For a file opened with a custom [`Backing`](crate::backing::Backing) only the size is compared.
    pub fn refresh(&self) -> Result<bool, CacheError> {
        let m = self.mapping();
        let r = m
            .revalidate(&self.cache)
            .map_err(|source| CacheError::Open {
                path: m.path.clone(),
                source,
            });
        drop(m);
        self.cache.deliver();
        r
    }

    /// `filemap_read` (`pread(2)`): copies the file's bytes at `offset` into `buf` through
    /// the cache, reading missing pages (and readahead) from the backing file.
    ///
    /// Returns the bytes copied: `buf.len()` unless the read reaches EOF (a short read), 0 at
    /// or past EOF. If an error stops the read after some bytes were copied, those bytes are
    /// reported (like `pread`); the error comes with the next call.
    ///
    /// A hit makes no system call and takes no lock: in one RCU section, the index lookup
    /// of the folio, speculative reference, re-check, uptodate check, copy, put; the
    /// statistics go to the calling thread's shard, looked up once.
    ///
    /// The hit is inlined into the caller (its result then never goes through memory); the
    /// rest of the read is out of line.
    #[inline]
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, CacheError> {
        let done = if buf.len() <= FAST_READ_MAX {
            let fast = self.hit_section(|m, section| self.read_cached(m, section, buf, offset));
            match fast {
                Fast::Done(n) => return Ok(n),
                Fast::Partial(n) => n,
            }
        } else {
            self.cache.counters.inc(Event::ReadCalls);
            0
        };
        self.read_at_slow(buf, offset, done)
    }

    /// What a read that is not a complete hit does after the fast path copied `done` bytes:
    /// misses, readahead, waiting for I/O.
    #[inline(never)]
    fn read_at_slow(&self, buf: &mut [u8], offset: u64, done: usize) -> Result<usize, CacheError> {
        // Borrowed, not cloned: the handle keeps its mapping, and a clone would write the
        // `Arc`'s count, a line every handle of the file shares.
        let m: &Inode = &self.m;
        let r = match self.read_slow(m, &mut buf[done..], offset + done as u64) {
            Ok(n) => {
                // The fast path counted its `done` bytes.
                self.cache.counters.add(Event::BytesCopied, n as u64);
                Ok(done + n)
            }
            // Bytes were copied: report them now, the error with the next call (pread).
            Err(_) if done > 0 => Ok(done),
            Err(e) => Err(e),
        };
        // What this read's allocations evicted reaches the listener now (`cache/budget.rs`);
        // a hit evicts nothing.
        self.cache.deliver();
        r
    }

    /// `filemap_read_fast`-like: copies from folios that are cached, uptodate and unmarked,
    /// stopping at the first one that is not (readahead, I/O and waiting need the slow path).
    /// Counts the call, its hits and the bytes it copied.
    #[inline]
    pub(super) fn read_cached(
        &self,
        m: &Inode,
        section: &RcuReadGuard<'_>,
        buf: &mut [u8],
        offset: u64,
    ) -> Fast {
        let stats = self.cache.counters.mine();
        stats.add(Event::ReadCalls, 1);
        let size = m.size();
        if buf.is_empty() || offset >= size {
            return Fast::Done(0);
        }
        let end = offset + (buf.len() as u64).min(size - offset);
        let last = self.last_page();
        let mut pos = offset;
        while pos < end {
            let Some(folio) = m.mapping.pages.lookup_in(pos >> PAGE_SHIFT, section) else {
                break;
            };
            if folio.flags() & PG_READAHEAD != 0 {
                break;
            }
            let Some(data) = folio.data() else {
                break;
            };
            stats.add(Event::Hit, 1);
            if !holds_page(&folio, last) {
                self.accessed(&folio);
            }
            pos += copy_out(buf, offset, pos, end, folio.index(), data);
        }
        // Nothing copied (a miss at `offset`): leave `prev_pos` to the slow path, which
        // decides from it whether the folio it reads in counts as a new access.
        if pos != offset {
            self.set_prev_pos(pos);
        }
        stats.add(Event::BytesCopied, pos - offset);
        if pos == end {
            Fast::Done((pos - offset) as usize)
        } else {
            Fast::Partial((pos - offset) as usize)
        }
    }

    /// The full read path: misses, readahead, waiting for folios under I/O.
    fn read_slow(&self, m: &Inode, buf: &mut [u8], offset: u64) -> Result<usize, CacheError> {
        let size = m.size();
        if buf.is_empty() || offset >= size {
            return Ok(0);
        }
        let end = offset + (buf.len() as u64).min(size - offset);
        let last_index = (end - 1) >> PAGE_SHIFT;
        let last = self.last_page();
        let mut pos = offset;
        while pos < end {
            let index = pos >> PAGE_SHIFT;
            let (folio, filled) = match self.get_page(m, index, (last_index - index + 1) as usize) {
                Ok(f) => f,
                // No page to be had (pins and dirty pages hold the budget): copy this page's
                // part from the file, uncached (`cache/budget.rs`).
                Err(e) if e.is_out_of_memory() => {
                    match self.cache.read_uncached(m, buf, offset, pos, end) {
                        Ok(n) => {
                            pos += n;
                            continue;
                        }
                        Err(e) if pos == offset => return Err(e),
                        Err(_) => break,
                    }
                }
                Err(e) if pos == offset => return Err(e),
                Err(_) => break,
            };
            if !holds_page(&folio, last) {
                self.accessed_after(&folio, filled);
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
    pub(super) fn last_page(&self) -> Option<u64> {
        let prev = self.prev_pos.load(Ordering::Relaxed);
        prev.checked_sub(1).map(|b| b >> PAGE_SHIFT)
    }

    /// `ra->prev_pos = last_pos`, stored only when it changes so that a handle re-reading one
    /// spot (the pread benchmark) writes nothing.
    #[inline]
    pub(super) fn set_prev_pos(&self, pos: u64) {
        if self.prev_pos.load(Ordering::Relaxed) != pos {
            self.prev_pos.store(pos, Ordering::Relaxed);
        }
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails: [`CacheError::UnexpectedEof`] if
    /// the range runs past the end of the file, the read's own error if one stopped it short
    /// (as `std::io::Read::read_exact` does).
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), CacheError> {
        let mut done = 0;
        while done < buf.len() {
            // A short count is the end of the file or an error after some bytes were copied
            // (pread's rule); the next call returns 0 for the first, the error for the second.
            match self.read_at(&mut buf[done..], offset + done as u64)? {
                0 => return Err(self.eof_error(offset, buf.len())),
                n => done += n,
            }
        }
        Ok(())
    }

    /// The error of an exact read of `len` bytes at `offset` that reached the end of the
    /// file.
    #[cold]
    pub(super) fn eof_error(&self, offset: u64, len: usize) -> CacheError {
        CacheError::UnexpectedEof {
            path: self.path(),
            offset,
            len,
            file_size: self.len(),
        }
    }

    /// `readahead(2)` / `force_page_cache_ra`: reads the pages of the byte range `range` into
    /// the cache now, in windows of at most 2 MiB. Returns the pages newly cached.
    ///
    /// Pages already cached are skipped. The range is clamped to the file.
    pub fn readahead(&self, range: Range<u64>) -> Result<usize, CacheError> {
        check_range(&range)?;
        let m = self.mapping();
        let end = range.end.min(m.size());
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
            let out = readahead::do_page_cache_ra(&m.mapping, &*self.cache, req);
            inserted += out.inserted;
            if let Some((offset, e)) = out.error {
                return Err(m.fill_error(offset, e));
            }
            if out.out_of_memory && out.inserted == 0 {
                return Err(self.cache.out_of_memory(1));
            }
            index += nr as u64;
        }
        Ok(inserted)
    }

    /// `invalidate_mapping_pages`: drops the cached pages overlapping the byte range `range`
    /// that nobody uses right now (pinned folios and folios under I/O stay, and so does a
    /// large folio that holds pages outside the range too). Returns the pages dropped.
    pub fn invalidate(&self, range: Range<u64>) -> Result<usize, CacheError> {
        check_range(&range)?;
        if range.is_empty() {
            return Ok(0);
        }
        let m = self.mapping();
        let first = range.start >> PAGE_SHIFT;
        let last = (range.end - 1) >> PAGE_SHIFT;
        // Windows a readahead worker is still reading for this file would leave their pages
        // behind (locked folios are skipped): let them end first, so that the range is empty
        // afterwards unless a guard or a reader holds a page.
        m.ra_inflight.wait();
        // As `fadvise(POSIX_FADV_DONTNEED)` does: a folio still in a per-CPU LRU batch holds
        // the batch's reference and would look busy, so drain this CPU's batches first, and
        // every CPU's if some folios were still busy.
        let c = &self.cache;
        c.lru.drain(&c.arena);
        let mut out = m.mapping.pages.invalidate(first, last + 1);
        if out.busy > 0 {
            c.lru.drain_all(&c.arena);
            out.pages_freed += m.mapping.pages.invalidate(first, last + 1).pages_freed;
        }
        c.counters.add(Event::Invalidated, out.pages_freed);
        c.note_eviction(
            &m,
            first..last + 1,
            out.pages_freed,
            super::budget::EvictionReason::Invalidate,
        );
        drop(m);
        c.deliver();
        Ok(out.pages_freed as usize)
    }

    /// `filemap_get_pages` for one folio: the uptodate folio holding page `index`, for a read
    /// of `req_count` pages starting there, and whether this read missed it (the folio was
    /// filled for this read, by it or by a concurrent one).
    #[inline]
    pub(super) fn get_page<'m>(
        &'m self,
        m: &'m Inode,
        index: u64,
        req_count: usize,
    ) -> Result<(FolioRef<'m>, bool), CacheError> {
        let c = &self.cache;
        let mut missed = false;
        loop {
            let folio = match m.mapping.pages.lookup(index) {
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
                self.async_readahead(m, folio.index(), folio.nr_pages(), req_count);
            }
            if folio.is_uptodate() {
                if folio.flags() & PG_LATCHED != 0 {
                    // An exclusive latch updates the page in place: wait for its commit.
                    // ORDERING: Relaxed is enough; our `try_get` read the unfreeze that
                    // published the bit, and `data()` pairs with the commit's clear.
                    self.wait_latched(m, &folio)?;
                    continue;
                }
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

    /// Waits for the commit of the in-place latch on `folio` (`PG_LATCHED`), or fails if the
    /// calling thread made it: the read would wait for itself.
    #[cold]
    pub(super) fn wait_latched(&self, m: &Inode, folio: &FolioRef<'_>) -> Result<(), CacheError> {
        if folio.test_flag(PG_LATCHED) {
            m.refuse_own_latch(folio.index(), folio.index(), "a read")?;
        }
        self.cache.counters.inc(Event::WaitLatched);
        folio.wait_unlatched();
        Ok(())
    }

    /// A miss: synchronous readahead, then, if the page is still missing, a single-folio read
    /// (`filemap_create_folio`). Returns the folio, or `None` to look again (raced).
    #[cold]
    fn fill_missing<'m>(
        &'m self,
        m: &'m Inode,
        index: u64,
        req_count: usize,
    ) -> Result<Option<FolioRef<'m>>, CacheError> {
        let c = &self.cache;
        if let Some(req) = self.miss_request(m, index, req_count) {
            crate::trace::span!("sync_readahead", index = req.index, pages = req.nr_to_read);
            let out = readahead::do_page_cache_ra(&m.mapping, &*self.cache, req);
            if let Some(f) = m.mapping.pages.lookup(index) {
                return Ok(Some(f));
            }
            if let Some((offset, e)) = out.error {
                if out.failed_range.contains(&index) {
                    self.shrink_readahead_size_eio();
                    return Err(m.fill_error(offset, e));
                }
            }
        }
        // `filemap_create_folio`: just this page.
        crate::trace::span!("single_page_reads", index);
        c.counters.inc(Event::SinglePageReads);
        match readahead::read_one(&m.mapping, &*self.cache, index) {
            Ok(Some(f)) => Ok(Some(f)),
            Ok(None) => Ok(None),
            Err(readahead::ReadOneError::OutOfMemory) => Err(c.out_of_memory(1)),
            Err(readahead::ReadOneError::Read(offset, e)) => {
                self.shrink_readahead_size_eio();
                Err(m.fill_error(offset, e))
            }
        }
    }

    /// `page_cache_sync_ra`'s decision for a miss at page `index` of a read of `req_count`
    /// pages: the window to read, or `None` for the page alone (`filemap_create_folio`).
    pub(super) fn miss_request(
        &self,
        m: &Inode,
        index: u64,
        req_count: usize,
    ) -> Option<RaRequest> {
        // With readahead off (no need to take the stream's lock: the window size never
        // changes after open), a miss reads the request whole, no more: a block cache's cold
        // 16 KiB block is one backing read, and one folio when it is aligned.
        // ORDERING: Relaxed; a hint that only this handle's `advise` changes.
        let ra_pages = self.ra_pages.load(Ordering::Relaxed);
        if ra_pages == 0 {
            return (req_count > 1).then_some(RaRequest {
                index,
                nr_to_read: req_count.min(MISS_READ_MAX_PAGES),
                lookahead: 0,
            });
        }
        let prev_pos = self.prev_pos.load(Ordering::Relaxed);
        let probe = readahead::IndexProbe(&m.mapping.pages);
        let req = self.ra.lock().sync_ra(index, req_count, prev_pos, &probe);
        if req.is_some() {
            self.cache.counters.inc(Event::SyncRa);
        }
        req
    }

    /// `page_cache_async_ra`'s decision after a reader cleared PG_readahead on the folio at
    /// `index` (`nr_pages` long): the next window, if the stream wants one (counted).
    fn next_async_window(
        &self,
        m: &Inode,
        index: u64,
        nr_pages: usize,
        req_count: usize,
    ) -> Option<RaRequest> {
        let probe = readahead::IndexProbe(&m.mapping.pages);
        let req = self
            .ra
            .lock()
            .async_ra_folio(index, nr_pages, req_count, &probe);
        if req.is_some() {
            self.cache.counters.inc(Event::AsyncRa);
        }
        req
    }

    /// `page_cache_async_ra` for a task, which may not wait: after the task cleared
    /// PG_readahead on the folio at `index`, the next window goes to a readahead worker
    /// without the insertion handshake (a reader that reaches its pages before they are in
    /// the index misses, and its own miss reads them).
    pub(super) fn async_readahead_nowait(
        &self,
        m: &Inode,
        index: u64,
        nr_pages: usize,
        req_count: usize,
    ) {
        if let Some(req) = self.next_async_window(m, index, nr_pages, req_count) {
            let job = self.ra_job(move |m, c| {
                let _ = readahead::do_page_cache_ra(&m.mapping, c, req);
            });
            if let Err(job) = super::async_ra::AsyncRa::submit(&self.cache.async_ra, job, true) {
                job(); // no worker could start: read it now
            }
        }
    }

    /// `shrink_readahead_size_eio`: a read this handle needed failed, so its readahead window
    /// shrinks to a quarter (a failing device is not read ahead of at full width; the window
    /// stays small until [`CachedFile::advise`] sets it again).
    #[cold]
    pub(super) fn shrink_readahead_size_eio(&self) {
        let mut ra = self.ra.lock();
        ra.ra_pages /= 4;
        // ORDERING: Relaxed, as every load of it: a hint read on a miss.
        self.ra_pages.store(ra.ra_pages, Ordering::Relaxed);
    }

    /// `page_cache_async_ra` after this reader cleared PG_readahead on the folio at `index`.
    #[cold]
    fn async_readahead(&self, m: &Inode, index: u64, nr_pages: usize, req_count: usize) {
        crate::trace::span!("async_readahead", index);
        if let Some(req) = self.next_async_window(m, index, nr_pages, req_count) {
            if m.mapping.dio_align != 0 && self.start_async_ra(req) {
                return;
            }
            // Errors of readahead are not the reader's: the pages are dropped and a later read
            // of them retries (and reports).
            let _ = readahead::do_page_cache_ra(&m.mapping, &*self.cache, req);
        }
    }

    /// Hands the window `req` to a readahead worker and waits until its folios are in the
    /// index, not for their reads (`cache/async_ra.rs`). False if every worker is busy: the
    /// caller reads the window itself.
    fn start_async_ra(&self, req: RaRequest) -> bool {
        let (handshake, signal) = super::async_ra::Handshake::new();
        let job = self.ra_job(move |m, c| {
            let inserted = || signal.signal();
            let _ = readahead::page_cache_ra_notify(&m.mapping, c, req, Some(&inserted));
            // A job that ends without a word (nothing inserted, or unwinding) drops `signal`,
            // which tells the reader too: the window's folios are settled.
        });
        match super::async_ra::AsyncRa::submit(&self.cache.async_ra, job, false) {
            Ok(()) => {
                handshake.wait();
                true
            }
            Err(_) => false,
        }
    }

    /// A job for the readahead workers that runs `f` on this file's inode, counted in flight
    /// until it ends (every handle's drop waits for the inode's jobs).
    pub(super) fn ra_job(
        &self,
        f: impl FnOnce(&Inode, &CacheInner) + Send + 'static,
    ) -> super::async_ra::Job {
        let m: Arc<Inode> = Arc::clone(&self.m);
        let c = self.cache.clone();
        let inflight = super::async_ra::InflightRa::enter(&m.ra_inflight);
        super::async_ra::counted_job(inflight, move || f(&m, &c))
    }

    /// Reads many byte ranges of the file at once, each into its buffer exactly
    /// ([`CachedFile::read_exact_at`] for each `(offset, buffer)`): every page that misses in
    /// any range is read in one batch through the cache's I/O engine, so the misses of a
    /// `MultiGet` or of a B-tree scan's next leaves wait for the device together, once,
    /// instead of one after another.
    ///
    /// Fails as `read_exact_at` does, on the first range that fails (a range past the end of
    /// the file is [`CacheError::UnexpectedEof`]); the ranges before it were read.
    ///
    /// ```
    /// # use foliocache::{Config, FolioCache};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # std::fs::write(dir.path().join("table"), vec![7u8; 1 << 20])?;
    /// let cache = FolioCache::new(Config::block_cache(16 << 20))?;
    /// let table = cache.open(dir.path().join("table"))?;
    /// let (mut a, mut b) = ([0u8; 4096], [0u8; 100]);
    /// table.read_ranges(&mut [(8192, &mut a[..]), (700_000, &mut b[..])])?;
    /// assert!(a.iter().chain(&b).all(|&x| x == 7));
    /// # Ok(()) }
    /// ```
    pub fn read_ranges(&self, reads: &mut [(u64, &mut [u8])]) -> Result<(), CacheError> {
        let windows = self.missing_windows(reads.iter().map(|(o, b)| *o..*o + b.len() as u64));
        if !windows.is_empty() {
            let m = self.mapping();
            crate::trace::span!("read_ranges", windows = windows.len());
            // Errors are reported by the reads below, which retry a failed page once.
            let _ = readahead::page_cache_ra_many(&m.mapping, &*self.cache, &windows, None);
        }
        for (offset, buf) in reads.iter_mut() {
            self.read_exact_at(buf, *offset)?;
        }
        Ok(())
    }

    /// Starts reading the byte ranges `ranges` into the cache and returns without waiting
    /// (`POSIX_FADV_WILLNEED`): a readahead worker reads every page of them that is not
    /// cached, in one batch. A later read of those pages finds them cached, or waits only for
    /// the rest of their read. Ranges are clamped to the file; errors are not reported here
    /// (a later read of a page whose read failed retries it, and reports).
    pub fn prefetch(&self, ranges: &[Range<u64>]) -> Result<(), CacheError> {
        for r in ranges {
            check_range(r)?;
        }
        let windows = self.missing_windows(ranges.iter().cloned());
        if windows.is_empty() {
            return Ok(());
        }
        let job = self.ra_job(move |m, c| {
            let _ = readahead::page_cache_ra_many(&m.mapping, c, &windows, None);
        });
        if let Err(job) = super::async_ra::AsyncRa::submit(&self.cache.async_ra, job, true) {
            job(); // no worker could start: read them now
        }
        Ok(())
    }

    /// `folio_mark_accessed` for a folio this handle's read used, unless the handle was
    /// advised [`Advice::NoReuse`].
    #[inline]
    pub(super) fn accessed(&self, folio: &FolioRef<'_>) {
        // ORDERING: Relaxed; a hint that only this handle's `advise` changes.
        if !self.noreuse.load(Ordering::Relaxed) {
            self.cache.mark_accessed(folio);
        }
    }

    /// [`CachedFile::accessed`] after a read that found the folio (`filled` false) or had it
    /// filled.
    #[inline]
    pub(super) fn accessed_after(&self, folio: &FolioRef<'_>, filled: bool) {
        if !self.noreuse.load(Ordering::Relaxed) {
            self.cache.mark_accessed_after(folio, filled);
        }
    }

    /// `posix_fadvise(2)` for this handle: how it will read the file, so the cache reads and
    /// keeps its pages accordingly.
    ///
    /// | advice | effect | kernel |
    /// |---|---|---|
    /// | [`Advice::Normal`] | the cache's readahead window, pages marked accessed by reads | `POSIX_FADV_NORMAL` |
    /// | [`Advice::Sequential`] | twice the cache's window (at least 2 x 32 pages) for this handle | `POSIX_FADV_SEQUENTIAL` |
    /// | [`Advice::Random`] | no readahead for this handle: a miss reads what it asked for | `POSIX_FADV_RANDOM` |
    /// | [`Advice::WillNeed`] | starts reading `range` ([`CachedFile::prefetch`]) | `POSIX_FADV_WILLNEED` |
    /// | [`Advice::DontNeed`] | drops the clean, unpinned pages of `range` ([`CachedFile::invalidate`]; dirty pages stay) | `POSIX_FADV_DONTNEED` |
    /// | [`Advice::NoReuse`] | this handle's reads never mark pages accessed, so they are never activated and are reclaimed first: a compaction or a backup reading a file once does not push the hot set out | `POSIX_FADV_NOREUSE` (`FMODE_NOREUSE`, 6.3) |
    ///
    /// `range` matters to `WillNeed` and `DontNeed` only; the others change the handle, as
    /// the kernel's change the open file. `Sequential` and `Random` undo each other and
    /// `NoReuse`; `Normal` undoes all three.
    ///
    /// ```
    /// # use foliocache::{Advice, Config, FolioCache};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # std::fs::write(dir.path().join("sst"), vec![1u8; 1 << 20])?;
    /// let cache = FolioCache::new(Config::new(64 << 20))?;
    /// let input = cache.open(dir.path().join("sst"))?;
    /// input.advise(.., Advice::NoReuse)?;      // a compaction's input: read once
    /// input.advise(.., Advice::Sequential)?;   // ... from start to end
    /// # Ok(()) }
    /// ```
    pub fn advise(
        &self,
        range: impl std::ops::RangeBounds<u64>,
        advice: Advice,
    ) -> Result<(), CacheError> {
        use std::ops::Bound;
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => u64::MAX,
        };
        let range = start..end;
        check_range(&range)?;
        let base = self.m.ra_pages;
        let set_window = |pages: usize| {
            // ORDERING: Relaxed, as its loads; the window itself changes under the lock.
            self.ra_pages.store(pages, Ordering::Relaxed);
            let mut ra = self.ra.lock();
            *ra = RaState::new(pages);
        };
        match advice {
            Advice::Normal => {
                set_window(base);
                self.noreuse.store(false, Ordering::Relaxed);
            }
            Advice::Sequential => {
                set_window((base.max(DEFAULT_RA_PAGES) * 2).min(crate::MAX_RA_PAGES));
                self.noreuse.store(false, Ordering::Relaxed);
            }
            Advice::Random => {
                set_window(0);
                self.noreuse.store(false, Ordering::Relaxed);
            }
            Advice::NoReuse => self.noreuse.store(true, Ordering::Relaxed),
            Advice::WillNeed => self.prefetch(&[range])?,
            Advice::DontNeed => {
                self.invalidate(range)?;
            }
        }
        Ok(())
    }

    /// The windows (contiguous runs of at most 512 pages) of the pages of `ranges` that are
    /// not cached, clamped to the file, sorted and without overlap.
    fn missing_windows(&self, ranges: impl Iterator<Item = Range<u64>>) -> Vec<RaRequest> {
        let m = self.mapping();
        let size = m.size();
        let mut pages: Vec<(u64, u64)> = ranges
            .filter_map(|r| {
                let end = r.end.min(size);
                (r.start < end).then(|| (r.start >> PAGE_SHIFT, (end - 1) >> PAGE_SHIFT))
            })
            .collect();
        pages.sort_unstable();
        let mut windows: Vec<RaRequest> = Vec::new();
        let mut next = 0u64; // the first page not yet considered
        for (first, last) in pages {
            let mut i = first.max(next);
            while i <= last {
                if m.mapping.pages.contains(i) {
                    i += 1;
                    continue;
                }
                let start = i;
                while i <= last && i - start < 512 && !m.mapping.pages.contains(i) {
                    i += 1;
                }
                match windows.last_mut() {
                    Some(w)
                        if w.index + w.nr_to_read as u64 == start
                            && w.nr_to_read + ((i - start) as usize) <= 512 =>
                    {
                        w.nr_to_read += (i - start) as usize;
                    }
                    _ => windows.push(RaRequest {
                        index: start,
                        nr_to_read: (i - start) as usize,
                        lookahead: 0,
                    }),
                }
            }
            next = next.max(last + 1);
        }
        windows
    }
}

impl Drop for CachedFile {
    /// `close(2)`: the handle puts its use of the inode (`iput`), which parks the inode in
    /// the inode cache if it was the last.
    fn drop(&mut self) {
        // The inode's last use when this is the last handle: `iput` evicts the inode and
        // tells the listener before returning.
        // Windows a readahead worker is reading for this file end first (`cache/async_ra.rs`).
        self.m.ra_inflight.wait();
        // SAFETY: taken once, here, and `self.m` is never used again.
        let m = unsafe { std::mem::ManuallyDrop::take(&mut self.m) };
        self.cache.iput(m);
    }
}

/// Copies the part of a folio's `data` (first page `folio_index`) that `pos..end` covers into
/// `buf` (which starts at file byte `offset`); returns the bytes copied.
#[inline]
pub(super) fn copy_out(
    buf: &mut [u8],
    offset: u64,
    pos: u64,
    end: u64,
    folio_index: u64,
    data: &[u8],
) -> u64 {
    let within = (pos - (folio_index << PAGE_SHIFT)) as usize;
    let n = ((end - pos) as usize).min(data.len() - within);
    let at = (pos - offset) as usize;
    buf[at..at + n].copy_from_slice(&data[within..within + n]);
    n as u64
}

/// Whether `folio` holds page `page` (`pos_same_folio`: a read that stays in the folio the
/// previous one ended in does not mark it accessed again).
#[inline]
pub(super) fn holds_page(folio: &FolioRef<'_>, page: Option<u64>) -> bool {
    page.is_some_and(|p| p.wrapping_sub(folio.index()) < folio.nr_pages() as u64)
}

pub(super) fn check_range(range: &Range<u64>) -> Result<(), CacheError> {
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
#[inline]
pub(super) fn valid_bytes(m: &Inode, folio: &FolioRef<'_>) -> usize {
    let start = folio.index() << PAGE_SHIFT;
    (m.size().saturating_sub(start)).min(folio.size() as u64) as usize
}
