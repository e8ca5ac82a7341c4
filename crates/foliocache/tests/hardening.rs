//! Backings that misbehave: one that panics in the middle of a fill, one that claims more
//! bytes than it was asked for, and files that change behind the cache (truncated by another
//! process, or shorter than their reported size). The cache must neither hang, nor panic on
//! its own, nor serve bytes the file does not hold.
//!
//! Every read that could hang runs under a watchdog: a hang fails the test after a few
//! seconds instead of stalling the run.
#![cfg(not(loom))]

use std::io::{self, Write};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use foliocache::backing::{Backing, MemBacking};
use foliocache::mm::readahead::InsertMode;
use foliocache::mm::Experiment;
use foliocache::{CacheError, Config, FolioCache};

const PAGE: usize = 4096;

/// How long a read may take before the test calls it a hang.
const WATCHDOG: Duration = Duration::from_secs(10);

/// Runs `f` on its own thread and returns its result, failing the test if it has not finished
/// within [`WATCHDOG`] (the thread is left behind: the test process ends anyway). A panic of
/// `f` is passed on.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(payload) => panic::resume_unwind(payload),
            Ok(()) => unreachable!("the worker sends before it ends"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not finish within {WATCHDOG:?}: it hangs")
        }
    }
}

fn content(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / PAGE) as u8).collect()
}

/// The configurations whose fill paths differ: batched and single-folio readahead, and no
/// readahead (a miss reads one folio, `read_one`).
fn configs() -> Vec<(&'static str, Config)> {
    let base = || Config::new(4 << 20).panic_on_bad_page(false);
    vec![
        (
            "batched",
            base().experiment(Experiment::new().insert_mode(InsertMode::Batched)),
        ),
        (
            "single",
            base().experiment(Experiment::new().insert_mode(InsertMode::Single)),
        ),
        ("no readahead", base().readahead_pages(0)),
    ]
}

/// Panics on the reads it is told to (after optionally waiting to be released), and reads
/// `data` otherwise.
#[derive(Debug)]
struct PanickyBacking {
    data: MemBacking,
    /// Reads that still have to panic.
    panics_left: AtomicU32,
    /// When set, a panicking read first announces itself and waits for `release`.
    gate: Option<Arc<Gate>>,
}

#[derive(Debug, Default)]
struct Gate {
    /// (a read is inside the backing, the read may go on)
    state: Mutex<(bool, bool)>,
    cv: Condvar,
}

impl Gate {
    fn wait_entered(&self) {
        let mut s = self.state.lock().unwrap();
        while !s.0 {
            s = self.cv.wait(s).unwrap();
        }
    }

    fn release(&self) {
        self.state.lock().unwrap().1 = true;
        self.cv.notify_all();
    }

    fn enter_and_wait(&self) {
        let mut s = self.state.lock().unwrap();
        s.0 = true;
        self.cv.notify_all();
        while !s.1 {
            s = self.cv.wait(s).unwrap();
        }
    }
}

impl Backing for PanickyBacking {
    fn size(&self) -> io::Result<u64> {
        self.data.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let panics = self
            .panics_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if panics {
            if let Some(gate) = &self.gate {
                gate.enter_and_wait();
            }
            panic!("the backing panics reading byte {offset}");
        }
        self.data.read_at(buf, offset)
    }
}

#[test]
fn a_backing_that_panics_leaves_its_page_readable() {
    for (name, config) in configs() {
        within(name, move || {
            let data = content(64 * PAGE);
            let cache = FolioCache::new(config).unwrap();
            let backing = PanickyBacking {
                data: MemBacking(data.clone()),
                panics_left: AtomicU32::new(1),
                gate: None,
            };
            let file = cache.open_backing("panicky", backing).unwrap();
            let mut buf = vec![0u8; PAGE];
            let r = panic::catch_unwind(AssertUnwindSafe(|| file.read_at(&mut buf, 5 * 4096)));
            assert!(r.is_err(), "{name}: the backing's panic reaches the caller");
            assert_eq!(
                file.cached_pages(),
                0,
                "{name}: no page of the failed fill stays"
            );
            // Another handle retries the page (it used to loop forever finding the folio
            // unlocked, neither uptodate nor failed).
            let other = file.reopen();
            assert_eq!(other.read_at(&mut buf, 5 * 4096).unwrap(), PAGE, "{name}");
            assert_eq!(buf, data[5 * PAGE..6 * PAGE], "{name}");
            // And the panicking handle itself can read on.
            assert_eq!(
                file.read_at(&mut buf, 5 * 4096 + 10).unwrap(),
                PAGE,
                "{name}"
            );
            assert_eq!(buf, data[5 * PAGE + 10..6 * PAGE + 10], "{name}");
            cache.validate().expect("cache consistent");
        });
    }
}

#[test]
fn a_reader_waiting_on_a_panicking_fill_wakes_with_an_error() {
    for (name, config) in configs() {
        within(name, move || {
            let data = content(16 * PAGE);
            let cache = FolioCache::new(config).unwrap();
            let gate = Arc::new(Gate::default());
            let backing = PanickyBacking {
                data: MemBacking(data.clone()),
                panics_left: AtomicU32::new(1),
                gate: Some(gate.clone()),
            };
            let file = cache.open_backing("panicky", backing).unwrap();
            let waiter_file = file.reopen();
            thread::scope(|s| {
                let filler = s.spawn(|| {
                    let mut buf = vec![0u8; PAGE];
                    panic::catch_unwind(AssertUnwindSafe(|| file.read_at(&mut buf, 0))).is_err()
                });
                // The filler holds page 0 locked inside the backing.
                gate.wait_entered();
                let waits_before = cache.stats().waits_on_locked;
                let waiter = s.spawn(|| {
                    let mut buf = vec![0u8; PAGE];
                    waiter_file.read_at(&mut buf, 0)
                });
                // Let the waiter go to sleep on the folio before the filler panics.
                let deadline = Instant::now() + Duration::from_secs(5);
                while cache.stats().waits_on_locked == waits_before && Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(1));
                }
                assert!(
                    cache.stats().waits_on_locked > waits_before,
                    "{name}: the second reader sleeps on the locked folio"
                );
                thread::sleep(Duration::from_millis(20));
                gate.release();
                assert!(filler.join().unwrap(), "{name}: the filler's read panics");
                match waiter.join().unwrap() {
                    Err(e) => assert!(e.is_io(), "{name}: the waiter fails with I/O: {e}"),
                    Ok(n) => panic!("{name}: the waiter read {n} bytes of a failed fill"),
                }
            });
            // A later read retries.
            let mut buf = vec![0u8; PAGE];
            assert_eq!(waiter_file.read_at(&mut buf, 0).unwrap(), PAGE, "{name}");
            assert_eq!(buf, data[..PAGE], "{name}");
            cache.validate().expect("cache consistent");
        });
    }
}

/// Claims to have read ten bytes more than it was given room for.
#[derive(Debug)]
struct OverlongBacking;

impl Backing for OverlongBacking {
    fn size(&self) -> io::Result<u64> {
        Ok(64 * PAGE as u64)
    }

    fn read_at(&self, buf: &mut [u8], _offset: u64) -> io::Result<usize> {
        buf.fill(1);
        Ok(buf.len() + 10)
    }
}

#[test]
fn a_backing_returning_more_than_asked_is_invalid_data() {
    for (name, config) in configs() {
        let cache = FolioCache::new(config).unwrap();
        let file = cache.open_backing("overlong", OverlongBacking).unwrap();
        let mut buf = vec![0u8; 100];
        match file.read_at(&mut buf, 3 * PAGE as u64) {
            Err(CacheError::Io { source, .. }) => {
                assert_eq!(source.kind(), io::ErrorKind::InvalidData, "{name}");
                let msg = source.to_string();
                assert!(msg.contains("OverlongBacking"), "{name}: names it: {msg}");
                assert!(
                    msg.contains("byte 12288"),
                    "{name}: names the offset: {msg}"
                );
            }
            r => panic!("{name}: expected an InvalidData I/O error, got {r:?}"),
        }
        assert_eq!(file.cached_pages(), 0, "{name}: nothing cached");
        cache.validate().expect("cache consistent");
    }
}

#[test]
fn a_file_truncated_behind_the_cache_reports_file_changed() {
    const LEN: usize = 8 << 20;
    const CUT: u64 = 1 << 20;
    for (name, config) in configs() {
        let data = content(LEN);
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&data).unwrap();
        f.flush().unwrap();
        let cache = FolioCache::new(config).unwrap();
        let file = cache.open(f.path()).unwrap();
        let mut buf = vec![0u8; PAGE];
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), PAGE);
        // Another process truncates the file.
        f.as_file().set_len(CUT).unwrap();
        for handle in [&file, &file.reopen()] {
            match handle.read_at(&mut buf, 4 << 20) {
                Err(CacheError::FileChanged {
                    offset,
                    expected_size,
                    actual_size,
                    ..
                }) => {
                    assert_eq!(offset, 4 << 20, "{name}");
                    assert_eq!(expected_size, LEN as u64, "{name}");
                    assert_eq!(actual_size, CUT, "{name}");
                }
                r => panic!("{name}: a read past the new end got {r:?}, not FileChanged"),
            }
        }
        let err = file.read_at(&mut buf, 4 << 20).unwrap_err();
        assert!(err.is_file_changed());
        let msg = err.to_string();
        assert!(msg.contains("changed behind the cache"), "{msg}");
        assert!(msg.contains("open it again"), "tells what to do: {msg}");
        // Nothing past the new end was cached; what was cached before stays readable.
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), PAGE);
        assert_eq!(buf, data[..PAGE]);
        let mut big = vec![0u8; 64 * PAGE];
        assert!(file.read_at(&mut big, 4 << 20).is_err());
        cache.validate().expect("cache consistent");
    }
}

/// Reports a whole page but holds only 23 bytes.
#[derive(Debug)]
struct ShortBacking(MemBacking);

impl Backing for ShortBacking {
    fn size(&self) -> io::Result<u64> {
        Ok(PAGE as u64)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
}

#[test]
fn a_file_shorter_than_its_size_reports_file_changed() {
    for (name, config) in configs() {
        let cache = FolioCache::new(config).unwrap();
        let file = cache
            .open_backing("short", ShortBacking(MemBacking(vec![5u8; 23])))
            .unwrap();
        let mut buf = vec![0u8; PAGE];
        match file.read_at(&mut buf, 0) {
            Err(CacheError::FileChanged {
                offset,
                expected_size,
                actual_size,
                ..
            }) => assert_eq!(
                (offset, expected_size, actual_size),
                (23, 4096, 4096),
                "{name}"
            ),
            r => panic!("{name}: expected FileChanged, got {r:?}"),
        }
        assert_eq!(file.cached_pages(), 0, "{name}: no zeros cached");
        cache.validate().expect("cache consistent");
    }
}

/// A read that ends exactly at the size stays a plain EOF: the partial last page is served,
/// with no error and no extra read.
#[test]
fn a_true_eof_is_not_a_change() {
    static READS: AtomicU32 = AtomicU32::new(0);
    static COUNT: AtomicBool = AtomicBool::new(false);
    #[derive(Debug)]
    struct Counting(MemBacking);
    impl Backing for Counting {
        fn size(&self) -> io::Result<u64> {
            self.0.size()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            if COUNT.load(Ordering::SeqCst) {
                READS.fetch_add(1, Ordering::SeqCst);
            }
            self.0.read_at(buf, offset)
        }
    }
    let data = content(PAGE + 100);
    let cache = FolioCache::new(Config::new(1 << 20).readahead_pages(0)).unwrap();
    let file = cache
        .open_backing("eof", Counting(MemBacking(data.clone())))
        .unwrap();
    let mut buf = vec![0u8; PAGE];
    COUNT.store(true, Ordering::SeqCst);
    assert_eq!(file.read_at(&mut buf, PAGE as u64).unwrap(), 100);
    assert_eq!(buf[..100], data[PAGE..]);
    assert_eq!(READS.load(Ordering::SeqCst), 1, "no probing read at EOF");
}
