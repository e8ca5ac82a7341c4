//! Per-frame extension records (`struct page_ext`, `mm/page_ext.c`): the words later layers
//! attach to a folio without growing the hot header.
//!
//! One record per frame, in a slice parallel to the headers and as type-stable as they are.
//! Each field has one owning layer (named in its doc line) and an initial value restored at
//! every allocation by [`FolioExt::prep`]. A field that must be back at its initial value
//! when the folio is freed is checked in [`FolioExt::check_at_free`]; a failure is a bad page,
//! reported with the reason returned.
//!
//! To add a field: declare it here with its owner, add its reset to `prep`, its check (if
//! any) to `check_at_free`, and its initial value to `new`. Large folios may also use the
//! records of their tail frames (`arena.ext_of(pfn + i)`), which nothing else touches while
//! the folio lives; `prep` runs on every frame of a new folio.

use crate::mm::rmap::FolioRmap;
use crate::mm::sync::{AtomicU64, Ordering};

/// `struct page_ext`: per-frame words owned by the layers above the arena.
#[derive(Debug)]
pub struct FolioExt {
    /// The eviction clock (`nonresident_age`) when the folio last entered the head of an LRU
    /// list, under [`LruPolicy::Protected`](crate::mm::lru::LruPolicy): written under the
    /// lruvec lock, read by the eviction that packs it into the shadow; owned by `lru`.
    pub lru_stamp: AtomicU64,
    /// `_mapcount`, `_large_mapcount`, the rmap values and mm-owner slots: who maps the folio
    /// (meaningful on the head frame); owned by `space`; unmapped at free.
    pub rmap: FolioRmap,
}

impl FolioExt {
    pub(crate) fn new() -> Self {
        Self {
            lru_stamp: AtomicU64::new(0),
            rmap: FolioRmap::new(),
        }
    }

    /// `prep_new_page` for the extension: every field back to its initial value.
    pub(crate) fn prep(&self) {
        self.lru_stamp.store(0, Ordering::Relaxed);
        self.rmap.prep();
    }

    /// `free_page_is_bad` for the extension: a reason if a field says a layer still uses the
    /// folio.
    pub(crate) fn check_at_free(&self) -> Option<&'static str> {
        self.rmap.check_at_free()
    }
}
