//! The arena: memmap, page_ext, data frames, allocator, free path and statistics of one cache.
//!
//! # Deferred initialisation
//!
//! A budget is mapped whole when the arena is made (data frames, headers, extension
//! records), but mapping costs address space only: what costs memory and time is writing,
//! and a page of budget carries [`METADATA_BYTES_PER_PAGE`] bytes of metadata to write
//! (header, extension record, buddy links; the LRU adds its own links the same way). Building
//! all of it up front made a large budget expensive before a single byte was cached: a 32 GiB
//! budget wrote over a gigabyte in more than a second, and a budget larger than the machine
//! ran out of memory in the constructor.
//!
//! The kernel meets the same cost at boot, where initialising every `struct page` of a large
//! machine would take minutes; with `CONFIG_DEFERRED_STRUCT_PAGE_INIT` it initialises only a
//! first part of each node before boot goes on, leaves the rest to `deferred_init_memmap`, and,
//! when an allocation runs out of initialised memory first, grows the zone on the spot
//! (`deferred_grow_zone`). We do only the on-demand half, in two independent steps:
//!
//! - the buddy allocator lists no frame at first; when no listed block is large enough for a
//!   request, it lists the next largest block's worth of frames (`1 << MAX_ORDER`, aligned,
//!   so every buddy of a listed block is listed too) and tries again. Listed memory is used
//!   up before new memory is listed, and the free lists' arrays are written as they grow;
//! - headers and extension records live in slices that build their elements the first time
//!   an element past the built prefix is reached (by the allocation that hands its frame out,
//!   or by a lookup of that frame number), a chunk of [`MAX_ORDER`]-block size at a time,
//!   under a lock, published by a release store of the built length that every access checks
//!   with an acquire load. A built element is never unbuilt, so headers stay type-stable:
//!   a header reached through a stale pointer was built before the pointer existed.
//!
//! Nothing else changes: [`ArenaStats::total_pages`] is the whole budget and frames never
//! listed count as free; [`Arena::validate`] checks the frames listed so far and the built
//! headers of the rest. Memory is faulted in and written as the cache fills, at the
//! granularity of the mappings' pages (2 MiB with transparent huge pages).
//!
//! # Budgets the machine cannot hold
//!
//! Deferring the writes does not make memory appear: a full cache still holds its budget
//! plus its metadata. [`check_budget`] refuses (and [`Arena::new`] and `Config::validate`
//! with it) a budget whose full size exceeds the machine's physical memory, where the cache
//! would be killed by the out-of-memory killer as it filled, or what the process's
//! address-space limit leaves, where its mappings or allocations would fail. Swap and memory
//! cgroups are not consulted.

use std::fmt;
use std::ptr::NonNull;

use super::buddy::{self, FrameAllocator, MAX_ORDER, NR_ORDERS};
use super::flags::*;
use super::handle::{FolioRef, FrozenFolio};
use super::wait::{TaskWait, WaitTable};
use super::{Folio, FolioExt, PAGE_SHIFT, PAGE_SIZE, STATE_FREE, STATE_HEAD, STATE_TAIL};
use crate::mm::refcount::RefStrategy;
use crate::mm::sync::{
    current_cpu, num_cpus, AtomicU64, AtomicUsize, CachePadded, Mutex, OnceLock, Ordering,
};

/// How to build an [`Arena`] (the memory budget of a cache and its refcount strategy).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ArenaConfig {
    /// Bytes of folio data the arena may hold; rounded down to whole 4 KiB pages.
    pub budget_bytes: usize,
    /// The refcount strategy every folio of this arena uses.
    pub strategy: RefStrategy,
    /// Panic when the free path finds a bad page (after counting it and freeing the folio
    /// anyway). Defaults to `cfg!(debug_assertions)`, the kernel's `VM_BUG_ON`-style behaviour
    /// in debug builds; tests that provoke bad pages set it to false and read
    /// [`ArenaStats::bad_pages`].
    pub panic_on_bad_page: bool,
    /// Cache free folios of orders `0..=PCP_MAX_ORDER` per CPU (`pcp` lists). Default true.
    pub per_cpu_lists: bool,
    /// Ask for transparent huge pages for the frames, the memmap and page_ext (the kernel's
    /// direct map is mapped with huge pages). Default true; without THP support the advice is
    /// ignored.
    pub huge_pages: bool,
}

impl ArenaConfig {
    /// `totalram_pages` from a budget: a configuration with `budget_bytes` of data,
    /// `strategy`, and the defaults.
    pub fn new(budget_bytes: usize, strategy: RefStrategy) -> Self {
        Self {
            budget_bytes,
            strategy,
            panic_on_bad_page: cfg!(debug_assertions),
            per_cpu_lists: true,
            huge_pages: true,
        }
    }
}

/// Why an arena could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum ArenaError {
    /// The budget holds no whole page.
    BudgetTooSmall {
        /// The budget asked for.
        budget_bytes: usize,
    },
    /// The budget holds more pages than a `u32` frame number can name (16 TiB).
    BudgetTooLarge {
        /// The budget asked for.
        budget_bytes: usize,
    },
    /// The budget and its metadata would not fit in this machine's memory or in the
    /// process's address-space limit ([`check_budget`]).
    ExceedsMemory(BudgetOverLimit),
    /// The operating system refused one of the arena's mappings.
    Map(std::io::Error),
}

impl fmt::Display for ArenaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArenaError::BudgetTooSmall { budget_bytes } => write!(
                f,
                "memory budget of {budget_bytes} bytes holds no 4 KiB page: give at least {PAGE_SIZE} bytes"
            ),
            ArenaError::BudgetTooLarge { budget_bytes } => write!(
                f,
                "memory budget of {budget_bytes} bytes exceeds the 16 TiB an arena can address: use a smaller budget"
            ),
            ArenaError::ExceedsMemory(e) => e.fmt(f),
            ArenaError::Map(e) => write!(
                f,
                "cannot map the arena's memory ({e}): lower the memory budget or raise the address-space limit"
            ),
        }
    }
}

impl std::error::Error for ArenaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ArenaError::Map(e) => Some(e),
            _ => None,
        }
    }
}

/// Bytes of metadata the arena keeps per page of budget once the page has been used: its
/// header ([`Folio`]), its extension record ([`FolioExt`]) and the buddy allocator's links.
/// None of it is written before the page is first allocated (see the module docs).
pub const METADATA_BYTES_PER_PAGE: usize =
    std::mem::size_of::<Folio>() + std::mem::size_of::<FolioExt>() + buddy::BYTES_PER_PAGE;

/// What bounds the memory a budget may take ([`check_budget`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryLimit {
    /// The machine's physical memory (`sysconf(_SC_PHYS_PAGES)`).
    PhysicalMemory,
    /// The process's address-space limit (`RLIMIT_AS`, `ulimit -v`) less what the process
    /// has mapped already.
    AddressSpace,
}

/// A budget that cannot exist on this machine: what it needs, and the limit it exceeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetOverLimit {
    /// The budget asked for.
    pub budget_bytes: usize,
    /// The budget plus its metadata once every page has been used.
    pub needed_bytes: u64,
    /// The bytes the limit leaves.
    pub limit_bytes: u64,
    /// Which limit.
    pub limit: MemoryLimit,
}

impl BudgetOverLimit {
    /// The largest budget the limit allows (its metadata included), in whole pages.
    pub fn largest_budget_bytes(&self) -> u64 {
        let per_page = (PAGE_SIZE + METADATA_BYTES_PER_PAGE) as u64;
        self.limit_bytes / per_page * PAGE_SIZE as u64
    }
}

impl fmt::Display for BudgetOverLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, fix) = match self.limit {
            MemoryLimit::PhysicalMemory => ("the machine's physical memory", ""),
            MemoryLimit::AddressSpace => (
                "the process's address-space limit (RLIMIT_AS) leaves",
                ", or raise the address-space limit (ulimit -v)",
            ),
        };
        write!(
            f,
            "memory budget of {} bytes needs {} bytes with its metadata ({METADATA_BYTES_PER_PAGE} bytes \
             per 4 KiB page), more than the {} bytes {what}: give at most {} bytes{fix}",
            self.budget_bytes,
            self.needed_bytes,
            self.limit_bytes,
            self.largest_budget_bytes()
        )
    }
}

/// Whether a budget of `budget_bytes` can exist on this machine: the budget plus its
/// metadata ([`METADATA_BYTES_PER_PAGE`] per page) must fit in physical memory, or a full
/// cache would be killed by the out-of-memory killer instead of being refused, and in what
/// the address-space limit leaves the process, or the mappings would fail. [`Arena::new`]
/// and `Config::validate` check it; swap is not counted (a page cache that swaps is slower
/// than the disk it caches), and neither are memory cgroups.
pub fn check_budget(budget_bytes: usize) -> Result<(), BudgetOverLimit> {
    let pages = (budget_bytes >> PAGE_SHIFT) as u64;
    let needed_bytes = (pages << PAGE_SHIFT) + pages * METADATA_BYTES_PER_PAGE as u64;
    let over = |limit_bytes: u64, limit| {
        if needed_bytes > limit_bytes {
            Err(BudgetOverLimit {
                budget_bytes,
                needed_bytes,
                limit_bytes,
                limit,
            })
        } else {
            Ok(())
        }
    };
    if let Some(phys) = physical_memory() {
        over(phys, MemoryLimit::PhysicalMemory)?;
    }
    if let Some(left) = address_space_left() {
        over(left, MemoryLimit::AddressSpace)?;
    }
    Ok(())
}

/// `totalram_pages` of the machine, in bytes (`None` if the system does not say, and under
/// Miri, which has no `_SC_PHYS_PAGES`).
fn physical_memory() -> Option<u64> {
    if cfg!(miri) {
        return None;
    }
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && size > 0).then(|| pages as u64 * size as u64)
}

/// What `RLIMIT_AS` leaves this process to map, in bytes (`None` when unlimited, and under
/// Miri, which has no `getrlimit`).
fn address_space_left() -> Option<u64> {
    if cfg!(miri) {
        return None;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to write to.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    // The first field of statm is the process's mapped size in pages.
    let mapped_pages: u64 = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Some(lim.rlim_cur.saturating_sub(mapped_pages * PAGE_SIZE as u64))
}

/// Why [`Arena::alloc`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllocError {
    /// `-ENOMEM`: no free block of this order exists (the budget is used up, or fragmented:
    /// compare `free_pages` with `2^order`).
    OutOfMemory {
        /// The order asked for.
        order: u32,
        /// Free pages at the time of the failure, in blocks of any order.
        free_pages: u64,
    },
    /// The order exceeds [`MAX_ORDER`].
    OrderTooLarge {
        /// The order asked for.
        order: u32,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AllocError::OutOfMemory { order, free_pages } => write!(
                f,
                "out of memory: no free block of order {order} ({} KiB) left in the arena ({free_pages} pages free); \
                 release folio references or give the cache a larger memory budget",
                4u64 << order
            ),
            AllocError::OrderTooLarge { order } => write!(
                f,
                "folio order {order} is too large: orders 0..={MAX_ORDER} (4 KiB to 2 MiB) are supported"
            ),
        }
    }
}

impl std::error::Error for AllocError {}

/// A snapshot of an arena's accounting (`/proc/vmstat`, `/proc/buddyinfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArenaStats {
    /// Pages in the budget.
    pub total_pages: u64,
    /// Pages not allocated (in the buddy lists or parked per CPU).
    pub free_pages: u64,
    /// Pages held by allocated folios.
    pub allocated_pages: u64,
    /// Allocated folios per order (`allocated_folios[o]` folios of `2^o` pages each).
    pub allocated_folios: [u64; NR_ORDERS],
    /// Successful allocations since creation.
    pub allocations: u64,
    /// Folios freed since creation.
    pub frees: u64,
    /// Allocations that failed with [`AllocError::OutOfMemory`].
    pub alloc_failures: u64,
    /// Bad pages found by the free path or at allocation (`bad_page()` reports).
    pub bad_pages: u64,
    /// Folios freed with `PG_mlocked` still set (cleared and counted, as the kernel's
    /// `UNEVICTABLE_MLOCKFREED`).
    pub mlocked_freed: u64,
}

/// Per-CPU event counters (relaxed; summed by `stats`).
struct CpuStats {
    allocs: [AtomicU64; NR_ORDERS],
    frees: [AtomicU64; NR_ORDERS],
}

impl CpuStats {
    fn new() -> Self {
        Self {
            allocs: std::array::from_fn(|_| AtomicU64::new(0)),
            frees: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// Huge-page size of the mappings below (x86-64 and arm64 with 4 KiB base pages).
const HUGE_SIZE: usize = 2 << 20;

/// One anonymous private mapping, never moved or shrunk: the data frames, the memmap and the
/// page_ext array each live in one.
///
/// The kernel reaches its frames, `struct page`s and slab objects through the direct map,
/// which it maps with 2 MiB or 1 GiB pages, so a cache hit costs it no TLB walk. Our arena
/// gets the same by asking for transparent huge pages: the mapping is aligned to 2 MiB and
/// advised `MADV_HUGEPAGE` before its first touch (with `transparent_hugepage=madvise`, the
/// common default, nothing else would give it huge pages). A random 4 KiB read of a 64 MiB
/// budget then needs one of 32 TLB entries instead of one of 16,384: on the `peers` lab
/// scenario (a KVM guest, where a TLB miss walks the guest's and the host's page tables) the
/// copying reads went from 1.37 M/s to 1.63 M/s and the pinned ones from 1.64 M/s to
/// 2.04 M/s (one thread, medians of 3, runs before and after the change). If the kernel has no huge page to give, the advice is
/// ignored and the mapping uses 4 KiB pages: only speed differs.
struct Region {
    base: NonNull<u8>,
    /// The mapped length (the caller's, rounded up to a page).
    len: usize,
    /// Allocated with huge-page alignment (the layout to free it with, under Miri).
    #[cfg(miri)]
    huge: bool,
}

impl Region {
    /// Under Miri, which supports neither `MAP_NORESERVE`, nor unmapping part of a mapping,
    /// nor `madvise`: a zeroed heap allocation with the same length and alignment (anonymous
    /// memory is zeroed too), freed with the same layout.
    #[cfg(miri)]
    fn map(len: usize, huge: bool) -> Result<Self, ArenaError> {
        let len = len.max(1).next_multiple_of(PAGE_SIZE);
        let layout = Self::layout(len, huge);
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(p).ok_or_else(|| {
            ArenaError::Map(std::io::Error::from(std::io::ErrorKind::OutOfMemory))
        })?;
        Ok(Self { base, len, huge })
    }

    /// The layout of a Region under Miri: huge-page alignment, so that the arena's code sees
    /// the addresses it would get from the mapping; a page's otherwise.
    #[cfg(miri)]
    fn layout(len: usize, huge: bool) -> std::alloc::Layout {
        let align = if huge { HUGE_SIZE } else { PAGE_SIZE };
        std::alloc::Layout::from_size_align(len, align).expect("a page-rounded length")
    }

    #[cfg(not(miri))]
    fn map(len: usize, huge: bool) -> Result<Self, ArenaError> {
        let len = len.max(1).next_multiple_of(PAGE_SIZE);
        // Room to align the start to a huge page; the slack is unmapped below.
        let slack = if huge { HUGE_SIZE } else { 0 };
        let total = len.checked_add(slack).ok_or_else(|| {
            ArenaError::Map(std::io::Error::from(std::io::ErrorKind::OutOfMemory))
        })?;
        // SAFETY: a fresh anonymous mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ArenaError::Map(std::io::Error::last_os_error()));
        }
        let raw = p as usize;
        let base = if huge {
            let aligned = raw.next_multiple_of(HUGE_SIZE);
            let head = aligned - raw;
            let tail = slack - head;
            // SAFETY: both ranges lie inside the mapping made above and nothing uses them;
            // page-aligned because `raw`, `aligned` and `len` are.
            unsafe {
                if head > 0 {
                    libc::munmap(p, head);
                }
                if tail > 0 {
                    libc::munmap((aligned + len) as *mut libc::c_void, tail);
                }
                // Advice only: on failure (no THP support) the mapping keeps 4 KiB pages.
                libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
            }
            aligned
        } else {
            raw
        };
        Ok(Self {
            base: NonNull::new(base as *mut u8).expect("mmap returned null"),
            len,
        })
    }
}

impl Region {
    /// `MADV_POPULATE_WRITE` over the whole region: every page is faulted in writable now,
    /// contents untouched, so that no later access pays the operating system's first touch.
    #[cfg(not(miri))]
    fn populate(&self) -> std::io::Result<()> {
        // SAFETY: advice over exactly the range this region mapped; populating changes no
        // byte of it, so concurrent users of the frames see nothing.
        let r = unsafe {
            libc::madvise(
                self.base.as_ptr() as *mut libc::c_void,
                self.len,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Under Miri the region is a zeroed heap allocation, already populated.
    #[cfg(miri)]
    fn populate(&self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Region {
    #[cfg(not(miri))]
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range (after trimming) and nothing borrows it any
        // more (every handle borrows the arena, which is being dropped).
        unsafe { libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.len) };
    }

    #[cfg(miri)]
    fn drop(&mut self) {
        // SAFETY: allocated by `map` with this layout; nothing borrows it any more.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), Self::layout(self.len, self.huge)) };
    }
}

/// Elements a [`RegionSlice`] initialises at a time: the headers (or extension records) of
/// one largest buddy block, 2 MiB of data.
const INIT_CHUNK: usize = 1 << MAX_ORDER;

/// A slice living in its own [`Region`] (the memmap and page_ext arrays), initialised lazily:
/// elements `0..ready` are built, the rest is untouched mapping, and the first access to an
/// element past `ready` builds every element up to the end of its [`INIT_CHUNK`] (under a
/// lock; `deferred_init_memmap` on demand). Memory is therefore faulted in, and written, as
/// the arena uses it, and a budget far larger than what a process ever caches costs nothing
/// up front. Elements never move and, once built, stay until the slice is dropped.
struct RegionSlice<T> {
    region: Region,
    len: usize,
    init: fn(usize) -> T,
    /// Elements `0..ready` are initialised; only grows, under `grow`.
    ready: AtomicUsize,
    grow: Mutex<()>,
}

impl<T> RegionSlice<T> {
    fn new(len: usize, huge: bool, init: fn(usize) -> T) -> Result<Self, ArenaError> {
        const { assert!(std::mem::align_of::<T>() <= PAGE_SIZE) };
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(ArenaError::Map(std::io::Error::from(
                std::io::ErrorKind::OutOfMemory,
            )))?;
        let region = Region::map(bytes, huge)?;
        let s = Self {
            region,
            len,
            init,
            ready: AtomicUsize::new(0),
            grow: Mutex::new(()),
        };
        // Loom's atomics are not plain memory: build everything at once there, so that the
        // models see no lazy-initialisation steps (the slice is small under loom anyway).
        #[cfg(loom)]
        s.grow_to(len);
        Ok(s)
    }

    /// Element `i`, built first if it was not yet.
    ///
    /// # Panics
    /// If `i >= len`.
    #[inline]
    fn get(&self, i: usize) -> &T {
        assert!(
            i < self.len,
            "index {i} out of range for {} elements",
            self.len
        );
        #[cfg(not(loom))]
        // ORDERING: Acquire pairs with the Release store in `grow_to`: an element below the
        // published `ready` is fully written before we read it.
        if i >= self.ready.load(Ordering::Acquire) {
            self.grow_to(i + 1);
        }
        // SAFETY: `i < ready` (checked above, or `grow_to` made it so), so the element is
        // initialised; it lives in the region, which lives as long as `self`.
        unsafe { &*(self.region.base.as_ptr() as *const T).add(i) }
    }

    /// Elements built so far (the rest of the region was never written).
    fn ready(&self) -> usize {
        // ORDERING: Acquire, as in `get`: every element below the value is built.
        self.ready.load(Ordering::Acquire)
    }

    /// Builds every element below `end` rounded up to a whole [`INIT_CHUNK`].
    #[cold]
    fn grow_to(&self, end: usize) {
        let _g = self.grow.lock();
        let ready = self.ready.load(Ordering::Relaxed);
        if end <= ready {
            return;
        }
        let end = end.next_multiple_of(INIT_CHUNK).min(self.len);
        let base = self.region.base.as_ptr() as *mut T;
        for i in ready..end {
            // SAFETY: `i < len` elements fit in the region, whose base is page-aligned (so
            // aligned for `T`); slots past `ready` were never written nor handed out, and the
            // lock makes us their only writer.
            unsafe { base.add(i).write((self.init)(i)) };
        }
        // ORDERING: Release pairs with the Acquire loads in `get` and `ready`: the elements
        // written above are visible to whoever sees the new `ready`.
        self.ready.store(end, Ordering::Release);
    }

    fn len(&self) -> usize {
        self.len
    }

    fn as_ptr(&self) -> *const T {
        self.region.base.as_ptr() as *const T
    }
}

impl<T> std::ops::Index<usize> for RegionSlice<T> {
    type Output = T;

    #[inline]
    fn index(&self, i: usize) -> &T {
        self.get(i)
    }
}

impl<T> Drop for RegionSlice<T> {
    fn drop(&mut self) {
        let ready = self.ready.load(Ordering::Relaxed);
        let slice = std::ptr::slice_from_raw_parts_mut(self.region.base.as_ptr() as *mut T, ready);
        // SAFETY: the elements `0..ready` were initialised by `grow_to` and are dropped once,
        // here, before the region is unmapped; the others were never built.
        unsafe { std::ptr::drop_in_place(slice) };
    }
}

/// The memmap, page_ext and page allocator of one cache: owns every folio header, extension
/// record and data frame for its whole life.
///
/// Headers never move and are never freed while the arena lives, so a `&Folio` found
/// without a reference is always safe to dereference and to [`Arena::try_get`].
pub struct Arena {
    config: ArenaConfig,
    strategy: RefStrategy,
    nr_pages: u32,
    headers: RegionSlice<Folio>,
    ext: RegionSlice<FolioExt>,
    frames: Region,
    alloc: FrameAllocator,
    waits: WaitTable,
    cpu_stats: Box<[CachePadded<CpuStats>]>,
    alloc_failures: AtomicU64,
    bad_pages: AtomicU64,
    mlocked_freed: AtomicU64,
    last_bad_page: Mutex<Option<String>>,
    next_mapping: AtomicU64,
    release_hook: OnceLock<ReleaseHook>,
}

/// `__page_cache_release`: what the free path runs first for folios whose `PG_lru` is still
/// set (the final put of a folio on an LRU list): take them off the list and clear their LRU
/// flags, under one lock hold for the whole slice. Installed once by the LRU
/// ([`Arena::set_release_hook`]).
pub type ReleaseHook = Box<dyn Fn(&[&Folio]) + Send + Sync>;

// SAFETY: the only non-Sync/Send field is the data mapping's base pointer; the mapping is
// owned by the arena, and every access to its bytes follows the rules in the module docs
// (writes only by the unique lock holder of a non-uptodate folio, reads after an acquire of
// PG_uptodate, racy copies otherwise).
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena")
            .field("nr_pages", &self.nr_pages)
            .field("strategy", &self.strategy)
            .finish_non_exhaustive()
    }
}

impl Arena {
    /// `free_area_init` + `memblock_free_all`: maps the budget's frames, builds a header and an
    /// extension record per frame, and puts every frame on the free lists.
    pub fn new(config: ArenaConfig) -> Result<Self, ArenaError> {
        let pages = config.budget_bytes >> PAGE_SHIFT;
        if pages == 0 {
            return Err(ArenaError::BudgetTooSmall {
                budget_bytes: config.budget_bytes,
            });
        }
        if pages >= u32::MAX as usize {
            return Err(ArenaError::BudgetTooLarge {
                budget_bytes: config.budget_bytes,
            });
        }
        check_budget(config.budget_bytes).map_err(ArenaError::ExceedsMemory)?;
        let nr_pages = pages as u32;
        let huge = config.huge_pages;
        let frames = Region::map(pages << PAGE_SHIFT, huge)?;
        let headers = RegionSlice::new(pages, huge, |pfn| Folio::new(pfn as u32))?;
        let ext = RegionSlice::new(pages, huge, |_| FolioExt::new())?;
        let alloc = FrameAllocator::new(nr_pages, config.per_cpu_lists)
            .map_err(|_| ArenaError::Map(std::io::Error::from(std::io::ErrorKind::OutOfMemory)))?;
        let cpu_stats = (0..num_cpus())
            .map(|_| CachePadded::new(CpuStats::new()))
            .collect();
        Ok(Self {
            strategy: config.strategy,
            nr_pages,
            headers,
            ext,
            frames,
            alloc,
            waits: WaitTable::new(),
            cpu_stats,
            alloc_failures: AtomicU64::new(0),
            bad_pages: AtomicU64::new(0),
            mlocked_freed: AtomicU64::new(0),
            last_bad_page: Mutex::new(None),
            next_mapping: AtomicU64::new(1),
            release_hook: OnceLock::new(),
            config,
        })
    }

    /// `zone` parameters: the configuration the arena was built with.
    pub fn config(&self) -> &ArenaConfig {
        &self.config
    }

    /// `folio_ref_*` flavour: the refcount strategy of every folio in this arena.
    #[inline]
    pub fn strategy(&self) -> RefStrategy {
        self.strategy
    }

    /// `totalram_pages`: the number of 4 KiB frames in the budget.
    #[inline]
    pub fn nr_pages(&self) -> u32 {
        self.nr_pages
    }

    /// `pfn_folio`: the header of frame `pfn`, for lockless paths (a hint until
    /// [`Arena::try_get`] succeeds and the caller re-validates).
    ///
    /// # Panics
    /// If `pfn` is not below [`Arena::nr_pages`].
    #[inline]
    pub fn folio(&self, pfn: u32) -> &Folio {
        &self.headers[pfn as usize]
    }

    /// `page_ext_get`: the extension record of a folio (of its head frame).
    #[inline]
    pub fn ext(&self, folio: &Folio) -> &FolioExt {
        &self.ext[folio.pfn() as usize]
    }

    /// `page_ext_get` by frame: the extension record of frame `pfn` (tail records of a large
    /// folio belong to its owner while it lives).
    ///
    /// # Panics
    /// If `pfn` is not below [`Arena::nr_pages`].
    #[inline]
    pub fn ext_of(&self, pfn: u32) -> &FolioExt {
        &self.ext[pfn as usize]
    }

    /// `pfn_valid`: whether `folio` is a header of this arena.
    #[inline]
    pub fn owns(&self, folio: &Folio) -> bool {
        let base = self.headers.as_ptr() as usize;
        let p = folio as *const Folio as usize;
        p >= base && p < base + self.headers.len() * std::mem::size_of::<Folio>()
    }

    /// A fresh, nonzero id for an address space or mapping (`struct address_space *` as a
    /// number), unique within this arena.
    pub fn new_mapping_id(&self) -> u64 {
        self.next_mapping.fetch_add(1, Ordering::Relaxed)
    }

    /// `folio_try_get` on a header found without a reference: a counted reference unless the
    /// folio is free or frozen.
    ///
    /// Speculative: the folio may have been freed and reused since the caller found it, so
    /// the caller must re-check where it found it (the index slot, the page table) and drop
    /// the reference if that no longer points at this folio. That drop may be the final put
    /// of the folio's new life; the free path handles it from the folio's current state.
    #[inline]
    pub fn try_get<'a>(&'a self, folio: &'a Folio) -> Option<FolioRef<'a>> {
        debug_assert!(self.owns(folio));
        if folio.refcount().try_get(self.strategy) {
            Some(FolioRef::owned(self, folio))
        } else {
            None
        }
    }

    /// `folio_alloc`: a new folio of `2^order` pages with one reference, unlocked, not
    /// uptodate, no mapping, flags clear. Its bytes are whatever the frames held before.
    ///
    /// A request the buddy cannot satisfy first drains every CPU's free list
    /// (`drain_all_pages`) and retries, so it fails only when no suitable block is free
    /// anywhere.
    pub fn alloc(&self, order: u32) -> Result<FolioRef<'_>, AllocError> {
        if order > MAX_ORDER {
            return Err(AllocError::OrderTooLarge { order });
        }
        self.take_new(order, FrameAllocator::alloc).ok_or_else(|| {
            self.alloc_failures.fetch_add(1, Ordering::Relaxed);
            AllocError::OutOfMemory {
                order,
                free_pages: self.stats().free_pages,
            }
        })
    }

    /// `get_page_from_freelist`, the allocation attempt before reclaim: like
    /// [`Arena::alloc`] but takes only what this CPU's free list or the buddy holds, leaving
    /// blocks parked on other CPUs' lists where they are (their CPUs reuse them cache-hot).
    /// `None` is not counted as an allocation failure: the caller reclaims, then allocates
    /// with [`Arena::alloc`], which drains.
    pub(crate) fn alloc_local(&self, order: u32) -> Option<FolioRef<'_>> {
        if order > MAX_ORDER {
            return None;
        }
        self.take_new(order, FrameAllocator::alloc_local)
    }

    /// Takes blocks of `order` with `pick` until one passes `prep_new` (a bad page is
    /// reported and skipped); `None` when `pick` finds none.
    fn take_new(
        &self,
        order: u32,
        pick: impl Fn(&FrameAllocator, u32) -> Option<u32>,
    ) -> Option<FolioRef<'_>> {
        loop {
            let pfn = pick(&self.alloc, order)?;
            if let Some(f) = self.prep_new(pfn, order) {
                return Some(f);
            }
        }
    }

    /// `check_new_page` + `prep_new_page` of the block at `pfn`: the new folio, or `None` if
    /// its header shows it was written while free (a bad page, reported; the caller
    /// allocates again).
    fn prep_new(&self, pfn: u32, order: u32) -> Option<FolioRef<'_>> {
        let folio = &self.headers[pfn as usize];
        // `check_new_page`: a free folio's header must be exactly as the free path left it.
        let flags = folio.flags();
        let mapping = folio.mapping.load(Ordering::Relaxed);
        if flags & FLAGS_CHECK_AT_PREP != 0 || mapping != 0 || !folio.is_frozen(self.strategy) {
            let msg = format!(
                "BUG: Bad page state at allocation: pfn {pfn} flags {} mapping {mapping} refcount {:#x} \
                 (a free folio was written through a stale pointer)",
                describe(flags),
                folio.refcount().raw()
            );
            folio.flags.store(0, Ordering::Relaxed);
            folio.mapping.store(0, Ordering::Relaxed);
            // A live refcount on a free folio means someone holds a reference to it: leak the
            // block rather than hand it out twice (the kernel takes such pages out of use).
            let leak = !folio.is_frozen(self.strategy);
            self.bad_page(msg, || {
                if !leak {
                    self.alloc.free(pfn, order)
                }
            });
            return None;
        }
        // `prep_new_page`.
        folio.order.store(order as u8, Ordering::Relaxed);
        folio.state.store(STATE_HEAD, Ordering::Relaxed);
        folio.index.store(0, Ordering::Relaxed);
        self.ext[pfn as usize].prep();
        for tail in pfn + 1..pfn + (1 << order) {
            self.headers[tail as usize]
                .state
                .store(STATE_TAIL, Ordering::Relaxed);
            self.ext[tail as usize].prep();
        }
        self.cpu_stat().allocs[order as usize].fetch_add(1, Ordering::Relaxed);
        // `set_page_refcounted`: the Release store publishes the header writes above to any
        // later successful `try_get`.
        folio.refcount().init(self.strategy, 1);
        Some(FolioRef::owned(self, folio))
    }

    /// `__folio_put` / `free_frozen_pages`: the free path, reached only by the winner of the
    /// final put or the owner of a frozen folio. Decides everything from the header now.
    pub(crate) fn free_won(&self, folio: &Folio) {
        debug_assert!(folio.is_frozen(self.strategy), "free of a live folio");
        let pfn = folio.pfn();
        let order = folio.order();
        let state = folio.state();
        assert_eq!(
            state, STATE_HEAD,
            "free of pfn {pfn} which is not an allocated folio head (double free?)"
        );
        // The winner's refcount operation was an acquire: every holder's writes are visible.
        let mut flags = folio.flags();
        if flags & PG_LRU != 0 {
            if let Some(release) = self.release_hook.get() {
                release(&[folio]);
                flags = folio.flags();
            }
        }
        if flags & PG_MLOCKED != 0 {
            self.mlocked_freed.fetch_add(1, Ordering::Relaxed);
            flags &= !PG_MLOCKED;
        }
        let mapping = folio.mapping.load(Ordering::Relaxed);
        let mut reasons = Vec::new();
        if flags & PG_ANON == 0 && mapping != 0 {
            reasons.push(format!(
                "still in mapping {mapping} at index {}",
                folio.index()
            ));
        }
        if flags & FLAGS_CHECK_AT_FREE != 0 {
            reasons.push(format!(
                "PAGE_FLAGS_CHECK_AT_FREE flag(s) set: {}",
                describe(flags & FLAGS_CHECK_AT_FREE)
            ));
        }
        if let Some(r) = self.ext[pfn as usize].check_at_free() {
            reasons.push(r.to_string());
        }
        // Sanitise, whatever we found (the kernel clears PAGE_FLAGS_CHECK_AT_PREP after
        // reporting): the folio is freed anyway.
        folio.flags.store(0, Ordering::Relaxed);
        folio.mapping.store(0, Ordering::Relaxed);
        folio.index.store(0, Ordering::Relaxed);
        folio.private.store(0, Ordering::Relaxed);
        folio.state.store(STATE_FREE, Ordering::Relaxed);
        for tail in pfn + 1..pfn + (1 << order) {
            self.headers[tail as usize]
                .state
                .store(STATE_FREE, Ordering::Relaxed);
        }
        self.cpu_stat().frees[order as usize].fetch_add(1, Ordering::Relaxed);
        let release = || self.alloc.free(pfn, order);
        if reasons.is_empty() {
            release();
        } else {
            let msg = format!(
                "BUG: Bad page state: pfn {pfn} order {order} flags {} mapping {mapping}: {}",
                describe(flags),
                reasons.join("; ")
            );
            self.bad_page(msg, release);
        }
    }

    /// `folios_put` for frozen folios (truncation): runs the [`ReleaseHook`] once for all of
    /// them still on an LRU list, then frees each (`free_unref_folios`), so a batch costs the
    /// LRU one lock hold instead of one per folio.
    pub fn free_frozen_batch<'a>(&'a self, folios: Vec<FrozenFolio<'a>>) {
        if let Some(release) = self.release_hook.get() {
            let on_lru: Vec<&Folio> = folios
                .iter()
                .map(|f| f.folio())
                .filter(|f| f.flags() & PG_LRU != 0)
                .collect();
            if !on_lru.is_empty() {
                release(&on_lru);
            }
        }
        drop(folios);
    }

    /// Installs the LRU's [`ReleaseHook`], run by the free path for folios still on a list.
    /// Returns false (and drops `hook`) if one is installed already.
    pub fn set_release_hook(&self, hook: ReleaseHook) -> bool {
        self.release_hook.set(hook).is_ok()
    }

    /// `bad_page`: counts and records the report, runs `release` (the folio is freed anyway),
    /// then panics if the configuration asks for it.
    #[cold]
    fn bad_page(&self, msg: String, release: impl FnOnce()) {
        self.bad_pages.fetch_add(1, Ordering::Relaxed);
        *self.last_bad_page.lock() = Some(msg.clone());
        release();
        if self.config.panic_on_bad_page && !crate::mm::sync::thread::panicking() {
            panic!("{msg}");
        }
    }

    /// The last bad-page report, if any (the kernel's `dump_page` output, in one line).
    pub fn last_bad_page(&self) -> Option<String> {
        self.last_bad_page.lock().clone()
    }

    #[inline]
    fn cpu_stat(&self) -> &CpuStats {
        &self.cpu_stats[current_cpu() % self.cpu_stats.len()]
    }

    /// Threads sleeping in the folio wait table right now (`folio_wait_table` occupancy), for
    /// tests and diagnostics.
    pub fn wait_table_sleepers(&self) -> usize {
        self.waits.sleepers()
    }

    #[inline]
    pub(crate) fn waits(&self) -> &WaitTable {
        &self.waits
    }

    /// Takes a task's registration out of the wait table (a future dropped, or done waiting,
    /// while [`FolioRef::poll_unlocked`] left one in `slot`).
    #[inline]
    pub(crate) fn cancel_wait(&self, slot: &mut Option<TaskWait>) {
        if slot.is_some() {
            self.waits.cancel(slot);
        }
    }

    /// Hints the CPU to start loading the first cache lines of frame `pfn` (a lookup that is
    /// about to hand the folio to a reader calls it before taking its reference, so that the
    /// data's first misses overlap the header's). A hint only: no access happens. On a
    /// random 4 KiB hit over a 64 MiB cache (`benches/cache.rs`, the quietest of 6 runs each)
    /// `read_at` went from 421 ns to 322 ns and `get_folio` from 91 ns to 80 ns.
    #[inline]
    pub(crate) fn prefetch_data(&self, pfn: u32) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if pfn < self.nr_pages {
            let p = self.frame_ptr(pfn);
            for line in 0..4 {
                // SAFETY: a prefetch never faults and reads nothing architecturally; the
                // address is inside the mapping anyway.
                unsafe {
                    core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                        p.add(line * 64) as *const i8,
                    )
                };
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = pfn;
    }

    /// The first byte of frame `pfn`.
    #[inline]
    pub(crate) fn frame_ptr(&self, pfn: u32) -> *mut u8 {
        assert!(pfn < self.nr_pages);
        // SAFETY: pfn < nr_pages, so the offset is inside the mapping.
        unsafe { self.frames.base.as_ptr().add((pfn as usize) << PAGE_SHIFT) }
    }

    /// `drain_all_pages`: returns every folio parked on a per-CPU free list to the buddy
    /// lists (they merge again). Allocation does this itself before failing.
    pub fn drain_per_cpu_lists(&self) {
        self.alloc.drain_all();
    }

    /// Marks a background reclaimer at work (`set_reclaim_active`) until the guard is
    /// dropped: meanwhile frees park only a few pages per CPU, so what it frees is there for
    /// every CPU's next allocation instead of waiting on its own CPU's list.
    pub(crate) fn reclaim_active(&self) -> ReclaimActive<'_> {
        self.alloc.set_reclaim_active(true);
        ReclaimActive(self)
    }

    /// Whether a [`Arena::reclaim_active`] guard is alive.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn reclaim_is_active(&self) -> bool {
        self.alloc.reclaim_is_active()
    }

    /// `/proc/vmstat` + `/proc/buddyinfo`: a snapshot of the accounting (exact when no
    /// allocation or free runs concurrently).
    pub fn stats(&self) -> ArenaStats {
        let mut s = ArenaStats {
            total_pages: self.nr_pages as u64,
            alloc_failures: self.alloc_failures.load(Ordering::Relaxed),
            bad_pages: self.bad_pages.load(Ordering::Relaxed),
            mlocked_freed: self.mlocked_freed.load(Ordering::Relaxed),
            ..ArenaStats::default()
        };
        for o in 0..NR_ORDERS {
            let (mut a, mut f) = (0u64, 0u64);
            for c in self.cpu_stats.iter() {
                a += c.allocs[o].load(Ordering::Relaxed);
                f += c.frees[o].load(Ordering::Relaxed);
            }
            s.allocations += a;
            s.frees += f;
            // Counters of different CPUs are read at slightly different times.
            s.allocated_folios[o] = a.saturating_sub(f);
            s.allocated_pages += s.allocated_folios[o] << o;
        }
        s.free_pages = s.total_pages.saturating_sub(s.allocated_pages);
        s
    }

    /// Faults in every data frame of the budget now (`MADV_POPULATE_WRITE`, Linux 5.14 or
    /// later), as `MAP_POPULATE` would have at `mmap`: the first use of each frame then pays no
    /// page fault. Contents and accounting are untouched, so it may run at any time; it takes
    /// as long as writing the whole budget once. Fails with the system's error where the
    /// kernel lacks the advice (`EINVAL`) or the memory cannot be had (`ENOMEM`).
    pub fn populate(&self) -> std::io::Result<()> {
        self.frames.populate()
    }

    /// `check_pages`-style self-check: recomputes the accounting from scratch and checks it
    /// against the counters: every frame
    /// is exactly one of free (in the buddy or per-CPU lists, header sanitised and frozen) or
    /// part of one allocated folio (head + tails, head live); the per-order counts and free
    /// pages match; nobody sleeps in the wait table. Call it when nothing allocates or frees.
    pub fn validate(&self) -> Result<ArenaStats, String> {
        let stats = self.stats();
        let blocks = self.alloc.free_blocks()?;
        // Frames past `grown` were never listed, so never allocated: free. Only those below
        // `n` can hold anything else.
        let n = self.alloc.grown() as usize;
        // Headers built so far (an allocation, or a lookup by pfn, builds them): the free
        // frames among them must look free; the others were never written.
        let built = self.headers.ready();
        let check_free = |p: usize| -> Result<(), String> {
            if p >= built {
                return Ok(());
            }
            let h = &self.headers[p];
            if h.state() != STATE_FREE {
                return Err(format!("free frame {p} has state {}", h.state()));
            }
            if h.flags() != 0 || h.mapping.load(Ordering::Relaxed) != 0 {
                return Err(format!("free frame {p} not sanitised: {h:?}"));
            }
            if !h.is_frozen(self.strategy) {
                return Err(format!("free frame {p} has a live refcount: {h:?}"));
            }
            Ok(())
        };
        let mut free = vec![false; n];
        let mut free_pages = (self.nr_pages as usize - n) as u64;
        for p in n..built {
            check_free(p)?;
        }
        for &(pfn, order) in &blocks {
            for p in pfn..pfn + (1 << order) {
                if p as usize >= n {
                    return Err(format!("free frame {p} is listed past the grown {n}"));
                }
                if std::mem::replace(&mut free[p as usize], true) {
                    return Err(format!("frame {p} is on two free lists"));
                }
                check_free(p as usize)?;
            }
            free_pages += 1 << order;
        }
        let mut folios = [0u64; NR_ORDERS];
        let mut pfn = 0usize;
        while pfn < n {
            if free[pfn] {
                pfn += 1;
                continue;
            }
            let h = &self.headers[pfn];
            if h.state() != STATE_HEAD {
                return Err(format!("frame {pfn} neither free nor a folio head: {h:?}"));
            }
            let order = h.order() as usize;
            if pfn % (1 << order) != 0 || pfn + (1 << order) > n {
                return Err(format!("folio at {pfn} of order {order} misaligned"));
            }
            if h.is_frozen(self.strategy) {
                return Err(format!(
                    "allocated folio {pfn} is frozen but not freed: {h:?}"
                ));
            }
            let tails = pfn + 1..pfn + (1 << order);
            if let Some(t) = tails
                .clone()
                .find(|&t| free[t] || self.headers[t].state() != STATE_TAIL)
            {
                return Err(format!("tail {t} of folio {pfn} is not a tail"));
            }
            folios[order] += 1;
            pfn += 1 << order;
        }
        if folios != stats.allocated_folios {
            return Err(format!(
                "allocated folios per order: counted {folios:?}, stats say {:?}",
                stats.allocated_folios
            ));
        }
        if free_pages != stats.free_pages {
            return Err(format!(
                "free pages: counted {free_pages}, stats say {}",
                stats.free_pages
            ));
        }
        let sleepers = self.waits.sleepers();
        if sleepers != 0 {
            return Err(format!(
                "{sleepers} threads or tasks still registered in the wait table"
            ));
        }
        Ok(stats)
    }
}

/// The guard of [`Arena::reclaim_active`].
pub(crate) struct ReclaimActive<'a>(&'a Arena);

impl Drop for ReclaimActive<'_> {
    fn drop(&mut self) {
        self.0.alloc.set_reclaim_active(false);
    }
}

#[cfg(all(test, not(loom)))]
mod region_tests {
    use super::*;

    #[test]
    fn huge_regions_start_on_a_huge_page_and_small_ones_on_a_page() {
        for len in [1, PAGE_SIZE, HUGE_SIZE + 12_345, 5 * HUGE_SIZE] {
            let r = Region::map(len, true).unwrap();
            assert_eq!(r.base.as_ptr() as usize % HUGE_SIZE, 0, "len {len}");
            assert!(r.len >= len && r.len % PAGE_SIZE == 0);
            // Every byte is usable (the trimming kept the whole length).
            // SAFETY: inside the mapping.
            unsafe { r.base.as_ptr().add(r.len - 1).write(7) };
            let s = Region::map(len, false).unwrap();
            assert_eq!(s.base.as_ptr() as usize % PAGE_SIZE, 0);
        }
    }

    #[test]
    fn region_slices_build_elements_on_first_access_and_drop_those_built() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct D(usize);
        impl Drop for D {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::Relaxed);
            }
        }
        let len = 3 * INIT_CHUNK + 100;
        let s = RegionSlice::new(len, true, D).unwrap();
        assert_eq!(s.ready(), 0, "nothing is built up front");
        assert_eq!(s[5].0, 5);
        assert_eq!(s.ready(), INIT_CHUNK, "one chunk built");
        assert_eq!(s[len - 1].0, len - 1);
        assert_eq!(s.ready(), len, "the last chunk is partial");
        assert!((0..len).all(|i| s[i].0 == i));
        drop(s);
        assert_eq!(DROPS.load(Ordering::Relaxed), len);
        let t = RegionSlice::new(len, false, D).unwrap();
        assert_eq!(t[INIT_CHUNK].0, INIT_CHUNK);
        drop(t);
        assert_eq!(DROPS.load(Ordering::Relaxed), len + 2 * INIT_CHUNK);
    }

    #[test]
    fn a_new_arena_builds_metadata_only_for_the_frames_it_uses() {
        // Regression: `Arena::new` built every header and extension record and listed every
        // frame in the buddy up front, about 141 bytes written per page of budget.
        // 1 GiB; 16 MiB under Miri, which would interpret the zeroing of the whole mapping
        // and the building of every header (it ran for over 50 minutes).
        let budget = if cfg!(miri) { 16 << 20 } else { 1 << 30 };
        let a = Arena::new(ArenaConfig::new(budget, RefStrategy::LockedBit)).unwrap();
        let n = a.nr_pages() as usize;
        assert!(n > 4 * INIT_CHUNK);
        assert_eq!(
            (a.headers.ready(), a.ext.ready(), a.alloc.grown()),
            (0, 0, 0)
        );
        let folios: Vec<_> = (0..3).map(|_| a.alloc(MAX_ORDER).unwrap()).collect();
        let small = a.alloc(0).unwrap();
        assert!(a.alloc.grown() as usize <= 4 * INIT_CHUNK);
        assert!(a.headers.ready() <= 4 * INIT_CHUNK && a.ext.ready() <= 4 * INIT_CHUNK);
        let st = a.validate().unwrap();
        assert_eq!(st.total_pages, n as u64, "the budget is all there");
        assert_eq!(st.free_pages, (n - 3 * INIT_CHUNK - 1) as u64);
        // A lookup by frame number past what was built builds it, as a free frame.
        let last = a.folio(n as u32 - 1);
        assert_eq!(last.pfn(), n as u32 - 1);
        assert!(last.is_frozen(a.strategy()) && a.try_get(last).is_none());
        assert_eq!(a.headers.ready(), n);
        drop((folios, small));
        a.drain_per_cpu_lists();
        assert_eq!(a.validate().unwrap().free_pages, n as u64);
    }

    #[test]
    fn an_arena_without_huge_pages_works_the_same() {
        let mut c = ArenaConfig::new(64 * PAGE_SIZE, RefStrategy::LockedBit);
        c.huge_pages = false;
        let a = Arena::new(c).unwrap();
        assert_eq!(a.nr_pages(), 64);
    }
}
