//! Unit tests of the space layer through its public API.

use super::*;
use crate::mm::folio::ArenaConfig;
use crate::mm::refcount::RefStrategy;

fn family(t: Tracking, mib: usize) -> Spaces {
    let mut c = ArenaConfig::new(mib << 20, RefStrategy::LockedBit);
    c.panic_on_bad_page = true;
    let arena = Arc::new(Arena::new(c).unwrap());
    let mut cfg = SpaceConfig::new(t);
    cfg.oracle = true;
    Spaces::new(arena, cfg)
}

const MIB: usize = 1 << 20;

#[test]
fn fork_write_copy_then_reuse_after_child_exit() {
    for t in Tracking::ALL {
        let sp = family(t, 16);
        let base = sp.arena().stats().allocated_pages;
        let a = sp.create().unwrap();
        let addr = a.anon(2 * MIB).unwrap();
        a.write(addr, &[7u8; 2 * MIB]).unwrap();
        let info = a.folio_at(addr).unwrap();
        assert_eq!((info.order, info.entire), (9, true));
        assert_eq!(a.stats().anon_faults, 1);
        let b = a.fork().unwrap();
        assert_eq!(a.mapped_exclusively(addr), Some(false));
        // The parent writes one byte: shared, so the page is copied (PMD split first).
        a.write(addr + 5, &[1]).unwrap();
        assert_eq!(a.stats().cow_copies, 1);
        assert_eq!(a.stats().pmd_splits, 1);
        let mut buf = [0u8; 8];
        b.read(addr, &mut buf).unwrap();
        assert_eq!(buf, [7; 8], "the child keeps the old bytes");
        a.read(addr, &mut buf).unwrap();
        assert_eq!(buf, [7, 7, 7, 7, 7, 1, 7, 7]);
        drop(b);
        // The child exited: the remaining 511 PTEs of the parent map the folio alone.
        a.write(addr + 4096, &[2]).unwrap();
        let s = a.stats();
        if t == Tracking::None {
            assert_eq!((s.cow_copies, s.cow_reuses), (2, 0), "{t}");
        } else {
            assert_eq!((s.cow_copies, s.cow_reuses), (1, 1), "{t}");
            // Reuse made every remaining page of the folio writable: no more faults.
            a.write(addr + 8192, &[3; 4096 * 3]).unwrap();
            assert_eq!(a.stats().cow_reuses, 1);
        }
        let r = sp.check_oracle();
        assert_eq!(r.mismatches(), 0, "{t}: {r:?}");
        let (checks, bad, first) = sp.oracle_decisions();
        assert!(checks >= 2);
        assert_eq!(bad, 0, "{t}: {first:?}");
        drop(a);
        assert_eq!(
            sp.arena().stats().allocated_pages,
            base,
            "{t}: leaked pages"
        );
        assert_eq!(sp.live(), 0);
    }
}

#[test]
fn entire_mapping_reused_whole_when_child_gone() {
    for t in Tracking::ALL {
        let sp = family(t, 8);
        let a = sp.create().unwrap();
        let addr = a.anon(2 * MIB).unwrap();
        a.write(addr, &[1]).unwrap();
        drop(a.fork().unwrap());
        // mapcount 1 (the entire mapping), refcount 1: every strategy reuses it.
        a.write(addr + 100, &[2]).unwrap();
        let s = a.stats();
        assert_eq!((s.cow_reuses, s.cow_copies, s.pmd_splits), (1, 0, 0), "{t}");
        assert!(a.folio_at(addr + 4096 * 300).unwrap().writable);
    }
}

#[test]
fn protect_splits_pmd_and_restores_exclusive_write() {
    let sp = family(
        Tracking::RmapId {
            exclusive_writer: true,
        },
        8,
    );
    let a = sp.create().unwrap();
    let addr = a.anon(2 * MIB).unwrap();
    a.write(addr, &[9; 64]).unwrap();
    a.protect(addr + 4096, 4096, true).unwrap();
    assert_eq!(a.stats().pmd_splits, 1);
    assert!(!a.folio_at(addr).unwrap().entire);
    assert_eq!(
        a.write(addr + 4096, &[1]),
        Err(SpaceError::Protected { addr: addr + 4096 })
    );
    a.protect(addr + 4096, 4096, false).unwrap();
    assert!(a.folio_at(addr + 4096).unwrap().writable);
    a.write(addr + 4096, &[1]).unwrap();
    assert_eq!(a.stats().cow_copies + a.stats().cow_reuses, 0);
    assert_eq!(sp.check_oracle().mismatches(), 0);
    assert!(a.mapped_exclusively(addr).unwrap());
}

#[test]
fn dontneed_and_unmap_partial_large_folio() {
    let sp = family(Tracking::MmOwner, 8);
    let a = sp.create().unwrap();
    let addr = a.anon_with_order(64 * 4096, 4).unwrap();
    a.write(addr, &[5; 64 * 4096]).unwrap();
    assert_eq!(a.stats().anon_faults, 4);
    assert_eq!(a.folio_at(addr).unwrap().order, 4);
    a.dontneed(addr + 4096, 4096).unwrap();
    let mut b = [1u8; 4];
    a.read(addr + 4096, &mut b).unwrap();
    assert_eq!(b, [0; 4]);
    a.read(addr, &mut b).unwrap();
    assert_eq!(b, [5; 4]);
    // A write to the dropped page takes a small folio (its order-4 span is not empty).
    a.write(addr + 4096, &[6]).unwrap();
    assert_eq!(a.folio_at(addr + 4096).unwrap().order, 0);
    // Unmap the middle of the VMA: it splits in two, the tail still reads back.
    a.unmap(addr + 16 * 4096, 16 * 4096).unwrap();
    assert_eq!(
        a.read(addr + 20 * 4096, &mut b),
        Err(SpaceError::NotMapped {
            addr: addr + 20 * 4096
        })
    );
    a.read(addr + 40 * 4096, &mut b).unwrap();
    assert_eq!(b, [5; 4]);
    assert_eq!(sp.check_oracle().mismatches(), 0);
    assert!(matches!(
        a.unmap(addr + 1, 4096),
        Err(SpaceError::Unaligned { .. })
    ));
}

#[test]
fn file_folios_map_shared_read_only() {
    let sp = family(
        Tracking::RmapId {
            exclusive_writer: false,
        },
        8,
    );
    let arena = sp.arena().clone();
    let mut folios = Vec::new();
    for (i, order) in [2u32, 0].into_iter().enumerate() {
        let mut l = arena.alloc(order).unwrap().lock();
        l.data_mut().unwrap().fill(i as u8 + 1);
        l.mark_uptodate();
        folios.push(l.unlock());
    }
    let a = sp.create().unwrap();
    let addr = a.map_folios(&folios).unwrap();
    let b = a.fork().unwrap();
    let mut buf = [0u8; 2];
    b.read(addr + 4 * 4096 - 1, &mut buf).unwrap();
    assert_eq!(buf, [1, 2]);
    assert_eq!(a.write(addr, &[0]), Err(SpaceError::ReadOnly { addr }));
    assert!(matches!(
        a.dontneed(addr, 4096),
        Err(SpaceError::NotAnonymous { .. })
    ));
    assert_eq!(a.mapped_exclusively(addr), Some(false));
    drop(b);
    assert_eq!(a.mapped_exclusively(addr), Some(true));
    assert_eq!(folios[0].ref_count(arena.strategy()), 1 + 4);
    drop(a);
    assert_eq!(folios[0].ref_count(arena.strategy()), 1);
    assert_eq!(sp.check_oracle().mismatches(), 0);
}

#[test]
fn rmap_ids_are_reused_after_drop() {
    let sp = family(Tracking::None, 4);
    let a = sp.create().unwrap();
    let b = sp.create().unwrap();
    let id = b.rmap_id();
    drop(b);
    let c = sp.create().unwrap();
    assert_eq!(c.rmap_id(), id);
    assert_ne!(a.rmap_id(), c.rmap_id());
}

#[test]
fn errors_say_how_to_fix() {
    let sp = family(Tracking::None, 4);
    let a = sp.create().unwrap();
    assert!(a
        .anon_with_order(4096, 10)
        .unwrap_err()
        .to_string()
        .contains("0..=9"));
    let e = a.write(12345 << 12, &[0]).unwrap_err();
    assert!(e.to_string().contains("anon()"));
    let addr = a.anon(8 * MIB).unwrap();
    let e = a.write(addr, &vec![1u8; 8 * MIB]).unwrap_err();
    assert!(e.to_string().contains("larger budget"), "{e}");
}
