//! The page-cache index: inserting a readahead batch of 32 preallocated, locked order-0 folios
//! one by one (`add_folio`, one lock hold each: the kernel before seed 001) against one
//! `add_folio_range` (one lock hold: the seed), each into a fresh index, and a lookup hit
//! (RCU walk + `try_get` + re-check + put) per refcount strategy.
//!
//! Group names carry the parameters. Setup (allocating and locking the folios, creating the
//! index) and teardown are outside the timing.
//!
//! `cargo bench -p foliocache --bench index`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use foliocache::mm::folio::{Arena, ArenaConfig, FolioLocked, PAGE_SIZE};
use foliocache::mm::index::Index;
use foliocache::mm::refcount::RefStrategy;

const BATCH: u64 = 32;

fn arena(pages: usize, s: RefStrategy) -> Arc<Arena> {
    let mut c = ArenaConfig::new(pages * PAGE_SIZE, s);
    c.panic_on_bad_page = false;
    Arc::new(Arena::new(c).unwrap())
}

fn batch(arena: &Arena) -> Vec<FolioLocked<'_>> {
    (0..BATCH).map(|_| arena.alloc(0).unwrap().lock()).collect()
}

fn insert(c: &mut Criterion) {
    let a = arena(16384, RefStrategy::LockedBit);
    let mut g = c.benchmark_group(format!("index-insert/{BATCH}-pages/order-0"));
    g.throughput(criterion::Throughput::Elements(BATCH));
    g.bench_function("single", |b| {
        b.iter_batched(
            || (Index::new(a.clone()), batch(&a)),
            |(index, folios)| {
                for (k, f) in folios.iter().enumerate() {
                    index.add_folio(f, 64 + k as u64).unwrap();
                }
                (index, folios)
            },
            BatchSize::NumIterations(64),
        )
    });
    g.bench_function("batched", |b| {
        b.iter_batched(
            || (Index::new(a.clone()), batch(&a)),
            |(index, folios)| {
                let n = index.add_folio_range(64, 64 + BATCH, &folios).unwrap();
                assert_eq!(n, BATCH);
                (index, folios)
            },
            BatchSize::NumIterations(64),
        )
    });
    g.finish();
}

fn lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("index-lookup-hit/1024-pages/1-thread");
    for s in RefStrategy::ALL {
        let a = arena(2048, s);
        let index = Index::new(a.clone());
        for chunk in 0..1024 / BATCH {
            let folios = batch(&a);
            index
                .add_folio_range(chunk * BATCH, (chunk + 1) * BATCH, &folios)
                .unwrap();
        }
        let mut i = 0u64;
        g.bench_function(s.name(), |b| {
            b.iter(|| {
                i = (i + 7) & 1023;
                black_box(index.lookup(black_box(i)).unwrap());
            })
        });
    }
    g.finish();
}

criterion_group!(benches, insert, lookup);
criterion_main!(benches);
