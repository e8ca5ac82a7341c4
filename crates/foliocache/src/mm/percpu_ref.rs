//! Per-thread reference counting with a grace-period switch to one atomic counter.
//!
//! # What it models
//!
//! `lib/percpu-refcount.c` (`percpu_ref_get`, `percpu_ref_tryget_live`, `percpu_ref_put`,
//! `percpu_ref_switch_to_atomic_sync`, `percpu_ref_kill`, `percpu_ref_reinit`,
//! `percpu_ref_switch_to_percpu`) and its use as the futex private-hash reference
//! (`futex_ref_get` / `futex_ref_put` / `futex_ref_drop` / `futex_ref_rcu` /
//! `futex_ref_is_dead` in `kernel/futex/core.c`, seed 003): a reference that costs no shared
//! cache line while the object is alive, and becomes an exact atomic count when someone needs
//! to know when the last user has gone (a table about to be replaced).
//!
//! # State
//!
//! | field | meaning |
//! |---|---|
//! | `mode` (read-mostly line) | 0 = per-CPU; bit `ATOMIC` = gets/puts go to `count`; bit `DEAD` = killed, `tryget_live` fails |
//! | per-thread slot `count` | gets minus puts done by that thread in per-CPU mode, wrapping `u64`; written only by its thread |
//! | `count` (own line) | in per-CPU mode `BIAS + 1 + (atomic-path refs)`; after the fold, the exact count |
//! | `base` (under `switch_lock`) | the sum of all slots at the previous fold (slots are never reset) |
//!
//! | transition | how |
//! |---|---|
//! | new | mode 0, `count = BIAS + 1` (the initial reference, "being the current table") |
//! | per-CPU → atomic (`switch_to_atomic_sync`) | set `ATOMIC` (and `DEAD` for `kill`); wait a grace period; `count += (Σ slots − base) − BIAS` in **one** `fetch_add`; `base = Σ slots` |
//! | kill | the switch with `DEAD`, then put the initial reference |
//! | atomic → per-CPU (`switch_to_percpu`, re-arm) | `count += BIAS`; store mode 0 |
//! | dead and zero → per-CPU (`reinit`) | `count = BIAS + 1`; store mode 0 |
//!
//! # Invariants
//!
//! 1. Every get/put reads `mode` and updates its counter inside one read section (the RCU
//!    domain's, or the ref's own marker in the fast variant). The switch flips `mode` first
//!    and folds only after a grace period, so no thread can still be on the per-thread path
//!    of the old mode when the slots are summed: the sum is stable.
//! 2. While any thread may use the per-thread path, `count` carries `BIAS = 2^63`: the
//!    atomic-path puts of threads that already see `ATOMIC` (whose gets went to their slots)
//!    cannot take it to zero before the fold.
//! 3. The fold is one `fetch_add` of `Σ − base − BIAS` (modular): `count` goes straight from
//!    "biased" to "exact". Individual slots may be "negative" (a thread that only puts); the
//!    wrapping sum is exact as long as fewer than 2^63 references exist.
//! 4. Zero is reported exactly once per life (`zero_events` counts it): by the put or the
//!    fold that takes `count` to 0. `wait_for_zero` sleeps on a condition variable until the
//!    current life's report, not merely until `count` reads 0 (the report follows the
//!    decrement).
//! 5. After `kill` returns, `tryget_live` fails: a get that read the old mode was in a read
//!    section the kill's grace period waited for.
//!
//! # The hard part: a per-CPU increment without disabling preemption
//!
//! The kernel's `this_cpu_inc` is safe because the task cannot migrate in the middle of the
//! read-modify-write. Userspace cannot disable preemption, so a counter indexed by
//! `sched_getcpu()` can be shared by two threads (one migrated in the middle of an
//! increment): it needs an atomic RMW (`lock xadd`). We give each **thread** its own slot
//! per reference instead (registered on the thread's first use, on its own cache line, kept
//! when the thread exits and handed to the next new thread): only the owner ever writes it,
//! so the increment is a plain load and store, and preemption anywhere in it is harmless.
//! The only other reader is the fold, which runs after a grace period, when no owner can be
//! writing. `benches/percpu_ref.rs` measures both choices (see the table below).
//!
//! # Variants (the seed and its follow-up)
//!
//! - [`RefVariant::Percpu`], the seed as merged (v6.17, `guard(rcu)` +
//!   `smp_load_acquire(state)` + `this_cpu_inc`): inside an [`Rcu`] read section of the
//!   shared domain, an Acquire load of `mode`, the per-thread increment. The switch waits
//!   for an RCU grace period.
//! - [`RefVariant::PercpuFast`], the follow-up commit "futex: Optimize per-cpu reference
//!   counting" (`guard(preempt)` + `READ_ONCE` + `__this_cpu_inc`). Its argument is that a
//!   preemption-disabled region already holds off the grace period, so no separate RCU
//!   section is needed, and that the grace period after the flip implies the barrier the
//!   acquire provided. Our analog: the per-thread slot carries its own section marker next to
//!   the counter ([`PercpuCounters::enter`]: one cache line, one thread-local lookup, no RCU
//!   slot touched), the mode is loaded Relaxed, and the switch waits for a private grace
//!   period over the markers (advance an epoch, `membarrier`, wait for older markers) as
//!   well as an RCU one, so a caller already inside an RCU section (the file table's
//!   lock-free path) may use the fast variant there without a marker.
//!
//! # Counter sets shared across generations
//!
//! The slots live in a [`PercpuCounters`] set that several references may share one at a
//! time (the futex's `mm->futex_ref`, shared by every generation of the private hash):
//! slots are never reset, and the set's `base` (Σ slots at the last fold) makes each fold
//! count only the per-thread references of the generation being folded. A caller enters a
//! section on the set ([`PercpuCounters::read_lock`] or [`PercpuCounters::enter`]), which
//! resolves the thread's slot (and its RCU reader slot) with one thread-local lookup, and
//! passes the slot to [`PercpuRef::tryget_live_in`] and [`PercpuRef::put_in`]: one section
//! and one lookup for a get and its put.

//! # Why it is fast
//!
//! `benches/percpu_ref.rs` (`cargo bench -p foliocache --bench percpu_ref`), ns per
//! `tryget_live` + `put` pair, with 0 or 1 other thread hammering the same reference, on the
//! lab machine (2 cores shared with other work, so two runs' medians are given):
//!
//! | counter | 1 thread | 2 threads |
//! |---|---|---|
//! | `Percpu` (RCU section + per-thread slot) | 4.1 / 9.6 | 12.6 / 14.3 |
//! | `PercpuFast` (own marker + per-thread slot) | 6.0 / 5.6 | 10.2 / 12.4 |
//! | sharded `AtomicU64` per CPU (`sched_getcpu` + `fetch_add`) | 29 / 35 | 66 / 56 |
//! | one shared `AtomicU64` (`rcuref`-like) | 25 / 34 | 73 / 52 |
//!
//! The per-thread slot wins by 5x over the sharded atomics: `sched_getcpu` and the locked
//! add cost more than the whole per-thread path, and two threads that share a CPU shard
//! (after a migration) would still bounce its line. The two-thread column shows the point
//! of the seed: the shared atomic's line bounces between the cores, the per-thread slots do
//! not. The fast variant saves one thread-local lookup and one cache line per operation;
//! on x86-64 the Acquire-versus-Relaxed mode load compiles to the same `mov`, so only that
//! part of the follow-up's gain (PowerPC's `lwsync`) does not exist here.
//!
//! # Why not a true per-CPU counter (rseq)
//!
//! The kernel's `this_cpu_inc` is one instruction; userspace can have the same with
//! restartable sequences (glibc 2.35+ registers an `rseq` area for every thread:
//! `__rseq_offset`, `getauxval(AT_RSEQ_FEATURE_SIZE)`; librseq's `rseq_addv`). We measured
//! what it could win before building it. In the file table's lookup (`FileTable::with`,
//! the `hash` scenario's operation; one process, the variants interleaved in rounds of
//! 500,000 lookups, thread CPU time, 2-vCPU machine at load 4), `immutable` took 8.3 ns,
//! `percpu` 9.6-10.7 ns and `percpu-fast` 10.0-11.1 ns at one thread. A build whose
//! per-CPU path skipped the slot's load and store altogether (a broken protocol, for the
//! measurement only) took 9.3-10.5 ns: the counter itself is 0.3-0.5 ns of the 1.5-2.5 ns
//! gap. The rest is entering and leaving the section (the thread-local lookup of the slot,
//! the reader word's or the marker's stores, which the bucket lock's locked instruction
//! then waits for) and the mode load. An rseq add would replace only the counter, at the
//! price of more work than a plain load and store to a line the thread owns (the CPU
//! number's load, the critical-section descriptor's store, a restart path), and it cannot
//! replace the section: a marker or an RCU reader word must stay with its thread, since the
//! thread may migrate inside the section. So the per-thread slot stays.

use crate::mm::rcu::{Rcu, RcuReadGuard, Reader};
use crate::mm::sync::{AtomicBool, AtomicU64, AtomicU8, CachePadded, Condvar, Mutex, Ordering};
use std::fmt;
use std::marker::PhantomData;

#[cfg(not(loom))]
use crate::mm::sync::Arc;

/// `mode` bit: gets and puts go to the atomic counter.
const ATOMIC: u8 = 1;
/// `mode` bit: killed; `tryget_live` fails.
const DEAD: u8 = 2;
/// Keeps the atomic counter away from zero while per-thread counts are unfolded.
pub const BIAS: u64 = 1 << 63;

/// Which fast path a [`PercpuRef`] uses (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefVariant {
    /// The seed: RCU read section, Acquire load of the mode, per-thread increment.
    Percpu,
    /// The follow-up: the slot's own section marker (or an RCU section the caller is in
    /// anyway), Relaxed mode load, per-thread increment.
    PercpuFast,
}

/// Misuse of a [`PercpuRef`] transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PercpuRefError {
    /// `kill` on a reference that is already dead.
    AlreadyDead,
    /// `reinit` on a reference that is not dead, or `switch_to_percpu` on a dead one.
    WrongState,
    /// `reinit` while references are still held.
    NotZero,
}

impl fmt::Display for PercpuRefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AlreadyDead => f.write_str(
                "percpu_ref: kill() on a dead reference; kill once, then wait_for_zero() and \
                 reinit() before killing again",
            ),
            Self::WrongState => f.write_str(
                "percpu_ref: reinit() needs a killed reference, switch_to_percpu() a live one",
            ),
            Self::NotZero => {
                f.write_str("percpu_ref: reinit() while references are held; wait_for_zero() first")
            }
        }
    }
}

impl std::error::Error for PercpuRefError {}

/// One thread's counter of one counter set.
#[derive(Debug, Default)]
struct RefSlot {
    /// Gets minus puts on the per-thread path, wrapping; written only by the owner.
    count: AtomicU64,
    /// Fast variant: the set's epoch while inside a marker section, 0 outside.
    section: AtomicU64,
    /// A live thread owns this slot.
    #[cfg_attr(loom, allow(dead_code))]
    owned: AtomicBool,
}

#[cfg(loom)]
const LOOM_SLOTS: usize = 5;

/// The read-mostly line of a counter set: the epoch of its marker grace periods.
#[derive(Debug)]
struct EpochLine {
    epoch: AtomicU64,
    /// Copied from the RCU domain: the reader must fence (no `membarrier`).
    fences: bool,
}

/// The per-thread counters shared by every reference built on them, used one at a time
/// (the futex's `mm->futex_ref`, shared by every generation of the private hash).
///
/// A set is a list of per-thread slots (a counter and the fast variant's section marker on
/// one cache line, written only by the owning thread), the RCU domain the references use,
/// and the sum of the slots at the last fold (`base`). Several [`PercpuRef`]s may share one
/// set (see [`PercpuRef::with_counters`]) as long as at most one of them is in per-CPU mode
/// at a time and a reference starts receiving per-thread counts only after the previous
/// one's fold: then `Σ slots − base` at a fold is exactly the per-thread count of the
/// reference being folded. The file table satisfies this: a table is published only after
/// its predecessor was killed and folded.
pub struct PercpuCounters {
    line: CachePadded<EpochLine>,
    rcu: crate::mm::sync::Arc<Rcu>,
    #[cfg(not(loom))]
    id: u64,
    #[cfg(not(loom))]
    slots: Mutex<Vec<Arc<CachePadded<RefSlot>>>>,
    #[cfg(loom)]
    slots: Vec<CachePadded<RefSlot>>,
    /// Σ slots at the last fold of any reference of the set; folds are serialised by it.
    base: Mutex<u64>,
}

impl fmt::Debug for PercpuCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PercpuCounters")
            .field("epoch", &self.line.epoch.load(Ordering::Relaxed))
            .finish()
    }
}

#[cfg(not(loom))]
mod slots {
    //! The thread-local cache of this thread's slots (and of its RCU reader slot).

    use super::{Arc, CachePadded, PercpuCounters, Reader, RefSlot};
    use crate::mm::sync::Ordering;
    use std::cell::{Cell, RefCell};

    struct Mine(Vec<(u64, Arc<CachePadded<RefSlot>>)>);

    impl Drop for Mine {
        fn drop(&mut self) {
            let _ = LAST.try_with(|c| c.set(None));
            for (_, s) in self.0.drain(..) {
                // ORDERING: Release pairs with the Acquire in `get_slow` of the next thread
                // that claims the slot: it continues from this thread's last count.
                s.owned.store(false, Ordering::Release);
            }
        }
    }

    /// The last set this thread used: its id, its slot, and its RCU reader slot.
    type Last = Option<(u64, *const RefSlot, Reader)>;

    std::thread_local! {
        static LAST: Cell<Last> = const { Cell::new(None) };
        /// The slot an exiting thread claimed after its registry was destroyed.
        static EXITING: Cell<Option<(u64, *const RefSlot)>> = const { Cell::new(None) };
        static MINE: RefCell<Mine> = const { RefCell::new(Mine(Vec::new())) };
    }

    /// This thread's slot of `c` and its reader slot of `c`'s RCU domain: one thread-local
    /// lookup for both.
    #[inline(always)]
    pub(super) fn get(c: &PercpuCounters) -> (*const RefSlot, Reader) {
        if let Some((id, p, r)) = LAST.with(|l| l.get()) {
            if id == c.id {
                return (p, r);
            }
        }
        get_slow(c)
    }

    #[cold]
    #[inline(never)]
    fn get_slow(c: &PercpuCounters) -> (*const RefSlot, Reader) {
        // The RCU reader slot first: its thread-local registry is then registered before
        // ours, so it is destroyed after ours at thread exit, and `LAST` never caches a
        // reader slot the RCU layer has already given up.
        let r = c.rcu.reader();
        let p = MINE
            .try_with(|m| {
                let mut m = m.borrow_mut();
                m.0.retain(|(_, s)| Arc::strong_count(s) > 1);
                if let Some((_, s)) = m.0.iter().find(|(id, _)| *id == c.id) {
                    return &***s as *const RefSlot;
                }
                let s = claim(c);
                let p = &**s as *const RefSlot;
                m.0.push((c.id, s));
                p
            })
            .ok();
        let Some(p) = p else {
            // Our registry is gone: running in a thread-local destructor at thread exit.
            return (exiting_slot(c), r);
        };
        LAST.with(|l| l.set(Some((c.id, p, r))));
        (p, r)
    }

    /// This exiting thread's slot of `c` (its registry is gone): claimed like any other and
    /// kept, unregistered, for the rest of the thread's exit (in `EXITING`, which has no
    /// destructor); nothing gives it back, so one slot per such thread and set stays owned.
    /// Its counts stay in the set's sum. Not cached in `LAST`, whose reader slot the RCU
    /// layer may give up before this thread has finished exiting.
    #[cold]
    fn exiting_slot(c: &PercpuCounters) -> *const RefSlot {
        if let Some((id, p)) = EXITING.with(|e| e.get()) {
            if id == c.id {
                return p;
            }
        }
        // The registry keeps the slot alive as long as the set lives.
        let p = &**claim(c) as *const RefSlot;
        EXITING.with(|e| e.set(Some((c.id, p))));
        p
    }

    /// A slot of `c` for this thread, marked owned: the slot of an exited thread if there is
    /// one (its count stays in the sum), else a new one.
    fn claim(c: &PercpuCounters) -> Arc<CachePadded<RefSlot>> {
        let mut reg = c.slots.lock();
        // ORDERING: Acquire pairs with the Release of `owned` at thread exit.
        let s = match reg.iter().find(|s| !s.owned.load(Ordering::Acquire)) {
            Some(s) => s.clone(),
            None => {
                let s = Arc::new(CachePadded::new(RefSlot::default()));
                reg.push(s.clone());
                s
            }
        };
        s.owned.store(true, Ordering::Relaxed);
        s
    }
}

impl PercpuCounters {
    /// An empty set whose RCU-protected paths and grace periods use `rcu`.
    pub fn new(rcu: crate::mm::sync::Arc<Rcu>) -> Self {
        #[cfg(not(loom))]
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self {
            line: CachePadded::new(EpochLine {
                epoch: AtomicU64::new(1),
                fences: rcu.flavor() == crate::mm::rcu::Flavor::Fence,
            }),
            rcu,
            #[cfg(not(loom))]
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            #[cfg(not(loom))]
            slots: Mutex::new(Vec::new()),
            #[cfg(loom)]
            slots: (0..LOOM_SLOTS)
                .map(|_| CachePadded::new(RefSlot::default()))
                .collect(),
            base: Mutex::new(0),
        }
    }

    /// The RCU domain of the set.
    pub fn rcu(&self) -> &crate::mm::sync::Arc<Rcu> {
        &self.rcu
    }

    /// This thread's slot and RCU reader slot.
    #[inline(always)]
    fn mine(&self) -> (&RefSlot, Reader) {
        #[cfg(not(loom))]
        {
            let (p, r) = slots::get(self);
            // SAFETY: the thread-local registration holds an Arc to the slot until the
            // thread exits, and the registry holds one as long as `self` lives.
            (unsafe { &*p }, r)
        }
        #[cfg(loom)]
        {
            let n = crate::mm::sync::thread_number();
            assert!(n < LOOM_SLOTS, "percpu_ref: too many loom threads");
            (&self.slots[n], self.rcu.reader())
        }
    }

    /// Enters an RCU read section of the set's domain and resolves this thread's slot, with
    /// one thread-local lookup for both (`guard(rcu)` + `this_cpu_ptr`). Good for either
    /// variant: the switch of both waits for RCU readers.
    #[inline(always)]
    pub fn read_lock(&self) -> RcuPin<'_> {
        let (slot, r) = self.mine();
        // SAFETY: `r` is this thread's reader slot of `self.rcu`, just looked up.
        let guard = unsafe { self.rcu.read_lock_reader(r) };
        RcuPin {
            guard,
            slot: ThreadSlot {
                slot,
                marker: false,
                set: self,
                _not_send: PhantomData,
            },
        }
    }

    /// Enters a marker section (`guard(preempt)` of the fast variant): this thread's slot
    /// carries the set's epoch until the pin is dropped. No RCU section: only
    /// [`RefVariant::PercpuFast`] references may be used under it, and whatever the caller
    /// reads under it must be freed only after [`PercpuCounters::synchronize_markers`].
    #[inline(always)]
    pub fn enter(&self) -> MarkerPin<'_> {
        let (slot, _) = self.mine();
        // ORDERING: Acquire pairs with the Release store of the epoch in
        // `synchronize_markers`: a reader that carries the new epoch (and is therefore not
        // waited for) sees everything the writer published before advancing it.
        slot.section
            .store(self.line.epoch.load(Ordering::Acquire), Ordering::Relaxed);
        if self.line.fences {
            // ORDERING: pairs with `synchronize_markers`'s writer barrier (store buffering):
            // either the scan sees our marker, or we see what was published before it.
            crate::mm::sync::fence(Ordering::SeqCst);
        } else {
            // The writer's membarrier makes this a full barrier when it matters.
            crate::mm::sync::compiler_fence(Ordering::SeqCst);
        }
        MarkerPin(ThreadSlot {
            slot,
            marker: true,
            set: self,
            _not_send: PhantomData,
        })
    }

    /// Waits until every marker section that began before the call has ended (the fast
    /// variant's private grace period: advance the epoch, barrier, wait for older markers,
    /// barrier). Must not be called inside a marker section of the set.
    pub fn synchronize_markers(&self) {
        let target = self.line.epoch.load(Ordering::Relaxed) + 1;
        // ORDERING: Release pairs with the Acquire epoch load in `enter` (see there).
        self.line.epoch.store(target, Ordering::Release);
        self.rcu.writer_barrier();
        let wait = |s: &RefSlot| {
            let mut spins = 0u32;
            // ORDERING: Acquire pairs with the Release store of `section = 0` in
            // `MarkerPin::drop`: the section's accesses are done.
            loop {
                let v = s.section.load(Ordering::Acquire);
                if v == 0 || v >= target {
                    break;
                }
                spins += 1;
                if spins < 16 {
                    crate::mm::sync::thread::yield_now();
                } else {
                    crate::mm::sync::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
        };
        #[cfg(not(loom))]
        for s in self.slots.lock().clone().iter() {
            wait(s);
        }
        #[cfg(loom)]
        for s in &self.slots {
            wait(s);
        }
        self.rcu.writer_barrier();
    }

    /// Σ of every slot (wrapping). Only meaningful after a grace period in atomic mode.
    fn sum_slots(&self) -> u64 {
        #[cfg(not(loom))]
        let slots = self.slots.lock();
        #[cfg(loom)]
        let slots = &self.slots;
        slots
            .iter()
            // ORDERING: Acquire; the grace period already ordered the owners' last updates
            // before this read (their sections ended before it returned).
            .fold(0u64, |a, s| a.wrapping_add(s.count.load(Ordering::Acquire)))
    }
}

/// This thread's slot of a [`PercpuCounters`], valid inside the section that produced it
/// ([`RcuPin::slot`] or [`MarkerPin::slot`]).
#[derive(Clone, Copy)]
pub struct ThreadSlot<'a> {
    slot: &'a RefSlot,
    /// A marker section (else an RCU section).
    marker: bool,
    set: &'a PercpuCounters,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for ThreadSlot<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadSlot")
            .field("marker", &self.marker)
            .finish()
    }
}

/// An RCU read section plus this thread's slot ([`PercpuCounters::read_lock`]).
#[must_use = "the section ends when the pin is dropped"]
pub struct RcuPin<'a> {
    guard: RcuReadGuard<'a>,
    slot: ThreadSlot<'a>,
}

impl fmt::Debug for RcuPin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RcuPin").finish()
    }
}

impl<'a> RcuPin<'a> {
    /// The RCU section (for lookups of RCU-protected data in the same domain).
    #[inline(always)]
    pub fn guard(&self) -> &RcuReadGuard<'a> {
        &self.guard
    }

    /// This thread's slot, for the `*_in` operations of the set's references.
    #[inline(always)]
    pub fn slot(&self) -> ThreadSlot<'a> {
        self.slot
    }
}

/// A marker section of the fast variant ([`PercpuCounters::enter`]); dropping it ends it.
#[must_use = "the section ends when the pin is dropped"]
pub struct MarkerPin<'a>(ThreadSlot<'a>);

impl fmt::Debug for MarkerPin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MarkerPin").finish()
    }
}

impl<'a> MarkerPin<'a> {
    /// This thread's slot, for the `*_in` operations of the set's fast references.
    #[inline(always)]
    pub fn slot(&self) -> ThreadSlot<'a> {
        self.0
    }
}

impl Drop for MarkerPin<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // ORDERING: Release pairs with the Acquire scan of `section` in
        // `synchronize_markers`: our slot update (and every load of the section) is done
        // before a writer that sees the marker cleared goes on.
        self.0.slot.section.store(0, Ordering::Release);
    }
}

/// What the switch lock protects (nothing but the transitions themselves).
#[derive(Debug)]
struct SwitchState;

/// A per-thread reference count with a switch to atomic mode (`struct percpu_ref`).
pub struct PercpuRef {
    /// Read on every get/put.
    mode: CachePadded<AtomicU8>,
    count: CachePadded<AtomicU64>,
    counters: crate::mm::sync::Arc<PercpuCounters>,
    variant: RefVariant,
    switch_lock: Mutex<SwitchState>,
    /// Zero events so far; `zero_cv` signals each.
    zero: Mutex<ZeroReports>,
    zero_cv: Condvar,
    /// Test hook: skip the grace period of the switch (the weakened protocol loom must catch).
    #[cfg(loom)]
    skip_grace_period: AtomicBool,
}

/// The zero reports, under the `zero` lock: how many lives reached zero and how many lives
/// there have been (the current one included).
#[derive(Debug)]
struct ZeroReports {
    events: u64,
    lives: u64,
}

impl fmt::Debug for PercpuRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PercpuRef")
            .field("variant", &self.variant)
            .field("mode", &self.mode.load(Ordering::Relaxed))
            .field("count", &self.count.load(Ordering::Relaxed))
            .finish()
    }
}

impl PercpuRef {
    /// Creates a live reference in per-CPU mode holding the initial reference
    /// (`percpu_ref_init(.., 0, ..)`), with its own counters; `rcu` provides the grace
    /// periods.
    pub fn new(rcu: crate::mm::sync::Arc<Rcu>, variant: RefVariant) -> Self {
        Self::with_counters(crate::mm::sync::Arc::new(PercpuCounters::new(rcu)), variant)
    }

    /// Creates a live reference on a shared counter set (the futex hash's generations all
    /// count in `mm->futex_ref`). The caller guarantees the set's rule: at most one of its
    /// references in per-CPU mode at a time, and no per-thread count for this one before
    /// the previous one's fold.
    pub fn with_counters(
        counters: crate::mm::sync::Arc<PercpuCounters>,
        variant: RefVariant,
    ) -> Self {
        Self {
            mode: CachePadded::new(AtomicU8::new(0)),
            count: CachePadded::new(AtomicU64::new(BIAS + 1)),
            counters,
            variant,
            switch_lock: Mutex::new(SwitchState),
            zero: Mutex::new(ZeroReports {
                events: 0,
                lives: 1,
            }),
            zero_cv: Condvar::new(),
            #[cfg(loom)]
            skip_grace_period: AtomicBool::new(false),
        }
    }

    /// The fast-path variant.
    pub fn variant(&self) -> RefVariant {
        self.variant
    }

    /// The counter set.
    pub fn counters(&self) -> &crate::mm::sync::Arc<PercpuCounters> {
        &self.counters
    }

    /// Adds `delta` (wrapping) to this thread's slot: a plain load and store, only the owner
    /// writes it.
    #[inline(always)]
    fn slot_add(slot: &RefSlot, delta: u64) {
        let c = slot.count.load(Ordering::Relaxed);
        slot.count.store(c.wrapping_add(delta), Ordering::Relaxed);
    }

    /// The mode, loaded as the variant wants it.
    #[inline(always)]
    fn load_mode(&self, s: &ThreadSlot<'_>) -> u8 {
        debug_assert!(
            std::ptr::eq(s.set, &*self.counters),
            "percpu_ref: a slot of another counter set"
        );
        debug_assert!(
            !s.marker || self.variant == RefVariant::PercpuFast,
            "percpu_ref: a marker section only protects the fast variant"
        );
        match self.variant {
            // ORDERING: Acquire pairs with the Release stores of mode 0 in
            // `switch_to_percpu` / `reinit`: a thread that sees per-CPU mode sees the
            // re-armed `count` (the v6.17 seed's smp_load_acquire).
            RefVariant::Percpu => self.mode.load(Ordering::Acquire),
            // The follow-up's READ_ONCE: the grace period after every flip to atomic
            // orders it, and a re-arm happens only with the count at zero and nobody
            // holding the ref (the table re-arms nothing: a retired table is freed).
            RefVariant::PercpuFast => self.mode.load(Ordering::Relaxed),
        }
    }

    /// Runs the operation inside the variant's own section (for callers that are in none).
    #[inline(always)]
    fn in_section<R>(&self, op: impl FnOnce(ThreadSlot<'_>) -> R) -> R {
        match self.variant {
            RefVariant::Percpu => {
                let p = self.counters.read_lock();
                op(p.slot())
            }
            RefVariant::PercpuFast => {
                let p = self.counters.enter();
                op(p.slot())
            }
        }
    }

    /// Takes a reference the caller knows is allowed (`percpu_ref_get()`): the caller already
    /// holds one, so the count cannot be zero.
    #[inline]
    pub fn get(&self) {
        self.in_section(|s| {
            if self.load_mode(&s) == 0 {
                Self::slot_add(s.slot, 1);
            } else {
                // Relaxed like any refcount increment by a holder.
                let old = self.count.fetch_add(1, Ordering::Relaxed);
                debug_assert!(old != 0, "percpu_ref: get() on a zero reference");
            }
        })
    }

    /// Takes a reference unless the count is zero (`percpu_ref_tryget()`).
    #[inline]
    pub fn tryget(&self) -> bool {
        self.in_section(|s| {
            if self.load_mode(&s) == 0 {
                Self::slot_add(s.slot, 1);
                true
            } else {
                self.inc_not_zero()
            }
        })
    }

    /// Takes a reference unless the ref has been killed (`percpu_ref_tryget_live()`).
    ///
    /// After [`PercpuRef::kill`] has returned this always fails.
    #[inline]
    pub fn tryget_live(&self) -> bool {
        self.in_section(|s| self.tryget_live_in(s))
    }

    /// [`PercpuRef::tryget_live`] inside a section the caller entered on the ref's counter
    /// set ([`PercpuCounters::read_lock`], or [`PercpuCounters::enter`] for the fast
    /// variant): no section of its own, no thread-local lookup.
    #[inline(always)]
    pub fn tryget_live_in(&self, s: ThreadSlot<'_>) -> bool {
        let m = self.load_mode(&s);
        if m == 0 {
            Self::slot_add(s.slot, 1);
            true
        } else {
            m & DEAD == 0 && self.inc_not_zero()
        }
    }

    /// [`PercpuRef::put`] inside a section (as [`PercpuRef::tryget_live_in`]).
    #[inline(always)]
    pub fn put_in(&self, s: ThreadSlot<'_>) -> bool {
        if self.load_mode(&s) == 0 {
            Self::slot_add(s.slot, 1u64.wrapping_neg());
            false
        } else {
            self.put_atomic()
        }
    }

    #[cold]
    fn inc_not_zero(&self) -> bool {
        let mut c = self.count.load(Ordering::Relaxed);
        loop {
            if c == 0 {
                return false;
            }
            // ORDERING: Acquire on success pairs with `reinit`'s Release CAS of the count (zero
            // is final until then).
            match self
                .count
                .compare_exchange_weak(c, c + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(v) => c = v,
            }
        }
    }

    /// Drops a reference (`percpu_ref_put()`); true if it was the last one (the count is now
    /// zero and waiters were woken).
    #[inline]
    pub fn put(&self) -> bool {
        self.in_section(|s| self.put_in(s))
    }

    #[cold]
    fn put_atomic(&self) -> bool {
        // ORDERING: AcqRel: Release publishes this holder's accesses to whoever sees zero;
        // Acquire makes the one that hits zero see every other holder's accesses.
        let old = self.count.fetch_sub(1, Ordering::AcqRel);
        assert!(
            old != 0,
            "percpu_ref: put() without a reference (count underflow)"
        );
        if old == 1 {
            self.zero_reached();
            true
        } else {
            false
        }
    }

    #[cold]
    fn zero_reached(&self) {
        let mut z = self.zero.lock();
        z.events += 1;
        drop(z);
        self.zero_cv.notify_all();
    }

    /// The per-CPU mode is on: gets and puts touch only per-thread slots.
    pub fn is_percpu(&self) -> bool {
        self.mode.load(Ordering::Relaxed) == 0
    }

    /// The ref has been killed (`percpu_ref_is_dying()`).
    pub fn is_dead(&self) -> bool {
        self.mode.load(Ordering::Relaxed) & DEAD != 0
    }

    /// The ref is in atomic mode and its count is zero (`percpu_ref_is_zero()`, the futex's
    /// `futex_ref_is_dead()`).
    pub fn is_zero(&self) -> bool {
        // ORDERING: Acquire pairs with the AcqRel decrement (or fold) that reached zero.
        self.mode.load(Ordering::Acquire) & ATOMIC != 0 && self.count.load(Ordering::Acquire) == 0
    }

    /// The exact count in atomic mode; `None` in per-CPU mode (where only a fold knows it).
    pub fn count(&self) -> Option<u64> {
        let _g = self.switch_lock.lock();
        (self.mode.load(Ordering::Relaxed) & ATOMIC != 0)
            .then(|| self.count.load(Ordering::Acquire))
    }

    /// How many times the count reached zero in this ref's life (each `kill` cycle once).
    pub fn zero_events(&self) -> u64 {
        self.zero.lock().events
    }

    /// Waits for every thread that may still be on the per-thread path with the old mode.
    fn grace_period(&self) {
        #[cfg(loom)]
        if self.skip_grace_period.load(Ordering::Relaxed) {
            return;
        }
        // Both variants' per-thread paths run inside RCU sections ([`PercpuCounters::
        // read_lock`]); the fast one also inside marker sections.
        self.counters.rcu.synchronize();
        if self.variant == RefVariant::PercpuFast {
            self.counters.synchronize_markers();
        }
    }

    /// Flips to atomic mode (adding `extra` mode bits), waits a grace period and folds.
    fn switch_to_atomic_locked(&self, extra: u8) {
        let m = self.mode.load(Ordering::Relaxed);
        if m & ATOMIC != 0 {
            self.mode.store(m | extra, Ordering::Relaxed);
            // Already folded; a DEAD bit needs the grace period too, so that `tryget_live`
            // fails for everyone after `kill` returns.
            if extra & DEAD != 0 {
                self.grace_period();
            }
            return;
        }
        // ORDERING: Release pairs with the Acquire mode load of the seed variant.
        self.mode.store(ATOMIC | extra, Ordering::Release);
        self.grace_period();
        let mut base = self.counters.base.lock();
        let sum = self.counters.sum_slots();
        let delta = fold_delta(sum, *base);
        *base = sum;
        drop(base);
        // ORDERING: AcqRel: the fold may be the operation that reaches zero (like a put).
        let old = self.count.fetch_add(delta, Ordering::AcqRel);
        if old.wrapping_add(delta) == 0 {
            self.zero_reached();
        }
    }

    /// Switches to atomic mode and returns once the count is exact
    /// (`percpu_ref_switch_to_atomic_sync()`).
    pub fn switch_to_atomic_sync(&self) {
        let _st = self.switch_lock.lock();
        self.switch_to_atomic_locked(0);
    }

    /// Kills the ref: `tryget_live` fails from now on, the count becomes exact and the
    /// initial reference is dropped (`percpu_ref_kill()`; the futex's `futex_ref_drop()` and
    /// both `futex_ref_rcu()` steps, run synchronously). Returns true if that put was the last.
    pub fn kill(&self) -> Result<bool, PercpuRefError> {
        let st = self.switch_lock.lock();
        if self.mode.load(Ordering::Relaxed) & DEAD != 0 {
            return Err(PercpuRefError::AlreadyDead);
        }
        self.switch_to_atomic_locked(DEAD);
        drop(st);
        Ok(self.put_atomic())
    }

    /// Sleeps until the count is zero (`wait_var_event(.., futex_ref_is_dead())`) and that
    /// zero has been reported (counted in [`PercpuRef::zero_events`]).
    ///
    /// The put (or fold) that reaches zero decrements first and reports afterwards, under
    /// the `zero` lock; a waiter that only tested the count could see zero in between and
    /// return before the report, so that `zero_events` still showed the previous life's
    /// number (a real-thread stress test caught it, the loom model
    /// `waiter_returns_after_the_zero_report_*` shows it). The waiter therefore waits, under
    /// the same lock, for the report of the current life: every life reaches zero once, so
    /// life `n`'s zero is the `n`-th report.
    pub fn wait_for_zero(&self) {
        let mut z = self.zero.lock();
        while z.events < z.lives {
            z = self.zero_cv.wait(z);
        }
    }

    /// Back to per-CPU mode from atomic mode (`percpu_ref_switch_to_percpu()`).
    pub fn switch_to_percpu(&self) -> Result<(), PercpuRefError> {
        let _st = self.switch_lock.lock();
        let m = self.mode.load(Ordering::Relaxed);
        if m & DEAD != 0 {
            return Err(PercpuRefError::WrongState);
        }
        if m & ATOMIC == 0 {
            return Ok(());
        }
        self.count.fetch_add(BIAS, Ordering::Relaxed);
        // ORDERING: Release pairs with the Acquire mode load of the seed variant.
        self.mode.store(0, Ordering::Release);
        Ok(())
    }

    /// Re-arms a killed ref whose count reached zero: live, per-CPU, holding a new initial
    /// reference (`percpu_ref_reinit()`).
    pub fn reinit(&self) -> Result<(), PercpuRefError> {
        let _st = self.switch_lock.lock();
        if self.mode.load(Ordering::Relaxed) & DEAD == 0 {
            return Err(PercpuRefError::WrongState);
        }
        // ORDERING: Release pairs with the Acquire of `inc_not_zero`: a stale atomic-path
        // get that succeeds on the re-armed count sees the state before it.
        if self
            .count
            .compare_exchange(0, BIAS + 1, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            return Err(PercpuRefError::NotZero);
        }
        // A new life, whose zero will be the next report. (The previous life's report may
        // still be on its way: its put decremented to zero and has yet to take the lock.)
        self.zero.lock().lives += 1;
        // ORDERING: Release pairs with the Acquire mode load of the seed variant.
        self.mode.store(0, Ordering::Release);
        Ok(())
    }

    /// A reference held as a guard that puts on drop, if [`PercpuRef::tryget_live`] succeeds.
    pub fn tryget_live_guard(&self) -> Option<PercpuRefGuard<'_>> {
        self.tryget_live().then_some(PercpuRefGuard { r: self })
    }

    /// Test hook for the weakened protocol: fold without waiting for a grace period.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn weaken_skip_grace_period(&self) {
        self.skip_grace_period.store(true, Ordering::Relaxed);
    }
}

/// The single `fetch_add` operand of the fold: the per-thread total since the last fold,
/// minus the bias, modulo 2^64.
#[inline]
pub fn fold_delta(sum: u64, base: u64) -> u64 {
    sum.wrapping_sub(base).wrapping_sub(BIAS)
}

/// A reference on a [`PercpuRef`]; dropping it puts the reference.
#[derive(Debug)]
#[must_use = "dropping the guard puts the reference at once"]
pub struct PercpuRefGuard<'a> {
    r: &'a PercpuRef,
}

impl Drop for PercpuRefGuard<'_> {
    fn drop(&mut self) {
        self.r.put();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn both() -> [RefVariant; 2] {
        [RefVariant::Percpu, RefVariant::PercpuFast]
    }

    #[test]
    fn fold_arithmetic_is_modular() {
        // Per-thread slots that wrapped: +5 on one thread, -3 on another.
        let sum = 5u64.wrapping_add(3u64.wrapping_neg());
        let count = BIAS + 1; // initial reference, no atomic-path refs
        assert_eq!(count.wrapping_add(fold_delta(sum, 0)), 3);
        // A second cycle: the base removes what the first fold counted.
        let sum2 = sum.wrapping_add(7);
        assert_eq!((BIAS + 1).wrapping_add(fold_delta(sum2, sum)), 8);
        // Atomic-path puts that ran before the fold (gets were per-thread) stay above zero
        // thanks to the bias.
        let after_puts = (BIAS + 1) - 4;
        assert!(after_puts > BIAS / 2);
        assert_eq!(after_puts.wrapping_add(fold_delta(4, 0)), 1);
    }

    #[test]
    fn bias_keeps_count_nonzero_before_fold() {
        for v in both() {
            let r = PercpuRef::new(crate::mm::sync::Arc::new(Rcu::new()), v);
            assert!(r.tryget_live()); // per-thread +1
            assert!(r.count().is_none());
            r.switch_to_atomic_sync();
            assert_eq!(r.count(), Some(2));
            assert!(!r.put());
            assert!(r.put(), "this put drops the initial reference: zero");
            assert_eq!(r.count(), Some(0));
            assert!(r.is_zero());
            assert_eq!(r.zero_events(), 1);
        }
    }

    #[test]
    fn kill_wait_reinit_cycle() {
        for v in both() {
            let r = PercpuRef::new(crate::mm::sync::Arc::new(Rcu::new()), v);
            for cycle in 1..=3u64 {
                assert!(r.is_percpu());
                for _ in 0..10 {
                    assert!(r.tryget_live());
                }
                for _ in 0..9 {
                    assert!(!r.put());
                }
                assert_eq!(r.kill(), Ok(false));
                assert_eq!(r.kill(), Err(PercpuRefError::AlreadyDead));
                assert!(!r.tryget_live());
                assert!(r.tryget(), "tryget still works while the count is non-zero");
                assert!(!r.put());
                assert_eq!(r.reinit(), Err(PercpuRefError::NotZero));
                assert!(r.put());
                r.wait_for_zero();
                assert_eq!(r.zero_events(), cycle);
                assert!(!r.tryget());
                r.reinit().unwrap();
            }
        }
    }

    #[test]
    fn switch_back_to_percpu() {
        let r = PercpuRef::new(crate::mm::sync::Arc::new(Rcu::new()), RefVariant::Percpu);
        r.get();
        r.switch_to_atomic_sync();
        assert_eq!(r.count(), Some(2));
        r.switch_to_percpu().unwrap();
        assert!(r.is_percpu());
        r.put();
        r.switch_to_atomic_sync();
        assert_eq!(r.count(), Some(1));
        assert_eq!(r.kill(), Ok(true));
        assert!(r.is_zero());
        assert_eq!(r.switch_to_percpu(), Err(PercpuRefError::WrongState));
    }

    #[test]
    fn cross_thread_put_and_exited_owner() {
        for v in both() {
            let r =
                crate::mm::sync::Arc::new(PercpuRef::new(crate::mm::sync::Arc::new(Rcu::new()), v));
            // Gets on one thread, puts on another, both threads exit before the fold.
            let r1 = r.clone();
            std::thread::spawn(move || {
                for _ in 0..100 {
                    r1.get();
                }
            })
            .join()
            .unwrap();
            let r2 = r.clone();
            std::thread::spawn(move || {
                for _ in 0..60 {
                    r2.put();
                }
            })
            .join()
            .unwrap();
            assert_eq!(r.kill(), Ok(false));
            assert_eq!(r.count(), Some(40));
        }
    }
}
