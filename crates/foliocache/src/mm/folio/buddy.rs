//! The frame allocator behind the arena: a binary buddy allocator (`mm/page_alloc.c`,
//! `__rmqueue_smallest` / `__free_one_page`) with per-CPU free lists (`struct per_cpu_pages`,
//! `rmqueue_pcplist` / `free_unref_folios`) in front of it for the small orders.
//!
//! # Buddy
//!
//! Frames are numbered `0..nr_pages` (the pfn). A free block of order `o` is `2^o` frames
//! starting at a pfn aligned to `2^o`; its buddy is the block at `pfn ^ 2^o`. Freeing merges a
//! block with its buddy while the buddy is free at the same order; allocating takes the
//! smallest free block of at least the order asked for and splits it, putting the unused
//! halves back. Each order keeps an intrusive doubly linked free list threaded through two
//! `u32` arrays indexed by pfn, so every list operation is O(1) and a whole alloc or free is
//! O([`MAX_ORDER`]). A budget that is not a multiple of the largest block is covered by
//! smaller aligned blocks at its end.
//!
//! The lists start empty: frames are listed one largest block at a time, in pfn order, when
//! a request finds no listed block large enough (`deferred_grow_zone`; the arena's module
//! docs explain why), so the arrays above are written only as far as the budget has been
//! used. Unlisted frames are free: they count in the free pages and never need merging.
//!
//! Fragmentation: like the kernel's, the buddy system keeps free memory in the largest blocks
//! it can, but a single order-0 folio still allocated inside a 2 MiB block prevents that block
//! from serving an order-9 request. Large allocations can therefore fail while many small
//! frames are free; the error reports both so a caller can tell exhaustion from fragmentation.
//! There is no compaction (folios never move: their headers are addressed by pfn).
//!
//! # Per-CPU lists
//!
//! Orders `0..=`[`PCP_MAX_ORDER`] (the kernel caches up to `PAGE_ALLOC_COSTLY_ORDER`) are served
//! from a per-CPU stack of free blocks under a per-CPU mutex, refilled from and drained to the
//! buddy in batches under one buddy-lock hold, so the shared buddy lock is taken once per
//! `batch` folios. The CPU is only a hint (a thread may migrate): the per-CPU lock makes a
//! migrated access correct, just not local. Frames parked on a per-CPU list are free but not
//! mergeable. `alloc_local` (`get_page_from_freelist`) looks only at this CPU's list and the
//! buddy; `alloc` then drains every per-CPU list and retries once (`drain_all_pages` in
//! `__alloc_pages_direct_reclaim`), so a single-threaded allocation fails only when no
//! suitable block exists anywhere. Under concurrency another CPU may refill its list between
//! the drain and the retry, so a failure can be early by at most one batch per CPU; callers
//! that reclaim and retry (the LRU) absorb that. The LRU, like the kernel, tries
//! `alloc_local` before reclaiming and the draining `alloc` only after: draining first hands a
//! reclaimer's fresh pages to whichever CPU asks next and moves them through the buddy lock.
//! The price is the kernel's too: pages parked on a CPU whose threads stopped allocating stay
//! there until some allocation comes up empty after reclaiming, at most `high` per CPU (1/8
//! of the budget over all CPUs; with every thread busy, a reclaim pass's leftovers, under
//! [`SWAP_CLUSTER_MAX`](crate::mm::lru::SWAP_CLUSTER_MAX) per CPU). The kernel's vmstat worker
//! also decays an idle CPU's `high` and returns the excess (`decay_pcp_high`); nothing here
//! runs on an idle CPU's behalf.
//!
//! A background reclaimer frees pages for other CPUs, so parking them on its own list would
//! hide them from every allocation but a draining one. While one is balancing
//! (`ZONE_RECLAIM_ACTIVE`), frees keep at most four of the kernel's batches for a zone of the
//! budget's size per CPU (`nr_pcp_high`: 12 pages for 64 MiB, 252 from 1 GiB up) and return
//! the rest to the buddy. Allocation stalls per second in the `lru` lab scenario with
//! `--background-reclaim` (quick: a 4 MiB budget; two runs each), at 1 and 2 threads:
//! 3.6-3.9 k and 4.1-4.4 k when allocations drained first, 22 k and 8.8-9.1 k with the
//! kernel's order and no cap, 4.6-5.4 k and 5.9-6.3 k with the cap.

use crate::mm::sync::{current_cpu, num_cpus, AtomicUsize, CachePadded, Mutex, Ordering};

/// `MAX_PAGE_ORDER`: the largest folio order (2^9 pages = 2 MiB).
pub const MAX_ORDER: u32 = 9;
/// Number of orders, `0..=MAX_ORDER`.
pub const NR_ORDERS: usize = MAX_ORDER as usize + 1;
/// `PAGE_ALLOC_COSTLY_ORDER`: orders up to this one are cached per CPU.
pub const PCP_MAX_ORDER: u32 = 3;
const NR_PCP_ORDERS: usize = PCP_MAX_ORDER as usize + 1;

/// "No pfn" in the intrusive lists.
const NONE: u32 = u32::MAX;
/// `free_order` value of a frame that does not head a free buddy block.
const NOT_FREE: u8 = u8::MAX;

/// Bytes of buddy metadata per frame once its chunk is listed: the two links and the order.
pub(crate) const BYTES_PER_PAGE: usize = 2 * std::mem::size_of::<u32>() + 1;

/// The buddy lists, under the zone lock.
pub(crate) struct Buddy {
    nr_pages: u32,
    /// Frames `0..grown` have been put on the free lists; the rest are free but not listed
    /// yet (`deferred_grow_zone`), and their entries in the arrays below do not exist yet.
    grown: u32,
    head: [u32; NR_ORDERS],
    next: Vec<u32>,
    prev: Vec<u32>,
    /// Order of the free block headed by this pfn, or [`NOT_FREE`].
    free_order: Vec<u8>,
    nr_free: [usize; NR_ORDERS],
}

impl Buddy {
    /// All frames free, none listed yet: the lists grow one largest block at a time as
    /// allocations need them ([`Buddy::grow`]). The arrays' room is reserved (address space
    /// only) but written only as they grow; a failed reservation is the error.
    pub(crate) fn new(nr_pages: u32) -> Result<Self, std::collections::TryReserveError> {
        let n = nr_pages as usize;
        let (mut next, mut prev, mut free_order) = (Vec::new(), Vec::new(), Vec::new());
        next.try_reserve_exact(n)?;
        prev.try_reserve_exact(n)?;
        free_order.try_reserve_exact(n)?;
        Ok(Self {
            nr_pages,
            grown: 0,
            head: [NONE; NR_ORDERS],
            next,
            prev,
            free_order,
            nr_free: [0; NR_ORDERS],
        })
    }

    /// `deferred_grow_zone`: lists the next largest block's worth of unlisted frames
    /// (`1 << MAX_ORDER`, fewer at the end of an odd budget, in the largest aligned blocks
    /// that fit). False if every frame is listed already.
    ///
    /// Growing by whole aligned largest blocks keeps every buddy of a listed block listed
    /// too, so merging never looks past `grown`.
    #[cold]
    fn grow(&mut self) -> bool {
        let start = self.grown;
        if start == self.nr_pages {
            return false;
        }
        let end = (start as u64 + (1u64 << MAX_ORDER)).min(self.nr_pages as u64) as u32;
        self.next.resize(end as usize, NONE);
        self.prev.resize(end as usize, NONE);
        self.free_order.resize(end as usize, NOT_FREE);
        let mut pfn = start;
        while pfn < end {
            let mut order = MAX_ORDER;
            while pfn % (1 << order) != 0 || pfn as u64 + (1u64 << order) > end as u64 {
                order -= 1;
            }
            self.push(pfn, order);
            pfn += 1 << order;
        }
        self.grown = end;
        true
    }

    /// Frames listed so far (`0..grown`); the rest of the budget is free and unlisted.
    pub(crate) fn grown(&self) -> u32 {
        self.grown
    }

    /// Lists every frame (tests that look at the initial block layout).
    #[cfg(test)]
    pub(crate) fn grow_all(&mut self) {
        while self.grow() {}
    }

    fn push(&mut self, pfn: u32, order: u32) {
        let o = order as usize;
        let old = self.head[o];
        self.next[pfn as usize] = old;
        self.prev[pfn as usize] = NONE;
        if old != NONE {
            self.prev[old as usize] = pfn;
        }
        self.head[o] = pfn;
        self.free_order[pfn as usize] = order as u8;
        self.nr_free[o] += 1;
    }

    fn unlink(&mut self, pfn: u32, order: u32) {
        let o = order as usize;
        let (p, n) = (self.prev[pfn as usize], self.next[pfn as usize]);
        if p == NONE {
            self.head[o] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n != NONE {
            self.prev[n as usize] = p;
        }
        self.free_order[pfn as usize] = NOT_FREE;
        self.nr_free[o] -= 1;
    }

    /// `__rmqueue_smallest`: a free block of exactly `order`, split from a larger one if
    /// needed; the lists grow ([`Buddy::grow`]) only when no listed block is large enough, so
    /// listed memory is used up before new memory is touched.
    pub(crate) fn alloc(&mut self, order: u32) -> Option<u32> {
        let mut o;
        loop {
            o = order;
            while o <= MAX_ORDER && self.head[o as usize] == NONE {
                o += 1;
            }
            if o <= MAX_ORDER {
                break;
            }
            if !self.grow() {
                return None;
            }
        }
        let pfn = self.head[o as usize];
        self.unlink(pfn, o);
        while o > order {
            o -= 1;
            self.push(pfn + (1 << o), o);
        }
        Some(pfn)
    }

    /// `__free_one_page`: returns a block and merges it with its free buddies.
    pub(crate) fn free(&mut self, mut pfn: u32, mut order: u32) {
        debug_assert_eq!(pfn % (1 << order), 0, "misaligned free");
        while order < MAX_ORDER {
            let buddy = pfn ^ (1 << order);
            if buddy as u64 + (1u64 << order) > self.nr_pages as u64
                || self.free_order[buddy as usize] != order as u8
            {
                break;
            }
            self.unlink(buddy, order);
            pfn = pfn.min(buddy);
            order += 1;
        }
        self.push(pfn, order);
    }

    /// Free blocks per order.
    #[cfg(test)]
    pub(crate) fn nr_free(&self) -> [usize; NR_ORDERS] {
        self.nr_free
    }

    /// Every free block as `(pfn, order)`, walking the lists (for `validate`); checks the
    /// links on the way.
    pub(crate) fn blocks(&self) -> Result<Vec<(u32, u32)>, String> {
        let mut out = Vec::new();
        for o in 0..NR_ORDERS {
            let mut prev = NONE;
            let mut pfn = self.head[o];
            let mut n = 0;
            while pfn != NONE {
                if self.prev[pfn as usize] != prev {
                    return Err(format!("buddy: bad prev link at pfn {pfn} order {o}"));
                }
                if self.free_order[pfn as usize] != o as u8 {
                    return Err(format!(
                        "buddy: pfn {pfn} on list {o} marked {}",
                        self.free_order[pfn as usize]
                    ));
                }
                if pfn % (1 << o) != 0 || pfn as u64 + (1u64 << o) > self.nr_pages as u64 {
                    return Err(format!(
                        "buddy: block {pfn} order {o} misaligned or out of range"
                    ));
                }
                out.push((pfn, o as u32));
                n += 1;
                prev = pfn;
                pfn = self.next[pfn as usize];
            }
            if n != self.nr_free[o] {
                return Err(format!(
                    "buddy: order {o} lists {n} blocks, counts {}",
                    self.nr_free[o]
                ));
            }
        }
        Ok(out)
    }
}

/// `zone_batchsize`: the kernel's per-CPU batch for a zone of `nr_pages` pages: about 1/4096
/// of the zone, at most 64 pages, rounded down to `2^n - 1` (the kernel avoids powers of two,
/// which alias in caches), at least 1.
fn zone_batchsize(nr_pages: u32) -> usize {
    let quarter = (nr_pages as usize >> 10).min(256) / 4;
    if quarter == 0 {
        return 1;
    }
    let b = quarter + quarter / 2;
    ((1usize << b.ilog2()) - 1).max(1)
}

/// One CPU's cache of free blocks (`struct per_cpu_pages`).
#[derive(Default)]
pub(crate) struct Pcp {
    lists: [Vec<u32>; NR_PCP_ORDERS],
    /// Pages (not blocks) held.
    count: usize,
}

/// The allocator: buddy lists plus the per-CPU caches.
pub(crate) struct FrameAllocator {
    buddy: CachePadded<Mutex<Buddy>>,
    pcp: Box<[CachePadded<Mutex<Pcp>>]>,
    /// Pages a per-CPU list may hold before it drains `batch` of them (`pcp->high`).
    high: usize,
    /// Blocks moved per refill or drain (`pcp->batch`).
    batch: usize,
    /// What a per-CPU list may keep while reclaim is active: four of the kernel's
    /// `zone_batchsize` batches for a zone of this size (`nr_pcp_high` under
    /// `ZONE_RECLAIM_ACTIVE`), never more than `high`.
    high_reclaim: usize,
    /// Background reclaimers balancing now (`ZONE_RECLAIM_ACTIVE` while non-zero).
    reclaim_active: AtomicUsize,
}

impl FrameAllocator {
    /// The allocator of `nr_pages` free frames; fails only if the buddy's arrays cannot be
    /// reserved.
    pub(crate) fn new(
        nr_pages: u32,
        use_pcp: bool,
    ) -> Result<Self, std::collections::TryReserveError> {
        let buddy = Buddy::new(nr_pages)?;
        let cpus = num_cpus();
        // At most 1/8 of the budget parked over all CPUs (the kernel's `high_max`), and no
        // more than 2 MiB per CPU.
        let high = if use_pcp {
            (nr_pages as usize / (8 * cpus)).min(512)
        } else {
            0
        };
        let batch = (high / 4).max(1);
        let pcp = (0..if high > 0 { cpus } else { 0 })
            .map(|_| CachePadded::new(Mutex::new(Pcp::default())))
            .collect();
        Ok(Self {
            buddy: CachePadded::new(Mutex::new(buddy)),
            pcp,
            high,
            batch,
            high_reclaim: (4 * zone_batchsize(nr_pages)).min(high),
            reclaim_active: AtomicUsize::new(0),
        })
    }

    /// Whether reclaim is active now.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn reclaim_is_active(&self) -> bool {
        self.reclaim_active.load(Ordering::Relaxed) > 0
    }

    /// `set_reclaim_active` / `clear_reclaim_active` (kswapd's `balance_pgdat`): while any
    /// background reclaimer is balancing, frees keep at most `high_reclaim` pages per CPU, so
    /// the pages it frees reach the buddy, where every CPU's allocations find them.
    pub(crate) fn set_reclaim_active(&self, active: bool) {
        // Relaxed: a heuristic on where freed blocks go; no memory is published through
        // it, and a free that misses the change parks or returns one batch more or less.
        if active {
            self.reclaim_active.fetch_add(1, Ordering::Relaxed);
        } else {
            self.reclaim_active.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn pcp_for(&self, order: u32) -> Option<&Mutex<Pcp>> {
        if order > PCP_MAX_ORDER || self.pcp.is_empty() {
            return None;
        }
        Some(&self.pcp[current_cpu() % self.pcp.len()])
    }

    /// `rmqueue`: one free block of `order`, or `None` if none exists anywhere.
    pub(crate) fn alloc(&self, order: u32) -> Option<u32> {
        self.alloc_local(order).or_else(|| self.alloc_slow(order))
    }

    /// `get_page_from_freelist`: one free block from this CPU's list or the buddy, without
    /// touching other CPUs' lists (blocks parked there do not count).
    pub(crate) fn alloc_local(&self, order: u32) -> Option<u32> {
        if let Some(pcp) = self.pcp_for(order) {
            let mut p = pcp.lock();
            if let Some(pfn) = p.lists[order as usize].pop() {
                p.count -= 1 << order;
                return Some(pfn);
            }
            // Refill: `batch` pages' worth of blocks in one buddy-lock hold.
            let want = (self.batch >> order).max(1);
            let mut b = self.buddy.lock();
            for _ in 0..want {
                match b.alloc(order) {
                    Some(pfn) => {
                        p.lists[order as usize].push(pfn);
                        p.count += 1 << order;
                    }
                    None => break,
                }
            }
            drop(b);
            if let Some(pfn) = p.lists[order as usize].pop() {
                p.count -= 1 << order;
                return Some(pfn);
            }
            None
        } else {
            self.buddy.lock().alloc(order)
        }
    }

    #[cold]
    fn alloc_slow(&self, order: u32) -> Option<u32> {
        self.drain_all();
        self.buddy.lock().alloc(order)
    }

    /// `free_one_page` / `free_unref_folios`: returns a block.
    pub(crate) fn free(&self, pfn: u32, order: u32) {
        if let Some(pcp) = self.pcp_for(order) {
            let mut p = pcp.lock();
            p.lists[order as usize].push(pfn);
            p.count += 1 << order;
            // `nr_pcp_high` / `nr_pcp_free`: over `high`, return a batch; while reclaim is
            // active, everything over `high_reclaim`.
            let to_free = if self.reclaim_active.load(Ordering::Relaxed) > 0 {
                p.count.saturating_sub(self.high_reclaim)
            } else if p.count > self.high {
                self.batch
            } else {
                0
            };
            if to_free > 0 {
                let mut b = self.buddy.lock();
                // `free_pcppages_bulk`: return the oldest blocks first, largest orders first
                // so the buddy gets the best chance to merge.
                let mut freed = 0;
                for o in (0..NR_PCP_ORDERS).rev() {
                    while freed < to_free && !p.lists[o].is_empty() {
                        let pfn = p.lists[o].remove(0);
                        b.free(pfn, o as u32);
                        freed += 1 << o;
                        p.count -= 1 << o;
                    }
                }
            }
        } else {
            self.buddy.lock().free(pfn, order);
        }
    }

    /// `drain_all_pages`: moves every per-CPU block back to the buddy.
    pub(crate) fn drain_all(&self) {
        for pcp in self.pcp.iter() {
            let mut p = pcp.lock();
            if p.count == 0 {
                continue;
            }
            let mut b = self.buddy.lock();
            for (o, list) in p.lists.iter_mut().enumerate() {
                for pfn in list.drain(..) {
                    b.free(pfn, o as u32);
                }
            }
            p.count = 0;
        }
    }

    /// Frames the buddy has listed so far: frames from here to the end of the budget are
    /// free and were never touched.
    pub(crate) fn grown(&self) -> u32 {
        self.buddy.lock().grown()
    }

    /// Every free block, in the buddy or parked per CPU, as `(pfn, order)` (for `validate`;
    /// callers make sure nothing allocates). Frames not listed yet ([`FrameAllocator::grown`])
    /// are not among them.
    pub(crate) fn free_blocks(&self) -> Result<Vec<(u32, u32)>, String> {
        let mut out = Vec::new();
        for pcp in self.pcp.iter() {
            let p = pcp.lock();
            let mut pages = 0;
            for (o, list) in p.lists.iter().enumerate() {
                for &pfn in list {
                    out.push((pfn, o as u32));
                    pages += 1 << o;
                }
            }
            if pages != p.count {
                return Err(format!("pcp holds {pages} pages but counts {}", p.count));
            }
        }
        let b = self.buddy.lock();
        out.extend(b.blocks()?);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_pages(b: &Buddy) -> usize {
        b.nr_free().iter().enumerate().map(|(o, n)| n << o).sum()
    }

    #[test]
    #[cfg(not(loom))] // builds a FrameAllocator (atomics) outside a loom model
    fn reclaim_caps_follow_the_kernels_zone_batchsize() {
        // 4 MiB, 64 MiB, 1 GiB and 4 GiB of 4 KiB pages.
        let batches: Vec<usize> = [1 << 10, 1 << 14, 1 << 18, 1 << 20]
            .into_iter()
            .map(zone_batchsize)
            .collect();
        assert_eq!(batches, [1, 3, 63, 63]);
        let a = FrameAllocator::new(1 << 14, true).unwrap();
        assert_eq!(a.high_reclaim, 12.min(a.high));
    }

    #[test]
    fn initial_blocks_cover_an_odd_budget() {
        let mut b = Buddy::new(1000).unwrap();
        b.grow_all();
        assert_eq!(free_pages(&b), 1000);
        // 1000 = 512 + 256 + 128 + 64 + 32 + 8
        assert_eq!(b.nr_free()[9], 1);
        assert_eq!(b.nr_free()[3], 1);
        assert_eq!(b.blocks().unwrap().len(), 6);
    }

    #[test]
    fn split_and_merge_round_trip() {
        let mut b = Buddy::new(512).unwrap();
        let a = b.alloc(0).unwrap();
        assert_eq!(a, 0);
        // 1 + 2 + 4 + ... + 256 remain as one block of each order below 9.
        for o in 0..9 {
            assert_eq!(b.nr_free()[o], 1, "order {o}");
        }
        let big = b.alloc(8).unwrap();
        assert_eq!(big, 256);
        b.free(a, 0);
        b.free(big, 8);
        assert_eq!(b.nr_free()[9], 1);
        assert_eq!(free_pages(&b), 512);
        assert!(b.blocks().is_ok());
    }

    #[test]
    fn exhaustion_and_fragmentation() {
        let mut b = Buddy::new(8).unwrap();
        let pfns: Vec<u32> = (0..8).map(|_| b.alloc(0).unwrap()).collect();
        assert!(b.alloc(0).is_none());
        // Free every other frame: 4 pages free, no order-1 block.
        for &p in pfns.iter().step_by(2) {
            b.free(p, 0);
        }
        assert_eq!(free_pages(&b), 4);
        assert!(b.alloc(1).is_none());
        for &p in pfns.iter().skip(1).step_by(2) {
            b.free(p, 0);
        }
        assert_eq!(b.nr_free()[3], 1);
    }

    #[test]
    fn the_lists_grow_one_largest_block_at_a_time_as_allocations_need_them() {
        let mut b = Buddy::new(3 * 512 + 100).unwrap();
        assert_eq!(
            (b.grown(), free_pages(&b)),
            (0, 0),
            "nothing listed up front"
        );
        assert!(
            b.next.is_empty() && b.free_order.is_empty(),
            "nothing written up front"
        );
        let first = b.alloc(0).unwrap();
        assert_eq!((first, b.grown()), (0, 512));
        // Listed memory is used up before more is listed, whatever the order.
        let rest: Vec<u32> = (0..511).map(|_| b.alloc(0).unwrap()).collect();
        assert_eq!(b.grown(), 512);
        let big = b.alloc(MAX_ORDER).unwrap();
        assert_eq!((big, b.grown()), (512, 1024));
        b.free(big, MAX_ORDER);
        // The partial last chunk comes in smaller blocks, and then the lists are full grown.
        let mut n = 0;
        while b.alloc(6).is_some() {
            n += 1;
        }
        assert_eq!(b.grown(), 3 * 512 + 100);
        assert_eq!(n, (512 + 512 + 64) / 64);
        assert!(b.blocks().is_ok());
        for p in rest.into_iter().chain([first]) {
            b.free(p, 0);
        }
        assert_eq!(b.nr_free()[MAX_ORDER as usize], 1);
    }
}
