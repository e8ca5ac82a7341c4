//! Cost of one cache hit, one thread: a 4 KiB block read at a random block of a 64 MiB file
//! that is wholly cached (the budget holds it), the way a storage engine's block cache hits.
//! Variants: `read_at` (lookup + copy into the caller's buffer), `get_folio` (lookup + pinned
//! guard, first and last word read, no copy) and, for scale, the kernel's `pread` of the same
//! block (its page cache holds the file too). Random blocks, so the index nodes, folio
//! headers and data come from the last-level cache or memory, as in the `peers` lab scenario.
//!
//! The second group is the `pread` lab scenario's hit (seed 000): 64 bytes at offset 0 of one
//! cached page, over and over, so everything it touches stays in the L1 cache and what is
//! left is the instructions of the hit itself: `read_at` and `get_folio` under the
//! `cas-loop` and `locked-bit` refcounts (the only difference between their caches).
//!
//! The third is reclaim's cost per evicted page under each replacement policy: a
//! `Config::block_cache` of 1,024 pages read in a cycle over a 4,096-page in-memory file, so
//! every read misses, evicts a page (reclaim runs once per 32) and replaces a shadow older
//! than two budgets: the same work under both policies but for their reclaim and refault
//! steps.

use std::hint::black_box;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use foliocache::backing::MemBacking;
use foliocache::mm::lru::LruPolicy;
use foliocache::mm::refcount::RefStrategy;
use foliocache::mm::Experiment;
use foliocache::{Config, FolioCache};
use rand::{Rng, SeedableRng};

const BLOCK: usize = 4096;
const FILE_BLOCKS: usize = 16384;

fn hits(c: &mut Criterion) {
    let mut file = tempfile::NamedTempFile::new().expect("temporary file");
    let chunk: Vec<u8> = (0..BLOCK).map(|i| i as u8).collect();
    for _ in 0..FILE_BLOCKS {
        file.write_all(&chunk).unwrap();
    }
    file.flush().unwrap();
    let cache = FolioCache::new(Config::new((FILE_BLOCKS + 1024) * BLOCK).readahead_pages(0))
        .expect("cache");
    let f = cache.open(file.path()).expect("open");
    #[repr(C, align(4096))]
    struct Page([u8; BLOCK]);
    let mut page = Box::new(Page([0; BLOCK]));
    let buf = &mut page.0;
    for b in 0..FILE_BLOCKS {
        f.read_exact_at(buf, (b * BLOCK) as u64).unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let trace: Vec<u64> = (0..1 << 16)
        .map(|_| rng.random_range(0..FILE_BLOCKS as u64))
        .collect();
    let mut g = c.benchmark_group(format!(
        "cache/hit/threads=1/block=4KiB/file={}MiB",
        (FILE_BLOCKS * BLOCK) >> 20
    ));
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    let mut i = 0usize;
    g.bench_function("read_at", |b| {
        b.iter(|| {
            i = (i + 1) & (trace.len() - 1);
            let n = f.read_at(buf, trace[i] * BLOCK as u64).unwrap();
            black_box(&buf[..n]);
        })
    });
    g.bench_function("get_folio", |b| {
        b.iter(|| {
            i = (i + 1) & (trace.len() - 1);
            let p = f.get_folio(trace[i]).unwrap();
            black_box((p[0], p[BLOCK - 1]));
        })
    });
    let raw = std::fs::File::open(file.path()).unwrap();
    g.bench_function("kernel-pread", |b| {
        b.iter(|| {
            i = (i + 1) & (trace.len() - 1);
            let n = raw.read_at(buf, trace[i] * BLOCK as u64).unwrap();
            black_box(&buf[..n]);
        })
    });
    g.finish();
    assert_eq!(
        cache.stats().misses,
        FILE_BLOCKS as u64,
        "the measured reads all hit"
    );
}

fn hot_hit(c: &mut Criterion) {
    let mut file = tempfile::NamedTempFile::new().expect("temporary file");
    file.write_all(&[7u8; BLOCK]).unwrap();
    file.flush().unwrap();
    let mut g = c.benchmark_group("cache/hot-hit/threads=1/read=64B");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    for s in [RefStrategy::CasLoop, RefStrategy::LockedBit] {
        let cache = FolioCache::new(Config::new(1 << 20).experiment(Experiment::new().strategy(s)))
            .expect("cache");
        let f = cache.open(file.path()).expect("open");
        let mut buf = [0u8; 64];
        f.read_exact_at(&mut buf, 0).unwrap();
        g.bench_function(format!("read_at/{s}"), |b| {
            b.iter(|| black_box(f.read_at(black_box(&mut buf), black_box(0)).unwrap()))
        });
        g.bench_function(format!("get_folio/{s}"), |b| {
            b.iter(|| black_box(f.get_folio(black_box(0)).unwrap()[0]))
        });
        assert_eq!(cache.stats().misses, 1, "the measured reads all hit");
    }
    g.finish();
}

/// Issue 25's update against a read hit: a buffer manager's latched update of 100 bytes of a
/// cached 4 KiB page (`get_folio_mut_in_place`, the change, the commit; and the copying
/// `get_folio_mut` for scale) against a zero-copy `get_folio` hit, on 256 resident pages of a
/// `Config::buffer_pool` cache (the lab's `bufmgr` resident rows, here under criterion).
fn latched_update(c: &mut Criterion) {
    const PAGES: u64 = 256;
    let dir = tempfile::tempdir().unwrap();
    let cache = FolioCache::new(Config::buffer_pool(64 << 20)).expect("cache");
    let f = cache
        .open_with(
            dir.path().join("pages"),
            foliocache::OpenOptions::new().write(true).create(true),
        )
        .expect("open");
    f.write_all_at(&vec![1u8; PAGES as usize * BLOCK], 0)
        .unwrap();
    cache.lru_add_drain_all();
    let mut g = c.benchmark_group("cache/latch/threads=1/change=100B");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    let change = [7u8; 100];
    let mut n = 0u64;
    let mut next = move || {
        n += 1;
        n.wrapping_mul(0x9e37_79b9) % PAGES
    };
    g.bench_function("get_folio", |b| {
        b.iter(|| {
            let p = f.get_folio(next()).unwrap();
            black_box(p[100]);
        })
    });
    g.bench_function("get_folio_mut_in_place", |b| {
        b.iter(|| {
            let mut p = f.get_folio_mut_in_place(next()).unwrap();
            p[100..200].copy_from_slice(&change);
        })
    });
    g.bench_function("get_folio_mut", |b| {
        b.iter(|| {
            let mut p = f.get_folio_mut(next()).unwrap();
            p[100..200].copy_from_slice(&change);
        })
    });
    g.finish();
    f.sync_data().unwrap();
}

fn miss_reclaim(c: &mut Criterion) {
    const BUDGET: usize = 1024;
    const FILE: usize = 4 * BUDGET;
    let data = vec![7u8; FILE * BLOCK];
    let mut g = c.benchmark_group("cache/miss-reclaim/threads=1/budget=1024/file=4096");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for policy in LruPolicy::ALL {
        let cache =
            FolioCache::new(Config::block_cache(BUDGET * BLOCK).lru_policy(policy)).expect("cache");
        let f = cache
            .open_backing("cycle", MemBacking(data.clone()))
            .expect("open");
        let mut buf = vec![0u8; BLOCK];
        let mut i = 0usize;
        g.bench_function(policy.name(), |b| {
            b.iter(|| {
                i = (i + 1) % FILE;
                f.read_exact_at(&mut buf, (i * BLOCK) as u64).unwrap();
                black_box(&buf);
            })
        });
        let s = cache.stats();
        assert!(s.misses * 10 >= (s.hits + s.misses) * 9, "{s:?}");
    }
    g.finish();
}

criterion_group!(benches, hits, hot_hit, latched_update, miss_reclaim);
criterion_main!(benches);
