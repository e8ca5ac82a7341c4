//! # foliocache
//!
//! A page cache for storage engines, in userspace: files are read and written through a
//! shared, concurrent cache of their pages that stays within a fixed memory budget, with the
//! semantics of the kernel's own (`pread`, `pwrite`, `fsync`) and zero-copy access to cached
//! pages. It is built the way Linux builds its page cache, and each of five Linux
//! memory-management patch threads that make it scale is implemented twice (the kernel's
//! vanilla behaviour and the patch's improvement), selectable at run time: see [`mm`].
//!
//! ```
//! use foliocache::{Config, FolioCache, OpenOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("db.sst");
//! # std::fs::write(&path, (0..1_000_000u32).map(|i| i as u8).collect::<Vec<_>>())?;
//! let cache = FolioCache::new(Config::new(64 << 20))?; // a 64 MiB budget
//!
//! // Many threads, each with its own handle (like a file descriptor), read the same file.
//! std::thread::scope(|s| {
//!     for t in 0..4u64 {
//!         let file = cache.open(&path).unwrap();
//!         s.spawn(move || {
//!             let mut buf = [0u8; 8192];
//!             file.read_exact_at(&mut buf, t * 100_000).unwrap(); // pread semantics, a copy
//!             assert_eq!(buf[0], (t * 100_000) as u8);
//!         });
//!     }
//! });
//!
//! // Zero-copy: pin exactly the bytes of a 16 KiB block and read them in place (one slice
//! // when one folio holds the block, as it does when the block is read at a multiple of
//! // its size; else `block.slices()` or `block.copy_to(..)`).
//! let file = cache.open(&path)?;
//! let block = file.get_range(2 * 16384, 16384)?;
//! let bytes: &[u8] = block.as_slice().expect("one folio");
//! assert_eq!((bytes.len(), bytes[0]), (16384, (2 * 16384) as u8));
//! drop(block);
//!
//! // Writes: dirty in the cache at once, durable after a sync.
//! let db = cache.open_with(&path, OpenOptions::new().write(true))?;
//! db.write_all_at(b"hello", 0)?;
//! db.sync_data()?;
//! println!("{:?}", cache.stats());
//! # Ok(()) }
//! ```
//!
//! # The user API
//!
//! | item | what it is |
//! |---|---|
//! | [`FolioCache`] | the cache: a budget, the files it caches, statistics; cheap to clone |
//! | [`Config`] | its settings: budget, readahead, LRU protection, unused inodes, dirty limits |
//! | [`CachedFile`] | an open file: `read_at`, `write_at`, `append`, `set_len`, syncs, pinned pages |
//! | [`AsyncFile`], [`ReadAt`] | the same calls as futures, for async executors: none blocks the polling thread |
//! | [`OpenOptions`] | how to open: read-only (default), write, create, truncate |
//! | [`PinnedRange`], [`OwnedRange`] | a byte range of a file, pinned, read in place (borrowed, or `'static`, `Clone`, `AsRef<[u8]>`) |
//! | [`PinnedFolio`], [`OwnedFolio`] | the whole folio holding a byte, pinned, read in place |
//! | [`FolioMut`], [`OwnedFolioMut`] | a cached page latched for an update of a private copy, committed when dropped (borrowed, or owning its file) |
//! | [`InPlaceFolioMut`], [`OwnedInPlaceFolioMut`] | a buffer manager's exclusive latch: the cached page itself updated in place, no copy; readers of the page wait for the commit. Over a whole block (8 to 128 KiB, one large folio) with [`CachedFile::get_block_mut_in_place`] or [`PinnedRange::upgrade_in_place`], committed as one unit |
//! | [`Snapshot`] | a point-in-time, read-only view of a file, taken in O(1) while writers go on |
//! | [`FileCursor`] | a file as an `io::Read + BufRead + Seek + Write` stream (zero-copy `BufRead`) |
//! | [`CacheError`], [`ConfigError`] | what went wrong, and what to do; both convert into [`std::io::Error`] |
//! | [`CacheStats`] | hits, misses, readahead, reclaim, dirty and writeback counts |
//! | [`Eviction`], [`BudgetError`] | the eviction listener's report; why a budget change was refused |
//! | [`WbErrorPolicy`] | what becomes of pages whose writeback failed |
//! | [`io`] (also [`backing`]) | the file behind a cache, for engines that bring their own storage or inject faults |
//!
//! **Lifetimes.** A file's cached pages belong to the file (its device and inode), not to a
//! handle: they outlive the handles, are shared by every handle of the file, and age out
//! through the LRU when the budget is needed; [`Config::unused_inodes`] bounds how many
//! closed files keep theirs. A file changed behind the cache's back is noticed at the next
//! `open`.
//!
//! **Budget.** The cache never holds more than its budget, which
//! [`FolioCache::set_budget`] changes at run time (up to [`Config::max_budget`]). Pinned
//! guards may hold [`Config::pinned_share`] of it (75% by default); a pin beyond waits or
//! fails with [`CacheError::PinLimit`], and [`CachedFile::read_at`] reads uncached rather
//! than fail when no page can be had. [`FolioCache::set_eviction_listener`] tells you what
//! left the cache.
//!
//! **Durability.** A write is visible to every reader at once and reaches the file through a
//! sync ([`CachedFile::sync_data`], [`CachedFile::sync_all`], [`CachedFile::sync_range`]),
//! the background flusher, or a writer at the dirty limit. A writeback error is reported to
//! every handle open when it happened, once, at its next sync. A write past the file
//! system's largest file size or `RLIMIT_FSIZE` fails at once ([`CacheError::FileTooLarge`]).
//!
//! What survives what, for a storage engine's recovery:
//!
//! | event | survives | lost |
//! |---|---|---|
//! | the process is killed (`kill -9`, a panic that aborts) | every byte a sync covered, and whatever writeback happened to write | dirty pages not written back yet: **unlike `pwrite`**, whose bytes sit in the kernel's page cache and outlive the process, a write to the cache lives in the process until written back |
//! | the machine loses power | every byte, and the size, a sync that returned covered | everything else (with direct I/O as without: only a sync makes data durable) |
//!
//! - [`CachedFile::sync_data`] makes durable the file's bytes written through the cache before
//!   the call, and its size: one grown by writes, or changed by [`CachedFile::set_len`]
//!   (`set_len` changes the file at once; `fdatasync` makes a size change durable, since the
//!   size is needed to read the data back). [`CachedFile::sync_all`] adds the rest of the
//!   metadata (times).
//! - A file's **name** is its directory's: a file created (or renamed) needs its directory
//!   synced too before it survives a power cut, as for any file. [`sync_dir`] does that.
//! - A [`PinnedFolio`] or [`PinnedRange`] keeps the bytes it pinned: a write to those pages
//!   meanwhile goes to a copy that replaces them in the cache, and the guard goes on seeing
//!   the old bytes (a snapshot of the pages it holds, not of the file). A later read or pin
//!   sees the write. A page someone pins is never latched in place: an
//!   [`InPlaceFolioMut`] of it changes a copy instead.
//! - While an [`InPlaceFolioMut`] latches a page, reads and pins of that page wait for its
//!   commit (they see the page before the latch or after its commit, never half of it), a
//!   sync waits for it, and the background flusher leaves the page for later. A read, a
//!   sync or a snapshot by the thread that made the latch is an error, not a hang. A block
//!   latch does the same for every page of its block: the block is one folio, made dirty at
//!   its commit and written back whole, so no reader and no writeback sees part of a change.
//! - Writes go into large folios too (the whole folio is dirty and written back as one);
//!   a truncation, a page latch or a snapshot capture inside one splits it into pages.
//!
//! **The write-ahead rule.** An engine with a write-ahead log can put uncommitted changes
//! into cached pages: write each change with its log sequence number
//! ([`CachedFile::write_at_lsn`], [`FolioMut::set_lsn`], [`InPlaceFolioMut::set_lsn`]: a
//! latch in place puts the change into the cached page with no copy) and give the cache its log
//! ([`FolioCache::set_write_ahead_log`]; [`FolioCache::log_durable`] after the engine's own
//! group commit). Every writeback path (a sync, the flusher, a writer at the dirty limit,
//! `set_budget`) then writes a page only once the log is durable up to the highest number of
//! the changes it holds, calling [`WriteAheadLog::flush_log`] when it is not yet (PostgreSQL's
//! `FlushBuffer` calling `XLogFlush`). If the log cannot be flushed, those pages stay dirty
//! (the others are written), a sync fails with [`CacheError::WriteAheadLog`], and a writer at
//! the dirty limit goes over it rather than wait for its own commit. [`FolioCache::checkpoint`]
//! is a fuzzy checkpoint (every page holding a change logged up to a point, written and
//! synced), and [`Config::buffer_pool`] leaves writeback to checkpoints and to eviction (the
//! cold dirty pages reclaim meets are written by the flusher: [`Config::pageout`]).
//!
//! **Snapshots.** [`CachedFile::snapshot`] takes a point-in-time, read-only view of a file
//! ([`Snapshot`]) in O(1): its bytes and size stay as they were while writers go on. The
//! first change of a page afterwards (a write, a [`FolioMut`] commit, a truncation) keeps
//! the page's old version for every live snapshot that needs it, reading it first if it was
//! not cached, so the file on disk never loses a block a snapshot still needs; a snapshot
//! costs the pages changed since it was taken, which the cache cannot evict while it lives.
//! They count against [`Config::snapshot_share`] (25% of the budget by default) and the
//! pinned share; a write that would pass either fails with [`CacheError::SnapshotLimit`],
//! the page unchanged ([`FolioMut::commit`], which cannot fail, goes over). A snapshot reads
//! like a handle (`read_at`, `get_folio`, `get_range`, zero-copy), copies itself out
//! ([`Snapshot::copy_to`], [`Snapshot::drain_to`] for a backup that releases as it goes) and
//! gives back what it no longer needs ([`Snapshot::release`]). Each is an address space of
//! [`mm::space`] on the cache's arena ([`FolioCache::spaces`]).
//!
//! **I/O.** The cache reads and writes its files itself: with direct I/O (`O_DIRECT`) where
//! the file system has it (ext4, XFS, btrfs), so the kernel's page cache keeps no second copy,
//! buffered with `RWF_DONTCACHE` where a file system has no direct I/O but takes that flag,
//! and through the kernel's page cache elsewhere (tmpfs, most FUSE and network file systems)
//! ([`Config::direct_io`], [`CachedFile::io_mode`]). Fault injection on the engines' own
//! paths (errors, short counts, `EAGAIN`) is tested per engine. Requests go through io_uring (one ring
//! per thread) or, where it is disabled, a pool of I/O threads ([`Config::io_engine`],
//! [`FolioCache::io_engine`]): a readahead window, a many-range read
//! ([`CachedFile::read_ranges`]) and a writeback pass keep many requests in flight, and on a
//! direct-I/O file the next readahead window is read while the reader goes on.
//! [`CachedFile::advise`] is `posix_fadvise`. `FOLIOCACHE_IO_ENGINE` and `FOLIOCACHE_DIRECT_IO`
//! override the configuration (the test suite runs under each).
//!
//! **Async calls.** [`AsyncFile`] has the handle's calls as futures for any executor (only
//! [`Waker`](std::task::Waker)s; the library starts no runtime). None blocks the thread that
//! polls it, except where said below:
//!
//! | call | where it waits | dropped before it completes |
//! |---|---|---|
//! | `read_at`, `read_exact_at`, `read_ranges` | a hit copies at the first poll (no allocation); a miss is read by the readahead workers (many tasks' misses in one batch of requests), a folio under I/O is waited for with the task's waker in the folio wait table | the reads it started go on and cache their pages; its wait is taken out |
//! | `prefetch` | never waits (not a future) | |
//! | `get_folio`, `get_range` | the read as above; the pin then waits in the polling thread only if the pinned share is full ([`Config::pin_wait`]) or the page was evicted between its read and the pin | as a read |
//! | `write_at`, `write_all_at` | what needs no wait (cached pages, room under the dirty limit: `IOCB_NOWAIT`) at the first poll; the rest on a worker thread with a copy of its bytes (a writer at the dirty limit waits there) | polled once: runs to its end (the write happens whole, or fails as the synchronous call would); never polled: nothing happens |
//! | `append`, `set_len` | a worker thread (an append with a copy of its bytes) | as a write |
//! | `snapshot` | at the first poll if no change of the file is under way, else a worker thread (it waits for that change to end); the [`Snapshot`]'s own reads are synchronous | a snapshot taken on the worker is dropped with the future |
//! | `sync_data`, `sync_all`, `sync_range` | a worker thread; one handle's syncs run in the order polled | runs to its end; its error, unseen, is reported by the handle's next sync |
//! | `open`, `open_with` | a worker thread (`open(2)`, `statx(2)`, revalidation) | the handle is closed on the worker |
//!
//! No future holds a lock across an await. Dropping an [`AsyncFile`] whose last handle closes
//! waits for the file's reads still in flight, as every close does (microseconds to a
//! device's latency). A pinned guard is `Send`: a task may hold one across an await, where it
//! keeps its pages out of reclaim and counts against [`Config::pinned_share`] for as long.
//!
//! **Deleted files.** A handle keeps its file after the file is deleted or renamed over, as a
//! descriptor does. When the last handle of a file that has no name left closes, the cache
//! drops the file at once: its pages, dirty ones included (there is nowhere to write them),
//! and its descriptors, so the file system frees its blocks. A file deleted after its last
//! handle closed keeps a descriptor in the inode cache until the cache prunes it
//! ([`Config::unused_inodes`]) or [`FolioCache::drop_caches`] runs: the cache does not see
//! unlinks.
//!
//! **Optional features.** `metrics`: `FolioCache::record_metrics` exports every counter
//! through the [`metrics`](https://docs.rs/metrics) facade. `tracing`: spans over the slow
//! paths (misses and readahead, syncs, writeback, reclaim) and events for errors and rare
//! counters, named like the vmstat counters, through [`tracing`](https://docs.rs/tracing).
//! `bytes`: an [`OwnedRange`] converts into a `bytes::Bytes` without a copy. `tokio`:
//! `AsyncFile::cursor`, an `AsyncCursor` implementing tokio's `AsyncRead`, `AsyncSeek` and
//! `AsyncWrite` (the async calls themselves need no feature and no runtime).
//!
//! # Pages, folios and offsets
//!
//! Every offset in the API is a byte offset in the file. The cache holds a file in *pages* of
//! [`PAGE_SIZE`] (4 KiB) bytes, page `i` holding the bytes from offset `i * PAGE_SIZE`, and
//! keeps pages in *folios*: runs of 1, 2, 4, ... 512 pages starting at an offset that is a
//! multiple of their size, each pinned, counted and evicted as one. Misses fill folios as
//! large as the read (or readahead window) and its alignment allow
//! ([`Config::max_folio_order`]), so a block read at a multiple of its size lands in one
//! folio and [`CachedFile::get_range`] gives it as one slice
//! ([`PinnedRange::as_slice`]); a range across folios is a guard over several
//! ([`PinnedRange::slices`], [`PinnedRange::copy_to`]). [`CachedFile::get_folio_at`] pins the
//! whole folio holding a byte; its bytes start at [`PinnedFolio::offset`].
//!
//! # For kernel and systems engineers
//!
//! [`mm`] holds the mechanisms (folio refcount, index, readahead, LRU, writeback, per-CPU
//! references, RCU, rmap), each with an essay naming the kernel functions it mirrors, and
//! [`mm::Experiment`], which picks their variants for a cache. The `foliocache-lab` binary in
//! the repository measures each against the kernel's vanilla behaviour, and the cache against
//! quick_cache, moka and the kernel's page cache (`foliocache-lab all`). The `examples/`
//! directory has `read_file` (many threads, one file), `pinned_folio` (zero-copy),
//! `small_budget` (data eight times the budget) and `write_log` (appends and syncs), all on
//! the user API; the lab crate's `cow_snapshot` shows `fork` and copy-on-write on
//! [`mm::space`]. [`FolioCache::vmstat`] prints every counter as `/proc/vmstat` lines.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

/// The backing file of a cache: the items of [`io`] at their first home, kept so that code
/// written against `foliocache::backing` goes on building.
pub mod backing {
    pub use crate::io::{
        check_end_of_data, read_run, Backing, FaultyBacking, FileAttrs, FileBacking, MemBacking,
        RunError,
    };
}
#[cfg(not(loom))]
mod cache;
pub mod io;
#[cfg(all(test, loom))]
mod loom_tests;
pub mod mm;
mod trace;
mod variant;

#[cfg(all(not(loom), feature = "tokio"))]
pub use cache::AsyncCursor;
#[cfg(not(loom))]
pub use cache::{
    Advice, AsyncFile, BudgetError, CacheError, CacheStats, CachedFile, Config, ConfigError,
    Eviction, EvictionListener, EvictionReason, FileCursor, FolioCache, FolioMut, InPlaceFolioMut,
    OpenOptions, OwnedFolio, OwnedFolioMut, OwnedInPlaceFolioMut, OwnedRange, PinnedFolio,
    PinnedRange, ReadAt, Snapshot, WriteAheadLog, BLOCK_CACHE_INACTIVE_RATIO, DEFAULT_PINNED_SHARE,
    DEFAULT_SNAPSHOT_SHARE, DEFAULT_UNUSED_INODES, MAX_RA_PAGES,
};
pub use io::{DirectIo, EngineKind, IoEngine, IoMode};
/// The page size, 4 KiB: a file is cached in pages of this many bytes, page `i` holding
/// bytes `i * PAGE_SIZE ..`; a folio holds 1, 2, 4, ... 512 consecutive pages.
pub use mm::folio::PAGE_SIZE;
pub use mm::writeback::WbErrorPolicy;
pub use variant::{UnknownVariant, Variant};

/// `fsync(2)` of the directory at `path`: makes the names in it durable, as a file created or
/// renamed there needs before it survives a power cut (the cache syncs a file's data and
/// size, never its name).
///
/// ```
/// # use foliocache::{Config, FolioCache, OpenOptions};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let cache = FolioCache::new(Config::new(16 << 20))?;
/// let log = cache.open_with(dir.path().join("wal-000001"), OpenOptions::new().append(true).create_new(true))?;
/// log.append(b"first record")?;
/// log.sync_data()?;                   // the bytes and the size
/// foliocache::sync_dir(dir.path())?;  // the name
/// # Ok(()) }
/// ```
pub fn sync_dir(path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)?
        .sync_all()
}
