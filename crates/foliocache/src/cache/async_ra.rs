//! Asynchronous readahead: the window a reader's `PG_readahead` marker starts, and the
//! windows [`CachedFile::prefetch`](super::CachedFile::prefetch) asks for, read by worker
//! threads while the reader goes on.
//!
//! # What it models
//!
//! `page_cache_async_ra` inserts the next window's folios (locked, not uptodate) and submits
//! their reads without waiting: the reader returns to the folios it already has, and a
//! later reader that reaches the new window sleeps on the folio lock until the read
//! completes (`folio_wait_locked`). Several windows are in flight when readers outrun the
//! device. PostgreSQL's `read_stream.c` keeps a stream's look-ahead distance in flight the
//! same way.
//!
//! Here a window is handed to a worker thread, which runs it as a synchronous reader would
//! (`page_cache_ra_unbounded`: the invalidate lock held shared from insertion to the end of
//! the reads, the reads issued as one batch through the cache's engine). The reader waits
//! only until the window's folios are in the index (a handshake, microseconds), so that it
//! never finds the window's pages missing and reads them a second time; then it goes on
//! while the reads are in flight. A window is run inline instead when every worker is busy
//! (the kernel's readahead is a hint too: `ra_alloc_folio` and the block layer may refuse
//! it), so a slow device never builds an unbounded queue of windows.
//!
//! Only files under direct I/O use the workers: on a buffered file the kernel's own
//! readahead already streams the device, and a thread hop would only add latency.
//!
//! # Lifetimes
//!
//! A job holds the cache and the inode (`Arc`s), never a handle: the inode's count of jobs
//! in flight ([`InflightRa`]) is waited for by every handle's drop, so the last close sees no
//! window still filling, and its eviction (or the accounting a test checks right after)
//! finds every page settled.

use crate::mm::sync::{Arc, Condvar, Mutex};
use std::collections::VecDeque;

/// The most readahead worker threads a cache starts (started on demand, one at a time).
pub(crate) const MAX_WORKERS: usize = 4;

/// A job: one window (or a prefetch's windows) of one file.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Items taken all at once by one worker and run as one batch by [`AsyncRa::batch`]
    /// (async reads' misses, `cache/aio.rs`, read as one batch per file).
    misses: Vec<BatchItem>,
    /// Workers waiting for a job.
    idle: usize,
    /// Workers started.
    threads: usize,
    /// Jobs taken and not finished.
    running: usize,
    stop: bool,
}

/// A pool of worker threads and their queue: the cache's readahead workers, and the
/// workers that run the async calls' blocking parts (`cache/aio.rs`).
pub(crate) struct AsyncRa {
    state: Mutex<State>,
    /// Workers wait here for jobs.
    work: Condvar,
    /// [`AsyncRa::wait_idle`] waits here for the end of jobs.
    done: Condvar,
    /// The most worker threads this pool starts.
    max: usize,
    /// The workers' thread name.
    name: &'static str,
    /// Runs a batch of queued items.
    batch: fn(Vec<BatchItem>),
}

/// An item of a batch ([`AsyncRa::submit_batched`]): only the batch function knows its type.
pub(crate) type BatchItem = Box<dyn std::any::Any + Send>;

impl std::fmt::Debug for AsyncRa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        f.debug_struct("AsyncRa")
            .field("threads", &s.threads)
            .field("queued", &(s.jobs.len() + s.misses.len()))
            .finish()
    }
}

impl AsyncRa {
    /// A pool of at most `max` workers named `name-N`, started on demand, whose batched
    /// items are run by `batch`.
    pub(crate) fn new(max: usize, name: &'static str, batch: fn(Vec<BatchItem>)) -> Self {
        AsyncRa {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
            max,
            name,
            batch,
        }
    }

    /// Queues `job` for a worker: at once if a worker is idle or another may start, or
    /// whatever the load if `force` (a prefetch, whose caller does not wait). Otherwise gives
    /// the job back, for the caller to run inline.
    ///
    /// (An associated function, not a method on `Arc<Self>`: the pool also runs on loom's
    /// `Arc` in its model, `loom_tests::async_ra`, which cannot be a receiver.)
    pub(crate) fn submit(this: &Arc<Self>, job: Job, force: bool) -> Result<(), Job> {
        let mut s = this.state.lock();
        if s.stop {
            return Err(job);
        }
        let free = s.idle > s.jobs.len() + usize::from(!s.misses.is_empty());
        if !free && s.threads >= this.max && !force {
            return Err(job);
        }
        s.jobs.push_back(job);
        if !free && !AsyncRa::spawn(this, &mut s) && s.threads == 0 {
            // No worker at all: the caller runs it.
            return Err(s.jobs.pop_back().expect("just queued"));
        }
        drop(s);
        this.work.notify_one();
        Ok(())
    }

    /// Queues an item for the next batch (an async read's miss): a worker takes every
    /// queued item at once and hands them to the batch function. Gives the item back if no
    /// worker can run it (the pool is stopped, or not one thread could be started).
    pub(crate) fn submit_batched(this: &Arc<Self>, miss: BatchItem) -> Result<(), BatchItem> {
        let mut s = this.state.lock();
        if s.stop {
            return Err(miss);
        }
        let first = s.misses.is_empty();
        s.misses.push(miss);
        if !first {
            // A worker is already told of the batch, or is about to take it.
            return Ok(());
        }
        let free = s.idle > s.jobs.len();
        if !free && !AsyncRa::spawn(this, &mut s) && s.threads == 0 {
            return Err(s.misses.pop().expect("just queued"));
        }
        drop(s);
        // One worker takes the whole batch: wake one, not every idle worker.
        this.work.notify_one();
        Ok(())
    }

    /// Starts a worker if the pool may grow; true if one started.
    fn spawn(this: &Arc<Self>, s: &mut State) -> bool {
        if s.threads >= this.max {
            return false;
        }
        let me = Arc::clone(this);
        let started = crate::mm::sync::thread::Builder::new()
            .name(format!("{}-{}", this.name, s.threads))
            .spawn(move || me.work());
        if started.is_ok() {
            s.threads += 1;
        }
        started.is_ok()
    }

    /// A worker's loop: take the queued misses or a job, run it, until stopped.
    fn work(&self) {
        let mut s = self.state.lock();
        loop {
            let run: Job = if !s.misses.is_empty() {
                let (batch, run) = (std::mem::take(&mut s.misses), self.batch);
                Box::new(move || run(batch))
            } else if let Some(job) = s.jobs.pop_front() {
                job
            } else if s.stop {
                s.threads -= 1;
                return;
            } else {
                s.idle += 1;
                s = self.work.wait(s);
                s.idle -= 1;
                continue;
            };
            s.running += 1;
            drop(s);
            // A panicking backing fails the window's folios (the fill's guards) and must
            // not take the worker with it.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
            s = self.state.lock();
            s.running -= 1;
            if s.running == 0 && s.jobs.is_empty() && s.misses.is_empty() {
                self.done.notify_all();
            }
        }
    }

    /// Waits until no job is queued or running.
    pub(crate) fn wait_idle(&self) {
        let s = self.state.lock();
        drop(self.done.wait_while(s, |s| {
            !s.jobs.is_empty() || !s.misses.is_empty() || s.running > 0
        }));
    }

    /// Tells the workers to finish the queued jobs and exit.
    pub(crate) fn stop(&self) {
        self.state.lock().stop = true;
        self.work.notify_all();
    }
}

/// One inode's asynchronous windows in flight (every handle's drop waits for none).
#[derive(Debug, Default)]
pub(crate) struct InflightRa {
    n: Mutex<usize>,
    cond: Condvar,
}

impl InflightRa {
    /// Counts a job in; the guard counts it out when dropped (also by unwinding).
    pub(crate) fn enter(this: &Arc<Self>) -> InflightGuard {
        *this.n.lock() += 1;
        InflightGuard(Arc::clone(this))
    }

    /// Waits until no job of this inode is in flight.
    pub(crate) fn wait(&self) {
        let n = self.n.lock();
        drop(self.cond.wait_while(n, |n| *n > 0));
    }
}

/// A job of an inode in flight.
pub(crate) struct InflightGuard(Arc<InflightRa>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        // The count goes down under the mutex `InflightRa::wait` re-takes when it wakes: all
        // the job did before its guard dropped happens before the waiter goes on.
        let mut n = self.0.n.lock();
        *n -= 1;
        if *n == 0 {
            self.0.cond.notify_all();
        }
    }
}

/// A job that runs `f` counted in flight by `guard` until `f` has returned (or unwound): the
/// guard drops after `f`'s last use of the inode.
pub(crate) fn counted_job(guard: InflightGuard, f: impl FnOnce() + Send + 'static) -> Job {
    Box::new(move || {
        let _inflight = guard;
        f();
    })
}

/// [`counted_job`] weakened on purpose, for the loom model that must catch it: the job counts
/// itself out before it runs.
#[cfg(loom)]
pub(crate) fn counted_job_weakened(guard: InflightGuard, f: impl FnOnce() + Send + 'static) -> Job {
    Box::new(move || {
        drop(guard);
        f();
    })
}

/// The readahead handshake: a reader that handed a window to a worker waits until the
/// window's folios are in the index ([`Handshake::wait`]), which the worker announces right
/// after the insertion ([`HandshakeSignal::signal`]) or, if its job ends without announcing
/// (it inserted nothing, or unwound), when its signal is dropped.
#[derive(Debug, Default)]
pub(crate) struct Handshake {
    done: Mutex<bool>,
    cond: Condvar,
}

/// The worker's end of a [`Handshake`].
pub(crate) struct HandshakeSignal(Arc<Handshake>);

impl Handshake {
    /// A handshake and the signal a job takes with it.
    pub(crate) fn new() -> (Arc<Handshake>, HandshakeSignal) {
        let h = Arc::new(Handshake::default());
        let signal = HandshakeSignal(Arc::clone(&h));
        (h, signal)
    }

    /// Waits for the signal (or its drop).
    pub(crate) fn wait(&self) {
        let done = self.done.lock();
        // Pairs with the store under the same mutex in `HandshakeSignal::signal`: the
        // insertion the worker made before signalling happens before the reader goes on.
        drop(self.cond.wait_while(done, |d| !*d));
    }
}

impl HandshakeSignal {
    /// Announces that the window's folios are in the index.
    pub(crate) fn signal(&self) {
        let mut done = self.0.done.lock();
        if !*done {
            *done = true;
            self.0.cond.notify_all();
        }
    }
}

impl Drop for HandshakeSignal {
    fn drop(&mut self) {
        self.signal();
    }
}
