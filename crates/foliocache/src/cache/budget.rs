//! Budget controls: the budget changed at run time ([`FolioCache::set_budget`](crate::FolioCache::set_budget)), the share of it
//! that pinned guards may hold ([`Config::pinned_share`](crate::Config::pinned_share)), the
//! uncached read that serves a copying read when no page can be had, and the eviction listener
//! ([`FolioCache::set_eviction_listener`](crate::FolioCache::set_eviction_listener)).
//!
//! # For a storage engine
//!
//! - **Resizing.** [`FolioCache::set_budget`](crate::FolioCache::set_budget) moves the budget anywhere between one page and
//!   [`Config::max_budget`](crate::Config::max_budget) (default: the budget the cache was built
//!   with), while the cache is in use. Shrinking evicts cold pages (writing dirty ones back first)
//!   until the cache fits; if pinned guards or pages that cannot be written back keep it from
//!   fitting, the call changes nothing and says how many pages it could not free and why.
//!   Everything derived from the budget follows: [`CacheStats::budget_pages`](crate::CacheStats),
//!   the dirty limit and background threshold, the background reclaimer's watermarks, the
//!   workingset's shadow-node limit and the pin limit.
//! - **Pins.** Guards ([`PinnedFolio`](crate::PinnedFolio), [`OwnedFolio`](crate::OwnedFolio),
//!   [`FolioMut`](crate::FolioMut)) hold their pages until dropped; the cache cannot evict them. If
//!   guards held the whole budget, every read would fail. So guards may hold at most
//!   [`Config::pinned_share`](crate::Config::pinned_share) of the budget (default
//!   [`DEFAULT_PINNED_SHARE`]%: the last quarter keeps room for a readahead window, the dirty pages
//!   writers may hold (20% by default) and copying reads); a pin over it waits up to
//!   [`Config::pin_wait`](crate::Config::pin_wait) for a guard to be dropped (default: not at all)
//!   and then fails with [`CacheError::PinLimit`].
//! - **Copying reads never starve.** Should the budget still be used up (pins below the limit plus
//!   dirty pages, a budget shrunk under pins), [`CachedFile::read_at`] reads the missing pages
//!   straight from the file into the caller's buffer, uncached, as `O_DIRECT` would, and counts
//!   them in [`CacheStats::uncached_reads`](crate::CacheStats).
//! - **Evictions.** A listener set with [`FolioCache::set_eviction_listener`](crate::FolioCache::set_eviction_listener) hears of pages
//!   leaving the cache ([`Eviction`]): to drop an engine's own index of cached blocks, or to count
//!   what a working set lost.
//!
//! # The kernel mechanisms mirrored
//!
//! | kernel | here |
//! |---|---|
//! | virtio-balloon: `balloon_page_alloc`, `fill_balloon`, `leak_balloon` | the balloon: the arena maps [`Config::max_budget`](crate::Config::max_budget); the pages above the budget are allocated (reclaiming, as a guest's balloon driver does under `__GFP_DIRECT_RECLAIM`) and held, never cached; growing frees them |
//! | `percpu_counter_limited_add`, `__percpu_counter_compare` | the pin limit ([`Limit`]): per-CPU slots folded in batches, summed exactly near the limit |
//! | `O_DIRECT` reads (`iomap_dio_rw`) | the uncached fallback of `read_at` |
//! | the `mm_filemap_delete_from_page_cache` tracepoint, `cleancache_put_page` | the eviction listener |
//!
//! The balloon is what a virtual machine's host does to take memory back from a running guest: the
//! guest's balloon driver allocates pages, which the guest's own reclaim frees for it, and hands
//! them to the host; the guest's memory is unchanged, its usable part smaller. Here the arena is
//! the guest: its size (`max_budget`) never changes, since its memory is mapped once. The
//! data frames above the budget are never touched until the budget grows into them, but the
//! balloon allocates their headers from the start: a reserve costs its metadata
//! ([`METADATA_BYTES_PER_PAGE`](crate::mm::folio::METADATA_BYTES_PER_PAGE) a page, about 3.4%)
//! and a moment per page when the cache is built (listing the reserve lazily in the buddy
//! allocator instead is left to do). A balloon page is an ordinary order-0 folio with one
//! reference, never in an index or on the LRU: reclaim cannot take it, the free-page count
//! excludes it, and validation sees it as an allocated folio, which it is.
//!
//! # The hard parts
//!
//! - **Where the listener runs.** Reclaim runs inside allocations, and an allocating reader
//!   may hold the locked folios of its readahead window, or a writer its file's `i_rwsem`: a
//!   listener called there that read the same pages would wait on its own thread. So
//!   reclaim only collects ([`Budget::note`], a leaf lock), and the public calls that can
//!   evict deliver when they are about to return, holding nothing (`deliver`); a thread
//!   already delivering does not deliver again from inside its listener, so a listener that
//!   evicts (by reading) cannot recurse.
//! - **Keeping pins off the hit path's shared lines.** A pin charges one slot of a
//!   [`Limit`] (per-CPU, folded every batch) and reads the folded total; only within the
//!   slots' possible error of the limit does it sum them under a lock. A copying read hit
//!   charges nothing.
//!
//! # Invariants
//!
//! - `budget_pages + balloon_pages == arena pages`, changed under `resize` only; readers of the
//!   budget load `balloon_pages` (Relaxed: a budget read during a resize is either side's).
//! - A shrink is all or nothing: the pages it allocated are freed again if it cannot reach the new
//!   budget, and the derived limits change only once it has.
//! - The listener is called with no lock of the cache held (module docs of `deliver`).

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use crate::mm::percpu_counter::Limit;
use crate::mm::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering};

/// Why pages left the cache ([`Eviction::reason`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EvictionReason {
    /// Reclaim made room for other pages (the LRU's coldest went; `shrink_folio_list`).
    Reclaim,
    /// [`CachedFile::invalidate`](crate::CachedFile::invalidate) or [`FolioCache::drop_caches`](crate::FolioCache::drop_caches)
    /// (`invalidate_mapping_pages`), or the file was found changed behind the cache's back
    /// ([`FolioCache::open`](crate::FolioCache::open), [`CachedFile::refresh`](crate::CachedFile::refresh)).
    Invalidate,
    /// The file was truncated below these pages
    /// ([`CachedFile::set_len`](crate::CachedFile::set_len); `truncate_inode_pages_range`).
    Truncate,
    /// The file left the inode cache (beyond
    /// [`Config::unused_inodes`](crate::Config::unused_inodes), [`FolioCache::drop_caches`](crate::FolioCache::drop_caches), a
    /// custom backing's last handle, or the cache's drop), taking its pages
    /// (`truncate_inode_pages_final`).
    InodeEviction,
    /// Reclaim made room for a smaller budget ([`FolioCache::set_budget`](crate::FolioCache::set_budget)).
    Balloon,
}

/// Pages that left the cache, told to the eviction listener
/// ([`FolioCache::set_eviction_listener`](crate::FolioCache::set_eviction_listener)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Eviction {
    /// The path the file was opened with (the name given to `open_backing` for a custom backing).
    pub path: PathBuf,
    /// The file's device and inode numbers (`None` for a custom backing).
    pub dev_ino: Option<(u64, u64)>,
    /// The page numbers (byte offset / 4096) concerned: one folio's for reclaim and the balloon,
    /// the range asked for by an invalidation or truncation, the whole file for an inode eviction.
    pub pages: Range<u64>,
    /// Pages that left the cache: `pages.end - pages.start` for reclaim, what was freed of the
    /// range otherwise (pinned pages, and pages under I/O, stay).
    pub nr_pages: u64,
    /// Why.
    pub reason: EvictionReason,
}

/// The eviction listener's type.
pub type EvictionListener = Arc<dyn Fn(&Eviction) + Send + Sync>;

/// The budget state of a cache: the balloon, the pin limit, the eviction listener.
pub(crate) struct Budget {
    /// The balloon's pages (frame numbers), each held by one reference.
    pub(super) balloon: Mutex<Vec<u32>>,
    /// `balloon.len()`, for lock-free readers of the budget.
    pub(super) balloon_pages: AtomicU64,
    /// Held by `set_budget` (one resize at a time).
    pub(super) resize: Mutex<()>,
    /// Pages pinned by guards, under `pinned_share` of the budget.
    pub(crate) pins: Limit,
    /// [`Config::pinned_share`](crate::Config::pinned_share), percent.
    pub(super) pinned_share: u32,
    /// Pages snapshots hold (`cache/snapshot.rs`), under `snapshot_share` of the budget.
    pub(crate) snapshots: Limit,
    /// [`Config::snapshot_share`](crate::Config::snapshot_share), percent.
    pub(super) snapshot_share: u32,
    /// [`Config::pin_wait`](crate::Config::pin_wait).
    pub(super) pin_wait: Duration,
    /// The eviction listener, if set.
    pub(super) listener: Mutex<Option<EvictionListener>>,
    /// Whether a listener is set (evictions are collected only then).
    pub(super) listening: AtomicBool,
    /// Evictions collected, not yet told (`deliver`).
    pub(super) pending: Mutex<Vec<Eviction>>,
    /// Whether `pending` may be non-empty.
    pub(super) has_pending: AtomicBool,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("balloon_pages", &self.balloon_pages.load(Ordering::Relaxed))
            .field("pin_limit", &self.pins.limit())
            .finish()
    }
}

crate::mm::sync::thread_local! {
    /// Why the calling thread is reclaiming (the balloon sets it while it inflates).
    static RECLAIM_REASON: std::cell::Cell<EvictionReason> =
        const { std::cell::Cell::new(EvictionReason::Reclaim) };
    /// The calling thread is running the eviction listener (no nested delivery).
    static DELIVERING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The pin limit for `budget_pages` at `share` percent (at least one page).
pub(super) fn pin_limit(budget_pages: u64, share: u32) -> u64 {
    (budget_pages * share as u64 / 100).max(1)
}

impl Budget {
    /// The budget state of an arena of `max_pages`, whose budget is `budget_pages`: the balloon is
    /// inflated by `Core::init_balloon`.
    pub(crate) fn new(
        budget_pages: u64,
        pinned_share: u32,
        snapshot_share: u32,
        pin_wait: Duration,
    ) -> Budget {
        Budget {
            balloon: Mutex::new(Vec::new()),
            balloon_pages: AtomicU64::new(0),
            resize: Mutex::new(()),
            pins: Limit::new(pin_limit(budget_pages, pinned_share)),
            pinned_share,
            snapshots: Limit::new(pin_limit(budget_pages, snapshot_share)),
            snapshot_share,
            pin_wait,
            listener: Mutex::new(None),
            listening: AtomicBool::new(false),
            pending: Mutex::new(Vec::new()),
            has_pending: AtomicBool::new(false),
        }
    }

    /// Pages in the balloon (the arena's pages above the budget).
    #[inline]
    pub(crate) fn balloon_pages(&self) -> u64 {
        self.balloon_pages.load(Ordering::Relaxed)
    }

    /// Whether evictions are to be collected.
    #[inline]
    pub(crate) fn listening(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }

    /// The reason a reclaim in this thread evicts for.
    pub(crate) fn reclaim_reason() -> EvictionReason {
        RECLAIM_REASON.with(|r| r.get())
    }

    /// Queues an eviction for the listener (a no-op without one).
    pub(crate) fn note(&self, e: Eviction) {
        if !self.listening() || e.nr_pages == 0 {
            return;
        }
        self.pending.lock().push(e);
        self.has_pending.store(true, Ordering::Relaxed);
    }

    /// Sets the reason reclaim in this thread evicts for, returning the one it replaces.
    pub(crate) fn set_reclaim_reason(reason: EvictionReason) -> EvictionReason {
        RECLAIM_REASON.with(|r| r.replace(reason))
    }

    /// Tells the listener of the evictions collected so far, in this thread, which must hold no
    /// lock of the cache (called at the end of the public calls that can evict, and by the
    /// background reclaimer after a pass). A listener that calls back into the cache may evict
    /// more: that is told by the next delivery, never from inside this one.
    pub(crate) fn deliver(&self) {
        if !self.has_pending.load(Ordering::Relaxed) || DELIVERING.with(|d| d.get()) {
            return;
        }
        self.deliver_slow();
    }

    #[cold]
    fn deliver_slow(&self) {
        let Some(listener) = self.listener.lock().clone() else {
            return;
        };
        let batch = {
            let mut p = self.pending.lock();
            self.has_pending.store(false, Ordering::Relaxed);
            std::mem::take(&mut *p)
        };
        DELIVERING.with(|d| d.set(true));
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                DELIVERING.with(|d| d.set(false));
            }
        }
        let _reset = Reset;
        for e in &batch {
            listener(e);
        }
    }
}
