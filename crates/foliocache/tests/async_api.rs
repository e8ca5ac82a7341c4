//! The async API ([`AsyncFile`]): every call under tokio's current-thread and multi-thread
//! runtimes and under a minimal hand-written executor; an executor thread that keeps serving
//! hits while another task's miss waits at a gate (and the synchronous call in an async fn
//! that fails that); futures dropped at every await point, with read errors injected, and the
//! cache's accounting back at its baseline after each round; dropped sync errors reported by
//! the next sync.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use foliocache::backing::{Backing, FaultyBacking, MemBacking};
use foliocache::{AsyncFile, CacheError, Config, FolioCache, OpenOptions, PAGE_SIZE};

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) ^ (i >> 12)) as u8)
        .collect()
}

/// Every page freed, the accounting recomputed: the baseline of an idle cache (no task or
/// thread left in the folio wait table: `validate` checks that too).
fn assert_baseline(c: &FolioCache) {
    c.drop_caches();
    let st = c.validate().unwrap();
    let s = c.stats();
    assert_eq!(s.allocated_pages, 0, "{s:?}");
    assert_eq!(s.pinned_pages, 0, "{s:?}");
    assert_eq!(
        st.free_pages, s.budget_pages,
        "free pages are the budget's: {st:?}"
    );
}

/// The smallest executor: polls the future on this thread, parks between polls.
fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// A waker that counts its wakes.
struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Every async call once, checked against the file's bytes.
async fn every_call(cache: &FolioCache, dir: &Path) -> Result<(), CacheError> {
    let path = dir.join("data");
    let data = pattern(1 << 20, 1);
    std::fs::write(&path, &data).unwrap();
    let f = AsyncFile::open(cache, &path).await?;
    assert_eq!(f.len(), data.len() as u64);

    // A miss, then the same page as a hit.
    let mut buf = vec![0u8; 4096];
    assert_eq!(f.read_at(&mut buf, 8192).await?, 4096);
    assert_eq!(buf, data[8192..12288]);
    let misses = cache.stats().misses;
    assert_eq!(f.read_at(&mut buf, 8192).await?, 4096);
    assert_eq!(
        cache.stats().misses,
        misses,
        "a cached page read again missed"
    );

    // Unaligned across pages; at and past the end.
    let mut odd = vec![0u8; 10_000];
    f.read_exact_at(&mut odd, 5000).await?;
    assert_eq!(odd, data[5000..15_000]);
    let mut tail = vec![0u8; 100];
    assert_eq!(f.read_at(&mut tail, data.len() as u64 - 40).await?, 40);
    assert_eq!(tail[..40], data[data.len() - 40..]);
    assert_eq!(f.read_at(&mut tail, data.len() as u64).await?, 0);
    match f.read_exact_at(&mut tail, data.len() as u64 - 40).await {
        Err(CacheError::UnexpectedEof { .. }) => {}
        other => panic!("read_exact_at past the end: {other:?}"),
    }
    // A read larger than the hit path's limit.
    let mut big = vec![0u8; 300_000];
    f.read_exact_at(&mut big, 600_001).await?;
    assert_eq!(big, data[600_001..900_001]);

    // Many ranges at once.
    let (mut a, mut b, mut c) = (vec![0u8; 4096], vec![0u8; 100], vec![0u8; 20_000]);
    f.read_ranges(&mut [
        (300_000, &mut a[..]),
        (12, &mut b[..]),
        (450_000, &mut c[..]),
    ])
    .await?;
    assert_eq!(a, data[300_000..304_096]);
    assert_eq!(b, data[12..112]);
    assert_eq!(c, data[450_000..470_000]);

    // Prefetch, then read what it fetched.
    let fetch = 512 << 10..768 << 10;
    f.prefetch(std::slice::from_ref(&fetch))?;
    let mut p = vec![0u8; 8192];
    f.read_exact_at(&mut p, 700_000).await?;
    assert_eq!(p, data[700_000..708_192]);

    // Pinned guards, taken after an awaited read.
    let page = f.get_folio(100).await?;
    let at = page.offset() as usize;
    assert_eq!(page.bytes(), &data[at..at + page.bytes().len()]);
    drop(page);
    let r = f.get_range(200_000, 30_000).await?;
    let mut copy = vec![0u8; 30_000];
    r.copy_to(&mut copy);
    assert_eq!(copy, data[200_000..230_000]);
    drop(r);
    match f.get_range(data.len() as u64 - 10, 20).await {
        Err(CacheError::UnexpectedEof { .. }) => {}
        other => panic!("get_range past the end: {:?}", other.map(|r| r.len())),
    }

    // Writes, appends, syncs, set_len.
    let wpath = dir.join("written");
    let w =
        AsyncFile::open_with(cache, &wpath, OpenOptions::new().write(true).create(true)).await?;
    let page = pattern(3 * PAGE_SIZE + 100, 2);
    w.write_all_at(&page, 0).await?;
    assert_eq!(w.write_at(b"hello", 10).await?, 5);
    w.sync_data().await?;
    let log = AsyncFile::open_with(cache, &wpath, OpenOptions::new().append(true)).await?;
    let end = log.append(b"record").await?;
    assert_eq!(end, page.len() as u64);
    log.sync_range(0..end + 6).await?;
    w.set_len(5000).await?;
    w.sync_all().await?;
    let mut expect = page.clone();
    expect[10..15].copy_from_slice(b"hello");
    expect.truncate(5000);
    assert_eq!(
        std::fs::read(&wpath).unwrap(),
        expect,
        "the file on disk after the syncs"
    );
    let mut back = vec![0u8; 6000];
    assert_eq!(w.read_at(&mut back, 0).await?, 5000);
    assert_eq!(back[..5000], expect[..]);

    // A snapshot, then writes and a truncation through the async calls: it keeps its moment.
    let snap = w.snapshot().await?;
    w.write_all_at(&[0xee; 100], 0).await?;
    w.set_len(10).await?;
    let mut old = vec![0u8; 5000];
    snap.read_exact_at(&mut old, 0)?;
    assert_eq!(old, expect);
    drop(snap);
    w.sync_data().await?;

    // A read-only handle cannot write; the error comes through the future.
    match f.write_at(b"x", 0).await {
        Err(CacheError::NotWritable { .. }) => {}
        other => panic!("write through a read-only handle: {other:?}"),
    }
    match AsyncFile::open(cache, dir.join("missing")).await {
        Err(CacheError::Open { .. }) => {}
        other => panic!("opening a missing file: {other:?}"),
    }
    Ok(())
}

fn cache() -> FolioCache {
    FolioCache::new(Config::new(8 << 20)).unwrap()
}

#[test]
fn every_call_under_tokio_current_thread() {
    let dir = tempfile::tempdir().unwrap();
    let c = cache();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(every_call(&c, dir.path())).unwrap();
    assert_baseline(&c);
}

#[test]
fn every_call_under_tokio_multi_thread() {
    let dir = tempfile::tempdir().unwrap();
    let c = cache();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    // Spawned, so the calls run (and move between) the runtime's worker threads.
    let (c2, d) = (c.clone(), dir.path().to_path_buf());
    rt.block_on(async move { tokio::spawn(async move { every_call(&c2, &d).await }).await })
        .unwrap()
        .unwrap();
    drop(rt);
    assert_baseline(&c);
}

#[test]
fn every_call_under_a_minimal_executor() {
    let dir = tempfile::tempdir().unwrap();
    let c = cache();
    block_on(every_call(&c, dir.path())).unwrap();
    assert_baseline(&c);
}

/// Many tasks on one executor thread reading at random: every byte right, and the misses
/// read while other tasks went on.
#[test]
fn many_tasks_on_one_thread_read_the_right_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let data = Arc::new(pattern(4 << 20, 3));
    std::fs::write(&path, &*data).unwrap();
    let c = FolioCache::new(Config::new(1 << 20)).unwrap(); // a quarter of the file
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let f = rt.block_on(AsyncFile::open(&c, &path)).unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..64u64 {
            let (f, data) = (f.clone(), data.clone());
            tasks.push(tokio::spawn(async move {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut buf = vec![0u8; 4096];
                for _ in 0..50 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let off = (x % (data.len() as u64 - 4096)) & !511;
                    f.read_exact_at(&mut buf, off).await.unwrap();
                    assert_eq!(buf, data[off as usize..off as usize + 4096], "at {off}");
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    drop(f);
    assert_baseline(&c);
}

/// A backing whose reads wait until the gate opens.
#[derive(Debug)]
struct Gated {
    data: Vec<u8>,
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl Backing for Gated {
    fn size(&self) -> io::Result<u64> {
        Ok(self.data.len() as u64)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let (open, cond) = &*self.gate;
        drop(cond.wait_while(open.lock().unwrap(), |o| !*o).unwrap());
        let at = (offset as usize).min(self.data.len());
        let n = buf.len().min(self.data.len() - at);
        buf[..n].copy_from_slice(&self.data[at..at + n]);
        Ok(n)
    }
}

/// One current-thread executor: task A misses on a file whose reads wait at a gate, task B
/// reads 1,000 cached pages. A thread opens the gate when B is done, or after 500 ms. With
/// the async API B finishes while A's miss waits; with the synchronous call inside an
/// async fn, A blocks the executor thread, and B can only finish after the gate opened.
fn hits_while_a_miss_waits(asynchronous: bool) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let hot_path = dir.path().join("hot");
    let hot_data = pattern(64 * PAGE_SIZE, 4);
    std::fs::write(&hot_path, &hot_data).unwrap();
    let c = cache();
    let hot = c.open(&hot_path).unwrap();
    hot.readahead(0..hot_data.len() as u64).unwrap();
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let gated = c
        .open_backing(
            "gated",
            Gated {
                data: pattern(16 * PAGE_SIZE, 5),
                gate: gate.clone(),
            },
        )
        .unwrap();
    let b_done = Arc::new(AtomicBool::new(false));
    let opener = {
        let (gate, b_done) = (gate.clone(), b_done.clone());
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while !b_done.load(Ordering::SeqCst) && start.elapsed() < Duration::from_millis(500) {
                std::thread::sleep(Duration::from_millis(1));
            }
            *gate.0.lock().unwrap() = true;
            gate.1.notify_all();
        })
    };
    let (hot, gated) = (AsyncFile::new(hot), AsyncFile::new(gated));
    let gate_seen = gate.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let b_before_gate = rt.block_on(async move {
        let a = {
            let gated = gated.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = if asynchronous {
                    gated.read_at(&mut buf, 4096).await.unwrap()
                } else {
                    gated.file().read_at(&mut buf, 4096).unwrap()
                };
                assert_eq!(n, 4096);
            })
        };
        let b = {
            let b_done = b_done.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                for i in 0..1000u64 {
                    let off = (i % 64) * PAGE_SIZE as u64;
                    hot.read_exact_at(&mut buf, off).await.unwrap();
                }
                let before = !*gate_seen.0.lock().unwrap();
                b_done.store(true, Ordering::SeqCst);
                before
            })
        };
        let before = b.await.unwrap();
        a.await.unwrap();
        before
    });
    opener.join().unwrap();
    drop(rt);
    assert_baseline(&c);
    b_before_gate
}

#[test]
fn one_executor_thread_serves_hits_while_a_miss_waits() {
    assert!(
        hits_while_a_miss_waits(true),
        "the hits waited for another task's miss: the executor thread was blocked"
    );
}

#[test]
fn the_synchronous_call_in_an_async_fn_blocks_the_executor() {
    // The check above bites: the same test with the blocking call fails it.
    assert!(!hits_while_a_miss_waits(false));
}

/// Futures dropped at every await point, with read errors injected: after each round the
/// cache validates (no task left in the wait table, no folio left locked) and the accounting
/// returns to its baseline.
#[test]
fn dropped_futures_leave_the_cache_consistent() {
    let data = pattern(256 * PAGE_SIZE, 6);
    let c = FolioCache::new(Config::new(1 << 20)).unwrap();
    let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
    let mut cx = Context::from_waker(&waker);
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut rand = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut errors = 0;
    for round in 0..40 {
        let backing = FaultyBacking::new(MemBacking(data.clone()));
        if round % 2 == 1 {
            backing.fail_at(rand(data.len() as u64));
        }
        let f = AsyncFile::new(c.open_backing(format!("f{round}"), backing).unwrap());
        {
            let mut bufs: Vec<Vec<u8>> = (0..16).map(|_| vec![0u8; 4096 + 100]).collect();
            let mut futs: Vec<_> = bufs
                .iter_mut()
                .map(|b| {
                    let off = rand(data.len() as u64 - 5000);
                    Box::pin(f.read_at(b, off))
                })
                .collect();
            // Poll each a number of times (0 to 3), then drop them in a random order,
            // finished or not.
            for fut in futs.iter_mut() {
                for _ in 0..rand(4) {
                    if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                        if r.is_err() {
                            errors += 1;
                        }
                        break;
                    }
                    std::thread::yield_now();
                }
            }
            while !futs.is_empty() {
                let i = rand(futs.len() as u64) as usize;
                drop(futs.swap_remove(i));
            }
        }
        // Some sync reads of the same pages: whatever the dropped futures left is usable.
        let mut buf = vec![0u8; 4096];
        for _ in 0..8 {
            let off = rand(data.len() as u64 - 4096);
            match f.file().read_at(&mut buf, off) {
                Ok(n) => assert_eq!(buf[..n], data[off as usize..off as usize + n]),
                Err(CacheError::Io { .. }) => errors += 1,
                Err(e) => panic!("{e}"),
            }
        }
        drop(f);
        assert_baseline(&c);
    }
    assert!(errors > 0, "the injected read errors were never seen");
}

/// A write or sync future dropped after its first poll still runs to its end; one dropped
/// before it did nothing.
#[test]
fn dropped_writes_happen_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let c = cache();
    let path = dir.path().join("w");
    let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
    let mut cx = Context::from_waker(&waker);
    let f = block_on(AsyncFile::open_with(
        &c,
        &path,
        OpenOptions::new().write(true).create(true),
    ))
    .unwrap();
    let big = pattern(64 * PAGE_SIZE, 7);
    // Never polled: nothing written.
    drop(f.write_all_at(&big, 0));
    assert_eq!(f.len(), 0);
    // Polled once, then dropped: written whole.
    {
        let mut w = Box::pin(f.write_all_at(&big, 0));
        let _ = w.as_mut().poll(&mut cx);
    }
    // The write runs on a worker: a sync (queued after it) sees it done.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while f.len() < big.len() as u64 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    block_on(f.sync_data()).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), big);
    drop(f);
    assert_baseline(&c);
}

/// A sync whose future is dropped after its first poll fails on its worker: the handle's next
/// sync reports that error, once.
#[test]
fn a_dropped_sync_error_is_reported_by_the_next_sync() {
    let c = cache();
    let backing = Arc::new(FaultyBacking::new(MemBacking(vec![0u8; 8 * PAGE_SIZE])));
    let f = AsyncFile::new(c.open_backing("s", backing.clone()).unwrap());
    let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
    let mut cx = Context::from_waker(&waker);
    let mut dropped_while_running = 0;
    for round in 0..20u8 {
        block_on(f.write_all_at(&[round; 100], 0)).unwrap();
        backing.fail_next_syncs(1);
        {
            let mut s = Box::pin(f.sync_data());
            if let Poll::Ready(r) = s.as_mut().poll(&mut cx) {
                // The worker was faster than the first poll: the caller got the error.
                assert!(r.is_err(), "a failed sync returned {r:?}");
                continue;
            }
            dropped_while_running += 1;
        }
        let next = block_on(f.sync_data());
        assert!(
            next.is_err(),
            "round {round}: the dropped sync's error was lost: {next:?}"
        );
        block_on(f.sync_data()).unwrap();
    }
    assert!(
        dropped_while_running > 0,
        "no sync was dropped while it ran"
    );
    drop(f);
    assert_baseline(&c);
}

/// Futures and guards can cross threads: a guard held across an await on a multi-thread
/// runtime.
#[test]
fn futures_and_guards_are_send() {
    fn send<T: Send>(_: &T) {}
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    let data = pattern(16 * PAGE_SIZE, 8);
    std::fs::write(&path, &data).unwrap();
    let c = cache();
    let f = AsyncFile::new(c.open(&path).unwrap());
    let mut buf = [0u8; 10];
    send(&f.read_at(&mut buf, 0));
    send(&f.get_range(0, 10));
    send(&f.write_at(b"", 0));
    send(&f.sync_data());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sum = rt
        .block_on(rt.spawn(async move {
            let g = f.get_range(4096, 8192).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            let mut v = vec![0u8; 8192];
            g.copy_to(&mut v);
            drop(g);
            v.iter().map(|&b| b as u64).sum::<u64>()
        }))
        .unwrap();
    assert_eq!(
        sum,
        data[4096..12288].iter().map(|&b| b as u64).sum::<u64>()
    );
    drop(rt);
    assert_baseline(&c);
}

/// A write into cached pages is done at its first poll (`IOCB_NOWAIT`: no worker, no
/// context switch); one that needs a page read goes to a worker; both land.
#[test]
fn a_write_into_cached_pages_completes_at_its_first_poll() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w");
    let mut data = pattern(64 * PAGE_SIZE, 9);
    std::fs::write(&path, &data).unwrap();
    let c = cache();
    let f = block_on(AsyncFile::open_with(
        &c,
        &path,
        OpenOptions::new().write(true),
    ))
    .unwrap();
    // Pages in folios of their own: the first write into a large folio splits it (on the
    // worker), as the synchronous write does.
    f.file().set_large_folios(false);
    f.file().readahead(0..16 * PAGE_SIZE as u64).unwrap();
    // A folio still in a per-CPU LRU batch has the batch's reference: a write into it copies
    // (on the worker). Drain the batches so that every page is held by its index alone.
    c.lru_add_drain_all();
    let mut cx = Context::from_waker(Waker::noop());
    let before = c.stats().writes_in_place;
    for i in 0..100u64 {
        let at = (i * 997) % (16 * PAGE_SIZE as u64 - 200);
        let bytes = [i as u8; 150];
        let mut w = pin!(f.write_all_at(&bytes, at));
        assert!(
            matches!(w.as_mut().poll(&mut cx), Poll::Ready(Ok(()))),
            "write {i} into cached pages was not done at its first poll"
        );
        data[at as usize..at as usize + 150].copy_from_slice(&bytes);
    }
    assert!(c.stats().writes_in_place >= before + 100);
    // Uncached pages (read first, on a worker), and a write across cached and uncached ones.
    block_on(f.write_all_at(&[1u8; 5000], 40 * PAGE_SIZE as u64 + 7)).unwrap();
    data[40 * PAGE_SIZE + 7..40 * PAGE_SIZE + 5007].fill(1);
    assert_eq!(
        block_on(f.write_at(&[2u8; 3 * PAGE_SIZE], 15 * PAGE_SIZE as u64)).unwrap(),
        3 * PAGE_SIZE
    );
    data[15 * PAGE_SIZE..18 * PAGE_SIZE].fill(2);
    block_on(f.sync_data()).unwrap();
    assert!(
        std::fs::read(&path).unwrap() == data,
        "the file after the sync"
    );
    let mut back = vec![0u8; data.len()];
    block_on(f.read_exact_at(&mut back, 0)).unwrap();
    assert!(back == data, "the cached file");
    drop(f);
    assert_baseline(&c);
}

/// Async reads racing a file that shrinks and grows: every read ends (a page cut under a
/// read ends it short), nothing hangs, and the cache's books balance afterwards.
#[test]
fn async_reads_racing_truncation_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    std::fs::write(&path, pattern(64 * PAGE_SIZE, 10)).unwrap();
    let c = FolioCache::new(Config::new(1 << 20)).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let f = rt
        .block_on(AsyncFile::open_with(
            &c,
            &path,
            OpenOptions::new().write(true),
        ))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let cutter = {
        let (f, stop) = (f.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let size = if i % 2 == 0 {
                    (i % 7) * 1000
                } else {
                    64 * PAGE_SIZE as u64
                };
                f.file().set_len(size).unwrap();
                f.file().invalidate(0..u64::MAX).unwrap();
                i += 1;
            }
        })
    };
    let done = rt.block_on(async {
        let tasks: Vec<_> = (0..16u64)
            .map(|t| {
                let f = f.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 3 * PAGE_SIZE];
                    for i in 0..200u64 {
                        let off = ((t * 7919 + i * 104_729) % 60) * PAGE_SIZE as u64 + i % 100;
                        let n = f.read_at(&mut buf, off).await.unwrap();
                        assert!(n <= buf.len());
                    }
                })
            })
            .collect();
        tokio::time::timeout(Duration::from_secs(60), async {
            for t in tasks {
                t.await.unwrap();
            }
        })
        .await
    });
    stop.store(true, Ordering::SeqCst);
    cutter.join().unwrap();
    assert!(
        done.is_ok(),
        "async reads hung while the file was cut and grown"
    );
    drop(f);
    drop(rt);
    assert_baseline(&c);
}

/// An async read of a page latched in place waits for the commit without blocking its
/// executor thread: another task's hit completes meanwhile, and the read returns the
/// committed bytes.
#[test]
fn an_async_read_of_a_page_latched_in_place_awaits_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latched");
    std::fs::write(&path, pattern(2 * PAGE_SIZE, 9)).unwrap();
    let c = cache();
    let f = c.open_with(&path, OpenOptions::new().write(true)).unwrap();
    f.read_exact_at(&mut vec![0u8; 2 * PAGE_SIZE], 0).unwrap();
    let (latched_tx, latched_rx) = std::sync::mpsc::channel();
    let (commit_tx, commit_rx) = std::sync::mpsc::channel::<()>();
    let reader = AsyncFile::new(f.reopen());
    std::thread::scope(|s| {
        let fr = &f;
        s.spawn(move || {
            let mut g = fr.get_folio_mut_in_place(1).unwrap();
            assert!(g.in_place());
            g[..4].copy_from_slice(b"new!");
            latched_tx.send(()).unwrap();
            commit_rx.recv().unwrap();
            g[4..8].copy_from_slice(b"done");
        });
        latched_rx.recv().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut b1 = [0u8; 8];
            let mut read = Box::pin(reader.read_exact_at(&mut b1, PAGE_SIZE as u64));
            assert!(
                futures_poll(read.as_mut()).is_pending(),
                "the latched page waits for its commit"
            );
            // Another page is a hit meanwhile, on the same thread.
            let mut b0 = [0u8; 4];
            reader.read_exact_at(&mut b0, 0).await.unwrap();
            assert_eq!(b0[..], pattern(4, 9)[..]);
            commit_tx.send(()).unwrap();
            read.await.unwrap();
            assert_eq!(&b1, b"new!done");
        });
    });
    assert!(c.stats().waits_on_latched >= 1);
    f.sync_data().unwrap();
    drop((reader, f));
    assert_baseline(&c);
}

/// One poll of `f` with a waker that does nothing (the task is polled again by the test).
fn futures_poll<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}
