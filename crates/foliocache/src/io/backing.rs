//! The backing trait: what a cached file's bytes are read from and written to, and the
//! backings every cache has (`Arc<B>`, bytes in memory).

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::RawFd;

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

    /// The descriptor an I/O engine may read and write directly, bypassing these methods,
    /// and the alignment its direct I/O needs; `None` (the default) makes every engine call
    /// the methods above. A backing that returns a descriptor promises that reading and
    /// writing it is exactly what its methods do.
    fn raw_io(&self) -> Option<RawIo> {
        None
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

    fn raw_io(&self) -> Option<RawIo> {
        (**self).raw_io()
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

/// What an engine may do with a backing directly ([`Backing::raw_io`]): the descriptor, and
/// the alignment its direct I/O needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RawIo {
    /// The open descriptor the backing reads and writes.
    pub fd: RawFd,
    /// 0 for buffered I/O; otherwise the descriptor is open `O_DIRECT` and every offset,
    /// length and buffer address given to it must be a multiple of this (a power of two).
    pub align: u32,
}

impl RawIo {
    /// A descriptor `fd`, buffered (`align` 0) or direct with that alignment.
    pub fn new(fd: RawFd, align: u32) -> RawIo {
        RawIo { fd, align }
    }

    /// Whether a request at `offset` over buffers of these addresses and lengths meets the
    /// descriptor's alignment (always, for buffered I/O).
    pub fn fits(&self, offset: u64, bufs: impl IntoIterator<Item = (usize, usize)>) -> bool {
        if self.align == 0 {
            return true;
        }
        let a = self.align as usize;
        offset % a as u64 == 0
            && bufs
                .into_iter()
                .all(|(addr, len)| addr % a == 0 && len % a == 0)
    }
}
