//! The folio guards: [`PinnedFolio`] (borrowing its handle) and [`OwnedFolio`] (owning a use
//! of the file), each one counted reference on an uptodate folio whose bytes it hands out in
//! place, and what both are made of ([`Pin`]). The kernel's model is a folio reference taken
//! by `filemap_get_folio` and put by `folio_put`; the pinned share of the budget each guard is
//! charged against is `budget.rs`'s.

use std::path::PathBuf;

use super::error::CacheError;
use super::file::{valid_bytes, CachedFile};
use super::inode::Inode;
use super::sb::CacheInner;
use super::stats::Event;
use crate::mm::folio::flags::{PG_LATCHED, PG_READAHEAD};
use crate::mm::folio::{FolioRef, PAGE_SHIFT};
use crate::mm::sync::{Arc, Ordering};

/// What both folio guards hold: one counted reference on an uptodate folio, and how many of
/// its bytes are the file's.
pub(super) struct Pin {
    pub(super) folio: std::ptr::NonNull<crate::mm::folio::Folio>,
    /// The folio's first byte in the arena's frames, resolved (and its uptodate flag checked)
    /// once when the pin was taken: the guard's `Deref` then loads nothing.
    pub(super) data: std::ptr::NonNull<u8>,
    pub(super) valid: usize,
}

impl Pin {
    /// Takes over `folio`'s reference; `valid` (at most the folio's size) of its bytes are
    /// the file's.
    #[inline]
    pub(super) fn new(folio: FolioRef<'_>, valid: usize) -> Pin {
        let data = folio.data().expect("pinned folios are uptodate");
        debug_assert!(valid <= data.len());
        let data = std::ptr::NonNull::from(data).cast::<u8>();
        Pin {
            folio: std::ptr::NonNull::from(folio.into_raw()),
            data,
            valid,
        }
    }

    /// # Safety
    /// `arena` is the arena of the folio, alive for `'a`.
    pub(super) unsafe fn folio<'a>(
        &self,
        _arena: &'a crate::mm::folio::Arena,
    ) -> &'a crate::mm::folio::Folio {
        // SAFETY: headers live as long as their arena (per the caller), and our reference
        // keeps this one allocated to its file.
        unsafe { self.folio.as_ref() }
    }

    /// # Safety
    /// As [`Pin::folio`].
    #[inline(always)]
    pub(super) unsafe fn bytes<'a>(&self, _arena: &'a crate::mm::folio::Arena) -> &'a [u8] {
        // SAFETY: `data` points into the arena's frames (alive for `'a`, per the caller) at
        // a folio that was uptodate when pinned, of at least `valid` bytes; the bytes are
        // immutable while our reference exists (an uptodate folio is never written in
        // place), and the caller ties the borrow to the guard holding the reference.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.valid) }
    }

    /// # Safety
    /// As [`Pin::folio`]; called once, from the guard's drop.
    #[inline]
    pub(super) unsafe fn release(&self, arena: &crate::mm::folio::Arena) {
        // SAFETY: we own exactly one reference on this folio, put here once.
        drop(unsafe { FolioRef::from_raw(arena, self.folio(arena)) });
    }
}

/// The accessors, `Deref`, `Debug` and `Drop` of a folio guard (`PinnedFolio`, `OwnedFolio`):
/// each type supplies `arena()` (alive as long as the guard) and `path()`.
macro_rules! guard_methods {
    ($guard:ty, $name:literal) => {
        impl $guard {
            /// The first page index the folio covers.
            pub fn index(&self) -> u64 {
                // SAFETY: `arena()` is the folio's arena, alive as long as the guard.
                unsafe { self.pin.folio(self.arena()) }.index()
            }

            /// The byte offset in the file of the folio's first byte.
            pub fn offset(&self) -> u64 {
                self.index() << PAGE_SHIFT
            }

            /// The file bytes the folio holds (the part past EOF excluded).
            #[inline]
            pub fn bytes(&self) -> &[u8] {
                // SAFETY: as in `index`; the borrow is tied to `&self`, which holds the
                // folio reference.
                unsafe { self.pin.bytes(self.arena()) }
            }

            /// Pages the folio holds (1 today).
            pub fn nr_pages(&self) -> u64 {
                // SAFETY: as in `index`.
                unsafe { self.pin.folio(self.arena()) }.nr_pages() as u64
            }

            /// The folio's reference count right now (this guard's included): a diagnostic.
            pub fn ref_count(&self) -> u32 {
                let arena = self.arena();
                // SAFETY: as in `index`.
                unsafe { self.pin.folio(arena) }.ref_count(arena.strategy())
            }
        }

        impl std::ops::Deref for $guard {
            type Target = [u8];

            #[inline]
            fn deref(&self) -> &[u8] {
                self.bytes()
            }
        }

        impl std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct($name)
                    .field("path", &self.path())
                    .field("index", &self.index())
                    .field("len", &self.bytes().len())
                    .finish()
            }
        }

        impl Drop for $guard {
            #[inline]
            fn drop(&mut self) {
                let pages = self.nr_pages();
                // SAFETY: the arena outlives the guard; the reference is put once, here.
                unsafe { self.pin.release(self.arena()) }
                // The pin limit's charge (`cache/budget.rs`), after the page is put.
                self.inner().pin_uncharge(pages);
                self.after_release();
            }
        }
    };
}

/// A pinned folio of a cached file, borrowed from its handle: its bytes, without a copy
/// (`filemap_get_folio` + `kmap_local_folio`), from [`CachedFile::get_folio`].
///
/// Holds a reference on the folio (put on drop), so the bytes stay valid and unchanged
/// however long the guard lives; the cache cannot evict or invalidate a pinned folio.
/// Guards may hold [`Config::pinned_share`](crate::Config::pinned_share) of the budget at
/// once (75% by default); beyond it a new pin waits up to
/// [`Config::pin_wait`](crate::Config::pin_wait) and fails with [`CacheError::PinLimit`](crate::CacheError::PinLimit).
/// Copying reads ([`CachedFile::read_at`]) go on meanwhile, uncached if they must.
///
/// Dereferences to the file's bytes in the folio (`&guard[..]`). The guard cannot outlive
/// the handle it came from:
///
/// ```compile_fail
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("data");
/// # std::fs::write(&path, vec![7u8; 8192])?;
/// let cache = foliocache::FolioCache::new(foliocache::Config::new(1 << 20))?;
/// let page = {
///     let file = cache.open(&path)?;
///     let page = file.get_folio(0)?;
///     page                              // error: `file` does not live long enough
/// };
/// # Ok(()) }
/// ```
///
/// but its owned form can, and may move to another thread:
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("data");
/// # std::fs::write(&path, vec![7u8; 8192])?;
/// let cache = foliocache::FolioCache::new(foliocache::Config::new(1 << 20))?;
/// let page = {
///     let file = cache.open(&path)?;
///     let owned = file.get_folio(1)?.into_owned();
///     owned                             // `file` closes here; the page stays
/// };
/// let sum = std::thread::spawn(move || page.iter().map(|&b| b as u64).sum::<u64>()).join();
/// assert_eq!(sum.unwrap(), 7 * 4096);
/// # Ok(()) }
/// ```
pub struct PinnedFolio<'f> {
    pub(super) file: &'f CachedFile,
    pub(super) pin: Pin,
}

// SAFETY: the guard owns a counted reference, which may be used and dropped from any thread
// (folio headers are shared, atomically accessed state); the bytes it exposes are immutable;
// `CachedFile` is `Sync`.
unsafe impl Send for PinnedFolio<'_> {}
// SAFETY: as above; `&PinnedFolio` only reads immutable bytes and atomic header fields.
unsafe impl Sync for PinnedFolio<'_> {}

impl<'f> PinnedFolio<'f> {
    /// The arena the folio lives in: the handle keeps the cache, hence the arena, alive for
    /// `'f`.
    fn arena(&self) -> &'f crate::mm::folio::Arena {
        &self.file.cache.arena
    }

    fn path(&self) -> PathBuf {
        self.file.path()
    }

    fn inner(&self) -> &CacheInner {
        &self.file.cache
    }

    /// Nothing to put besides the folio: the handle owns the use of the inode.
    fn after_release(&mut self) {}

    /// Upgrades the pinned page to a write latch ([`FolioMut`](crate::FolioMut), as
    /// [`CachedFile::get_folio_mut`] gives) without looking the page up again: the latch
    /// starts from the folio this guard holds if it is still the page cached at its index.
    /// If a write replaced the page since it was pinned (the guard kept the old bytes), the
    /// latch starts from the current page, as `get_folio_mut` would: the bytes the latch
    /// shows are always the file's now. A large folio is latched by its first page (a page
    /// latch splits it first). Fails as `get_folio_mut` does (a read-only handle, a page
    /// latched by this handle); the pin is released either way.
    ///
    /// ```
    /// # use foliocache::{Config, FolioCache, OpenOptions};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let cache = FolioCache::new(Config::new(1 << 20))?;
    /// let db = cache.open_with(dir.path().join("db"), OpenOptions::new().write(true).create(true))?;
    /// db.set_len(8192)?;
    /// let page = db.get_folio(1)?;          // read the page, zero-copy
    /// if page[0] == 0 {
    ///     let mut w = page.upgrade()?;      // then change it, no second lookup
    ///     w[0] = 1;
    ///     w.commit();
    /// }
    /// # let mut b = [0u8; 1];
    /// # db.read_exact_at(&mut b, 4096)?;
    /// # assert_eq!(b[0], 1);
    /// # Ok(()) }
    /// ```
    pub fn upgrade(self) -> Result<crate::FolioMut<'f>, CacheError> {
        self.upgrade_with(false)
    }

    /// [`PinnedFolio::upgrade`] to an exclusive latch that updates the page in place
    /// ([`CachedFile::get_folio_mut_in_place`]): the guard's reference becomes the latch's,
    /// so the page is latched in place unless someone else holds it too.
    ///
    /// ```
    /// # use foliocache::{Config, FolioCache, OpenOptions};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let cache = FolioCache::new(Config::new(1 << 20))?;
    /// let db = cache.open_with(dir.path().join("db"), OpenOptions::new().write(true).create(true))?;
    /// db.set_len(8192)?;
    /// let page = db.get_folio(1)?;                  // read it, zero-copy
    /// let mut w = page.upgrade_in_place()?;         // then change it where it is
    /// w[0] = 1;
    /// assert!(w.in_place());
    /// w.commit();
    /// # Ok(()) }
    /// ```
    pub fn upgrade_in_place(self) -> Result<crate::InPlaceFolioMut<'f>, CacheError> {
        self.upgrade_with(true).map(super::latch::InPlaceFolioMut)
    }

    fn upgrade_with(self, in_place: bool) -> Result<crate::FolioMut<'f>, CacheError> {
        let (file, index, pages) = (self.file, self.index(), self.nr_pages());
        if pages > 1 {
            // The latch is on one page, and a page latch splits the large folio first:
            // nothing to reuse.
            drop(self);
            file.cache.pin_charge(if in_place { 1 } else { 2 })?;
            return file.latch_charged(index, 1, None, in_place);
        }
        // The pin's charge (one page) becomes the latch's page's; a copying latch charges its
        // copy too.
        if !in_place {
            if let Err(e) = file.cache.pin_charge(1) {
                drop(self);
                return Err(e);
            }
        }
        let this = std::mem::ManuallyDrop::new(self);
        let arena = this.arena();
        // SAFETY: the guard owns one reference on this folio; it is handed over here, once
        // (the guard is not dropped).
        let folio = unsafe { FolioRef::from_raw(arena, this.pin.folio(arena)) };
        file.latch_charged(index, 1, Some(folio), in_place)
    }

    /// A guard that owns its file instead of borrowing the handle: it may outlive the handle
    /// (and every other handle of the file) and move into `'static` tasks. Costs one shared
    /// reference on the file's state, taken here and put when the owned guard drops.
    pub fn into_owned(self) -> OwnedFolio {
        let this = std::mem::ManuallyDrop::new(self);
        let mapping = this.file.mapping();
        // ORDERING: Relaxed; the handle holds a use, so the count cannot reach zero here.
        mapping.users.fetch_add(1, Ordering::Relaxed);
        OwnedFolio {
            cache: this.file.cache.clone(),
            mapping: std::mem::ManuallyDrop::new(mapping),
            writable: this.file.writable,
            pin: Pin {
                folio: this.pin.folio,
                data: this.pin.data,
                valid: this.pin.valid,
            },
        }
    }
}

guard_methods!(PinnedFolio<'_>, "PinnedFolio");

/// A pinned folio that owns a reference on its file ([`PinnedFolio::into_owned`]): valid
/// after every handle of the file is closed; the folio is freed when the guard drops.
pub struct OwnedFolio {
    cache: Arc<CacheInner>,
    /// A use of the inode (`i_count`), put back after the folio (`CacheInner::iput`).
    mapping: std::mem::ManuallyDrop<Arc<Inode>>,
    /// Whether the handle it came from could write ([`OwnedFolio::upgrade`]).
    writable: bool,
    pin: Pin,
}

// SAFETY: as for `PinnedFolio`; the mapping is shared state behind an `Arc`.
unsafe impl Send for OwnedFolio {}
// SAFETY: as above.
unsafe impl Sync for OwnedFolio {}

impl OwnedFolio {
    /// The arena the folio lives in, kept alive by the mapping we hold.
    fn arena(&self) -> &crate::mm::folio::Arena {
        &self.cache.arena
    }

    fn path(&self) -> PathBuf {
        self.mapping.path.clone()
    }

    fn inner(&self) -> &CacheInner {
        &self.cache
    }

    /// Puts the guard's use of the inode (`iput`), after its folio.
    fn after_release(&mut self) {
        // SAFETY: taken once, here, from the guard's drop; never used again.
        let m = unsafe { std::mem::ManuallyDrop::take(&mut self.mapping) };
        self.cache.iput(m);
    }
}

impl OwnedFolio {
    /// [`PinnedFolio::upgrade`] for an owned guard: the pinned page becomes an owned write
    /// latch ([`OwnedFolioMut`](crate::OwnedFolioMut)) without a second lookup, whether or
    /// not the handle it came from is still open. Fails as `PinnedFolio::upgrade` does (the
    /// handle it came from could not write: [`CacheError::NotWritable`]); the pin is
    /// released either way. The latch's owner is a handle of its own (so the thread that
    /// upgrades may not write the page meanwhile, as with any latch it made).
    ///
    /// ```
    /// # use foliocache::{Config, FolioCache, OpenOptions};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let cache = FolioCache::new(Config::new(1 << 20))?;
    /// let page = {
    ///     let db = cache.open_with(dir.path().join("db"), OpenOptions::new().write(true).create(true))?;
    ///     db.set_len(4096)?;
    ///     let owned = db.get_folio(0)?.into_owned();
    ///     owned                                  // outlives the handle
    /// };
    /// let mut w = page.upgrade()?;               // still no lookup
    /// w[0] = 9;
    /// w.commit();
    /// # let mut b = [0u8; 1];
    /// # cache.open(dir.path().join("db"))?.read_exact_at(&mut b, 0)?;
    /// # assert_eq!(b, [9]);
    /// # Ok(()) }
    /// ```
    pub fn upgrade(self) -> Result<crate::OwnedFolioMut, CacheError> {
        self.upgrade_with(false)
    }

    /// [`OwnedFolio::upgrade`] to an owned exclusive latch that updates the page in place
    /// ([`PinnedFolio::upgrade_in_place`]).
    pub fn upgrade_in_place(self) -> Result<crate::OwnedInPlaceFolioMut, CacheError> {
        self.upgrade_with(true).map(super::latch::InPlaceFolioMut)
    }

    fn upgrade_with(self, in_place: bool) -> Result<crate::OwnedFolioMut, CacheError> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped: its owning fields move out here, once.
        let (cache, mut mapping) =
            unsafe { (std::ptr::read(&this.cache), std::ptr::read(&this.mapping)) };
        // SAFETY: taken once, here; the use it carries passes to the handle below.
        let m = unsafe { std::mem::ManuallyDrop::take(&mut mapping) };
        // A handle for the latch, owning the guard's use of the file (given back when it
        // drops, after the owned latch took its own).
        let file = CachedFile::new(cache.clone(), m).with_mode(this.writable, false);
        let pages = {
            let arena = &*cache.arena;
            // SAFETY: the guard's pin is alive (not released: `this` is never dropped).
            unsafe { this.pin.folio(arena) }.nr_pages() as u64
        };
        let index = {
            // SAFETY: as above.
            unsafe { this.pin.folio(&cache.arena) }.index()
        };
        if pages > 1 {
            // As `PinnedFolio::upgrade`: a page latch splits the large folio first.
            // SAFETY: the pin's reference is put once, here.
            unsafe { this.pin.release(&cache.arena) };
            cache.pin_uncharge(pages);
            cache.pin_charge(if in_place { 1 } else { 2 })?;
            return file
                .latch_charged(index, 1, None, in_place)
                .map(crate::FolioMut::into_owned);
        }
        // As `PinnedFolio::upgrade`: the pin's charge becomes the latch's page's.
        if !in_place {
            if let Err(e) = cache.pin_charge(1) {
                // SAFETY: as above.
                unsafe { this.pin.release(&cache.arena) };
                cache.pin_uncharge(1);
                return Err(e);
            }
        }
        // SAFETY: the guard owns one reference on this folio; it is handed over here, once.
        let folio = unsafe { FolioRef::from_raw(&cache.arena, this.pin.folio(&cache.arena)) };
        file.latch_charged(index, 1, Some(folio), in_place)
            .map(crate::FolioMut::into_owned)
    }
}

guard_methods!(OwnedFolio, "OwnedFolio");

impl CachedFile {
    /// [`CachedFile::get_folio`] by byte offset: pins the folio holding the file's byte
    /// `offset`. The guard's bytes start at [`PinnedFolio::offset`], which may be before
    /// `offset` (a folio holds 1 to 512 pages, starting at a multiple of its size).
    pub fn get_folio_at(&self, offset: u64) -> Result<PinnedFolio<'_>, CacheError> {
        self.get_folio(offset >> PAGE_SHIFT)
    }

    /// `filemap_get_folio` + `filemap_read_folio`: pins the folio holding page `index` (the
    /// file's bytes `index * PAGE_SIZE ..`; [`CachedFile::get_folio_at`] takes a byte offset),
    /// reading it in if needed, and returns a guard giving its bytes without a copy.
    ///
    /// The folio may hold more than that page: with large folios
    /// ([`Config::max_folio_order`](super::Config::max_folio_order)) it is the whole run of
    /// pages cached together, and its bytes start at [`PinnedFolio::offset`]. For exactly a
    /// byte range, use [`CachedFile::get_range`].
    ///
    /// The folio cannot be freed or invalidated away while the guard lives (invalidation
    /// skips pinned folios). `index` must be a page of the file.
    ///
    /// The guard borrows this handle, as a kernel folio reference lives under its caller's
    /// file reference: a hit writes nothing shared but the folio's refcount (index lookup
    /// and speculative reference in one RCU section). For a
    /// guard that outlives the handle, or moves into a `'static` task, use
    /// [`PinnedFolio::into_owned`].
    ///
    /// Guards may pin [`Config::pinned_share`](crate::Config::pinned_share) of the budget at
    /// once; a pin beyond it waits up to [`Config::pin_wait`](crate::Config::pin_wait) for a
    /// guard to be dropped, then fails with [`CacheError::PinLimit`].
    pub fn get_folio(&self, index: u64) -> Result<PinnedFolio<'_>, CacheError> {
        // `cache/budget.rs`: charge the pin first (a per-CPU counter, no shared write).
        self.cache.pin_charge(1)?;
        let r = self.get_folio_charged(index);
        match &r {
            Ok(page) => {
                let extra = page.nr_pages() - 1;
                if extra > 0 {
                    self.cache.budget.pins.charge_unchecked(extra);
                }
            }
            Err(_) => self.cache.pin_uncharge(1),
        }
        self.cache.deliver();
        r
    }

    /// [`CachedFile::get_folio`] with the pin charged.
    #[inline]
    fn get_folio_charged(&self, index: u64) -> Result<PinnedFolio<'_>, CacheError> {
        let fast = self.hit_section(|m, section| {
            if index >= m.nr_pages() {
                return None;
            }
            let folio = m.mapping.pages.lookup_in(index, section)?;
            // Readahead marks and folios under I/O take the full path.
            if folio.flags() & (PG_READAHEAD | PG_LATCHED) != 0 || !folio.is_uptodate() {
                return None;
            }
            self.cache.counters.inc(Event::Hit);
            // `FGP_ACCESSED`.
            self.accessed(&folio);
            let valid = valid_bytes(m, &folio);
            Some(Pin::new(folio, valid))
        });
        match fast {
            Some(pin) => Ok(PinnedFolio { file: self, pin }),
            None => self.get_folio_slow(index),
        }
    }

    /// [`CachedFile::get_folio`] past its hit: a miss, a readahead mark, I/O in progress, or
    /// an index past the end.
    #[inline(never)]
    fn get_folio_slow(&self, index: u64) -> Result<PinnedFolio<'_>, CacheError> {
        // Borrowed, not cloned (see `read_at_slow`).
        let m: &Inode = &self.m;
        if index >= m.nr_pages() {
            return Err(CacheError::InvalidArgument {
                what: format!(
                    "page {index} is past the end of {} ({} pages of 4 KiB)",
                    m.path.display(),
                    m.nr_pages()
                ),
            });
        }
        let (folio, filled) = self.get_page(m, index, 1)?;
        self.accessed_after(&folio, filled);
        let valid = valid_bytes(m, &folio);
        // This handle keeps the mapping (and the arena) alive for the guard.
        Ok(PinnedFolio {
            file: self,
            pin: Pin::new(folio, valid),
        })
    }
}
