//! Who maps a large folio: the total mapcount and three ways of telling "mapped exclusively
//! by this space" from "mapped shared".
//!
//! # What it models
//!
//! The per-folio half of `mm/rmap.c`'s mapcount bookkeeping for large folios, in three
//! strategies chosen at run time ([`Tracking`]):
//!
//! | strategy | kernel | per-folio state | "mapped exclusively by S" |
//! |---|---|---|---|
//! | [`Tracking::None`] | before 2023: `folio_estimated_sharers` | total mapcount | mapcount = 1 (a large folio mapped more than once counts as shared) |
//! | [`Tracking::RmapId`] | the RFC (seed 002): `rmap_id.c`, `atomic_seqcount.h` | mapcount + 1..2 rmap words under a [`SeqCount`] | exact: `mapcount ≤ nr_pages` and every word = mapcount·subid(S) ([`id`]) |
//! | [`Tracking::MmOwner`] | merged 2025: `CONFIG_MM_ID` (`include/linux/rmap.h`) | mapcount + two (id, count) slots + "maybe shared" bit, under a bit spinlock | exact while at most two spaces map the folio, conservatively "shared" after |
//!
//! A small folio (order 0) is mapped exclusively iff its mapcount is 1 under every strategy.
//! Every strategy keeps the contract the copy-on-write code relies on: **never a wrong
//! "exclusive"**.
//!
//! # The state ([`FolioRmap`], one per folio, kept in the arena's per-frame extension)
//!
//! | field | strategy | meaning |
//! |---|---|---|
//! | `mapcount` | all | page-table mappings of the folio (`_large_mapcount` / `_mapcount`), as i64 |
//! | `seq` | rmap-id | atomic seqcount over `mapcount` and `vals` |
//! | `vals[0..2]` | rmap-id | Σ mappings·subid_j(space), modulo 2^64 |
//! | `mm_ids` | mm-owner | slot ids in bits 0..31 and 32..63; bit 31 = lock, bit 63 = maybe shared |
//! | `mm_counts[0..2]` | mm-owner | mappings of the slot's space (0 = free slot) |
//!
//! A mapping is one page-table entry (a PTE: one page) or one *entire* mapping (a PMD: the
//! whole folio); both count 1 in the mapcount and add one sub-ID. Callers batch: mapping `n`
//! PTEs of one folio by one space is one call with `nr = n`, one seqcount section or one lock
//! hold, whatever `n` is (the RFC's `folio_add_anon_rmap_range`).
//!
//! # Invariants
//!
//! 1. `mapcount` = the number of page-table entries (PTEs + entire mappings) of the folio in
//!    all spaces; 0 when the folio is freed (checked at free).
//! 2. rmap-id: after every completed section, `vals[j] = Σ_S count(S)·subid_j(S)` mod 2^64.
//! 3. mm-owner: a slot's count ≤ its space's real count, and is > 0 iff the slot holds an id;
//!    if the shared bit is clear, one space maps every mapping. All of it changes only under
//!    the lock bit.
//! 4. Refcount ≥ mapcount: callers take a folio reference before adding a mapping and drop
//!    it after removing the mapping (the space layer does).
//!
//! # The hard part: copy-on-write reuse ([`FolioRmap::can_reuse`])
//!
//! Reusing a folio in place is only safe if every reference to it is a mapping of the
//! faulting space: then nobody else can observe the write. The check compares the refcount
//! with the mapcount and the words with the space's sub-IDs, and the three reads must come
//! from one instant. rmap-id reads them inside one non-waiting seqcount read section (any
//! concurrent (un)mapping, by any space, makes it give up and copy); mm-owner takes the bit
//! lock. The refcount is read between the seqcount's begin and retry: a mapper takes its
//! references before its section and an unmapper drops them after its section, with a
//! release on the refcount put, so a refcount change the reader sees implies a section the
//! retry sees (rmap-id.md section 3, "Patch 20 relies on these full barriers").
//!
//! # Why it is fast
//!
//! rmap-id costs per batch: two seqcount RMWs plus 1+W adds, all plain stores when the
//! exclusive-writer path is taken; mm-owner: one lock RMW and one release store; the answer
//! is one snapshot and W compares, never a scan of page tables.

pub mod id;

use crate::mm::seqcount::SeqCount;
use crate::mm::sync::{fence, AtomicI32, AtomicU64, Backoff, Ordering};
use id::{rmap_words, words_match, RmapId};

/// The sharer-tracking strategy of a set of spaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Tracking {
    /// No tracking: a large folio mapped more than once is treated as shared (`none`).
    None,
    /// The RFC's rmap IDs under the atomic seqcount (`rmap-id`, or `rmap-id-noexcl` without
    /// the exclusive-writer path).
    RmapId {
        /// Try the exclusive-writer (plain store) seqcount path.
        exclusive_writer: bool,
    },
    /// The 2025 kernel's two owner slots and a shared bit under a bit spinlock (`mm-owner`).
    MmOwner,
}

impl Tracking {
    /// Every variant, by its stable lab name.
    pub const ALL: [Tracking; 4] = [
        Tracking::None,
        Tracking::RmapId {
            exclusive_writer: true,
        },
        Tracking::RmapId {
            exclusive_writer: false,
        },
        Tracking::MmOwner,
    ];

    /// rmap-id with the exclusive-writer path chosen by calibration on this machine
    /// ([`crate::mm::seqcount::exclusive_path_pays_off`]).
    pub fn rmap_id_calibrated() -> Self {
        Tracking::RmapId {
            exclusive_writer: crate::mm::seqcount::exclusive_path_pays_off(),
        }
    }

    /// The stable name: `none`, `rmap-id`, `rmap-id-noexcl`, `mm-owner`.
    pub fn name(&self) -> &'static str {
        match self {
            Tracking::None => "none",
            Tracking::RmapId {
                exclusive_writer: true,
            } => "rmap-id",
            Tracking::RmapId {
                exclusive_writer: false,
            } => "rmap-id-noexcl",
            Tracking::MmOwner => "mm-owner",
        }
    }

    /// True if "mapped exclusively" is exact for any number of spaces.
    pub fn is_exact(&self) -> bool {
        matches!(self, Tracking::RmapId { .. })
    }
}

impl crate::Variant for Tracking {
    const KIND: &'static str = "sharer tracking";
    const ALL: &'static [Self] = &Tracking::ALL;
    fn name(self) -> &'static str {
        Tracking::name(&self)
    }
}

impl std::fmt::Display for Tracking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Tracking {
    type Err = crate::UnknownVariant;

    /// Parses [`Tracking::name`], and `rmap-id-auto` as [`Tracking::rmap_id_calibrated`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "rmap-id-auto" => Ok(Tracking::rmap_id_calibrated()),
            _ => {
                <Tracking as crate::Variant>::from_name(s).map_err(|e| e.with_alias("rmap-id-auto"))
            }
        }
    }
}

/// Lock bit of `mm_ids` (the top bit of slot 0's id, `FOLIO_MM_IDS_LOCK_BITNUM`).
const MM_LOCK: u64 = 1 << 31;
/// "Maybe mapped shared" bit of `mm_ids` (top bit of slot 1's id).
const MM_SHARED: u64 = 1 << 63;
/// Mask of one slot's id.
const MM_ID_MASK: u64 = (1 << 31) - 1;

/// The mapping state of one folio (see the module docs for the fields and invariants).
#[derive(Debug)]
#[repr(C)]
pub struct FolioRmap {
    mapcount: AtomicU64,
    seq: SeqCount,
    vals: [AtomicU64; 2],
    mm_ids: AtomicU64,
    mm_counts: [AtomicI32; 2],
}

impl Default for FolioRmap {
    fn default() -> Self {
        Self::new()
    }
}

/// The owner slots of an mm-owner folio, decoded (for tests and `validate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmOwnerSlots {
    /// (space id, count) per slot; id 0 = free.
    pub slots: [(u32, i32); 2],
    /// The "maybe mapped shared" bit.
    pub maybe_shared: bool,
}

impl FolioRmap {
    /// Unmapped, every word at its initial value.
    pub fn new() -> Self {
        Self {
            mapcount: AtomicU64::new(0),
            seq: SeqCount::new(),
            vals: [AtomicU64::new(0), AtomicU64::new(0)],
            mm_ids: AtomicU64::new(0),
            mm_counts: [AtomicI32::new(0), AtomicI32::new(0)],
        }
    }

    /// Unmapped, with a deliberately broken seqcount (loom negative tests only).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn with_seq_flaw(flaw: crate::mm::seqcount::Flaw) -> Self {
        Self {
            seq: SeqCount::with_flaw(flaw),
            ..Self::new()
        }
    }

    /// `prep_compound_head` for the mapping state: back to the initial values.
    pub fn prep(&self) {
        self.mapcount.store(0, Ordering::Relaxed);
        for v in &self.vals {
            v.store(0, Ordering::Relaxed);
        }
        self.mm_ids.store(0, Ordering::Relaxed);
        for c in &self.mm_counts {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// `free_tail_page_prepare` / `free_page_is_bad` for the mapping state: a reason if the
    /// folio is freed while still mapped or with tracking residue.
    pub fn check_at_free(&self) -> Option<&'static str> {
        if self.mapcount.load(Ordering::Relaxed) != 0 {
            return Some("nonzero mapcount");
        }
        if self.vals.iter().any(|v| v.load(Ordering::Relaxed) != 0) {
            return Some("nonzero rmap value");
        }
        if self.mm_ids.load(Ordering::Relaxed) != 0
            || self
                .mm_counts
                .iter()
                .any(|c| c.load(Ordering::Relaxed) != 0)
        {
            return Some("nonzero mm owner slot");
        }
        if self.seq.load_raw() & crate::mm::seqcount::WRITERS_MASK != 0 {
            return Some("rmap seqcount writer still registered");
        }
        None
    }

    /// `folio_mapcount`: the number of page-table mappings (a relaxed snapshot).
    #[inline]
    pub fn mapcount(&self) -> i64 {
        self.mapcount.load(Ordering::Relaxed) as i64
    }

    /// The seqcount that guards the rmap-id words (for statistics and tests).
    pub fn seqcount(&self) -> &SeqCount {
        &self.seq
    }

    /// `folio_add_anon_rmap_ptes` / `folio_dup_anon_rmap_ptes` / `folio_add_file_rmap_ptes`
    /// (and `_pmd` with `nr = 1`): `nr` new mappings of a folio of `order` by space `mm`.
    ///
    /// One seqcount section (rmap-id) or one lock hold (mm-owner) whatever `nr` is. The
    /// caller has taken the `nr` folio references already (invariant 4).
    #[inline]
    pub fn add(&self, t: Tracking, order: u32, mm: &RmapId, nr: u32) {
        debug_assert!(
            nr as u64 <= 1 << order || order == 0,
            "batch larger than the folio"
        );
        self.update(t, order, mm, i64::from(nr));
    }

    /// `folio_remove_rmap_ptes` (and `_pmd` with `nr = 1`): `nr` mappings of `mm` are gone.
    /// The caller drops the folio references afterwards.
    #[inline]
    pub fn remove(&self, t: Tracking, order: u32, mm: &RmapId, nr: u32) {
        self.update(t, order, mm, -i64::from(nr));
    }

    #[inline]
    fn update(&self, t: Tracking, order: u32, mm: &RmapId, diff: i64) {
        match t {
            _ if order == 0 => {
                // Small folio: the mapcount alone (an atomic, as `_mapcount`).
                self.mapcount.fetch_add(diff as u64, Ordering::Relaxed);
            }
            Tracking::None => {
                self.mapcount.fetch_add(diff as u64, Ordering::Relaxed);
            }
            Tracking::RmapId { exclusive_writer } => {
                let s = self.seq.write_begin(exclusive_writer);
                s.add_signed(&self.mapcount, diff);
                for (v, sub) in self.vals.iter().zip(mm.subids().for_order(order)) {
                    s.add(v, (diff as u64).wrapping_mul(*sub));
                }
            }
            Tracking::MmOwner => self.mm_owner_update(mm.id(), diff),
        }
    }

    /// `folio_lock_large_mapcount`: takes the mm-owner bit lock, returns the word (lock set).
    #[inline]
    fn mm_lock(&self) -> u64 {
        let backoff = Backoff::new();
        loop {
            // ORDERING: Acquire pairs with the Release store in `mm_unlock`: the previous
            // holder's slot and mapcount writes are visible.
            let old = self.mm_ids.fetch_or(MM_LOCK, Ordering::Acquire);
            if old & MM_LOCK == 0 {
                return old | MM_LOCK;
            }
            while self.mm_ids.load(Ordering::Relaxed) & MM_LOCK != 0 {
                backoff.snooze();
            }
        }
    }

    /// `folio_unlock_large_mapcount`: stores `word` with the lock bit cleared.
    #[inline]
    fn mm_unlock(&self, word: u64) {
        // ORDERING: Release pairs with the Acquire in `mm_lock` (and with lockless readers'
        // Acquire loads of `mm_ids`). A plain store is enough: only the holder writes the word.
        self.mm_ids.store(word & !MM_LOCK, Ordering::Release);
    }

    /// The slot update of `folio_add_return_large_mapcount` / `_sub_return_`, under the lock.
    fn mm_owner_update(&self, id: u32, diff: i64) {
        let id = u64::from(id);
        debug_assert!(id != 0 && id <= MM_ID_MASK);
        let mut word = self.mm_lock();
        let total = self.mapcount.load(Ordering::Relaxed) as i64 + diff;
        debug_assert!(total >= 0, "mapcount underflow");
        // Relaxed: readers that need a stable mapcount take the lock; lockless readers get a
        // sane (atomic) value.
        self.mapcount.store(total as u64, Ordering::Relaxed);
        let ids = [word & MM_ID_MASK, (word >> 32) & MM_ID_MASK];
        let counts = [
            self.mm_counts[0].load(Ordering::Relaxed),
            self.mm_counts[1].load(Ordering::Relaxed),
        ];
        let mine = ids.iter().position(|&s| s == id);
        let set_slot = |word: &mut u64, i: usize, id: u64| {
            let shift = 32 * i as u32;
            *word = (*word & !(MM_ID_MASK << shift)) | (id << shift);
        };
        if diff > 0 {
            let diff32 = diff as i32;
            if let Some(i) = mine {
                self.mm_counts[i].store(counts[i] + diff32, Ordering::Relaxed);
            } else if ids[0] == 0 {
                set_slot(&mut word, 0, id);
                self.mm_counts[0].store(diff32, Ordering::Relaxed);
                if total != diff {
                    // Mappings of an untracked space exist already.
                    word |= MM_SHARED;
                }
            } else if ids[1] == 0 {
                set_slot(&mut word, 1, id);
                self.mm_counts[1].store(diff32, Ordering::Relaxed);
                word |= MM_SHARED;
            } else {
                // Both slots belong to other spaces: this space stays untracked.
                debug_assert!(
                    word & MM_SHARED != 0,
                    "untracked mapper without the shared bit"
                );
            }
        } else {
            if let Some(i) = mine {
                let c = counts[i] + diff as i32;
                if c <= 0 {
                    // Some of this space's mappings were added while it was untracked.
                    set_slot(&mut word, i, 0);
                    self.mm_counts[i].store(0, Ordering::Relaxed);
                } else {
                    self.mm_counts[i].store(c, Ordering::Relaxed);
                }
            }
            let ids = [word & MM_ID_MASK, (word >> 32) & MM_ID_MASK];
            let owns_all = |i: usize| {
                ids[i] != 0 && i64::from(self.mm_counts[i].load(Ordering::Relaxed)) == total
            };
            if total == 0 || owns_all(0) || owns_all(1) {
                word &= !MM_SHARED;
            }
        }
        self.mm_unlock(word);
    }

    /// The mm-owner slots (takes the bit lock for a consistent view).
    pub fn mm_owner_slots(&self) -> MmOwnerSlots {
        let word = self.mm_lock();
        let r = MmOwnerSlots {
            slots: [
                (
                    (word & MM_ID_MASK) as u32,
                    self.mm_counts[0].load(Ordering::Relaxed),
                ),
                (
                    ((word >> 32) & MM_ID_MASK) as u32,
                    self.mm_counts[1].load(Ordering::Relaxed),
                ),
            ],
            maybe_shared: word & MM_SHARED != 0,
        };
        self.mm_unlock(word);
        r
    }

    /// `folio_mapped_shared(folio, mm)` negated: true if every current mapping of this folio
    /// of `order` belongs to `mm`, as far as the strategy can tell. Never true wrongly.
    ///
    /// The caller maps at least one page of the folio (the kernel's contract); with
    /// `none` and `mm-owner` a single mapping is taken to be the caller's.
    ///
    /// Context: rmap-id spins while a writer is inside a section; mm-owner reads locklessly.
    pub fn mapped_exclusively(&self, t: Tracking, order: u32, mm: &RmapId) -> bool {
        match t {
            _ if order == 0 => self.mapcount() == 1,
            Tracking::None => self.mapcount() == 1,
            Tracking::RmapId { .. } => {
                let mut words = [0u64; 2];
                let n = rmap_words(order);
                loop {
                    let start = self.seq.read_begin();
                    let m = self.mapcount();
                    if m > 1 << order {
                        // "Obviously shared"; no need for a consistent snapshot.
                        return false;
                    }
                    for (w, v) in words.iter_mut().zip(&self.vals).take(n) {
                        *w = v.load(Ordering::Relaxed);
                    }
                    if !self.seq.read_retry(start) {
                        return words_match(order, m, &words[..n], mm.subids());
                    }
                }
            }
            Tracking::MmOwner => {
                let m = self.mapcount();
                if m <= 1 {
                    return m == 1;
                }
                // ORDERING: Acquire pairs with `mm_unlock`'s Release: the bit and the mapcount
                // of the same critical section (racy by design otherwise, as in the kernel).
                self.mm_ids.load(Ordering::Acquire) & MM_SHARED == 0
            }
        }
    }

    /// `wp_can_reuse_anon_folio` for this folio's mapping state: may space `mm` write to the
    /// folio in place? True only if every reference is one of `mm`'s mappings:
    /// `refcount()` (the folio's reference count, read at the right moment) equals the
    /// mapcount plus `extra_refs` (references the caller itself holds), and the strategy
    /// knows every mapping is `mm`'s.
    ///
    /// rmap-id uses the non-waiting seqcount read: any (un)mapping in flight means "copy".
    /// mm-owner takes the bit lock to stabilise mapcount against refcount. `none` reuses
    /// only a folio mapped once.
    pub fn can_reuse(
        &self,
        t: Tracking,
        order: u32,
        mm: &RmapId,
        extra_refs: u32,
        refcount: impl Fn() -> u32,
    ) -> bool {
        let m = self.mapcount();
        if m == 1 {
            // One mapping, the faulting one: the small-folio rule for every strategy.
            if refcount() != 1 + extra_refs {
                return false;
            }
            // ORDERING: Acquire fence pairs with the Release refcount decrement of the last
            // other mapper (`folio_put` after its rmap removal): its accesses to the bytes
            // happen before the caller's writes in place.
            fence(Ordering::Acquire);
            return true;
        }
        match t {
            _ if order == 0 => false,
            Tracking::None => false,
            Tracking::RmapId { .. } => {
                let Some(start) = self.seq.try_read_begin() else {
                    return false;
                };
                let m = self.mapcount();
                if m <= 0 || m > 1 << order {
                    return false;
                }
                if i64::from(refcount()) != m + i64::from(extra_refs) {
                    return false;
                }
                let n = rmap_words(order);
                let mut words = [0u64; 2];
                for (w, v) in words.iter_mut().zip(&self.vals).take(n) {
                    *w = v.load(Ordering::Relaxed);
                }
                words_match(order, m, &words[..n], mm.subids()) && !self.seq.read_retry(start)
            }
            Tracking::MmOwner => {
                // The lockless pre-checks of `__wp_can_reuse_large_anon_folio`.
                if self.mm_ids.load(Ordering::Relaxed) & MM_SHARED != 0
                    || i64::from(refcount()) != m + i64::from(extra_refs)
                {
                    return false;
                }
                let word = self.mm_lock();
                let m = self.mapcount();
                let id = u64::from(mm.id());
                let ok = word & MM_SHARED == 0
                    && i64::from(refcount()) == m + i64::from(extra_refs)
                    && [0usize, 1].iter().any(|&i| {
                        (word >> (32 * i)) & MM_ID_MASK == id
                            && i64::from(self.mm_counts[i].load(Ordering::Relaxed)) == m
                    });
                self.mm_unlock(word);
                ok
            }
        }
    }

    /// Recomputes every counter from `truth` (space id → mappings of this folio) and checks
    /// the state against it: the mapcount always; the rmap words under rmap-id; the slot
    /// invariants under mm-owner. For `validate()` passes and the differential tests.
    pub fn validate(&self, t: Tracking, order: u32, truth: &[(RmapId, u64)]) -> Result<(), String> {
        let total: u64 = truth.iter().map(|(_, n)| n).sum();
        let m = self.mapcount();
        if m != total as i64 {
            return Err(format!("mapcount {m}, page tables say {total}"));
        }
        if order == 0 {
            return Ok(());
        }
        match t {
            Tracking::None => Ok(()),
            Tracking::RmapId { .. } => {
                for (j, v) in self.vals.iter().enumerate().take(rmap_words(order)) {
                    let want = truth.iter().fold(0u64, |acc, (id, n)| {
                        acc.wrapping_add(n.wrapping_mul(id.subids().for_order(order)[j]))
                    });
                    let got = v.load(Ordering::Relaxed);
                    if got != want {
                        return Err(format!("rmap value {j} is {got:#x}, expected {want:#x}"));
                    }
                }
                Ok(())
            }
            Tracking::MmOwner => {
                let s = self.mm_owner_slots();
                let real = |id: u32| {
                    truth
                        .iter()
                        .filter(|(r, _)| r.id() == id)
                        .map(|(_, n)| *n as i64)
                        .sum::<i64>()
                };
                for (id, c) in s.slots {
                    if (id == 0) != (c == 0) || c < 0 {
                        return Err(format!("mm-owner slot ({id}, {c}) inconsistent"));
                    }
                    if id != 0 && i64::from(c) > real(id) {
                        return Err(format!(
                            "mm-owner slot of space {id} counts {c}, it maps {}",
                            real(id)
                        ));
                    }
                }
                let mappers = truth.iter().filter(|(_, n)| *n > 0).count();
                if !s.maybe_shared && mappers > 1 {
                    return Err(format!(
                        "shared bit clear while {mappers} spaces map the folio"
                    ));
                }
                if total == 0 && s.maybe_shared {
                    return Err("shared bit set on an unmapped folio".into());
                }
                Ok(())
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn ids(n: u32) -> Vec<RmapId> {
        (1..=n).map(|i| RmapId::new(i * 7919 % (1 << 24))).collect()
    }

    #[test]
    fn names_round_trip() {
        for t in Tracking::ALL {
            assert_eq!(t.name().parse::<Tracking>().unwrap(), t);
        }
        assert!(matches!(
            "rmap-id-auto".parse::<Tracking>(),
            Ok(Tracking::RmapId { .. })
        ));
        assert!("bogus"
            .parse::<Tracking>()
            .unwrap_err()
            .to_string()
            .contains("mm-owner"));
    }

    #[test]
    fn fork_then_child_exit_every_strategy() {
        let s = ids(2);
        for t in Tracking::ALL {
            let f = FolioRmap::new();
            let order = 9;
            f.add(t, order, &s[0], 512);
            assert!(
                f.mapped_exclusively(t, order, &s[0]) == (t != Tracking::None),
                "{t}"
            );
            // fork: the child maps every page too.
            f.add(t, order, &s[1], 512);
            assert!(!f.mapped_exclusively(t, order, &s[0]));
            assert!(!f.can_reuse(t, order, &s[0], 0, || 1024));
            f.validate(t, order, &[(s[0], 512), (s[1], 512)]).unwrap();
            // the child exits.
            f.remove(t, order, &s[1], 512);
            let exact = t != Tracking::None;
            assert_eq!(f.mapped_exclusively(t, order, &s[0]), exact, "{t}");
            assert_eq!(f.can_reuse(t, order, &s[0], 0, || 512), exact, "{t}");
            // an extra reference (a pin) forbids reuse.
            assert!(!f.can_reuse(t, order, &s[0], 0, || 513));
            assert_eq!(f.can_reuse(t, order, &s[0], 1, || 513), exact);
            f.remove(t, order, &s[0], 511);
            assert!(f.mapped_exclusively(t, order, &s[0]));
            assert!(f.can_reuse(t, order, &s[0], 0, || 1));
            f.remove(t, order, &s[0], 1);
            assert_eq!(f.check_at_free(), None, "{t}");
        }
    }

    #[test]
    fn mm_owner_third_space_makes_it_conservative() {
        // The kernel commit's example 2: A and B take the slots, C is untracked; after A and B
        // unmap, C alone maps the folio but it still reads "maybe shared".
        let s = ids(3);
        let t = Tracking::MmOwner;
        let f = FolioRmap::new();
        f.add(t, 4, &s[0], 2);
        f.add(t, 4, &s[1], 2);
        f.add(t, 4, &s[2], 2);
        f.remove(t, 4, &s[0], 2);
        f.remove(t, 4, &s[1], 2);
        assert!(!f.mapped_exclusively(t, 4, &s[2]));
        f.validate(t, 4, &[(s[2], 2)]).unwrap();
        // rmap-id in the same history answers exactly.
        let r = Tracking::RmapId {
            exclusive_writer: true,
        };
        let g = FolioRmap::new();
        for (i, d) in [(0, 2i64), (1, 2), (2, 2), (0, -2), (1, -2)] {
            if d > 0 {
                g.add(r, 4, &s[i], 2)
            } else {
                g.remove(r, 4, &s[i], 2)
            }
        }
        assert!(g.mapped_exclusively(r, 4, &s[2]));
        f.remove(t, 4, &s[2], 2);
        g.remove(r, 4, &s[2], 2);
        assert_eq!(f.check_at_free(), None);
        assert_eq!(g.check_at_free(), None);
    }

    #[test]
    fn mm_owner_slot_freed_when_untracked_mappings_drain() {
        // A untracked adds 1, then takes a freed slot with 1 more, then removes both at once:
        // its slot count goes negative and the slot is freed.
        let s = ids(3);
        let t = Tracking::MmOwner;
        let f = FolioRmap::new();
        f.add(t, 3, &s[1], 1);
        f.add(t, 3, &s[2], 1);
        f.add(t, 3, &s[0], 1); // untracked
        f.remove(t, 3, &s[1], 1); // frees slot 0
        f.add(t, 3, &s[0], 1); // A takes slot 0 with 1 (really maps 2)
        f.validate(t, 3, &[(s[0], 2), (s[2], 1)]).unwrap();
        f.remove(t, 3, &s[0], 2);
        let slots = f.mm_owner_slots();
        assert_eq!(slots.slots[0], (0, 0));
        // C's slot now owns every remaining mapping, so A's removal cleared the bit.
        assert!(!slots.maybe_shared);
        assert!(f.mapped_exclusively(t, 3, &s[2]));
        f.validate(t, 3, &[(s[2], 1)]).unwrap();
        f.remove(t, 3, &s[2], 1);
        assert_eq!(f.check_at_free(), None);
    }

    #[test]
    fn rmap_id_wraps_while_above_nr_pages_and_recovers() {
        // A PMD-mapped order-2 folio being remapped: 1 entire + 4 PTEs = 5 > 4 mappings.
        let s = ids(2);
        let t = Tracking::RmapId {
            exclusive_writer: false,
        };
        let f = FolioRmap::new();
        f.add(t, 2, &s[0], 1);
        f.add(t, 2, &s[0], 4);
        assert!(
            !f.mapped_exclusively(t, 2, &s[0]),
            "obviously shared above P"
        );
        f.remove(t, 2, &s[0], 1);
        assert!(f.mapped_exclusively(t, 2, &s[0]));
        assert!(!f.mapped_exclusively(t, 2, &s[1]));
        f.remove(t, 2, &s[0], 4);
        assert_eq!(f.check_at_free(), None);
    }

    #[test]
    fn free_check_reports_residue() {
        let f = FolioRmap::new();
        f.add(Tracking::MmOwner, 2, &RmapId::new(3), 1);
        assert_eq!(f.check_at_free(), Some("nonzero mapcount"));
        f.prep();
        assert_eq!(f.check_at_free(), None);
    }
}
