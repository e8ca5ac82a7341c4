//! Syncs of a cached file and of the whole cache: `vfs_fsync_range`, `sync_file_range`,
//! `syncfs` (`fs/sync.c`), and the report of writeback errors to each handle once
//! (`file_check_and_advance_wb_err`).

use std::io;
use std::ops::Range;

use super::error::CacheError;
use super::file::CachedFile;
use super::inode::Inode;
use super::stats::Event;
use super::writeback::writeback_mapping;
use crate::mm::folio::PAGE_SHIFT;
use crate::mm::writeback::{self, SyncMode};

impl CachedFile {
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

    /// `vfs_fsync_range` over the byte range `range`: write and wait, sync the backing,
    /// report.
    fn sync(&self, range: Range<u64>, datasync: bool) -> Result<(), CacheError> {
        let m = self.mapping();
        crate::trace::span!("syncs", path = %m.path.display(), datasync);
        let c = &self.cache;
        c.counters.inc(Event::Syncs);
        let first = range.start >> PAGE_SHIFT;
        let last = (range.end - 1) >> PAGE_SHIFT;
        m.refuse_own_latch(first, last, "a sync")?;
        let out = writeback_mapping(c, &m, first, last, SyncMode::All);
        writeback::wait_writeback_range(&m.mapping, first, last);
        let writer = m.mapping.writer.lock().clone();
        if let Some(w) = writer {
            let r = if datasync {
                w.sync_data()
            } else {
                w.sync_all()
            };
            if let Err(e) = r {
                sync_failed(c, &m, &e);
            }
        }
        if let Some(source) = out.log_error {
            // Pages were held back, still dirty: this sync did not cover them. (A writeback
            // error is reported by the next sync.)
            return Err(CacheError::WriteAheadLog {
                path: m.path.clone(),
                source,
            });
        }
        self.report_wb_err(&m)
    }

    /// `file_check_and_advance_wb_err`: the error recorded since this handle's sample, once.
    fn report_wb_err(&self, m: &Inode) -> Result<(), CacheError> {
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

impl super::sb::FolioCache {
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
        let mut log_error = None;
        let files = c.live_mappings();
        for m in &files {
            m.refuse_own_latch(0, u64::MAX, "FolioCache::sync_all")?;
        }
        for m in files {
            let Some(writer) = m.mapping.writer.lock().clone() else {
                continue;
            };
            let out = writeback_mapping(c, &m, 0, u64::MAX, SyncMode::All);
            if let Some(e) = out.log_error {
                log_error.get_or_insert((m.path.clone(), e));
            }
            writeback::wait_writeback_range(&m.mapping, 0, u64::MAX);
            if let Err(e) = writer.sync_all() {
                sync_failed(c, &m, &e);
            }
        }
        if let Some((path, source)) = log_error {
            return Err(CacheError::WriteAheadLog { path, source });
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

/// The write-ahead rule's calls (`cache/wal.rs`).
impl super::sb::FolioCache {
    /// Gives the cache the engine's write-ahead log (or takes it away, with `None`): from
    /// now on, before writeback writes pages holding changes logged past the log's durable
    /// point ([`CachedFile::write_at_lsn`](crate::CachedFile::write_at_lsn),
    /// [`FolioMut::set_lsn`](crate::FolioMut::set_lsn)), it calls
    /// [`WriteAheadLog::flush_log`](super::wal::WriteAheadLog::flush_log) up to the highest of their numbers. Read the trait's
    /// docs on deadlocks first.
    ///
    /// Without a log, such pages are written only once the engine says its log is durable
    /// far enough ([`FolioCache::log_durable`](crate::FolioCache::log_durable)); until then
    /// the flusher and the dirty limit leave them dirty, and a sync of them fails with
    /// [`CacheError::WriteAheadLog`](crate::CacheError::WriteAheadLog).
    pub fn set_write_ahead_log(&self, log: Option<std::sync::Arc<dyn super::wal::WriteAheadLog>>) {
        self.inner.log.set(log);
    }

    /// Tells the cache that the engine's log is durable up to `lsn` (after the engine's own
    /// group commit synced it): writeback of pages with changes up to `lsn` needs no call
    /// to the log. Numbers only grow; a smaller one is ignored. Call it only once the log
    /// really is durable that far: the cache writes pages on the strength of it.
    pub fn log_durable(&self, lsn: u64) {
        self.inner.log.durable_to(lsn);
    }

    /// The highest log sequence number the cache knows the log to be durable up to.
    pub fn durable_lsn(&self) -> u64 {
        self.inner.log.durable()
    }

    /// A fuzzy checkpoint up to log sequence number `upto` (ARIES; InnoDB's
    /// `buf_flush_lists` up to a checkpoint age, PostgreSQL's `CheckPointBuffers`): writes
    /// back every dirty page of every file holding a change logged at or below `upto`
    /// ([`CachedFile::write_at_lsn`](crate::CachedFile::write_at_lsn)), flushing the log first
    /// as far as those pages need (the write-ahead rule), waits for writes already in flight,
    /// and syncs each file written. When it returns `Ok`, every change logged up to `upto` is
    /// in the files, durable: the engine may drop its log before `upto`. Writers go on
    /// meanwhile (a page they change during the checkpoint is written with its new bytes,
    /// after the log covers them); pages dirtied without a number are left to syncs.
    ///
    /// Errors: [`CacheError::WriteAheadLog`] if the log could not be flushed (those pages
    /// stay dirty), or the first writeback or sync error of a file
    /// ([`CacheError::Writeback`]; the file's handles hear of it at their next sync too).
    pub fn checkpoint(&self, upto: u64) -> Result<(), CacheError> {
        let c = &*self.inner;
        c.counters.inc(Event::Syncs);
        let mut first_err: Option<CacheError> = None;
        let files = c.live_mappings();
        for m in &files {
            m.refuse_own_latch(0, u64::MAX, "a checkpoint")?;
        }
        for m in files {
            let Some(writer) = m.mapping.writer.lock().clone() else {
                continue;
            };
            let out = writeback_mapping(c, &m, 0, u64::MAX, SyncMode::Checkpoint(upto));
            // Pages a background pass had already started writing are part of the point too.
            writeback::wait_writeback_range(&m.mapping, 0, u64::MAX);
            if let Some(source) = out.log_error {
                first_err.get_or_insert(CacheError::WriteAheadLog {
                    path: m.path.clone(),
                    source,
                });
            }
            if let Some((_, e)) = out.error {
                first_err.get_or_insert(CacheError::Writeback {
                    path: m.path.clone(),
                    source: e,
                });
            }
            if let Err(e) = writer.sync_data() {
                sync_failed(c, &m, &e);
                first_err.get_or_insert(CacheError::Writeback {
                    path: m.path.clone(),
                    source: e,
                });
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// A failed `fdatasync`/`fsync` of a file's backing: counted, and recorded in the file's
/// error sequence (every handle's next sync hears of it) and the cache's (`sync_all`).
fn sync_failed(c: &super::core::Core, m: &Inode, e: &io::Error) {
    c.counters.inc(Event::WritebackErrors);
    let errno = e.raw_os_error().unwrap_or(libc::EIO);
    m.mapping.wb.err.set(errno);
    c.sb_err.set(errno, &m.path);
}
