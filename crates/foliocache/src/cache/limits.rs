//! How large a file may grow: the checks `generic_write_check_limits` and `inode_newsize_ok`
//! make before a write or a `set_len` starts (`mm/filemap.c`, `fs/attr.c`).
//!
//! Three limits apply, the smallest wins:
//!
//! | limit | kernel | here |
//! |---|---|---|
//! | `off_t`'s range | `MAX_LFS_FILESIZE` | [`MAX_FILE_SIZE`] |
//! | the file system's | `sb->s_maxbytes` | [`Inode::max_bytes`]: from the file system's type at open ([`fs_max_bytes`]), lowered to the offset of any write the file system refused with `EFBIG` |
//! | the process's | `RLIMIT_FSIZE` (with `SIGXFSZ`) | `Core::fsize_limit`: read when the cache is made and again after each `EFBIG` |
//!
//! An offset or size past `off_t`'s range is an invalid argument (`EINVAL`, as the kernel
//! answers a negative offset). A write that starts at or past the limit fails at once with
//! [`CacheError::FileTooLarge`]; one that would cross it is cut short at it (the call returns
//! fewer bytes, as `pwrite` does); a `set_len` past it fails. The kernel also sends
//! `SIGXFSZ` when the process's limit is crossed; the cache sends no signal, it returns the
//! error. Without these checks a write past the limit would be accepted into the cache,
//! the size would become unreachable, and `EFBIG` would surface only at the sync.
//!
//! `statfs` does not report `s_maxbytes`, and `pathconf(_PC_FILESIZEBITS)` is unreliable on
//! Linux (glibc answers 64 for ext4, whose files end at 16 TiB with 4 KiB blocks, and 32 for
//! tmpfs, whose files do not end at 4 GiB), so the file systems whose limit lies below
//! `MAX_LFS_FILESIZE` are known by type (ext2/3/4 and FAT); any other limit is learned from
//! the first write it refuses.

use super::core::Core;
use super::error::CacheError;
use super::inode::Inode;
use crate::mm::sync::Ordering;

/// The largest file size at all (`MAX_LFS_FILESIZE`: `off_t`'s range).
pub(crate) const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// `RLIMIT_FSIZE` of the process now (`MAX_FILE_SIZE` when unlimited or unreadable).
pub(crate) fn rlimit_fsize() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return MAX_FILE_SIZE;
    }
    #[allow(clippy::unnecessary_cast)] // `rlim_t` is not `u64` on every target
    (r.rlim_cur as u64).min(MAX_FILE_SIZE)
}

/// `s_maxbytes` of the file system holding the open file `fd`, as far as its type tells
/// (`ext4_max_size` for extent-mapped files: 2^32 - 1 blocks; FAT: 4 GiB - 1); anything else
/// `MAX_FILE_SIZE` until a refused write says otherwise.
pub(crate) fn fs_max_bytes(fd: std::os::fd::BorrowedFd<'_>) -> u64 {
    use std::os::fd::AsRawFd;
    const EXT_SUPER_MAGIC: i64 = 0xEF53; // ext2, ext3 and ext4 share it
    const MSDOS_SUPER_MAGIC: i64 = 0x4d44;
    // SAFETY: `statfs` is plain old data; zeroed is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fstatfs` writes one `statfs` through a valid pointer; `fd` is open.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return MAX_FILE_SIZE;
    }
    #[allow(clippy::unnecessary_cast)] // `f_type`'s width differs between targets
    match st.f_type as i64 {
        EXT_SUPER_MAGIC => {
            let block = u64::try_from(st.f_bsize).unwrap_or(4096).max(1024);
            (((1u64 << 32) - 1) * block).min(MAX_FILE_SIZE)
        }
        MSDOS_SUPER_MAGIC => (1u64 << 32) - 1,
        _ => MAX_FILE_SIZE,
    }
}

/// The limit a size check meets: its value and which one it is.
struct Limit {
    bytes: u64,
    which: &'static str,
}

fn too_large(m: &Inode, size: u64, limit: Limit) -> CacheError {
    CacheError::FileTooLarge {
        path: m.path.clone(),
        size,
        limit: limit.bytes,
        which: limit.which,
    }
}

/// An offset or size no `off_t` holds: `EINVAL` from the kernel (a negative offset), before
/// any size limit is looked at.
fn past_off_t(m: &Inode, what: &str, at: u64) -> CacheError {
    CacheError::InvalidArgument {
        what: format!(
            "{what} byte {at} of {}: past the largest offset a file has ({MAX_FILE_SIZE}, off_t's range)",
            m.path.display()
        ),
    }
}

impl Core {
    /// The largest size file `m` may reach now: the smaller of the process's and the file
    /// system's limits (both at most `MAX_FILE_SIZE`), and which it is.
    fn size_limit(&self, m: &Inode) -> Limit {
        // ORDERING: Relaxed; each is a limit read afresh by every check, lowered (or, for
        // the rlimit, re-read) by a refused write. A check that misses a concurrent change
        // is one the backing then refuses with `EFBIG`, reported at the sync as before.
        let process = self.fsize_limit.load(Ordering::Relaxed);
        let fs = m.max_bytes.load(Ordering::Relaxed);
        if process <= fs {
            Limit {
                bytes: process,
                which: "the process's file size limit (RLIMIT_FSIZE)",
            }
        } else {
            Limit {
                bytes: fs,
                which: "the file system's largest file size",
            }
        }
    }

    /// `inode_newsize_ok`: whether `m` may be given `size` bytes.
    pub(crate) fn check_size_limit(&self, m: &Inode, size: u64) -> Result<(), CacheError> {
        if size > MAX_FILE_SIZE {
            return Err(past_off_t(m, "set_len to", size));
        }
        let limit = self.size_limit(m);
        if size > limit.bytes {
            return Err(too_large(m, size, limit));
        }
        Ok(())
    }

    /// `generic_write_check_limits`: how many of `len` bytes a write at `pos` may write
    /// (all, or up to the limit); an error if `pos` is at or past it.
    pub(crate) fn write_limit(&self, m: &Inode, pos: u64, len: usize) -> Result<usize, CacheError> {
        if pos > MAX_FILE_SIZE {
            return Err(past_off_t(m, "a write at", pos));
        }
        let limit = self.size_limit(m);
        if pos >= limit.bytes {
            return Err(too_large(m, pos.saturating_add(len as u64), limit));
        }
        Ok(len.min(usize::try_from(limit.bytes - pos).unwrap_or(usize::MAX)))
    }

    /// A write of `m` was refused with `EFBIG` at byte `at`: if the process's limit does
    /// not explain it, the file system's lies there.
    pub(crate) fn note_efbig(&self, m: &Inode, at: u64) {
        let rlimit = rlimit_fsize();
        self.fsize_limit.store(rlimit, Ordering::Relaxed);
        if at < rlimit {
            m.max_bytes.fetch_min(at, Ordering::Relaxed);
        }
    }
}
