//! Pinned byte ranges of a file: [`PinnedRange`] (borrowing its handle) and [`OwnedRange`]
//! (owning a use of the file), views that may span folios of any size, made of the same
//! pins as the folio guards (`cache/guard.rs`).
//!
//! # Pages, folios and offsets
//!
//! A file is cached in *pages* of [`PAGE_SIZE`] (4 KiB) bytes: page `i` holds the bytes
//! `i * PAGE_SIZE ..`. Pages are held in *folios*: runs of 1, 2, 4, ... 512 pages, each
//! starting at a page number that is a multiple of its length (a 16 KiB folio starts at a
//! multiple of 16 KiB in the file). A folio is what the cache counts, pins and evicts as one:
//! one reference count, one LRU entry, one index entry. Readahead and misses that read several
//! pages at once fill them in folios as large as the range and its alignment allow
//! ([`Config::max_folio_order`](super::Config::max_folio_order)), so a 16 KiB block read at a
//! 16 KiB-aligned offset sits in one folio and can be borrowed as one slice.
//!

use super::error::CacheError;
use super::file::{valid_bytes, CachedFile};
use super::guard::Pin;
use super::inode::Inode;
use super::sb::CacheInner;
use super::stats::Event;
use crate::mm::folio::flags::{PG_LATCHED, PG_READAHEAD};
use crate::mm::folio::{Arena, PAGE_SHIFT};
use crate::mm::sync::{Arc, Ordering};

/// The folios a [`PinnedRange`] holds: one inline (a range inside one folio, the common
/// case, costs no allocation), or several.
enum Pins {
    One(Pin),
    Many(Vec<Pin>),
}

impl Pins {
    fn as_slice(&self) -> &[Pin] {
        match self {
            Pins::One(p) => std::slice::from_ref(p),
            Pins::Many(v) => v,
        }
    }
}

/// The part of a pinned folio's bytes that the file range `offset..offset + len` covers.
///
/// # Safety
/// `pin` holds a reference on a folio of `arena`, alive for `'a`.
unsafe fn part<'a>(pin: &Pin, arena: &'a Arena, offset: u64, len: usize) -> &'a [u8] {
    // SAFETY: per the caller.
    let (folio, bytes) = unsafe { (pin.folio(arena), pin.bytes(arena)) };
    let start = folio.index() << PAGE_SHIFT;
    let from = offset.saturating_sub(start) as usize;
    let to = ((offset + len as u64 - start) as usize).min(bytes.len());
    &bytes[from..to]
}

/// Exactly the bytes `offset..offset + len` of a cached file, pinned in the cache, without a
/// copy: from [`CachedFile::get_range`].
///
/// When one folio holds the whole range (a block read at an offset aligned to its size, with
/// large folios on), [`PinnedRange::as_slice`] gives it as one slice; otherwise the bytes are
/// the concatenation of [`PinnedRange::slices`], and [`PinnedRange::copy_to`] gathers them.
/// The folios stay cached and unchanged while the guard lives (a write to the range goes to
/// new folios; the guard keeps the bytes it pinned). The guard borrows its handle; for one
/// that outlives it, and can back a `bytes::Bytes`, see [`PinnedRange::into_owned`].
pub struct PinnedRange<'f> {
    file: &'f CachedFile,
    pins: Pins,
    offset: u64,
    len: usize,
    /// Pages charged to the cache's pinned share for these pins (`cache/budget.rs`).
    charged: u64,
}

// SAFETY: as for `PinnedFolio`: counted references, usable and droppable from any thread;
// the bytes exposed are immutable while they are held.
unsafe impl Send for PinnedRange<'_> {}
// SAFETY: as above.
unsafe impl Sync for PinnedRange<'_> {}

impl<'f> PinnedRange<'f> {
    fn arena(&self) -> &Arena {
        &self.file.cache.arena
    }

    /// The file offset of the first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes in the range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Folios the range spans (1 when [`PinnedRange::as_slice`] succeeds).
    pub fn nr_folios(&self) -> usize {
        self.pins.as_slice().len()
    }

    /// The range as one slice, if one folio holds all of it (or it is empty; `None` otherwise: use
    /// [`PinnedRange::slices`] or [`PinnedRange::copy_to`]).
    #[inline]
    pub fn as_slice(&self) -> Option<&[u8]> {
        match &self.pins {
            // SAFETY: the guard holds the reference; the borrow is tied to `&self`.
            Pins::One(p) => Some(unsafe { part(p, self.arena(), self.offset, self.len) }),
            Pins::Many(v) if v.is_empty() => Some(&[]),
            Pins::Many(_) => None,
        }
    }

    /// The range's bytes, folio by folio, in file order.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let arena = self.arena();
        self.pins
            .as_slice()
            .iter()
            // SAFETY: as in `as_slice`.
            .map(move |p| unsafe { part(p, arena, self.offset, self.len) })
    }

    /// Copies the range into the start of `dst` and returns [`PinnedRange::len`].
    ///
    /// # Panics
    /// If `dst` is shorter than the range.
    pub fn copy_to(&self, dst: &mut [u8]) -> usize {
        assert!(
            dst.len() >= self.len,
            "copy_to: a buffer of {} bytes cannot hold a range of {}",
            dst.len(),
            self.len
        );
        let mut at = 0;
        for s in self.slices() {
            dst[at..at + s.len()].copy_from_slice(s);
            at += s.len();
        }
        at
    }

    /// The range's bytes in a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.copy_to(&mut v);
        v
    }

    /// Latches the block this guard pins for an update in place, as
    /// [`CachedFile::get_block_mut_in_place`] does for `offset()..offset() + len()`, without
    /// looking it up again when one folio of exactly the block's size holds it (the guard's
    /// reference and pin charge become the latch's). The range must be a block: a power of
    /// two from 8 KiB, at an offset that is a multiple of it. The pin is released either
    /// way; errors are `get_block_mut_in_place`'s.
    ///
    /// ```
    /// use foliocache::{Config, FolioCache, OpenOptions};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let cache = FolioCache::new(Config::buffer_pool(16 << 20))?;
    /// let db = cache.open_with(dir.path().join("btree"), OpenOptions::new().write(true).create(true))?;
    /// db.set_len(64 << 10)?;
    /// let node = db.get_range(16 << 10, 16 << 10)?;        // read the node
    /// if node.as_slice().is_some_and(|b| b[0] == 0) {      // it needs a change
    ///     let mut node = node.upgrade_in_place()?;         // the same folio, latched
    ///     node[0] = 1;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn upgrade_in_place(self) -> Result<crate::InPlaceFolioMut<'f>, CacheError> {
        let (file, offset, len) = (self.file, self.offset, self.len);
        let nr = match file.block_pages(offset, len) {
            Ok(nr) => nr,
            Err(e) => {
                drop(self);
                return Err(e);
            }
        };
        let index = offset >> PAGE_SHIFT;
        let whole = match &self.pins {
            Pins::One(p) => {
                // SAFETY: the guard holds the pin's reference.
                let f = unsafe { p.folio(self.arena()) };
                f.index() == index && f.nr_pages() as u64 == nr && self.charged == nr
            }
            Pins::Many(_) => false,
        };
        if !whole {
            drop(self);
            file.cache.pin_charge(nr)?;
            return file
                .latch_charged(index, nr, None, true)
                .map(super::latch::InPlaceFolioMut);
        }
        let this = std::mem::ManuallyDrop::new(self);
        let Pins::One(pin) = &this.pins else {
            unreachable!("checked above")
        };
        let arena = this.arena();
        // SAFETY: the guard owns one reference on this folio; it is handed over here, once
        // (the guard is not dropped), with its pin charge of `nr` pages.
        let folio = unsafe { crate::mm::folio::FolioRef::from_raw(arena, pin.folio(arena)) };
        file.latch_charged(index, nr, Some(folio), true)
            .map(super::latch::InPlaceFolioMut)
    }

    /// The range in a form that owns its file instead of borrowing the handle: `'static`,
    /// `Clone` (clones share one pin) and `AsRef<[u8]>`, so it can back a `bytes::Bytes`
    /// (with the `bytes` feature, `Bytes::from(owned)`). Zero-copy when one folio holds the
    /// range; a range spanning folios is copied into one buffer here (and the folios let go).
    pub fn into_owned(self) -> OwnedRange {
        let this = std::mem::ManuallyDrop::new(self);
        let (offset, len) = (this.offset, this.len);
        // SAFETY: `this` is never dropped: its pins move out here, once.
        let pins = unsafe { std::ptr::read(&this.pins) };
        let bytes = match pins {
            Pins::One(pin) => {
                let mapping = this.file.mapping();
                // ORDERING: Relaxed; the handle holds a use, so the count cannot reach zero.
                mapping.users.fetch_add(1, Ordering::Relaxed);
                // SAFETY: the pin's reference keeps the folio; its frames live as long as the
                // arena, which the cache we keep holds.
                let bytes = unsafe { part(&pin, &this.file.cache.arena, offset, len) };
                OwnedBytes::Pinned {
                    ptr: bytes.as_ptr(),
                    len,
                    cache: this.file.cache.clone(),
                    mapping: std::mem::ManuallyDrop::new(mapping),
                    pin,
                    charged: this.charged,
                }
            }
            Pins::Many(pins) => {
                let arena = &this.file.cache.arena;
                let mut v = Vec::with_capacity(len);
                for p in &pins {
                    // SAFETY: as above, then each reference is put once.
                    unsafe {
                        v.extend_from_slice(part(p, arena, offset, len));
                        p.release(arena);
                    }
                }
                this.file.cache.pin_uncharge(this.charged);
                OwnedBytes::Copied(v.into_boxed_slice())
            }
        };
        OwnedRange {
            inner: Arc::new(bytes),
            offset,
        }
    }
}

impl<'f> PinnedRange<'f> {
    /// A range of `file`'s handle made of `pins` (in file order, covering
    /// `offset..offset + len`), `charged` pages of the pinned share given back on drop.
    pub(super) fn from_pins(
        file: &'f CachedFile,
        mut pins: Vec<Pin>,
        offset: u64,
        len: usize,
        charged: u64,
    ) -> PinnedRange<'f> {
        let pins = if pins.len() == 1 {
            Pins::One(pins.pop().expect("one pin"))
        } else {
            Pins::Many(pins)
        };
        PinnedRange {
            file,
            pins,
            offset,
            len,
            charged,
        }
    }
}

impl Drop for PinnedRange<'_> {
    fn drop(&mut self) {
        let arena = &self.file.cache.arena;
        for p in self.pins.as_slice() {
            // SAFETY: each pin's reference is put once, here.
            unsafe { p.release(arena) };
        }
        self.file.cache.pin_uncharge(self.charged);
    }
}

impl std::fmt::Debug for PinnedRange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedRange")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("folios", &self.nr_folios())
            .finish()
    }
}

/// What an [`OwnedRange`] holds.
enum OwnedBytes {
    /// One pinned folio and the range inside it.
    Pinned {
        ptr: *const u8,
        len: usize,
        cache: Arc<CacheInner>,
        /// A use of the inode (`i_count`), put after the folio.
        mapping: std::mem::ManuallyDrop<Arc<Inode>>,
        pin: Pin,
        /// Pages charged to the pinned share, given back with the pin.
        charged: u64,
    },
    /// A range that spanned folios, copied.
    Copied(Box<[u8]>),
}

impl Drop for OwnedBytes {
    fn drop(&mut self) {
        if let OwnedBytes::Pinned {
            cache,
            mapping,
            pin,
            charged,
            ..
        } = self
        {
            // SAFETY: the reference is put once, here; the cache keeps the arena alive.
            unsafe { pin.release(&cache.arena) };
            cache.pin_uncharge(*charged);
            // SAFETY: taken once, here; never used again.
            let m = unsafe { std::mem::ManuallyDrop::take(mapping) };
            cache.iput(m);
        }
    }
}

/// A byte range of a cached file that owns what it needs ([`PinnedRange::into_owned`]):
/// valid after every handle of the file is closed, cheap to clone (clones share it), and
/// `AsRef<[u8]>`, so `bytes::Bytes::from_owner` can wrap it without a copy.
#[derive(Clone)]
pub struct OwnedRange {
    inner: Arc<OwnedBytes>,
    offset: u64,
}

// SAFETY: the pinned bytes are immutable while the pin is held and the pin is a counted
// reference any thread may put; the rest is `Send + Sync` shared state.
unsafe impl Send for OwnedBytes {}
// SAFETY: as above.
unsafe impl Sync for OwnedBytes {}

impl OwnedRange {
    /// The file offset of the first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether the bytes are the cache's own (pinned), not a copy.
    pub fn is_pinned(&self) -> bool {
        matches!(*self.inner, OwnedBytes::Pinned { .. })
    }
}

impl AsRef<[u8]> for OwnedRange {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        match &*self.inner {
            // SAFETY: `ptr..ptr + len` lies in the pinned folio's uptodate bytes, immutable
            // and allocated while the pin (which we hold) lives.
            OwnedBytes::Pinned { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(*ptr, *len)
            },
            OwnedBytes::Copied(b) => b,
        }
    }
}

impl std::ops::Deref for OwnedRange {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_ref()
    }
}

impl std::fmt::Debug for OwnedRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedRange")
            .field("offset", &self.offset)
            .field("len", &self.as_ref().len())
            .field("pinned", &self.is_pinned())
            .finish()
    }
}

impl CachedFile {
    /// Pins the bytes `offset..offset + len` of the file in the cache and returns them
    /// without a copy (`filemap_get_folios` over the range + `kmap_local_folio`), reading
    /// what is missing first (a miss reads the whole range with one backing read where it
    /// is contiguous).
    ///
    /// The range must lie inside the file ([`CacheError::UnexpectedEof`] otherwise). When one
    /// folio holds it all, [`PinnedRange::as_slice`] is the whole range: with large folios on
    /// ([`Config::max_folio_order`](super::Config::max_folio_order)), a block read at an
    /// offset that is a multiple of its size (a 16 KiB block at a multiple of 16 KiB) is
    /// cached in one folio of its size on its first miss.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, (0..65536u32).map(|i| (i / 16384) as u8).collect::<Vec<_>>())?;
    /// use foliocache::{Config, FolioCache};
    ///
    /// let cache = FolioCache::new(Config::block_cache(16 << 20))?;
    /// let file = cache.open(&path)?;
    /// let block = file.get_range(2 * 16384, 16384)?; // the third 16 KiB block
    /// let bytes = block.as_slice().expect("one folio holds an aligned block");
    /// assert_eq!(bytes.len(), 16384);
    /// assert!(bytes.iter().all(|&b| b == 2));
    ///
    /// // A range across blocks is still one guard: iterate its slices, or copy it out.
    /// let across = file.get_range(16384 - 10, 20)?;
    /// let mut buf = [0u8; 20];
    /// across.copy_to(&mut buf);
    /// assert_eq!(&buf[..10], &[0u8; 10]);
    /// assert_eq!(&buf[10..], &[1u8; 10]);
    /// # Ok(()) }
    /// ```
    pub fn get_range(&self, offset: u64, len: usize) -> Result<PinnedRange<'_>, CacheError> {
        // Pins count against the pinned share as `get_folio`'s do: a page first, the rest of
        // the folios' pages once they are known.
        self.cache.pin_charge(1)?;
        let r = self.get_range_charged(offset, len);
        match r {
            Ok(mut range) => {
                let arena = &self.cache.arena;
                let pages: u64 = range
                    .pins
                    .as_slice()
                    .iter()
                    // SAFETY: the range holds each pin's reference, and the arena lives.
                    .map(|p| unsafe { p.folio(arena) }.nr_pages() as u64)
                    .sum();
                match pages {
                    0 => self.cache.pin_uncharge(1),
                    n => self.cache.budget.pins.charge_unchecked(n - 1),
                }
                range.charged = pages;
                self.cache.deliver();
                Ok(range)
            }
            Err(e) => {
                self.cache.pin_uncharge(1);
                self.cache.deliver();
                Err(e)
            }
        }
    }

    /// [`CachedFile::get_range`] with a page of its pins charged.
    fn get_range_charged(&self, offset: u64, len: usize) -> Result<PinnedRange<'_>, CacheError> {
        let end = offset.checked_add(len as u64);
        let fast = self.hit_section(|m, section| {
            let end = end.filter(|&e| e <= m.size() && len > 0)?;
            let folio = m.mapping.pages.lookup_in(offset >> PAGE_SHIFT, section)?;
            let fend = (folio.index() << PAGE_SHIFT) + folio.size() as u64;
            // Readahead marks, folios under I/O and ranges past this folio take the full
            // path.
            if folio.flags() & (PG_READAHEAD | PG_LATCHED) != 0
                || !folio.is_uptodate()
                || end > fend
            {
                return None;
            }
            self.cache.counters.inc(Event::Hit);
            self.accessed(&folio);
            let valid = valid_bytes(m, &folio);
            Some(Pin::new(folio, valid))
        });
        if let Some(pin) = fast {
            return Ok(PinnedRange {
                charged: 0,
                file: self,
                pins: Pins::One(pin),
                offset,
                len,
            });
        }
        self.get_range_slow(offset, len)
    }

    #[cold]
    fn get_range_slow(&self, offset: u64, len: usize) -> Result<PinnedRange<'_>, CacheError> {
        let m = self.mapping();
        let size = m.size();
        let end = match offset.checked_add(len as u64) {
            Some(e) if e <= size => e,
            _ => {
                return Err(CacheError::UnexpectedEof {
                    path: m.path.clone(),
                    offset,
                    len,
                    file_size: size,
                })
            }
        };
        // Built before the first pin, so an error below puts every reference taken.
        let mut range = PinnedRange {
            charged: 0,
            file: self,
            pins: Pins::Many(Vec::new()),
            offset,
            len,
        };
        let last = end.saturating_sub(1) >> PAGE_SHIFT;
        let mut pos = offset;
        while pos < end {
            let index = pos >> PAGE_SHIFT;
            let (folio, filled) = self.get_page(&m, index, (last - index + 1) as usize)?;
            self.accessed_after(&folio, filled);
            pos = (folio.index() << PAGE_SHIFT) + folio.size() as u64;
            let valid = valid_bytes(&m, &folio);
            let pin = Pin::new(folio, valid);
            let Pins::Many(v) = &mut range.pins else {
                unreachable!()
            };
            v.push(pin);
        }
        if let Pins::Many(v) = &mut range.pins {
            if v.len() == 1 {
                range.pins = Pins::One(v.pop().expect("one pin"));
            }
        }
        Ok(range)
    }
}

/// With the `bytes` feature: the range as a `bytes::Bytes` without a copy
/// (`Bytes::from_owner`); the pin (or the copy of a range that spanned folios) is released
/// when the last `Bytes` sharing it drops.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("data");
/// # std::fs::write(&path, vec![9u8; 65536])?;
/// let cache = foliocache::FolioCache::new(foliocache::Config::block_cache(1 << 20))?;
/// let file = cache.open(&path)?;
/// let block: bytes::Bytes = file.get_range(16384, 16384)?.into_owned().into();
/// drop(file);
/// assert_eq!(block.len(), 16384);
/// assert!(block.iter().all(|&b| b == 9));
/// # Ok(()) }
/// ```
#[cfg(feature = "bytes")]
impl From<OwnedRange> for bytes::Bytes {
    fn from(range: OwnedRange) -> bytes::Bytes {
        bytes::Bytes::from_owner(range)
    }
}
