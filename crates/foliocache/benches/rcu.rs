//! Read-side cost of one RCU read section, ours against crossbeam-epoch's pin, and the cost
//! of a grace period. The numbers are quoted in the `rcu` module docs.

use criterion::{criterion_group, criterion_main, Criterion};
use foliocache::mm::rcu::{Flavor, Rcu};
use std::hint::black_box;
use std::time::Duration;

fn read_side(c: &mut Criterion) {
    let mut g = c.benchmark_group("rcu_read_section/threads=1");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let memb = Rcu::with_flavor(Flavor::Membarrier);
    g.bench_function("rcu_membarrier", |b| {
        b.iter(|| {
            let guard = memb.read_lock();
            black_box(&guard);
        })
    });
    let fenced = Rcu::with_flavor(Flavor::Fence);
    g.bench_function("rcu_fence", |b| {
        b.iter(|| {
            let guard = fenced.read_lock();
            black_box(&guard);
        })
    });
    let _outer = memb.read_lock();
    g.bench_function("rcu_membarrier_nested", |b| {
        b.iter(|| {
            let guard = memb.read_lock();
            black_box(&guard);
        })
    });
    drop(_outer);
    g.bench_function("crossbeam_epoch_pin", |b| {
        b.iter(|| {
            let guard = crossbeam_epoch::pin();
            black_box(&guard);
        })
    });
    let collector = crossbeam_epoch::Collector::new();
    let handle = collector.register();
    g.bench_function("crossbeam_epoch_handle_pin", |b| {
        b.iter(|| {
            let guard = handle.pin();
            black_box(&guard);
        })
    });
    g.finish();
}

fn grace_period(c: &mut Criterion) {
    let mut g = c.benchmark_group("rcu_synchronize/readers=0");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for flavor in [Flavor::Membarrier, Flavor::Fence] {
        let rcu = Rcu::with_flavor(flavor);
        g.bench_function(format!("{flavor:?}").to_lowercase(), |b| {
            b.iter(|| rcu.synchronize())
        });
    }
    let collector = crossbeam_epoch::Collector::new();
    let handle = collector.register();
    g.bench_function("crossbeam_epoch_flush", |b| b.iter(|| handle.pin().flush()));
    g.finish();
}

criterion_group!(benches, read_side, grace_period);
criterion_main!(benches);
