//! Folios and the arena that owns them: `struct folio` (`include/linux/mm_types.h`), the
//! memmap, `free_pages_prepare` and the folio lock (`folio_lock`, `folio_unlock`,
//! `folio_wait_locked` in `mm/filemap.c`).
//!
//! # What it models
//!
//! A *folio* is a naturally aligned run of `2^order` base pages of 4 KiB (orders
//! `0..=`[`MAX_ORDER`], up to 2 MiB) described by one header. The kernel keeps a `struct page`
//! for every page frame in one array, the memmap, that is never freed: a pointer to a page
//! header stays dereferenceable forever, even after the folio was freed and its frames reused
//! for something else. Lockless readers depend on that: they find a folio pointer under RCU,
//! take a *speculative* reference with `folio_try_get`, and only then check that the folio is
//! still what they looked up.
//!
//! [`Arena`] is that memmap plus the page allocator of one cache: it maps, once, a header
//! per 4 KiB frame ([`Folio`], 64 bytes), an extension record per frame ([`FolioExt`], the
//! kernel's `page_ext`, where later layers keep their per-folio words) and the data frames
//! themselves in anonymous mappings sized for the memory budget, builds headers and records
//! as their frames are first used (the kernel's deferred `struct page` initialisation; see
//! `arena.rs`), and frees none of them before the arena is dropped. Folios are carved out of the frames by a buddy allocator
//! with per-CPU lists (see `buddy.rs`), so a folio's header is the header of its first frame,
//! its *pfn*; the headers of the other frames (tails) are unused while it lives.
//!
//! # The header
//!
//! | field | type | meaning | written by |
//! |---|---|---|---|
//! | `refcount` | [`RefCount`] | references; frozen while free | everyone, by the arena's [`RefStrategy`] |
//! | `flags` | `AtomicU64` | `PG_*` bits (see [`flags`]) | atomic RMWs by the bit's owner |
//! | `mapping` | `AtomicU64` | owning mapping id, 0 = none | the index under its lock, anon owners |
//! | `index` | `AtomicU64` | page offset in the mapping | the index, before publication |
//! | `private` | `AtomicU64` | filesystem-private word | its owner (with `PG_private`) |
//! | `order` | `AtomicU8` | `log2(pages)` | the allocator |
//! | `state` | `AtomicU8` | free / head / tail (allocator bookkeeping) | the allocator |
//! | `pfn` | `u32` | this header's frame number | fixed at arena creation |
//!
//! Every field is atomic because a stale reader may load it at any time; loads without a
//! reference are hints that must be re-validated.
//!
//! # Lifetimes
//!
//! ```text
//!   free (refcount frozen, flags 0, mapping 0)
//!     │ Arena::alloc(order): check FLAGS_CHECK_AT_PREP, init(1)   ──► FolioRef
//!     ▼
//!   live (count ≥ 1) ── clone = get, drop = put, try_get by lockless readers
//!     │ the put that wins (count → frozen), or freeze(expected) by a remover
//!     ▼
//!   free path: from the folio's *current* state, check FLAGS_CHECK_AT_FREE and mapping == 0
//!   (else "bad page": counted, panics if `panic_on_bad_page`), sanitise, return the frames
//! ```
//!
//! Whoever drops the count to its final value, or freezes it at a known count, is the only
//! one who frees the folio, and the free path reads what to do from the header, never from
//! what the caller believed the folio was: a speculative `try_get` followed by a failed
//! re-check and a `put` may be the final put of a folio that was freed and reallocated in
//! between, and must free *that* folio correctly (kernel-mechanisms.md 1.1.2, 1.3.4).
//!
//! # Who may touch the bytes
//!
//! Racing non-atomic reads and writes are undefined behaviour in Rust, so page bytes follow
//! the kernel's page-cache discipline, encoded in the handle types:
//!
//! 1. A folio is allocated *not uptodate*. Only the holder of its lock ([`FolioLocked`],
//!    unique by construction) writes its bytes, through [`FolioLocked::data_mut`], which
//!    refuses once the folio is uptodate.
//! 2. `PG_uptodate` is set by the lock holder with a release RMW ([`FolioLocked::end_read`],
//!    [`FolioLocked::mark_uptodate`]) and never cleared while the folio stays allocated (the
//!    free path clears it). From then on the bytes are immutable while anyone holds a
//!    reference (rule 5 says how a writer changes them with no reference held elsewhere).
//! 3. Readers holding a reference get `&[u8]` from [`FolioRef::data`] only after an acquire
//!    load sees `PG_uptodate`. Writes (1) and reads (3) are therefore ordered by
//!    happens-before and never overlap, whatever references exist.
//! 4. Anonymous folios ([`flags::PG_ANON`], set by the lock holder) stay writable after
//!    uptodate, like process memory: their bytes are read and written only with the racy
//!    atomic copies ([`Folio::read_racy`], [`Folio::write_racy`]), and `data()` refuses them.
//! 5. A page-cache folio's uptodate bytes change only while its refcount is frozen
//!    ([`FrozenFolio::write_frozen`]): the freeze at the exact count of references its owner
//!    holds proves that no reader holds a `&[u8]` of it (readers hold references), and none
//!    can take one until the unfreeze, whose Release store the next `try_get`'s Acquire pairs
//!    with. The stores are atomic, so a stale-pointer [`Folio::read_racy`] never races them.
//!    (The write path replaces a folio that anyone else holds instead: see `cache::write`.)
//! 6. An exclusive latch may keep a page-cache folio's bytes for itself longer than a freeze
//!    (a buffer manager's in-place update): with the refcount frozen at its owner's count it
//!    sets [`flags::PG_LATCHED`] ([`FrozenFolio::set_latched`]) and unfreezes. Every reference
//!    taken afterwards reads the bit through the unfreeze's Release / `try_get`'s Acquire, so
//!    [`FolioRef::data`] refuses the folio and no `&[u8]` of it is made while the latch's
//!    holder writes through its own pointer (plain stores; [`Folio::read_racy`] refuses a
//!    latched folio too). The commit clears the bit with a Release RMW
//!    ([`FolioRef::end_latch`]) that `data`'s Acquire pairs with.
//!
//! These rules hold even for a reference obtained through a stale pointer, so a speculative
//! [`Arena::try_get`] can be a safe function: getting the wrong folio is a logic error the
//! caller's re-check must catch, never a data race. Only an unbalanced put could break them
//! (the folio would be freed and reused under a reader), which is why the raw reference
//! operations ([`FolioRef::from_raw`]) are `unsafe`.
//!
//! # The folio lock
//!
//! `PG_locked` in the flags word. [`FolioRef::lock`] sets it with one `fetch_or`; on contention
//! the thread sleeps in the arena's hashed wait table (`wait.rs`, the kernel's
//! `folio_wait_table`), registering itself and setting `PG_waiters` so the unlocker knows it
//! must wake someone. [`FolioRef::wait_locked`] sleeps until the bit is clear without taking
//! it (readers waiting for I/O). Nobody spins on a CPU. Unlock is one `fetch_and` when nobody
//! waits. A folio freed while locked is a bad page.
//!
//! # Tests
//!
//! In-file unit tests (`tests.rs`): every order allocated and freed with the accounting back
//! to baseline, budget exhaustion and fragmentation as typed errors, bad pages at free
//! (flags, mapping, lock) and at allocation (a free folio written through a stale pointer)
//! counted without panicking when `panic_on_bad_page` is off and panicking when it is on, the
//! byte-access discipline, sleeping lock waiters, and a 4-thread alloc/free stress followed by
//! [`Arena::validate`]. `src/loom_tests/folio.rs` model-checks the lock and wait table (no lost
//! wake-up; a broken unlock that skips the wake-up is caught as a deadlock).
//!
//! # Extending the header
//!
//! Later layers keep per-folio state in [`FolioExt`] (one per frame, reached with
//! [`Arena::ext`]): add a field there with a doc line naming its owner, reset it in
//! `FolioExt::prep` (run at every allocation) and, if a non-initial value at free is a bug,
//! report it from `FolioExt::check_at_free` (it then counts as a bad page). A large folio may
//! also use the records of its tail frames (as the kernel keeps `_large_mapcount` and the mm
//! ids in the first tail pages): `arena.ext_of(folio.pfn() + i)` for `i < nr_pages`.
//!
//! # Why it is fast
//!
//! A header is one cache line with the refcount and flags at its start; a hit costs one
//! refcount RMW and one flags load. Allocation and free of small orders touch a per-CPU list
//! under an uncontended lock and take the shared buddy lock once per batch. Statistics are
//! per-CPU relaxed counters summed on demand.

mod arena;
mod buddy;
mod ext;
pub mod flags;
mod handle;
mod wait;

pub use arena::{
    check_budget, AllocError, Arena, ArenaConfig, ArenaError, ArenaStats, BudgetOverLimit,
    MemoryLimit, ReleaseHook, METADATA_BYTES_PER_PAGE,
};
pub use buddy::{MAX_ORDER, NR_ORDERS, PCP_MAX_ORDER};
pub use ext::FolioExt;
pub use handle::{FolioLocked, FolioRef, FrozenFolio};
#[cfg(not(loom))]
pub(crate) use wait::TaskWait;

use crate::mm::refcount::{RefCount, RefStrategy};
use crate::mm::sync::{AtomicU64, AtomicU8, Ordering};
use flags::*;

/// `PAGE_SHIFT`: log2 of the base page size.
pub const PAGE_SHIFT: u32 = 12;
/// `PAGE_SIZE`: the base page, 4 KiB.
pub const PAGE_SIZE: usize = 1 << PAGE_SHIFT;

/// Allocation state of a frame header (allocator bookkeeping, for `validate`).
pub(crate) const STATE_FREE: u8 = 0;
pub(crate) const STATE_HEAD: u8 = 1;
pub(crate) const STATE_TAIL: u8 = 2;

/// `struct folio`: the header of one folio (and, while it is free or a tail, of one frame).
///
/// Reached through a handle ([`FolioRef`], [`FolioLocked`]) or, for lockless paths, as a bare
/// `&Folio` from [`Arena::folio`]; without a reference every value read is a hint.
#[repr(C, align(64))]
pub struct Folio {
    refcount: RefCount,
    order: AtomicU8,
    state: AtomicU8,
    pfn: u32,
    flags: AtomicU64,
    mapping: AtomicU64,
    index: AtomicU64,
    private: AtomicU64,
}

impl std::fmt::Debug for Folio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Folio")
            .field("pfn", &self.pfn)
            .field("order", &self.order())
            .field("refcount", &format_args!("{:#x}", self.refcount.raw()))
            .field("flags", &describe(self.flags()))
            .field("mapping", &self.mapping())
            .field("index", &self.index())
            .finish()
    }
}

impl Folio {
    fn new(pfn: u32) -> Self {
        Self {
            refcount: RefCount::frozen(),
            order: AtomicU8::new(0),
            state: AtomicU8::new(STATE_FREE),
            pfn,
            flags: AtomicU64::new(0),
            mapping: AtomicU64::new(0),
            index: AtomicU64::new(0),
            private: AtomicU64::new(0),
        }
    }

    /// `folio_pfn`: the frame number of the folio's first page in its arena.
    #[inline]
    pub fn pfn(&self) -> u32 {
        self.pfn
    }

    /// `folio_order`: log2 of the number of base pages.
    #[inline]
    pub fn order(&self) -> u32 {
        self.order.load(Ordering::Relaxed) as u32
    }

    /// `folio_nr_pages`: the number of base pages.
    #[inline]
    pub fn nr_pages(&self) -> usize {
        1 << self.order()
    }

    /// `folio_size`: the size in bytes.
    #[inline]
    pub fn size(&self) -> usize {
        PAGE_SIZE << self.order()
    }

    /// `folio->flags`: a relaxed snapshot of the flags word.
    #[inline]
    pub fn flags(&self) -> u64 {
        self.flags.load(Ordering::Relaxed)
    }

    /// `folio_test_*`: whether every bit of `flag` is set (relaxed).
    #[inline]
    pub fn test_flag(&self, flag: u64) -> bool {
        self.flags() & flag == flag
    }

    /// `folio_set_*`: sets `flag` (not one of [`FLAGS_PROTECTED`]).
    ///
    /// # Panics
    /// If `flag` contains a protected bit: use the lock-holder methods for those.
    #[inline]
    pub fn set_flag(&self, flag: u64) {
        self.test_set_flag(flag);
    }

    /// `folio_clear_*`: clears `flag` (not one of [`FLAGS_PROTECTED`]).
    ///
    /// # Panics
    /// If `flag` contains a protected bit.
    #[inline]
    pub fn clear_flag(&self, flag: u64) {
        self.test_clear_flag(flag);
    }

    /// `folio_test_set_*`: sets `flag`, returning whether it was already (fully) set.
    ///
    /// # Panics
    /// If `flag` contains a protected bit.
    #[inline]
    pub fn test_set_flag(&self, flag: u64) -> bool {
        check_unprotected(flag);
        // ORDERING: AcqRel, as the kernel's value-returning bit ops are fully ordered: a layer
        // that hands a folio over by a flag (PG_lru) publishes its writes with it.
        self.flags.fetch_or(flag, Ordering::AcqRel) & flag == flag
    }

    /// `folio_test_clear_*`: clears `flag`, returning whether it was (fully) set.
    ///
    /// # Panics
    /// If `flag` contains a protected bit.
    #[inline]
    pub fn test_clear_flag(&self, flag: u64) -> bool {
        check_unprotected(flag);
        // ORDERING: AcqRel; pairs with `test_set_flag` (the bit's hand-over).
        self.flags.fetch_and(!flag, Ordering::AcqRel) & flag == flag
    }

    /// The access count in [`LRU_REFS_MASK`] (0 to [`LRU_REFS_MAX`]):
    /// reads of an active folio beyond the one that set `PG_referenced`, since aging last
    /// looked at it (MGLRU's `folio_lru_refs`). A hint, read relaxed.
    #[inline]
    pub fn lru_refs(&self) -> u32 {
        ((self.flags() & flags::LRU_REFS_MASK) >> flags::LRU_REFS_SHIFT) as u32
    }

    /// Counts one more access in the refs field unless it is saturated at [`LRU_REFS_MAX`]
    /// (MGLRU's `folio_inc_refs`); returns whether it counted. A saturated folio costs no
    /// write.
    #[inline]
    pub fn inc_lru_refs(&self) -> bool {
        self.update_lru_refs(|r| (r < LRU_REFS_MAX).then_some(r + 1))
    }

    /// Takes one access back from the refs field (aging spending a chance); returns whether
    /// there was one.
    #[inline]
    pub fn dec_lru_refs(&self) -> bool {
        self.update_lru_refs(|r| r.checked_sub(1))
    }

    /// A read-modify-write of the refs field alone, by compare-and-swap on the whole word.
    fn update_lru_refs(&self, f: impl Fn(u32) -> Option<u32>) -> bool {
        let mut old = self.flags();
        loop {
            let refs = ((old & flags::LRU_REFS_MASK) >> flags::LRU_REFS_SHIFT) as u32;
            let Some(new_refs) = f(refs) else {
                return false;
            };
            let new =
                (old & !flags::LRU_REFS_MASK) | (u64::from(new_refs) << flags::LRU_REFS_SHIFT);
            // ORDERING: Relaxed: the count is a reclaim hint that publishes nothing. What the
            // CAS guarantees is the field's integrity: increments (readers, in
            // `Lru::mark_accessed`) and decrements (aging, under the lruvec lock) of the same
            // word never lose one another or carry out of the two bits, and the single-bit
            // RMWs of other layers (`test_set_flag`, `test_clear_flag`) are never undone by a
            // stale word. A check-then-`fetch_add` would let two readers that both saw
            // `LRU_REFS_MAX - 1` carry into the next bit (the loom model
            // `racing_refs_never_leave_their_field` catches that weakened variant).
            match self
                .flags
                .compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(cur) => old = cur,
            }
        }
    }

    /// The weakened refs increment the loom model must catch: a check, then a `fetch_add`.
    #[cfg(loom)]
    pub fn inc_lru_refs_racy(&self) -> bool {
        if self.lru_refs() >= LRU_REFS_MAX {
            return false;
        }
        self.flags
            .fetch_add(1 << flags::LRU_REFS_SHIFT, Ordering::Relaxed);
        true
    }

    /// Whether an exclusive latch updates the folio in place ([`flags::PG_LATCHED`], rule 6;
    /// acquire: once this returns false, the last latch's changes are visible).
    #[inline]
    pub fn is_latched(&self) -> bool {
        // ORDERING: Acquire; pairs with the Release clear in `FolioRef::end_latch`.
        self.flags.load(Ordering::Acquire) & PG_LATCHED != 0
    }

    /// `folio_test_uptodate`: the data is valid (acquire: the bytes written before
    /// `PG_uptodate` was set are visible after this returns true).
    #[inline]
    pub fn is_uptodate(&self) -> bool {
        // ORDERING: Acquire; pairs with the Release RMW that set PG_uptodate
        // (`FolioLocked::mark_uptodate` / `end_read`).
        self.flags.load(Ordering::Acquire) & PG_UPTODATE != 0
    }

    /// `folio_test_locked`: the folio lock is held by someone (relaxed hint).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.flags() & PG_LOCKED != 0
    }

    /// `folio_test_anon`: an anonymous folio (bytes accessed only with the racy copies).
    #[inline]
    pub fn is_anon(&self) -> bool {
        self.flags() & PG_ANON != 0
    }

    /// `folio->mapping`: the owning mapping id, 0 if none.
    #[inline]
    pub fn mapping(&self) -> u64 {
        // ORDERING: Acquire; pairs with the Release stores in the index (`set_mapping`), so a
        // holder that sees a mapping also sees the index written with it.
        self.mapping.load(Ordering::Acquire)
    }

    /// `folio->index`: the page offset of the folio in its mapping.
    #[inline]
    pub fn index(&self) -> u64 {
        self.index.load(Ordering::Relaxed)
    }

    /// `folio_get_private`: the filesystem-private word.
    #[inline]
    pub fn private(&self) -> u64 {
        self.private.load(Ordering::Relaxed)
    }

    /// `folio_attach_private` (the word only): stores the filesystem-private word; the owner
    /// sets and clears [`PG_PRIVATE`] itself.
    #[inline]
    pub fn set_private(&self, value: u64) {
        self.private.store(value, Ordering::Relaxed);
    }

    /// `folio_ref_count`: the number of references under `s`, 0 while free or frozen
    /// (a relaxed snapshot).
    #[inline]
    pub fn ref_count(&self, s: RefStrategy) -> u32 {
        self.refcount.count(s)
    }

    /// `folio_ref_count == 0`: free or frozen under `s`.
    #[inline]
    pub fn is_frozen(&self, s: RefStrategy) -> bool {
        self.refcount.is_frozen(s)
    }

    /// `folio_copy` from the folio, racing writers allowed: copies `buf.len()` bytes at
    /// `offset` with relaxed atomic loads. Returns false (copying nothing) unless the folio is
    /// uptodate and the range is inside it.
    ///
    /// Safe on any `&Folio`: without a reference the bytes may belong to a recycled folio, so
    /// such a caller must validate afterwards (a sequence count, like kernel-mechanisms.md
    /// 5.1) before trusting them.
    pub fn read_racy(&self, offset: usize, buf: &mut [u8], arena: &Arena) -> bool {
        if !self.is_uptodate()
            || self.test_flag(flags::PG_LATCHED)
            || offset
                .checked_add(buf.len())
                .is_none_or(|e| e > self.size())
        {
            return false;
        }
        // SAFETY: the range is inside the folio's frames, which stay mapped for the arena's
        // life; writers of an uptodate folio use only atomic stores (rule 4 in the module
        // docs), and no `&mut` to uptodate bytes exists (`data_mut` refuses uptodate folios).
        unsafe { crate::mm::sync::racy::load(arena.frame_ptr(self.pfn).add(offset), buf) };
        true
    }

    /// `copy_to_user_page` into an anonymous folio: writes `src` at `offset` with relaxed
    /// atomic stores. Returns false (writing nothing) unless the folio is anonymous and
    /// uptodate and the range is inside it.
    ///
    /// The caller must hold a reference (a mapping or a handle); which writes are *logically*
    /// allowed (copy-on-write, exclusivity) is the address-space layer's business.
    pub fn write_racy(&self, offset: usize, src: &[u8], arena: &Arena) -> bool {
        if !self.is_uptodate()
            || !self.is_anon()
            || offset
                .checked_add(src.len())
                .is_none_or(|e| e > self.size())
        {
            return false;
        }
        // SAFETY: as in `read_racy`: anonymous uptodate bytes are only accessed atomically
        // (`data()` refuses anon folios, `data_mut` refuses uptodate ones).
        unsafe { crate::mm::sync::racy::store(arena.frame_ptr(self.pfn).add(offset), src) };
        true
    }

    /// Sets mapping and index (the index under its lock, before the publishing store).
    #[inline]
    pub(crate) fn set_mapping(&self, mapping: u64, index: u64) {
        self.index.store(index, Ordering::Relaxed);
        // ORDERING: Release; pairs with the Acquire in `Folio::mapping`.
        self.mapping.store(mapping, Ordering::Release);
    }

    #[inline]
    pub(crate) fn refcount(&self) -> &RefCount {
        &self.refcount
    }

    #[inline]
    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    /// Clears `PG_locked` with release ordering and wakes sleepers if `PG_waiters` was set.
    #[inline]
    fn unlock_bit(&self, arena: &Arena, also_xor: u64) {
        // ORDERING: Release; pairs with the Acquire of the next locker (`try_lock_bit`,
        // `WaitTable::wait_bit`) and of `is_uptodate` readers when `also_xor` sets PG_uptodate.
        // Same-word RMW order with the waiter's `fetch_or(PG_WAITERS)`: see wait.rs.
        let old = self
            .flags
            .fetch_xor(PG_LOCKED | also_xor, Ordering::Release);
        debug_assert!(old & PG_LOCKED != 0, "folio_unlock on an unlocked folio");
        if old & PG_WAITERS != 0 {
            arena.waits().wake_bit(self);
        }
    }

    #[inline]
    fn try_lock_bit(&self) -> bool {
        // ORDERING: Acquire; pairs with the Release in `unlock_bit`.
        self.flags.fetch_or(PG_LOCKED, Ordering::Acquire) & PG_LOCKED == 0
    }
}

#[inline]
#[track_caller]
fn check_unprotected(flag: u64) {
    assert!(
        flag & FLAGS_PROTECTED == 0,
        "flags {} change only through the folio lock holder (FolioLocked) or the allocator",
        describe(flag & FLAGS_PROTECTED)
    );
}

#[cfg(all(test, not(loom)))]
mod tests;
