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
//! # Concurrency
//!
//! The clock and the counters are relaxed atomics: the clock is a statistic whose readers
//! need a recent value, not an ordering (the kernel uses `atomic_long_add`/`read` without
//! barriers). The eviction side runs under the index lock with the folio frozen; the refault
//! side with the new folio locked, before it is queued for the LRU. The workingset size is
//! read from a relaxed mirror of the active list's page count, so neither side takes the
//! lruvec lock.

use super::Lru;
use crate::mm::folio::flags::{PG_ACTIVE, PG_WORKINGSET};
use crate::mm::folio::Folio;
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
}

impl Workingset {
    pub(crate) fn new(enabled: bool, pages: u64, active_pages: Arc<AtomicU64>) -> Workingset {
        Workingset {
            enabled,
            bucket_order: bucket_order(pages),
            nonresident_age: CachePadded::new(AtomicU64::new(0)),
            active_pages,
            refault: AtomicU64::new(0),
            activate: AtomicU64::new(0),
            restore: AtomicU64::new(0),
            shadow_nodes: Arc::new(ShadowNodes::new()),
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

    /// `workingset_eviction`: called by reclaim with a folio it has frozen and is about to
    /// remove from its index: reads the clock, advances it by the folio's pages, and returns
    /// the shadow to leave in the slot (`None` if workingset detection is off).
    pub fn workingset_eviction(&self, folio: &Folio) -> Option<Shadow> {
        let ws = &self.workingset;
        if !ws.enabled {
            return None;
        }
        let age = ws
            .nonresident_age
            .fetch_add(folio.nr_pages() as u64, Ordering::Relaxed);
        Some(pack_shadow(
            age,
            ws.bucket_order,
            folio.test_flag(PG_WORKINGSET),
        ))
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
    pub fn workingset_refault(&self, folio: &Folio, shadow: Shadow) -> bool {
        let ws = &self.workingset;
        let nr = folio.nr_pages() as u64;
        ws.refault.fetch_add(nr, Ordering::Relaxed);
        let (recent, workingset) = self.workingset_test_recent(shadow);
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
