//! The LRU: active and inactive lists under one lock, per-CPU add batches, drain-time
//! dead-folio filtering, and reclaim under the memory budget.
//!
//! # What it models
//!
//! `mm/swap.c` and the classic (two-list) half of `mm/vmscan.c`:
//!
//! | here | kernel |
//! |---|---|
//! | [`Lru::add`] | `folio_add_lru` → `folio_batch_add_and_move(folio, lru_add)` |
//! | the drain of an add batch | `folio_batch_move_lru(fbatch, lru_add)` then `folios_put` |
//! | [`Lru::mark_accessed`] | `folio_mark_accessed`, `folio_activate`, `__lru_cache_activate_folio` |
//! | [`Lru::drain`] / [`Lru::drain_all`] | `lru_add_drain` / `lru_add_drain_all` |
//! | the arena's release hook, installed by [`Lru::new`] | `__page_cache_release` + `__folio_clear_lru_flags` on the final put |
//! | [`Lru::reclaim`] | `try_to_free_pages` → `shrink_lruvec`: `shrink_active_list` when `inactive_is_low`, `shrink_inactive_list` |
//! | isolation, second chance, eviction | `isolate_lru_folios`, `folio_check_references`, `__remove_mapping` ([`Evict`]), `move_folios_to_lru` |
//! | [`Lru::alloc`] / [`Lru::alloc_noretry`] | `__alloc_pages_slowpath` with direct reclaim / readahead's `__GFP_NORETRY` |
//! | [`Watermarks`], [`Lru::balance`] | `zone->_watermark[]`, kswapd's `balance_pgdat` (the cache runs it on a thread when asked) |
//! | [`Lru::workingset_eviction`], [`Lru::workingset_refault`] ([`workingset`]) | `mm/workingset.c`: the eviction clock, shadow entries, refault activation |
//! | [`LruPolicy::Protected`] ([`workingset`], "The protected policy") | not the kernel's: LIRS's protected set and CLOCK-Pro's non-resident history judged by reuse distance, ARC's adaptive recency share; it replaces `workingset_refault`'s admission test and `inactive_is_low`'s ratio |
//!
//! One lruvec per cache (the kernel has one per memcg and node); only file folios (the
//! inactive, active and unevictable lists of the file half).
//!
//! Deliberate differences from the kernel's policy: the read that fills a folio is not its
//! first access ([`LruConfig::reference_on_fill`] switches back); a referenced folio gets a
//! second chance at the inactive tail (CLOCK; the kernel reclaims a clean unmapped folio
//! whatever its `PG_referenced`; the reclaim module explains why we do not) and, when aging
//! reaches it, at the active tail, once per read counted since the last pass
//! ([`LruConfig::active_second_chance`] switches back; the kernel keeps only referenced
//! executable mappings). With reads the only access signal an unmapped page has, both lists
//! then age by CLOCK (the active one weighted by read counts, a GCLOCK) instead of by insertion
//! order. The inactive ratio is the kernel's formula unless [`LruConfig::inactive_ratio`]
//! sets it. Under [`LruPolicy::Protected`] (`Config::block_cache`'s) the lists are the same
//! but a refault joins the active list only if it is hotter than the coldest active folio,
//! the inactive list is kept at an adaptive target, and aging counts one read beyond
//! `PG_referenced` ([`PROTECTED_MAX_REFS`]).
//!
//! # The seed (004): dead folios in add batches
//!
//! A folio is queued in a per-CPU add batch with an extra reference when it enters the page
//! cache. If it is truncated, or its file dropped, before the batch drains, the batch's
//! reference is the last one: the folio is *dead*. The vanilla drain adds it to the LRU anyway
//! (lock hold #1), and the `folios_put` that ends the drain drops the last reference, whose
//! final put takes the lock again to unlink it (lock hold #2). With [`DrainFilter::Filtered`]
//! the drain first tries `freeze(1)` on every folio: success proves the batch holds the only
//! reference (and, being a CAS on the count, makes every concurrent speculative `try_get`
//! fail), so the folio is freed right there, without the LRU and without its lock.
//!
//! The seed's first version freed such folios as they were and hit "Bad page state": a folio
//! can carry `PG_active` while it waits in a batch (MGLRU sets it on fault-path adds;
//! [`Lru::mark_accessed`] sets it on a folio it finds in the local batch), and the normal
//! paths clear it either when the folio is added (MGLRU) or when it leaves the lists (classic).
//! The shortcut took neither path. Ours clears every LRU-owned flag that must be clear at free
//! ([`LRU_FLAGS_AT_FREE`]) before handing the frozen folio to the arena's free path. The naive
//! variant is kept, [`DrainFilter::Naive`], so a test and the lab can show the bug's conditions
//! ([`LruConfig::add_as_active`], the MGLRU fault-path analog) firing the bad-page detector.
//!
//! # State of a folio, as the LRU sees it
//!
//! | state | `PG_lru` | linked | LRU-owned reference |
//! |---|---|---|---|
//! | not yet added, or removed and being freed | 0 | no | none |
//! | queued in an add batch | 0 | no | the batch's |
//! | on a list | 1 | yes | none |
//! | queued in an activate batch | 1 | yes | the batch's |
//! | isolated (reclaim, activation drain) | 0 | yes, until unlinked under the lock | the isolator's |
//! | frozen by the filter or by reclaim | 0 | no | none (count frozen) |
//!
//! Flags (bits of the folio's flags word; every change is an atomic RMW on that word):
//!
//! | flag | set by | cleared by |
//! |---|---|---|
//! | `PG_lru` | the drain / putback, under the lock, after linking | an isolator holding a reference (`test_and_clear`), or the final put under the lock |
//! | `PG_active` | activation under the lock; [`Lru::mark_accessed`] on a batched folio; add-as-active; [`Lru::workingset_refault`] before the folio is queued | deactivation under the lock; the filter before a free; the final put |
//! | `PG_referenced` | [`Lru::mark_accessed`] (first access; by default not the read that filled the folio) | promotion to active; reclaim's second chance on either list |
//! | `LRU_REFS` (2 bits) | [`Lru::mark_accessed`] on an active folio already referenced (a compare-and-swap that stops at 3) | aging spending a read (the same CAS); the arena's free path |
//! | `PG_workingset` | deactivation (the folio was active once); a refault whose shadow carries it | the arena's free path (reclaim packs it into the shadow first) |
//! | `PG_unevictable` | the drain, for an `PG_mlocked` folio | the final put; munlock rescue |
//!
//! # Invariants
//!
//! 1. A folio is linked on list `l` iff the lists' slot says so, and its pages are counted in
//!    `l`'s counter ([`Lru::validate`] recomputes both).
//! 2. `PG_lru` set ⇒ linked. The converse fails only while an isolator that cleared `PG_lru`
//!    (holding a reference) has not yet unlinked the folio under the lock.
//! 3. Only a holder of a reference may clear `PG_lru` outside the lock-protected final put, so
//!    a final put that finds `PG_lru` set owns the unlinking, and a folio whose count reached
//!    zero is never isolated (isolation starts with `try_get`).
//! 4. Every folio in a batch owes the batch one reference; the drain drops it (or, having
//!    frozen the folio, frees it).
//! 5. Nothing frees a folio with `PG_lru`, `PG_active` or `PG_unevictable` set (the arena's
//!    bad-page check enforces it).
//!
//! # The hard parts
//!
//! **Filter against a speculative lookup.** An index lookup may have loaded the folio's
//! pointer just before the folio was deleted, and `try_get`s it while the drain runs. Both
//! sides are read-modify-writes of the count word, so they are totally ordered: either the
//! `try_get` came first (the freeze sees 2, fails, the folio is added to the LRU, and the
//! lookup's re-check drops its reference, which may be the final put and unlinks it again), or
//! the freeze came first (the `try_get` fails and the lookup retries). Modelled by
//! `src/loom_tests/lru.rs`, with a weakened filter the model must catch (a load of the count,
//! then a put as if it were the last: check-then-act instead of one CAS).
//!
//! **Draining every CPU.** [`Lru::drain_all`] runs before an explicit [`Lru::reclaim`], when
//! direct reclaim found nothing after draining its own CPU, when a range is invalidated and
//! some folios looked busy, and at shutdown; it may run while other threads drain their own
//! batches or call `drain_all` themselves. Lock
//! order is *batch lock → lruvec lock*, and no path holds two batch locks or takes a batch
//! lock while holding the lruvec lock, so no cycle exists. A batch's lock is held for its
//! whole drain (the `local_lock` the kernel holds across `folio_batch_move_lru`), so when
//! `drain_all` returns, every folio queued before it started is on a list or freed.
//!
//! **Evicting without freeing under a user.** Reclaim isolates folios under the lock, then,
//! outside it, freezes each at exactly the references it can account for (the page cache's
//! plus its own isolation reference) under the index lock, and deletes it from the index. A
//! reader that holds the folio (a pinned guard, a mapping, a lookup in flight) makes the
//! freeze fail; the folio is put back and the reader never notices.
//!
//! # Admission: the filling read is not an access (a deliberate difference)
//!
//! The kernel's `filemap_read` calls `folio_mark_accessed` on every folio it copies from,
//! including one it just read in, so a page-cache folio is activated by its first hit after
//! the miss. By default ([`LruConfig::reference_on_fill`] false) the read that filled a folio
//! does not mark it: the first hit sets `PG_referenced`, the second activates, as 2Q admits
//! only blocks re-referenced after they came in. On the `peers` lab workload (4 KiB Zipf-0.99
//! reads of a file four times the budget) that moves the hit ratio from 83.2% to 84.0%
//! (84.5% without workingset detection; a plain LRU gets 82.3%), and sequential readers, whose
//! pages are read once, no longer earn them a second trip down the inactive list. Workingset
//! detection, on by default as in the kernel, costs about half a point on that Zipf mix and
//! one point on its uniform and scan mixes: refault activation is built for a working set
//! that moves, and a stationary Zipf set gains nothing from it. The figures come from the
//! same trace replayed through the cache and through a plain model of these lists, which
//! agree to 0.1 point.
//!
//! # Per-CPU, not per-thread, batches
//!
//! Userspace cannot disable preemption, which is what makes the kernel's per-CPU batches safe
//! with only a `local_lock`. We keep per-CPU batches and give each one a real lock, exactly
//! what `local_lock_t` becomes on PREEMPT_RT (a per-CPU spinlock). A thread indexes the
//! batches with [`current_cpu`](crate::mm::sync::current_cpu()); if it migrates in between, it
//! merely uses another CPU's batch under that batch's lock, which stays correct and almost
//! always uncontended. Per-thread batches would need a registry for `drain_all` to reach,
//! draining on thread exit, and one set per cache per thread; they would also let an idle
//! thread hold up to 31 folios out of reclaim's sight indefinitely. Per-CPU batches bound the
//! folios held in batches to `2 × 31 × CPUs` for the whole cache.
//!
//! # Why it is fast
//!
//! The lruvec lock is taken once per 31 additions, and not at all for a batch whose folios are
//! all dead (filtered). Accesses to a folio already on a list only set a flag, or queue it in
//! the CPU's activate batch. Reclaim takes the lock once per 32 folios scanned (twice if some
//! must go back), and gives referenced folios their second chance under that same hold. Final
//! puts of listed folios are batched where the kernel batches them (the drain's `folios_put`,
//! truncation). The lock-acquisition counter is a plain integer inside the lock's own data,
//! so counting costs nothing.
//!
//! # Lock order
//!
//! per-CPU batch lock → lruvec lock. Index locks and the folio lock are never taken while the
//! lruvec lock is held (reclaim drops it before touching the index, and takes folio locks
//! only by trylock).

mod batch;
mod config;
mod list;
mod reclaim;
mod stats;
pub mod workingset;

pub use batch::FOLIO_BATCH_SIZE;
pub use config::{DrainFilter, LruConfig, LruPolicy, MAX_BATCH_SLOTS, MAX_INACTIVE_RATIO};
pub use list::{LruList, NR_LRU_LISTS};
pub use reclaim::{
    Evict, ReclaimResult, Watermarks, MAX_BUSY_WAITS, MAX_RECLAIM_RETRIES, SWAP_CLUSTER_MAX,
};
pub use stats::LruStats;
pub use workingset::WorkingsetStats;

use std::fmt;

use crate::mm::folio::flags::{
    LRU_GEN_MASK, LRU_REFS_MASK, LRU_REFS_SHIFT, PG_ACTIVE, PG_LRU, PG_MLOCKED, PG_REFERENCED,
    PG_UNEVICTABLE,
};
use crate::mm::folio::{Arena, Folio, FolioRef};
use crate::mm::sync::{
    current_cpu, num_cpus, Arc, AtomicU64, CachePadded, Mutex, MutexGuard, Ordering,
};
use batch::FolioBatch;
use list::Lists;
use workingset::Workingset;

/// The reads counted beyond `PG_referenced` under [`LruPolicy::Protected`]: one, so that an
/// active folio gets two trips round the active list per pass of aging, not four. The
/// protected set is kept by reuse distance, which already favours frequently read blocks;
/// more counted reads only keep blocks that were hot once (a recency burst's) in it longer.
/// Full `policy` traces, miss %, by the reads counted (3, 2, 1, 0): recency bursts 28.48,
/// 25.90, 25.49, 25.44 (LRU 25.10); Zipf 0.99 21.33, 21.38, 21.50, 21.82; Zipf 0.6 62.03,
/// 62.20, 62.57, 63.49; Zipf with scans 35.45, 35.48, 35.59, 35.94; moving hot set 31.12,
/// 31.06, 30.97, 30.86.
pub const PROTECTED_MAX_REFS: u64 = 1;

/// The LRU-owned flags that must be clear when a folio is freed (the LRU's share of
/// `PAGE_FLAGS_CHECK_AT_FREE`): what `__folio_clear_lru_flags` clears, plus the generation
/// field a multi-generational LRU would use. The filter clears them before freeing a dead
/// folio; forgetting `PG_active` here is the seed's "Bad page state".
pub const LRU_FLAGS_AT_FREE: u64 = PG_LRU | PG_ACTIVE | PG_UNEVICTABLE | LRU_GEN_MASK;

/// The lruvec: the lists and the counters changed under its lock.
#[derive(Debug)]
struct LruVec {
    lists: Lists,
    /// [`LruConfig::inactive_ratio`].
    inactive_ratio: Option<u32>,
    /// [`LruConfig::active_second_chance`].
    active_second_chance: bool,
    /// The protected policy's state ([`LruPolicy::Protected`]), if it runs.
    protection: Option<Arc<workingset::Protection>>,
    /// The counters changed under the lock (the [`LruStats`] fields `stats` takes from here;
    /// the others stay zero).
    counts: LruStats,
}

impl LruVec {
    /// `folio_lru_list` + the evictability decision of `lru_add`: the list a folio joins.
    #[inline]
    fn list_for(&mut self, folio: &Folio) -> LruList {
        let was_unevictable = folio.test_clear_flag(PG_UNEVICTABLE);
        if folio.test_flag(PG_MLOCKED) {
            folio.clear_flag(PG_ACTIVE);
            folio.set_flag(PG_UNEVICTABLE);
            if !was_unevictable {
                self.counts.culled += 1;
            }
            LruList::Unevictable
        } else {
            if was_unevictable {
                self.counts.rescued += 1;
            }
            if folio.test_flag(PG_ACTIVE) {
                LruList::Active
            } else {
                LruList::Inactive
            }
        }
    }

    /// `lru_add` / `move_folios_to_lru`: links a folio we hold a reference on and sets
    /// `PG_lru`.
    #[inline]
    fn link(&mut self, folio: &Folio) {
        debug_assert!(
            !folio.test_flag(PG_LRU),
            "adding a folio already on the LRU"
        );
        let list = self.list_for(folio);
        self.lists.add_head(folio.pfn(), folio.order() as u8, list);
        folio.set_flag(PG_LRU);
    }

    /// `__page_cache_release` under the lock: if the folio is still on a list, unlink it and
    /// clear its LRU flags (`__folio_clear_lru_flags`; a folio both active and unevictable
    /// keeps both for the bad-page report).
    #[inline]
    fn release(&mut self, folio: &Folio) {
        if folio.test_clear_flag(PG_LRU) {
            self.lists.del(folio.pfn());
            let f = folio.flags();
            if f & (PG_ACTIVE | PG_UNEVICTABLE) != PG_ACTIVE | PG_UNEVICTABLE {
                folio.clear_flag(PG_ACTIVE | PG_UNEVICTABLE);
            }
            self.counts.released += 1;
        }
    }

    /// `lru_activate`: a folio isolated by an activate-batch drain moves to the active list.
    /// Moves an inactive folio to the active head; whether it moved.
    #[inline]
    fn activate(&mut self, folio: &Folio) -> bool {
        if folio.flags() & (PG_ACTIVE | PG_UNEVICTABLE) == 0 {
            self.lists.del(folio.pfn());
            folio.set_flag(PG_ACTIVE);
            self.lists
                .add_head(folio.pfn(), folio.order() as u8, LruList::Active);
            self.counts.activated += 1;
            return true;
        }
        false
    }

    /// `inactive_is_low`: the inactive list is short of `1 / ratio` of the active one, with the
    /// configured ratio or, by default, the kernel's: `int_sqrt(10 * GiB)` of the two lists'
    /// pages, 1 below 1 GiB (so a 64 MiB cache keeps them level and a 10 GiB one keeps 10
    /// active pages per inactive one).
    #[inline]
    fn inactive_is_low(&self) -> bool {
        let inactive = self.lists.pages(LruList::Inactive);
        if let Some(p) = &self.protection {
            return (inactive as u64) < p.inactive_floor();
        }
        let active = self.lists.pages(LruList::Active);
        let ratio = match self.inactive_ratio {
            Some(r) => (r as usize).max(1),
            None => kernel_inactive_ratio(inactive + active),
        };
        inactive.saturating_mul(ratio) < active
    }
}

/// The kernel's `inactive_ratio` for lists holding `pages` 4 KiB pages: `int_sqrt(10 * GiB)`,
/// 1 below 1 GiB.
/// Under the protected policy, records that `folio` just entered a list's head at eviction
/// clock `clock` (`FolioExt::lru_stamp`). Called under the lruvec lock `v`.
#[inline]
fn stamp(v: &LruVec, arena: &Arena, folio: &Folio, clock: u64) {
    if v.protection.is_some() {
        // ORDERING: Relaxed; read by `workingset_eviction` after the folio was isolated under
        // this same lock, which orders the two.
        arena.ext(folio).lru_stamp.store(clock, Ordering::Relaxed);
    }
}

fn kernel_inactive_ratio(pages: usize) -> usize {
    let gib = pages >> (30 - crate::mm::folio::PAGE_SHIFT);
    if gib == 0 {
        1
    } else {
        (10 * gib).isqrt()
    }
}

/// The lruvec lock (`lruvec->lru_lock`), counting its acquisitions inside its own data.
#[derive(Debug)]
struct LruVecLock(Mutex<LruVec>);

impl LruVecLock {
    /// `lruvec_lock_irq`: takes the lock and counts it.
    #[inline]
    fn lock(&self) -> MutexGuard<'_, LruVec> {
        let mut g = self.0.lock();
        g.counts.lock_acquisitions += 1;
        g
    }

    /// Takes the lock without counting it (statistics and validation only).
    fn lock_uncounted(&self) -> MutexGuard<'_, LruVec> {
        self.0.lock()
    }
}

/// One CPU's batches (`struct cpu_fbatches`) and the counters changed under their lock.
#[derive(Debug)]
struct CpuBatches {
    lru_add: FolioBatch,
    lru_activate: FolioBatch,
    queued: u64,
    drained: u64,
    dead_filtered: u64,
}

impl CpuBatches {
    fn new() -> Self {
        Self {
            lru_add: FolioBatch::new(),
            lru_activate: FolioBatch::new(),
            queued: 0,
            drained: 0,
            dead_filtered: 0,
        }
    }
}

/// Counters of the reclaim paths (rare events; relaxed atomics).
#[derive(Debug, Default)]
struct ReclaimCounters {
    reclaimed: AtomicU64,
    runs: AtomicU64,
    background: AtomicU64,
    stalls: AtomicU64,
    oom: AtomicU64,
}

/// The LRU of one cache: the lruvec (lists under one lock), per-CPU add and activate batches,
/// and reclaim. See the module docs.
///
/// Every method takes the [`Arena`] the LRU was built for ([`Lru::new`] installs the final-put
/// hook in it); passing another arena is a bug caught by debug assertions.
pub struct Lru {
    config: LruConfig,
    /// The most reads [`Lru::mark_accessed`] counts in `LRU_REFS` (the field's capacity, or
    /// [`PROTECTED_MAX_REFS`] under the protected policy).
    max_refs: u64,
    nr_pages: u32,
    vec: Arc<LruVecLock>,
    cpus: Box<[CachePadded<Mutex<CpuBatches>>]>,
    reclaim: ReclaimCounters,
    workingset: Workingset,
}

impl fmt::Debug for Lru {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lru")
            .field("config", &self.config)
            .field("slots", &self.cpus.len())
            .finish_non_exhaustive()
    }
}

impl Lru {
    /// Pages the arena has handed out that sit neither on an LRU list nor in an add batch:
    /// folios a reader allocated and has not inserted yet, or that a reclaimer isolated. An
    /// allocation that finds nothing to reclaim waits for these rather than failing.
    pub(crate) fn pages_outside_lru(&self, arena: &Arena) -> u64 {
        let listed: u64 = {
            let v = self.vec.lock_uncounted();
            LruList::ALL.iter().map(|&l| v.lists.pages(l) as u64).sum()
        };
        let s = self.stats();
        arena
            .stats()
            .allocated_pages
            .saturating_sub(listed + s.batched)
    }

    /// An empty LRU for the folios of `arena`; installs its final-put hook there
    /// (`__page_cache_release`).
    ///
    /// # Panics
    /// If the arena already has a release hook (one LRU per arena), or
    /// [`LruConfig::batch_slots`] exceeds [`MAX_BATCH_SLOTS`].
    pub fn new(arena: &Arena, config: LruConfig) -> Lru {
        assert!(
            config.batch_slots <= MAX_BATCH_SLOTS,
            "LruConfig::batch_slots {} is too large: use 0 (one per CPU) or 1..={MAX_BATCH_SLOTS}",
            config.batch_slots
        );
        let lists = Lists::new(arena.nr_pages() as usize);
        let protection = (config.policy == LruPolicy::Protected)
            .then(|| Arc::new(workingset::Protection::new(arena.nr_pages() as u64)));
        let workingset = Workingset::new(
            config.workingset,
            arena.nr_pages() as u64,
            lists.active_pages_mirror(),
            protection.clone(),
        );
        let vec = Arc::new(LruVecLock(Mutex::new(LruVec {
            lists,
            inactive_ratio: config.inactive_ratio,
            active_second_chance: config.active_second_chance,
            protection,
            counts: LruStats::default(),
        })));
        let hook_vec = vec.clone();
        let installed = arena.set_release_hook(Box::new(move |folios: &[&Folio]| {
            let mut v = hook_vec.lock();
            let before = v.counts.released;
            for folio in folios {
                v.release(folio);
            }
            v.counts.released_at_free += v.counts.released - before;
        }));
        assert!(installed, "this arena already has an LRU");
        let slots = if config.batch_slots == 0 {
            num_cpus()
        } else {
            config.batch_slots
        };
        Lru {
            config,
            max_refs: match config.policy {
                LruPolicy::Protected => PROTECTED_MAX_REFS,
                LruPolicy::TwoList => LRU_REFS_MASK >> LRU_REFS_SHIFT,
            },
            nr_pages: arena.nr_pages(),
            vec,
            cpus: (0..slots)
                .map(|_| CachePadded::new(Mutex::new(CpuBatches::new())))
                .collect(),
            reclaim: ReclaimCounters::default(),
            workingset,
        }
    }

    /// The configuration the LRU was built with.
    pub fn config(&self) -> &LruConfig {
        &self.config
    }

    #[inline]
    fn check_arena(&self, arena: &Arena) {
        debug_assert_eq!(
            arena.nr_pages(),
            self.nr_pages,
            "an LRU used with another arena"
        );
    }

    /// This CPU's batches, locked (`local_lock(&cpu_fbatches.lock)`).
    #[inline]
    fn this_cpu(&self) -> MutexGuard<'_, CpuBatches> {
        self.cpus[current_cpu() % self.cpus.len()].lock()
    }

    /// `folio_add_lru`: queues a folio that just entered the page cache in this CPU's add
    /// batch, taking a reference the drain will drop. A full batch (or a large folio, which
    /// the kernel never leaves in a per-CPU batch) drains at once, under one lock hold.
    ///
    /// # Panics
    /// In debug builds, if the folio is already on the LRU.
    pub fn add(&self, arena: &Arena, folio: &FolioRef<'_>) {
        self.check_arena(arena);
        debug_assert!(
            !folio.test_flag(PG_LRU),
            "folio_add_lru on a folio already on the LRU: {:?}",
            **folio
        );
        if self.config.add_as_active {
            folio.set_flag(PG_ACTIVE);
        }
        let pfn = folio.clone().into_raw().pfn();
        let large = folio.order() > 0;
        let mut cpu = self.this_cpu();
        cpu.queued += 1;
        if cpu.lru_add.add(pfn) == 0 || large {
            self.move_add(arena, &mut cpu);
        }
    }

    /// `folio_rotate_reclaimable`: a folio reclaim met dirty or under writeback (and marked
    /// `PG_reclaim`) has just been written back: if it is still on the inactive list, move it
    /// to the tail, so the next reclaim pass frees it first. The kernel batches these per CPU
    /// (`lru_rotate`); here one lock hold each, as they are rare (only folios reclaim
    /// already wanted). Returns whether it moved.
    pub fn rotate_reclaimable(&self, arena: &Arena, folio: &FolioRef<'_>) -> bool {
        self.check_arena(arena);
        if folio.flags() & (PG_LRU | PG_ACTIVE | PG_UNEVICTABLE) != PG_LRU {
            return false;
        }
        let mut v = self.vec.lock();
        // Re-checked under the lock: isolation clears PG_lru under it.
        if folio.flags() & (PG_LRU | PG_ACTIVE | PG_UNEVICTABLE) != PG_LRU
            || v.lists.list_of(folio.pfn()) != Some(LruList::Inactive)
        {
            return false;
        }
        v.lists.move_tail(folio.pfn());
        true
    }

    /// `folio_mark_accessed`: the first access sets `PG_referenced`; a second one promotes an
    /// inactive folio to the active list (through this CPU's activate batch if it is on a
    /// list, by setting `PG_active` if it still waits in this CPU's add batch) and advances
    /// the eviction clock (`workingset_activation`).
    pub fn mark_accessed(&self, arena: &Arena, folio: &FolioRef<'_>) {
        let flags = folio.flags();
        if flags & PG_REFERENCED == 0 {
            folio.set_flag(PG_REFERENCED);
        } else if flags & PG_ACTIVE != 0 {
            // Active and referenced: one more read for aging to weigh (up to the field's
            // capacity; a saturated folio is not written).
            if self.config.active_second_chance
                && (flags & LRU_REFS_MASK) >> LRU_REFS_SHIFT < self.max_refs
                && flags & PG_UNEVICTABLE == 0
            {
                folio.inc_lru_refs();
            }
        } else if flags & PG_UNEVICTABLE == 0 {
            if flags & PG_LRU != 0 {
                self.activate(arena, folio);
            } else {
                self.lru_cache_activate(folio);
            }
            folio.clear_flag(PG_REFERENCED);
            self.workingset_activation(folio);
        }
    }

    /// `folio_activate`: queue an inactive folio on a list for promotion.
    fn activate(&self, arena: &Arena, folio: &FolioRef<'_>) {
        self.check_arena(arena);
        let pfn = folio.clone().into_raw().pfn();
        let mut cpu = self.this_cpu();
        if cpu.lru_activate.add(pfn) == 0 {
            self.move_activate(arena, &mut cpu);
        }
    }

    /// `__lru_cache_activate_folio`: a folio accessed twice before its batch drained lands on
    /// the active list: set `PG_active` if it is in this CPU's add batch. (If another CPU
    /// queued it, the hint is lost, as in the kernel.)
    fn lru_cache_activate(&self, folio: &Folio) {
        let cpu = self.this_cpu();
        if cpu.lru_add.contains(folio.pfn()) {
            folio.set_flag(PG_ACTIVE);
        }
    }

    /// `lru_add_drain`: drains this CPU's batches.
    pub fn drain(&self, arena: &Arena) {
        self.check_arena(arena);
        let mut cpu = self.this_cpu();
        self.drain_cpu(arena, &mut cpu);
    }

    /// `lru_add_drain_all`: drains every CPU's batches, one at a time (never two batch locks
    /// at once, so it cannot deadlock with threads draining their own or calling this too).
    /// When it returns, every folio queued before the call is on a list or freed.
    pub fn drain_all(&self, arena: &Arena) {
        self.check_arena(arena);
        for slot in self.cpus.iter() {
            let mut cpu = slot.lock();
            self.drain_cpu(arena, &mut cpu);
        }
    }

    /// `lru_add_drain_cpu`.
    fn drain_cpu(&self, arena: &Arena, cpu: &mut CpuBatches) {
        if !cpu.lru_add.is_empty() {
            self.move_add(arena, cpu);
        }
        if !cpu.lru_activate.is_empty() {
            self.move_activate(arena, cpu);
        }
    }

    /// `folio_batch_move_lru(fbatch, lru_add)` with the seed's filter, then `folios_put`.
    fn move_add(&self, arena: &Arena, cpu: &mut CpuBatches) {
        let batch = cpu.lru_add.take();
        cpu.drained += batch.len() as u64;
        let s = arena.strategy();
        let mut dead = FolioBatch::new();
        let mut linked = FolioBatch::new();
        let mut v: Option<MutexGuard<'_, LruVec>> = None;
        // The protected policy's stamp for the folios linked here (one load a batch).
        let clock = self.nonresident_age();
        for &pfn in batch.as_slice() {
            let folio = arena.folio(pfn);
            #[cfg(loom)]
            if self.config.filter == DrainFilter::RacyCheck && folio.ref_count(s) == 1 {
                // Weakened on purpose: a lookup may take a reference right here.
                let _ = folio.refcount().put(s);
                folio.clear_flag(LRU_FLAGS_AT_FREE);
                dead.add(pfn);
                continue;
            }
            // The batch owns one reference, so exactly 1 means nobody else does; the CAS also
            // makes every concurrent speculative `try_get` fail (module docs, hard part 1).
            if self.config.filter != DrainFilter::Vanilla && folio.refcount().freeze(s, 1) {
                if self.config.filter == DrainFilter::Filtered {
                    // We own the frozen folio alone: clear what the free path checks and the
                    // LRU could have set while the folio waited (PG_active).
                    folio.clear_flag(LRU_FLAGS_AT_FREE);
                }
                dead.add(pfn);
                continue;
            }
            let v = v.get_or_insert_with(|| self.vec.lock());
            v.link(folio);
            stamp(v, arena, folio, clock);
            v.counts.inserted += 1;
            if folio.ref_count(s) == 1 {
                v.counts.dead_inserted += 1;
            }
            linked.add(pfn);
        }
        drop(v);
        cpu.dead_filtered += dead.len() as u64;
        for &pfn in dead.as_slice() {
            arena.free_won(arena.folio(pfn));
        }
        self.folios_put(arena, &linked);
    }

    /// `folio_batch_move_lru(fbatch, lru_activate)`, then `folios_put`.
    fn move_activate(&self, arena: &Arena, cpu: &mut CpuBatches) {
        let batch = cpu.lru_activate.take();
        let mut v: Option<MutexGuard<'_, LruVec>> = None;
        let clock = self.nonresident_age();
        for &pfn in batch.as_slice() {
            let folio = arena.folio(pfn);
            // Isolate it from the lists' other users (reclaim skips folios without PG_lru);
            // if someone else isolated it first, leave it to them.
            if !folio.test_clear_flag(PG_LRU) {
                continue;
            }
            let v = v.get_or_insert_with(|| self.vec.lock());
            if v.activate(folio) {
                stamp(v, arena, folio, clock);
            }
            folio.set_flag(PG_LRU);
        }
        drop(v);
        self.folios_put(arena, &batch);
    }

    /// `folios_put`: drops one reference on every folio of `batch`; the final puts unlink
    /// their folios under one lock hold and free them after it.
    fn folios_put(&self, arena: &Arena, batch: &FolioBatch) {
        let s = arena.strategy();
        let mut freed = FolioBatch::new();
        let mut v: Option<MutexGuard<'_, LruVec>> = None;
        for &pfn in batch.as_slice() {
            let folio = arena.folio(pfn);
            if folio.refcount().put(s) {
                if folio.test_flag(PG_LRU) {
                    v.get_or_insert_with(|| self.vec.lock()).release(folio);
                }
                freed.add(pfn);
            }
        }
        drop(v);
        for &pfn in freed.as_slice() {
            arena.free_won(arena.folio(pfn));
        }
    }

    /// The list `folio` is on now, if any (a snapshot; takes the lock, uncounted).
    pub fn list_of(&self, folio: &Folio) -> Option<LruList> {
        self.vec.lock_uncounted().lists.list_of(folio.pfn())
    }

    /// The folios of `list`, most recently added first (a snapshot for tests and tools).
    pub fn list_snapshot(&self, list: LruList) -> Vec<u32> {
        self.vec.lock_uncounted().lists.iter(list).collect()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> LruStats {
        let mut s = {
            let v = self.vec.lock_uncounted();
            let mut s = v.counts;
            for l in LruList::ALL {
                s.folios[l as usize] = v.lists.folios(l) as u64;
                s.pages[l as usize] = v.lists.pages(l) as u64;
            }
            s
        };
        for slot in self.cpus.iter() {
            let c = slot.lock();
            s.queued += c.queued;
            s.drained += c.drained;
            s.dead_filtered += c.dead_filtered;
            s.batched += (c.lru_add.len() + c.lru_activate.len()) as u64;
        }
        s.reclaimed = self.reclaim.reclaimed.load(Ordering::Relaxed);
        s.reclaim_runs = self.reclaim.runs.load(Ordering::Relaxed);
        s.background_runs = self.reclaim.background.load(Ordering::Relaxed);
        s.alloc_stalls = self.reclaim.stalls.load(Ordering::Relaxed);
        s.oom = self.reclaim.oom.load(Ordering::Relaxed);
        s
    }

    /// Recomputes the LRU from scratch and checks it against its state: list links and
    /// counters, every folio's `PG_lru`/`PG_active`/`PG_unevictable` against the
    /// list it is on, that linked and batched folios are alive, and the drain accounting
    /// (`queued = drained + batched`, `drained = inserted + dead_filtered`). Call it when
    /// nothing uses the LRU concurrently; returns the stats on success.
    pub fn validate(&self, arena: &Arena) -> Result<LruStats, String> {
        self.check_arena(arena);
        let s = arena.strategy();
        let stats = self.stats();
        let v = self.vec.lock_uncounted();
        v.lists.validate()?;
        if v.lists.slots() != arena.nr_pages() as usize {
            return Err("the lists were built for another arena".into());
        }
        let mut batched = vec![false; arena.nr_pages() as usize];
        for (i, slot) in self.cpus.iter().enumerate() {
            let c = slot.lock();
            for &pfn in c.lru_add.as_slice() {
                let f = arena.folio(pfn);
                if std::mem::replace(&mut batched[pfn as usize], true) {
                    return Err(format!("folio {pfn} queued twice for addition"));
                }
                if f.test_flag(PG_LRU) || v.lists.list_of(pfn).is_some() {
                    return Err(format!("folio in CPU {i}'s add batch is on the LRU: {f:?}"));
                }
                if f.ref_count(s) == 0 {
                    return Err(format!("folio in CPU {i}'s add batch is not alive: {f:?}"));
                }
            }
            for &pfn in c.lru_activate.as_slice() {
                let f = arena.folio(pfn);
                if f.ref_count(s) == 0 {
                    return Err(format!(
                        "folio in CPU {i}'s activate batch is not alive: {f:?}"
                    ));
                }
            }
        }
        for pfn in 0..arena.nr_pages() {
            let f = arena.folio(pfn);
            let flags = f.flags();
            match v.lists.list_of(pfn) {
                None if flags & PG_LRU != 0 => {
                    return Err(format!("folio has PG_lru but is on no list: {f:?}"));
                }
                None => {}
                Some(list) => {
                    if flags & PG_LRU == 0 {
                        return Err(format!(
                            "folio on the {list} list without PG_lru (an isolation never finished?): {f:?}"
                        ));
                    }
                    if f.ref_count(s) == 0 {
                        return Err(format!("folio on the {list} list is not alive: {f:?}"));
                    }
                    let want = match (flags & PG_ACTIVE != 0, flags & PG_UNEVICTABLE != 0) {
                        (false, false) => LruList::Inactive,
                        (true, false) => LruList::Active,
                        (false, true) => LruList::Unevictable,
                        (true, true) => {
                            return Err(format!("folio both active and unevictable: {f:?}"))
                        }
                    };
                    if want != list {
                        return Err(format!(
                            "folio on the {list} list but its flags say {want}: {f:?}"
                        ));
                    }
                }
            }
        }
        if stats.queued != stats.drained + batched.iter().filter(|&&b| b).count() as u64 {
            return Err(format!(
                "queued {} != drained {} + in add batches",
                stats.queued, stats.drained
            ));
        }
        if stats.drained != stats.inserted + stats.dead_filtered {
            return Err(format!(
                "drained {} != inserted {} + dead_filtered {}",
                stats.drained, stats.inserted, stats.dead_filtered
            ));
        }
        Ok(stats)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
