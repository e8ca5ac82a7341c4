//! The background flusher: the kernel's per-device writeback worker (`wb_workfn` ->
//! `wb_do_writeback`, in `fs/fs-writeback.c`), one thread per cache.
//!
//! It sleeps for the interval of [`Config::dirty_expire`](super::Config::dirty_expire)
//! (`dirty_writeback_centisecs`, 5 s) or until a writer kicks it, then, with
//! [`Config::pageout`](super::Config::pageout), writes the pages reclaim queued for it (the
//! cold dirty pages at the inactive tail: kswapd's `pageout()`), then runs two passes:
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

use std::time::Duration;

use super::core::Core;
use super::inode::Inode;
use super::worker::Worker;
use super::writeback::DirtyHost;
use crate::mm::sync::Arc;
use crate::mm::writeback::balance;

/// The flusher: its [`Worker`] and its two intervals.
pub(crate) struct Flusher {
    pub(crate) worker: Worker,
    interval: Duration,
    expire: Duration,
}

impl Flusher {
    pub(crate) fn new(interval: Duration, expire: Duration) -> Flusher {
        Flusher {
            worker: Worker::new(),
            interval,
            expire,
        }
    }

    /// `wb_start_background_writeback`: wakes the thread unless a wake-up is pending.
    pub(crate) fn kick(&self) {
        self.worker.kick();
    }

    /// The thread's loop: sleep, then the passes over the files `live` lists (the cache's
    /// dirty files, oldest dirtied first: `CacheInner::dirty_inodes`, `b_dirty`), while the
    /// cache lives.
    pub(crate) fn run<C: std::ops::Deref<Target = Core>>(
        &self,
        cache: std::sync::Weak<C>,
        live: impl Fn(&C) -> Vec<Arc<Inode>>,
    ) {
        self.worker.run(self.interval, cache, |c| {
            let _busy = self.worker.busy.lock();
            if c.config.pageout {
                super::writeback::pageout(c, &live(c));
            }
            let host = DirtyHost {
                core: c,
                live: || live(c),
            };
            balance::flush_pass(&host, self.expire);
        });
    }
}
