//! The one place that imports atomics, cells, locks and threads.
//!
//! Every other module of foliocache reaches concurrency primitives through this shim, never
//! through `std::sync::atomic` directly. Under a normal build the names below are the standard
//! library's; built with `RUSTFLAGS="--cfg loom"` they are [loom]'s model-checked doubles, so
//! the same protocol code runs inside `loom::model` unchanged (the crossbeam and tokio pattern).
//!
//! Besides the re-exports the shim provides what the kernel gets from its environment:
//!
//! | helper | kernel analog | here |
//! |---|---|---|
//! | [`current_cpu`] | `smp_processor_id()` | `sched_getcpu(3)`; a thread index under loom and Miri |
//! | [`num_cpus`] | `num_possible_cpus()` | `available_parallelism()`; 2 under loom and Miri |
//! | [`acquire_after_final_put`] | `smp_acquire__after_ctrl_dep()` | `fence(Acquire)`; an Acquire load under ThreadSanitizer |
//! | [`CachePadded`] | `____cacheline_aligned_in_smp` | crossbeam-utils' padding (128 B on x86-64, adjacent-line prefetch) |
//! | [`Backoff`] | `cpu_relax()` loops | crossbeam-utils' exponential backoff; `yield_now` under loom |
//! | [`Mutex`], [`Condvar`] | `spinlock_t`, wait queues | `std::sync` without poisoning; loom's under loom |
//! | [`UnsafeCell`] | plain fields guarded by a lock | loom-compatible `with`/`with_mut` access |
//!
//! Userspace cannot disable preemption, so "the current CPU" is only a hint: a thread may
//! migrate right after [`current_cpu`] returns. Code that indexes per-CPU data with it must
//! either tolerate that (atomic updates on the slot) or use per-thread slots; the modules that
//! do so say which in their essays.
//!
//! [loom]: https://docs.rs/loom

#![allow(unused_imports)]

#[cfg(loom)]
pub use loom::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8,
    AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub use std::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8,
    AtomicUsize, Ordering,
};

/// The Acquire half of a final put: called by the thread whose Release decrement of `word`
/// took it to zero, before it frees what the count protected (`Arc`'s drop pattern).
///
/// A `fence(Acquire)`: the decrement read from the release sequence of every earlier
/// holder's decrement, so their accesses happen before the free. ThreadSanitizer does not
/// model standalone fences and would report those accesses racing with the next user of the
/// memory; built for it (`--cfg foliocache_tsan`, which `scripts/tsan` sets), this is an
/// Acquire load of `word` instead, which orders the same accesses (it reads the zero from the
/// same release sequence) and which TSan sees, as std's `Arc` does under its sanitizer cfg.
#[inline(always)]
pub fn acquire_after_final_put(word: &AtomicU32) {
    #[cfg(not(foliocache_tsan))]
    {
        let _ = word;
        // ORDERING: Acquire fence; pairs with the Release decrements of the other holders (the
        // caller's `// ORDERING:` names them).
        fence(Ordering::Acquire);
    }
    #[cfg(foliocache_tsan)]
    {
        // ORDERING: as the fence above, through the word itself.
        let _ = word.load(Ordering::Acquire);
    }
}

/// `compiler_fence` is never modelled by loom (it constrains only the compiler), so it is the
/// standard one in both builds.
pub use std::sync::atomic::compiler_fence;

#[cfg(loom)]
pub use loom::sync::Arc;
#[cfg(not(loom))]
pub use std::sync::Arc;

/// A cell written once before it is shared (e.g. a hook installed at construction). std's in
/// both builds: loom has no model of it, and a value set before any thread can see the cell
/// needs none.
pub use std::sync::OnceLock;

pub use crossbeam_utils::CachePadded;

/// Threads: `spawn`, `yield_now`, `JoinHandle`, from std or loom.
pub mod thread {
    #[cfg(loom)]
    pub use loom::thread::{current, spawn, yield_now, Builder, JoinHandle};
    #[cfg(loom)]
    pub use std::thread::panicking;
    #[cfg(not(loom))]
    pub use std::thread::{current, panicking, spawn, yield_now, Builder, JoinHandle};

    /// Sleeps for `d` (`std::thread::sleep`); under loom, where there is no clock, a yield so
    /// the model explores the other threads.
    #[inline]
    pub fn sleep(d: std::time::Duration) {
        #[cfg(not(loom))]
        std::thread::sleep(d);
        #[cfg(loom)]
        {
            let _ = d;
            loom::thread::yield_now();
        }
    }
}

#[cfg(loom)]
pub use loom::thread_local;
/// Thread-local storage that loom can model (`loom::thread_local!` under loom).
#[cfg(not(loom))]
pub use std::thread_local;

/// A cell whose accesses loom can check for data races.
///
/// Mirrors `loom::cell::UnsafeCell`: access goes through closures receiving a raw pointer, so
/// the same code compiles in both builds. In a normal build the closures are inlined away.
#[derive(Debug, Default)]
#[repr(transparent)]
pub struct UnsafeCell<T: ?Sized>(
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
);

impl<T> UnsafeCell<T> {
    /// Wraps `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Wraps `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        Self(loom::cell::UnsafeCell::new(value))
    }

    /// Unwraps the value.
    #[cfg(not(loom))]
    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }

    /// Unwraps the value.
    #[cfg(loom)]
    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

impl<T: ?Sized> UnsafeCell<T> {
    /// Runs `f` with a shared raw pointer to the contents.
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(not(loom))]
        {
            f(self.0.get())
        }
        #[cfg(loom)]
        {
            self.0.with(f)
        }
    }

    /// Runs `f` with a mutable raw pointer to the contents.
    #[inline(always)]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(not(loom))]
        {
            f(self.0.get())
        }
        #[cfg(loom)]
        {
            self.0.with_mut(f)
        }
    }
}

/// A mutual-exclusion lock without poisoning (a panic while holding it is a bug we propagate,
/// not a state we recover from).
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized>(
    #[cfg(not(loom))] std::sync::Mutex<T>,
    #[cfg(loom)] loom::sync::Mutex<T>,
);

/// The guard of a [`Mutex`].
#[cfg(not(loom))]
pub type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;
/// The guard of a [`Mutex`].
#[cfg(loom)]
pub type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    /// Creates an unlocked mutex holding `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        Self(std::sync::Mutex::new(value))
    }

    /// Creates an unlocked mutex holding `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        Self(loom::sync::Mutex::new(value))
    }

    /// Consumes the mutex, returning its value.
    pub fn into_inner(self) -> T {
        self.0.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Acquires the lock, blocking the thread until it is free.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Acquires the lock if it is free right now.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(g) => Some(g),
            // loom's try_lock returns std's TryLockResult too.
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(_) => None,
        }
    }
}

/// A reader-writer lock without poisoning, like [`Mutex`]: many shared holders or one
/// exclusive holder (the kernel's `rw_semaphore`, e.g. `mapping->invalidate_lock`).
#[derive(Debug, Default)]
pub struct RwLock<T>(
    #[cfg(not(loom))] std::sync::RwLock<T>,
    #[cfg(loom)] loom::sync::RwLock<T>,
);

/// A shared hold of a [`RwLock`].
#[cfg(not(loom))]
pub type RwLockReadGuard<'a, T> = std::sync::RwLockReadGuard<'a, T>;
/// A shared hold of a [`RwLock`].
#[cfg(loom)]
pub type RwLockReadGuard<'a, T> = loom::sync::RwLockReadGuard<'a, T>;
/// An exclusive hold of a [`RwLock`].
#[cfg(not(loom))]
pub type RwLockWriteGuard<'a, T> = std::sync::RwLockWriteGuard<'a, T>;
/// An exclusive hold of a [`RwLock`].
#[cfg(loom)]
pub type RwLockWriteGuard<'a, T> = loom::sync::RwLockWriteGuard<'a, T>;

impl<T> RwLock<T> {
    /// Creates an unlocked lock holding `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        Self(std::sync::RwLock::new(value))
    }

    /// Creates an unlocked lock holding `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        Self(loom::sync::RwLock::new(value))
    }
}

impl<T> RwLock<T> {
    /// Takes the lock shared, blocking while an exclusive holder has it (`down_read`).
    #[inline]
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the lock exclusively, blocking while anyone holds it (`down_write`).
    #[inline]
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// A condition variable paired with [`Mutex`]; waiting sleeps in the kernel, never spins.
#[derive(Debug, Default)]
pub struct Condvar(
    #[cfg(not(loom))] std::sync::Condvar,
    #[cfg(loom)] loom::sync::Condvar,
);

impl Condvar {
    /// Creates a condition variable.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self(std::sync::Condvar::new())
    }

    /// Creates a condition variable.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self(loom::sync::Condvar::new())
    }

    /// Releases `guard`, sleeps until notified, and re-acquires the lock.
    #[inline]
    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    /// Sleeps while `condition` holds (re-checked after every wake-up).
    #[inline]
    pub fn wait_while<'a, T>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> MutexGuard<'a, T> {
        while condition(&mut *guard) {
            guard = self.wait(guard);
        }
        guard
    }

    /// Like [`Condvar::wait`] but gives up after `timeout` (loom: waits without a timeout,
    /// since the model has no clock). Returns the guard and whether the wait timed out.
    #[inline]
    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: std::time::Duration,
    ) -> (MutexGuard<'a, T>, bool) {
        #[cfg(not(loom))]
        {
            let (g, r) = self
                .0
                .wait_timeout(guard, timeout)
                .unwrap_or_else(|e| e.into_inner());
            (g, r.timed_out())
        }
        #[cfg(loom)]
        {
            let _ = timeout;
            (self.wait(guard), false)
        }
    }

    /// Wakes one waiter.
    #[inline]
    pub fn notify_one(&self) {
        self.0.notify_one()
    }

    /// Wakes every waiter.
    #[inline]
    pub fn notify_all(&self) {
        self.0.notify_all()
    }
}

/// Exponential backoff for spin loops: spins a little, then yields the CPU.
///
/// Under loom every step is a `yield_now`, which loom needs to explore other threads instead of
/// declaring a livelock.
#[derive(Debug, Default)]
pub struct Backoff(#[cfg(not(loom))] crossbeam_utils::Backoff);

impl Backoff {
    /// A fresh backoff.
    #[inline]
    pub fn new() -> Self {
        #[cfg(not(loom))]
        {
            Self(crossbeam_utils::Backoff::new())
        }
        #[cfg(loom)]
        {
            Self()
        }
    }

    /// Backs off in a lock-free retry loop (another thread made progress).
    #[inline]
    pub fn spin(&self) {
        #[cfg(not(loom))]
        self.0.spin();
        #[cfg(loom)]
        loom::thread::yield_now();
    }

    /// Backs off while waiting for another thread to make progress.
    #[inline]
    pub fn snooze(&self) {
        #[cfg(not(loom))]
        self.0.snooze();
        #[cfg(loom)]
        loom::thread::yield_now();
    }

    /// True once backing off has escalated to yielding: a blocking wait should take over.
    #[inline]
    pub fn is_completed(&self) -> bool {
        #[cfg(not(loom))]
        {
            self.0.is_completed()
        }
        #[cfg(loom)]
        {
            true
        }
    }
}

/// Hints the CPU that this is a spin-wait loop (`cpu_relax()`); a yield under loom.
#[inline(always)]
pub fn spin_loop() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// The CPU the calling thread runs on right now (`smp_processor_id()`), as a hint.
///
/// Uses `sched_getcpu(3)` (a vDSO call on x86-64 and arm64, a few nanoseconds). A thread may
/// migrate right after the call; see the module docs. If the call fails (an exotic platform),
/// a stable per-thread number is returned instead. Under loom and Miri (which has no
/// `sched_getcpu`), the thread's number modulo [`num_cpus`].
#[inline]
pub fn current_cpu() -> usize {
    #[cfg(not(any(loom, miri)))]
    {
        // SAFETY: sched_getcpu has no preconditions; it returns -1 on failure.
        let cpu = unsafe { libc::sched_getcpu() };
        if cpu >= 0 {
            cpu as usize
        } else {
            thread_number()
        }
    }
    #[cfg(any(loom, miri))]
    {
        thread_number() % num_cpus()
    }
}

/// A small, stable, process-unique number for the calling thread (0 for the first thread that
/// asks, 1 for the next ...). Useful to spread per-thread state over slots.
#[inline]
pub fn thread_number() -> usize {
    #[cfg(not(loom))]
    {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        std::thread_local! {
            // Const-initialised (`usize::MAX` until the first call numbers the thread): a
            // lazily initialised thread-local costs a call to its accessor on every use.
            static ME: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
        }
        #[cold]
        fn number_this_thread() -> usize {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            ME.with(|c| c.set(n));
            n
        }
        // A `Cell<usize>` has no destructor: the cell stays usable during thread exit.
        match ME.with(|c| c.get()) {
            usize::MAX => number_this_thread(),
            n => n,
        }
    }
    #[cfg(loom)]
    {
        // loom thread ids are small and stable within one model execution.
        let id = format!("{:?}", loom::thread::current().id());
        id.chars()
            .filter(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .unwrap_or(0)
    }
}

/// The number of CPUs work may be spread over (`num_possible_cpus()`); 2 under loom and Miri
/// (so that per-CPU state has more than one slot there too).
pub fn num_cpus() -> usize {
    #[cfg(not(any(loom, miri)))]
    {
        static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *N.get_or_init(|| {
            // SAFETY: sysconf has no preconditions.
            let conf = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
            let avail = std::thread::available_parallelism().map_or(1, |n| n.get());
            if conf > 0 {
                (conf as usize).max(avail)
            } else {
                avail
            }
        })
    }
    #[cfg(any(loom, miri))]
    {
        2
    }
}

/// The CPUs the calling thread may run on (its affinity mask), in ascending order; every CPU
/// `0..num_cpus()` if the mask cannot be read.
#[cfg(not(loom))]
pub fn allowed_cpus() -> Vec<usize> {
    if cfg!(miri) {
        // Miri interprets every thread on the one host thread: one CPU, whatever `num_cpus`
        // says (so tests that need two CPUs to pin to skip themselves).
        return vec![0];
    }
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `allowed` is a valid cpu_set_t and the size passed is its size.
    let ok =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) };
    if ok == 0 {
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `c` is below CPU_SETSIZE and `allowed` is initialised.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
            .collect()
    } else {
        (0..num_cpus()).collect()
    }
}

/// Pins the calling thread to the `cpu`-th CPU (modulo their number) of the ones it may run
/// on ([`allowed_cpus`]). Returns false if the kernel refused (e.g. a restricted cpuset); the
/// caller decides whether that matters.
#[cfg(not(loom))]
pub fn pin_to_cpu(cpu: usize) -> bool {
    let cpus = allowed_cpus();
    // Miri runs every thread on its one CPU: pinning means nothing there.
    if cpus.is_empty() || cfg!(miri) {
        return false;
    }
    let target = cpus[cpu % cpus.len()];
    // SAFETY: plain data, zeroed is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: target < CPU_SETSIZE because it came from the affinity mask.
    unsafe { libc::CPU_SET(target, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

/// Byte copies of shared memory that other threads may write at the same time.
///
/// Plain `memcpy` racing with a write is undefined behaviour in Rust even when the reader then
/// discards the bytes; these copies use relaxed atomic loads and stores (whole aligned words in
/// the middle, bytes at the ends), which are allowed to race with each other. They are the
/// standard library's atomics in both builds: loom does not model raw memory, and the bytes
/// copied are never part of a protocol's state.
pub mod racy {
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

    /// Copies `dst.len()` bytes from `src` with relaxed atomic loads.
    ///
    /// # Safety
    /// `src..src + dst.len()` must be valid for reads for the whole call, and every concurrent
    /// write to it must be atomic (e.g. [`store`]); no `&mut` to it may exist.
    pub unsafe fn load(src: *const u8, dst: &mut [u8]) {
        let n = dst.len();
        let mut i = 0;
        while i < n && (src as usize + i) % 8 != 0 {
            // SAFETY: in bounds and valid per the contract; AtomicU8 has no alignment need.
            dst[i] = unsafe { AtomicU8::from_ptr(src.add(i) as *mut u8) }.load(Ordering::Relaxed);
            i += 1;
        }
        while i + 8 <= n {
            // SAFETY: `src + i` is 8-aligned here and the 8 bytes are in bounds.
            let w = unsafe { AtomicU64::from_ptr(src.add(i) as *mut u64) }.load(Ordering::Relaxed);
            dst[i..i + 8].copy_from_slice(&w.to_ne_bytes());
            i += 8;
        }
        while i < n {
            // SAFETY: as above.
            dst[i] = unsafe { AtomicU8::from_ptr(src.add(i) as *mut u8) }.load(Ordering::Relaxed);
            i += 1;
        }
    }

    /// Copies `src` to `dst` with relaxed atomic stores.
    ///
    /// # Safety
    /// `dst..dst + src.len()` must be valid for writes for the whole call, and every concurrent
    /// access to it must be atomic (e.g. [`load`]); no reference to it may exist.
    pub unsafe fn store(dst: *mut u8, src: &[u8]) {
        let n = src.len();
        let mut i = 0;
        while i < n && (dst as usize + i) % 8 != 0 {
            // SAFETY: in bounds and valid per the contract.
            unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(src[i], Ordering::Relaxed);
            i += 1;
        }
        while i + 8 <= n {
            let w = u64::from_ne_bytes(src[i..i + 8].try_into().expect("8 bytes"));
            // SAFETY: `dst + i` is 8-aligned here and the 8 bytes are in bounds.
            unsafe { AtomicU64::from_ptr(dst.add(i) as *mut u64) }.store(w, Ordering::Relaxed);
            i += 8;
        }
        while i < n {
            // SAFETY: as above.
            unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(src[i], Ordering::Relaxed);
            i += 1;
        }
    }
}

/// Runs `f` under the loom model checker when built with `--cfg loom`, and once, directly,
/// otherwise (the tokio helper): protocol tests written with it run in both builds.
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    #[cfg(loom)]
    {
        loom::model(f);
    }
    #[cfg(not(loom))]
    {
        f();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn cpu_helpers_are_sane() {
        assert!(num_cpus() >= 1);
        assert!(current_cpu() < 4096);
        let a = thread_number();
        assert_eq!(a, thread_number(), "stable within a thread");
        let b = std::thread::spawn(thread_number).join().unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn pinning_moves_the_thread() {
        std::thread::spawn(|| {
            if pin_to_cpu(0) {
                // After pinning to the first allowed CPU we must be running on one CPU only.
                let c1 = current_cpu();
                std::thread::yield_now();
                assert_eq!(c1, current_cpu());
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn racy_copies_round_trip_at_any_alignment() {
        let mut buf = vec![0u8; 64];
        let src: Vec<u8> = (0..40).collect();
        for off in 0..9 {
            buf.fill(0);
            // SAFETY: in bounds of `buf`, no other access during the call.
            unsafe { racy::store(buf.as_mut_ptr().add(off), &src) };
            assert_eq!(&buf[off..off + 40], &src[..]);
            let mut out = vec![0u8; 40];
            // SAFETY: as above.
            unsafe { racy::load(buf.as_ptr().add(off), &mut out) };
            assert_eq!(out, src);
        }
    }

    #[test]
    fn mutex_and_condvar_round_trip() {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let p2 = pair.clone();
        let t = thread::spawn(move || {
            *p2.0.lock() = true;
            p2.1.notify_all();
        });
        let g = pair.1.wait_while(pair.0.lock(), |ready| !*ready);
        assert!(*g);
        drop(g);
        t.join().unwrap();
        assert!(pair.0.try_lock().is_some());
    }
}
