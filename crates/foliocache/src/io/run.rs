//! Reading a run of folios: one vectored read per contiguous run, the rule that tells EOF
//! from a file changed behind the cache, and the zeroing past the size a fill started under.

// The cache, which drives the engines, is not compiled under loom.
#![cfg_attr(loom, allow(dead_code))]

use std::fmt;
use std::io::{self, IoSliceMut};

use super::backing::Backing;
use super::engine::{RawBuf, Req};

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
    zero_from(bufs, kept);
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

/// [`read_run`] for many runs at once: each run `(offset, buffers)` becomes one request of a
/// batch the `engine` runs together (the plug: `read_pages` for every run of a window, or of
/// every range of a many-range read, then one wait), and `on_done(k, result)` is called once
/// for each run `k` as its request completes (`end_io` per bio), so its folios can be
/// unlocked while the rest of the batch is in flight. A run whose request came back short is
/// finished by [`read_run`] from where it stopped (so EOF, a changed file and the zeroing past
/// `backing_size` follow exactly its rules) before its `on_done`. A single run skips the
/// engine: one positional read, as before.
///
/// # Safety
///
/// Every run's buffers stay valid, and nothing but this call reads or writes them, until
/// `on_done` is called for that run ([`Req::read_raw`](super::engine::Req::read_raw)'s
/// contract); after it this call never touches them again.
pub(crate) unsafe fn read_runs_each(
    engine: &super::engine::Engine,
    backing: &dyn Backing,
    runs: Vec<(u64, Vec<RawBuf>)>,
    backing_size: u64,
    on_done: &mut dyn FnMut(usize, Result<usize, RunError>),
) {
    let slices = |bufs: &[RawBuf]| -> Vec<&mut [u8]> {
        bufs.iter()
            // SAFETY: the caller's promise: the buffers are ours until `on_done` for their
            // run, and each run's slices are made once, for its one use.
            .map(|b| unsafe { b.slice_mut() })
            .collect()
    };
    if let [(offset, bufs)] = &runs[..] {
        let r = read_run(backing, &mut slices(bufs), *offset, backing_size);
        on_done(0, r);
        return;
    }
    // The bytes each run should find below `backing_size`; a run with none reads nothing.
    let want: Vec<usize> = runs
        .iter()
        .map(|(offset, bufs)| {
            let room: usize = bufs.iter().map(|b| b.parts().1).sum();
            usize::try_from(backing_size.saturating_sub(*offset))
                .unwrap_or(usize::MAX)
                .min(room)
        })
        .collect();
    let mut reqs: Vec<Req<'_>> = Vec::with_capacity(runs.len());
    let mut of_req: Vec<usize> = Vec::with_capacity(runs.len());
    for (k, (offset, bufs)) in runs.iter().enumerate() {
        if want[k] > 0 {
            // SAFETY: the caller's promise covers the request: it is announced (and `on_done`
            // called) before the buffers go back to the caller.
            reqs.push(unsafe { Req::read_raw(*offset, bufs.clone()) });
            of_req.push(k);
        } else {
            // Every byte is past `backing_size`: a hole, or past EOF.
            zero_from(&mut slices(bufs), 0);
            on_done(k, Ok(0));
        }
    }
    engine.run_each(backing, &mut reqs, &mut |i, r| {
        let k = of_req[i];
        let (offset, bufs) = &runs[k];
        let mut bufs = slices(bufs);
        let want = want[k];
        let result = match r {
            Err(e) => Err(RunError::Io(copy_error(e))),
            Ok(n) => {
                let n = *n;
                let room: usize = bufs.iter().map(|b| b.len()).sum();
                if n > room {
                    Err(overlong_read(backing, n, room, *offset))
                } else if n >= want {
                    zero_from(&mut bufs, want);
                    Ok(want)
                } else if n == 0 {
                    check_end_of_data(backing, *offset, backing_size).map(|()| {
                        zero_from(&mut bufs, 0);
                        0
                    })
                } else {
                    // Short: the rest from where the request stopped.
                    let mut rest = tail_from(&mut bufs, n);
                    read_run(backing, &mut rest, *offset + n as u64, backing_size).map(|m| n + m)
                }
            }
        };
        on_done(k, result);
    });
}

/// An owned copy of `e` (its OS error code, or its kind and message): the result an engine
/// announces by reference, for a caller that keeps it.
pub(crate) fn copy_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
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
