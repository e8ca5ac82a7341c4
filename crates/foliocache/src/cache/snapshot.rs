//! Point-in-time snapshots of cached files ([`Snapshot`], from [`CachedFile::snapshot`]):
//! copy-on-write views built on seed 002's address spaces.
//!
//! # The model
//!
//! A snapshot is an address space ([`Space`](crate::mm::space::Space), an `mm_struct` with
//! its own rmap ID) on the cache's arena. Taking it reserves a range of addresses as long as
//! the file was ([`Space::reserve`](crate::mm::space::Space::reserve): O(1), no page table
//! yet); page `i` is at `base + i * 4096`. Its entry for page `i` is empty while the live
//! file still holds the snapshot's bytes of that page, and maps the old folio once the file
//! changed there; a 2 MiB piece of page table is made when the first page in it is kept
//! ([`Space::map_fixed`](crate::mm::space::Space::map_fixed)). So the snapshot costs only
//! the pages written since it was taken (and 4 KiB of page table per 2 MiB piece they fall
//! in), and nothing is copied to take it. Released ranges are kept beside the page table.
//!
//! The kernel has no such view (`docs/research/snapshots.md` §1.2): a `MAP_PRIVATE` mapping sees
//! later writes to every page it has not written itself, and a truncation zaps even its
//! private copies. What is mirrored here is the copy-on-write machinery underneath: the write
//! path's replacement of a page someone holds (`cache/write.rs`: the new bytes go into a new
//! folio, `replace_page_cache_folio`; whoever holds the old one keeps its bytes) is
//! `wp_page_copy`, and a snapshot's mapping of the old folio is `finish_fault` +
//! `folio_add_file_rmap_ptes` ([`Space::map_page`](crate::mm::space::Space::map_page)),
//! counted by the family's sharer
//! tracking ([`Experiment::tracking`](crate::mm::Experiment::tracking)).
//!
//! # Capture: before any change, under the folio lock
//!
//! Every change of a file's bytes happens under its `i_rwsem` and the changed page's folio
//! lock: a write (`write_begin`), a latch's commit, the zeroed tail of a truncation. Before
//! it changes page `i`, the changer calls `cow::capture` with the folio locked: every live
//! snapshot of the file that covers page `i` and maps nothing there yet maps the folio now.
//! The mapping's reference makes the write path's freeze fail, so the change goes into a
//! copy that replaces the folio in the index; the snapshot keeps the old one, whose bytes
//! never change again (an uptodate folio someone else holds is never written in place).
//!
//! A page that is not cached has its snapshot bytes in the backing file, which writeback
//! would overwrite: a write to it reads it in first (`cow::needs_old_page`, then the write
//! path's loop captures it like a cached page), and a truncation captures every page it
//! cuts that a snapshot covers (`truncate::capture_range`) before it publishes the new
//! size. So the backing file never loses a block a live snapshot still needs, and writeback
//! is unchanged.
//!
//! The common case costs a compare: once a page was changed, every live snapshot keeps
//! what it needs of it, so `write_end` stamps the live folio with the file's snapshot
//! generation (`folio->private`, which nothing else here uses), and a later change of a
//! folio carrying the current generation skips the snapshots (`cow::settled`). Taking a
//! snapshot bumps the generation.
//!
//! A snapshot keeps pages, not folios: a change of a large folio a live snapshot still needs
//! a page of splits it first (`cow::must_split`), so a 4 KiB write keeps and copies 4 KiB,
//! not the whole folio (the THP fork problem of Redis-style snapshots). A large folio no
//! live snapshot needs a page of (behind a release point, or every page kept already) is
//! changed whole, as with no snapshot.
//!
//! Which sharer tracking the cache uses does not decide a change here. The live file holds
//! its folios through its index, not through a mapping in a space, so a change asks whether
//! any snapshot maps the folio or still needs its bytes, never whether the live file maps
//! it exclusively, and the capture's look at each snapshot's table and released ranges
//! answers that exactly under every strategy. Seed 002's case, a large folio once mapped
//! shared that `none` must copy and `rmap-id` may reuse (part 1 of the lab's `cow`), does not
//! arise: once every snapshot is released, a change finds nothing mapped and writes in place
//! under any strategy. The strategies differ only in what the snapshots' own mapping and
//! unmapping costs.
//!
//! Taking a snapshot holds `i_rwsem` for a moment (the size and a reservation of entries),
//! so it falls between two writes; it never waits for I/O.
//!
//! # Reading a snapshot: the live page first, then the snapshot's entry
//!
//! A snapshot read of page `i` takes a reference on the live file's page (reading it in if
//! needed), *then* looks at the snapshot's entry; if one is mapped it reads that folio
//! instead. The order is what makes it right: a folio holding bytes newer than the snapshot
//! got them from a change that captured the old page before it (in the snapshot's table,
//! under its lock), and our reference was taken after that change was visible, so our look
//! at the table, which comes after the reference, finds the capture. A live folio whose page
//! we then read is held by our reference: no later change can write it in place.
//!
//! A large live folio is used whole (a pinned guard or range) only if none of its pages that
//! the snapshot covers is mapped or released in the snapshot; otherwise it is split first.
//!
//! # Lock order
//!
//! ```text
//!   i_rwsem (writers, snapshot creation)
//!     folio lock (the page being changed)
//!       Snapshots::list (the file's live snapshots)
//!         SnapInner::released (one snapshot's released ranges)
//!           Space::mm (its page table)
//! ```
//!
//! Dropping a snapshot takes `Snapshots::list`, then `Space::mm`, one after the other;
//! releasing takes `released` then `Space::mm`; a read takes `Space::mm` and `released`
//! one at a time, after its live folio reference.
//!
//! # Memory
//!
//! Captured pages are charged to [`Config::snapshot_share`](crate::Config::snapshot_share)
//! and to the pinned share of the budget, per snapshot that maps them; reclaim keeps every
//! folio a snapshot maps (a mapped folio is never reclaimed: `mm/lru/reclaim.rs`). A change
//! that would pass either limit fails with [`CacheError::SnapshotLimit`], the page unchanged.
//! [`Snapshot::release`] gives pages back as a streaming backup moves on.

use std::io;
use std::ops::Range;
use std::path::PathBuf;

use super::cow::{add_range, SnapInner};
use super::error::CacheError;
use super::file::CachedFile;
use super::guard::{Pin, PinnedFolio};
use super::range::PinnedRange;
use super::split::split_folio_at;
use crate::mm::folio::{FolioRef, PAGE_SHIFT, PAGE_SIZE};
use crate::mm::sync::{Arc, AtomicU64, Mutex, Ordering};

/// A point-in-time, read-only view of a cached file: its bytes and size as they were when
/// [`CachedFile::snapshot`] returned, whatever is written, appended or truncated since.
///
/// Taking one copies nothing; the first change of a page afterwards keeps the old version of
/// that page for the snapshot (a page that is not cached is read first), so a snapshot
/// costs the pages written since it was taken, charged to
/// [`Config::snapshot_share`](crate::Config::snapshot_share) of the budget; a change that
/// would pass it fails with [`CacheError::SnapshotLimit`]. Reads of pages not changed since
/// come from the live file's cache. [`Snapshot::release`] gives back a range the snapshot no
/// longer needs (a backup that has copied it out), after which writes there cost nothing
/// extra; dropping the snapshot releases everything.
///
/// Changes made to the file outside the cache (another process's `write(2)`) are not
/// captured. A snapshot keeps the file's inode in use (as an open handle does).
///
/// ```
/// use foliocache::{Config, FolioCache, OpenOptions};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let cache = FolioCache::new(Config::new(16 << 20))?;
/// let db = cache.open_with(dir.path().join("db"), OpenOptions::new().write(true).create(true))?;
/// db.write_all_at(b"version 1", 0)?;
/// let snap = db.snapshot()?;               // O(1): nothing is copied
/// db.write_all_at(b"version 2", 0)?;       // keeps the old page for `snap`
/// db.set_len(0)?;                          // so does a truncation
/// let mut buf = [0u8; 9];
/// snap.read_exact_at(&mut buf, 0)?;
/// assert_eq!((&buf, snap.len(), db.len()), (b"version 1", 9, 0));
/// let mut backup = Vec::new();
/// snap.copy_to(&mut backup)?;              // a consistent copy while writers go on
/// assert_eq!(backup, b"version 1");
/// # Ok(()) }
/// ```
pub struct Snapshot {
    /// A read-only handle on the live file (its reads, readahead state and inode use).
    file: CachedFile,
    inner: Arc<SnapInner>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("path", &self.file.path())
            .field("len", &self.inner.size)
            .field("held_pages", &self.held_pages())
            .finish()
    }
}

impl CachedFile {
    /// Takes a point-in-time [`Snapshot`] of the file: O(1) whatever its size (no copy, no
    /// I/O; it waits only for a write in progress to finish). Any handle may take one,
    /// read-only handles too; many snapshots of a file may live at once.
    pub fn snapshot(&self) -> Result<Snapshot, CacheError> {
        self.take_snapshot(true)
            .expect("a snapshot that may wait is always taken")
    }

    /// [`CachedFile::snapshot`]; without `wait`, `None` if a change of the file is under way
    /// (its `i_rwsem` is held: the async call then takes the snapshot on a worker).
    pub(super) fn take_snapshot(&self, wait: bool) -> Option<Result<Snapshot, CacheError>> {
        let c = &self.cache;
        let m = self.mapping();
        let space = match c.spaces().create() {
            Ok(s) => s,
            Err(e) => {
                return Some(Err(CacheError::InvalidArgument {
                    what: format!(
                        "cannot take a snapshot of {}: {e}; drop snapshots no longer needed",
                        m.path.display()
                    ),
                }))
            }
        };
        // Between two changes of the file: every change holds `i_rwsem`, or is a latch in
        // place (which starts under it and commits without it): those are waited for, since
        // their pages' bytes from before the change exist nowhere else.
        let w = if wait {
            if let Err(e) = m.refuse_own_latch(0, u64::MAX, "a snapshot") {
                return Some(Err(e));
            }
            m.latches.lock_for_snapshot(&m.i_rwsem)
        } else {
            let w = m.i_rwsem.try_lock()?;
            if m.latches.any_in_place() {
                return None;
            }
            w
        };
        let size = m.size();
        let pages = size.div_ceil(PAGE_SIZE as u64);
        let base = if pages == 0 {
            0
        } else {
            let pages = usize::try_from(pages).expect("a file's pages fit in usize");
            match space.reserve(pages) {
                Ok(base) => base,
                Err(e) => {
                    return Some(Err(CacheError::InvalidArgument {
                        what: format!("cannot take a snapshot of {}: {e}", m.path.display()),
                    }))
                }
            }
        };
        let inner = Arc::new(SnapInner {
            space,
            base,
            size,
            pages,
            released: Mutex::new(Vec::new()),
            held: AtomicU64::new(0),
        });
        {
            let mut list = m.snapshots.list.lock();
            list.push(inner.clone());
            m.snapshots.live.store(list.len(), Ordering::Relaxed);
            // Folios stamped with the previous generation may hold bytes this snapshot
            // needs kept.
            m.snapshots.generation.fetch_add(1, Ordering::Relaxed);
        }
        drop(w);
        // ORDERING: Relaxed; this handle holds a use, so the count cannot reach zero here.
        m.users.fetch_add(1, Ordering::Relaxed);
        Some(Ok(Snapshot {
            file: CachedFile::new(c.clone(), m),
            inner,
        }))
    }
}

impl Snapshot {
    /// The file's size when the snapshot was taken.
    pub fn len(&self) -> u64 {
        self.inner.size
    }

    /// Whether the file was empty when the snapshot was taken.
    pub fn is_empty(&self) -> bool {
        self.inner.size == 0
    }

    /// The path the file was opened with.
    pub fn path(&self) -> PathBuf {
        self.file.path()
    }

    /// Pages this snapshot holds now: old versions of pages changed since it was taken,
    /// minus those released. What it costs the budget.
    pub fn held_pages(&self) -> u64 {
        self.inner.held.load(Ordering::Relaxed)
    }

    /// The snapshot's bytes at `offset`, as [`CachedFile::read_at`] reads the file's: returns
    /// the bytes copied, 0 at or past the snapshot's end. A read reaching a released range
    /// fails with [`CacheError::SnapshotReleased`] (or stops short before it, if it copied
    /// something: the error comes with the next call, as `pread`'s do).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, CacheError> {
        let size = self.inner.size;
        if buf.is_empty() || offset >= size {
            return Ok(0);
        }
        let end = offset + (buf.len() as u64).min(size - offset);
        let mut pos = offset;
        while pos < end {
            let index = pos >> PAGE_SHIFT;
            let folio = match self.page(index, false) {
                Ok(f) => f,
                Err(_) if pos > offset => break,
                Err(e) => return Err(e),
            };
            let data = folio.data().expect("snapshot pages are uptodate");
            let from =
                ((index - folio.index()) << PAGE_SHIFT) as usize + (pos as usize & (PAGE_SIZE - 1));
            let n = (PAGE_SIZE - (pos as usize & (PAGE_SIZE - 1))).min((end - pos) as usize);
            let at = (pos - offset) as usize;
            buf[at..at + n].copy_from_slice(&data[from..from + n]);
            pos += n as u64;
        }
        self.file.cache.deliver();
        Ok((pos - offset) as usize)
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails: [`CacheError::UnexpectedEof`]
    /// past the snapshot's end.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), CacheError> {
        let mut done = 0;
        while done < buf.len() {
            match self.read_at(&mut buf[done..], offset + done as u64)? {
                0 => {
                    return Err(CacheError::UnexpectedEof {
                        path: self.path(),
                        offset,
                        len: buf.len(),
                        file_size: self.inner.size,
                    })
                }
                n => done += n,
            }
        }
        Ok(())
    }

    /// Pins the folio holding page `index` of the snapshot, as [`CachedFile::get_folio`]
    /// does for the file: its bytes without a copy, the part past the snapshot's end
    /// excluded. The guard counts against [`Config::pinned_share`](crate::Config::pinned_share).
    pub fn get_folio(&self, index: u64) -> Result<PinnedFolio<'_>, CacheError> {
        if index >= self.inner.pages {
            return Err(CacheError::InvalidArgument {
                what: format!(
                    "page {index} is past the end of the snapshot of {} ({} pages of 4 KiB)",
                    self.path().display(),
                    self.inner.pages
                ),
            });
        }
        let c = &self.file.cache;
        c.pin_charge(1)?;
        let folio = match self.page(index, true) {
            Ok(f) => f,
            Err(e) => {
                c.pin_uncharge(1);
                return Err(e);
            }
        };
        let extra = folio.nr_pages() as u64 - 1;
        if extra > 0 {
            c.budget.pins.charge_unchecked(extra);
        }
        let valid = self.valid_bytes(&folio);
        c.deliver();
        Ok(PinnedFolio {
            file: &self.file,
            pin: Pin::new(folio, valid),
        })
    }

    /// Pins exactly the snapshot's bytes `offset..offset + len`, as
    /// [`CachedFile::get_range`] does for the file; [`CacheError::UnexpectedEof`] if the
    /// range runs past the snapshot's end.
    pub fn get_range(&self, offset: u64, len: usize) -> Result<PinnedRange<'_>, CacheError> {
        let end = match offset.checked_add(len as u64) {
            Some(e) if e <= self.inner.size => e,
            _ => {
                return Err(CacheError::UnexpectedEof {
                    path: self.path(),
                    offset,
                    len,
                    file_size: self.inner.size,
                })
            }
        };
        let c = &self.file.cache;
        let mut pins = Vec::new();
        let mut charged = 0;
        let mut pos = offset;
        let r = loop {
            if pos >= end {
                break Ok(());
            }
            let folio = match self.page(pos >> PAGE_SHIFT, true) {
                Ok(f) => f,
                Err(e) => break Err(e),
            };
            let pages = folio.nr_pages() as u64;
            if let Err(e) = c.pin_charge(pages) {
                break Err(e);
            }
            charged += pages;
            pos = (folio.index() << PAGE_SHIFT) + folio.size() as u64;
            let valid = self.valid_bytes(&folio);
            pins.push(Pin::new(folio, valid));
        };
        let range = PinnedRange::from_pins(&self.file, pins, offset, len, charged);
        c.deliver();
        r.map(|()| range)
    }

    /// Writes the snapshot's bytes to `out`, start to end, and returns how many: a consistent
    /// backup of the file as it was, taken while writers go on. Fails with
    /// [`CacheError::SnapshotReleased`] (as an `io::Error`) if part of it was released.
    pub fn copy_to(&self, out: &mut impl io::Write) -> io::Result<u64> {
        self.copy_range_to(0..self.inner.size, out, false)
    }

    /// [`Snapshot::copy_to`] that releases each part once written: a streaming backup that
    /// gives its pages back as it goes, so writers behind it pay nothing extra. The snapshot
    /// is released whole at the end (reads of it then fail).
    pub fn drain_to(&self, out: &mut impl io::Write) -> io::Result<u64> {
        self.copy_range_to(0..self.inner.size, out, true)
    }

    /// Copies `range` to `out` in chunks, releasing each chunk after it is written if asked.
    fn copy_range_to(
        &self,
        range: Range<u64>,
        out: &mut impl io::Write,
        release: bool,
    ) -> io::Result<u64> {
        const CHUNK: usize = 256 << 10;
        let mut buf = vec![0u8; CHUNK];
        let mut pos = range.start;
        while pos < range.end {
            let n = CHUNK.min((range.end - pos) as usize);
            self.read_exact_at(&mut buf[..n], pos)?;
            out.write_all(&buf[..n])?;
            if release {
                self.release(pos..pos + n as u64)?;
            }
            pos += n as u64;
        }
        Ok(pos - range.start)
    }

    /// Gives back the snapshot's bytes in `range`: the whole pages inside it (and the last,
    /// partial page if `range` reaches the snapshot's end). Their old versions are freed
    /// unless another snapshot holds them, later writes there keep nothing for this
    /// snapshot, and reads of them fail with [`CacheError::SnapshotReleased`]. Returns the
    /// pages this snapshot held there (now given back). Releasing twice is harmless.
    pub fn release(&self, range: Range<u64>) -> Result<u64, CacheError> {
        let s = &self.inner;
        let first = range.start.div_ceil(PAGE_SIZE as u64);
        let end = if range.end >= s.size {
            s.pages
        } else {
            range.end >> PAGE_SHIFT
        };
        if first >= end {
            return Ok(0);
        }
        // Under the released ranges' lock: no capture maps a page of them after the unmap.
        let mut released = s.released.lock();
        add_range(&mut released, first..end);
        Ok(s.unmap(&self.file.cache, first..end))
    }

    /// The file bytes `folio` holds for the snapshot (past the snapshot's end excluded).
    fn valid_bytes(&self, folio: &FolioRef<'_>) -> usize {
        let start = folio.index() << PAGE_SHIFT;
        (self.inner.size.saturating_sub(start) as usize).min(folio.size())
    }

    /// The folio holding the snapshot's bytes of page `index` (module docs: the live page
    /// first, then the snapshot's entry), referenced. With `whole`, the folio's every page
    /// below the snapshot's end holds the snapshot's bytes (a large live folio that does not
    /// is split first), else only page `index` is sure to.
    fn page(&self, index: u64, whole: bool) -> Result<FolioRef<'_>, CacheError> {
        let s = &*self.inner;
        let f = &self.file;
        let c = &f.cache;
        let m = f.mapping_ref();
        let arena = &*c.arena;
        loop {
            // The live file's page, if the file still has it: taken *before* the look at
            // the snapshot's entry (module docs).
            // ORDERING: the lookup's Acquire (slot load and `try_get`, or the size's Acquire
            // in `nr_pages`) pairs with the Release that published a change (`replace_folio`'s
            // slot store, the unfreeze of an in-place write, `set_len`'s size store); the
            // change captured the old page under the snapshot's page-table lock before that
            // Release, so `get_page`'s lock below sees the capture. Loom model:
            // `loom_tests::snapshot::a_snapshot_read_never_sees_a_later_change`.
            let live = if index < m.nr_pages() {
                f.get_page(m, index, 1).map(|(folio, _)| folio)
            } else {
                Err(CacheError::InvalidArgument {
                    what: format!(
                        "page {index} of the snapshot of {} is past the file's end and was \
                         not kept: a snapshot invariant is broken (please report it)",
                        m.path.display()
                    ),
                })
            };
            if let Some((folio, _)) = s.space.get_page(s.addr(index)) {
                drop(live);
                // A snapshot maps order-0 folios only (changes split large ones first).
                debug_assert_eq!(folio.nr_pages(), 1);
                // SAFETY: the reference `get_page` took is ours; the space's arena is the
                // cache's.
                return Ok(unsafe { FolioRef::from_raw(arena, folio.into_raw()) });
            }
            if s.released(index..index + 1) {
                return Err(CacheError::SnapshotReleased {
                    path: m.path.clone(),
                    offset: index << PAGE_SHIFT,
                });
            }
            let live = live?;
            if whole && live.nr_pages() > 1 {
                let first = live.index();
                let last = (first + live.nr_pages() as u64).min(s.pages);
                let len = ((last - first) << PAGE_SHIFT) as usize;
                if s.space.any_mapped(s.addr(first), len) || s.released(first..last) {
                    // Part of the folio is not the snapshot's: split it, then use the page.
                    drop(live);
                    split_folio_at(c, m, index)?;
                    continue;
                }
            }
            return Ok(live);
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let m = self.file.mapping_ref();
        {
            let mut list = m.snapshots.list.lock();
            list.retain(|s| !Arc::ptr_eq(s, &self.inner));
            m.snapshots.live.store(list.len(), Ordering::Relaxed);
        }
        // No change captures for this snapshot any more (captures run under the list's
        // lock): unmap everything, give the charge back.
        self.inner.unmap(&self.file.cache, 0..self.inner.pages);
        self.file.cache.deliver();
    }
}
