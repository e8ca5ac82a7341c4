//! The io_uring engine: one ring per thread, a batch submitted whole and reaped by the thread
//! that submitted it (PostgreSQL's `method_io_uring.c`, RocksDB's per-thread ring; see the
//! module docs of [`engine`](super)).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;

use io_uring::{opcode, squeue, types, EnterFlags, IoUring, Probe};

use super::{run_inline, OnDone, Op, RawIo, Req};
use crate::io::backing::Backing;
use crate::mm::sync::OnceLock;

/// Submission queue entries per ring (the completion queue gets twice as many). A batch keeps
/// at most this many requests in the ring at once, so the completion queue never overflows;
/// a bigger batch is submitted in chunks as completions free room.
const ENTRIES: u32 = 128;

/// The most buffers one vectored request takes (`IOV_MAX`); a request with more completes
/// short, as `preadv` would refuse it whole.
const IOV_MAX: usize = 1024;

/// The sysctl that turns io_uring off: 0 allowed, 1 only for the group it names, 2 off.
const DISABLED_SYSCTL: &str = "/proc/sys/kernel/io_uring_disabled";

/// The setup flags tried in turn, best first; a step down is taken only when the kernel
/// refuses a flag it does not know (`EINVAL`).
const LADDER: [Flags; 4] = [
    Flags {
        name: "single_issuer|defer_taskrun|coop_taskrun",
        single_issuer: true,
        defer_taskrun: true,
        coop_taskrun: true,
    },
    Flags {
        name: "single_issuer|coop_taskrun",
        single_issuer: true,
        defer_taskrun: false,
        coop_taskrun: true,
    },
    Flags {
        name: "coop_taskrun",
        single_issuer: false,
        defer_taskrun: false,
        coop_taskrun: true,
    },
    Flags {
        name: "none",
        single_issuer: false,
        defer_taskrun: false,
        coop_taskrun: false,
    },
];

/// The names of [`LADDER`]'s steps, best first.
#[cfg(test)]
pub(super) fn ladder_names() -> Vec<&'static str> {
    LADDER.iter().map(|f| f.name).collect()
}

/// One step of [`LADDER`].
struct Flags {
    name: &'static str,
    single_issuer: bool,
    defer_taskrun: bool,
    coop_taskrun: bool,
}

/// A thread's ring.
struct Ring {
    ring: IoUring,
    /// The setup flags the kernel took ([`LADDER`]'s name for them).
    flags: &'static str,
    /// The process that made the ring: a child forked from this thread finds the parent's
    /// ring in its copy of the thread's locals, and must not touch it (the queues are shared
    /// memory with the parent).
    pid: u32,
}

// std's thread-local in both builds: a ring is a kernel object loom cannot model, and under
// loom every engine choice is the synchronous engine.
std::thread_local! {
    /// The calling thread's ring, made on first use. Between two batches it holds no request,
    /// so a thread that exits simply drops it.
    static RING: RefCell<Option<Ring>> = const { RefCell::new(None) };
    /// Set when making the thread's ring failed: its batches run inline without trying
    /// again ([`uring_available`] does try again, and clears it on success).
    static NO_RING: Cell<bool> = const { Cell::new(false) };
}

/// What the opcode probe found, once per process: `Err` names what is missing.
static PROBE: OnceLock<Result<(), String>> = OnceLock::new();

impl Ring {
    /// A ring for the calling thread: the flag ladder, then the opcode probe.
    fn new() -> io::Result<Ring> {
        if cfg!(miri) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring is not available under Miri",
            ));
        }
        if let Ok(s) = std::fs::read_to_string(DISABLED_SYSCTL) {
            if s.trim() == "2" {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("io_uring is disabled on this system ({DISABLED_SYSCTL} is 2)"),
                ));
            }
        }
        let mut refused = None;
        for step in &LADDER {
            let mut b = IoUring::builder();
            if step.single_issuer {
                b.setup_single_issuer();
            }
            if step.defer_taskrun {
                b.setup_defer_taskrun();
            }
            if step.coop_taskrun {
                b.setup_coop_taskrun();
            }
            match b.build(ENTRIES) {
                Ok(ring) => {
                    probe(&ring)?;
                    return Ok(Ring {
                        ring,
                        flags: step.name,
                        pid: std::process::id(),
                    });
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => refused = Some(e),
                Err(e) => return Err(unavailable(e)),
            }
        }
        Err(unavailable(refused.unwrap_or_else(|| {
            io::Error::from_raw_os_error(libc::EINVAL)
        })))
    }
}

/// The error of a ring that could not be made, naming io_uring (`EPERM` from a seccomp
/// profile or the sysctl's group rule, `ENOSYS` from a kernel without it).
fn unavailable(e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("io_uring is unavailable: {e}"))
}

/// Checks, once per process, that the kernel has every operation the engine issues.
fn probe(ring: &IoUring) -> io::Result<()> {
    let found = PROBE.get_or_init(|| {
        let mut p = Probe::new();
        if let Err(e) = ring.submitter().register_probe(&mut p) {
            return Err(format!("io_uring's opcode probe failed: {e}"));
        }
        let needed = [
            (opcode::Readv::CODE, "READV"),
            (opcode::Writev::CODE, "WRITEV"),
            (opcode::Fsync::CODE, "FSYNC"),
        ];
        match needed.iter().find(|(code, _)| !p.is_supported(*code)) {
            Some((_, name)) => Err(format!("this kernel's io_uring lacks IORING_OP_{name}")),
            None => Ok(()),
        }
    });
    found
        .clone()
        .map_err(|m| io::Error::new(io::ErrorKind::Unsupported, m))
}

/// Runs `f` with the calling thread's ring, made if the thread has none yet (unless making
/// it failed before and `retry` is false); an error when the thread cannot have one (the
/// ring could not be made, the thread is exiting, or `f` would nest inside a batch already
/// running on this thread, whose ring is in use).
fn with_ring<R>(retry: bool, f: impl FnOnce(&mut Option<Ring>) -> R) -> Result<R, io::Error> {
    if !retry && NO_RING.try_with(Cell::get).unwrap_or(true) {
        return Err(io::Error::other("this thread could not make a ring"));
    }
    RING.try_with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "this thread's ring is busy with a batch",
            ));
        };
        if slot.as_ref().is_some_and(|r| r.pid != std::process::id()) {
            // A forked child: the parent's ring is not ours to use. Dropping our copy unmaps
            // the child's view of its queues and closes the child's descriptor, nothing more.
            *slot = None;
        }
        if slot.is_none() {
            let ring = Ring::new();
            NO_RING.with(|n| n.set(ring.is_err()));
            *slot = Some(ring?);
        }
        Ok(f(&mut slot))
    })
    .unwrap_or_else(|_| Err(io::Error::other("the thread is exiting: its ring is gone")))
}

/// Whether io_uring can be used from the calling thread: makes its ring if it has none, and
/// returns the error that prevents it otherwise.
pub(crate) fn uring_available() -> io::Result<()> {
    with_ring(true, |_| ())
}

/// The setup flags the calling thread's ring got (made if the thread has none), as
/// `|`-separated names: `single_issuer|defer_taskrun|coop_taskrun` on kernels that have all
/// three, down to `none`.
pub(crate) fn ring_flags() -> io::Result<&'static str> {
    with_ring(true, |slot| slot.as_ref().map_or("none", |r| r.flags))
}

/// The uring engine's [`Engine::run`](super::Engine::run).
pub(crate) fn run(backing: &dyn Backing, reqs: &mut [Req<'_>], on_done: OnDone<'_>) {
    if reqs.is_empty() {
        return;
    }
    if let Some(raw) = backing.raw_io() {
        // The ring is taken out of the thread's slot for the batch, and put back only if the
        // batch left it healthy (and empty); the slot stays borrowed meanwhile, so a batch
        // started from inside this one (by a backing's method) runs inline instead.
        let _ = with_ring(false, |slot| {
            if let Some(ring) = slot.take() {
                *slot = run_batch(ring, raw, backing, reqs, on_done);
            }
        });
    }
    // Whatever the ring did not run: a backing without a descriptor, a thread without a ring,
    // or a ring that failed part of the way (see `run_batch`).
    for r in reqs.iter_mut().filter(|r| r.result.is_none()) {
        run_inline(backing, r);
    }
}

/// Runs a batch on `ring`: every request the descriptor can take directly goes to the ring,
/// the others run inline once the ring has the first chunk; returns the ring once nothing of
/// the batch is left in it, or `None` if the ring failed (requests without a result are then
/// the caller's to run inline, after the ring, with whatever it still held, is dropped).
fn run_batch(
    ring: Ring,
    raw: RawIo,
    backing: &dyn Backing,
    reqs: &mut [Req<'_>],
    on_done: OnDone<'_>,
) -> Option<Ring> {
    // The iovec arrays are built once and live until the end of the function: declared before
    // `batch`, they are dropped after it, and `batch`'s drop waits for every request in the
    // ring. A request put back in the ring after `EAGAIN` reuses its entry and its array.
    let mut iovecs: Vec<Vec<libc::iovec>> = Vec::with_capacity(reqs.len());
    let mut sqes: Vec<Option<squeue::Entry>> = Vec::with_capacity(reqs.len());
    let mut inline = Vec::new();
    for (i, r) in reqs.iter_mut().enumerate() {
        let iov: Vec<libc::iovec> = match &mut r.op {
            Op::Read(bufs) => bufs
                .iter_mut()
                .take(IOV_MAX)
                .map(|b| libc::iovec {
                    iov_base: b.as_mut_ptr().cast(),
                    iov_len: b.len(),
                })
                .collect(),
            Op::ReadRaw(bufs) => bufs
                .iter()
                .take(IOV_MAX)
                .map(|b| {
                    let (ptr, len) = b.parts();
                    libc::iovec {
                        iov_base: ptr.cast(),
                        iov_len: len,
                    }
                })
                .collect(),
            Op::Write(bufs) => bufs
                .iter()
                .take(IOV_MAX)
                .map(|b| libc::iovec {
                    iov_base: b.as_ptr().cast_mut().cast(),
                    iov_len: b.len(),
                })
                .collect(),
            Op::SyncData => Vec::new(),
        };
        let fd = types::Fd(raw.fd);
        let sqe = match &r.op {
            // An offset past `off_t` (and -1, "the file position", in particular) is the
            // backing's to refuse.
            _ if r.offset > i64::MAX as u64 => None,
            Op::SyncData => Some(
                opcode::Fsync::new(fd)
                    .flags(types::FsyncFlags::DATASYNC)
                    .build(),
            ),
            _ if !raw.fits(
                r.offset,
                iov.iter().map(|v| (v.iov_base as usize, v.iov_len)),
            ) =>
            {
                None
            }
            Op::Read(_) | Op::ReadRaw(_) => Some(
                opcode::Readv::new(fd, iov.as_ptr(), iov.len() as u32)
                    .offset(r.offset)
                    .build(),
            ),
            Op::Write(_) => Some(
                opcode::Writev::new(fd, iov.as_ptr(), iov.len() as u32)
                    .offset(r.offset)
                    .build(),
            ),
        };
        if sqe.is_none() {
            inline.push(i);
        }
        sqes.push(sqe.map(|e| e.user_data(i as u64)));
        iovecs.push(iov);
    }
    let mut queue: VecDeque<usize> = (0..reqs.len()).filter(|&i| sqes[i].is_some()).collect();
    if queue.is_empty() {
        // Nothing for the ring (`run` runs the requests inline).
        return Some(ring);
    }
    let mut batch = Batch {
        ring: Some(ring),
        in_flight: 0,
        fd: raw.fd,
    };
    batch.fill(&mut queue, &sqes);
    let mut ok = Ok(());
    if !inline.is_empty() {
        // The ring works on the first chunk while the requests it cannot take run here.
        // (Without such requests the first submission is also the first wait, one call.)
        ok = batch.enter(false);
        if ok.is_ok() {
            for &i in &inline {
                run_inline(backing, &mut reqs[i]);
            }
        }
    }
    while ok.is_ok() && (batch.in_flight > 0 || !queue.is_empty()) {
        batch.fill(&mut queue, &sqes);
        ok = batch
            .enter(true)
            .map(|()| batch.reap(reqs, &mut queue, on_done));
    }
    match ok {
        Ok(()) => batch.finish(),
        Err(_) => {
            // The ring refused to take more. Wait for what it did take; what it did not stays
            // in its submission queue, which is dropped with the ring, unsubmitted, before
            // `run` runs those requests inline.
            batch.drain_submitted(reqs, &mut queue);
            None
        }
    }
    // `iovecs` is dropped here, after `batch`.
}

/// A batch in a ring: counts what the ring holds of it, and waits for all of it if dropped
/// early (a panic in an inline request), so no request can outlive the borrowed buffers.
struct Batch {
    /// `None` once handed back by [`Batch::finish`] or given up after a failure.
    ring: Option<Ring>,
    /// Requests pushed and not yet reaped: in the submission queue or in the kernel.
    in_flight: usize,
    /// The descriptor every request of the batch reads or writes.
    #[cfg_attr(not(test), allow(dead_code))]
    fd: i32,
}

impl Batch {
    fn ring(&mut self) -> &mut IoUring {
        &mut self
            .ring
            .as_mut()
            .expect("a batch's ring is present until it ends")
            .ring
    }

    /// Pushes queued requests while the batch has fewer than [`ENTRIES`] in the ring.
    fn fill(&mut self, queue: &mut VecDeque<usize>, sqes: &[Option<squeue::Entry>]) {
        let mut in_flight = self.in_flight;
        let mut sq = self.ring().submission();
        while in_flight < ENTRIES as usize {
            let Some(i) = queue.pop_front() else { break };
            let Some(sqe) = &sqes[i] else { continue };
            // SAFETY: the entry points at the request's iovec array and, through it, at the
            // request's buffers (or at nothing, for a sync); `run_batch` keeps both alive and
            // untouched until the entry's completion is reaped (the array lives to the end of
            // `run_batch`, the buffers are borrowed by `reqs` for the call, and `Batch`'s drop
            // waits for every entry still in the ring on any early exit). The descriptor is
            // open for the call: the backing that returned it is borrowed for it.
            if unsafe { sq.push(sqe) }.is_err() {
                // Cannot happen: the queue holds at most `in_flight` < ENTRIES entries.
                queue.push_front(i);
                break;
            }
            in_flight += 1;
        }
        drop(sq);
        self.in_flight = in_flight;
    }

    /// Entries pushed that the kernel has not taken yet.
    fn unsubmitted(&mut self) -> usize {
        self.ring().submission().len()
    }

    /// Entries the kernel took whose completions are not reaped yet.
    fn submitted(&mut self) -> usize {
        self.in_flight - self.unsubmitted()
    }

    /// Submits what the submission queue holds and, with `wait`, waits for at least one
    /// completion. `EINTR` is retried; `EAGAIN` and `EBUSY` (the kernel short of resources)
    /// wait for a completion of the batch to free some, or retry after a pause if the
    /// kernel holds none. Any other error is the ring's failure.
    fn enter(&mut self, wait: bool) -> io::Result<()> {
        let mut pauses = 0;
        loop {
            let r = match injected_fault() {
                Some(e) => Err(e),
                None => self.ring().submit_and_wait(usize::from(wait)),
            };
            match r {
                Ok(_) => return Ok(()),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN) | Some(libc::EBUSY) if self.submitted() > 0 => {
                        return self.wait_for_one();
                    }
                    Some(libc::EAGAIN) | Some(libc::EBUSY) if pauses < 1000 => {
                        pauses += 1;
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    _ => return Err(e),
                },
            }
        }
    }

    /// Waits for one completion without submitting anything.
    fn wait_for_one(&mut self) -> io::Result<()> {
        loop {
            // SAFETY: `io_uring_enter` submitting nothing, waiting for one completion, with no
            // extra argument (a null pointer of size 0).
            let r = unsafe {
                self.ring().submitter().enter::<libc::sigset_t>(
                    0,
                    1,
                    EnterFlags::GETEVENTS.bits(),
                    None,
                )
            };
            match r {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes every completion the ring holds: sets the request's result, or queues it again
    /// after `EAGAIN` or `EINTR`.
    fn reap(&mut self, reqs: &mut [Req<'_>], queue: &mut VecDeque<usize>, on_done: OnDone<'_>) {
        let mut reaped = 0;
        #[cfg(all(test, not(loom)))]
        let fd = self.fd;
        for cqe in self.ring().completion() {
            reaped += 1;
            let i = cqe.user_data() as usize;
            let res = cqe.result();
            #[cfg(all(test, not(loom)))]
            let res = super::faults::on_completion(fd, reqs[i].offset, res);
            if res == -libc::EAGAIN || res == -libc::EINTR {
                queue.push_back(i);
                continue;
            }
            let r = reqs[i].result.insert(if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else {
                Ok(res as usize)
            });
            on_done(i, r);
        }
        self.in_flight -= reaped;
    }

    /// After a failure: reaps until the kernel holds nothing of the batch. If even waiting
    /// fails with requests still in the kernel there is no way to return without leaving them
    /// writing into (or reading from) memory the caller gets back, so the process aborts.
    fn drain_submitted(&mut self, reqs: &mut [Req<'_>], queue: &mut VecDeque<usize>) {
        while self.submitted() > 0 {
            if let Err(e) = self.wait_for_one() {
                fatal(&e);
            }
            self.reap(reqs, queue, &mut |_, _| {});
        }
        // The entries left in the submission queue go with the ring, never submitted.
        self.in_flight = 0;
        self.ring = None;
    }

    /// The ring, empty, to keep for the thread's next batch.
    fn finish(mut self) -> Option<Ring> {
        debug_assert_eq!(self.in_flight, 0);
        self.ring.take()
    }
}

impl Drop for Batch {
    /// Only reached with requests in the ring when `run_batch` unwinds: waits for them all,
    /// discarding their results, and drops the ring (a later batch makes a new one).
    fn drop(&mut self) {
        if self.ring.is_none() || self.in_flight == 0 {
            return;
        }
        while self.in_flight > 0 {
            match self.enter(true) {
                Ok(()) => {}
                // Nothing left in the kernel: the rest never left the submission queue and is
                // dropped with the ring.
                Err(_) if self.submitted() == 0 => break,
                Err(_) => {
                    if let Err(e) = self.wait_for_one() {
                        fatal(&e);
                    }
                }
            }
            let reaped = self.ring().completion().count();
            self.in_flight -= reaped;
        }
        self.ring = None;
    }
}

#[cfg(test)]
std::thread_local! {
    /// For the tests of the failure paths: the results the next submissions of this thread's
    /// batches get instead of calling the kernel, in order (`None`: call it).
    pub(super) static ENTER_FAULTS: RefCell<VecDeque<Option<i32>>> =
        const { RefCell::new(VecDeque::new()) };
}

/// The error a test planted for this submission, if any.
fn injected_fault() -> Option<io::Error> {
    #[cfg(test)]
    if let Some(Some(errno)) = ENTER_FAULTS.with(|f| f.borrow_mut().pop_front()) {
        return Some(io::Error::from_raw_os_error(errno));
    }
    None
}

/// The ring holds requests on the caller's buffers and can no longer be waited on: returning
/// would hand those buffers back while the kernel may still write into them.
#[cold]
fn fatal(e: &io::Error) -> ! {
    eprintln!("foliocache: io_uring failed with requests in flight ({e}); aborting");
    std::process::abort()
}
