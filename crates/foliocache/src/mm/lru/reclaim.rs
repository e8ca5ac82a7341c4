//! Reclaim: `shrink_lruvec` and the allocation slow path of `mm/vmscan.c` and
//! `mm/page_alloc.c`, for the classic two-list LRU.
//!
//! One reclaim step holds the lruvec lock once to age the active list (if the inactive list is
//! short) and scan up to [`SWAP_CLUSTER_MAX`] folios from the inactive tail: a folio with
//! `PG_referenced` gets a second chance there and then (flag cleared, rotated to the inactive
//! head: `PGROTATED`); the others are isolated, and worked on without the lock:
//!
//! | isolated folio | outcome |
//! |---|---|
//! | anonymous, or mapped by an address space | kept (no swap, no unmapping here) |
//! | locked (I/O, truncation) | kept |
//! | no mapping (truncated under us) | freed if our isolation reference is the last |
//! | in a mapping | [`Evict::evict_batch`], all of the step's together: freeze at page-cache refs + isolation, delete, free; kept if someone holds it |
//!
//! The kernel's `shrink_folio_list` takes each folio's `i_pages` lock separately in
//! `__remove_mapping`; the cache's [`Evict::evict_batch`] removes a step's folios of one file
//! under one index-lock hold instead, the way truncation's `delete_from_page_cache_batch`
//! does, and resolves each file once per step. On the `peers` lab's uniform mix (three misses
//! in four reads) that took 2-thread zero-copy reads from 477 k/s to 522 k/s and the p99 from
//! 23 us to 19 us (medians of 3 interleaved runs of the two builds).
//!
//! Kept folios go back under a second lock hold (`move_folios_to_lru`), where a put that
//! turns out final unlinks its folio again before freeing it. One lock hold per 32 scanned
//! when every isolated folio is freed, two when some are kept.
//!
//! A deliberate difference from `folio_check_references`: the kernel reclaims a clean,
//! unmapped file folio even if `PG_referenced` is set (promotion is `folio_mark_accessed`'s
//! job). We give it one more trip down the inactive list, a CLOCK-style second chance, so a
//! folio read once since it was last scanned survives one more scan. The kernel tests
//! references after isolation because it walks page tables (`folio_referenced`), which it
//! cannot do under the lruvec lock; with nothing to walk, the flag is tested under the lock,
//! and the second chance costs no isolation and no putback.
//!
//! Aging (`shrink_active_list`) makes a similar choice for the active list by default: a
//! folio read since aging last looked at it spends one of its counted reads (`LRU_REFS`, then
//! `PG_referenced`) and returns to the active head instead of going down
//! ([`LruConfig::active_second_chance`](super::LruConfig::active_second_chance)), where the
//! kernel does that only for referenced executable mappings. Folios aging looks at count as
//! reclaim progress, so a pass over an active list of read folios spends their reads and then
//! deactivates, instead of ending fruitless. On the `peers` Zipf 0.99 trace at 4 active pages
//! per inactive one it is worth 2.3 points of hit ratio (86.2% against 83.9%); at the
//! kernel's ratio of 1 below 1 GiB, 0.2 (84.3% against 84.1%).
//!
//! Both second chances are for a pass that has not yet failed: once an allocation's pass
//! frees nothing, its retries give none (`fruitless` passes scan with `second_chances` off),
//! as the kernel gives none to unmapped file folios. Readers that keep reading every cached
//! folio faster than a pass spends their counts would otherwise protect the whole budget and
//! fail an allocation with nothing pinned (a 64-page cache with two readers of three files
//! and a writer did, once in five runs).
//!
//! The allocation slow path ([`Lru::alloc`]) keeps the kernel's order: try this CPU's free
//! list and the buddy, reclaim, and only when the allocation after a reclaim pass still finds
//! nothing, drain every CPU's free list and try once more. An earlier version drained before
//! reclaiming; with two threads missing at the same rate, each one's freshly reclaimed batch
//! was drained into the buddy by the other's next allocation, and the two fought over each
//! other's per-CPU locks, the buddy lock and the lruvec lock, sleeping on them. Moving the
//! drain back took the `peers` lab (Zipf 0.99, 2 threads) from 2.90 M to 3.49 M copied reads/s
//! and from 3.66 M to 4.32 M zero-copy ones, at the same hit ratio (86.1%); 1 thread is
//! unchanged (medians of 5 interleaved runs of the two builds, each the median of 3 runs of
//! 1 s, on a 2-vCPU VM).

use super::{Lru, LruList, LruVec, LRU_FLAGS_AT_FREE};
use crate::mm::folio::flags::{PG_ACTIVE, PG_LRU, PG_REFERENCED, PG_WORKINGSET};
use crate::mm::folio::{AllocError, Arena, FolioLocked, FolioRef, MAX_ORDER};
use crate::mm::sync::{thread, MutexGuard, Ordering};

/// Folios scanned per reclaim step, and the least a reclaim pass asks for (`SWAP_CLUSTER_MAX`).
pub const SWAP_CLUSTER_MAX: usize = 32;

/// Reclaim passes without progress after which an allocation gives up
/// (`MAX_RECLAIM_RETRIES`).
pub const MAX_RECLAIM_RETRIES: u32 = 16;

/// Passes an allocation waits for folios under I/O before it counts them as unreclaimable.
pub const MAX_BUSY_WAITS: u32 = 1000;

/// Fruitless passes an allocation keeps waiting while some allocated pages are outside the
/// LRU (in flight: allocated by a reader that has not inserted them yet, or isolated by a
/// concurrent reclaimer) or its last pass met folios locked for I/O. Each such pass sleeps
/// 1 ms, so the wait is bounded by about 2 s; only pages that sit on the LRU and cannot be
/// reclaimed (pinned, mapped) make an allocation fail at once.
#[cfg(not(any(loom, miri)))]
pub const MAX_IN_FLIGHT_WAITS: u32 = 2000;
/// Under Miri: a few passes (each is a full reclaim pass, slow to interpret); the tests that
/// reach the limit only check that the allocation fails.
#[cfg(all(miri, not(loom)))]
pub const MAX_IN_FLIGHT_WAITS: u32 = 20;
/// Under loom: a couple of passes, enough to model the wait without exploding the search.
#[cfg(loom)]
pub const MAX_IN_FLIGHT_WAITS: u32 = 2;

/// `reclaim_throttle`: yield at first, then sleep briefly (at most ~50 ms in all).
#[cold]
fn throttle(waits: u32) {
    if waits < 16 {
        thread::yield_now();
    } else {
        #[cfg(not(loom))]
        std::thread::sleep(std::time::Duration::from_micros(50));
        #[cfg(loom)]
        thread::yield_now();
    }
}

/// How reclaim takes a folio out of the page cache: implemented by the layer that owns the
/// mappings (the cache), so the LRU needs no knowledge of indexes or files.
pub trait Evict: Sync {
    /// `__remove_mapping`: `folio` is locked, off the LRU, and holds reclaim's isolation
    /// reference. Under the index lock of the folio's mapping, freeze it at exactly the page
    /// cache's references plus this one, delete it from the index and free it (the index's
    /// `evict`). If anything else holds it (a reader, a pinned guard, a mapping) or it is no
    /// longer in its mapping, unlock it and give the reference back.
    ///
    /// Unlocking before returning matters when the implementation holds the mapping alive
    /// only for the call: if its drop is the mapping's last, it truncates the file, which
    /// takes every folio lock, this one included.
    fn evict<'a>(&self, folio: FolioLocked<'a>) -> Result<(), FolioRef<'a>>;

    /// `shrink_folio_list`'s removals for one reclaim step: [`Evict::evict`] for each of
    /// `folios` (locked, isolated, each holding reclaim's reference), pushing those kept on
    /// `kept` (unlocked). Returns the pages freed. An implementation may batch: resolve each
    /// file once and remove its folios under one index-lock hold.
    fn evict_batch<'a>(&self, folios: Vec<FolioLocked<'a>>, kept: &mut Vec<FolioRef<'a>>) -> u64 {
        let mut freed = 0;
        for folio in folios {
            let nr = folio.nr_pages() as u64;
            match self.evict(folio) {
                Ok(()) => freed += nr,
                Err(f) => kept.push(f),
            }
        }
        freed
    }
}

/// The free-page watermarks of a budget (`zone->_watermark[WMARK_MIN/LOW/HIGH]`), in pages.
///
/// Direct reclaim runs when an allocation finds no free page (the `min` watermark is 0: a
/// userspace cache keeps no atomic reserve). The background reclaimer, when enabled, wakes
/// when free pages fall below `low` and reclaims until they reach `high`, so that most
/// allocations never stall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    /// Below this, allocations reclaim themselves (0: only when nothing is free).
    pub min: u64,
    /// Below this, the background reclaimer is woken.
    pub low: u64,
    /// The background reclaimer stops here.
    pub high: u64,
}

impl Watermarks {
    /// The watermarks of a budget of `pages`: `low` is 1/64 of it (at least one reclaim
    /// batch), `high` twice that (the kernel's `watermark_scale_factor` spacing, scaled up
    /// for small budgets), both capped at half the budget.
    pub fn for_budget(pages: u64) -> Watermarks {
        let low = (pages / 64).max(SWAP_CLUSTER_MAX as u64).min(pages / 4);
        let high = (2 * low).min(pages / 2);
        Watermarks { min: 0, low, high }
    }
}

/// What a reclaim call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReclaimResult {
    /// Folios looked at on the inactive tail.
    pub scanned: u64,
    /// Pages freed.
    pub reclaimed: u64,
    /// Folios kept because they were locked (under I/O): they will be reclaimable soon.
    pub busy: u64,
}

impl std::ops::AddAssign for ReclaimResult {
    fn add_assign(&mut self, o: Self) {
        self.scanned += o.scanned;
        self.reclaimed += o.reclaimed;
        self.busy += o.busy;
    }
}

impl Lru {
    /// `try_to_free_pages` → `shrink_lruvec`: drains every CPU's batches, then reclaims until
    /// `nr_pages` pages are freed or every folio on the lists was looked at twice (enough for
    /// referenced folios to use up their second chance).
    pub fn reclaim(&self, arena: &Arena, evict: &dyn Evict, nr_pages: usize) -> ReclaimResult {
        self.check_arena(arena);
        self.drain_all(arena);
        self.shrink(arena, evict, nr_pages, 0)
    }

    /// The scan loop of [`Lru::reclaim`], batches already drained as the caller chose.
    ///
    /// Looks at up to twice the folios on the lists (plus one step), shifted right by
    /// `scan_shift` (at least one step): an allocation's retries after fruitless passes
    /// scan less and less (see [`Lru::alloc`]). A retry (`scan_shift` above 0) also gives
    /// no second chances (module docs).
    fn shrink(
        &self,
        arena: &Arena,
        evict: &dyn Evict,
        nr_pages: usize,
        scan_shift: u32,
    ) -> ReclaimResult {
        crate::trace::span!("lru_reclaim_runs", nr_pages);
        self.reclaim.runs.fetch_add(1, Ordering::Relaxed);
        let mut total = ReclaimResult::default();
        // The scan budget comes from the list sizes the first step sees under its lock hold.
        // Active folios aging looked at count against it too: with an empty inactive list and
        // every active folio referenced, the first steps only clear flags, and the loop must
        // go on until deactivation moves some down.
        let mut budget = u64::MAX;
        let mut looked_at = 0u64;
        while total.reclaimed < nr_pages as u64 && looked_at < budget {
            let (step, aged, on_lists) = self.shrink_step(arena, evict, scan_shift == 0);
            if budget == u64::MAX {
                budget = ((2 * on_lists + SWAP_CLUSTER_MAX as u64) >> scan_shift.min(63))
                    .max(SWAP_CLUSTER_MAX as u64);
            }
            total += step;
            looked_at += step.scanned + aged;
            if step.scanned + aged == 0 {
                break;
            }
        }
        self.reclaim
            .reclaimed
            .fetch_add(total.reclaimed, Ordering::Relaxed);
        total
    }

    /// `__alloc_pages` with its slow path: allocate a folio of `order`; if the budget is used
    /// up, reclaim in this thread (direct reclaim, an allocation stall) and retry.
    ///
    /// The first attempt takes only what this CPU's free list or the buddy holds
    /// (`get_page_from_freelist`): pages parked on other CPUs' lists stay there, so a thread
    /// that reclaimed a batch for itself keeps it instead of having it drained by a neighbour
    /// (at 2 threads of `foliocache-lab peers`, draining first cost 15-20% of the throughput).
    /// The attempt after each reclaim pass drains every CPU's list if it finds nothing
    /// (`__alloc_pages_direct_reclaim`'s `drained` retry), so free pages are never left idle
    /// while an allocation fails.
    ///
    /// Like the kernel's direct reclaim, a pass drains only this CPU's batches
    /// (`lru_add_drain` in `shrink_inactive_list`); once a pass has freed nothing, the next
    /// ones drain every CPU's (folios dead in other CPUs' batches are freed by that drain).
    /// A pass that freed nothing but met folios locked for I/O waits for them
    /// (`reclaim_throttle`) for up to [`MAX_BUSY_WAITS`] passes. Fails with
    /// [`AllocError::OutOfMemory`] after [`MAX_RECLAIM_RETRIES`] passes freed nothing
    /// otherwise: (nearly) every folio is pinned, mapped, or held outside the LRU. Each of
    /// those retries scans half as many folios as the one before, so a failure costs about
    /// four passes over the lists.
    pub fn alloc<'a>(
        &self,
        arena: &'a Arena,
        evict: &dyn Evict,
        order: u32,
    ) -> Result<FolioRef<'a>, AllocError> {
        self.alloc_inner(arena, evict, order, true)
    }

    /// `__GFP_NORETRY`, as readahead allocates: at most one reclaim pass, no retries and no
    /// waiting; readahead is opportunistic and shrinks instead.
    pub fn alloc_noretry<'a>(
        &self,
        arena: &'a Arena,
        evict: &dyn Evict,
        order: u32,
    ) -> Result<FolioRef<'a>, AllocError> {
        self.alloc_inner(arena, evict, order, false)
    }

    fn alloc_inner<'a>(
        &self,
        arena: &'a Arena,
        evict: &dyn Evict,
        order: u32,
        retry: bool,
    ) -> Result<FolioRef<'a>, AllocError> {
        if order > MAX_ORDER {
            return Err(AllocError::OrderTooLarge { order });
        }
        // `get_page_from_freelist` first: free blocks parked on other CPUs' lists are left
        // there. The allocation after each reclaim pass below drains them if that pass's
        // pages did not reach us (`__alloc_pages_direct_reclaim`'s `drained` retry).
        if let Some(f) = arena.alloc_local(order) {
            return Ok(f);
        }
        self.reclaim.stalls.fetch_add(1, Ordering::Relaxed);
        let (mut fruitless, mut waits, mut in_flight_waits) = (0, 0, 0);
        loop {
            if fruitless == 0 {
                self.drain(arena);
            } else {
                self.drain_all(arena);
            }
            // `should_reclaim_retry`'s no-progress rule, bounded in work as well as in
            // passes: the first pass looks at every folio twice; each retry after a pass that
            // freed nothing looks at half as many as the one before (at least one step), so
            // `MAX_RECLAIM_RETRIES` fruitless passes cost about four passes over the lists,
            // not sixteen times two. A pass that found nothing reclaimable finds the same
            // again unless something changed meanwhile; a folio freed by its holder meanwhile
            // is seen by the allocation below whatever was scanned, and the price is that a
            // folio merely unpinned meanwhile, deep in the lists, may be found only by a
            // later allocation's full pass.
            let r = self.shrink(arena, evict, SWAP_CLUSTER_MAX.max(1 << order), fruitless);
            match arena.alloc(order) {
                Err(e @ AllocError::OutOfMemory { .. }) => {
                    if !retry {
                        return Err(e);
                    }
                    if r.reclaimed == 0 {
                        if r.busy > 0 && waits < MAX_BUSY_WAITS {
                            // Folios under I/O: their readers will unlock them shortly.
                            waits += 1;
                            throttle(waits);
                            continue;
                        }
                        fruitless += 1;
                        if fruitless >= MAX_RECLAIM_RETRIES {
                            // Pages allocated but not (yet, or no longer) on the LRU come
                            // back when their reader inserts them or a concurrent reclaimer
                            // finishes, and folios locked for I/O when their read completes:
                            // waiting for them is not waiting forever. A loaded machine can
                            // deschedule such a reader for many milliseconds (longer than
                            // the busy waits above), as the kernel's reclaim throttles on
                            // folios under I/O instead of failing.
                            if in_flight_waits < MAX_IN_FLIGHT_WAITS
                                && (r.busy > 0 || self.pages_outside_lru(arena) > 0)
                            {
                                in_flight_waits += 1;
                                fruitless -= 1;
                                #[cfg(not(loom))]
                                std::thread::sleep(std::time::Duration::from_millis(1));
                                #[cfg(loom)]
                                thread::yield_now();
                                continue;
                            }
                            self.reclaim.oom.fetch_add(1, Ordering::Relaxed);
                            return Err(e);
                        }
                        // Others may be freeing (their isolated folios, pinned guards).
                        thread::yield_now();
                    }
                }
                done => return done,
            }
        }
    }

    /// `balance_pgdat` (kswapd's work): reclaims in batches until the arena has `wm.high`
    /// free pages, or a pass frees nothing. Drains only the calling thread's CPU batches, as
    /// kswapd's own `lru_add_drain` does. Marks reclaim active meanwhile, as the kernel does,
    /// so that the pages it frees do not stay parked on its own CPU's free list, where the
    /// allocating threads, which try their own CPU's list and the buddy before reclaiming,
    /// would not look.
    pub fn balance(&self, arena: &Arena, evict: &dyn Evict, wm: Watermarks) -> ReclaimResult {
        self.check_arena(arena);
        self.reclaim.background.fetch_add(1, Ordering::Relaxed);
        let _active = arena.reclaim_active();
        let mut total = ReclaimResult::default();
        loop {
            let free = arena.stats().free_pages;
            if free >= wm.high {
                return total;
            }
            self.drain(arena);
            let want = ((wm.high - free) as usize).max(SWAP_CLUSTER_MAX);
            let r = self.shrink(arena, evict, want, 0);
            total += r;
            if r.reclaimed == 0 {
                return total;
            }
        }
    }

    /// One step of `shrink_lruvec`: age the active list if the inactive one is short
    /// (`shrink_active_list`), isolate from the inactive tail (`isolate_lru_folios`), and try
    /// to free what was isolated (`shrink_folio_list`). Returns the step's result, the number
    /// of active folios aging looked at, and the folios on both lists when it started.
    /// `second_chances` off (a retry after a fruitless pass): referenced folios go down and
    /// out like the others.
    fn shrink_step(
        &self,
        arena: &Arena,
        evict: &dyn Evict,
        second_chances: bool,
    ) -> (ReclaimResult, u64, u64) {
        let mut isolated: Vec<FolioRef<'_>> = Vec::with_capacity(SWAP_CLUSTER_MAX);
        let mut skipped: Vec<FolioRef<'_>> = Vec::new();
        let (scanned, aged, on_lists) = {
            let mut v = self.vec.lock();
            let on_lists = v.lists.folios(LruList::Inactive) + v.lists.folios(LruList::Active);
            let clock = self.nonresident_age();
            let mut aged = if v.inactive_is_low() {
                deactivate(&mut v, arena, SWAP_CLUSTER_MAX, second_chances, clock)
            } else {
                0
            };
            if v.protection.is_some() {
                aged += publish_active_tail(&mut v, arena, second_chances, clock);
            }
            let scanned = isolate(&mut v, arena, &mut isolated, &mut skipped, second_chances);
            (scanned, aged as u64, on_lists as u64)
        };
        // Outside the lock: a put of a skipped folio may be final, and the final put takes it.
        drop(skipped);
        let (mut reclaimed, mut busy) = (0u64, 0u64);
        let mut keep: Vec<FolioRef<'_>> = Vec::with_capacity(isolated.len());
        let mut to_evict: Vec<FolioLocked<'_>> = Vec::with_capacity(isolated.len());
        for folio in isolated {
            if folio.is_anon() || arena.ext(&folio).rmap.mapcount() != 0 {
                keep.push(folio);
                continue;
            }
            let locked = match folio.try_lock() {
                Ok(l) => l,
                Err(f) => {
                    busy += 1;
                    keep.push(f);
                    continue;
                }
            };
            // Isolated from the inactive list: PG_lru, PG_active and PG_unevictable are all
            // clear, so the free path will find nothing of ours set.
            debug_assert_eq!(locked.flags() & LRU_FLAGS_AT_FREE, 0);
            if locked.mapping() != 0 {
                to_evict.push(locked);
                continue;
            }
            // Truncated while isolated: the page cache's references are gone; if ours is the
            // last one, the folio is ours to free.
            let nr = locked.nr_pages() as u64;
            // SAFETY: the folio is in no mapping, so the only reference we can account for is
            // our isolation reference: exactly the `1` we freeze at.
            match unsafe { locked.freeze(1) } {
                Ok(frozen) => {
                    frozen.free();
                    reclaimed += nr;
                }
                Err(locked) => keep.push(locked.unlock()),
            }
        }
        if !to_evict.is_empty() {
            reclaimed += evict.evict_batch(to_evict, &mut keep);
        }
        self.putback(arena, keep);
        let step = ReclaimResult {
            scanned: scanned as u64,
            reclaimed,
            busy,
        };
        (step, aged, on_lists)
    }

    /// `move_folios_to_lru`: relinks folios reclaim kept and drops its isolation references;
    /// a put that is final unlinks the folio again and frees it after the lock.
    fn putback(&self, arena: &Arena, folios: Vec<FolioRef<'_>>) {
        if folios.is_empty() {
            return;
        }
        let s = arena.strategy();
        let mut freed = Vec::new();
        {
            let mut v = self.vec.lock();
            for r in folios {
                // We take over the reference and put it by hand, under the lock.
                let folio = r.into_raw();
                v.link(folio);
                if folio.refcount().put(s) {
                    v.release(folio);
                    freed.push(folio);
                }
            }
        }
        for folio in freed {
            arena.free_won(folio);
        }
    }
}

/// `shrink_active_list` for unmapped file folios (nothing to ask the page tables): up to `nr`
/// folios from the active tail lose `PG_active`, gain `PG_workingset`, and move to the
/// inactive head. Done under the lock without isolating, since no rmap walk is needed.
///
/// With [`LruConfig::active_second_chance`](super::LruConfig::active_second_chance) a folio
/// read since aging last looked at it is rotated to the active head instead, spending one
/// read: one from its access count ([`Folio::lru_refs`](crate::mm::folio::Folio::lru_refs), the
/// reads after the first, up to 3), else its `PG_referenced`. The kernel rotates only
/// referenced executable mappings (`VM_EXEC`), whose loss would be felt at once; here the
/// reads are the only access signal there is, and a block read four times since the last
/// pass survives four passes (a GCLOCK: frequency, not just recency, decides). Every folio
/// looked at counts against `nr`, rotated or not, so a step is bounded. Returns the number
/// looked at. With `second_chance` false (a retry after a fruitless pass) nothing rotates.
fn deactivate(
    v: &mut MutexGuard<'_, LruVec>,
    arena: &Arena,
    nr: usize,
    second_chance: bool,
    clock: u64,
) -> usize {
    let mut looked_at = 0;
    while looked_at < nr {
        // The protected policy deactivates to its floor exactly: a folio more would leave
        // the inactive list above it, which admits refaults as if the protected set were
        // still filling.
        if v.protection.is_some() && !v.inactive_is_low() {
            break;
        }
        let Some(pfn) = v.lists.tail(LruList::Active) else {
            break;
        };
        looked_at += 1;
        let folio = arena.folio(pfn);
        if !folio.test_flag(PG_LRU) {
            // Someone isolated it (an activate drain); it is theirs to relink.
            v.lists.move_head(pfn, LruList::Active);
            continue;
        }
        // A chance per read since aging last looked: the counted ones first, then the one
        // that set `PG_referenced`.
        if second_chance && spend_active_chance(v, folio) {
            v.lists.move_head(pfn, LruList::Active);
            super::stamp(v, arena, folio, clock);
            v.counts.rotated_active += 1;
            continue;
        }
        folio.clear_flag(PG_ACTIVE);
        folio.set_flag(PG_WORKINGSET);
        v.lists.move_head(pfn, LruList::Inactive);
        v.counts.deactivated += 1;
    }
    looked_at
}

/// Whether aging gives the active `folio` another trip round the active list, spending one
/// of its counted reads, else its `PG_referenced` ([`LruConfig::active_second_chance`](super::LruConfig)).
#[inline]
fn spend_active_chance(v: &LruVec, folio: &crate::mm::folio::Folio) -> bool {
    v.active_second_chance
        && (folio.dec_lru_refs()
            || (folio.flags() & PG_REFERENCED != 0 && folio.test_clear_flag(PG_REFERENCED)))
}

/// The protected policy's view of the coldest protected folio (`workingset` module docs):
/// rotates referenced active tails to the head (each spending a chance, stamped `clock`), at
/// most [`SWAP_CLUSTER_MAX`], then publishes the stamp of the tail left for refaults to
/// compare their reuse distance with. Returns the folios looked at.
fn publish_active_tail(
    v: &mut MutexGuard<'_, LruVec>,
    arena: &Arena,
    second_chance: bool,
    clock: u64,
) -> usize {
    let mut looked_at = 0;
    while second_chance && looked_at < SWAP_CLUSTER_MAX {
        let Some(pfn) = v.lists.tail(LruList::Active) else {
            break;
        };
        let folio = arena.folio(pfn);
        if folio.test_flag(PG_LRU) {
            if !spend_active_chance(v, folio) {
                break; // the coldest protected folio
            }
            super::stamp(v, arena, folio, clock);
            v.counts.rotated_active += 1;
        }
        // Referenced, or isolated by an activation drain (which relinks it): to the head.
        v.lists.move_head(pfn, LruList::Active);
        looked_at += 1;
    }
    let tail = v.lists.tail(LruList::Active).map(|pfn| {
        // ORDERING: Relaxed; written under the lock we hold (`stamp`).
        arena
            .ext(arena.folio(pfn))
            .lru_stamp
            .load(Ordering::Relaxed)
    });
    if let Some(p) = &v.protection {
        p.set_tail_stamp(tail, v.lists.pages(LruList::Inactive) as u64);
    }
    looked_at
}

/// `isolate_lru_folios` from the inactive tail, scanning up to [`SWAP_CLUSTER_MAX`] folios:
/// a referenced one gets its second chance right here (flag cleared, rotated to the head,
/// no reference taken); the others leave the list with a reference and `PG_lru` cleared.
/// Folios being freed, or isolated by someone else, are rotated to the head. Returns the
/// number scanned. With `second_chance` false a referenced folio is isolated like the rest
/// (`folio_check_references` for an unmapped file folio).
fn isolate<'a>(
    v: &mut MutexGuard<'_, LruVec>,
    arena: &'a Arena,
    isolated: &mut Vec<FolioRef<'a>>,
    skipped: &mut Vec<FolioRef<'a>>,
    second_chance: bool,
) -> usize {
    let mut scanned = 0;
    while scanned < SWAP_CLUSTER_MAX {
        let Some(pfn) = v.lists.tail(LruList::Inactive) else {
            break;
        };
        scanned += 1;
        let folio = arena.folio(pfn);
        // Second chance. Only list position and an LRU flag change, both ours under the lock,
        // so no reference is needed (a dying folio rotated here is unlinked by its final put
        // wherever it sits).
        if second_chance
            && folio.flags() & PG_REFERENCED != 0
            && folio.test_clear_flag(PG_REFERENCED)
        {
            v.lists.move_head(pfn, LruList::Inactive);
            v.counts.rotated += 1;
            continue;
        }
        // A folio whose count reached zero is being freed: its final put will take the lock
        // and unlink it. Never isolate it.
        let Some(r) = arena.try_get(folio) else {
            v.lists.move_head(pfn, LruList::Inactive);
            continue;
        };
        if !folio.test_clear_flag(PG_LRU) {
            v.lists.move_head(pfn, LruList::Inactive);
            skipped.push(r);
            continue;
        }
        v.lists.del(pfn);
        isolated.push(r);
    }
    v.counts.scanned += scanned as u64;
    v.counts.isolated += isolated.len() as u64;
    scanned
}
