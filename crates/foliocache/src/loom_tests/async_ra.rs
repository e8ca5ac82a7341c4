//! Loom model of asynchronous readahead's hand-off (`cache/async_ra.rs`, the real code on
//! loom's primitives): a reader hands a window to a readahead worker and waits only for the
//! window's insertion (the handshake); the worker reads the window and counts itself out of
//! the inode's windows in flight; a handle's drop waits for that count (`InflightRa::wait`)
//! before the inode can be evicted and its pages freed.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p foliocache
//! --lib loom_tests::async_ra`.
//!
//! | step | real code | pairs with |
//! |---|---|---|
//! | the worker announces the insertion | `HandshakeSignal::signal` (a flag under the handshake's mutex, after `page_cache_ra_notify` inserted the folios) | the reader's `Handshake::wait`, which re-takes the mutex |
//! | the worker's job ends | `counted_job`: the `InflightGuard` drops after the job's last use of the inode (the count goes down under its mutex) | `InflightRa::wait` in `CachedFile::drop` and `invalidate` |
//! | the queue | `AsyncRa::submit` under the pool's mutex, a worker woken or started | the worker's loop in `AsyncRa::work` |
//!
//! The window is one page: an `inserted` flag (the index slot) and its bytes in an
//! `UnsafeCell` (the frame the read fills). After the handshake the reader must find the
//! window inserted; after the drop's wait, reading the frame (as eviction's free and a
//! test's accounting do) must be ordered after the worker's read into it.
//!
//! Weakened variants that must fail: a job that counts itself out before it runs (the drop's
//! wait returns while the frame is being filled: loom's causality error), and a reader that
//! does not wait for the handshake (it finds the window not yet inserted, and would read its
//! pages a second time).

use super::async_ra_code::{
    counted_job, counted_job_weakened, AsyncRa, Handshake, InflightGuard, InflightRa, Job,
};
use crate::mm::sync::{model, Arc, AtomicBool, Ordering, UnsafeCell};

/// The window's one page.
struct Window {
    /// In the index (the slot's store is under the index lock in the real code; the
    /// handshake is what orders it for the reader, so it is Relaxed here).
    inserted: AtomicBool,
    /// The frame the worker's read fills.
    bytes: UnsafeCell<u8>,
}

// SAFETY: the frame is only touched through loom's `UnsafeCell`, which checks the order of
// every access (the property under test).
unsafe impl Sync for Window {}

type MakeJob = fn(InflightGuard, Box<dyn FnOnce() + Send>) -> Job;

/// Runs the model; `early` records (outside loom, so that the model can finish cleanly) an
/// execution where the reader went on before the window was inserted.
fn handoff(
    make_job: MakeJob,
    wait_for_insertion: bool,
    early: &'static std::sync::atomic::AtomicBool,
) {
    model(move || {
        let pool = Arc::new(AsyncRa::new(1, "ra", |_| {}));
        let inflight = Arc::new(InflightRa::default());
        let window = Arc::new(Window {
            inserted: AtomicBool::new(false),
            bytes: UnsafeCell::new(0),
        });
        let (handshake, signal) = Handshake::new();
        let w = Arc::clone(&window);
        // `page_cache_ra_notify` on the worker: insert, announce, read, unlock.
        let job = make_job(
            InflightRa::enter(&inflight),
            Box::new(move || {
                // ORDERING: Relaxed; the handshake's mutex orders it for the reader.
                w.inserted.store(true, Ordering::Relaxed);
                signal.signal();
                // SAFETY: loom checks this write against the drop's read below.
                w.bytes.with_mut(|p| unsafe { *p = 7 });
            }),
        );
        // `start_async_ra` on the reader.
        match AsyncRa::submit(&pool, job, false) {
            Ok(()) if wait_for_insertion => handshake.wait(),
            Ok(()) => {}
            Err(job) => job(),
        }
        if !window.inserted.load(Ordering::Relaxed) {
            early.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        // The handle's drop: the inode's windows end first, then its pages may be freed.
        inflight.wait();
        // SAFETY: loom reports this read if the worker's write is not ordered before it.
        assert_eq!(window.bytes.with(|p| unsafe { *p }), 7);
        pool.stop();
    });
    assert!(
        !early.load(std::sync::atomic::Ordering::Relaxed),
        "the reader went on before the window was inserted"
    );
}

/// One flag per test (they run in parallel).
macro_rules! flag {
    () => {{
        static EARLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        &EARLY
    }};
}

#[test]
fn a_window_is_inserted_before_the_reader_goes_on_and_read_before_the_drop() {
    handoff(|g, f| counted_job(g, f), true, flag!());
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_job_counted_out_before_it_runs_is_caught() {
    handoff(|g, f| counted_job_weakened(g, f), true, flag!());
}

#[test]
#[should_panic(expected = "the reader went on before the window was inserted")]
fn a_reader_that_skips_the_handshake_is_caught() {
    handoff(|g, f| counted_job(g, f), false, flag!());
}
