//! Loom model of the write-ahead rule's durable point (`cache/wal.rs`, the real `LogState` on
//! loom's primitives): a writeback pass that finds the log durable far enough writes its
//! page, and what made the log durable happens before that write.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p foliocache
//! --lib loom_tests::wal`.
//!
//! | step | real code | pairs with |
//! |---|---|---|
//! | the engine's group commit | its log's sync, then `FolioCache::log_durable` -> `LogState::durable_to` (Release) | the pass's Acquire load in `LogState::flush` |
//! | a writeback pass | `mm::writeback::submit` -> `WbHost::flush_log` -> `LogState::flush`: `Ok` only if the load sees the number (no log to call here) | the commit's Release |
//!
//! The log's durability is an `UnsafeCell` the commit writes before publishing the number and
//! the pass reads after `flush` said yes (the page's write "relies" on it): a pass that relies
//! on the number without the commit's write happening before is loom's causality error. The
//! weakened variant publishes the number Relaxed.

use super::wal_code::LogState;
use crate::mm::sync::{model, thread, Arc, UnsafeCell};

struct Engine {
    state: LogState,
    /// The log's records up to 1 are on disk.
    synced: UnsafeCell<bool>,
}

// SAFETY: `synced` is only touched through loom's `UnsafeCell`, which checks the order of
// the accesses (the property under test).
unsafe impl Sync for Engine {}

fn rule(publish: fn(&LogState, u64)) {
    model(move || {
        let e = Arc::new(Engine {
            state: LogState::default(),
            synced: UnsafeCell::new(false),
        });
        let committer = {
            let e = Arc::clone(&e);
            thread::spawn(move || {
                // SAFETY: checked by loom against the pass's read.
                e.synced.with_mut(|p| unsafe { *p = true });
                publish(&e.state, 1);
            })
        };
        // A writeback pass of a page holding a change logged at 1.
        if e.state.flush(1).is_ok() {
            // SAFETY: as above.
            let synced = e.synced.with(|p| unsafe { *p });
            assert!(
                synced,
                "a page was written before its log record was durable"
            );
        }
        committer.join().unwrap();
    });
}

#[test]
fn a_page_is_written_only_after_its_log_is_durable() {
    rule(|s, lsn| s.durable_to(lsn));
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_relaxed_durable_point_is_caught() {
    rule(|s, lsn| s.durable_to_relaxed(lsn));
}
