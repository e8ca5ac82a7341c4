//! The core of a cache's shared state (the kernel's per-node `pglist_data` with the
//! superblock's counters): the configuration, the arena, the LRU and reclaim's workingset,
//! the counters, the dirty accounting, the cache-wide error sequence, the RCU domain of the
//! indexes and the background reclaimer's doorbell; and what needs only these: what follows
//! an insertion, marking accesses, the dirty-page rotation writeback asks for (the
//! [`WbHost`](crate::mm::writeback::WbHost) the mechanisms call back through).
//!
//! It imports only leaves of `cache/` (configuration, statistics, the reclaimer's doorbell)
//! and `mm`; the inode cache, the live mappings, the budget and the flusher sit above it in
//! [`CacheInner`](super::CacheInner), which dereferences to it.

use super::budget::Budget;
use super::config::Config;
use super::error::CacheError;
use super::kswapd::Kswapd;
use super::stats::{Counters, Event};
use crate::mm::folio::{Arena, FolioLocked, FolioRef};
use crate::mm::index::{IndexStats, Shadow};
use crate::mm::lru::Lru;
use crate::mm::rcu::Rcu;
use crate::mm::sync::{Arc, AtomicU64, Ordering};

/// The core of a cache's shared state.
pub(crate) struct Core {
    pub(crate) config: Config,
    pub(crate) arena: Arc<Arena>,
    pub(crate) counters: Counters,
    /// The next handle number.
    pub(crate) next_handle: AtomicU64,
    /// The RCU domain of the indexes.
    pub(crate) rcu: Arc<Rcu>,
    /// Index counters of files already closed.
    pub(crate) retired_lock_acquisitions: AtomicU64,
    pub(crate) retired_pages_inserted: AtomicU64,
    /// The LRU and reclaim (seed 004); its final-put hook is installed in `arena`.
    pub(crate) lru: Lru,
    /// Dirty and writeback page counts and the dirty limits (`writeback`).
    pub(crate) dirty: crate::mm::writeback::DirtyAccount,
    /// Every file's writeback errors, for [`FolioCache::sync_all`](crate::FolioCache::sync_all)
    /// (`sb->s_wb_err`).
    pub(crate) sb_err: crate::mm::writeback::SbErr,
    /// `RLIMIT_FSIZE` as last read (at construction, and again after each `EFBIG`).
    pub(crate) fsize_limit: AtomicU64,
    /// The background reclaimer's doorbell, if [`Config::background_reclaim`] is on.
    pub(crate) kswapd: Option<Arc<Kswapd>>,
    /// The balloon, the pin limit and the eviction listener (`cache/budget.rs`).
    pub(crate) budget: Budget,
    /// How reads and writes reach the files ([`Config::io_engine`]).
    pub(crate) engine: crate::io::engine::Engine,
    /// [`Config::direct_io`], with `FOLIOCACHE_DIRECT_IO` applied.
    pub(crate) direct_io: crate::io::DirectIo,
    /// The engine's write-ahead log and its durable point (`cache/wal.rs`).
    pub(crate) log: super::wal::LogState,
    /// The address spaces on the cache's arena: snapshots' and
    /// [`FolioCache::spaces`](crate::FolioCache::spaces)' (made at first use, `cache/cow.rs`).
    pub(crate) spaces: std::sync::OnceLock<crate::mm::space::Spaces>,
    /// Dirty pages reclaim met at the inactive tail, for the flusher to write
    /// ([`Config::pageout`]): (file's mapping id, page index), at most [`PAGEOUT_MAX`].
    pub(crate) pageout: crate::mm::sync::Mutex<Vec<(u64, u64)>>,
    /// `pageout.len()`, read without the mutex by the writers that kick the flusher.
    pub(crate) pageout_queued: AtomicU64,
    /// Allocations waiting for pageout (`CacheInner::alloc_throttled`): while there are
    /// any, the flusher's pageout writes every queued page, used since or not.
    pub(crate) alloc_waiting: AtomicU64,
}

/// The most folios reclaim queues for pageout: two reclaim steps' worth
/// ([`SWAP_CLUSTER_MAX`](crate::mm::lru::SWAP_CLUSTER_MAX)), as kswapd pages out only what its
/// scan isolates. Others it meets dirty are left marked `PG_reclaim` (reclaim meets them again
/// if they stay cold). A longer queue has the flusher write pages long before reclaim would
/// evict them, time in which a hot one is changed again and its write wasted: the lab's
/// `bufmgr` with 16 KiB pages at `dirty_ratios(100, 100)` wrote 0.322 pages per update with
/// 4,096, 0.286 with 64 (0.272 misses per update, each evicting a dirty page: the floor); at
/// `dirty_ratios(95, 90)` the threshold's passes dominate and it makes no difference.
pub(crate) const PAGEOUT_MAX: usize = 2 * crate::mm::lru::SWAP_CLUSTER_MAX;

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("config", &self.config)
            .field("arena", &self.arena)
            .finish()
    }
}

impl Core {
    /// The out-of-memory error for a read that needed `needed_pages` at once (and counts it).
    pub(crate) fn out_of_memory(&self, needed_pages: usize) -> CacheError {
        self.counters.inc(Event::OutOfMemory);
        let a = self.arena.stats();
        CacheError::OutOfMemory {
            needed_pages,
            free_pages: a.free_pages,
            budget_pages: self.budget_pages(),
        }
    }

    /// What follows a folio's insertion into an index of this cache (`filemap_add_folio`'s
    /// tail), on every path that inserts one (readahead, single-page reads, writes, splits
    /// and replacements): if it replaced a `shadow` entry, `workingset_refault` decides
    /// whether it joins the LRU as active; then `folio_add_lru`.
    /// Tells the listener of the evictions collected so far ([`Budget::deliver`]), in this
    /// thread, which must hold no lock of the cache.
    #[inline]
    pub(crate) fn deliver(&self) {
        self.budget.deliver();
    }

    #[inline]
    pub(crate) fn folio_added(&self, folio: &FolioLocked<'_>, shadow: Option<Shadow>) {
        if let Some(shadow) = shadow {
            self.lru.workingset_refault(folio, shadow);
        }
        self.lru.add(&self.arena, folio.folio_ref());
    }

    /// A change's freeze of `folio` failed: whether a per-CPU LRU batch may hold the
    /// reference it did not expect, so that [`Core::drain_for_freeze`] and another try may
    /// succeed. The first failure drains this CPU's batches (an add batch holds a page read
    /// or written a moment ago, an activation batch one read twice); a second, for a folio not
    /// on the LRU yet (still in another CPU's add batch), every CPU's, as the kernel does
    /// before it counts a folio's references (`lru_add_drain`, `lru_add_drain_all`). `false`
    /// once the other reference is someone's own: the change goes into a copy.
    pub(crate) fn may_drain_for_freeze(
        &self,
        folio: &crate::mm::folio::Folio,
        drained: u32,
    ) -> bool {
        use crate::mm::folio::flags::PG_LRU;
        drained == 0 || (drained == 1 && !folio.test_flag(PG_LRU))
    }

    /// The drain [`Core::may_drain_for_freeze`] allowed, the `drained`-th; the caller holds no
    /// folio lock.
    pub(crate) fn drain_for_freeze(&self, drained: &mut u32) {
        if *drained == 0 {
            self.lru.drain(&self.arena);
        } else {
            self.lru.drain_all(&self.arena);
        }
        *drained += 1;
    }

    /// `folio_mark_accessed` for a folio a read used after finding it (`filled` false) or
    /// after missing it and having it filled (`filled` true): the fill's own access counts only
    /// if [`LruConfig::reference_on_fill`](crate::mm::lru::LruConfig::reference_on_fill) says so.
    #[inline]
    pub(crate) fn mark_accessed_after(&self, folio: &FolioRef<'_>, filled: bool) {
        if !filled || self.config.experiment.reference_on_fill {
            self.mark_accessed(folio);
        }
    }

    /// `folio_mark_accessed` for a folio a read used.
    #[inline]
    pub(crate) fn mark_accessed(&self, folio: &FolioRef<'_>) {
        self.lru.mark_accessed(&self.arena, folio);
    }

    /// Folds a closed file's index counters into the cache's totals.
    pub(crate) fn retire_index_stats(&self, s: IndexStats) {
        self.retired_lock_acquisitions
            .fetch_add(s.lock_acquisitions, Ordering::Relaxed);
        self.retired_pages_inserted
            .fetch_add(s.pages_inserted, Ordering::Relaxed);
    }

    /// `shrink_folio_list` meeting a dirty or writeback folio: never freed before its bytes
    /// are in the backing file. It is marked for reclaim (`PG_reclaim`) and kept; the dirty
    /// limit guarantees reclaim finds clean folios meanwhile.
    pub(crate) fn keep_unwritten(&self, folio: &FolioLocked<'_>) -> bool {
        use crate::mm::folio::flags::{PG_DIRTY, PG_RECLAIM, PG_WRITEBACK};
        if folio.flags() & (PG_DIRTY | PG_WRITEBACK) == 0 {
            return false;
        }
        folio.set_flag(PG_RECLAIM);
        self.counters.inc(Event::ReclaimDirtyKept);
        if self.config.pageout && folio.flags() & PG_WRITEBACK == 0 {
            // Reclaim's `pageout()`, by the flusher (kicked by the next writer or its timer).
            let mut q = self.pageout.lock();
            if q.len() < PAGEOUT_MAX {
                q.push((folio.mapping(), folio.index()));
                // ORDERING: Relaxed; a hint for `wake_flusher`, the queue is the mutex's.
                self.pageout_queued.store(q.len() as u64, Ordering::Relaxed);
            }
        }
        true
    }

    /// Takes the `n` pages queued first for pageout (the coldest: reclaim met them earliest),
    /// grouped by file (sorted, each once).
    pub(crate) fn take_pageout(&self, n: usize) -> Vec<(u64, Vec<u64>)> {
        let mut q = {
            let mut queue = self.pageout.lock();
            let q = if queue.len() <= n {
                std::mem::take(&mut *queue)
            } else {
                queue.drain(..n).collect()
            };
            // ORDERING: Relaxed, as in `keep_unwritten`.
            self.pageout_queued
                .store(queue.len() as u64, Ordering::Relaxed);
            q
        };
        q.sort_unstable();
        q.dedup();
        let mut files: Vec<(u64, Vec<u64>)> = Vec::new();
        for (id, index) in q {
            match files.last_mut() {
                Some((last, pages)) if *last == id => pages.push(index),
                _ => files.push((id, vec![index])),
            }
        }
        files
    }

    /// Puts pages of file `id` that a pageout took but could not write back at the head of
    /// the queue (beyond [`PAGEOUT_MAX`] too: they were on it).
    pub(crate) fn requeue_pageout(&self, id: u64, pages: &[u64]) {
        if pages.is_empty() {
            return;
        }
        let mut queue = self.pageout.lock();
        queue.splice(0..0, pages.iter().map(|&i| (id, i)));
        // ORDERING: Relaxed, as in `keep_unwritten`.
        self.pageout_queued
            .store(queue.len() as u64, Ordering::Relaxed);
    }
}

impl crate::mm::writeback::WbHost for Core {
    fn dirty_account(&self) -> &crate::mm::writeback::DirtyAccount {
        &self.dirty
    }

    fn engine(&self) -> &crate::io::engine::Engine {
        &self.engine
    }

    fn error_policy(&self) -> crate::mm::writeback::WbErrorPolicy {
        self.config.writeback_errors
    }

    fn rotate_reclaimable(&self, folio: &FolioRef<'_>) {
        if self.lru.rotate_reclaimable(&self.arena, folio) {
            self.counters.inc(Event::ReclaimRotated);
        }
    }

    fn flush_log(&self, lsn: u64) -> std::io::Result<()> {
        self.log.flush(lsn)
    }

    fn durable_lsn(&self) -> u64 {
        self.log.durable()
    }
}
