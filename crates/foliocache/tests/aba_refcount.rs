//! Regression test for the ABA hole on the transient zero (research notes 1.3.4).
//!
//! The interleaving, driven step by step on one thread with the split put
//! (`put_begin` = the decrement, `put_end` = the seal CAS; `put` runs exactly these two):
//!
//! ```text
//! step  T1 (owner, believes "X")  T2 (speculative lookup)      T3 (allocator)       word
//!  1    alloc X, holds 1 ref                                                         1
//!  2    put_begin: 1 -> 0, STALL                                                      0
//!  3                              try_get: 0 -> 1 (revives)                           1
//!  4                              re-validate: still X
//!  5                              put: 1 -> 0, seal wins, frees X                     LOCKED
//!  6                                                           alloc the slot as Y    1
//!  7                                                           put_begin: 1 -> 0      0
//!  8    put_end: CAS 0 -> LOCKED wins                                                 LOCKED
//!  9                                                           put_end: CAS fails
//! ```
//!
//! At step 8 the stalled owner of lifetime X is told "you won" for lifetime Y. Three free paths
//! are run on the same schedule:
//!
//! * **ours**: only the seal winner frees, and the free path reads the folio's *current* kind:
//!   lifetime X is freed once (by T2, as X), lifetime Y once (by T1, as Y). Harmless.
//! * **naive, believed kind**: the winner runs the destructor of the kind *it* believed the
//!   folio was (a type-X destructor recorded by the caller): T1 runs X's destructor on a Y
//!   folio. The test shows this happens.
//! * **naive, decrement wins**: the seal is skipped and reaching 0 alone means "free" (what an
//!   `atomic_or(LOCKED)` or no seal would give): T1 and T3 both free lifetime Y.
//!
//! For cas-loop and optimistic the window does not exist: step 3 fails, because their 0 is
//! final. The loom model `aba_*` in `src/loom_tests/refcount.rs` checks ours over all
//! interleavings.

#![cfg(not(loom))]

use std::cell::{Cell, RefCell};

use foliocache::mm::refcount::{PendingPut, RefCount, RefStrategy};

const X: u32 = 1;
const Y: u32 = 2;

/// One folio header in a one-slot arena, with what the destructors need to check themselves.
struct Slot {
    rc: RefCount,
    /// The folio's current kind (its "type"), written at allocation.
    kind: Cell<u32>,
    /// Which allocation of this slot is live (1, 2, ...).
    lifetime: Cell<u32>,
    free: Cell<bool>,
    /// (lifetime destroyed, kind of the destructor that ran).
    destroyed: RefCell<Vec<(u32, u32)>>,
}

impl Slot {
    fn new() -> Self {
        Slot {
            rc: RefCount::frozen(),
            kind: Cell::new(0),
            lifetime: Cell::new(0),
            free: Cell::new(true),
            destroyed: RefCell::new(Vec::new()),
        }
    }

    fn alloc(&self, s: RefStrategy, kind: u32) {
        assert!(self.free.get(), "allocating a slot that is not free");
        self.free.set(false);
        self.kind.set(kind);
        self.lifetime.set(self.lifetime.get() + 1);
        self.rc.init(s, 1);
    }

    /// Runs the destructor `kind` on whatever the slot holds now and returns it to the free
    /// list. Records every run, so the checks can see double frees and type confusion.
    fn destroy(&self, kind: u32) {
        self.destroyed
            .borrow_mut()
            .push((self.lifetime.get(), kind));
        self.free.set(true);
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum FreePath {
    /// The seal winner frees, by the folio's current kind.
    Ours,
    /// The seal winner frees, by the kind it believed the folio was.
    NaiveBelievedKind,
    /// No seal: whoever decrements to zero frees, by the current kind.
    NaiveDecrementWins,
}

/// Finishes a put: decides whether the caller frees, and frees according to `path`.
fn finish_put(slot: &Slot, s: RefStrategy, p: PendingPut, path: FreePath, believed: u32) {
    let won = match path {
        FreePath::NaiveDecrementWins => {
            let reached_zero = matches!(p, PendingPut::Zero | PendingPut::Won);
            // Keep the word in the state the real seal would leave, so the rest of the
            // schedule can run; the decision ignores the seal's result.
            let _ = slot.rc.put_end(s, p);
            reached_zero
        }
        _ => slot.rc.put_end(s, p),
    };
    if won {
        match path {
            FreePath::NaiveBelievedKind => slot.destroy(believed),
            FreePath::Ours | FreePath::NaiveDecrementWins => slot.destroy(slot.kind.get()),
        }
    }
}

/// What the schedule did; `check` says whether it was correct.
#[derive(Debug)]
struct Outcome {
    /// Did T2's speculative get at step 3 succeed (the window exists)?
    revived: bool,
    destroyed: Vec<(u32, u32)>,
    final_word_frozen: bool,
}

impl Outcome {
    /// Every lifetime destroyed exactly once, by its own kind's destructor.
    fn check(&self) -> Result<(), String> {
        let kinds = [(1, X), (2, Y)];
        for (lifetime, kind) in kinds {
            let runs: Vec<_> = self
                .destroyed
                .iter()
                .filter(|(l, _)| *l == lifetime)
                .collect();
            if runs.len() > 1 {
                return Err(format!("lifetime {lifetime} freed twice: {runs:?}"));
            }
            if let Some((_, k)) = runs.first() {
                if *k != kind {
                    return Err(format!(
                        "type confusion: the destructor of kind {k} ran on lifetime {lifetime} of kind {kind}"
                    ));
                }
            } else {
                return Err(format!("lifetime {lifetime} leaked"));
            }
        }
        if !self.final_word_frozen {
            return Err("the slot ended free but its word is not frozen".into());
        }
        Ok(())
    }
}

/// Drives the schedule of the module docs.
fn run_schedule(s: RefStrategy, path: FreePath) -> Outcome {
    let slot = Slot::new();
    // 1. T1 allocates X and holds its reference.
    slot.alloc(s, X);
    let t1_believes = slot.kind.get();
    // 2. T1 drops to zero and stalls before its seal.
    let t1 = slot.rc.put_begin(s, 1);
    // 3. T2's speculative get.
    let revived = slot.rc.try_get(s);
    if revived {
        // 4. T2 re-validates: the folio is still the X it looked up.
        assert_eq!(slot.kind.get(), X);
        // 5. T2 is done with it: a complete put.
        let t2 = slot.rc.put_begin(s, 1);
        finish_put(&slot, s, t2, path, X);
    }
    let mut t3 = None;
    if slot.free.get() {
        // 6. T3 reallocates the slot as Y ...
        slot.alloc(s, Y);
        // 7. ... and drops its reference, stalling before its seal.
        t3 = Some(slot.rc.put_begin(s, 1));
    }
    // 8. T1 resumes.
    finish_put(&slot, s, t1, path, t1_believes);
    // 9. T3 resumes.
    if let Some(p) = t3 {
        finish_put(&slot, s, p, path, Y);
    }
    if !revived && slot.free.get() {
        // cas-loop/optimistic: T1's decrement was final, X is gone, and step 6-9 are the
        // plain life of Y; run them so both lifetimes exist for the check.
        slot.alloc(s, Y);
        let p = slot.rc.put_begin(s, 1);
        finish_put(&slot, s, p, path, Y);
    }
    let destroyed = slot.destroyed.borrow().clone();
    Outcome {
        revived,
        destroyed,
        final_word_frozen: slot.rc.is_frozen(s),
    }
}

#[test]
fn locked_bit_with_our_free_path_is_harmless() {
    let o = run_schedule(RefStrategy::LockedBit, FreePath::Ours);
    assert!(o.revived, "the schedule must reach the window");
    o.check().unwrap();
    // And who freed what: T2 freed lifetime 1 as X; the stalled T1 freed lifetime 2 as Y.
    assert_eq!(o.destroyed, vec![(1, X), (2, Y)]);
}

#[test]
fn locked_bit_with_a_believed_kind_free_path_runs_the_wrong_destructor() {
    let o = run_schedule(RefStrategy::LockedBit, FreePath::NaiveBelievedKind);
    assert!(o.revived);
    let err = o.check().unwrap_err();
    assert!(err.contains("type confusion"), "{err}");
    assert_eq!(
        o.destroyed,
        vec![(1, X), (2, X)],
        "T1 ran X's destructor on Y"
    );
}

#[test]
fn locked_bit_without_the_seal_frees_twice() {
    let o = run_schedule(RefStrategy::LockedBit, FreePath::NaiveDecrementWins);
    assert!(o.revived);
    let err = o.check().unwrap_err();
    assert!(err.contains("freed twice"), "{err}");
}

#[test]
fn cas_strategies_have_no_window() {
    for s in [RefStrategy::CasLoop, RefStrategy::Optimistic] {
        for path in [FreePath::Ours, FreePath::NaiveBelievedKind] {
            let o = run_schedule(s, path);
            assert!(!o.revived, "{s}: 0 is final, the speculative get must fail");
            o.check().unwrap();
        }
    }
}

/// The same hole with `sub_and_test(n)` and `try_add(n)`: nothing in the argument depends on
/// dropping one reference at a time.
#[test]
fn locked_bit_window_with_multi_reference_puts() {
    let s = RefStrategy::LockedBit;
    let rc = RefCount::frozen();
    rc.init(s, 3);
    let t1 = rc.put_begin(s, 3);
    assert_eq!(t1, PendingPut::Zero);
    assert!(
        rc.try_add(s, 2),
        "revived by a two-reference speculative add"
    );
    assert!(!rc.sub_and_test(s, 1));
    assert!(
        rc.sub_and_test(s, 1),
        "the reviver's last put wins the seal"
    );
    rc.init(s, 2);
    let t3 = rc.put_begin(s, 2);
    assert!(
        rc.put_end(s, t1),
        "the stalled putter wins the later lifetime's seal"
    );
    assert!(
        !rc.put_end(s, t3),
        "and the later lifetime's own putter does not free"
    );
    assert!(rc.is_frozen(s));
}
