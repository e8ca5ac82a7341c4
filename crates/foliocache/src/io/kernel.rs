//! What the kernel's page cache holds of a file: the check that direct I/O keeps no second
//! copy there (`mincore(2)`), and the drop that makes a measurement cold
//! (`posix_fadvise(POSIX_FADV_DONTNEED)`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Drops the kernel's cached pages of the file at `path`, as a cold measurement needs:
/// `fdatasync` (dirty pages cannot be dropped; written back, they can), then
/// `posix_fadvise(POSIX_FADV_DONTNEED)` over the whole file. Pages mapped by a process stay;
/// on tmpfs nothing goes (its pages are the file).
pub fn drop_kernel_cache(path: &Path) -> io::Result<()> {
    let f = File::open(path)?;
    f.sync_data()?;
    // SAFETY: `posix_fadvise` on a descriptor we own, with integer arguments only.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// The fraction (0 to 1) of the pages of the file at `path` that are resident in the kernel's
/// page cache: `mincore(2)` over a read-only shared mapping of it (mapping a file faults
/// nothing in, so looking does not change the answer). An empty file is 0.
pub fn kernel_residency(path: &Path) -> io::Result<f64> {
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(0.0);
    }
    let len = usize::try_from(len).map_err(|_| io::Error::other("file too large to map"))?;
    // SAFETY: sysconf with a constant name.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096);
    // SAFETY: a fresh read-only shared mapping of a file we hold open; nothing else uses the
    // address range, and it is unmapped below before the function returns.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `addr..addr + len` is the mapping made above; `vec` has one byte per page of it.
    let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr().cast()) };
    let err = io::Error::last_os_error();
    // SAFETY: the mapping made above, not used after this.
    unsafe { libc::munmap(addr, len) };
    if rc != 0 {
        return Err(err);
    }
    let resident = vec.iter().filter(|&&b| b & 1 != 0).count();
    Ok(resident as f64 / pages as f64)
}
