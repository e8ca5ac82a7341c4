//! Address spaces: page tables of folio mappings, fork-style snapshots, copy-on-write that
//! reuses an exclusively mapped large folio in place, and the exact "mapped shared / mapped
//! exclusively" detection of seed 002.
//!
//! # What it models
//!
//! A [`Space`] is an `mm_struct`: an rmap ID ([`rmap::id`](crate::mm::rmap::id)) and a page table
//! ([`pagetable`]) mapping virtual pages to pages of folios of the arena. The operations
//! mirror their kernel counterparts:
//!
//! | operation | kernel |
//! |---|---|
//! | [`Space::anon`] | `mmap(MAP_PRIVATE\|MAP_ANONYMOUS)` with an mTHP order; faults allocate large folios |
//! | [`Space::map_folios`] | `mmap(MAP_SHARED, PROT_READ)` of page-cache folios (`filemap_map_pages`) |
//! | [`Space::reserve`], [`Space::map_fixed`], [`Space::map_page`] | address space reserved (`get_unmapped_area`), file VMAs placed in it (`MAP_FIXED_NOREPLACE`), pages faulted in one at a time (`finish_fault` + `folio_add_file_rmap_ptes`): the snapshots of [`CachedFile::snapshot`](crate::CachedFile::snapshot) |
//! | [`Space::get_page`] | `follow_page` + `folio_get` (a `get_user_pages` of one page) |
//! | [`Space::read`], [`Space::write`] | loads and stores: `do_anonymous_page`, `do_wp_page` |
//! | [`Space::fork`] | `dup_mmap` / `copy_page_range`: the child shares every anonymous folio copy-on-write |
//! | [`Space::unmap`] | `munmap` (`zap_pte_range`, VMA split) |
//! | [`Space::dontneed`] | `madvise(MADV_DONTNEED)`: partial unmapping of a large folio |
//! | [`Space::protect`] | `mprotect`: PTE-remaps a PMD-mapped folio (`__split_huge_pmd_locked`) |
//! | drop | `exit_mmap` + `mmdrop` (the rmap ID is freed and reused later) |
//!
//! [`Spaces`] is the family the spaces belong to: the arena, the rmap-ID allocator, the
//! sharer-tracking strategy ([`Tracking`]: `none`, `rmap-id`, `mm-owner`, chosen at run
//! time) and the statistics.
//!
//! # Example
//!
//! ```
//! use foliocache::mm::folio::{Arena, ArenaConfig};
//! use foliocache::mm::refcount::RefStrategy;
//! use foliocache::mm::rmap::Tracking;
//! use foliocache::mm::space::{SpaceConfig, Spaces};
//! use foliocache::mm::sync::Arc;
//!
//! let arena = Arc::new(Arena::new(ArenaConfig::new(8 << 20, RefStrategy::LockedBit)).unwrap());
//! let tracking = Tracking::RmapId { exclusive_writer: true };
//! let spaces = Spaces::new(arena, SpaceConfig::new(tracking));
//! let parent = spaces.create().unwrap();
//! let heap = parent.anon(2 << 20).unwrap(); // one 2 MiB folio once touched
//! parent.write(heap, &[1; 4096]).unwrap();
//!
//! let snapshot = parent.fork().unwrap();
//! parent.write(heap, &[2]).unwrap(); // shared with the snapshot: the page is copied
//! let mut b = [0u8];
//! snapshot.read(heap, &mut b).unwrap();
//! assert_eq!(b, [1]);
//!
//! drop(snapshot);
//! parent.write(heap + 4096, &[3]).unwrap(); // mapped exclusively again: reused whole
//! let s = parent.stats();
//! assert_eq!((s.cow_copies, s.cow_reuses), (1, 1));
//! ```
//!
//! The lab crate's `examples/cow_snapshot.rs` runs the same story under every tracking strategy.
//!
//! # Copy-on-write (the point of seed 002)
//!
//! After `fork`, parent and child map the same anonymous folios read-only. A write fault on
//! such a page (`memory::wp_fault`) asks the folio's [`FolioRmap`](crate::mm::rmap::FolioRmap) whether every
//! reference to the folio is a mapping of the faulting space (refcount = mapcount, and all
//! mappings are this space's). If so the *whole folio* is reused in place: every entry of
//! this space that maps it becomes writable at once. If not, *the faulting page* is copied
//! into a new small folio (why the page and not the folio: `memory::wp_fault`). With
//! `none` a large folio mapped more than once always counts as shared, so after a fork it
//! is copied page by page even when the child is long gone; with `rmap-id` the answer is
//! exact and the folio is reused as soon as the child has exited; `mm-owner` is exact for
//! the fork-then-exit pattern (two spaces) and conservative beyond.
//!
//! # Batching
//!
//! Every rmap update works on a *run*: consecutive entries mapping consecutive pages of one
//! folio. Fork, unmap, dontneed and PMD splits take the run's references in one `add`, update
//! the sharer tracking in one seqcount section (or one lock hold) and drop references in one
//! `sub`, whatever the run's length (the RFC's `folio_add_anon_rmap_range`, and the 2024
//! kernel's `folio_try_dup_anon_rmap_ptes` / `folio_remove_rmap_ptes`).
//!
//! # Locking
//!
//! ```text
//!   Space::mm (Mutex: mmap_lock + page-table lock of one space)
//!     └─ FolioRmap: seqcount section (rmap-id) or mm-owner bit lock, per folio
//!          └─ folio refcount (atomic)
//! ```
//!
//! An operation locks one space only: fork builds the child's page table before the child
//! exists as a lockable space. Concurrent operations on *different* spaces meet only at the
//! folios, through the sharer-tracking protocols and the refcount. Only the oracle
//! ([`Spaces::check_oracle`], and the per-decision checks of [`SpaceConfig::oracle`]) looks at
//! several page tables; it needs the family to be quiescent (oracle mode serialises every
//! operation of the family to guarantee it).
//!
//! # Invariants (checked by [`Spaces::check_oracle`])
//!
//! 1. For every folio, its mapcount equals the mappings found by scanning every page table
//!    (an entire mapping counts 1, a PTE 1), and its references are at least that many.
//! 2. rmap-id: the answer of `mapped_exclusively` equals the scan for every (folio, mapper)
//!    pair whenever mapcount ≤ nr_pages; no strategy ever answers "exclusive" wrongly.
//! 3. A freed folio is unmapped everywhere (the arena's bad-page check sees the rmap state).
//!
//! # Why it is fast
//!
//! Page tables are dense vectors per VMA; fork copies them with one `memcpy` after one pass
//! that write-protects and counts runs; each run costs two refcount RMWs and one rmap batch.
//! COW reuse costs one seqcount snapshot per folio instead of one page copy per page.

pub mod pagetable;

mod memory;
mod oracle;

pub use oracle::{FolioSharing, OracleReport};

use std::collections::HashMap;
use std::fmt;

use self::memory::{anon_fault, copy_vma, split_cut_entire, wp_fault, zap};
use self::pagetable::{PageTable, Pte, Vma, VmaKind};
use crate::mm::folio::{Arena, FolioRef, PAGE_SHIFT, PAGE_SIZE};
use crate::mm::rmap::id::{RmapId, RmapIdAllocator, RmapIdsExhausted};
use crate::mm::rmap::Tracking;
use crate::mm::sync::{Arc, AtomicU64, Mutex, MutexGuard};

/// The order of a PMD-sized folio (2 MiB): folios of this order are mapped by one entire
/// mapping when [`SpaceConfig::pmd_mapping`] is on.
pub const PMD_ORDER: u32 = 9;

/// How a family of spaces behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpaceConfig {
    /// The sharer-tracking strategy of every folio these spaces map.
    pub tracking: Tracking,
    /// The folio order anonymous faults try first (0..=[`PMD_ORDER`]); default 9 (2 MiB).
    pub anon_order: u32,
    /// Map a PMD-order anonymous folio with one entire mapping (a THP); else PTE-map it.
    pub pmd_mapping: bool,
    /// Check every copy-on-write decision against a brute-force scan of all page tables, and
    /// serialise every operation of the family so the scan is consistent (tests, lab
    /// verification runs). Slow: a scan per write fault.
    pub oracle: bool,
}

impl Default for SpaceConfig {
    /// rmap-id with the exclusive-writer path as calibrated on this machine
    /// ([`Tracking::rmap_id_calibrated`]), 2 MiB PMD-mapped anonymous folios, no oracle.
    fn default() -> Self {
        Self::new(Tracking::rmap_id_calibrated())
    }
}

impl SpaceConfig {
    /// `tracking` with 2 MiB PMD-mapped anonymous folios and no oracle.
    pub fn new(tracking: Tracking) -> Self {
        Self {
            tracking,
            anon_order: PMD_ORDER,
            pmd_mapping: true,
            oracle: false,
        }
    }
}

/// Why a space operation failed; each message says how to fix the call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpaceError {
    /// No VMA covers the address.
    NotMapped {
        /// The address.
        addr: u64,
    },
    /// A write to a shared read-only (file) mapping.
    ReadOnly {
        /// The address.
        addr: u64,
    },
    /// A write to a page protected read-only with [`Space::protect`].
    Protected {
        /// The address.
        addr: u64,
    },
    /// The operation needs anonymous memory.
    NotAnonymous {
        /// The address.
        addr: u64,
    },
    /// The arena has no free folio of this order left.
    OutOfMemory {
        /// The order asked for.
        order: u32,
    },
    /// Address or length not page aligned, or an empty range.
    Unaligned {
        /// The address.
        addr: u64,
        /// The length.
        len: usize,
    },
    /// An anonymous folio order the space layer does not support.
    InvalidOrder {
        /// The order.
        order: u32,
    },
    /// A folio handed to [`Space::map_folios`] cannot be mapped.
    BadFolio {
        /// Why.
        reason: &'static str,
    },
    /// Every rmap ID is in use.
    RmapIds(RmapIdsExhausted),
    /// A fixed mapping ([`Space::map_fixed`]) overlaps one that exists.
    Overlaps {
        /// The address asked for.
        addr: u64,
    },
}

impl fmt::Display for SpaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpaceError::NotMapped { addr } => {
                write!(f, "address {addr:#x} is not mapped: map it with anon() or map_folios() first")
            }
            SpaceError::ReadOnly { addr } => write!(
                f,
                "address {addr:#x} is in a shared read-only mapping: copy the data into anonymous memory to modify it"
            ),
            SpaceError::Protected { addr } => write!(
                f,
                "page at {addr:#x} is protected read-only: call protect(.., false) before writing"
            ),
            SpaceError::NotAnonymous { addr } => write!(
                f,
                "address {addr:#x} is not anonymous memory: dontneed applies to anon() ranges; use unmap() for file mappings"
            ),
            SpaceError::OutOfMemory { order } => write!(
                f,
                "the arena has no free order-{order} folio: give the arena a larger budget or drop spaces"
            ),
            SpaceError::Unaligned { addr, len } => write!(
                f,
                "range {addr:#x}+{len:#x} is empty or not page aligned: use multiples of {PAGE_SIZE}"
            ),
            SpaceError::InvalidOrder { order } => write!(
                f,
                "anonymous folio order {order} is not supported: use 0..={PMD_ORDER}"
            ),
            SpaceError::BadFolio { reason } => write!(f, "cannot map folio: {reason}"),
            SpaceError::RmapIds(e) => e.fmt(f),
            SpaceError::Overlaps { addr } => write!(
                f,
                "a mapping at {addr:#x} overlaps an existing one: unmap it first or map elsewhere"
            ),
        }
    }
}

impl std::error::Error for SpaceError {}

crate::mm::stats::counter_set! {
    /// Counters of one space, or summed over a family ([`Spaces::stats`]).
    pub struct SpaceStats, prefix "" {
        counters {
            /// `fork()` calls.
            forks,
            /// First touches of anonymous pages (each maps a whole folio).
            anon_faults,
            /// Write faults resolved by copying a page.
            cow_copies,
            /// Write faults resolved by reusing a (large) folio in place.
            cow_reuses,
            /// Write faults on anon-exclusive entries (made writable without a check).
            cow_exclusive,
            /// Entire (PMD) mappings split into PTE mappings.
            pmd_splits,
            /// Batched rmap updates (one seqcount section or lock hold each).
            rmap_batches,
            /// Entries unmapped by unmap, dontneed and drop.
            pages_zapped,
        }
    }
}

impl std::ops::AddAssign for SpaceStats {
    fn add_assign(&mut self, o: Self) {
        self.forks += o.forks;
        self.anon_faults += o.anon_faults;
        self.cow_copies += o.cow_copies;
        self.cow_reuses += o.cow_reuses;
        self.cow_exclusive += o.cow_exclusive;
        self.pmd_splits += o.pmd_splits;
        self.rmap_batches += o.rmap_batches;
        self.pages_zapped += o.pages_zapped;
    }
}

/// The state of one space behind its lock.
#[derive(Debug)]
pub(crate) struct Mm {
    pub(crate) pt: PageTable,
    pub(crate) stats: SpaceStats,
}

/// The shared part of a family of spaces.
pub(crate) struct SpacesInner {
    pub(crate) arena: Arc<Arena>,
    pub(crate) config: SpaceConfig,
    ids: RmapIdAllocator,
    /// The `folio->mapping` of every anonymous folio (an anon_vma root, as a number).
    pub(crate) anon_mapping: u64,
    /// Every live space (strong: a space removes itself when dropped).
    registry: Mutex<HashMap<u32, Arc<SpaceInner>>>,
    retired: Mutex<SpaceStats>,
    serial: Mutex<()>,
    oracle_checks: AtomicU64,
    oracle_mismatches: AtomicU64,
    oracle_first: Mutex<Option<String>>,
}

impl fmt::Debug for SpacesInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spaces")
            .field("config", &self.config)
            .field("live", &self.ids.live())
            .finish()
    }
}

/// A family of address spaces sharing an arena, an rmap-ID allocator and a sharer-tracking
/// strategy. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Spaces {
    inner: Arc<SpacesInner>,
}

struct SpaceInner {
    cx: Arc<SpacesInner>,
    id: RmapId,
    mm: Mutex<Mm>,
}

/// An address space (`struct mm_struct`). Dropping it unmaps everything and frees its rmap
/// ID for reuse.
pub struct Space {
    inner: Arc<SpaceInner>,
}

impl fmt::Debug for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Space")
            .field("rmap_id", &self.inner.id.id())
            .finish()
    }
}

/// Where an address is mapped ([`Space::folio_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FolioInfo {
    /// The folio's pfn in the arena.
    pub pfn: u32,
    /// Its order.
    pub order: u32,
    /// The page within it.
    pub page: u32,
    /// Writable without a fault.
    pub writable: bool,
    /// Part of an entire (PMD) mapping.
    pub entire: bool,
}

/// A page-cache folio a file VMA may map: the family's, uptodate, not anonymous.
fn check_file_folio(cx: &SpacesInner, f: &FolioRef<'_>) -> Result<(), SpaceError> {
    if !cx.arena.owns(f.folio()) {
        return Err(SpaceError::BadFolio {
            reason: "it belongs to another arena",
        });
    }
    if !f.is_uptodate() {
        return Err(SpaceError::BadFolio {
            reason: "it is not uptodate (read it in first)",
        });
    }
    if f.is_anon() {
        return Err(SpaceError::BadFolio {
            reason: "it is anonymous memory, not a page-cache folio",
        });
    }
    Ok(())
}

#[inline]
fn check_range(addr: u64, len: usize) -> Result<(u64, u64), SpaceError> {
    if len == 0 || addr % PAGE_SIZE as u64 != 0 || len % PAGE_SIZE != 0 {
        return Err(SpaceError::Unaligned { addr, len });
    }
    let first = addr >> PAGE_SHIFT;
    Ok((first, first + (len >> PAGE_SHIFT) as u64))
}

impl Spaces {
    /// A family of spaces over `arena` behaving as `config` says.
    ///
    /// # Panics
    /// If `config.anon_order` exceeds [`PMD_ORDER`].
    pub fn new(arena: Arc<Arena>, config: SpaceConfig) -> Self {
        assert!(
            config.anon_order <= PMD_ORDER,
            "anonymous folio order {} is not supported: use 0..={PMD_ORDER}",
            config.anon_order
        );
        let anon_mapping = arena.new_mapping_id();
        Self {
            inner: Arc::new(SpacesInner {
                arena,
                config,
                ids: RmapIdAllocator::new(),
                anon_mapping,
                registry: Mutex::new(HashMap::new()),
                retired: Mutex::new(SpaceStats::default()),
                serial: Mutex::new(()),
                oracle_checks: AtomicU64::new(0),
                oracle_mismatches: AtomicU64::new(0),
                oracle_first: Mutex::new(None),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SpaceConfig {
        &self.inner.config
    }

    /// The arena the spaces map folios of.
    pub fn arena(&self) -> &Arc<Arena> {
        &self.inner.arena
    }

    /// `mm_alloc`: a new, empty space with a fresh rmap ID.
    pub fn create(&self) -> Result<Space, SpaceError> {
        let id = self.inner.ids.alloc().map_err(SpaceError::RmapIds)?;
        Ok(SpacesInner::register(
            &self.inner,
            id,
            PageTable::new(),
            SpaceStats::default(),
        ))
    }

    /// Spaces alive now.
    pub fn live(&self) -> u32 {
        self.inner.ids.live()
    }

    /// Statistics summed over every space of the family, alive or dropped.
    pub fn stats(&self) -> SpaceStats {
        let mut s = *self.inner.retired.lock();
        for sp in self.inner.live_spaces() {
            s += sp.mm.lock().stats;
        }
        s
    }
}

impl SpacesInner {
    fn register(this: &Arc<Self>, id: RmapId, pt: PageTable, stats: SpaceStats) -> Space {
        let inner = Arc::new(SpaceInner {
            cx: this.clone(),
            id,
            mm: Mutex::new(Mm { pt, stats }),
        });
        this.registry.lock().insert(id.id(), inner.clone());
        Space { inner }
    }

    fn live_spaces(&self) -> Vec<Arc<SpaceInner>> {
        self.registry.lock().values().cloned().collect()
    }

    /// Serialises the family's operations in oracle mode.
    #[inline]
    fn serial(&self) -> Option<MutexGuard<'_, ()>> {
        self.config.oracle.then(|| self.serial.lock())
    }
}

impl Space {
    /// This space's rmap ID.
    pub fn rmap_id(&self) -> u32 {
        self.inner.id.id()
    }

    /// The family this space belongs to.
    pub fn spaces(&self) -> Spaces {
        Spaces {
            inner: self.inner.cx.clone(),
        }
    }

    /// This space's counters.
    pub fn stats(&self) -> SpaceStats {
        self.inner.mm.lock().stats
    }

    /// Pages mapped now (`get_mm_rss`).
    pub fn resident_pages(&self) -> usize {
        self.inner.mm.lock().pt.present_pages()
    }

    /// `mmap(MAP_PRIVATE|MAP_ANONYMOUS)`: `len` bytes of zeroed private memory, faulted in as
    /// folios of the family's default order. Returns the start address.
    pub fn anon(&self, len: usize) -> Result<u64, SpaceError> {
        self.anon_with_order(len, self.inner.cx.config.anon_order)
    }

    /// [`Space::anon`] with folios of `order` (0..=[`PMD_ORDER`]).
    pub fn anon_with_order(&self, len: usize, order: u32) -> Result<u64, SpaceError> {
        if order > PMD_ORDER {
            return Err(SpaceError::InvalidOrder { order });
        }
        check_range(0, len)?;
        let _s = self.inner.cx.serial();
        let mut mm = self.inner.mm.lock();
        let vpn = mm.pt.insert(len / PAGE_SIZE, VmaKind::Anon { order });
        Ok(vpn << PAGE_SHIFT)
    }

    /// `mmap(MAP_SHARED, PROT_READ)` of page-cache folios: maps `folios` back to back,
    /// read-only, taking this space's own references. Returns the start address.
    ///
    /// Every folio must belong to the family's arena, be uptodate and not anonymous.
    pub fn map_folios(&self, folios: &[FolioRef<'_>]) -> Result<u64, SpaceError> {
        let cx = &self.inner.cx;
        if folios.is_empty() {
            return Err(SpaceError::Unaligned { addr: 0, len: 0 });
        }
        for f in folios {
            check_file_folio(cx, f)?;
        }
        let pages: usize = folios.iter().map(|f| f.nr_pages()).sum();
        let _s = cx.serial();
        let mut mm = self.inner.mm.lock();
        let vpn = mm.pt.insert(pages, VmaKind::File);
        let t = cx.config.tracking;
        let vma = mm.pt.vmas.get_mut(&vpn).expect("just inserted");
        let mut at = 0;
        for f in folios {
            let nr = f.nr_pages();
            cx.ref_add(f.folio(), nr as u32);
            cx.rmap(f.folio())
                .add(t, f.order(), &self.inner.id, nr as u32);
            for (j, p) in vma.ptes[at..at + nr].iter_mut().enumerate() {
                *p = Pte::new(f.pfn(), j as u32, 0);
            }
            at += nr;
        }
        mm.stats.rmap_batches += folios.len() as u64;
        Ok(vpn << PAGE_SHIFT)
    }

    /// `get_unmapped_area`: reserves `pages` pages of address space (no VMA yet) and returns
    /// the start address; [`Space::map_fixed`] puts file VMAs inside it later, piece by
    /// piece. O(1) whatever `pages` is: a snapshot of a large file reserves its range this way
    /// and makes page tables only for the 2 MiB pieces it keeps pages in.
    pub fn reserve(&self, pages: usize) -> Result<u64, SpaceError> {
        check_range(0, pages * PAGE_SIZE)?;
        let _s = self.inner.cx.serial();
        let mut mm = self.inner.mm.lock();
        Ok(mm.pt.reserve(pages) << PAGE_SHIFT)
    }

    /// `mmap(MAP_SHARED | MAP_FIXED_NOREPLACE, PROT_READ)` of a file range whose pages are
    /// faulted in later with [`Space::map_page`]: an empty file VMA of `pages` pages at
    /// `addr`, or [`SpaceError::Overlaps`] if a VMA exists in the range.
    pub fn map_fixed(&self, addr: u64, pages: usize) -> Result<(), SpaceError> {
        let (first, end) = check_range(addr, pages * PAGE_SIZE)?;
        let _s = self.inner.cx.serial();
        let mut mm = self.inner.mm.lock();
        if !mm.pt.overlapping(first, end).is_empty() {
            return Err(SpaceError::Overlaps { addr });
        }
        mm.pt.insert_at(first, pages, VmaKind::File);
        Ok(())
    }

    /// `finish_fault` for one page of a file VMA ([`Space::reserve`]): maps page `page` of
    /// `folio` at `addr`, read-only, taking this space's own reference and adding its mapping
    /// to the folio's sharer tracking (`folio_add_file_rmap_ptes`). Returns `false` (and
    /// changes nothing) if a page is mapped there already.
    ///
    /// The folio must belong to the family's arena, be uptodate and not anonymous; `addr`
    /// must lie in a file VMA.
    pub fn map_page(&self, addr: u64, folio: &FolioRef<'_>, page: u32) -> Result<bool, SpaceError> {
        let cx = &self.inner.cx;
        check_range(addr, PAGE_SIZE)?;
        check_file_folio(cx, folio)?;
        if page as usize >= folio.nr_pages() {
            return Err(SpaceError::BadFolio {
                reason: "the page is past the folio's end",
            });
        }
        let _s = cx.serial();
        let mut mm = self.inner.mm.lock();
        let (vma, idx) = mm
            .pt
            .find_mut(addr >> PAGE_SHIFT)
            .ok_or(SpaceError::NotMapped { addr })?;
        if vma.kind != VmaKind::File {
            return Err(SpaceError::BadFolio {
                reason: "the address is in anonymous memory, not a file mapping",
            });
        }
        if vma.ptes[idx].present() {
            return Ok(false);
        }
        // Invariant 4 of the rmap module: the reference before the mapping.
        cx.ref_add(folio.folio(), 1);
        cx.rmap(folio.folio())
            .add(cx.config.tracking, folio.order(), &self.inner.id, 1);
        vma.ptes[idx] = Pte::new(folio.pfn(), page, 0);
        mm.stats.rmap_batches += 1;
        Ok(true)
    }

    /// `follow_page` + `folio_get` (`get_user_pages` of one page): the folio mapped at
    /// `addr`, with a reference of the caller's own, and the page of it mapped there;
    /// `None` if no page is mapped there.
    pub fn get_page(&self, addr: u64) -> Option<(FolioRef<'_>, u32)> {
        let cx = &self.inner.cx;
        let mm = self.inner.mm.lock();
        let p = mm.pt.present(addr >> PAGE_SHIFT)?;
        let folio = cx.folio(p.pfn());
        // The mapping's reference keeps the folio while the page-table lock is held: the
        // new one is taken from a count that cannot be zero.
        cx.ref_add(folio, 1);
        // SAFETY: the reference just taken is the caller's, and the folio is a header of the
        // family's arena.
        Some((unsafe { FolioRef::from_raw(&cx.arena, folio) }, p.page()))
    }

    /// Whether a page is mapped anywhere in `[addr, addr + len)` (unmapped holes and
    /// addresses outside every VMA count as not mapped).
    pub fn any_mapped(&self, addr: u64, len: usize) -> bool {
        let Ok((first, end)) = check_range(addr, len) else {
            return false;
        };
        let mm = self.inner.mm.lock();
        mm.pt.overlapping(first, end).into_iter().any(|start| {
            let v = &mm.pt.vmas[&start];
            let from = (first.max(v.start) - v.start) as usize;
            let to = (end.min(v.end()) - v.start) as usize;
            v.ptes[from..to].iter().any(|p| p.present())
        })
    }

    /// Reads `buf.len()` bytes at `addr` (a load from process memory). Anonymous pages never
    /// touched read as zeros.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), SpaceError> {
        let cx = &self.inner.cx;
        let _s = cx.serial();
        let mm = self.inner.mm.lock();
        let mut done = 0;
        while done < buf.len() {
            let a = addr + done as u64;
            let off = (a as usize) & (PAGE_SIZE - 1);
            let n = (PAGE_SIZE - off).min(buf.len() - done);
            let (vma, idx) = mm
                .pt
                .find(a >> PAGE_SHIFT)
                .ok_or(SpaceError::NotMapped { addr: a })?;
            let p = vma.ptes[idx];
            let chunk = &mut buf[done..done + n];
            if p.present() {
                let ok = cx.folio(p.pfn()).read_racy(
                    p.page() as usize * PAGE_SIZE + off,
                    chunk,
                    &cx.arena,
                );
                debug_assert!(ok);
            } else if matches!(vma.kind, VmaKind::Anon { .. }) {
                chunk.fill(0);
            } else {
                return Err(SpaceError::NotMapped { addr: a });
            }
            done += n;
        }
        Ok(())
    }

    /// Writes `data` at `addr` (a store to process memory): faults anonymous pages in and
    /// resolves copy-on-write (reuse or copy) page by page, under one lock hold.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), SpaceError> {
        let cx = &self.inner.cx;
        let me = &self.inner.id;
        let _s = cx.serial();
        let mut mm = self.inner.mm.lock();
        let mut done = 0;
        while done < data.len() {
            let a = addr + done as u64;
            let off = (a as usize) & (PAGE_SIZE - 1);
            let n = (PAGE_SIZE - off).min(data.len() - done);
            let vpn = a >> PAGE_SHIFT;
            let (vstart, idx, kind, mut p) = {
                let (vma, idx) = mm.pt.find(vpn).ok_or(SpaceError::NotMapped { addr: a })?;
                (vma.start, idx, vma.kind, vma.ptes[idx])
            };
            if kind == VmaKind::File {
                return Err(SpaceError::ReadOnly { addr: a });
            }
            if p.prot_ro() {
                return Err(SpaceError::Protected { addr: a });
            }
            if !p.present() {
                anon_fault(cx, me, &mut mm, vstart, idx)?;
                p = mm.pt.vmas[&vstart].ptes[idx];
            }
            if !p.writable() {
                match wp_fault(cx, me, &mut mm, vstart, idx)? {
                    memory::WpOutcome::Exclusive => mm.stats.cow_exclusive += 1,
                    memory::WpOutcome::Reused | memory::WpOutcome::Copied => {}
                }
                p = mm.pt.vmas[&vstart].ptes[idx];
            }
            let ok = cx.folio(p.pfn()).write_racy(
                p.page() as usize * PAGE_SIZE + off,
                &data[done..done + n],
                &cx.arena,
            );
            debug_assert!(ok, "a writable entry maps an anonymous uptodate folio");
            done += n;
        }
        Ok(())
    }

    /// `fork()`: a child space sharing every folio of this one; anonymous memory becomes
    /// copy-on-write in both. References and mappings are taken one batch per run.
    pub fn fork(&self) -> Result<Space, SpaceError> {
        let cx = &self.inner.cx;
        let _s = cx.serial();
        let child_id = cx.ids.alloc().map_err(SpaceError::RmapIds)?;
        let mut mm = self.inner.mm.lock();
        let mut pt = PageTable {
            vmas: Default::default(),
            next_vpn: mm.pt.next_vpn,
        };
        let mut batches = 0;
        for (start, vma) in mm.pt.vmas.iter_mut() {
            let (copy, b) = copy_vma(cx, &child_id, vma);
            batches += b;
            pt.vmas.insert(*start, copy);
        }
        mm.stats.forks += 1;
        mm.stats.rmap_batches += batches;
        drop(mm);
        Ok(SpacesInner::register(
            cx,
            child_id,
            pt,
            SpaceStats::default(),
        ))
    }

    /// Applies `f(vma_start, from, to)` to every VMA piece overlapping `[first, end)` (vpns).
    fn for_each_piece(mm: &Mm, first: u64, end: u64) -> Vec<(u64, usize, usize, VmaKind)> {
        mm.pt
            .overlapping(first, end)
            .into_iter()
            .map(|s| {
                let v = &mm.pt.vmas[&s];
                let from = first.max(v.start) - v.start;
                let to = end.min(v.end()) - v.start;
                (s, from as usize, to as usize, v.kind)
            })
            .collect()
    }

    /// `munmap`: removes every mapping in `[addr, addr+len)` and the VMAs (or parts of VMAs)
    /// covering it. Unmapped gaps inside the range are fine.
    pub fn unmap(&self, addr: u64, len: usize) -> Result<(), SpaceError> {
        self.unmap_counted(addr, len).map(|_| ())
    }

    /// [`Space::unmap`], returning how many pages were mapped in the range.
    pub fn unmap_counted(&self, addr: u64, len: usize) -> Result<u64, SpaceError> {
        let (first, end) = check_range(addr, len)?;
        let cx = &self.inner.cx;
        let me = &self.inner.id;
        let _s = cx.serial();
        let mut mm = self.inner.mm.lock();
        let zapped = mm.stats.pages_zapped;
        for (vstart, from, to, _) in Self::for_each_piece(&mm, first, end) {
            zap(cx, me, &mut mm, vstart, from, to);
            let mut vma = mm.pt.vmas.remove(&vstart).expect("vma");
            let tail = vma.ptes.split_off(to);
            vma.ptes.truncate(from);
            if !tail.is_empty() {
                let start = vstart + to as u64;
                mm.pt.vmas.insert(
                    start,
                    Vma {
                        start,
                        kind: vma.kind,
                        ptes: tail,
                    },
                );
            }
            if !vma.ptes.is_empty() {
                mm.pt.vmas.insert(vstart, vma);
            }
        }
        Ok(mm.stats.pages_zapped - zapped)
    }

    /// `madvise(MADV_DONTNEED)`: drops the pages of `[addr, addr+len)` of anonymous memory
    /// (they read as zeros and fault in again on the next write); the range stays mapped.
    pub fn dontneed(&self, addr: u64, len: usize) -> Result<(), SpaceError> {
        let (first, end) = check_range(addr, len)?;
        let cx = &self.inner.cx;
        let me = &self.inner.id;
        let _s = cx.serial();
        let mut mm = self.inner.mm.lock();
        let pieces = Self::for_each_piece(&mm, first, end);
        if let Some((s, from, _, _)) = pieces.iter().find(|p| p.3 == VmaKind::File) {
            return Err(SpaceError::NotAnonymous {
                addr: (s + *from as u64) << PAGE_SHIFT,
            });
        }
        for (vstart, from, to, _) in pieces {
            zap(cx, me, &mut mm, vstart, from, to);
        }
        Ok(())
    }

    /// `mprotect`: makes `[addr, addr+len)` read-only (`read_only`) or writable again. A
    /// PMD-mapped folio the range covers only partly is PTE-remapped first, in one rmap
    /// batch (`memory::split_entire`). Making anon-exclusive pages writable again needs no fault.
    pub fn protect(&self, addr: u64, len: usize, read_only: bool) -> Result<(), SpaceError> {
        let (first, end) = check_range(addr, len)?;
        let cx = &self.inner.cx;
        let me = &self.inner.id;
        let _s = cx.serial();
        let mut mm = self.inner.mm.lock();
        let pieces = Self::for_each_piece(&mm, first, end);
        if pieces.is_empty() {
            return Err(SpaceError::NotMapped { addr });
        }
        for (vstart, from, to, kind) in pieces {
            if read_only {
                split_cut_entire(cx, me, &mut mm, vstart, from, to);
            }
            let vma = mm.pt.vmas.get_mut(&vstart).expect("vma");
            for p in &mut vma.ptes[from..to] {
                *p = if read_only {
                    p.with(Pte::PROT_RO).without(Pte::WRITE)
                } else if p.present() && p.excl() && kind != VmaKind::File {
                    p.without(Pte::PROT_RO).with(Pte::WRITE)
                } else {
                    p.without(Pte::PROT_RO)
                };
            }
        }
        Ok(())
    }

    /// Where `addr` is mapped, if a page is present there.
    pub fn folio_at(&self, addr: u64) -> Option<FolioInfo> {
        let mm = self.inner.mm.lock();
        let p = mm.pt.present(addr >> PAGE_SHIFT)?;
        Some(FolioInfo {
            pfn: p.pfn(),
            order: self.inner.cx.folio(p.pfn()).order(),
            page: p.page(),
            writable: p.writable(),
            entire: p.entire(),
        })
    }

    /// `folio_mapped_shared` negated, for the folio mapped at `addr`: does this space map it
    /// exclusively, as the family's tracking tells? `None` if nothing is mapped there.
    pub fn mapped_exclusively(&self, addr: u64) -> Option<bool> {
        let cx = &self.inner.cx;
        let _s = cx.serial();
        let mm = self.inner.mm.lock();
        let p = mm.pt.present(addr >> PAGE_SHIFT)?;
        let folio = cx.folio(p.pfn());
        Some(
            cx.rmap(folio)
                .mapped_exclusively(cx.config.tracking, folio.order(), &self.inner.id),
        )
    }
}

impl Drop for Space {
    /// `exit_mmap` + `mmdrop`: unmaps everything, retires the statistics, frees the rmap ID.
    fn drop(&mut self) {
        let cx = self.inner.cx.clone();
        let me = self.inner.id;
        let _s = cx.serial();
        let mut mm = self.inner.mm.lock();
        let vmas: Vec<(u64, usize)> = mm
            .pt
            .vmas
            .values()
            .map(|v| (v.start, v.ptes.len()))
            .collect();
        for (vstart, len) in vmas {
            zap(&cx, &me, &mut mm, vstart, 0, len);
        }
        mm.pt.vmas.clear();
        *cx.retired.lock() += mm.stats;
        mm.stats = SpaceStats::default();
        drop(mm);
        cx.registry.lock().remove(&me.id());
        cx.ids.free(me);
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
