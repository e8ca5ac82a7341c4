//! Loom models of the file table's lock-free read path (`FileTable::read`: one RCU section,
//! the table reference, the bucket's published list) racing with `remove` (copy-on-write
//! list replacement, value released after a grace period), `insert`, and `resize` (kill and
//! drain the old table's reference, copy the lists, publish, free after the grace periods);
//! and a weakened `remove` (value handed back without the grace period) that the model
//! must catch.

use crate::mm::filetable::{FileTable, FileTableConfig, Sizing, TableRef};
use crate::mm::sync::{thread, Arc, AtomicBool, Ordering};

/// A value whose owner marks it reused once the table handed it back.
#[derive(Debug)]
struct Probe {
    key: u64,
    live: AtomicBool,
}

fn probe(key: u64) -> Probe {
    Probe {
        key,
        live: AtomicBool::new(true),
    }
}

fn table(r: TableRef) -> Arc<FileTable<Probe>> {
    Arc::new(FileTable::new(FileTableConfig {
        reference: r,
        sizing: Sizing::Fixed(2),
    }))
}

/// A lock-free reader: if it finds `key`, the value is the right one and has not been handed
/// back to (and reused by) a remover while the reader was looking at it.
fn reader(t: &FileTable<Probe>, key: u64) -> bool {
    t.read(key, |v, _| {
        assert_eq!(v.key, key, "lock-free lookup found another key's value");
        assert!(
            v.live.load(Ordering::Relaxed),
            "lock-free reader saw a value its remover already reused"
        );
    })
    .is_some()
}

fn remove_races_with_reader(r: TableRef, weakened: bool) {
    loom::model(move || {
        let t = table(r);
        if weakened {
            t.weaken_skip_release_grace_period();
        }
        t.insert(1, probe(1));
        t.insert(3, probe(3));
        let t2 = t.clone();
        let rd = thread::spawn(move || {
            reader(&t2, 1);
            assert!(reader(&t2, 3), "an untouched key is always found");
        });
        let v = t.remove(1).expect("key 1 was present");
        // The caller owns it now: reuse it (a real caller frees it).
        v.live.store(false, Ordering::Relaxed);
        rd.join().unwrap();
        assert!(!reader(&t, 1));
        assert_eq!(t.validate(), 1);
        drop(v);
    });
}

#[test]
fn lock_free_read_races_with_remove_percpu_fast() {
    remove_races_with_reader(TableRef::PercpuFast, false);
}

#[test]
fn lock_free_read_races_with_remove_immutable() {
    remove_races_with_reader(TableRef::Immutable, false);
}

/// Without the grace period a reader that found the value before the unpublish is still
/// looking at it when the remover reuses it.
#[test]
#[should_panic(expected = "already reused")]
fn remove_without_grace_period_is_caught() {
    remove_races_with_reader(TableRef::PercpuFast, true);
}

fn insert_races_with_reader(r: TableRef) {
    loom::model(move || {
        let t = table(r);
        t.insert(1, probe(1));
        let t2 = t.clone();
        let rd = thread::spawn(move || {
            // Absent or complete, never a half-published list.
            reader(&t2, 3);
            assert!(reader(&t2, 1));
        });
        assert!(t.insert(3, probe(3)).is_none());
        rd.join().unwrap();
        assert!(reader(&t, 3));
        assert_eq!(t.validate(), 2);
    });
}

#[test]
fn lock_free_read_races_with_insert_percpu() {
    insert_races_with_reader(TableRef::Percpu);
}

fn resize_races_with_reader(r: TableRef) {
    loom::model(move || {
        let t = table(r);
        t.insert(1, probe(1));
        t.insert(2, probe(2));
        let t2 = t.clone();
        let rd = thread::spawn(move || {
            // Before, during (waits for the new table) or after the move: always found.
            assert!(reader(&t2, 1), "lookup lost during a resize");
            assert!(
                t2.with(2, |v| v.key) == Some(2),
                "locked lookup lost during a resize"
            );
        });
        let s = t.resize(4).unwrap();
        assert_eq!((s.from, s.to, s.moved), (2, 4, 2));
        rd.join().unwrap();
        assert_eq!(t.validate(), 2);
        assert!(reader(&t, 2));
    });
}

#[test]
fn lock_free_read_races_with_resize_percpu() {
    resize_races_with_reader(TableRef::Percpu);
}

#[test]
fn lock_free_read_races_with_resize_percpu_fast() {
    resize_races_with_reader(TableRef::PercpuFast);
}

#[test]
fn lock_free_read_races_with_resize_atomic() {
    resize_races_with_reader(TableRef::Atomic);
}
