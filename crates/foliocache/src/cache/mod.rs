//! The product: [`FolioCache`], its inodes and open files ([`CachedFile`]), the read and
//! write paths, syncs, guards ([`PinnedFolio`], [`PinnedRange`], [`FolioMut`]), the budget
//! and statistics ([`CacheStats`]), built on the mechanisms of [`crate::mm`] and the I/O
//! layer [`crate::io`].
//!
//! # Lock order
//!
//! Outermost first; a thread holding a lock of one row takes only locks of later rows. (Checked
//! against the code: `write.rs`, `truncate.rs`, `sync.rs`, `latch.rs` for writes, truncation,
//! syncs and latches, `inode.rs` for revalidation, `file.rs` for the read path, `sb.rs` for
//! `iput`, allocation and reclaim's evictions, `balloon.rs` for the balloon,
//! `mm/readahead` for fills, `mm/writeback` for passes, `mm/index` and `mm/lru` for their
//! own.)
//!
//! | # | lock | where | taken by |
//! |---|---|---|---|
//! | 1 | page latch (a [`FolioMut`]'s logical lock on one page) | inode `latches` | `get_folio_mut`; held across calls by its guard, so writers that meet one wait for it with `i_rwsem` released, never under it |
//! | 2 | `i_rwsem` | inode | writes, appends, `set_len`, `get_folio_mut`, revalidation; readers never take it |
//! | 3 | the attributes seen at the last look (`attrs`) | inode | revalidation only, which takes `invalidate_lock` under it |
//! | 4 | `invalidate_lock` (shared by fills, exclusive by truncation) **or** `I_SYNC` (one writeback pass per file) | address space | fills from their insertion to the end of their reads; `set_len` and revalidation around the size change and the cut; writeback passes. The two are never held together |
//! | 5 | folio lock | folio | fills (inserted locked), `write_begin`..`write_end`, truncation, writeback's start, reclaim (trylock only) |
//! | 5a | a file's snapshot list (`Snapshots::list`), then one snapshot's released ranges (`SnapInner::released`), then its page table (`Space::mm`) | inode; snapshot | a change's capture of the old page (under the folio lock); a release takes the last two, a drop the first and the last one after the other; a snapshot read takes the last two one at a time, after its live folio reference |
//! | 6 | index lock (`xa_lock`) and the writeback tags' mutex | index; address space | insertion, deletion, replacement, eviction; tag changes, always under the folio lock; a file's first or last DIRTY tag takes the dirty-file list's mutex (`b_dirty`, a leaf) under the tags' mutex |
//! | 7 | LRU: per-CPU batch lock, then the lruvec lock | [`crate::mm::lru`] | no index or folio lock is taken under either (reclaim drops the lruvec lock before it touches an index, and takes folio locks by trylock only) |
//!
//! Leaf locks, under which nothing else is taken: the latch table's mutex, the writer slot
//! (`AddressSpace::writer`), the inode cache (`icache`, `sb.rs`: an evicted inode is dropped
//! after it is released), the live-mapping map (`sb.rs`), a handle's readahead state and
//! error sample, the throttle's mutex (`DirtyAccount`), the cache-wide error sequence's
//! sample, the budget's listener and pending-eviction mutexes (`budget.rs`: the listener is
//! called with none held). Two mutexes sit outside the rows, each serializing one job: the
//! balloon's `resize` (`balloon.rs`), taken by `set_budget` with no other lock held, and the
//! shadow-node shrinker's (`sb.rs`), taken by trylock only. Waiting for a
//! folio's writeback to end (`folio_wait_stable`, truncation, an integrity pass meeting a
//! folio already under writeback) is not a lock: the write it waits for needs no lock, and a
//! pass takes no folio lock after it starts a folio's writeback.
//!
//! # The map
//!
//! | file | what it holds | kernel |
//! |---|---|---|
//! | `mod.rs` | [`FolioCache`]'s public calls: open, drop_caches, statistics, validate; the map of the files below (none of which imports from it) | `fs/super.c`, `fs/open.c` |
//! | `core.rs` | the core of the shared state (`Core`): configuration, arena, LRU, counters, dirty accounting, RCU domain, the reclaimer's doorbell, the budget's state; what follows an insertion, marking accesses, the [`WbHost`](crate::mm::writeback::WbHost) the mechanisms call back through. Imports only leaves (`config`, `error`, `stats`, `budget`, `kswapd`) and `mm` | `pglist_data`, the superblock's counters |
//! | `sb.rs` | [`FolioCache`] and the whole shared state (`CacheInner`: the inode cache, the live mappings, the flusher, over its `Core`): `iput`, the allocation hook, the [`RaHost`](crate::mm::readahead::RaHost) and [`Evict`](crate::mm::lru::Evict) hosts (reclaim finds a folio's file through the live mappings), the shadow-node shrinker, the writeback at drop. Imports the core, the inode, the flusher and one writeback pass | `struct super_block` |
//! | `inode.rs` | the inode ([`Inode`]: identity, path, users, attributes, `i_rwsem`, page latches; owns its [`AddressSpace`](crate::mm::filemap::AddressSpace)), revalidation, and the inode cache: one inode per (device, inode number), kept after the last close up to a limit | `fs/inode.c` |
//! | `file.rs` | the handle and the read path | `struct file`, `filemap_read`, `filemap_get_pages` |
//! | `guard.rs`, `range.rs` | pinned folios, and pinned byte ranges over folios of any size | `folio_get`/`folio_put` |
//! | `write.rs` | writes and appends, [`OpenOptions`] | `generic_perform_write` (`mm/filemap.c`) |
//! | `truncate.rs`, `split.rs`, `collapse.rs` | `set_len`; splitting a large folio before a cut, a page latch or a snapshot capture inside it; collapsing a block's folios into one for a block latch | `mm/truncate.c`, `split_folio`, `collapse_file` |
//! | `sync.rs` | `sync_data`, `sync_all`, `sync_range`, [`FolioCache::sync_all`], error reporting | `fs/sync.c` |
//! | `writeback.rs` | one writeback pass over an inode with its effects on the cache, and the cache as the dirty-file passes of `mm::writeback` see it (the throttle's entry and the flusher's passes live there) | `mm/page-writeback.c` |
//! | `latch.rs` | the writable latches, [`FolioMut`], [`OwnedFolioMut`] and [`InPlaceFolioMut`] (a page's, or a block's) | a buffer manager's page latch |
//! | `cow.rs`, `snapshot.rs` | snapshots: the copy-on-write half the write path calls (a file's live snapshots, keeping a page's old version before a change; imports only the core and leaves), and [`Snapshot`] with its reads | `wp_page_copy`, `finish_fault` |
//! | `worker.rs`, `kswapd.rs`, `flusher.rs` | the background threads: one small thread type (a doorbell, a timed sleep, a round of work while the cache lives), the reclaimer and the flusher; none names the shared state (their rounds take the core, and what needs more is passed in by `sb.rs`) | `kswapd`, `wb_workfn` |
//! | `budget.rs`, `balloon.rs`, `limits.rs` | the budget's state and the eviction listener's queue (a leaf); the budget at run time, the pin share, the uncached read; file size limits | `balloon`, `generic_write_check_limits` |
//! | `config.rs`, `error.rs`, `stats.rs`, `metrics.rs`, `cursor.rs` | settings, errors, counters, their export, a `Read`/`Write` stream | `vmstat` |
//!
//! # What it models
//!
//! The page cache as a file system's read path sees it (`mm/filemap.c`): `filemap_read`
//! copying from folios found in the file's index, `filemap_get_pages` turning misses into
//! readahead (`mm/readahead.c`), `filemap_create_folio` when readahead could not help,
//! `folio_wait_locked` for pages under I/O, `invalidate_mapping_pages`, and the inode's
//! lifetime (`truncate_inode_pages_final` when the last user of a file goes away).
//!
//! | kernel | here |
//! |---|---|
//! | the page allocator, memmap, memory | the cache's [`Arena`]: a fixed memory budget |
//! | inode + `address_space` (`i_pages`, `i_size`) | an inode (`cache/inode.rs`) owning an [`AddressSpace`]: one per file (device, inode number), shared by its handles and kept in the inode cache after the last close |
//! | `struct file` (`f_ra`, `f_pos`) | [`CachedFile`]: one readahead stream per handle |
//! | the fd table, `fdget` | none: a handle holds its inode, as a task holds its `struct file` across calls; the table mechanism is [`crate::mm::filetable`] (seed 003, the `hash` lab scenario) |
//! | `pread(2)` | [`CachedFile::read_at`] |
//! | `filemap_get_folio` + `folio_get` | [`CachedFile::get_folio`] -> [`PinnedFolio`] |
//! | `readahead(2)` | [`CachedFile::readahead`] |
//! | `invalidate_mapping_pages` | [`CachedFile::invalidate`] |
//! | the inode cache, `iput_final`, `prune_icache_sb`, `drop_caches` | the cache's inode cache (`cache/inode.rs`): unused files kept up to [`Config::unused_inodes`]; [`FolioCache::drop_caches`] |
//! | NFS close-to-open revalidation | [`FolioCache::open`], [`CachedFile::refresh`] |
//! | `folio_add_lru`, `folio_mark_accessed`, direct reclaim | the cache's [`Lru`] (seed 004): every inserted folio is queued for the LRU, every read marks what it used, and an allocation over the budget reclaims cold folios first |
//! | `workingset_eviction`, `workingset_refault`, the `mm-shadow` shrinker | reclaim leaves a shadow entry in the evicted folio's slot; an insertion that replaces one asks the LRU whether to activate the new folio; shadow-only index nodes beyond a limit proportional to the budget are freed after allocations ([`Config::workingset`]) |
//! | `/proc/vmstat` | [`FolioCache::stats`], [`FolioCache::lru_stats`] |
//! | virtio-balloon, `percpu_counter`, `O_DIRECT` | [`FolioCache::set_budget`], [`Config::pinned_share`], the uncached fallback of `read_at` (`cache/budget.rs`) |
//!
//! # The read path
//!
//! ```text
//! read_at(buf, off)
//!   one RCU section on the handle's own inode (nothing looks the handle up)
//!   for each folio of the range:
//!     lookup: RCU load of the index slot, try_get, re-check the slot   (no lock, no syscall)
//!       miss  -> sync readahead of a window (one index lock hold per run when batched,
//!                one preadv per run), then a single-folio read if the page is still missing
//!     PG_readahead set? test-and-clear, then async readahead of the next window
//!     not uptodate? sleep on the folio lock until the filler unlocks it (uptodate or error)
//!     copy, put
//! ```
//!
//! # Invariants
//!
//! - Every folio in an index is either locked by the one thread filling it, or uptodate; a
//!   failed fill removes its folios from the index before unlocking them (with PG_error set
//!   for the waiters), so no later lookup finds a failed folio and the next read retries.
//! - A reference taken by a read is put before `read_at` returns; only [`PinnedFolio`] keeps
//!   one, together with a reference on its file's mapping (so the folio stays cached).
//! - A file's folios belong to its inode, not to a handle: they stay cached after the last
//!   handle and guard are gone, and go with the inode when the inode cache evicts it (beyond
//!   [`Config::unused_inodes`], or [`FolioCache::drop_caches`]) or when the cache itself is
//!   dropped. After every handle and guard is dropped, [`FolioCache::drop_caches`] and a
//!   drain of the LRU's per-CPU batches ([`FolioCache::lru_add_drain_all`]) leave the arena
//!   with no folio. (A folio truncated while it waits in a batch is freed when the batch
//!   drains, as in the kernel.)
//! - The budget is never exceeded. All allocation goes through one hook
//!   (`CacheInner::alloc_folio`): when the budget is used up it reclaims cold folios from the
//!   LRU in the allocating thread and retries; only when reclaim frees nothing (everything
//!   pinned or under I/O) does it fail, never wait: `read_at` then copies from the file
//!   uncached, the other calls fail with [`CacheError::OutOfMemory`]. The budget is the
//!   arena's pages less the balloon's, and pinned guards hold at most
//!   [`Config::pinned_share`] of it (`cache/budget.rs`).
//!
//! # Why a hit is fast
//!
//! No lock, no system call, no shared write besides the folio's refcount: the handle keeps
//! its inode (a hit clones no shared `Arc`), one RCU read section covers the
//! whole hit and its index lookup, the hit itself is inlined into the caller, the statistics
//! are per-thread-sharded counters (one shard lookup per read), and `prev_pos` is written
//! only when it changes. The
//! refcount's cache line is exactly what seed 000 is about, and the strategy is the cache's
//! choice ([`Experiment::strategy`](crate::mm::Experiment::strategy)).

mod aio;
mod async_ra;
mod balloon;
mod budget;
mod collapse;
mod config;
mod core;
mod cow;
mod cursor;
mod error;
mod file;
mod flusher;
mod guard;
pub(crate) mod inode;
mod kswapd;
mod latch;
mod limits;
#[cfg(feature = "metrics")]
mod metrics;
mod range;
mod sb;
mod snapshot;
mod split;
mod stats;
mod sync;
mod truncate;
mod wal;
mod worker;
mod write;
mod writeback;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[cfg(feature = "tokio")]
pub use aio::AsyncCursor;
pub use aio::{AsyncFile, ReadAt};
pub use budget::{Eviction, EvictionListener, EvictionReason};
pub use config::{
    Config, ConfigError, BLOCK_CACHE_INACTIVE_RATIO, DEFAULT_PINNED_SHARE, DEFAULT_SNAPSHOT_SHARE,
    DEFAULT_UNUSED_INODES, MAX_RA_PAGES,
};
pub use cursor::FileCursor;
pub use error::{BudgetError, CacheError};
pub use file::{Advice, CachedFile};
pub use guard::{OwnedFolio, PinnedFolio};
pub use latch::{FolioMut, InPlaceFolioMut, OwnedFolioMut, OwnedInPlaceFolioMut};
pub use range::{OwnedRange, PinnedRange};
pub use snapshot::Snapshot;
pub use stats::CacheStats;
pub(crate) use stats::{Counters, Event};
pub use wal::WriteAheadLog;
pub use write::OpenOptions;

use self::core::Core;
use crate::io::{Backing, DirectIo, FileAttrs, FileBacking};
use crate::mm::filemap::AddressSpace;
use crate::mm::folio::{Arena, ArenaConfig};
use crate::mm::index::Index;
use crate::mm::lru::{Lru, LruStats, ReclaimResult, WorkingsetStats};
use crate::mm::rcu::Rcu;
use crate::mm::sync::{Arc, AtomicU64, AtomicUsize, Mutex, Ordering};
use inode::{Icache, Inode, InodeKey};
use kswapd::Kswapd;
use sb::CacheInner;
pub use sb::FolioCache;

impl FolioCache {
    /// Builds a cache: validates `config`, then reserves its memory budget.
    pub fn new(config: Config) -> Result<FolioCache, CacheError> {
        config.validate()?;
        // The arena maps the maximum budget; the pages above the budget go to the balloon.
        let mut ac = ArenaConfig::new(config.max_budget_bytes(), config.experiment.strategy);
        ac.panic_on_bad_page = config.panic_on_bad_page;
        ac.huge_pages = config.huge_pages;
        let arena = Arc::new(Arena::new(ac)?);
        let lru = Lru::new(&arena, config.lru_config());
        let budget_pages = (config.budget_bytes / crate::mm::folio::PAGE_SIZE) as u64;
        let kswapd = config
            .background_reclaim
            .then(|| Arc::new(Kswapd::new(budget_pages)));
        // One RCU domain for every index of this cache: a thread's read-side slot is cached
        // for one domain at a time.
        let rcu = Arc::new(Rcu::new());
        let unused_inodes = config.unused_inodes;
        let budget = budget::Budget::new(
            budget_pages,
            config.pinned_share,
            config.snapshot_share,
            config.pin_wait,
        );
        let dirty = crate::mm::writeback::DirtyAccount::new(
            budget_pages,
            config.dirty_ratio,
            config.dirty_background_ratio,
        );
        let engine = crate::io::engine::Engine::new(config.io_engine).map_err(|source| {
            CacheError::IoEngine {
                engine: config.io_engine.name(),
                source,
            }
        })?;
        let direct_io =
            config
                .direct_io
                .resolve_env()
                .map_err(|e| CacheError::InvalidArgument {
                    what: e.to_string(),
                })?;
        let cache = FolioCache {
            inner: Arc::new(CacheInner {
                icache: Mutex::new(Icache::new(unused_inodes)),
                live: Mutex::new(HashMap::new()),
                core: Core {
                    config,
                    arena,
                    counters: Counters::new(),
                    next_handle: AtomicU64::new(1),
                    rcu,
                    retired_lock_acquisitions: AtomicU64::new(0),
                    retired_pages_inserted: AtomicU64::new(0),
                    lru,
                    dirty,
                    sb_err: crate::mm::writeback::SbErr::default(),
                    fsize_limit: AtomicU64::new(limits::rlimit_fsize()),
                    kswapd,
                    budget,
                    engine,
                    direct_io,
                    log: Default::default(),
                    spaces: std::sync::OnceLock::new(),
                    pageout: crate::mm::sync::Mutex::new(Vec::new()),
                    pageout_queued: AtomicU64::new(0),
                    alloc_waiting: AtomicU64::new(0),
                },
                flusher: std::sync::OnceLock::new(),
                shadow_shrinker: Mutex::new(()),
                async_ra: Arc::new(async_ra::AsyncRa::new(
                    async_ra::MAX_WORKERS,
                    "foliocache-ra",
                    aio::read_misses,
                )),
                aio_pool: Arc::new(async_ra::AsyncRa::new(
                    aio::AIO_WORKERS,
                    "foliocache-aio",
                    aio::read_misses,
                )),
            }),
        };
        cache.inner.init_balloon(budget_pages)?;
        if let Some(k) = &cache.inner.kswapd {
            let (k, weak) = (k.clone(), Arc::downgrade(&cache.inner));
            std::thread::Builder::new()
                .name("foliocache-kswapd".into())
                .spawn(move || {
                    k.run(
                        weak,
                        |c: &CacheInner, wm| c.arena.stats().free_pages < wm.low,
                        |c, wm| {
                            c.lru.balance(&c.arena, c, wm);
                            c.shrink_slab();
                            c.kswapd_pageout(wm);
                        },
                        |c| c.deliver(),
                    )
                })
                .map_err(CacheError::Spawn)?;
        }
        Ok(cache)
    }

    /// The configuration the cache was built with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The I/O engine the cache's reads and writes go through ([`Config::io_engine`]; with
    /// `Auto`, the one this process could use).
    pub fn io_engine(&self) -> crate::EngineKind {
        self.inner.engine.kind()
    }

    /// `open(2)` for reading: a new handle on the regular file at `path`
    /// ([`FolioCache::open_with`] with [`OpenOptions::new`]).
    ///
    /// The cache keeps one set of pages per file (per device and inode number, whatever the
    /// path): handles of the same file share them, each with its own readahead stream, and
    /// the pages stay cached after the last handle closes (up to [`Config::unused_inodes`]
    /// unused files, then the least recently used goes), so reopening a table file finds its
    /// blocks still cached.
    ///
    /// Every open looks at the file again (close-to-open consistency, as NFS clients do): a
    /// path replaced by a `rename` opens the new file, and a file whose size or modification
    /// time changed behind the cache's back (a write that did not go through it) has its
    /// cached pages dropped, unless the cache holds dirty pages of it (those are newer). Between
    /// opens the cache trusts its pages; call [`CachedFile::refresh`] to look again. The
    /// cache's own writeback changes the file's mtime too: a change is taken as foreign only
    /// if no write of the cache's went to the file since it last looked, so a foreign write
    /// that lands while the cache is writing the same file back goes unnoticed.
    ///
    /// Directories, FIFOs, sockets, devices and pseudo-files whose size the kernel does not
    /// report (`/proc`, `/sys`) are refused with [`CacheError::Unsupported`]. No cache-wide
    /// lock is held across the system calls, so a slow `open(2)` stalls no other thread.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<CachedFile, CacheError> {
        self.open_with(path, &OpenOptions::new())
    }

    /// `open(2)` with flags: reading and writing, creating, truncating, appending
    /// ([`OpenOptions`], as `std::fs::OpenOptions`). Every handle can read; one opened with
    /// `write` or `append` can also write through the cache ([`CachedFile::write_at`]).
    ///
    /// ```
    /// use foliocache::{Config, FolioCache, OpenOptions};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let cache = FolioCache::new(Config::new(16 << 20))?;
    /// let log = cache.open_with(dir.path().join("wal"), OpenOptions::new().append(true).create(true))?;
    /// let at = log.append(b"first record")?;         // returns where it landed
    /// log.sync_data()?;                                // durable from here on
    /// assert_eq!((at, log.len()), (0, 12));
    /// # Ok(()) }
    /// ```
    pub fn open_with(
        &self,
        path: impl AsRef<Path>,
        options: &OpenOptions,
    ) -> Result<CachedFile, CacheError> {
        use std::os::unix::fs::MetadataExt;
        let path = path.as_ref();
        options
            .check()
            .map_err(|what| CacheError::InvalidArgument {
                what: format!("opening {}: {what}", path.display()),
            })?;
        let writable = options.writes();
        let (file, meta) = open_regular(path, options)?;
        let key = InodeKey {
            dev: meta.dev(),
            ino: meta.ino(),
        };
        let attrs = FileAttrs::from_metadata(&meta);
        let c = &self.inner;
        let found = c.icache.lock().get(key);
        let max_bytes = match found {
            Some(_) => limits::MAX_FILE_SIZE,
            None => limits::fs_max_bytes(std::os::fd::AsFd::as_fd(&file)),
        };
        let mut fb = FileBacking::from_file(file, path);
        let direct = match &found {
            // One mode per inode for its life: a later descriptor follows the first.
            Some(m) => (m.mapping.dio_align != 0).then_some(DirectIo::On),
            None => match c.direct_io {
                DirectIo::Off => None,
                mode => Some(mode),
            },
        };
        if let Some(mode) = direct.filter(|&m| m != DirectIo::Uncached) {
            let enabled = fb.enable_direct().map_err(|source| CacheError::Open {
                path: path.to_path_buf(),
                source,
            })?;
            if enabled.is_none() && mode == DirectIo::On {
                return Err(CacheError::Open {
                    path: path.to_path_buf(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::Unsupported,
                        "direct I/O is required (DirectIo::On) but the file system offers none \
                         for this file: use DirectIo::Auto to fall back to buffered I/O",
                    ),
                });
            }
        }
        let dio_align = fb.direct_alignment();
        // A buffered file keeps the kernel from caching it too where the kernel can
        // (`RWF_DONTCACHE`): the fallback of `Auto`, and `Uncached`. Later descriptors follow
        // the inode's first. A probe that fails leaves the file plainly buffered.
        let dontcache = match &found {
            Some(m) => m.dontcache,
            None => dio_align == 0 && matches!(c.direct_io, DirectIo::Auto | DirectIo::Uncached),
        };
        let dontcache = dontcache && fb.enable_dontcache().unwrap_or(false);
        // `file_ra_state_init`: the device's window for a file only our readahead streams,
        // but no more than an eighth of the budget (a window that large would evict what the
        // windows before it read: the kernel's memory is never that small next to it).
        let ra_pages = match (dio_align, c.config.ra_pages_set) {
            (0, _) | (_, true) => c.config.ra_pages,
            _ => crate::io::device_readahead_pages(fb.file())
                .unwrap_or(c.config.ra_pages)
                .min(crate::MAX_RA_PAGES)
                .min(c.config.budget_bytes / crate::PAGE_SIZE / 8)
                .max(c.config.ra_pages),
        };
        let backing: Arc<dyn Backing> = Arc::new(fb);
        let m = match found {
            Some(m) => m,
            None => {
                let fresh = self.new_mapping(
                    path.to_path_buf(),
                    Some(key),
                    backing.clone(),
                    attrs,
                    FileIo {
                        max_bytes,
                        dio_align,
                        dontcache,
                        ra_pages,
                    },
                );
                let mut icache = c.icache.lock();
                match icache.get(key) {
                    // Another thread entered the inode since we looked: use its.
                    Some(m) => {
                        drop(icache);
                        drop(fresh);
                        m
                    }
                    None => {
                        icache.insert(key, fresh.clone());
                        fresh
                    }
                }
            }
        };
        if writable {
            // The first writable descriptor of the inode becomes its writeback target.
            m.mapping
                .writer
                .lock()
                .get_or_insert_with(|| backing.clone());
        }
        drop(backing);
        // Outside the icache lock: a changed file's pages are dropped here.
        if let Err(source) = m.revalidate(c) {
            c.iput(m);
            return Err(CacheError::Open {
                path: path.to_path_buf(),
                source,
            });
        }
        let file = CachedFile::new(c.clone(), m).with_mode(writable, options.appends());
        if options.truncates() {
            file.set_len(0)?;
        }
        // A changed file's pages were dropped above: tell the eviction listener.
        c.deliver();
        Ok(file)
    }

    /// Opens a file whose bytes come from `backing` (a fault-injecting wrapper, an in-memory
    /// buffer, another storage layer); `name` appears in error messages. Every call creates a
    /// new, unshared file, which is dropped with its pages when its last handle and guard are
    /// gone; use [`CachedFile::reopen`] for more handles. The handle can write if the backing
    /// can ([`Backing::write_at`]); writes to one that cannot fail at writeback.
    pub fn open_backing(
        &self,
        name: impl Into<PathBuf>,
        backing: impl Backing + 'static,
    ) -> Result<CachedFile, CacheError> {
        let name = name.into();
        let attrs = backing.attrs().map_err(|source| CacheError::Open {
            path: name.clone(),
            source,
        })?;
        let backing: Arc<dyn Backing> = Arc::new(backing);
        let m = self.new_mapping(
            name,
            None,
            backing.clone(),
            attrs,
            FileIo {
                max_bytes: limits::MAX_FILE_SIZE,
                dio_align: 0,
                dontcache: false,
                ra_pages: self.inner.config.ra_pages,
            },
        );
        *m.mapping.writer.lock() = Some(backing);
        Ok(CachedFile::new(self.inner.clone(), m).with_mode(true, false))
    }

    /// A new inode with one user (the handle the caller is about to make).
    fn new_mapping(
        &self,
        path: PathBuf,
        key: Option<InodeKey>,
        backing: Arc<dyn Backing>,
        attrs: FileAttrs,
        io: FileIo,
    ) -> Arc<Inode> {
        let FileIo {
            max_bytes,
            dio_align,
            dontcache,
            ra_pages,
        } = io;
        let pages = Index::with_shadow_nodes(
            self.inner.arena.clone(),
            self.inner.rcu.clone(),
            self.inner.lru.shadow_nodes().clone(),
        );
        let m = Arc::new(Inode {
            cache: {
                let weak: std::sync::Weak<CacheInner> = Arc::downgrade(&self.inner);
                weak
            },
            id: pages.mapping_id(),
            path,
            key,
            i_rwsem: Mutex::new(()),
            max_bytes: AtomicU64::new(max_bytes),
            attrs: Mutex::new((attrs, 0)),
            users: AtomicUsize::new(1),
            latches: inode::Latches::new(),
            ra_inflight: Default::default(),
            snapshots: Default::default(),
            ra_pages,
            dontcache,
            mapping: AddressSpace::new(
                pages,
                backing,
                attrs.size,
                self.inner.config.max_folio_order,
                dio_align,
            ),
        });
        let mut live = self.inner.live.lock();
        live.retain(|_, w| w.strong_count() > 0);
        live.insert(m.id, Arc::downgrade(&m));
        m
    }

    /// `drop_caches` (`echo 3 > /proc/sys/vm/drop_caches`): evicts every unused inode with
    /// its pages, then drops every cached page of the files still in use that nobody pins
    /// and no I/O holds. Returns the pages freed. Pinned folios, and the files of open
    /// handles, stay.
    pub fn drop_caches(&self) -> u64 {
        let c = &self.inner;
        c.lru.drain_all(&c.arena);
        let before = c.arena.stats().allocated_pages;
        let evicted = c.icache.lock().evict_unused();
        c.counters.add(Event::InodesEvicted, evicted.len() as u64);
        drop(evicted);
        for m in c.live_mappings() {
            let out = m.mapping.pages.invalidate(0, u64::MAX);
            c.counters.add(Event::Invalidated, out.pages_freed);
            c.note_eviction(
                &m,
                0..m.nr_pages(),
                out.pages_freed,
                EvictionReason::Invalidate,
            );
        }
        c.lru.drain_all(&c.arena);
        c.deliver();
        before.saturating_sub(c.arena.stats().allocated_pages)
    }

    /// A snapshot of the cache's counters and memory use.
    pub fn stats(&self) -> CacheStats {
        let c = &self.inner;
        let mut s = CacheStats::default();
        s.fill_events(&c.counters);
        s.index_lock_acquisitions = c.retired_lock_acquisitions.load(Ordering::Relaxed);
        s.index_pages_inserted = c.retired_pages_inserted.load(Ordering::Relaxed);
        {
            let icache = c.icache.lock();
            s.inodes = icache.nr_inodes() as u64;
            s.unused_inodes = icache.nr_unused() as u64;
        }
        for m in c.live_mappings() {
            let is = m.mapping.pages.stats();
            s.index_lock_acquisitions += is.lock_acquisitions;
            s.index_pages_inserted += is.pages_inserted;
        }
        s.dirty_pages = c.dirty.dirty();
        s.writeback_pages_now = c.dirty.writeback();
        s.dirty_limit_pages = c.dirty.limit();
        s.dirty_charged_pages = c.dirty.charged();
        s.dirty_high_water = c.dirty.high_water();
        let a = c.arena.stats();
        // The balloon's pages are allocated in the arena but are no part of the budget.
        let balloon = c.budget.balloon_pages();
        s.budget_pages = a.total_pages - balloon;
        s.allocated_pages = a.allocated_pages.saturating_sub(balloon);
        s.free_pages = a.free_pages;
        s.pinned_pages = c.budget.pins.charged();
        s.snapshot_pages = c.budget.snapshots.charged();
        s.snapshot_limit_pages = c.budget.snapshots.limit();
        s.pin_limit_pages = c.budget.pins.limit();
        s.bad_pages = a.bad_pages;
        s
    }

    /// The mechanism variants the cache was built with ([`Config::experiment`]).
    pub fn experiment(&self) -> &crate::mm::Experiment {
        &self.inner.config.experiment
    }

    /// The LRU's configuration: its replacement policy ([`Config::lru_policy`]), inactive
    /// ratio, workingset detection and the experiment's switches.
    pub fn lru_config(&self) -> &crate::mm::lru::LruConfig {
        self.inner.lru.config()
    }

    /// The cache's family of address spaces (seed 002's [`Spaces`](crate::mm::space::Spaces)),
    /// on its arena, with the experiment's sharer tracking
    /// ([`Experiment::tracking`](crate::mm::Experiment::tracking)): the family snapshots
    /// ([`CachedFile::snapshot`]) are made in, for kernel engineers who want spaces, `fork`
    /// and copy-on-write of anonymous memory beside the cache. Anonymous memory takes free
    /// pages of the budget without reclaiming cached ones (a fault fails with
    /// `SpaceError::OutOfMemory` when none is free), and is not counted as cached data.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let cache = foliocache::FolioCache::new(foliocache::Config::new(16 << 20))?;
    /// let spaces = cache.spaces();
    /// let parent = spaces.create()?;
    /// let heap = parent.anon(2 << 20)?;
    /// parent.write(heap, &[1; 4096])?;
    /// let child = parent.fork()?;
    /// parent.write(heap, &[2])?;           // copy-on-write: the child keeps its byte
    /// let mut b = [0u8];
    /// child.read(heap, &mut b)?;
    /// assert_eq!(b, [1]);
    /// # Ok(()) }
    /// ```
    pub fn spaces(&self) -> crate::mm::space::Spaces {
        self.inner.spaces().clone()
    }

    /// Faults in the whole budget's memory now rather than page by page as the cache fills
    /// (as `MAP_POPULATE` would): for a server that wants its first reads to pay no page
    /// faults, or a benchmark that must not measure them. Cached data and accounting are
    /// untouched; it takes about as long as writing the budget once. Fails with the system's
    /// error on kernels before 5.14 (`EINVAL`: nothing is lost, pages are then faulted in on
    /// first use as before) or when the memory cannot be had.
    pub fn populate(&self) -> std::io::Result<()> {
        self.inner.arena.populate()
    }

    /// A snapshot of the LRU's counters (`/proc/vmstat`'s LRU lines).
    pub fn lru_stats(&self) -> LruStats {
        self.inner.lru.stats()
    }

    /// A snapshot of the workingset counters (`/proc/vmstat`'s `workingset_*` lines):
    /// refaults, activations, restores, shadow nodes and their reclaim.
    pub fn workingset_stats(&self) -> WorkingsetStats {
        self.inner.lru.workingset_stats()
    }

    /// `/proc/vmstat`: every counter of the cache as `(name, value)` lines, the read path's
    /// ([`CacheStats::vmstat`]: hits, misses, readahead, I/O, bad pages), the LRU's
    /// ([`LruStats::vmstat`]: lock acquisitions, dead folios filtered, reclaim scans), then
    /// workingset detection's ([`WorkingsetStats::vmstat`]: refaults, activations, shadow
    /// nodes).
    ///
    /// ```
    /// # let cache = foliocache::FolioCache::new(foliocache::Config::new(1 << 20)).unwrap();
    /// for (name, value) in cache.vmstat() {
    ///     println!("{name} {value}");
    /// }
    /// assert!(cache.vmstat().iter().any(|&(n, _)| n == "lru_scanned"));
    /// ```
    pub fn vmstat(&self) -> Vec<(&'static str, u64)> {
        let mut lines = self.stats().vmstat();
        lines.extend(self.lru_stats().vmstat());
        lines.extend(self.workingset_stats().vmstat());
        lines
    }

    /// `lru_add_drain_all`: moves every folio waiting in a per-CPU batch onto the LRU (or
    /// frees it, if it died there). Afterwards the arena's accounting counts no folio held
    /// only by a batch.
    pub fn lru_add_drain_all(&self) {
        self.inner.lru.drain_all(&self.inner.arena);
    }

    /// Recomputes the cache's memory accounting from scratch: drains the LRU's per-CPU
    /// batches, then validates the LRU (lists, flags, counters;
    /// [`Lru::validate`](crate::mm::lru::Lru::validate)), every open file's index
    /// ([`Index::validate`](crate::mm::index::Index::validate)), the dirty accounting, the
    /// snapshots (each folio's sharer state against a scan of every snapshot's page table,
    /// [`Spaces::check_oracle`](crate::mm::space::Spaces::check_oracle), and the pages they
    /// hold against their charge) and the
    /// arena ([`Arena::validate`](crate::mm::folio::Arena::validate)), waiting for the background reclaimer to finish a pass if
    /// one runs, and the balloon of [`FolioCache::set_budget`]. Call it while no other thread
    /// uses the cache; returns the arena's stats (the balloon's pages count as allocated there).
    pub fn validate(&self) -> Result<crate::mm::folio::ArenaStats, String> {
        // Windows being read by the readahead workers hold locked folios: let them finish.
        self.inner.async_ra.wait_idle();
        self.inner.aio_pool.wait_idle();
        let _quiet = self.inner.kswapd.as_ref().map(|k| k.worker.busy.lock());
        let _flusher = self.inner.flusher.get().map(|f| f.worker.busy.lock());
        self.lru_add_drain_all();
        self.inner.lru.validate(&self.inner.arena)?;
        for m in self.inner.live_mappings() {
            m.mapping
                .pages
                .validate()
                .map_err(|e| format!("{}: index: {e}", m.path.display()))?;
        }
        self.validate_dirty()?;
        let files = self.inner.live_mappings();
        self.inner
            .validate_snapshots(files.iter().map(|m| (m.path.as_path(), &m.snapshots)))?;
        self.inner.validate_balloon()?;
        self.inner.arena.validate()
    }

    /// The dirty accounting recomputed from scratch: every page tagged dirty starts a dirty
    /// folio and every dirty folio is tagged, and the cache's dirty count is the sum of the
    /// files' dirty folios' pages.
    fn validate_dirty(&self) -> Result<(), String> {
        let c = &self.inner;
        let mut total = 0;
        for m in c.live_mappings() {
            let tagged = m.mapping.wb.dirty_indices();
            let mut pages = 0;
            for &index in &tagged {
                // A dirty folio is tagged once, at its first page, and counts all its pages.
                let nr = m.mapping.pages.lookup(index).and_then(|f| {
                    (f.index() == index && f.test_flag(crate::mm::folio::flags::PG_DIRTY))
                        .then(|| f.nr_pages() as u64)
                });
                let Some(nr) = nr else {
                    return Err(format!(
                        "{}: page {index} is tagged dirty but its folio is not dirty, missing,                          or starts before it",
                        m.path.display()
                    ));
                };
                pages += nr;
            }
            if pages != m.mapping.wb.nr_dirty() {
                return Err(format!(
                    "{}: its dirty folios hold {pages} pages, its count says {}",
                    m.path.display(),
                    m.mapping.wb.nr_dirty()
                ));
            }
            let flagged = m
                .mapping
                .pages
                .count_flagged(crate::mm::folio::flags::PG_DIRTY);
            if flagged != tagged.len() as u64 {
                return Err(format!(
                    "{}: {flagged} dirty folios in the index, {} pages tagged dirty",
                    m.path.display(),
                    tagged.len()
                ));
            }
            total += pages;
        }
        if total != c.dirty.dirty() {
            return Err(format!(
                "the cache counts {} dirty pages, its files hold {total}",
                c.dirty.dirty()
            ));
        }
        // The dirty-file list (`b_dirty`) names exactly the files with dirty pages.
        let mut listed = c.dirty.dirty_files();
        listed.sort_unstable();
        let mut dirty_files: Vec<u64> = c
            .live_mappings()
            .iter()
            .filter(|m| m.mapping.wb.nr_dirty() > 0)
            .map(|m| m.id)
            .collect();
        dirty_files.sort_unstable();
        if listed != dirty_files {
            return Err(format!(
                "the dirty-file list names files {listed:?}, the files with dirty pages are \
                 {dirty_files:?}"
            ));
        }
        let (charged, writeback) = (c.dirty.charged(), c.dirty.writeback());
        if charged != total + writeback {
            return Err(format!(
                "the dirty limit's count is {charged} pages, the cache holds {total} dirty and \
                 {writeback} under writeback"
            ));
        }
        Ok(())
    }

    /// `drop_caches`-like reclaim: evicts up to `nr_pages` cold pages now, as an allocation
    /// under memory pressure would.
    pub fn reclaim(&self, nr_pages: usize) -> ReclaimResult {
        let r = self
            .inner
            .lru
            .reclaim(&self.inner.arena, &*self.inner, nr_pages);
        self.inner.shrink_slab();
        self.inner.deliver();
        r
    }

    /// The shadow-node shrinker's pass, run to completion: frees shadow nodes until their
    /// count is within the limit for the budget ([`ShadowNodes::limit`](crate::mm::index::ShadowNodes::limit)). Returns the nodes
    /// freed. Reclaim runs the same shrinker a half-excess at a time.
    pub fn shrink_shadow_nodes(&self) -> u64 {
        let mut freed = 0;
        loop {
            let n = self.inner.scan_shadow_nodes(1);
            if n == 0 {
                return freed;
            }
            freed += n;
        }
    }
}

/// Opens `path` for reading and checks that it is a regular file whose size the kernel
/// reports, returning it with its metadata (`fstat`, not `stat`: the file we opened, whatever
/// the path names by now).
///
/// The open is non-blocking so that a FIFO without a writer is refused instead of blocking
/// the caller; the flag is cleared again for the file's reads.
fn open_regular(
    path: &Path,
    options: &OpenOptions,
) -> Result<(std::fs::File, std::fs::Metadata), CacheError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    use std::os::unix::io::AsRawFd;
    let open_err = |source| CacheError::Open {
        path: path.to_path_buf(),
        source,
    };
    // Truncation is the cache's (`CachedFile::set_len`): it drops the cached pages too.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(options.writes())
        .create(options.creates())
        .create_new(options.creates_new())
        .mode(options.mode_bits())
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(open_err)?;
    let meta = file.metadata().map_err(open_err)?;
    let ft = meta.file_type();
    let kind = if ft.is_dir() {
        Some("a directory")
    } else if ft.is_fifo() {
        Some("a FIFO")
    } else if ft.is_socket() {
        Some("a socket")
    } else if ft.is_char_device() {
        Some("a character device")
    } else if ft.is_block_device() {
        Some("a block device")
    } else {
        pseudo_fs(&file)
    };
    if let Some(kind) = kind {
        return Err(CacheError::Unsupported {
            path: path.to_path_buf(),
            kind,
        });
    }
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is open for the life of `file`; F_GETFL/F_SETFL take and return an int.
    let cleared = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
    };
    if !cleared {
        return Err(open_err(std::io::Error::last_os_error()));
    }
    Ok((file, meta))
}

/// How a new inode's file is read and written: decided at its first open.
struct FileIo {
    /// The file system's largest file size (`s_maxbytes`).
    max_bytes: u64,
    /// The direct-I/O alignment, 0 for buffered I/O.
    dio_align: u32,
    /// Buffered I/O with `RWF_DONTCACHE`.
    dontcache: bool,
    /// The readahead window a handle starts with.
    ra_pages: usize,
}

/// The file systems whose regular files report no true size (their contents are made at
/// read time: `/proc` files say 0 bytes, `/sys` files 4096), by `statfs(2)` magic number.
const PSEUDO_FILE_SYSTEMS: [(i64, &str); 6] = [
    (
        0x9fa0,
        "a procfs file (its size is not known before it is read)",
    ),
    (
        0x6265_6572,
        "a sysfs file (its size is not known before it is read)",
    ),
    (
        0x6462_6720,
        "a debugfs file (its size is not known before it is read)",
    ),
    (
        0x7472_6163,
        "a tracefs file (its size is not known before it is read)",
    ),
    (
        0x2768_3e20,
        "a cgroup file (its size is not known before it is read)",
    ),
    (
        0x6367_7270,
        "a cgroup2 file (its size is not known before it is read)",
    ),
];

/// What kind of pseudo-file `file` is, if it lives on one of [`PSEUDO_FILE_SYSTEMS`].
fn pseudo_fs(file: &std::fs::File) -> Option<&'static str> {
    use std::os::unix::io::AsRawFd;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `st` is a valid out-pointer for one `statfs`; the fd is open.
    if unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: initialised by the successful call.
    let st = unsafe { st.assume_init() };
    // `f_type`'s integer type differs between targets (`__fsword_t`).
    #[allow(clippy::unnecessary_cast)]
    let magic = st.f_type as i64;
    PSEUDO_FILE_SYSTEMS
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, kind)| *kind)
}
