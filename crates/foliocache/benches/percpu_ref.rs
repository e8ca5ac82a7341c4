//! Cost of one get+put pair on each reference flavour, one thread and two threads hammering
//! the same reference. The numbers are quoted in the `percpu_ref` module docs.

use criterion::{criterion_group, criterion_main, Criterion};
use foliocache::mm::percpu_ref::{PercpuRef, RefVariant};
use foliocache::mm::rcu::Rcu;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The alternative per-CPU design: counters sharded by the current CPU, atomic RMW because a
/// thread may migrate in the middle.
struct Sharded {
    shards: Vec<crossbeam_utils::CachePadded<AtomicU64>>,
}

impl Sharded {
    fn new() -> Self {
        Self {
            shards: (0..foliocache::mm::sync::num_cpus())
                .map(|_| Default::default())
                .collect(),
        }
    }
    #[inline]
    fn add(&self, d: u64) {
        let cpu = foliocache::mm::sync::current_cpu() % self.shards.len();
        self.shards[cpu].fetch_add(d, Ordering::Relaxed);
    }
}

trait Flavour: Send + Sync + 'static {
    fn get_put(&self);
}

struct Ref(PercpuRef);
impl Flavour for Ref {
    #[inline]
    fn get_put(&self) {
        assert!(self.0.tryget_live());
        self.0.put();
    }
}
impl Flavour for Sharded {
    #[inline]
    fn get_put(&self) {
        self.add(1);
        self.add(u64::MAX);
    }
}
struct Shared(crossbeam_utils::CachePadded<AtomicU64>);
impl Flavour for Shared {
    #[inline]
    fn get_put(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
        self.0.fetch_sub(1, Ordering::Release);
    }
}

fn flavours() -> Vec<(&'static str, Arc<dyn Flavour>)> {
    let rcu = Arc::new(Rcu::new());
    vec![
        (
            "percpu",
            Arc::new(Ref(PercpuRef::new(rcu.clone(), RefVariant::Percpu))),
        ),
        (
            "percpu_fast",
            Arc::new(Ref(PercpuRef::new(rcu, RefVariant::PercpuFast))),
        ),
        ("sharded_atomic", Arc::new(Sharded::new())),
        (
            "shared_atomic",
            Arc::new(Shared(crossbeam_utils::CachePadded::new(AtomicU64::new(1)))),
        ),
    ]
}

fn get_put(c: &mut Criterion) {
    for threads in [1usize, 2] {
        let mut g = c.benchmark_group(format!("percpu_ref_get_put/threads={threads}"));
        g.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        for (name, f) in flavours() {
            // threads - 1 background threads hammer the same reference while we measure.
            let stop = Arc::new(AtomicBool::new(false));
            let bg: Vec<_> = (1..threads)
                .map(|_| {
                    let (f, stop) = (f.clone(), stop.clone());
                    std::thread::spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            for _ in 0..64 {
                                f.get_put();
                            }
                        }
                    })
                })
                .collect();
            g.bench_function(name, |b| b.iter(|| f.get_put()));
            stop.store(true, Ordering::Relaxed);
            for t in bg {
                t.join().unwrap();
            }
        }
        g.finish();
    }
}

criterion_group!(benches, get_put);
criterion_main!(benches);
