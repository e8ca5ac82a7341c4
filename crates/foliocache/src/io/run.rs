//! Reading a run of folios: one vectored read per contiguous run, the rule that tells EOF
//! from a file changed behind the cache, and the zeroing past the size a fill started under.

use std::fmt;
use std::io::{self, IoSliceMut};

use super::backing::Backing;

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
