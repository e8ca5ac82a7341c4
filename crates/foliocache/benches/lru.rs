//! The LRU add path (seed 004): a batch of 31 order-0 folios queued with `Lru::add`, a
//! share of them dead by the time the batch drains (their only other reference dropped),
//! drained; then the live ones dropped (their final put unlinks them, one lock hold for the
//! batch through the release hook). Vanilla links the dead ones and unlinks them again;
//! filtered frees them at the drain without the lruvec lock.
//!
//! Group names carry the parameters (dead share of the batch). One iteration is one batch:
//! allocation, queueing, drain and frees, the same work in both variants except the drain.
//!
//! `cargo bench -p foliocache --bench lru`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use foliocache::mm::folio::{Arena, ArenaConfig, FolioRef, PAGE_SIZE};
use foliocache::mm::lru::{DrainFilter, Lru, LruConfig, FOLIO_BATCH_SIZE};
use foliocache::mm::refcount::RefStrategy;

fn setup(filter: DrainFilter) -> (Box<Arena>, Lru) {
    let mut c = ArenaConfig::new(1024 * PAGE_SIZE, RefStrategy::LockedBit);
    c.panic_on_bad_page = false;
    let arena = Box::new(Arena::new(c).unwrap());
    let lru = Lru::new(&arena, LruConfig::DEFAULT.filter(filter).batch_slots(1));
    (arena, lru)
}

/// One batch: `dead` of the 31 folios lose their other reference before the drain.
fn one_batch(arena: &Arena, lru: &Lru, dead: usize) {
    let mut live: Vec<FolioRef<'_>> = Vec::with_capacity(FOLIO_BATCH_SIZE);
    for k in 0..FOLIO_BATCH_SIZE {
        let f = arena.alloc(0).unwrap();
        lru.add(arena, &f);
        if k >= dead {
            live.push(f);
        }
    }
    // The 31st add drained the batch; now the live ones go too (truncation-like final puts).
    black_box(&live);
    drop(live);
}

fn add_drain(c: &mut Criterion) {
    for dead in [0usize, 2, 8, 31] {
        let mut g = c.benchmark_group(format!("lru-add-drain/31-folios/{dead}-dead"));
        g.throughput(Throughput::Elements(FOLIO_BATCH_SIZE as u64));
        for filter in [DrainFilter::Vanilla, DrainFilter::Filtered] {
            let (arena, lru) = setup(filter);
            g.bench_function(filter.name(), |b| b.iter(|| one_batch(&arena, &lru, dead)));
        }
        g.finish();
    }
}

criterion_group!(benches, add_drain);
criterion_main!(benches);
