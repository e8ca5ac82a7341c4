//! Real-thread stress of the space layer: threads COW-faulting the same folios at once.
//!
//! A parent populates anonymous memory (PMD-mapped 2 MiB folios and PTE-mapped order-4
//! folios) and forks one child per worker. Every worker, on its own child, writes random
//! pages (one COW fault each, all hitting the same parent folios concurrently: concurrent
//! seqcount writers or mm-owner lock holders on one folio), drops pages, forks and drops
//! grandchildren, and checks that its space reads back exactly what it wrote. Two more
//! threads share the parent itself and write disjoint pages of it. Afterwards the oracle
//! must find every counter and answer consistent, and dropping everything must return the
//! arena to its baseline, for every tracking strategy.
#![cfg(not(loom))]

use std::collections::HashMap;
use std::sync::Arc;

use foliocache::mm::folio::{Arena, ArenaConfig};
use foliocache::mm::refcount::RefStrategy;
use foliocache::mm::rmap::Tracking;
use foliocache::mm::space::{Space, SpaceConfig, Spaces};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PAGE: usize = 4096;
const MIB: usize = 1 << 20;

fn worker(
    child: Space,
    regions: Vec<(u64, usize)>,
    parent_bytes: u8,
    seed: u64,
    iters: usize,
) -> Space {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model: HashMap<u64, u8> = HashMap::new();
    let pages: Vec<u64> = regions
        .iter()
        .flat_map(|&(a, len)| (0..len / PAGE).map(move |p| a + (p * PAGE) as u64))
        .collect();
    for i in 0..iters {
        let addr = pages[rng.random_range(0..pages.len())];
        match rng.random_range(0..20) {
            0 => {
                child.dontneed(addr, PAGE).unwrap();
                model.insert(addr, 0);
            }
            1 => {
                // A short-lived grandchild: fork, touch, exit.
                let g = child.fork().unwrap();
                g.write(addr, &[0xee; 16]).unwrap();
                drop(g);
            }
            _ => {
                let v = (seed as u8).wrapping_mul(31).wrapping_add(i as u8) | 1;
                child.write(addr, &[v; PAGE]).unwrap();
                model.insert(addr, v);
            }
        }
        if i % 16 == 0 {
            let mut buf = [0u8; PAGE];
            for &a in pages.iter().step_by(7) {
                child.read(a, &mut buf).unwrap();
                let want = model.get(&a).copied().unwrap_or(parent_bytes);
                assert!(buf.iter().all(|&b| b == want), "page {a:#x}: want {want}");
            }
        }
    }
    child
}

fn run(t: Tracking, iters: usize) {
    let mut ac = ArenaConfig::new(128 * MIB, RefStrategy::LockedBit);
    ac.panic_on_bad_page = true;
    let arena = Arc::new(Arena::new(ac).unwrap());
    let base = arena.stats().allocated_pages;
    let sp = Spaces::new(arena.clone(), SpaceConfig::new(t));
    let parent = Arc::new(sp.create().unwrap());
    let big = parent.anon(4 * MIB).unwrap();
    let small = parent.anon_with_order(MIB, 4).unwrap();
    parent.write(big, &vec![0x11; 4 * MIB]).unwrap();
    parent.write(small, &vec![0x11; MIB]).unwrap();
    let regions = vec![(big, 4 * MIB), (small, MIB)];

    let mut handles = Vec::new();
    for w in 0..3u64 {
        let child = parent.fork().unwrap();
        let regions = regions.clone();
        handles.push(std::thread::spawn(move || {
            worker(child, regions, 0x11, w + 1, iters)
        }));
    }
    // Two threads on the parent itself, disjoint halves of the big region.
    let mut own = Vec::new();
    for half in 0..2u64 {
        let p = parent.clone();
        own.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(100 + half);
            let first = big + half * 2 * MIB as u64;
            for i in 0..iters {
                let a = first + (rng.random_range(0..512) * PAGE) as u64;
                let v = [0x40 | half as u8; 64];
                p.write(a + (i % 64) as u64, &v).unwrap();
                let mut b = [0u8; 64];
                p.read(a + (i % 64) as u64, &mut b).unwrap();
                assert_eq!(b, v);
            }
        }));
    }
    let children: Vec<Space> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for h in own {
        h.join().unwrap();
    }
    let report = sp.check_oracle();
    assert_eq!(report.mismatches(), 0, "{t}: {report:?}");
    let stats = sp.stats();
    assert!(stats.cow_copies > 0, "{t}: {stats:?}");
    drop(children);
    // With the children gone, the parent's folios are exclusive again: an exact strategy
    // says so for every one of them.
    if t.is_exact() {
        for f in sp.sharing_snapshot() {
            assert_eq!(f.answers, vec![true], "{t}: {f:?}");
        }
    }
    drop(parent);
    assert_eq!(sp.live(), 0);
    assert_eq!(arena.stats().allocated_pages, base, "{t}: pages leaked");
    assert_eq!(arena.stats().bad_pages, 0);
}

#[test]
fn threads_cow_fault_the_same_folios() {
    let iters = if cfg!(debug_assertions) { 400 } else { 6000 };
    for t in Tracking::ALL {
        run(t, iters);
    }
}
