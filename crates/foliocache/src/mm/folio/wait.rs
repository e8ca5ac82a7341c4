//! The hashed folio wait table (`folio_wait_table` and `folio_wait_bit_common` in
//! `mm/filemap.c`).
//!
//! A thread that needs a folio bit to clear (today only `PG_locked`) sleeps on one of a few
//! hundred buckets chosen by hashing the folio's frame number; each bucket is a mutex, a
//! condition variable and a short list of `(pfn, sleepers)` pairs. The folio's `PG_waiters`
//! bit tells the unlocker whether anybody sleeps at all, so an uncontended unlock is a single
//! atomic and-not and never touches the table.
//!
//! | step | waiter (`wait_bit`) | waker (`unlock` → `wake_bit`) |
//! |---|---|---|
//! | 1 | lock bucket, register `(pfn, +1)` | clear the bit with an RMW; old value had `PG_waiters`? |
//! | 2 | `fetch_or(PG_waiters)` | no → done (nobody registered before our RMW) |
//! | 3 | re-load the flags: bit clear → unregister, return | yes → lock bucket |
//! | 4 | sleep on the condvar (atomically releases the bucket) | pfn still registered → `notify_all`; else clear `PG_waiters` |
//!
//! No lost wake-up: the waiter's `fetch_or(PG_waiters)` and the waker's clearing RMW are on
//! the same word, so one is first in its modification order. If the waiter's is first, the
//! waker sees `PG_waiters` and takes the bucket lock, which the waiter holds from step 1 until
//! it sleeps, so the notification cannot fall before the sleep. If the waker's is first, the
//! waiter's reload in step 3 (after its own RMW on the word, by read-after-write coherence)
//! sees the bit clear and does not sleep. `PG_waiters` is cleared only under the bucket lock
//! when no sleeper for that pfn is registered, so it can never be lost while one sleeps; it may
//! stay set spuriously (a woken waiter took the lock), which costs one slow unlock later.
//!
//! Sleepers of other folios hashed to the same bucket wake too and go back to sleep (the
//! kernel filters with a wake function; here the condvar is shared, which is simpler and the
//! table is large enough that collisions are rare).

use crate::mm::sync::{CachePadded, Condvar, Mutex, Ordering};

use super::flags::PG_WAITERS;
use super::Folio;

/// Buckets in the table: a power of two (the kernel uses 256).
#[cfg(not(loom))]
const WAIT_TABLE_BITS: u32 = 8;
#[cfg(loom)]
const WAIT_TABLE_BITS: u32 = 1;

/// One bucket: the registered sleepers by pfn.
#[derive(Default)]
struct Bucket {
    sleepers: Mutex<Vec<(u32, u32)>>,
    cond: Condvar,
}

/// The wait table of one arena.
pub(crate) struct WaitTable {
    buckets: Box<[CachePadded<Bucket>]>,
}

impl WaitTable {
    pub(crate) fn new() -> Self {
        let buckets = (0..1usize << WAIT_TABLE_BITS)
            .map(|_| CachePadded::new(Bucket::default()))
            .collect();
        Self { buckets }
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
        let mut sleepers = bucket.sleepers.lock();
        register(&mut sleepers, pfn);
        loop {
            // ORDERING: pairs with the clearing RMW in `Folio::unlock_bit` (same word): see the
            // module docs; AcqRel so a waiter that then owns the lock sees the last holder's
            // writes through the release of that RMW.
            folio.flags.fetch_or(PG_WAITERS, Ordering::AcqRel);
            let clear = if take {
                // ORDERING: Acquire, the lock acquisition; pairs with the Release in
                // `Folio::unlock_bit`.
                folio.flags.fetch_or(bit, Ordering::Acquire) & bit == 0
            } else {
                // ORDERING: Acquire; pairs with the Release clear in `Folio::unlock_bit`, so a
                // waiter that returns sees what the holder wrote (e.g. PG_uptodate and data).
                folio.flags.load(Ordering::Acquire) & bit == 0
            };
            if clear {
                break;
            }
            sleepers = bucket.cond.wait(sleepers);
        }
        unregister(&mut sleepers, pfn);
    }

    /// Wakes the sleepers of the folio after its `bit` was cleared while `PG_waiters` was set.
    #[cold]
    pub(crate) fn wake_bit(&self, folio: &Folio) {
        let pfn = folio.pfn();
        let bucket = self.bucket(pfn);
        let sleepers = bucket.sleepers.lock();
        if sleepers.iter().any(|&(p, _)| p == pfn) {
            bucket.cond.notify_all();
        } else {
            // Nobody sleeps on this folio any more (a woken waiter left, or it took the lock
            // and left the bit behind): clear it under the bucket lock, where registration
            // happens, so a new sleeper cannot be missed.
            folio.flags.fetch_and(!PG_WAITERS, Ordering::Relaxed);
        }
    }

    /// Total registered sleepers (tests and `validate`).
    pub(crate) fn sleepers(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| {
                b.sleepers
                    .lock()
                    .iter()
                    .map(|&(_, n)| n as usize)
                    .sum::<usize>()
            })
            .sum()
    }
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
