//! Real-thread stress of `percpu_ref`: users take and drop references (some dropped on
//! another thread) while the main thread kills, waits for zero and re-arms in a loop. Every
//! cycle must reach zero exactly once, no reference may see zero while held, and the counts
//! balance at the end.
#![cfg(not(loom))]

use foliocache::mm::percpu_ref::{PercpuRef, RefVariant};
use foliocache::mm::rcu::Rcu;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

fn stress(v: RefVariant, cycles: u64) {
    let r = Arc::new(PercpuRef::new(Arc::new(Rcu::new()), v));
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    // References handed to a "putter" thread, dropped there.
    let (tx, rx) = mpsc::channel::<()>();
    let users: Vec<_> = (0..3)
        .map(|i| {
            let (r, stop, got, tx) = (r.clone(), stop.clone(), got.clone(), tx.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if r.tryget_live() {
                        assert!(!r.is_zero(), "zero while a reference is held");
                        n += 1;
                        got.fetch_add(1, Ordering::Relaxed);
                        if i == 0 && n % 16 == 0 {
                            tx.send(()).unwrap();
                        } else {
                            r.put();
                        }
                    } else {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let r2 = r.clone();
    let putter = std::thread::spawn(move || {
        for () in rx {
            r2.put();
        }
    });
    while got.load(Ordering::Relaxed) < 16 {
        std::thread::yield_now();
    }
    for cycle in 1..=cycles {
        if cycle % 3 == 0 {
            r.switch_to_atomic_sync();
            r.switch_to_percpu().unwrap();
        }
        r.kill().unwrap();
        r.wait_for_zero();
        assert_eq!(r.zero_events(), cycle);
        assert_eq!(r.count(), Some(0));
        r.reinit().unwrap();
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    for u in users {
        u.join().unwrap();
    }
    putter.join().unwrap();
    r.kill().unwrap();
    r.wait_for_zero();
    assert_eq!(r.zero_events(), cycles + 1);
}

#[test]
fn kill_reinit_under_load_percpu() {
    stress(
        RefVariant::Percpu,
        if cfg!(debug_assertions) { 50 } else { 500 },
    );
}

#[test]
fn kill_reinit_under_load_percpu_fast() {
    stress(
        RefVariant::PercpuFast,
        if cfg!(debug_assertions) { 50 } else { 500 },
    );
}
