//! The write side of a cached file: `generic_perform_write` with `write_begin` / `write_end`
//! (`mm/filemap.c`), `truncate_setsize` + `truncate_pagecache` (`mm/truncate.c`), and the
//! syncs (`file_write_and_wait_range`, `vfs_fsync_range`, `sync_file_range`), over the
//! writeback layer ([`crate::mm::writeback`]).
//!
//! # A write
//!
//! ```text
//! write_at(buf, pos)            i_rwsem held (writes to one file are serialised, as in Linux)
//!   for each page the range touches:
//!     balance_dirty_pages       reserve the page's dirtiness under the dirty limit; if over
//!                               it, write dirty folios back first (this file's, then others')
//!     write_begin               the page's folio, locked: found, or created (not read if the
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
//! - **Replaced.** Someone holds a reference (a pinned guard, a concurrent reader, the LRU's
//!   per-CPU batch): the writer allocates a new folio, copies the old bytes and the new ones
//!   into it, and puts it in the old one's index slot under one index-lock hold
//!   ([`Index::replace_folio`](crate::mm::index::Index::replace_folio),
//!   `replace_page_cache_folio`). Holders of the old folio keep reading the old bytes, a
//!   consistent snapshot of the page, and the old folio is freed with their last reference.
//!   The dirty state moves with the page: the index's DIRTY and TOWRITE tags are keyed by
//!   page, so a sync that tagged the page before the replacement writes the new folio.
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
//! # Truncation
//!
//! `set_len` to a smaller size publishes the size, zeroes the cached tail of the page that
//! straddles it, cancels the dirtiness of the pages past it after waiting for their
//! writeback, removes them, and only then truncates the backing file: a `pwritev` of a
//! removed page that landed after the `ftruncate` would grow the file again with stale bytes.

use std::io;
use std::ops::Range;

use super::file::{CachedFile, Mapping};
use super::stats::Event;
use super::{CacheError, CacheInner};
use crate::io::Backing;
use crate::mm::folio::{FolioLocked, FolioRef, PAGE_SHIFT, PAGE_SIZE};
use crate::mm::index::AddError;
use crate::mm::sync::{Arc, AtomicUsize, Ordering};
use crate::mm::writeback::{self, SyncMode, WbOutcome};

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
        let m = self.writable_mapping()?;
        let append = self.append;
        let w = self.lock_for_write(&m, "write_at", |m| {
            let pos = if append { m.size() } else { offset };
            write_pages(pos, buf.len())
        })?;
        let pos = if self.append { m.size() } else { offset };
        let r = self.perform_write(&m, buf, pos);
        // The eviction listener runs with no lock held (`cache/budget.rs`).
        drop(w);
        self.cache.deliver();
        r
    }

    /// Writes all of `buf` at `offset` ([`CachedFile::write_at`] until done), or fails.
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), CacheError> {
        let mut done = 0;
        while done < buf.len() {
            done += self.write_at(&buf[done..], offset + done as u64)?;
        }
        Ok(())
    }

    /// Appends `buf` at the end of the file, atomically with respect to other writers of the
    /// file (`O_APPEND`), and returns the offset it was written at: a log's record address.
    pub fn append(&self, buf: &[u8]) -> Result<u64, CacheError> {
        let m = self.writable_mapping()?;
        let _w = self.lock_for_write(&m, "append", |m| write_pages(m.size(), buf.len()))?;
        let pos = m.size();
        let n = self.perform_write(&m, buf, pos)?;
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

    /// `ftruncate(2)` through the cache (`truncate_setsize`): shrinking drops the cached pages
    /// past the new end (dirty ones too: their data is cut) and zeroes the tail of the page
    /// that straddles it; growing makes the new bytes read as zeros. The backing file is
    /// resized at once.
    ///
    /// What concurrent readers see: the file before the call or after it, never bytes it cut
    /// (a read that misses while a shrink is under way waits for the backing file to be cut,
    /// as the kernel's fills wait on `invalidate_lock`; cached reads never wait). Once a sync
    /// returns after this call, the new size is on disk too (the backing's `fdatasync` covers
    /// a size change). A size past the file system's largest file size or the process's
    /// `RLIMIT_FSIZE` fails with [`CacheError::FileTooLarge`]; one past `off_t`'s range
    /// with [`CacheError::InvalidArgument`].
    pub fn set_len(&self, size: u64) -> Result<(), CacheError> {
        let m = self.writable_mapping()?;
        // A shrink cuts or zeroes the pages from the one holding the new end: none may be
        // latched.
        let _w = self.lock_for_write(&m, "set_len", |m| {
            (size < m.size()).then_some((size >> PAGE_SHIFT, u64::MAX))
        })?;
        let writer = m.writer_backing()?;
        let old = m.size();
        let c = &self.cache;
        if size > old {
            // `inode_newsize_ok`: the file system's and the process's limits, before anything.
            c.check_size_limit(&m, size)?;
        }
        // `filemap_invalidate_lock`, held until the backing is cut: a fill that read the
        // backing between the size's publication below and the cut could cache bytes being
        // cut, which a later grow would expose (and writeback save).
        let invalidate = (size < old).then(|| m.mapping.invalidate_lock.write());
        if size < old {
            // ORDERING: Release; pairs with `Mapping::size`'s Acquire (module docs).
            m.mapping.size.store(size, Ordering::Release);
            if size % PAGE_SIZE as u64 != 0 {
                let tail = (size % PAGE_SIZE as u64) as usize;
                zero_cached_tail(c, &m, size >> PAGE_SHIFT, tail)?;
            }
            let cut = size.div_ceil(PAGE_SIZE as u64);
            // A large folio across the cut is split, so its pages below it stay cached.
            super::large::split_across(c, &m, cut)?;
            for index in m.mapping.wb.unwritten_from(cut) {
                if let Some(f) = m.mapping.pages.lookup(index) {
                    let f = f.lock();
                    if f.mapping() == m.id {
                        writeback::wait_stable(&f);
                        writeback::cancel_dirty(&f, &m.mapping.wb, &c.dirty);
                    }
                }
            }
            let out = m.mapping.pages.truncate(cut, u64::MAX);
            c.counters.add(Event::Invalidated, out.pages_freed);
            let old_pages = old.div_ceil(PAGE_SIZE as u64);
            // Pinned folios were detached: they left the cache too.
            c.note_eviction(
                &m,
                cut..old_pages.max(cut),
                out.pages_freed + out.busy,
                super::EvictionReason::Truncate,
            );
        }
        // ORDERING: SeqCst; revalidation's loads around its `fstat` pair with it.
        m.mapping.wb_seq.fetch_add(1, Ordering::SeqCst);
        writer.set_len(size).map_err(|e| m.write_error(size, e))?;
        m.mapping.disk_size.store(size, Ordering::Relaxed);
        drop(invalidate);
        if size > old {
            // ORDERING: Release, as above.
            m.mapping.size.store(size, Ordering::Release);
        }
        // The eviction listener runs with no lock held (`cache/budget.rs`).
        drop(_w);
        c.deliver();
        Ok(())
    }

    /// `fdatasync(2)`: writes every page of the file that is dirty when the call starts,
    /// waits for writes already in flight, and asks the backing to make the data durable
    /// (`fdatasync`). Returns a writeback error recorded since this handle last looked: from
    /// this sync, an earlier background writeback, or another handle's sync. Each handle
    /// hears of each error once; a handle opened later does not, unless no handle has been
    /// told of it yet.
    ///
    /// After an error, assume every byte written since the last successful sync is lost and
    /// write it again ([`Config::writeback_errors`](super::Config::writeback_errors) says
    /// whether the cache keeps failed pages dirty to retry them). Bytes a failed writeback
    /// did get into the file before the error (a run cut short at a size limit or a full
    /// disk) are read from the file again once their pages leave the cache; the pages it
    /// did not write read as the file holds them (a hole reads as zeros).
    pub fn sync_data(&self) -> Result<(), CacheError> {
        self.sync(0..u64::MAX, true)
    }

    /// `fsync(2)`: [`CachedFile::sync_data`], with the backing's `fsync` (metadata such as
    /// times too) instead of `fdatasync`.
    pub fn sync_all(&self) -> Result<(), CacheError> {
        self.sync(0..u64::MAX, false)
    }

    /// `sync_file_range` with wait, followed by `fdatasync` (what `vfs_fsync_range` does for
    /// a range): writes the dirty pages overlapping the byte range `range`, waits for them,
    /// syncs the backing and reports errors as [`CachedFile::sync_data`] does.
    pub fn sync_range(&self, range: Range<u64>) -> Result<(), CacheError> {
        super::file::check_range(&range)?;
        if range.is_empty() {
            return self.report_wb_err(&self.mapping());
        }
        self.sync(range, true)
    }

    /// Dirty pages of this file now (written through the cache, not yet written back).
    pub fn dirty_pages(&self) -> u64 {
        self.mapping().mapping.wb.nr_dirty()
    }

    /// Pages of this file being written back now.
    pub fn writeback_pages(&self) -> u64 {
        self.mapping().mapping.wb.nr_writeback()
    }

    /// The mapping, if this handle may write.
    fn writable_mapping(&self) -> Result<Arc<Mapping>, CacheError> {
        let m = self.mapping();
        if !self.writable {
            return Err(CacheError::NotWritable {
                path: m.path.clone(),
            });
        }
        Ok(m)
    }

    /// `generic_perform_write` from `pos`, under `i_rwsem`.
    fn perform_write(&self, m: &Mapping, buf: &[u8], pos: u64) -> Result<usize, CacheError> {
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
            let n = (PAGE_SIZE - within).min((end - at) as usize);
            let src = &buf[(at - pos) as usize..][..n];
            balance_dirty_pages(c, m);
            match write_page(c, m, index, within, src) {
                Ok(()) => at += n as u64,
                Err(e) => {
                    c.dirty.unreserve(1);
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

    /// `vfs_fsync_range` over the byte range `range`: write and wait, sync the backing,
    /// report.
    fn sync(&self, range: Range<u64>, datasync: bool) -> Result<(), CacheError> {
        let m = self.mapping();
        crate::trace::span!("syncs", path = %m.path.display(), datasync);
        let c = &self.cache;
        c.counters.inc(Event::Syncs);
        let first = range.start >> PAGE_SHIFT;
        let last = (range.end - 1) >> PAGE_SHIFT;
        writeback_mapping(c, &m, first, last, SyncMode::All);
        writeback::wait_writeback_range(&m.mapping, first, last);
        let writer = m.mapping.writer.lock().clone();
        if let Some(w) = writer {
            let r = if datasync {
                w.sync_data()
            } else {
                w.sync_all()
            };
            if let Err(e) = r {
                c.counters.inc(Event::WritebackErrors);
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                m.mapping.wb.err.set(errno);
                c.sb_err.set(errno, &m.path);
            }
        }
        self.report_wb_err(&m)
    }

    /// `file_check_and_advance_wb_err`: the error recorded since this handle's sample, once.
    fn report_wb_err(&self, m: &Mapping) -> Result<(), CacheError> {
        let mut since = self.wb_err.lock();
        match m.mapping.wb.err.check_and_advance(&mut since) {
            None => Ok(()),
            Some(errno) => Err(CacheError::Writeback {
                path: m.path.clone(),
                source: io::Error::from_raw_os_error(errno),
            }),
        }
    }
}

impl Mapping {
    /// The backing writeback writes to.
    fn writer_backing(&self) -> Result<Arc<dyn Backing>, CacheError> {
        self.mapping
            .writer()
            .ok_or_else(|| CacheError::NotWritable {
                path: self.path.clone(),
            })
    }

    fn write_error(&self, offset: u64, source: io::Error) -> CacheError {
        CacheError::Writeback {
            path: self.path.clone(),
            source: io::Error::new(source.kind(), format!("at byte {offset}: {source}")),
        }
    }
}

/// One writeback pass over the pages `first..=last` of `m` (the file's writer backing), with
/// its effects on the mapping: the backing's known size grows, and its attributes are ours.
pub(crate) fn writeback_mapping(
    c: &CacheInner,
    m: &Mapping,
    first: u64,
    last: u64,
    mode: SyncMode,
) -> WbOutcome {
    crate::trace::span!("writeback_pages", path = %m.path.display());
    let out = writeback::writepages(c, &m.mapping, first, last, mode);
    if out.writes > 0 {
        c.counters.add(Event::WritebackPages, out.pages);
        c.counters.add(Event::WritebackWrites, out.writes);
        c.counters.add(Event::WritebackBytes, out.bytes);
    }
    if let Some((at, e)) = &out.error {
        if e.raw_os_error() == Some(libc::EFBIG) {
            c.note_efbig(m, *at);
        }
        c.counters.inc(Event::WritebackErrors);
        c.sb_err.set(e.raw_os_error().unwrap_or(libc::EIO), &m.path);
    }
    out
}

impl super::FolioCache {
    /// `syncfs(2)`: writes back every file's dirty pages, waits for them, and syncs every
    /// file the cache may write (`fsync`, `sync_filesystem`); then returns the first
    /// writeback or sync error recorded for any file since the previous `sync_all` (or since
    /// the cache was made): of this call, of an earlier sync, or of background writeback.
    /// Each error is reported once to `sync_all`, whose callers share one sample (as the
    /// kernel's `syncfs` reports `sb->s_wb_err` once per file description); the files'
    /// handles still hear of it at their own next sync.
    ///
    /// Dropping the cache writes dirty pages back too, but no one is left to hear of an
    /// error then: call this first to know that everything written reached its file.
    pub fn sync_all(&self) -> Result<(), CacheError> {
        let c = &*self.inner;
        c.counters.inc(Event::Syncs);
        for m in c.live_mappings() {
            let Some(writer) = m.mapping.writer.lock().clone() else {
                continue;
            };
            writeback_mapping(c, &m, 0, u64::MAX, SyncMode::All);
            writeback::wait_writeback_range(&m.mapping, 0, u64::MAX);
            if let Err(e) = writer.sync_all() {
                c.counters.inc(Event::WritebackErrors);
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                m.mapping.wb.err.set(errno);
                c.sb_err.set(errno, &m.path);
            }
        }
        match c.sb_err.check_and_advance() {
            None => Ok(()),
            Some((errno, path)) => Err(CacheError::Writeback {
                path,
                source: io::Error::from_raw_os_error(errno),
            }),
        }
    }
}

/// `balance_dirty_pages`, before a page is dirtied: reserves one page of dirtiness under the
/// dirty limit (given back by the caller if nothing was dirtied). At the limit, writes dirty
/// folios back in this thread, this file's first, then other files', until the count is
/// under the background threshold, and tries again. A file another pass is writing back
/// already is left to it; if every dirty file is, the writer sleeps until those passes have
/// made room (the flusher's I/O then overlaps this writer's copies).
fn balance_dirty_pages(c: &CacheInner, m: &Mapping) {
    let acct = &c.dirty;
    if acct.try_reserve(1) {
        return;
    }
    c.counters.inc(Event::DirtyThrottled);
    loop {
        let mut wrote = writeback_mapping(c, m, 0, u64::MAX, SyncMode::Background).pages;
        for other in c.live_mappings() {
            if acct.dirty() < acct.background() {
                break;
            }
            if other.id != m.id && other.mapping.wb.nr_dirty() > 0 {
                wrote += writeback_mapping(c, &other, 0, u64::MAX, SyncMode::Background).pages;
            }
        }
        if acct.try_reserve(1) {
            return;
        }
        if wrote == 0 {
            // Every dirty file is being written back by another pass (or its pages are under
            // writeback already): sleep until those passes clean some (the timeout bounds a
            // missed wake-up and lets this thread look again at files that became free).
            acct.wait_for_room(THROTTLE_PAUSE);
        } else {
            // Other writers took the room first, or their pages are under writeback now.
            std::thread::yield_now();
        }
        if acct.try_reserve(1) {
            return;
        }
    }
}

/// The longest a throttled writer sleeps before it looks for dirty files to write back again.
const THROTTLE_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

/// `write_begin` + copy + `write_end` for the part `src` of page `index` starting `within`
/// bytes into it.
fn write_page(
    c: &CacheInner,
    m: &Mapping,
    index: u64,
    within: usize,
    src: &[u8],
) -> Result<(), CacheError> {
    let end = (index << PAGE_SHIFT) + (within + src.len()) as u64;
    loop {
        if let Some(folio) = modify_cached(c, m, index, within, src)? {
            write_end(c, m, folio, end);
            return Ok(());
        }
        if let Some(folio) = create_page(c, m, index, within, src)? {
            write_end(c, m, folio, end);
            return Ok(());
        }
        // Raced with another insertion: look again.
    }
}

/// Writes `src` at `within` into page `index` if it is cached, with the protocol of the module
/// docs (in place under a frozen refcount, else a replacement), and returns the folio that
/// now holds the page, locked; `None` if the page is not cached. The caller ends the write
/// (`write_end`) or just unlocks (the truncation's zeroed tail, which dirties nothing).
fn modify_cached<'a>(
    c: &'a CacheInner,
    m: &'a Mapping,
    index: u64,
    within: usize,
    src: &[u8],
) -> Result<Option<FolioLocked<'a>>, CacheError> {
    let Some(folio) = lookup_stable(c, m, index)? else {
        return Ok(None);
    };
    // SAFETY: the folio is in our index (checked under its lock: one reference for the page
    // cache, order 0) and we hold one: 2 is exactly the references we know of.
    match unsafe { folio.freeze(2) } {
        Ok(frozen) => {
            frozen.write_frozen(within, src);
            c.counters.inc(Event::WritesInPlace);
            // SAFETY: the same two references exist again.
            Ok(Some(unsafe { frozen.unfreeze_locked(2) }))
        }
        Err(folio) => {
            // Someone holds it: write a copy and replace it. Allocate unlocked (reclaim may
            // need this folio's neighbours' locks), then look again.
            drop(folio);
            let new = c.alloc_folio(0).map_err(|_| c.out_of_memory(1))?;
            let Some(old) = lookup_stable(c, m, index)? else {
                return Ok(None);
            };
            Ok(Some(replace_page(c, m, old, within, src, new)))
        }
    }
}

/// `write_begin`'s lookup: page `index`, locked, still this file's, uptodate and not under
/// writeback (`folio_wait_stable`), in a folio of its own (a large folio holding it is split
/// first); `None` if it is not cached.
fn lookup_stable<'a>(
    c: &CacheInner,
    m: &'a Mapping,
    index: u64,
) -> Result<Option<FolioLocked<'a>>, CacheError> {
    loop {
        let Some(folio) = m.mapping.pages.lookup(index) else {
            return Ok(None);
        };
        if folio.nr_pages() > 1 {
            drop(folio);
            super::large::split_folio_at(c, m, index)?;
            continue;
        }
        let folio = folio.lock();
        if folio.mapping() == m.id && folio.index() == index && folio.is_uptodate() {
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
    m: &'a Mapping,
    old: FolioLocked<'a>,
    within: usize,
    src: &[u8],
    new: FolioRef<'a>,
) -> FolioLocked<'a> {
    let mut new = new
        .try_lock()
        .unwrap_or_else(|_| unreachable!("a freshly allocated folio is unlocked"));
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
fn create_page<'a>(
    c: &'a CacheInner,
    m: &'a Mapping,
    index: u64,
    within: usize,
    src: &[u8],
) -> Result<Option<FolioLocked<'a>>, CacheError> {
    let folio = c.alloc_folio(0).map_err(|_| c.out_of_memory(1))?;
    let mut folio = folio
        .try_lock()
        .unwrap_or_else(|_| unreachable!("a freshly allocated folio is unlocked"));
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
            let r =
                crate::io::read_run(&*m.mapping.backing, &mut [&mut data[..]], start, backing_size);
            if let Err(e) = r {
                c.counters.inc(Event::IoErrors);
                return Err(m.fill_error(start, e));
            }
        }
        data[within..within + src.len()].copy_from_slice(src);
    }
    folio.mark_uptodate();
    match m.mapping.pages.add_folio_shadow(&folio, index) {
        Ok(shadow) => {
            c.folio_added(&folio, shadow);
            Ok(Some(folio))
        }
        Err(AddError::Exists { .. }) => Ok(None),
        Err(e) => unreachable!("inserting a fresh order-0 folio: {e:?}"),
    }
}

/// `write_end` (`generic_write_end`): marks the folio dirty, publishes a grown `i_size`
/// while the folio is still locked, unlocks.
fn write_end(c: &CacheInner, m: &Mapping, folio: FolioLocked<'_>, end: u64) {
    if folio.test_flag(crate::mm::folio::flags::PG_DIRTY) {
        // A write to a dirty page (or a replacement that inherited one): its tags and counts
        // are in place, and the reservation goes back.
        c.dirty.unreserve(1);
        c.counters.inc(Event::Redirtied);
    } else {
        writeback::mark_dirty_reserved(&folio, &m.mapping.wb, &c.dirty);
    }
    if end > m.mapping.size.load(Ordering::Relaxed) {
        // ORDERING: Release; pairs with `Mapping::size`'s Acquire: the page's bytes (frozen
        // store + unfreeze, replacement or insertion) are visible before the size.
        m.mapping.size.store(end, Ordering::Release);
    }
    drop(folio);
}

/// Zeroes bytes `tail..` of page `index` if it is cached (the truncation's partial page),
/// with the write protocol; the page's dirtiness does not change (bytes past `i_size` are
/// never written back, and the file is cut by `ftruncate`).
fn zero_cached_tail(
    c: &CacheInner,
    m: &Mapping,
    index: u64,
    tail: usize,
) -> Result<(), CacheError> {
    let zeros = [0u8; PAGE_SIZE];
    drop(modify_cached(c, m, index, tail, &zeros[tail..])?);
    Ok(())
}

/// The pages of one file latched by [`FolioMut`] guards: a logical lock per page, kept apart
/// from the folio lock, owned by the guard (not by a thread: a guard may move to another
/// thread, as it is `Send`).
///
/// The kernel never returns to userspace with a folio locked, and its lock order puts folio
/// locks inside `i_rwsem`. A guard is held across calls of its owner's choosing, so it must
/// not hold a folio lock: its owner could then write another page of the file (and be
/// throttled into writing back the page it holds), sync the file, or wait for `i_rwsem` held
/// by a writer that waits for the guard's page. So a guard holds a reference and an entry
/// here instead. Entries are added under the file's `i_rwsem` ([`CachedFile::get_folio_mut`]),
/// and every writer looks here under `i_rwsem` before it writes a page. A page latched through
/// the same handle, or by a guard the calling thread made, is an error: whoever holds the
/// handle holds the guard its borrow ties to it, so the call would (or, for a guard since moved
/// to another thread, may) wait for itself. Any other latched page is waited for with
/// `i_rwsem` released. Writeback, syncs and reclaim ignore latches: the guard changes a
/// private copy, never the cached page.
pub(crate) struct Latches {
    /// Entries in `held`, read without the mutex on every write: zero almost always.
    nr: AtomicUsize,
    /// Who latched which page; a few entries at most.
    held: crate::mm::sync::Mutex<Vec<Latch>>,
    released: crate::mm::sync::Condvar,
}

impl Latches {
    pub(crate) fn new() -> Latches {
        Latches {
            nr: AtomicUsize::new(0),
            held: crate::mm::sync::Mutex::new(Vec::new()),
            released: crate::mm::sync::Condvar::new(),
        }
    }

    /// A latched page in `first..=last` (one the caller would wait for itself on first: made
    /// through `handle` or by the calling thread). The caller holds `i_rwsem`, under which
    /// latches are added, so the answer stays true until it lets go (one may be released
    /// meanwhile).
    fn find(&self, first: u64, last: u64, handle: u64) -> Option<(u64, bool)> {
        // ORDERING: Relaxed; entries are added under `i_rwsem`, which the caller holds, so
        // every entry added before is visible; a stale non-zero only costs the mutex.
        if self.nr.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let me = std::thread::current().id();
        let held = self.held.lock();
        let mut found = None;
        for l in held.iter() {
            if !(first..=last).contains(&l.index) {
                continue;
            }
            let mine = l.handle == handle || l.thread == me;
            if found.is_none() || mine {
                found = Some((l.index, mine));
            }
        }
        found
    }

    /// Whether any page of the file is latched (revalidation counts a latch as a write in
    /// progress). The caller holds `i_rwsem`.
    pub(crate) fn any(&self) -> bool {
        // ORDERING: Relaxed, as in `find`.
        self.nr.load(Ordering::Relaxed) != 0
    }

    /// Latches `index` for a guard made through `handle` by the calling thread; the caller
    /// holds `i_rwsem` and found it free.
    fn add(&self, index: u64, handle: u64) {
        let mut held = self.held.lock();
        held.push(Latch {
            index,
            handle,
            thread: std::thread::current().id(),
        });
        self.nr.store(held.len(), Ordering::Relaxed);
    }

    /// Releases `index` and wakes the writers waiting for it.
    fn remove(&self, index: u64) {
        let mut held = self.held.lock();
        if let Some(i) = held.iter().position(|l| l.index == index) {
            held.swap_remove(i);
        }
        self.nr.store(held.len(), Ordering::Relaxed);
        drop(held);
        self.released.notify_all();
    }

    /// Sleeps until `index` is not latched (the caller holds no `i_rwsem`).
    fn wait_released(&self, index: u64) {
        let held = self.held.lock();
        drop(
            self.released
                .wait_while(held, |h| h.iter().any(|l| l.index == index)),
        );
    }
}

/// One latched page: its index, the handle its guard borrows (`CachedFile::id`), and the
/// thread that made the guard.
struct Latch {
    index: u64,
    handle: u64,
    thread: std::thread::ThreadId,
}

impl CachedFile {
    /// Takes the file's `i_rwsem` once no page of `first..=last` is latched by a
    /// [`FolioMut`] of another handle and thread (waiting for those with `i_rwsem`
    /// released); a page latched through this handle, or by a guard this thread made, is an
    /// error, since the caller would wait for itself.
    fn lock_for_write<'m>(
        &self,
        m: &'m Mapping,
        what: &str,
        pages: impl Fn(&Mapping) -> Option<(u64, u64)>,
    ) -> Result<crate::mm::sync::MutexGuard<'m, ()>, CacheError> {
        loop {
            let w = m.i_rwsem.lock();
            let Some((first, last)) = pages(m) else {
                return Ok(w);
            };
            match m.latches.find(first, last, self.id) {
                None => return Ok(w),
                Some((index, true)) => {
                    return Err(latched_by_me(m, index, what));
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

/// The error for a call that would wait for a [`FolioMut`] its caller holds.
fn latched_by_me(m: &Mapping, index: u64, what: &str) -> CacheError {
    CacheError::InvalidArgument {
        what: format!(
            "{what} of {} would wait for page {index}, latched by a FolioMut of this handle or \
             made by this thread: write through the guard, or commit it first",
            m.path.display()
        ),
    }
}

/// A page of a file held for an update in place: a buffer manager's exclusive page latch,
/// from [`CachedFile::get_folio_mut`]. Dereferences to the file's bytes in the page,
/// writable; dropping the guard (or [`FolioMut::commit`]) publishes the changes at once and
/// marks the page dirty, [`FolioMut::discard`] drops them.
///
/// # Protocol
///
/// - The guard **latches** the page: other writers of the page ([`CachedFile::write_at`],
///   another guard, a [`CachedFile::set_len`] that would cut or zero it) wait until it is
///   committed or discarded. The latch is not the folio lock (none is held between calls, as
///   the kernel never returns to userspace with a page locked), so the guard's holder may
///   write other pages of the file, sync it, or be throttled at the dirty limit without
///   waiting for itself. The latch belongs to the guard, wherever it moves (it is `Send`):
///   writing the latched page, or latching it again, through the handle the guard borrows,
///   or from the thread that made the guard, is an error ([`CacheError::InvalidArgument`]),
///   not a hang. Through another handle, from another thread, the call waits for the
///   commit.
/// - The changes go to a private copy of the page, made when the guard is made, and replace
///   the page in the index when the guard commits (`replace_page_cache_folio`): readers never
///   see a half-updated page; they read the old bytes until the commit and the new ones after,
///   and a pinned guard of the old page keeps them. Writeback and syncs meanwhile write the
///   old bytes (the cached page never changes under a write in flight: stable pages), and the
///   commit waits for a write of the old page in flight before it replaces it.
/// - The page's dirtiness is reserved under the dirty limit when the guard commits (the
///   commit may write other dirty pages back first, as a write does); until then the guard
///   holds two pages of the pin limit (the page and its copy).
///
/// ```
/// use foliocache::{Config, FolioCache, OpenOptions};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let cache = FolioCache::new(Config::new(16 << 20))?;
/// let db = cache.open_with(dir.path().join("btree"), OpenOptions::new().write(true).create(true))?;
/// db.set_len(3 * 4096)?;                            // three zeroed pages
/// {
///     let mut page = db.get_folio_mut(1)?;          // latch page 1
///     page[0..4].copy_from_slice(b"node");          // update it in place
///     db.write_all_at(b"log", 2 * 4096)?;           // other pages stay writable meanwhile
/// }                                                 // committed: dirty, visible to all
/// let mut head = [0u8; 4];
/// db.read_exact_at(&mut head, 4096)?;
/// assert_eq!(&head, b"node");
/// db.sync_data()?;
/// # Ok(()) }
/// ```
pub struct FolioMut<'f> {
    file: &'f CachedFile,
    mapping: Arc<Mapping>,
    /// The page latched.
    index: u64,
    /// The cached page, unlocked, with a reference.
    old: std::ptr::NonNull<crate::mm::folio::Folio>,
    /// The private copy, locked, not uptodate, not in any index, with a reference.
    new: std::ptr::NonNull<crate::mm::folio::Folio>,
    /// The file's bytes in the page.
    valid: usize,
    done: bool,
}

// SAFETY: the guard owns two counted references (the copy's locked); folio headers are shared
// atomic state, the copy's bytes are reachable only through `&mut self`, and `CachedFile` is
// `Sync`.
unsafe impl Send for FolioMut<'_> {}
// SAFETY: `&FolioMut` gives only `&[u8]` of the private copy, which nothing else writes.
unsafe impl Sync for FolioMut<'_> {}

impl CachedFile {
    /// Latches page `index` of the file for an update in place ([`FolioMut`]): the page is
    /// read in if needed and copied for the update; the guard commits on drop. Waits while
    /// another thread's guard latches the page. `index` must be a page of the file (use
    /// [`CachedFile::set_len`] to grow it first).
    pub fn get_folio_mut(&self, index: u64) -> Result<FolioMut<'_>, CacheError> {
        let m = self.writable_mapping()?;
        let c = &self.cache;
        // The pin limit (`cache/budget.rs`): the guard holds the page and its copy. Charged
        // before `i_rwsem`, since it may wait for other pins to go.
        c.pin_charge(2)?;
        let latched = self.lock_for_write(&m, "get_folio_mut", |_| Some((index, index)));
        let latched = latched.and_then(|w| {
            if index >= m.nr_pages() {
                return Err(CacheError::InvalidArgument {
                    what: format!(
                        "page {index} is past the end of {} ({} pages of 4 KiB): grow it with set_len",
                        m.path.display(),
                        m.nr_pages()
                    ),
                });
            }
            let pages = self.latch(&m, index)?;
            // Under `i_rwsem`: no writer of the page is between its look at the latches and
            // its write.
            m.latches.add(index, self.id);
            drop(w);
            Ok(pages)
        });
        let (old, new) = match latched {
            Ok(p) => p,
            Err(e) => {
                c.pin_uncharge(2);
                return Err(e);
            }
        };
        let valid = m
            .size()
            .saturating_sub(index << PAGE_SHIFT)
            .min(PAGE_SIZE as u64) as usize;
        Ok(FolioMut {
            file: self,
            mapping: m,
            index,
            old,
            new,
            valid,
            done: false,
        })
    }

    /// The page (referenced, unlocked) and its private copy (locked), as raw pointers owned
    /// by the guard. The caller holds `i_rwsem`.
    #[allow(clippy::type_complexity)]
    fn latch(
        &self,
        m: &Mapping,
        index: u64,
    ) -> Result<
        (
            std::ptr::NonNull<crate::mm::folio::Folio>,
            std::ptr::NonNull<crate::mm::folio::Folio>,
        ),
        CacheError,
    > {
        let c = &self.cache;
        // Allocated before any folio lock is held: reclaim may need to lock other folios.
        let new = c.alloc_folio(0).map_err(|_| c.out_of_memory(1))?;
        let mut new = new
            .try_lock()
            .unwrap_or_else(|_| unreachable!("a freshly allocated folio is unlocked"));
        let old = loop {
            let (folio, _) = self.get_page(m, index, 1)?;
            if folio.nr_pages() > 1 {
                drop(folio);
                super::large::split_folio_at(c, m, index)?;
                continue;
            }
            let old = folio.lock();
            if old.mapping() == m.id && old.index() == index && old.is_uptodate() {
                break old;
            }
        };
        // Stable pages: the guard starts from a page no write is reading.
        writeback::wait_stable(&old);
        new.data_mut()
            .expect("a fresh folio is not uptodate")
            .copy_from_slice(old.data().expect("uptodate"));
        Ok((
            std::ptr::NonNull::from(old.unlock().into_raw()),
            std::ptr::NonNull::from(new.into_raw_locked()),
        ))
    }
}

impl FolioMut<'_> {
    /// The page index of the latched page.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Publishes the changes now (what dropping the guard does).
    pub fn commit(mut self) {
        self.finish(true);
    }

    /// Drops the changes: the page stays as it was.
    pub fn discard(mut self) {
        self.finish(false);
    }

    /// The page and the copy as handles again (once: `finish` consumes the guard's
    /// ownership).
    fn take(&mut self) -> (FolioRef<'_>, FolioLocked<'_>) {
        let arena = &self.file.cache.arena;
        // SAFETY: the guard owns one reference on each (the copy's locked), taken back
        // exactly once (`done` is set by the only caller).
        unsafe {
            (
                FolioRef::from_raw(arena, self.old.as_ref()),
                FolioLocked::from_raw_locked(arena, self.new.as_ref()),
            )
        }
    }

    fn finish(&mut self, commit: bool) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let c = self.file.cache.clone();
        let m = self.mapping.clone();
        let index = self.index;
        let (old, mut new) = self.take();
        if !commit {
            // The copy is freed with its last reference, never having been in an index.
            drop(new);
            drop(old);
            m.latches.remove(index);
            c.pin_uncharge(2);
            return;
        }
        // Reserve the page's dirtiness as a write does (no folio lock held: the pass this may
        // run writes the old page like any other).
        balance_dirty_pages(&c, &m);
        {
            // `i_rwsem`, as a write's: revalidation must not miss a page being dirtied.
            let _w = m.i_rwsem.lock();
            new.mark_uptodate();
            let old = old.lock();
            writeback::wait_stable(&old);
            publish_copy(&c, &m, index, old, &new);
            c.folio_added(&new, None);
            c.counters.inc(Event::WritesReplaced);
            write_end(&c, &m, new, 0);
        }
        m.latches.remove(index);
        c.pin_uncharge(2);
        c.wake_flusher();
    }
}

/// Puts `new` in the index in place of the cached page `old` (both locked), moving the
/// page's dirtiness to it; the page's tags are its index's and stay.
fn swap_in(m: &Mapping, old: &FolioLocked<'_>, new: &FolioLocked<'_>) {
    use crate::mm::folio::flags::PG_DIRTY;
    if old.test_clear_flag(PG_DIRTY) {
        new.set_flag(PG_DIRTY);
    }
    let replaced = m.mapping.pages.replace_folio(old, new);
    assert!(replaced, "a locked folio of this index can be replaced");
}

/// Puts the committed copy `new` in page `index`'s slot: in place of the latched page `old`
/// (locked), carrying its dirtiness, or, if `old` left the index meanwhile (nothing that
/// respects latches removes it; this is the fallback), in place of whatever is cached there
/// now, or into the empty slot. The caller holds `i_rwsem`.
fn publish_copy(
    c: &CacheInner,
    m: &Mapping,
    index: u64,
    old: FolioLocked<'_>,
    new: &FolioLocked<'_>,
) {
    let mut cur = Some(old);
    loop {
        if let Some(f) = cur.take() {
            if f.mapping() == m.id && f.index() == index && f.nr_pages() == 1 {
                swap_in(m, &f, new);
                return;
            }
        }
        if m.mapping.pages.add_folio(new, index).is_ok() {
            return;
        }
        // Something is cached there again (read back in): replace that.
        cur = lookup_stable(c, m, index).ok().flatten();
        if cur.is_none() {
            std::thread::yield_now();
        }
    }
}

impl std::ops::Deref for FolioMut<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the copy is locked by this guard, not uptodate, in no index: nothing but
        // the guard reaches its bytes; its frames live as long as the arena.
        unsafe {
            std::slice::from_raw_parts(
                self.file.cache.arena.frame_ptr(self.new.as_ref().pfn()),
                self.valid,
            )
        }
    }
}

impl std::ops::DerefMut for FolioMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this borrow unique.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.file.cache.arena.frame_ptr(self.new.as_ref().pfn()),
                self.valid,
            )
        }
    }
}

impl Drop for FolioMut<'_> {
    /// Commits.
    fn drop(&mut self) {
        self.finish(true);
    }
}

impl std::fmt::Debug for FolioMut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FolioMut")
            .field("path", &self.mapping.path)
            .field("index", &self.index())
            .finish()
    }
}
