//! The background flusher: the kernel's per-device writeback worker (`wb_workfn` ->
//! `wb_do_writeback`, in `fs/fs-writeback.c`), one thread per cache.
//!
//! It sleeps for the interval of [`Config::dirty_expire`](super::Config::dirty_expire)
//! (`dirty_writeback_centisecs`, 5 s) or until a writer kicks it, then runs two passes:
//!
//! - **kupdate** (`wb_check_old_data_flush`): every file whose dirty pages have been dirty
//!   for longer than [`Config::dirty_expire`](super::Config::dirty_expire)
//!   (`dirty_expire_centisecs`, 30 s) is written back, so data that nobody syncs still reaches
//!   the backing file within about `dirty_expire + dirty_writeback_interval`;
//! - **background** (`wb_check_background_flush`): while the cache's dirty pages are at or
//!   above the background threshold, files are written back, the longest dirty first.
//!
//! A writer whose page takes the dirty count to the background threshold kicks the thread
//! and goes on; only at the hard limit does it write back itself (`balance_dirty_pages`),
//! and not a file this thread is writing back: it sleeps until this thread has cleaned a
//! batch of pages, so that its copies overlap this thread's I/O. Errors of these passes are
//! recorded in each file's error sequence and reported by the next sync of every handle, as
//! any writeback error is.
//!
//! The thread starts with the first write to the cache (a read-only cache never has one),
//! holds only a weak reference on the cache, and exits when the cache goes away.

use std::time::{Duration, Instant};

use super::inode::Inode;
use super::writeback::writeback_mapping;
use super::CacheInner;
use crate::mm::sync::{AtomicBool, Condvar, Mutex, Ordering};
use crate::mm::writeback::{SyncMode, WB_BACKGROUND_CHUNK};

/// The flusher's doorbell and its sleep.
pub(crate) struct Flusher {
    /// A wake-up is pending (set by writers, cleared by the thread).
    kicked: AtomicBool,
    /// True once told to stop.
    stopped: Mutex<bool>,
    cond: Condvar,
    /// Held while the thread writes back ([`super::FolioCache::validate`] waits for it).
    pub(crate) busy: Mutex<()>,
    interval: Duration,
    expire: Duration,
}

impl Flusher {
    pub(crate) fn new(interval: Duration, expire: Duration) -> Flusher {
        Flusher {
            kicked: AtomicBool::new(false),
            stopped: Mutex::new(false),
            cond: Condvar::new(),
            busy: Mutex::new(()),
            interval,
            expire,
        }
    }

    /// `wb_start_background_writeback`: wakes the thread unless a wake-up is pending.
    pub(crate) fn kick(&self) {
        // ORDERING: Relaxed; the flag only saves redundant notifications. The notification
        // is sent under the mutex the thread sleeps on, so it is never lost.
        if !self.kicked.swap(true, Ordering::Relaxed) {
            let _g = self.stopped.lock();
            self.cond.notify_one();
        }
    }

    pub(crate) fn stop(&self) {
        *self.stopped.lock() = true;
        self.cond.notify_one();
    }

    /// The thread's loop: sleep, then the passes, while the cache lives.
    pub(crate) fn run(&self, cache: std::sync::Weak<CacheInner>) {
        loop {
            {
                let mut stopped = self.stopped.lock();
                let deadline = Instant::now() + self.interval;
                while !*stopped && !self.kicked.load(Ordering::Relaxed) {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    stopped = self.cond.wait_timeout(stopped, left).0;
                }
                if *stopped {
                    return;
                }
            }
            self.kicked.store(false, Ordering::Relaxed);
            let Some(c) = cache.upgrade() else {
                return;
            };
            let _busy = self.busy.lock();
            flush_pass(&c, self.expire);
        }
    }
}

/// One wake-up's work: the kupdate pass, then the background pass.
pub(crate) fn flush_pass(c: &CacheInner, expire: Duration) {
    let now = Instant::now();
    let mut dirty: Vec<_> = c
        .live_mappings()
        .into_iter()
        .filter_map(|m| m.mapping.wb.dirtied_when().map(|t| (t, m)))
        .collect();
    // The longest dirty first (`b_dirty` is kept in `dirtied_when` order).
    dirty.sort_by_key(|(t, _)| *t);
    for (t, m) in &dirty {
        if now.duration_since(*t) >= expire {
            write_chunks(c, m, || true);
        }
    }
    for (_, m) in &dirty {
        write_chunks(c, m, || c.dirty.dirty() >= c.dirty.background());
    }
}

/// Background passes over `m` while `more()` says so and a pass wrote a whole chunk (a pass
/// stops after `WB_BACKGROUND_CHUNK` pages, so that a sync waiting for the file gets its
/// turn between two); a file another pass has, or one a sync waits for, is left to it.
fn write_chunks(c: &CacheInner, m: &Inode, more: impl Fn() -> bool) {
    while more() {
        let out = writeback_mapping(c, m, 0, u64::MAX, SyncMode::Background);
        if out.busy || out.pages < WB_BACKGROUND_CHUNK {
            break;
        }
    }
}
