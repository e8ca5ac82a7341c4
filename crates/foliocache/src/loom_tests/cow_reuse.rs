//! Loom models of copy-on-write reuse (`FolioRmap::can_reuse`) against concurrent changes of
//! who maps the folio, with the real `FolioRmap`, `SeqCount` and `RefCount`.
//!
//! The folio's bytes are a loom `UnsafeCell`: every mapper reads them, and the space that
//! reuses the folio in place writes them. Reuse is safe only if that write happens-after
//! every access of every other mapper, so loom's race detector is the property: a reuse
//! decision that is not ordered after another mapper's last access panics with a causality
//! violation.
//!
//! 1. `reuse_vs_exit_*`: space S decides whether to reuse an order-2 folio while space T,
//!    which maps it too, exits (reads the bytes, removes its two mappings, drops its two
//!    references). Checked for rmap-id (both writer paths) and mm-owner, and with one page
//!    each (the mapcount = 1 rule every strategy shares, `none` included); after T is gone
//!    the folio must be reused. Weakened: the seqcount reader without its acquire
//!    (`Flaw::ReaderNoAcquire`) reuses without synchronizing with T: caught.
//! 2. `reuse_vs_fork_*`: a write fault of S against a concurrent `fork()` of S itself (the
//!    dup adds the child's references and mappings; the child then reads the bytes twice,
//!    which must agree). The space's page-table lock serialises fault and fork as the
//!    kernel's mmap lock does; weakened: the fault path without the lock can reuse the folio
//!    the child is about to map: caught.

use crate::mm::refcount::{RefCount, RefStrategy};
use crate::mm::rmap::id::RmapId;
use crate::mm::rmap::{FolioRmap, Tracking};
use crate::mm::seqcount::Flaw;
use crate::mm::sync::{thread, Arc, Mutex, UnsafeCell};

const ORDER: u32 = 2;
const S: RmapId = RmapId::new(1);
const T: RmapId = RmapId::new(0x0abcde);
const REF: RefStrategy = RefStrategy::LockedBit;

struct Folio {
    rmap: FolioRmap,
    refs: RefCount,
    data: UnsafeCell<u8>,
}

fn folio(flaw: Flaw) -> Folio {
    let refs = RefCount::frozen();
    refs.init(REF, 1);
    Folio {
        rmap: FolioRmap::with_seq_flaw(flaw),
        refs,
        data: UnsafeCell::new(1),
    }
}

fn counted(f: impl Fn() + Sync + Send + 'static) -> usize {
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = n.clone();
    loom::model(move || {
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    n.load(std::sync::atomic::Ordering::Relaxed)
}

fn reuse_vs_exit(t: Tracking, flaw: Flaw) {
    reuse_vs_exit_sized(t, flaw, ORDER, 2);
}

/// S and T each map `pages` pages of a folio of `order`; T exits while S decides.
fn reuse_vs_exit_sized(t: Tracking, flaw: Flaw, order: u32, pages: u32) {
    let reused_early = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r = reused_early.clone();
    let n = counted(move || {
        let f = Arc::new(folio(flaw));
        // S and T map `pages` pages each; one reference per mapping.
        f.refs.add(REF, 2 * pages - 1);
        f.rmap.add(t, order, &S, pages);
        f.rmap.add(t, order, &T, pages);
        let other = f.clone();
        let exit = thread::spawn(move || {
            // T's last access to the bytes, then zap: rmap first, references after.
            other.data.with(|p| {
                // SAFETY: loom checks this access against the reuser's write.
                let _ = unsafe { *p };
            });
            other.rmap.remove(t, order, &T, pages);
            assert!(!other.refs.sub_and_test(REF, pages));
        });
        let reuse = f.rmap.can_reuse(t, order, &S, 0, || f.refs.count(REF));
        if reuse {
            f.data.with_mut(|p| {
                // SAFETY: loom reports it if this write is not ordered after T's read.
                unsafe { *p = 2 }
            });
            r.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        exit.join().unwrap();
        // T is gone: an exact strategy must now reuse.
        let now = f.rmap.can_reuse(t, order, &S, 0, || f.refs.count(REF));
        assert!(now, "{t}: not reused after the other space exited");
        f.rmap.remove(t, order, &S, pages);
        assert!(f.rmap.check_at_free().is_none());
    });
    assert!(n >= 10, "only {n} executions explored");
    assert!(
        reused_early.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "{t}: no execution reused while the other space was exiting: the race is not exercised"
    );
}

#[test]
fn reuse_vs_exit_rmap_id() {
    reuse_vs_exit(
        Tracking::RmapId {
            exclusive_writer: true,
        },
        Flaw::None,
    );
}

#[test]
fn reuse_vs_exit_rmap_id_noexcl() {
    reuse_vs_exit(
        Tracking::RmapId {
            exclusive_writer: false,
        },
        Flaw::None,
    );
}

#[test]
fn reuse_vs_exit_mm_owner() {
    reuse_vs_exit(Tracking::MmOwner, Flaw::None);
}

#[test]
fn reuse_vs_exit_small_folio() {
    // Order 0 (and any folio down to one mapping): the mapcount = 1 rule, every strategy.
    for t in [Tracking::None, Tracking::MmOwner] {
        reuse_vs_exit_sized(t, Flaw::None, 0, 1);
    }
    reuse_vs_exit_sized(Tracking::None, Flaw::None, ORDER, 1);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn weakened_reader_without_acquire_races_with_the_exiting_space() {
    reuse_vs_exit(
        Tracking::RmapId {
            exclusive_writer: true,
        },
        Flaw::ReaderNoAcquire,
    );
}

fn reuse_vs_fork(fault_takes_lock: bool) {
    let t = Tracking::RmapId {
        exclusive_writer: true,
    };
    let n = counted(move || {
        let f = Arc::new(folio(Flaw::None));
        let ptl = Arc::new(Mutex::new(()));
        // S maps two pages of the folio, copy-on-write (not anon-exclusive).
        f.refs.add(REF, 1);
        f.rmap.add(t, ORDER, &S, 2);
        let (ff, fptl) = (f.clone(), ptl.clone());
        let fork = thread::spawn(move || {
            {
                // `copy_page_range` of S into the child T, under S's lock.
                let _g = fptl.lock();
                ff.refs.add(REF, 2);
                ff.rmap.add(t, ORDER, &T, 2);
            }
            // The child reads its copy-on-write memory twice: it must not change.
            let read = || {
                ff.data.with(|p| {
                    // SAFETY: loom checks this access against the reuser's write.
                    unsafe { *p }
                })
            };
            let a = read();
            thread::yield_now();
            assert_eq!(a, read(), "the child's memory changed under it");
            ff.rmap.remove(t, ORDER, &T, 2);
            assert!(!ff.refs.sub_and_test(REF, 2));
        });
        {
            // The write fault of S.
            let _g = fault_takes_lock.then(|| ptl.lock());
            if f.rmap.can_reuse(t, ORDER, &S, 0, || f.refs.count(REF)) {
                f.data.with_mut(|p| {
                    // SAFETY: loom reports it if the child may read concurrently.
                    unsafe { *p = 2 }
                });
            }
        }
        fork.join().unwrap();
        f.rmap.remove(t, ORDER, &S, 2);
    });
    assert!(n >= 5, "only {n} executions explored");
}

#[test]
fn reuse_vs_fork_of_the_same_space() {
    reuse_vs_fork(true);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn weakened_fault_without_the_page_table_lock_races_with_fork() {
    reuse_vs_fork(false);
}
