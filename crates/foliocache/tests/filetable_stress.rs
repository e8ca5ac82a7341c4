//! Real-thread stress of the file table: lookups on every key (the locked `with`, the
//! lock-free `read` and `get`) while another thread resizes in a loop and a third inserts
//! and removes its own keys (so lock-free readers race copy-on-write list replacement and
//! value release). Every lookup must find the right
//! value (nothing lost or duplicated by a move), every resize must complete (a leaked table
//! reference would hang `wait_for_zero`, a doubled put would underflow and panic), and
//! `validate()` must agree with the model at the end.
#![cfg(not(loom))]

use foliocache::mm::filetable::{FileTable, FileTableConfig, Sizing, TableRef};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

fn stress(reference: TableRef, resizes: u64) {
    const N: u64 = 512;
    let t = Arc::new(FileTable::<u64>::new(FileTableConfig::new(
        reference,
        Sizing::Fixed(16),
    )));
    for k in 0..N {
        t.insert(k, k * 7);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|i| {
            let (t, stop, lookups) = (t.clone(), stop.clone(), lookups.clone());
            std::thread::spawn(move || {
                let mut k = i * 97;
                while !stop.load(Ordering::Relaxed) {
                    k = (k * 31 + 17) % N;
                    assert_eq!(t.get(k).as_deref(), Some(&(k * 7)), "lookup of {k} lost");
                    assert_eq!(t.with(k, |v| *v), Some(k * 7));
                    // The lock-free path: no bucket lock, the published list under RCU.
                    assert_eq!(t.read(k, |v, _| *v), Some(k * 7), "lock-free lookup of {k}");
                    // The mutator's keys: either absent or one of the values it stored
                    // (never a freed or half-published value).
                    let m = N + (k % 300);
                    if let Some(v) = t.read(m, |v, _| *v) {
                        assert!(v < u64::MAX / 2, "lock-free lookup of {m} saw garbage {v}");
                    }
                    lookups.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let (t2, stop2) = (t.clone(), stop.clone());
    let mutator = std::thread::spawn(move || {
        let mut model = BTreeMap::new();
        let mut i = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            let k = N + (i * 13) % 300;
            if i % 3 == 2 {
                assert_eq!(t2.remove(k).map(|v| *v), model.remove(&k));
            } else {
                assert_eq!(t2.insert(k, i).map(|v| *v), model.insert(k, i));
            }
            for (k, v) in model.iter().take(4) {
                assert_eq!(t2.get(*k).as_deref(), Some(v));
                assert_eq!(t2.read(*k, |x, _| *x).as_ref(), Some(v));
            }
            i += 1;
        }
        model
    });
    let sizes = [64usize, 1024, 16, 256, 32];
    for i in 0..resizes {
        // Let the readers make progress between resizes, so every resize runs under load.
        let seen = lookups.load(Ordering::Relaxed);
        while lookups.load(Ordering::Relaxed) < seen + 8 {
            std::thread::yield_now();
        }
        let s = t.resize(sizes[i as usize % sizes.len()]).unwrap();
        assert_eq!(s.to, sizes[i as usize % sizes.len()]);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let model = mutator.join().unwrap();
    assert_eq!(t.resizes(), resizes);
    assert_eq!(t.validate(), N as usize + model.len());
    for (k, v) in &model {
        assert_eq!(t.get(*k).as_deref(), Some(v));
    }
}

#[test]
fn resize_under_load_atomic() {
    stress(
        TableRef::Atomic,
        if cfg!(debug_assertions) { 40 } else { 300 },
    );
}

#[test]
fn resize_under_load_percpu() {
    stress(
        TableRef::Percpu,
        if cfg!(debug_assertions) { 40 } else { 300 },
    );
}

#[test]
fn resize_under_load_percpu_fast() {
    stress(
        TableRef::PercpuFast,
        if cfg!(debug_assertions) { 40 } else { 300 },
    );
}
