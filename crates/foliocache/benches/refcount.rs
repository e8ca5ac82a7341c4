//! One `try_get` + `put` pair on one shared folio count, per strategy, against a plain
//! `fetch_add` + `fetch_sub` pair (the floor: what any counter costs), with 1 and 2 threads.
//!
//! Group names carry the thread count; with 2 threads each reported time is the wall time for
//! *each* thread to do one pair while the other does the same (so pairs/s = 2 / time).
//! `*-dyn` runs the `RefCount` methods with the strategy passed at run time, the way a cache
//! calls them; the others are the monomorphic [`RefOps`] functions.
//!
//! `cargo bench -p foliocache --bench refcount`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use foliocache::mm::refcount::{CasLoop, LockedBit, Optimistic, RefCount, RefOps, RefStrategy};
use foliocache::mm::sync::{AtomicU32, CachePadded, Ordering};

/// Something that does one get+put pair on a shared counter.
trait Pair: Sync {
    fn pair(&self);
}

struct Plain(CachePadded<AtomicU32>);

impl Pair for Plain {
    #[inline]
    fn pair(&self) {
        self.0.fetch_add(1, Ordering::Acquire);
        black_box(self.0.fetch_sub(1, Ordering::Release));
    }
}

struct Mono<T: RefOps>(CachePadded<RefCount>, std::marker::PhantomData<T>);

impl<T: RefOps> Pair for Mono<T> {
    #[inline]
    fn pair(&self) {
        if black_box(T::try_get(&self.0)) {
            black_box(T::put(&self.0));
        }
    }
}

struct Dyn(CachePadded<RefCount>, RefStrategy);

impl Pair for Dyn {
    #[inline]
    fn pair(&self) {
        let s = black_box(self.1);
        if self.0.try_get(s) {
            black_box(self.0.put(s));
        }
    }
}

fn held(s: RefStrategy) -> CachePadded<RefCount> {
    // The page cache's own reference: the counter never reaches 0 during the bench.
    let rc = CachePadded::new(RefCount::frozen());
    rc.init(s, 1);
    rc
}

fn run<P: Pair>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, threads: usize, p: &P) {
    g.bench_function(name, |b| {
        if threads == 1 {
            b.iter(|| p.pair());
        } else {
            b.iter_custom(|iters| {
                let barrier = std::sync::Barrier::new(threads);
                std::thread::scope(|sc| {
                    let hs: Vec<_> = (0..threads)
                        .map(|t| {
                            let barrier = &barrier;
                            sc.spawn(move || {
                                foliocache::mm::sync::pin_to_cpu(t);
                                barrier.wait();
                                let start = Instant::now();
                                for _ in 0..iters {
                                    p.pair();
                                }
                                start.elapsed()
                            })
                        })
                        .collect();
                    hs.into_iter()
                        .map(|h| h.join().unwrap())
                        .max()
                        .unwrap_or_default()
                })
            })
        }
    });
}

fn get_put(c: &mut Criterion) {
    for threads in [1, 2] {
        let mut g = c.benchmark_group(format!("refcount_get_put/threads={threads}"));
        g.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        run(
            &mut g,
            "fetch-add",
            threads,
            &Plain(CachePadded::new(AtomicU32::new(1))),
        );
        run(
            &mut g,
            "cas-loop",
            threads,
            &Mono::<CasLoop>(held(RefStrategy::CasLoop), Default::default()),
        );
        run(
            &mut g,
            "optimistic",
            threads,
            &Mono::<Optimistic>(held(RefStrategy::Optimistic), Default::default()),
        );
        run(
            &mut g,
            "locked-bit",
            threads,
            &Mono::<LockedBit>(held(RefStrategy::LockedBit), Default::default()),
        );
        for s in RefStrategy::ALL {
            run(&mut g, &format!("{s}-dyn"), threads, &Dyn(held(s), s));
        }
        g.finish();
    }
}

criterion_group!(benches, get_put);
criterion_main!(benches);
