//! The address space: one file's cached pages and everything readahead, writeback and the
//! read and write paths need to know about the file (`struct address_space`, the part of
//! `struct inode` the page cache reads: `i_size`).
//!
//! # What it models
//!
//! `include/linux/fs.h`'s `struct address_space`: the page index (`i_pages`), the backing it
//! is filled from and written to (`a_ops`, here a [`Backing`]), the writeback state (the
//! index's DIRTY / TOWRITE / WRITEBACK marks, `I_SYNC`, `mapping->wb_err`), the large-folio
//! flag (`mapping_large_folio_support`) and `invalidate_lock`; plus `i_size`, which the
//! kernel keeps in the inode. Readahead ([`crate::mm::readahead`]) and writeback
//! ([`crate::mm::writeback`]) take an `&AddressSpace` and nothing else of the file; the
//! cache's inode owns one and keeps what is the product's own: identity, path, users,
//! attributes, page latches.
//!
//! | field | kernel | who writes it |
//! |---|---|---|
//! | `pages` | `i_pages` | fills (readahead, single-page reads), writes, truncation, reclaim |
//! | `size` | `i_size` | writes that grow the file, `set_len`, revalidation |
//! | `disk_size` | (the size the backing is known to hold) | writeback (grows), `set_len`, revalidation |
//! | `backing` | `a_ops->read_folio` | set at open |
//! | `writer` | `a_ops->writepages` | the first handle opened for writing |
//! | `wb`, `wb_seq` | the index's marks, `I_SYNC`, `wb_err` | writeback, the write path |
//! | `invalidate_lock` | `mapping->invalidate_lock` | fills (shared), truncation (exclusive) |
//! | `large_folios`, `max_order` | `mapping_large_folio_support`, `mapping_max_folio_order` | the user (`CachedFile::set_large_folios`); the cache's maximum at open |
//!
//! # Invariants
//!
//! - `size` is stored with Release after the bytes it covers are in the cache and loaded with
//!   Acquire ([`AddressSpace::size`]): a reader that sees a size can read every byte below.
//! - `invalidate_lock` nests inside the inode's `i_rwsem` and outside every folio lock: a fill
//!   holds it shared from before it inserts its folios until their reads end, a truncation
//!   exclusively from before it publishes the smaller size until the backing file is cut.
//! - Below `disk_size` a short read of the backing means the file changed behind the cache;
//!   past it, up to `size`, the backing holds a hole the cache reads as zeros.

// The cache, which owns the address spaces, is not compiled under loom (whose models use only
// the writeback state's protocols).
#![cfg_attr(loom, allow(dead_code))]

use std::collections::BTreeSet;

use crate::io::Backing;
use crate::mm::errseq::ErrSeq;
use crate::mm::index::Index;
use crate::mm::sync::{AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering, RwLock};
// std's `Arc` under loom too: a backing is shared, never raced on, and `Arc<dyn Backing>`
// needs the unsizing coercion loom's `Arc` lacks (it is the same type as the sync shim's
// outside loom).
use std::sync::Arc;

/// One file's cached pages and what the mechanisms need of the file
/// (`struct address_space`, with `i_size`).
pub(crate) struct AddressSpace {
    /// The page index (`i_pages`); its mapping id is stored in every folio of the file.
    pub(crate) pages: Index,
    /// `i_size`: stored with Release after the bytes it covers are in the cache, loaded with
    /// Acquire ([`AddressSpace::size`]), so a reader that sees a size can read every byte
    /// below it.
    pub(crate) size: AtomicU64,
    /// The size the backing file has as far as the cache knows (what it had at open, grown by
    /// writeback, set by `set_len`): below it a short read means the file changed behind
    /// the cache's back; past it, up to `size`, the file is a hole the cache reads as zeros.
    pub(crate) disk_size: AtomicU64,
    /// Where misses read from.
    pub(crate) backing: Arc<dyn Backing>,
    /// Where writeback writes to: set by the first handle opened for writing (for a file
    /// opened by path, that handle's descriptor, opened read-write; for a custom backing, the
    /// backing itself).
    pub(crate) writer: Mutex<Option<Arc<dyn Backing>>>,
    /// Dirty and writeback tags, counts, and the error sequence (`mapping->wb_err`).
    pub(crate) wb: WbState,
    /// Writes this cache made to the backing file (writeback runs, `set_len`), each counted
    /// before it is issued: revalidation tells its own changes of the file's size and mtime
    /// from foreign ones by whether this moved since it last looked.
    pub(crate) wb_seq: AtomicU64,
    /// `mapping->invalidate_lock`: fills (readahead, single-page reads) hold it shared from
    /// their insertion to the end of their read; a truncation holds it exclusively from
    /// before it publishes the smaller size until the backing file is cut (lock order: after
    /// `i_rwsem`, before any folio lock).
    pub(crate) invalidate_lock: RwLock<()>,
    /// `mapping_large_folio_support`: misses may fill this file's pages in folios of more
    /// than one page (cleared by `CachedFile::set_large_folios`).
    pub(crate) large_folios: AtomicBool,
    /// `mapping_max_folio_order`: the largest folio order a miss may allocate while
    /// `large_folios` is set (the cache's maximum, set when the file is opened).
    pub(crate) max_order: u32,
    /// The direct-I/O alignment of the file's descriptors, or 0 if it is read and written
    /// through the kernel's page cache: one mode for the inode's life.
    pub(crate) dio_align: u32,
}

impl AddressSpace {
    /// An address space over `pages`, filled from `backing`, which holds `size` bytes, in
    /// folios of order `max_order` at most (`mapping_set_folio_order_range`), with direct I/O
    /// aligned to `dio_align` bytes (0: buffered).
    pub(crate) fn new(
        pages: Index,
        backing: Arc<dyn Backing>,
        size: u64,
        max_order: u32,
        dio_align: u32,
    ) -> AddressSpace {
        let id = pages.mapping_id();
        AddressSpace {
            pages,
            size: AtomicU64::new(size),
            disk_size: AtomicU64::new(size),
            backing,
            writer: Mutex::new(None),
            wb: WbState {
                id,
                ..WbState::default()
            },
            wb_seq: AtomicU64::new(0),
            invalidate_lock: RwLock::new(()),
            large_folios: AtomicBool::new(true),
            max_order,
            dio_align,
        }
    }

    /// `i_size_read`: the file size in bytes.
    #[inline]
    pub(crate) fn size(&self) -> u64 {
        // ORDERING: Acquire; pairs with the Release stores of `i_size_write` in the write path
        // (`write_end`, `set_len`): the bytes below a size are in the cache before the size
        // is published, and a reader loads the size before it looks them up.
        self.size.load(Ordering::Acquire)
    }

    /// Pages of the file (the last one may be partial).
    #[inline]
    pub(crate) fn nr_pages(&self) -> u64 {
        self.size().div_ceil(crate::mm::folio::PAGE_SIZE as u64)
    }

    /// `mapping_max_folio_order`: the largest folio order a miss of this file may allocate
    /// now (0 if the file opted out of large folios).
    #[inline]
    pub(crate) fn max_folio_order(&self) -> u32 {
        if self.large_folios.load(Ordering::Relaxed) {
            self.max_order
        } else {
            0
        }
    }

    /// The backing writeback writes to, if a handle opened the file for writing.
    pub(crate) fn writer(&self) -> Option<Arc<dyn Backing>> {
        self.writer.lock().clone()
    }

    /// The size the backing file is believed to hold (`check_end_of_data`): the smaller of
    /// the file size and what writeback has put there. Read when a run is about to be read,
    /// after its folios are in the index: a page written back and evicted before the run's
    /// insertion found its slot empty has raised `disk_size` before that (writeback ends
    /// after it does), so the run reads the page's bytes instead of zeroing a hole that is
    /// not one. (A value captured when the window was planned could predate that writeback.)
    pub(crate) fn backing_size(&self) -> u64 {
        // ORDERING: Acquire for `i_size`, as every reader of it; `disk_size` is ordered by the
        // eviction that emptied the slot (see above).
        self.size().min(self.disk_size.load(Ordering::Relaxed))
    }
}

/// The page tags of one file (`PAGECACHE_TAG_*`) and its counts.
#[derive(Debug, Default)]
pub(crate) struct Tags {
    /// The first page of each dirty folio (a large folio is tagged once).
    pub(crate) dirty: BTreeSet<u64>,
    pub(crate) towrite: BTreeSet<u64>,
    /// The first page of each folio under writeback.
    pub(crate) writeback: BTreeSet<u64>,
    /// The pages of the folios tagged DIRTY, and of those tagged WRITEBACK.
    pub(crate) dirty_pages: u64,
    pub(crate) writeback_pages: u64,
    /// `inode->dirtied_when`: when the file went from clean to dirty (the age the periodic
    /// flush compares with `dirty_expire`); `None` while clean.
    pub(crate) dirtied_when: Option<std::time::Instant>,
    /// The write-ahead rule: the lowest and the highest log sequence numbers of the changes
    /// in each dirty page that has one (InnoDB's `oldest_modification` and
    /// `newest_modification`; PostgreSQL keeps the newest as the page LSN). Set under the
    /// page's folio lock with the change, taken when its writeback starts (under the same
    /// lock), dropped with its dirtiness. Writeback waits for the log up to the newest; a
    /// checkpoint writes the pages whose oldest is at or below its point.
    pub(crate) lsn: std::collections::HashMap<u64, (u64, u64)>,
}

/// One file's writeback state: its tags, its error sequence (`mapping->wb_err`) and the
/// exclusion of its writeback passes (`I_SYNC`).
#[derive(Debug, Default)]
pub(crate) struct WbState {
    /// The address space's id (`folio->mapping`), naming it on the cache's dirty-file list.
    pub(crate) id: u64,
    pub(crate) tags: Mutex<Tags>,
    /// `mapping->wb_err`.
    pub(crate) err: ErrSeq,
    /// `I_SYNC`: held by the one writeback pass of this file at a time (see "One pass per
    /// file" in [`crate::mm::writeback`]).
    pub(crate) io: Mutex<()>,
    /// Integrity syncs waiting for `io`: background passes stand aside while any does.
    pub(crate) sync_waiting: AtomicU32,
}

impl WbState {
    /// Dirty pages of this file now.
    pub(crate) fn nr_dirty(&self) -> u64 {
        self.tags.lock().dirty_pages
    }

    /// Pages of this file under writeback now.
    pub(crate) fn nr_writeback(&self) -> u64 {
        self.tags.lock().writeback_pages
    }

    /// Whether the file has dirty or writeback pages (it must not be dropped yet).
    pub(crate) fn has_unwritten(&self) -> bool {
        let t = self.tags.lock();
        !t.dirty.is_empty() || !t.writeback.is_empty()
    }

    /// The dirty page indices (`validate` compares them with the folios' flags).
    pub(crate) fn dirty_indices(&self) -> Vec<u64> {
        self.tags.lock().dirty.iter().copied().collect()
    }

    /// When the file went from clean to dirty, if it is dirty (`inode->dirtied_when`).
    pub(crate) fn dirtied_when(&self) -> Option<std::time::Instant> {
        // Set with the first DIRTY tag and taken with the last (`writeback::tag_dirty`,
        // `untag_dirty`), which keep the cache's dirty-file list with it.
        self.tags.lock().dirtied_when
    }

    /// The dirty or writeback pages from page `first` on (truncation's work list).
    pub(crate) fn unwritten_from(&self, first: u64) -> Vec<u64> {
        let t = self.tags.lock();
        let mut v: Vec<u64> = t.dirty.range(first..).copied().collect();
        v.extend(t.writeback.range(first..).copied());
        v.sort_unstable();
        v.dedup();
        v
    }
}
