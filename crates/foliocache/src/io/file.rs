//! The file backing: a real file read and written with positional system calls.

use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::backing::{Backing, FileAttrs, RawIo};
use crate::mm::sync::Mutex;

/// A real file read with `pread(2)` and `preadv(2)`: the backing [`FolioCache::open`] uses.
///
/// # Direct I/O
///
/// [`FileBacking::enable_direct`] switches the descriptor to `O_DIRECT` where the file
/// system supports it, with the alignment `statx(STATX_DIOALIGN)` reports for the file
/// (`iomap_dio_rw`'s rules: offset, length and buffer address multiples of it). The cache's
/// own requests are aligned (whole folios at folio offsets, frames page aligned); any other
/// request still works, through an aligned bounce buffer: a read reads the blocks that cover
/// it, a write reads the partial blocks at its edges first (a read-modify-write) and, if the
/// rounded write extended the file, cuts it back to the size it should have (the block that
/// holds the end of the file is written whole, and the true size restored, under a lock that
/// [`Backing::set_len`] takes too).
///
/// # Buffered, uncached
///
/// Where the file stays buffered, [`FileBacking::enable_dontcache`] makes every read and
/// write pass `RWF_DONTCACHE` (`preadv2`/`pwritev2`, Linux 6.14 on, for file systems that
/// take it: ext4, XFS, btrfs, not tmpfs): the kernel drops its copy of the bytes once they
/// are read, or written back, so the file is still not cached twice. (Where the kernel keeps
/// written pages anyway, a sync drops them: see `drop_behind`.)
///
/// [`FolioCache::open`]: crate::FolioCache::open
#[derive(Debug)]
pub struct FileBacking {
    file: File,
    path: PathBuf,
    /// The direct-I/O alignment (0: buffered).
    align: u32,
    /// Buffered reads and writes pass `RWF_DONTCACHE`.
    dontcache: bool,
    /// Held by the bounce write (from its `fstat` to its size restore) and by `set_len`.
    size_lock: Mutex<()>,
}

impl FileBacking {
    /// Opens `path` read-only.
    pub fn open(path: impl AsRef<Path>) -> io::Result<FileBacking> {
        let path = path.as_ref().to_path_buf();
        Ok(FileBacking::from_file(File::open(&path)?, path))
    }

    /// Wraps an already open file; `path` is used only in error messages.
    pub fn from_file(file: File, path: impl Into<PathBuf>) -> FileBacking {
        FileBacking {
            file,
            path: path.into(),
            align: 0,
            dontcache: false,
            size_lock: Mutex::new(()),
        }
    }

    /// Makes the buffered reads and writes of this file pass `RWF_DONTCACHE`, if the kernel
    /// and the file system take it (a one-byte read at offset 0 asks them): returns whether
    /// they do. A file under direct I/O needs no such flag and gets none (false).
    pub fn enable_dontcache(&mut self) -> io::Result<bool> {
        if self.align != 0 {
            return Ok(false);
        }
        if self.dontcache {
            return Ok(true);
        }
        let mut probe = [0u8; 1];
        let iov = libc::iovec {
            iov_base: probe.as_mut_ptr().cast(),
            iov_len: 1,
        };
        // SAFETY: one valid iovec over a live, writable byte; the descriptor is ours.
        let r = retry_interrupted(|| unsafe {
            libc::preadv2(self.file.as_raw_fd(), &iov, 1, 0, RWF_DONTCACHE)
        });
        match r {
            Ok(_) => {
                self.dontcache = true;
                Ok(true)
            }
            // An older kernel (an unknown flag) or a file system without it.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                Ok(false)
            }
            // A descriptor open for writing only cannot be probed by reading: leave it.
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether buffered reads and writes pass `RWF_DONTCACHE`
    /// ([`FileBacking::enable_dontcache`]).
    pub fn dontcache(&self) -> bool {
        self.dontcache
    }

    /// Switches the descriptor to direct I/O (`O_DIRECT`) if the file system supports it for
    /// this file: returns the alignment every direct request needs, or `None` if the file
    /// stays buffered (`statx` reports no direct I/O support, an alignment above the page
    /// size, or `fcntl(F_SETFL, O_DIRECT)` refuses). Errors are those of `statx` and `fcntl`
    /// other than a refusal.
    pub fn enable_direct(&mut self) -> io::Result<Option<u32>> {
        if self.align != 0 {
            return Ok(Some(self.align));
        }
        let Some(align) = dio_alignment(&self.file)? else {
            return Ok(None);
        };
        let fd = self.file.as_raw_fd();
        // SAFETY: `fcntl` on a descriptor this backing owns, with integer arguments only.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_DIRECT) } < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok(None),
                _ => Err(e),
            };
        }
        self.align = align;
        Ok(Some(align))
    }

    /// The direct-I/O alignment, or 0 if the file is read and written through the kernel's
    /// page cache.
    pub fn direct_alignment(&self) -> u32 {
        self.align
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
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
        if !self.fits(offset, [(buf.as_ptr() as usize, buf.len())]) {
            return self.bounce_write(&[buf], offset);
        }
        if self.dontcache {
            return self.write_vectored_at(&[IoSlice::new(buf)], offset);
        }
        loop {
            match self.file.write_at(buf, offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return self.planted(offset, r),
            }
        }
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        let n = bufs.len().min(IOV_MAX);
        if n == 0 {
            return Ok(0);
        }
        if !self.fits(
            offset,
            bufs[..n].iter().map(|b| (b.as_ptr() as usize, b.len())),
        ) {
            let parts: Vec<&[u8]> = bufs[..n].iter().map(|b| &**b).collect();
            return self.bounce_write(&parts, offset);
        }
        let at = off_t(offset)?;
        let flags = self.rw_flags();
        // SAFETY: `IoSlice` is guaranteed ABI-compatible with `struct iovec` on Unix; the
        // first `n` entries are valid buffers borrowed for the call; the descriptor is open for
        // the lifetime of `self.file`.
        let r = retry_interrupted(|| unsafe {
            libc::pwritev2(
                self.file.as_raw_fd(),
                bufs.as_ptr().cast::<libc::iovec>(),
                n as libc::c_int,
                at,
                flags,
            )
        });
        self.planted(offset, r)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()?;
        self.drop_behind();
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()?;
        self.drop_behind();
        Ok(())
    }

    fn set_len(&self, size: u64) -> io::Result<()> {
        let _g = self.size_lock.lock();
        self.file.set_len(size)
    }

    fn raw_io(&self) -> Option<RawIo> {
        Some(RawIo::new(self.file.as_raw_fd(), self.align))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if !self.fits(offset, [(buf.as_ptr() as usize, buf.len())]) {
            return self.bounce_read(&mut [buf], offset);
        }
        if self.dontcache {
            return self.read_vectored_at(&mut [IoSliceMut::new(buf)], offset);
        }
        loop {
            match self.file.read_at(buf, offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return self.planted(offset, r),
            }
        }
    }

    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        let n = bufs.len().min(IOV_MAX);
        if n == 0 {
            return Ok(0);
        }
        if !self.fits(
            offset,
            bufs[..n].iter().map(|b| (b.as_ptr() as usize, b.len())),
        ) {
            let mut parts: Vec<&mut [u8]> = bufs[..n].iter_mut().map(|b| &mut **b).collect();
            return self.bounce_read(&mut parts, offset);
        }
        let at = off_t(offset)?;
        let flags = self.rw_flags();
        // SAFETY: `IoSliceMut` is guaranteed ABI-compatible with `struct iovec` on Unix; the
        // first `n` entries are valid, writable buffers borrowed mutably for the call; the
        // descriptor is open for the lifetime of `self.file`.
        let r = retry_interrupted(|| unsafe {
            libc::preadv2(
                self.file.as_raw_fd(),
                bufs.as_mut_ptr().cast::<libc::iovec>(),
                n as libc::c_int,
                at,
                flags,
            )
        });
        self.planted(offset, r)
    }
}

impl FileBacking {
    /// After a sync of an uncached file: drops the kernel's clean pages of it. `RWF_DONTCACHE`
    /// should have dropped each written page when its writeback ended, but the kernel skips
    /// that when the completion runs in interrupt context (Linux 6.18 on ext4 here: every
    /// page of a synced 1 MiB write stayed cached); after the sync they are all clean, and
    /// `POSIX_FADV_DONTNEED` drops them. (Pages written back by the kernel without a sync of
    /// ours may stay until its reclaim takes them.)
    fn drop_behind(&self) {
        if self.dontcache {
            // SAFETY: plain integer arguments on a descriptor this backing owns. A failure
            // only leaves clean pages cached, which is what a buffered file always had.
            unsafe { libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    }

    /// The `RWF_*` flags of this file's `preadv2`/`pwritev2` calls.
    #[inline]
    fn rw_flags(&self) -> libc::c_int {
        if self.dontcache {
            RWF_DONTCACHE
        } else {
            0
        }
    }

    /// The result of a read or write at `offset`, after the fault a test planted there
    /// (`io::engine::faults`); the result itself outside the library's tests.
    #[inline(always)]
    fn planted(&self, offset: u64, r: io::Result<usize>) -> io::Result<usize> {
        #[cfg(all(test, not(loom)))]
        let r = super::engine::faults::on_call(self.file.as_raw_fd(), offset, r);
        #[cfg(not(all(test, not(loom))))]
        let _ = offset;
        r
    }
}

/// `RWF_DONTCACHE` (`include/uapi/linux/fs.h`, Linux 6.14): buffered I/O whose pages the
/// kernel drops once read or written back (not yet in the `libc` crate).
const RWF_DONTCACHE: libc::c_int = 0x80;

/// A file offset as `off_t`, or `InvalidInput` past its range.
fn off_t(offset: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset beyond off_t"))
}

/// Runs a vectored system call until it is not interrupted (`EINTR`): its byte count, or its
/// error.
fn retry_interrupted(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let r = call();
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl FileBacking {
    /// Whether a request meets the descriptor's direct-I/O alignment (always when buffered).
    fn fits(&self, offset: u64, bufs: impl IntoIterator<Item = (usize, usize)>) -> bool {
        RawIo::new(-1, self.align).fits(offset, bufs)
    }

    /// Reads the aligned blocks around `offset.. + len` into `bounce` (from the block that
    /// holds `offset`): the bytes read, fewer at the end of the file.
    fn read_blocks(&self, bounce: &mut [u8], start: u64) -> io::Result<usize> {
        let mut got = 0;
        while got < bounce.len() {
            match self.file.read_at(&mut bounce[got..], start + got as u64) {
                Ok(0) => break,
                Ok(n) => {
                    got += n;
                    if got % self.align as usize != 0 {
                        break; // the end of the file, inside a block
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    /// A direct read that does not meet the alignment, through an aligned bounce buffer.
    #[cold]
    fn bounce_read(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<usize> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        let a = self.align as u64;
        let start = offset - offset % a;
        let end = (offset + len as u64).div_ceil(a) * a;
        let mut bounce = AlignedBuf::new((end - start) as usize, self.align as usize)?;
        let got = self.read_blocks(bounce.as_mut(), start)?;
        let skip = (offset - start) as usize;
        let avail = got.saturating_sub(skip).min(len);
        let mut from = &bounce.as_mut()[skip..skip + avail];
        for b in bufs.iter_mut() {
            let n = b.len().min(from.len());
            b[..n].copy_from_slice(&from[..n]);
            from = &from[n..];
        }
        Ok(avail)
    }

    /// A direct write that does not meet the alignment: the partial blocks at its edges are
    /// read first, the covering blocks written whole, and the file cut back to the size it
    /// should have if the rounded write extended it.
    #[cold]
    fn bounce_write(&self, bufs: &[&[u8]], offset: u64) -> io::Result<usize> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if len == 0 {
            return Ok(0);
        }
        let a = self.align as u64;
        let start = offset - offset % a;
        let end = (offset + len as u64).div_ceil(a) * a;
        let _g = self.size_lock.lock();
        let size = self.file.metadata()?.len();
        let mut bounce = AlignedBuf::new((end - start) as usize, self.align as usize)?;
        let b = bounce.as_mut();
        // The edges: a block partly outside the write keeps the file's bytes there.
        if offset > start && start < size {
            self.read_blocks(&mut b[..a as usize], start)?;
        }
        let last = end - a;
        if offset + (len as u64) < end && last < size && (last > start || offset == start) {
            let at = (last - start) as usize;
            self.read_blocks(&mut b[at..], last)?;
        }
        let mut at = (offset - start) as usize;
        for part in bufs {
            b[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        let mut done = 0;
        while done < b.len() {
            match self.file.write_at(&b[done..], start + done as u64) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if done as u64 > offset - start => {
                    // Part of the caller's bytes reached the file: report them (a short
                    // write), as `pwrite` would, and the error on the next call.
                    let _ = e;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        let wrote = ((done as u64).saturating_sub(offset - start)).min(len as u64);
        let true_end = size.max(offset + wrote);
        if start + done as u64 > true_end {
            self.file.set_len(true_end)?;
        }
        Ok(wrote as usize)
    }
}

/// The direct-I/O alignment `statx(STATX_DIOALIGN)` reports for `file` (the larger of the
/// memory and offset alignments), or `None` if the file system has no direct I/O for it or
/// needs an alignment above the page size (4 KiB).
pub fn dio_alignment(file: &File) -> io::Result<Option<u32>> {
    // SAFETY: `statx` is plain old data; all zeroes is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: a valid descriptor, an empty path with `AT_EMPTY_PATH` (the descriptor itself),
    // and a pointer to a `statx` that lives for the call.
    let r = unsafe {
        libc::statx(
            file.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EINVAL) => Ok(None),
            _ => Err(e),
        };
    }
    if stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return Ok(None);
    }
    let align = stx.stx_dio_offset_align.max(stx.stx_dio_mem_align);
    if !align.is_power_of_two() || align > 4096 {
        return Ok(None);
    }
    Ok(Some(align))
}

/// The readahead window of the block device that holds `file`, in 4 KiB pages: its
/// `queue/read_ahead_kb` in sysfs (the partition's disk for a partition), as the kernel's
/// `bdi->ra_pages`; `None` where sysfs does not say (a file system on no block device).
pub fn device_readahead_pages(file: &File) -> Option<usize> {
    use std::os::unix::fs::MetadataExt;
    let dev = file.metadata().ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = format!("/sys/dev/block/{major}:{minor}");
    ["queue/read_ahead_kb", "../queue/read_ahead_kb"]
        .iter()
        .find_map(|p| std::fs::read_to_string(format!("{base}/{p}")).ok())
        .and_then(|s| s.trim().parse::<usize>().ok())
        .map(|kb| kb / 4)
}

/// A zeroed heap buffer aligned for direct I/O.
struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    fn new(len: usize, align: usize) -> io::Result<AlignedBuf> {
        let layout = std::alloc::Layout::from_size_align(len.max(align), align)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(ptr).ok_or(io::ErrorKind::OutOfMemory)?;
        Ok(AlignedBuf { ptr, layout })
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` owns `layout.size()` initialized (zeroed) bytes, borrowed mutably
        // through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
