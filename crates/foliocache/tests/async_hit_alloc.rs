//! An async read that hits the cache is complete at its first poll and allocates nothing: a
//! counting global allocator sees no allocation across 10,000 hits polled once each (its own
//! test binary, so no other test's thread allocates meanwhile).

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use foliocache::{AsyncFile, Config, FolioCache};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded from the caller, who got `ptr` from `alloc` above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn a_hit_is_ready_at_the_first_poll_without_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hot");
    std::fs::write(&path, vec![3u8; 64 * 4096]).unwrap();
    let cache = FolioCache::new(Config::new(4 << 20)).unwrap();
    let f = AsyncFile::new(cache.open(&path).unwrap());
    f.file().readahead(0..64 * 4096).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut buf = [0u8; 4096];
    // Warm the thread's statistics shard and the per-CPU state once.
    for i in 0..64u64 {
        let mut fut = std::pin::pin!(f.read_at(&mut buf, i * 4096));
        assert!(matches!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(4096))));
    }
    COUNTING.store(true, Ordering::SeqCst);
    let mut ready = 0;
    for i in 0..10_000u64 {
        let off = (i % 64) * 4096 + (i % 7) * 100;
        let mut fut = std::pin::pin!(f.read_at(&mut buf[..1000], off));
        if let Poll::Ready(Ok(1000)) = fut.as_mut().poll(&mut cx) {
            ready += 1;
        }
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(ready, 10_000, "a hit was not ready at its first poll");
    assert_eq!(ALLOCS.load(Ordering::SeqCst), 0, "hits allocated");
    assert!(buf[..1000].iter().all(|&b| b == 3));
}
