//! The writable latch: [`FolioMut`], a page of a file held for an update in place, and
//! [`CachedFile::get_folio_mut`], which makes one. The table of latched pages is the inode's
//! (`Latches`, `cache/inode.rs`); writers honour it (`CachedFile::lock_for_write`).

use super::cow;
use super::error::CacheError;
use super::file::CachedFile;
use super::inode::Inode;
use super::sb::CacheInner;
use super::stats::Event;
use super::write::{lookup_stable, lookup_stable_folio, read_old_page, swap_in, write_end};
use super::writeback::balance_dirty_pages;
use crate::mm::folio::flags::PG_DIRTY;
use crate::mm::folio::{FolioLocked, FolioRef, PAGE_SHIFT, PAGE_SIZE};
use crate::mm::sync::Arc;
use crate::mm::writeback;

/// A page of a file held for an update in place: a buffer manager's exclusive page latch,
/// from [`CachedFile::get_folio_mut`]. Dereferences to the file's bytes in the page,
/// writable; dropping the guard (or [`FolioMut::commit`]) publishes the changes at once and
/// marks the page dirty, [`FolioMut::discard`] drops them.
///
/// # Protocol
///
/// - The guard **latches** the page: other writers of the page ([`CachedFile::write_at`],
///   another guard, a [`CachedFile::set_len`] that would cut or zero it) wait until it is
///   committed or discarded. The latch is not the folio lock (none is held between calls, as
///   the kernel never returns to userspace with a page locked), so the guard's holder may
///   write other pages of the file, sync it, or be throttled at the dirty limit without
///   waiting for itself. The latch belongs to the guard, wherever it moves (it is `Send`):
///   writing the latched page, or latching it again, through the handle the guard borrows,
///   or from the thread that made the guard, is an error ([`CacheError::InvalidArgument`]),
///   not a hang. Through another handle, from another thread, the call waits for the
///   commit.
/// - The changes go to a private copy of the page, made when the guard is made, and replace
///   the page in the index when the guard commits (`replace_page_cache_folio`): readers never
///   see a half-updated page; they read the old bytes until the commit and the new ones after,
///   and a pinned guard of the old page keeps them. Writeback and syncs meanwhile write the
///   old bytes (the cached page never changes under a write in flight: stable pages), and the
///   commit waits for a write of the old page in flight before it replaces it.
/// - The page's dirtiness is reserved under the dirty limit when the guard commits (the
///   commit may write other dirty pages back first, as a write does); until then the guard
///   holds two pages of the pin limit (the page and its copy).
///
/// ```
/// use foliocache::{Config, FolioCache, OpenOptions};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let cache = FolioCache::new(Config::new(16 << 20))?;
/// let db = cache.open_with(dir.path().join("btree"), OpenOptions::new().write(true).create(true))?;
/// db.set_len(3 * 4096)?;                            // three zeroed pages
/// {
///     let mut page = db.get_folio_mut(1)?;          // latch page 1
///     page[0..4].copy_from_slice(b"node");          // update it in place
///     db.write_all_at(b"log", 2 * 4096)?;           // other pages stay writable meanwhile
/// }                                                 // committed: dirty, visible to all
/// let mut head = [0u8; 4];
/// db.read_exact_at(&mut head, 4096)?;
/// assert_eq!(&head, b"node");
/// db.sync_data()?;
/// # Ok(()) }
/// ```
pub struct FolioMut<'f> {
    /// The cache and the file, through the handle the guard borrows or owned
    /// ([`FolioMut::into_owned`]: the guard then also holds a use of the file, `i_count`, put
    /// back on drop).
    cache: Holder<'f>,
    /// The page latched (the block's first).
    index: u64,
    /// Pages latched: 1, or a block's ([`CachedFile::get_block_mut_in_place`]), held in one
    /// folio of exactly that size.
    nr: u64,
    /// The cached page, unlocked, with a reference (latched in place, `PG_LATCHED`, if there
    /// is no copy).
    old: std::ptr::NonNull<crate::mm::folio::Folio>,
    /// The private copy, locked, not uptodate, not in any index, with a reference; `None`
    /// for a guard that updates the cached page in place ([`InPlaceFolioMut`]).
    new: Option<std::ptr::NonNull<crate::mm::folio::Folio>>,
    /// The file's bytes in the page (or block).
    valid: usize,
    /// The highest log sequence number of the changes made through the guard
    /// ([`FolioMut::set_lsn`]).
    lsn: u64,
    done: bool,
}

/// A [`FolioMut`] that owns its file instead of borrowing the handle
/// ([`FolioMut::into_owned`]): it may outlive the handle and live beside it in the engine's
/// own structures (a buffer manager's table of latched pages, a transaction's write set), and
/// move into `'static` tasks. It latches, commits and discards as the borrowing guard does.
pub type OwnedFolioMut = FolioMut<'static>;

/// A page of a file latched for an update **in place**, from
/// [`CachedFile::get_folio_mut_in_place`] (or [`PinnedFolio::upgrade_in_place`](super::PinnedFolio::upgrade_in_place)):
/// a buffer manager's exclusive latch, as LeanStore's and InnoDB's pages have. Dereferences to
/// the cached page's bytes, writable; dropping the guard (or [`InPlaceFolioMut::commit`])
/// marks the page dirty and lets readers in again.
///
/// # Protocol
///
/// - Latching follows [`FolioMut`]'s rules (other writers of the page wait; the holder's own
///   writes of it are errors, not hangs). The latch freezes the folio's refcount at the
///   references it knows of (the page cache's and its own): success proves no reader holds
///   the page, and the folio is marked `PG_LATCHED` before the unfreeze publishes it. From
///   then on no one else touches the bytes: a read of the page ([`CachedFile::read_at`],
///   [`CachedFile::get_folio`], a snapshot's read of the live page, the async reads) waits
///   for the commit, a background writeback skips the page (the dirty throttle goes over
///   its limit rather than wait for latches), an integrity sync and a checkpoint wait.
///   Readers never see a half-made change: they see the page before the latch or after
///   its commit.
/// - If the freeze fails (a pinned guard, a read copying the page that moment, a live
///   snapshot that still needs the page's bytes), the guard changes a private copy exactly
///   as [`FolioMut`] does, and readers see the old bytes until the commit
///   ([`InPlaceFolioMut::in_place`] says which happened).
/// - The commit reserves the page's dirtiness, marks it dirty with the log number given
///   ([`InPlaceFolioMut::set_lsn`]: the write-ahead rule holds for it as for any change) and
///   wakes the readers waiting. It cannot fail and makes no copy.
/// - Taking a snapshot of the file waits until no page of it is latched in place (the
///   snapshot could not keep the bytes a latch overwrites).
///
/// What a holder must not do (each is refused with [`CacheError::InvalidArgument`] where the
/// cache can tell, else it waits for itself): read the page, sync the file (or the cache,
/// or checkpoint) or take a snapshot of the file from the thread that made the guard. Other
/// threads, through any handle, wait for the commit: an engine's threads may share one
/// handle.
///
/// There is no `discard`: nothing keeps the page's bytes from before the change.
pub struct InPlaceFolioMut<'f>(pub(super) FolioMut<'f>);

/// An [`InPlaceFolioMut`] that owns its file ([`InPlaceFolioMut::into_owned`]), as
/// [`OwnedFolioMut`] is to [`FolioMut`].
pub type OwnedInPlaceFolioMut = InPlaceFolioMut<'static>;

impl InPlaceFolioMut<'_> {
    /// The page index of the latched page.
    pub fn index(&self) -> u64 {
        self.0.index
    }

    /// Whether the guard changes the cached page itself (true), or a copy because someone
    /// else held the page when it was latched (false; readers then see the old bytes until
    /// the commit).
    pub fn in_place(&self) -> bool {
        self.0.new.is_none()
    }

    /// As [`FolioMut::set_lsn`]: the changes were logged at `lsn` (the highest is kept).
    pub fn set_lsn(&mut self, lsn: u64) {
        self.0.set_lsn(lsn);
    }

    /// Publishes the changes now (what dropping the guard does).
    pub fn commit(self) {
        self.0.commit();
    }

    /// The guard as one that owns its file ([`OwnedInPlaceFolioMut`]), as
    /// [`FolioMut::into_owned`].
    pub fn into_owned(self) -> OwnedInPlaceFolioMut {
        InPlaceFolioMut(self.0.into_owned())
    }
}

impl std::ops::Deref for InPlaceFolioMut<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for InPlaceFolioMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl std::fmt::Debug for InPlaceFolioMut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InPlaceFolioMut")
            .field("path", &self.0.cache.mapping().path)
            .field("index", &self.index())
            .field("in_place", &self.in_place())
            .finish()
    }
}

/// Where a [`FolioMut`] reaches its cache and its file.
enum Holder<'f> {
    /// Through the handle it was made from (no reference counted: the borrow keeps both).
    Handle(&'f CachedFile),
    /// Its own (an owned guard, which also holds a use of the inode).
    Owned(Arc<CacheInner>, Arc<Inode>),
}

impl Holder<'_> {
    #[inline]
    fn cache(&self) -> &Arc<CacheInner> {
        match self {
            Holder::Handle(f) => &f.cache,
            Holder::Owned(c, _) => c,
        }
    }

    #[inline]
    fn mapping(&self) -> &Inode {
        match self {
            Holder::Handle(f) => f.mapping_ref(),
            Holder::Owned(_, m) => m,
        }
    }
}

// SAFETY: the guard owns counted references (the copy's locked); folio headers are shared
// atomic state, the bytes it changes (the copy's, or a page latched in place, which no one
// else reads: `PG_LATCHED`) are reachable only through `&mut self`, and `CachedFile` is
// `Sync`.
unsafe impl Send for FolioMut<'_> {}
// SAFETY: `&FolioMut` gives only `&[u8]` of bytes nothing else writes.
unsafe impl Sync for FolioMut<'_> {}

impl CachedFile {
    /// Latches page `index` of the file for an update in place ([`FolioMut`]): the page is
    /// read in if needed and copied for the update; the guard commits on drop. Waits while
    /// another thread's guard latches the page. `index` must be a page of the file (use
    /// [`CachedFile::set_len`] to grow it first).
    pub fn get_folio_mut(&self, index: u64) -> Result<FolioMut<'_>, CacheError> {
        // The pin limit (`cache/budget.rs`): the guard holds the page and its copy. Charged
        // before `i_rwsem`, since it may wait for other pins to go.
        self.cache.pin_charge(2)?;
        self.latch_charged(index, 1, None, false)
    }

    /// Latches page `index` of the file for an update **in place** ([`InPlaceFolioMut`]): a
    /// buffer manager's exclusive latch. The guard's changes go straight into the cached
    /// page (no copy, no index replacement) unless someone else holds a reference to it (a
    /// pinned guard, a read copying it right now, a live snapshot that still needs its
    /// bytes): then into a copy, as [`CachedFile::get_folio_mut`] does
    /// ([`InPlaceFolioMut::in_place`] says which). While the page is latched in place,
    /// reads of it, pinned guards of it and integrity syncs wait for the commit; a
    /// background writeback skips it. Waits while another thread's guard latches the page;
    /// `index` must be a page of the file.
    ///
    /// A read or a sync of the latched page, or a snapshot of the file, by the thread that
    /// made the guard fails with [`CacheError::InvalidArgument`] (it would wait for itself);
    /// read through the guard, or commit it first. Other threads wait, through any handle.
    /// A guard moved to another thread cannot be told apart: that thread must not read the
    /// page or sync the file while it holds the guard.
    ///
    /// There is no `discard`: nothing holds the page's bytes before the change. An engine
    /// undoes an uncommitted change from its own log, as buffer managers do.
    ///
    /// ```
    /// use foliocache::{Config, FolioCache, OpenOptions};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let cache = FolioCache::new(Config::buffer_pool(16 << 20))?;
    /// let db = cache.open_with(dir.path().join("pages"), OpenOptions::new().write(true).create(true))?;
    /// db.set_len(4 * 4096)?;
    /// db.read_exact_at(&mut [0u8; 1], 4096)?;                 // page 1 cached
    /// {
    ///     let mut page = db.get_folio_mut_in_place(1)?;        // latch page 1
    ///     page[100..104].copy_from_slice(b"rec1");             // into the cached page itself
    ///     page.set_lsn(17);                                    // logged at 17 (write-ahead rule)
    ///     assert!(page.in_place());
    /// }                                                        // committed: dirty, readable
    /// let mut rec = [0u8; 4];
    /// db.read_exact_at(&mut rec, 4096 + 100)?;
    /// assert_eq!(&rec, b"rec1");
    /// assert_eq!(cache.stats().writes_replaced, 0);            // no copy was made
    /// # Ok(()) }
    /// ```
    pub fn get_folio_mut_in_place(&self, index: u64) -> Result<InPlaceFolioMut<'_>, CacheError> {
        // The page; a copy, if one is needed, is charged when it is made.
        self.cache.pin_charge(1)?;
        self.latch_charged(index, 1, None, true)
            .map(InPlaceFolioMut)
    }

    /// Latches the block of the file at bytes `offset..offset + len` for an update **in
    /// place**, as one unit: [`CachedFile::get_folio_mut_in_place`] for a buffer manager whose
    /// pages are larger than 4 KiB (a 16 KiB B-tree node, a 64 KiB extent). The block is held
    /// in one large folio of exactly its size: the guard dereferences to its `len` bytes,
    /// readers of any of its pages wait for the commit, and the commit makes the whole block
    /// dirty at once, so readers, writeback and a crash see the block before the latch or
    /// after its commit, never part of it (a write reaches the file in one vectored write of
    /// the folio; whether the device writes it atomically is the device's matter, as for any
    /// write of more than its atomic unit).
    ///
    /// `len` must be a power of two from 8 KiB up to 128 KiB and at most the cache's largest
    /// folio ([`Config::max_folio_order`](super::Config::max_folio_order)), `offset` a
    /// multiple of it, and the block inside the file (grow it with
    /// [`CachedFile::set_len`]). A block that is not cached is read in one folio; one cached
    /// in smaller folios (written or read page by page) is copied into one
    /// (`collapse_file`, counted in [`CacheStats::folio_collapses`](super::CacheStats)), and
    /// one inside a larger folio is split out of it first, once. The block's pages count
    /// against the pin limit while it is latched (twice if it is updated in a copy:
    /// [`InPlaceFolioMut::in_place`]). A snapshot of the file waits for its block latches, and
    /// block latches wait while a snapshot is being taken.
    ///
    /// ```
    /// use foliocache::{Config, FolioCache, OpenOptions};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let cache = FolioCache::new(Config::buffer_pool(16 << 20))?;
    /// let db = cache.open_with(dir.path().join("btree"), OpenOptions::new().write(true).create(true))?;
    /// const NODE: usize = 16 << 10;                       // 16 KiB B-tree nodes
    /// db.set_len(4 * NODE as u64)?;
    /// {
    ///     let mut node = db.get_block_mut_in_place(NODE as u64, NODE)?; // node 1, all of it
    ///     assert_eq!(node.len(), NODE);
    ///     node[..4].copy_from_slice(b"keys");
    ///     node[NODE - 4..].copy_from_slice(b"tail");
    ///     node.set_lsn(7);                                 // the change's log record
    /// }                                                    // committed: one dirty 16 KiB folio
    /// let block = db.get_range(NODE as u64, NODE)?;
    /// let bytes = block.as_slice().expect("one folio holds the node");
    /// assert_eq!((&bytes[..4], &bytes[NODE - 4..]), (&b"keys"[..], &b"tail"[..]));
    /// # Ok(()) }
    /// ```
    pub fn get_block_mut_in_place(
        &self,
        offset: u64,
        len: usize,
    ) -> Result<InPlaceFolioMut<'_>, CacheError> {
        let nr = self.block_pages(offset, len)?;
        self.cache.pin_charge(nr)?;
        self.latch_charged(offset >> PAGE_SHIFT, nr, None, true)
            .map(InPlaceFolioMut)
    }

    /// The pages of the block `offset..offset + len` of a block latch
    /// ([`CachedFile::get_block_mut_in_place`]), or why it is not one.
    pub(super) fn block_pages(&self, offset: u64, len: usize) -> Result<u64, CacheError> {
        let max = (PAGE_SIZE << self.cache.config.max_folio_order).min(128 << 10);
        if !len.is_power_of_two() || len < 2 * PAGE_SIZE || len > max || offset % len as u64 != 0 {
            return Err(CacheError::InvalidArgument {
                what: format!(
                    "block latch of {len} bytes at offset {offset} of {}: the length must be a \
                     power of two from 8 KiB to {} KiB (128 KiB, or the largest folio of \
                     Config::max_folio_order), and the offset a multiple of it",
                    self.mapping_ref().path.display(),
                    max >> 10
                ),
            });
        }
        Ok((len / PAGE_SIZE) as u64)
    }

    /// [`CachedFile::get_folio_mut`] (or, `in_place`, [`CachedFile::get_folio_mut_in_place`])
    /// once the guard's pages are charged (two, the page and its copy; one `in_place`, the
    /// copy's charged here if it needs one), starting from `start` (a reference on page
    /// `index` the caller hands over: a pinned guard upgraded) if it is still the page cached
    /// there, else from a lookup.
    pub(super) fn latch_charged(
        &self,
        index: u64,
        nr: u64,
        start: Option<FolioRef<'_>>,
        in_place: bool,
    ) -> Result<FolioMut<'_>, CacheError> {
        let c = &self.cache;
        let charged = if in_place { nr } else { 2 * nr };
        if !self.writable {
            drop(start);
            c.pin_uncharge(charged);
            return Err(CacheError::NotWritable {
                path: self.mapping_ref().path.clone(),
            });
        }
        // Borrowed: the guard borrows the handle, which holds the inode.
        let m = self.mapping_ref();
        let mut start = start;
        let latched = loop {
            let w = self.lock_for_write(m, "get_folio_mut", |_| Some((index, index + nr - 1)));
            match w {
                Ok(w) if nr > 1 && m.latches.snapshot_waiting() => {
                    // A snapshot waits for the file's block latches: this one waits for it.
                    drop((w, start.take()));
                    m.latches.wait_for_snapshots();
                }
                w => break w,
            }
        };
        let latched = latched.and_then(|w| {
            if nr > 1 && (index + nr) << PAGE_SHIFT > m.size() {
                return Err(CacheError::InvalidArgument {
                    what: format!(
                        "the block of {} bytes at offset {} is past the end of {} ({} bytes): \
                         grow it with set_len",
                        nr << PAGE_SHIFT,
                        index << PAGE_SHIFT,
                        m.path.display(),
                        m.size()
                    ),
                });
            }
            if index >= m.nr_pages() {
                return Err(CacheError::InvalidArgument {
                    what: format!(
                        "page {index} is past the end of {} ({} pages of 4 KiB): grow it with set_len",
                        m.path.display(),
                        m.nr_pages()
                    ),
                });
            }
            // A snapshot waiting for the file's in-place latches gets its turn: copy.
            let in_place = in_place && !m.latches.snapshot_waiting();
            let pages = self.latch(m, index, nr, start, in_place)?;
            // Under `i_rwsem`: no writer of the page is between its look at the latches and
            // its write.
            m.latches.add(index, index + nr - 1, self.id, pages.1.is_none());
            drop(w);
            Ok(pages)
        });
        let (old, new) = match latched {
            Ok(p) => p,
            Err(e) => {
                c.pin_uncharge(charged);
                return Err(e);
            }
        };
        if new.is_some() && in_place {
            // Someone held the page: the guard holds a copy too (past the limit, as a large
            // pinned folio's extra pages are: the copy is made already).
            c.budget.pins.charge_unchecked(nr);
        }
        let valid = m
            .size()
            .saturating_sub(index << PAGE_SHIFT)
            .min(nr << PAGE_SHIFT) as usize;
        Ok(FolioMut {
            cache: Holder::Handle(self),
            index,
            nr,
            old,
            new,
            valid,
            lsn: 0,
            done: false,
        })
    }

    /// The page (referenced, unlocked) and its private copy (locked), as raw pointers owned
    /// by the guard; with `in_place`, the page alone, latched in place (`PG_LATCHED`), if no
    /// one else holds it. The caller holds `i_rwsem`.
    #[allow(clippy::type_complexity)]
    fn latch(
        &self,
        m: &Inode,
        index: u64,
        nr: u64,
        mut start: Option<FolioRef<'_>>,
        in_place: bool,
    ) -> Result<
        (
            std::ptr::NonNull<crate::mm::folio::Folio>,
            Option<std::ptr::NonNull<crate::mm::folio::Folio>>,
        ),
        CacheError,
    > {
        let c = &self.cache;
        // The copy is allocated before any folio lock is held (reclaim may need to lock other
        // folios): at once for a copying guard, after a failed attempt in place otherwise.
        let alloc = || {
            let new = c
                .alloc_folio(nr.trailing_zeros())
                .map_err(|_| c.out_of_memory(nr as usize))?;
            Ok::<_, CacheError>(new.lock_new())
        };
        let mut new = if in_place { None } else { Some(alloc()?) };
        let mut drained = 0;
        // A block held by several folios, or a larger one, is made one folio first; the
        // attempts are bounded (under memory pressure reclaim may take the pieces as fast as
        // they are read).
        let mut reshaped = 0;
        let mut reshape = || {
            reshaped += 1;
            if reshaped > 16 {
                return Err(c.out_of_memory(nr as usize));
            }
            Ok(())
        };
        let old = loop {
            let folio = match start.take() {
                Some(f) => f,
                None => self.get_page(m, index, nr as usize)?.0,
            };
            if folio.index() != index || folio.nr_pages() as u64 != nr {
                let larger = folio.nr_pages() as u64 > nr;
                drop(folio);
                reshape()?;
                // A page latch splits the large folio holding the page; a block latch splits
                // a larger one too, and collapses the pieces into one of its size.
                if larger || nr == 1 {
                    super::split::split_folio_at(c, m, index)?;
                } else {
                    super::collapse::collapse_block(c, m, index, nr)?;
                }
                continue;
            }
            let old = folio.lock();
            if !(old.mapping() == m.id && old.index() == index && old.is_uptodate()) {
                continue;
            }
            if nr > 1 && !cow::settled(&m.snapshots, &old) {
                // A live snapshot may still need pages of the block, and keeps pages: capture
                // them (the split and the collapse do, and stamp the new folio).
                drop(old);
                reshape()?;
                super::split::split_folio_at(c, m, index)?;
                super::collapse::collapse_block(c, m, index, nr)?;
                continue;
            }
            // Stable pages: the guard starts from a page no write is reading.
            writeback::wait_stable(&old);
            if new.is_some() {
                break old;
            }
            // In place if a live snapshot does not still need the page's bytes (a capture
            // maps it, which the freeze would fail on anyway) and the freeze proves that no
            // one else holds it: the page cache's references (one per page) and ours (the
            // handed-over pin's, or the lookup's).
            if cow::settled(&m.snapshots, &old) {
                let expected = nr as u32 + 1;
                // SAFETY: `expected` is exactly the references we know of, as in
                // `modify_cached`.
                match unsafe { old.freeze(expected) } {
                    Ok(frozen) => {
                        frozen.set_latched();
                        // SAFETY: the same references exist again; the unfreeze's Release
                        // publishes PG_LATCHED to every later `try_get` (rule 6 of the folio
                        // docs), and unlocks.
                        let page = unsafe { frozen.unfreeze(expected) };
                        return Ok((std::ptr::NonNull::from(page.into_raw()), None));
                    }
                    Err(old) if c.may_drain_for_freeze(&old, drained) => {
                        // A per-CPU LRU batch may hold the other reference (a page read or
                        // written a moment ago): drain, try again.
                        drop(old);
                        c.drain_for_freeze(&mut drained);
                        continue;
                    }
                    Err(old) => drop(old),
                }
            } else {
                drop(old);
            }
            new = Some(alloc()?);
        };
        let mut new = new.expect("the copying path has its copy");
        new.data_mut()
            .expect("a fresh folio is not uptodate")
            .copy_from_slice(old.data().expect("uptodate"));
        Ok((
            std::ptr::NonNull::from(old.unlock().into_raw()),
            Some(std::ptr::NonNull::from(new.into_raw_locked())),
        ))
    }
}

impl FolioMut<'_> {
    /// The page index of the latched page.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Says that the changes made through the guard were logged at `lsn` in the engine's
    /// write-ahead log (the highest number given is kept): once committed, the page reaches
    /// the file only after the log is durable up to it ([`CachedFile::write_at_lsn`]).
    pub fn set_lsn(&mut self, lsn: u64) {
        self.lsn = self.lsn.max(lsn);
    }

    /// Publishes the changes now (what dropping the guard does).
    pub fn commit(mut self) {
        self.finish(true);
    }

    /// Drops the changes: the page stays as it was.
    pub fn discard(mut self) {
        self.finish(false);
    }

    /// The guard as one that owns its file ([`OwnedFolioMut`]): it may outlive the handle it
    /// was made from (and every other handle of the file) and move into `'static` tasks. The
    /// latch, the private copy and the changes made so far carry over; the latch's owner
    /// stays the handle it was made through (writing the page through that handle is still
    /// an error, not a wait). Costs one use of the file, taken here and put when the guard
    /// ends.
    ///
    /// ```
    /// use foliocache::{Config, FolioCache, OpenOptions, OwnedFolioMut};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let cache = FolioCache::new(Config::new(16 << 20))?;
    /// let mut write_set: Vec<OwnedFolioMut> = Vec::new(); // a transaction's latched pages
    /// {
    ///     let db = cache.open_with(dir.path().join("db"), OpenOptions::new().write(true).create(true))?;
    ///     db.set_len(2 * 4096)?;
    ///     for index in 0..2 {
    ///         let mut page = db.get_folio_mut(index)?.into_owned();
    ///         page[0] = 7;
    ///         write_set.push(page);
    ///     }
    /// }                                                  // the handle closes; the latches live on
    /// let committed = std::thread::spawn(move || write_set.into_iter().for_each(|p| p.commit()));
    /// committed.join().unwrap();
    /// let db = cache.open(dir.path().join("db"))?;
    /// let mut b = [0u8; 1];
    /// db.read_exact_at(&mut b, 4096)?;
    /// assert_eq!(b, [7]);
    /// # Ok(()) }
    /// ```
    pub fn into_owned(self) -> OwnedFolioMut {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped: its owning field moves out here, once; the rest
        // are plain values.
        let holder = unsafe { std::ptr::read(&this.cache) };
        let cache = match holder {
            Holder::Handle(f) => {
                let mapping = f.mapping();
                // ORDERING: Relaxed; the handle holds a use, so the count cannot reach zero.
                mapping
                    .users
                    .fetch_add(1, crate::mm::sync::Ordering::Relaxed);
                Holder::Owned(f.cache.clone(), mapping)
            }
            Holder::Owned(c, m) => Holder::Owned(c, m),
        };
        FolioMut {
            cache,
            index: this.index,
            nr: this.nr,
            old: this.old,
            new: this.new,
            valid: this.valid,
            lsn: this.lsn,
            done: this.done,
        }
    }

    /// The first byte the guard changes: the copy's, or the page's latched in place.
    fn bytes_ptr(&self) -> *mut u8 {
        let folio = self.new.unwrap_or(self.old);
        // SAFETY: the guard holds a reference on the folio, so its header is live.
        self.cache
            .cache()
            .arena
            .frame_ptr(unsafe { folio.as_ref() }.pfn())
    }

    /// The page and the copy as handles again (once: `finish` consumes the guard's
    /// ownership).
    fn take(&self) -> (FolioRef<'_>, Option<FolioLocked<'_>>) {
        debug_assert!(self.done, "taken once, by `finish`");
        let arena = &self.cache.cache().arena;
        // SAFETY: the guard owns one reference on each (the copy's locked), taken back
        // exactly once (`done` is set by the only caller).
        unsafe {
            (
                FolioRef::from_raw(arena, self.old.as_ref()),
                self.new
                    .map(|new| FolioLocked::from_raw_locked(arena, new.as_ref())),
            )
        }
    }

    fn finish(&mut self, commit: bool) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let (c, m) = (self.cache.cache(), self.cache.mapping());
        let (index, nr, lsn) = (self.index, self.nr, self.lsn);
        let (old, new) = self.take();
        let Some(mut new) = new else {
            debug_assert!(commit, "an in-place latch has no discard");
            commit_in_place(c, m, index, old, lsn);
            m.latches.remove(index);
            c.pin_uncharge(nr);
            c.wake_flusher();
            return;
        };
        if !commit {
            // The copy is freed with its last reference, never having been in an index.
            drop(new);
            drop(old);
            m.latches.remove(index);
            c.pin_uncharge(2 * nr);
            return;
        }
        // Reserve the page's (or block's) dirtiness as a write does (no folio lock held: the
        // pass this may run writes the old page like any other).
        balance_dirty_pages(c, m, nr, || c.dirty_inodes());
        {
            // `i_rwsem`, as a write's: revalidation must not miss a page being dirtied.
            let _w = m.i_rwsem.lock();
            keep_for_snapshots(c, m, index);
            new.mark_uptodate();
            let old = old.lock();
            writeback::wait_stable(&old);
            publish_copy(c, m, index, old, &new);
            c.folio_added(&new, None);
            c.counters.inc(Event::WritesReplaced);
            write_end(c, m, new, 0, lsn, nr);
        }
        m.latches.remove(index);
        c.pin_uncharge(2 * nr);
        c.wake_flusher();
    }
}

/// Commits a latch that updated page `index` in place (`old`, its folio, with the latch's
/// reference). A page that is dirty already stays so until the commit (writeback skips or
/// waits for a latched page, and truncation waits for the latch), so its commit reserves
/// nothing: it notes the change's log number while the page is still latched (a writeback
/// that starts after `end_latch` reads it under the tag mutex) and ends the latch
/// (`end_latch`, which wakes the readers waiting), taking the folio lock only to stamp the
/// page for live snapshots. A clean page reserves its dirtiness as a write does first (no
/// folio lock held: the pass this may run skips the latched page), then, under the folio
/// lock, the latch ends and the page is marked dirty. No `i_rwsem`: a snapshot being taken
/// holds it while it waits for the file's in-place latches (`Latches::lock_for_snapshot`),
/// and no snapshot taken during the latch exists, so none needs the bytes the change
/// overwrote (the latch began only when every live one had its own copy of the page:
/// `cow::settled`).
fn commit_in_place(c: &Arc<CacheInner>, m: &Inode, index: u64, old: FolioRef<'_>, lsn: u64) {
    c.counters.inc(Event::WritesInPlace);
    if old.test_flag(PG_DIRTY) {
        c.counters.inc(Event::Redirtied);
        writeback::note_change(&old, &m.mapping.wb, lsn);
        if cow::any(&m.snapshots) {
            let page = old.lock();
            cow::stamp(&m.snapshots, &page);
            // SAFETY: the guard's reference set PG_LATCHED and its holder is done writing
            // (the guard is being consumed).
            unsafe { page.folio_ref().end_latch() };
        } else {
            // SAFETY: as above.
            unsafe { old.end_latch() };
        }
        return;
    }
    let nr = old.nr_pages() as u64;
    balance_dirty_pages(c, m, nr, || c.dirty_inodes());
    let page = old.lock();
    debug_assert!(page.mapping() == m.id && page.index() == index);
    // SAFETY: as above.
    unsafe { page.folio_ref().end_latch() };
    write_end(c, m, page, 0, lsn, nr);
}

/// Keeps the bytes page `index` has before a latch's commit for the file's live snapshots
/// (`cache/snapshot.rs`), charged past the snapshot limit if need be: a commit cannot fail.
/// The caller holds `i_rwsem`, so the page cannot change before the commit replaces it.
fn keep_for_snapshots(c: &CacheInner, m: &Inode, index: u64) {
    loop {
        // A block's folio was stamped when it was latched (no snapshot was taken since: they
        // wait for block latches), so this finds it whole and captures nothing.
        match lookup_stable_folio(c, m, index) {
            Ok(Some(cur)) => {
                let r = cow::capture(c, &m.snapshots, &m.path, &cur, true);
                debug_assert!(r.is_ok(), "a forced capture cannot fail");
                return;
            }
            Ok(None) if cow::needs_old_page(&m.snapshots, index) => {
                if read_old_page(c, m, index).is_err() {
                    // The old bytes cannot be read (an I/O error), and the commit will
                    // replace them: the snapshots lose the page (their reads of it fail)
                    // rather than show the new bytes.
                    cow::forget_page(&m.snapshots, index);
                    return;
                }
            }
            Ok(None) | Err(_) => return,
        }
    }
}

/// Puts the committed copy `new` in page `index`'s slot: in place of the latched page `old`
/// (locked), carrying its dirtiness, or, if `old` left the index meanwhile (nothing that
/// respects latches removes it; this is the fallback), in place of whatever is cached there
/// now, or into the empty slot. The caller holds `i_rwsem`.
fn publish_copy(
    c: &CacheInner,
    m: &Inode,
    index: u64,
    old: FolioLocked<'_>,
    new: &FolioLocked<'_>,
) {
    let mut cur = Some(old);
    loop {
        if let Some(f) = cur.take() {
            if f.mapping() == m.id && f.index() == index && f.order() == new.order() {
                swap_in(m, &f, new);
                return;
            }
            if new.nr_pages() > 1 && f.nr_pages() != new.nr_pages() {
                // A block cached in other folios now: make it one, then replace that.
                drop(f);
                let _ = super::split::split_folio_at(c, m, index);
                let _ = super::collapse::collapse_block(c, m, index, new.nr_pages() as u64);
            }
        }
        if m.mapping.pages.add_folio(new, index).is_ok() {
            return;
        }
        // Something is cached there again (read back in): replace that.
        cur = if new.nr_pages() > 1 {
            lookup_stable_folio(c, m, index).ok().flatten()
        } else {
            lookup_stable(c, m, index).ok().flatten()
        };
        if cur.is_none() {
            std::thread::yield_now();
        }
    }
}

impl std::ops::Deref for FolioMut<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the copy is locked by this guard, not uptodate, in no index: nothing but
        // the guard reaches its bytes; a page latched in place is referenced by others only
        // while PG_LATCHED refuses them its bytes (rule 6 of the folio docs). The frames live
        // as long as the arena.
        unsafe { std::slice::from_raw_parts(self.bytes_ptr(), self.valid) }
    }
}

impl std::ops::DerefMut for FolioMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.bytes_ptr(), self.valid) }
    }
}

impl Drop for FolioMut<'_> {
    /// Commits; an owned guard then puts its use of the file (`iput`).
    fn drop(&mut self) {
        self.finish(true);
        if let Holder::Owned(c, m) = &self.cache {
            c.iput(m.clone());
        }
    }
}

impl std::fmt::Debug for FolioMut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FolioMut")
            .field("path", &self.cache.mapping().path)
            .field("index", &self.index())
            .finish()
    }
}
