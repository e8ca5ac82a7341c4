//! Loom models of `percpu_counter`'s limit: two charges racing for the last unit never both
//! pass, and a waiter registered while the last holder uncharges is woken; a weakened
//! uncharge (looking for waiters before decrementing) loses that wake-up and the model must
//! catch it (the waiter sleeps forever: loom reports the deadlock).

use std::time::Duration;

use crate::mm::percpu_counter::{Limit, PercpuCounter};
use crate::mm::sync::{thread, Arc};

#[test]
fn two_charges_for_the_last_unit_never_both_pass() {
    loom::model(|| {
        // A batch larger than the limit: every check is the exact sum.
        let l = Arc::new(Limit::with_counter(1, PercpuCounter::with_batch(2, 4)));
        let l2 = l.clone();
        let t = thread::spawn(move || l2.try_charge(1));
        let mine = l.try_charge(1);
        let theirs = t.join().unwrap();
        assert!(!(mine && theirs), "both charges passed a limit of one");
        assert_eq!(l.charged(), mine as u64 + theirs as u64);
    });
}

fn a_waiter_is_woken_by_the_last_uncharge(weaken: bool) {
    loom::model(move || {
        let l = Arc::new(Limit::with_counter(1, PercpuCounter::with_batch(2, 1)));
        if weaken {
            l.weaken();
        }
        assert!(l.try_charge(1));
        let l2 = l.clone();
        let t = thread::spawn(move || l2.uncharge(1));
        // Under loom the wait has no timeout: a lost wake-up is a deadlock.
        assert!(l.charge(1, Duration::from_secs(3600)));
        t.join().unwrap();
        l.uncharge(1);
        assert_eq!(l.charged(), 0);
    });
}

#[test]
fn a_waiter_is_woken_by_the_last_uncharge_ordered() {
    a_waiter_is_woken_by_the_last_uncharge(false);
}

#[test]
#[should_panic(expected = "deadlock")]
fn a_waiter_is_woken_by_the_last_uncharge_weakened_loses_the_wakeup() {
    a_waiter_is_woken_by_the_last_uncharge(true);
}
