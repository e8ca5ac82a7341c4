//! I/O engines: how a batch of reads, writes and syncs reaches the file behind a cache.
//!
//! # What it models
//!
//! The kernel's page cache hands block I/O to the block layer and returns: `read_pages`
//! submits a readahead window as a chain of bios, `writeback_iter` and `iomap_add_to_ioend`
//! build write bios for a run of dirty folios, and completions (`end_io` handlers) end the
//! fill or the writeback. A plug (`blk_start_plug` / `blk_finish_plug`) collects the requests
//! a thread issues in one go so they reach the device together. Userspace storage engines
//! that bring their own cache do the same with io_uring (RocksDB's `MultiRead`, one ring per
//! thread; PostgreSQL's `method_io_uring.c`) or with a pool of I/O workers doing
//! `preadv`/`pwritev` (PostgreSQL's `method_worker.c`).
//!
//! Here an [`Engine`] runs a *batch*: [`Engine::run`] takes every request a fill or a
//! writeback pass has ready (the plug), starts them all, and returns when all have completed,
//! each with its own result. A batch never outlives the call that made it, so the buffers
//! (frames of locked or writeback-flagged folios) need no ownership transfer, and nothing a
//! thread staged is ever left unsubmitted while it waits (the plug rule holds by
//! construction: the batch is flushed before the only wait, its own completion).
//!
//! | engine | in flight per call | completion | where |
//! |---|---|---|---|
//! | [`EngineKind::Uring`] | the whole batch | reaped by the submitting thread from its own ring | plain files ([`Backing::raw_io`]) where io_uring is allowed; a backing with no descriptor goes to a pool the engine starts for it |
//! | [`EngineKind::Pool`] | the whole batch, spread over worker threads | on the worker, counted down to the caller | anywhere; user backings |
//! | [`EngineKind::Sync`] | one request at a time | in the call | today's behaviour, for comparison and tests |
//!
//! # The request contract
//!
//! A [`Req`] is one system call's worth of I/O with `preadv(2)` / `pwritev(2)` /
//! `fdatasync(2)` semantics: a read or write may complete short (the caller continues from
//! where it stopped, as [`read_run`](super::read_run) does), `EINTR` and `EAGAIN` are retried
//! by the engine, any other error is the request's own and fails no other request of the
//! batch. A [`Op::SyncData`] covers only the writes that completed before the batch it is in
//! started: callers put a sync in a batch of its own, after the writes it must cover.
//!
//! # The io_uring engine (`uring.rs`)
//!
//! The shape of PostgreSQL's `method_io_uring.c` and of RocksDB's `MultiRead`: every thread
//! that issues I/O has its own ring, made on its first batch and dropped when the thread
//! exits (one descriptor per thread that has issued I/O). No ring is shared, so none needs a
//! lock, and the kernel may be told so.
//!
//! - **Setup flags**, tried best first, each step down taken only when the kernel refuses a
//!   flag it does not know (`EINVAL`): `SINGLE_ISSUER | DEFER_TASKRUN | COOP_TASKRUN`
//!   (6.1+), then `SINGLE_ISSUER | COOP_TASKRUN` (6.0), then `COOP_TASKRUN` (5.19), then
//!   none. `SINGLE_ISSUER` promises the kernel that one thread submits; `COOP_TASKRUN` lets
//!   the kernel run the completion work of a request at the thread's next system call
//!   instead of interrupting it as each request ends; `DEFER_TASKRUN` defers that work
//!   further, to the thread's next wait for completions, so it runs in a batch, when the
//!   thread asks. Which flags a thread's ring got is `uring::ring_flags`.
//! - **Opcodes** are probed once per process (`IORING_REGISTER_PROBE`): `READV`, `WRITEV`
//!   and `FSYNC` are required.
//! - **Availability**: making the engine makes the calling thread's ring, and fails if the
//!   kernel refuses (`ENOSYS`; `EPERM` from a seccomp profile, a container runtime, or the
//!   `kernel.io_uring_disabled` sysctl, which is read first so its value 2 gets a clear
//!   message). [`IoEngine::Auto`] then takes the pool. A thread whose ring cannot be made
//!   later runs its batches inline.
//! - **A batch**: each request the backing's descriptor can take ([`Backing::raw_io`], and
//!   [`RawIo::fits`] for a descriptor open `O_DIRECT`) becomes one `READV`, `WRITEV` or
//!   `FSYNC(DATASYNC)` entry whose `user_data` is its index in the batch; the others run
//!   inline through the backing's methods once the ring has the first entries, so the
//!   device works meanwhile. At most 128 entries of a batch are in the ring at once (so the
//!   completion queue, twice that, never overflows); a bigger batch is fed as completions
//!   come. A completion's negative result is the request's error, except `EAGAIN` and
//!   `EINTR`, which put the same entry back in the ring.
//! - **Reaped by the submitter.** The thread that submits a batch waits for every one of its
//!   completions before [`Engine::run`] returns. Two reasons: with `DEFER_TASKRUN` only the
//!   submitting thread can reap its ring at all, and the requests point into buffers the
//!   caller only lent for the call (folio frames, which the ring can neither own nor keep
//!   alive).
//!   Nothing of a batch stays in a ring after the call, so a ring between calls is empty and
//!   a thread may exit at any time. If the ring fails part of the way (`io_uring_enter`
//!   refusing to submit), the engine waits for what the kernel took, drops the ring with
//!   what it did not take still unsubmitted, and runs those requests inline; the thread's
//!   next batch makes a new ring. If the engine unwinds (a backing panicking in an inline
//!   request), a guard waits for the ring's requests first.
//!
//! # The worker-pool engine (`pool.rs`)
//!
//! PostgreSQL's `method_worker.c`: a fixed set of threads (`foliocache-io-0`, `-1`, ...;
//! twice the CPUs by default, at least 2 and at most 32) started with the engine and joined
//! when it is dropped. [`Engine::run`] puts every request of the batch on one shared queue
//! and sleeps until a per-batch countdown reaches zero; each worker takes a request and runs
//! it with [`run_inline`], so any [`Backing`] works, files or not. The caller's buffers and
//! backing reach the workers as raw pointers, valid because `run` does not return, not even
//! by unwinding, before the countdown is zero. A batch of one request runs in the calling
//! thread (there is nothing to overlap it with), and so does a batch a worker starts on its
//! own pool. A backing that panics on a worker fails its request with an error (the worker
//! lives on and the batch still completes).
//!
//! # Choosing an engine by environment
//!
//! `FOLIOCACHE_IO_ENGINE`, when set to `auto`, `uring`, `pool` or `sync`, overrides the
//! [`IoEngine`] every [`Engine::new`] is given, so a whole test suite (or a program) can be
//! run under each engine without a change: `FOLIOCACHE_IO_ENGINE=pool cargo test`. An empty
//! value counts as unset; any other value makes [`Engine::new`] fail with an error naming the
//! variable and the values it accepts. Under loom every choice is the synchronous engine
//! (the model checker runs neither kernel I/O nor threads it does not model).

// The cache, which drives the engines, is not compiled under loom.
#![cfg_attr(loom, allow(dead_code))]

pub(crate) mod pool;
mod uring;

#[cfg(all(test, not(loom)))]
mod tests;

/// Faults the tests plant at a descriptor and a file offset (`EIO`, a short count, `EAGAIN`),
/// applied once to the result the kernel gave the next read or write there, on the engines'
/// own paths: a ring's completions (`uring.rs`) and `FileBacking`'s system calls (the pool's
/// workers and the synchronous engine). Only a ring applies `EAGAIN` (a blocking `preadv` on
/// a regular file never returns it; a ring's completion may, and is queued again).
#[cfg(all(test, not(loom)))]
pub(crate) mod faults {
    use std::io;
    use std::sync::Mutex;

    /// What a planted fault does to the kernel's result.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Fault {
        /// The call fails with this errno.
        Errno(i32),
        /// The call moves at most this many bytes (the kernel's result is cut down to it).
        Short(usize),
        /// The completion is `-EAGAIN` (rings only).
        Again,
    }

    static PLANTED: Mutex<Vec<(i32, u64, Fault)>> = Mutex::new(Vec::new());

    /// Plants `fault` for the next read or write on descriptor `fd` at `offset`.
    pub(crate) fn plant(fd: i32, offset: u64, fault: Fault) {
        PLANTED.lock().unwrap().push((fd, offset, fault));
    }

    /// Removes every fault still planted on `fd`; returns how many there were.
    pub(crate) fn clear(fd: i32) -> usize {
        let mut p = PLANTED.lock().unwrap();
        let before = p.len();
        p.retain(|&(f, _, _)| f != fd);
        before - p.len()
    }

    /// Takes the fault planted at `fd` and `offset` that `pred` accepts, if any.
    fn take(fd: i32, offset: u64, pred: impl Fn(Fault) -> bool) -> Option<Fault> {
        let mut p = PLANTED.lock().unwrap();
        let i = p
            .iter()
            .position(|&(f, o, x)| f == fd && o == offset && pred(x))?;
        Some(p.remove(i).2)
    }

    /// A ring's completion result (bytes, or `-errno`) after the fault planted there.
    pub(crate) fn on_completion(fd: i32, offset: u64, res: i32) -> i32 {
        match take(fd, offset, |_| true) {
            None => res,
            Some(Fault::Errno(e)) => -e,
            Some(Fault::Again) => -libc::EAGAIN,
            Some(Fault::Short(n)) if res >= 0 => res.min(n as i32),
            Some(Fault::Short(_)) => res,
        }
    }

    /// A system call's result after the fault planted there (`EAGAIN` stays planted for a
    /// ring).
    pub(crate) fn on_call(fd: i32, offset: u64, r: io::Result<usize>) -> io::Result<usize> {
        match take(fd, offset, |f| f != Fault::Again) {
            None => r,
            Some(Fault::Errno(e)) => Err(io::Error::from_raw_os_error(e)),
            Some(Fault::Short(n)) => r.map(|got| got.min(n)),
            Some(Fault::Again) => unreachable!("not taken"),
        }
    }
}

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut};

use super::backing::Backing;
pub use super::backing::RawIo;

#[cfg(all(test, not(loom)))]
use uring::ring_flags;
pub(crate) use uring::uring_available;

/// The io_uring setup flags the calling thread's ring got (made now if the thread has none),
/// for reports: `single_issuer|defer_taskrun|coop_taskrun` on a recent kernel, fewer on an
/// older one; an error if io_uring is unavailable.
pub fn uring_setup_flags() -> io::Result<&'static str> {
    uring::ring_flags()
}

/// The environment variable that overrides the engine choice ([`Engine::new`]).
pub(crate) const ENGINE_ENV: &str = "FOLIOCACHE_IO_ENGINE";

/// Which I/O engine a cache uses ([`Config::io_engine`](crate::Config::io_engine)).
///
/// The environment variable `FOLIOCACHE_IO_ENGINE` (`auto`, `uring`, `pool` or `sync`)
/// overrides the choice for every cache the process makes, so a program or a test suite can
/// be run under each engine unchanged; any other non-empty value makes the cache fail to
/// build, with an error naming the variable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IoEngine {
    /// The best this process may use: io_uring where the kernel allows it (not disabled by
    /// the `kernel.io_uring_disabled` sysctl or a seccomp profile), the worker pool
    /// otherwise.
    #[default]
    Auto,
    /// io_uring, one ring per thread; making the cache fails where it is unavailable.
    Uring,
    /// A pool of worker threads doing `preadv(2)` / `pwritev(2)` (PostgreSQL's `worker`
    /// method): portable, and the engine for backings that are not plain files.
    Pool,
    /// Every request in the calling thread, one at a time (queue depth 1).
    Sync,
}

impl IoEngine {
    /// Every choice, `auto` first.
    pub const ALL: [IoEngine; 4] = [
        IoEngine::Auto,
        IoEngine::Uring,
        IoEngine::Pool,
        IoEngine::Sync,
    ];

    /// The stable name (`auto`, `uring`, `pool`, `sync`).
    pub fn name(self) -> &'static str {
        match self {
            IoEngine::Auto => "auto",
            IoEngine::Uring => "uring",
            IoEngine::Pool => "pool",
            IoEngine::Sync => "sync",
        }
    }
}

impl crate::Variant for IoEngine {
    const KIND: &'static str = "I/O engine";
    const ALL: &'static [Self] = &IoEngine::ALL;
    fn name(self) -> &'static str {
        IoEngine::name(self)
    }
}
crate::variant::variant_traits!(IoEngine);

/// Whether a cache reads and writes its files with direct I/O
/// ([`Config::direct_io`](crate::Config::direct_io)).
///
/// With direct I/O (`O_DIRECT`) the file's bytes move between the device and the cache's own
/// frames: the kernel keeps no second copy of them in its page cache, and writeback pays no
/// copy into it. The mode is chosen per file when the cache first opens it and kept for the
/// life of its inode (never mixed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DirectIo {
    /// Direct I/O where the file system supports it (`statx` reports a direct-I/O alignment
    /// no larger than a page: ext4, XFS, btrfs), buffered elsewhere (tmpfs, most FUSE and
    /// network file systems).
    #[default]
    Auto,
    /// Direct I/O or an error: opening a file whose file system has none fails.
    On,
    /// Always through the kernel's page cache (every byte cached twice).
    Off,
    /// Buffered, uncached: no `O_DIRECT` (no alignment rules, the kernel's own readahead),
    /// but every read and write passes `RWF_DONTCACHE`, so the kernel drops its copy once
    /// the bytes are read or written back (Linux 6.14 on; ext4, XFS and btrfs take it). Plain
    /// buffered I/O where the kernel or the file system does not take it (tmpfs).
    Uncached,
}

impl DirectIo {
    /// Every choice, `auto` first.
    pub const ALL: [DirectIo; 4] = [
        DirectIo::Auto,
        DirectIo::On,
        DirectIo::Off,
        DirectIo::Uncached,
    ];

    /// The stable name (`auto`, `on`, `off`, `uncached`).
    pub fn name(self) -> &'static str {
        match self {
            DirectIo::Auto => "auto",
            DirectIo::On => "on",
            DirectIo::Off => "off",
            DirectIo::Uncached => "uncached",
        }
    }

    /// The choice `FOLIOCACHE_DIRECT_IO` names (`auto`, `on`, `off`, `uncached`) if it is set, else
    /// `self`: the environment overrides a configuration, so a test suite can run under
    /// each mode. An unknown value is an error naming the variable.
    pub(crate) fn resolve_env(self) -> Result<DirectIo, crate::UnknownVariant> {
        match std::env::var("FOLIOCACHE_DIRECT_IO") {
            Ok(v) if !v.is_empty() => <DirectIo as crate::Variant>::from_name(&v),
            _ => Ok(self),
        }
    }
}

/// How the cache reads and writes one file ([`CachedFile::io_mode`](crate::CachedFile::io_mode)),
/// chosen at the inode's first open from [`DirectIo`] and what the file system offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IoMode {
    /// Direct I/O (`O_DIRECT`) with requests aligned to `align` bytes: the bytes move
    /// between the device and the cache's frames, and the kernel keeps no copy.
    Direct {
        /// The file's direct-I/O alignment (`statx`'s `STATX_DIOALIGN`).
        align: u32,
    },
    /// Buffered with `RWF_DONTCACHE`: the kernel drops its copy once the bytes are read or
    /// written back.
    Uncached,
    /// Buffered through the kernel's page cache, which keeps a second copy.
    Buffered,
    /// A backing of the caller's ([`FolioCache::open_backing`](crate::FolioCache::open_backing)),
    /// which does its own I/O.
    Backing,
}

impl fmt::Display for IoMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoMode::Direct { align } => write!(f, "direct I/O (alignment {align} bytes)"),
            IoMode::Uncached => f.write_str("buffered, uncached (RWF_DONTCACHE)"),
            IoMode::Buffered => f.write_str("buffered (the kernel caches it too)"),
            IoMode::Backing => f.write_str("the backing's own I/O"),
        }
    }
}

impl crate::Variant for DirectIo {
    const KIND: &'static str = "direct I/O mode (FOLIOCACHE_DIRECT_IO)";
    const ALL: &'static [Self] = &DirectIo::ALL;
    fn name(self) -> &'static str {
        DirectIo::name(self)
    }
}
crate::variant::variant_traits!(DirectIo);

/// The engine a cache runs ([`FolioCache::io_engine`](crate::FolioCache::io_engine)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EngineKind {
    /// io_uring.
    Uring,
    /// The worker pool.
    Pool,
    /// Synchronous calls.
    Sync,
}

impl EngineKind {
    /// The stable name (`uring`, `pool`, `sync`).
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Uring => "uring",
            EngineKind::Pool => "pool",
            EngineKind::Sync => "sync",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A buffer a read fills, by address: for a caller that ends each request's work as it
/// completes (unlocking the folios a read filled while the rest of the batch is in flight),
/// which borrowed slices would forbid. See [`Req::read_raw`] for the contract.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

impl RawBuf {
    /// The buffer `buf` points at, by address.
    pub(crate) fn of(buf: &mut [u8]) -> RawBuf {
        RawBuf {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
        }
    }

    /// The address and the length.
    pub(crate) fn parts(self) -> (*mut u8, usize) {
        (self.ptr, self.len)
    }

    /// The buffer as a slice, for one call.
    ///
    /// # Safety
    ///
    /// As [`Req::read_raw`]: the memory is valid, and written only through this request,
    /// until the request's completion is announced.
    pub(crate) unsafe fn slice_mut<'b>(self) -> &'b mut [u8] {
        // SAFETY: the caller's promise, above.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

// SAFETY: a `RawBuf` is an address and a length; the memory it names is handed from the
// caller to the engine's thread for the request's life by `Req::read_raw`'s contract, as a
// `&mut [u8]` would be.
unsafe impl Send for RawBuf {}

/// What one request does.
pub(crate) enum Op<'a> {
    /// Read into these buffers, in order, from the request's offset (`preadv`). (The cache
    /// reads with [`Op::ReadRaw`], ending each request as it completes; this safe form is the
    /// tests'.)
    #[cfg_attr(not(test), allow(dead_code))]
    Read(Vec<&'a mut [u8]>),
    /// The same, into buffers named by address ([`Req::read_raw`]).
    ReadRaw(Vec<RawBuf>),
    /// Write these buffers, in order, at the request's offset (`pwritev`).
    Write(Vec<&'a [u8]>),
    /// `fdatasync`: the writes completed before this batch started are durable.
    #[cfg_attr(not(test), allow(dead_code))] // the cache's syncs call the backing directly
    SyncData,
}

/// One request of a batch, and its result once the batch has run.
pub(crate) struct Req<'a> {
    /// The file offset the read or write starts at (ignored for a sync).
    pub(crate) offset: u64,
    pub(crate) op: Op<'a>,
    /// The bytes read or written (0 for a sync), or the error; `None` until run.
    pub(crate) result: Option<io::Result<usize>>,
}

impl<'a> Req<'a> {
    /// A read of `bufs` at `offset`.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn read(offset: u64, bufs: Vec<&'a mut [u8]>) -> Req<'a> {
        Req {
            offset,
            op: Op::Read(bufs),
            result: None,
        }
    }

    /// A read of `bufs`, named by address, at `offset`.
    ///
    /// # Safety
    ///
    /// Until the engine announces this request's completion ([`Engine::run_each`]'s
    /// callback, or the return of [`Engine::run`]), every buffer stays valid and nothing but
    /// the engine reads or writes it; after the announcement the engine never touches it
    /// again (the caller may then hand the memory to others, as a fill unlocks its folios).
    pub(crate) unsafe fn read_raw(offset: u64, bufs: Vec<RawBuf>) -> Req<'a> {
        Req {
            offset,
            op: Op::ReadRaw(bufs),
            result: None,
        }
    }

    /// A write of `bufs` at `offset`.
    pub(crate) fn write(offset: u64, bufs: Vec<&'a [u8]>) -> Req<'a> {
        Req {
            offset,
            op: Op::Write(bufs),
            result: None,
        }
    }

    /// A data sync.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn sync_data() -> Req<'a> {
        Req {
            offset: 0,
            op: Op::SyncData,
            result: None,
        }
    }

    /// The result, once run.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn take_result(&mut self) -> io::Result<usize> {
        self.result
            .take()
            .unwrap_or_else(|| Err(io::Error::other("an I/O request was never run")))
    }
}

/// Runs one request in the calling thread through the backing's own calls: the synchronous
/// engine, and every engine's path for a backing it cannot drive directly.
pub(crate) fn run_inline(backing: &dyn Backing, req: &mut Req<'_>) {
    let offset = req.offset;
    let r = loop {
        let r = match &mut req.op {
            Op::Read(bufs) if bufs.len() == 1 => backing.read_at(bufs[0], offset),
            Op::Read(bufs) => {
                let mut iov: Vec<IoSliceMut<'_>> =
                    bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
                backing.read_vectored_at(&mut iov, offset)
            }
            Op::ReadRaw(bufs) => {
                // SAFETY: `Req::read_raw`'s contract: the buffers are the request's until its
                // completion is announced, which is after this call.
                let mut iov: Vec<IoSliceMut<'_>> = bufs
                    .iter()
                    .map(|b| IoSliceMut::new(unsafe { b.slice_mut() }))
                    .collect();
                backing.read_vectored_at(&mut iov, offset)
            }
            Op::Write(bufs) if bufs.len() == 1 => backing.write_at(bufs[0], offset),
            Op::Write(bufs) => {
                let iov: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
                backing.write_vectored_at(&iov, offset)
            }
            Op::SyncData => backing.sync_data().map(|()| 0),
        };
        match r {
            Err(e)
                if e.kind() == io::ErrorKind::Interrupted
                    || e.kind() == io::ErrorKind::WouldBlock => {}
            r => break r,
        }
    };
    req.result = Some(r);
}

/// Whether requests to `backing` gain from an engine's batches: a direct-I/O descriptor
/// (every request waits for the device) or a backing the engine cannot drive directly (a
/// user's store, whose calls the pool runs in parallel). A buffered descriptor does not: the
/// kernel's page cache already streams the device behind it, and on tmpfs an io_uring
/// request for it is handed to a kernel worker thread, a context switch per request (about
/// twice the cost of a `pwrite` here); its requests run one by one in the caller.
pub(crate) fn batches_help(backing: &dyn Backing) -> bool {
    backing.raw_io().is_none_or(|r| r.align != 0)
}

/// A cache's I/O engine: runs batches of requests (see the module docs).
pub(crate) struct Engine {
    kind: EngineKind,
    /// The pool's workers, for [`EngineKind::Pool`].
    pool: Option<pool::Pool>,
    /// For [`EngineKind::Uring`]: the pool that runs the batches of backings with no
    /// descriptor ([`Backing::raw_io`] is `None`: a user's store), which a ring cannot
    /// drive; started by the first such batch.
    fallback: std::sync::OnceLock<Option<pool::Pool>>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Engine");
        d.field("kind", &self.kind);
        if let Some(p) = &self.pool {
            d.field("threads", &p.threads());
        }
        d.finish()
    }
}

impl Engine {
    /// The engine `choice` names, or the one `FOLIOCACHE_IO_ENGINE` names when it is set (see
    /// the module docs); or the error that makes it unavailable here.
    pub(crate) fn new(choice: IoEngine) -> io::Result<Engine> {
        let choice = env_choice(choice, std::env::var_os(ENGINE_ENV))?;
        Engine::exactly(choice)
    }

    /// The engine `choice` names, whatever the environment says: [`IoEngine::Uring`] fails
    /// where the calling thread cannot make a ring, [`IoEngine::Auto`] takes the pool there.
    pub(crate) fn exactly(choice: IoEngine) -> io::Result<Engine> {
        if cfg!(loom) {
            return Ok(Engine::sync());
        }
        match choice {
            IoEngine::Sync => Ok(Engine::sync()),
            IoEngine::Pool => Engine::pool(pool::default_threads()),
            IoEngine::Uring => {
                uring_available()?;
                Ok(Engine::uring())
            }
            IoEngine::Auto => match uring_available() {
                Ok(()) => Ok(Engine::uring()),
                Err(_) => Engine::pool(pool::default_threads()),
            },
        }
    }

    /// The synchronous engine.
    pub(crate) fn sync() -> Engine {
        Engine {
            kind: EngineKind::Sync,
            pool: None,
            fallback: std::sync::OnceLock::new(),
        }
    }

    /// A worker pool of `threads` threads (at least 1), started now; the error is the
    /// failure to start one.
    pub(crate) fn pool(threads: usize) -> io::Result<Engine> {
        Ok(Engine {
            kind: EngineKind::Pool,
            pool: Some(pool::Pool::new(threads)?),
            fallback: std::sync::OnceLock::new(),
        })
    }

    fn uring() -> Engine {
        Engine {
            kind: EngineKind::Uring,
            pool: None,
            fallback: std::sync::OnceLock::new(),
        }
    }

    /// Which engine this is.
    pub(crate) fn kind(&self) -> EngineKind {
        self.kind
    }

    /// Runs every request of `reqs` against `backing` and returns when all have completed,
    /// each with its result (see the module docs for the contract).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn run(&self, backing: &dyn Backing, reqs: &mut [Req<'_>]) {
        self.run_each(backing, reqs, &mut |_, _| {});
    }

    /// [`Engine::run`], calling `on_done(i, result)` in this thread once for each request `i`
    /// as it completes: as the io_uring engine reaps its completion, so its caller can end
    /// that request's work (`folio_end_writeback`) while the rest of the batch is in flight;
    /// the pool and the synchronous engine call it as their requests finish or at the end.
    pub(crate) fn run_each(
        &self,
        backing: &dyn Backing,
        reqs: &mut [Req<'_>],
        on_done: OnDone<'_>,
    ) {
        let mut notified = vec![false; reqs.len()];
        {
            let mut note = |i: usize, r: &io::Result<usize>| {
                notified[i] = true;
                on_done(i, r);
            };
            self.dispatch(backing, reqs, &mut note);
        }
        // What no completion announced (the pool's, a failed ring's): now, in order.
        for (i, r) in reqs.iter().enumerate() {
            if let (false, Some(res)) = (notified[i], &r.result) {
                on_done(i, res);
            }
        }
    }

    fn dispatch(&self, backing: &dyn Backing, reqs: &mut [Req<'_>], on_done: OnDone<'_>) {
        match (self.kind, &self.pool) {
            (EngineKind::Pool, Some(p)) => p.run(backing, reqs),
            (EngineKind::Uring, _) if backing.raw_io().is_some() => {
                uring::run(backing, reqs, on_done)
            }
            (EngineKind::Uring, _) => {
                let pool = self
                    .fallback
                    .get_or_init(|| pool::Pool::new(pool::default_threads()).ok());
                match pool {
                    Some(p) => p.run(backing, reqs),
                    // No thread could start: one at a time, here.
                    None => reqs.iter_mut().for_each(|r| run_inline(backing, r)),
                }
            }
            _ => {
                for (i, r) in reqs.iter_mut().enumerate() {
                    run_inline(backing, r);
                    if let Some(res) = &r.result {
                        on_done(i, res);
                    }
                }
            }
        }
    }
}

/// What [`Engine::run_each`] calls as each request completes: its index and its result.
pub(crate) type OnDone<'a> = &'a mut dyn FnMut(usize, &io::Result<usize>);

/// The engine to make: `choice`, unless the environment variable's value `var` names
/// another (an empty value counts as unset); an error for a value that names none.
fn env_choice(choice: IoEngine, var: Option<std::ffi::OsString>) -> io::Result<IoEngine> {
    let Some(var) = var.filter(|v| !v.is_empty()) else {
        return Ok(choice);
    };
    let bad = |given: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{ENGINE_ENV}: {}",
                crate::UnknownVariant::new::<IoEngine>(given)
            ),
        )
    };
    let v = var.to_str().ok_or_else(|| bad(&var.to_string_lossy()))?;
    v.parse::<IoEngine>().map_err(|_| bad(v))
}
