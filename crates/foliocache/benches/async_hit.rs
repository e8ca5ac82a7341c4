//! The cost of a read that hits the cache, synchronous against async: `CachedFile::read_at`
//! and `AsyncFile::read_at` polled once (a ready future, a no-op waker), 4 KiB at random
//! pages of a file cached whole, the two interleaved by criterion in one process. No runtime:
//! the future alone.
//!
//! `cargo bench -p foliocache --bench async_hit`

use std::future::Future;
use std::hint::black_box;
use std::task::{Context, Poll, Waker};

use criterion::{criterion_group, criterion_main, Criterion};
use foliocache::{AsyncFile, Config, FolioCache};

const PAGES: u64 = 4096;

fn hits(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hot");
    std::fs::write(&path, vec![3u8; (PAGES * 4096) as usize]).unwrap();
    let cache = FolioCache::new(Config::block_cache(32 << 20)).unwrap();
    let f = AsyncFile::new(cache.open(&path).unwrap());
    f.file().readahead(0..PAGES * 4096).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut buf = vec![0u8; 4096];
    let mut g = c.benchmark_group("hit-4k");
    let mut x = 1u64;
    let mut next = move || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        ((x >> 33) % PAGES) * 4096
    };
    g.bench_function("sync-read_at", |b| {
        b.iter(|| black_box(f.file().read_at(&mut buf, next()).unwrap()))
    });
    g.bench_function("async-read_at", |b| {
        b.iter(|| {
            let mut fut = std::pin::pin!(f.read_at(&mut buf, next()));
            match fut.as_mut().poll(&mut cx) {
                Poll::Ready(r) => black_box(r.unwrap()),
                Poll::Pending => unreachable!("a hit is ready at its first poll"),
            }
        })
    });
    g.finish();
}

criterion_group!(benches, hits);
criterion_main!(benches);
