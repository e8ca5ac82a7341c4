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

use super::core::Core;
use super::inode::Inode;
use super::worker::Worker;
use super::writeback::writeback_mapping;
use crate::mm::sync::Arc;
use crate::mm::writeback::{SyncMode, WB_BACKGROUND_CHUNK};

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
            flush_pass(c, live(c), self.expire);
        });
    }
}

/// One wake-up's work: the kupdate pass, then the background pass.
pub(crate) fn flush_pass(c: &Core, live: Vec<Arc<Inode>>, expire: Duration) {
    let now = Instant::now();
    let mut dirty: Vec<_> = live
        .into_iter()
        .filter_map(|m| m.mapping.wb.dirtied_when().map(|t| (t, m)))
        .collect();
    // The longest dirty first (the list is kept in `dirtied_when` order; sorted again in
    // case a file was cleaned and dirtied again since the snapshot).
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
fn write_chunks(c: &Core, m: &Inode, more: impl Fn() -> bool) {
    while more() {
        let out = writeback_mapping(c, m, 0, u64::MAX, SyncMode::Background);
        if out.busy || out.pages < WB_BACKGROUND_CHUNK {
            break;
        }
    }
}
