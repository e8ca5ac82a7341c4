//! The cache's shared state (the superblock, `struct super_block` in `fs/super.c`):
//! [`FolioCache`], the handle on it, and [`CacheInner`]: the [`Core`] it dereferences to, the
//! inode cache, the live mappings and the flusher; with what needs them: `iput`, the
//! allocation hook (whose reclaim evicts through the live mappings: the [`Evict`] host), the
//! readahead host ([`RaHost`](crate::mm::readahead::RaHost)), the shadow-node shrinker, the
//! flusher's start, and the writeback of every file when the cache is dropped.
//!
//! It imports the core, the inode, the flusher and one writeback pass; every other file of
//! `cache/` that needs the whole state imports it from here.

use std::collections::HashMap;

use super::budget::Budget;
use super::core::Core;
use super::flusher::Flusher;
use super::inode::{Icache, Inode};
use super::stats::Event;
use super::writeback::writeback_mapping;
use crate::mm::folio::{AllocError, FolioLocked, FolioRef};
use crate::mm::index::{Shadow, ShadowNodes};
use crate::mm::lru::Evict;
use crate::mm::sync::{Arc, Mutex, Ordering};

/// A userspace page cache over real files, with a fixed memory budget.
///
/// Cheap to clone (a shared handle); files opened from it keep it alive.
///
/// ```
/// use foliocache::{Config, FolioCache};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("data");
/// # std::fs::write(&path, vec![7u8; 100_000])?;
/// let cache = FolioCache::new(Config::new(16 << 20))?;   // 16 MiB budget
/// let file = cache.open(&path)?;
///
/// let mut buf = [0u8; 64];
/// assert_eq!(file.read_at(&mut buf, 4090)?, 64);          // crosses a page boundary
/// assert_eq!(file.read_at(&mut buf, 99_990)?, 10);        // short read at EOF
/// assert_eq!(file.read_at(&mut buf, 200_000)?, 0);        // past EOF
///
/// let page = file.get_folio(0)?;                          // pinned, zero-copy
/// assert_eq!(page[0], 7);
/// assert!(cache.stats().hits > 0);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct FolioCache {
    pub(crate) inner: Arc<CacheInner>,
}

/// The shared state of a cache: its core ([`Core`], which it dereferences to), the inode
/// cache, the live mappings and the flusher.
pub(crate) struct CacheInner {
    /// The inode cache: every file opened by path, by (device, inode), kept after its last
    /// close up to [`Config::unused_inodes`]. Declared before `core`: at teardown its inodes
    /// truncate their pages while the LRU (whose release hook the final puts run) lives.
    pub(crate) icache: Mutex<Icache>,
    /// Every live mapping by id (`folio->mapping`): statistics, and reclaim's way from a
    /// folio to its index. Dead entries are pruned when a mapping is added.
    pub(crate) live: Mutex<HashMap<u64, std::sync::Weak<Inode>>>,
    /// The configuration, the arena, the LRU, the counters, the dirty accounting.
    pub(crate) core: Core,
    /// The background flusher, started by the first write if
    /// [`Config::background_writeback`] is on.
    pub(crate) flusher: std::sync::OnceLock<Arc<Flusher>>,
    /// Held by the one thread running the shadow-node shrinker.
    pub(crate) shadow_shrinker: Mutex<()>,
    /// The asynchronous readahead workers (`cache/async_ra.rs`), which also read async
    /// reads' misses.
    pub(crate) async_ra: Arc<super::async_ra::AsyncRa>,
    /// The workers that run the async calls' blocking parts (`cache/aio.rs`).
    pub(crate) aio_pool: Arc<super::async_ra::AsyncRa>,
}

impl std::ops::Deref for CacheInner {
    type Target = Core;

    #[inline]
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Drop for CacheInner {
    fn drop(&mut self) {
        // Every job holds the cache: none is left to run.
        self.async_ra.stop();
        self.aio_pool.stop();
        if let Some(k) = &self.kswapd {
            k.worker.stop();
        }
        if let Some(f) = self.flusher.get() {
            f.worker.stop();
        }
        // Unmount's `sync_filesystem`: write back and sync every file with dirty pages. No
        // handle is left to hear of an error here: callers that care call
        // `FolioCache::sync_all` (or sync their files) before dropping.
        for m in self.live_mappings() {
            self.flush_before_drop(&m);
        }
        // `lru_add_drain_all` at shutdown: the batches hold references on folios.
        self.lru.drain_all(&self.arena);
        self.deflate_all();
    }
}

impl std::fmt::Debug for CacheInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheInner")
            .field("config", &self.config)
            .field("arena", &self.arena)
            .finish()
    }
}

impl CacheInner {
    /// `iput`: puts a use of an inode (a closed handle, a dropped owned guard). The last use
    /// parks the inode in the inode cache (`iput_final`), which may evict the least recently
    /// used unused inodes; a file opened from a custom backing is not in the inode cache and
    /// goes with its last reference.
    pub(crate) fn iput(&self, m: Arc<Inode>) {
        // ORDERING: AcqRel; the decrement to zero is re-checked under the icache mutex
        // (`Icache::park`), where opens take their uses, so it only has to be atomic; AcqRel
        // orders this user's accesses to the inode before an eviction that follows.
        if m.users.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let Some(key) = m.key else {
            // A custom backing's file goes with its last user: write it back first.
            self.flush_before_drop(&m);
            return;
        };
        // `generic_drop_inode`: a file with no name left (deleted while open) goes now, with
        // its descriptors; its dirty pages have nowhere to go and are dropped without I/O.
        // (One `fstat` per last close. A file deleted after its last close is only seen by
        // the inode cache's pruning or `drop_caches`: the cache does not see unlinks.)
        if matches!(m.mapping.backing.links(), Ok(Some(0))) {
            let removed = self.icache.lock().remove_unused(key);
            if let Some(removed) = removed {
                self.counters.inc(Event::InodesEvicted);
                self.counters.inc(Event::DeletedInodesDropped);
                drop(m);
                // `truncate_inode_pages_final`: the dirty pages leave without being written
                // (after any write in flight ends), and their charge leaves the dirty limit.
                let discarded =
                    crate::mm::writeback::cancel_dirty_from(&removed.mapping, 0, &self.dirty);
                self.counters.add(Event::DirtyDiscarded, discarded);
                drop(removed);
                self.deliver();
                return;
            }
            // Reopened meanwhile (through a new name): it lives on.
            return;
        }
        let evicted = self.icache.lock().park(key);
        self.counters
            .add(Event::InodesEvicted, evicted.len() as u64);
        // Dropped here, without the lock: an evicted inode truncates its pages (`m` first: it
        // may be one of them), and the eviction listener hears of it.
        drop(m);
        drop(evicted);
        self.deliver();
    }

    /// Starts the background flusher if it is configured and not running yet (the first
    /// write's job), then kicks it if the dirty pages reached the background threshold.
    pub(crate) fn wake_flusher(self: &Arc<Self>) {
        if !self.config.background_writeback {
            return;
        }
        let f = self.flusher.get_or_init(|| {
            let f = Arc::new(Flusher::new(
                self.config.dirty_writeback_interval,
                self.config.dirty_expire,
            ));
            let (t, weak) = (f.clone(), Arc::downgrade(self));
            // A failed spawn leaves the cache without background writeback: syncs, the dirty
            // limit and eviction still write everything back.
            let _ = std::thread::Builder::new()
                .name("foliocache-flush".into())
                .spawn(move || t.run(weak, |c: &CacheInner| c.dirty_inodes()));
            f
        });
        // ORDERING: Relaxed; a hint (the flusher's timer catches a missed one).
        if self.dirty.dirty() >= self.dirty.background()
            || self.pageout_queued.load(crate::mm::sync::Ordering::Relaxed) != 0
        {
            f.kick();
        }
    }

    /// Writes back and syncs a file about to be dropped with dirty pages (errors can reach no
    /// handle; they are counted).
    pub(crate) fn flush_before_drop(&self, m: &Inode) {
        if !m.mapping.wb.has_unwritten() {
            return;
        }
        writeback_mapping(self, m, 0, u64::MAX, crate::mm::writeback::SyncMode::All);
        crate::mm::writeback::wait_writeback_range(&m.mapping, 0, u64::MAX);
        let writer = m.mapping.writer.lock().clone();
        if let Some(w) = writer {
            if w.sync_data().is_err() {
                self.counters.inc(Event::WritebackErrors);
            }
        }
    }

    /// The files with dirty pages, oldest dirtied first (the dirty-file list, `b_dirty`): what
    /// the flusher and a throttled writer walk instead of every live file.
    pub(crate) fn dirty_inodes(&self) -> Vec<Arc<Inode>> {
        let ids = self.dirty.dirty_files();
        let live = self.live.lock();
        ids.iter()
            .filter_map(|id| live.get(id).and_then(|w| w.upgrade()))
            .collect()
    }

    /// Every mapping alive now (open or cached), for statistics and `drop_caches`.
    pub(crate) fn live_mappings(&self) -> Vec<Arc<Inode>> {
        self.live
            .lock()
            .values()
            .filter_map(|w| w.upgrade())
            .collect()
    }

    /// The one allocation hook of the cache (`filemap_alloc_folio`): when the budget is used
    /// up, reclaims cold folios in this thread and retries; fails only when reclaim finds
    /// nothing to free (everything pinned, mapped or under I/O).
    pub(crate) fn alloc_folio(&self, order: u32) -> Result<FolioRef<'_>, AllocError> {
        self.alloc_with(order, Patience::Retry)
    }

    /// [`CacheInner::alloc_folio`] and [`CacheInner::alloc_folio_noretry`]: reclaim as
    /// `patience` allows, the shadow shrinker, the wait for pageout where reclaim met only
    /// dirty pages, and the background reclaimer's doorbell.
    fn alloc_with(&self, order: u32, patience: Patience) -> Result<FolioRef<'_>, AllocError> {
        let f = self.try_alloc(order, patience);
        self.shrink_slab();
        let f = match f {
            Ok(f) => f,
            Err(e) => self.alloc_throttled(order, e, patience)?,
        };
        if let Some(k) = &self.kswapd {
            k.note_alloc(&self.arena);
        }
        Ok(f)
    }

    /// One try: the LRU's allocation with full reclaim, or with one reclaim pass.
    fn try_alloc(&self, order: u32, patience: Patience) -> Result<FolioRef<'_>, AllocError> {
        match patience {
            Patience::Retry => self.lru.alloc(&self.arena, self, order),
            Patience::NoRetry => self.lru.alloc_noretry(&self.arena, self, order),
        }
    }

    /// `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)`, with [`Config::pageout`]: reclaim found
    /// no clean page but queued dirty ones for the flusher (or pages are under writeback), so
    /// the allocation writes the coldest queued pages itself where it can do so without
    /// waiting (`writeback::pageout_direct`), else waits for the flusher's writes to end
    /// (each rotates its page to the inactive tail, clean), and tries again instead of
    /// failing at once. It fails once a whole [`ALLOC_NO_PROGRESS`] passes with no page
    /// written back by anyone, or after ten of them in all (the kernel's `should_reclaim_retry` gives up after
    /// `MAX_RECLAIM_RETRIES` rounds without progress, each throttled for up to 100 ms), or at
    /// once when nothing is queued or in flight that could free a page. A caller holding a
    /// folio lock the flusher needs only delays it by that much. (A fixed 100 ms failed a
    /// 256-page pool's allocation under CPU load: its flusher, which alone may flush the log,
    /// was not scheduled in time.)
    ///
    /// A readahead allocation ([`Patience::NoRetry`]) waits the same way for at most
    /// [`READAHEAD_PAGEOUT_WAIT`], and each of its tries is one reclaim pass.
    #[cold]
    fn alloc_throttled(
        &self,
        order: u32,
        err: AllocError,
        patience: Patience,
    ) -> Result<FolioRef<'_>, AllocError> {
        if !self.config.pageout {
            return Err(err);
        }
        // ORDERING: Relaxed, both; a hint for the flusher's pageout (`cache::writeback`).
        self.alloc_waiting.fetch_add(1, Ordering::Relaxed);
        let r = self.alloc_waiting_for_pageout(order, err, patience);
        self.alloc_waiting.fetch_sub(1, Ordering::Relaxed);
        r
    }

    /// [`CacheInner::alloc_throttled`]'s loop.
    fn alloc_waiting_for_pageout(
        &self,
        order: u32,
        err: AllocError,
        patience: Patience,
    ) -> Result<FolioRef<'_>, AllocError> {
        let written = || self.counters.sum(Event::WritebackPages);
        let mut seen = written();
        let start = std::time::Instant::now();
        let mut deadline = start
            + match patience {
                Patience::Retry => ALLOC_NO_PROGRESS,
                Patience::NoRetry => READAHEAD_PAGEOUT_WAIT,
            };
        let mut err = err;
        let mut idle = 0;
        while std::time::Instant::now() < deadline {
            let now = written();
            if now != seen && patience == Patience::Retry {
                // Someone's writes ended since the last look: progress, so wait longer (but
                // not forever: writes that keep failing count here too).
                seen = now;
                deadline = (std::time::Instant::now() + ALLOC_NO_PROGRESS)
                    .min(start + ALLOC_NO_PROGRESS * 10);
            }
            // ORDERING: Relaxed; hints (the timeout bounds a stale answer).
            let queued = self.pageout_queued.load(Ordering::Relaxed) != 0;
            if !queued && self.dirty.writeback() == 0 && self.dirty.dirty() == 0 {
                // Nothing dirty, queued or in flight: no write will free a page. Seen twice
                // in a row, a wait apart, since a pass that has just ended its writes may
                // still hold its folios for a moment (and one that has just taken the queue
                // has not yet started its writes: dirty pages are never a reason to stop).
                idle += 1;
                if idle == 2 {
                    break;
                }
            } else {
                idle = 0;
            }
            let flusher = self.flusher.get();
            if let Some(f) = flusher {
                f.kick();
            }
            // The coldest queued pages, written by this thread if it can do so without waiting
            // (a buffer pool's single-page flush); the allocation then finds them clean. What
            // it cannot write (a page locked, or holding a change not yet logged durably) the
            // flusher, kicked above, writes; without one, nothing else will.
            let done = super::writeback::pageout_direct(self, || self.dirty_inodes());
            if done.written > 0 || (done.taken && !done.held) {
                // Pages written, or entries of pages someone else wrote since they were
                // queued taken off the queue: try again at once (reclaim queues what it
                // meets dirty again).
                match self.try_alloc(order, patience) {
                    Ok(f) => return Ok(f),
                    Err(e) => err = e,
                }
                continue;
            }
            if flusher.is_none() && !self.kswapd_busy() && self.dirty.writeback() == 0 {
                // Nothing this thread may write, and no one else to write it (the background
                // reclaimer, in a pass now, may have taken the queue and be writing it).
                break;
            }
            // Woken when a writeback makes room under the dirty limit; already under it (the
            // pages reclaim cannot free are under writeback, pinned or latched) it returns at
            // once, so sleep a little instead of scanning again at full speed.
            let t = std::time::Instant::now();
            self.dirty
                .wait_for_room(std::time::Duration::from_millis(1));
            if t.elapsed() < std::time::Duration::from_micros(100) {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            match self.try_alloc(order, patience) {
                Ok(f) => return Ok(f),
                Err(e) => err = e,
            }
        }
        Err(err)
    }

    /// kswapd's own `pageout()` ([`Config::pageout`] with [`Config::background_reclaim`]):
    /// after a balance that left free pages below the high watermark because reclaim met
    /// only dirty pages, the reclaimer writes the coldest queued ones itself (as an
    /// allocation does, never waiting: `writeback::pageout_direct`), kicks the flusher for
    /// those it may not write (a change not yet logged durably), and balances again. So a
    /// pool whose every page is dirty still keeps the watermarks' few free pages ahead of
    /// its allocations, and a readahead allocation (one reclaim pass) finds a whole large
    /// folio free instead of falling back to pages. A few rounds at most: the next
    /// allocation's kick, or the reclaimer's timer, starts another.
    pub(crate) fn kswapd_pageout(&self, wm: crate::mm::lru::Watermarks) {
        if !self.config.pageout {
            return;
        }
        for _ in 0..KSWAPD_PAGEOUT_ROUNDS {
            // ORDERING: Relaxed; hints (the next round, or the next kick, sees newer ones).
            if self.arena.stats().free_pages >= wm.high
                || self.pageout_queued.load(Ordering::Relaxed) == 0
            {
                return;
            }
            let done = super::writeback::pageout_direct(self, || self.dirty_inodes());
            if let Some(f) = self.flusher.get() {
                f.kick();
            }
            if done.written == 0 {
                return;
            }
            self.lru.balance(&self.arena, self, wm);
        }
    }

    /// Whether the background reclaimer is in a pass now (its pageout may hold the pages an
    /// allocation waits for).
    fn kswapd_busy(&self) -> bool {
        self.kswapd
            .as_ref()
            .is_some_and(|k| k.worker.busy.try_lock().is_none())
    }

    /// The allocation hook for readahead (`readahead_gfp_mask`: `__GFP_NORETRY`): one reclaim
    /// pass at most, then failure, so that a window shrinks instead of a reader stalling
    /// while it holds the part of the window it already allocated.
    ///
    /// With [`Config::pageout`], a pass that met only dirty pages is followed by the
    /// allocation's own pageout of the coldest queued ones and a short wait for the pageouts
    /// of others (`alloc_throttled`, for at most [`READAHEAD_PAGEOUT_WAIT`]), each followed
    /// by one more pass: in a buffer pool whose every page is dirty, a read would otherwise
    /// fall back to smaller folios whenever the background reclaimer has not kept a few free
    /// (a 16 KiB block read as four pages, then collapsed under its latch).
    pub(crate) fn alloc_folio_noretry(&self, order: u32) -> Result<FolioRef<'_>, AllocError> {
        self.alloc_with(order, Patience::NoRetry)
    }

    /// `shrink_slab` for the one shrinker we have (`mm-shadow`): if the cache's indexes hold
    /// more shadow nodes than [`ShadowNodes::limit`] allows for the budget, free half the
    /// excess (a shrinker with `seeks = 0` is asked for half of what it reports freeable). A
    /// relaxed load when within the limit; one thread at a time beyond it.
    #[inline]
    pub(crate) fn shrink_slab(&self) {
        let limit = ShadowNodes::limit(self.budget_pages());
        if self.lru.shadow_nodes().nodes() > limit {
            self.scan_shadow_nodes(2);
        }
    }

    /// `count_shadow_nodes` + `scan_shadow_nodes`: frees `excess / divisor` (at least one)
    /// shadow nodes, oldest first in each index, each index giving its share in proportion to
    /// the shadow nodes it holds. Returns the nodes freed (0 if within the limit, or another
    /// thread is shrinking).
    #[cold]
    pub(crate) fn scan_shadow_nodes(&self, divisor: u64) -> u64 {
        let Some(_one) = self.shadow_shrinker.try_lock() else {
            return 0;
        };
        let excess = self.lru.shadow_nodes().excess(self.budget_pages());
        if excess == 0 {
            return 0;
        }
        let want = excess.div_ceil(divisor.max(1));
        let live = self.live_mappings();
        let held: Vec<u64> = live
            .iter()
            .map(|m| m.mapping.pages.stats().shadow_nodes)
            .collect();
        let total: u64 = held.iter().sum();
        let mut freed = 0;
        if total > 0 {
            for (m, nodes) in live.iter().zip(held) {
                let left = want.saturating_sub(freed);
                if left == 0 {
                    break;
                }
                let share = (nodes as u128 * want as u128).div_ceil(total as u128) as u64;
                freed += m.mapping.pages.shrink_shadow_nodes(share.min(left));
            }
        }
        // Dropping the last reference on a mapping truncates it: do it with no lock held.
        drop(_one);
        drop(live);
        freed
    }
}

impl crate::mm::readahead::RaHost for CacheInner {
    fn alloc_folio_noretry(&self, order: u32) -> Result<FolioRef<'_>, AllocError> {
        CacheInner::alloc_folio_noretry(self, order)
    }

    fn alloc_folio(&self, order: u32) -> Result<FolioRef<'_>, AllocError> {
        CacheInner::alloc_folio(self, order)
    }

    #[inline]
    fn folio_added(&self, folio: &FolioLocked<'_>, shadow: Option<Shadow>) {
        Core::folio_added(self, folio, shadow)
    }

    #[inline]
    fn insert_mode(&self) -> crate::mm::readahead::InsertMode {
        self.config.experiment.insert_mode
    }

    fn engine(&self) -> &crate::io::engine::Engine {
        &self.engine
    }

    #[inline]
    fn count(&self, ev: crate::mm::readahead::RaEvent, n: u64) {
        use crate::mm::readahead::RaEvent as R;
        let ev = match ev {
            R::RaPages => Event::RaPages,
            R::RaFolios => Event::RaFolios,
            R::RaLargeFolios => Event::RaLargeFolios,
            R::RaOrderFallbacks => Event::RaOrderFallbacks,
            R::RaFallbacks => Event::RaFallbacks,
            R::IoReads => Event::IoReads,
            R::IoBytes => Event::IoBytes,
            R::IoErrors => Event::IoErrors,
        };
        self.counters.add(ev, n);
    }
}

/// The most pageout-and-balance rounds one wake of the background reclaimer runs
/// ([`CacheInner::kswapd_pageout`]); each writes up to `DIRECT_PAGEOUT_BATCH` pages.
const KSWAPD_PAGEOUT_ROUNDS: usize = 4;

/// How an allocation that found no clean page waits for pageout
/// ([`CacheInner::alloc_throttled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Patience {
    /// Full reclaim on each try; fails after [`ALLOC_NO_PROGRESS`] without a page written.
    Retry,
    /// Readahead's (`__GFP_NORETRY`): one reclaim pass a try, for at most
    /// [`READAHEAD_PAGEOUT_WAIT`].
    NoRetry,
}

/// The longest a readahead allocation waits for pageout before its window falls back to
/// smaller folios (or shrinks): a few writes' time, and the background reclaimer's pass.
const READAHEAD_PAGEOUT_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// How long an allocation waiting for pageout goes on without any page written back before
/// it fails ([`CacheInner::alloc_throttled`]).
const ALLOC_NO_PROGRESS: std::time::Duration = std::time::Duration::from_secs(1);

impl Evict for CacheInner {
    /// Reclaim's `__remove_mapping`: finds the folio's file by its mapping id and evicts the
    /// folio from that file's index.
    fn evict<'a>(&self, folio: FolioLocked<'a>) -> Result<(), FolioRef<'a>> {
        if self.keep_unwritten(&folio) {
            return Err(folio.unlock());
        }
        let mapping = {
            let live = self.live.lock();
            live.get(&folio.mapping()).and_then(|w| w.upgrade())
        };
        let Some(m) = mapping else {
            // The file is going away; its truncation frees the folio.
            return Err(folio.unlock());
        };
        // Unlock before `m` can drop: if it is the file's last reference, the drop truncates
        // the file and takes every folio lock. The slot keeps a shadow entry
        // (`workingset_eviction`, under the index lock once the folio is frozen).
        let pages = folio.index()..folio.index() + folio.nr_pages() as u64;
        let r = m
            .mapping
            .pages
            .evict_with_shadow(folio, |f| self.lru.workingset_eviction(&self.arena, f))
            .map_err(FolioLocked::unlock);
        if r.is_ok() {
            let n = pages.end - pages.start;
            self.note_eviction(&m, pages, n, Budget::reclaim_reason());
        }
        drop(m);
        r
    }

    /// The batch form: the files of the batch are looked up under one hold of the
    /// live-mapping table, and each file's folios leave its index under one index-lock hold
    /// ([`Index::evict_batch_with_shadow`](crate::mm::index::Index::evict_batch_with_shadow)).
    fn evict_batch<'a>(&self, folios: Vec<FolioLocked<'a>>, kept: &mut Vec<FolioRef<'a>>) -> u64 {
        // Group by file, keeping reclaim's order within each (a batch is at most
        // SWAP_CLUSTER_MAX folios, usually of a handful of files).
        let mut groups: Vec<(u64, Vec<FolioLocked<'a>>)> = Vec::new();
        for folio in folios {
            if self.keep_unwritten(&folio) {
                kept.push(folio.unlock());
                continue;
            }
            let id = folio.mapping();
            match groups.iter_mut().find(|(g, _)| *g == id) {
                Some((_, v)) => v.push(folio),
                None => groups.push((id, vec![folio])),
            }
        }
        let mappings: Vec<Option<Arc<Inode>>> = {
            let live = self.live.lock();
            groups
                .iter()
                .map(|(id, _)| live.get(id).and_then(|w| w.upgrade()))
                .collect()
        };
        let mut freed = 0;
        let mut not_evicted = Vec::new();
        let listening = self.budget.listening();
        for ((_, group), m) in groups.into_iter().zip(&mappings) {
            match m {
                Some(m) => {
                    // The folios' page ranges, for the eviction listener (only if one is set).
                    let ranges: Vec<(u64, u64)> = if listening {
                        group
                            .iter()
                            .map(|f| (f.index(), f.nr_pages() as u64))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    freed += m.mapping.pages.evict_batch_with_shadow(
                        group,
                        |f| self.lru.workingset_eviction(&self.arena, f),
                        &mut not_evicted,
                    );
                    let reason = Budget::reclaim_reason();
                    for (index, n) in ranges {
                        if !not_evicted.iter().any(|f| f.index() == index) {
                            self.note_eviction(m, index..index + n, n, reason);
                        }
                    }
                }
                // The file is going away; its truncation frees these folios.
                None => not_evicted.extend(group),
            }
            kept.extend(not_evicted.drain(..).map(FolioLocked::unlock));
        }
        // Every folio is unlocked or freed: now a mapping reference may be the last one (its
        // drop truncates the file, taking every folio lock).
        drop(mappings);
        freed
    }
}
