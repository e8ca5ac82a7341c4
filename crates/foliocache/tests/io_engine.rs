//! The cache's own I/O: direct I/O on a disk file system (no second copy in the kernel's
//! page cache), the buffered fallback, many-range reads, prefetch, and asynchronous
//! readahead.
//!
//! These tests need a file system with direct I/O. They use `FOLIOCACHE_TEST_DISK_DIR`, or
//! else `/var/tmp` or `/tmp` if one of them is on such a file system, and fail otherwise,
//! saying so; `FOLIOCACHE_SKIP_DISK=1` opts out (then every test here passes vacuously and
//! prints that it did not run).

use std::path::{Path, PathBuf};

use foliocache::{CacheError, Config, DirectIo, FolioCache, OpenOptions};

/// A directory on a file system with direct I/O, or `None` if the run opted out.
fn disk_dir() -> Option<tempfile::TempDir> {
    if std::env::var_os("FOLIOCACHE_SKIP_DISK").is_some() {
        eprintln!("FOLIOCACHE_SKIP_DISK is set: this test did not run");
        return None;
    }
    let candidates: Vec<PathBuf> = match std::env::var_os("FOLIOCACHE_TEST_DISK_DIR") {
        Some(d) => vec![d.into()],
        None => vec!["/var/tmp".into(), "/tmp".into()],
    };
    for d in &candidates {
        let Ok(t) = tempfile::tempdir_in(d) else {
            continue;
        };
        let probe = std::fs::File::create(t.path().join("probe")).unwrap();
        if foliocache::io::dio_alignment(&probe)
            .ok()
            .flatten()
            .is_some()
        {
            return Some(t);
        }
    }
    panic!(
        "none of {candidates:?} is on a file system with direct I/O: set \
         FOLIOCACHE_TEST_DISK_DIR to a directory on ext4, XFS or btrfs, or \
         FOLIOCACHE_SKIP_DISK=1 to skip these tests"
    );
}

/// The share of `path`'s pages in the kernel's page cache, in percent.
fn kernel_resident_pct(path: &Path) -> f64 {
    foliocache::io::kernel_residency(path).unwrap() * 100.0
}

/// Drops the kernel's clean pages of `path`.
fn drop_kernel_cache(path: &Path) {
    foliocache::io::drop_kernel_cache(path).unwrap();
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) ^ (i >> 12)) as u8)
        .collect()
}

/// `FOLIOCACHE_DIRECT_IO` forces a mode for the whole suite; tests of the default skip the
/// checks it would change.
fn direct_forced_off() -> bool {
    std::env::var("FOLIOCACHE_DIRECT_IO").is_ok_and(|v| v == "off")
}

#[test]
fn a_file_on_a_disk_is_read_and_written_direct_with_no_copy_in_the_kernel() {
    let Some(dir) = disk_dir() else { return };
    if direct_forced_off() {
        return;
    }
    let path = dir.path().join("data");
    // An odd size: the block holding EOF is written whole and the size restored.
    let data = pattern(3 * 1024 * 1024 + 1234, 1);
    let cache = FolioCache::new(Config::new(8 << 20)).unwrap();
    let f = cache
        .open_with(&path, OpenOptions::new().write(true).create(true))
        .unwrap();
    let align = f.direct_io().expect("ext4 and friends have direct I/O");
    assert!(align.is_power_of_two() && align <= 4096);
    f.write_all_at(&data, 0).unwrap();
    f.sync_data().unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        data.len() as u64,
        "the size on disk is the file's, not rounded to a block"
    );
    drop(f);
    cache.drop_caches();
    drop_kernel_cache(&path);
    let f = cache.open(&path).unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data, "read back what was written");
    let resident = kernel_resident_pct(&path);
    assert!(
        resident <= 1.0,
        "{resident:.1}% of the file is in the kernel's page cache too"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        data,
        "the kernel's view agrees"
    );
    drop(f);
    cache.validate().unwrap();
}

#[test]
fn appends_and_partial_blocks_keep_the_neighbours_and_the_size() {
    let Some(dir) = disk_dir() else { return };
    let path = dir.path().join("log");
    let cache = FolioCache::new(Config::new(4 << 20)).unwrap();
    let f = cache
        .open_with(&path, OpenOptions::new().append(true).create(true))
        .unwrap();
    let mut model = Vec::new();
    for i in 0..200u64 {
        let rec = pattern(37 + (i as usize * 13) % 700, i);
        f.append(&rec).unwrap();
        model.extend_from_slice(&rec);
        if i % 7 == 0 {
            f.sync_data().unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), model, "after sync {i}");
        }
    }
    f.sync_data().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), model);
    // Shrink to a size inside a block, then grow: the cut bytes read as zeros.
    f.set_len(5000).unwrap();
    f.set_len(9000).unwrap();
    f.sync_data().unwrap();
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), 9000);
    assert_eq!(on_disk[..5000], model[..5000]);
    assert!(on_disk[5000..].iter().all(|&b| b == 0));
}

#[test]
fn a_file_system_without_direct_io_falls_back_or_fails_as_configured() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("no /dev/shm: nothing to check");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, pattern(10_000, 3)).unwrap();
    let probe = std::fs::File::open(&path).unwrap();
    if foliocache::io::dio_alignment(&probe).unwrap().is_some() {
        eprintln!("this tmpfs reports direct I/O: nothing to check");
        return;
    }
    let forced = std::env::var("FOLIOCACHE_DIRECT_IO").ok();
    let cache = FolioCache::new(Config::new(1 << 20).direct_io(DirectIo::Auto)).unwrap();
    if forced.as_deref() != Some("on") {
        let f = cache.open(&path).unwrap();
        assert_eq!(f.direct_io(), None, "tmpfs stays buffered");
        let mut b = vec![0u8; 10_000];
        f.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(b, pattern(10_000, 3));
    }
    if forced.is_none() {
        let strict = FolioCache::new(Config::new(1 << 20).direct_io(DirectIo::On)).unwrap();
        match strict.open(&path) {
            Err(CacheError::Open { source, .. }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::Unsupported);
                assert!(source.to_string().contains("DirectIo::Auto"), "{source}");
            }
            r => panic!("DirectIo::On on tmpfs: expected an error, got {r:?}"),
        }
    }
}

#[test]
fn read_ranges_reads_every_range_exactly_and_fails_past_the_end() {
    let Some(dir) = disk_dir() else { return };
    let path = dir.path().join("table");
    let data = pattern(2 * 1024 * 1024 + 77, 9);
    std::fs::write(&path, &data).unwrap();
    drop_kernel_cache(&path);
    let cache = FolioCache::new(Config::block_cache(1 << 20)).unwrap();
    let f = cache.open(&path).unwrap();
    let mut x = 7u64;
    for round in 0..50 {
        let mut bufs: Vec<(u64, Vec<u8>)> = (0..1 + round % 40)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let len = 1 + (x >> 40) as usize % 20_000;
                let at = (x >> 8) % (data.len() - len) as u64;
                (at, vec![0u8; len])
            })
            .collect();
        let mut reads: Vec<(u64, &mut [u8])> =
            bufs.iter_mut().map(|(o, b)| (*o, &mut b[..])).collect();
        f.read_ranges(&mut reads).unwrap();
        for (o, b) in &bufs {
            let o = *o as usize;
            assert!(b[..] == data[o..o + b.len()], "round {round}, range at {o}");
        }
    }
    let mut tail = [0u8; 100];
    match f.read_ranges(&mut [(data.len() as u64 - 10, &mut tail[..])]) {
        Err(CacheError::UnexpectedEof { .. }) => {}
        r => panic!("a range past the end: {r:?}"),
    }
    drop(f);
    cache.validate().unwrap();
}

#[test]
fn prefetch_starts_reads_that_later_reads_find_done() {
    let Some(dir) = disk_dir() else { return };
    let path = dir.path().join("blocks");
    let data = pattern(1 << 20, 5);
    std::fs::write(&path, &data).unwrap();
    let cache = FolioCache::new(Config::block_cache(4 << 20)).unwrap();
    let f = cache.open(&path).unwrap();
    f.prefetch(&[
        0..64 << 10,
        (512 << 10)..(600 << 10),
        0..10,
        (1 << 20)..(2 << 20),
    ])
    .unwrap();
    // `validate` waits for the readahead workers.
    cache.validate().unwrap();
    let before = cache.stats().io_reads;
    let mut b = vec![0u8; 64 << 10];
    f.read_exact_at(&mut b, 0).unwrap();
    assert!(b[..] == data[..64 << 10]);
    let mut b = vec![0u8; 88 << 10];
    f.read_exact_at(&mut b, 512 << 10).unwrap();
    assert!(b[..] == data[512 << 10..600 << 10]);
    assert_eq!(
        cache.stats().io_reads,
        before,
        "prefetched pages were cached"
    );
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = [0..1, 10..5];
    assert!(
        f.prefetch(&reversed).is_err(),
        "a reversed range is an error"
    );
}

#[test]
fn sequential_reads_of_a_direct_file_use_asynchronous_windows_and_leave_nothing_behind() {
    let Some(dir) = disk_dir() else { return };
    if direct_forced_off() {
        return;
    }
    let path = dir.path().join("stream");
    let data = pattern(8 << 20, 11);
    std::fs::write(&path, &data).unwrap();
    drop_kernel_cache(&path);
    let cache = FolioCache::new(Config::new(2 << 20)).unwrap();
    let baseline = cache.stats().allocated_pages;
    for round in 0..3 {
        let f = cache.open(&path).unwrap();
        let mut buf = vec![0u8; 8192 + round * 1000];
        let mut at = 0usize;
        while at < data.len() {
            let n = f.read_at(&mut buf, at as u64).unwrap();
            assert!(n > 0);
            assert!(buf[..n] == data[at..at + n], "round {round} at {at}");
            at += n;
        }
        // Dropped right after the last read: windows still in flight end first.
        drop(f);
        cache.drop_caches();
        cache.validate().unwrap();
        assert_eq!(cache.stats().allocated_pages, baseline, "round {round}");
    }
    assert!(cache.stats().async_readahead > 0);
}

/// A store whose writes complete after random delays (so a batch's completions come back in
/// any order) and which checks, at each sync, that no write is still in flight.
#[derive(Debug, Default)]
struct SlowStore {
    data: std::sync::Mutex<Vec<u8>>,
    in_flight: std::sync::atomic::AtomicUsize,
    /// Syncs that found a write still in flight.
    violations: std::sync::atomic::AtomicUsize,
    /// The most writes in flight at once.
    max_in_flight: std::sync::atomic::AtomicUsize,
    /// A write covering this offset fails with EIO (u64::MAX: none).
    fail_at: std::sync::atomic::AtomicU64,
}

impl foliocache::io::Backing for SlowStore {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.data.lock().unwrap().len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let d = self.data.lock().unwrap();
        let start = (offset as usize).min(d.len());
        let n = buf.len().min(d.len() - start);
        buf[..n].copy_from_slice(&d[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<usize> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.max_in_flight.fetch_max(now, SeqCst);
        // A delay that depends on the offset: later offsets often finish first.
        let us = (offset.wrapping_mul(2654435761) >> 7) % 2000;
        std::thread::sleep(std::time::Duration::from_micros(us));
        let fail = self.fail_at.load(SeqCst);
        let r = if (offset..offset + buf.len() as u64).contains(&fail) {
            Err(std::io::Error::from_raw_os_error(libc::EIO))
        } else {
            let mut d = self.data.lock().unwrap();
            let end = offset as usize + buf.len();
            if d.len() < end {
                d.resize(end, 0);
            }
            d[offset as usize..end].copy_from_slice(buf);
            Ok(buf.len())
        };
        self.in_flight.fetch_sub(1, SeqCst);
        r
    }

    fn set_len(&self, size: u64) -> std::io::Result<()> {
        self.data.lock().unwrap().resize(size as usize, 0);
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.in_flight.load(SeqCst) != 0 {
            self.violations.fetch_add(1, SeqCst);
        }
        Ok(())
    }
}

#[test]
fn a_sync_returns_after_every_write_it_covers_completed_and_reports_a_failed_one() {
    use std::sync::atomic::Ordering::SeqCst;
    let store = std::sync::Arc::new(SlowStore {
        fail_at: u64::MAX.into(),
        ..SlowStore::default()
    });
    let cache = FolioCache::new(
        Config::new(8 << 20)
            .io_engine(foliocache::IoEngine::Pool)
            .background_writeback(false),
    )
    .unwrap();
    let f = cache.open_backing("slow", store.clone()).unwrap();
    let mut model = vec![0u8; 256 * 4096];
    for round in 0..4u64 {
        // Scattered runs of one to three pages: many runs in one writeback pass.
        for i in 0..48u64 {
            let page = (i * 37 + round * 11) % 250;
            let bytes = pattern(4096 * (1 + (i % 3) as usize), round * 100 + i);
            let at = (page * 4096) as usize;
            f.write_all_at(&bytes, at as u64).unwrap();
            model[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        f.sync_data().unwrap();
        let d = store.data.lock().unwrap();
        assert!(
            d[..] == model[..d.len()],
            "round {round}: the store holds the writes"
        );
    }
    assert_eq!(
        store.violations.load(SeqCst),
        0,
        "a sync ran with writes in flight"
    );
    if cache.io_engine() == foliocache::EngineKind::Pool {
        assert!(
            store.max_in_flight.load(SeqCst) > 1,
            "the pool wrote one run at a time"
        );
    }
    // One write fails: the sync that covers it says so, once.
    store.fail_at.store(100 * 4096 + 10, SeqCst);
    for page in [3u64, 100, 180] {
        f.write_all_at(&[9u8; 4096], page * 4096).unwrap();
    }
    match f.sync_data() {
        Err(CacheError::Writeback { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EIO), "{source}")
        }
        r => panic!("the failed write must be reported: {r:?}"),
    }
    store.fail_at.store(u64::MAX, SeqCst);
    f.sync_data().unwrap();
    assert_eq!(store.violations.load(SeqCst), 0);
}

#[test]
fn advice_changes_readahead_and_keeps_a_read_once_scan_from_looking_hot() {
    use foliocache::Advice;
    // Any file system: advice is the cache's, not the device's.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = pattern(4 << 20, 21);
    std::fs::write(&path, &data).unwrap();
    let read_all = |f: &foliocache::CachedFile| {
        let mut buf = vec![0u8; 8192];
        for at in (0..data.len()).step_by(buf.len()) {
            f.read_exact_at(&mut buf, at as u64).unwrap();
            assert!(buf[..] == data[at..at + buf.len()]);
        }
    };

    // Random: no readahead at all for this handle.
    let cache = FolioCache::new(Config::new(16 << 20)).unwrap();
    let f = cache.open(&path).unwrap();
    f.advise(.., Advice::Random).unwrap();
    read_all(&f);
    let s = cache.stats();
    assert_eq!((s.sync_readahead, s.async_readahead), (0, 0), "{s:?}");
    // Normal again: readahead comes back.
    cache.drop_caches();
    f.advise(.., Advice::Normal).unwrap();
    read_all(&f);
    assert!(cache.stats().sync_readahead > 0);

    // Sequential: fewer, larger windows than the default for the same pass.
    let windows = |advice: Advice| {
        let cache = FolioCache::new(Config::new(16 << 20)).unwrap();
        let f = cache.open(&path).unwrap();
        f.advise(.., advice).unwrap();
        read_all(&f);
        let s = cache.stats();
        s.sync_readahead + s.async_readahead
    };
    let (normal, sequential) = (windows(Advice::Normal), windows(Advice::Sequential));
    assert!(
        sequential < normal,
        "sequential advice: {sequential} windows, normal {normal}"
    );

    // NoReuse: a page read twice through the handle is not activated; through a normal
    // handle it is.
    let activations = |advice: Advice| {
        let cache = FolioCache::new(Config::block_cache(16 << 20)).unwrap();
        let f = cache.open(&path).unwrap();
        f.advise(.., advice).unwrap();
        let mut buf = [0u8; 100];
        for _ in 0..3 {
            for page in 0..64u64 {
                f.read_exact_at(&mut buf, page * 4096).unwrap();
            }
        }
        cache.lru_add_drain_all();
        cache.lru_stats().activated
    };
    assert_eq!(
        activations(Advice::NoReuse),
        0,
        "a read-once handle activated pages"
    );
    assert!(
        activations(Advice::Normal) > 0,
        "the check must be able to fail"
    );

    // WillNeed reads the range; DontNeed drops it again.
    let cache = FolioCache::new(Config::block_cache(16 << 20)).unwrap();
    let f = cache.open(&path).unwrap();
    f.advise(0..(1 << 20), Advice::WillNeed).unwrap();
    cache.validate().unwrap();
    assert_eq!(f.cached_pages(), 256);
    // (Filled in large folios: a range drops the folios wholly inside it.)
    f.advise(0..(1 << 20), Advice::DontNeed).unwrap();
    assert_eq!(f.cached_pages(), 0);
    #[allow(clippy::reversed_empty_ranges)]
    let bad = f.advise(10..5, Advice::DontNeed);
    assert!(bad.is_err());
}

#[test]
fn a_file_on_no_block_device_has_no_device_readahead() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("no /dev/shm: nothing to check");
        return;
    }
    let f = tempfile::NamedTempFile::new_in(shm).unwrap();
    assert_eq!(foliocache::io::device_readahead_pages(f.as_file()), None);
    if let Some(dir) = disk_dir() {
        let f = tempfile::NamedTempFile::new_in(dir.path()).unwrap();
        if let Some(pages) = foliocache::io::device_readahead_pages(f.as_file()) {
            assert!(pages <= (1 << 20), "{pages} pages of readahead");
        }
    }
}

#[test]
fn an_error_in_one_request_of_a_window_fails_only_its_folios() {
    use foliocache::io::{FaultyBacking, FileBacking};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = pattern(4 << 20, 33);
    std::fs::write(&path, &data).unwrap();
    // A 1 MiB window in 4 KiB folios: eight requests of 128 KiB when the engine batches.
    let cache = FolioCache::new(
        Config::new(16 << 20)
            .readahead_pages(256)
            .max_folio_order(0),
    )
    .unwrap();
    let backing = std::sync::Arc::new(FaultyBacking::new(FileBacking::open(&path).unwrap()));
    let f = cache.open_backing("faulty", backing.clone()).unwrap();
    backing.fail_at(300 << 10); // inside the third request (256..384 KiB)
    f.readahead(0..(1 << 20))
        .expect_err("the failed request is reported");
    let batched = cache.io_engine() != foliocache::EngineKind::Sync;
    if batched {
        // Every request but the failed one is cached.
        assert_eq!(f.cached_pages(), 256 - 32, "{:?}", cache.stats());
    }
    backing.heal();
    let mut b = vec![0u8; 1 << 20];
    f.read_exact_at(&mut b, 0).unwrap();
    assert!(b[..] == data[..1 << 20], "the retry reads the right bytes");
    drop(f);
    cache.validate().unwrap();
}

#[test]
fn a_failed_read_shrinks_the_handles_readahead_window() {
    use foliocache::io::{FaultyBacking, FileBacking};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = pattern(8 << 20, 44);
    std::fs::write(&path, &data).unwrap();
    let windows = |fail: bool| {
        let cache = FolioCache::new(Config::new(64 << 20).readahead_pages(256)).unwrap();
        let backing = std::sync::Arc::new(FaultyBacking::new(FileBacking::open(&path).unwrap()));
        let f = cache.open_backing("faulty", backing.clone()).unwrap();
        let mut b = vec![0u8; 4096];
        if fail {
            backing.fail_at(0);
            f.read_exact_at(&mut b, 0)
                .expect_err("the first page fails");
            backing.heal();
            cache.drop_caches();
        }
        // The same sequential pass: a quarter of the window needs more windows.
        for at in (0..data.len()).step_by(4096) {
            f.read_exact_at(&mut b, at as u64).unwrap();
            assert!(b[..] == data[at..at + 4096]);
        }
        let s = cache.stats();
        s.sync_readahead + s.async_readahead
    };
    let (healthy, after_eio) = (windows(false), windows(true));
    // A window a quarter as wide: about four times as many windows for the same pass.
    assert!(
        after_eio >= 2 * healthy,
        "after an I/O error: {after_eio} windows, healthy {healthy}"
    );
}

#[test]
fn sync_dir_syncs_a_directory_and_refuses_a_file() {
    let dir = tempfile::tempdir().unwrap();
    foliocache::sync_dir(dir.path()).unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let e = foliocache::sync_dir(&file).expect_err("a file is not a directory");
    assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR));
    assert!(foliocache::sync_dir(dir.path().join("missing")).is_err());
}

#[test]
fn a_file_closed_while_its_reads_are_in_flight_leaves_nothing_behind() {
    let Some(dir) = disk_dir() else { return };
    let path = dir.path().join("f");
    let data = pattern(16 << 20, 55);
    std::fs::write(&path, &data).unwrap();
    let cache = FolioCache::new(Config::new(8 << 20)).unwrap();
    let baseline = cache.stats().allocated_pages;
    for round in 0..20u64 {
        drop_kernel_cache(&path);
        let f = cache.open(&path).unwrap();
        // Reads a worker is doing, and a stream's asynchronous windows, then the close.
        f.advise(0..(8 << 20), foliocache::Advice::WillNeed)
            .unwrap();
        let mut b = vec![0u8; 64 << 10];
        let at = (round * 997 * 4096) % (8 << 20);
        f.read_exact_at(&mut b, at).unwrap();
        assert!(
            b[..] == data[at as usize..at as usize + b.len()],
            "round {round}"
        );
        drop(f);
        if round % 2 == 0 {
            // The inode stays cached, unused: its pages are still readable and right.
            let f = cache.open(&path).unwrap();
            f.read_exact_at(&mut b, 0).unwrap();
            assert!(b[..] == data[..b.len()]);
        }
        cache.drop_caches();
        cache.validate().unwrap();
        assert_eq!(cache.stats().allocated_pages, baseline, "round {round}");
    }
}

/// `DirectIo::Uncached`: a buffered file whose reads and writes pass `RWF_DONTCACHE` leaves
/// (almost) nothing in the kernel's page cache, read cold or written and synced, where the
/// kernel and the file system take the flag; elsewhere (an older kernel, tmpfs) the file is
/// plainly buffered and says so. `io_mode` reports each mode.
#[test]
fn an_uncached_buffered_file_leaves_nothing_in_the_kernel_cache() {
    let Some(dir) = disk_dir() else { return };
    if std::env::var_os("FOLIOCACHE_DIRECT_IO").is_some() {
        eprintln!("FOLIOCACHE_DIRECT_IO forces a mode: this test did not run");
        return;
    }
    let path = dir.path().join("uncached");
    let len = 4 << 20;
    let data = pattern(len, 11);
    std::fs::write(&path, &data).unwrap();
    drop_kernel_cache(&path);
    // What the kernel and this file system take, asked directly.
    let mut probe = foliocache::backing::FileBacking::open(&path).unwrap();
    let supported = probe.enable_dontcache().unwrap();
    drop(probe);

    let cache = FolioCache::new(Config::new(16 << 20).direct_io(DirectIo::Uncached)).unwrap();
    let file = cache
        .open_with(&path, OpenOptions::new().write(true))
        .unwrap();
    let want = if supported {
        foliocache::IoMode::Uncached
    } else {
        foliocache::IoMode::Buffered
    };
    assert_eq!(file.io_mode(), want);
    assert_eq!(file.direct_io(), None);
    let mut buf = vec![0u8; 128 << 10];
    for at in (0..len).step_by(buf.len()) {
        file.read_exact_at(&mut buf, at as u64).unwrap();
        assert!(buf[..] == data[at..at + buf.len()], "bytes at {at}");
    }
    let after_read = kernel_resident_pct(&path);
    file.write_all_at(&vec![0xEE; 1 << 20], 0).unwrap();
    file.sync_data().unwrap();
    let after_write = kernel_resident_pct(&path);
    eprintln!("kernel residency: {after_read:.1}% after a cold read, {after_write:.1}% after a synced write");
    if supported {
        assert!(
            after_read <= 1.0,
            "read uncached: {after_read:.1}% in the kernel's cache"
        );
        assert!(
            after_write <= 1.0,
            "written uncached: {after_write:.1}% in the kernel's cache"
        );
    }
    drop(file);
    let mut model = data.clone();
    model[..1 << 20].fill(0xEE);
    assert!(std::fs::read(&path).unwrap() == model);

    // The default on the same file system: direct I/O.
    let direct = FolioCache::new(Config::new(1 << 20)).unwrap();
    let f = direct.open(&path).unwrap();
    assert!(matches!(f.io_mode(), foliocache::IoMode::Direct { align } if align > 0));
    // tmpfs takes no RWF_DONTCACHE: plainly buffered.
    if Path::new("/dev/shm").is_dir() {
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        let p = shm.path().join("f");
        std::fs::write(&p, &data[..10_000]).unwrap();
        let f = cache.open(&p).unwrap();
        assert_eq!(f.io_mode(), foliocache::IoMode::Buffered, "tmpfs");
        let mut b = vec![0u8; 10_000];
        f.read_exact_at(&mut b, 0).unwrap();
        assert!(b[..] == data[..10_000]);
    }
}
