//! # foliocache
//!
//! A userspace page cache built the way Linux builds its own, and the mechanisms of five Linux
//! memory-management patch threads that make it scale, each implemented twice (the kernel's
//! vanilla behaviour and the patch's improvement) and selectable at run time.
//!
//! ```
//! use foliocache::{Config, FolioCache, InsertMode, RefStrategy};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("db.sst");
//! # std::fs::write(&path, (0..1_000_000u32).map(|i| i as u8).collect::<Vec<_>>())?;
//! // A cache with a 64 MiB budget, the seed-000 refcount and the seed-001 readahead insertion.
//! let cache = FolioCache::new(
//!     Config::new(64 << 20)
//!         .strategy(RefStrategy::LockedBit)
//!         .insert_mode(InsertMode::Batched),
//! )?;
//!
//! // Many threads, each with its own handle (its own readahead stream), read the same file.
//! std::thread::scope(|s| {
//!     for t in 0..4u64 {
//!         let file = cache.open(&path).unwrap();
//!         s.spawn(move || {
//!             let mut buf = [0u8; 8192];
//!             let n = file.read_at(&mut buf, t * 100_000).unwrap(); // pread semantics
//!             assert_eq!(n, 8192);
//!             assert_eq!(buf[0], (t * 100_000) as u8);
//!         });
//!     }
//! });
//!
//! // Zero-copy access: pin exactly the bytes of a 16 KiB block and read them in place.
//! let file = cache.open(&path)?;
//! let block = file.get_range(2 * 16384, 16384)?;
//! let bytes: Vec<u8> = block.slices().flatten().copied().collect();
//! assert_eq!(bytes[0], (2 * 16384) as u8);
//! println!("{:?}", cache.stats());
//! # Ok(()) }
//! ```
//!
//! # Pages, folios and offsets
//!
//! Every offset in the API is a byte offset in the file. The cache holds a file in *pages* of
//! [`PAGE_SIZE`] (4 KiB) bytes, page `i` holding the bytes from offset `i * PAGE_SIZE`, and
//! keeps pages in *folios*: runs of 1, 2, 4, ... 512 pages starting at an offset that is a
//! multiple of their size, each pinned, counted and evicted as one. Misses fill folios as
//! large as the read (or readahead window) and its alignment allow
//! ([`Config::max_folio_order`]), so a block read at a multiple of its size lands in one
//! folio and [`CachedFile::get_range`] gives it as one slice
//! ([`PinnedRange::as_slice`]); a range across folios is a guard over several
//! ([`PinnedRange::slices`], [`PinnedRange::copy_to`]). [`CachedFile::get_folio_at`] pins the
//! whole folio holding a byte; its bytes start at [`PinnedFolio::offset`].
//!
//! | module | mechanism | kernel model |
//! |---|---|---|
//! | [`sync`] | atomics, locks, threads; std or loom | — |
//! | [`filetable`] | resizable hash of open files; each lookup pins the table with an `immutable`, `atomic`, `percpu` or `percpu-fast` reference (seed 003) | futex private hash: `futex_hash`, `futex_hash_allocate`, `__futex_pivot_hash` |
//! | [`percpu_ref`] | per-thread reference counts with a grace-period switch to one atomic; kill, wait-for-zero, re-arm (seed 003) | `lib/percpu-refcount.c`, `futex_ref_get`/`futex_ref_put`/`futex_ref_drop` |
//! | [`rcu`] | read sections with no shared atomic, grace periods via `membarrier(2)`, `call_rcu` | RCU (`rcu_read_lock`, `synchronize_rcu`, `call_rcu`), liburcu memb |
//! | [`refcount`] | folio reference count: cas-loop, optimistic, locked-bit | `include/linux/page_ref.h`: `folio_try_get`, `folio_put_testzero`, `folio_ref_freeze` |
//! | [`backing`] | positional reads of the file behind a cache (`pread`/`preadv`), fault injection | `->read_folio`, `read_pages` |
//! | [`folio`] | folio header and flags, the arena (memmap + buddy allocator + per-CPU lists), folio lock and wait table, bad-page check | `struct folio`, `mm/page_alloc.c`, `folio_lock`, `free_pages_prepare` |
//! | [`index`] | per-file XArray-like radix tree: lockless RCU lookup with speculative `try_get` + re-check, one-folio and batched range insertion (seed 001), delete, evict, truncate, invalidate; shadow entries and the shadow-node shrinker | `filemap_get_entry`, `__filemap_add_folio`, `filemap_add_folio_range`, `page_cache_delete`, `__remove_mapping` |
//! | [`lru`] | active/inactive lists under one lock, per-CPU add batches of 31, drain-time dead-folio filter (seed 004), reclaim under the budget, workingset detection (shadow entries, refault activation) | `mm/swap.c`: `folio_add_lru`, `folio_batch_move_lru`, `lru_add_drain_all`; `mm/vmscan.c`: `shrink_lruvec`; `mm/workingset.c` |
//! | [`readahead`] | the on-demand window, batched (seed 001) or one-by-one folio insertion, large folios sized by the window and the alignment | `mm/readahead.c`: `page_cache_ra_order` |
//! | [`cache`] | [`FolioCache`]: inodes that outlive their handles, open files, `read_at` (pread), `write_at` (pwrite), `set_len`, syncs, pinned and writable folio guards, readahead, invalidate, statistics | `filemap_read`, `filemap_get_pages`, `generic_perform_write`, `fs/inode.c` |
//! | [`writeback`] | dirty and writeback tags, `writepages`, dirty throttling, the error sequence (`errseq_t`) | `mm/page-writeback.c`, `lib/errseq.c` |
//! | [`rmap`] | the sharer state a folio header carries: mapcounts, rmap IDs and sub-IDs, the exclusivity test, per tracking strategy (seed 002); below `folio`, so nothing under `space` imports it | `folio_mapcount`, RFC `rmap_id.c` |
//! | [`space`] | address spaces over the folios: page tables, fork, COW with exact mapped-shared detection | `rmap.c`, `memory.c` (seed 002) |
//! | [`seqcount`] | atomic seqcount: concurrent adding writers, exclusive fast path | RFC `atomic_seqcount.h` (seed 002) |
//!
//! Next steps: the `examples/` directory (`read_file`: many threads, one file;
//! `pinned_folio`: zero-copy reads; `small_budget`: data eight times the budget, reclaim;
//! `cow_snapshot`: `fork` and copy-on-write), [`FolioCache::vmstat`] for every counter as
//! `/proc/vmstat` lines, and the `foliocache-lab` binary, which measures each mechanism
//! against the kernel's vanilla behaviour and the cache against quick_cache, moka and the
//! kernel's page cache (`foliocache-lab all`).
//!
//! The crate is being built issue by issue; the table grows with it (see the README).

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod backing;
#[cfg(not(loom))]
pub mod cache;
pub mod filetable;
pub mod folio;
pub mod index;
#[cfg(all(test, loom))]
mod loom_tests;
pub mod lru;
pub mod percpu_ref;
pub mod rcu;
pub mod readahead;
pub mod refcount;
pub mod rmap;
pub mod seqcount;
pub mod space;
pub mod sync;
pub mod writeback;

#[cfg(not(loom))]
pub use cache::{
    CacheError, CacheStats, CachedFile, Config, ConfigError, FolioCache, FolioMut, OpenOptions,
    OwnedFolio, OwnedRange, PinnedFolio, PinnedRange, BLOCK_CACHE_INACTIVE_RATIO,
};
/// The page size, 4 KiB: a file is cached in pages of this many bytes, page `i` holding
/// bytes `i * PAGE_SIZE ..`; a folio holds 1, 2, 4, ... 512 consecutive pages.
pub use folio::PAGE_SIZE;
pub use readahead::InsertMode;
pub use refcount::RefStrategy;
pub use writeback::WbErrorPolicy;
