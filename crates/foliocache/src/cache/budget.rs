//! Budget controls: the budget changed at run time ([`FolioCache::set_budget`]), the share of it
//! that pinned guards may hold ([`Config::pinned_share`](crate::Config::pinned_share)), the
//! uncached read that serves a copying read when no page can be had, and the eviction listener
//! ([`FolioCache::set_eviction_listener`]).
//!
//! # For a storage engine
//!
//! - **Resizing.** [`FolioCache::set_budget`] moves the budget anywhere between one page and
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
//! - **Evictions.** A listener set with [`FolioCache::set_eviction_listener`] hears of pages
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

use super::error::BudgetError;
use super::inode::Inode;
use super::stats::Event;
use super::{CacheError, CacheInner, FolioCache};
use crate::mm::folio::{PAGE_SHIFT, PAGE_SIZE};
use crate::mm::percpu_counter::Limit;
use crate::mm::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering};

/// Why pages left the cache ([`Eviction::reason`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EvictionReason {
    /// Reclaim made room for other pages (the LRU's coldest went; `shrink_folio_list`).
    Reclaim,
    /// [`CachedFile::invalidate`](crate::CachedFile::invalidate) or [`FolioCache::drop_caches`]
    /// (`invalidate_mapping_pages`), or the file was found changed behind the cache's back
    /// ([`FolioCache::open`], [`CachedFile::refresh`](crate::CachedFile::refresh)).
    Invalidate,
    /// The file was truncated below these pages
    /// ([`CachedFile::set_len`](crate::CachedFile::set_len); `truncate_inode_pages_range`).
    Truncate,
    /// The file left the inode cache (beyond
    /// [`Config::unused_inodes`](crate::Config::unused_inodes), [`FolioCache::drop_caches`], a
    /// custom backing's last handle, or the cache's drop), taking its pages
    /// (`truncate_inode_pages_final`).
    InodeEviction,
    /// Reclaim made room for a smaller budget ([`FolioCache::set_budget`]).
    Balloon,
}

/// Pages that left the cache, told to the eviction listener
/// ([`FolioCache::set_eviction_listener`]).
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
    balloon: Mutex<Vec<u32>>,
    /// `balloon.len()`, for lock-free readers of the budget.
    balloon_pages: AtomicU64,
    /// Held by `set_budget` (one resize at a time).
    resize: Mutex<()>,
    /// Pages pinned by guards, under `pinned_share` of the budget.
    pub(crate) pins: Limit,
    /// [`Config::pinned_share`](crate::Config::pinned_share), percent.
    pinned_share: u32,
    /// [`Config::pin_wait`](crate::Config::pin_wait).
    pin_wait: Duration,
    /// The eviction listener, if set.
    listener: Mutex<Option<EvictionListener>>,
    /// Whether a listener is set (evictions are collected only then).
    listening: AtomicBool,
    /// Evictions collected, not yet told (`deliver`).
    pending: Mutex<Vec<Eviction>>,
    /// Whether `pending` may be non-empty.
    has_pending: AtomicBool,
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
fn pin_limit(budget_pages: u64, share: u32) -> u64 {
    (budget_pages * share as u64 / 100).max(1)
}

impl Budget {
    /// The budget state of an arena of `max_pages`, whose budget is `budget_pages`: the balloon is
    /// inflated by [`CacheInner::init_balloon`].
    pub(crate) fn new(budget_pages: u64, pinned_share: u32, pin_wait: Duration) -> Budget {
        Budget {
            balloon: Mutex::new(Vec::new()),
            balloon_pages: AtomicU64::new(0),
            resize: Mutex::new(()),
            pins: Limit::new(pin_limit(budget_pages, pinned_share)),
            pinned_share,
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
}

impl CacheInner {
    /// Pages in the budget now (the arena's, less the balloon's).
    #[inline]
    pub(crate) fn budget_pages(&self) -> u64 {
        self.arena.nr_pages() as u64 - self.budget.balloon_pages()
    }

    /// Inflates the balloon to hold every page above `budget_pages` at construction (the arena is
    /// empty: no reclaim needed).
    pub(crate) fn init_balloon(&self, budget_pages: u64) -> Result<(), CacheError> {
        let want = self.arena.nr_pages() as u64 - budget_pages;
        let mut b = self.budget.balloon.lock();
        while (b.len() as u64) < want {
            let f = self
                .arena
                .alloc(0)
                .map_err(|_| self.out_of_memory(want as usize))?;
            b.push(f.into_raw().pfn());
        }
        self.budget
            .balloon_pages
            .store(b.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The balloon recomputed: every page it lists is a distinct order-0 folio holding only the
    /// balloon's reference, in no file and on no list, and the count matches.
    pub(crate) fn validate_balloon(&self) -> Result<(), String> {
        use crate::mm::folio::flags::PG_LRU;
        let b = self.budget.balloon.lock();
        if b.len() as u64 != self.budget.balloon_pages() {
            return Err(format!(
                "the balloon lists {} pages, counts {}",
                b.len(),
                self.budget.balloon_pages()
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for &pfn in b.iter() {
            let f = self.arena.folio(pfn);
            let refs = f.ref_count(self.arena.strategy());
            if !seen.insert(pfn)
                || f.order() != 0
                || refs != 1
                || f.mapping() != 0
                || f.flags() & PG_LRU != 0
            {
                return Err(format!(
                    "balloon page {pfn} is not a private order-0 folio with one reference: {f:?}"
                ));
            }
        }
        Ok(())
    }

    /// Frees every balloon page (the cache's drop).
    pub(crate) fn deflate_all(&self) {
        let pfns = std::mem::take(&mut *self.budget.balloon.lock());
        self.budget.balloon_pages.store(0, Ordering::Relaxed);
        self.free_balloon_pages(pfns);
    }

    fn free_balloon_pages(&self, pfns: Vec<u32>) {
        for pfn in pfns {
            let folio = self.arena.folio(pfn);
            // SAFETY: the balloon took exactly one reference on this folio when it allocated
            // it (`into_raw`), and gives it back here once: the pfn left the balloon's list.
            drop(unsafe { crate::mm::folio::FolioRef::from_raw(&self.arena, folio) });
        }
    }

    /// Recomputes what derives from the budget: the dirty thresholds, the pin limit, the background
    /// reclaimer's watermarks (computed from `budget_pages` at each look) and the shadow-node limit
    /// (likewise).
    fn budget_changed(&self) {
        let pages = self.budget_pages();
        self.dirty.set_budget(
            pages,
            self.config.dirty_ratio,
            self.config.dirty_background_ratio,
        );
        self.budget
            .pins
            .set_limit(pin_limit(pages, self.budget.pinned_share));
        if let Some(k) = &self.kswapd {
            k.budget_pages.store(pages, Ordering::Relaxed);
        }
    }

    /// Charges `pages` pinned pages for a new guard, waiting up to
    /// [`Config::pin_wait`](crate::Config::pin_wait) for guards to be dropped if the limit is
    /// reached.
    #[inline]
    pub(crate) fn pin_charge(&self, pages: u64) -> Result<(), CacheError> {
        if self.budget.pins.try_charge(pages) {
            return Ok(());
        }
        self.pin_charge_slow(pages)
    }

    #[cold]
    fn pin_charge_slow(&self, pages: u64) -> Result<(), CacheError> {
        let wait = self.budget.pin_wait;
        if !wait.is_zero() {
            self.counters.inc(Event::PinWaits);
            if self.budget.pins.charge(pages, wait) {
                return Ok(());
            }
        }
        self.counters.inc(Event::PinLimited);
        Err(CacheError::PinLimit {
            pinned_pages: self.budget.pins.charged(),
            limit_pages: self.budget.pins.limit(),
            budget_pages: self.budget_pages(),
            waited: wait,
        })
    }

    /// Gives back a guard's pinned pages.
    #[inline]
    pub(crate) fn pin_uncharge(&self, pages: u64) {
        self.budget.pins.uncharge(pages);
    }

    /// Tells the listener of the evictions collected so far, in this thread, which must hold no
    /// lock of the cache (called at the end of the public calls that can evict, and by the
    /// background reclaimer after a pass). A listener that calls back into the cache may evict
    /// more: that is told by the next delivery, never from inside this one.
    pub(crate) fn deliver(&self) {
        if !self.budget.has_pending.load(Ordering::Relaxed) || DELIVERING.with(|d| d.get()) {
            return;
        }
        self.deliver_slow();
    }

    #[cold]
    fn deliver_slow(&self) {
        let Some(listener) = self.budget.listener.lock().clone() else {
            return;
        };
        let batch = {
            let mut p = self.budget.pending.lock();
            self.budget.has_pending.store(false, Ordering::Relaxed);
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

    /// An eviction of `mapping`'s pages `pages` (`nr_pages` of them freed) for `reason`.
    pub(crate) fn note_eviction(
        &self,
        m: &Inode,
        pages: Range<u64>,
        nr_pages: u64,
        reason: EvictionReason,
    ) {
        if !self.budget.listening() {
            return;
        }
        self.budget.note(Eviction {
            path: m.path.clone(),
            dev_ino: m.key.map(|k| (k.dev, k.ino)),
            pages,
            nr_pages,
            reason,
        });
    }

    /// The uncached read (`O_DIRECT`'s path, for a copying read that found no free page): copies
    /// the file's bytes `pos..end`, at most to the end of `pos`'s page, from the backing straight
    /// into `buf` (which starts at file byte `offset`). Returns the bytes copied. Bytes past what
    /// the backing file holds, below the cache's size, are a hole (zeros), as a cached read would
    /// give.
    #[cold]
    pub(crate) fn read_uncached(
        &self,
        m: &Inode,
        buf: &mut [u8],
        offset: u64,
        pos: u64,
        end: u64,
    ) -> Result<u64, CacheError> {
        let page_end = ((pos >> PAGE_SHIFT) + 1) << PAGE_SHIFT;
        let stop = end.min(page_end);
        let at = (pos - offset) as usize;
        let out = &mut buf[at..at + (stop - pos) as usize];
        // Relaxed, as readahead's fill loads it: a hint of where the file's bytes end, checked
        // against what the backing returns.
        let disk = m.mapping.disk_size.load(Ordering::Relaxed);
        let mut done = 0usize;
        while done < out.len() && pos + (done as u64) < disk {
            self.counters.inc(Event::IoReads);
            match m
                .mapping
                .backing
                .read_at(&mut out[done..], pos + done as u64)
            {
                Ok(0) => break,
                Ok(n) => {
                    self.counters.add(Event::IoBytes, n as u64);
                    done += n
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.counters.inc(Event::IoErrors);
                    return Err(m.io_error(pos + done as u64, e));
                }
            }
        }
        if done < out.len() && pos + (done as u64) < disk {
            return Err(CacheError::FileChanged {
                path: m.path.clone(),
                offset: pos + done as u64,
                expected_size: m.size(),
                actual_size: pos + done as u64,
            });
        }
        out[done..].fill(0);
        self.counters.inc(Event::UncachedReads);
        Ok(out.len() as u64)
    }
}

impl FolioCache {
    /// Changes the memory budget while the cache runs, between one page and
    /// [`Config::max_budget`](crate::Config::max_budget) (a balloon, as a virtual machine's memory
    /// is taken back by its host: see the module docs).
    ///
    /// Shrinking evicts cold pages, writing dirty ones back first, until the cache fits in
    /// `budget_bytes`; it is all or nothing: if pinned guards or pages that cannot be written back
    /// keep it from fitting, nothing changes and [`BudgetError::Busy`] says how many pages could
    /// not be freed and what held them. Growing is immediate. Everything derived from the budget
    /// follows the new one: [`CacheStats::budget_pages`](crate::CacheStats), the dirty limit and
    /// background threshold ([`Config::dirty_ratios`](crate::Config::dirty_ratios)), the background
    /// reclaimer's watermarks, the workingset's shadow-node limit and the pin limit
    /// ([`Config::pinned_share`](crate::Config::pinned_share)). Pins above a lowered pin limit
    /// stay; new ones wait or fail.
    ///
    /// ```
    /// use foliocache::{Config, FolioCache};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let cache = FolioCache::new(Config::new(16 << 20).max_budget(64 << 20))?;
    /// cache.set_budget(64 << 20)?;                       // grow to the reserved maximum
    /// cache.set_budget(4 << 20)?;                        // shrink: cold pages go
    /// assert_eq!(cache.budget_bytes(), 4 << 20);
    /// assert!(cache.set_budget(128 << 20).is_err());     // past the maximum
    /// assert!(cache.set_budget(0).is_err());             // not even one page
    /// # Ok(()) }
    /// ```
    pub fn set_budget(&self, budget_bytes: usize) -> Result<(), CacheError> {
        let c = &self.inner;
        let pages = (budget_bytes / PAGE_SIZE) as u64;
        if pages == 0 {
            return Err(BudgetError::TooSmall { budget_bytes }.into());
        }
        let max_pages = c.arena.nr_pages() as u64;
        if pages > max_pages {
            return Err(BudgetError::OverMax {
                budget_bytes,
                max_bytes: max_pages as usize * PAGE_SIZE,
            }
            .into());
        }
        let _one = c.budget.resize.lock();
        let current = c.budget_pages();
        let r = if pages >= current {
            // `leak_balloon`: give the pages back.
            let mut b = c.budget.balloon.lock();
            let keep = b.len() - (pages - current) as usize;
            let freed = b.split_off(keep);
            c.budget
                .balloon_pages
                .store(b.len() as u64, Ordering::Relaxed);
            drop(b);
            c.free_balloon_pages(freed);
            Ok(())
        } else {
            c.inflate(current, pages)
        };
        if r.is_ok() {
            c.budget_changed();
        }
        drop(_one);
        c.deliver();
        r
    }

    /// The memory budget now, in bytes ([`FolioCache::set_budget`]).
    pub fn budget_bytes(&self) -> usize {
        self.inner.budget_pages() as usize * PAGE_SIZE
    }

    /// Sets (or, with `None`, removes) the eviction listener: a function told of pages that left
    /// the cache, with the file, the pages and the reason ([`Eviction`]).
    ///
    /// The listener is called after the eviction, by the thread whose call evicted (a read, pin
    /// or write that reclaimed, `invalidate`, `set_len`, `set_budget`, `drop_caches`, `open`
    /// and `refresh`, the close of a file's last handle, the background reclaimer; what
    /// `append` and `get_folio_mut` evict is told by the next of these), when that call is
    /// about to return and holds no lock of the cache; calls from different threads may run at
    /// once. It may call back into the cache (read, pin, invalidate, take statistics, change
    /// the budget) without deadlocking; evictions its own calls cause are told after it
    /// returns, never from inside it. It should be quick: the thread it runs in is a reader's.
    /// It must not panic: the panic would reach that thread, which may be dropping a handle
    /// (and a panic while another unwinds aborts the process).
    ///
    /// The cache keeps the listener until it is replaced or removed: a listener that holds a
    /// clone of the [`FolioCache`] keeps the cache alive, so remove it before dropping the
    /// cache's last handle (or capture what the listener needs instead).
    ///
    /// Reclaim reports each folio it evicts; invalidation and truncation report once per call, the
    /// range asked for and the pages freed; an inode eviction reports the file once. While no
    /// listener is set nothing is collected.
    ///
    /// ```
    /// use std::sync::{atomic::{AtomicU64, Ordering}, Arc};
    /// use foliocache::{Config, FolioCache};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, vec![1u8; 1 << 20])?;
    /// let cache = FolioCache::new(Config::new(1 << 20))?;
    /// let evicted = Arc::new(AtomicU64::new(0));
    /// let seen = evicted.clone();
    /// cache.set_eviction_listener(Some(Arc::new(move |e: &foliocache::Eviction| {
    ///     seen.fetch_add(e.nr_pages, Ordering::Relaxed);
    /// })));
    /// let file = cache.open(&path)?;
    /// file.readahead(0..1 << 20)?;
    /// file.invalidate(0..1 << 20)?;
    /// assert!(evicted.load(Ordering::Relaxed) > 0);
    /// # Ok(()) }
    /// ```
    pub fn set_eviction_listener(&self, listener: Option<EvictionListener>) {
        let b = &self.inner.budget;
        let on = listener.is_some();
        *b.listener.lock() = listener;
        b.listening.store(on, Ordering::Relaxed);
        if !on {
            b.pending.lock().clear();
        }
    }
}

impl CacheInner {
    /// `fill_balloon`: takes `current - pages` pages out of the budget, reclaiming for them; all or
    /// nothing.
    #[cold]
    fn inflate(&self, current: u64, pages: u64) -> Result<(), CacheError> {
        let need = (current - pages) as usize;
        let mut taken: Vec<u32> = Vec::with_capacity(need);
        let prev = RECLAIM_REASON.with(|r| r.replace(EvictionReason::Balloon));
        let mut wrote_back = false;
        loop {
            while taken.len() < need {
                match self.lru.alloc(&self.arena, self, 0) {
                    Ok(f) => taken.push(f.into_raw().pfn()),
                    Err(_) => break,
                }
            }
            if taken.len() == need || wrote_back {
                break;
            }
            // Dirty pages are not reclaimable until written back: write every file back
            // once (as a guest's reclaim would through writeback), then try again.
            wrote_back = true;
            for m in self.live_mappings() {
                if m.mapping.wb.has_unwritten() {
                    super::writeback::writeback_mapping(
                        self,
                        &m,
                        0,
                        u64::MAX,
                        crate::mm::writeback::SyncMode::All,
                    );
                    crate::mm::writeback::wait_writeback_range(&m.mapping, 0, u64::MAX);
                }
            }
            self.lru.drain_all(&self.arena);
        }
        RECLAIM_REASON.with(|r| r.set(prev));
        self.shrink_slab();
        if taken.len() < need {
            let short = (need - taken.len()) as u64;
            self.free_balloon_pages(taken);
            return Err(BudgetError::Busy {
                budget_pages: pages,
                current_pages: current,
                short_pages: short,
                pinned_pages: self.budget.pins.charged(),
                unwritten_pages: self.dirty.dirty() + self.dirty.writeback(),
            }
            .into());
        }
        let mut b = self.budget.balloon.lock();
        b.extend(taken);
        self.budget
            .balloon_pages
            .store(b.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}
