//! Loom models of the RCU read side against `synchronize` and `call_rcu`.
//!
//! The object a reader may use is a loom `UnsafeCell`; the writer "frees" it by writing a
//! poison value through `with_mut` after the grace period. If a reader's access were not
//! ordered before the free, loom reports a causality violation (a use-after-free in real
//! memory); the readers also assert they never see the poison.

use crate::mm::rcu::Rcu;
use crate::mm::sync::{thread, Arc, AtomicBool, Ordering, UnsafeCell};

const LIVE: u64 = 42;
const FREED: u64 = 0xdead;

struct World {
    rcu: Rcu,
    /// "The pointer is published": readers may use `obj` only if they see it true.
    published: AtomicBool,
    obj: UnsafeCell<u64>,
}

// SAFETY: `obj` is only accessed under the RCU protocol the models check.
unsafe impl Sync for World {}
// SAFETY: as above.
unsafe impl Send for World {}

impl World {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            rcu: Rcu::new(),
            published: AtomicBool::new(true),
            obj: UnsafeCell::new(LIVE),
        })
    }

    /// The reader's use of the object inside a section.
    fn use_obj(&self) {
        // rcu_dereference: Acquire is what the index does; the grace period, not this
        // ordering, is what keeps the object alive.
        if self.published.load(Ordering::Acquire) {
            // SAFETY: the object is live while published or within a grace period after.
            let v = self.obj.with(|p| unsafe { *p });
            assert_eq!(v, LIVE, "reader saw a freed object");
        }
    }

    /// The writer's unpublish + free.
    fn free(&self) {
        // SAFETY: no reader can access the object any more (grace period elapsed).
        self.obj.with_mut(|p| unsafe { *p = FREED });
    }
}

/// A reader section against unpublish + synchronize + free: never a use-after-free.
#[test]
fn synchronize_orders_free_after_readers() {
    loom::model(|| {
        let w = World::new();
        let w2 = w.clone();
        let r = thread::spawn(move || {
            let _g = w2.rcu.read_lock();
            w2.use_obj();
        });
        w.published.store(false, Ordering::Relaxed);
        w.rcu.synchronize();
        w.free();
        r.join().unwrap();
    });
}

/// A reader that nests and re-enters: sections after the grace period started must not be
/// waited for (the model would deadlock otherwise) and must not see the object published.
#[test]
fn nested_and_reentered_sections() {
    loom::model(|| {
        let w = World::new();
        let w2 = w.clone();
        let r = thread::spawn(move || {
            {
                let _a = w2.rcu.read_lock();
                let _b = w2.rcu.read_lock();
                w2.use_obj();
            }
            let _c = w2.rcu.read_lock();
            w2.use_obj();
        });
        w.published.store(false, Ordering::Relaxed);
        w.rcu.synchronize();
        w.free();
        r.join().unwrap();
    });
}

/// The free deferred with `call_rcu`, flushed by `barrier`.
#[test]
fn call_rcu_then_barrier() {
    loom::model(|| {
        let w = World::new();
        let w2 = w.clone();
        let r = thread::spawn(move || {
            let _g = w2.rcu.read_lock();
            w2.use_obj();
        });
        w.published.store(false, Ordering::Relaxed);
        let w3 = w.clone();
        w.rcu.call_rcu(move || w3.free());
        w.rcu.barrier();
        assert_eq!(w.rcu.pending_callbacks(), 0);
        r.join().unwrap();
    });
}

/// The weakened protocol (a reader without its fence, in the fence flavour loom runs): the
/// writer's scan can miss the reader while the reader still sees the old pointer, and loom
/// must find the use-after-free.
#[test]
#[should_panic]
fn reader_without_fence_is_caught() {
    loom::model(|| {
        let w = World::new();
        let w2 = w.clone();
        let r = thread::spawn(move || {
            let _g = w2.rcu.read_lock_without_fence();
            w2.use_obj();
        });
        w.published.store(false, Ordering::Relaxed);
        w.rcu.synchronize();
        w.free();
        r.join().unwrap();
    });
}
