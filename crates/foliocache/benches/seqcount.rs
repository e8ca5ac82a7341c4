//! The cost of one rmap batch on one folio, single-threaded and uncontended: a seqcount write
//! section of three words with the exclusive (plain-store) path and with the shared (atomic)
//! path, and a whole `add` + `remove` pair of `FolioRmap` per tracking strategy and folio
//! order (the per-page cost of `pte-dontneed` and of every COW copy in the `cow` scenario).
//! The exclusive-path question of the seed ("does it pay off on this CPU?") is answered by the
//! first group.
//!
//! `cargo bench -p foliocache --bench seqcount`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use foliocache::mm::rmap::id::RmapId;
use foliocache::mm::rmap::{FolioRmap, Tracking};
use foliocache::mm::seqcount::SeqCount;
use foliocache::mm::sync::AtomicU64;

fn sections(c: &mut Criterion) {
    let mut g = c.benchmark_group("seqcount-section/3-words");
    let seq = SeqCount::new();
    let words = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
    for (name, exclusive) in [("exclusive", true), ("shared", false)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let s = seq.write_begin(black_box(exclusive));
                for w in &words {
                    s.add(w, black_box(3));
                }
            })
        });
    }
    g.bench_function("read", |b| {
        b.iter(|| {
            seq.read(|| {
                words
                    .iter()
                    .map(|w| w.load(std::sync::atomic::Ordering::Relaxed))
                    .sum::<u64>()
            })
        })
    });
    g.finish();
}

fn rmap_batches(c: &mut Criterion) {
    let me = RmapId::new(0x12345);
    for order in [0u32, 4, 9] {
        let mut g = c.benchmark_group(format!("rmap-add-remove/order-{order}"));
        for t in Tracking::ALL {
            let f = FolioRmap::new();
            f.add(t, order, &me, 1);
            g.bench_function(t.name(), |b| {
                b.iter(|| {
                    f.add(t, order, &me, black_box(1));
                    f.remove(t, order, &me, black_box(1));
                })
            });
            f.remove(t, order, &me, 1);
        }
        g.finish();
    }
    let mut g = c.benchmark_group("mapped-exclusively/order-9");
    for t in Tracking::ALL {
        let f = FolioRmap::new();
        f.add(t, 9, &me, 512);
        g.bench_function(t.name(), |b| {
            b.iter(|| f.mapped_exclusively(t, 9, black_box(&me)))
        });
        f.remove(t, 9, &me, 512);
    }
    g.finish();
}

criterion_group!(benches, sections, rmap_batches);
criterion_main!(benches);
