//! Differential test of the per-folio sharer tracking (`foliocache::mm::rmap`): random
//! batched map/unmap sequences by several spaces on folios of every order, against a model
//! that simply counts each space's mappings. After every step:
//!
//! - `rmap-id` answers `mapped_exclusively` exactly for every space that maps the folio
//!   (while the mapcount is at most the folio's pages; above, it must say "shared");
//! - `mm-owner` is exact while no more than two spaces have mapped the folio at the same time
//!   since it was last completely unmapped, and never wrongly "exclusive";
//! - `none` says "exclusive" only for a single mapping;
//! - `validate()` recomputes every counter from the model.
#![cfg(not(loom))]

use foliocache::mm::rmap::id::RmapId;
use foliocache::mm::rmap::{FolioRmap, Tracking};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn run(t: Tracking, seed: u64, steps: usize, nr_spaces: usize) -> u64 {
    let mut exact_checks = 0;
    let mut rng = StdRng::seed_from_u64(seed);
    let spaces: Vec<RmapId> = (0..nr_spaces)
        .map(|_| RmapId::new(rng.random_range(1..1 << 24)))
        .collect();
    for order in [1u32, 2, 5, 6, 7, 9] {
        let p = 1u64 << order;
        let f = FolioRmap::new();
        let mut counts = vec![0u64; spaces.len()];
        let mut peak_mappers = 0usize;
        for _ in 0..steps {
            // Mostly keep each space's count within the folio (anonymous memory), sometimes
            // overshoot (a file folio mapped twice by one space).
            let i = rng.random_range(0..spaces.len());
            let unmap = counts[i] > 0 && rng.random_bool(0.5);
            if unmap {
                let n = rng.random_range(1..=counts[i]);
                f.remove(t, order, &spaces[i], n as u32);
                counts[i] -= n;
            } else {
                let room = (p + 2).saturating_sub(counts[i]).max(1);
                let n = rng.random_range(1..=room.min(p));
                f.add(t, order, &spaces[i], n as u32);
                counts[i] += n;
            }
            let total: u64 = counts.iter().sum();
            let mappers = counts.iter().filter(|&&c| c > 0).count();
            if total == 0 {
                peak_mappers = 0;
            }
            peak_mappers = peak_mappers.max(mappers);
            let truth: Vec<_> = spaces.iter().copied().zip(counts.iter().copied()).collect();
            f.validate(t, order, &truth)
                .unwrap_or_else(|e| panic!("{t} order {order}: {e}"));
            for (s, &c) in spaces.iter().zip(&counts) {
                if c == 0 {
                    continue; // the contract: only a space that maps the folio asks
                }
                let exclusive = mappers == 1;
                let got = f.mapped_exclusively(t, order, s);
                assert!(!got || exclusive, "{t} order {order}: wrongly exclusive");
                match t {
                    Tracking::RmapId { .. } => {
                        if total <= p {
                            exact_checks += 1;
                            assert_eq!(got, exclusive, "rmap-id order {order} counts {counts:?}");
                        }
                    }
                    Tracking::MmOwner => {
                        if peak_mappers <= 2 {
                            exact_checks += 1;
                            assert_eq!(got, exclusive, "mm-owner order {order} counts {counts:?}");
                        }
                    }
                    Tracking::None => assert_eq!(got, total == 1),
                    other => panic!("no model for the tracking {other}"),
                }
            }
        }
        for (s, c) in spaces.iter().zip(&counts) {
            if *c > 0 {
                f.remove(t, order, s, *c as u32);
            }
        }
        assert_eq!(f.check_at_free(), None);
    }
    exact_checks
}

#[test]
fn every_strategy_against_the_model() {
    let steps = if cfg!(debug_assertions) {
        2_000
    } else {
        20_000
    };
    for t in Tracking::ALL {
        let mut exact_checks = 0;
        for seed in 0..6 {
            exact_checks += run(t, seed, steps, [2, 3, 5][seed as usize % 3]);
        }
        if t != Tracking::None {
            assert!(
                exact_checks > steps as u64,
                "{t}: only {exact_checks} exact checks"
            );
        }
    }
}
