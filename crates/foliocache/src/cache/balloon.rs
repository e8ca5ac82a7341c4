//! The budget's controls at run time (`cache/budget.rs` holds their state and describes
//! them): the balloon behind [`FolioCache::set_budget`], the pin charge, the uncached read and
//! the eviction listener's setting.

use super::budget::{pin_limit, Budget, EvictionListener, EvictionReason};
use super::core::Core;
use super::error::{BudgetError, CacheError};
use super::inode::Inode;
use super::sb::{CacheInner, FolioCache};
use super::stats::Event;
use crate::mm::folio::{PAGE_SHIFT, PAGE_SIZE};
use crate::mm::sync::Ordering;

impl Core {
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
        self.budget
            .snapshots
            .set_limit(pin_limit(pages, self.budget.snapshot_share));
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
    /// the cache, with the file, the pages and the reason ([`Eviction`](super::budget::Eviction)).
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
        let prev = Budget::set_reclaim_reason(EvictionReason::Balloon);
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
            // once (as a guest's reclaim would through writeback), then try again. Background
            // passes, chunk after chunk: they skip pages latched in place (an integrity pass
            // would wait for them, and the caller may hold the latch) and pages already
            // under writeback, which the wait below covers.
            wrote_back = true;
            for m in self.live_mappings() {
                while m.mapping.wb.has_unwritten() {
                    let out = super::writeback::writeback_mapping(
                        self,
                        &m,
                        0,
                        u64::MAX,
                        crate::mm::writeback::SyncMode::Background,
                    );
                    if out.busy || out.pages < crate::mm::writeback::WB_BACKGROUND_CHUNK {
                        break;
                    }
                }
                crate::mm::writeback::wait_writeback_range(&m.mapping, 0, u64::MAX);
            }
            self.lru.drain_all(&self.arena);
        }
        Budget::set_reclaim_reason(prev);
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
