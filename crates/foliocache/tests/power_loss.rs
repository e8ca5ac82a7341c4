//! Simulated power loss, in the manner of SQLite's crash tests (`test6.c`): a backing that
//! keeps everything written since its last sync in a volatile layer, as a disk's write cache
//! and the kernel's dirty pages do, and at a simulated power cut keeps a random subset of those
//! writes whole, drops others, and tears the rest at 512-byte sector boundaries (some sectors
//! reach the platter, others not). A size change since the sync survives or not.
//!
//! The promise checked after every cut: every byte a sync that returned covered is intact,
//! unless a later write changed it (then it holds the synced value or one of the values
//! written since). Writes, truncations and syncs go through the cache at random, with a
//! budget small enough that reclaim, the dirty limit and the flusher write pages back at
//! times of their own choosing. Each cut abandons the cache where it stands, as a power cut
//! abandons the kernel's.

use std::io::{self, IoSlice, IoSliceMut};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use foliocache::backing::Backing;
use foliocache::{AsyncFile, Config, FolioCache};

const PAGE: usize = 4096;
const SECTOR: usize = 512;
const MAX_LEN: usize = 48 * PAGE;

/// What the disk holds for sure, and what is still in flight above it.
#[derive(Default)]
struct Disk {
    /// The power is off (after a cut, until the next run starts): writes, syncs and size
    /// changes fail, as on a dead device.
    off: bool,
    durable: Vec<u8>,
    /// Writes and size changes since the last sync, in order: what the file looks like now is
    /// `durable` with these applied.
    volatile: Vec<Op>,
}

#[derive(Clone)]
enum Op {
    Write { at: usize, data: Vec<u8> },
    SetLen(usize),
}

fn apply(file: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write { at, data } => {
            if file.len() < at + data.len() {
                file.resize(at + data.len(), 0);
            }
            file[*at..at + data.len()].copy_from_slice(data);
        }
        Op::SetLen(n) => file.resize(*n, 0),
    }
}

impl Disk {
    /// The file as a reader sees it now.
    fn current(&self) -> Vec<u8> {
        let mut f = self.durable.clone();
        for op in &self.volatile {
            apply(&mut f, op);
        }
        f
    }

    /// The power goes: each write in flight survives whole, vanishes, or is torn (a random
    /// subset of its sectors lands); a size change survives or not. What is left is the new
    /// durable state.
    fn cut(&mut self, rng: &mut StdRng) -> Vec<u8> {
        let mut f = self.durable.clone();
        for op in std::mem::take(&mut self.volatile) {
            match (&op, rng.random_range(0..3)) {
                (_, 0) => apply(&mut f, &op),
                (_, 1) => {}
                (Op::SetLen(_), _) => {}
                (Op::Write { at, data }, _) => {
                    // Sectors are aligned in the file, not in the write.
                    let mut s = at - at % SECTOR;
                    while s < at + data.len() {
                        let lo = s.max(*at);
                        let hi = (s + SECTOR).min(at + data.len());
                        if rng.random_bool(0.5) {
                            let part = Op::Write {
                                at: lo,
                                data: data[lo - at..hi - at].to_vec(),
                            };
                            apply(&mut f, &part);
                        }
                        s += SECTOR;
                    }
                }
            }
        }
        self.durable = f.clone();
        self.off = true;
        f
    }
}

#[derive(Clone, Default)]
struct Volatile(Arc<Mutex<Disk>>);

impl std::fmt::Debug for Volatile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Volatile")
    }
}

impl Backing for Volatile {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.lock().unwrap().current().len() as u64)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let f = self.0.lock().unwrap().current();
        let at = (offset as usize).min(f.len());
        let n = buf.len().min(f.len() - at);
        buf[..n].copy_from_slice(&f[at..at + n]);
        Ok(n)
    }
    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        let f = self.0.lock().unwrap().current();
        let mut at = (offset as usize).min(f.len());
        let mut done = 0;
        for b in bufs.iter_mut() {
            let n = b.len().min(f.len() - at);
            b[..n].copy_from_slice(&f[at..at + n]);
            at += n;
            done += n;
        }
        Ok(done)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let mut d = self.0.lock().unwrap();
        if d.off {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        d.volatile.push(Op::Write {
            at: offset as usize,
            data: buf.to_vec(),
        });
        Ok(buf.len())
    }
    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        let data: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        self.write_at(&data, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        let mut d = self.0.lock().unwrap();
        if d.off {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        d.durable = d.current();
        d.volatile.clear();
        Ok(())
    }
    fn set_len(&self, size: u64) -> io::Result<()> {
        let mut d = self.0.lock().unwrap();
        if d.off {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        d.volatile.push(Op::SetLen(size as usize));
        Ok(())
    }
}

/// What a recovered file may hold: per byte, the value the last returned sync covered (if
/// any) and the values written since.
struct Promise {
    synced: Vec<u8>,
    /// Per byte of the synced range: values written since the sync (`None`: too many to list,
    /// any of them may stand).
    since: Vec<Option<Vec<u8>>>,
    /// A size change (or a cut by one) happened since the sync.
    resized: bool,
}

impl Promise {
    fn synced(bytes: Vec<u8>) -> Promise {
        let n = bytes.len();
        Promise {
            synced: bytes,
            since: vec![Some(Vec::new()); n],
            resized: false,
        }
    }

    fn wrote(&mut self, at: usize, len: usize, b: u8) {
        for i in at..(at + len).min(self.synced.len()) {
            if let Some(v) = &mut self.since[i] {
                if !v.contains(&b) {
                    v.push(b);
                }
                if v.len() > 8 {
                    self.since[i] = None;
                }
            }
        }
    }

    fn cut_at(&mut self, size: usize) {
        self.resized = true;
        // Bytes past a cut read as zeros if the cut stands, so zero is allowed there.
        for i in size.min(self.synced.len())..self.synced.len() {
            self.wrote(i, 1, 0);
        }
    }

    fn check(&self, recovered: &[u8], what: &str) {
        if !self.resized {
            assert!(
                recovered.len() >= self.synced.len(),
                "{what}: {} bytes recovered, {} synced",
                recovered.len(),
                self.synced.len()
            );
        }
        for (i, &want) in self.synced.iter().enumerate() {
            let got = recovered.get(i).copied().unwrap_or(0);
            let ok = got == want
                || match &self.since[i] {
                    None => true,
                    Some(v) => v.contains(&got),
                };
            assert!(
                ok,
                "{what}: byte {i} is {got}, synced {want}, written since {:?}",
                self.since[i]
            );
        }
    }
}

/// The smallest executor: polls the future on this thread, parks between polls.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// The cuts' workload drives the file through the synchronous calls, or through their async
/// forms ([`AsyncFile`], on worker threads).
/// `snapshots`: snapshots are taken and dropped among the writes (a write that finds the
/// snapshot share full drops the oldest and goes on), and each is checked against a copy of
/// the file made when it was taken before the power goes.
fn run_cuts(seed: u64, cuts: usize, asynchronous: bool, snapshots: bool) -> (u64, u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let disk = Volatile::default();
    let mut promise = Promise::synced(Vec::new());
    let (mut syncs, mut torn_checks) = (0u64, 0u64);
    for cut in 0..cuts {
        // The cache starts from what survived, as a process started after the power returns.
        let c = FolioCache::new(
            Config::new(32 * PAGE)
                .dirty_ratios(25, 10)
                .dirty_expire(
                    std::time::Duration::from_millis(1),
                    std::time::Duration::from_millis(1),
                )
                .panic_on_bad_page(true),
        )
        .unwrap();
        let f = AsyncFile::new(c.open_backing("volatile", disk.clone()).unwrap());
        let mut model = disk.0.lock().unwrap().current();
        assert_eq!(f.len(), model.len() as u64);
        let mut snaps: Vec<(foliocache::Snapshot, Vec<u8>)> = Vec::new();
        for _ in 0..rng.random_range(1..60) {
            if snapshots && rng.random_range(0..100) < 8 {
                if snaps.len() < 3 && rng.random_range(0..2) == 0 {
                    snaps.push((f.file().snapshot().unwrap(), model.clone()));
                } else if !snaps.is_empty() {
                    let i = rng.random_range(0..snaps.len());
                    let (snap, copy) = snaps.swap_remove(i);
                    check_snapshot(&snap, &copy, seed, cut);
                }
            }
            match rng.random_range(0..100) {
                0..=59 => {
                    let len = rng.random_range(1..2 * PAGE);
                    let at = rng.random_range(0..MAX_LEN - len);
                    let b: u8 = rng.random_range(1..=255);
                    let data = vec![b; len];
                    until_room(&mut snaps, seed, cut, || {
                        if asynchronous {
                            block_on(f.write_all_at(&data, at as u64))
                        } else {
                            f.file().write_all_at(&data, at as u64)
                        }
                    });
                    if model.len() < at + len {
                        model.resize(at + len, 0);
                    }
                    model[at..at + len].fill(b);
                    promise.wrote(at, len, b);
                }
                60..=69 => {
                    let size = rng.random_range(0..MAX_LEN);
                    until_room(&mut snaps, seed, cut, || {
                        if asynchronous {
                            block_on(f.set_len(size as u64))
                        } else {
                            f.file().set_len(size as u64)
                        }
                    });
                    model.resize(size, 0);
                    promise.cut_at(size);
                }
                _ => {
                    if asynchronous {
                        block_on(f.sync_data()).unwrap();
                    } else {
                        f.file().sync_data().unwrap();
                    }
                    syncs += 1;
                    promise = Promise::synced(model.clone());
                }
            }
        }
        for (snap, copy) in snaps.drain(..) {
            check_snapshot(&snap, &copy, seed, cut);
        }
        // The power goes: the cache is abandoned with whatever it had not written.
        let recovered = disk.0.lock().unwrap().cut(&mut rng);
        promise.check(&recovered, &format!("seed {seed}, cut {cut}"));
        torn_checks += promise
            .since
            .iter()
            .filter(|s| s.as_ref().is_some_and(|v| !v.is_empty()))
            .count() as u64;
        // What survived is the new truth, durable as it stands. The abandoned cache's last
        // writeback (its drop flushes) fails against the dead device; then the power returns.
        promise = Promise::synced(recovered);
        drop(f);
        drop(c);
        let mut d = disk.0.lock().unwrap();
        assert!(d.volatile.is_empty());
        d.off = false;
    }
    (syncs, torn_checks)
}

/// Runs `change` until it succeeds, dropping the oldest snapshot (checked first) each time
/// the snapshot share is full; any other error fails the test.
fn until_room(
    snaps: &mut Vec<(foliocache::Snapshot, Vec<u8>)>,
    seed: u64,
    cut: usize,
    mut change: impl FnMut() -> Result<(), foliocache::CacheError>,
) {
    loop {
        match change() {
            Ok(()) => return,
            Err(foliocache::CacheError::SnapshotLimit { .. }) if !snaps.is_empty() => {
                let (snap, copy) = snaps.remove(0);
                check_snapshot(&snap, &copy, seed, cut);
            }
            Err(e) => panic!("seed {seed}, cut {cut}: {e}"),
        }
    }
}

/// A snapshot reads exactly the copy of the file made when it was taken.
fn check_snapshot(snap: &foliocache::Snapshot, copy: &[u8], seed: u64, cut: usize) {
    let mut got = vec![0u8; snap.len() as usize];
    snap.read_exact_at(&mut got, 0).unwrap();
    assert!(
        got == copy,
        "seed {seed}, cut {cut}: a snapshot differs from its copy"
    );
}

#[test]
fn every_byte_a_returned_sync_covered_survives_a_power_cut() {
    // 600 in release: CI runs this test under three engines (and the async variant beside
    // it), 2,550 cuts in all; the issue asks for 1,000 across the engines.
    let cuts = if cfg!(debug_assertions) { 150 } else { 600 };
    let (syncs, checked) = run_cuts(0x0C07_F00D, cuts, false, false);
    assert!(syncs > cuts as u64 / 2, "the workload synced ({syncs})");
    assert!(
        checked > 0,
        "some cuts had writes in flight over synced bytes"
    );
}

/// The same promise with every write, truncation and sync made through the async API.
#[test]
fn every_byte_an_async_sync_covered_survives_a_power_cut() {
    let cuts = if cfg!(debug_assertions) { 60 } else { 250 };
    let (syncs, checked) = run_cuts(0xA5C0_F00D, cuts, true, false);
    assert!(syncs > cuts as u64 / 2, "the workload synced ({syncs})");
    assert!(
        checked > 0,
        "some cuts had writes in flight over synced bytes"
    );
}

/// The same promise with snapshots taken, read and dropped among the writes: capturing old
/// pages (reading uncached ones first, under a budget smaller than the file) changes nothing
/// of what a sync makes durable, and every snapshot reads its moment.
#[test]
fn snapshots_among_the_writes_keep_the_promise_and_their_moment() {
    // CI runs this under three engines: 300 cuts in all.
    let cuts = if cfg!(debug_assertions) { 40 } else { 100 };
    let (syncs, checked) = run_cuts(0x5AA9_F00D, cuts, false, true);
    assert!(syncs > cuts as u64 / 2, "the workload synced ({syncs})");
    assert!(
        checked > 0,
        "some cuts had writes in flight over synced bytes"
    );
}
