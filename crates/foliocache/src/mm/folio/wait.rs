//! The hashed folio wait table (`folio_wait_table` and `folio_wait_bit_common` in
//! `mm/filemap.c`), for sleeping threads and for waiting tasks (`wait_page_queue`, the
//! kernel's entry for an `IOCB_WAITQ` read, whose wake function queues the request's retry
//! instead of waking a thread).
//!
//! A thread that needs a folio bit to clear (today `PG_locked` and `PG_writeback`) sleeps on
//! one of a few hundred buckets chosen by hashing the folio's frame number; each bucket is a
//! mutex, a condition variable, a short list of `(pfn, sleepers)` pairs and a short list of
//! task wakers by pfn. The folio's `PG_waiters` bit tells the unlocker whether anybody waits
//! at all, so an uncontended unlock is a single atomic and-not and never touches the table.
//!
//! | step | waiter (`wait_bit`, `poll_bit`) | waker (`unlock` → `wake_bit`) |
//! |---|---|---|
//! | 1 | lock bucket, register `(pfn, +1)` or `(pfn, key, waker)` | clear the bit with an RMW; old value had `PG_waiters`? |
//! | 2 | `fetch_or(PG_waiters)` | no → done (nobody registered before our RMW) |
//! | 3 | re-load the flags: bit clear → unregister, return (`Ready`) | yes → lock bucket |
//! | 4 | sleep on the condvar (atomically releases the bucket); a task returns `Pending` | threads of pfn registered → `notify_all`; take out the pfn's wakers; nobody left → clear `PG_waiters` |
//! | 5 | | release the bucket, then wake the wakers taken out |
//!
//! No lost wake-up: the waiter's `fetch_or(PG_waiters)` and the waker's clearing RMW are on
//! the same word, so one is first in its modification order. If the waiter's is first, the
//! waker sees `PG_waiters` and takes the bucket lock, which the waiter holds from step 1 until
//! it sleeps (a task: until its registration is complete), so the wake-up cannot miss it. If
//! the waker's is first, the waiter's reload in step 3 (after its own RMW on the word, by
//! read-after-write coherence) sees the bit clear and does not wait. `PG_waiters` is cleared
//! only under the bucket lock when no sleeper and no waker for that pfn is registered, so it
//! can never be lost while one waits; it may stay set spuriously (a woken waiter took the
//! lock), which costs one slow unlock later.
//!
//! A task's registration ([`TaskWait`]) is taken out by the wake-up that wakes it, or by the
//! task itself when its condition holds at a poll or its future is dropped
//! ([`WaitTable::cancel`]): an abandoned future leaves nothing behind. Wakers are woken after
//! the bucket lock is released, so a waker that runs the task inline (a minimal executor)
//! may poll again and re-register without deadlocking on the bucket.
//!
//! Sleepers of other folios hashed to the same bucket wake too and go back to sleep (the
//! kernel filters with a wake function; here the condvar is shared, which is simpler and the
//! table is large enough that collisions are rare). Wakers are filtered by pfn.

use std::task::{Context, Poll, Waker};

use crate::mm::sync::{AtomicU64, CachePadded, Condvar, Mutex, Ordering};

use super::flags::PG_WAITERS;
use super::Folio;

/// Buckets in the table: a power of two (the kernel uses 256).
#[cfg(not(loom))]
const WAIT_TABLE_BITS: u32 = 8;
#[cfg(loom)]
const WAIT_TABLE_BITS: u32 = 1;

/// A task waiting for one folio bit: its key names it in its bucket.
struct Task {
    pfn: u32,
    key: u64,
    waker: Waker,
}

/// What waits in one bucket.
#[derive(Default)]
struct Waiters {
    /// Sleeping threads by pfn: `(pfn, count)`.
    threads: Vec<(u32, u32)>,
    /// Waiting tasks, each with its own waker.
    tasks: Vec<Task>,
}

/// One bucket: the registered sleepers by pfn.
#[derive(Default)]
struct Bucket {
    waiters: Mutex<Waiters>,
    cond: Condvar,
}

/// A task's registration in the wait table, kept by the future between its polls: hand it to
/// [`WaitTable::cancel`] when the future is dropped or stops waiting.
#[derive(Debug)]
pub(crate) struct TaskWait {
    pfn: u32,
    key: u64,
}

/// The wait table of one arena.
pub(crate) struct WaitTable {
    buckets: Box<[CachePadded<Bucket>]>,
    /// The next task key.
    next_key: AtomicU64,
}

impl WaitTable {
    pub(crate) fn new() -> Self {
        let buckets = (0..1usize << WAIT_TABLE_BITS)
            .map(|_| CachePadded::new(Bucket::default()))
            .collect();
        Self {
            buckets,
            next_key: AtomicU64::new(1),
        }
    }

    fn bucket(&self, pfn: u32) -> &Bucket {
        // Fibonacci hashing of the frame number (hash_ptr in the kernel).
        let h = (pfn as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - WAIT_TABLE_BITS);
        &self.buckets[h as usize]
    }

    /// Sleeps until `bit` is clear in the folio's flags; with `take`, also sets it (the lock
    /// slow path) and returns once this thread owns it.
    #[cold]
    pub(crate) fn wait_bit(&self, folio: &Folio, bit: u64, take: bool) {
        let pfn = folio.pfn();
        let bucket = self.bucket(pfn);
        let mut waiters = bucket.waiters.lock();
        register(&mut waiters.threads, pfn);
        loop {
            if set_waiters_and_test(folio, bit, take) {
                break;
            }
            waiters = bucket.cond.wait(waiters);
        }
        unregister(&mut waiters.threads, pfn);
    }

    /// The task form of [`WaitTable::wait_bit`] without `take` (`folio_wait_bit_common` with
    /// a `wait_page_queue` entry): `Ready` once `bit` is clear in the folio's flags;
    /// otherwise registers `cx`'s waker (or refreshes the registration `slot` holds) and
    /// returns `Pending`, and the clearing of the bit wakes the task. `slot` is the future's:
    /// it holds the registration between polls and is emptied when none is left.
    #[cold]
    pub(crate) fn poll_bit(
        &self,
        folio: &Folio,
        bit: u64,
        cx: &mut Context<'_>,
        slot: &mut Option<TaskWait>,
    ) -> Poll<()> {
        self.poll_bit_inner(folio, bit, cx, slot, true)
    }

    /// The weakened registration the loom model must catch: the waker is registered but
    /// `PG_waiters` is never set, so an unlock that does not see the bit wakes nobody.
    #[cfg(loom)]
    pub(crate) fn poll_bit_unannounced(
        &self,
        folio: &Folio,
        bit: u64,
        cx: &mut Context<'_>,
        slot: &mut Option<TaskWait>,
    ) -> Poll<()> {
        self.poll_bit_inner(folio, bit, cx, slot, false)
    }

    #[inline(always)]
    fn poll_bit_inner(
        &self,
        folio: &Folio,
        bit: u64,
        cx: &mut Context<'_>,
        slot: &mut Option<TaskWait>,
        #[cfg_attr(not(loom), allow(unused_variables))] announce: bool,
    ) -> Poll<()> {
        let pfn = folio.pfn();
        if let Some(w) = slot.as_ref() {
            if w.pfn != pfn {
                // A registration on another folio (the page was refilled): drop it.
                self.cancel(slot);
            }
        }
        let bucket = self.bucket(pfn);
        let mut waiters = bucket.waiters.lock();
        // Still registered (a spurious poll): refresh the waker; else (woken, or new) add.
        let key = match slot
            .as_ref()
            .and_then(|w| waiters.tasks.iter_mut().find(|t| t.key == w.key))
        {
            Some(t) => {
                if !t.waker.will_wake(cx.waker()) {
                    t.waker = cx.waker().clone();
                }
                t.key
            }
            None => {
                let key = slot.as_ref().map_or_else(
                    // ORDERING: Relaxed; a unique number, nothing is published with it.
                    || self.next_key.fetch_add(1, Ordering::Relaxed),
                    |w| w.key,
                );
                waiters.tasks.push(Task {
                    pfn,
                    key,
                    waker: cx.waker().clone(),
                });
                key
            }
        };
        #[cfg(loom)]
        let ready = if announce {
            set_waiters_and_test(folio, bit, false)
        } else {
            // ORDERING: Acquire, as the real test; the weakened variant skips PG_waiters.
            folio.flags.load(Ordering::Acquire) & bit == 0
        };
        #[cfg(not(loom))]
        let ready = set_waiters_and_test(folio, bit, false);
        if ready {
            take_task(&mut waiters.tasks, key);
            *slot = None;
            return Poll::Ready(());
        }
        *slot = Some(TaskWait { pfn, key });
        Poll::Pending
    }

    /// Takes a task's registration out of the table (a dropped future, or one that stopped
    /// waiting): nothing is left for a later wake-up to find. Empties `slot`.
    pub(crate) fn cancel(&self, slot: &mut Option<TaskWait>) {
        if let Some(w) = slot.take() {
            let waker = take_task(&mut self.bucket(w.pfn).waiters.lock().tasks, w.key);
            // Dropped outside the bucket lock: a waker's drop may run executor code.
            drop(waker);
        }
    }

    /// Wakes the waiters of the folio after its bit was cleared while `PG_waiters` was set.
    #[cold]
    pub(crate) fn wake_bit(&self, folio: &Folio) {
        let pfn = folio.pfn();
        let bucket = self.bucket(pfn);
        let mut wake: Vec<Waker> = Vec::new();
        {
            let mut waiters = bucket.waiters.lock();
            let threads = waiters.threads.iter().any(|&(p, _)| p == pfn);
            if threads {
                bucket.cond.notify_all();
            }
            let tasks = &mut waiters.tasks;
            let mut i = 0;
            while i < tasks.len() {
                if tasks[i].pfn == pfn {
                    wake.push(tasks.swap_remove(i).waker);
                } else {
                    i += 1;
                }
            }
            if !threads {
                // Nobody is left waiting on this folio (the tasks were taken out to be woken;
                // a woken thread left, or it took the lock and left the bit behind): clear it
                // under the bucket lock, where registration happens, so a new waiter cannot
                // be missed.
                folio.flags.fetch_and(!PG_WAITERS, Ordering::Relaxed);
            }
        }
        // Outside the bucket lock: a waker may poll its task right here.
        for w in wake {
            w.wake();
        }
    }

    /// Total registered sleepers and waiting tasks (tests and `validate`).
    pub(crate) fn sleepers(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| {
                let w = b.waiters.lock();
                w.threads.iter().map(|&(_, n)| n as usize).sum::<usize>() + w.tasks.len()
            })
            .sum()
    }
}

/// Steps 2 and 3 of a wait: announce a waiter, then test the bit (and take it, with `take`).
/// True if the bit was clear (and is now this caller's, with `take`).
#[inline]
fn set_waiters_and_test(folio: &Folio, bit: u64, take: bool) -> bool {
    // ORDERING: pairs with the clearing RMW in `Folio::unlock_bit` (same word): see the module
    // docs; AcqRel so a waiter that then owns the lock sees the last holder's writes through
    // the release of that RMW.
    folio.flags.fetch_or(PG_WAITERS, Ordering::AcqRel);
    if take {
        // ORDERING: Acquire, the lock acquisition; pairs with the Release in
        // `Folio::unlock_bit`.
        folio.flags.fetch_or(bit, Ordering::Acquire) & bit == 0
    } else {
        // ORDERING: Acquire; pairs with the Release clear in `Folio::unlock_bit`, so a waiter
        // that returns sees what the holder wrote (e.g. PG_uptodate and data).
        folio.flags.load(Ordering::Acquire) & bit == 0
    }
}

fn take_task(tasks: &mut Vec<Task>, key: u64) -> Option<Waker> {
    let i = tasks.iter().position(|t| t.key == key)?;
    Some(tasks.swap_remove(i).waker)
}

fn register(list: &mut Vec<(u32, u32)>, pfn: u32) {
    match list.iter_mut().find(|(p, _)| *p == pfn) {
        Some((_, n)) => *n += 1,
        None => list.push((pfn, 1)),
    }
}

fn unregister(list: &mut Vec<(u32, u32)>, pfn: u32) {
    let i = list
        .iter()
        .position(|&(p, _)| p == pfn)
        .expect("a waiter unregisters only what it registered");
    list[i].1 -= 1;
    if list[i].1 == 0 {
        list.swap_remove(i);
    }
}
