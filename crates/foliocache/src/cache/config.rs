//! [`Config`]: how a [`FolioCache`](super::FolioCache) is built, validated before anything
//! is allocated.

use std::fmt;

use crate::mm::folio::BudgetOverLimit;
pub use crate::mm::lru::MAX_INACTIVE_RATIO;
use crate::mm::lru::{LruConfig, LruPolicy, MAX_BATCH_SLOTS};
use crate::mm::readahead::DEFAULT_RA_PAGES;
use crate::mm::writeback::WbErrorPolicy;
use crate::mm::Experiment;

/// The default of [`Config::pinned_share`](crate::Config::pinned_share): guards may pin 75% of the
/// budget.
pub const DEFAULT_PINNED_SHARE: u32 = 75;

/// The largest readahead window accepted, in pages (8 MiB).
pub const MAX_RA_PAGES: usize = 2048;

/// Active pages per inactive one in [`Config::block_cache`] ([`Config::inactive_ratio`]).
pub const BLOCK_CACHE_INACTIVE_RATIO: u32 = 4;

/// How to build a [`FolioCache`](super::FolioCache): the memory budget, readahead, the
/// LRU's protection of frequently read pages, inode caching, and the write path's dirty
/// limits and flusher. Every setting has a default that suits a general-purpose cache;
/// [`Config::block_cache`] is the starting point for a storage engine's block cache.
///
/// The mechanism variants the lab compares (refcount strategy, readahead insertion, ...) are
/// not settings but an [`Experiment`], set with [`Config::experiment`].
///
/// ```
/// use foliocache::Config;
///
/// let config = Config::new(64 << 20)          // 64 MiB of cached data
///     .readahead_pages(64)                    // 256 KiB maximum readahead window
///     .unused_inodes(1024);                   // keep the pages of 1,024 closed files
/// assert!(config.validate().is_ok());
/// assert!(Config::new(100).validate().is_err()); // not even one page
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Bytes of folio data the cache may hold (whole 4 KiB pages).
    pub(crate) budget_bytes: usize,
    /// The mechanism variants.
    pub(crate) experiment: Experiment,
    /// Maximum readahead window in 4 KiB pages (`ra_pages`); 0 disables readahead.
    pub(crate) ra_pages: usize,
    /// `ra_pages` was set by [`Config::readahead_pages`]: files under direct I/O do not take
    /// their device's window instead.
    pub(crate) ra_pages_set: bool,
    /// The largest folio order (see [`Config::max_folio_order`]).
    pub(crate) max_folio_order: u32,
    /// Panic in the free path on a bad page (after counting it). Default: debug builds only.
    pub(crate) panic_on_bad_page: bool,
    /// Workingset detection (see [`Config::workingset`]).
    pub(crate) workingset: bool,
    /// Active pages per inactive one (see [`Config::inactive_ratio`]).
    pub(crate) inactive_ratio: Option<u32>,
    /// The LRU's replacement policy (see [`Config::lru_policy`]).
    pub(crate) lru_policy: LruPolicy,
    /// Run a background reclaimer thread (see [`Config::background_reclaim`]).
    pub(crate) background_reclaim: bool,
    /// Transparent huge pages for the cache's memory (see [`Config::huge_pages`]).
    pub(crate) huge_pages: bool,
    /// Unused inodes kept (see [`Config::unused_inodes`]).
    pub(crate) unused_inodes: usize,
    /// The dirty limit, in percent of the budget (see [`Config::dirty_ratios`]).
    pub(crate) dirty_ratio: u32,
    /// Where a throttled writer stops writing back, in percent of the budget.
    pub(crate) dirty_background_ratio: u32,
    /// What becomes of pages whose writeback failed (see [`Config::writeback_errors`]).
    pub(crate) writeback_errors: WbErrorPolicy,
    /// Run the background flusher (see [`Config::background_writeback`]).
    pub(crate) background_writeback: bool,
    /// Reclaim hands the dirty pages it meets to the flusher (see [`Config::pageout`]).
    pub(crate) pageout: bool,
    /// How long a page may stay dirty before the flusher writes it back.
    pub(crate) dirty_expire: std::time::Duration,
    /// How often the flusher wakes to look for expired dirty pages.
    pub(crate) dirty_writeback_interval: std::time::Duration,
    /// The largest budget `set_budget` may grow to (see [`Config::max_budget`]); `None`: the
    /// budget.
    pub(crate) max_budget_bytes: Option<usize>,
    /// The share of the budget guards may pin, in percent (see [`Config::pinned_share`]).
    pub(crate) pinned_share: u32,
    /// How long a pin over the limit waits (see [`Config::pin_wait`]).
    pub(crate) pin_wait: std::time::Duration,
    /// The share of the budget snapshots may hold, in percent (see [`Config::snapshot_share`]).
    pub(crate) snapshot_share: u32,
    /// [`Config::io_engine`].
    pub(crate) io_engine: crate::io::IoEngine,
    /// [`Config::direct_io`].
    pub(crate) direct_io: crate::io::DirectIo,
}

/// The default of [`Config::snapshot_share`]: snapshots may hold 25% of the budget.
pub const DEFAULT_SNAPSHOT_SHARE: u32 = 25;

/// The default of [`Config::unused_inodes`].
pub const DEFAULT_UNUSED_INODES: usize = 4096;

impl Config {
    /// A configuration with `budget_bytes` of cached data and the defaults: a 32-page
    /// (128 KiB) readahead window, workingset detection, the kernel's inactive ratio,
    /// [`DEFAULT_UNUSED_INODES`] closed files kept, the kernel's dirty ratios (20% and 10% of
    /// the budget) and flusher timing (30 s, every 5 s), and every mechanism's best variant
    /// ([`Experiment::new`]).
    pub fn new(budget_bytes: usize) -> Config {
        let lru = LruConfig::DEFAULT;
        Config {
            budget_bytes,
            experiment: Experiment::new(),
            ra_pages: DEFAULT_RA_PAGES,
            ra_pages_set: false,
            max_folio_order: crate::mm::folio::MAX_ORDER,
            panic_on_bad_page: cfg!(debug_assertions),
            workingset: lru.workingset,
            inactive_ratio: lru.inactive_ratio,
            lru_policy: lru.policy,
            background_reclaim: false,
            huge_pages: true,
            unused_inodes: DEFAULT_UNUSED_INODES,
            dirty_ratio: 20,
            dirty_background_ratio: 10,
            writeback_errors: WbErrorPolicy::Clean,
            background_writeback: true,
            pageout: false,
            dirty_expire: std::time::Duration::from_secs(30),
            dirty_writeback_interval: std::time::Duration::from_secs(5),
            max_budget_bytes: None,
            pinned_share: DEFAULT_PINNED_SHARE,
            pin_wait: std::time::Duration::ZERO,
            snapshot_share: DEFAULT_SNAPSHOT_SHARE,
            io_engine: crate::io::IoEngine::Auto,
            direct_io: crate::io::DirectIo::Auto,
        }
    }

    /// A storage engine's block cache of `budget_bytes`: [`Config::new`] tuned for random
    /// reads of blocks whose popularity is skewed and stable (an LSM tree's index and data
    /// blocks, a B-tree's pages):
    ///
    /// - readahead off, as `POSIX_FADV_RANDOM` turns it off for a file: a random block read
    ///   gains nothing from its neighbours, which would only take budget from hot blocks;
    /// - [`BLOCK_CACHE_INACTIVE_RATIO`] active pages per inactive one, where the kernel's
    ///   formula keeps the two lists level below 1 GiB (`int_sqrt(10 * GiB)`; it reaches 4 at
    ///   about 1.6 GiB). Frequently read blocks live on the active list, so a larger share
    ///   protects more of them, while workingset detection (still on) activates a block that
    ///   keeps being evicted shortly before it is read again, which is how a shifting working
    ///   set displaces stale active blocks.
    ///
    /// On the lab's `peers` trace (a 64 MiB budget over 256 MiB) the hit ratio goes from 84.3%
    /// with [`Config::new`] to 86.2% at Zipf 0.99 and from 67.4% to 69.3% at Zipf 0.8, with
    /// the active list's counted second chances ([`Experiment::active_second_chance`], on in
    /// both); on uniform reads nothing changes (no block is more popular than another).
    ///
    /// ```
    /// use foliocache::mm::lru::LruPolicy;
    /// use foliocache::Config;
    ///
    /// let config = Config::block_cache(256 << 20);
    /// assert_eq!(
    ///     config,
    ///     Config::new(256 << 20)
    ///         .readahead_pages(0)
    ///         .inactive_ratio(Some(4))
    ///         .lru_policy(LruPolicy::Protected)
    /// );
    /// assert!(config.validate().is_ok());
    /// ```
    pub fn block_cache(budget_bytes: usize) -> Config {
        Config::new(budget_bytes)
            .readahead_pages(0)
            .inactive_ratio(Some(BLOCK_CACHE_INACTIVE_RATIO))
            .lru_policy(LruPolicy::Protected)
    }

    /// A configuration for the buffer pool of an update-in-place engine with its own
    /// write-ahead log and checkpoints ([`CachedFile::write_at_lsn`](crate::CachedFile::write_at_lsn),
    /// [`FolioCache::checkpoint`](crate::FolioCache::checkpoint)): [`Config::block_cache`],
    /// with writeback left to the engine's checkpoints and to memory pressure instead of a
    /// 10% threshold and a 30 s expiry.
    ///
    /// - Reclaim hands the cold dirty pages it must evict to the flusher
    ///   ([`Config::pageout`]), at most two reclaim steps' worth at a time, so a page is
    ///   written when it is about to leave the pool (or at a checkpoint), not because the
    ///   dirty count crossed a line; the flusher skips one used again since reclaim queued it.
    /// - An allocation that finds every page dirty writes the coldest queued ones itself
    ///   (InnoDB's single-page flush), those it can without waiting: not a page locked or
    ///   latched, not one holding a change the log has not made durable (it never calls the
    ///   log hook; the flusher does). Otherwise it waits for the flusher's writes, and fails
    ///   with `OutOfMemory` only after a second in which no page was written back.
    /// - The background reclaimer ([`Config::background_reclaim`]) keeps a few pages free
    ///   ahead of the allocations (between 1/64 and 1/32 of the budget): when it meets only
    ///   dirty pages it writes the coldest queued ones itself, as an allocation does, and
    ///   frees them. So a read's allocation, which reclaims one pass at most (as readahead
    ///   allocates), finds a whole large folio free in a pool whose every other page is
    ///   dirty, and a 16 KiB block is read as one folio, not as four pages collapsed later.
    /// - So no dirty threshold at all (`dirty_ratios(100, 100)`): writeback is the
    ///   engine's checkpoints and eviction. The lab's `bufmgr` (Zipf 0.99 updates, a budget
    ///   of a quarter of the file, a checkpoint every 10 s) wrote 0.25 page writes per
    ///   update with 4 KiB pages and 0.29 with 16 KiB pages (0.24 and 0.27 misses per
    ///   update, each evicting a dirty page: the floor). With the flusher's background
    ///   threshold at 90% and the limit at 95% it wrote 0.29 and 0.35 (the threshold's
    ///   passes write hot pages in file order), with `dirty_ratios(80, 60)` and no pageout
    ///   0.40. A writer of pages that are not cached yet (`write_at` of new pages) reserves
    ///   its dirty page before it allocates one: it is throttled once the whole pool is
    ///   dirty and writes its file back in file order.
    /// - Pages expire after 10 minutes (`dirty_expire`), a backstop for an engine that stops
    ///   checkpointing; the engine's checkpoint interval should be well below it.
    ///
    /// The trade-off: more dirty pages means a longer checkpoint and more to lose on a crash
    /// before the log is replayed (the log covers it), and a writer that does reach the
    /// limit writes back more at once. The reclaimer's free pages are pages the pool does
    /// not cache: 1/64 to 1/32 of a large budget, but at least 32 to 64 pages, so a pool of
    /// 256 pages keeps up to a quarter free (`background_reclaim(false)` gives them back, and
    /// a read then falls back to smaller folios when it meets only dirty pages). A
    /// read-mostly cache wants [`Config::block_cache`].
    ///
    /// ```
    /// use foliocache::Config;
    ///
    /// let config = Config::buffer_pool(256 << 20);
    /// assert!(config.validate().is_ok());
    /// ```
    pub fn buffer_pool(budget_bytes: usize) -> Config {
        Config::block_cache(budget_bytes)
            .dirty_ratios(100, 100)
            .background_reclaim(true)
            .dirty_expire(
                std::time::Duration::from_secs(600),
                std::time::Duration::from_secs(5),
            )
            .pageout(true)
    }

    /// Chooses how the cache's reads and writes reach its files ([`IoEngine`](crate::IoEngine)):
    /// `Auto` (the default) is io_uring where the kernel allows it and a pool of I/O threads
    /// otherwise; the cache reports the one it got ([`FolioCache::io_engine`](crate::FolioCache::io_engine)).
    /// The environment variable `FOLIOCACHE_IO_ENGINE` (`auto`, `uring`, `pool`, `sync`)
    /// overrides this choice.
    pub fn io_engine(mut self, engine: crate::io::IoEngine) -> Config {
        self.io_engine = engine;
        self
    }

    /// Chooses whether files are read and written with direct I/O ([`DirectIo`](crate::DirectIo)):
    /// `Auto` (the default) where the file system supports it, so the kernel keeps no second
    /// copy of what the cache holds; `Off` through the kernel's page cache; `On` requires it
    /// (opening a file on a file system without it fails). The environment variable
    /// `FOLIOCACHE_DIRECT_IO` (`auto`, `on`, `off`) overrides this choice.
    pub fn direct_io(mut self, mode: crate::io::DirectIo) -> Config {
        self.direct_io = mode;
        self
    }

    /// Sets the largest folio a file's pages are cached in, as a power of two of pages: a
    /// readahead window, or a read that misses several pages, fills the range with folios of
    /// up to `2^order` pages (aligned to their size, as the kernel's large folios are), each
    /// one reference count, one LRU entry and one index entry. Default
    /// [`MAX_ORDER`](crate::mm::folio::MAX_ORDER) (2 MiB); 0 caches every page in its own
    /// folio. A file can opt out ([`CachedFile::set_large_folios`](super::CachedFile::set_large_folios)).
    pub fn max_folio_order(mut self, order: u32) -> Config {
        self.max_folio_order = order;
        self
    }

    /// The budget: bytes of folio data the cache may hold.
    pub fn budget_bytes(&self) -> usize {
        self.budget_bytes
    }

    /// Reserves room for the budget to grow at run time to `bytes`
    /// ([`FolioCache::set_budget`](super::FolioCache::set_budget)); default: the budget
    /// itself, so the budget can shrink and grow back but not beyond. The reserve's data
    /// frames are not touched until the budget grows into them, but its page headers are
    /// written when the cache is built (about 3.4% of the reserve), and the maximum must pass
    /// the same check as a budget: with its metadata it must fit in this machine's memory and
    /// the address-space limit.
    pub fn max_budget(mut self, bytes: usize) -> Config {
        self.max_budget_bytes = Some(bytes);
        self
    }

    /// The largest budget [`FolioCache::set_budget`](super::FolioCache::set_budget) accepts,
    /// in bytes ([`Config::max_budget`], or the budget).
    pub fn max_budget_bytes(&self) -> usize {
        self.max_budget_bytes.unwrap_or(self.budget_bytes)
    }

    /// Sets the share of the budget, in percent (1 to 100), that pinned guards
    /// ([`PinnedFolio`](crate::PinnedFolio), [`OwnedFolio`](crate::OwnedFolio),
    /// [`FolioMut`](crate::FolioMut)) may hold at once; a pin beyond it waits up to
    /// [`Config::pin_wait`] and then fails with
    /// [`CacheError::PinLimit`](crate::CacheError::PinLimit). Default
    /// [`DEFAULT_PINNED_SHARE`] (75%): the rest keeps room for what the cache needs to make
    /// progress while guards are held: a readahead window, the pages writers may keep dirty
    /// ([`Config::dirty_ratios`], 20% by default) and copying reads. The limit is kept by
    /// per-CPU counters (`percpu_counter`), exact near the limit; it may be passed by at most
    /// one page per thread pinning at that very instant.
    pub fn pinned_share(mut self, percent: u32) -> Config {
        self.pinned_share = percent;
        self
    }

    /// Sets how long a pin over [`Config::pinned_share`] waits for guards to be dropped
    /// before it fails (default zero: it fails at once, which suits a server that would
    /// rather copy with [`CachedFile::read_at`](crate::CachedFile::read_at) than wait).
    pub fn pin_wait(mut self, wait: std::time::Duration) -> Config {
        self.pin_wait = wait;
        self
    }

    /// Sets the share of the budget, in percent (1 to 100), that snapshots
    /// ([`CachedFile::snapshot`](crate::CachedFile::snapshot)) may hold at once: the old
    /// versions of pages written since a live snapshot was taken, which the cache cannot
    /// evict while the snapshot lives. A page held by two snapshots counts twice. Captured
    /// pages count against [`Config::pinned_share`] too, as pins do. A write that would
    /// capture a page beyond either limit fails with
    /// [`CacheError::SnapshotLimit`](crate::CacheError::SnapshotLimit), the file unchanged
    /// at that page. Default [`DEFAULT_SNAPSHOT_SHARE`] (25%).
    pub fn snapshot_share(mut self, percent: u32) -> Config {
        self.snapshot_share = percent;
        self
    }

    /// Sets the mechanism variants ([`Experiment`]; default [`Experiment::new`], every seed's
    /// improvement). For the lab and for experiments: a storage engine keeps the default.
    pub fn experiment(mut self, experiment: Experiment) -> Config {
        self.experiment = experiment;
        self
    }

    /// Sets the maximum readahead window in 4 KiB pages (`ra_pages`); 0 disables readahead,
    /// at most [`MAX_RA_PAGES`].
    ///
    /// By default a file read through the kernel's page cache gets 32 pages (128 KiB, the
    /// kernel's default `read_ahead_kb`: the kernel's own readahead streams the device behind
    /// it), and a file under direct I/O gets its block device's `read_ahead_kb` (the
    /// kernel's `file_ra_state_init` takes `bdi->ra_pages`; 8 MiB on the virtio disk these
    /// figures come from), up to [`MAX_RA_PAGES`]: with direct I/O the cache's readahead is
    /// the only one, and a sequential reader needs the device's window to keep it busy.
    /// Setting a value here applies it to every file.
    pub fn readahead_pages(mut self, pages: usize) -> Config {
        self.ra_pages = pages;
        self.ra_pages_set = true;
        self
    }

    /// Turns workingset detection on or off (default on): reclaim leaves
    /// shadow entries in the index, and a page read again within the active list's size of
    /// its eviction is activated at once (`mm/workingset.c`). Off gives the plain two-list
    /// LRU, for measuring the difference.
    pub fn workingset(mut self, on: bool) -> Config {
        self.workingset = on;
        self
    }

    /// Sets the LRU's replacement policy (default [`LruPolicy::TwoList`], the kernel's
    /// active and inactive lists). [`LruPolicy::Protected`] keeps a protected set that loops
    /// longer than the budget cannot flush, and sizes the inactive list as ARC sizes its
    /// recency share: see [`workingset`](crate::mm::lru::workingset) for the rules and the
    /// README's block-cache advice for the measurements.
    pub fn lru_policy(mut self, policy: LruPolicy) -> Config {
        self.lru_policy = policy;
        self
    }

    /// Sets how many active pages are kept per inactive one before reclaim deactivates
    /// (`inactive_ratio`); `None` (the default) computes it as the kernel does from the
    /// lists' size: `int_sqrt(10 * GiB)`, 1 below 1 GiB; at most [`MAX_INACTIVE_RATIO`]. A
    /// larger ratio protects frequently read blocks longer and adapts more slowly when the
    /// working set moves ([`Config::block_cache`] uses [`BLOCK_CACHE_INACTIVE_RATIO`]).
    pub fn inactive_ratio(mut self, ratio: Option<u32>) -> Config {
        self.inactive_ratio = ratio;
        self
    }

    /// Runs a background reclaimer thread (the kswapd analog): woken when free pages fall
    /// below the low watermark, it reclaims up to the high one so that allocations rarely
    /// stall. Default off: reclaim happens only in allocating threads (direct reclaim).
    pub fn background_reclaim(mut self, on: bool) -> Config {
        self.background_reclaim = on;
        self
    }

    /// Backs the cached data and its headers with transparent huge pages, as the kernel's
    /// direct map is (fewer TLB misses on random reads). Default on; ignored where the kernel
    /// has no huge pages to give.
    pub fn huge_pages(mut self, on: bool) -> Config {
        self.huge_pages = on;
        self
    }

    /// Sets how many unused inodes (files no handle or guard uses) the inode cache keeps, with
    /// their pages, for a later `open`; beyond it the least recently used is evicted.
    /// Default [`DEFAULT_UNUSED_INODES`]; 0 drops a file's pages when its last handle closes.
    pub fn unused_inodes(mut self, n: usize) -> Config {
        self.unused_inodes = n;
        self
    }

    /// Sets the dirty limit and the background threshold, in percent of the budget
    /// (`vm.dirty_ratio` and `vm.dirty_background_ratio`, default 20 and 10). The limit bounds
    /// dirty pages plus pages being written back, as the kernel's does: a writer that would
    /// take them past it writes dirty pages back first, down to the background threshold (or
    /// waits for the pass that is writing its file), so reclaim always finds clean pages to
    /// free; above the background threshold (dirty pages only) the flusher writes back.
    /// Valid: `1 <= background <= ratio <= 100`.
    pub fn dirty_ratios(mut self, ratio: u32, background: u32) -> Config {
        self.dirty_ratio = ratio;
        self.dirty_background_ratio = background;
        self
    }

    /// Sets the flusher's timing: how long a page may stay dirty before the flusher writes it
    /// back (`dirty_expire_centisecs`, default 30 s), and how often it wakes to look
    /// (`dirty_writeback_centisecs`, default 5 s; must not be zero).
    pub fn dirty_expire(
        mut self,
        expire: std::time::Duration,
        interval: std::time::Duration,
    ) -> Config {
        self.dirty_expire = expire;
        self.dirty_writeback_interval = interval;
        self
    }

    /// Runs the background flusher thread (started by the first write): it writes back files
    /// dirty for longer than the expiry of [`Config::dirty_expire`] and, above the background
    /// threshold, until under it. Default on; off, dirty pages reach the backing only through
    /// syncs, writers at the dirty limit, inode eviction and the cache's drop.
    pub fn background_writeback(mut self, on: bool) -> Config {
        self.background_writeback = on;
        self
    }

    /// Reclaim's `pageout()`: the dirty pages reclaim meets at the tail of the inactive list
    /// (the coldest, about to be evicted) are handed to the background flusher, which writes
    /// them first; each is then rotated back to the tail when its write ends
    /// (`folio_rotate_reclaimable`) and freed by the next scan. The kernel's kswapd writes
    /// such pages itself (`pageout()` in `shrink_folio_list`); here the flusher does, and so
    /// do the background reclaimer ([`Config::background_reclaim`]) and an allocation that
    /// finds no clean page, for the queued pages they can write without waiting (not one
    /// locked, nor one holding a change the log has not made durable: only the flusher
    /// calls the log hook). Without it (the default), reclaim only marks them
    /// (`PG_reclaim`) and leaves their writeback to the dirty limit and the flusher's
    /// passes, which write a file's dirty pages in file order, hot ones included: a cache
    /// whose pages are almost all dirty (a buffer pool smaller than its working set) then
    /// writes pages that are dirtied again at once. Needs the flusher
    /// ([`Config::background_writeback`]); on in [`Config::buffer_pool`].
    pub fn pageout(mut self, on: bool) -> Config {
        self.pageout = on;
        self
    }

    /// Sets what becomes of pages whose writeback failed ([`WbErrorPolicy`]; default the
    /// kernel's: they are marked clean and the error is reported to every handle's next
    /// sync).
    pub fn writeback_errors(mut self, policy: WbErrorPolicy) -> Config {
        self.writeback_errors = policy;
        self
    }

    /// Sets whether a bad page found when a folio is freed panics (after it is counted).
    /// Default: in debug builds only.
    pub fn panic_on_bad_page(mut self, panic: bool) -> Config {
        self.panic_on_bad_page = panic;
        self
    }

    /// The [`LruConfig`] this configuration builds: the replacement policy, inactive ratio and
    /// workingset detection set here, with the experiment's LRU switches.
    ///
    /// ```
    /// use foliocache::mm::lru::LruPolicy;
    /// use foliocache::Config;
    ///
    /// assert_eq!(Config::new(1 << 20).lru_config().policy, LruPolicy::TwoList);
    /// assert_eq!(Config::block_cache(1 << 20).lru_config().policy, LruPolicy::Protected);
    /// ```
    pub fn lru_config(&self) -> LruConfig {
        self.experiment
            .lru_config(self.workingset, self.inactive_ratio, self.lru_policy)
    }

    /// Checks the configuration; [`FolioCache::new`](super::FolioCache::new) calls it first.
    ///
    /// Every field with values that cannot work is checked: the budget (at least one page,
    /// below the 16 TiB an arena can address, and with its metadata within this machine's
    /// physical memory and the process's address-space limit: see
    /// [`check_budget`](crate::mm::folio::check_budget)), the readahead window, and the LRU's
    /// batch slots and inactive ratio. The other fields are enums and switches, valid
    /// whatever their value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let pages = self.budget_bytes / crate::mm::folio::PAGE_SIZE;
        if pages == 0 {
            return Err(ConfigError::BudgetTooSmall {
                budget_bytes: self.budget_bytes,
            });
        }
        if pages >= u32::MAX as usize {
            return Err(ConfigError::BudgetTooLarge {
                budget_bytes: self.budget_bytes,
            });
        }
        if self.ra_pages > MAX_RA_PAGES {
            return Err(ConfigError::WindowTooLarge {
                ra_pages: self.ra_pages,
            });
        }
        if self.max_folio_order > crate::mm::folio::MAX_ORDER {
            return Err(ConfigError::FolioOrderTooLarge {
                order: self.max_folio_order,
            });
        }
        if self.dirty_writeback_interval.is_zero() {
            return Err(ConfigError::FlushInterval);
        }
        if self.dirty_ratio == 0
            || self.dirty_ratio > 100
            || self.dirty_background_ratio == 0
            || self.dirty_background_ratio > self.dirty_ratio
        {
            return Err(ConfigError::DirtyRatios {
                ratio: self.dirty_ratio,
                background: self.dirty_background_ratio,
            });
        }
        if self.experiment.batch_slots > MAX_BATCH_SLOTS {
            return Err(ConfigError::BatchSlotsTooMany {
                batch_slots: self.experiment.batch_slots,
            });
        }
        if let Some(ratio) = self.inactive_ratio.filter(|&r| r > MAX_INACTIVE_RATIO) {
            return Err(ConfigError::InactiveRatioTooLarge { ratio });
        }
        let max = self.max_budget_bytes();
        if max / crate::mm::folio::PAGE_SIZE < pages {
            return Err(ConfigError::MaxBudgetBelowBudget {
                budget_bytes: self.budget_bytes,
                max_budget_bytes: max,
            });
        }
        if max / crate::mm::folio::PAGE_SIZE >= u32::MAX as usize {
            return Err(ConfigError::BudgetTooLarge { budget_bytes: max });
        }
        if self.pinned_share == 0 || self.pinned_share > 100 {
            return Err(ConfigError::PinnedShare {
                percent: self.pinned_share,
            });
        }
        if self.snapshot_share == 0 || self.snapshot_share > 100 {
            return Err(ConfigError::SnapshotShare {
                percent: self.snapshot_share,
            });
        }
        // The arena maps the maximum: that is what must fit.
        crate::mm::folio::check_budget(max).map_err(ConfigError::BudgetExceedsMemory)?;
        Ok(())
    }
}

/// A [`Config`] that cannot work.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The budget holds no whole 4 KiB page.
    BudgetTooSmall {
        /// The budget given.
        budget_bytes: usize,
    },
    /// [`Config::max_folio_order`] exceeds [`MAX_ORDER`](crate::mm::folio::MAX_ORDER).
    FolioOrderTooLarge {
        /// The order given.
        order: u32,
    },
    /// The readahead window exceeds [`MAX_RA_PAGES`].
    WindowTooLarge {
        /// The window given.
        ra_pages: usize,
    },
    /// The flusher interval of [`Config::dirty_expire`] is zero.
    FlushInterval,
    /// The dirty ratios are not `0 < background <= ratio <= 100`.
    DirtyRatios {
        /// The dirty limit ([`Config::dirty_ratios`]).
        ratio: u32,
        /// The background threshold ([`Config::dirty_ratios`]).
        background: u32,
    },
    /// The budget holds more pages than a 32-bit frame number can name (16 TiB).
    BudgetTooLarge {
        /// The budget given.
        budget_bytes: usize,
    },
    /// The budget and its metadata do not fit in this machine's physical memory or in the
    /// process's address-space limit.
    BudgetExceedsMemory(BudgetOverLimit),
    /// [`Experiment::batch_slots`] exceeds [`MAX_BATCH_SLOTS`].
    BatchSlotsTooMany {
        /// The number given.
        batch_slots: usize,
    },
    /// [`Config::inactive_ratio`] exceeds [`MAX_INACTIVE_RATIO`].
    InactiveRatioTooLarge {
        /// The ratio given.
        ratio: u32,
    },
    /// [`Config::max_budget`] is below the budget.
    MaxBudgetBelowBudget {
        /// The budget given.
        budget_bytes: usize,
        /// The maximum given.
        max_budget_bytes: usize,
    },
    /// [`Config::pinned_share`] is not a percentage from 1 to 100.
    PinnedShare {
        /// The share given.
        percent: u32,
    },
    /// [`Config::snapshot_share`] is not a percentage from 1 to 100.
    SnapshotShare {
        /// The share given.
        percent: u32,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConfigError::BudgetTooSmall { budget_bytes } => write!(
                f,
                "memory budget of {budget_bytes} bytes holds no 4 KiB page: give the cache at \
                 least 4096 bytes (one page)"
            ),
            ConfigError::FlushInterval => write!(
                f,
                "the flusher's interval is zero: give it a positive duration (the kernel's is \
                 5 s), or turn the flusher off with background_writeback(false)"
            ),
            ConfigError::DirtyRatios { ratio, background } => write!(
                f,
                "dirty ratios {ratio}% (limit) and {background}% (background) are invalid: give \
                 1 <= background <= limit <= 100 percent of the budget (the kernel's defaults are \
                 20 and 10)"
            ),
            ConfigError::FolioOrderTooLarge { order } => write!(
                f,
                "max_folio_order {order} is too large: folios hold at most 2^{} pages (2 MiB)",
                crate::mm::folio::MAX_ORDER
            ),
            ConfigError::WindowTooLarge { ra_pages } => write!(
                f,
                "readahead window of {ra_pages} pages is too large: use at most {MAX_RA_PAGES} pages \
                 (8 MiB), or 0 to disable readahead"
            ),
            ConfigError::BudgetTooLarge { budget_bytes } => write!(
                f,
                "memory budget of {budget_bytes} bytes is too large: a cache addresses at most \
                 16 TiB (2^32 - 1 pages of 4 KiB)"
            ),
            ConfigError::BudgetExceedsMemory(ref e) => e.fmt(f),
            ConfigError::BatchSlotsTooMany { batch_slots } => write!(
                f,
                "Experiment::batch_slots of {batch_slots} is too large: use 0 (one set per CPU, the \
                 default) or 1..={MAX_BATCH_SLOTS}"
            ),
            ConfigError::InactiveRatioTooLarge { ratio } => write!(
                f,
                "inactive_ratio of {ratio} is too large: use None (the kernel's formula, \
                 the default) or Some(0..={MAX_INACTIVE_RATIO})"
            ),
            ConfigError::MaxBudgetBelowBudget {
                budget_bytes,
                max_budget_bytes,
            } => write!(
                f,
                "max_budget of {max_budget_bytes} bytes is below the budget of {budget_bytes}                  bytes: give a maximum at least as large as the budget, or leave it unset"
            ),
            ConfigError::PinnedShare { percent } => write!(
                f,
                "pinned_share of {percent}% is invalid: give 1 to 100 percent of the budget \
                 (default {DEFAULT_PINNED_SHARE})"
            ),
            ConfigError::SnapshotShare { percent } => write!(
                f,
                "snapshot_share of {percent}% is invalid: give 1 to 100 percent of the budget \
                 (default {DEFAULT_SNAPSHOT_SHARE})"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}
