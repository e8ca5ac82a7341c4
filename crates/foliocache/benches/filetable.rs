//! Cost of one file-table lookup per reference variant, one thread: the locked lookup of the
//! `hash` scenario (`with`: get, hash, bucket lock, find, unlock, put) and the lock-free one
//! of the cache's `read_at` (`read`: one RCU section, get, hash, published list, find, put).
//! The numbers are quoted in the `filetable` module docs.

use criterion::{criterion_group, criterion_main, Criterion};
use foliocache::mm::filetable::{FileTable, FileTableConfig, Sizing, TableRef};
use std::hint::black_box;
use std::time::Duration;

const IDS: u64 = 1024;

fn table(r: TableRef) -> FileTable<u64> {
    let t = FileTable::new(FileTableConfig::new(r, Sizing::Fixed(512)));
    for k in 0..IDS {
        t.insert(k, k ^ 0x55);
    }
    t
}

fn lookups(c: &mut Criterion) {
    for op in ["with", "read"] {
        let mut g = c.benchmark_group(format!("filetable/{op}/threads=1/ids={IDS}/buckets=512"));
        g.measurement_time(Duration::from_secs(2))
            .warm_up_time(Duration::from_millis(500));
        for r in TableRef::ALL {
            let t = table(r);
            let mut k = 0u64;
            g.bench_function(r.name(), |b| {
                b.iter(|| {
                    k = (k + 1) & (IDS - 1);
                    let v = if op == "with" {
                        t.with(black_box(k), |v| *v)
                    } else {
                        t.read(black_box(k), |v, _| *v)
                    };
                    assert_eq!(v, Some(k ^ 0x55));
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, lookups);
criterion_main!(benches);
