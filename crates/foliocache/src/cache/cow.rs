//! The copy-on-write half of snapshots: a file's live snapshots ([`Snapshots`], which its
//! inode holds), one snapshot's address space and released ranges ([`SnapInner`]), and what
//! a change of a page does for them before it happens ([`capture`], the generation stamp of
//! [`settled`] and [`stamp`]), with the charge against the snapshot share. The user's side,
//! [`Snapshot`](super::Snapshot) and its reads, is `snapshot.rs`, whose module docs describe
//! the design; this file imports only the core and leaves, so the write path can call it.

use std::ops::Range;
use std::path::Path;

use super::core::Core;
use super::error::CacheError;
use super::stats::Event;
use crate::mm::folio::{FolioLocked, FolioRef, PAGE_SHIFT, PAGE_SIZE};
use crate::mm::space::{Space, SpaceConfig, SpaceError, Spaces};
use crate::mm::sync::{Arc, AtomicU64, AtomicUsize, Mutex, Ordering};

/// A file's live snapshots.
#[derive(Default)]
pub(crate) struct Snapshots {
    /// `list.len()`, for the writers' fast path.
    pub(super) live: AtomicUsize,
    /// Snapshots taken of the file so far: a page whose folio carries this number
    /// (`folio->private`) needs nothing kept for any live snapshot (module docs).
    pub(super) generation: AtomicU64,
    pub(super) list: Mutex<Vec<Arc<SnapInner>>>,
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshots")
            .field("live", &self.live.load(Ordering::Relaxed))
            .finish()
    }
}

impl Snapshots {
    /// Whether the file has a live snapshot. Read by changers holding `i_rwsem`, which
    /// snapshot creation holds too: the mutex orders the count, Relaxed is enough.
    #[inline]
    pub(super) fn any(&self) -> bool {
        self.live.load(Ordering::Relaxed) != 0
    }

    /// The file's snapshot generation (changers and creation hold `i_rwsem`, as above).
    #[inline]
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }
}

/// Pages per piece of a snapshot's page table: the snapshot reserves its whole range of
/// addresses when it is taken, and makes a VMA of this many entries (one 2 MiB piece of the
/// file) only when it first keeps a page there.
pub(super) const PIECE_PAGES: u64 = 512;

/// One snapshot's state, shared by the [`Snapshot`](super::Snapshot) and the file's list.
pub(crate) struct SnapInner {
    /// The snapshot's address space: page `i` at `base + i * PAGE_SIZE`, in file VMAs of
    /// [`PIECE_PAGES`] made as pages are kept.
    pub(super) space: Space,
    pub(super) base: u64,
    /// The file's size when the snapshot was taken, and its pages.
    pub(super) size: u64,
    pub(super) pages: u64,
    /// Page ranges released ([`Snapshot::release`]), sorted and disjoint; taken before the
    /// page table's lock by captures and releases, so a capture never maps a page a release
    /// has passed.
    pub(super) released: Mutex<Vec<Range<u64>>>,
    /// Pages this snapshot maps (each charged once, `CacheInner::snapshot_charge`).
    pub(super) held: AtomicU64,
}

/// Whether `index` lies in one of the sorted, disjoint `ranges`.
pub(super) fn in_ranges(ranges: &[Range<u64>], index: u64) -> bool {
    overlaps(ranges, index..index + 1)
}

/// Whether `pages` meets one of the sorted, disjoint `ranges`.
fn overlaps(ranges: &[Range<u64>], pages: Range<u64>) -> bool {
    let i = ranges.partition_point(|r| r.end <= pages.start);
    ranges.get(i).is_some_and(|r| r.start < pages.end)
}

/// Adds `add` to the sorted, disjoint `ranges`, merging what it touches.
pub(super) fn add_range(ranges: &mut Vec<Range<u64>>, add: Range<u64>) {
    let (mut start, mut end) = (add.start, add.end);
    let from = ranges.partition_point(|r| r.end < start);
    let mut to = from;
    while to < ranges.len() && ranges[to].start <= end {
        start = start.min(ranges[to].start);
        end = end.max(ranges[to].end);
        to += 1;
    }
    ranges.splice(from..to, std::iter::once(start..end));
}

impl SnapInner {
    #[inline]
    pub(super) fn addr(&self, index: u64) -> u64 {
        self.base + (index << PAGE_SHIFT)
    }

    /// Whether any of `pages` was released.
    pub(super) fn released(&self, pages: Range<u64>) -> bool {
        overlaps(&self.released.lock(), pages)
    }

    /// Unmaps `pages` (holding them or not), gives their charge back, and returns how many
    /// the snapshot held there.
    pub(super) fn unmap(&self, c: &Core, pages: Range<u64>) -> u64 {
        if pages.is_empty() {
            return 0;
        }
        let len = usize::try_from((pages.end - pages.start) << PAGE_SHIFT)
            .expect("fits, it was reserved");
        let freed = self
            .space
            .unmap_counted(self.addr(pages.start), len)
            .unwrap_or_else(|e| unreachable!("unmapping a page-aligned range: {e}"));
        self.held.fetch_sub(freed, Ordering::Relaxed);
        c.snapshot_uncharge(freed);
        freed
    }

    /// Whether the snapshot still needs page `index` kept ([`SnapInner::needs_any`]).
    fn needs(&self, index: u64) -> bool {
        self.needs_any(index..index + 1)
    }

    /// Whether the snapshot still needs one of `pages` kept: a page it covers, has not
    /// released and keeps nothing for yet.
    fn needs_any(&self, pages: Range<u64>) -> bool {
        let pages = pages.start..pages.end.min(self.pages);
        if pages.is_empty() {
            return false;
        }
        let released = self.released.lock();
        pages
            .into_iter()
            .any(|i| !in_ranges(&released, i) && !self.space.any_mapped(self.addr(i), PAGE_SIZE))
    }

    /// Maps page `page` of `folio` (locked by the caller: the page `index` about to change)
    /// if the snapshot needs it.
    fn capture(
        &self,
        c: &Core,
        path: &Path,
        index: u64,
        folio: &FolioRef<'_>,
        page: u32,
        force: bool,
    ) -> Result<(), CacheError> {
        if index >= self.pages {
            return Ok(());
        }
        let released = self.released.lock();
        let addr = self.addr(index);
        if in_ranges(&released, index) || self.space.any_mapped(addr, PAGE_SIZE) {
            return Ok(());
        }
        c.snapshot_charge(path, force)?;
        let mut r = self.space.map_page(addr, folio, page);
        if let Err(SpaceError::NotMapped { .. }) = r {
            // The first page kept in this piece: its page table first.
            let piece = index / PIECE_PAGES * PIECE_PAGES;
            let len = PIECE_PAGES.min(self.pages - piece) as usize;
            match self.space.map_fixed(self.addr(piece), len) {
                Ok(()) | Err(SpaceError::Overlaps { .. }) => {}
                Err(e) => unreachable!("a piece of a reserved range: {e}"),
            }
            r = self.space.map_page(addr, folio, page);
        }
        drop(released);
        match r {
            Ok(true) => {
                self.held.fetch_add(1, Ordering::Relaxed);
                c.counters.inc(Event::SnapshotCaptures);
                Ok(())
            }
            Ok(false) | Err(SpaceError::NotMapped { .. }) => {
                c.snapshot_uncharge(1);
                Ok(())
            }
            Err(e) => unreachable!("mapping an uptodate page-cache folio into a file VMA: {e}"),
        }
    }
}

/// Whether a change of the locked page `folio` needs nothing kept for a snapshot: the file
/// has none, or the folio was written since the last one was taken (its stamp,
/// `folio->private`, is the file's snapshot generation). The caller holds `i_rwsem`.
#[inline]
pub(super) fn settled(snaps: &Snapshots, folio: &FolioLocked<'_>) -> bool {
    !snaps.any() || folio.private() == snaps.generation()
}

/// Whether the file has a live snapshot (a hint for a latch's commit, which then takes the
/// slower path that stamps the page).
#[inline]
pub(super) fn any(snaps: &Snapshots) -> bool {
    snaps.any()
}

/// Stamps the locked page `folio`, just changed, with the file's snapshot generation: every
/// live snapshot keeps what it needs of the page (its change captured first), so the next
/// change needs no look at them until another snapshot is taken. The caller holds `i_rwsem`.
#[inline]
pub(super) fn stamp(snaps: &Snapshots, folio: &FolioLocked<'_>) {
    if snaps.any() {
        folio.set_private(snaps.generation());
    }
}

/// Keeps the bytes of the locked page `folio` (about to change) of the file at `path` for
/// every live snapshot in `snaps` that needs them (module docs). The caller holds the file's
/// `i_rwsem`. With `force` the pages are charged past the limits instead of failing (a
/// latch's commit, which cannot fail).
pub(super) fn capture(
    c: &Core,
    snaps: &Snapshots,
    path: &Path,
    folio: &FolioLocked<'_>,
    force: bool,
) -> Result<(), CacheError> {
    if settled(snaps, folio) {
        return Ok(());
    }
    // The list's lock is held across the captures: a snapshot leaving the list (its drop)
    // cannot unmap before a capture of ours maps (loom model
    // `loom_tests::snapshot::a_dropped_snapshot_holds_nothing`).
    let list = snaps.list.lock();
    let first = folio.index();
    for s in list.iter() {
        for page in 0..folio.nr_pages() as u32 {
            s.capture(c, path, first + page as u64, folio.folio_ref(), page, force)?;
        }
    }
    Ok(())
}

/// Whether a live snapshot in `snaps` needs the old bytes of page `index`, which is not
/// cached: the writer reads it in (`write::read_old_page`) before changing it. The caller
/// holds the file's `i_rwsem`.
pub(super) fn needs_old_page(snaps: &Snapshots, index: u64) -> bool {
    snaps.any() && snaps.list.lock().iter().any(|s| s.needs(index))
}

/// Whether a change of the locked large folio `folio`, not [`settled`], must split it first:
/// a live snapshot still needs one of its pages kept, and keeps pages, not the whole folio (a
/// 4 KiB change must not copy it all). Behind a snapshot's release point, or with every page
/// already kept, nothing is needed and the change goes into the folio whole, as with no
/// snapshot. The caller holds `i_rwsem`, so no snapshot is taken meanwhile, and the folio
/// lock, so none of its pages is captured meanwhile.
pub(super) fn must_split(snaps: &Snapshots, folio: &FolioLocked<'_>) -> bool {
    let pages = folio.index()..folio.index() + folio.nr_pages() as u64;
    snaps.list.lock().iter().any(|s| s.needs_any(pages.clone()))
}

/// Releases page `index` from every live snapshot in `snaps` that needs it: its old bytes could
/// not be kept (a commit, which cannot fail, met an I/O error reading them), so their reads
/// of it fail instead of showing the new bytes.
pub(super) fn forget_page(snaps: &Snapshots, index: u64) {
    for s in snaps.list.lock().iter() {
        if s.needs(index) {
            add_range(&mut s.released.lock(), index..index + 1);
        }
    }
}

impl Core {
    /// The snapshots checked from scratch (quiescent cache): every folio's mapcount and
    /// sharer answers against a scan of every space's page table, each snapshot's mapped
    /// pages against its count, and the counts against the snapshot charge.
    pub(super) fn validate_snapshots<'a>(
        &self,
        files: impl Iterator<Item = (&'a Path, &'a Snapshots)>,
    ) -> Result<(), String> {
        let Some(spaces) = self.spaces.get() else {
            return Ok(());
        };
        let report = spaces.check_oracle();
        if report.mismatches() != 0 {
            return Err(format!("snapshots: sharer tracking: {report:?}"));
        }
        let mut held = 0;
        for (path, snaps) in files {
            for s in snaps.list.lock().iter() {
                let mapped = s.space.resident_pages() as u64;
                let counted = s.held.load(Ordering::Relaxed);
                if mapped != counted {
                    return Err(format!(
                        "{}: a snapshot maps {mapped} pages and counts {counted}",
                        path.display()
                    ));
                }
                held += counted;
            }
        }
        let charged = self.budget.snapshots.charged();
        if held != charged {
            return Err(format!(
                "snapshots hold {held} pages and {charged} are charged"
            ));
        }
        Ok(())
    }

    /// The cache's address spaces, made at first use with the experiment's tracking.
    pub(crate) fn spaces(&self) -> &Spaces {
        self.spaces.get_or_init(|| {
            let tracking = self
                .config
                .experiment
                .tracking
                .unwrap_or_else(crate::mm::rmap::Tracking::rmap_id_calibrated);
            Spaces::new(self.arena.clone(), SpaceConfig::new(tracking))
        })
    }

    /// Charges one captured page to the snapshot share and the pinned share, or fails with
    /// [`CacheError::SnapshotLimit`] (no waiting: the writer may be the one holding the
    /// snapshot); with `force`, charges past the limits.
    fn snapshot_charge(&self, path: &Path, force: bool) -> Result<(), CacheError> {
        let b = &self.budget;
        if force {
            b.snapshots.charge_unchecked(1);
            b.pins.charge_unchecked(1);
            return Ok(());
        }
        if b.snapshots.try_charge(1) {
            if b.pins.try_charge(1) {
                return Ok(());
            }
            b.snapshots.uncharge(1);
        }
        self.counters.inc(Event::SnapshotLimited);
        Err(CacheError::SnapshotLimit {
            path: path.to_path_buf(),
            snapshot_pages: b.snapshots.charged(),
            limit_pages: b.snapshots.limit(),
            pinned_pages: b.pins.charged(),
            pin_limit_pages: b.pins.limit(),
        })
    }

    /// Gives back `pages` captured pages.
    pub(super) fn snapshot_uncharge(&self, pages: u64) {
        if pages > 0 {
            self.budget.snapshots.uncharge(pages);
            self.budget.pins.uncharge(pages);
        }
    }
}
