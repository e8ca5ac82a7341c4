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

/// The most bytes one read request carries when a window is split for the engine: the
/// kernel's default readahead window (`read_ahead_kb`, 128 KiB), and fio's sequential block
/// size in the figures the engine is held to. A folio larger than this is one request.
pub(crate) const MAX_IO_BYTES: usize = 128 << 10;

/// [`read_run`] for many runs at once: each run `(offset, buffers)` becomes one request of
/// a batch the `engine` runs together (the plug: `read_pages` for every run of a window, or
/// of every range of a many-range read, then one wait), and a run whose request came back
/// short is finished by [`read_run`] from where it stopped (so EOF, a changed file and the
/// zeroing past `backing_size` follow exactly its rules). Returns each run's result, in
/// order. A single run skips the engine: one positional read, as before.
pub(crate) fn read_runs(
    engine: &super::engine::Engine,
    backing: &dyn Backing,
    runs: &mut [(u64, Vec<&mut [u8]>)],
    backing_size: u64,
) -> Vec<Result<usize, RunError>> {
    use super::engine::{Op, Req};
    if let [(offset, bufs)] = runs {
        return vec![read_run(backing, bufs, *offset, backing_size)];
    }
    // The bytes each run should find below `backing_size`; a run with none reads nothing.
    let want: Vec<usize> = runs
        .iter()
        .map(|(offset, bufs)| {
            let room: usize = bufs.iter().map(|b| b.len()).sum();
            usize::try_from(backing_size.saturating_sub(*offset))
                .unwrap_or(usize::MAX)
                .min(room)
        })
        .collect();
    let mut reqs: Vec<Req<'_>> = Vec::with_capacity(runs.len());
    let mut of_req: Vec<usize> = Vec::with_capacity(runs.len());
    for (k, (offset, bufs)) in runs.iter_mut().enumerate() {
        if want[k] > 0 {
            reqs.push(Req::read(*offset, std::mem::take(bufs)));
            of_req.push(k);
        }
    }
    engine.run(backing, &mut reqs);
    let mut results: Vec<Option<io::Result<usize>>> = (0..runs.len()).map(|_| None).collect();
    for (req, k) in reqs.into_iter().zip(of_req) {
        let Req { op, result, .. } = req;
        if let Op::Read(bufs) = op {
            runs[k].1 = bufs;
        }
        results[k] = result;
    }
    runs.iter_mut()
        .zip(results)
        .zip(want)
        .map(|(((offset, bufs), r), want)| {
            let n = match r {
                None => 0, // nothing to read: every byte is past `backing_size`
                Some(Err(e)) => return Err(RunError::Io(e)),
                Some(Ok(n)) => n,
            };
            let room: usize = bufs.iter().map(|b| b.len()).sum();
            if n > room {
                return Err(overlong_read(backing, n, room, *offset));
            }
            if n >= want {
                zero_from(bufs, want);
                return Ok(want);
            }
            if n == 0 {
                check_end_of_data(backing, *offset, backing_size)?;
                zero_from(bufs, 0);
                return Ok(0);
            }
            // Short: the rest from where the request stopped.
            let mut rest = tail_from(bufs, n);
            Ok(n + read_run(backing, &mut rest, *offset + n as u64, backing_size)?)
        })
        .collect()
}

/// Zeroes every byte of `bufs` from byte `from` on.
fn zero_from(bufs: &mut [&mut [u8]], mut from: usize) {
    for b in bufs.iter_mut() {
        if from >= b.len() {
            from -= b.len();
            continue;
        }
        b[from..].fill(0);
        from = 0;
    }
}

/// The buffers of `bufs` from byte `from` on (the first one cut).
fn tail_from<'b>(bufs: &'b mut [&mut [u8]], mut from: usize) -> Vec<&'b mut [u8]> {
    let mut out = Vec::with_capacity(bufs.len());
    for b in bufs.iter_mut() {
        if from >= b.len() {
            from -= b.len();
            continue;
        }
        out.push(&mut b[from..]);
        from = 0;
    }
    out
}
