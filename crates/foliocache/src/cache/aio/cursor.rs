//! [`AsyncCursor`]: an [`AsyncFile`] with a position, as tokio's `AsyncRead`, `AsyncSeek`
//! and `AsyncWrite` (feature `tokio`), for code written against `tokio::io`.

use std::future::Future;
use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::AsyncFile;
use crate::cache::error::CacheError;

/// The most bytes one `poll_read` that misses reads (into a buffer of its own).
const MAX_SLOW_READ: usize = 1 << 20;

type Op<T> = Pin<Box<dyn Future<Output = Result<T, CacheError>> + Send>>;

/// A position over an [`AsyncFile`], implementing tokio's `AsyncRead`, `AsyncSeek` and
/// `AsyncWrite` (feature `tokio`). Made by [`AsyncFile::cursor`]; it owns a clone of the
/// handle, so it is `'static` and `Send`.
///
/// A read whose bytes are cached copies them into the caller's buffer at once, with no
/// allocation. One that misses reads into a buffer of its own (up to 1 MiB) through
/// [`AsyncFile::read_at`] and copies when it completes; a read started and then abandoned
/// (the caller stops polling) leaves its pages cached. A write goes through
/// [`AsyncFile::write_at`] (the handle must be writable); `poll_flush` does nothing and
/// `poll_shutdown` only finishes a write in progress: durability is a sync
/// ([`AsyncFile::sync_data`]).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("log");
/// # std::fs::write(&path, "first\nsecond\n")?;
/// use tokio::io::{AsyncReadExt, AsyncSeekExt};
///
/// let cache = foliocache::FolioCache::new(foliocache::Config::new(1 << 20))?;
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// rt.block_on(async {
///     let file = foliocache::AsyncFile::open(&cache, &path).await?;
///     let mut cursor = file.cursor();
///     cursor.seek(std::io::SeekFrom::Start(6)).await?;
///     let mut rest = String::new();
///     cursor.read_to_string(&mut rest).await?;
///     assert_eq!(rest, "second\n");
///     Ok::<_, Box<dyn std::error::Error>>(())
/// })?;
/// # Ok(()) }
/// ```
pub struct AsyncCursor {
    file: AsyncFile,
    pos: u64,
    /// A seek to `End` waits for nothing: the position is computed at `start_seek`.
    reading: Option<Op<Vec<u8>>>,
    writing: Option<Op<usize>>,
}

impl std::fmt::Debug for AsyncCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCursor")
            .field("file", &self.file)
            .field("pos", &self.pos)
            .finish()
    }
}

impl AsyncFile {
    /// A cursor at offset 0 over this file, for `tokio::io` (feature `tokio`).
    pub fn cursor(&self) -> AsyncCursor {
        AsyncCursor {
            file: self.clone(),
            pos: 0,
            reading: None,
            writing: None,
        }
    }
}

impl AsyncCursor {
    /// The position: the offset of the next read or write.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The file under the cursor.
    pub fn file(&self) -> &AsyncFile {
        &self.file
    }
}

impl tokio::io::AsyncRead for AsyncCursor {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.reading.is_none() {
            let dst = buf.initialize_unfilled();
            if let Some(n) = this.file.read_cached_now(dst, this.pos) {
                buf.advance(n);
                this.pos += n as u64;
                return Poll::Ready(Ok(()));
            }
            let (file, pos, len) = (this.file.clone(), this.pos, dst.len().min(MAX_SLOW_READ));
            this.reading = Some(Box::pin(async move {
                let mut v = vec![0u8; len];
                let n = file.read_at(&mut v, pos).await?;
                v.truncate(n);
                Ok(v)
            }));
        }
        let r = std::task::ready!(this.reading.as_mut().expect("set above").as_mut().poll(cx));
        this.reading = None;
        let bytes = r?;
        let n = bytes.len().min(buf.remaining());
        buf.put_slice(&bytes[..n]);
        this.pos += n as u64;
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncSeek for AsyncCursor {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> io::Result<()> {
        let this = self.get_mut();
        let base = match position {
            SeekFrom::Start(p) => {
                this.pos = p;
                return Ok(());
            }
            SeekFrom::Current(d) => (this.pos, d),
            SeekFrom::End(d) => (this.file.len(), d),
        };
        this.pos = base.0.checked_add_signed(base.1).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek to a negative or overflowing position",
            )
        })?;
        // A read in progress was for the old position.
        this.reading = None;
        Ok(())
    }

    fn poll_complete(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Poll::Ready(Ok(self.pos))
    }
}

impl tokio::io::AsyncWrite for AsyncCursor {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.writing.is_none() {
            let (file, pos, data) = (this.file.clone(), this.pos, buf.to_vec());
            this.writing = Some(Box::pin(async move { file.write_at(&data, pos).await }));
        }
        let r = std::task::ready!(this.writing.as_mut().expect("set above").as_mut().poll(cx));
        this.writing = None;
        let n = r?;
        this.pos += n as u64;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(w) = this.writing.as_mut() {
            let r = std::task::ready!(w.as_mut().poll(cx));
            this.writing = None;
            this.pos += r? as u64;
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    use crate::{AsyncFile, Config, FolioCache, OpenOptions};

    #[test]
    fn a_cursor_reads_seeks_and_writes_like_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let cache = FolioCache::new(Config::new(4 << 20)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let f = AsyncFile::open_with(&cache, &path, OpenOptions::new().write(true))
                .await
                .unwrap();
            // Cold: every read misses first, then the rest of each page hits.
            let mut all = Vec::new();
            f.cursor().read_to_end(&mut all).await.unwrap();
            assert!(all == data);
            let mut c = f.cursor();
            assert_eq!(c.seek(std::io::SeekFrom::End(-100)).await.unwrap(), 299_900);
            let mut tail = Vec::new();
            c.read_to_end(&mut tail).await.unwrap();
            assert_eq!(tail, data[299_900..]);
            assert!(c.seek(std::io::SeekFrom::Current(-400_000)).await.is_err());
            c.seek(std::io::SeekFrom::Start(10)).await.unwrap();
            c.write_all(b"0123456789").await.unwrap();
            c.flush().await.unwrap();
            assert_eq!(c.position(), 20);
            let mut back = [0u8; 30];
            c.seek(std::io::SeekFrom::Start(0)).await.unwrap();
            c.read_exact(&mut back).await.unwrap();
            assert_eq!(&back[10..20], b"0123456789");
            assert_eq!(back[..10], data[..10]);
            assert_eq!(back[20..], data[20..30]);
        });
    }
}
