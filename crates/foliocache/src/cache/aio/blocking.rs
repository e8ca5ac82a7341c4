//! Calls run on the cache's async workers: [`Blocking`], a future completed by a job on the
//! pool, and [`Serial`], a queue whose jobs run one after another.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::cache::async_ra::AsyncRa;
use crate::cache::error::CacheError;
use crate::cache::sb::CacheInner;

/// Jobs run one at a time, in the order queued, on the pool's workers: while one runs, the
/// next ones wait in this queue, not in a worker.
#[derive(Default)]
pub(super) struct Serial {
    /// The queued jobs, and whether a worker is draining them.
    state: std::sync::Mutex<(std::collections::VecDeque<Job>, bool)>,
}

type Job = Box<dyn FnOnce() + Send>;

impl Serial {
    /// Queues `job`; starts a worker on the queue if none is draining it.
    pub(super) fn submit(self: &Arc<Self>, pool: &Arc<AsyncRa>, job: Job) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0.push_back(job);
        if st.1 {
            return;
        }
        st.1 = true;
        drop(st);
        let me = self.clone();
        let drain: Job = Box::new(move || me.drain());
        if let Err(drain) = AsyncRa::submit(pool, drain, true) {
            drain(); // no worker could be started: run them here
        }
    }

    fn drain(&self) {
        loop {
            let job = {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                match st.0.pop_front() {
                    Some(j) => j,
                    None => {
                        st.1 = false;
                        return;
                    }
                }
            };
            // A panicking job (its future reports the lost worker) stops no later one.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        }
    }
}

/// A call run on one of the cache's async workers; the future completes with its result.
/// The job is queued at the first poll; once queued it runs to its end whether or not the
/// future is still there.
pub(super) struct Blocking<T: Send + 'static> {
    pool: Arc<AsyncRa>,
    job: Option<Box<dyn FnOnce() -> T + Send>>,
    slot: Arc<Slot<T>>,
    /// What to do with a result nobody will read (the future was dropped first).
    pub(super) on_lost: Option<Box<dyn FnOnce(T) + Send>>,
    /// Run after the jobs queued before it on this queue, not beside them.
    pub(super) serial: Option<Arc<Serial>>,
    /// The result was handed to the caller: nothing is left for `on_lost`.
    done: bool,
}

struct Slot<T> {
    state: std::sync::Mutex<SlotState<T>>,
}

struct SlotState<T> {
    result: Option<T>,
    waker: Option<Waker>,
    /// The job ended without a result (it panicked).
    lost: bool,
    /// The future was dropped: the result goes to `on_lost`.
    abandoned: Option<Box<dyn FnOnce(T) + Send>>,
    dropped: bool,
}

impl<T: Send + 'static> Blocking<T> {
    pub(super) fn new(c: &CacheInner, f: impl FnOnce() -> T + Send + 'static) -> Self {
        Blocking {
            pool: c.aio_pool.clone(),
            job: Some(Box::new(f)),
            slot: Arc::new(Slot {
                state: std::sync::Mutex::new(SlotState {
                    result: None,
                    waker: None,
                    lost: false,
                    abandoned: None,
                    dropped: false,
                }),
            }),
            on_lost: None,
            serial: None,
            done: false,
        }
    }
}

impl<T> Slot<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Completes a slot when the job ends, by returning or by unwinding.
struct Complete<T: Send + 'static> {
    slot: Arc<Slot<T>>,
    result: Option<T>,
}

impl<T: Send + 'static> Drop for Complete<T> {
    fn drop(&mut self) {
        let mut st = self.slot.lock();
        match self.result.take() {
            Some(r) if st.dropped => {
                let f = st.abandoned.take();
                drop(st);
                if let Some(f) = f {
                    f(r);
                }
                return;
            }
            Some(r) => st.result = Some(r),
            None => st.lost = true,
        }
        let w = st.waker.take();
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
    }
}

impl<T: Send + 'static> Future for Blocking<T>
where
    T: From<WorkerLost>,
{
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        if let Some(job) = this.job.take() {
            this.slot.lock().waker = Some(cx.waker().clone());
            let slot = this.slot.clone();
            let run = Box::new(move || {
                let mut done = Complete { slot, result: None };
                // The job's captures (a handle, a copy of the bytes) are dropped inside `job`
                // before the task is woken: a task that then drops its last handle finds
                // no worker still holding it.
                done.result = Some(job());
            });
            match &this.serial {
                Some(q) => q.submit(&this.pool, run),
                None => {
                    if let Err(run) = AsyncRa::submit(&this.pool, run, true) {
                        // No worker could be started: run it here (blocking this thread).
                        run();
                    }
                }
            }
        }
        let mut st = this.slot.lock();
        if let Some(r) = st.result.take() {
            this.done = true;
            return Poll::Ready(r);
        }
        if st.lost {
            this.done = true;
            return Poll::Ready(T::from(WorkerLost));
        }
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T: Send + 'static> Drop for Blocking<T> {
    fn drop(&mut self) {
        if self.job.is_some() || self.done {
            // Never queued, or its result was read: `on_lost` (and what it holds, perhaps the
            // last handle of a file) goes here, on the caller's thread. Parked in the slot it
            // would go with the worker's last reference to it, which the worker may drop
            // after the caller has gone on and dropped the cache: the file's last writeback
            // would then run behind the caller's back.
            return;
        }
        let mut st = self.slot.lock();
        st.dropped = true;
        st.waker = None;
        let on_lost = self.on_lost.take();
        if let Some(r) = st.result.take() {
            drop(st);
            if let Some(f) = on_lost {
                f(r);
            }
        } else {
            st.abandoned = on_lost;
        }
    }
}

/// A worker ended a call without a result (it panicked).
pub(super) struct WorkerLost;

impl<T> From<WorkerLost> for Result<T, CacheError> {
    fn from(_: WorkerLost) -> Self {
        Err(CacheError::Spawn(io::Error::other(
            "the worker thread running this call panicked",
        )))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Wake, Waker};

    use super::Blocking;
    use crate::cache::error::CacheError;
    use crate::{Config, FolioCache};

    /// A waker whose `wake` reports that it was called, then waits to be let go: the worker
    /// that calls it stays between publishing the result and dropping its hold on the slot.
    struct Held {
        called: Mutex<mpsc::Sender<()>>,
        release: Mutex<mpsc::Receiver<()>>,
    }

    impl Wake for Held {
        fn wake(self: Arc<Self>) {
            self.called.lock().unwrap().send(()).unwrap();
            self.release.lock().unwrap().recv().unwrap();
        }
    }

    /// A call whose result the caller has read lets go of `on_lost`'s captures when its
    /// future is dropped, on the caller's thread, even while the worker still holds the
    /// slot. (An async sync's `on_lost` holds the file: parked in the slot, the file's last
    /// handle went with the worker, and its last writeback ran after the caller had dropped
    /// the cache: after a simulated power cut, onto the restored disk.)
    #[test]
    fn a_read_result_leaves_nothing_for_the_worker_to_drop() {
        let c = FolioCache::new(Config::new(1 << 20)).unwrap();
        let held = Arc::new(());
        let (called_tx, called) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let waker = Waker::from(Arc::new(Held {
            called: Mutex::new(called_tx),
            release: Mutex::new(release_rx),
        }));
        let mut cx = Context::from_waker(&waker);
        let (go, gate) = mpsc::channel::<()>();
        let mut b = Blocking::new(&c.inner, move || {
            gate.recv().unwrap();
            Ok::<(), CacheError>(())
        });
        let keep = held.clone();
        b.on_lost = Some(Box::new(move |_r: Result<(), CacheError>| drop(keep)));
        let mut b = Box::pin(b);
        // The first poll queues the job, which waits at its gate.
        assert!(Pin::new(&mut b).poll(&mut cx).is_pending());
        go.send(()).unwrap();
        called.recv().unwrap(); // the worker is inside `wake`, the result published
        assert!(matches!(
            Pin::new(&mut b).poll(&mut cx),
            Poll::Ready(Ok(()))
        ));
        drop(b);
        assert_eq!(
            Arc::strong_count(&held),
            1,
            "on_lost's captures went with the future"
        );
        release.send(()).unwrap();
    }
}
