//! Differential test of the page-cache index: random sequences of insert, insert-range,
//! lookup, delete, evict, truncate and invalidate against a `BTreeMap` model (first index ->
//! folio), with some folios pinned by "readers" along the way; after every step a sample of
//! lookups is compared, and every few steps both the tree (`Index::validate`) and the arena
//! (`Arena::validate`) recompute their counters from scratch. At the end, dropping pins and
//! the index brings the arena's accounting back to baseline.
#![cfg(not(loom))]

use std::collections::BTreeMap;

use foliocache::mm::folio::{Arena, ArenaConfig, FolioLocked, FolioRef, PAGE_SIZE};
use foliocache::mm::index::{AddError, Index};
use foliocache::mm::refcount::RefStrategy;
use foliocache::mm::sync::Arc;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Indices used: small enough for collisions, with a far region to grow the tree.
fn random_index(rng: &mut StdRng, order: u32) -> u64 {
    let base = if rng.random_bool(0.1) { 1 << 30 } else { 0 };
    let i = base + rng.random_range(0..2048u64);
    i & !((1u64 << order) - 1)
}

fn random_order(rng: &mut StdRng) -> u32 {
    match rng.random_range(0..10) {
        0..=5 => 0,
        6 => 1,
        7 => 2,
        8 => 4,
        _ => 6,
    }
}

struct Model {
    /// First index -> (pfn, nr_pages).
    map: BTreeMap<u64, (u32, u64)>,
}

impl Model {
    fn covering(&self, i: u64) -> Option<(u64, u32, u64)> {
        let (&start, &(pfn, nr)) = self.map.range(..=i).next_back()?;
        (i < start + nr).then_some((start, pfn, nr))
    }

    fn overlaps(&self, start: u64, nr: u64) -> bool {
        (start..start + nr).any(|i| self.covering(i).is_some())
    }

    fn in_range(&self, start: u64, end: u64) -> Vec<(u64, u32, u64)> {
        let mut v: Vec<_> = self
            .map
            .iter()
            .filter(|(&s, &(_, nr))| s < end && s + nr > start)
            .map(|(&s, &(p, nr))| (s, p, nr))
            .collect();
        v.sort();
        v
    }
}

fn run(seed: u64, strategy: RefStrategy, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut c = ArenaConfig::new(4096 * PAGE_SIZE, strategy);
    c.panic_on_bad_page = true;
    let arena = Arc::new(Arena::new(c).unwrap());
    let baseline = arena.validate().unwrap();
    let index = Index::new(arena.clone());
    let mut model = Model {
        map: BTreeMap::new(),
    };
    let mut pins: Vec<FolioRef<'_>> = Vec::new();

    for step in 0..steps {
        match rng.random_range(0..100) {
            // add_folio
            0..=24 => {
                let order = random_order(&mut rng);
                let Ok(f) = arena.alloc(order) else { continue };
                let f = f.lock();
                let i = random_index(&mut rng, order);
                let nr = 1u64 << order;
                let r = index.add_folio(&f, i);
                if model.overlaps(i, nr) {
                    assert_eq!(r, Err(AddError::Exists { index: i }), "step {step}");
                } else {
                    assert_eq!(r, Ok(()), "step {step}");
                    model.map.insert(i, (f.pfn(), nr));
                }
                drop(f.end_read(true));
            }
            // add_folio_range
            25..=44 => {
                let order = if rng.random_bool(0.7) { 0 } else { 2 };
                let nr = 1u64 << order;
                let count = rng.random_range(1..=32u64);
                let start = random_index(&mut rng, order);
                let mut batch: Vec<FolioLocked<'_>> = Vec::new();
                for _ in 0..count {
                    match arena.alloc(order) {
                        Ok(f) => batch.push(f.lock()),
                        Err(_) => break,
                    }
                }
                // Sometimes the range is longer than the batch covers.
                let end = start + count * nr + if rng.random_bool(0.2) { nr } else { 0 };
                let r = index.add_folio_range(start, end, &batch);
                // Expected: insert folio k at start + k*nr until an overlap or batch end.
                let mut expect = 0u64;
                for f in &batch {
                    let i = start + expect;
                    if i >= end || model.overlaps(i, nr) {
                        break;
                    }
                    model.map.insert(i, (f.pfn(), nr));
                    expect += nr;
                }
                if expect > 0 {
                    assert_eq!(r, Ok(expect), "step {step}");
                } else if batch.is_empty() {
                    assert_eq!(
                        r,
                        Err(AddError::MissingFolio { index: start }),
                        "step {step}"
                    );
                } else {
                    assert_eq!(r, Err(AddError::Exists { index: start }), "step {step}");
                }
                for (k, f) in batch.into_iter().enumerate() {
                    if (k as u64) * nr < expect {
                        assert_eq!(f.index(), start + k as u64 * nr);
                        assert_eq!(f.mapping(), index.mapping_id());
                    } else {
                        assert_eq!(f.mapping(), 0, "uninserted folio touched");
                    }
                    drop(f.end_read(true));
                }
            }
            // lookup, sometimes kept as a pin
            45..=64 => {
                let i = random_index(&mut rng, 0);
                let got = index.lookup(i);
                match (model.covering(i), &got) {
                    (None, None) => {}
                    (Some((start, pfn, _)), Some(f)) => {
                        assert_eq!((f.pfn(), f.index()), (pfn, start), "step {step}");
                    }
                    (m, g) => panic!("step {step}: lookup({i}) model {m:?} index {g:?}"),
                }
                if let Some(f) = got {
                    if rng.random_bool(0.3) {
                        pins.push(f);
                    }
                }
            }
            // drop a pin
            65..=69 => {
                if !pins.is_empty() {
                    let k = rng.random_range(0..pins.len());
                    pins.swap_remove(k);
                }
            }
            // delete (filemap_remove_folio) of a random cached folio
            70..=77 => {
                let i = random_index(&mut rng, 0);
                if let Some((start, _, _)) = model.covering(i) {
                    let f = index.lookup(i).unwrap().lock();
                    assert!(index.delete(&f));
                    assert_eq!(f.mapping(), 0);
                    model.map.remove(&start);
                }
            }
            // evict: only if not pinned
            78..=85 => {
                let i = random_index(&mut rng, 0);
                if let Some((start, pfn, _)) = model.covering(i) {
                    let pinned = pins.iter().any(|p| p.pfn() == pfn);
                    let f = index.lookup(i).unwrap().lock();
                    match index.evict(f) {
                        Ok(()) => {
                            assert!(!pinned, "step {step}: evicted a pinned folio");
                            model.map.remove(&start);
                        }
                        Err(_) => assert!(pinned, "step {step}: evict refused an unpinned folio"),
                    }
                }
            }
            // truncate / invalidate a range
            _ => {
                let start = random_index(&mut rng, 0);
                let end = start + rng.random_range(1..256u64);
                let truncate = rng.random_bool(0.5);
                // Truncation takes the folios that overlap the range (large ones whole),
                // invalidation only those inside it.
                let victims: Vec<_> = model
                    .in_range(start, end)
                    .into_iter()
                    .filter(|&(s, _, nr)| truncate || (s >= start && s + nr <= end))
                    .collect();
                let pinned = victims
                    .iter()
                    .filter(|v| pins.iter().any(|p| p.pfn() == v.1))
                    .count() as u64;
                let r = if truncate {
                    index.truncate(start, end)
                } else {
                    index.invalidate(start, end)
                };
                assert_eq!(r.busy, pinned, "step {step}");
                assert_eq!(r.folios_freed, victims.len() as u64 - pinned, "step {step}");
                for (s, pfn, _) in victims {
                    if truncate || !pins.iter().any(|p| p.pfn() == pfn) {
                        model.map.remove(&s);
                    }
                }
            }
        }
        // Spot checks every step, full validation every few.
        for _ in 0..4 {
            let i = random_index(&mut rng, 0);
            assert_eq!(
                index.contains(i),
                model.covering(i).is_some(),
                "step {step}: contains({i})"
            );
        }
        if step % 16 == 0 || step == steps - 1 {
            let st = index
                .validate()
                .unwrap_or_else(|e| panic!("step {step}: {e}"));
            assert_eq!(st.nr_folios, model.map.len() as u64);
            assert_eq!(st.nr_pages, model.map.values().map(|v| v.1).sum::<u64>());
            let a = arena
                .validate()
                .unwrap_or_else(|e| panic!("step {step}: {e}"));
            assert_eq!(a.bad_pages, 0);
        }
    }
    for (&start, &(pfn, _)) in &model.map {
        let f = index.lookup(start).unwrap();
        assert_eq!(f.pfn(), pfn);
    }
    drop(pins);
    drop(index);
    let end = arena.validate().unwrap();
    assert_eq!(
        end.free_pages, baseline.free_pages,
        "accounting back to baseline"
    );
    assert_eq!(end.allocated_pages, 0);
    assert_eq!(end.allocations, end.frees);
    assert_eq!(end.bad_pages, 0);
}

#[test]
fn random_operations_match_the_model() {
    let steps = if cfg!(debug_assertions) { 1500 } else { 20_000 };
    for (seed, s) in [
        (1, RefStrategy::CasLoop),
        (2, RefStrategy::LockedBit),
        (3, RefStrategy::Optimistic),
        (4, RefStrategy::LockedBit),
    ] {
        run(seed, s, steps);
    }
}
