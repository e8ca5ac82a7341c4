//! Workingset detection: the eviction clock, shadow entries and refault activation
//! (`mm/workingset.c`: `workingset_eviction`, `workingset_refault`, `workingset_test_recent`,
//! `workingset_age_nonresident`, `workingset_activation`, `pack_shadow`/`unpack_shadow`).
//!
//! # The problem
//!
//! A folio read for the first time joins the inactive list; a second access while it is
//! still there promotes it to the active list. When the inactive list is shorter than the
//! distance between a folio's accesses, the folio is evicted before its second access every
//! time, however often it is used: with a cache a quarter of the file and a skewed workload,
//! the two lists behave like plain LRU and the warm tail of the distribution thrashes.
//!
//! # Refault distance
//!
//! The lruvec keeps one clock, `nonresident_age`, advanced by one page for every eviction
//! and every activation (both push inactive folios one slot towards the tail, so the clock
//! counts, at least, the inactive-list slots consumed). At eviction the clock's reading `E`
//! is packed into the *shadow entry* left in the folio's index slot
//! ([`Index::evict_with_shadow`](crate::mm::index::Index::evict_with_shadow)). When the page is
//! read again and its insertion replaces that shadow, the clock reads `R`; `R - E`, the
//! *refault distance*, is how many more inactive slots the folio would have needed to be
//! promoted instead of evicted. Those slots can only come from the active list, so if
//! `R - E <= active pages` (the workingset size, for file pages) the folio is activated
//! straight away: it joins the active list and competes with the folios there, which the
//! active list's own aging sorts out (`workingset_refault`). A refault counts as
//! `workingset_refault`; an activated one also as `workingset_activate`, and as
//! `workingset_restore` if the shadow says the folio had been active before its eviction
//! (`PG_workingset`, set when it was deactivated): the working set itself is thrashing.
//!
//! # The shadow word
//!
//! | bits of the value entry | content |
//! |---|---|
//! | 0 | 1: a shadow of this module (keeps the payload non-zero) |
//! | 1 | `PG_workingset` of the evicted folio (`WORKINGSET_SHIFT`) |
//! | 2 .. [`Shadow::BITS`] | eviction timestamp: `(nonresident_age >> bucket_order) & EVICTION_MASK` |
//!
//! The kernel also packs a memcg id and a node id to find the lruvec back; a foliocache has
//! one lruvec, and an index only holds folios of its own cache, so no id is needed and the
//! timestamp keeps [`TIMESTAMP_BITS`] = 60 bits ([`EVICTION_SHIFT`] = 4 bits of a `u64`
//! clock do not fit).
//!
//! # Wraparound and buckets (the kernel's choice, kept)
//!
//! The clock is a wrapping `u64`; the shadow keeps its low [`TIMESTAMP_BITS`] bits, and the
//! distance is `(R - E) & EVICTION_MASK`, exact modulo 2^60 across the clock's overflow. A
//! shadow older than 2^60 ticks could look recent again: the kernel accepts that (one wrong
//! activation, corrected by aging), and at one tick per evicted page it cannot happen here.
//! `bucket_order` (`workingset_init`) drops low timestamp bits when the timestamp cannot
//! cover a refault distance as large as memory: it is the number of bits by which
//! `log2(pages)` exceeds [`TIMESTAMP_BITS`], always 0 for a cache addressed by 32-bit frame
//! numbers, so distances are exact. The arithmetic is written for any `bucket_order` (the
//! eviction is shifted down before packing and up after unpacking, the mask applied in clock
//! units as upstream) and tested with a non-zero one.
//!
//! # The protected policy ([`LruPolicy::Protected`](super::LruPolicy))
//!
//! The kernel's rule activates every refault whose distance is within the active list.
//! A loop over a little more than memory refaults every page at a distance of about a
//! quarter of memory, so every refault is activated, the active list cycles in loop order,
//! and every read misses: LRU's worst case, which the shadows could have prevented. The
//! protected policy uses the non-resident history as LIRS (Jiang and Zhang, SIGMETRICS 2002)
//! and CLOCK-Pro (Jiang, Chen and Zhang, USENIX ATC 2005) use theirs:
//!
//! - **The active list is the protected set.** A refault joins it only if its *reuse
//!   distance* (clock ticks since the folio last entered a list's head: the refault distance
//!   plus the time it spent resident) is below the *age of the coldest protected folio* (the
//!   ticks since the active tail entered the active head, after referenced tails are rotated
//!   to the head, as CLOCK-Pro's hot hand clears reference bits). In a loop every page has
//!   the same reuse distance, one period, and the tail was read less than a period ago: the
//!   refaults stay inactive, the protected set stays and hits every period, as LIRS keeps its
//!   LIR set. While the inactive list holds more than its floor (the target plus one reclaim
//!   batch: the protected set has not reached its share yet), any refault within the
//!   budget's distance joins it.
//! - **The inactive list's size adapts as ARC's recency share does** (Megiddo and Modha, FAST
//!   2003), on the shadow's workingset bit: a refault of a folio never active (ARC's ghost
//!   hit in B1) grows the inactive target by its pages if it came back within
//!   [`GHOST_REACH`] inactive targets (more inactive room would have kept it; a loop's
//!   refaults come from much farther and do not grow it); a refault of a folio that had been
//!   active (B2) shrinks it. The target stays between 1% and half of the budget. Reclaim
//!   deactivates while the inactive list is below the target plus one reclaim batch
//!   ([`SWAP_CLUSTER_MAX`](super::SWAP_CLUSTER_MAX), which reclaim isolates at once), and
//!   no further (instead of `inactive_is_low`'s ratio and a fixed batch).
//! - **Aging counts one read** beyond `PG_referenced`
//!   ([`PROTECTED_MAX_REFS`](super::PROTECTED_MAX_REFS)): the protected set is already
//!   sorted by reuse distance, and more counted reads keep once-hot blocks in it longer.
//! - **History**: a refault from up to [`HISTORY_BUDGETS`] budgets back is judged by its
//!   reuse distance (the kernel's rule looks one active list back); an older one counts as
//!   new. Two budgets let a loop of twice the budget keep half of itself, as LIRS does.
//!
//! Measured (the lab's `policy`, full traces, miss %, protected against the two lists): a
//! loop over 1.1x, 1.25x and 2x the budget 12.08, 22.64 and 52.30 against 100 (LIRS 10.78,
//! 21.46, 51.28), recency bursts 25.51 against 31.38 (LRU 25.10), Zipf 0.99 21.69 against
//! 22.03; worse on Zipf 0.6 (63.46 against 63.23) and a readahead-heavy mix (57.17 against
//! 57.01). The README's results have the whole table.
//!
//! What it adds to the cache: a stamp per folio ([`FolioExt::lru_stamp`](crate::mm::folio::FolioExt),
//! the clock when the folio last entered a list's head, written under the lruvec lock), the
//! stamp's age packed into the shadow beside the eviction timestamp, and two relaxed
//! atomics: the inactive target and the active tail's stamp, which reclaim publishes under
//! the lock after rotating referenced tails. A hit touches none of them.
//!
//! Its shadow word spends the 60 timestamp bits as 40 bits of eviction timestamp (distances
//! modulo 2^40 pages: exact, since an LRU holds at most 2^32 folios) and 20 bits of resident
//! age in units of `2^age_shift` pages, where `age_shift` is what a budget of more than 2^20
//! pages needs (a larger age saturates; such a folio is far colder than any protected one).
//!
//! # Concurrency
//!
//! The clock and the counters are relaxed atomics: the clock is a statistic whose readers
//! need a recent value, not an ordering (the kernel uses `atomic_long_add`/`read` without
//! barriers). The eviction side runs under the index lock with the folio frozen; the refault
//! side with the new folio locked, before it is queued for the LRU. The workingset size is
//! read from a relaxed mirror of the active list's page count, so neither side takes the
//! lruvec lock.
//!
//! The protected policy adds no lock-free protocol. A folio's stamp is written under the
//! lruvec lock (when a drain links it, an activation moves it, or aging rotates it) and read
//! by the eviction that isolated the folio under that lock afterwards: the lock orders them,
//! and an isolated folio is on no list, so nothing writes its stamp until it is freed or put
//! back. The inactive target, the active tail's stamp and the inactive list's size are
//! relaxed atomics read by refaults without the lock: a controller's setting and two hints,
//! which, read stale, admit or refuse one refault differently, as a refault racing reclaim
//! would anyway; no memory is published through them. The target's read-modify-write keeps
//! concurrent refaults' steps and its bounds (the workingset stress test checks them after
//! four threads' refaults). So there is no loom model of the policy: the ones of the lists'
//! lock-free steps (`loom_tests/lru.rs`, `loom_tests/workingset.rs`) cover the paths it
//! shares, and the LRU differential test compares its list order, flags and counters with a
//! model after every operation.

use super::Lru;
use crate::mm::folio::flags::{PG_ACTIVE, PG_WORKINGSET};
use crate::mm::folio::{Arena, Folio};
use crate::mm::index::{Shadow, ShadowNodes};
use crate::mm::sync::{Arc, AtomicU64, CachePadded, Ordering};

/// `WORKINGSET_SHIFT`: bits of the shadow holding the folio's workingset flag.
const WORKINGSET_SHIFT: u32 = 1;
/// Bits of the shadow holding our marker (the kernel's `xa_mk_value` tag bit; ours lives
/// outside the payload, so the payload spends one bit staying non-zero).
const MARKER_SHIFT: u32 = 1;
/// Timestamp bits a shadow keeps.
pub const TIMESTAMP_BITS: u32 = Shadow::BITS - WORKINGSET_SHIFT - MARKER_SHIFT;
/// `EVICTION_SHIFT`: bits of the `u64` clock that do not fit in a shadow.
pub const EVICTION_SHIFT: u32 = u64::BITS - TIMESTAMP_BITS;
/// `EVICTION_MASK`: the clock bits a shadow keeps, and the modulus of refault distances.
pub const EVICTION_MASK: u64 = u64::MAX >> EVICTION_SHIFT;

/// `workingset_init`: the timestamp granularity for a cache of `pages` pages, in bits dropped.
pub fn bucket_order(pages: u64) -> u32 {
    let max_order = u64::BITS - pages.saturating_sub(1).leading_zeros();
    max_order.saturating_sub(TIMESTAMP_BITS)
}

/// `pack_shadow`: the shadow of a folio evicted at clock `age` (`workingset`: its
/// `PG_workingset`).
pub fn pack_shadow(age: u64, bucket_order: u32, workingset: bool) -> Shadow {
    let eviction = (age >> bucket_order) & EVICTION_MASK;
    let v = (((eviction << WORKINGSET_SHIFT) | workingset as u64) << MARKER_SHIFT) | 1;
    Shadow::new(v).expect("a packed shadow fits in a value entry")
}

/// `unpack_shadow`: the eviction timestamp (in buckets) and the workingset flag.
pub fn unpack_shadow(shadow: Shadow) -> (u64, bool) {
    let v = shadow.value() >> MARKER_SHIFT;
    (v >> WORKINGSET_SHIFT, v & 1 != 0)
}

/// The refault distance of a shadow evicted at `eviction` (buckets) seen at clock `refault`
/// (`(refault - eviction) & EVICTION_MASK`, wrapping).
pub fn refault_distance(refault: u64, eviction: u64, bucket_order: u32) -> u64 {
    refault.wrapping_sub(eviction << bucket_order) & EVICTION_MASK
}

/// Eviction-timestamp bits of a protected-policy shadow (module docs).
pub const PROTECTED_EVICTION_BITS: u32 = 40;
/// Resident-age bits of a protected-policy shadow.
pub const RESIDENT_AGE_BITS: u32 = TIMESTAMP_BITS - PROTECTED_EVICTION_BITS;
const PROTECTED_EVICTION_MASK: u64 = (1 << PROTECTED_EVICTION_BITS) - 1;
const RESIDENT_AGE_MAX: u64 = (1 << RESIDENT_AGE_BITS) - 1;

/// How many inactive targets away a refault of a never-active folio may come from and still
/// grow the target (module docs, the protected policy). A recency burst's pages come back
/// within a few targets; a loop's from a fraction of the budget, which must not grow it (the
/// protected set would shrink to half the budget). The lab's model measured 2, 3, 4 and 16
/// (`crates/lab/src/policy/twolist.rs`): 2 keeps Zipf and loops best at a point's cost on
/// recency bursts.
pub const GHOST_REACH: u64 = 2;

/// How far back, in budgets, the protected policy judges a refault by its reuse distance
/// (older ones count as new). One budget is what the kernel's two lists look at (a refault
/// is activated only within the active list's size); two let a loop of twice the budget keep
/// half of itself resident, as LIRS does. Full `policy` traces, miss %, one budget against
/// two: loop-2x 100 against 52.30 (LIRS 51.28), noisy loop-2x 75.73 against 53.85 (LIRS
/// 51.30), readahead mix 57.96 against 57.17; the price is on flat popularity, where more
/// old refaults compete with the protected set: Zipf 0.6 62.57 against 63.40, Zipf 0.8
/// 41.94 against 42.58, Zipf 0.99 21.50 against 21.69, moving hot set 30.97 against 31.63.
/// Three budgets gain nothing more (loop-2x 52.30) and lose another 1.8 points on the moving
/// hot set. The shadows are there to be read: the shadow-node shrinker keeps up to 8 per
/// budget page.
pub const HISTORY_BUDGETS: u64 = 2;

/// The resident-age granularity of a budget of `pages`: the bits by which its size exceeds
/// [`RESIDENT_AGE_BITS`].
pub fn resident_age_shift(pages: u64) -> u32 {
    let bits = u64::BITS - pages.saturating_sub(1).leading_zeros();
    bits.saturating_sub(RESIDENT_AGE_BITS)
}

/// The shadow of a folio evicted at clock `age` under the protected policy, `resident` clock
/// ticks after it last entered a list's head.
pub fn pack_shadow_protected(age: u64, workingset: bool, resident: u64, age_shift: u32) -> Shadow {
    let resident = (resident >> age_shift).min(RESIDENT_AGE_MAX);
    let stamp = (resident << PROTECTED_EVICTION_BITS) | (age & PROTECTED_EVICTION_MASK);
    let v = (((stamp << WORKINGSET_SHIFT) | workingset as u64) << MARKER_SHIFT) | 1;
    Shadow::new(v).expect("a packed shadow fits in a value entry")
}

/// A protected-policy shadow's eviction timestamp (40 bits), resident age (clock ticks, to
/// `2^age_shift`) and workingset flag.
pub fn unpack_shadow_protected(shadow: Shadow, age_shift: u32) -> (u64, u64, bool) {
    let (stamp, workingset) = unpack_shadow(shadow);
    (
        stamp & PROTECTED_EVICTION_MASK,
        (stamp >> PROTECTED_EVICTION_BITS) << age_shift,
        workingset,
    )
}

/// The inactive target's floor for a budget of `capacity` pages: 1% of it (the model's, and
/// CLOCK-Pro's).
fn min_cold(capacity: u64) -> u64 {
    (capacity / 100).clamp(1, max_cold(capacity))
}

/// The inactive target's ceiling: half the budget.
fn max_cold(capacity: u64) -> u64 {
    (capacity / 2).max(1)
}

/// The active tail's stamp when the active list is empty: its age is unbounded.
const NO_TAIL: u64 = u64::MAX;

/// The protected policy's shared state (module docs): read by refaults without the lruvec
/// lock, the tail stamp written by its holder.
#[derive(Debug)]
pub(crate) struct Protection {
    /// The pages the lists may hold (the arena's budget).
    capacity: u64,
    /// The inactive list's target, in pages (ARC's `p`).
    cold_target: AtomicU64,
    /// The clock when the active tail entered the active head ([`NO_TAIL`]: empty list).
    tail_stamp: AtomicU64,
    /// The inactive list's pages when the tail was last published.
    inactive_pages: AtomicU64,
    /// The resident-age granularity of the shadows ([`resident_age_shift`]).
    age_shift: u32,
}

impl Protection {
    pub(crate) fn new(capacity: u64) -> Protection {
        let capacity = capacity.max(2);
        Protection {
            capacity,
            cold_target: AtomicU64::new(min_cold(capacity)),
            tail_stamp: AtomicU64::new(NO_TAIL),
            inactive_pages: AtomicU64::new(0),
            age_shift: resident_age_shift(capacity),
        }
    }

    fn min_cold(&self) -> u64 {
        min_cold(self.capacity)
    }

    fn max_cold(&self) -> u64 {
        max_cold(self.capacity)
    }

    /// The inactive list's target now, in pages.
    pub(crate) fn cold_target(&self) -> u64 {
        // ORDERING: Relaxed: a controller's setting, read by reclaim as a hint (a stale
        // value deactivates a folio more or less); nothing is published with it.
        self.cold_target.load(Ordering::Relaxed)
    }

    /// The inactive list's size below which reclaim deactivates: the target plus one reclaim
    /// batch. The lab's model evicts one block per miss; reclaim isolates
    /// [`SWAP_CLUSTER_MAX`](super::SWAP_CLUSTER_MAX) folios at once, and an inactive list of
    /// only the target would be emptied by one batch and refilled from the protected set at
    /// every allocation (measured: the loops then miss as under the two lists).
    pub(crate) fn inactive_floor(&self) -> u64 {
        self.cold_target() + super::SWAP_CLUSTER_MAX as u64
    }

    /// Publishes the active tail's stamp (`None`: the list is empty) and the inactive list's
    /// size. Called under the lruvec lock.
    pub(crate) fn set_tail_stamp(&self, stamp: Option<u64>, inactive_pages: u64) {
        // ORDERING: Relaxed, as the tail stamp below.
        self.inactive_pages.store(inactive_pages, Ordering::Relaxed);
        // ORDERING: Relaxed: pairs with the load in `admit`, which wants a recent age, not an
        // ordering with anything else (as the active-pages mirror).
        self.tail_stamp
            .store(stamp.unwrap_or(NO_TAIL), Ordering::Relaxed);
    }

    /// Whether a refault of `nr` pages, evicted `distance` ticks ago after `resident` ticks
    /// on the lists (`workingset`: it had been active), joins the active list, the clock
    /// reading `clock`; adapts the inactive target first.
    fn admit(&self, distance: u64, resident: u64, workingset: bool, clock: u64, nr: u64) -> bool {
        if distance > HISTORY_BUDGETS.saturating_mul(self.capacity) {
            return false; // past the history kept: new
        }
        let (min, max) = (self.min_cold(), self.max_cold());
        // ARC's adaptation (module docs). The read-modify-write keeps concurrent refaults'
        // steps; Relaxed as in `cold_target`.
        let _ = self
            .cold_target
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                if workingset {
                    Some(t.saturating_sub(nr).max(min))
                } else if distance <= GHOST_REACH.saturating_mul(t) {
                    Some((t + nr).min(max))
                } else {
                    None
                }
            });
        // The protected set is still filling while the inactive list holds more than its
        // floor (deactivation refills it to the floor exactly, and no further). Compared with
        // the model's `active < capacity - target`, this leaves out the pages that are free
        // or in add batches, which the active list can never have.
        if self.inactive_pages.load(Ordering::Relaxed) > self.inactive_floor() {
            return true;
        }
        let tail = self.tail_stamp.load(Ordering::Relaxed);
        tail == NO_TAIL || distance.saturating_add(resident) < clock.wrapping_sub(tail)
    }
}

/// The workingset state of an lruvec.
#[derive(Debug)]
pub(crate) struct Workingset {
    enabled: bool,
    bucket_order: u32,
    /// `lruvec->nonresident_age`.
    nonresident_age: CachePadded<AtomicU64>,
    /// Pages on the active list (the lists' relaxed mirror).
    active_pages: Arc<AtomicU64>,
    refault: AtomicU64,
    activate: AtomicU64,
    restore: AtomicU64,
    /// The shadow-node count of every index of the cache.
    shadow_nodes: Arc<ShadowNodes>,
    /// The protected policy's state, if it runs.
    pub(crate) protection: Option<Arc<Protection>>,
}

impl Workingset {
    pub(crate) fn new(
        enabled: bool,
        pages: u64,
        active_pages: Arc<AtomicU64>,
        protection: Option<Arc<Protection>>,
    ) -> Workingset {
        Workingset {
            enabled,
            bucket_order: bucket_order(pages),
            nonresident_age: CachePadded::new(AtomicU64::new(0)),
            active_pages,
            refault: AtomicU64::new(0),
            activate: AtomicU64::new(0),
            restore: AtomicU64::new(0),
            shadow_nodes: Arc::new(ShadowNodes::new()),
            protection,
        }
    }
}

crate::mm::stats::counter_set! {
    /// A snapshot of the workingset counters (`/proc/vmstat`'s `workingset_*` lines, file
    /// pages).
    pub struct WorkingsetStats, prefix "workingset_" {
        counters {
            /// `WORKINGSET_REFAULT_FILE`: pages read again whose eviction left a shadow.
            refault,
            /// `WORKINGSET_ACTIVATE_FILE`: of those, pages activated at once (refault distance
            /// within the active list).
            activate,
            /// `WORKINGSET_RESTORE_FILE`: of those, pages that had been active before their
            /// eviction.
            restore,
            /// `WORKINGSET_NODERECLAIM`: shadow nodes freed by the shrinker.
            nodereclaim,
            /// `nonresident_age`: the eviction clock (pages evicted plus pages activated).
            nonresident_age,
        }
        gauges {
            /// `WORKINGSET_NODES`: index nodes holding only shadow entries now.
            nodes,
            /// The inactive list's target in pages under the protected policy (0 under the
            /// two lists).
            cold_target,
        }
        other {
            /// Whether shadows are left at eviction ([`LruConfig::workingset`](super::LruConfig)).
            enabled: bool,
        }
    }
}

impl Lru {
    /// `workingset_age_nonresident`: advances the eviction clock by `nr_pages`.
    #[inline]
    pub fn workingset_age_nonresident(&self, nr_pages: u64) {
        self.workingset
            .nonresident_age
            .fetch_add(nr_pages, Ordering::Relaxed);
    }

    /// `workingset_eviction`: called by reclaim with a folio of `arena` it has frozen and is
    /// about to remove from its index: reads the clock, advances it by the folio's pages, and
    /// returns the shadow to leave in the slot (`None` if workingset detection is off). Under
    /// the protected policy the shadow also carries the folio's resident age.
    pub fn workingset_eviction(&self, arena: &Arena, folio: &Folio) -> Option<Shadow> {
        let ws = &self.workingset;
        if !ws.enabled {
            return None;
        }
        let age = ws
            .nonresident_age
            .fetch_add(folio.nr_pages() as u64, Ordering::Relaxed);
        let workingset = folio.test_flag(PG_WORKINGSET);
        Some(match &ws.protection {
            None => pack_shadow(age, ws.bucket_order, workingset),
            Some(p) => {
                // ORDERING: Relaxed; written under the lruvec lock (`Lru::stamp`), and this
                // folio was isolated under that lock after the write: the lock orders them.
                let stamp = arena.ext(folio).lru_stamp.load(Ordering::Relaxed);
                pack_shadow_protected(age, workingset, age.wrapping_sub(stamp), p.age_shift)
            }
        })
    }

    /// `workingset_test_recent` for file pages: whether the folio `shadow` stands for was
    /// evicted recently enough that it would have stayed cached had the active list given up
    /// its pages (refault distance <= active pages), and its workingset flag.
    pub fn workingset_test_recent(&self, shadow: Shadow) -> (bool, bool) {
        let ws = &self.workingset;
        let (eviction, workingset) = unpack_shadow(shadow);
        let refault = ws.nonresident_age.load(Ordering::Relaxed);
        let distance = refault_distance(refault, eviction, ws.bucket_order);
        let workingset_size = ws.active_pages.load(Ordering::Relaxed);
        (distance <= workingset_size, workingset)
    }

    /// `workingset_refault`: a folio just inserted in place of `shadow` (locked, not yet on
    /// the LRU). Counts the refault; if it is recent, sets `PG_active` (it joins the active
    /// list when queued), advances the clock as an activation does, and, if it had been
    /// active before its eviction, sets `PG_workingset` and counts a restore. Returns
    /// whether it was activated.
    ///
    /// Under the protected policy, "recent" is the policy's admission (module docs), and the
    /// inactive target adapts first.
    pub fn workingset_refault(&self, folio: &Folio, shadow: Shadow) -> bool {
        let ws = &self.workingset;
        let nr = folio.nr_pages() as u64;
        ws.refault.fetch_add(nr, Ordering::Relaxed);
        let (recent, workingset) = match &ws.protection {
            None => self.workingset_test_recent(shadow),
            Some(p) => {
                let (eviction, resident, workingset) = unpack_shadow_protected(shadow, p.age_shift);
                let clock = ws.nonresident_age.load(Ordering::Relaxed);
                let distance = clock.wrapping_sub(eviction) & PROTECTED_EVICTION_MASK;
                (
                    p.admit(distance, resident, workingset, clock, nr),
                    workingset,
                )
            }
        };
        if !recent {
            return false;
        }
        folio.set_flag(PG_ACTIVE);
        self.workingset_age_nonresident(nr);
        ws.activate.fetch_add(nr, Ordering::Relaxed);
        if workingset {
            folio.set_flag(PG_WORKINGSET);
            ws.restore.fetch_add(nr, Ordering::Relaxed);
        }
        true
    }

    /// `workingset_activation`: an inactive folio was promoted (`folio_mark_accessed`); the
    /// clock advances by its pages.
    #[inline]
    pub(crate) fn workingset_activation(&self, folio: &Folio) {
        if self.workingset.enabled {
            self.workingset_age_nonresident(folio.nr_pages() as u64);
        }
    }

    /// The shadow-node count shared by every index of this LRU's cache (the shrinker's
    /// `list_lru`): give it to [`Index::with_shadow_nodes`](crate::mm::index::Index::with_shadow_nodes).
    pub fn shadow_nodes(&self) -> &Arc<ShadowNodes> {
        &self.workingset.shadow_nodes
    }

    /// The eviction clock now.
    pub fn nonresident_age(&self) -> u64 {
        self.workingset.nonresident_age.load(Ordering::Relaxed)
    }

    /// A snapshot of the workingset counters.
    pub fn workingset_stats(&self) -> WorkingsetStats {
        let ws = &self.workingset;
        WorkingsetStats {
            enabled: ws.enabled,
            nonresident_age: self.nonresident_age(),
            refault: ws.refault.load(Ordering::Relaxed),
            activate: ws.activate.load(Ordering::Relaxed),
            restore: ws.restore.load(Ordering::Relaxed),
            nodes: ws.shadow_nodes.nodes(),
            nodereclaim: ws.shadow_nodes.reclaimed(),
            cold_target: ws.protection.as_ref().map_or(0, |p| p.cold_target()),
        }
    }

    /// Sets the eviction clock (tests of wraparound).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn set_nonresident_age(&self, age: u64) {
        self.workingset
            .nonresident_age
            .store(age, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadow_round_trip_keeps_the_low_timestamp_bits() {
        for (age, ws) in [
            (0, false),
            (1, true),
            (EVICTION_MASK, true),
            (u64::MAX, false),
        ] {
            let s = pack_shadow(age, 0, ws);
            assert_eq!(s.value() & 1, 1, "marker bit");
            assert_eq!(unpack_shadow(s), (age & EVICTION_MASK, ws));
        }
        assert_eq!(TIMESTAMP_BITS, 60);
        assert_eq!(EVICTION_MASK, (1 << 60) - 1);
    }

    #[test]
    fn distance_is_exact_across_the_clock_overflow() {
        let evicted = u64::MAX - 5;
        let (e, _) = unpack_shadow(pack_shadow(evicted, 0, false));
        // The clock wrapped: 6 ticks to reach 0, then 10 more.
        assert_eq!(refault_distance(10, e, 0), 16);
        assert_eq!(refault_distance(evicted, e, 0), 0);
        // Only the low 60 bits count: a shadow 2^60 ticks old looks fresh (accepted).
        assert_eq!(refault_distance(evicted.wrapping_add(1 << 60), e, 0), 0);
    }

    #[test]
    fn buckets_drop_low_bits_as_upstream() {
        assert_eq!(bucket_order(1), 0);
        assert_eq!(bucket_order(u32::MAX as u64 + 1), 0);
        assert_eq!(bucket_order(1 << 62), 2);
        // With 3 bucket bits the distance is measured from the bucket's start.
        let (e, _) = unpack_shadow(pack_shadow(100, 3, true));
        assert_eq!(e, 12);
        assert_eq!(refault_distance(100, e, 3), 4);
        assert_eq!(refault_distance(96, e, 3), 0);
    }
}
