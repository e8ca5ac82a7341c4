//! The file backing: a real file read and written with positional system calls.

use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::backing::{Backing, FileAttrs};

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
        let offset = off_t(offset)?;
        // SAFETY: `IoSlice` is guaranteed ABI-compatible with `struct iovec` on Unix; the
        // first `n` entries are valid buffers borrowed for the call; the descriptor is open for
        // the lifetime of `self.file`.
        retry_interrupted(|| unsafe {
            libc::pwritev(
                self.file.as_raw_fd(),
                bufs.as_ptr().cast::<libc::iovec>(),
                n as libc::c_int,
                offset,
            )
        })
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
        let offset = off_t(offset)?;
        // SAFETY: `IoSliceMut` is guaranteed ABI-compatible with `struct iovec` on Unix; the
        // first `n` entries are valid, writable buffers borrowed mutably for the call; the
        // descriptor is open for the lifetime of `self.file`.
        retry_interrupted(|| unsafe {
            libc::preadv(
                self.file.as_raw_fd(),
                bufs.as_mut_ptr().cast::<libc::iovec>(),
                n as libc::c_int,
                offset,
            )
        })
    }
}

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
