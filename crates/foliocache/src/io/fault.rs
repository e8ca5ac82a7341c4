//! Fault injection: a backing that fails chosen reads, writes and syncs, and counts them.

use std::io::{self, IoSlice, IoSliceMut};

use super::backing::{Backing, FileAttrs};
use crate::mm::sync::{AtomicU64, Mutex, Ordering};

/// A backing that fails reads touching chosen byte offsets: fault injection for tests.
///
/// Every read (single or vectored) whose byte range contains a "bad" offset fails with an
/// [`io::ErrorKind::Other`] error naming the offset, before reading anything. Bad offsets can
/// be added and removed while the cache runs ([`FaultyBacking::fail_at`],
/// [`FaultyBacking::heal`]), so a test can show a failed read followed by a successful retry.
/// The wrapper also counts the reads that reached it, so a test can check that a readahead
/// window costs one read.
///
/// Writes and syncs can fail too: [`FaultyBacking::fail_writes_at`] fails every write whose
/// range contains a chosen offset (an `EIO` before writing anything), and
/// [`FaultyBacking::fail_next_syncs`] fails the next syncs with `EIO`.
#[derive(Debug)]
pub struct FaultyBacking<B> {
    inner: B,
    bad: Mutex<Vec<u64>>,
    reads: AtomicU64,
    failed: AtomicU64,
    bad_writes: Mutex<Vec<u64>>,
    writes: AtomicU64,
    failed_writes: AtomicU64,
    syncs: AtomicU64,
    syncs_to_fail: AtomicU64,
}

impl<B: Backing> FaultyBacking<B> {
    /// Wraps `inner`, failing nothing yet.
    pub fn new(inner: B) -> FaultyBacking<B> {
        FaultyBacking {
            inner,
            bad: Mutex::new(Vec::new()),
            reads: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            bad_writes: Mutex::new(Vec::new()),
            writes: AtomicU64::new(0),
            failed_writes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            syncs_to_fail: AtomicU64::new(0),
        }
    }

    /// Makes every later write that touches byte `offset` fail with `EIO`, writing nothing.
    pub fn fail_writes_at(&self, offset: u64) {
        let mut bad = self.bad_writes.lock();
        if !bad.contains(&offset) {
            bad.push(offset);
        }
    }

    /// Stops failing writes.
    pub fn heal_writes(&self) {
        self.bad_writes.lock().clear();
    }

    /// Makes the next `n` syncs (`sync_data`, `sync_all`) fail with `EIO`.
    pub fn fail_next_syncs(&self, n: u64) {
        self.syncs_to_fail.store(n, Ordering::Relaxed);
    }

    /// Writes that reached this backing (failed ones included).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Writes this backing failed on purpose.
    pub fn failed_writes(&self) -> u64 {
        self.failed_writes.load(Ordering::Relaxed)
    }

    /// Syncs that reached this backing (failed ones included).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    fn check_write(&self, offset: u64, len: usize) -> io::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let end = offset.saturating_add(len as u64);
        if self
            .bad_writes
            .lock()
            .iter()
            .any(|&b| b >= offset && b < end)
        {
            self.failed_writes.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }

    fn check_sync(&self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let failing = self
            .syncs_to_fail
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }

    /// Makes every later read that touches byte `offset` fail.
    pub fn fail_at(&self, offset: u64) {
        let mut bad = self.bad.lock();
        if !bad.contains(&offset) {
            bad.push(offset);
        }
    }

    /// Stops failing reads: every bad offset is forgotten.
    pub fn heal(&self) {
        self.bad.lock().clear();
    }

    /// How many reads reached this backing (failed ones included).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// How many reads this backing failed on purpose.
    pub fn failed_reads(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// The wrapped backing.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn check(&self, offset: u64, len: usize) -> io::Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let end = offset.saturating_add(len as u64);
        if let Some(&b) = self.bad.lock().iter().find(|&&b| b >= offset && b < end) {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::other(format!("injected read error at byte {b}")));
        }
        Ok(())
    }
}

impl<B: Backing> Backing for FaultyBacking<B> {
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }

    fn attrs(&self) -> io::Result<FileAttrs> {
        self.inner.attrs()
    }

    fn links(&self) -> io::Result<Option<u64>> {
        self.inner.links()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.check(offset, buf.len())?;
        self.inner.read_at(buf, offset)
    }

    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        self.check(offset, bufs.iter().map(|b| b.len()).sum())?;
        self.inner.read_vectored_at(bufs, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.check_write(offset, buf.len())?;
        self.inner.write_at(buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        self.check_write(offset, bufs.iter().map(|b| b.len()).sum())?;
        self.inner.write_vectored_at(bufs, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.check_sync()?;
        self.inner.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.check_sync()?;
        self.inner.sync_all()
    }

    fn set_len(&self, size: u64) -> io::Result<()> {
        self.inner.set_len(size)
    }
}
