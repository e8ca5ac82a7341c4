//! Loom models of `percpu_ref`: gets and puts racing with the switch to atomic mode, kill,
//! wait-for-zero and re-arm, for both fast-path variants; and a weakened switch (no grace
//! period before the fold) that the model must catch.

use crate::mm::percpu_ref::{PercpuRef, RefVariant};
use crate::mm::rcu::Rcu;
use crate::mm::sync::{thread, Arc, AtomicBool, Ordering};

fn new_ref(v: RefVariant) -> Arc<PercpuRef> {
    Arc::new(PercpuRef::new(Arc::new(Rcu::new()), v))
}

/// A user: take a live reference if allowed, check the ref cannot read zero while it is held,
/// drop it.
fn user(r: &PercpuRef) -> bool {
    if r.tryget_live() {
        assert!(!r.is_zero(), "zero observed while a reference is held");
        r.put();
        true
    } else {
        false
    }
}

fn kill_races_with_user(v: RefVariant) {
    loom::model(move || {
        let r = new_ref(v);
        let r2 = r.clone();
        let t = thread::spawn(move || user(&r2));
        r.kill().unwrap();
        r.wait_for_zero();
        t.join().unwrap();
        assert_eq!(r.count(), Some(0), "no count lost or doubled");
        assert_eq!(r.zero_events(), 1, "zero detected exactly once");
    });
}

#[test]
fn kill_races_with_get_put_percpu() {
    kill_races_with_user(RefVariant::Percpu);
}

#[test]
fn kill_races_with_get_put_percpu_fast() {
    kill_races_with_user(RefVariant::PercpuFast);
}

/// The last put may be the user's, after `kill`: it decrements to zero and only then reports.
/// A waiter must not return in between, with `zero_events` still at 0.
fn waiter_returns_after_the_zero_report(v: RefVariant) {
    loom::model(move || {
        let r = new_ref(v);
        assert!(r.tryget_live());
        let r2 = r.clone();
        let t = thread::spawn(move || {
            r2.put();
        });
        r.kill().unwrap();
        r.wait_for_zero();
        assert_eq!(
            r.zero_events(),
            1,
            "wait_for_zero returned before the report"
        );
        t.join().unwrap();
    });
}

#[test]
fn waiter_returns_after_the_zero_report_percpu() {
    waiter_returns_after_the_zero_report(RefVariant::Percpu);
}

#[test]
fn waiter_returns_after_the_zero_report_percpu_fast() {
    waiter_returns_after_the_zero_report(RefVariant::PercpuFast);
}

fn no_get_after_kill(v: RefVariant) {
    loom::model(move || {
        let r = new_ref(v);
        let killed = Arc::new(AtomicBool::new(false));
        let (r2, k2) = (r.clone(), killed.clone());
        let t = thread::spawn(move || {
            // ORDERING: Acquire pairs with the Release below: we ran after kill() returned.
            let after = k2.load(Ordering::Acquire);
            let got = user(&r2);
            assert!(!(after && got), "tryget_live succeeded after kill returned");
        });
        r.kill().unwrap();
        killed.store(true, Ordering::Release);
        r.wait_for_zero();
        t.join().unwrap();
        assert_eq!(r.zero_events(), 1);
    });
}

#[test]
fn no_get_succeeds_after_kill_percpu() {
    no_get_after_kill(RefVariant::Percpu);
}

#[test]
fn no_get_succeeds_after_kill_percpu_fast() {
    no_get_after_kill(RefVariant::PercpuFast);
}

fn rearm(v: RefVariant) {
    loom::model(move || {
        let r = new_ref(v);
        let r2 = r.clone();
        let t = thread::spawn(move || {
            user(&r2);
            user(&r2);
        });
        r.kill().unwrap();
        r.wait_for_zero();
        r.reinit().unwrap();
        r.kill().unwrap();
        r.wait_for_zero();
        t.join().unwrap();
        assert_eq!(r.count(), Some(0));
        assert_eq!(r.zero_events(), 2, "one zero per life");
    });
}

#[test]
fn kill_reinit_kill_with_users_percpu() {
    rearm(RefVariant::Percpu);
}

#[test]
fn kill_reinit_kill_with_users_percpu_fast() {
    rearm(RefVariant::PercpuFast);
}

/// A held reference (taken before the switch, dropped on another thread after it) is counted
/// by the fold: the switch to atomic then reports exactly the references held.
#[test]
fn switch_counts_a_reference_taken_per_thread() {
    loom::model(|| {
        let r = new_ref(RefVariant::PercpuFast);
        assert!(r.tryget_live());
        let r2 = r.clone();
        let t = thread::spawn(move || {
            r2.switch_to_atomic_sync();
        });
        let dropped_last = r.put();
        t.join().unwrap();
        assert!(!dropped_last);
        assert_eq!(r.count(), Some(1), "only the initial reference remains");
    });
}

fn weakened(v: RefVariant) {
    loom::model(move || {
        let r = new_ref(v);
        r.weaken_skip_grace_period();
        let r2 = r.clone();
        let t = thread::spawn(move || user(&r2));
        r.kill().unwrap();
        r.wait_for_zero();
        t.join().unwrap();
    });
}

/// Without the grace period a user that read per-CPU mode before the flip increments its slot
/// after the fold summed it: the count reaches zero under a held reference (or underflows).
#[test]
#[should_panic]
fn fold_without_grace_period_is_caught_percpu() {
    weakened(RefVariant::Percpu);
}

/// The same for the fast variant's private grace period.
#[test]
#[should_panic]
fn fold_without_grace_period_is_caught_percpu_fast() {
    weakened(RefVariant::PercpuFast);
}

/// Two generations on one counter set (the file table's layout, the futex's shared
/// `mm->futex_ref`): the second is used only after the first was killed and folded; each
/// fold counts exactly its own generation's per-thread references.
#[test]
fn generations_share_one_counter_set() {
    use crate::mm::percpu_ref::PercpuCounters;
    loom::model(|| {
        let c = Arc::new(PercpuCounters::new(Arc::new(Rcu::new())));
        let a = Arc::new(PercpuRef::with_counters(c.clone(), RefVariant::PercpuFast));
        assert!(a.tryget_live()); // held across the kill, put on the atomic path
        let a2 = a.clone();
        let t = thread::spawn(move || user(&a2));
        assert_eq!(a.kill(), Ok(false));
        t.join().unwrap();
        assert_eq!(a.count(), Some(1), "only our held reference is left");
        assert!(a.put());
        // The next generation starts counting on the same slots.
        let b = Arc::new(PercpuRef::with_counters(c, RefVariant::PercpuFast));
        let b2 = b.clone();
        let t = thread::spawn(move || {
            assert!(user(&b2));
        });
        assert!(b.tryget_live());
        b.put();
        t.join().unwrap();
        assert_eq!(b.kill(), Ok(true), "the fold of b counts no leftover of a");
        assert_eq!(b.zero_events(), 1);
    });
}
