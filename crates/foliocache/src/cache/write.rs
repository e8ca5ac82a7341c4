//! The write path of a cached file: `generic_perform_write` with `write_begin` / `write_end`
//! (`mm/filemap.c`), and how a handle is opened for writing ([`OpenOptions`]). Truncation is
//! in `truncate.rs`, syncs in `sync.rs`, the cache's side of writeback (one pass, the dirty
//! throttle) in `writeback.rs`, the writable latch ([`FolioMut`](super::FolioMut)) in
//! `latch.rs`.
//!
//! # A write
//!
//! ```text
//! write_at(buf, pos)            i_rwsem held (writes to one file are serialised, as in Linux)
//!   for each page the range touches:
//!     balance_dirty_pages       reserve the page's dirtiness under the dirty limit; if over
//!                               it, write dirty folios back first (this file's, then others')
//!     write_begin               the folio holding the page, locked: found (a large folio is
//!                               written into whole), or created as a page (not read if the
//!                               write covers it whole or it lies past EOF, else read first),
//!                               and not under writeback (folio_wait_stable)
//!     copy                      in place, or into a replacement (below)
//!     write_end                 mark dirty (tag DIRTY), publish the new i_size, unlock
//! ```
//!
//! # Who may change the bytes of a cached page
//!
//! Readers of the cache get plain `&[u8]` slices of folio bytes: the copying read path and
//! the pinned guards ([`PinnedFolio`](super::PinnedFolio)), each holding a reference. Bytes
//! a reference holder is reading must not change (in Rust a racing write is undefined
//! behaviour, not just a torn read), so a write changes an uptodate folio in one of two ways:
//!
//! - **In place, frozen.** With the folio locked and not under writeback, the writer freezes
//!   its refcount at exactly the references it knows of (the index's and its own,
//!   `folio_ref_freeze`). Success proves no reader holds a reference, and none can take one
//!   until the unfreeze (lockless lookups spin on a frozen folio, as they do while reclaim
//!   removes one). The writer stores the new bytes, then unfreezes with a Release store that
//!   the next reader's Acquire `try_get` pairs with. The freeze takes a few hundred
//!   nanoseconds of a 4 KiB copy at most.
//! - **Replaced.** Someone holds a reference (a pinned guard, a concurrent reader; a per-CPU
//!   LRU batch's is drained first): the writer allocates a new folio of the same size (a
//!   large folio is copied whole), copies the old bytes and the new ones into it, and puts it in the old one's index slot under one index-lock hold
//!   ([`Index::replace_folio`](crate::mm::index::Index::replace_folio),
//!   `replace_page_cache_folio`). Holders of the old folio keep reading the old bytes, a
//!   consistent snapshot of the page, and the old folio is freed with their last reference.
//!   The dirty state moves with the folio: the DIRTY and TOWRITE tags are keyed by the
//!   folio's first page, which the copy shares, so a sync that tagged it before the
//!   replacement writes the new folio.
//!
//! A dirty large folio is one unit for writeback (tagged at its first page, counted as all
//! its pages, written whole: `mm::writeback`); the dirty limit charges its other pages when
//! it becomes dirty.
//!
//! Either way a reader sees a page before or after a write to it, never half of it.
//!
//! # Size publication
//!
//! `write_end` stores a grown `i_size` with Release after the page's bytes are in the cache
//! (inserted, unfrozen or replaced), and readers load `i_size` with Acquire before they look
//! pages up, so a reader that sees the new size finds the bytes under it; a reader that sees
//! the old size copies nothing past it.
//!

use super::cow;
use super::error::CacheError;
use super::file::CachedFile;
use super::inode::Inode;
use super::sb::CacheInner;
use super::split::split_folio_at;
use super::stats::Event;
use super::writeback::balance_dirty_pages;
use crate::mm::folio::{FolioLocked, FolioRef, PAGE_SHIFT, PAGE_SIZE};
use crate::mm::index::AddError;
use crate::mm::sync::{Arc, Ordering};
use crate::mm::writeback;

/// How to open a file ([`FolioCache::open_with`](super::FolioCache::open_with)), the
/// cache's `std::fs::OpenOptions`: every handle reads; `write` or `append` also lets it
/// write.
///
/// ```
/// use foliocache::OpenOptions;
/// let mut opts = OpenOptions::new();
/// opts.write(true).create(true).truncate(true);
/// ```
#[derive(Clone, Debug)]
pub struct OpenOptions {
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions::new()
    }
}

impl OpenOptions {
    /// Read-only, the file must exist.
    pub fn new() -> OpenOptions {
        OpenOptions {
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o666,
        }
    }

    /// Opens for writing too (`O_RDWR`).
    pub fn write(&mut self, on: bool) -> &mut Self {
        self.write = on;
        self
    }

    /// Every write goes to the end of the file, whatever offset it names (`O_APPEND`);
    /// implies `write`.
    pub fn append(&mut self, on: bool) -> &mut Self {
        self.append = on;
        self
    }

    /// Cuts the file to 0 bytes at open, cached pages included (`O_TRUNC`); needs `write`.
    pub fn truncate(&mut self, on: bool) -> &mut Self {
        self.truncate = on;
        self
    }

    /// Creates the file if it does not exist (`O_CREAT`); needs `write`.
    pub fn create(&mut self, on: bool) -> &mut Self {
        self.create = on;
        self
    }

    /// Creates the file, failing if it exists (`O_CREAT | O_EXCL`); needs `write`.
    pub fn create_new(&mut self, on: bool) -> &mut Self {
        self.create_new = on;
        self
    }

    /// The permission bits of a created file, before the umask (default `0o666`).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }

    pub(crate) fn writes(&self) -> bool {
        self.write || self.append
    }

    pub(crate) fn appends(&self) -> bool {
        self.append
    }

    pub(crate) fn truncates(&self) -> bool {
        self.truncate
    }

    pub(crate) fn creates(&self) -> bool {
        self.create
    }

    pub(crate) fn creates_new(&self) -> bool {
        self.create_new
    }

    pub(crate) fn mode_bits(&self) -> u32 {
        self.mode
    }

    /// The flag combinations `open(2)` refuses with `EINVAL`.
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        if (self.truncate || self.create || self.create_new) && !self.writes() {
            return Err("truncate, create and create_new need write(true) or append(true)");
        }
        Ok(())
    }
}
impl CachedFile {
    /// `pwrite(2)`: copies `buf` into the file at `offset` through the cache, returning the
    /// bytes written: all of `buf` unless an error stops the write after some pages (the
    /// error comes with the next call, as with `pwrite`). A handle opened with `append`
    /// writes at the end of the file instead.
    ///
    /// The bytes are in the cache when this returns (every reader sees them), and in the
    /// backing file after writeback: a sync ([`CachedFile::sync_data`]) makes them durable.
    /// Writing past the end grows the file; the gap reads as zeros. A page the write covers
    /// whole is not read first; a partially written page not in the cache is.
    ///
    /// The size limits are checked first, as the kernel's `generic_write_check_limits` does:
    /// a write starting at or past the file system's largest file size or the process's
    /// `RLIMIT_FSIZE` fails with [`CacheError::FileTooLarge`] (`EFBIG`; no `SIGXFSZ` is
    /// sent), and one crossing it writes up to it and returns the shorter count.
    ///
    /// ```
    /// use foliocache::{Config, FolioCache, OpenOptions};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("pages.db");
    /// let cache = FolioCache::new(Config::new(16 << 20))?;
    /// let db = cache.open_with(&path, OpenOptions::new().write(true).create(true))?;
    /// db.write_all_at(&[7u8; 4096], 8192)?;           // page 2; pages 0 and 1 read as zeros
    /// db.sync_data()?;                                 // fdatasync: on disk now
    /// drop(db);
    /// let db = cache.open(&path)?;                     // still cached after the close
    /// let mut page = [0u8; 4096];
    /// db.read_exact_at(&mut page, 8192)?;
    /// assert_eq!((page[0], db.len()), (7, 12288));
    /// # Ok(()) }
    /// ```
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize, CacheError> {
        self.write_at_lsn(buf, offset, 0)
    }

    /// [`CachedFile::write_at`] of a change the engine logged at `lsn` in its write-ahead
    /// log: the pages it writes reach the file only once the log is durable up to `lsn` (each
    /// page keeps the highest number of the changes it holds). The cache learns the log's
    /// durable point from [`FolioCache::log_durable`](crate::FolioCache::log_durable) and
    /// flushes it further, when writeback needs it, through the
    /// [`WriteAheadLog`](crate::WriteAheadLog) given to
    /// [`FolioCache::set_write_ahead_log`](crate::FolioCache::set_write_ahead_log); a sync
    /// of a page whose log cannot be made durable fails with
    /// [`CacheError::WriteAheadLog`], the page still dirty. `lsn` 0 is "no log record"
    /// (plain `write_at`).
    ///
    /// ```
    /// use foliocache::{Config, FolioCache, OpenOptions, WriteAheadLog};
    /// use std::sync::{Arc, Mutex};
    ///
    /// /// A log: its records, and how far they are durable.
    /// struct Log(Mutex<u64>);
    /// impl WriteAheadLog for Log {
    ///     fn flush_log(&self, lsn: u64) -> std::io::Result<()> {
    ///         // A real engine writes its records up to `lsn` and syncs its log file here.
    ///         let mut durable = self.0.lock().unwrap();
    ///         *durable = (*durable).max(lsn);
    ///         Ok(())
    ///     }
    /// }
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let cache = FolioCache::new(Config::new(16 << 20))?;
    /// let log = Arc::new(Log(Mutex::new(0)));
    /// cache.set_write_ahead_log(Some(log.clone()));
    /// let db = cache.open_with(dir.path().join("db"), OpenOptions::new().write(true).create(true))?;
    /// db.write_all_at_lsn(b"row 1", 0, 41)?; // the change logged as record 41
    /// db.sync_data()?;                       // flushes the log to 41 first, then the page
    /// assert_eq!(*log.0.lock().unwrap(), 41);
    /// # Ok(()) }
    /// ```
    pub fn write_at_lsn(&self, buf: &[u8], offset: u64, lsn: u64) -> Result<usize, CacheError> {
        let m = self.writable_mapping()?;
        let append = self.append;
        let w = self.lock_for_write(&m, "write_at", |m| {
            let pos = if append { m.size() } else { offset };
            write_pages(pos, buf.len())
        })?;
        let pos = if self.append { m.size() } else { offset };
        let r = self.perform_write(&m, buf, pos, lsn);
        // The eviction listener runs with no lock held (`cache/budget.rs`).
        drop(w);
        self.cache.deliver();
        r
    }

    /// Writes all of `buf` at `offset` ([`CachedFile::write_at`] until done), or fails.
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), CacheError> {
        self.write_all_at_lsn(buf, offset, 0)
    }

    /// [`CachedFile::write_all_at`] of a change logged at `lsn`
    /// ([`CachedFile::write_at_lsn`]).
    pub fn write_all_at_lsn(&self, buf: &[u8], offset: u64, lsn: u64) -> Result<(), CacheError> {
        let mut done = 0;
        while done < buf.len() {
            done += self.write_at_lsn(&buf[done..], offset + done as u64, lsn)?;
        }
        Ok(())
    }

    /// Appends `buf` at the end of the file, atomically with respect to other writers of the
    /// file (`O_APPEND`), and returns the offset it was written at: a log's record address.
    pub fn append(&self, buf: &[u8]) -> Result<u64, CacheError> {
        let m = self.writable_mapping()?;
        let _w = self.lock_for_write(&m, "append", |m| write_pages(m.size(), buf.len()))?;
        let pos = m.size();
        let n = self.perform_write(&m, buf, pos, 0)?;
        if n != buf.len() {
            // The part written stays (as with a short `write(2)`); say what happened.
            return Err(CacheError::InvalidArgument {
                what: format!(
                    "append to {} wrote {n} of {} bytes before an error; the rest was not written",
                    m.path.display(),
                    buf.len()
                ),
            });
        }
        Ok(pos)
    }

    /// `IOCB_NOWAIT` (`generic_perform_write` under `kiocb_set_rw_flags(RWF_NOWAIT)`): writes
    /// `buf` at `offset` as far as it can without waiting for anything, and returns the bytes
    /// written, possibly 0 (the async write then hands the rest to a worker). It stops
    /// before a page that is not cached whole in a folio of its own, is locked, latched, under
    /// writeback or held by a guard (a copy would allocate), when `i_rwsem` is taken, or when
    /// the dirty limit has no room. Errors are those the write would report at once (a
    /// read-only handle, the file size limits).
    /// Every page written holds a change logged at `lsn` (0: none; [`CachedFile::write_at_lsn`]).
    pub(super) fn write_nowait(
        &self,
        buf: &[u8],
        offset: u64,
        lsn: u64,
    ) -> Result<usize, CacheError> {
        let m = self.writable_mapping()?;
        if self.append || buf.is_empty() {
            return Ok(0);
        }
        let Some(w) = m.i_rwsem.try_lock() else {
            return Ok(0);
        };
        if let Some((first, last)) = write_pages(offset, buf.len()) {
            if m.latches.find(first, last, self.id).is_some() {
                return Ok(0); // the worker's write waits, or reports the caller's own latch
            }
        }
        let c = &self.cache;
        let len = c.write_limit(&m, offset, buf.len())?;
        let end = offset + len as u64;
        let mut at = offset;
        while at < end {
            let index = at >> PAGE_SHIFT;
            let within = (at & (PAGE_SIZE as u64 - 1)) as usize;
            let n = (PAGE_SIZE - within).min((end - at) as usize);
            // `balance_dirty_pages`' reservation, without its throttle.
            if !c.dirty.try_reserve(1) {
                break;
            }
            let Some(folio) =
                modify_cached_nowait(c, &m, index, within, &buf[(at - offset) as usize..][..n])
            else {
                c.dirty.unreserve(1);
                break;
            };
            write_end(c, &m, folio, at + n as u64, lsn, 1);
            at += n as u64;
        }
        if at > offset {
            c.counters.inc(Event::WriteCalls);
            c.counters.add(Event::BytesWritten, at - offset);
            c.wake_flusher();
        }
        drop(w);
        Ok((at - offset) as usize)
    }

    /// The mapping, if this handle may write.
    pub(super) fn writable_mapping(&self) -> Result<Arc<Inode>, CacheError> {
        let m = self.mapping();
        if !self.writable {
            return Err(CacheError::NotWritable {
                path: m.path.clone(),
            });
        }
        Ok(m)
    }

    /// `generic_perform_write` from `pos`, under `i_rwsem`; every page written holds a
    /// change logged at `lsn` (0: none).
    fn perform_write(
        &self,
        m: &Inode,
        buf: &[u8],
        pos: u64,
        lsn: u64,
    ) -> Result<usize, CacheError> {
        if buf.is_empty() {
            return Ok(0);
        }
        let c = &self.cache;
        // `generic_write_check_limits`: refused at or past the limit, cut short at it.
        let len = c.write_limit(m, pos, buf.len())?;
        let end = pos + len as u64;
        c.counters.inc(Event::WriteCalls);
        let mut at = pos;
        while at < end {
            let index = at >> PAGE_SHIFT;
            let within = (at & (PAGE_SIZE as u64 - 1)) as usize;
            // `write_begin` with `fgf_set_order(len)`: a run of uncached pages the write
            // covers whole goes into one new large folio, its pages reserved together.
            let order = new_folio_order(c, m, index, within, end - at);
            let mut reserved = 1 << order;
            balance_dirty_pages(c, m, reserved, || c.dirty_inodes());
            if order > 0 {
                let len = PAGE_SIZE << order;
                let src = &buf[(at - pos) as usize..][..len];
                if let Some(folio) = create_folio(c, m, index, order, src) {
                    write_end(c, m, folio, at + len as u64, lsn, reserved);
                    at += len as u64;
                    continue;
                }
                // Cached meanwhile, or no large folio free: page by page.
                c.dirty.unreserve(reserved - 1);
                reserved = 1;
            }
            let n = (PAGE_SIZE - within).min((end - at) as usize);
            let src = &buf[(at - pos) as usize..][..n];
            match write_page(c, m, index, within, src, lsn, &mut reserved) {
                Ok(()) => at += n as u64,
                Err(e) => {
                    c.dirty.unreserve(reserved);
                    // Some bytes are in: report them; the error comes with the next call.
                    if at > pos {
                        break;
                    }
                    return Err(e);
                }
            }
        }
        c.counters.add(Event::BytesWritten, at - pos);
        c.wake_flusher();
        Ok((at - pos) as usize)
    }
}

/// `write_begin` + copy + `write_end` for the part `src` of page `index` starting `within`
/// bytes into it; `reserved` pages of dirtiness are reserved (one, or a clean large folio's
/// once it is found: [`modify_cached`]), all of them used or given back when it returns
/// `Ok`.
fn write_page(
    c: &CacheInner,
    m: &Inode,
    index: u64,
    within: usize,
    src: &[u8],
    lsn: u64,
    reserved: &mut u64,
) -> Result<(), CacheError> {
    let end = (index << PAGE_SHIFT) + (within + src.len()) as u64;
    loop {
        if let Some(folio) = modify_cached(c, m, index, within, src, Some(reserved))? {
            write_end(c, m, folio, end, lsn, *reserved);
            return Ok(());
        }
        if cow::needs_old_page(&m.snapshots, index) {
            // A live snapshot still needs the page's bytes in the backing file: cache them,
            // and the next `modify_cached` keeps them for it.
            read_old_page(c, m, index)?;
            continue;
        }
        if let Some(folio) = create_page(c, m, index, within, src)? {
            write_end(c, m, folio, end, lsn, *reserved);
            return Ok(());
        }
        // Raced with another insertion: look again.
    }
}

/// Writes `src` at `within` into page `index` if it is cached, with the protocol of the module
/// docs (in place under a frozen refcount, else a replacement), and returns the folio that
/// now holds the page, locked; `None` if the page is not cached. The caller ends the write
/// (`write_end`) or just unlocks (the truncation's zeroed tail, which dirties nothing).
///
/// A write that dirties the page passes the pages of dirtiness it has reserved (`room`): a
/// clean large folio needs all its pages reserved before it changes, so that the dirty limit
/// holds; they are reserved here (throttled with the folio unlocked, if need be) and `room`
/// says how many are reserved when it returns.
pub(super) fn modify_cached<'a>(
    c: &'a CacheInner,
    m: &'a Inode,
    index: u64,
    within: usize,
    src: &[u8],
    mut room: Option<&mut u64>,
) -> Result<Option<FolioLocked<'a>>, CacheError> {
    // The change's place in the folio holding the page (a large folio holds pages before
    // it).
    let at = |f: &FolioLocked<'_>| (((index - f.index()) as usize) << PAGE_SHIFT) + within;
    let mut drained = 0;
    loop {
        let Some(folio) = lookup_stable_folio(c, m, index)? else {
            return Ok(None);
        };
        if let Some(room) = room.as_deref_mut() {
            let nr = folio.nr_pages() as u64;
            if *room < nr && !folio.test_flag(crate::mm::folio::flags::PG_DIRTY) {
                let more = nr - *room;
                if !c.dirty.try_reserve(more) {
                    // Throttled with the folio unlocked (writeback may need its lock), for
                    // the whole folio: what this write holds is given back first, so that
                    // the wait needs only room others can leave.
                    drop(folio);
                    c.dirty.unreserve(*room);
                    balance_dirty_pages(c, m, nr, || c.dirty_inodes());
                    *room = nr;
                    continue;
                }
                *room = nr;
            }
        }
        // The page's bytes before the change, for the file's live snapshots: their mapping's
        // reference makes the freeze below fail, so the change goes into a copy.
        cow::capture(c, &m.snapshots, &m.path, &folio, false)?;
        let pos = at(&folio);
        let expected = folio.nr_pages() as u32 + 1;
        // SAFETY: the folio is in our index (checked under its lock: the page cache holds
        // one reference per page) and we hold one: `expected` is exactly the references we
        // know of.
        match unsafe { folio.freeze(expected) } {
            Ok(frozen) => {
                frozen.write_frozen(pos, src);
                c.counters.inc(Event::WritesInPlace);
                // SAFETY: the same references exist again.
                return Ok(Some(unsafe { frozen.unfreeze_locked(expected) }));
            }
            Err(folio) if c.may_drain_for_freeze(&folio, drained) => {
                // A per-CPU LRU batch may hold the other reference: drain, try again.
                drop(folio);
                c.drain_for_freeze(&mut drained);
            }
            Err(folio) => {
                // Someone holds it: write a copy (of the whole folio) and replace it.
                // Allocate unlocked (reclaim may need this folio's neighbours' locks), then
                // look again.
                let order = folio.order();
                drop(folio);
                let new = c
                    .alloc_folio(order)
                    .map_err(|_| c.out_of_memory(1 << order))?;
                let Some(old) = lookup_stable_folio(c, m, index)? else {
                    return Ok(None);
                };
                if old.order() == order {
                    let pos = at(&old);
                    return Ok(Some(replace_page(c, m, old, pos, src, new)));
                }
                // Split meanwhile (a snapshot was taken): start again.
            }
        }
    }
}

/// [`modify_cached`] without waiting: writes `src` in place into page `index` if it is
/// cached in a folio of its own, uptodate, unlocked, not under writeback and held by nobody
/// else; returns it locked, or `None` (nothing written).
fn modify_cached_nowait<'a>(
    c: &'a CacheInner,
    m: &'a Inode,
    index: u64,
    within: usize,
    src: &[u8],
) -> Option<FolioLocked<'a>> {
    let folio = m.mapping.pages.lookup(index)?;
    if folio.nr_pages() > 1 {
        return None;
    }
    let folio = folio.try_lock().ok()?;
    if folio.mapping() != m.id
        || folio.index() != index
        || !folio.is_uptodate()
        || folio.test_flag(crate::mm::folio::flags::PG_WRITEBACK)
        // Keeping the old page for a snapshot allocates a copy.
        || !cow::settled(&m.snapshots, &folio)
    {
        return None;
    }
    // SAFETY: as in `modify_cached`: the folio is in our index (checked under its lock: one
    // reference for the page cache, order 0) and we hold one.
    match unsafe { folio.freeze(2) } {
        Ok(frozen) => {
            frozen.write_frozen(within, src);
            c.counters.inc(Event::WritesInPlace);
            // SAFETY: the same two references exist again.
            Some(unsafe { frozen.unfreeze_locked(2) })
        }
        Err(_) => None,
    }
}

/// `write_begin`'s lookup: the folio caching page `index`, locked, still this file's,
/// uptodate and not under writeback (`folio_wait_stable`); `None` if the page is not cached.
/// The folio may be large (a write goes into it whole), unless a live snapshot still needs
/// the bytes of one of its pages: snapshots keep pages, so it is split first
/// ([`cow::must_split`]; behind a release point it is not).
pub(super) fn lookup_stable_folio<'a>(
    c: &CacheInner,
    m: &'a Inode,
    index: u64,
) -> Result<Option<FolioLocked<'a>>, CacheError> {
    lookup_stable_inner(c, m, index, false)
}

/// [`lookup_stable_folio`] for a change made one page at a time (a snapshot's capture, a page
/// latch, a truncation's partial page): a large folio holding page `index` is split first,
/// so the page returned is in a folio of its own.
pub(super) fn lookup_stable<'a>(
    c: &CacheInner,
    m: &'a Inode,
    index: u64,
) -> Result<Option<FolioLocked<'a>>, CacheError> {
    lookup_stable_inner(c, m, index, true)
}

fn lookup_stable_inner<'a>(
    c: &CacheInner,
    m: &'a Inode,
    index: u64,
    split: bool,
) -> Result<Option<FolioLocked<'a>>, CacheError> {
    loop {
        let Some(folio) = m.mapping.pages.lookup(index) else {
            return Ok(None);
        };
        if folio.nr_pages() > 1 && split {
            drop(folio);
            split_folio_at(c, m, index)?;
            continue;
        }
        let folio = folio.lock();
        if folio.mapping() == m.id
            && folio.is_uptodate()
            && folio.index() <= index
            && index < folio.index() + folio.nr_pages() as u64
        {
            if folio.nr_pages() > 1
                && !cow::settled(&m.snapshots, &folio)
                && cow::must_split(&m.snapshots, &folio)
            {
                drop(folio);
                split_folio_at(c, m, index)?;
                continue;
            }
            writeback::wait_stable(&folio);
            return Ok(Some(folio));
        }
        // Truncated, replaced, or a read into it failed and it was removed: look again.
    }
}

/// The replacement path of [`modify_cached`]: copies the locked page `old` into `new` with
/// `src` written over it at `within` and puts `new` in its index slot
/// (`replace_page_cache_folio`); the page's dirtiness moves with it. Returns `new`, locked.
fn replace_page<'a>(
    c: &'a CacheInner,
    m: &'a Inode,
    old: FolioLocked<'a>,
    within: usize,
    src: &[u8],
    new: FolioRef<'a>,
) -> FolioLocked<'a> {
    let mut new = new.lock_new();
    debug_assert_eq!(old.order(), new.order());
    {
        let bytes = old.data().expect("uptodate");
        let dst = new.data_mut().expect("a fresh folio is not uptodate");
        dst.copy_from_slice(bytes);
        dst[within..within + src.len()].copy_from_slice(src);
    }
    new.mark_uptodate();
    swap_in(m, &old, &new);
    c.folio_added(&new, None);
    drop(old);
    c.counters.inc(Event::WritesReplaced);
    new
}

/// `write_begin` for a page not in the cache: a new folio holding the page's bytes with `src`
/// written over them, inserted locked. The page is read from the backing first unless the
/// write covers it whole or it lies past the end of the data. `None`: another thread inserted
/// the page meanwhile.
pub(super) fn create_page<'a>(
    c: &'a CacheInner,
    m: &'a Inode,
    index: u64,
    within: usize,
    src: &[u8],
) -> Result<Option<FolioLocked<'a>>, CacheError> {
    let folio = c.alloc_folio(0).map_err(|_| c.out_of_memory(1))?;
    let mut folio = folio.lock_new();
    let start = index << PAGE_SHIFT;
    {
        let data = folio.data_mut().expect("a fresh folio is not uptodate");
        let covered = within == 0 && src.len() == PAGE_SIZE;
        // Bytes of this page the file holds: below `i_size`, and in the backing only below
        // what it is known to hold (past that, up to `i_size`, is a hole: zeros).
        let backing_size = m.size().min(m.mapping.disk_size.load(Ordering::Relaxed));
        if covered {
            // Every byte comes from `src` below: zeroing first would only double the stores.
        } else if backing_size <= start {
            data.fill(0);
        } else {
            c.counters.inc(Event::IoReads);
            let r = crate::io::read_run(
                &*m.mapping.backing,
                &mut [&mut data[..]],
                start,
                backing_size,
            );
            if let Err(e) = r {
                c.counters.inc(Event::IoErrors);
                return Err(m.fill_error(start, e));
            }
        }
        data[within..within + src.len()].copy_from_slice(src);
    }
    Ok(insert_new(c, m, folio, index))
}

/// Marks the new folio `folio`, filled, uptodate and inserts it at page `index`, still
/// locked (`filemap_add_folio`); `None` if a page of its range was cached meanwhile.
fn insert_new<'a>(
    c: &'a CacheInner,
    m: &'a Inode,
    mut folio: FolioLocked<'a>,
    index: u64,
) -> Option<FolioLocked<'a>> {
    folio.mark_uptodate();
    match m.mapping.pages.add_folio_shadow(&folio, index) {
        Ok(shadow) => {
            c.folio_added(&folio, shadow);
            Some(folio)
        }
        Err(AddError::Exists { .. }) => None,
        Err(e) => unreachable!("inserting a fresh aligned folio inside the file: {e:?}"),
    }
}

/// The order of a new folio for a write of `left` bytes from byte `within` of page `index`
/// (`fgf_set_order` in `generic_perform_write`): the largest run of pages the write covers
/// whole, aligned to its size, within the file's largest folio order, none of them cached
/// (a page already cached is written where it is); 0 for a page alone. Large folios are made
/// only when no live snapshot could need the pages' old bytes (a snapshot keeps pages).
fn new_folio_order(c: &CacheInner, m: &Inode, index: u64, within: usize, left: u64) -> u32 {
    if within != 0 || left < 2 * PAGE_SIZE as u64 || cow::any(&m.snapshots) {
        return 0;
    }
    let whole = (left >> PAGE_SHIFT).ilog2();
    // At most an eighth of the dirty limit, so that the throttle's steps stay small beside it.
    let limit = (c.dirty.limit() / 8).max(1).ilog2();
    let mut order = m
        .mapping
        .max_folio_order()
        .min(whole)
        .min(index.trailing_zeros())
        .min(limit);
    // The largest order whose pages are all uncached (a look at each slot, no reference).
    while order > 0 {
        if (index..index + (1 << order)).all(|i| !m.mapping.pages.contains(i)) {
            break;
        }
        order -= 1;
    }
    order
}

/// A new folio of `2^order` pages at page `index` holding `src` (all of its bytes),
/// inserted locked; `None` if no folio of that size is free or a page of the range was cached
/// meanwhile (the caller writes page by page).
fn create_folio<'a>(
    c: &'a CacheInner,
    m: &'a Inode,
    index: u64,
    order: u32,
    src: &[u8],
) -> Option<FolioLocked<'a>> {
    let mut folio = c.alloc_folio(order).ok()?.lock_new();
    folio
        .data_mut()
        .expect("a fresh folio is not uptodate")
        .copy_from_slice(src);
    insert_new(c, m, folio, index)
}

/// `write_end` (`generic_write_end`): marks the folio dirty (with `reserved` pages of
/// dirtiness reserved: [`writeback::mark_dirty_reserved`]), publishes a grown `i_size` while
/// the folio is still locked, unlocks.
pub(super) fn write_end(
    c: &CacheInner,
    m: &Inode,
    folio: FolioLocked<'_>,
    end: u64,
    lsn: u64,
    reserved: u64,
) {
    if folio.test_flag(crate::mm::folio::flags::PG_DIRTY) {
        // A write to a dirty page (or a replacement that inherited one): its tags and counts
        // are in place, and the reservation goes back (below).
        c.counters.inc(Event::Redirtied);
    }
    // The write-ahead rule (`cache/wal.rs`): the change's log number is noted under the folio
    // lock that covered the change, so the writeback that takes the page next (under the
    // same lock) sees both.
    writeback::mark_dirty_reserved(&folio, &m.mapping.wb, &c.dirty, lsn, reserved);
    // Every live snapshot keeps this page's old bytes now (`cache/snapshot.rs`).
    cow::stamp(&m.snapshots, &folio);
    if end > m.mapping.size.load(Ordering::Relaxed) {
        // ORDERING: Release; pairs with `Inode::size`'s Acquire: the page's bytes (frozen
        // store + unfreeze, replacement or insertion) are visible before the size.
        m.mapping.size.store(end, Ordering::Release);
    }
    drop(folio);
}
impl CachedFile {
    /// Takes the file's `i_rwsem` once no page of `first..=last` is latched by a
    /// [`FolioMut`] of another handle and thread (waiting for those with `i_rwsem`
    /// released); a page latched through this handle, or by a guard this thread made, is an
    /// error, since the caller would wait for itself.
    pub(super) fn lock_for_write<'m>(
        &self,
        m: &'m Inode,
        what: &str,
        pages: impl Fn(&Inode) -> Option<(u64, u64)>,
    ) -> Result<crate::mm::sync::MutexGuard<'m, ()>, CacheError> {
        loop {
            let w = m.i_rwsem.lock();
            let Some((first, last)) = pages(m) else {
                return Ok(w);
            };
            match m.latches.find(first, last, self.id) {
                None => return Ok(w),
                Some((index, true)) => {
                    return Err(m.latched_by_me(index, what));
                }
                Some((index, _)) => {
                    drop(w);
                    m.latches.wait_released(index);
                }
            }
        }
    }
}

/// The pages a write of `len` bytes at `pos` touches, if any.
fn write_pages(pos: u64, len: usize) -> Option<(u64, u64)> {
    let end = pos.checked_add(len as u64)?;
    (len > 0).then(|| (pos >> PAGE_SHIFT, (end - 1) >> PAGE_SHIFT))
}

/// Puts `new` in the index in place of the cached page `old` (both locked), moving the
/// page's dirtiness to it; the page's tags are its index's and stay.
pub(super) fn swap_in(m: &Inode, old: &FolioLocked<'_>, new: &FolioLocked<'_>) {
    use crate::mm::folio::flags::PG_DIRTY;
    if old.test_clear_flag(PG_DIRTY) {
        new.set_flag(PG_DIRTY);
    }
    let replaced = m.mapping.pages.replace_folio(old, new);
    assert!(replaced, "a locked folio of this index can be replaced");
}

/// Reads page `index` of `m` from the backing into the cache, clean, if it is not cached
/// (another thread may have cached it meanwhile: fine): [`create_page`] with nothing
/// written over the bytes. The caller holds `i_rwsem`, so the size cannot shrink under the
/// read.
pub(super) fn read_old_page(c: &CacheInner, m: &Inode, index: u64) -> Result<(), CacheError> {
    // `None`: raced with another insertion, which cached the same bytes.
    drop(create_page(c, m, index, 0, &[])?);
    c.counters.inc(Event::SnapshotCaptureReads);
    Ok(())
}
