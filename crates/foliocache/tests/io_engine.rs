//! The cache's own I/O: direct I/O on a disk file system (no second copy in the kernel's
//! page cache), the buffered fallback, many-range reads, prefetch, and asynchronous
//! readahead.
//!
//! These tests need a file system with direct I/O. They use `FOLIOCACHE_TEST_DISK_DIR`, or
//! else `/var/tmp` or `/tmp` if one of them is on such a file system, and fail otherwise,
//! saying so; `FOLIOCACHE_SKIP_DISK=1` opts out (then every test here passes vacuously and
//! prints that it did not run).

use std::os::fd::AsRawFd;
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

/// The share of `path`'s pages in the kernel's page cache, by `mincore`.
fn kernel_resident_pct(path: &Path) -> f64 {
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    if len == 0 {
        return 0.0;
    }
    // SAFETY: a read-only shared mapping of an open file, unmapped below; never read.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let pages = len.div_ceil(4096);
    let mut v = vec![0u8; pages];
    // SAFETY: `p` maps `len` bytes; `v` has a byte per page.
    assert_eq!(unsafe { libc::mincore(p, len, v.as_mut_ptr()) }, 0);
    // SAFETY: the mapping above.
    unsafe { libc::munmap(p, len) };
    v.iter().filter(|&&b| b & 1 != 0).count() as f64 * 100.0 / pages as f64
}

/// Drops the kernel's clean pages of `path`.
fn drop_kernel_cache(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: a plain system call on an open descriptor.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0);
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
