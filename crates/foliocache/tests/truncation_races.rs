//! Truncation against concurrent fills: bytes a `set_len` cuts never come back.
//!
//! A shrinking `set_len` publishes the new size, zeroes the cached tail of the page the new end
//! falls in, drops the pages past it, and cuts the backing file last. A read that misses the
//! tail page in between must not fill it from the still-uncut file: the next grow (or a write
//! past the end) would expose the cut bytes, and writeback would save them. The cache orders
//! fills and truncations as the kernel's `invalidate_lock` does, and a fill keeps no byte past
//! the size it was started under.

use std::io::{self, IoSlice, IoSliceMut};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use foliocache::backing::{Backing, FileAttrs, FileBacking};
use foliocache::{Config, FolioCache, OpenOptions};

const PAGE: usize = 4096;

fn rw() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true);
    o
}

/// A file whose shrinking `set_len` pauses before it cuts the file, until a reader says it
/// is done or half a second passes (the reader may be held off by the truncation, as it
/// should be).
#[derive(Debug)]
struct SlowCut {
    inner: FileBacking,
    in_cut: Arc<AtomicBool>,
    reader_done: Arc<AtomicBool>,
}

impl Backing for SlowCut {
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn attrs(&self) -> io::Result<FileAttrs> {
        self.inner.attrs()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        self.inner.read_vectored_at(bufs, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.inner.write_at(buf, offset)
    }
    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        self.inner.write_vectored_at(bufs, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn set_len(&self, size: u64) -> io::Result<()> {
        if size < self.inner.size()? {
            self.in_cut.store(true, Ordering::SeqCst);
            let until = Instant::now() + Duration::from_millis(500);
            while !self.reader_done.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.inner.set_len(size)
    }
}

fn slow_cut(path: &Path) -> (SlowCut, Arc<AtomicBool>, Arc<AtomicBool>) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let in_cut = Arc::new(AtomicBool::new(false));
    let reader_done = Arc::new(AtomicBool::new(false));
    (
        SlowCut {
            inner: FileBacking::from_file(file, path),
            in_cut: in_cut.clone(),
            reader_done: reader_done.clone(),
        },
        in_cut,
        reader_done,
    )
}

/// The sequence of the report, made deterministic: 8,192 bytes of 0xab cut to 100 while
/// another handle reads offset 0 (a miss), then grown to 4,096. Before the fix the read filled
/// page 0 from the uncut file and the grow exposed 3,996 bytes of 0xab, which the sync wrote.
#[test]
fn a_read_during_a_shrink_does_not_bring_the_cut_bytes_back() {
    for readahead in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut");
        std::fs::write(&path, vec![0xAB; 2 * PAGE]).unwrap();
        let (b, in_cut, reader_done) = slow_cut(&path);
        let mut config = Config::new(1 << 20).panic_on_bad_page(true);
        if !readahead {
            config = config.readahead_pages(0);
        }
        let c = FolioCache::new(config).unwrap();
        let f = c.open_backing(&path, b).unwrap();
        let reader = f.reopen();
        std::thread::scope(|s| {
            let cutter = s.spawn(|| f.set_len(100).unwrap());
            while !in_cut.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            // The truncation is between its look at the cache and its cut of the file.
            let mut buf = vec![0u8; PAGE];
            let n = reader.read_at(&mut buf, 0).unwrap();
            reader_done.store(true, Ordering::SeqCst);
            cutter.join().unwrap();
            // Before or after the cut, never a mix: 8,192 bytes read before it, 100 after.
            assert!(n == 100 || n == PAGE, "read {n} bytes");
            assert!(buf[..n.min(100)].iter().all(|&x| x == 0xAB));
        });
        f.set_len(PAGE as u64).unwrap();
        let mut page = vec![0u8; PAGE];
        f.read_exact_at(&mut page, 0).unwrap();
        let stale = page[100..].iter().filter(|&&x| x != 0).count();
        assert_eq!(
            stale, 0,
            "readahead {readahead}: cut bytes back in the cache"
        );
        f.sync_data().unwrap();
        let disk = std::fs::read(&path).unwrap();
        assert_eq!(disk.len(), PAGE);
        assert!(disk[..100].iter().all(|&x| x == 0xAB));
        assert!(
            disk[100..].iter().all(|&x| x == 0),
            "readahead {readahead}: cut bytes written back"
        );
        drop((f, reader));
        c.drop_caches();
        let a = c.validate().unwrap();
        assert_eq!(a.allocated_pages, 0);
    }
}

/// Many readers (readahead on, every page a miss after each drop) against one truncator on a
/// real file: after every shrink and grow, the grown range reads as zeros in the cache and,
/// after a sync, on disk. Before the fix this failed in about 2 runs in 3.
#[test]
fn a_shrinking_truncator_against_readers_never_exposes_cut_bytes() {
    const PAGES: usize = 16;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stress");
    let c = FolioCache::new(Config::new(512 * PAGE).panic_on_bad_page(true)).unwrap();
    let f = c.open_with(&path, &rw()).unwrap();
    let full = vec![0xABu8; PAGES * PAGE];
    let rounds = if cfg!(debug_assertions) { 150 } else { 1500 };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (reader, stop) = (f.reopen(), &stop);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                let mut buf = vec![0u8; 3 * PAGE];
                while !stop.load(Ordering::Relaxed) {
                    let off = rng.random_range(0..(PAGES * PAGE) as u64);
                    let len = rng.random_range(1..buf.len());
                    let n = reader.read_at(&mut buf[..len], off).unwrap();
                    assert!(
                        buf[..n].iter().all(|&x| x == 0xAB || x == 0),
                        "a byte never written"
                    );
                }
            });
        }
        let mut rng = StdRng::seed_from_u64(99);
        for round in 0..rounds {
            f.write_all_at(&full, 0).unwrap();
            f.sync_data().unwrap();
            // Clean pages of an open file go: the readers' next reads are misses.
            c.drop_caches();
            let cut = rng.random_range(0..(PAGES * PAGE) as u64);
            f.set_len(cut).unwrap();
            let grown = rng.random_range(cut..=(PAGES * PAGE) as u64);
            f.set_len(grown).unwrap();
            let mut back = vec![0u8; (grown - cut) as usize];
            f.read_exact_at(&mut back, cut).unwrap();
            if let Some(i) = back.iter().position(|&x| x != 0) {
                stop.store(true, Ordering::Relaxed);
                panic!(
                    "round {round}: cut to {cut}, grown to {grown}: byte {} came back",
                    cut + i as u64
                );
            }
            if round % 8 == 0 {
                f.sync_data().unwrap();
                let disk = std::fs::read(&path).unwrap();
                assert_eq!(disk.len() as u64, grown);
                if let Some(i) = disk[cut as usize..].iter().position(|&x| x != 0) {
                    stop.store(true, Ordering::Relaxed);
                    panic!(
                        "round {round}: cut to {cut}, grown to {grown}: byte {} written back",
                        cut + i as u64
                    );
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    drop(f);
    c.drop_caches();
    let a = c.validate().unwrap();
    assert_eq!((a.allocated_pages, a.bad_pages), (0, 0));
}
