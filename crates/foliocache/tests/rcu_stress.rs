//! Real-thread stress of the RCU layer: readers dereference a published node inside read
//! sections while a writer replaces it and frees the old one after a grace period (half the
//! time with `synchronize`, half with `call_rcu`). A node is poisoned before it is freed, so
//! a reader that could still see it would read the poison; every node is accounted for.
#![cfg(not(loom))]

use foliocache::mm::rcu::{Flavor, Rcu};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

const LIVE: u64 = 0x11fe;
const POISON: u64 = 0xdead;

struct Node {
    magic: AtomicU64,
    value: u64,
}

static FREED: AtomicUsize = AtomicUsize::new(0);

fn free(p: *mut Node) {
    // SAFETY: `p` came from Box::into_raw, was unpublished, and a grace period elapsed.
    let n = unsafe { Box::from_raw(p) };
    n.magic.store(POISON, Ordering::Relaxed);
    FREED.fetch_add(1, Ordering::Relaxed);
}

fn run(flavor: Flavor, readers: usize, replacements: u64) {
    let rcu = Arc::new(Rcu::with_flavor(flavor));
    let head = Arc::new(AtomicPtr::new(Box::into_raw(Box::new(Node {
        magic: AtomicU64::new(LIVE),
        value: 0,
    }))));
    let stop = Arc::new(AtomicBool::new(false));
    let freed_before = FREED.load(Ordering::Relaxed);
    let started = Arc::new(AtomicUsize::new(0));
    let ts: Vec<_> = (0..readers)
        .map(|_| {
            let (rcu, head, stop) = (rcu.clone(), head.clone(), stop.clone());
            let started = started.clone();
            std::thread::spawn(move || {
                let mut last = 0;
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _g = rcu.read_lock();
                    let p = head.load(Ordering::Acquire);
                    // SAFETY: published, and we are inside a read section.
                    let n = unsafe { &*p };
                    for _ in 0..4 {
                        assert_eq!(n.magic.load(Ordering::Relaxed), LIVE, "use after free");
                    }
                    assert!(n.value >= last, "values go backwards");
                    last = n.value;
                    reads += 1;
                    if reads == 1 {
                        started.fetch_add(1, Ordering::Relaxed);
                    }
                }
                reads
            })
        })
        .collect();
    while started.load(Ordering::Relaxed) < readers {
        std::thread::yield_now();
    }
    for i in 1..=replacements {
        let new = Box::into_raw(Box::new(Node {
            magic: AtomicU64::new(LIVE),
            value: i,
        }));
        let old = head.swap(new, Ordering::AcqRel) as usize;
        if i % 2 == 0 {
            rcu.synchronize();
            free(old as *mut Node);
        } else {
            rcu.call_rcu(move || free(old as *mut Node));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = ts.into_iter().map(|t| t.join().unwrap()).sum();
    rcu.barrier();
    assert!(reads > 0);
    assert_eq!(
        FREED.load(Ordering::Relaxed) - freed_before,
        replacements as usize,
        "every replaced node freed exactly once"
    );
    free(head.load(Ordering::Relaxed));
}

#[test]
fn readers_never_see_a_freed_node() {
    let n = if cfg!(debug_assertions) { 300 } else { 3000 };
    run(Flavor::Membarrier, 3, n);
    run(Flavor::Fence, 3, n);
}
