//! The cache's background threads' common part: a thread asleep on a doorbell, woken by a
//! kick or after an interval, that runs one round of work while the cache lives. The
//! reclaimer (`kswapd.rs`, `kswapd`) and the flusher (`flusher.rs`, the writeback worker)
//! are each one [`Worker`] and their round.
//!
//! The thread holds only a weak reference on the cache, so it never keeps it alive: it exits
//! when told to stop or when the cache is gone. A kick sets a flag first and notifies only if
//! none was pending, under the mutex the thread sleeps on, so a kick is never lost and a
//! storm of kicks costs one notification.

use std::time::{Duration, Instant};

use crate::mm::sync::{Arc, AtomicBool, Condvar, Mutex, Ordering};

/// A background thread's doorbell, its sleep, and the lock it holds while it works.
pub(crate) struct Worker {
    /// A wake-up is pending (set by [`Worker::kick`], cleared by the thread).
    pending: AtomicBool,
    /// True once told to stop.
    stopped: Mutex<bool>,
    cond: Condvar,
    /// Held while the thread works ([`super::FolioCache::validate`] waits for it).
    pub(crate) busy: Mutex<()>,
}

impl Worker {
    pub(crate) fn new() -> Worker {
        Worker {
            pending: AtomicBool::new(false),
            stopped: Mutex::new(false),
            cond: Condvar::new(),
            busy: Mutex::new(()),
        }
    }

    /// Wakes the thread unless a wake-up is pending.
    pub(crate) fn kick(&self) {
        // ORDERING: Relaxed; the flag only saves redundant notifications. The notification
        // is sent under the mutex the thread sleeps on, so it is never lost.
        if !self.pending.swap(true, Ordering::Relaxed) {
            let _g = self.stopped.lock();
            self.cond.notify_one();
        }
    }

    /// Tells the thread to exit at its next wake-up, and wakes it.
    pub(crate) fn stop(&self) {
        *self.stopped.lock() = true;
        self.cond.notify_one();
    }

    /// Sleeps until kicked, stopped, or `interval` has passed; false if stopped.
    fn sleep(&self, interval: Duration) -> bool {
        let mut stopped = self.stopped.lock();
        let deadline = Instant::now() + interval;
        while !*stopped && !self.pending.load(Ordering::Relaxed) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            stopped = self.cond.wait_timeout(stopped, left).0;
        }
        if *stopped {
            return false;
        }
        drop(stopped);
        self.pending.store(false, Ordering::Relaxed);
        true
    }

    /// The thread's loop: sleep (at most `interval`), then one `round` on the cache (whatever
    /// state the thread serves, held weakly), while the cache lives and nobody stopped the
    /// thread.
    pub(crate) fn run<C>(
        &self,
        interval: Duration,
        cache: std::sync::Weak<C>,
        mut round: impl FnMut(&Arc<C>),
    ) {
        while self.sleep(interval) {
            let Some(c) = cache.upgrade() else {
                return;
            };
            round(&c);
        }
    }
}
