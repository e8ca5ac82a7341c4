//! [`CacheError`]: what can go wrong through the public API, each variant saying how to fix it.

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::config::ConfigError;
use crate::mm::folio::{ArenaError, PAGE_SIZE};

/// An error of the [`FolioCache`](super::FolioCache) API.
#[derive(Debug)]
#[non_exhaustive]
pub enum CacheError {
    /// The configuration was rejected before anything was allocated.
    Config(ConfigError),
    /// The arena (the memory budget) could not be created.
    Arena(crate::mm::folio::ArenaError),
    /// The background reclaimer thread could not be started.
    Spawn(io::Error),
    /// The I/O engine [`Config::io_engine`](crate::Config::io_engine) (or the
    /// `FOLIOCACHE_IO_ENGINE` variable) asked for cannot run here: io_uring disabled by the
    /// `kernel.io_uring_disabled` sysctl or a seccomp profile, or the pool's threads could not
    /// be started.
    IoEngine {
        /// The engine asked for (`uring`, `pool`, ...).
        engine: &'static str,
        /// Why it cannot run.
        source: io::Error,
    },
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
    /// The path names something the cache cannot hold: not a regular file, or a pseudo-file
    /// whose size the kernel does not report (`/proc`, `/sys`).
    Unsupported {
        /// The path given to `open`.
        path: PathBuf,
        /// What it is ("a directory", "a FIFO", "a procfs file ...").
        kind: &'static str,
    },
    /// A write (or `set_len`) through a handle that was not opened for writing.
    NotWritable {
        /// The file.
        path: PathBuf,
    },
    /// Writing the file's data back, or making it durable, failed: reported once to every
    /// handle that was open when it happened, by its next sync.
    Writeback {
        /// The file.
        path: PathBuf,
        /// The backing's error (its `errno` as recorded in the file's error sequence).
        source: io::Error,
    },
    /// A sync could not write pages back because the engine's write-ahead log could not be
    /// made durable up to their changes ([`WriteAheadLog::flush_log`](crate::WriteAheadLog::flush_log)
    /// failed, or the cache has no log): those pages were not written and are still dirty.
    WriteAheadLog {
        /// The file whose pages wait.
        path: PathBuf,
        /// The log's error.
        source: io::Error,
    },
    /// An argument was out of range.
    InvalidArgument {
        /// What was wrong and what is accepted.
        what: String,
    },
    /// [`read_exact_at`](super::CachedFile::read_exact_at) asked for bytes past the end of the
    /// file (`std::io::Read::read_exact`'s `UnexpectedEof`); the bytes before the end may have
    /// been copied into the buffer.
    UnexpectedEof {
        /// The file.
        path: PathBuf,
        /// The first byte asked for.
        offset: u64,
        /// The number of bytes asked for.
        len: usize,
        /// The file's size in bytes when it was read.
        file_size: u64,
    },
    /// A new pin would take the pages pinned by guards ([`PinnedFolio`](crate::PinnedFolio),
    /// [`OwnedFolio`](crate::OwnedFolio), [`FolioMut`](crate::FolioMut)) past
    /// [`Config::pinned_share`](crate::Config::pinned_share) of the budget, and no guard was
    /// dropped within [`Config::pin_wait`](crate::Config::pin_wait). Nothing was pinned.
    PinLimit {
        /// Pages pinned when it failed.
        pinned_pages: u64,
        /// The pin limit, in pages.
        limit_pages: u64,
        /// The budget, in pages.
        budget_pages: u64,
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// A write needed to keep the old version of a page for a live
    /// [`Snapshot`](crate::Snapshot), and the pages snapshots hold would pass
    /// [`Config::snapshot_share`](crate::Config::snapshot_share) of the budget (or the pages
    /// pinned would pass [`Config::pinned_share`](crate::Config::pinned_share)). The file is
    /// unchanged at that page.
    SnapshotLimit {
        /// The file written.
        path: PathBuf,
        /// Pages snapshots hold (a page held by two snapshots counts twice).
        snapshot_pages: u64,
        /// The snapshot limit, in pages.
        limit_pages: u64,
        /// Pages pinned by guards and snapshots.
        pinned_pages: u64,
        /// The pin limit, in pages.
        pin_limit_pages: u64,
    },
    /// A read of a [`Snapshot`](crate::Snapshot) reached bytes it had released
    /// ([`Snapshot::release`](crate::Snapshot::release)).
    SnapshotReleased {
        /// The file the snapshot is of.
        path: PathBuf,
        /// The first released byte the read reached.
        offset: u64,
    },
    /// [`FolioCache::set_budget`](super::FolioCache::set_budget) refused the budget.
    Budget(BudgetError),
    /// A write starting at or past the largest size the file may have, or a `set_len` past
    /// it (`EFBIG`): the file system's maximum file size, or the process's `RLIMIT_FSIZE`.
    /// Nothing was written. A write that only crosses the limit is cut short at it instead
    /// (it returns the bytes below the limit).
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// The size the call would have given the file.
        size: u64,
        /// The largest size it may have.
        limit: u64,
        /// Which limit: the file system's or the process's.
        which: &'static str,
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
            CacheError::IoEngine { engine, source } => write!(
                f,
                "the {engine} I/O engine cannot run here ({source}): choose another with \
                 Config::io_engine or FOLIOCACHE_IO_ENGINE (auto falls back by itself)"
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
            CacheError::Unsupported { path, kind } => write!(
                f,
                "cannot cache {}: it is {kind}; the cache holds regular files only (read this one \
                 with std::fs instead)",
                path.display()
            ),
            CacheError::NotWritable { path } => write!(
                f,
                "{} was not opened for writing: open it with OpenOptions::write(true) (or append)",
                path.display()
            ),
            CacheError::Writeback { path, source } => write!(
                f,
                "writing {} back failed: {source}; data written since the last successful sync \
                 may be lost: write it again and sync",
                path.display()
            ),
            CacheError::WriteAheadLog { path, source } => write!(
                f,
                "pages of {} were not written back: the write-ahead log could not be made \
                 durable up to their changes ({source}); they stay dirty: fix the log and sync \
                 again",
                path.display()
            ),
            CacheError::InvalidArgument { what } => write!(f, "invalid argument: {what}"),
            CacheError::PinLimit {
                pinned_pages,
                limit_pages,
                budget_pages,
                waited,
            } => write!(
                f,
                "too many pages pinned: guards hold {pinned_pages} page(s), the limit is \
                 {limit_pages} of the {budget_pages}-page budget (waited {waited:?}); drop \
                 PinnedFolio/OwnedFolio/FolioMut guards sooner, copy with read_at instead, or \
                 raise Config::pinned_share, Config::pin_wait or the budget"
            ),
            CacheError::SnapshotLimit {
                path,
                snapshot_pages,
                limit_pages,
                pinned_pages,
                pin_limit_pages,
            } => write!(
                f,
                "a write to {} must keep a page's old version for a live snapshot, and there is \
                 no room: snapshots hold {snapshot_pages} page(s) of a {limit_pages}-page limit, \
                 guards and snapshots pin {pinned_pages} of {pin_limit_pages}; drop or release \
                 snapshots sooner, or raise Config::snapshot_share, Config::pinned_share or the \
                 budget",
                path.display()
            ),
            CacheError::SnapshotReleased { path, offset } => write!(
                f,
                "byte {offset} of the snapshot of {} was released (Snapshot::release): read \
                 only what the snapshot still holds",
                path.display()
            ),
            CacheError::Budget(e) => write!(f, "cannot change the budget: {e}"),
            CacheError::FileTooLarge {
                path,
                size,
                limit,
                which,
            } => write!(
                f,
                "{} would reach {size} bytes, past {which} of {limit} bytes (EFBIG): nothing was written",
                path.display()
            ),
            CacheError::UnexpectedEof {
                path,
                offset,
                len,
                file_size,
            } => write!(
                f,
                "unexpected end of file: a read of {len} bytes at byte {offset} runs past the end \
                 of {} ({file_size} bytes); read at most {} bytes there, or use read_at, which \
                 returns a short count at the end",
                path.display(),
                file_size.saturating_sub(*offset)
            ),
        }
    }
}

impl std::error::Error for CacheError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CacheError::Config(e) => Some(e),
            CacheError::Arena(e) => Some(e),
            CacheError::Spawn(e) => Some(e),
            CacheError::Budget(e) => Some(e),
            CacheError::Open { source, .. }
            | CacheError::Io { source, .. }
            | CacheError::IoEngine { source, .. }
            | CacheError::Writeback { source, .. }
            | CacheError::WriteAheadLog { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ConfigError> for CacheError {
    fn from(e: ConfigError) -> Self {
        CacheError::Config(e)
    }
}

impl From<BudgetError> for CacheError {
    fn from(e: BudgetError) -> Self {
        CacheError::Budget(e)
    }
}

impl From<crate::mm::folio::ArenaError> for CacheError {
    fn from(e: crate::mm::folio::ArenaError) -> Self {
        CacheError::Arena(e)
    }
}

/// For callers whose errors are `std::io::Error` (a storage engine's `Read`/`FileExt`-like
/// layer): the [`io::ErrorKind`] says what happened, and the `CacheError` stays inside as the
/// inner error, so `err.get_ref()` / `err.into_inner()` and `downcast` give it back.
///
/// | `CacheError` | `io::ErrorKind` |
/// |---|---|
/// | `Open`, `Io`, `Writeback`, `WriteAheadLog` | the operating system error's own kind (`NotFound` for a missing file) |
/// | `Unsupported` (a directory, a FIFO...) | `Unsupported` |
/// | `NotWritable` | `PermissionDenied` |
/// | `FileChanged` | `InvalidData` |
/// | `Spawn`, `IoEngine`, `Arena` (the mapping failed) | the operating system error's own kind |
/// | `OutOfMemory`, `PinLimit`, `SnapshotLimit`, `Budget` (pages could not be freed), `Arena` (the budget exceeds the machine's memory) | `OutOfMemory` |
/// | `UnexpectedEof` | `UnexpectedEof` |
/// | `InvalidArgument`, `SnapshotReleased`, `Config`, `Arena` and `Budget` (budget out of range) | `InvalidInput` |
impl From<CacheError> for io::Error {
    fn from(e: CacheError) -> Self {
        let kind = match &e {
            CacheError::Open { source, .. }
            | CacheError::Io { source, .. }
            | CacheError::Writeback { source, .. }
            | CacheError::WriteAheadLog { source, .. }
            | CacheError::Spawn(source)
            | CacheError::IoEngine { source, .. }
            | CacheError::Arena(ArenaError::Map(source)) => source.kind(),
            CacheError::OutOfMemory { .. }
            | CacheError::PinLimit { .. }
            | CacheError::SnapshotLimit { .. }
            | CacheError::Budget(BudgetError::Busy { .. })
            | CacheError::Arena(ArenaError::ExceedsMemory(_)) => io::ErrorKind::OutOfMemory,
            CacheError::UnexpectedEof { .. } => io::ErrorKind::UnexpectedEof,
            CacheError::Unsupported { .. } => io::ErrorKind::Unsupported,
            // The data the cache expected is not there (`ESTALE` in spirit).
            CacheError::FileChanged { .. } => io::ErrorKind::InvalidData,
            CacheError::NotWritable { .. } => io::ErrorKind::PermissionDenied,
            CacheError::FileTooLarge { .. } => io::ErrorKind::FileTooLarge,
            CacheError::InvalidArgument { .. }
            | CacheError::SnapshotReleased { .. }
            | CacheError::Budget(_)
            | CacheError::Config(_)
            | CacheError::Arena(ArenaError::BudgetTooSmall { .. })
            | CacheError::Arena(ArenaError::BudgetTooLarge { .. }) => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
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

    /// True for [`CacheError::PinLimit`].
    pub fn is_pin_limit(&self) -> bool {
        matches!(self, CacheError::PinLimit { .. })
    }
}

/// Why [`FolioCache::set_budget`](super::FolioCache::set_budget) refused a budget.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BudgetError {
    /// The budget holds no whole 4 KiB page.
    TooSmall {
        /// The budget asked for.
        budget_bytes: usize,
    },
    /// The budget exceeds [`Config::max_budget`](crate::Config::max_budget), the memory the cache
    /// reserved when it was built.
    OverMax {
        /// The budget asked for.
        budget_bytes: usize,
        /// The maximum.
        max_bytes: usize,
    },
    /// Shrinking could not free enough pages: nothing was changed.
    Busy {
        /// The budget asked for, in pages.
        budget_pages: u64,
        /// The budget, unchanged, in pages.
        current_pages: u64,
        /// Pages that could not be freed.
        short_pages: u64,
        /// Pages pinned by guards when it gave up.
        pinned_pages: u64,
        /// Dirty and writeback pages when it gave up (writeback failed or is in progress).
        unwritten_pages: u64,
    },
}

impl std::fmt::Display for BudgetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BudgetError::TooSmall { budget_bytes } => write!(
                f,
                "a budget of {budget_bytes} bytes holds no 4 KiB page: give at least {PAGE_SIZE} bytes"
            ),
            BudgetError::OverMax {
                budget_bytes,
                max_bytes,
            } => write!(
                f,
                "a budget of {budget_bytes} bytes exceeds the {max_bytes}-byte maximum this cache \
                 reserved: build it with a larger Config::max_budget to grow it that far"
            ),
            BudgetError::Busy {
                budget_pages,
                current_pages,
                short_pages,
                pinned_pages,
                unwritten_pages,
            } => write!(
                f,
                "cannot shrink the budget from {current_pages} to {budget_pages} pages: \
                 {short_pages} page(s) could not be freed ({pinned_pages} pinned by guards, \
                 {unwritten_pages} dirty or under writeback); the budget is unchanged: drop \
                 folio guards, sync files whose writeback fails, or ask for a larger budget"
            ),
        }
    }
}

impl std::error::Error for BudgetError {}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::sync::Arc;

    use super::*;
    use crate::io::{FaultyBacking, MemBacking};
    use crate::{Config, FolioCache};

    const PAGE: u64 = 4096;

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// Unwraps the `CacheError` an `io::Error` carries.
    fn inner(e: &io::Error) -> &CacheError {
        e.get_ref()
            .and_then(|e| e.downcast_ref::<CacheError>())
            .expect("the io::Error carries the CacheError")
    }

    #[test]
    fn read_exact_at_past_the_end_is_unexpected_eof() {
        let c = FolioCache::new(Config::new(1 << 20)).unwrap();
        let file = c
            .open_backing("/data/short", MemBacking(data(10_000)))
            .unwrap();
        let mut buf = [0u8; 200];
        let e = file.read_exact_at(&mut buf, 9_900).unwrap_err();
        match &e {
            CacheError::UnexpectedEof {
                path,
                offset,
                len,
                file_size,
            } => {
                assert_eq!(path.to_str(), Some("/data/short"));
                assert_eq!((*offset, *len, *file_size), (9_900, 200, 10_000));
            }
            other => panic!("expected UnexpectedEof, got {other:?}"),
        }
        let msg = e.to_string();
        assert!(msg.contains("unexpected end of file"), "{msg}");
        assert!(msg.contains("read at most 100 bytes there"), "{msg}");
        // The bytes before the end were copied, as read_exact leaves them.
        assert_eq!(&buf[..100], &data(10_000)[9_900..]);
        // Past the end altogether.
        let e = file.read_exact_at(&mut buf, 20_000).unwrap_err();
        assert!(matches!(
            e,
            CacheError::UnexpectedEof {
                file_size: 10_000,
                ..
            }
        ));
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::UnexpectedEof);
        // An exact read to the last byte succeeds.
        file.read_exact_at(&mut buf[..100], 9_900).unwrap();
    }

    /// A read stopped short by an I/O error reports that error, not the end of the file.
    #[test]
    fn read_exact_at_reports_the_error_that_stopped_it() {
        let c = FolioCache::new(Config::new(1 << 20)).unwrap();
        let backing = Arc::new(FaultyBacking::new(MemBacking(data(16 * PAGE as usize))));
        let file = c.open_backing("mem", backing.clone()).unwrap();
        file.readahead(0..4 * PAGE).unwrap();
        backing.fail_at(4 * PAGE);
        let mut buf = vec![0u8; 6 * PAGE as usize];
        let e = file.read_exact_at(&mut buf, 0).unwrap_err();
        assert!(e.is_io(), "expected the backing's error, got {e:?}");
        backing.heal();
        file.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf, data(6 * PAGE as usize));
    }

    /// The message asks for what `Config::validate` checks: one page, whatever the readahead
    /// window.
    #[test]
    fn a_too_small_budget_asks_for_one_page() {
        let e = FolioCache::new(Config::new(100)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("at least 4096 bytes (one page)"), "{msg}");
        assert!(!msg.contains("readahead"), "{msg}");
        let one_page = Config::new(4096).readahead_pages(crate::mm::readahead::DEFAULT_RA_PAGES);
        one_page.validate().unwrap();
        FolioCache::new(one_page).unwrap();
    }

    #[test]
    fn io_error_kinds_and_the_cache_error_inside() {
        // A missing file: NotFound, and the CacheError comes back out.
        let dir = tempfile::tempdir().unwrap();
        let c = FolioCache::new(Config::new(1 << 20)).unwrap();
        let e = io::Error::from(c.open(dir.path().join("missing")).unwrap_err());
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(matches!(inner(&e), CacheError::Open { .. }));
        assert!(e.to_string().starts_with("cannot open"), "{e}");
        let back = e.into_inner().unwrap().downcast::<CacheError>().unwrap();
        assert!(back.source().is_some(), "the OS error is still the source");

        // A bad argument or configuration: InvalidInput.
        let e = io::Error::from(FolioCache::new(Config::new(100)).unwrap_err());
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(matches!(inner(&e), CacheError::Config(_)));
        let bad = CacheError::InvalidArgument {
            what: "page 9 of a 2-page file".into(),
        };
        assert_eq!(io::Error::from(bad).kind(), io::ErrorKind::InvalidInput);

        // Out of memory: OutOfMemory.
        let oom = CacheError::OutOfMemory {
            needed_pages: 4,
            free_pages: 0,
            budget_pages: 16,
        };
        let e = io::Error::from(oom);
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
        assert!(inner(&e).is_out_of_memory());

        // An I/O error: the backing's own kind.
        let failed = CacheError::Io {
            path: "/data/x".into(),
            offset: 0,
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        let e = io::Error::from(failed);
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(inner(&e).is_io());
    }
}
