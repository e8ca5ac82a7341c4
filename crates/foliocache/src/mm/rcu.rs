//! Userspace RCU: read sections without a shared atomic, grace periods, deferred callbacks.
//!
//! # What it models
//!
//! Linux RCU (`kernel/rcu/tree.c`: `rcu_read_lock`, `synchronize_rcu`, `call_rcu`,
//! `rcu_barrier`, `get_state_synchronize_rcu` / `poll_state_synchronize_rcu`), implemented
//! the way liburcu's "memb" flavour does it in userspace. Lock-free readers of the page-cache
//! index and of the file table (`percpu_ref`) need it: a writer unpublishes a node, waits
//! for a grace period, and only then frees it, because every reader that could still hold a
//! pointer to the node was inside a read section when the node was unpublished.
//!
//! # The scheme
//!
//! A domain ([`Rcu`]) owns a grace-period counter `gp` and a registry of reader slots, one per
//! thread that ever entered a section of the domain. A slot is one word written only by its
//! thread; it lives on its own cache line.
//!
//! | word | layout | written by |
//! |---|---|---|
//! | `gp` | `seq << 16 \| 1` (`seq` counts grace periods started) | `synchronize`, under `gp_lock` |
//! | slot | 0 = quiescent; else `seq << 16 \| nesting` (nesting 1..=65535) | its own thread only |
//! | `completed` | the `gp` value of the last grace period that ended | `synchronize` |
//!
//! - `read_lock` (outermost): copy `gp` into the slot with a plain (Relaxed) store (the copy
//!   already carries nesting 1), then a compiler fence. Nested: store `slot + 1`.
//!   `read_unlock`: store `slot - 1` with Release. No read-modify-write, no shared line
//!   written, no CPU fence on x86-64 or arm64.
//! - `synchronize`: under `gp_lock`, advance `gp` by one `seq`, then **`membarrier(2)`**
//!   (`MEMBARRIER_CMD_PRIVATE_EXPEDITED`: the kernel makes every running thread of the process
//!   execute a full barrier), then wait until every slot is quiescent or carries a `seq` at
//!   least the new one (the reader entered after the advance: a new section, not one we wait
//!   for), sleeping with exponential backoff (yield, then 20 µs doubling to 1 ms), then a
//!   second `membarrier`, then publish `completed`.
//!
//! The membarrier turns the reader's compiler fence into a full barrier exactly when it is
//! needed. The pairing is the store-buffering pattern: the writer stores "unpublished", then
//! reads the slot; the reader stores the slot, then reads the pointer. Wherever the forced
//! barrier lands in the reader's program order, either it is after the slot store (so the
//! store is visible before `membarrier` returns and the scan sees the reader active) or it is
//! before the pointer load (which then sees the unpublish). The trailing `membarrier` plus the
//! Release unlock / Acquire scan make every load of a finished section happen before whatever
//! the caller frees.
//!
//! If `membarrier` is unavailable (old kernel, seccomp), detected once per process, the
//! domain uses the **fence flavour**: the reader issues `fence(SeqCst)` after its slot store
//! and the writer `fence(SeqCst)` instead of the syscall, which is the same pattern with both
//! sides paying. Under `cfg(loom)` the fence flavour is always used, so loom checks the
//! pattern (the membarrier cannot be modelled), and under Miri too (it has no `membarrier`
//! system call). The flavour can also be forced with
//! [`Rcu::with_flavor`] (benches and tests exercise both).
//!
//! Why a counter and not just an "active" bit: a reader thread that enters sections back to
//! back would otherwise never look quiescent; with the counter, a slot whose `seq` is at
//! least the target belongs to a section that began after the unpublish and is not waited
//! for. `seq` is 48 bits: it cannot wrap in the life of a process, so one advance per grace
//! period suffices (liburcu's 32-bit phase bit needs two flips).
//!
//! # Slots and threads
//!
//! A thread finds its slot of a domain through a thread-local one-entry cache (domain id,
//! slot pointer); the first `read_lock` of a thread in a domain takes the registry lock once
//! and registers. Thread exit unregisters: a thread-local destructor marks its slots dead and
//! quiescent; the next thread to register in the domain takes over a dead slot if there is
//! one, and the next `synchronize` drops those still dead from the registry, so the registry
//! holds at most as many slots as threads were ever alive at once, plus the dead not yet
//! reused or pruned (a process that starts short-lived reader threads by the thousand and
//! rarely synchronises keeps a handful of slots, not one per thread). Domain ids are never
//! reused, so a stale cache entry can never match a new domain. Under loom a domain has a
//! fixed array of slots indexed by the model's thread number.
//!
//! # Callbacks
//!
//! [`Rcu::call_rcu`] queues a closure; a per-domain worker thread (started by the first
//! callback, sleeping on a condition variable while the queue is empty) takes the whole
//! queue as one batch, waits one grace period, and runs the batch. [`Rcu::barrier`] waits
//! until every callback queued before it has run; dropping the domain drains the queue the
//! same way, so no callback is lost. Under loom there is no worker: `barrier` runs the queue
//! inline after a grace period.
//!
//! # Grace-period cookies
//!
//! [`Rcu::get_state`] returns a [`GpState`] naming the first grace period that starts after
//! the call; [`Rcu::poll_state`] says whether it has completed (no blocking), and
//! [`Rcu::cond_synchronize`] waits only if it has not. The futex-style reference of
//! `percpu_ref` uses this to skip a grace period when one already elapsed since a table was
//! published.
//!
//! # Invariants
//!
//! 1. A slot is written only by its thread (the writer only reads it), so the read side needs
//!    no read-modify-write.
//! 2. `gp` only grows, and only under `gp_lock`; `completed <= gp` at all times.
//! 3. When `synchronize` returns, every section that was running when it was called has
//!    ended and its loads happen before the return.
//! 4. `synchronize` must not be called inside a read section of the same domain (it would
//!    wait for itself): that is a panic with a message, not a hang.
//!
//! # Why it is fast: the measurement behind the choice
//!
//! The issue asked to choose between an established crate and a scheme whose read side has no
//! shared read-modify-write. `benches/rcu.rs` (`cargo bench -p foliocache --bench rcu`)
//! measures one read section (enter + exit, one thread) on the lab machine (2 cores, x86-64,
//! kernel 6.18; criterion, middle of the confidence interval):
//!
//! | read side | ns per section |
//! |---|---|
//! | `Rcu`, membarrier flavour (this module's default) | 1.3 |
//! | `Rcu`, membarrier flavour, nested inside another section | 0.9 |
//! | `Rcu`, fence flavour (`fence(SeqCst)` = `mfence`) | 7.5 |
//! | `crossbeam_epoch::pin()` + drop (default collector) | 7.1 |
//! | `crossbeam_epoch` `LocalHandle::pin()` (own collector) | 10.9 |
//!
//! and one grace period with no reader inside: `synchronize` 0.55 µs (membarrier flavour; the
//! two `membarrier` calls dominate and grow with the CPUs running our threads), 0.07 µs
//! (fence flavour); crossbeam's `pin().flush()` 0.02 µs.
//!
//! crossbeam-epoch's pin stores the global epoch in the participant and then issues a full
//! fence (a `lock xchg`/`mfence` on x86-64) on every outermost pin; it also runs a collection
//! step every 128 pins. The membarrier scheme moves that fence to the writer, which is what
//! the page cache and the per-CPU reference want: reads by the million, grace periods by the
//! dozen: 5x cheaper reads for a grace period that costs two `membarrier` calls (IPIs to the
//! CPUs running our threads) plus the wait for readers. We therefore implement the scheme and keep
//! crossbeam-epoch only as a dev-dependency, for the comparison bench.

use crate::mm::sync::{
    compiler_fence, fence, thread, AtomicBool, AtomicU64, CachePadded, Condvar, Mutex, Ordering,
};
use std::marker::PhantomData;
use std::time::Duration;

#[cfg(not(loom))]
use crate::mm::sync::Arc;

/// Nesting count carried in the low bits of a slot (and 1 in `gp`, so the copy has it).
const NEST_ONE: u64 = 1;
/// The nesting bits of a slot.
const NEST_MASK: u64 = (1 << 16) - 1;
/// One grace-period sequence step in `gp`.
const SEQ_ONE: u64 = 1 << 16;

/// How readers and the writer of a domain are ordered (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// Reader: compiler fence only; writer: `membarrier(PRIVATE_EXPEDITED)`. Needs a kernel
    /// with membarrier (4.14+); [`Rcu::new`] picks it when available.
    Membarrier,
    /// Reader: `fence(SeqCst)` after entering; writer: `fence(SeqCst)`. Always available.
    Fence,
}

/// A grace-period cookie from [`Rcu::get_state`] (`get_state_synchronize_rcu()`'s value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpState(u64);

/// A thread's reader slot of one domain, from [`Rcu::reader`] (a pointer valid while the
/// thread lives).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reader(*const Slot);

/// One reader's word: 0 when quiescent, else `seq << 16 | nesting`.
#[derive(Debug)]
struct Slot {
    ctr: AtomicU64,
    /// Set when the owning thread exited; the registry drops dead slots.
    #[cfg_attr(loom, allow(dead_code))]
    dead: AtomicBool,
}

impl Slot {
    fn new() -> Self {
        Self {
            ctr: AtomicU64::new(0),
            dead: AtomicBool::new(false),
        }
    }
}

/// The callback queue of a domain.
struct Callbacks {
    pending: Vec<Box<dyn FnOnce() + Send + 'static>>,
    /// Callbacks ever queued.
    queued: u64,
    /// Callbacks ever run (a prefix of the queue order: batches run in order).
    done: u64,
    /// A worker thread is running (or starting).
    #[cfg_attr(loom, allow(dead_code))]
    worker: bool,
    /// The domain is being dropped: the worker drains and exits.
    #[cfg_attr(loom, allow(dead_code))]
    shutdown: bool,
}

/// Maximum model threads per domain under loom (loom allows a handful).
#[cfg(loom)]
const LOOM_SLOTS: usize = 5;

/// The shared state of a domain.
struct Inner {
    /// Never reused; keys the thread-local slot cache.
    #[cfg(not(loom))]
    id: u64,
    /// The grace-period counter, read by every outermost `read_lock`.
    gp: CachePadded<AtomicU64>,
    /// Read-mostly: whether readers must fence themselves.
    reader_fences: bool,
    flavor: Flavor,
    /// The `gp` value of the last completed grace period.
    completed: AtomicU64,
    gp_lock: Mutex<()>,
    #[cfg(not(loom))]
    registry: Mutex<Vec<Arc<CachePadded<Slot>>>>,
    #[cfg(loom)]
    slots: Vec<CachePadded<Slot>>,
    cbs: Mutex<Callbacks>,
    /// Signalled when callbacks are queued or on shutdown (the worker waits on it).
    cb_queued: Condvar,
    /// Signalled when a batch has run (`barrier` waits on it).
    cb_done: Condvar,
}

/// An RCU domain: readers, grace periods and callbacks (the kernel has one; we can have many).
///
/// Most users want [`Rcu::global`]. A separate domain isolates grace periods (a writer of one
/// domain never waits for readers of another).
pub struct Rcu {
    #[cfg(not(loom))]
    inner: Arc<Inner>,
    #[cfg(loom)]
    inner: Inner,
    #[cfg(not(loom))]
    worker: Mutex<Option<thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Rcu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rcu")
            .field("flavor", &self.inner.flavor)
            .field("gp", &(self.inner.gp.load(Ordering::Relaxed) >> 16))
            .field(
                "completed",
                &(self.inner.completed.load(Ordering::Relaxed) >> 16),
            )
            .finish()
    }
}

/// A read-side critical section of an [`Rcu`] domain (`rcu_read_lock()` .. `rcu_read_unlock()`).
///
/// Dropping it leaves the section. It is tied to the thread that entered (`!Send`), and
/// sections nest (up to 65535 deep).
#[must_use = "the read section ends when the guard is dropped"]
pub struct RcuReadGuard<'a> {
    slot: &'a Slot,
    fences: bool,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for RcuReadGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcuReadGuard")
            .field(
                "nesting",
                &(self.slot.ctr.load(Ordering::Relaxed) & NEST_MASK),
            )
            .finish()
    }
}

impl Drop for RcuReadGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        let v = self.slot.ctr.load(Ordering::Relaxed);
        debug_assert!(v & NEST_MASK != 0, "rcu: unlock without a matching lock");
        if v & NEST_MASK == NEST_ONE {
            // Leaving the outermost section. The loads of the section must not move below
            // this store: the Release covers the CPU, the compiler fence keeps the fence
            // flavour's and the membarrier flavour's codegen identical.
            compiler_fence(Ordering::SeqCst);
            // ORDERING: Release pairs with the Acquire load of the slot in `wait_for_readers`:
            // a writer that sees the slot quiescent (or past its target) sees every access of
            // the section done, so what it frees next is no longer read.
            self.slot.ctr.store(0, Ordering::Release);
        } else {
            self.slot.ctr.store(v - NEST_ONE, Ordering::Relaxed);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// membarrier detection
// ---------------------------------------------------------------------------------------------

#[cfg(not(loom))]
mod membarrier {
    //! `membarrier(2)`, registered once per process.

    /// `MEMBARRIER_CMD_QUERY`.
    const CMD_QUERY: libc::c_long = 0;
    /// `MEMBARRIER_CMD_PRIVATE_EXPEDITED`.
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    /// `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`.
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    fn call(cmd: libc::c_long) -> libc::c_long {
        // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                cmd,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        }
    }

    /// True if this process may use `PRIVATE_EXPEDITED` (registers on the first call).
    pub(super) fn available() -> bool {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *OK.get_or_init(|| {
            // Miri has no membarrier(2): the fence flavour is the one it checks.
            if cfg!(miri) || std::env::var_os("FOLIOCACHE_RCU_NO_MEMBARRIER").is_some() {
                return false;
            }
            let mask = call(CMD_QUERY);
            mask >= 0
                && mask & CMD_PRIVATE_EXPEDITED != 0
                && call(CMD_REGISTER_PRIVATE_EXPEDITED) == 0
                && call(CMD_PRIVATE_EXPEDITED) == 0
        })
    }

    /// A full barrier on every running thread of the process.
    pub(super) fn barrier() {
        let r = call(CMD_PRIVATE_EXPEDITED);
        // Registration succeeded, and the command cannot fail afterwards.
        assert_eq!(
            r, 0,
            "membarrier(PRIVATE_EXPEDITED) failed after registration"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// per-thread slots
// ---------------------------------------------------------------------------------------------

#[cfg(not(loom))]
mod slots {
    //! The thread-local registry of this thread's slots, one per domain it read in.

    use super::{Arc, CachePadded, Inner, Slot};
    use crate::mm::sync::Ordering;
    use std::cell::{Cell, RefCell};

    /// This thread's slots; dropping it (thread exit) unregisters them.
    struct Mine(Vec<(u64, Arc<CachePadded<Slot>>)>);

    impl Drop for Mine {
        fn drop(&mut self) {
            let _ = LAST.try_with(|c| c.set((0, std::ptr::null())));
            for (_, slot) in self.0.drain(..) {
                slot.ctr.store(0, Ordering::Release);
                // ORDERING: Release pairs with the Acquire load in `prune`: a writer that sees
                // the slot dead sees it quiescent.
                slot.dead.store(true, Ordering::Release);
            }
        }
    }

    std::thread_local! {
        /// (domain id, slot) of the domain this thread read in last: the fast path.
        static LAST: Cell<(u64, *const Slot)> = const { Cell::new((0, std::ptr::null())) };
        static MINE: RefCell<Mine> = const { RefCell::new(Mine(Vec::new())) };
    }

    /// This thread's slot in `inner`, registering it on first use.
    ///
    /// The slot stays valid until the thread exits (the thread-local `Mine` holds an `Arc`).
    #[inline]
    pub(super) fn get(inner: &Inner) -> *const Slot {
        let (id, slot) = LAST.with(|c| c.get());
        if id == inner.id {
            return slot;
        }
        get_slow(inner)
    }

    #[cold]
    fn get_slow(inner: &Inner) -> *const Slot {
        let slot = MINE
            .try_with(|m| {
                let mut m = m.borrow_mut();
                // Forget slots of domains that are gone (only this thread holds them).
                m.0.retain(|(_, s)| Arc::strong_count(s) > 1);
                if let Some((_, s)) = m.0.iter().find(|(id, _)| *id == inner.id) {
                    return &***s as *const Slot;
                }
                let s = claim(inner);
                let p = &**s as *const Slot;
                m.0.push((inner.id, s));
                p
            })
            .unwrap_or_else(|_| exiting_slot(inner));
        // `LAST` has no destructor: it stays usable during thread exit.
        LAST.with(|c| c.set((inner.id, slot)));
        slot
    }

    /// A slot for a thread whose registry is gone already: code running in a thread-local
    /// destructor (a cache handle kept in a `thread_local!` and dropped at thread exit). It
    /// claims a slot as any registering thread does and keeps it without a registration, so
    /// nothing marks it dead when the thread ends: one slot per such thread and domain stays
    /// in the registry (quiescent between sections, so writers never wait for it). Cached in
    /// `LAST` for the rest of the thread's exit.
    #[cold]
    fn exiting_slot(inner: &Inner) -> *const Slot {
        let s = claim(inner);
        &**s as *const Slot
    }

    /// A slot for a thread registering in `inner`: the slot of an exited thread if the
    /// registry holds one (it is quiescent and nobody else will write it), else a new one.
    ///
    /// Recycling keeps the registry as long as the most threads that were ever alive in the
    /// domain at once, plus the dead not yet reused: without it, every short-lived reader
    /// thread left its slot behind until the next grace period pruned it, and a domain whose
    /// writers rarely synchronise grew by one slot per thread it ever saw. A writer scanning
    /// a slot that changes hands meanwhile sees a quiescent word or the new owner's section,
    /// which copied a `gp` at least as new as the writer's target, exactly as for a live
    /// thread's slot.
    fn claim(inner: &Inner) -> Arc<CachePadded<Slot>> {
        let mut reg = inner.registry.lock();
        // ORDERING: Acquire pairs with the Release of `dead` in `Mine::drop`: the exited
        // thread's last store to `ctr` (quiescent) happens before the new owner's first.
        if let Some(s) = reg.iter().find(|s| s.dead.load(Ordering::Acquire)) {
            // Relaxed: the flag is read and written only under the registry lock from here
            // on (the exited owner wrote it last, ordered by the Acquire above).
            s.dead.store(false, Ordering::Relaxed);
            return s.clone();
        }
        let s = Arc::new(CachePadded::new(Slot::new()));
        reg.push(s.clone());
        s
    }
}

impl Inner {
    fn new(flavor: Flavor) -> Self {
        #[cfg(not(loom))]
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self {
            #[cfg(not(loom))]
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            gp: CachePadded::new(AtomicU64::new(NEST_ONE)),
            reader_fences: flavor == Flavor::Fence,
            flavor,
            completed: AtomicU64::new(NEST_ONE),
            gp_lock: Mutex::new(()),
            #[cfg(not(loom))]
            registry: Mutex::new(Vec::new()),
            #[cfg(loom)]
            slots: (0..LOOM_SLOTS)
                .map(|_| CachePadded::new(Slot::new()))
                .collect(),
            cbs: Mutex::new(Callbacks {
                pending: Vec::new(),
                queued: 0,
                done: 0,
                worker: false,
                shutdown: false,
            }),
            cb_queued: Condvar::new(),
            cb_done: Condvar::new(),
        }
    }

    /// The calling thread's slot.
    #[inline]
    fn my_slot(&self) -> &Slot {
        #[cfg(not(loom))]
        {
            // SAFETY: the slot is kept alive by this thread's thread-local registration until
            // the thread exits, which outlives any borrow of `self` taken on this thread
            // (guards are !Send).
            unsafe { &*slots::get(self) }
        }
        #[cfg(loom)]
        {
            let n = crate::mm::sync::thread_number();
            assert!(n < LOOM_SLOTS, "rcu: too many loom threads");
            &self.slots[n]
        }
    }

    /// The full barrier the writer issues around its scan (`smp_mb_master()`).
    fn writer_barrier(&self) {
        #[cfg(not(loom))]
        if self.flavor == Flavor::Membarrier {
            membarrier::barrier();
            return;
        }
        // ORDERING: pairs with the reader's `fence(SeqCst)` in `read_lock` (fence flavour):
        // store-buffering, so either the scan sees the reader's slot store or the reader's
        // loads see what the writer stored before this fence.
        fence(Ordering::SeqCst);
    }

    fn synchronize(&self) {
        let me = self.my_slot();
        assert!(
            me.ctr.load(Ordering::Relaxed) & NEST_MASK == 0,
            "rcu: synchronize() inside a read section of the same domain would wait for itself; \
             leave the section (drop the RcuReadGuard) first"
        );
        let _g = self.gp_lock.lock();
        let target = self.gp.load(Ordering::Relaxed) + SEQ_ONE;
        self.gp.store(target, Ordering::Relaxed);
        // Orders the caller's unpublish (and the advance) before the scan.
        self.writer_barrier();
        self.wait_for_readers(target);
        self.writer_barrier();
        // ORDERING: Release pairs with the Acquire in `poll_state`: a poller that sees the
        // grace period completed sees the readers' sections finished.
        self.completed.store(target, Ordering::Release);
    }

    /// Waits until every slot is quiescent or entered at `target` or later.
    fn wait_for_readers(&self, target: u64) {
        let is_old = |v: u64| v & NEST_MASK != 0 && (v & !NEST_MASK) < (target & !NEST_MASK);
        let wait = |slot: &Slot| {
            let mut spins = 0u32;
            let mut nap = Duration::from_micros(20);
            // ORDERING: Acquire pairs with the Release store of `RcuReadGuard::drop` (and of
            // thread exit): once the slot reads quiescent, the section's accesses are done.
            while is_old(slot.ctr.load(Ordering::Acquire)) {
                if spins < 8 {
                    spins += 1;
                    thread::yield_now();
                } else {
                    thread::sleep(nap);
                    nap = (nap * 2).min(Duration::from_millis(1));
                }
            }
        };
        #[cfg(not(loom))]
        {
            let slots: Vec<Arc<CachePadded<Slot>>> = {
                let mut reg = self.registry.lock();
                // ORDERING: Acquire pairs with the Release of `dead` at thread exit.
                reg.retain(|s| !s.dead.load(Ordering::Acquire));
                reg.clone()
            };
            for s in &slots {
                wait(s);
            }
        }
        #[cfg(loom)]
        for s in &self.slots {
            wait(s);
        }
    }

    /// Takes and runs every pending callback after a grace period, inline, until none is
    /// left (a callback may queue another).
    fn run_pending_inline(&self) {
        loop {
            let (batch, upto) = {
                let mut q = self.cbs.lock();
                (std::mem::take(&mut q.pending), q.queued)
            };
            if !batch.is_empty() {
                self.synchronize();
                for f in batch {
                    f();
                }
            }
            let mut q = self.cbs.lock();
            q.done = q.done.max(upto);
            let more = !q.pending.is_empty();
            drop(q);
            self.cb_done.notify_all();
            if !more {
                return;
            }
        }
    }
}

impl Default for Rcu {
    fn default() -> Self {
        Self::new()
    }
}

impl Rcu {
    /// Creates a domain with the best flavour available (`membarrier` if the kernel has it).
    pub fn new() -> Self {
        #[cfg(not(loom))]
        let flavor = if membarrier::available() {
            Flavor::Membarrier
        } else {
            Flavor::Fence
        };
        #[cfg(loom)]
        let flavor = Flavor::Fence;
        Self::with_flavor(flavor)
    }

    /// Creates a domain with the given flavour; [`Flavor::Membarrier`] falls back to
    /// [`Flavor::Fence`] if the kernel lacks `membarrier` (and always under loom).
    pub fn with_flavor(flavor: Flavor) -> Self {
        #[cfg(not(loom))]
        let flavor = if flavor == Flavor::Membarrier && !membarrier::available() {
            Flavor::Fence
        } else {
            flavor
        };
        #[cfg(loom)]
        let flavor = {
            let _ = flavor;
            Flavor::Fence
        };
        Self {
            #[cfg(not(loom))]
            inner: Arc::new(Inner::new(flavor)),
            #[cfg(loom)]
            inner: Inner::new(flavor),
            #[cfg(not(loom))]
            worker: Mutex::new(None),
        }
    }

    /// The process-wide domain (the kernel's one RCU), created on first use.
    #[cfg(not(loom))]
    pub fn global() -> &'static Rcu {
        static GLOBAL: std::sync::OnceLock<Rcu> = std::sync::OnceLock::new();
        GLOBAL.get_or_init(Rcu::new)
    }

    /// The flavour this domain runs.
    pub fn flavor(&self) -> Flavor {
        self.inner.flavor
    }

    /// The writer-side barrier of this domain's flavour (`smp_mb_master()`): `membarrier` or
    /// `fence(SeqCst)`. For protocols that embed their own reader marker (`percpu_ref`'s
    /// fast variant) and pair it with the reader's compiler fence (membarrier flavour) or
    /// `fence(SeqCst)` (fence flavour).
    pub(crate) fn writer_barrier(&self) {
        self.inner.writer_barrier();
    }

    /// Enters a read-side critical section (`rcu_read_lock()`); the guard's drop leaves it.
    ///
    /// Wait-free: a thread-local lookup, one load of the domain's counter and one store to
    /// this thread's own slot (plus `fence(SeqCst)` in the fence flavour).
    #[inline]
    pub fn read_lock(&self) -> RcuReadGuard<'_> {
        let slot = self.inner.my_slot();
        self.read_lock_on(slot)
    }

    /// This thread's reader slot of the domain, for a caller that caches it next to its own
    /// per-thread state (`percpu_ref`'s counters) and enters sections with
    /// [`Rcu::read_lock_reader`] without a second thread-local lookup.
    #[inline]
    pub(crate) fn reader(&self) -> Reader {
        Reader(self.inner.my_slot() as *const Slot)
    }

    /// [`Rcu::read_lock`] on a slot from [`Rcu::reader`].
    ///
    /// # Safety
    ///
    /// `r` came from `self.reader()` on the calling thread, and the thread has not exited
    /// since (its registration keeps the slot alive).
    #[inline]
    pub(crate) unsafe fn read_lock_reader(&self, r: Reader) -> RcuReadGuard<'_> {
        // SAFETY: by the caller's contract the slot is this thread's slot of this domain,
        // alive while the thread lives (hence for the guard's life: guards are !Send).
        let slot = unsafe { &*r.0 };
        self.read_lock_on(slot)
    }

    #[inline(always)]
    fn read_lock_on<'a>(&'a self, slot: &'a Slot) -> RcuReadGuard<'a> {
        let inner: &Inner = &self.inner;
        let v = slot.ctr.load(Ordering::Relaxed);
        if v & NEST_MASK == 0 {
            slot.ctr
                .store(inner.gp.load(Ordering::Relaxed), Ordering::Relaxed);
            if inner.reader_fences {
                // ORDERING: pairs with `writer_barrier`'s fence (fence flavour): the slot
                // store is ordered before every load of the section.
                fence(Ordering::SeqCst);
            } else {
                // The writer's membarrier supplies the CPU barrier; only the compiler must
                // not hoist the section's loads above the slot store.
                compiler_fence(Ordering::SeqCst);
            }
        } else {
            assert!(
                v & NEST_MASK != NEST_MASK,
                "rcu: read sections nested more than 65535 deep"
            );
            slot.ctr.store(v + NEST_ONE, Ordering::Relaxed);
        }
        RcuReadGuard {
            slot,
            fences: inner.reader_fences,
            _not_send: PhantomData,
        }
    }

    /// A deliberately broken `read_lock` without the reader's fence, for the loom model that
    /// must catch it (`src/loom_tests/rcu.rs`). Never use it elsewhere.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn read_lock_without_fence(&self) -> RcuReadGuard<'_> {
        let inner: &Inner = &self.inner;
        let slot = inner.my_slot();
        slot.ctr
            .store(inner.gp.load(Ordering::Relaxed), Ordering::Relaxed);
        RcuReadGuard {
            slot,
            fences: false,
            _not_send: PhantomData,
        }
    }

    /// True if the calling thread is inside a read section of this domain
    /// (`rcu_read_lock_held()`), for assertions.
    pub fn read_lock_held(&self) -> bool {
        self.inner.my_slot().ctr.load(Ordering::Relaxed) & NEST_MASK != 0
    }

    /// Waits for a grace period (`synchronize_rcu()`): returns after every read section that
    /// was running when it was called has ended.
    ///
    /// Sleeps while readers are inside (it does not burn a core). Panics if called inside a
    /// read section of the same domain.
    pub fn synchronize(&self) {
        self.inner.synchronize();
    }

    /// A cookie for the first grace period starting after this call
    /// (`get_state_synchronize_rcu()`).
    pub fn get_state(&self) -> GpState {
        // ORDERING: orders the caller's unpublish before the read of `gp`; pairs with the
        // writer's barriers in `synchronize` (a grace period that advances `gp` past what we
        // read starts after this fence and therefore waits for the sections that could have
        // seen the old pointer).
        fence(Ordering::SeqCst);
        GpState(self.inner.gp.load(Ordering::Relaxed) + SEQ_ONE)
    }

    /// True if the grace period named by `state` has completed
    /// (`poll_state_synchronize_rcu()`); never blocks.
    pub fn poll_state(&self, state: GpState) -> bool {
        // ORDERING: Acquire pairs with the Release store of `completed` in `synchronize`.
        self.inner.completed.load(Ordering::Acquire) >= state.0
    }

    /// Waits for a grace period only if the one named by `state` has not completed
    /// (`cond_synchronize_rcu()`).
    pub fn cond_synchronize(&self, state: GpState) {
        if !self.poll_state(state) {
            self.synchronize();
        }
    }

    /// Queues `f` to run after a grace period (`call_rcu()`).
    ///
    /// Callbacks run on the domain's worker thread, in batches, in queue order. A callback
    /// must not call [`Rcu::barrier`] of its own domain (it would wait for itself); it may
    /// queue more callbacks. A panicking callback aborts the process (callbacks usually free
    /// memory; half-run batches cannot be recovered).
    pub fn call_rcu(&self, f: impl FnOnce() + Send + 'static) {
        let mut q = self.inner.cbs.lock();
        // During the drop's drain (a callback queueing another) the worker or the final
        // inline drain still runs it.
        q.pending.push(Box::new(f));
        q.queued += 1;
        #[cfg(not(loom))]
        if !q.worker && !q.shutdown {
            q.worker = true;
            drop(q);
            self.start_worker();
            return;
        }
        drop(q);
        self.inner.cb_queued.notify_one();
    }

    #[cfg(not(loom))]
    #[cold]
    fn start_worker(&self) {
        let inner = Arc::clone(&self.inner);
        let h = thread::Builder::new()
            .name("rcu-callbacks".into())
            .spawn(move || worker(&inner))
            .expect("rcu: cannot spawn the callback thread");
        *self.worker.lock() = Some(h);
    }

    /// Waits until every callback queued before the call has run (`rcu_barrier()`).
    pub fn barrier(&self) {
        #[cfg(loom)]
        {
            self.inner.run_pending_inline();
        }
        #[cfg(not(loom))]
        {
            let mut q = self.inner.cbs.lock();
            let target = q.queued;
            if !q.worker {
                drop(q);
                self.inner.run_pending_inline();
                return;
            }
            while q.done < target {
                q = self.inner.cb_done.wait(q);
            }
        }
    }

    /// Callbacks queued and not yet run.
    pub fn pending_callbacks(&self) -> u64 {
        let q = self.inner.cbs.lock();
        q.queued - q.done
    }
}

/// The callback thread: one grace period per batch.
#[cfg(not(loom))]
fn worker(inner: &Inner) {
    loop {
        let (batch, upto) = {
            let mut q = inner.cbs.lock();
            while q.pending.is_empty() && !q.shutdown {
                q = inner.cb_queued.wait(q);
            }
            if q.pending.is_empty() {
                q.worker = false;
                return;
            }
            (std::mem::take(&mut q.pending), q.queued)
        };
        inner.synchronize();
        for f in batch {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
                eprintln!("rcu: a call_rcu callback panicked; aborting");
                std::process::abort();
            }
        }
        inner.cbs.lock().done = upto;
        inner.cb_done.notify_all();
    }
}

impl Drop for Rcu {
    fn drop(&mut self) {
        #[cfg(not(loom))]
        {
            self.inner.cbs.lock().shutdown = true;
            self.inner.cb_queued.notify_all();
            if let Some(h) = self.worker.lock().take() {
                // The worker drains the queue before it exits. If the last handle is dropped
                // by a callback on the worker itself, it must not wait for itself: it exits
                // after this batch, having seen `shutdown`.
                if h.thread().id() != thread::current().id() {
                    let _ = h.join();
                }
            }
        }
        // Anything left (no worker was started, or loom).
        self.inner.run_pending_inline();
    }
}

impl RcuReadGuard<'_> {
    /// Whether this section's domain uses reader-side fences (the fence flavour).
    pub fn fences(&self) -> bool {
        self.fences
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mm::sync::{Arc, AtomicUsize};

    #[test]
    fn nesting_and_quiescence() {
        let rcu = Rcu::new();
        assert!(!rcu.read_lock_held());
        let a = rcu.read_lock();
        let b = rcu.read_lock();
        assert!(rcu.read_lock_held());
        drop(b);
        assert!(rcu.read_lock_held());
        drop(a);
        assert!(!rcu.read_lock_held());
        rcu.synchronize();
    }

    #[test]
    #[should_panic(expected = "would wait for itself")]
    fn synchronize_inside_a_section_panics() {
        let rcu = Rcu::new();
        let _g = rcu.read_lock();
        rcu.synchronize();
    }

    #[test]
    fn synchronize_waits_for_a_reader() {
        for flavor in [Flavor::Membarrier, Flavor::Fence] {
            let rcu = Arc::new(Rcu::with_flavor(flavor));
            let inside = Arc::new(AtomicBool::new(false));
            let leave = Arc::new(AtomicBool::new(false));
            let (r2, i2, l2) = (rcu.clone(), inside.clone(), leave.clone());
            let t = std::thread::spawn(move || {
                let _g = r2.read_lock();
                i2.store(true, Ordering::SeqCst);
                while !l2.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
            });
            while !inside.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            let done = Arc::new(AtomicBool::new(false));
            let (r3, d3) = (rcu.clone(), done.clone());
            let w = std::thread::spawn(move || {
                r3.synchronize();
                d3.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(Duration::from_millis(20));
            assert!(
                !done.load(Ordering::SeqCst),
                "grace period ended under a reader"
            );
            leave.store(true, Ordering::SeqCst);
            w.join().unwrap();
            t.join().unwrap();
            assert!(done.load(Ordering::SeqCst));
        }
    }

    #[test]
    fn exited_threads_do_not_block_grace_periods() {
        let rcu = Arc::new(Rcu::new());
        for _ in 0..4 {
            let r = rcu.clone();
            std::thread::spawn(move || drop(r.read_lock()))
                .join()
                .unwrap();
        }
        rcu.synchronize();
        // Only the calling thread (registered by `synchronize`) is left.
        assert_eq!(rcu.inner.registry.lock().len(), 1, "dead slots pruned");
    }

    #[test]
    fn exited_threads_slots_are_reused_by_new_threads() {
        // Regression: each short-lived reader thread left a ~435-byte slot in the registry
        // until a grace period pruned it; a domain that never synchronised grew without bound.
        let rcu = Arc::new(Rcu::new());
        // Fewer under Miri, which interprets every thread's start and exit.
        let threads = if cfg!(miri) { 50 } else { 10_000 };
        for _ in 0..threads {
            let r = rcu.clone();
            std::thread::spawn(move || drop(r.read_lock()))
                .join()
                .unwrap();
        }
        let n = rcu.inner.registry.lock().len();
        assert!(n <= 2, "{n} slots left by {threads} sequential threads");
        // Two threads alive at once never share a slot.
        let a = Arc::new(std::sync::Barrier::new(2));
        let ptrs: Vec<usize> = (0..2)
            .map(|_| {
                let (r, a) = (rcu.clone(), a.clone());
                std::thread::spawn(move || {
                    let g = r.read_lock();
                    let p = r.inner.my_slot() as *const Slot as usize;
                    a.wait();
                    drop(g);
                    a.wait();
                    p
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert_ne!(ptrs[0], ptrs[1]);
        rcu.synchronize();
    }

    #[test]
    fn cookies() {
        let rcu = Rcu::new();
        let s = rcu.get_state();
        assert!(!rcu.poll_state(s));
        rcu.synchronize();
        assert!(rcu.poll_state(s));
        let s2 = rcu.get_state();
        assert!(s2 > s && !rcu.poll_state(s2));
        rcu.cond_synchronize(s2);
        assert!(rcu.poll_state(s2));
    }

    #[test]
    fn callbacks_run_after_barrier_and_on_drop() {
        let rcu = Rcu::new();
        let n = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            let n = n.clone();
            rcu.call_rcu(move || {
                n.fetch_add(1, Ordering::Relaxed);
            });
        }
        rcu.barrier();
        assert_eq!(n.load(Ordering::Relaxed), 100);
        assert_eq!(rcu.pending_callbacks(), 0);
        for _ in 0..10 {
            let n = n.clone();
            rcu.call_rcu(move || {
                n.fetch_add(1, Ordering::Relaxed);
            });
        }
        drop(rcu);
        assert_eq!(n.load(Ordering::Relaxed), 110);
    }

    #[test]
    fn callback_waits_for_reader() {
        let rcu = Arc::new(Rcu::new());
        let ran = Arc::new(AtomicBool::new(false));
        let g = rcu.read_lock();
        let r2 = ran.clone();
        rcu.call_rcu(move || r2.store(true, Ordering::SeqCst));
        std::thread::sleep(Duration::from_millis(10));
        assert!(!ran.load(Ordering::SeqCst));
        drop(g);
        rcu.barrier();
        assert!(ran.load(Ordering::SeqCst));
    }
}
