//! Statistics: per-thread-sharded event counters (`/proc/vmstat`'s per-CPU `vm_event_states`)
//! and the [`CacheStats`] snapshot.
//!
//! A hit must not write a shared cache line, so every event counter exists once per shard,
//! each shard on its own cache line, and a thread always counts in the shard of its
//! [`thread_number`] (at least 64 shards, so the threads alive at once rarely share one).
//!
//! Like the kernel's `this_cpu_inc`, an increment is a relaxed load and a relaxed store, not
//! a locked read-modify-write: on x86 a `lock xadd` costs some 20 cycles even on a line the
//! thread owns, and a hit (about 50 ns) would pay it twice. The price: when two threads
//! share a shard, increments racing on it may be lost. These are statistics (the lab and the
//! tests read them after the threads joined, with one thread per shard); nothing is decided
//! from them. A snapshot sums the shards; it is not atomic across counters.

use crate::mm::sync::{num_cpus, thread_number, AtomicU64, CachePadded, Ordering};

/// The cache's counters, each listed once: `Name => field` under `events` for a counter the
/// hot paths bump in their shard (`Event`), a `field` under `gauges` for a number
/// `FolioCache::stats` reads from the cache's state. The macro makes the [`Event`]
/// enum, the [`CacheStats`] fields (in this order), the fill from the shards and the
/// `vmstat` lines (named after the fields): a new counter is one line here.
macro_rules! cache_counters {
    (
        events { $( $(#[$em:meta])* $ev:ident => $ef:ident, )* }
        gauges { $( $(#[$gm:meta])* $gf:ident, )* }
    ) => {
        /// One countable event.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub(crate) enum Event {
            $( $ev, )*
        }

        const NR_EVENTS: usize = [$( Event::$ev ),*].len();

        impl Event {
            /// The counter's vmstat name.
            #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
            pub(crate) const fn name(self) -> &'static str {
                match self {
                    $( Event::$ev => stringify!($ef), )*
                }
            }
        }

        /// A snapshot of a cache's counters (the cache's `/proc/vmstat`); plain numbers,
        /// summed without stopping the cache, so counters may be mutually off by in-flight
        /// operations.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct CacheStats {
            $( $(#[$em])* pub $ef: u64, )*
            $( $(#[$gm])* pub $gf: u64, )*
        }

        impl CacheStats {
            /// The names of the [`CacheStats::vmstat`] lines that are levels read from the
            /// cache's state (inodes, dirty pages, budget), not counts of events.
            #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
            pub(crate) const GAUGES: &'static [&'static str] = &[$( stringify!($gf), )*];

            pub(crate) fn fill_events(&mut self, c: &Counters) {
                $( self.$ef = c.sum(Event::$ev); )*
            }

            /// The snapshot as `/proc/vmstat` lines: `(name, value)` pairs in a stable order,
            /// each name the field's (a stable identifier: the lab's JSON `stats` objects use
            /// them).
            ///
            /// ```
            /// let mut s = foliocache::CacheStats::default();
            /// s.hits = 3;
            /// assert!(s.vmstat().contains(&("hits", 3)));
            /// ```
            pub fn vmstat(&self) -> Vec<(&'static str, u64)> {
                vec![
                    $( (stringify!($ef), self.$ef), )*
                    $( (stringify!($gf), self.$gf), )*
                ]
            }
        }
    };
}

cache_counters! {
    events {
        /// `read_at` calls.
        ReadCalls => read_calls,
        /// Bytes copied out to callers by `read_at`.
        BytesCopied => bytes_copied,
        /// Folio lookups that found an uptodate folio.
        Hit => hits,
        /// Folio lookups that found nothing and started a read (synchronous readahead or a
        /// single-folio read).
        Miss => misses,
        /// Folio lookups that found a folio under I/O and slept until it was filled or failed.
        WaitLocked => waits_on_locked,
        /// Synchronous readahead windows (`page_cache_sync_ra`).
        SyncRa => sync_readahead,
        /// Asynchronous readahead windows started by a PG_readahead folio
        /// (`page_cache_async_ra`).
        AsyncRa => async_readahead,
        /// Pages inserted by readahead (explicit `readahead` calls included) and, with
        /// readahead off, by misses that read a whole multi-page request.
        RaPages => readahead_pages,
        /// Batched windows that could not be preallocated and fell back to one-by-one
        /// insertion.
        RaFallbacks => readahead_fallbacks,
        /// Folios inserted by readahead and by misses that read a whole request (each one
        /// LRU entry and one index entry, whatever its size).
        RaFolios => readahead_folios,
        /// Large folios (more than one page) inserted by readahead and by misses that read a
        /// whole request.
        RaLargeFolios => readahead_large_folios,
        /// Large folio allocations that failed, after which the rest of the window was read
        /// into single pages (`page_cache_ra_order`'s fallback).
        RaOrderFallbacks => readahead_order_fallbacks,
        /// Large folios split into pages (by copy) before a truncation, a page latch or a
        /// snapshot capture inside them.
        FolioSplits => folio_splits,
        /// Runs of folios collapsed into one large folio (by copy) for a block latch
        /// ([`CachedFile::get_block_mut_in_place`](crate::CachedFile::get_block_mut_in_place)).
        FolioCollapses => folio_collapses,
        /// Misses served by reading a single folio (readahead off, or the window was raced).
        SinglePageReads => single_page_reads,
        /// Read calls issued to backing files.
        IoReads => io_reads,
        /// Bytes read from backing files.
        IoBytes => io_bytes,
        /// Backing reads that failed.
        IoErrors => io_errors,
        /// Reads that failed with `OutOfMemory`, or (`read_at`) fell back to an uncached read.
        OutOfMemory => out_of_memory,
        /// Pages `read_at` copied straight from the backing file, uncached, because no page
        /// could be had (pins and dirty pages held the budget; `O_DIRECT`-like).
        UncachedReads => uncached_reads,
        /// Pins that found the pin limit reached and waited ([`Config::pin_wait`](crate::Config::pin_wait)).
        PinWaits => pin_waits,
        /// Pins refused with `PinLimit`.
        PinLimited => pin_limit_failures,
        /// Pages dropped by `invalidate`, by revalidation, truncation and by evicting inodes.
        Invalidated => invalidated_pages,
        /// Opens (and `refresh` calls) that found a file changed behind the cache's back and
        /// dropped its pages.
        Revalidations => revalidations,
        /// Inodes evicted from the inode cache (with their pages).
        InodesEvicted => inodes_evicted,
        /// Inodes of deleted files evicted at their last close (`i_nlink == 0`), counted in
        /// `inodes_evicted` too.
        DeletedInodesDropped => deleted_inodes_dropped,
        /// Dirty pages dropped without being written because their file was deleted.
        DirtyDiscarded => dirty_pages_discarded,
        /// `write_at` / `append` calls.
        WriteCalls => write_calls,
        /// Bytes written into the cache by callers.
        BytesWritten => bytes_written,
        /// Page writes done in place (the folio frozen: nobody else held it), and committed
        /// in-place latches ([`InPlaceFolioMut`](crate::InPlaceFolioMut)) that updated the
        /// cached page itself.
        WritesInPlace => writes_in_place,
        /// Page writes done by replacing a folio someone held (a pinned guard, a reader), and
        /// committed writable guards that changed a copy.
        WritesReplaced => writes_replaced,
        /// Reads (and syncs) that found a page latched in place and waited for its commit.
        WaitLatched => waits_on_latched,
        /// Page writes to pages that were dirty already.
        Redirtied => writes_to_dirty,
        /// Writers that met the dirty limit and wrote dirty pages back first.
        DirtyThrottled => dirty_throttled,
        /// `sync_data` / `sync_all` / `sync_range` calls.
        Syncs => syncs,
        /// Pages written back to backing files.
        WritebackPages => writeback_pages,
        /// Vectored writes issued by writeback (contiguous dirty pages coalesce into one).
        WritebackWrites => writeback_writes,
        /// Bytes written back to backing files.
        WritebackBytes => writeback_bytes,
        /// Failed writebacks and syncs (each reported through the files' error sequences).
        WritebackErrors => writeback_errors,
        /// Dirty or writeback folios reclaim met and kept (marked for reclaim).
        ReclaimDirtyKept => reclaim_dirty_kept,
        /// Pages the flusher wrote because reclaim met them dirty at the inactive tail
        /// ([`Config::pageout`](crate::Config::pageout)).
        Pageouts => pageouts,
        /// Of [`pageouts`](Self::pageouts), the pages an allocation that found no clean page,
        /// or the background reclaimer ([`Config::background_reclaim`](crate::Config::background_reclaim)),
        /// wrote itself instead of waiting for the flusher.
        PageoutsDirect => pageouts_direct,
        /// Old versions of pages kept for live snapshots (one per snapshot that needed it)
        /// before a write, a latch's commit or a truncation changed the page.
        SnapshotCaptures => snapshot_captures,
        /// Pages read from the backing file only to keep their old version for a snapshot
        /// (a write or truncation of a page that was not cached).
        SnapshotCaptureReads => snapshot_capture_reads,
        /// Writes refused with `SnapshotLimit`.
        SnapshotLimited => snapshot_limit_failures,
        /// Folios reclaim had marked that moved to the inactive tail when their writeback
        /// ended (`pgrotated`).
        ReclaimRotated => pgrotated,
    }
    gauges {
        /// Inodes in the inode cache right now, in use or not.
        inodes,
        /// Inodes no handle or guard uses right now, kept for a later open.
        unused_inodes,
        /// Dirty pages right now (`nr_dirty`).
        dirty_pages,
        /// Pages under writeback right now (`nr_writeback`).
        writeback_pages_now,
        /// The dirty limit in pages ([`Config::dirty_ratios`](crate::Config::dirty_ratios)):
        /// it bounds dirty plus writeback pages, as the kernel's does.
        dirty_limit_pages,
        /// Dirty plus writeback pages right now as the dirty limit counts them (one exact
        /// count, writers' reservations included): never above `dirty_limit_pages` (unless
        /// the limit was lowered under them, by [`FolioCache::set_budget`](crate::FolioCache::set_budget)). `dirty_pages + writeback_pages_now` read apart can be off
        /// by pages moving from one to the other.
        dirty_charged_pages,
        /// The most dirty + writeback pages seen at once (the highest `dirty_charged_pages`).
        dirty_high_water,
        /// Index lock acquisitions, over every file this cache has had open (`xa_lock`).
        index_lock_acquisitions,
        /// Pages inserted into the indexes, over every file this cache has had open.
        index_pages_inserted,
        /// Pages in the memory budget ([`FolioCache::set_budget`](crate::FolioCache::set_budget)
        /// changes it).
        budget_pages,
        /// Pages pinned by guards right now.
        pinned_pages,
        /// The pin limit in pages ([`Config::pinned_share`](crate::Config::pinned_share) of
        /// the budget).
        pin_limit_pages,
        /// Pages live snapshots hold right now (a page held by two counts twice).
        snapshot_pages,
        /// The snapshot limit in pages ([`Config::snapshot_share`](crate::Config::snapshot_share)
        /// of the budget).
        snapshot_limit_pages,
        /// Pages held by folios right now.
        allocated_pages,
        /// Pages free right now.
        free_pages,
        /// Bad pages detected by the free path or at allocation (should stay 0).
        bad_pages,
    }
}

/// One thread's counters (one shard, its own cache line).
pub(crate) struct Shard([AtomicU64; NR_EVENTS]);

impl Shard {
    /// Counts `n` events of kind `ev` here (`__this_cpu_add` once `this_cpu_ptr` is known).
    #[inline(always)]
    pub(crate) fn add(&self, ev: Event, n: u64) {
        let c = &self.0[ev as usize];
        // Not a fetch_add, on purpose (module docs): another thread sharing this shard may
        // overwrite our increment, never corrupt the counter.
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
}

/// The sharded counters of one cache.
pub(crate) struct Counters {
    shards: Box<[CachePadded<Shard>]>,
    mask: usize,
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters")
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl Counters {
    pub(crate) fn new() -> Counters {
        let n = (2 * num_cpus()).next_power_of_two().max(64);
        Counters {
            shards: (0..n)
                .map(|_| CachePadded::new(Shard(std::array::from_fn(|_| AtomicU64::new(0)))))
                .collect(),
            mask: n - 1,
        }
    }

    /// The calling thread's shard (`this_cpu_ptr`): a path that counts several events
    /// looks it up once.
    #[inline(always)]
    pub(crate) fn mine(&self) -> &Shard {
        &self.shards[thread_number() & self.mask]
    }

    /// Counts `n` events of kind `ev` in the calling thread's shard (`this_cpu_add`), and, with
    /// the `tracing` feature, reports the rare ones (the test folds away for the others,
    /// whose `ev` is a constant at every call site).
    #[inline]
    pub(crate) fn add(&self, ev: Event, n: u64) {
        self.mine().add(ev, n);
        #[cfg(feature = "tracing")]
        trace_event(ev, n);
    }

    /// Counts one event.
    #[inline]
    pub(crate) fn inc(&self, ev: Event) {
        self.add(ev, 1);
    }

    /// The sum over every shard.
    pub(crate) fn sum(&self, ev: Event) -> u64 {
        self.shards
            .iter()
            .map(|s| s.0[ev as usize].load(Ordering::Relaxed))
            .sum()
    }
}

/// The `tracing` event of a rare counter (see the `trace` module's table); nothing for the
/// others.
#[cfg(feature = "tracing")]
#[inline(always)]
fn trace_event(ev: Event, n: u64) {
    match ev {
        Event::IoErrors | Event::WritebackErrors => {
            tracing::warn!(counter = ev.name(), n, "foliocache: {}", ev.name())
        }
        Event::Revalidations
        | Event::InodesEvicted
        | Event::OutOfMemory
        | Event::DirtyThrottled
        | Event::RaFallbacks => {
            tracing::debug!(counter = ev.name(), n, "foliocache: {}", ev.name())
        }
        _ => {}
    }
}

impl CacheStats {
    /// Index lock acquisitions per inserted page (0 when nothing was inserted).
    pub fn lock_acquisitions_per_page(&self) -> f64 {
        if self.index_pages_inserted == 0 {
            0.0
        } else {
            self.index_lock_acquisitions as f64 / self.index_pages_inserted as f64
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn shards_sum_across_threads() {
        let c = std::sync::Arc::new(Counters::new());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.inc(Event::Hit);
                    }
                    c.add(Event::IoBytes, 10);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let mut s = CacheStats::default();
        s.fill_events(&c);
        assert_eq!(s.hits, 4000);
        assert_eq!(s.io_bytes, 40);
        assert_eq!(s.misses, 0);
    }
}
