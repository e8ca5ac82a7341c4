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
//! [`io::ErrorKind::Unsupported`](std::io::ErrorKind::Unsupported), syncs succeed (nothing was written).
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
//!
//! # The layer
//!
//! The bottom of the crate: everything that issues I/O to the file behind a cache lives
//! here, and this module imports nothing of the crate but [`sync`](crate::mm::sync) and the
//! [`Variant`](crate::Variant) trait its choices implement.
//! [`mm`](crate::mm) (readahead, writeback) and the cache import it; nothing here knows
//! of folios, indexes or caches.
//!
//! | file | what it holds |
//! |---|---|
//! | `backing.rs` | the [`Backing`] trait (`->read_folio`, `->writepages`, `fsync`), [`FileAttrs`], the `Arc` and in-memory backings |
//! | `file.rs` | [`FileBacking`]: a real file, `pread(2)`/`preadv(2)`/`pwritev(2)` |
//! | `run.rs` | [`read_run`] and [`check_end_of_data`]: one read per run, EOF against a changed file, zeroing past the size |
//! | `fault.rs` | [`FaultyBacking`]: fault injection for tests |
//! | `engine/` | the I/O engines: batches of requests through io_uring, a pool of threads, or one by one |
//! | `kernel.rs` | what the kernel's page cache holds of a file ([`kernel_residency`]), and [`drop_kernel_cache`] |
//!
//! The same items are reachable as [`crate::backing`], their first home.

mod backing;
pub(crate) mod engine;
mod fault;
mod file;
mod kernel;
mod run;

pub use backing::{Backing, FileAttrs, MemBacking, RawIo};
pub use engine::{uring_setup_flags, DirectIo, EngineKind, IoEngine, IoMode};
pub use fault::FaultyBacking;
pub use file::{device_readahead_pages, dio_alignment, FileBacking};
pub use kernel::{drop_kernel_cache, kernel_residency};
pub(crate) use run::copy_error;
pub use run::{check_end_of_data, read_run, RunError};
// Readahead's (the fill is not built under loom).
#[cfg(not(loom))]
pub(crate) use run::{read_runs_each, MAX_IO_BYTES};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::io::{self, IoSliceMut, Write};

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
