//! The worker-pool engine: a batch's requests are queued for a fixed set of I/O threads, each
//! of which runs one request at a time through [`run_inline`], and the caller sleeps until
//! the last of them is counted down (PostgreSQL's `method_worker.c`; see the module docs of
//! [`engine`](super)).

use std::collections::VecDeque;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;

use super::{run_inline, Req};
use crate::io::backing::Backing;
use crate::mm::sync::{Arc, Condvar, Mutex};

/// The most worker threads a pool starts by default, however many CPUs there are.
const MAX_DEFAULT_THREADS: usize = 32;

/// The default number of workers: twice the CPUs this process may run on
/// (`available_parallelism`; a worker blocked in a read leaves its CPU to another), at least
/// 2 and at most [`MAX_DEFAULT_THREADS`].
pub(crate) fn default_threads() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (2 * cpus).clamp(2, MAX_DEFAULT_THREADS)
}

/// A pool of I/O worker threads, started with the pool and joined when it is dropped.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    threads: Vec<crate::mm::sync::thread::JoinHandle<()>>,
}

/// What the caller and the workers share.
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a job is queued or the pool shuts down.
    work: Condvar,
    /// Weakened on purpose, for the loom model that must catch it: a worker counts its job
    /// down before running it.
    #[cfg(loom)]
    count_down_early: bool,
}

struct Queue {
    jobs: VecDeque<Job>,
    shutdown: bool,
}

/// One request handed to a worker, with the backing it runs against and the batch it counts
/// down.
struct Job {
    /// The request, borrowed from the caller's batch for the duration of [`Pool::run`].
    req: NonNull<Req<'static>>,
    /// The backing, borrowed from the caller for the same duration.
    backing: NonNull<dyn Backing>,
    /// The batch's countdown (owned, so the worker may touch it after the caller returned).
    batch: Arc<Countdown>,
}

// SAFETY: a `Job` is two borrowed pointers and an `Arc`. What they point at may be used from
// another thread: `Req` holds only `&mut [u8]`, `&[u8]` and `io::Result` (all `Send`), and the
// request is reached through this job alone (each job points at a different element of the
// batch, and the caller does not touch the batch until every job is counted down); `dyn
// Backing` is `Sync` by the trait's bounds, so sharing `&dyn Backing` across threads is sound.
// The pointers stay valid while the job exists: `Pool::run` does not return, not even by
// unwinding, until the batch's countdown reaches zero (the wait is in `BatchWait`'s `Drop`),
// and a worker counts a job down only after its last use of both pointers.
unsafe impl Send for Job {}

/// How many jobs of a batch are still running; the caller waits for zero.
struct Countdown {
    left: Mutex<usize>,
    done: Condvar,
}

impl Countdown {
    fn count_down(&self) {
        let mut left = self.left.lock();
        *left -= 1;
        if *left == 0 {
            self.done.notify_all();
        }
    }
}

/// Waits, when dropped, until every job of the batch has been counted down: the one wait of
/// [`Pool::run`], in a `Drop` so that no path out of `run`, unwinding included, can leave a
/// worker with a pointer into the caller's batch.
struct BatchWait<'a>(&'a Countdown);

impl Drop for BatchWait<'_> {
    fn drop(&mut self) {
        let mut left = self.0.left.lock();
        while *left > 0 {
            left = self.0.done.wait(left);
        }
    }
}

// Loom's thread-local under loom (its threads share one OS thread), where the pool runs only
// in its model (`loom_tests::pool`: every engine choice is the synchronous engine there).
#[cfg(not(loom))]
std::thread_local! {
    /// The pool the current thread is a worker of (the address of its `Shared`), 0 on any
    /// other thread: a batch a worker starts on its own pool runs in the worker (waiting for
    /// the pool from inside it could leave no worker free to run the batch).
    static WORKER_OF: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
#[cfg(loom)]
loom::thread_local! {
    static WORKER_OF: std::cell::Cell<usize> = std::cell::Cell::new(0);
}

impl Pool {
    /// Starts `threads` workers (at least 1), named `foliocache-io-N`.
    pub(crate) fn new(threads: usize) -> io::Result<Pool> {
        Pool::start(threads, false)
    }

    /// [`Pool::new`] with workers that count each job down before running it, for the loom
    /// model that must catch it.
    #[cfg(loom)]
    pub(crate) fn new_weakened(threads: usize) -> io::Result<Pool> {
        Pool::start(threads, true)
    }

    fn start(threads: usize, count_down_early: bool) -> io::Result<Pool> {
        #[cfg(not(loom))]
        let _ = count_down_early;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                shutdown: false,
            }),
            work: Condvar::new(),
            #[cfg(loom)]
            count_down_early,
        });
        let mut pool = Pool {
            shared,
            threads: Vec::new(),
        };
        for n in 0..threads.max(1) {
            let shared = Arc::clone(&pool.shared);
            // A failed spawn drops `pool`, which stops and joins the workers already started.
            let h = crate::mm::sync::thread::Builder::new()
                .name(format!("foliocache-io-{n}"))
                .spawn(move || worker(&shared))?;
            pool.threads.push(h);
        }
        Ok(pool)
    }

    /// How many workers the pool has.
    pub(crate) fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Runs every request of `reqs` on the workers and returns when all have completed.
    ///
    /// A batch of one request runs in the calling thread instead (a hop to a worker and back
    /// would only add two context switches to the same single system call), and so does any
    /// batch started on one of this pool's own workers. Either way a backing that panics
    /// fails its request with an error, as it would on a worker.
    pub(crate) fn run(&self, backing: &dyn Backing, reqs: &mut [Req<'_>]) {
        let own_worker = WORKER_OF.with(|w| w.get()) == self.shared_addr();
        if reqs.len() <= 1 || own_worker {
            for r in reqs.iter_mut() {
                run_caught(backing, r);
            }
            return;
        }
        let batch = Arc::new(Countdown {
            left: Mutex::new(reqs.len()),
            done: Condvar::new(),
        });
        let backing = NonNull::from(backing);
        // SAFETY: only the trait object's lifetime bound changes (`'_` to `'static`), not the
        // pointer or its vtable; the `Send` impl of `Job` says why the pointer is used only
        // while the borrow lasts.
        let backing: NonNull<dyn Backing> = unsafe { std::mem::transmute(backing) };
        let jobs: Vec<Job> = reqs
            .iter_mut()
            .map(|r| Job {
                req: NonNull::from(r).cast::<Req<'static>>(),
                backing,
                batch: Arc::clone(&batch),
            })
            .collect();
        let n = jobs.len();
        {
            let mut q = self.shared.queue.lock();
            q.jobs.extend(jobs);
        }
        // From here on the workers hold pointers into `reqs` and `backing`: nothing returns
        // before the countdown reaches zero. Nothing between the `extend` above and this line
        // can panic (only the unlock is).
        let wait = BatchWait(&batch);
        if n >= self.threads.len() {
            self.shared.work.notify_all();
        } else {
            for _ in 0..n {
                self.shared.work.notify_one();
            }
        }
        drop(wait);
    }

    fn shared_addr(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.queue.lock().shutdown = true;
        self.shared.work.notify_all();
        for h in self.threads.drain(..) {
            // A worker never panics (the backing's panics are caught), so the join's error is
            // one that cannot happen; there is nothing to do with it in a drop anyway.
            let _ = h.join();
        }
    }
}

/// A worker: takes jobs until the pool shuts down.
fn worker(shared: &Arc<Shared>) {
    WORKER_OF.with(|w| w.set(Arc::as_ptr(shared) as usize));
    loop {
        let job = {
            let mut q = shared.queue.lock();
            loop {
                if let Some(j) = q.jobs.pop_front() {
                    break j;
                }
                if q.shutdown {
                    return;
                }
                q = shared.work.wait(q);
            }
        };
        #[cfg(loom)]
        if shared.count_down_early {
            job.batch.count_down();
        }
        // SAFETY: the pointers are valid and unaliased until this job is counted down (see
        // the `Send` impl of `Job`); this job is the only one pointing at this request.
        let (backing, req) = unsafe { (job.backing.as_ref(), &mut *job.req.as_ptr()) };
        run_caught(backing, req);
        #[cfg(loom)]
        if shared.count_down_early {
            continue;
        }
        // The last use of `req` and `backing` is above: after this the caller may return and
        // free them. The count is taken under the batch's mutex: its unlock here pairs with
        // the lock `BatchWait` re-takes on waking, so the request's result and bytes happen
        // before the caller reads them.
        job.batch.count_down();
    }
}

/// [`run_inline`], with a panic in the backing turned into the request's error.
fn run_caught(backing: &dyn Backing, req: &mut Req<'_>) {
    // AssertUnwindSafe: after a panic the request gets a fresh error result, and the buffers
    // may hold a partial read, which a failed read is allowed to leave.
    if panic::catch_unwind(AssertUnwindSafe(|| run_inline(backing, req))).is_err() {
        req.result = Some(Err(io::Error::other("the backing panicked")));
    }
}
