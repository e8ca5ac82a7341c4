//! [`FileCursor`]: a cached file as a [`std::io`] stream (`Read`, `BufRead`, `Seek`, `Write`),
//! for code written against those traits (parsers, decoders, `io::copy`).
//!
//! A [`CachedFile`] works like a file descriptor used with `pread`/`pwrite`: every call names
//! its offset, and the handle keeps no position (many threads share one without locking).
//! A cursor adds the position, as `read(2)` on a descriptor does, and is used by one thread
//! at a time (`&mut self`); make one per stream, as many as needed over one handle.
//!
//! `BufRead` is zero-copy: [`FileCursor::fill_buf`](std::io::BufRead::fill_buf) pins the
//! folio under the position and returns the rest of its bytes in place, so reading a file
//! line by line copies nothing out of the cache; the pin is kept until the position leaves
//! that folio (or the cursor seeks, writes or drops), so it holds one folio of the budget at
//! most. `Read` copies, as [`CachedFile::read_at`] does.
//!
//! Writes go through [`CachedFile::write_at`] (the handle must be writable) and are visible to
//! every reader at once; `flush` does nothing, as `File::flush` does nothing: durability is a
//! sync ([`CachedFile::sync_data`]).

use std::io::{self, BufRead, Read, Seek, SeekFrom, Write};

use super::file::CachedFile;
use super::guard::PinnedFolio;

/// A position over a [`CachedFile`], implementing `Read`, `BufRead`, `Seek` and `Write`, for
/// code written against [`std::io`]. Made by [`CachedFile::cursor`].
///
/// A handle keeps no position (every call names its offset, like `pread`); a cursor adds one
/// and is used by one thread at a time. `BufRead` is zero-copy: `fill_buf` pins the folio
/// under the position and returns the rest of its bytes in place, keeping that one pin until
/// the position leaves the folio or the cursor seeks, writes or drops. `Read` copies, as
/// [`CachedFile::read_at`] does. Writes go through [`CachedFile::write_at`] (the handle must
/// be writable) and are visible to every reader at once; `flush` does nothing, as
/// `File::flush` does nothing: durability is a sync ([`CachedFile::sync_data`]).
///
/// ```
/// use std::io::{BufRead, Read, Seek, SeekFrom};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("notes.txt");
/// # std::fs::write(&path, "first line\nsecond line\nthird line\n")?;
/// let cache = foliocache::FolioCache::new(foliocache::Config::new(1 << 20))?;
/// let file = cache.open(&path)?;
///
/// let lines: Vec<String> = file.cursor().lines().collect::<Result<_, _>>()?;
/// assert_eq!(lines, ["first line", "second line", "third line"]);
///
/// let mut cursor = file.cursor();
/// cursor.seek(SeekFrom::End(-11))?;
/// let mut tail = String::new();
/// cursor.read_to_string(&mut tail)?;
/// assert_eq!(tail, "third line\n");
/// # Ok(()) }
/// ```
pub struct FileCursor<'f> {
    file: &'f CachedFile,
    pos: u64,
    /// The folio `fill_buf` returned bytes of, while the position is inside it.
    held: Option<PinnedFolio<'f>>,
}

impl std::fmt::Debug for FileCursor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCursor")
            .field("path", &self.file.path())
            .field("pos", &self.pos)
            .field("pinned", &self.held.is_some())
            .finish()
    }
}

impl CachedFile {
    /// A [`FileCursor`] over this handle at offset 0: the file as an `io::Read + BufRead +
    /// Seek + Write` stream.
    pub fn cursor(&self) -> FileCursor<'_> {
        FileCursor {
            file: self,
            pos: 0,
            held: None,
        }
    }
}

impl<'f> FileCursor<'f> {
    /// The current position (the next byte read or written).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The handle the cursor reads and writes.
    pub fn file(&self) -> &'f CachedFile {
        self.file
    }

    /// The bytes of the held folio from the position on, if the position is inside it and
    /// before the file's end.
    fn held_bytes(&self) -> Option<&[u8]> {
        let folio = self.held.as_ref()?;
        let start = self.pos.checked_sub(folio.offset())?;
        let end = (folio.bytes().len() as u64).min(self.file.len().saturating_sub(folio.offset()));
        (start < end).then(|| &folio.bytes()[start as usize..end as usize])
    }
}

impl Read for FileCursor<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(bytes) = self.held_bytes() {
            // Served from the pinned folio: the caller mixes `fill_buf` and `read`.
            let n = bytes.len().min(buf.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            self.consume(n);
            return Ok(n);
        }
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl BufRead for FileCursor<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.held_bytes().is_none() {
            self.held = None;
            if self.pos >= self.file.len() {
                return Ok(&[]);
            }
            self.held = Some(self.file.get_folio_at(self.pos)?);
        }
        Ok(self.held_bytes().unwrap_or(&[]))
    }

    fn consume(&mut self, amt: usize) {
        self.pos += amt as u64;
        if self.held_bytes().is_none() {
            self.held = None;
        }
    }
}

impl Seek for FileCursor<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let (base, delta) = match to {
            SeekFrom::Start(at) => (at, 0),
            SeekFrom::End(delta) => (self.file.len(), delta),
            SeekFrom::Current(delta) => (self.pos, delta),
        };
        let pos = base.checked_add_signed(delta).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "seek to {base} {delta:+} bytes of {}: before the start of the file or past \
                     2^64",
                    self.file.path().display()
                ),
            )
        })?;
        self.pos = pos;
        if self.held_bytes().is_none() {
            self.held = None;
        }
        Ok(pos)
    }

    fn stream_position(&mut self) -> io::Result<u64> {
        Ok(self.pos)
    }
}

impl Write for FileCursor<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // The pinned folio would show the bytes from before this write.
        self.held = None;
        let n = self.file.write_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Does nothing, as `File::flush` does nothing: the bytes are in the cache already and
    /// visible to every reader; a sync makes them durable.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::folio::PAGE_SIZE;
    use crate::{Config, FolioCache, OpenOptions};

    fn file_with(data: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, data).unwrap();
        (dir, path)
    }

    fn content(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    #[test]
    fn reading_to_the_end_in_any_step_gives_the_file() {
        let data = content(3 * PAGE_SIZE + 1234);
        let (_d, path) = file_with(&data);
        let cache = FolioCache::new(Config::new(1 << 20)).unwrap();
        let file = cache.open(&path).unwrap();
        for step in [1, 7, 4096, 5000, 1 << 20] {
            let mut c = file.cursor();
            let mut out = Vec::new();
            let mut buf = vec![0u8; step];
            loop {
                let n = c.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
            }
            assert!(out == data, "step {step}: the bytes read are the file's");
            assert_eq!(c.position(), data.len() as u64);
        }
        let mut all = Vec::new();
        file.cursor().read_to_end(&mut all).unwrap();
        assert!(all == data);
    }

    #[test]
    fn buffered_reading_is_zero_copy_and_pins_one_folio_at_most() {
        let data = content(2 * PAGE_SIZE + 100);
        let (_d, path) = file_with(&data);
        let cache = FolioCache::new(Config::new(1 << 20)).unwrap();
        let file = cache.open(&path).unwrap();
        let mut c = file.cursor();
        c.seek(SeekFrom::Start(4000)).unwrap();
        let (ptr, len) = {
            let b = c.fill_buf().unwrap();
            (b.as_ptr(), b.len())
        };
        // The same bytes a pinned guard sees: the slice points into the cache, and runs to the
        // end of the folio holding offset 4000 (one page, or more with large folios).
        let page = file.get_folio(0).unwrap();
        assert_eq!(page.offset(), 0);
        assert_eq!(ptr, page[4000..].as_ptr());
        assert_eq!(len, page.len() - 4000, "the rest of the folio");
        let pinned = page.ref_count();
        c.consume(len);
        assert!(c.held.is_none(), "leaving the folio unpins it");
        assert_eq!(
            page.ref_count(),
            pinned - 1,
            "the cursor's reference is put"
        );
        drop(page);
        let mut out = data[..4000 + len].to_vec();
        loop {
            let b = c.fill_buf().unwrap();
            if b.is_empty() {
                break;
            }
            let n = b.len();
            out.extend_from_slice(b);
            c.consume(n);
        }
        assert!(out == data, "the buffered bytes are the file's");
        assert!(c.held.is_none());
    }

    #[test]
    fn seeks_are_relative_to_start_end_and_position_and_never_negative() {
        let data = content(10_000);
        let (_d, path) = file_with(&data);
        let cache = FolioCache::new(Config::new(1 << 20)).unwrap();
        let file = cache.open(&path).unwrap();
        let mut c = file.cursor();
        assert_eq!(c.seek(SeekFrom::End(-10)).unwrap(), 9_990);
        assert_eq!(c.seek(SeekFrom::Current(-90)).unwrap(), 9_900);
        assert_eq!(c.seek(SeekFrom::Start(5)).unwrap(), 5);
        let e = c.seek(SeekFrom::Current(-6)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(c.position(), 5, "a failed seek leaves the position");
        // Past the end: reads return 0, as on a file descriptor.
        c.seek(SeekFrom::End(100)).unwrap();
        assert_eq!(c.read(&mut [0u8; 10]).unwrap(), 0);
        assert!(c.fill_buf().unwrap().is_empty());
    }

    #[test]
    fn writes_land_at_the_position_and_a_held_folio_never_shows_stale_bytes() {
        let (_d, path) = file_with(&content(PAGE_SIZE));
        let cache = FolioCache::new(Config::new(1 << 20)).unwrap();
        let file = cache
            .open_with(&path, OpenOptions::new().write(true))
            .unwrap();
        let mut c = file.cursor();
        assert_eq!(c.fill_buf().unwrap()[0], 0);
        c.write_all(b"hello").unwrap();
        assert_eq!(c.position(), 5);
        c.seek(SeekFrom::Start(0)).unwrap();
        assert_eq!(&c.fill_buf().unwrap()[..5], b"hello");
        // Appending past the end through the cursor grows the file.
        c.seek(SeekFrom::End(0)).unwrap();
        c.write_all(b"tail").unwrap();
        c.flush().unwrap();
        assert_eq!(file.len(), PAGE_SIZE as u64 + 4);
        let mut s = String::new();
        c.seek(SeekFrom::End(-4)).unwrap();
        c.read_to_string(&mut s).unwrap();
        assert_eq!(s, "tail");
    }

    #[test]
    fn writing_through_a_read_only_handle_is_an_io_error() {
        let (_d, path) = file_with(b"x");
        let cache = FolioCache::new(Config::new(1 << 20)).unwrap();
        let file = cache.open(&path).unwrap();
        let e = file.cursor().write(b"y").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
    }

    #[test]
    fn io_copy_streams_a_file_through_the_cache() {
        let data = content(5 * PAGE_SIZE + 3);
        let (_d, path) = file_with(&data);
        let cache = FolioCache::new(Config::new(1 << 20)).unwrap();
        let file = cache.open(&path).unwrap();
        let mut out = Vec::new();
        let n = io::copy(&mut file.cursor(), &mut out).unwrap();
        assert_eq!(n, data.len() as u64);
        assert!(out == data);
        drop(file);
        cache.drop_caches();
        assert_eq!(cache.validate().unwrap().allocated_pages, 0);
    }
}
