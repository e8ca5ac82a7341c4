//! Backing files: where a cached file's bytes come from on a miss.
//!
//! # What it models
//!
//! In the kernel a page cache miss ends in the filesystem's `->read_folio` or `->readahead`
//! (`mm/readahead.c: read_pages`), which turns a batch of locked folios into block I/O. Here the
//! "filesystem" is a [`Backing`]: a source of positional reads. The production one,
//! [`FileBacking`], is a `std::fs::File` read with `pread(2)` / `preadv(2)`; [`FaultyBacking`]
//! wraps any backing and fails reads that touch chosen byte offsets, so tests can drive the
//! error paths (a failed fill, waiters woken with the error, the folios removed, a later read
//! retrying) on real files.
//!
//! # The contract
//!
//! | call | semantics |
//! |---|---|
//! | [`Backing::size`] | the file size (`i_size_read`), read once when the file is opened |
//! | [`Backing::read_at`] | one positional read, `pread(2)` semantics: may return fewer bytes than asked, 0 at EOF |
//! | [`Backing::read_vectored_at`] | one positional scatter read, `preadv(2)` semantics |
//! | [`Backing::attrs`] | size and modification time (`fstat(2)`), for revalidation at open |
//! | [`Backing::write_at`] / [`Backing::write_vectored_at`] | positional writes, `pwrite(2)` / `pwritev(2)` semantics (writeback) |
//! | [`Backing::sync_data`] / [`Backing::sync_all`] | `fdatasync(2)` / `fsync(2)`: make written bytes durable |
//! | [`Backing::set_len`] | `ftruncate(2)` |
//!
//! The write half has defaults for read-only backings: writes and `set_len` fail with
//! [`io::ErrorKind::Unsupported`], syncs succeed (nothing was written).
//!
//! Readahead fills a contiguous run of folios with **one** call of
//! [`read_run`]: a single vectored read whose buffers are the run's data frames (they are not
//! contiguous in the arena), repeated only if the backing returns short before EOF. Bytes past
//! EOF in the last folio are zeroed, as the kernel zeroes the tail of the folio that straddles
//! `i_size`. A read that finds no data *before* the size the backing is believed to hold is not
//! EOF but a file that changed behind the cache (truncated by another process, or a size that
//! disagrees with the contents): the run fails with [`RunError::Changed`] and nothing of it is
//! cached, since zeros there would be silently wrong data. [`check_end_of_data`] is the one
//! function that makes that call. A backing that returns more bytes than asked fails the run
//! with an `InvalidData` error instead of corrupting the cursor.
//!
//! # Why it is fast
//!
//! A miss costs one system call per contiguous run, whatever the run's length (the seed's
//! readahead windows are 4 to 32 pages by default), and the data lands directly in the folios'
//! frames, with no bounce buffer.

use std::fmt;
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::mm::sync::{AtomicU64, Mutex, Ordering};

/// The source of a cached file's bytes; the analog of a filesystem's `->read_folio`.
///
/// Implementations must be safe to call from many threads at once (positional reads share no
/// file offset).
pub trait Backing: Send + Sync + fmt::Debug {
    /// The file size in bytes, like `i_size_read`; asked once when the file is opened.
    fn size(&self) -> io::Result<u64>;

    /// Reads into `buf` from byte `offset`, with `pread(2)` semantics: returns how many bytes
    /// were read, fewer than `buf.len()` only at EOF or on a short read, 0 at or past EOF.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Reads into `bufs` in order from byte `offset`, with `preadv(2)` semantics.
    ///
    /// The default reads into the first non-empty buffer only (a legal short read); backings
    /// that can scatter in one call override it.
    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        match bufs.iter_mut().find(|b| !b.is_empty()) {
            Some(b) => self.read_at(b, offset),
            None => Ok(0),
        }
    }

    /// The file's size and modification time, like `fstat(2)`'s `st_size` and `st_mtime`:
    /// the cache compares them with what it saw before to notice writes that bypassed it
    /// (revalidation at open and [`CachedFile::refresh`](crate::CachedFile::refresh)). The
    /// default reports the size alone.
    fn attrs(&self) -> io::Result<FileAttrs> {
        Ok(FileAttrs::new(self.size()?, None))
    }

    /// How many names the file has in its file system (`st_nlink`), or `None` for a backing
    /// without names (the default). A file whose last handle closes with no name left was
    /// deleted: the cache drops it at once, dirty pages and descriptor included (the
    /// kernel's `iput_final` with `i_nlink == 0`), instead of keeping it for a later open.
    fn links(&self) -> io::Result<Option<u64>> {
        Ok(None)
    }

    /// Writes `buf` at byte `offset`, with `pwrite(2)` semantics: returns how many bytes were
    /// written (fewer than `buf.len()` is a short write; the caller writes the rest). Writing
    /// past the end grows the file. The default refuses: a read-only backing.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let _ = (buf, offset);
        Err(read_only(self))
    }

    /// Writes `bufs` in order at byte `offset`, with `pwritev(2)` semantics: writeback hands
    /// a run of contiguous folios over in one call. The default writes the first non-empty
    /// buffer only (a legal short write).
    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        match bufs.iter().find(|b| !b.is_empty()) {
            Some(b) => self.write_at(b, offset),
            None => Ok(0),
        }
    }

    /// `fdatasync(2)`: makes the bytes written so far, and the size, durable. The default
    /// does nothing (a backing that cannot write has nothing to sync).
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    /// `fsync(2)`: [`Backing::sync_data`] plus the file's other metadata (times). The default
    /// is `sync_data`.
    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }

    /// `ftruncate(2)`: sets the file's size, cutting or extending it with zeros. The default
    /// refuses: a read-only backing.
    fn set_len(&self, size: u64) -> io::Result<()> {
        let _ = size;
        Err(read_only(self))
    }
}

/// The error of a write to a backing that cannot write.
fn read_only<B: Backing + ?Sized>(b: &B) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{b:?} is read-only: implement Backing::write_at and set_len to write through it"),
    )
}

/// What [`Backing::attrs`] reports: the attributes whose change means the file was written
/// behind the cache's back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileAttrs {
    /// The file size in bytes (`st_size`).
    pub size: u64,
    /// The last modification time (`st_mtime`, with nanoseconds), if the backing has one.
    pub mtime: Option<std::time::SystemTime>,
}

impl FileAttrs {
    /// Attributes of a file of `size` bytes last modified at `mtime`.
    pub fn new(size: u64, mtime: Option<std::time::SystemTime>) -> FileAttrs {
        FileAttrs { size, mtime }
    }

    /// The attributes `std::fs::Metadata` gives.
    pub fn from_metadata(m: &std::fs::Metadata) -> FileAttrs {
        FileAttrs::new(m.len(), m.modified().ok())
    }
}

/// A real file read with `pread(2)` and `preadv(2)`: the backing [`FolioCache::open`] uses.
///
/// [`FolioCache::open`]: crate::FolioCache::open
#[derive(Debug)]
pub struct FileBacking {
    file: File,
    path: PathBuf,
}

impl FileBacking {
    /// Opens `path` read-only.
    pub fn open(path: impl AsRef<Path>) -> io::Result<FileBacking> {
        let path = path.as_ref().to_path_buf();
        Ok(FileBacking {
            file: File::open(&path)?,
            path,
        })
    }

    /// Wraps an already open file; `path` is used only in error messages.
    pub fn from_file(file: File, path: impl Into<PathBuf>) -> FileBacking {
        FileBacking {
            file,
            path: path.into(),
        }
    }

    /// The path the file was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `preadv(2)` takes at most this many buffers per call (`IOV_MAX` on Linux).
const IOV_MAX: usize = 1024;

impl Backing for FileBacking {
    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn attrs(&self) -> io::Result<FileAttrs> {
        Ok(FileAttrs::from_metadata(&self.file.metadata()?))
    }

    fn links(&self) -> io::Result<Option<u64>> {
        use std::os::unix::fs::MetadataExt;
        Ok(Some(self.file.metadata()?.nlink()))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        loop {
            match self.file.write_at(buf, offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        let n = bufs.len().min(IOV_MAX);
        if n == 0 {
            return Ok(0);
        }
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset beyond off_t"))?;
        loop {
            // SAFETY: `IoSlice` is guaranteed ABI-compatible with `struct iovec` on Unix; the
            // first `n` entries are valid buffers borrowed for the call; the descriptor is open
            // for the lifetime of `self.file`.
            let r = unsafe {
                libc::pwritev(
                    self.file.as_raw_fd(),
                    bufs.as_ptr().cast::<libc::iovec>(),
                    n as libc::c_int,
                    offset,
                )
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn set_len(&self, size: u64) -> io::Result<()> {
        self.file.set_len(size)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        loop {
            match self.file.read_at(buf, offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        let n = bufs.len().min(IOV_MAX);
        if n == 0 {
            return Ok(0);
        }
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset beyond off_t"))?;
        loop {
            // SAFETY: `IoSliceMut` is guaranteed ABI-compatible with `struct iovec` on Unix;
            // the first `n` entries are valid, writable buffers borrowed mutably for the call;
            // the descriptor is open for the lifetime of `self.file`.
            let r = unsafe {
                libc::preadv(
                    self.file.as_raw_fd(),
                    bufs.as_mut_ptr().cast::<libc::iovec>(),
                    n as libc::c_int,
                    offset,
                )
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Why [`read_run`] could not fill a run.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// The backing failed, or broke its contract (returned more bytes than it was asked for:
    /// an [`io::ErrorKind::InvalidData`] error naming the backing and the offset).
    Io(io::Error),
    /// The backing's data ended at byte `offset`, before `expected_size`, the size it is
    /// believed to hold: the file changed behind the cache (truncated), or its size and its
    /// contents disagree. Nothing of the run may be cached.
    Changed {
        /// The byte at which a read returned no data.
        offset: u64,
        /// The size the backing was believed to hold.
        expected_size: u64,
        /// The size the backing reports now ([`Backing::size`] asked again), or `offset` if
        /// it cannot say.
        actual_size: u64,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Io(e) => e.fmt(f),
            RunError::Changed {
                offset,
                expected_size,
                actual_size,
            } => write!(
                f,
                "the data ended at byte {offset} of a file believed to hold {expected_size} \
                 bytes (it now reports {actual_size})"
            ),
        }
    }
}

impl From<io::Error> for RunError {
    fn from(e: io::Error) -> Self {
        RunError::Io(e)
    }
}

/// The verdict on a read that returned no data at byte `at` of a backing believed to hold
/// `backing_size` bytes: `Ok` if `at` is at or past that size (a true EOF: the rest of the
/// folio is past the end of the file and is zeroed), [`RunError::Changed`] if it is before
/// (the file is shorter than the cache believes; its size is asked again for the error).
///
/// This is the one place that tells "past the end" from "the file changed". `backing_size`
/// is the size the *backing* is believed to hold, which is the cached file size as long as
/// the cache only reads; a cache that also writes must pass the size already written back
/// (bytes written to the cache but not yet to the backing are a hole there, not a change).
pub fn check_end_of_data(
    backing: &dyn Backing,
    at: u64,
    backing_size: u64,
) -> Result<(), RunError> {
    if at >= backing_size {
        return Ok(());
    }
    Err(RunError::Changed {
        offset: at,
        expected_size: backing_size,
        actual_size: backing.size().unwrap_or(at),
    })
}

/// Fills `bufs` (a contiguous run of the file starting at `offset`) with as few reads as the
/// backing allows: one vectored read (a plain positional read when a single buffer is left,
/// as for a one-page miss), repeated only after a short read that did not reach the
/// `backing_size` bytes the backing is believed to hold (so a run that ends at EOF costs no
/// extra probing read).
///
/// Returns the bytes kept: those read below `backing_size`. Everything past them is zeroed,
/// the tail of the folio that straddles EOF and any bytes the backing returned past
/// `backing_size` too: a fill never caches bytes past the size it was started under (a file
/// being truncated may still hold the bytes being cut; the kernel's readers zero past
/// `i_size` the same way). A read that returns no data before `backing_size` is judged by
/// [`check_end_of_data`]: the file changed, and the run fails with [`RunError::Changed`]
/// rather than caching zeros the file does not hold. A backing that claims more bytes than it
/// was asked for fails the run with [`RunError::Io`]. This is the one place the cache issues
/// I/O for a run of folios (`read_pages` in the kernel).
pub fn read_run(
    backing: &dyn Backing,
    bufs: &mut [&mut [u8]],
    offset: u64,
    backing_size: u64,
) -> Result<usize, RunError> {
    let room: usize = bufs.iter().map(|b| b.len()).sum();
    let total = usize::try_from(backing_size.saturating_sub(offset))
        .unwrap_or(usize::MAX)
        .min(room);
    let mut done = 0usize;
    // (buffer index, offset inside it) of the first byte not yet read.
    let (mut bi, mut boff) = (0usize, 0usize);
    while done < total {
        let at = offset + done as u64;
        let asked = room - done;
        let n = if bi + 1 == bufs.len() {
            // One buffer left (always so for a single-page read): a plain `pread`, with no
            // iovec array to allocate and no iovec for the kernel to copy in.
            backing.read_at(&mut bufs[bi][boff..], at)?
        } else {
            let mut iov: Vec<IoSliceMut<'_>> = Vec::with_capacity(bufs.len() - bi);
            let (first, rest) = bufs[bi..].split_first_mut().expect("bytes remain");
            iov.push(IoSliceMut::new(&mut first[boff..]));
            iov.extend(rest.iter_mut().map(|b| IoSliceMut::new(b)));
            backing.read_vectored_at(&mut iov, at)?
        };
        if n > asked {
            return Err(overlong_read(backing, n, asked, at));
        }
        if n == 0 {
            check_end_of_data(backing, at, backing_size)?;
            break; // EOF
        }
        done += n;
        // Advance the cursor by n bytes.
        let mut left = n;
        while left > 0 {
            let room = bufs[bi].len() - boff;
            if left < room {
                boff += left;
                left = 0;
            } else {
                left -= room;
                bi += 1;
                boff = 0;
            }
        }
    }
    // Zero everything past EOF, and past `backing_size`: a read asks for whole folios, so it
    // may have returned bytes past the size the fill was started under.
    let kept = done.min(total);
    let mut skip = kept;
    for b in bufs.iter_mut() {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        b[skip..].fill(0);
        skip = 0;
    }
    Ok(kept)
}

/// The error for a backing that returned `n` bytes for a read of `asked` at byte `at`.
#[cold]
fn overlong_read(backing: &dyn Backing, n: usize, asked: usize, at: u64) -> RunError {
    RunError::Io(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "backing {backing:?} returned {n} bytes for a read of {asked} bytes at byte {at}: \
             a read may not return more than it was asked for"
        ),
    ))
}

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

impl<B: Backing + ?Sized> Backing for std::sync::Arc<B> {
    fn size(&self) -> io::Result<u64> {
        (**self).size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }

    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        (**self).read_vectored_at(bufs, offset)
    }

    fn attrs(&self) -> io::Result<FileAttrs> {
        (**self).attrs()
    }

    fn links(&self) -> io::Result<Option<u64>> {
        (**self).links()
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        (**self).write_at(buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        (**self).write_vectored_at(bufs, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        (**self).sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        (**self).sync_all()
    }

    fn set_len(&self, size: u64) -> io::Result<()> {
        (**self).set_len(size)
    }
}

/// Bytes held in memory: a backing for examples and tests that need no file.
#[derive(Debug, Default, Clone)]
pub struct MemBacking(pub Vec<u8>);

impl Backing for MemBacking {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.0.len());
        let n = buf.len().min(self.0.len() - start);
        buf[..n].copy_from_slice(&self.0[start..start + n]);
        Ok(n)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_file(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&data).unwrap();
        f.flush().unwrap();
        (f, data)
    }

    #[test]
    fn file_backing_reads_positionally() {
        let (f, data) = temp_file(10_000);
        let b = FileBacking::open(f.path()).unwrap();
        assert_eq!(b.size().unwrap(), 10_000);
        let mut buf = [0u8; 100];
        assert_eq!(b.read_at(&mut buf, 4090).unwrap(), 100);
        assert_eq!(&buf[..], &data[4090..4190]);
        assert_eq!(b.read_at(&mut buf, 9_950).unwrap(), 50);
        assert_eq!(b.read_at(&mut buf, 20_000).unwrap(), 0);
    }

    #[test]
    fn read_run_scatters_and_zeroes_past_eof() {
        let (f, data) = temp_file(3 * 4096 + 100);
        let b = FaultyBacking::new(FileBacking::open(f.path()).unwrap());
        let mut frames = vec![vec![0xAAu8; 4096]; 5];
        let mut bufs: Vec<&mut [u8]> = frames.iter_mut().map(|v| v.as_mut_slice()).collect();
        let n = read_run(&b, &mut bufs, 0, 3 * 4096 + 100).unwrap();
        assert_eq!(n, 3 * 4096 + 100);
        assert_eq!(b.reads(), 1, "one vectored read for the whole run");
        let flat: Vec<u8> = frames.concat();
        assert_eq!(&flat[..n], &data[..]);
        assert!(flat[n..].iter().all(|&x| x == 0));
    }

    #[test]
    fn read_run_keeps_no_byte_past_the_size_it_was_started_under() {
        // The file still holds 2 pages (a truncation to 100 bytes has not cut it yet): the
        // read returns them all, but only the first 100 bytes may be kept.
        let b = MemBacking(vec![0xAB; 2 * 4096]);
        let mut frames = vec![vec![1u8; 4096]; 2];
        let mut bufs: Vec<&mut [u8]> = frames.iter_mut().map(|v| v.as_mut_slice()).collect();
        assert_eq!(read_run(&b, &mut bufs, 0, 100).unwrap(), 100);
        let flat = frames.concat();
        assert!(flat[..100].iter().all(|&x| x == 0xAB));
        assert!(
            flat[100..].iter().all(|&x| x == 0),
            "bytes past the size were kept"
        );
    }

    #[test]
    fn read_run_survives_short_reads() {
        // MemBacking only reads into the first buffer per call: many short reads.
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let b = MemBacking(data.clone());
        let mut frames = vec![vec![1u8; 4096]; 3];
        let mut bufs: Vec<&mut [u8]> = frames.iter_mut().map(|v| v.as_mut_slice()).collect();
        assert_eq!(read_run(&b, &mut bufs, 100, 10_000).unwrap(), 9_900);
        let flat = frames.concat();
        assert_eq!(&flat[..9_900], &data[100..]);
        assert!(flat[9_900..].iter().all(|&x| x == 0));
    }

    #[test]
    fn read_run_fails_when_the_data_ends_before_the_believed_size() {
        // The backing holds 5,000 bytes but is believed to hold 3 pages: the file changed.
        let b = MemBacking(vec![9u8; 5_000]);
        let mut frames = vec![vec![1u8; 4096]; 3];
        let mut bufs: Vec<&mut [u8]> = frames.iter_mut().map(|v| v.as_mut_slice()).collect();
        match read_run(&b, &mut bufs, 0, 3 * 4096) {
            Err(RunError::Changed {
                offset,
                expected_size,
                actual_size,
            }) => assert_eq!(
                (offset, expected_size, actual_size),
                (5_000, 3 * 4096, 5_000)
            ),
            r => panic!("expected a changed file, got {r:?}"),
        }
        // Believed to end where it does: a true EOF, the tail zeroed.
        let mut bufs: Vec<&mut [u8]> = frames.iter_mut().map(|v| v.as_mut_slice()).collect();
        assert_eq!(read_run(&b, &mut bufs, 0, 5_000).unwrap(), 5_000);
        assert!(frames.concat()[5_000..].iter().all(|&x| x == 0));
    }

    /// Claims to have read more than it was given room for.
    #[derive(Debug)]
    struct Overlong;

    impl Backing for Overlong {
        fn size(&self) -> io::Result<u64> {
            Ok(1 << 20)
        }

        fn read_at(&self, buf: &mut [u8], _offset: u64) -> io::Result<usize> {
            Ok(buf.len() + 10)
        }

        fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], _offset: u64) -> io::Result<usize> {
            Ok(bufs.iter().map(|b| b.len()).sum::<usize>() + 10)
        }
    }

    #[test]
    fn read_run_rejects_a_read_longer_than_asked() {
        for pages in [1, 3] {
            let mut frames = vec![vec![0u8; 4096]; pages];
            let mut bufs: Vec<&mut [u8]> = frames.iter_mut().map(|v| v.as_mut_slice()).collect();
            match read_run(&Overlong, &mut bufs, 8192, 1 << 20) {
                Err(RunError::Io(e)) => {
                    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
                    let msg = e.to_string();
                    assert!(msg.contains("Overlong"), "names the backing: {msg}");
                    assert!(msg.contains("8192"), "names the offset: {msg}");
                }
                r => panic!("expected InvalidData, got {r:?}"),
            }
        }
    }

    #[test]
    fn faulty_backing_fails_only_touching_reads() {
        let (f, _) = temp_file(16_384);
        let b = FaultyBacking::new(FileBacking::open(f.path()).unwrap());
        b.fail_at(8192);
        let mut buf = [0u8; 4096];
        assert!(b.read_at(&mut buf, 0).is_ok());
        assert!(b.read_at(&mut buf, 4097).is_err());
        assert!(b.read_at(&mut buf, 8193).is_ok());
        assert_eq!(b.failed_reads(), 1);
        b.heal();
        assert!(b.read_at(&mut buf, 8192).is_ok());
        assert_eq!(b.reads(), 4);
    }
}
