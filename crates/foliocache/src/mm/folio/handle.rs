//! Counted handles on folios: a reference ([`FolioRef`]), a reference holding the folio lock
//! ([`FolioLocked`]) and the sole owner of a frozen folio ([`FrozenFolio`]).

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::Deref;

use super::flags::{PG_ERROR, PG_LOCKED, PG_UPTODATE, PG_WAITERS};
use super::{Arena, Folio, FolioExt};
use crate::mm::sync::Ordering;

/// A counted reference to a live folio (`folio_get` on clone, `folio_put` on drop).
///
/// The drop that wins the final put frees the folio through its arena. Dereferences to the
/// [`Folio`] header.
pub struct FolioRef<'a> {
    arena: &'a Arena,
    folio: &'a Folio,
}

impl<'a> FolioRef<'a> {
    /// Wraps a reference the caller owns (built by the arena and the index).
    #[inline]
    pub(crate) fn owned(arena: &'a Arena, folio: &'a Folio) -> Self {
        Self { arena, folio }
    }

    /// Takes ownership of a counted reference previously leaked with [`FolioRef::into_raw`]
    /// (or counted by hand, e.g. one of the references a structure holds).
    ///
    /// # Safety
    /// The caller must own one reference on `folio` that nobody else will drop, and `folio`
    /// must be a header of `arena`. An unbalanced put frees the folio under its users.
    #[inline]
    pub unsafe fn from_raw(arena: &'a Arena, folio: &'a Folio) -> Self {
        debug_assert!(arena.owns(folio), "folio of another arena");
        Self { arena, folio }
    }

    /// Leaks the reference (no put) and returns the header; undo with [`FolioRef::from_raw`].
    /// The way to keep a reference in a structure (an LRU batch, a page table).
    #[must_use = "keep the leaked reference and give it back with `from_raw`, or the folio leaks"]
    #[inline]
    pub fn into_raw(self) -> &'a Folio {
        let folio = self.folio;
        std::mem::forget(self);
        folio
    }

    /// `&folio->page`: the header, with the handle's lifetime.
    #[inline]
    pub fn folio(&self) -> &'a Folio {
        self.folio
    }

    /// `folio_zone`: the arena the folio belongs to.
    #[inline]
    pub fn arena(&self) -> &'a Arena {
        self.arena
    }

    /// `page_ext_get`: the folio's extension record.
    #[inline]
    pub fn ext(&self) -> &'a FolioExt {
        self.arena.ext(self.folio)
    }

    /// `folio_address` + `folio_test_uptodate`: the folio's bytes, if it is uptodate and not
    /// anonymous (anonymous bytes change under the racy copies).
    ///
    /// Uptodate bytes never change while a reference exists (module docs, "Who may touch the
    /// bytes"), so the slice is a plain shared borrow. A folio an exclusive latch updates in
    /// place ([`PG_LATCHED`](super::flags::PG_LATCHED), rule 6) has no readable bytes until
    /// the latch commits: `None` ([`FolioRef::wait_unlatched`] waits for it).
    #[inline]
    pub fn data(&self) -> Option<&[u8]> {
        // ORDERING: Acquire; pairs with the Release RMW that set PG_uptodate, after which the
        // bytes written by the lock holder are visible and final, and with the Release RMW of
        // `FolioRef::end_latch`, after which a latch's in-place changes are. PG_latched
        // itself was set before the unfreeze that our `try_get` read (rule 6), so a reference
        // taken during a latch sees it here.
        let f = self.folio.flags.load(Ordering::Acquire);
        if f & (PG_UPTODATE | super::flags::PG_ANON | super::flags::PG_LATCHED) != PG_UPTODATE {
            return None;
        }
        // SAFETY: rules 1-4 of the module docs: no write to these bytes can happen while the
        // folio is uptodate, non-anonymous and referenced (we hold a reference, so it is not
        // freed and reallocated). The range is the folio's frames, mapped for the arena's life.
        Some(unsafe {
            std::slice::from_raw_parts(self.arena.frame_ptr(self.folio.pfn), self.folio.size())
        })
    }

    /// `folio_lock`: takes the folio lock, sleeping while another holder has it.
    #[inline]
    pub fn lock(self) -> FolioLocked<'a> {
        if !self.folio.try_lock_bit() {
            self.arena.waits().wait_bit(self.folio, PG_LOCKED, true);
        }
        FolioLocked {
            inner: ManuallyDrop::new(self),
        }
    }

    /// `folio_trylock`: takes the folio lock if it is free right now.
    #[inline]
    pub fn try_lock(self) -> Result<FolioLocked<'a>, Self> {
        if self.folio.try_lock_bit() {
            Ok(FolioLocked {
                inner: ManuallyDrop::new(self),
            })
        } else {
            Err(self)
        }
    }

    /// `__folio_set_locked`: locks a folio just allocated, which nobody else can see yet.
    ///
    /// # Panics
    /// If the folio is locked (it was not just allocated).
    #[inline]
    #[cfg_attr(loom, allow(dead_code))] // its callers (the cache) are not in the loom build
    pub(crate) fn lock_new(self) -> FolioLocked<'a> {
        self.try_lock()
            .unwrap_or_else(|_| unreachable!("a freshly allocated folio is unlocked"))
    }

    /// `folio_wait_locked`: sleeps until the folio is unlocked, without taking the lock.
    /// Afterwards the holder's writes are visible (e.g. check [`Folio::is_uptodate`]).
    #[inline]
    pub fn wait_locked(&self) {
        self.wait_clear(PG_LOCKED);
    }

    /// The task form of [`FolioRef::wait_locked`] (`folio_wait_locked_async` with an
    /// `IOCB_WAITQ` entry): `Ready` once the folio is unlocked; otherwise registers the
    /// task's waker in the wait table and returns `Pending`, and the unlock wakes the task.
    /// `slot` holds the registration between polls; a future dropped while it holds one must
    /// hand it to [`Arena::cancel_wait`](super::Arena::cancel_wait).
    #[inline]
    pub(crate) fn poll_unlocked(
        &self,
        cx: &mut std::task::Context<'_>,
        slot: &mut Option<super::wait::TaskWait>,
    ) -> std::task::Poll<()> {
        self.poll_clear(PG_LOCKED, cx, slot)
    }

    /// `folio_wait_writeback`: sleeps until the folio is not under writeback (PG_writeback
    /// clear). Afterwards the write that was in flight has returned.
    #[inline]
    pub fn wait_writeback(&self) {
        self.wait_clear(super::flags::PG_WRITEBACK);
    }

    /// Sleeps until no exclusive latch updates the folio in place (PG_latched clear; rule 6
    /// of the module docs). Afterwards the latch's changes are visible and
    /// [`FolioRef::data`] gives them (unless another latch took the folio meanwhile: look
    /// again). The caller must not hold the folio lock (the latch's commit may take it) nor
    /// be the latch's holder.
    #[inline]
    pub fn wait_unlatched(&self) {
        self.wait_clear(super::flags::PG_LATCHED);
    }

    /// The task form of [`FolioRef::wait_unlatched`]: `Ready` once no latch updates the
    /// folio; otherwise registers the task's waker and returns `Pending` (as
    /// [`FolioRef::poll_unlocked`], whose `slot` rules apply).
    #[inline]
    pub(crate) fn poll_unlatched(
        &self,
        cx: &mut std::task::Context<'_>,
        slot: &mut Option<super::wait::TaskWait>,
    ) -> std::task::Poll<()> {
        self.poll_clear(super::flags::PG_LATCHED, cx, slot)
    }

    /// Sleeps in the wait table until `bit` is clear in the folio's flags.
    #[inline]
    fn wait_clear(&self, bit: u64) {
        // ORDERING: Acquire; pairs with the Release RMW that clears `bit` (`Folio::unlock_bit`,
        // `FolioRef::end_writeback`, `FolioRef::end_latch`) and the wait table's re-load: a
        // waiter that returns sees the work of whoever held the bit.
        if self.folio.flags.load(Ordering::Acquire) & bit != 0 {
            self.arena.waits().wait_bit(self.folio, bit, false);
        }
    }

    /// The task form of [`FolioRef::wait_clear`]: `Ready` once `bit` is clear (the task's
    /// registration in `slot` taken out), else registered and `Pending`.
    #[inline]
    fn poll_clear(
        &self,
        bit: u64,
        cx: &mut std::task::Context<'_>,
        slot: &mut Option<super::wait::TaskWait>,
    ) -> std::task::Poll<()> {
        // ORDERING: Acquire, as in `wait_clear`.
        if self.folio.flags.load(Ordering::Acquire) & bit == 0 {
            self.arena.waits().cancel(slot);
            return std::task::Poll::Ready(());
        }
        self.arena.waits().poll_bit(self.folio, bit, cx, slot)
    }

    /// Ends an exclusive latch's in-place update ([`FrozenFolio::set_latched`]): clears
    /// PG_latched and wakes the readers waiting for it. The latch's changes are published by
    /// this RMW. The folio lock is not needed: while the bit is set nothing else reads or
    /// writes the bytes, and writeback starts (under the lock) only once it sees it clear.
    ///
    /// # Safety
    /// The caller must hold the latch (the reference that set the bit) and have finished
    /// writing the bytes: from here on readers get `&[u8]` of them.
    ///
    /// # Panics
    /// If the folio is not latched.
    pub unsafe fn end_latch(&self) {
        // ORDERING: Release; pairs with the Acquire in `FolioRef::data`, `wait_unlatched`
        // and the wait table's re-load: a reader that sees the bit clear sees the latch's
        // stores. Same-word RMW order with the waiters' `fetch_or(PG_WAITERS)`: see wait.rs.
        let old = self
            .folio
            .flags
            .fetch_and(!super::flags::PG_LATCHED, Ordering::Release);
        assert!(
            old & super::flags::PG_LATCHED != 0,
            "end_latch on an unlatched folio"
        );
        if old & PG_WAITERS != 0 {
            self.arena.waits().wake_bit(self.folio);
        }
    }

    /// `__folio_end_writeback`'s flag half: clears PG_writeback and wakes the threads waiting
    /// for it (`folio_wake_bit`). The writeback layer owns the bit.
    #[inline]
    pub(crate) fn end_writeback(&self) {
        // ORDERING: Release; pairs with the Acquire in `wait_writeback` and the wait table's
        // re-load, so a waiter that returns sees the write finished. Same-word RMW order with
        // the waiter's `fetch_or(PG_WAITERS)`: see wait.rs.
        let old = self
            .folio
            .flags
            .fetch_and(!super::flags::PG_WRITEBACK, Ordering::Release);
        debug_assert!(old & super::flags::PG_WRITEBACK != 0);
        if old & super::flags::PG_WAITERS != 0 {
            self.arena.waits().wake_bit(self.folio);
        }
    }

    /// `folio_ref_freeze(folio, 1)`: if this is the only reference, freeze the folio and
    /// become its sole owner (the LRU batch's dead-folio test); otherwise give it back.
    #[inline]
    pub fn freeze_sole(self) -> Result<FrozenFolio<'a>, Self> {
        // SAFETY: expected = 1 is exactly the reference this handle owns.
        unsafe { self.freeze(1) }
    }

    /// `folio_ref_freeze`: if exactly `expected` references exist (this one included), freeze
    /// the folio and become its sole owner; otherwise give the reference back.
    ///
    /// # Safety
    /// The caller must own all `expected` references: this handle's plus references held by
    /// structures it is removing the folio from (e.g. the page cache's `nr_pages`, under the
    /// index lock). Freezing a count that includes other holders frees the folio under them.
    #[inline]
    pub unsafe fn freeze(self, expected: u32) -> Result<FrozenFolio<'a>, Self> {
        match FrozenFolio::try_freeze(self.arena, self.folio, expected, false) {
            Some(frozen) => {
                std::mem::forget(self);
                Ok(frozen)
            }
            None => Err(self),
        }
    }
}

impl Deref for FolioRef<'_> {
    type Target = Folio;

    #[inline]
    fn deref(&self) -> &Folio {
        self.folio
    }
}

impl Clone for FolioRef<'_> {
    /// `folio_get`.
    #[inline]
    fn clone(&self) -> Self {
        self.folio.refcount.get(self.arena.strategy());
        Self {
            arena: self.arena,
            folio: self.folio,
        }
    }
}

impl Drop for FolioRef<'_> {
    /// `folio_put`: the winner of the final put frees the folio.
    #[inline]
    fn drop(&mut self) {
        if self.folio.refcount.put(self.arena.strategy()) {
            self.arena.free_won(self.folio);
        }
    }
}

impl fmt::Debug for FolioRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FolioRef").field(self.folio).finish()
    }
}

/// A reference that holds the folio lock (`folio_lock` held); dropping it unlocks, then puts.
///
/// The only handle that may write a folio's bytes (while it is not uptodate) or set
/// `PG_uptodate`; dereferences to the [`Folio`].
pub struct FolioLocked<'a> {
    inner: ManuallyDrop<FolioRef<'a>>,
}

impl<'a> FolioLocked<'a> {
    /// The counted reference this lock holder owns (for `clone`, `ext`, `data`).
    #[inline]
    pub fn folio_ref(&self) -> &FolioRef<'a> {
        &self.inner
    }

    /// The header, with the handle's lifetime.
    #[inline]
    pub fn folio(&self) -> &'a Folio {
        self.inner.folio
    }

    /// Leaks the lock and the reference (no unlock, no put), e.g. to hand a folio under I/O
    /// to another structure; undo with [`FolioLocked::from_raw_locked`].
    #[must_use = "keep the leaked folio and give it back with `from_raw_locked`, or it stays locked"]
    #[inline]
    pub fn into_raw_locked(self) -> &'a Folio {
        let folio = self.inner.folio;
        std::mem::forget(self);
        folio
    }

    /// Takes ownership of a locked reference leaked with [`FolioLocked::into_raw_locked`].
    ///
    /// # Safety
    /// The caller must own one reference on `folio` and the folio lock it holds (nobody else
    /// will unlock or put them), and `folio` must be a header of `arena`.
    #[inline]
    pub unsafe fn from_raw_locked(arena: &'a Arena, folio: &'a Folio) -> Self {
        debug_assert!(folio.is_locked());
        // SAFETY: forwarded from the caller.
        let inner = unsafe { FolioRef::from_raw(arena, folio) };
        Self {
            inner: ManuallyDrop::new(inner),
        }
    }

    /// The arena the folio belongs to.
    #[inline]
    pub fn arena(&self) -> &'a Arena {
        self.inner.arena
    }

    /// The folio's bytes if uptodate (see [`FolioRef::data`]).
    #[inline]
    pub fn data(&self) -> Option<&[u8]> {
        self.inner.data()
    }

    /// `kmap_local_folio` for filling: the folio's bytes, writable, while it is not uptodate.
    ///
    /// `None` once uptodate (its bytes are then final). Freshly allocated folios hold stale
    /// bytes of their previous life: fill or zero them before marking uptodate.
    #[inline]
    pub fn data_mut(&mut self) -> Option<&mut [u8]> {
        if self.inner.folio.flags() & PG_UPTODATE != 0 {
            return None;
        }
        // SAFETY: we hold the folio lock, which is unique, and `&mut self` makes this borrow
        // unique among this holder's accesses. Readers touch the bytes only after seeing
        // PG_uptodate, which is set only through this handle (`&mut self`/`self`) and is clear
        // now; racy accessors also require PG_uptodate. Our reference keeps the folio
        // allocated; the range is the folio's frames, mapped for the arena's life.
        Some(unsafe {
            std::slice::from_raw_parts_mut(
                self.inner.arena.frame_ptr(self.inner.folio.pfn),
                self.inner.folio.size(),
            )
        })
    }

    /// `folio_mark_uptodate`: the bytes are valid and final from now on.
    #[inline]
    pub fn mark_uptodate(&mut self) {
        // ORDERING: Release; pairs with the Acquire loads of `is_uptodate`/`data`, which then
        // see every byte written through `data_mut`.
        self.inner
            .folio
            .flags
            .fetch_or(PG_UPTODATE, Ordering::Release);
    }

    /// `__folio_set_anon` for the address-space layer: marks the folio anonymous, owned by
    /// `mapping` (an id from [`Arena::new_mapping_id`]) at page offset `index`. From now on
    /// its bytes, once uptodate, are accessed only with the racy copies.
    ///
    /// # Panics
    /// If the folio already has a mapping.
    pub fn set_anon(&mut self, mapping: u64, index: u64) {
        assert_eq!(
            self.inner.folio.mapping(),
            0,
            "set_anon on a folio that has a mapping"
        );
        self.inner
            .folio
            .flags
            .fetch_or(super::flags::PG_ANON, Ordering::Relaxed);
        self.inner.folio.set_mapping(mapping, index);
    }

    /// `folio_end_read`: marks the folio uptodate (if `success`, else sets `PG_error`) and
    /// unlocks it in one atomic operation, waking readers waiting for the data.
    #[inline]
    pub fn end_read(self, success: bool) -> FolioRef<'a> {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; we move the reference out once.
        let inner = unsafe { ManuallyDrop::take(&mut me.inner) };
        let f = inner.folio;
        let uptodate = if success && f.flags() & PG_UPTODATE == 0 {
            PG_UPTODATE
        } else {
            if !success {
                f.flags.fetch_or(PG_ERROR, Ordering::Relaxed);
            }
            0
        };
        f.unlock_bit(inner.arena, uptodate);
        inner
    }

    /// `folio_unlock`: releases the lock, keeping the reference.
    #[inline]
    pub fn unlock(self) -> FolioRef<'a> {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; we move the reference out once.
        let inner = unsafe { ManuallyDrop::take(&mut me.inner) };
        inner.folio.unlock_bit(inner.arena, 0);
        inner
    }

    /// A deliberately broken unlock that clears `PG_locked` but never wakes sleepers, for the
    /// loom model that must catch the lost wake-up (`src/loom_tests/folio.rs`). Never use it
    /// elsewhere.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn unlock_without_wake(self) -> FolioRef<'a> {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; we move the reference out once.
        let inner = unsafe { ManuallyDrop::take(&mut me.inner) };
        inner.folio.flags.fetch_and(!PG_LOCKED, Ordering::Release);
        inner
    }

    /// `folio_ref_freeze` on a locked folio (reclaim, invalidation): if exactly `expected`
    /// references exist (this one included), freeze it; the lock stays held by the frozen
    /// owner and is dropped by [`FrozenFolio::free`] or [`FrozenFolio::unfreeze`].
    ///
    /// # Safety
    /// As for [`FolioRef::freeze`]: the caller must own all `expected` references.
    #[inline]
    pub unsafe fn freeze(self, expected: u32) -> Result<FrozenFolio<'a>, Self> {
        match FrozenFolio::try_freeze(self.inner.arena, self.inner.folio, expected, true) {
            Some(frozen) => {
                std::mem::forget(self);
                Ok(frozen)
            }
            None => Err(self),
        }
    }
}

impl Deref for FolioLocked<'_> {
    type Target = Folio;

    #[inline]
    fn deref(&self) -> &Folio {
        self.inner.folio
    }
}

impl Drop for FolioLocked<'_> {
    /// `folio_unlock` + `folio_put`.
    #[inline]
    fn drop(&mut self) {
        self.inner.folio.unlock_bit(self.inner.arena, 0);
        // SAFETY: dropped exactly once, here.
        unsafe { ManuallyDrop::drop(&mut self.inner) };
    }
}

impl fmt::Debug for FolioLocked<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FolioLocked")
            .field(self.inner.folio)
            .finish()
    }
}

/// The sole owner of a frozen folio (after a successful `folio_ref_freeze`): no reference
/// exists and every `try_get` fails. Dropping it frees the folio ([`FrozenFolio::free`]).
pub struct FrozenFolio<'a> {
    arena: &'a Arena,
    folio: &'a Folio,
    /// Frozen from a [`FolioLocked`]: the lock bit is ours.
    locked: bool,
}

impl<'a> FrozenFolio<'a> {
    /// `folio_ref_freeze` for both handle kinds: CAS the count from `expected` to frozen and,
    /// on success, the frozen handle (`locked` says whether the lock bit comes with it). The
    /// caller forgets its own handle on success, since its references are now frozen.
    #[inline]
    fn try_freeze(
        arena: &'a Arena,
        folio: &'a Folio,
        expected: u32,
        locked: bool,
    ) -> Option<FrozenFolio<'a>> {
        folio
            .refcount
            .freeze(arena.strategy(), expected)
            // Lazily: a `FrozenFolio` built for a failed freeze would free the folio on drop.
            .then(|| FrozenFolio {
                arena,
                folio,
                locked,
            })
    }

    /// The header, with the handle's lifetime.
    #[inline]
    pub fn folio(&self) -> &'a Folio {
        self.folio
    }

    /// The arena the folio belongs to.
    #[inline]
    pub fn arena(&self) -> &'a Arena {
        self.arena
    }

    /// `__folio_clear_lru_flags` and friends: clears any flags before the free (the sole
    /// owner may clear every bit but the lock, which the free path drops itself).
    #[inline]
    pub fn clear_flags(&self, mask: u64) {
        self.folio
            .flags
            .fetch_and(!(mask & !PG_LOCKED), Ordering::Relaxed);
    }

    /// `folio_ref_unfreeze`: gives the folio `count` references again (this handle becomes
    /// one of them) and unlocks it if it was frozen locked.
    ///
    /// # Safety
    /// `count` must be exactly the references that exist again: this handle's plus those
    /// owned by structures that keep holding the folio (as counted at the freeze). Fewer
    /// would let their puts free the folio under another holder.
    ///
    /// # Panics
    /// If `count` is 0.
    pub unsafe fn unfreeze(self, count: u32) -> FolioRef<'a> {
        assert!(count > 0, "unfreeze needs at least the caller's reference");
        let me = ManuallyDrop::new(self);
        me.folio.refcount.unfreeze(me.arena.strategy(), count);
        let r = FolioRef::owned(me.arena, me.folio);
        if me.locked {
            me.folio.unlock_bit(me.arena, 0);
        }
        r
    }

    /// `folio_ref_unfreeze` for a folio frozen locked, keeping the lock: the holder changed
    /// the folio while no reference existed (an in-place write) and goes on as its lock
    /// holder.
    ///
    /// # Safety
    /// As [`FrozenFolio::unfreeze`].
    ///
    /// # Panics
    /// If the folio was not frozen locked, or `count` is 0.
    pub unsafe fn unfreeze_locked(self, count: u32) -> FolioLocked<'a> {
        assert!(self.locked, "unfreeze_locked on a folio frozen unlocked");
        assert!(count > 0, "unfreeze needs at least the caller's reference");
        let me = ManuallyDrop::new(self);
        me.folio.refcount.unfreeze(me.arena.strategy(), count);
        FolioLocked {
            inner: ManuallyDrop::new(FolioRef::owned(me.arena, me.folio)),
        }
    }

    /// Writes `src` into the folio's bytes at `offset`, in place, while it is frozen: no
    /// reference exists, so no reader holds its bytes, and none can take one until the
    /// unfreeze (whose Release store publishes these bytes to the next `try_get`). The
    /// stores are the racy (atomic) copies, so that a lockless peek at the bytes through a
    /// stale pointer ([`Folio::read_racy`]) is never a data race either.
    ///
    /// # Panics
    /// If the range is not inside the folio.
    pub fn write_frozen(&self, offset: usize, src: &[u8]) {
        let end = offset.checked_add(src.len()).expect("range overflows");
        assert!(end <= self.folio.size(), "write past the folio's end");
        // SAFETY: the range is inside the folio's frames (checked), mapped for the arena's
        // life; the frozen count excludes every `&[u8]` reader (they hold references), and
        // racy readers use atomic loads.
        unsafe {
            crate::mm::sync::racy::store(self.arena.frame_ptr(self.folio.pfn).add(offset), src)
        };
    }

    /// Marks the folio as updated in place by an exclusive latch (PG_latched, rule 6 of the
    /// module docs), while it is frozen: no reader holds its bytes now, and every reference
    /// taken after the unfreeze sees the bit ([`FolioRef::data`] refuses the folio) until the
    /// latch's [`FolioRef::end_latch`]. The holder of the latch's reference is then the
    /// only one who may touch the bytes.
    ///
    /// # Panics
    /// If the folio is not a locked, uptodate page-cache folio, or is latched already.
    pub fn set_latched(&self) {
        let f = self.folio.flags();
        assert!(
            self.locked
                && f & PG_UPTODATE != 0
                && f & (super::flags::PG_ANON | super::flags::PG_LATCHED) == 0,
            "set_latched needs a locked, uptodate, unlatched page-cache folio"
        );
        // ORDERING: Relaxed; published by the unfreeze's Release store, which every later
        // `try_get` reads with Acquire (rule 6).
        self.folio
            .flags
            .fetch_or(super::flags::PG_LATCHED, Ordering::Relaxed);
    }

    /// Frees the folio through the arena's free path (`free_frozen_pages`), from its current
    /// state: a flag of `FLAGS_CHECK_AT_FREE` still set or a mapping still attached is a bad
    /// page. A lock taken before the freeze is dropped first, as reclaim does.
    pub fn free(self) {
        drop(self)
    }

    /// A deliberately broken free of a locked frozen folio that clears its lock without
    /// waking the wakers queued on it (what the free did before), for the loom model that
    /// must catch the lost wake-up (`src/loom_tests/folio.rs`). Never use it elsewhere.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn free_without_wake(self) {
        let me = std::mem::ManuallyDrop::new(self);
        me.folio
            .flags
            .fetch_and(!(PG_LOCKED | PG_WAITERS), Ordering::Release);
        me.arena.free_won(me.folio);
    }
}

impl Drop for FrozenFolio<'_> {
    fn drop(&mut self) {
        if self.locked {
            // A thread waiting for the lock holds a reference, which the freeze proved gone;
            // but an async read's waker can be queued here by a readahead worker on the
            // task's behalf, with no reference of the task's (`cache/aio/read.rs`,
            // `MissShared::inserted`): it must be woken, or the task sleeps forever (the task
            // then looks up its page again and finds it gone). Eviction locks a folio that
            // is cached already, so a waker queued for the end of its read can meet it.
            // ORDERING: Release, as `unlock_bit`'s (pairs with the wait table's re-load);
            // same-word RMW order with the waiters' `fetch_or(PG_WAITERS)`: see wait.rs.
            let old = self
                .folio
                .flags
                .fetch_and(!(PG_LOCKED | PG_WAITERS), Ordering::Release);
            debug_assert!(old & PG_LOCKED != 0);
            if old & PG_WAITERS != 0 {
                self.arena.waits().wake_bit(self.folio);
            }
        }
        self.arena.free_won(self.folio);
    }
}

impl Deref for FrozenFolio<'_> {
    type Target = Folio;

    #[inline]
    fn deref(&self) -> &Folio {
        self.folio
    }
}

impl fmt::Debug for FrozenFolio<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FrozenFolio").field(self.folio).finish()
    }
}
