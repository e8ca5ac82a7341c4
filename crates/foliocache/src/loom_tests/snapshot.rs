//! Loom models of the two protocols snapshots add (`cache/snapshot.rs`), each beside a
//! weakened variant the model catches.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p foliocache
//! --lib loom_tests::snapshot`.
//!
//! The cache is not built under loom, so the models restate the protocols on loom's
//! primitives, one step per real call:
//!
//! | step | real code | pairs with |
//! |---|---|---|
//! | a change captures the old page | `snapshot::capture`: `Snapshots::list` locked, then the snapshot's `Space::map_page` under its page-table lock | the reader's look at the table, under the same lock |
//! | ... and publishes the new one | `write::replace_page` -> `Index::replace_folio`: the new folio's bytes, then the slot store (Release) | the reader's `get_page` (Acquire slot load, `try_get`) |
//! | a snapshot read | `Snapshot::page`: the live page's reference first, then `Space::get_page` | both of the above |
//! | a snapshot drop | `Snapshot::drop`: out of `Snapshots::list` first, then `Space::unmap_counted` and the uncharge | `capture`'s list lock |
//!
//! A weakened read looks at the table before it takes the live page: a change can capture and
//! publish in between, and the read returns the new bytes. A weakened drop unmaps before it
//! leaves the list: a capture in between maps a page (and charges it) that nothing unmaps.

use crate::mm::sync::{model, thread, Arc, AtomicU64, AtomicUsize, Mutex, Ordering, UnsafeCell};

const OLD: u8 = 1;
const NEW: u8 = 2;

/// One page of a file: two folios (0 holds the snapshot's bytes, 1 the change's), the index
/// slot naming the cached one, and the snapshot's page-table entry.
struct Page {
    folios: [UnsafeCell<u8>; 2],
    slot: AtomicUsize,
    /// The snapshot's entry: the folio it maps, if any (`Space::mm`).
    table: Mutex<Option<usize>>,
}

// SAFETY: the folios' bytes are only touched through loom's `UnsafeCell`, which checks the
// order of the accesses (a read racing with the change's write is an error it reports).
unsafe impl Sync for Page {}

fn read_vs_change(table_first: bool) {
    model(move || {
        let p = Arc::new(Page {
            folios: [UnsafeCell::new(OLD), UnsafeCell::new(0)],
            slot: AtomicUsize::new(0),
            table: Mutex::new(None),
        });
        let writer = {
            let p = Arc::clone(&p);
            thread::spawn(move || {
                // `capture`: the old folio into the snapshot's table.
                p.table.lock().get_or_insert(0);
                // `replace_page`: the copy's bytes, then the slot (Release).
                // SAFETY: folio 1 is not published yet; loom checks the readers' accesses.
                p.folios[1].with_mut(|b| unsafe { *b = NEW });
                p.slot.store(1, Ordering::Release);
            })
        };
        let (live, mapped) = if table_first {
            let mapped = *p.table.lock();
            (p.slot.load(Ordering::Acquire), mapped)
        } else {
            // `Snapshot::page`: the live folio first, then the table.
            let live = p.slot.load(Ordering::Acquire);
            (live, *p.table.lock())
        };
        let folio = mapped.unwrap_or(live);
        // SAFETY: checked by loom against the writer's store.
        let byte = p.folios[folio].with(|b| unsafe { *b });
        assert_eq!(
            byte, OLD,
            "a snapshot read saw a change made after the snapshot"
        );
        writer.join().unwrap();
    });
}

#[test]
fn a_snapshot_read_never_sees_a_later_change() {
    read_vs_change(false);
}

#[test]
#[should_panic(expected = "a snapshot read saw a change")]
fn a_read_that_looks_at_the_table_first_is_caught() {
    read_vs_change(true);
}

/// A file's list of live snapshots (one here), the snapshot's entry, and the charge.
struct Snap {
    listed: Mutex<bool>,
    entry: Mutex<bool>,
    charged: AtomicU64,
}

fn drop_vs_capture(unmap_first: bool) {
    model(move || {
        let s = Arc::new(Snap {
            listed: Mutex::new(true),
            entry: Mutex::new(false),
            charged: AtomicU64::new(0),
        });
        let changer = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                // `capture`: under the list's lock, map and charge if still needed.
                let listed = s.listed.lock();
                if *listed {
                    let mut e = s.entry.lock();
                    if !*e {
                        *e = true;
                        s.charged.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        let unmap = |s: &Snap| {
            let mut e = s.entry.lock();
            if std::mem::replace(&mut *e, false) {
                s.charged.fetch_sub(1, Ordering::Relaxed);
            }
        };
        if unmap_first {
            unmap(&s);
            *s.listed.lock() = false;
        } else {
            // `Snapshot::drop`: out of the list, then unmap and uncharge.
            *s.listed.lock() = false;
            unmap(&s);
        }
        changer.join().unwrap();
        assert!(
            !*s.entry.lock() && s.charged.load(Ordering::Relaxed) == 0,
            "a dropped snapshot still maps and charges a page"
        );
    });
}

#[test]
fn a_dropped_snapshot_holds_nothing() {
    drop_vs_capture(false);
}

#[test]
#[should_panic(expected = "a dropped snapshot still maps")]
fn a_drop_that_unmaps_before_leaving_the_list_is_caught() {
    drop_vs_capture(true);
}
