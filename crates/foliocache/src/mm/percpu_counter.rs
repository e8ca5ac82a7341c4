//! A counter split over CPU slots, read approximately for free and exactly near a limit
//! (`lib/percpu_counter.c`), and a limit on it that a caller may wait under.
//!
//! # What it models
//!
//! The kernel counts things that change on every CPU all the time (free blocks of a file
//! system, dirty pages of a memory cgroup, the pages a process has locked) with a
//! `percpu_counter`: each CPU adds into its own slot and only folds its slot into the shared
//! total when the slot's value reaches a batch (`percpu_counter_add_batch`), so an update
//! writes a line its CPU owns and the shared line is written once per batch. The total read
//! alone (`percpu_counter_read`) is off by at most `batch` per CPU; a caller that compares the
//! counter with a limit (`__percpu_counter_compare`) uses the cheap read when it is further
//! from the limit than that error can be, and sums every slot under the counter's lock only
//! near it (`__percpu_counter_sum`).
//!
//! | kernel | here |
//! |---|---|
//! | `percpu_counter_add_batch` | [`PercpuCounter::add`] |
//! | `percpu_counter_read` | [`PercpuCounter::read`] |
//! | `__percpu_counter_sum` | [`PercpuCounter::sum`] |
//! | `__percpu_counter_compare` | [`PercpuCounter::within`] |
//! | `percpu_counter_limited_add` (6.9) | [`Limit::try_charge`] |
//!
//! [`Limit`] adds to it what a cache needs for its pinned pages: a limit a charge may not
//! pass, and a wait (with a timeout) for uncharges when it would.
//!
//! # The protocol
//!
//! - A slot is an atomic, chosen by [`current_cpu`]; a thread that migrates between reading
//!   its CPU and adding merely adds to another CPU's slot (contention, not a lost update).
//! - A fold (a slot's value moved into the total) and an exact sum both hold the counter's
//!   lock, so a sum never sees a value on its way from a slot to the total (in neither place,
//!   or in both).
//! - A charge adds first and checks after ("add, then compare", as
//!   `percpu_counter_limited_add` does under its lock): two charges racing for the last page
//!   each see the other's increment in their exact sum (SeqCst increments and sum loads: a
//!   store-load pattern), so at most one of them passes; both may fail, and the loser's
//!   uncharge wakes any waiter (whose own failure may have been caused by the loser's passing
//!   increment). Waiters re-check under the wait lock, one at a time, so a waiter's failed
//!   check is never what failed another's, and gives its units back without a wake-up.
//! - The cheap check passes a charge only if the total plus the largest error the slots can
//!   hide (`batch` per slot) is within the limit. A slot holds more than `batch` only while
//!   threads sharing it are between their increment and its fold, so the limit can be passed
//!   by at most one page per thread charging at that instant ([`Limit::slack`] documents the
//!   bound the stress test checks).
//! - A waiter registers (`waiters`, SeqCst) and re-checks under the wait lock before it
//!   sleeps; an uncharge decrements (SeqCst) and then looks at `waiters` (SeqCst), taking
//!   the wait lock to notify if there is one. Either the uncharger sees the waiter, and its
//!   notification cannot fall between the waiter's check and its sleep (the lock), or the
//!   waiter's registration comes after the uncharger's look, and then its check sees the
//!   decrement. The loom model `loom_tests::percpu_counter` checks it with a weakened variant
//!   (looking at `waiters` before decrementing) that loses the wake-up.

use crate::mm::sync::{
    current_cpu, num_cpus, AtomicBool, AtomicI64, AtomicUsize, CachePadded, Condvar, Mutex,
    Ordering,
};

/// A counter with one slot per CPU folded into a total every `batch` (`struct percpu_counter`).
pub struct PercpuCounter {
    /// The folded total (`fbc->count`).
    total: CachePadded<AtomicI64>,
    /// One slot per CPU (`fbc->counters`).
    slots: Box<[CachePadded<AtomicI64>]>,
    /// A slot folds when its value reaches `batch` either way.
    batch: i64,
    /// Held by folds and exact sums (`fbc->lock`).
    lock: Mutex<()>,
}

impl std::fmt::Debug for PercpuCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PercpuCounter")
            .field("read", &self.read())
            .field("slots", &self.slots.len())
            .field("batch", &self.batch)
            .finish()
    }
}

impl PercpuCounter {
    /// `percpu_counter_init` with the kernel's default batch (`percpu_counter_batch`:
    /// `max(32, 2 * CPUs)`), one slot per CPU.
    pub fn new() -> PercpuCounter {
        PercpuCounter::with_batch(num_cpus(), (2 * num_cpus() as i64).max(32))
    }

    /// A counter with `slots` slots (at least one) folding every `batch` (at least one).
    pub fn with_batch(slots: usize, batch: i64) -> PercpuCounter {
        PercpuCounter {
            total: CachePadded::new(AtomicI64::new(0)),
            slots: (0..slots.max(1))
                .map(|_| CachePadded::new(AtomicI64::new(0)))
                .collect(),
            batch: batch.max(1),
            lock: Mutex::new(()),
        }
    }

    /// `percpu_counter_add_batch`: adds `n` to this CPU's slot, folding the slot into the
    /// total when it reaches the batch.
    #[inline]
    pub fn add(&self, n: i64) {
        let slot = &self.slots[current_cpu() % self.slots.len()];
        // ORDERING: SeqCst; the store half of the store-load pattern with the exact sum of a
        // charge or a waiter's re-check (`Limit` in the module docs): a racing sum sees this
        // increment or its own thread's increment is seen by ours.
        let v = slot.fetch_add(n, Ordering::SeqCst) + n;
        if v.abs() >= self.batch {
            self.fold(slot);
        }
    }

    /// Moves `slot`'s value into the total, under the lock (so an exact sum never misses it).
    #[cold]
    fn fold(&self, slot: &AtomicI64) {
        let _g = self.lock.lock();
        // ORDERING: SeqCst, as in `add`: the value leaves the slot and enters the total
        // inside one lock hold, which `sum` also takes.
        let v = slot.swap(0, Ordering::SeqCst);
        self.total.fetch_add(v, Ordering::SeqCst);
    }

    /// `percpu_counter_read`: the folded total, off by at most [`PercpuCounter::max_error`]
    /// (plus what charges in flight add).
    #[inline]
    pub fn read(&self) -> i64 {
        // ORDERING: SeqCst; a load in the same total order as the increments (see `add`).
        self.total.load(Ordering::SeqCst)
    }

    /// `__percpu_counter_sum`: the exact value, under the lock.
    #[cold]
    pub fn sum(&self) -> i64 {
        let _g = self.lock.lock();
        // ORDERING: SeqCst loads, the load half of the pattern in `add`.
        self.read()
            + self
                .slots
                .iter()
                .map(|s| s.load(Ordering::SeqCst))
                .sum::<i64>()
    }

    /// The most the slots can hide from [`PercpuCounter::read`] (`batch` per slot).
    pub fn max_error(&self) -> i64 {
        self.batch * self.slots.len() as i64
    }

    /// `__percpu_counter_compare` against `limit`: whether the value is at most `limit`,
    /// from the cheap read when it is further from `limit` than the slots can hide, from the
    /// exact sum otherwise.
    #[inline]
    pub fn within(&self, limit: i64) -> bool {
        if self.read() + self.max_error() <= limit {
            return true;
        }
        self.sum() <= limit
    }
}

impl Default for PercpuCounter {
    fn default() -> Self {
        PercpuCounter::new()
    }
}

/// A [`PercpuCounter`] of charged units (a cache's pinned pages) under a limit that may change:
/// a charge that would pass the limit fails, or waits for uncharges.
#[derive(Debug)]
pub struct Limit {
    count: PercpuCounter,
    limit: AtomicI64,
    /// Threads waiting in [`Limit::charge`].
    waiters: AtomicUsize,
    wait_lock: Mutex<()>,
    wake: Condvar,
    /// The loom models' weakened uncharge (see [`Limit::weaken`]).
    weakened: AtomicBool,
}

impl Limit {
    /// A limit of `limit` units, nothing charged.
    pub fn new(limit: u64) -> Limit {
        Limit::with_counter(limit, PercpuCounter::new())
    }

    /// A limit over a counter of the caller's shape (small batches for tests and models).
    pub fn with_counter(limit: u64, count: PercpuCounter) -> Limit {
        Limit {
            count,
            limit: AtomicI64::new(limit as i64),
            waiters: AtomicUsize::new(0),
            wait_lock: Mutex::new(()),
            wake: Condvar::new(),
            weakened: AtomicBool::new(false),
        }
    }

    /// The limit now.
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed) as u64
    }

    /// Changes the limit (charges above a lowered limit stay; new ones wait or fail). A
    /// raised limit wakes the waiters.
    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit as i64, Ordering::Relaxed);
        self.wake_waiters();
    }

    /// How far past the limit concurrent charges can take the count: one unit per thread
    /// charging at the same instant (module docs). A bound for tests and documentation.
    pub fn slack(threads: usize) -> u64 {
        threads as u64
    }

    /// The units charged now (exact; takes the counter's lock).
    pub fn charged(&self) -> u64 {
        self.count.sum().max(0) as u64
    }

    /// Charges `n` units if the count stays within the limit (`percpu_counter_limited_add`).
    #[inline]
    pub fn try_charge(&self, n: u64) -> bool {
        self.count.add(n as i64);
        if self.count.within(self.limit.load(Ordering::Relaxed)) {
            return true;
        }
        self.uncharge(n);
        false
    }

    /// Charges `n` units whatever the limit (a guard found to hold more pages than it was
    /// charged for).
    pub fn charge_unchecked(&self, n: u64) {
        self.count.add(n as i64);
    }

    /// Charges `n` units, waiting up to `timeout` for uncharges if the limit is reached.
    /// Returns false if the time ran out (nothing charged).
    pub fn charge(&self, n: u64, timeout: std::time::Duration) -> bool {
        if self.try_charge(n) {
            return true;
        }
        if timeout.is_zero() {
            return false;
        }
        self.charge_slow(n, timeout)
    }

    #[cold]
    fn charge_slow(&self, n: u64, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        // ORDERING: SeqCst; pairs with the load of `waiters` in `uncharge` (module docs).
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = self.wait_lock.lock();
        let ok = loop {
            // Waiters check under the wait lock, so one waiter's failed charge cannot be what
            // made another's fail: it gives its units back without a wake-up (which would
            // take the lock we hold, and wake the others only to fail again).
            self.count.add(n as i64);
            if self.count.within(self.limit.load(Ordering::Relaxed)) {
                break true;
            }
            self.count.add(-(n as i64));
            let now = std::time::Instant::now();
            if now >= deadline {
                break false;
            }
            g = self.wake.wait_timeout(g, deadline - now).0;
        };
        drop(g);
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        ok
    }

    /// Gives back `n` units and wakes the waiters, if any.
    #[inline]
    pub fn uncharge(&self, n: u64) {
        if self.weakened.load(Ordering::Relaxed) {
            return self.uncharge_weakened(n);
        }
        self.count.add(-(n as i64));
        // ORDERING: SeqCst; after the SeqCst decrement in `add`, against the waiter's SeqCst
        // registration in `charge_slow`: we see the waiter, or its re-check sees our decrement.
        if self.waiters.load(Ordering::SeqCst) != 0 {
            self.wake_waiters();
        }
    }

    /// The broken order: looks for waiters before decrementing, so a waiter that registers and
    /// re-checks in between sleeps through the decrement.
    #[cold]
    fn uncharge_weakened(&self, n: u64) {
        // ORDERING: SeqCst, as in `uncharge`, but before the decrement: the broken order.
        let waiters = self.waiters.load(Ordering::SeqCst);
        self.count.add(-(n as i64));
        if waiters != 0 {
            self.wake_waiters();
        }
    }

    #[cold]
    fn wake_waiters(&self) {
        let _g = self.wait_lock.lock();
        self.wake.notify_all();
    }

    /// Selects the weakened uncharge, for the loom model that must catch it. Never in
    /// production code.
    #[doc(hidden)]
    pub fn weaken(&self) {
        self.weakened.store(true, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_counter_folds_every_batch_and_sums_exactly() {
        let c = PercpuCounter::with_batch(4, 8);
        for _ in 0..7 {
            c.add(1);
        }
        assert_eq!(c.sum(), 7);
        c.add(1);
        assert_eq!(c.sum(), 8);
        assert!(c.read() <= 8);
        c.add(-8);
        assert_eq!(c.sum(), 0);
        assert!(
            c.within(0)
                && !{
                    c.add(1);
                    c.within(0)
                }
        );
    }

    #[test]
    fn a_charge_past_the_limit_fails_and_an_uncharge_lets_it_pass() {
        let l = Limit::with_counter(3, PercpuCounter::with_batch(2, 2));
        assert!(l.try_charge(2) && l.try_charge(1));
        assert!(!l.try_charge(1), "the fourth unit is over the limit");
        assert_eq!(l.charged(), 3, "a failed charge leaves nothing behind");
        l.uncharge(1);
        assert!(l.try_charge(1));
        l.set_limit(5);
        assert!(l.try_charge(2));
        assert!(!l.charge(1, Duration::from_millis(20)), "times out");
        l.uncharge(5);
        assert_eq!(l.charged(), 0);
    }

    #[test]
    fn a_waiter_is_woken_by_an_uncharge() {
        let l = Arc::new(Limit::with_counter(1, PercpuCounter::with_batch(2, 1)));
        assert!(l.try_charge(1));
        let l2 = l.clone();
        let t = std::thread::spawn(move || l2.charge(1, Duration::from_secs(30)));
        // ORDERING: SeqCst, as in `uncharge`; a test's wait for the waiter to register.
        while l.waiters.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let start = std::time::Instant::now();
        l.uncharge(1);
        assert!(t.join().unwrap());
        assert!(start.elapsed() < Duration::from_secs(10));
        assert_eq!(l.charged(), 1);
    }
}
