//! Differential test of shadow entries in the index: random insertions (orders 0 to 2, single
//! and batched), reclaim with and without a shadow, deletions, truncations, invalidations and
//! shadow-node shrinking, against a map from page index to "folio" or "shadow", then
//! `validate()` (which recomputes every counter and the shadow-node list) after each step.
//!
//! The model cannot know which shadows a shrink drops (whole nodes, oldest first), so after
//! a shrink it marks every shadow *uncertain*: an insertion may then find it or not, but never
//! a shadow the model does not hold, and never miss one the model knows is there.
#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::sync::Arc;

use foliocache::mm::folio::{Arena, ArenaConfig, PAGE_SIZE};
use foliocache::mm::index::{Index, Shadow};
use foliocache::mm::refcount::RefStrategy;
use rand::{Rng, SeedableRng};

/// Page indices used: a few leaves (64 slots) and some far ones.
const SPAN: u64 = 320;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Page `index` of the folio cached at `first` with `order`.
    Folio { first: u64, order: u32 },
    /// A shadow with this payload; `sure` false after a shrink may have dropped it.
    Shadow { v: u64, sure: bool },
}

struct Model {
    slots: BTreeMap<u64, Slot>,
}

impl Model {
    fn folio_at(&self, i: u64) -> Option<(u64, u32)> {
        match self.slots.get(&i) {
            Some(&Slot::Folio { first, order }) => Some((first, order)),
            _ => None,
        }
    }

    fn free(&self, first: u64, order: u32) -> bool {
        (first..first + (1 << order)).all(|i| self.folio_at(i).is_none())
    }

    /// The shadows a folio over `first..first + 2^order` may get back: (sure ones, all).
    fn shadows(&self, first: u64, order: u32) -> (Vec<u64>, Vec<u64>) {
        let (mut sure, mut all) = (Vec::new(), Vec::new());
        for i in first..first + (1 << order) {
            if let Some(&Slot::Shadow { v, sure: s }) = self.slots.get(&i) {
                all.push(v);
                if s {
                    sure.push(v);
                }
            }
        }
        (sure, all)
    }

    fn set(&mut self, first: u64, order: u32, slot: Option<Slot>) {
        for i in first..first + (1 << order) {
            match slot {
                Some(s) => self.slots.insert(i, s),
                None => self.slots.remove(&i),
            };
        }
    }

    fn shadow_count(&self) -> u64 {
        self.slots
            .values()
            .filter(|s| matches!(s, Slot::Shadow { .. }))
            .count() as u64
    }
}

fn check_lookup(index: &Index, model: &Model, i: u64) {
    match (index.lookup(i), model.folio_at(i)) {
        (None, None) => {}
        (Some(f), Some((first, order))) => {
            assert_eq!((f.index(), f.order()), (first, order), "lookup({i})");
        }
        (got, want) => panic!(
            "lookup({i}): index {:?}, model {want:?}",
            got.map(|f| f.index())
        ),
    }
}

fn run(seed: u64, steps: usize) {
    let mut c = ArenaConfig::new(512 * PAGE_SIZE, RefStrategy::LockedBit);
    c.panic_on_bad_page = true;
    let arena = Arc::new(Arena::new(c).unwrap());
    let index = Index::new(arena.clone());
    let mut model = Model {
        slots: BTreeMap::new(),
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut next_v = 1u64;
    let (mut handed_back, mut nodes_shrunk) = (0, 0);
    for step in 0..steps {
        let order = [0, 0, 0, 1, 2][rng.random_range(0..5)];
        let first = rng.random_range(0..SPAN) & !((1 << order) - 1);
        match rng.random_range(0..100) {
            // Insert one folio, checking the shadow handed back.
            0..=34 => {
                let f = arena.alloc(order).unwrap().lock();
                let got = index.add_folio_shadow(&f, first);
                if !model.free(first, order) {
                    assert!(got.is_err(), "step {step}: insert over a folio at {first}");
                    continue;
                }
                let got = got.unwrap_or_else(|e| panic!("step {step}: {e}"));
                let (sure, all) = model.shadows(first, order);
                handed_back += got.is_some() as u64;
                match got {
                    Some(s) => assert!(
                        all.contains(&s.value()),
                        "step {step}: got shadow {} at {first}, model has {all:?}",
                        s.value()
                    ),
                    None => assert!(
                        sure.is_empty(),
                        "step {step}: shadows {sure:?} at {first} not handed back"
                    ),
                }
                model.set(first, order, Some(Slot::Folio { first, order }));
            }
            // A batch of order-0 folios into a run of free slots.
            35..=44 => {
                let n = rng.random_range(1..6u64);
                let run = (first..first + n)
                    .take_while(|&i| model.folio_at(i).is_none())
                    .count() as u64;
                let batch: Vec<_> = (0..n).map(|_| arena.alloc(0).unwrap().lock()).collect();
                let mut shadows = vec![None; n as usize];
                let want: Vec<_> = (first..first + run).map(|i| model.shadows(i, 0)).collect();
                let r = index.add_folio_range_shadows(first, first + n, &batch, &mut shadows);
                if run == 0 {
                    assert!(r.is_err(), "step {step}");
                    continue;
                }
                assert_eq!(r, Ok(run), "step {step}: batch at {first}");
                for (k, (sure, all)) in want.into_iter().enumerate() {
                    let got: Option<Shadow> = shadows[k];
                    assert!(got.is_some() || sure.is_empty(), "step {step}");
                    assert!(got.is_none_or(|s| all.contains(&s.value())), "step {step}");
                    let i = first + k as u64;
                    model.set(i, 0, Some(Slot::Folio { first: i, order: 0 }));
                }
                assert!(shadows[run as usize..].iter().all(Option::is_none));
            }
            // Reclaim (with a shadow) or invalidation-style eviction (without).
            45..=69 => {
                let Some((at, ord)) = model.folio_at(first) else {
                    continue;
                };
                let f = index.lookup(first).unwrap().lock();
                let with = rng.random_bool(0.8);
                let v = next_v;
                next_v += 1;
                let r = index.evict_with_shadow(f, |frozen| {
                    assert_eq!(frozen.index(), at);
                    with.then(|| Shadow::new(v).unwrap())
                });
                assert!(r.is_ok(), "step {step}: nobody else holds it");
                let slot = with.then_some(Slot::Shadow { v, sure: true });
                model.set(at, ord, slot);
            }
            // Delete (no shadow), as a failed read does.
            70..=74 => {
                let Some((at, ord)) = model.folio_at(first) else {
                    continue;
                };
                let f = index.lookup(first).unwrap().lock();
                assert!(index.delete(&f));
                model.set(at, ord, None);
            }
            // Truncate or invalidate a range: folios and shadows go; truncation takes the
            // large folios that overlap it whole, invalidation only those inside it.
            75..=82 => {
                let end = (first + rng.random_range(1..80)).min(SPAN + 8);
                let truncate = rng.random_bool(0.5);
                if truncate {
                    index.truncate(first, end);
                } else {
                    index.invalidate(first, end);
                }
                let goes = |f: u64, o: u32| {
                    if truncate {
                        f < end && f + (1 << o) > first
                    } else {
                        f >= first && f + (1 << o) <= end
                    }
                };
                let gone: Vec<(u64, u32, bool)> = model
                    .slots
                    .iter()
                    .filter_map(|(&i, s)| match *s {
                        Slot::Folio { first: f, order: o } if goes(f, o) => Some((f, o, true)),
                        Slot::Shadow { .. } if (first..end).contains(&i) => Some((i, 0, false)),
                        _ => None,
                    })
                    .collect();
                for (i, o, _) in gone {
                    model.set(i, o, None);
                }
            }
            // The shrinker: some shadow nodes go, the model cannot say which.
            83..=86 => {
                nodes_shrunk += index.shrink_shadow_nodes(rng.random_range(0..3));
                for s in model.slots.values_mut() {
                    if let Slot::Shadow { sure, .. } = s {
                        *sure = false;
                    }
                }
            }
            // Reclaim sweeps a whole leaf, leaving a node of shadows only.
            87..=90 => {
                let base = first & !63;
                let folios: Vec<(u64, u32)> = model
                    .slots
                    .range(base..base + 64)
                    .filter_map(|(_, s)| match *s {
                        Slot::Folio { first, order } => Some((first, order)),
                        _ => None,
                    })
                    .collect();
                for (at, ord) in folios {
                    if model.folio_at(at).is_none() {
                        continue; // a large folio's other pages
                    }
                    let v = next_v;
                    next_v += 1;
                    let f = index.lookup(at).unwrap().lock();
                    assert!(index.evict_with_shadow(f, |_| Shadow::new(v)).is_ok());
                    model.set(at, ord, Some(Slot::Shadow { v, sure: true }));
                }
            }
            _ => check_lookup(&index, &model, first),
        }
        let st = index
            .validate()
            .unwrap_or_else(|e| panic!("step {step}: {e}"));
        let cached = model
            .slots
            .values()
            .filter(|s| matches!(s, Slot::Folio { .. }))
            .count() as u64;
        assert_eq!(st.nr_pages, cached, "step {step}");
        assert!(st.nr_shadows <= model.shadow_count(), "step {step}");
        if model
            .slots
            .values()
            .all(|s| !matches!(s, Slot::Shadow { sure: false, .. }))
        {
            assert_eq!(st.nr_shadows, model.shadow_count(), "step {step}");
        }
        assert_eq!(st.shadow_nodes, index.shadow_nodes().nodes(), "step {step}");
    }
    for i in 0..SPAN {
        check_lookup(&index, &model, i);
    }
    assert!(
        handed_back > 50 && nodes_shrunk > 5,
        "{handed_back} {nodes_shrunk}"
    );
    index.truncate(0, u64::MAX);
    let st = index.validate().unwrap();
    assert_eq!(
        (st.nr_pages, st.nr_shadows, st.nr_nodes, st.shadow_nodes),
        (0, 0, 0, 0)
    );
    drop(index);
    assert_eq!(arena.validate().unwrap().allocated_pages, 0);
}

#[test]
fn shadows_match_the_model() {
    let steps = if cfg!(debug_assertions) { 3000 } else { 20000 };
    for seed in 0..6 {
        run(seed, steps);
    }
}
