//! The folio reference count: `include/linux/page_ref.h` with three interchangeable strategies.
//!
//! # What it models
//!
//! Every folio (a page-sized or larger unit of cached file data) carries one 32-bit reference
//! count. Holders (the page cache itself, mappings, readers in flight) take and drop references;
//! the holder that drops the last one frees the folio. Lookups find a folio *without* holding a
//! lock and must take a *speculative* reference that fails if the folio is free or frozen
//! (`folio_try_get`), then re-validate that the folio is still the one they looked up.
//! Removers (reclaim, migration, truncation) `folio_ref_freeze` the count: one compare-and-swap
//! from exactly the references they know about to "frozen", after which every speculative get
//! fails until `folio_ref_unfreeze` stores a fresh count.
//!
//! The folio header lives in an arena that is never returned to the system (the kernel's
//! `struct page` array, the `vmemmap`): a speculative getter may touch the count of a folio that
//! was freed and reallocated meanwhile, so the count word must stay valid memory forever. That
//! premise is what makes every strategy below memory-safe; the arena module upholds it.
//!
//! # Three strategies behind one word
//!
//! | strategy | [`RefStrategy`] | `try_get` | last `put` | frozen/free word |
//! |---|---|---|---|---|
//! | kernel today | `cas-loop` | read, then CAS loop "add unless 0" | one `fetch_sub` reaching 0 | `0` (or [`LOCKED`] from [`RefCount::frozen`]) |
//! | Linus' variant | `optimistic` | CAS loop whose first guess is 1, no read | one `fetch_sub` reaching 0 | as above |
//! | the seed's patch | `locked-bit` | one `fetch_add`, test [`LOCKED`] in its result | `fetch_sub` to 0, then CAS `0 -> LOCKED`; only the winner frees | `LOCKED \| garbage` |
//!
//! The strategy is a per-call argument (a cache chooses one at construction; the branch on it is
//! perfectly predicted), so one folio header type serves every strategy. The zero-sized types
//! [`CasLoop`], [`Optimistic`] and [`LockedBit`] implement [`RefOps`], the same code as
//! monomorphic functions, for benchmarks that want no dispatch at all.
//!
//! # The word (locked-bit)
//!
//! | value | name | meaning |
//! |---|---|---|
//! | `1 ..= MAX_REFS` | live | that many holders |
//! | `MAX_REFS + 1 .. LOCKED` | overflow | never observed by a survivor: the adder that crosses `MAX_REFS` aborts the process |
//! | `0` | dying | the last holder decremented and is about to CAS `0 -> LOCKED`; a speculative `try_get` may still revive it to `1` |
//! | `LOCKED` | frozen / free | the seal: no holder, no get can succeed |
//! | `LOCKED \| g`, `g < 2^30` | frozen + garbage | `g` is the sum of failed speculative adds still in flight; meaningless |
//! | `>= WIPE_LIMIT` (`LOCKED \| 2^30`) | wipe | a failed getter that sees this loops a CAS back to `LOCKED` |
//!
//! For `cas-loop` and `optimistic` the word is the kernel's: `0` is free/frozen, `1..=MAX_REFS`
//! live. They additionally read any word with bit 31 set as frozen (a signed `<= 0` test, the
//! same single compare the kernel's `atomic_add_unless(v, 1, 0)` does), so [`RefCount::frozen`]
//! is one constant, [`LOCKED`], that is a free folio under every strategy. Their freeze stores
//! `0`, as the kernel does.
//!
//! # Invariants (locked-bit)
//!
//! 1. The bit is *set* only by a CAS from an exact value proving no holder exists: `0 -> LOCKED`
//!    (last put) or `expected -> LOCKED` (freeze, whose caller accounts for every reference).
//! 2. While the bit is set, adds cannot clear it: failed adds accumulate garbage below bit 31,
//!    and a failed getter that sees the garbage reach `WIPE_LIMIT` CAS-loops it back to `LOCKED`
//!    before it can carry into bit 31 and wrap (headroom: `2^30 / MAX_ADD` = 16384 failed adds
//!    in flight at once). So every getter sees "frozen" in the result of its *own* `fetch_add`.
//! 3. The bit is *cleared* only by a release store of a fresh count ([`RefCount::init`] at
//!    allocation, [`RefCount::unfreeze`]), which also discards the garbage.
//! 4. A freed folio keeps the bit until it is reallocated; nothing ever stores a plain `0`.
//!    (A late getter that saw `0` would succeed and later "free" a folio that is already in
//!    the allocator.)
//! 5. A live count never passes `MAX_REFS`: the get that crosses it aborts the process with a
//!    message (a wrapped or bit-31 count would be a use-after-free, so unwinding is not enough).
//!
//! # The hard part: the ABA hole on the transient zero
//!
//! In today's kernel the decrement to 0 is final. With the locked bit it is not: between the
//! last putter's `fetch_sub` (1 -> 0) and its CAS (0 -> LOCKED) a speculative getter may revive
//! the folio. Worse, the putter can stall there for a whole lifetime:
//!
//! ```text
//! T1 (owner, believes "X")   T2 (speculative)            T3 (allocator)
//! put: 1 -> 0   ... stalls
//!                            try_get: 0 -> 1  (revives)
//!                            re-validates, uses it
//!                            put: 1 -> 0, CAS 0 -> LOCKED wins, frees X
//!                                                        alloc: init(1), now "Y"
//!                                                        put: 1 -> 0 ... (about to CAS)
//! CAS 0 -> LOCKED succeeds: T1 is the winner, for a folio that is now Y
//!                                                        CAS fails: T3 does not free
//! ```
//!
//! T1 wins the CAS of a *later lifetime*. This is harmless here, by construction:
//!
//! * **Exactly one freer per lifetime.** Every `0` in the word was produced by a decrement whose
//!   caller then makes one CAS `0 -> LOCKED`. A lifetime ends when some CAS seals its `0`; the
//!   word then holds `LOCKED` until the next `init`, so no other CAS of that lifetime can succeed
//!   (they all compare against `0`). Whoever wins, exactly one caller gets `true` from `put`.
//!   No lifetime leaks either: a `0` that is never revived is sealed by its own decrementer's
//!   CAS unless an earlier, stalled one sealed it first.
//! * **The free path decides from the folio, not from the caller.** `put` returns only "you
//!   won, free what is there". The caller must free the folio according to its *current*
//!   state (kind, mapping, order: whatever the header says now), never according to what it
//!   believed the folio was when it took its reference. This is already required in today's
//!   kernel, where a speculative `try_get` + `put` pair can become the final put of a folio
//!   recycled in between. The arena's free path follows this rule.
//! * **Acquire on the winner's CAS** makes the winner see every write of every holder of that
//!   lifetime (each put is a release `fetch_sub`, in the release sequence the CAS reads from),
//!   including the writes of T3 that T1 never knew about.
//!
//! The test `tests/aba_refcount.rs` drives this exact schedule deterministically with the split
//! put ([`RefCount::put_begin`] / [`RefCount::put_end`], the same code `put` runs) and shows that
//! a free path dispatching on the stalled putter's belief runs X's destructor on a Y folio,
//! that a scheme freeing on the decrement to 0 alone frees twice, and that ours frees each
//! lifetime once with the right destructor. `src/loom_tests/refcount.rs` checks the same under all
//! interleavings of a 2-thread model.
//!
//! # Memory ordering
//!
//! | site | ordering | pairs with |
//! |---|---|---|
//! | `try_get`/`try_add` success | `Acquire` RMW | the `Release` store of `init`/`unfreeze` (a getter sees the metadata published before the folio became gettable) |
//! | `get`/`add` (caller holds a ref) | `Relaxed` | nothing: the caller's own reference orders it, as `Arc::clone` |
//! | `put`/`sub_and_test` decrement | `Release` | the winner's `Acquire` (CAS or fence) |
//! | last put seal | `Acquire` CAS (locked-bit) or `Acquire` fence (others) | every holder's `Release` decrement |
//! | `freeze` success | `Acquire` CAS | the holders' `Release` decrements |
//! | `init` / `unfreeze` | `Release` store | getters' `Acquire` increments |
//! | failed get, wipe CAS | `Relaxed` | nothing: it only moves garbage inside a sealed word |
//!
//! Gets against freeze and against the last put are totally ordered by the word's modification
//! order (all are RMWs on it), which is what "no get succeeds after the folio is frozen" needs.
//!
//! # Why locked-bit is fast
//!
//! A CAS loop needs the cache line twice under contention: the read pulls it shared, the CAS
//! must upgrade it to exclusive, and another CPU can steal it in between, so N contending
//! getters retry O(N) times each. Linus' guess-1 variant skips the read, but every wrong guess
//! is still a failed CAS that held the line exclusively for nothing. `fetch_add` (x86
//! `lock xadd`) always succeeds: one exclusive acquisition of the line per get, whatever the
//! contention. The price is paid only on the cold paths: a CAS on every last put, a CAS on a
//! failed get.
//!
//! No dependencies beyond the crate's `sync` shim.

use crate::mm::sync::{AtomicU32, Ordering};

/// Bit 31 of the word: frozen or free (`PAGEREF_LOCKED_BIT` in the seed's patch).
pub const LOCKED: u32 = 1 << 31;

/// A failed getter that sees the word at or above this wipes the garbage back to [`LOCKED`] in
/// a CAS loop (`_PAGEREF_LOCKED_LIMIT`): `LOCKED | 2^30`.
pub const WIPE_LIMIT: u32 = LOCKED | (1 << 30);

/// The largest live count; the operation that would exceed it aborts the process.
pub const MAX_REFS: u32 = (1 << 30) - 1;

// A live count can never reach the bit, and the garbage headroom above the wipe limit is a
// whole multiple of the largest add.
const _: () = assert!(MAX_REFS < LOCKED && MAX_ADD <= MAX_REFS && (1 << 30) % MAX_ADD == 0);

/// The largest `n` accepted by the `*_add`/`sub` operations (bounds the garbage one failed add
/// can leave on a sealed word; the kernel's largest is `GUP_PIN_COUNTING_BIAS` = 1024).
pub const MAX_ADD: u32 = 1 << 16;

/// The counting strategy of a cache, chosen at construction and passed to every operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefStrategy {
    /// Today's kernel: `atomic_add_unless(v, n, 0)`, a read followed by a CAS loop.
    CasLoop,
    /// Linus Torvalds' proposal: a CAS loop that guesses the count is 1 instead of reading it.
    Optimistic,
    /// The seed's patch: bit 31 marks frozen/free; `try_get` is one `fetch_add`.
    LockedBit,
}

impl RefStrategy {
    /// Every strategy, vanilla first.
    pub const ALL: [RefStrategy; 3] = [
        RefStrategy::CasLoop,
        RefStrategy::Optimistic,
        RefStrategy::LockedBit,
    ];

    /// The stable kebab-case name (`cas-loop`, `optimistic`, `locked-bit`).
    pub const fn name(self) -> &'static str {
        match self {
            RefStrategy::CasLoop => "cas-loop",
            RefStrategy::Optimistic => "optimistic",
            RefStrategy::LockedBit => "locked-bit",
        }
    }

    /// The word a folio of this strategy holds after it was frozen or freed.
    pub const fn frozen_word(self) -> u32 {
        match self {
            RefStrategy::CasLoop | RefStrategy::Optimistic => 0,
            RefStrategy::LockedBit => LOCKED,
        }
    }
}

impl crate::Variant for RefStrategy {
    const KIND: &'static str = "refcount strategy";
    const ALL: &'static [Self] = &RefStrategy::ALL;
    fn name(self) -> &'static str {
        RefStrategy::name(self)
    }
}
crate::variant::variant_traits!(RefStrategy);

/// The state a put leaves behind, between its decrement and its seal (see [`RefCount::put_begin`]).
#[must_use = "a pending put must be finished with put_end, or the folio may leak"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingPut {
    /// Other references remain: nothing more to do.
    Held,
    /// The decrement reached 0 and the strategy needs a seal CAS (locked-bit).
    Zero,
    /// The decrement was final: the caller won and must free (cas-loop, optimistic).
    Won,
}

/// A folio reference count: one 32-bit word, operated on by any [`RefStrategy`].
#[derive(Debug)]
#[repr(transparent)]
pub struct RefCount {
    word: AtomicU32,
}

impl Default for RefCount {
    fn default() -> Self {
        Self::frozen()
    }
}

impl RefCount {
    /// The header of a never-allocated or freed folio: [`LOCKED`], frozen under every strategy.
    #[cfg(not(loom))]
    pub const fn frozen() -> Self {
        Self {
            word: AtomicU32::new(LOCKED),
        }
    }

    /// The header of a never-allocated or freed folio: [`LOCKED`], frozen under every strategy.
    #[cfg(loom)]
    pub fn frozen() -> Self {
        Self {
            word: AtomicU32::new(LOCKED),
        }
    }

    /// A count holding an arbitrary raw word, for tests and diagnostics (e.g. a word just
    /// below [`WIPE_LIMIT`]). Not for production use: the word must be a state of the table in
    /// the module docs.
    #[doc(hidden)]
    pub fn from_raw(word: u32) -> Self {
        Self {
            word: AtomicU32::new(word),
        }
    }

    /// The raw word, for tests and diagnostics (`Relaxed` snapshot).
    #[doc(hidden)]
    pub fn raw(&self) -> u32 {
        self.word.load(Ordering::Relaxed)
    }

    /// `set_page_refcounted` / `folio_set_count`: allocation gives the folio `count` references.
    ///
    /// Clears [`LOCKED`] and any garbage. The caller must own the folio exclusively (it is
    /// free or frozen and nobody else may unfreeze it).
    ///
    /// # Panics
    /// If `count` is 0 or above [`MAX_REFS`].
    #[inline]
    pub fn init(&self, _s: RefStrategy, count: u32) {
        check_fresh(count);
        // ORDERING: Release; pairs with the Acquire increment of a later successful `try_get`,
        // so the getter sees the folio's metadata written before this store.
        #[cfg(not(loom))]
        self.word.store(count, Ordering::Release);
        // Under loom the store is a swap: loom 0.7 lets a plain store slip between the read and
        // the write of a concurrent RMW (tokio-rs/loom#254), which would make the model report
        // a wipe CAS overwriting the fresh count, an execution C11 forbids. A swap's write is
        // ordered identically in the word's modification order and it adds no synchronization
        // (its read is Relaxed), so the model checks the same program.
        #[cfg(loom)]
        self.word.swap(count, Ordering::Release);
    }

    /// `folio_try_get`: take a speculative reference unless the folio is free or frozen.
    #[inline]
    #[must_use = "a failed get means the folio is free or frozen: do not use it; a successful one must be put"]
    pub fn try_get(&self, s: RefStrategy) -> bool {
        match s {
            RefStrategy::CasLoop => CasLoop::try_add(self, 1),
            RefStrategy::Optimistic => Optimistic::try_add(self, 1),
            RefStrategy::LockedBit => LockedBit::try_add(self, 1),
        }
    }

    /// `folio_ref_try_add`: take `n` speculative references unless free or frozen.
    ///
    /// # Panics
    /// If `n` is 0 or above [`MAX_ADD`].
    #[inline]
    #[must_use = "a failed get means the folio is free or frozen: do not use it; a successful one must be put"]
    pub fn try_add(&self, s: RefStrategy, n: u32) -> bool {
        match s {
            RefStrategy::CasLoop => CasLoop::try_add(self, n),
            RefStrategy::Optimistic => Optimistic::try_add(self, n),
            RefStrategy::LockedBit => LockedBit::try_add(self, n),
        }
    }

    /// `folio_get`: one more reference, the caller already holding one.
    #[inline]
    pub fn get(&self, s: RefStrategy) {
        self.add(s, 1)
    }

    /// `folio_ref_add`: `n` more references, the caller already holding one.
    ///
    /// # Panics
    /// If `n` is 0 or above [`MAX_ADD`].
    #[inline]
    pub fn add(&self, s: RefStrategy, n: u32) {
        match s {
            RefStrategy::CasLoop => CasLoop::add(self, n),
            RefStrategy::Optimistic => Optimistic::add(self, n),
            RefStrategy::LockedBit => LockedBit::add(self, n),
        }
    }

    /// `folio_put_testzero`: drop one reference; `true` means the caller won and must free the
    /// folio, deciding *from the folio's current state* how (see the module docs).
    #[inline]
    #[must_use = "`true` means this put was the last: the caller must free the folio, or it leaks"]
    pub fn put(&self, s: RefStrategy) -> bool {
        self.sub_and_test(s, 1)
    }

    /// `folio_ref_dec_and_test`: the same operation as [`RefCount::put`], under the kernel's
    /// other name.
    #[inline]
    #[must_use = "`true` means this put was the last: the caller must free the folio, or it leaks"]
    pub fn dec_and_test(&self, s: RefStrategy) -> bool {
        self.put(s)
    }

    /// `folio_ref_sub_and_test`: drop `n` references; `true` as for [`RefCount::put`].
    ///
    /// # Panics
    /// If `n` is 0 or above [`MAX_ADD`].
    #[inline]
    #[must_use = "`true` means this put was the last: the caller must free the folio, or it leaks"]
    pub fn sub_and_test(&self, s: RefStrategy, n: u32) -> bool {
        match s {
            RefStrategy::CasLoop => CasLoop::sub_and_test(self, n),
            RefStrategy::Optimistic => Optimistic::sub_and_test(self, n),
            RefStrategy::LockedBit => LockedBit::sub_and_test(self, n),
        }
    }

    /// The first half of [`RefCount::put`]: the decrement. Finish with [`RefCount::put_end`].
    ///
    /// `put` is exactly `put_end(put_begin())`; the split exists so tests can stall a putter
    /// between its decrement and its seal, the window of the ABA hole.
    #[doc(hidden)]
    #[inline]
    pub fn put_begin(&self, s: RefStrategy, n: u32) -> PendingPut {
        match s {
            RefStrategy::CasLoop => CasLoop::sub_begin(self, n),
            RefStrategy::Optimistic => Optimistic::sub_begin(self, n),
            RefStrategy::LockedBit => LockedBit::sub_begin(self, n),
        }
    }

    /// The second half of [`RefCount::put`]: the seal; `true` = the caller won.
    #[doc(hidden)]
    #[inline]
    #[must_use = "`true` means this put was the last: the caller must free the folio, or it leaks"]
    pub fn put_end(&self, s: RefStrategy, pending: PendingPut) -> bool {
        match s {
            RefStrategy::CasLoop => CasLoop::sub_end(self, pending),
            RefStrategy::Optimistic => Optimistic::sub_end(self, pending),
            RefStrategy::LockedBit => LockedBit::sub_end(self, pending),
        }
    }

    /// `folio_ref_freeze`: if exactly `expected` references exist, freeze the folio (every
    /// `try_get` fails until [`RefCount::unfreeze`]). The caller must account for all of them.
    ///
    /// # Panics
    /// If `expected` is 0 or above [`MAX_REFS`].
    #[inline]
    #[must_use = "`true` means the folio is frozen and the caller owns it: it must unfreeze or free it"]
    pub fn freeze(&self, s: RefStrategy, expected: u32) -> bool {
        match s {
            RefStrategy::CasLoop => CasLoop::freeze(self, expected),
            RefStrategy::Optimistic => Optimistic::freeze(self, expected),
            RefStrategy::LockedBit => LockedBit::freeze(self, expected),
        }
    }

    /// `folio_ref_unfreeze`: give a frozen folio `count` references again.
    ///
    /// # Panics
    /// If `count` is 0 or above [`MAX_REFS`]; in debug builds also if the folio is not frozen.
    #[inline]
    pub fn unfreeze(&self, s: RefStrategy, count: u32) {
        debug_assert!(
            self.is_frozen(s),
            "folio_ref_unfreeze on a folio that is not frozen (word {:#x}, {s})",
            self.raw()
        );
        self.init(s, count)
    }

    /// `folio_ref_count`: the number of references, 0 while free, frozen or dying.
    #[inline]
    pub fn count(&self, s: RefStrategy) -> u32 {
        let w = self.word.load(Ordering::Relaxed);
        if word_is_frozen(s, w) {
            0
        } else {
            w
        }
    }

    /// True if the folio is free or frozen (`try_get` would fail).
    ///
    /// For locked-bit, a dying folio (word 0) is not frozen: a `try_get` may still revive it.
    #[inline]
    pub fn is_frozen(&self, s: RefStrategy) -> bool {
        word_is_frozen(s, self.word.load(Ordering::Relaxed))
    }
}

/// Whether `word` is a free/frozen state under `s`.
#[inline]
pub const fn word_is_frozen(s: RefStrategy, word: u32) -> bool {
    match s {
        // Signed <= 0: 0 or bit 31 set.
        RefStrategy::CasLoop | RefStrategy::Optimistic => (word as i32) <= 0,
        RefStrategy::LockedBit => word & LOCKED != 0,
    }
}

/// One strategy's operations as monomorphic functions; [`RefCount`]'s methods dispatch here.
///
/// Implemented by the zero-sized [`CasLoop`], [`Optimistic`] and [`LockedBit`].
pub trait RefOps: Copy + Default + Send + Sync + 'static {
    /// The [`RefStrategy`] this type implements.
    const STRATEGY: RefStrategy;

    /// `folio_ref_try_add`: `n` speculative references unless free or frozen.
    #[must_use = "a failed get means the folio is free or frozen: do not use it; a successful one must be put"]
    fn try_add(rc: &RefCount, n: u32) -> bool;

    /// `folio_try_get`.
    #[inline]
    #[must_use = "a failed get means the folio is free or frozen: do not use it; a successful one must be put"]
    fn try_get(rc: &RefCount) -> bool {
        Self::try_add(rc, 1)
    }

    /// `folio_ref_add`: the caller already holds a reference. The default is today's kernel
    /// (a plain relaxed add); `locked-bit` overrides it.
    #[inline]
    fn add(rc: &RefCount, n: u32) {
        plain_add(rc, n, Self::STRATEGY)
    }

    /// The decrement half of `sub_and_test` (default: today's kernel, where reaching 0 is
    /// final).
    #[inline]
    fn sub_begin(rc: &RefCount, n: u32) -> PendingPut {
        plain_sub_begin(rc, n, Self::STRATEGY)
    }

    /// The seal half of `sub_and_test`; `true` = the caller won (default: the decrement to 0
    /// already decided it).
    #[inline]
    #[must_use = "`true` means this put was the last: the caller must free the folio, or it leaks"]
    fn sub_end(rc: &RefCount, pending: PendingPut) -> bool {
        plain_sub_end(rc, pending)
    }

    /// `folio_ref_sub_and_test`.
    #[inline]
    #[must_use = "`true` means this put was the last: the caller must free the folio, or it leaks"]
    fn sub_and_test(rc: &RefCount, n: u32) -> bool {
        Self::sub_end(rc, Self::sub_begin(rc, n))
    }

    /// `folio_put_testzero`.
    #[inline]
    #[must_use = "`true` means this put was the last: the caller must free the folio, or it leaks"]
    fn put(rc: &RefCount) -> bool {
        Self::sub_and_test(rc, 1)
    }

    /// `folio_ref_freeze` (default: today's kernel, CAS `expected -> 0`).
    #[inline]
    #[must_use = "`true` means the folio is frozen and the caller owns it: it must unfreeze or free it"]
    fn freeze(rc: &RefCount, expected: u32) -> bool {
        freeze_to(rc, expected, 0)
    }

    /// `folio_ref_unfreeze`.
    #[inline]
    fn unfreeze(rc: &RefCount, count: u32) {
        rc.unfreeze(Self::STRATEGY, count)
    }
}

/// `cas-loop`: the kernel's `atomic_add_unless` read + CAS loop.
#[derive(Clone, Copy, Debug, Default)]
pub struct CasLoop;

/// `optimistic`: the CAS loop that first guesses the count is 1.
#[derive(Clone, Copy, Debug, Default)]
pub struct Optimistic;

/// `locked-bit`: one `fetch_add`, bit 31 as the frozen/free mark.
#[derive(Clone, Copy, Debug, Default)]
pub struct LockedBit;

impl RefOps for CasLoop {
    const STRATEGY: RefStrategy = RefStrategy::CasLoop;

    #[inline]
    fn try_add(rc: &RefCount, n: u32) -> bool {
        check_n(n);
        let old = rc.word.load(Ordering::Relaxed);
        cas_add_unless_frozen(rc, old, n, RefStrategy::CasLoop)
    }
}

impl RefOps for Optimistic {
    const STRATEGY: RefStrategy = RefStrategy::Optimistic;

    #[inline]
    fn try_add(rc: &RefCount, n: u32) -> bool {
        check_n(n);
        // The guess: an unshared page-cache folio holds exactly the cache's reference. No read,
        // so the first access asks for the line exclusive.
        cas_add_unless_frozen(rc, 1, n, RefStrategy::Optimistic)
    }
}

impl RefOps for LockedBit {
    const STRATEGY: RefStrategy = RefStrategy::LockedBit;

    #[inline]
    fn try_add(rc: &RefCount, n: u32) -> bool {
        locked_try_add(rc, n, Ordering::Acquire)
    }

    #[inline]
    fn add(rc: &RefCount, n: u32) {
        plain_add(rc, n, RefStrategy::LockedBit)
    }

    #[inline]
    fn sub_begin(rc: &RefCount, n: u32) -> PendingPut {
        locked_sub_begin(rc, n)
    }

    #[inline]
    fn sub_end(rc: &RefCount, pending: PendingPut) -> bool {
        locked_sub_end(rc, pending, Ordering::Acquire)
    }

    #[inline]
    fn freeze(rc: &RefCount, expected: u32) -> bool {
        freeze_to(rc, expected, LOCKED)
    }
}

/// Deliberately weakened strategies that the loom models must catch. Exist only under
/// `--cfg loom`; never use them for anything else.
#[cfg(loom)]
pub mod weakened {
    use super::*;

    /// locked-bit whose last-put seal CAS is `Relaxed` instead of `Acquire`: the winner may
    /// free before it sees another holder's writes.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct LockedBitRelaxedSeal;

    impl RefOps for LockedBitRelaxedSeal {
        const STRATEGY: RefStrategy = RefStrategy::LockedBit;

        fn try_add(rc: &RefCount, n: u32) -> bool {
            LockedBit::try_add(rc, n)
        }
        fn add(rc: &RefCount, n: u32) {
            LockedBit::add(rc, n)
        }
        fn sub_begin(rc: &RefCount, n: u32) -> PendingPut {
            locked_sub_begin(rc, n)
        }
        fn sub_end(rc: &RefCount, pending: PendingPut) -> bool {
            locked_sub_end(rc, pending, Ordering::Relaxed)
        }
        fn freeze(rc: &RefCount, expected: u32) -> bool {
            LockedBit::freeze(rc, expected)
        }
    }

    /// locked-bit whose successful `try_get` is `Relaxed` instead of `Acquire`: a getter may
    /// read the folio's metadata from before the `init`/`unfreeze` that made it gettable.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct LockedBitRelaxedGet;

    impl RefOps for LockedBitRelaxedGet {
        const STRATEGY: RefStrategy = RefStrategy::LockedBit;

        fn try_add(rc: &RefCount, n: u32) -> bool {
            locked_try_add(rc, n, Ordering::Relaxed)
        }
        fn add(rc: &RefCount, n: u32) {
            LockedBit::add(rc, n)
        }
        fn sub_begin(rc: &RefCount, n: u32) -> PendingPut {
            locked_sub_begin(rc, n)
        }
        fn sub_end(rc: &RefCount, pending: PendingPut) -> bool {
            LockedBit::sub_end(rc, pending)
        }
        fn freeze(rc: &RefCount, expected: u32) -> bool {
            LockedBit::freeze(rc, expected)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The shared pieces.

#[inline]
fn check_n(n: u32) {
    assert!(
        (1..=MAX_ADD).contains(&n),
        "folio refcount: adding or dropping {n} references at once; use 1..={MAX_ADD}"
    );
}

#[inline]
fn check_fresh(count: u32) {
    assert!(
        (1..=MAX_REFS).contains(&count),
        "folio refcount: a fresh count must be in 1..={MAX_REFS}, got {count}"
    );
}

/// The overflow/underflow stop: prints what happened and aborts. A wrapped count is a
/// use-after-free in waiting, so unwinding (which could run destructors that touch the folio)
/// is not an option.
#[cold]
#[inline(never)]
fn refcount_abort(op: &str, s: RefStrategy, old: u32, n: u32) -> ! {
    eprintln!("{}", abort_message(op, s, old, n));
    std::process::abort()
}

/// The message [`refcount_abort`] prints (separate so tests can check it without aborting).
#[doc(hidden)]
pub fn abort_message(op: &str, s: RefStrategy, old: u32, n: u32) -> String {
    let what = if op.starts_with("folio_put") || op.starts_with("folio_ref_sub") {
        "underflow: a put without a matching reference (imbalanced put or put on a free folio)"
    } else if old & LOCKED != 0 || (old == 0 && op == "folio_ref_add") {
        "get on a frozen, free or dying folio without holding a reference"
    } else {
        "overflow: the live count would pass MAX_REFS"
    };
    format!(
        "foliocache: fatal folio refcount {what}: {op}({n}) on word {old:#010x} \
         (strategy {s}, MAX_REFS = {MAX_REFS}); aborting"
    )
}

/// add-unless-frozen as a CAS loop starting from the guess `old` (cas-loop: a fresh read;
/// optimistic: 1).
#[inline]
fn cas_add_unless_frozen(rc: &RefCount, mut old: u32, n: u32, s: RefStrategy) -> bool {
    loop {
        if (old as i32) <= 0 {
            return false;
        }
        if old > MAX_REFS - n {
            refcount_abort("folio_ref_try_add", s, old, n);
        }
        // ORDERING: Acquire on success; pairs with the Release store of `init`/`unfreeze`.
        // Failure is Relaxed: a failed get touches nothing.
        match rc
            .word
            .compare_exchange(old, old + n, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => return true,
            Err(now) => old = now,
        }
    }
}

#[inline]
fn plain_add(rc: &RefCount, n: u32, s: RefStrategy) {
    check_n(n);
    let old = rc.word.fetch_add(n, Ordering::Relaxed);
    // One compare: the old count must be in 1..=MAX_REFS - n. It catches a live count about
    // to pass MAX_REFS, and an add on a dying (0) or frozen (bit 31) word, which means the
    // caller did not hold the reference it claimed.
    if old.wrapping_sub(1) >= MAX_REFS - n {
        refcount_abort("folio_ref_add", s, old, n);
    }
}

#[inline]
fn plain_sub_begin(rc: &RefCount, n: u32, s: RefStrategy) -> PendingPut {
    check_n(n);
    // ORDERING: Release; pairs with the Acquire fence of the winner (`plain_sub_end`) or the
    // Acquire CAS of a freeze: our writes to the folio happen before it is freed or frozen.
    let old = rc.word.fetch_sub(n, Ordering::Release);
    if old < n || old > MAX_REFS {
        refcount_abort("folio_ref_sub_and_test", s, old, n);
    }
    if old == n {
        PendingPut::Won
    } else {
        PendingPut::Held
    }
}

#[inline]
fn plain_sub_end(rc: &RefCount, pending: PendingPut) -> bool {
    match pending {
        PendingPut::Won => {
            // ORDERING: Acquire fence; pairs with the Release decrement of every other holder
            // (`plain_sub_begin`), whose release sequences our final RMW read from.
            crate::mm::sync::acquire_after_final_put(&rc.word);
            true
        }
        PendingPut::Held | PendingPut::Zero => false,
    }
}

#[inline]
fn freeze_to(rc: &RefCount, expected: u32, frozen: u32) -> bool {
    check_fresh(expected);
    // ORDERING: Acquire on success; pairs with the Release decrements of the holders that left
    // before the freeze (`plain_sub_begin`, `locked_sub_begin`): the freezer owns the folio and
    // sees their writes. Failure is Relaxed: the freezer gives up and touches nothing.
    rc.word
        .compare_exchange(expected, frozen, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

#[inline]
fn locked_try_add(rc: &RefCount, n: u32, success: Ordering) -> bool {
    check_n(n);
    // ORDERING: Acquire (`success`); pairs with the Release store of `init`/`unfreeze`. A failed
    // get needs no ordering but cannot know it failed before the RMW is done.
    let new = rc.word.fetch_add(n, success).wrapping_add(n);
    if new & LOCKED == 0 {
        if new > MAX_REFS {
            refcount_abort("folio_ref_try_add", RefStrategy::LockedBit, new - n, n);
        }
        return true;
    }
    locked_get_failed(rc, new);
    false
}

/// A speculative add landed on a sealed word: try once to wipe the garbage, and keep trying
/// while the garbage is at the wipe limit (it must never carry into bit 31 and wrap).
#[cold]
#[inline(never)]
fn locked_get_failed(rc: &RefCount, seen: u32) {
    // One shot: if nobody touched the word since our add, put it back to a clean LOCKED.
    // ORDERING: Relaxed; the word stays sealed either way, the low bits carry no data.
    let mut cur = match rc
        .word
        .compare_exchange(seen, LOCKED, Ordering::Relaxed, Ordering::Relaxed)
    {
        Ok(_) => return,
        Err(now) => now,
    };
    // The loop stops as soon as the word is below the limit, in particular as soon as bit 31
    // is clear (the folio was reallocated: its count is meaningful again).
    while cur >= WIPE_LIMIT {
        match rc
            .word
            .compare_exchange(cur, LOCKED, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => return,
            Err(now) => cur = now,
        }
        crate::mm::sync::spin_loop();
    }
}

#[inline]
fn locked_sub_begin(rc: &RefCount, n: u32) -> PendingPut {
    check_n(n);
    // ORDERING: Release; pairs with the winner's Acquire seal CAS (`locked_sub_end`) or a
    // freezer's Acquire CAS: our writes to the folio happen before it is freed or frozen.
    let old = rc.word.fetch_sub(n, Ordering::Release);
    if old < n || old > MAX_REFS {
        refcount_abort("folio_ref_sub_and_test", RefStrategy::LockedBit, old, n);
    }
    if old == n {
        PendingPut::Zero
    } else {
        PendingPut::Held
    }
}

#[inline]
fn locked_sub_end(rc: &RefCount, pending: PendingPut, seal: Ordering) -> bool {
    match pending {
        PendingPut::Zero => locked_seal(rc, seal),
        PendingPut::Held => false,
        PendingPut::Won => unreachable!("locked-bit never decides a put on the decrement alone"),
    }
}

/// The last put's CAS `0 -> LOCKED`: succeeds only if nobody revived the folio in between.
#[cold]
#[inline(never)]
fn locked_seal(rc: &RefCount, seal: Ordering) -> bool {
    // ORDERING: Acquire (`seal`); pairs with the Release decrement of every holder of this
    // lifetime (`locked_sub_begin`): the 0 we read ends their release sequences, so the
    // winner frees after all their writes, including holders the caller never knew about.
    rc.word
        .compare_exchange(0, LOCKED, seal, Ordering::Relaxed)
        .is_ok()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const S: [RefStrategy; 3] = RefStrategy::ALL;

    #[test]
    fn names_round_trip() {
        for s in S {
            assert_eq!(s.to_string().parse::<RefStrategy>().unwrap(), s);
        }
        assert_eq!(
            "locked-bit".parse::<RefStrategy>(),
            Ok(RefStrategy::LockedBit)
        );
        let err = "lockedbit".parse::<RefStrategy>().unwrap_err();
        assert!(err.to_string().contains("cas-loop, optimistic, locked-bit"));
    }

    #[test]
    fn constants() {
        assert_eq!(LOCKED, 0x8000_0000);
        assert_eq!(WIPE_LIMIT, 0xC000_0000);
        assert_eq!(MAX_REFS, 0x3FFF_FFFF);
        // The garbage headroom above the wipe limit absorbs 2^30 / MAX_ADD in-flight adds.
        assert_eq!((u32::MAX - WIPE_LIMIT + 1) / MAX_ADD, 16384);
    }

    #[test]
    fn frozen_is_frozen_everywhere() {
        let rc = RefCount::frozen();
        for s in S {
            assert!(rc.is_frozen(s));
            assert_eq!(rc.count(s), 0);
            assert!(!rc.try_get(s), "{s}");
            assert!(!rc.try_add(s, 7), "{s}");
        }
        assert!(rc.raw() & LOCKED != 0);
    }

    #[test]
    fn word_classes() {
        for s in [RefStrategy::CasLoop, RefStrategy::Optimistic] {
            assert!(word_is_frozen(s, 0));
            assert!(!word_is_frozen(s, 1));
            assert!(!word_is_frozen(s, MAX_REFS));
            assert!(word_is_frozen(s, LOCKED));
            assert!(word_is_frozen(s, LOCKED | 5));
            assert!(word_is_frozen(s, u32::MAX));
        }
        let s = RefStrategy::LockedBit;
        assert!(!word_is_frozen(s, 0), "dying, not frozen");
        assert!(!word_is_frozen(s, 1));
        assert!(!word_is_frozen(s, MAX_REFS));
        assert!(word_is_frozen(s, LOCKED));
        assert!(word_is_frozen(s, LOCKED | 1));
        assert!(word_is_frozen(s, WIPE_LIMIT));
        assert!(word_is_frozen(s, u32::MAX));
    }

    #[test]
    fn life_cycle_every_strategy() {
        for s in S {
            let rc = RefCount::frozen();
            rc.init(s, 1);
            assert_eq!(rc.count(s), 1);
            assert!(rc.try_get(s));
            rc.get(s);
            rc.add(s, 3);
            assert!(rc.try_add(s, 2));
            assert_eq!(rc.count(s), 8);
            assert!(!rc.freeze(s, 7));
            assert!(!rc.sub_and_test(s, 6));
            assert!(rc.freeze(s, 2));
            assert!(rc.is_frozen(s));
            assert_eq!(rc.raw(), s.frozen_word());
            assert!(!rc.try_get(s));
            rc.unfreeze(s, 2);
            assert!(!rc.put(s));
            assert!(rc.put(s), "{s}: last put wins");
            assert!(rc.is_frozen(s));
            assert_eq!(rc.raw(), s.frozen_word());
            assert!(!rc.try_get(s));
            rc.init(s, 1);
            assert!(rc.sub_and_test(s, 1));
            rc.init(s, 2);
            assert!(!rc.dec_and_test(s));
            assert!(rc.dec_and_test(s));
        }
    }

    #[test]
    fn locked_bit_dying_zero_can_be_revived() {
        let s = RefStrategy::LockedBit;
        let rc = RefCount::frozen();
        rc.init(s, 1);
        let p = rc.put_begin(s, 1);
        assert_eq!(p, PendingPut::Zero);
        assert_eq!(rc.raw(), 0);
        assert!(!rc.is_frozen(s));
        assert_eq!(rc.count(s), 0);
        assert!(rc.try_get(s), "revives 0 -> 1");
        assert!(!rc.put_end(s, p), "the revived folio is not ours to free");
        assert!(rc.put(s), "the reviver's put is now the last");
        assert_eq!(rc.raw(), LOCKED);
    }

    #[test]
    fn cas_strategies_decide_on_the_decrement() {
        for s in [RefStrategy::CasLoop, RefStrategy::Optimistic] {
            let rc = RefCount::frozen();
            rc.init(s, 1);
            let p = rc.put_begin(s, 1);
            assert_eq!(p, PendingPut::Won);
            assert!(!rc.try_get(s), "0 is final for {s}");
            assert!(rc.put_end(s, p));
        }
    }

    #[test]
    fn locked_garbage_is_wiped_by_a_lone_getter() {
        let s = RefStrategy::LockedBit;
        let rc = RefCount::from_raw(LOCKED);
        assert!(!rc.try_get(s));
        assert_eq!(rc.raw(), LOCKED, "one-shot wipe");
        let rc = RefCount::from_raw(LOCKED | 41);
        assert!(!rc.try_add(s, 1));
        assert_eq!(rc.raw(), LOCKED, "wipes others' garbage too");
    }

    #[test]
    fn wipe_limit_edges() {
        let s = RefStrategy::LockedBit;
        // Just below the limit, the add itself reaches it: still wiped.
        let rc = RefCount::from_raw(WIPE_LIMIT - 1);
        assert!(!rc.try_get(s));
        assert_eq!(rc.raw(), LOCKED);
        // At the very top of the word (only reachable by 16384 adds in flight at once): the
        // add still sees the bit and the loop still wipes.
        let rc = RefCount::from_raw(u32::MAX - 1);
        assert!(!rc.try_get(s));
        assert_eq!(rc.raw(), LOCKED);
    }

    #[test]
    fn unfreeze_discards_garbage() {
        let s = RefStrategy::LockedBit;
        let rc = RefCount::from_raw(LOCKED | 1234);
        rc.unfreeze(s, 3);
        assert_eq!(rc.raw(), 3);
        assert_eq!(rc.count(s), 3);
    }

    #[test]
    fn max_refs_is_reachable() {
        for s in S {
            let rc = RefCount::frozen();
            rc.init(s, MAX_REFS - 1);
            assert!(rc.try_get(s));
            assert_eq!(rc.count(s), MAX_REFS);
            assert!(!rc.freeze(s, MAX_REFS - 1));
            assert!(rc.freeze(s, MAX_REFS));
        }
    }

    #[test]
    #[should_panic(expected = "fresh count must be in 1..=")]
    fn init_zero_is_refused() {
        RefCount::frozen().init(RefStrategy::LockedBit, 0);
    }

    #[test]
    #[should_panic(expected = "fresh count must be in 1..=")]
    fn init_locked_is_refused() {
        RefCount::frozen().init(RefStrategy::CasLoop, LOCKED);
    }

    #[test]
    #[should_panic(expected = "adding or dropping 0 references")]
    fn add_zero_is_refused() {
        let _ = RefCount::frozen().try_add(RefStrategy::Optimistic, 0); // panics
    }

    #[test]
    #[should_panic(expected = "adding or dropping 65537 references")]
    fn add_too_many_is_refused() {
        let _ = RefCount::frozen().try_add(RefStrategy::LockedBit, MAX_ADD + 1);
        // panics
    }

    #[test]
    fn abort_messages_say_what_happened() {
        let m = abort_message("folio_ref_try_add", RefStrategy::LockedBit, MAX_REFS, 1);
        assert!(m.contains("overflow"), "{m}");
        assert!(m.contains("locked-bit"), "{m}");
        let m = abort_message("folio_ref_sub_and_test", RefStrategy::CasLoop, 0, 1);
        assert!(m.contains("underflow"), "{m}");
        let m = abort_message("folio_ref_add", RefStrategy::LockedBit, LOCKED, 1);
        assert!(m.contains("frozen, free or dying"), "{m}");
    }

    /// The abort paths, checked for real: the test re-runs this test binary on one child test
    /// with `FOLIOCACHE_ABORT_CASE` set; the child performs the fatal operation and must die of
    /// SIGABRT with our message on stderr.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "runs the test binary as a child process, which Miri cannot"
    )]
    fn overflow_and_underflow_abort_the_process() {
        let cases = [
            ("try_get_cas_loop_at_max", "overflow"),
            ("try_get_optimistic_at_max", "overflow"),
            ("try_get_locked_bit_at_max", "overflow"),
            ("get_locked_bit_at_max", "overflow"),
            ("add_cas_loop_at_max", "overflow"),
            ("put_on_frozen_locked_bit", "underflow"),
            ("put_on_zero_cas_loop", "underflow"),
            ("get_on_frozen_locked_bit", "frozen, free or dying"),
            ("get_on_dying_locked_bit", "frozen, free or dying"),
        ];
        let exe = std::env::current_exe().unwrap();
        for (case, needle) in cases {
            let out = std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "mm::refcount::tests::abort_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("FOLIOCACHE_ABORT_CASE", case)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            #[cfg(unix)]
            {
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(
                    out.status.signal(),
                    Some(libc::SIGABRT),
                    "{case}: expected SIGABRT, got {:?}; stderr:\n{stderr}",
                    out.status
                );
            }
            assert!(!out.status.success(), "{case}");
            assert!(
                stderr.contains("fatal folio refcount") && stderr.contains(needle),
                "{case}: stderr was:\n{stderr}"
            );
        }
    }

    /// The child half of `overflow_and_underflow_abort_the_process`; a no-op when run normally.
    #[test]
    fn abort_child() {
        let Ok(case) = std::env::var("FOLIOCACHE_ABORT_CASE") else {
            return;
        };
        let rc = RefCount::frozen();
        match case.as_str() {
            "try_get_cas_loop_at_max" => {
                rc.init(RefStrategy::CasLoop, MAX_REFS);
                let _ = rc.try_get(RefStrategy::CasLoop); // aborts
            }
            "try_get_optimistic_at_max" => {
                rc.init(RefStrategy::Optimistic, MAX_REFS);
                let _ = rc.try_get(RefStrategy::Optimistic); // aborts
            }
            "try_get_locked_bit_at_max" => {
                rc.init(RefStrategy::LockedBit, MAX_REFS);
                let _ = rc.try_get(RefStrategy::LockedBit); // aborts
            }
            "get_locked_bit_at_max" => {
                rc.init(RefStrategy::LockedBit, MAX_REFS);
                rc.get(RefStrategy::LockedBit);
            }
            "add_cas_loop_at_max" => {
                rc.init(RefStrategy::CasLoop, MAX_REFS - 2);
                rc.add(RefStrategy::CasLoop, 3);
            }
            "put_on_frozen_locked_bit" => {
                let _ = rc.put(RefStrategy::LockedBit); // aborts
            }
            "put_on_zero_cas_loop" => {
                rc.init(RefStrategy::CasLoop, 1);
                assert!(rc.put(RefStrategy::CasLoop));
                let _ = rc.put(RefStrategy::CasLoop); // aborts
            }
            "get_on_frozen_locked_bit" => {
                rc.get(RefStrategy::LockedBit);
            }
            "get_on_dying_locked_bit" => {
                rc.init(RefStrategy::LockedBit, 1);
                let _ = rc.put_begin(RefStrategy::LockedBit, 1);
                rc.get(RefStrategy::LockedBit);
            }
            other => panic!("unknown abort case {other}"),
        }
        // Reaching here means the fatal operation returned: exit cleanly so the parent's
        // SIGABRT assertion fails with a clear message.
        eprintln!("abort case {case} did not abort");
        std::process::exit(0);
    }
}
