//! Handles, guards and whole caches dropped from thread-local destructors (a handle per
//! thread kept in a `thread_local!`, as the docs suggest: "one handle per thread, like an
//! fd"): by then the thread's own per-thread slots (per-CPU references, RCU reader slots,
//! statistics shards) may be gone, and every path must fall back to its shared form instead
//! of aborting the process.

use std::cell::RefCell;

use foliocache::{CachedFile, Config, FolioCache, OpenOptions, OwnedFolio};

thread_local! {
    static HANDLE: RefCell<Option<CachedFile>> = const { RefCell::new(None) };
    static GUARD: RefCell<Option<OwnedFolio>> = const { RefCell::new(None) };
    static CACHE: RefCell<Option<FolioCache>> = const { RefCell::new(None) };
}

#[test]
fn handles_guards_and_caches_dropped_by_thread_exit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, vec![9u8; 64 * 1024]).unwrap();
    let cache = FolioCache::new(Config::new(1 << 20)).unwrap();
    for round in 0..20 {
        let (cache, path) = (cache.clone(), path.clone());
        std::thread::spawn(move || {
            // Our slots first: destructors run in reverse order of registration, so these run
            // after the library's own per-thread state is gone.
            HANDLE.with(|_| {});
            GUARD.with(|_| {});
            CACHE.with(|_| {});
            let f = cache
                .open_with(&path, OpenOptions::new().write(true))
                .unwrap();
            let mut b = [0u8; 16];
            f.read_exact_at(&mut b, 4096).unwrap();
            f.write_all_at(&[round as u8; 16], 8192).unwrap();
            let g = f.get_folio(3).unwrap().into_owned();
            // Registered in this order, so the handle's destructor may run after others.
            GUARD.with(|s| *s.borrow_mut() = Some(g));
            HANDLE.with(|s| *s.borrow_mut() = Some(f));
            CACHE.with(|s| *s.borrow_mut() = Some(cache.clone()));
        })
        .join()
        .unwrap();
    }
    let f = cache.open(&path).unwrap();
    let mut b = [0u8; 16];
    f.read_exact_at(&mut b, 8192).unwrap();
    assert_eq!(b, [19u8; 16]);
    f.sync_data().unwrap();
    drop(f);
    cache.drop_caches();
    let a = cache.validate().unwrap();
    assert_eq!((a.allocated_pages, a.bad_pages), (0, 0));
}

#[test]
fn a_whole_cache_dropped_by_thread_exit_writes_its_dirty_pages_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("own");
    for round in 0..10u8 {
        let p = path.clone();
        std::thread::spawn(move || {
            HANDLE.with(|_| {});
            GUARD.with(|_| {});
            CACHE.with(|_| {});
            let cache = FolioCache::new(Config::new(1 << 20)).unwrap();
            let f = cache
                .open_with(&p, OpenOptions::new().write(true).create(true))
                .unwrap();
            f.write_all_at(&[round; 8192], 0).unwrap();
            let g = f.get_folio(1).unwrap().into_owned();
            GUARD.with(|s| *s.borrow_mut() = Some(g));
            HANDLE.with(|s| *s.borrow_mut() = Some(f));
            // The only reference to the cache besides the handle and the guard.
            CACHE.with(|s| *s.borrow_mut() = Some(cache));
        })
        .join()
        .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), vec![round; 8192]);
    }
}
