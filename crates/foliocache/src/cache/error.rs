//! [`CacheError`]: what can go wrong through the public API, each variant saying how to fix it.

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::config::ConfigError;

/// An error of the [`FolioCache`](super::FolioCache) API.
#[derive(Debug)]
#[non_exhaustive]
pub enum CacheError {
    /// The configuration was rejected before anything was allocated.
    Config(ConfigError),
    /// The arena (the memory budget) could not be created.
    Arena(crate::folio::ArenaError),
    /// The background reclaimer thread could not be started.
    Spawn(io::Error),
    /// Opening the file (or reading its size) failed.
    Open {
        /// The path given to `open`.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// Reading the backing file failed while filling the folio that holds `offset`.
    ///
    /// The folios of the failed read were removed from the cache; a later read retries the
    /// I/O. Readers that were waiting for the same folio fail with this error too.
    Io {
        /// The file.
        path: PathBuf,
        /// The first byte of the run whose read failed.
        offset: u64,
        /// The backing's error (for waiters: a copy of its kind and message).
        source: io::Error,
    },
    /// The file changed behind the cache: a read of it found no data at byte `offset`, before
    /// the `expected_size` bytes the cache believed it held (another process truncated it, or
    /// its size and its contents disagree).
    ///
    /// Nothing of the failed read was cached (zeros there would be wrong data); pages cached
    /// before the change may be stale. Close every handle of the file and open it again (the
    /// cache then reads its new size), or invalidate its pages if the change is expected.
    FileChanged {
        /// The file.
        path: PathBuf,
        /// The byte at which the backing had no data.
        offset: u64,
        /// The size the cache believed the file had.
        expected_size: u64,
        /// The size the backing reports now (or `offset`, if it cannot say).
        actual_size: u64,
    },
    /// The memory budget is used up by folios reclaim cannot give back (pinned by guards,
    /// mapped, or under I/O).
    OutOfMemory {
        /// Pages the read needed at once.
        needed_pages: usize,
        /// Free pages when it failed.
        free_pages: u64,
        /// Pages in the budget.
        budget_pages: u64,
    },
    /// An argument was out of range.
    InvalidArgument {
        /// What was wrong and what is accepted.
        what: String,
    },
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Config(e) => write!(f, "invalid cache configuration: {e}"),
            CacheError::Arena(e) => write!(f, "cannot create the cache's memory arena: {e}"),
            CacheError::Spawn(e) => write!(
                f,
                "cannot start the background reclaimer thread ({e}): raise the thread limit or \
                 build the cache without background_reclaim"
            ),
            CacheError::Open { path, source } => {
                write!(f, "cannot open {}: {source}", path.display())
            }
            CacheError::Io {
                path,
                offset,
                source,
            } => write!(
                f,
                "I/O error reading {} at byte {offset}: {source} (the pages were dropped from the \
                 cache; a later read retries)",
                path.display()
            ),
            CacheError::FileChanged {
                path,
                offset,
                expected_size,
                actual_size,
            } => write!(
                f,
                "{} changed behind the cache: it has no data at byte {offset} although the cache \
                 believed it held {expected_size} bytes (it now reports {actual_size}); nothing \
                 was cached for this read and cached pages may be stale: close every handle of \
                 the file and open it again, or invalidate its cached pages",
                path.display()
            ),
            CacheError::OutOfMemory {
                needed_pages,
                free_pages,
                budget_pages,
            } => write!(
                f,
                "out of memory: the read needs {needed_pages} page(s) but only {free_pages} of the \
                 {budget_pages}-page budget are free and nothing can be evicted; drop pinned folio \
                 guards, close or invalidate files, or give the cache a larger budget"
            ),
            CacheError::InvalidArgument { what } => write!(f, "invalid argument: {what}"),
        }
    }
}

impl std::error::Error for CacheError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CacheError::Config(e) => Some(e),
            CacheError::Arena(e) => Some(e),
            CacheError::Spawn(e) => Some(e),
            CacheError::Open { source, .. } | CacheError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ConfigError> for CacheError {
    fn from(e: ConfigError) -> Self {
        CacheError::Config(e)
    }
}

impl From<crate::folio::ArenaError> for CacheError {
    fn from(e: crate::folio::ArenaError) -> Self {
        CacheError::Arena(e)
    }
}

impl CacheError {
    /// True for [`CacheError::OutOfMemory`].
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, CacheError::OutOfMemory { .. })
    }

    /// True for [`CacheError::Io`].
    pub fn is_io(&self) -> bool {
        matches!(self, CacheError::Io { .. })
    }

    /// True for [`CacheError::FileChanged`].
    pub fn is_file_changed(&self) -> bool {
        matches!(self, CacheError::FileChanged { .. })
    }
}
