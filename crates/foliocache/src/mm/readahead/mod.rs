//! Readahead: the on-demand window and the batched instantiation of its folios.
//!
//! # What it models
//!
//! `mm/readahead.c`. A handle keeps a [`RaState`] (`struct file_ra_state`). A reader that
//! misses the cache calls the synchronous path ([`RaState::sync_ra`], `page_cache_sync_ra`),
//! which opens a window of a few pages and marks one of its pages with PG_readahead; a reader
//! that later finds that mark (test-and-clear, so one reader wins) calls the asynchronous
//! path ([`RaState::async_ra`], `page_cache_async_ra`), which moves the window forward and
//! grows it (`get_init_ra_size`, `get_next_ra_size`: x4 or x2 per step up to `ra_pages`, 32
//! pages by default). Either way the window becomes one `do_page_cache_ra` call: clamp to
//! EOF, then instantiate the pages (`page_cache_ra_unbounded`) and read them (`read_pages`).
//!
//! # The seed: batched insertion
//!
//! The vanilla kernel allocates a folio and inserts it into the index one at a time, taking
//! and releasing the index lock (`xa_lock`) once per page. The seed (001) preallocates the
//! whole window and inserts it with `filemap_add_folio_range`, one lock hold per contiguous
//! run; if the allocator cannot supply the whole window, it falls back to the one-by-one
//! loop. Both are here, chosen at run time by [`InsertMode`]: `single` is the vanilla loop,
//! `batched` the seed.
//!
//! # Large folios (`page_cache_ra_order`)
//!
//! With [`Config::max_folio_order`](crate::Config::max_folio_order) above 0 (the default)
//! and the file not opted out (`mapping_large_folio_support`), a window of more than one page
//! is cut into folios instead of pages. Walking the window from its first missing page, each
//! folio takes the largest order that is at most `max_folio_order` and `ilog2` of the window
//! (a folio never exceeds its window), to which the page index is aligned (folios are
//! naturally aligned in the index, as the multi-index entries require), that ends inside the
//! window (the window was clamped to EOF, so no folio reaches past it), and that does not
//! cover the PG_readahead page unless it starts there (the mark stays where the window logic
//! put it, so the reader that opened the window does not also trigger the next one; the async
//! path compares the marked folio's first page with the expected mark rounded down to the
//! folio's size, as `page_cache_async_ra` does). Cached pages are skipped; a folio whose
//! slots a racing reader took meanwhile is dropped and its pages are left to the next miss.
//!
//! Allocation follows `page_cache_ra_order`'s fallback: a large folio that cannot be
//! allocated (one reclaim pass, no retry) turns the rest of the window into pages, as the
//! kernel falls back to `do_page_cache_ra`. Insertion follows [`InsertMode`] (each contiguous
//! run under one lock hold for `batched`, one folio per hold for `single`), and every
//! contiguous run is read with one vectored backing read, one buffer per folio.
//!
//! A large folio is one of everything: one reference count (a hit takes one reference for
//! 16 KiB or 2 MiB alike), one LRU entry charged by its pages, one multi-index entry, and
//! on eviction one shadow entry whose refault distance counts pages.
//!
//! With readahead off ([`Config::block_cache`](crate::Config::block_cache)), a read of N
//! pages that misses asks this module for exactly those N pages (no window, no mark), so a
//! cold block is one backing read and, when aligned to its size, one folio.
//!
//! # Window state
//!
//! | field | meaning |
//! |---|---|
//! | `start`, `size` | the current window, in pages |
//! | `async_size` | the trailing part read ahead of the reader; its first page carries PG_readahead |
//! | `ra_pages` | the maximum window; 0 disables readahead (a miss then reads one folio) |
//!
//! # Invariants
//!
//! - A folio enters the index locked and not uptodate; only the thread that inserted it
//!   fills it, and it leaves the locked state exactly once: uptodate (data complete) or
//!   error (removed from the index first, so no later lookup finds a failed folio). This
//!   holds when the backing panics too (the fill's guards fail the folios as the panic
//!   unwinds), and a read that finds the file shorter than its believed size is an error,
//!   never zeros cached as data.
//! - Readers that find a folio locked and not uptodate sleep on the folio lock's waiters
//!   (no spinning) and re-check after waking.
//! - The mark is placed only on a folio this call inserted (a page already present is
//!   skipped without a reference, as the kernel does).
//!
//! [`RaState`]: window::RaState
//! [`RaState::sync_ra`]: window::RaState::sync_ra
//! [`RaState::async_ra`]: window::RaState::async_ra

#[cfg(not(loom))]
mod fill;
pub mod window;

#[cfg(not(loom))]
pub use fill::insert_preallocated;
#[cfg(not(loom))]
pub(crate) use fill::{
    do_page_cache_ra, page_cache_ra_many, page_cache_ra_notify, read_one, IndexProbe, ReadOneError,
};
pub use window::{RaProbe, RaRequest, RaState, DEFAULT_RA_PAGES};

pub(crate) use crate::mm::folio::PAGE_SHIFT;

/// What readahead needs from the cache it fills, as [`Evict`](crate::mm::lru::Evict) is what
/// reclaim needs from it: the cache implements both, and neither layer imports the cache
/// (the layer table in [`crate::mm`]). The file comes as its
/// [`AddressSpace`](crate::mm::filemap::AddressSpace); this trait is the one way a read miss
/// reaches back into the cache. The kernel's readahead reaches the same services through the
/// mapping and the page allocator: `filemap_alloc_folio` with `readahead_gfp_mask`,
/// `filemap_add_folio`'s tail (`workingset_refault`, `folio_add_lru`), the vmstat counters.
#[cfg(not(loom))]
pub(crate) trait RaHost {
    /// A folio of `order` for a window: one reclaim pass at most, then failure
    /// (`__GFP_NORETRY`), so that a window shrinks instead of stalling its reader.
    fn alloc_folio_noretry(
        &self,
        order: u32,
    ) -> Result<crate::mm::folio::FolioRef<'_>, crate::mm::folio::AllocError>;

    /// A folio of `order` for a read that needs this very page, reclaiming as a normal
    /// allocation does.
    fn alloc_folio(
        &self,
        order: u32,
    ) -> Result<crate::mm::folio::FolioRef<'_>, crate::mm::folio::AllocError>;

    /// What follows a folio's insertion into the index (`filemap_add_folio`'s tail): the
    /// refault check against the `shadow` entry it replaced (if any, `workingset_refault`),
    /// then `folio_add_lru`. Every path that inserts a folio calls it once, right after the
    /// insertion, with the folio still locked.
    fn folio_added(
        &self,
        folio: &crate::mm::folio::FolioLocked<'_>,
        shadow: Option<crate::mm::index::Shadow>,
    );

    /// Counts `n` events of kind `ev` (the cache's statistics).
    fn count(&self, ev: RaEvent, n: u64);

    /// How windows insert their folios (the cache's experiment).
    fn insert_mode(&self) -> InsertMode;

    /// The I/O engine a window's requests are read with.
    fn engine(&self) -> &crate::io::engine::Engine;
}

/// What readahead counts (each is one of the cache's vmstat counters).
#[cfg(not(loom))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RaEvent {
    /// Pages a window inserted.
    RaPages,
    /// Folios a window inserted.
    RaFolios,
    /// Of those, folios of more than one page.
    RaLargeFolios,
    /// Large allocations that failed, turning the rest of the window into pages.
    RaOrderFallbacks,
    /// Batched windows that could not be preallocated and went one by one.
    RaFallbacks,
    /// Reads issued to the backing.
    IoReads,
    /// Bytes read from the backing.
    IoBytes,
    /// Backing reads that failed.
    IoErrors,
}

/// How readahead puts a window's folios into the index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InsertMode {
    /// The vanilla kernel: allocate and insert one folio at a time, one index lock hold per
    /// page (`filemap_add_folio` in a loop).
    Single,
    /// The seed: preallocate the window, insert each contiguous run under one lock hold
    /// (`filemap_add_folio_range`); one by one if the window cannot be preallocated.
    #[default]
    Batched,
}

impl InsertMode {
    /// Both modes, vanilla first.
    pub const ALL: [InsertMode; 2] = [InsertMode::Single, InsertMode::Batched];

    /// The stable name used by the lab (`single`, `batched`).
    pub fn name(self) -> &'static str {
        match self {
            InsertMode::Single => "single",
            InsertMode::Batched => "batched",
        }
    }
}

impl crate::Variant for InsertMode {
    const KIND: &'static str = "insertion mode";
    const ALL: &'static [Self] = &InsertMode::ALL;
    fn name(self) -> &'static str {
        InsertMode::name(self)
    }
}
crate::variant::variant_traits!(InsertMode);
