//! Loom models of the folio refcount, every strategy.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p foliocache
//! --lib loom_tests::refcount`. Each model is generic over [`RefOps`] and instantiated for
//! [`CasLoop`], [`Optimistic`] and [`LockedBit`]:
//!
//! | model | what it proves |
//! |---|---|
//! | `get_vs_last_put` | a speculative `try_get` racing the last `put`: exactly one freer; the freer sees every holder's writes; no get succeeds on a freed folio |
//! | `get_vs_freeze` | `try_get` racing `freeze`/`unfreeze`: no get succeeds while frozen; the freezer sees the getter's writes; the count ends balanced |
//! | `publish` | a folio made gettable by `init` (release) shows its metadata to the getter (acquire) |
//! | `wipe_*` (locked-bit) | failed gets on a word at the wipe limit reset it to `LOCKED` and never clobber a concurrent `unfreeze` |
//! | `aba` | the stalled-putter schedule of `aba_refcount.rs` over all interleavings, with a reallocation: every lifetime freed once, by its own kind |
//!
//! Weakened variants that must fail (`#[should_panic]`): locked-bit with a `Relaxed` seal CAS
//! (the winner frees without seeing the other holder's write: a data race loom reports), with a
//! `Relaxed` speculative get (the getter reads metadata from before `init`), and the `aba`
//! model with a free path dispatching on the kind the stalled putter believed.
//!
//! Folio memory is modelled by `UnsafeCell`s, so every missing happens-before edge is a loom
//! causality error, not just a wrong value.

use crate::mm::refcount::weakened::{LockedBitRelaxedGet, LockedBitRelaxedSeal};
use crate::mm::refcount::{CasLoop, LockedBit, Optimistic, RefCount, RefOps, LOCKED, WIPE_LIMIT};
use crate::mm::sync::{model, thread, Arc, AtomicU32, Mutex, Ordering, UnsafeCell};

const LIVE: u32 = 1;

/// Reads a modelled memory cell; loom reports it if it races with a write.
fn rd(c: &UnsafeCell<u32>) -> u32 {
    // SAFETY: the pointer is valid for the cell's lifetime; concurrent misuse is exactly what
    // loom checks and reports (it tracks every `with`/`with_mut` access).
    c.with(|p| unsafe { *p })
}

/// Writes a modelled memory cell; loom reports it if it races with any other access.
fn wr(c: &UnsafeCell<u32>, v: u32) {
    // SAFETY: as for `rd`.
    c.with_mut(|p| unsafe { *p = v })
}
const FREED: u32 = 2;

/// A folio: its count, its state (live/freed), and a payload holders write.
struct Folio {
    rc: RefCount,
    state: UnsafeCell<u32>,
    payload: UnsafeCell<u32>,
    frees: AtomicU32,
}

impl Folio {
    /// A folio allocated with one reference (the caller's).
    fn live<T: RefOps>() -> Self {
        let f = Folio {
            rc: RefCount::frozen(),
            state: UnsafeCell::new(LIVE),
            payload: UnsafeCell::new(0),
            frees: AtomicU32::new(0),
        };
        f.rc.init(T::STRATEGY, 1);
        f
    }

    /// A holder uses the folio: it must be live, and it reads the payload (holders share the
    /// folio, so they only read; the freer and a freezer write).
    fn use_it(&self) -> u32 {
        assert_eq!(rd(&self.state), LIVE, "used a freed folio");
        rd(&self.payload)
    }

    /// The seal winner frees: it must be the only one, and it touches all of the memory.
    fn free(&self) {
        self.frees.fetch_add(1, Ordering::Relaxed);
        wr(&self.payload, 0);
        assert_eq!(rd(&self.state), LIVE, "freed twice");
        wr(&self.state, FREED);
    }

    fn put<T: RefOps>(&self) {
        if T::put(&self.rc) {
            self.free();
        }
    }
}

// ----- get vs last put ----------------------------------------------------------------------

fn get_vs_last_put<T: RefOps>() {
    model(|| {
        let f = Arc::new(Folio::live::<T>());
        let f2 = f.clone();
        let getter = thread::spawn(move || {
            if T::try_get(&f2.rc) {
                f2.use_it();
                f2.put::<T>();
            }
        });
        // The owner uses its reference, then drops the last one.
        f.use_it();
        f.put::<T>();
        getter.join().unwrap();
        assert_eq!(f.frees.load(Ordering::Relaxed), 1, "exactly one freer");
        assert!(f.rc.is_frozen(T::STRATEGY));
        assert!(!T::try_get(&f.rc), "no get succeeds on a freed folio");
    });
}

#[test]
fn get_vs_last_put_cas_loop() {
    get_vs_last_put::<CasLoop>();
}

#[test]
fn get_vs_last_put_optimistic() {
    get_vs_last_put::<Optimistic>();
}

#[test]
fn get_vs_last_put_locked_bit() {
    get_vs_last_put::<LockedBit>();
}

/// Two speculative getters against the last put (three threads; locked-bit only, where the
/// revive window exists).
#[test]
fn two_getters_vs_last_put_locked_bit() {
    model(|| {
        let f = Arc::new(Folio::live::<LockedBit>());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let f = f.clone();
                thread::spawn(move || {
                    if LockedBit::try_get(&f.rc) {
                        f.use_it();
                        f.put::<LockedBit>();
                    }
                })
            })
            .collect();
        f.put::<LockedBit>();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(f.frees.load(Ordering::Relaxed), 1);
        assert!(f.rc.raw() & LOCKED != 0);
        assert!(f.rc.raw() < WIPE_LIMIT);
    });
}

/// The weakened seal: the winner's CAS is Relaxed, so it may free before the other holder's
/// payload write is visible. Loom must report the race.
#[test]
#[should_panic(expected = "Causality violation")]
fn get_vs_last_put_relaxed_seal_is_caught() {
    get_vs_last_put::<LockedBitRelaxedSeal>();
}

// ----- get vs freeze / unfreeze -------------------------------------------------------------

fn get_vs_freeze<T: RefOps>() {
    model(|| {
        // One reference: the cache's, which the remover accounts for.
        let f = Arc::new(Folio::live::<T>());
        let f2 = f.clone();
        let getter = thread::spawn(move || {
            if T::try_get(&f2.rc) {
                // Never while frozen: the remover marks the folio FREED while it holds it
                // frozen, so a get that succeeded then would see it (or race with it).
                f2.use_it();
                f2.put::<T>();
                true
            } else {
                false
            }
        });
        let mut froze = false;
        if T::freeze(&f.rc, 1) {
            froze = true;
            assert!(f.rc.is_frozen(T::STRATEGY));
            // The remover owns the folio: it may rewrite everything.
            wr(&f.state, FREED);
            wr(&f.payload, 99);
            wr(&f.state, LIVE);
            // It turned out busy (say, dirty): give the cache its reference back.
            T::unfreeze(&f.rc, 1);
        }
        let got = getter.join().unwrap();
        assert_eq!(f.rc.count(T::STRATEGY), 1, "balanced: only the cache's ref");
        assert_eq!(f.frees.load(Ordering::Relaxed), 0);
        // At least one of them made progress (a failed get implies the freeze won).
        assert!(froze || got);
    });
}

#[test]
fn get_vs_freeze_cas_loop() {
    get_vs_freeze::<CasLoop>();
}

#[test]
fn get_vs_freeze_optimistic() {
    get_vs_freeze::<Optimistic>();
}

#[test]
fn get_vs_freeze_locked_bit() {
    get_vs_freeze::<LockedBit>();
}

// ----- publication ----------------------------------------------------------------------------

fn publish<T: RefOps>() {
    model(|| {
        let f = Arc::new(Folio {
            rc: RefCount::frozen(),
            state: UnsafeCell::new(FREED),
            payload: UnsafeCell::new(0),
            frees: AtomicU32::new(0),
        });
        let f2 = f.clone();
        let getter = thread::spawn(move || {
            if T::try_get(&f2.rc) {
                assert_eq!(rd(&f2.payload), 42);
                f2.put::<T>();
            }
        });
        // The allocator fills the folio, then makes it gettable.
        wr(&f.payload, 42);
        wr(&f.state, LIVE);
        f.rc.init(T::STRATEGY, 1);
        getter.join().unwrap();
        assert_eq!(f.rc.count(T::STRATEGY), 1);
    });
}

#[test]
fn publish_cas_loop() {
    publish::<CasLoop>();
}

#[test]
fn publish_optimistic() {
    publish::<Optimistic>();
}

#[test]
fn publish_locked_bit() {
    publish::<LockedBit>();
}

/// The weakened get: a Relaxed `fetch_add` does not synchronize with `init`'s release store.
#[test]
#[should_panic(expected = "Causality violation")]
fn publish_relaxed_get_is_caught() {
    publish::<LockedBitRelaxedGet>();
}

// ----- the garbage wipe (locked-bit) --------------------------------------------------------

/// Two failed getters on a word one below the wipe limit: both fail, and the word ends sealed
/// and below the limit (the second add would otherwise sit at or above it).
#[test]
fn wipe_two_failed_getters() {
    model(|| {
        let rc = Arc::new(RefCount::from_raw(WIPE_LIMIT - 1));
        let rc2 = rc.clone();
        let t = thread::spawn(move || LockedBit::try_get(&rc2));
        let mine = LockedBit::try_get(&rc);
        let theirs = t.join().unwrap();
        assert!(!mine && !theirs);
        let w = rc.raw();
        assert!(w & LOCKED != 0, "still sealed: {w:#x}");
        assert!(w < WIPE_LIMIT, "garbage left at the limit: {w:#x}");
    });
}

/// A failed getter's wipe loop racing the owner's `unfreeze`: the wipe must stop as soon as
/// the bit is clear, never overwriting a live count.
#[test]
fn wipe_vs_unfreeze() {
    model(|| {
        let rc = Arc::new(RefCount::from_raw(WIPE_LIMIT + 5));
        let rc2 = rc.clone();
        let t = thread::spawn(move || LockedBit::try_get(&rc2));
        LockedBit::unfreeze(&rc, 1);
        let got = t.join().unwrap();
        let expect = if got { 2 } else { 1 };
        assert_eq!(rc.raw(), expect, "the fresh count survived");
    });
}

/// The one-shot wipe racing a second failed getter and a freeze-holder's unfreeze.
#[test]
fn wipe_one_shot_vs_unfreeze() {
    model(|| {
        let rc = Arc::new(RefCount::from_raw(LOCKED | 3));
        let rc2 = rc.clone();
        let t = thread::spawn(move || LockedBit::try_add(&rc2, 2));
        LockedBit::unfreeze(&rc, 4);
        let got = t.join().unwrap();
        assert_eq!(rc.raw(), if got { 6 } else { 4 });
    });
}

// ----- the ABA hole ---------------------------------------------------------------------------

const KIND_X: u32 = 1;
const KIND_Y: u32 = 2;

/// A slot of the arena: count, kind and lifetime, and a log of destructor runs.
struct Slot {
    rc: RefCount,
    kind: UnsafeCell<u32>,
    lifetime: UnsafeCell<u32>,
    log: Mutex<Vec<(u32, u32)>>,
}

impl Slot {
    /// The winner frees by the slot's current kind (ours) or by `believed` (naive).
    fn free(&self, believed: Option<u32>) {
        let kind = believed.unwrap_or_else(|| rd(&self.kind));
        let lifetime = rd(&self.lifetime);
        self.log.lock().push((lifetime, kind));
    }
}

/// T1 owns lifetime 1 (kind X) and drops it. T2 speculatively gets, drops, and if it freed the
/// slot reallocates it as Y (lifetime 2) and drops that too. Every lifetime must be freed
/// exactly once, by its own kind's destructor. `naive` = T1 frees by the kind it believed.
fn aba(naive: bool) {
    model(move || {
        let s = LockedBit::STRATEGY;
        let slot = Arc::new(Slot {
            rc: RefCount::frozen(),
            kind: UnsafeCell::new(KIND_X),
            lifetime: UnsafeCell::new(1),
            log: Mutex::new(Vec::new()),
        });
        slot.rc.init(s, 1);
        let s2 = slot.clone();
        let t2 = thread::spawn(move || {
            if !LockedBit::try_get(&s2.rc) {
                return;
            }
            if LockedBit::put(&s2.rc) {
                s2.free(None);
                // Reallocate the freed slot as Y and drop it again.
                wr(&s2.kind, KIND_Y);
                wr(&s2.lifetime, 2);
                s2.rc.init(s, 1);
                if LockedBit::put(&s2.rc) {
                    s2.free(None);
                }
            }
        });
        // T1: the owner of X.
        if LockedBit::put(&slot.rc) {
            slot.free(if naive { Some(KIND_X) } else { None });
        }
        t2.join().unwrap();
        let log = slot.log.lock().clone();
        let lifetimes = rd(&slot.lifetime);
        assert_eq!(
            log.len() as u32,
            lifetimes,
            "one free per lifetime: {log:?}"
        );
        for (lifetime, kind) in log {
            let want = if lifetime == 1 { KIND_X } else { KIND_Y };
            assert_eq!(
                kind, want,
                "lifetime {lifetime} freed by the wrong destructor"
            );
        }
        assert_eq!(slot.rc.raw(), LOCKED);
    });
}

#[test]
fn aba_our_free_path() {
    aba(false);
}

#[test]
#[should_panic(expected = "wrong destructor")]
fn aba_believed_kind_free_path_is_caught() {
    aba(true);
}
