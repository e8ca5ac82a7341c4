//! Loom models of the atomic seqcount (`crate::mm::seqcount`).
//!
//! Two protected words `a` and `b`; every writer adds the same amount to both inside one
//! section, so every consistent snapshot has `a == b`. The models check:
//!
//! - a reader (waiting or non-waiting) never accepts a snapshot with `a != b`, against a
//!   shared writer and an exclusive attempt racing each other (`shared_and_exclusive_*`),
//!   and against two exclusive attempts (`two_exclusive_attempts`);
//! - an exclusive (plain-store) section never overlaps another section: under loom every
//!   update touches a witness cell, immutably in shared sections and mutably in exclusive
//!   ones, and loom's race detector panics on any access not ordered by happens-before
//!   (the seqcount docs explain why this replaces the plain load + store under loom);
//! - no update is lost: at the end `a` and `b` equal the sum of every writer's amount;
//! - the word ends at one `STEP` per section with no writer bit left.
//!
//! Negative controls (`#[should_panic]`): an exclusive writer that skips its checks races
//! with a shared writer (loom reports the causality violation on the witness); writers without the release fence after begin let a reader accept a torn
//! snapshot.
//!
//! Run: `LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" cargo test --release -p foliocache
//! --lib loom_tests::seqcount`.

use crate::mm::seqcount::{Flaw, SeqCount, STEP};
use crate::mm::sync::{thread, Arc, AtomicU64, Ordering};

struct Shared {
    seq: SeqCount,
    a: AtomicU64,
    b: AtomicU64,
}

fn writer(s: &Shared, amount: u64, try_exclusive: bool) {
    let g = s.seq.write_begin(try_exclusive);
    g.add(&s.a, amount);
    g.add(&s.b, amount);
}

/// One non-waiting read attempt: returns the snapshot if the seqcount accepted it.
fn try_snapshot(s: &Shared) -> Option<(u64, u64)> {
    let start = s.seq.try_read_begin()?;
    let a = s.a.load(Ordering::Relaxed);
    let b = s.b.load(Ordering::Relaxed);
    (!s.seq.read_retry(start)).then_some((a, b))
}

/// One waiting read attempt (begin spins while writers are inside).
fn waiting_snapshot(s: &Shared) -> Option<(u64, u64)> {
    let start = s.seq.read_begin();
    let a = s.a.load(Ordering::Relaxed);
    let b = s.b.load(Ordering::Relaxed);
    (!s.seq.read_retry(start)).then_some((a, b))
}

fn run(flaw: Flaw, excl: [bool; 2], waiting_reader: bool) {
    // Counts the executions explored, so a model that loom prunes to nothing fails loudly
    // instead of passing vacuously.
    let explored = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = explored.clone();
    loom::model(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let s = Arc::new(Shared {
            seq: SeqCount::with_flaw(flaw),
            a: AtomicU64::new(0),
            b: AtomicU64::new(0),
        });
        let ws: Vec<_> = [(1u64, excl[0]), (2u64, excl[1])]
            .into_iter()
            .map(|(amount, e)| {
                let s = s.clone();
                thread::spawn(move || writer(&s, amount, e))
            })
            .collect();
        let snap = if waiting_reader {
            waiting_snapshot(&s)
        } else {
            try_snapshot(&s)
        };
        if let Some((a, b)) = snap {
            assert_eq!(a, b, "torn snapshot accepted");
            assert!(matches!(a, 0 | 1 | 2 | 3), "impossible value {a}");
        }
        for w in ws {
            w.join().unwrap();
        }
        assert_eq!(s.a.load(Ordering::Relaxed), 3, "lost update on a");
        assert_eq!(s.b.load(Ordering::Relaxed), 3, "lost update on b");
        assert_eq!(s.seq.load_raw(), 2 * STEP);
    });
    let n = explored.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        n >= 20,
        "only {n} executions explored: the model is vacuous"
    );
}

#[test]
fn shared_and_exclusive_nonwaiting_reader() {
    run(Flaw::None, [false, true], false);
}

#[test]
fn shared_and_exclusive_waiting_reader() {
    run(Flaw::None, [false, true], true);
}

#[test]
fn two_exclusive_attempts() {
    run(Flaw::None, [true, true], false);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn weakened_exclusive_without_checks_races() {
    run(Flaw::ExclusiveSkipsCheck, [false, true], false);
}

#[test]
#[should_panic(expected = "torn snapshot")]
fn weakened_no_fence_after_begin_accepts_torn_snapshot() {
    run(Flaw::NoFenceAfterBegin, [true, true], false);
}
