//! [`LruStats`]: the LRU's counters (`/proc/vmstat`'s LRU lines), each listed once.

crate::mm::stats::counter_set! {
    /// A snapshot of an [`Lru`](super::Lru)'s counters (`/proc/vmstat` style), each listed once here.
    pub struct LruStats, prefix "lru_" {
    counters {
        /// Acquisitions of the lruvec lock, for any reason.
        lock_acquisitions,
        /// Folios queued in add batches ([`Lru::add`](super::Lru::add)).
        queued,
        /// Folios taken out of add batches by a drain (queued minus those still batched).
        drained,
        /// Folios the add drain linked on a list (`mm_lru_insertion` events).
        inserted,
        /// Of those, folios whose only reference was the batch's when linked: dead folios that
        /// reached the LRU.
        dead_inserted,
        /// Dead folios the drain freed without the LRU ([`DrainFilter::Filtered`](super::DrainFilter::Filtered)/`Naive`).
        dead_filtered,
        /// Folios unlinked by their final put (`__page_cache_release`).
        released,
        /// Of those, the ones unlinked by the arena's free path (a final put outside the LRU's
        /// own batch puts: truncation, a reader's last put), one lock hold each.
        released_at_free,
        /// Inactive folios promoted to the active list (`PGACTIVATE`).
        activated,
        /// Active folios aged down to the inactive list (`PGDEACTIVATE`).
        deactivated,
        /// Referenced inactive folios given a second chance by reclaim (`PGROTATED`).
        rotated,
        /// Active folios aging kept on the active list, each spending one read counted since the
        /// last pass ([`LruConfig::active_second_chance`](super::LruConfig::active_second_chance); `shrink_active_list`'s `nr_rotated`).
        rotated_active,
        /// Folios reclaim looked at on the inactive tail (`PGSCAN`).
        scanned,
        /// Folios reclaim isolated from the inactive list.
        isolated,
        /// Pages reclaim freed (`PGSTEAL`).
        reclaimed,
        /// Reclaim passes run ([`Lru::reclaim`](super::Lru::reclaim) calls).
        reclaim_runs,
        /// Passes of the background reclaimer ([`Lru::balance`](super::Lru::balance), the kswapd analog).
        background_runs,
        /// Allocations that found nothing free on their CPU's list or in the buddy and reclaimed
        /// first (`ALLOCSTALL`; pages parked on other CPUs' lists are not looked at first).
        alloc_stalls,
        /// Allocations that failed after reclaim made no progress (`OOM`).
        oom,
        /// Folios found `PG_mlocked` when added, placed on the unevictable list (`UNEVICTABLE_PGCULLED`).
        culled,
        /// Folios that were unevictable and are evictable again when re-added (`UNEVICTABLE_PGRESCUED`).
        rescued,
    }
    per_list {
        /// Folios on each list now, by [`LruList`](super::LruList) index.
        folios,
        /// Base pages on each list now.
        pages,
    }
    gauges {
        /// Folios sitting in add and activate batches now.
        batched,
    }
    }
}

impl LruStats {
    /// Percentage of drained folios that were dead when linked (the seed's "dead %").
    pub fn dead_pct(&self) -> f64 {
        100.0 * self.dead_inserted as f64 / (self.drained.max(1)) as f64
    }

    /// Lock acquisitions per folio queued.
    pub fn lock_acquisitions_per_folio(&self) -> f64 {
        self.lock_acquisitions as f64 / self.queued.max(1) as f64
    }
}
