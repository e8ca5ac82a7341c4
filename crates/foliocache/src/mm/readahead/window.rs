//! The on-demand readahead window: `struct file_ra_state` and the arithmetic of
//! `mm/readahead.c` that decides what to read next (no I/O here).
//!
//! A [`RaState`] belongs to one open file handle, as `file_ra_state` lives in `struct file`:
//! two handles of one file keep two independent streams. All functions are pure: the page
//! cache is consulted only through the [`RaProbe`] the caller passes, so the window logic is
//! unit-tested without folios.

/// The kernel's default readahead window, `VM_READAHEAD_PAGES` (128 KiB of 4 KiB pages).
pub const DEFAULT_RA_PAGES: usize = 32;

/// The largest read the kernel lets one request push the window to (`bdi->io_pages`; here a
/// fixed 1 MiB of 4 KiB pages).
pub const IO_PAGES: usize = 256;

/// A readahead stream's state, mirroring `struct file_ra_state`.
///
/// | field | meaning |
/// |---|---|
/// | `start` | first page of the current window |
/// | `size` | pages in the current window |
/// | `async_size` | pages at the window's end that are "ahead": the first of them carries PG_readahead, and reaching it starts the next window |
/// | `ra_pages` | the maximum window (0 disables readahead) |
/// | `prev_pos` | the byte just after the last read of this handle (kept by the caller, passed in) |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaState {
    /// First page of the current window.
    pub start: u64,
    /// Pages in the current window.
    pub size: usize,
    /// Trailing pages of the window read ahead of the reader (the marked part).
    pub async_size: usize,
    /// Maximum window in pages (`ra->ra_pages`); 0 disables readahead.
    pub ra_pages: usize,
}

/// One call of `do_page_cache_ra`: read `nr_to_read` pages from `index`, marking the page
/// `lookahead` pages before the end with PG_readahead (no mark if `lookahead` is 0 or larger
/// than the request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaRequest {
    /// First page to read.
    pub index: u64,
    /// Pages to read (already clamped to EOF by [`RaRequest::clamp_to_eof`] when needed).
    pub nr_to_read: usize,
    /// Size of the lookahead part; the mark goes on its first page.
    pub lookahead: usize,
}

impl RaRequest {
    /// `do_page_cache_ra`'s clamp: nothing at or past the last page of a file of `file_pages`
    /// pages. Returns `None` when nothing is left to read.
    pub fn clamp_to_eof(mut self, file_pages: u64) -> Option<RaRequest> {
        if file_pages == 0 || self.index >= file_pages || self.nr_to_read == 0 {
            return None;
        }
        let left = file_pages - self.index;
        if self.nr_to_read as u64 > left {
            self.nr_to_read = left as usize;
        }
        Some(self)
    }

    /// The offset inside the request of the page that gets PG_readahead, as
    /// `page_cache_ra_unbounded` computes it (`None`: no mark).
    pub fn mark(&self) -> Option<usize> {
        if self.lookahead == 0 || self.lookahead > self.nr_to_read {
            None
        } else {
            Some(self.nr_to_read - self.lookahead)
        }
    }
}

/// What the window logic may ask the page cache (`page_cache_prev_miss` /
/// `page_cache_next_miss`), answered under RCU by the caller.
pub trait RaProbe {
    /// The highest page index in `(index - max_scan, index]` that is NOT cached, or `None` if
    /// every page down to `index - max_scan + 1` (or to page 0) is cached.
    fn prev_miss(&self, index: u64, max_scan: usize) -> Option<u64>;
    /// The lowest page index in `[index, index + max_scan)` that is NOT cached, or
    /// `index + max_scan` if all are.
    fn next_miss(&self, index: u64, max_scan: usize) -> u64;
}

/// `get_init_ra_size`: the first window for a request of `size` pages, at most `max`.
///
/// The request is rounded up to a power of two, then quadrupled when it is tiny against the
/// maximum (at most 1/32 of it), doubled when small (at most 1/4), else the maximum.
pub fn init_ra_size(size: usize, max: usize) -> usize {
    let new = size.max(1).next_power_of_two();
    if new <= max / 32 {
        new * 4
    } else if new <= max / 4 {
        new * 2
    } else {
        max
    }
}

/// `get_next_ra_size`: the window after one of `cur` pages: x4 while below 1/16 of the
/// maximum, x2 up to half of it, then the maximum.
pub fn next_ra_size(cur: usize, max: usize) -> usize {
    if cur < max / 16 {
        4 * cur
    } else if cur <= max / 2 {
        2 * cur
    } else {
        max
    }
}

impl RaState {
    /// A fresh stream with a maximum window of `ra_pages` (`file_ra_state_init`).
    pub fn new(ra_pages: usize) -> RaState {
        RaState {
            start: 0,
            size: 0,
            async_size: 0,
            ra_pages,
        }
    }

    /// `ractl_max_pages`: a large request may push past `ra_pages`, up to [`IO_PAGES`].
    fn max_pages(&self, req_count: usize) -> usize {
        self.ra_pages.max(req_count.min(IO_PAGES))
    }

    /// `page_cache_sync_ra`: a reader of `req_count` pages at `index` missed the cache.
    /// `prev_pos` is the byte after this handle's previous read.
    ///
    /// Returns the read to issue (not yet clamped to EOF). With readahead disabled it returns
    /// `None`; the caller then reads just the missing page.
    pub fn sync_ra(
        &mut self,
        index: u64,
        req_count: usize,
        prev_pos: u64,
        probe: &dyn RaProbe,
    ) -> Option<RaRequest> {
        if self.ra_pages == 0 {
            return None;
        }
        let req_count = req_count.max(1);
        let max_pages = self.max_pages(req_count);
        let prev_index = prev_pos >> crate::mm::readahead::PAGE_SHIFT;
        // Start of file, an oversized read, or a sequential miss (the next page, or the same
        // page again for unaligned reads): start a fresh window.
        if index == 0 || req_count > max_pages || index.wrapping_sub(prev_index) <= 1 {
            self.start = index;
            self.size = init_ra_size(req_count, max_pages);
            self.async_size = if self.size > req_count {
                self.size - req_count
            } else {
                self.size / 2
            };
            return Some(self.request());
        }
        // Otherwise look for the trace a sequential stream leaves: cached pages just before.
        let (contig, from_start) = match probe.prev_miss(index - 1, max_pages) {
            Some(miss) => (index - miss - 1, false),
            None => (index.min(max_pages as u64), index <= max_pages as u64),
        };
        let mut contig = contig as usize;
        if contig <= req_count {
            // A random read: read what was asked, no window, no mark.
            return Some(RaRequest {
                index,
                nr_to_read: req_count,
                lookahead: 0,
            });
        }
        if from_start {
            // Cached from the start of the file: a strong sign of a whole-file read.
            contig *= 2;
        }
        self.start = index;
        self.size = (contig + req_count).min(max_pages);
        self.async_size = 1;
        Some(self.request())
    }

    /// `page_cache_async_ra`: a reader of `req_count` pages reached the folio at `index` that
    /// carried PG_readahead (the caller has test-and-cleared it). Pushes the window forward
    /// and returns the read to issue, or `None` when there is nothing sensible to do.
    pub fn async_ra(
        &mut self,
        index: u64,
        req_count: usize,
        probe: &dyn RaProbe,
    ) -> Option<RaRequest> {
        self.async_ra_folio(index, 1, req_count, probe)
    }

    /// [`RaState::async_ra`] for a marked folio of `nr_pages` pages starting at `index`: the
    /// mark went on the folio holding the lookahead page, so the stream is where it was
    /// predicted if that page, rounded down to the folio's size, is `index`
    /// (`page_cache_async_ra`'s `round_down(expected, folio_nr_pages)`).
    pub fn async_ra_folio(
        &mut self,
        index: u64,
        nr_pages: usize,
        req_count: usize,
        probe: &dyn RaProbe,
    ) -> Option<RaRequest> {
        if self.ra_pages == 0 {
            return None;
        }
        let req_count = req_count.max(1);
        let max_pages = self.max_pages(req_count);
        let expected = self.start + (self.size - self.async_size.min(self.size)) as u64;
        let expected = expected - expected % nr_pages.max(1) as u64;
        if self.size > 0 && index == expected {
            // The stream is where we predicted: ramp the window up and move it forward.
            self.start += self.size as u64;
            self.size = self.size.max(next_ra_size(self.size, max_pages));
            self.async_size = self.size;
            return Some(self.request());
        }
        // A marked folio without matching state (another handle's stream, interleaved
        // readers): the cached run after `index` approximates the old lookahead.
        let start = probe.next_miss(index + 1, max_pages);
        if start - index > max_pages as u64 {
            return None;
        }
        self.start = start;
        self.size = next_ra_size((start - index) as usize + req_count, max_pages);
        self.async_size = self.size;
        Some(self.request())
    }

    fn request(&self) -> RaRequest {
        RaRequest {
            index: self.start,
            nr_to_read: self.size,
            lookahead: self.async_size,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page cache that holds exactly the pages in `cached`.
    struct Cached(Vec<u64>);

    impl RaProbe for Cached {
        fn prev_miss(&self, index: u64, max_scan: usize) -> Option<u64> {
            let mut i = index;
            for _ in 0..max_scan {
                if !self.0.contains(&i) {
                    return Some(i);
                }
                if i == 0 {
                    return None;
                }
                i -= 1;
            }
            None
        }
        fn next_miss(&self, index: u64, max_scan: usize) -> u64 {
            (index..index + max_scan as u64)
                .find(|i| !self.0.contains(i))
                .unwrap_or(index + max_scan as u64)
        }
    }

    #[test]
    fn window_sizes_follow_the_kernel() {
        assert_eq!(init_ra_size(1, 32), 4); // 1 <= 32/32: x4
        assert_eq!(init_ra_size(2, 32), 4); // 2 <= 32/4: x2
        assert_eq!(init_ra_size(3, 32), 8);
        assert_eq!(init_ra_size(16, 32), 32);
        assert_eq!(init_ra_size(1, 128), 4);
        assert_eq!(next_ra_size(4, 32), 8);
        assert_eq!(next_ra_size(8, 32), 16);
        assert_eq!(next_ra_size(16, 32), 32);
        assert_eq!(next_ra_size(32, 32), 32);
        assert_eq!(next_ra_size(4, 128), 16); // 4 < 128/16: x4
    }

    #[test]
    fn a_sequential_stream_ramps_up_and_moves_forward() {
        let none = Cached(vec![]);
        let mut ra = RaState::new(32);
        // 8 KiB reads: 2 pages at a time, from the start of the file.
        let r = ra.sync_ra(0, 2, 0, &none).unwrap();
        assert_eq!(
            r,
            RaRequest {
                index: 0,
                nr_to_read: 4,
                lookahead: 2
            }
        );
        assert_eq!(r.mark(), Some(2));
        // The reader reaches page 2 (marked): the next window is 8 pages from page 4.
        let r = ra.async_ra(2, 2, &none).unwrap();
        assert_eq!((r.index, r.nr_to_read, r.mark()), (4, 8, Some(0)));
        let r = ra.async_ra(4, 2, &none).unwrap();
        assert_eq!((r.index, r.nr_to_read, r.mark()), (12, 16, Some(0)));
        let r = ra.async_ra(12, 2, &none).unwrap();
        assert_eq!((r.index, r.nr_to_read), (28, 32));
        let r = ra.async_ra(28, 2, &none).unwrap();
        assert_eq!((r.index, r.nr_to_read), (60, 32), "capped at ra_pages");
    }

    #[test]
    fn sequential_miss_restarts_and_random_read_reads_only_the_request() {
        let mut ra = RaState::new(32);
        // Page 100 right after a read that ended at page 100: sequential.
        let r = ra.sync_ra(100, 2, 100 * 4096, &Cached(vec![])).unwrap();
        assert_eq!((r.index, r.nr_to_read, r.lookahead), (100, 4, 2));
        // A far jump with nothing cached before it: random, just the request.
        let r = ra.sync_ra(500, 2, 100 * 4096, &Cached(vec![])).unwrap();
        assert_eq!((r.index, r.nr_to_read, r.mark()), (500, 2, None));
        // A jump whose preceding 10 pages are cached (someone streamed there): a window.
        let cached = Cached((490..500).collect());
        let r = ra.sync_ra(500, 2, 0, &cached).unwrap();
        assert_eq!((r.index, r.nr_to_read, r.lookahead), (500, 12, 1));
    }

    #[test]
    fn unmatched_mark_uses_the_cached_run() {
        let mut ra = RaState::new(32);
        // Pages 11..20 cached after the marked page 10; state knows nothing of it.
        let cached = Cached((10..20).collect());
        let r = ra.async_ra(10, 1, &cached).unwrap();
        assert_eq!(r.index, 20);
        assert_eq!(r.nr_to_read, next_ra_size(10 + 1, 32));
        // Cached further than a window: nothing to do.
        let cached = Cached((10..200).collect());
        assert_eq!(ra.async_ra(10, 1, &cached), None);
    }

    #[test]
    fn disabled_and_clamped() {
        let mut ra = RaState::new(0);
        assert_eq!(ra.sync_ra(0, 1, 0, &Cached(vec![])), None);
        let r = RaRequest {
            index: 8,
            nr_to_read: 32,
            lookahead: 32,
        };
        let c = r.clamp_to_eof(10).unwrap();
        assert_eq!((c.nr_to_read, c.mark()), (2, None));
        assert_eq!(r.clamp_to_eof(8), None);
        assert_eq!(r.clamp_to_eof(0), None);
    }
}
