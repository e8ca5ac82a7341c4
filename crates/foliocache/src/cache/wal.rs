//! The write-ahead rule (PostgreSQL's `FlushBuffer` -> `XLogFlush`, InnoDB's
//! `buf_flush_write_block_low` -> `log_write_up_to`): a page holding a change the engine
//! logged at sequence number N reaches the file only after the engine's log is durable up to
//! N.
//!
//! An engine writes each change with its log sequence number
//! ([`CachedFile::write_at_lsn`](crate::CachedFile::write_at_lsn),
//! [`FolioMut::set_lsn`](crate::FolioMut::set_lsn)); the page keeps the highest
//! (`mm::writeback::note_lsn`, under its folio lock, with the change). Every writeback path
//! (a sync, the flusher, a throttled writer, reclaim's and `set_budget`'s passes) goes
//! through one function, `mm::writeback`'s `submit`, which asks [`LogState::flush`] for the
//! highest number of the pages it is about to write before it writes any of them. The cache
//! knows the log's durable point ([`FolioCache::log_durable`](crate::FolioCache::log_durable),
//! or the last successful flush) and calls the engine's [`WriteAheadLog`] only beyond it. If
//! the log cannot be flushed, the pages are not written and stay dirty with their numbers.

use std::io;

use crate::mm::sync::{Arc, AtomicU64, Ordering, RwLock};

/// An engine's write-ahead log, as the cache's writeback sees it
/// ([`FolioCache::set_write_ahead_log`](crate::FolioCache::set_write_ahead_log)).
///
/// # Deadlocks
///
/// `flush_log` is called from inside writeback: by a thread syncing a file, by the cache's
/// flusher, and by a thread writing through the cache that the dirty limit throttles. So it
/// must not wait for anything such a thread may hold: it must not write through this cache
/// (keep the log in a plain file, or in another cache), and the engine must not hold a lock
/// `flush_log` takes while it writes pages through the cache. The pages it is called for are
/// under writeback meanwhile: a writer of one of them waits until the call returns.
pub trait WriteAheadLog: Send + Sync {
    /// Makes the log durable up to and including `lsn` (writes and syncs it), or fails.
    /// Called only when the cache does not already know the log to be durable that far; a
    /// call that returns `Ok` tells it the log is.
    fn flush_log(&self, lsn: u64) -> io::Result<()>;
}

/// The cache's view of the engine's log.
#[derive(Default)]
pub(crate) struct LogState {
    log: RwLock<Option<Arc<dyn WriteAheadLog>>>,
    /// The highest sequence number the log is known to be durable up to.
    durable: AtomicU64,
}

impl std::fmt::Debug for LogState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogState")
            .field("log", &self.log.read().is_some())
            .field("durable", &self.durable.load(Ordering::Relaxed))
            .finish()
    }
}

impl LogState {
    pub(crate) fn set(&self, log: Option<Arc<dyn WriteAheadLog>>) {
        *self.log.write() = log;
    }

    /// The log is durable up to `lsn` (told by the engine, or after a flush).
    pub(crate) fn durable_to(&self, lsn: u64) {
        // ORDERING: Release; pairs with the Acquire load in `flush`: a writeback pass that
        // sees this number writes its pages after the log was made durable up to it.
        self.durable.fetch_max(lsn, Ordering::Release);
    }

    /// [`LogState::durable_to`] weakened on purpose, for the loom model that must catch it:
    /// a Relaxed store publishes the number without the log's durability.
    #[cfg(loom)]
    pub(crate) fn durable_to_relaxed(&self, lsn: u64) {
        self.durable.fetch_max(lsn, Ordering::Relaxed);
    }

    pub(crate) fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The log made durable up to `lsn`: at once if it is known to be, else by the engine's
    /// [`WriteAheadLog::flush_log`]; an error if it cannot be (or there is no log to ask).
    pub(crate) fn flush(&self, lsn: u64) -> io::Result<()> {
        // ORDERING: Acquire; pairs with `durable_to`'s Release.
        if self.durable.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let log = self.log.read().clone();
        let Some(log) = log else {
            return Err(io::Error::other(format!(
                "pages hold changes logged up to {lsn}, but the log is known durable only up \
                 to {} and the cache has no write-ahead log to flush \
                 (FolioCache::set_write_ahead_log, or FolioCache::log_durable after the log's \
                 own sync)",
                self.durable.load(Ordering::Relaxed)
            )));
        };
        log.flush_log(lsn)?;
        self.durable_to(lsn);
        Ok(())
    }
}
