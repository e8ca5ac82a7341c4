//! The engines against real files in `/tmp`: every test of the request contract runs under
//! each engine (`sync`, `pool`, `uring` modules), then the pool's and the ring's own cases,
//! and `FileBacking`'s bounce buffer for unaligned direct I/O.
//!
//! The io_uring tests never skip silently: where io_uring is unavailable they fail, naming
//! `FOLIOCACHE_SKIP_URING=1`, the one way to opt out of them.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, IoSliceMut, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rand::{Rng, SeedableRng};

use super::*;
use crate::io::{FileBacking, MemBacking};

/// The variable that lets the io_uring tests pass where io_uring is unavailable.
const SKIP_URING: &str = "FOLIOCACHE_SKIP_URING";

/// The engine a test module runs, or `None` for a uring test opted out of.
fn engine(name: &str) -> Option<Engine> {
    match name {
        "sync" => Some(Engine::sync()),
        "pool" => Some(Engine::pool(4).expect("start a pool")),
        "uring" => {
            if let Err(e) = uring_available() {
                if std::env::var(SKIP_URING).as_deref() == Ok("1") {
                    eprintln!("io_uring unavailable ({e}): skipped, as {SKIP_URING}=1 asks");
                    return None;
                }
                panic!(
                    "io_uring is unavailable here ({e}); set {SKIP_URING}=1 to skip the io_uring \
                     tests"
                );
            }
            Some(Engine::exactly(IoEngine::Uring).expect("the uring engine"))
        }
        _ => unreachable!("no engine {name}"),
    }
}

/// Deterministic file contents.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random()).collect()
}

/// A temporary file in `/tmp` holding `data`.
fn temp_file(data: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new_in("/tmp").expect("a temporary file in /tmp");
    f.write_all(data).unwrap();
    f.flush().unwrap();
    f
}

/// A backing reading and writing `f`'s file.
fn read_write(f: &tempfile::NamedTempFile) -> FileBacking {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(f.path())
        .unwrap();
    FileBacking::from_file(file, f.path())
}

/// A buffer of `len` bytes at a 4096-aligned address (a `Vec` over-allocated and offset).
struct Aligned {
    v: Vec<u8>,
    at: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let v = vec![0u8; len + 4096];
        let at = v.as_ptr().align_offset(4096);
        Aligned { v, at, len }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.at..self.at + self.len]
    }

    fn bytes(&self) -> &[u8] {
        &self.v[self.at..self.at + self.len]
    }
}

fn results(reqs: &mut [Req<'_>]) -> Vec<io::Result<usize>> {
    reqs.iter_mut().map(|r| r.take_result()).collect()
}

// ---- the request contract, under each engine ----------------------------------------------

fn random_reads_match_pread(e: &Engine) {
    const LEN: usize = 4 << 20;
    let data = pattern(LEN, 1);
    let f = temp_file(&data);
    let b = FileBacking::open(f.path()).unwrap();
    let file = File::open(f.path()).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let offsets: Vec<u64> = (0..64)
        .map(|_| rng.random_range(0..(LEN - 4096) as u64))
        .collect();
    let mut bufs = vec![vec![0u8; 4096]; 64];
    let mut reqs: Vec<Req<'_>> = bufs
        .iter_mut()
        .zip(&offsets)
        .map(|(buf, &o)| Req::read(o, vec![buf.as_mut_slice()]))
        .collect();
    e.run(&b, &mut reqs);
    for (r, &o) in results(&mut reqs).into_iter().zip(&offsets) {
        assert_eq!(r.unwrap(), 4096, "read at {o}");
    }
    for (buf, &o) in bufs.iter().zip(&offsets) {
        let mut want = vec![0u8; 4096];
        assert_eq!(file.read_at(&mut want, o).unwrap(), 4096);
        assert!(buf == &want, "read at {o} differs from pread");
    }
}

fn a_batch_bigger_than_the_ring_completes(e: &Engine) {
    let data = pattern(300 * 512, 3);
    let f = temp_file(&data);
    let b = FileBacking::open(f.path()).unwrap();
    let mut bufs = vec![vec![0u8; 512]; 300];
    let mut reqs: Vec<Req<'_>> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, buf)| Req::read(i as u64 * 512, vec![buf.as_mut_slice()]))
        .collect();
    e.run(&b, &mut reqs);
    assert!(results(&mut reqs).into_iter().all(|r| r.unwrap() == 512));
    assert!(bufs.concat() == data);
}

fn vectored_reads_scatter_in_order(e: &Engine) {
    let data = pattern(64 << 10, 4);
    let f = temp_file(&data);
    let b = FileBacking::open(f.path()).unwrap();
    let (mut x, mut y, mut z) = (vec![0u8; 100], vec![0u8; 4096], vec![0u8; 1000]);
    // More buffers than one call takes: the request completes short, at IOV_MAX of them.
    let mut many = vec![[0u8; 8]; 1100];
    let mut reqs = vec![
        Req::read(777, vec![&mut x[..], &mut y[..], &mut z[..]]),
        Req::read(10_000, many.iter_mut().map(|m| m.as_mut_slice()).collect()),
    ];
    e.run(&b, &mut reqs);
    let r = results(&mut reqs);
    assert_eq!(*r[0].as_ref().unwrap(), 5196);
    assert_eq!(
        *r[1].as_ref().unwrap(),
        1024 * 8,
        "capped at IOV_MAX buffers"
    );
    assert!([x, y, z].concat() == data[777..777 + 5196]);
    assert!(many[..1024].concat() == data[10_000..10_000 + 8192]);
}

fn writes_then_reads_back(e: &Engine) {
    let f = temp_file(&pattern(64 << 10, 5));
    let b = read_write(&f);
    let mut model = std::fs::read(f.path()).unwrap();
    let chunks: Vec<Vec<u8>> = (0..16).map(|i| pattern(4096, 100 + i)).collect();
    // Even chunks whole, odd ones as two buffers; the last one extends the file.
    let mut reqs: Vec<Req<'_>> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let at = i as u64 * 8192 + 100;
            if i % 2 == 0 {
                Req::write(at, vec![&c[..]])
            } else {
                Req::write(at, vec![&c[..1000], &c[1000..]])
            }
        })
        .collect();
    e.run(&b, &mut reqs);
    for (i, r) in results(&mut reqs).into_iter().enumerate() {
        assert_eq!(r.unwrap(), 4096, "write {i}");
        let at = i * 8192 + 100;
        if model.len() < at + 4096 {
            model.resize(at + 4096, 0);
        }
        model[at..at + 4096].copy_from_slice(&chunks[i]);
    }
    let mut sync = [Req::sync_data()];
    e.run(&b, &mut sync);
    assert_eq!(sync[0].take_result().unwrap(), 0);
    let mut back = vec![vec![0u8; 4096]; 16];
    let mut reqs: Vec<Req<'_>> = back
        .iter_mut()
        .enumerate()
        .map(|(i, buf)| Req::read(i as u64 * 8192 + 100, vec![buf.as_mut_slice()]))
        .collect();
    e.run(&b, &mut reqs);
    assert!(results(&mut reqs).into_iter().all(|r| r.unwrap() == 4096));
    assert!(back == chunks);
    assert!(std::fs::read(f.path()).unwrap() == model);
}

fn a_short_read_at_eof_counts_what_there_is(e: &Engine) {
    let data = pattern(10_000, 6);
    let f = temp_file(&data);
    let b = FileBacking::open(f.path()).unwrap();
    let (mut x, mut y, mut z) = (vec![0u8; 4096], vec![0u8; 4096], vec![0u8; 4096]);
    let (mut v1, mut v2) = (vec![0u8; 1000], vec![0u8; 4096]);
    let mut reqs = vec![
        Req::read(8192, vec![&mut x[..]]),
        Req::read(10_000, vec![&mut y[..]]),
        Req::read(20_000, vec![&mut z[..]]),
        Req::read(9_500, vec![&mut v1[..], &mut v2[..]]),
    ];
    e.run(&b, &mut reqs);
    let counts: Vec<usize> = results(&mut reqs).into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(counts, [1808, 0, 0, 500]);
    assert!(x[..1808] == data[8192..]);
    assert!(v1[..500] == data[9_500..]);
}

/// A file opened write-only behind a readable one: reads whose offset and buffer are
/// 512-aligned go to the write-only descriptor (`EBADF`), the others to the readable one.
/// Its `raw_io` gives the write-only descriptor as if open `O_DIRECT` at 512, so the uring
/// engine sends the aligned reads to the ring and runs the others inline, as it would for a
/// direct file whose descriptor went bad.
#[derive(Debug)]
struct HalfBroken {
    good: File,
    bad: File,
}

impl HalfBroken {
    fn new(f: &tempfile::NamedTempFile) -> HalfBroken {
        HalfBroken {
            good: File::open(f.path()).unwrap(),
            bad: OpenOptions::new().write(true).open(f.path()).unwrap(),
        }
    }

    fn raw(&self) -> RawIo {
        RawIo::new(self.bad.as_raw_fd(), 512)
    }
}

impl Backing for HalfBroken {
    fn size(&self) -> io::Result<u64> {
        Ok(self.good.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if self
            .raw()
            .fits(offset, [(buf.as_ptr() as usize, buf.len())])
        {
            self.bad.read_at(buf, offset)
        } else {
            self.good.read_at(buf, offset)
        }
    }

    fn raw_io(&self) -> Option<RawIo> {
        Some(self.raw())
    }
}

fn a_failing_read_fails_only_itself(e: &Engine) {
    let data = pattern(64 << 10, 7);
    let f = temp_file(&data);
    let b = HalfBroken::new(&f);
    let (mut a1, mut a2) = (Aligned::new(4096), Aligned::new(4096));
    let (mut u1, mut u2) = (vec![0u8; 100], vec![0u8; 3000]);
    let mut reqs = vec![
        Req::read(0, vec![a1.bytes_mut()]),
        Req::read(100, vec![&mut u1[..]]),
        Req::read(8192, vec![a2.bytes_mut()]),
        Req::read(5001, vec![&mut u2[..]]),
    ];
    e.run(&b, &mut reqs);
    let r = results(&mut reqs);
    for i in [0, 2] {
        let err = r[i]
            .as_ref()
            .expect_err("a read of a write-only descriptor");
        assert_eq!(err.raw_os_error(), Some(libc::EBADF), "request {i}: {err}");
    }
    assert_eq!(*r[1].as_ref().unwrap(), 100);
    assert_eq!(*r[3].as_ref().unwrap(), 3000);
    assert!(u1 == data[100..200]);
    assert!(u2 == data[5001..8001]);
}

/// A file opened write-only: writes work, reads fail with `EBADF`.
#[derive(Debug)]
struct WriteOnly(File);

impl Backing for WriteOnly {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.0.write_at(buf, offset)
    }

    fn raw_io(&self) -> Option<RawIo> {
        Some(RawIo::new(self.0.as_raw_fd(), 0))
    }
}

fn a_failing_read_leaves_the_writes_of_its_batch(e: &Engine) {
    let f = temp_file(&[0u8; 8192]);
    let b = WriteOnly(OpenOptions::new().write(true).open(f.path()).unwrap());
    let mut buf = [0u8; 100];
    let w = [0x5Au8; 100];
    let mut reqs = vec![
        Req::read(0, vec![&mut buf[..]]),
        Req::write(1000, vec![&w[..]]),
        Req::sync_data(),
    ];
    e.run(&b, &mut reqs);
    let r = results(&mut reqs);
    assert_eq!(r[0].as_ref().unwrap_err().raw_os_error(), Some(libc::EBADF));
    assert_eq!(*r[1].as_ref().unwrap(), 100);
    assert_eq!(*r[2].as_ref().unwrap(), 0);
    assert!(std::fs::read(f.path()).unwrap()[1000..1100] == w[..]);
}

fn a_backing_without_a_descriptor_runs_through_its_methods(e: &Engine) {
    let data = pattern(20_000, 8);
    let b = MemBacking(data.clone());
    let mut bufs = vec![vec![0u8; 1000]; 20];
    let mut reqs: Vec<Req<'_>> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, buf)| Req::read(i as u64 * 1000, vec![buf.as_mut_slice()]))
        .collect();
    e.run(&b, &mut reqs);
    assert!(results(&mut reqs).into_iter().all(|r| r.unwrap() == 1000));
    assert!(bufs.concat() == data);
}

fn batches_from_many_threads_at_once(e: &Engine) {
    let data = pattern(256 << 10, 9);
    let f = temp_file(&data);
    let b = FileBacking::open(f.path()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (b, data) = (&b, &data);
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                for _ in 0..20 {
                    let offsets: Vec<u64> =
                        (0..16).map(|_| rng.random_range(0..250_000u64)).collect();
                    let mut bufs = vec![vec![0u8; 2048]; 16];
                    let mut reqs: Vec<Req<'_>> = bufs
                        .iter_mut()
                        .zip(&offsets)
                        .map(|(buf, &o)| Req::read(o, vec![buf.as_mut_slice()]))
                        .collect();
                    e.run(b, &mut reqs);
                    for (r, &o) in results(&mut reqs).into_iter().zip(&offsets) {
                        let n = r.unwrap();
                        assert_eq!(n, 2048.min(data.len() - o as usize));
                    }
                    for (buf, &o) in bufs.iter().zip(&offsets) {
                        let o = o as usize;
                        let n = 2048.min(data.len() - o);
                        assert!(buf[..n] == data[o..o + n]);
                    }
                }
            });
        }
    });
}

/// Counts the calls that reach the backing's methods (the ones an engine did not send to
/// the descriptor itself).
#[derive(Debug)]
struct Counting<B> {
    inner: B,
    calls: AtomicUsize,
}

impl<B: Backing> Counting<B> {
    fn new(inner: B) -> Counting<B> {
        Counting {
            inner,
            calls: AtomicUsize::new(0),
        }
    }

    fn count(&self) {
        // ORDERING: Relaxed; pairs with the load in `Counting::calls`, which runs after
        // `Engine::run` returned: the engine's completion wait orders every call of the batch
        // before it.
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    fn calls(&self) -> usize {
        // ORDERING: Relaxed; pairs with the increments in `Counting::count`, ordered before
        // this by the return of `Engine::run`.
        self.calls.load(Ordering::Relaxed)
    }
}

impl<B: Backing> Backing for Counting<B> {
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.count();
        self.inner.read_at(buf, offset)
    }

    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        self.count();
        self.inner.read_vectored_at(bufs, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.count();
        self.inner.write_at(buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        self.count();
        self.inner.write_vectored_at(bufs, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.count();
        self.inner.sync_data()
    }

    fn raw_io(&self) -> Option<RawIo> {
        self.inner.raw_io()
    }
}

/// A `FileBacking` on a file in `/tmp` holding `data`, switched to direct I/O; fails if the
/// file system there has none.
fn direct_file(data: &[u8]) -> (tempfile::NamedTempFile, FileBacking, u32) {
    let f = temp_file(data);
    let mut b = read_write(&f);
    let align = b
        .enable_direct()
        .expect("enable_direct")
        .expect("the file system of /tmp (ext4 here) supports direct I/O");
    // SAFETY: `fcntl(F_GETFL)` on an open descriptor.
    let flags = unsafe { libc::fcntl(b.raw_io().unwrap().fd, libc::F_GETFL) };
    assert!(flags & libc::O_DIRECT != 0, "the descriptor is O_DIRECT");
    (f, b, align)
}

fn direct_io_aligned_and_not(e: &Engine) {
    let data = pattern(64 << 10, 10);
    let (f, b, align) = direct_file(&data);
    assert!(
        align.is_power_of_two() && align <= 4096,
        "alignment {align}"
    );
    let b = Counting::new(b);
    let mut model = data.clone();
    let to_ring = e.kind() == EngineKind::Uring;

    let mut w = Aligned::new(8192);
    w.bytes_mut().copy_from_slice(&pattern(8192, 11));
    let small = pattern(100, 12);
    let mut reqs = vec![
        Req::write(16384, vec![w.bytes()]),
        Req::write(5000, vec![&small[..]]),
    ];
    e.run(&b, &mut reqs);
    let r = results(&mut reqs);
    assert_eq!(*r[0].as_ref().unwrap(), 8192);
    assert_eq!(*r[1].as_ref().unwrap(), 100);
    model[16384..16384 + 8192].copy_from_slice(w.bytes());
    model[5000..5100].copy_from_slice(&small);
    let expect = if to_ring { 1 } else { 2 };
    assert_eq!(
        b.calls(),
        expect,
        "only the unaligned write reaches the methods"
    );

    let (mut r1, mut r2, mut r3) = (Aligned::new(8192), Aligned::new(4096), Aligned::new(4096));
    let mut u = vec![0u8; 300];
    let mut reqs = vec![
        Req::read(16384, vec![r1.bytes_mut()]),
        Req::read(0, vec![r2.bytes_mut(), r3.bytes_mut()]),
        Req::read(4900, vec![&mut u[..]]),
    ];
    e.run(&b, &mut reqs);
    let r = results(&mut reqs);
    assert_eq!(*r[0].as_ref().unwrap(), 8192);
    assert_eq!(*r[1].as_ref().unwrap(), 8192);
    assert_eq!(*r[2].as_ref().unwrap(), 300);
    assert!(r1.bytes() == &model[16384..16384 + 8192]);
    assert!([r2.bytes(), r3.bytes()].concat() == model[..8192]);
    assert!(u == model[4900..5200]);
    let expect = if to_ring { 2 } else { 5 };
    assert_eq!(
        b.calls(),
        expect,
        "only the unaligned read reaches the methods"
    );

    let mut sync = [Req::sync_data()];
    e.run(&b, &mut sync);
    assert_eq!(sync[0].take_result().unwrap(), 0);
    assert!(std::fs::read(f.path()).unwrap() == model);
}

/// One `#[test]` per test function above, in a module named after the engine.
fn each_completion_is_announced_once_with_its_result(e: &Engine) {
    // More requests than the ring has entries: completions come back while others are in
    // flight.
    const N: usize = 300;
    let data = pattern(N * 4096, 4);
    let f = temp_file(&data);
    let b = FileBacking::open(f.path()).unwrap();
    let mut bufs = vec![vec![0u8; 4096]; N];
    let mut reqs: Vec<Req<'_>> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, buf)| Req::read(((i * 7) % N * 4096) as u64, vec![buf.as_mut_slice()]))
        .collect();
    let mut seen = vec![0usize; N];
    e.run_each(&b, &mut reqs, &mut |i, r| {
        assert_eq!(*r.as_ref().unwrap(), 4096, "request {i}");
        seen[i] += 1;
    });
    assert!(
        seen.iter().all(|&n| n == 1),
        "announced once each: {seen:?}"
    );
    for (i, buf) in bufs.iter().enumerate() {
        let at = (i * 7) % N * 4096;
        assert!(buf[..] == data[at..at + 4096], "request {i}");
    }
}

macro_rules! engine_tests {
    ($engine:ident: $($test:ident),* $(,)?) => {
        mod $engine {
            $(
                #[test]
                fn $test() {
                    if let Some(e) = super::engine(stringify!($engine)) {
                        super::$test(&e);
                    }
                }
            )*
        }
    };
}

/// [`engine_tests!`] for every engine.
macro_rules! every_engine {
    ($($test:ident),* $(,)?) => {
        engine_tests!(sync: $($test),*);
        engine_tests!(pool: $($test),*);
        engine_tests!(uring: $($test),*);
    };
}

/// Faults planted on the engine's own path (`faults`: a ring's completions, the backing's
/// system calls) fail, shorten or retry only their request: `EIO` fails its request alone, a
/// short count is reported as such (the cache's runs read the rest: below), and a ring's
/// `EAGAIN` completion is queued again and then succeeds. Writes alike.
fn planted_faults_touch_only_their_request(e: &Engine) {
    use super::faults::{clear, plant, Fault};
    let data = pattern(64 << 10, 30);
    let (f, b, _) = direct_file(&data);
    let fd = b.raw_io().unwrap().fd;
    let mut bufs: Vec<Aligned> = (0..4).map(|_| Aligned::new(4096)).collect();
    let at = [0u64, 8192, 16384, 24576];
    plant(fd, 8192, Fault::Errno(libc::EIO));
    plant(fd, 16384, Fault::Short(512));
    plant(fd, 24576, Fault::Again);
    let mut reqs: Vec<Req<'_>> = bufs
        .iter_mut()
        .zip(at)
        .map(|(buf, o)| Req::read(o, vec![buf.bytes_mut()]))
        .collect();
    e.run(&b, &mut reqs);
    let r = results(&mut reqs);
    drop(reqs);
    let err = r[1].as_ref().expect_err("EIO planted");
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert_eq!(*r[0].as_ref().unwrap(), 4096);
    assert_eq!(*r[2].as_ref().unwrap(), 512, "short, as planted");
    assert_eq!(
        *r[3].as_ref().unwrap(),
        4096,
        "EAGAIN retried (or not planted)"
    );
    assert!(bufs[0].bytes() == &data[..4096]);
    assert!(bufs[2].bytes()[..512] == data[16384..16384 + 512]);
    assert!(bufs[3].bytes() == &data[24576..24576 + 4096]);
    // A ring took its `EAGAIN`; the other engines never apply one.
    let left = clear(fd);
    assert_eq!(
        left,
        usize::from(e.kind() != EngineKind::Uring),
        "faults left"
    );

    // Writes: one fails, one is cut short, the third is whole.
    let mut w: Vec<Aligned> = (0..3).map(|_| Aligned::new(4096)).collect();
    for (k, x) in w.iter_mut().enumerate() {
        x.bytes_mut().fill(0xA0 + k as u8);
    }
    plant(fd, 32768, Fault::Errno(libc::EIO));
    plant(fd, 40960, Fault::Short(1024));
    let mut reqs: Vec<Req<'_>> = w
        .iter()
        .zip([32768u64, 40960, 49152])
        .map(|(x, o)| Req::write(o, vec![x.bytes()]))
        .collect();
    e.run(&b, &mut reqs);
    let r = results(&mut reqs);
    assert_eq!(r[0].as_ref().unwrap_err().raw_os_error(), Some(libc::EIO));
    assert_eq!(*r[1].as_ref().unwrap(), 1024);
    assert_eq!(*r[2].as_ref().unwrap(), 4096);
    assert_eq!(clear(fd), 0);
    // (A planted fault changes what the kernel reported, not what it did: the failed and the
    // short write may have landed; the whole one has.)
    let on_disk = std::fs::read(f.path()).unwrap();
    assert!(on_disk[49152..53248].iter().all(|&x| x == 0xA2));
}

every_engine!(
    planted_faults_touch_only_their_request,
    random_reads_match_pread,
    a_batch_bigger_than_the_ring_completes,
    vectored_reads_scatter_in_order,
    writes_then_reads_back,
    a_short_read_at_eof_counts_what_there_is,
    a_failing_read_fails_only_itself,
    a_failing_read_leaves_the_writes_of_its_batch,
    a_backing_without_a_descriptor_runs_through_its_methods,
    batches_from_many_threads_at_once,
    direct_io_aligned_and_not,
    a_batch_inside_a_batch,
    each_completion_is_announced_once_with_its_result,
);

// ---- the pool ------------------------------------------------------------------------------

/// Panics on a read at `PANIC_AT`; otherwise reads zeros and records the thread's name.
#[derive(Debug, Default)]
struct Panicky {
    threads: Mutex<Vec<String>>,
}

const PANIC_AT: u64 = 3 * 4096;

impl Backing for Panicky {
    fn size(&self) -> io::Result<u64> {
        Ok(1 << 20)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        self.threads.lock().unwrap().push(name);
        if offset == PANIC_AT {
            panic!("a backing that panics (on purpose, in a test)");
        }
        // Slow enough for the batch to spread over the workers.
        std::thread::sleep(std::time::Duration::from_millis(2));
        buf.fill(0);
        Ok(buf.len())
    }
}

#[test]
fn pool_a_panicking_backing_fails_only_its_request() {
    let e = Engine::pool(2).unwrap();
    let b = Panicky::default();
    for round in 0..2 {
        let mut bufs = vec![vec![1u8; 4096]; 8];
        let mut reqs: Vec<Req<'_>> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, buf)| Req::read(i as u64 * 4096, vec![buf.as_mut_slice()]))
            .collect();
        e.run(&b, &mut reqs);
        for (i, r) in results(&mut reqs).into_iter().enumerate() {
            if i as u64 * 4096 == PANIC_AT {
                let err = r.expect_err("the panicking request fails");
                assert_eq!(err.to_string(), "the backing panicked", "round {round}");
            } else {
                assert_eq!(r.unwrap(), 4096, "request {i}, round {round}");
            }
        }
    }
    // A batch of one runs in the caller, and still turns the panic into the error.
    let mut buf = vec![0u8; 4096];
    let mut one = [Req::read(PANIC_AT, vec![&mut buf[..]])];
    e.run(&b, &mut one);
    assert!(one[0].take_result().is_err());
    let names = b.threads.lock().unwrap();
    assert!(
        names
            .iter()
            .filter(|n| n.starts_with("foliocache-io-"))
            .count()
            >= 16,
        "batches ran on the workers: {names:?}"
    );
}

/// Counts the worker threads that touched [`EXIT_MARK`] and have exited since.
static EXITED: AtomicUsize = AtomicUsize::new(0);

struct ExitMark;

impl Drop for ExitMark {
    fn drop(&mut self) {
        // ORDERING: Relaxed; pairs with the loads in
        // `pool_threads_are_named_and_joined_at_drop`, made after the pool's `join`s
        // returned, which order the thread's exit (this destructor included) before them.
        EXITED.fetch_add(1, Ordering::Relaxed);
    }
}

std::thread_local! {
    /// Dropped when a thread that touched it exits, before its `join` returns.
    static EXIT_MARK: ExitMark = const { ExitMark };
}

/// Reads zeros slowly, and marks the threads it ran on.
#[derive(Debug, Default)]
struct Marking {
    threads: Mutex<std::collections::BTreeSet<String>>,
}

impl Backing for Marking {
    fn size(&self) -> io::Result<u64> {
        Ok(1 << 20)
    }

    fn read_at(&self, buf: &mut [u8], _offset: u64) -> io::Result<usize> {
        EXIT_MARK.with(|_| ());
        let name = std::thread::current().name().unwrap_or("").to_owned();
        self.threads.lock().unwrap().insert(name);
        std::thread::sleep(std::time::Duration::from_millis(5));
        buf.fill(0);
        Ok(buf.len())
    }
}

#[test]
fn pool_threads_are_named_and_joined_at_drop() {
    let n = super::pool::default_threads();
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    assert_eq!(n, (2 * cpus).clamp(2, 32));
    assert!((2..=32).contains(&n), "{n}");

    let e = Engine::pool(3).unwrap();
    assert_eq!(format!("{e:?}"), "Engine { kind: Pool, threads: 3 }");
    let b = Marking::default();
    let mut bufs = vec![vec![1u8; 512]; 30];
    let mut reqs: Vec<Req<'_>> = bufs
        .iter_mut()
        .map(|buf| Req::read(0, vec![buf.as_mut_slice()]))
        .collect();
    e.run(&b, &mut reqs);
    assert!(results(&mut reqs).into_iter().all(|r| r.unwrap() == 512));
    let names = b.threads.lock().unwrap().clone();
    assert!(!names.is_empty());
    for name in &names {
        let i: usize = name
            .strip_prefix("foliocache-io-")
            .and_then(|i| i.parse().ok())
            .unwrap_or_else(|| panic!("a request ran on {name:?}"));
        assert!(i < 3, "{name}");
    }
    // ORDERING: Relaxed; pairs with the increments in `ExitMark::drop`, of which none has
    // run yet (no worker of this pool has exited).
    assert_eq!(EXITED.load(Ordering::Relaxed), 0);
    drop(e);
    // ORDERING: Relaxed; pairs with the increments in `ExitMark::drop`, ordered before this
    // by the joins in the pool's drop.
    assert_eq!(
        EXITED.load(Ordering::Relaxed),
        names.len(),
        "joined at drop"
    );
}

// ---- io_uring ------------------------------------------------------------------------------

#[test]
fn uring_ring_flags_are_a_step_of_the_ladder() {
    if engine("uring").is_none() {
        return;
    }
    let flags = ring_flags().unwrap();
    eprintln!("io_uring ring flags on this kernel: {flags}");
    let ladder = super::uring::ladder_names();
    assert!(ladder.contains(&flags), "{flags} is not one of {ladder:?}");
    // Another thread makes its own ring, with the same flags.
    let other = std::thread::spawn(|| ring_flags().unwrap()).join().unwrap();
    assert_eq!(other, flags);
}

/// A readable file that claims direct I/O at 512 bytes: aligned requests go to the ring,
/// the others to its methods, which panic when `panic_inline` is set.
#[derive(Debug)]
struct PretendDirect {
    file: File,
    panic_inline: bool,
    inline_reads: AtomicUsize,
}

impl PretendDirect {
    fn new(f: &tempfile::NamedTempFile, panic_inline: bool) -> PretendDirect {
        PretendDirect {
            file: File::open(f.path()).unwrap(),
            panic_inline,
            inline_reads: AtomicUsize::new(0),
        }
    }

    /// The reads that reached `read_at` since the last call.
    fn take_inline_reads(&self) -> usize {
        // ORDERING: Relaxed; pairs with the increment in `PretendDirect::read_at`, made by
        // this same thread (the uring engine runs inline requests in the caller).
        self.inline_reads.swap(0, Ordering::Relaxed)
    }
}

impl Backing for PretendDirect {
    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if self.panic_inline {
            panic!("a backing that panics (on purpose, in a test)");
        }
        // ORDERING: Relaxed; pairs with the swap in `PretendDirect::take_inline_reads`, on
        // the same thread.
        self.inline_reads.fetch_add(1, Ordering::Relaxed);
        self.file.read_at(buf, offset)
    }

    fn raw_io(&self) -> Option<RawIo> {
        Some(RawIo::new(self.file.as_raw_fd(), 512))
    }
}

/// 200 aligned 4 KiB reads (more than the ring takes at once), checked against `data`.
fn aligned_reads(e: &Engine, b: &dyn Backing, data: &[u8]) {
    let mut bufs: Vec<Aligned> = (0..200).map(|_| Aligned::new(4096)).collect();
    let mut reqs: Vec<Req<'_>> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, a)| Req::read(i as u64 * 4096, vec![a.bytes_mut()]))
        .collect();
    e.run(b, &mut reqs);
    for (i, r) in results(&mut reqs).into_iter().enumerate() {
        assert_eq!(r.unwrap(), 4096, "request {i}");
    }
    for (i, a) in bufs.iter().enumerate() {
        assert!(a.bytes() == &data[i * 4096..(i + 1) * 4096], "request {i}");
    }
}

#[test]
fn uring_a_failed_submission_finishes_the_batch_inline() {
    let Some(e) = engine("uring") else { return };
    let data = pattern(200 * 4096, 30);
    let f = temp_file(&data);
    let b = PretendDirect::new(&f, false);
    let planted = |faults: &[Option<i32>]| {
        super::uring::ENTER_FAULTS.with(|q| q.borrow_mut().extend(faults.iter().copied()))
    };
    // The first submission fails: the ring took nothing, everything runs inline.
    planted(&[Some(libc::ENXIO)]);
    aligned_reads(&e, &b, &data);
    assert_eq!(b.take_inline_reads(), 200);
    // The ring took the first 128 and fails on the rest: they complete first, then the
    // remaining 72 (some perhaps pushed after the first completions, never submitted) run
    // inline.
    planted(&[None, Some(libc::EBADFD)]);
    aligned_reads(&e, &b, &data);
    assert_eq!(b.take_inline_reads(), 72);
    // Interruptions and a kernel short of memory with nothing in flight: retried.
    planted(&[
        Some(libc::EINTR),
        Some(libc::EAGAIN),
        Some(libc::EBUSY),
        None,
    ]);
    aligned_reads(&e, &b, &data);
    assert_eq!(b.take_inline_reads(), 0);
    // Short of memory with requests in flight: wait for one, then go on.
    planted(&[None, Some(libc::EAGAIN)]);
    aligned_reads(&e, &b, &data);
    assert_eq!(b.take_inline_reads(), 0);
    assert!(super::uring::ENTER_FAULTS.with(|q| q.borrow().is_empty()));
    // The thread has a working ring again.
    assert!(ring_flags().is_ok());
    aligned_reads(&e, &b, &data);
    assert_eq!(b.take_inline_reads(), 0);
}

#[test]
fn uring_a_panic_inline_waits_for_the_ring() {
    let Some(e) = engine("uring") else { return };
    let data = pattern(200 * 4096, 31);
    let f = temp_file(&data);
    let b = PretendDirect::new(&f, true);
    let mut bufs: Vec<Aligned> = (0..100).map(|_| Aligned::new(4096)).collect();
    let mut odd = [0u8; 100];
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut reqs: Vec<Req<'_>> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, a)| Req::read(i as u64 * 4096, vec![a.bytes_mut()]))
            .collect();
        reqs.push(Req::read(7, vec![&mut odd[..]]));
        e.run(&b, &mut reqs);
    }));
    assert!(r.is_err(), "the inline request's panic reaches the caller");
    // Every ring request had completed before the unwind left `run`.
    for (i, a) in bufs.iter().enumerate() {
        assert!(a.bytes() == &data[i * 4096..(i + 1) * 4096], "request {i}");
    }
    let b = PretendDirect::new(&f, false);
    aligned_reads(&e, &b, &data);
}

/// Its unaligned reads run a batch of their own, through the same engine, on `inner`.
#[derive(Debug)]
struct Nesting<'e> {
    file: File,
    engine: &'e Engine,
    inner: FileBacking,
}

impl Backing for Nesting<'_> {
    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut reqs = [Req::read(offset, vec![buf])];
        self.engine.run(&self.inner, &mut reqs);
        reqs[0].take_result()
    }

    fn raw_io(&self) -> Option<RawIo> {
        Some(RawIo::new(self.file.as_raw_fd(), 512))
    }
}

fn a_batch_inside_a_batch(e: &Engine) {
    let data = pattern(64 << 10, 32);
    let f = temp_file(&data);
    let b = Nesting {
        file: File::open(f.path()).unwrap(),
        engine: e,
        inner: FileBacking::open(f.path()).unwrap(),
    };
    let mut a = Aligned::new(4096);
    let (mut u1, mut u2) = (vec![0u8; 100], vec![0u8; 100]);
    let mut reqs = vec![
        Req::read(4096, vec![a.bytes_mut()]),
        Req::read(3, vec![&mut u1[..]]),
        Req::read(5000, vec![&mut u2[..]]),
    ];
    e.run(&b, &mut reqs);
    let counts: Vec<usize> = results(&mut reqs).into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(counts, [4096, 100, 100]);
    assert!(a.bytes() == &data[4096..8192]);
    assert!(u1 == data[3..103]);
    assert!(u2 == data[5000..5100]);
}

#[test]
fn an_engine_is_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Engine>();
}

// ---- choosing the engine -------------------------------------------------------------------

#[test]
fn the_environment_overrides_the_choice() {
    use std::ffi::OsString;
    let env = |v: &str| Some(OsString::from(v));
    assert_eq!(env_choice(IoEngine::Pool, None).unwrap(), IoEngine::Pool);
    assert_eq!(env_choice(IoEngine::Pool, env("")).unwrap(), IoEngine::Pool);
    for v in IoEngine::ALL {
        assert_eq!(env_choice(IoEngine::Sync, env(v.name())).unwrap(), v);
    }
    let err = env_choice(IoEngine::Auto, env("epoll")).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    let msg = err.to_string();
    assert!(msg.contains("FOLIOCACHE_IO_ENGINE"), "{msg}");
    assert!(msg.contains("epoll"), "{msg}");
    assert!(msg.contains("auto, uring, pool, sync"), "{msg}");
}

#[test]
fn new_takes_the_environment_and_auto_prefers_uring() {
    let set = std::env::var(ENGINE_ENV).ok().filter(|v| !v.is_empty());
    let auto = || match uring_available() {
        Ok(()) => EngineKind::Uring,
        Err(_) => EngineKind::Pool,
    };
    let want = |choice: IoEngine| match set.as_deref().unwrap_or(choice.name()) {
        "sync" => EngineKind::Sync,
        "pool" => EngineKind::Pool,
        "uring" => EngineKind::Uring,
        _ => auto(),
    };
    for choice in [IoEngine::Auto, IoEngine::Pool, IoEngine::Sync] {
        assert_eq!(
            Engine::new(choice).unwrap().kind(),
            want(choice),
            "{choice}"
        );
    }
    assert_eq!(Engine::exactly(IoEngine::Auto).unwrap().kind(), auto());
    assert_eq!(
        Engine::exactly(IoEngine::Sync).unwrap().kind(),
        EngineKind::Sync
    );
}

// ---- FileBacking's bounce buffer (direct I/O, unaligned requests) --------------------------

#[test]
fn bounce_read_at_an_unaligned_offset() {
    let data = pattern(10_000, 20);
    let (_f, b, _) = direct_file(&data);
    let mut buf = vec![0u8; 100];
    assert_eq!(b.read_at(&mut buf, 4090).unwrap(), 100);
    assert!(buf == data[4090..4190]);
    // Across the end of the file: what there is.
    let mut buf = vec![0u8; 500];
    assert_eq!(b.read_at(&mut buf, 9_700).unwrap(), 300);
    assert!(buf[..300] == data[9_700..]);
    let mut a = [0u8; 10];
    let mut c = [0u8; 20];
    let mut iov = [IoSliceMut::new(&mut a), IoSliceMut::new(&mut c)];
    assert_eq!(b.read_vectored_at(&mut iov, 3).unwrap(), 30);
    assert!([&a[..], &c[..]].concat() == data[3..33]);
}

#[test]
fn bounce_write_inside_keeps_the_neighbours() {
    let data = pattern(10_000, 21);
    let (f, b, _) = direct_file(&data);
    let w = vec![0xEEu8; 100];
    assert_eq!(b.write_at(&w, 5000).unwrap(), 100);
    let mut model = data.clone();
    model[5000..5100].copy_from_slice(&w);
    assert_eq!(b.size().unwrap(), 10_000);
    assert!(std::fs::read(f.path()).unwrap() == model);
}

#[test]
fn bounce_write_at_eof_sets_the_exact_size() {
    let data = pattern(10_000, 22);
    let (f, b, _) = direct_file(&data);
    let w = vec![0x11u8; 100];
    assert_eq!(b.write_at(&w, 10_000).unwrap(), 100);
    assert_eq!(b.size().unwrap(), 10_100, "not rounded up to the block");
    let mut model = data.clone();
    model.extend_from_slice(&w);
    assert!(std::fs::read(f.path()).unwrap() == model);
    // Past the end, with a gap: zeros in the gap, the size exact again.
    assert_eq!(b.write_at(&w, 12_000).unwrap(), 100);
    assert_eq!(b.size().unwrap(), 12_100);
    model.resize(12_000, 0);
    model.extend_from_slice(&w);
    assert!(std::fs::read(f.path()).unwrap() == model);
}

// ---- planted faults through the cache ------------------------------------------------------

/// The engines a cache is tried with (io_uring unless opted out: see [`engine`]).
fn cache_engines() -> Vec<IoEngine> {
    let mut v = vec![IoEngine::Pool, IoEngine::Sync];
    if engine("uring").is_some() {
        v.insert(1, IoEngine::Uring);
    }
    v
}

/// The one descriptor the cache holds on `f`'s file (the test's own handle is not one).
fn cache_fd(f: &tempfile::NamedTempFile) -> i32 {
    let fds: Vec<i32> = fds_of(f.path())
        .into_iter()
        .filter(|&fd| fd != f.as_file().as_raw_fd())
        .collect();
    assert_eq!(fds.len(), 1, "the cache's descriptor: {fds:?}");
    fds[0]
}

/// The descriptors this process holds open on `path`.
fn fds_of(path: &std::path::Path) -> Vec<i32> {
    let want = path.canonicalize().unwrap();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            (target == want).then(|| e.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

/// A window of 64 pages read through the cache on a direct-I/O file, under each engine, with
/// `EIO` planted on the second 128 KiB request and a short count on the first: under the
/// engines that batch (pool, io_uring) the window's first request is cached whole (its short
/// read finished by a second call), the second request's folios alone fail, and a later read
/// of them retries and succeeds. The synchronous engine reads the window as one run: the short
/// count is finished the same way, and the call covering the second half never starts at the
/// planted offset. Every byte equals the file's.
#[test]
fn planted_faults_fail_only_their_folios_through_the_cache() {
    use super::faults::{clear, plant, Fault};
    use crate::{CacheError, Config, FolioCache};
    const PAGE: usize = 4096;
    for choice in cache_engines() {
        let data = pattern(64 * PAGE, 31);
        let f = temp_file(&data);
        let c = FolioCache::new(
            Config::new(4 << 20)
                .readahead_pages(64)
                // Order-0 folios: a request boundary may fall anywhere.
                .max_folio_order(0)
                .io_engine(choice)
                .direct_io(DirectIo::On),
        )
        .unwrap();
        let file = c.open(f.path()).unwrap();
        let batched = c.io_engine() != EngineKind::Sync;
        // The cache's own descriptor (the test's handle on the file is not one).
        let fd = cache_fd(&f);
        plant(fd, 0, Fault::Short(PAGE));
        plant(fd, 32 * PAGE as u64, Fault::Errno(libc::EIO));
        let r = file.readahead(0..64 * PAGE as u64);
        if batched {
            match r {
                Err(CacheError::Io { offset, source, .. }) => {
                    assert_eq!(offset, 32 * PAGE as u64, "{choice}");
                    assert_eq!(source.raw_os_error(), Some(libc::EIO), "{choice}");
                }
                other => panic!("{choice}: {other:?}"),
            }
            assert_eq!(
                file.cached_pages(),
                32,
                "{choice}: the first request's folios"
            );
        } else {
            assert_eq!(r.unwrap(), 64, "{choice}");
        }
        let left = clear(fd);
        assert_eq!(left, usize::from(!batched), "{choice}: faults left");
        let mut all = vec![0u8; 64 * PAGE];
        file.read_exact_at(&mut all, 0).unwrap();
        assert!(all == data, "{choice}: the bytes");
        assert_eq!(file.cached_pages(), 64);
        drop(file);
        c.validate().unwrap();
    }
}

/// Writeback through each engine with faults planted on its writes: a write cut short goes on
/// from where it stopped, and an `EIO` on the other run's write fails the sync that covers it,
/// once (the next sync, with nothing new, succeeds); the run written whole is on disk.
#[test]
fn planted_faults_on_writeback_are_finished_or_reported_once() {
    use super::faults::{clear, plant, Fault};
    use crate::{CacheError, Config, FolioCache};
    const PAGE: usize = 4096;
    for choice in cache_engines() {
        let data = pattern(32 * PAGE, 32);
        let f = temp_file(&data);
        let c = FolioCache::new(
            Config::new(4 << 20)
                .io_engine(choice)
                .direct_io(DirectIo::On),
        )
        .unwrap();
        let file = c
            .open_with(f.path(), crate::OpenOptions::new().write(true))
            .unwrap();
        let fd = cache_fd(&f);
        // Two dirty runs: pages 0..8 and 16..24.
        let (a, b) = (vec![0x5Au8; 8 * PAGE], vec![0xA5u8; 8 * PAGE]);
        file.write_all_at(&a, 0).unwrap();
        file.write_all_at(&b, 16 * PAGE as u64).unwrap();
        plant(fd, 0, Fault::Short(PAGE));
        plant(fd, 16 * PAGE as u64, Fault::Errno(libc::EIO));
        match file.sync_data() {
            Err(CacheError::Writeback { source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(libc::EIO), "{choice}")
            }
            other => panic!("{choice}: {other:?}"),
        }
        assert_eq!(clear(fd), 0, "{choice}: both faults fired");
        file.sync_data()
            .unwrap_or_else(|e| panic!("{choice}: reported twice: {e}"));
        let on_disk = std::fs::read(f.path()).unwrap();
        assert!(
            on_disk[..8 * PAGE] == a[..],
            "{choice}: the short write was finished"
        );
        drop(file);
        c.validate().unwrap();
    }
}
