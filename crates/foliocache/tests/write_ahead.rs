//! The write-ahead rule (`cache/wal.rs`): no page reaches its file holding a change logged
//! past the log's durable point, whatever writes it back (syncs, the flusher, throttled
//! writers, `set_budget`), and nothing deadlocks when the log cannot be flushed.
//!
//! The checker: every page the workload writes carries its log sequence number in its first
//! eight bytes, and the backing looks at each page as it is written, against the durable
//! point at that moment.

use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use foliocache::backing::Backing;
use foliocache::{CacheError, Config, FolioCache, WriteAheadLog};

const PAGE: usize = 4096;

/// The engine's log: how far it is durable, and whether it can be flushed.
#[derive(Default)]
struct Log {
    durable: AtomicU64,
    flushes: AtomicU64,
    broken: AtomicBool,
}

impl WriteAheadLog for Log {
    fn flush_log(&self, lsn: u64) -> io::Result<()> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(io::Error::other("the log device is gone"));
        }
        self.flushes.fetch_add(1, Ordering::Relaxed);
        // A real log would write and sync its records up to `lsn` here.
        self.durable.fetch_max(lsn, Ordering::SeqCst);
        Ok(())
    }
}

/// A memory backing that checks every page written against the log's durable point.
#[derive(Debug)]
struct Checked {
    inner: Mutex<Vec<u8>>,
    durable: Arc<AtomicU64>,
    pages_written: AtomicU64,
    violations: AtomicU64,
}

impl Checked {
    fn new(pages: usize, durable: Arc<AtomicU64>) -> Checked {
        Checked {
            inner: Mutex::new(vec![0; pages * PAGE]),
            durable,
            pages_written: AtomicU64::new(0),
            violations: AtomicU64::new(0),
        }
    }

    /// Looks at the whole pages of a write of `buf` at `offset`.
    fn check(&self, buf: &[u8], offset: u64) {
        assert_eq!(offset % PAGE as u64, 0, "writeback writes whole pages here");
        let durable = self.durable.load(Ordering::SeqCst);
        for page in buf.chunks(PAGE) {
            let lsn = u64::from_le_bytes(page[..8].try_into().unwrap());
            self.pages_written.fetch_add(1, Ordering::Relaxed);
            if lsn > durable {
                self.violations.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Backing for Checked {
    fn size(&self) -> io::Result<u64> {
        Ok(self.inner.lock().unwrap().len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let v = self.inner.lock().unwrap();
        let at = (offset as usize).min(v.len());
        let n = buf.len().min(v.len() - at);
        buf[..n].copy_from_slice(&v[at..at + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.check(buf, offset);
        let mut v = self.inner.lock().unwrap();
        let end = offset as usize + buf.len();
        if v.len() < end {
            v.resize(end, 0);
        }
        v[offset as usize..end].copy_from_slice(buf);
        Ok(buf.len())
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        self.write_at(&all, offset)
    }

    fn set_len(&self, size: u64) -> io::Result<()> {
        self.inner.lock().unwrap().resize(size as usize, 0);
        Ok(())
    }
}

/// A writable memory file of `pages` pages (its checks unused).
fn mem(pages: usize) -> ArcBacking {
    ArcBacking(Arc::new(Checked::new(pages, Arc::default())))
}

/// A cache without the flusher: its passes would hold pages under writeback for a moment
/// while giving them back (still unwritten), so the tests that count dirty pages run
/// without it.
fn quiet(config: Config) -> FolioCache {
    FolioCache::new(config.background_writeback(false)).unwrap()
}

/// Every file dropped: nothing left allocated, no bad page.
fn assert_baseline(c: &FolioCache) {
    c.drop_caches();
    let a = c.validate().unwrap();
    assert_eq!((a.allocated_pages, a.bad_pages), (0, 0));
}

/// A page whose first eight bytes are `lsn`.
fn page_of(lsn: u64) -> Vec<u8> {
    let mut p = vec![(lsn % 251) as u8; PAGE];
    p[..8].copy_from_slice(&lsn.to_le_bytes());
    p
}

/// The durable point both the log and the checker see.
struct Shared {
    log: Arc<Log>,
    durable: Arc<AtomicU64>,
}

impl WriteAheadLog for Shared {
    fn flush_log(&self, lsn: u64) -> io::Result<()> {
        self.log.flush_log(lsn)?;
        self.durable.fetch_max(lsn, Ordering::SeqCst);
        Ok(())
    }
}

/// Random page writes from three threads, each a change logged at the next sequence
/// number; a group commit now and then; syncs, checkpoints, budget changes, and a budget a quarter of
/// the file so the dirty limit and reclaim press all the time. `with_lsn` false is the
/// control: the same writes without their numbers, which the checker must catch.
/// Returns (pages written, violations).
fn workload(with_lsn: bool, target_writes: u64) -> (u64, u64) {
    const FILE_PAGES: usize = 1024;
    let durable = Arc::new(AtomicU64::default());
    let backing = Arc::new(Checked::new(FILE_PAGES, durable.clone()));
    // Reclaim's pageout on too: the flusher writes the cold dirty pages reclaim meets, one
    // more path to the file that must wait for the log.
    let c = FolioCache::new(
        Config::new(FILE_PAGES / 4 * PAGE)
            .readahead_pages(0)
            .pageout(true),
    )
    .unwrap();
    let log = Arc::new(Log::default());
    c.set_write_ahead_log(Some(Arc::new(Shared {
        log: log.clone(),
        durable: durable.clone(),
    })));
    let file = c
        .open_backing("checked", ArcBacking(backing.clone()))
        .unwrap();
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let in_place = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (file, next, stop, in_place) = (&file, &next, &stop, &in_place);
            s.spawn(move || {
                let own = file.reopen();
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let page = x % FILE_PAGES as u64;
                    if t == 2 && x % 2 == 0 {
                        // A buffer manager's update: latch the page in place, log the
                        // change, write it into the cached page, commit. (Through a handle
                        // of its own: another thread's write through the latch's handle
                        // would be refused, not made to wait.)
                        let mut g = own.get_folio_mut_in_place(page).unwrap();
                        let lsn = next.fetch_add(1, Ordering::SeqCst) + 1;
                        g.copy_from_slice(&page_of(lsn));
                        if with_lsn {
                            g.set_lsn(lsn);
                        }
                        in_place.fetch_add(g.in_place() as u64, Ordering::Relaxed);
                        continue;
                    }
                    if t == 1 && x % 4 == 0 {
                        // The same for a 16 KiB block (its four pages, one change, one
                        // dirty folio: collapsed from the pages the others write, split
                        // again by their page latches).
                        let at = page / 4 * 4 * PAGE as u64;
                        let mut g = own.get_block_mut_in_place(at, 4 * PAGE).unwrap();
                        let lsn = next.fetch_add(1, Ordering::SeqCst) + 1;
                        for p in g.chunks_mut(PAGE) {
                            p.copy_from_slice(&page_of(lsn));
                        }
                        if with_lsn {
                            g.set_lsn(lsn);
                        }
                        in_place.fetch_add(g.in_place() as u64, Ordering::Relaxed);
                        continue;
                    }
                    let lsn = next.fetch_add(1, Ordering::SeqCst) + 1;
                    let bytes = page_of(lsn);
                    let at = page * PAGE as u64;
                    if with_lsn {
                        file.write_all_at_lsn(&bytes, at, lsn).unwrap();
                    } else {
                        file.write_all_at(&bytes, at).unwrap();
                    }
                }
            });
        }
        // Group commit: the log made durable up to every number handed out so far.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(2));
                let d = next.load(Ordering::SeqCst);
                durable.fetch_max(d, Ordering::SeqCst);
                log.durable.fetch_max(d, Ordering::SeqCst);
                c.log_durable(d);
            }
        });
        // Syncs and budget changes.
        s.spawn(|| {
            let mut round = 0u64;
            while backing.pages_written.load(Ordering::Relaxed) < target_writes {
                round += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
                if round % 5 == 0 {
                    let budget = if round % 10 == 0 {
                        FILE_PAGES / 8
                    } else {
                        FILE_PAGES / 4
                    };
                    // Busy (pinned or dirty pages held back) is an answer, not a failure.
                    let _ = c.set_budget(budget * PAGE);
                } else if round % 3 == 0 {
                    // A fuzzy checkpoint halfway back through the log.
                    c.checkpoint(next.load(Ordering::SeqCst) / 2).unwrap();
                } else {
                    file.sync_data().unwrap();
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    // Everything durable at last: the final sync writes every page.
    let d = next.load(Ordering::SeqCst);
    durable.fetch_max(d, Ordering::SeqCst);
    c.log_durable(d);
    file.sync_data().unwrap();
    assert_eq!(file.dirty_pages(), 0);
    drop(file);
    c.set_budget(FILE_PAGES / 4 * PAGE).unwrap();
    assert_baseline(&c);
    assert!(
        in_place.load(Ordering::Relaxed) > 0,
        "some latched updates were in place"
    );
    (
        backing.pages_written.load(Ordering::Relaxed),
        backing.violations.load(Ordering::Relaxed),
    )
}

/// An `Arc` of a backing, as a backing (the test keeps a handle on the checker).
#[derive(Debug)]
struct ArcBacking(Arc<Checked>);

impl Backing for ArcBacking {
    fn size(&self) -> io::Result<u64> {
        self.0.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.0.write_at(buf, offset)
    }
    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        self.0.write_vectored_at(bufs, offset)
    }
    fn set_len(&self, size: u64) -> io::Result<()> {
        self.0.set_len(size)
    }
}

#[test]
fn no_page_reaches_the_file_before_its_log_record_is_durable() {
    let target = if cfg!(debug_assertions) {
        10_000
    } else {
        100_000
    };
    let (written, violations) = workload(true, target);
    eprintln!("{written} page writes, {violations} ahead of the log");
    assert!(written >= target, "{written} page writes");
    assert_eq!(
        violations, 0,
        "pages written ahead of the log, of {written}"
    );
}

#[test]
fn the_checker_catches_writes_without_their_log_numbers() {
    let (written, violations) = workload(false, 2_000);
    eprintln!("control: {written} page writes, {violations} ahead of the log");
    assert!(
        violations > 0,
        "without log numbers some of {written} page writes must run ahead of the log"
    );
}

/// Without a log to flush, pages ahead of the durable point stay dirty: a sync fails with
/// `WriteAheadLog` (not `Writeback`), a writer past the dirty limit is not stuck waiting for
/// its own commit, and once the engine says the log is durable the sync writes them.
#[test]
fn without_a_log_pages_wait_for_log_durable_and_nothing_deadlocks() {
    let c = quiet(Config::new(64 * PAGE).readahead_pages(0));
    let file = c.open_backing("mem", mem(256)).unwrap();
    // Far more pages than the dirty limit (20% of 64), all ahead of the log, from one thread
    // (which, being the engine's committer too, would never come back to commit if the
    // throttle waited for room).
    for p in 0..40u64 {
        file.write_all_at_lsn(&page_of(p + 1), p * PAGE as u64, p + 1)
            .unwrap();
    }
    assert_eq!(file.dirty_pages(), 40);
    match file.sync_data() {
        Err(e @ CacheError::WriteAheadLog { .. }) => {
            assert!(e.to_string().contains("set_write_ahead_log"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(file.dirty_pages(), 40, "held back, still dirty");
    c.log_durable(20);
    assert!(file.sync_data().is_err(), "pages 21..40 still wait");
    assert_eq!(file.dirty_pages(), 20);
    c.log_durable(40);
    file.sync_data().unwrap();
    assert_eq!(file.dirty_pages(), 0);
    assert_eq!(c.durable_lsn(), 40);
    let mut page = vec![0u8; PAGE];
    file.read_exact_at(&mut page, 39 * PAGE as u64).unwrap();
    assert_eq!(page, page_of(40));
}

/// A log that cannot be flushed fails the sync with its error; the pages stay dirty and are
/// written once it can. `FolioMut::set_lsn` holds a latched update to the rule too.
#[test]
fn a_failing_log_keeps_its_pages_dirty_and_latched_updates_follow_the_rule() {
    let c = quiet(Config::new(64 * PAGE).readahead_pages(0));
    let log = Arc::new(Log::default());
    c.set_write_ahead_log(Some(log.clone()));
    let file = c.open_backing("mem", mem(16)).unwrap();
    file.write_all_at_lsn(&page_of(7), 0, 7).unwrap();
    log.broken.store(true, Ordering::SeqCst);
    match file.sync_data() {
        Err(CacheError::WriteAheadLog { source, .. }) => {
            assert_eq!(source.to_string(), "the log device is gone")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(file.dirty_pages(), 1);
    log.broken.store(false, Ordering::SeqCst);
    file.sync_data().unwrap();
    assert_eq!(log.durable.load(Ordering::SeqCst), 7);
    assert_eq!(file.dirty_pages(), 0);

    let mut g = file.get_folio_mut(3).unwrap();
    g[..8].copy_from_slice(&99u64.to_le_bytes());
    g.set_lsn(99);
    g.set_lsn(50); // the highest is kept
    g.commit();
    let flushes = log.flushes.load(Ordering::SeqCst);
    file.sync_data().unwrap();
    assert_eq!(log.durable.load(Ordering::SeqCst), 99);
    assert_eq!(log.flushes.load(Ordering::SeqCst), flushes + 1);
    // Known durable now: a write at or below it needs no flush.
    file.write_all_at_lsn(&page_of(98), 5 * PAGE as u64, 98)
        .unwrap();
    file.sync_data().unwrap();
    assert_eq!(log.flushes.load(Ordering::SeqCst), flushes + 1);
    drop(file);
    assert_baseline(&c);
}

/// A fuzzy checkpoint writes the pages holding a change logged at or below its point (a page
/// changed again later is written whole, the log flushed up to its newest change first),
/// leaves the others dirty, and syncs: the engine may drop its log before the point.
#[test]
fn a_checkpoint_writes_the_pages_whose_oldest_change_is_at_or_below_its_point() {
    let c = quiet(Config::buffer_pool(64 * PAGE));
    let log = Arc::new(Log::default());
    c.set_write_ahead_log(Some(log.clone()));
    let durable = Arc::new(AtomicU64::default());
    let backing = Arc::new(Checked::new(16, durable.clone()));
    let file = c.open_backing("db", ArcBacking(backing.clone())).unwrap();
    for p in 0..10u64 {
        file.write_all_at_lsn(&page_of(10 + p), p * PAGE as u64, 10 + p)
            .unwrap();
    }
    // Page 3 changed again, much later: its oldest change is still 13.
    file.write_all_at_lsn(&page_of(100), 3 * PAGE as u64, 100)
        .unwrap();
    assert_eq!(file.dirty_pages(), 10);
    c.checkpoint(15).unwrap();
    assert_eq!(file.dirty_pages(), 4, "pages 6..10 (changes 16..19) wait");
    assert_eq!(
        log.durable.load(Ordering::SeqCst),
        100,
        "flushed for page 3's newest"
    );
    assert_eq!(backing.pages_written.load(Ordering::Relaxed), 6);
    let mut on_disk = vec![0u8; PAGE];
    backing.read_at(&mut on_disk, 3 * PAGE as u64).unwrap();
    assert_eq!(on_disk, page_of(100));
    backing.read_at(&mut on_disk, 7 * PAGE as u64).unwrap();
    assert_eq!(on_disk, vec![0; PAGE], "not written yet");
    c.checkpoint(u64::MAX).unwrap();
    assert_eq!(file.dirty_pages(), 0);
    backing.read_at(&mut on_disk, 7 * PAGE as u64).unwrap();
    assert_eq!(on_disk, page_of(17));
    drop(file);
    assert_baseline(&c);
}

/// The async writes take log numbers too: the inline part (a cached page) and the worker's
/// part (an uncached one) both leave their pages waiting for the log.
#[test]
fn async_writes_with_log_numbers_wait_for_the_log() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let c = quiet(Config::new(64 * PAGE).readahead_pages(0));
    let file = c.open_backing("mem", mem(16)).unwrap();
    // Page 0 cached (so its async write completes inline), page 5 not.
    file.write_all_at(&page_of(0), 0).unwrap();
    file.sync_data().unwrap();
    let af = foliocache::AsyncFile::new(file);
    rt.block_on(async {
        af.write_all_at_lsn(&page_of(3), 0, 3).await.unwrap();
        af.write_all_at_lsn(&page_of(4), 5 * PAGE as u64, 4)
            .await
            .unwrap();
        assert!(matches!(
            af.sync_data().await,
            Err(CacheError::WriteAheadLog { .. })
        ));
        assert_eq!(af.file().dirty_pages(), 2, "both held back");
        c.log_durable(4);
        af.sync_data().await.unwrap();
        assert_eq!(af.file().dirty_pages(), 0);
    });
}

/// Without a flusher or the background reclaimer, an allocation that finds every cached
/// page dirty writes the coldest of them itself (the buffer pool's single-page flush), and only those whose changes the log
/// already holds: a 64-page pool updated over a file four times its size, committed every 8
/// updates, never fails an update and never writes a page ahead of its log. Once every page
/// holds an uncommitted change, nothing may be written: the next update fails with
/// `OutOfMemory`, at once, and succeeds after the commit.
#[test]
fn an_allocation_with_only_dirty_pages_writes_the_coldest_itself() {
    const FILE_PAGES: u64 = 256;
    let durable = Arc::new(AtomicU64::new(0));
    let backing = Arc::new(Checked::new(FILE_PAGES as usize, durable.clone()));
    // The pool's dirty limit is the whole pool, so reclaim, not the writer's throttle, is
    // what meets the dirty pages; no reclaimer thread, so the allocation's own pageout is.
    let c = quiet(Config::buffer_pool(64 * PAGE).background_reclaim(false));
    let file = c.open_backing("pool", ArcBacking(backing.clone())).unwrap();
    let commit = |lsn: u64| {
        durable.fetch_max(lsn, Ordering::SeqCst);
        c.log_durable(lsn);
    };
    let mut lsn = 0u64;
    for round in 0..3u64 {
        for page in 0..FILE_PAGES {
            lsn += 1;
            let at = (page * 0x9e37_79b9 + round * 17) % FILE_PAGES;
            let mut g = file.get_folio_mut_in_place(at).unwrap_or_else(|e| {
                panic!(
                    "{e:?} lsn {lsn} dirty {} {:?}",
                    file.dirty_pages(),
                    c.stats()
                )
            });
            g[..8].copy_from_slice(&lsn.to_le_bytes());
            g.set_lsn(lsn);
            drop(g);
            if lsn % 8 == 0 {
                commit(lsn);
            }
        }
    }
    let s = c.stats();
    assert!(s.pageouts_direct > 0, "{s:?}");
    assert_eq!(s.pageouts, s.pageouts_direct, "no flusher: {s:?}");
    assert_eq!(backing.violations.load(Ordering::Relaxed), 0);
    // Every cached page changed past the durable point: none may be written.
    commit(lsn);
    for page in 0..64 {
        lsn += 1;
        let mut g = file.get_folio_mut_in_place(page).unwrap();
        g[..8].copy_from_slice(&lsn.to_le_bytes());
        g.set_lsn(lsn);
    }
    assert_eq!(file.dirty_pages(), 64);
    let t = std::time::Instant::now();
    match file.get_folio_mut_in_place(100) {
        Err(CacheError::OutOfMemory { .. }) => {}
        other => panic!("expected OutOfMemory, got {:?}", other.map(|_| ())),
    }
    assert!(
        t.elapsed() < std::time::Duration::from_secs(1),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(backing.violations.load(Ordering::Relaxed), 0);
    commit(lsn);
    drop(file.get_folio_mut_in_place(100).unwrap());
    assert_eq!(backing.violations.load(Ordering::Relaxed), 0);
    file.sync_data().unwrap();
    drop(file);
    assert_baseline(&c);
}

/// The background reclaimer keeps a few pages free in a pool whose every page is dirty
/// (kswapd's own `pageout()`), so that a read's one-pass allocation finds a whole folio free:
/// a 256-page `Config::buffer_pool` with no flusher, updated in place over a file four times
/// its size and committed, has its free pages back at the reclaimer's low watermark (1/64 of
/// the budget, at least 32 pages) soon after, its coldest pages written and none ahead of
/// the log. Without the reclaimer the same pool is left with no more free pages than the
/// last allocation left.
#[test]
fn the_background_reclaimer_keeps_free_pages_in_an_all_dirty_pool() {
    const FILE_PAGES: u64 = 1024;
    const LOW: u64 = 32;
    for reclaimer in [true, false] {
        let durable = Arc::new(AtomicU64::new(0));
        let backing = Arc::new(Checked::new(FILE_PAGES as usize, durable.clone()));
        let c = quiet(Config::buffer_pool(256 * PAGE).background_reclaim(reclaimer));
        let file = c.open_backing("pool", ArcBacking(backing.clone())).unwrap();
        let commit = |lsn: u64| {
            durable.fetch_max(lsn, Ordering::SeqCst);
            c.log_durable(lsn);
        };
        let mut lsn = 0u64;
        for page in 0..FILE_PAGES {
            lsn += 1;
            let at = (page * 0x9e37_79b9) % FILE_PAGES;
            let mut g = file.get_folio_mut_in_place(at).unwrap();
            g[..8].copy_from_slice(&lsn.to_le_bytes());
            g.set_lsn(lsn);
            drop(g);
            if lsn % 8 == 0 {
                commit(lsn);
            }
        }
        commit(lsn);
        let s = c.stats();
        if reclaimer {
            // Woken by the allocations, or by its own timer (every 100 ms) once they stop.
            let t = std::time::Instant::now();
            while c.stats().free_pages < LOW && t.elapsed() < std::time::Duration::from_secs(20) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let s = c.stats();
            assert!(s.free_pages >= LOW, "{s:?}");
            assert!(s.pageouts_direct > 0, "{s:?}");
        } else {
            assert!(s.free_pages < LOW, "{s:?}");
        }
        assert_eq!(backing.violations.load(Ordering::Relaxed), 0);
        file.sync_data().unwrap();
        drop(file);
        assert_baseline(&c);
    }
}

/// A small buffer pool (256 pages) updated in place over a file four times its size, each
/// change logged and committed in groups: reclaim meets dirty pages, queues them for pageout
/// (the flusher's, or the allocation's own), and every update finds a page;
/// none reaches the file ahead of its log. (This memory backing writes at once, so it does
/// not reproduce the allocation failure the throttle of `CacheInner::alloc_throttled`
/// fixed; the `wal_store` kill test, whose log syncs a real file, did: `OutOfMemory` between
/// two commits with a 95% limit and no throttle.)
#[test]
fn a_full_buffer_pool_waits_for_pageout_instead_of_failing() {
    const FILE_PAGES: u64 = 1024;
    let durable = Arc::new(AtomicU64::new(0));
    let backing = Arc::new(Checked::new(FILE_PAGES as usize, durable.clone()));
    let c = FolioCache::new(Config::buffer_pool(256 * PAGE)).unwrap();
    let log = Arc::new(Log::default());
    c.set_write_ahead_log(Some(Arc::new(Shared {
        log: log.clone(),
        durable: durable.clone(),
    })));
    let file = c.open_backing("pool", ArcBacking(backing.clone())).unwrap();
    let mut lsn = 0u64;
    for round in 0..3u64 {
        for page in 0..FILE_PAGES {
            lsn += 1;
            let at = (page * 0x9e37_79b9 + round * 17) % FILE_PAGES;
            let mut g = file.get_folio_mut_in_place(at).unwrap();
            g[..8].copy_from_slice(&lsn.to_le_bytes());
            g.set_lsn(lsn);
            drop(g);
            if lsn % 50 == 0 {
                // A group commit: the log durable up to here.
                durable.fetch_max(lsn, Ordering::SeqCst);
                c.log_durable(lsn);
            }
        }
    }
    assert!(c.stats().pageouts > 0, "{:?}", c.stats());
    assert_eq!(backing.violations.load(Ordering::Relaxed), 0);
    durable.fetch_max(lsn, Ordering::SeqCst);
    c.log_durable(lsn);
    file.sync_data().unwrap();
    drop(file);
    assert_baseline(&c);
}
