//! Inodes: a file's pages belong to the file (device, inode), not to an open handle; they
//! outlive the last close, follow renames and notice writes that bypass the cache
//! (close-to-open revalidation); the inode cache is bounded; non-regular files are refused.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};

use foliocache::{CacheError, Config, FolioCache};

const PAGE: usize = 4096;

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i / PAGE) as u8)
        .collect()
}

fn write_file(path: &Path, data: &[u8]) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

fn read_all(file: &foliocache::CachedFile) -> Vec<u8> {
    let mut buf = vec![0u8; file.len() as usize];
    file.read_exact_at(&mut buf, 0).unwrap();
    buf
}

fn cache(budget: usize) -> FolioCache {
    FolioCache::new(Config::new(budget).panic_on_bad_page(true)).unwrap()
}

/// Everything dropped: no folio left, no inode left, consistent books.
fn assert_baseline(c: &FolioCache) {
    c.drop_caches();
    let a = c.validate().unwrap();
    assert_eq!((a.allocated_pages, a.bad_pages), (0, 0));
    assert_eq!(c.stats().inodes, 0);
}

#[test]
fn pages_outlive_the_last_handle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("table.sst");
    let data = content(1 << 20, 1);
    write_file(&path, &data);
    let c = cache(4 << 20);
    let f = c.open(&path).unwrap();
    f.readahead(0..u64::MAX).unwrap();
    assert_eq!(f.cached_pages(), 256);
    drop(f);
    let s = c.stats();
    assert_eq!((s.inodes, s.unused_inodes, s.allocated_pages), (1, 1, 256));
    let io = s.io_reads;
    let f = c.open(&path).unwrap();
    assert_eq!(f.cached_pages(), 256, "the reopened file finds its pages");
    assert_eq!(read_all(&f), data);
    assert_eq!(c.stats().io_reads, io, "no I/O after the reopen");
    assert_eq!(c.stats().unused_inodes, 0);
    drop(f);
    assert_baseline(&c);
}

#[test]
fn two_paths_of_one_file_share_its_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a");
    let link = dir.path().join("b");
    let data = content(64 * PAGE, 2);
    write_file(&path, &data);
    std::fs::hard_link(&path, &link).unwrap();
    let c = cache(4 << 20);
    let a = c.open(&path).unwrap();
    a.readahead(0..u64::MAX).unwrap();
    let b = c.open(&link).unwrap();
    assert_eq!(b.cached_pages(), 64, "a hard link is the same inode");
    assert_eq!(c.stats().inodes, 1);
    drop((a, b));
    assert_baseline(&c);
}

#[test]
fn a_file_replaced_by_rename_opens_as_the_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("CURRENT");
    let old = content(10 * PAGE + 17, 3);
    let new = content(3 * PAGE + 5, 4);
    write_file(&path, &old);
    let c = cache(4 << 20);
    let held = c.open(&path).unwrap();
    assert_eq!(read_all(&held), old);
    // Write the replacement beside it and rename it over the original, as an engine
    // replaces its manifest pointer.
    let tmp = dir.path().join("CURRENT.tmp");
    write_file(&tmp, &new);
    std::fs::rename(&tmp, &path).unwrap();
    let fresh = c.open(&path).unwrap();
    assert_eq!(fresh.len(), new.len() as u64);
    assert_eq!(read_all(&fresh), new, "a fresh open reads the new file");
    assert_eq!(
        read_all(&held),
        old,
        "an open handle keeps reading the old one"
    );
    assert_eq!(c.stats().inodes, 2);
    drop((held, fresh));
    assert_baseline(&c);
}

#[test]
fn a_write_behind_the_caches_back_is_seen_at_the_next_open_or_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let first = content(8 * PAGE, 5);
    write_file(&path, &first);
    let c = cache(4 << 20);
    let f = c.open(&path).unwrap();
    assert_eq!(read_all(&f), first);
    drop(f);

    // Grown by an outside writer: the next open sees the new size and the new bytes.
    let grown = content(12 * PAGE + 100, 6);
    write_file(&path, &grown);
    let f = c.open(&path).unwrap();
    assert_eq!(f.len(), grown.len() as u64);
    assert_eq!(read_all(&f), grown);
    assert_eq!(c.stats().revalidations, 1);

    // Rewritten in place at the same size while the handle stays open: `refresh` notices
    // (the mtime is set explicitly so that a coarse clock cannot hide the change).
    let same_size = content(grown.len(), 7);
    write_file(&path, &same_size);
    let later = SystemTime::now() + Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(later)
        .unwrap();
    assert_eq!(
        read_all(&f),
        grown,
        "between opens the cache trusts its pages"
    );
    assert!(f.refresh().unwrap(), "the change is noticed");
    assert_eq!(read_all(&f), same_size);
    assert!(!f.refresh().unwrap(), "nothing changed since");

    // Shrunk: the length follows.
    write_file(&path, &same_size[..PAGE]);
    let g = c.open(&path).unwrap();
    assert_eq!(f.len(), PAGE as u64, "handles share the inode's size");
    assert_eq!(read_all(&g), &same_size[..PAGE]);
    drop((f, g));
    assert_baseline(&c);
}

#[test]
fn the_inode_cache_keeps_at_most_its_limit_of_unused_inodes() {
    let dir = tempfile::tempdir().unwrap();
    let c = FolioCache::new(Config::new(4 << 20).unused_inodes(2)).unwrap();
    let paths: Vec<_> = (0..4)
        .map(|i| {
            let p = dir.path().join(format!("{i:06}.sst"));
            write_file(&p, &content(4 * PAGE, i as u8));
            p
        })
        .collect();
    for p in &paths {
        let f = c.open(p).unwrap();
        f.readahead(0..u64::MAX).unwrap();
    }
    // Folios truncated while they wait in a per-CPU LRU batch go when it drains.
    c.lru_add_drain_all();
    let s = c.stats();
    assert_eq!((s.inodes, s.unused_inodes, s.inodes_evicted), (2, 2, 2));
    assert_eq!(s.allocated_pages, 8, "the evicted inodes' pages are freed");
    // The two most recently closed survive: reopening them costs no I/O.
    let io = s.io_reads;
    for p in &paths[2..] {
        let f = c.open(p).unwrap();
        assert_eq!(f.cached_pages(), 4);
    }
    assert_eq!(c.stats().io_reads, io);
    // A limit of 0: the last close drops the file's pages at once.
    let c0 = FolioCache::new(Config::new(1 << 20).unused_inodes(0)).unwrap();
    let f = c0.open(&paths[0]).unwrap();
    f.readahead(0..u64::MAX).unwrap();
    drop(f);
    c0.lru_add_drain_all();
    let s = c0.stats();
    assert_eq!((s.inodes, s.allocated_pages), (0, 0));
    assert_baseline(&c);
}

#[test]
fn an_owned_guard_keeps_its_inode_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = content(4 * PAGE, 8);
    write_file(&path, &data);
    let c = FolioCache::new(Config::new(1 << 20).unused_inodes(0)).unwrap();
    let owned = {
        let f = c.open(&path).unwrap();
        f.get_folio(1).unwrap().into_owned()
    };
    assert_eq!(c.stats().unused_inodes, 0);
    assert_eq!(c.stats().inodes, 1, "in use by the guard");
    assert_eq!(&owned[..], &data[PAGE..2 * PAGE]);
    drop(owned);
    assert_eq!(c.stats().inodes, 0, "the guard was the last user (limit 0)");
    assert_baseline(&c);
}

#[test]
fn handles_work_after_the_cache_handle_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = content(16 * PAGE, 9);
    write_file(&path, &data);
    let c = cache(1 << 20);
    let other = dir.path().join("g");
    write_file(&other, &data);
    drop(c.open(&other).unwrap()); // an unused inode with pages at teardown
    let f = c.open(&path).unwrap();
    drop(c);
    assert_eq!(read_all(&f), data);
}

#[test]
fn non_regular_files_are_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let c = cache(1 << 20);
    let unsupported = |p: &Path| match c.open(p) {
        Err(CacheError::Unsupported { kind, .. }) => kind,
        other => panic!("{}: expected Unsupported, got {other:?}", p.display()),
    };
    assert_eq!(unsupported(dir.path()), "a directory");
    assert_eq!(unsupported(Path::new("/dev/zero")), "a character device");
    // A FIFO without a writer: refused at once, not a blocked open.
    let fifo = dir.path().join("fifo");
    let cpath = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(cpath.as_ptr(), 0o600) }, 0);
    let t = std::time::Instant::now();
    assert_eq!(unsupported(&fifo), "a FIFO");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "the FIFO open did not block"
    );
    if Path::new("/proc/self/status").exists() {
        assert!(unsupported(Path::new("/proc/self/status")).starts_with("a procfs file"));
    }
    if Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
        assert!(
            unsupported(Path::new("/sys/kernel/mm/transparent_hugepage/enabled"))
                .starts_with("a sysfs file")
        );
    }
    let msg = c.open(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("regular files only"), "{msg}");
    assert!(matches!(
        c.open(dir.path().join("missing")),
        Err(CacheError::Open { .. })
    ));
    assert_baseline(&c);
}

#[test]
fn opens_of_one_new_file_race_to_one_inode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared");
    let data = content(32 * PAGE, 10);
    write_file(&path, &data);
    for _ in 0..20 {
        let c = cache(1 << 20);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let f = c.open(&path).unwrap();
                    let mut b = [0u8; 100];
                    f.read_exact_at(&mut b, 5000).unwrap();
                    assert_eq!(&b[..], &data[5000..5100]);
                });
            }
        });
        let s = c.stats();
        assert_eq!((s.inodes, s.unused_inodes), (1, 1), "{s:?}");
        assert_baseline(&c);
    }
}
