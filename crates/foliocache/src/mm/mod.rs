//! The mechanisms the cache is built from, public for kernel and systems engineers and for
//! the lab: each of the five patch threads' subjects exists here twice, the kernel's vanilla
//! behaviour and the patch's improvement, selectable at run time through [`Experiment`].
//!
//! A storage engine needs none of this: the crate root ([`FolioCache`](crate::FolioCache),
//! [`CachedFile`](crate::CachedFile), [`Config`](crate::Config)) is the whole user API. What
//! is here can be used on its own (an [`Arena`](folio::Arena) with an [`Index`](index::Index)
//! and an [`Lru`](lru::Lru), a [`space::Space`] for copy-on-write experiments), but a
//! [`FolioCache`](crate::FolioCache) never hands out its own instances, so nothing here can
//! break a cache's invariants from safe code. The `unsafe fn`s (raw folio references, the
//! racy variants the loom models must catch) say what their callers promise.
//!
//! | module | mechanism | kernel model |
//! |---|---|---|
//! | [`sync`] | atomics, locks, threads; std or loom | — |
//! | [`filetable`] | resizable hash of open files; each lookup pins the table with an `immutable`, `atomic`, `percpu` or `percpu-fast` reference (seed 003) | futex private hash: `futex_hash`, `futex_hash_allocate`, `__futex_pivot_hash` |
//! | [`percpu_counter`] | a counter in per-CPU slots folded in batches, exact near a limit; a limit a charge may wait under (the cache's pinned pages) | `lib/percpu_counter.c`: `percpu_counter_add_batch`, `__percpu_counter_compare` |
//! | [`percpu_ref`] | per-thread reference counts with a grace-period switch to one atomic; kill, wait-for-zero, re-arm (seed 003) | `lib/percpu-refcount.c`, `futex_ref_get`/`futex_ref_put`/`futex_ref_drop` |
//! | [`rcu`] | read sections with no shared atomic, grace periods via `membarrier(2)`, `call_rcu` | RCU (`rcu_read_lock`, `synchronize_rcu`, `call_rcu`), liburcu memb |
//! | [`refcount`] | folio reference count: cas-loop, optimistic, locked-bit | `include/linux/page_ref.h`: `folio_try_get`, `folio_put_testzero`, `folio_ref_freeze` |
//! | [`folio`] | folio header and flags, the arena (memmap + buddy allocator + per-CPU lists), folio lock and wait table, bad-page check | `struct folio`, `mm/page_alloc.c`, `folio_lock`, `free_pages_prepare` |
//! | [`index`] | per-file XArray-like radix tree: lockless RCU lookup with speculative `try_get` + re-check, one-folio and batched range insertion (seed 001), delete, evict, truncate, invalidate; shadow entries and the shadow-node shrinker | `filemap_get_entry`, `__filemap_add_folio`, `filemap_add_folio_range`, `page_cache_delete`, `__remove_mapping` |
//! | [`lru`] | active/inactive lists under one lock, per-CPU add batches of 31, drain-time dead-folio filter (seed 004), reclaim under the budget, workingset detection (shadow entries, refault activation) | `mm/swap.c`: `folio_add_lru`, `folio_batch_move_lru`, `lru_add_drain_all`; `mm/vmscan.c`: `shrink_lruvec`; `mm/workingset.c` |
//! | [`errseq`] | the writeback error sequence: one word per file, each reader told of an error once | `lib/errseq.c` |
//! | `filemap` | the address space: a file's index, `i_size`, backing, writeback state and error sequence, large-folio flag, `invalidate_lock`; what readahead and writeback take | `struct address_space` |
//! | [`readahead`] | the on-demand window, batched (seed 001) or one-by-one folio insertion | `mm/readahead.c` |
//! | the root | [`FolioCache`](crate::FolioCache): inodes that outlive their handles, open files, `read_at` (pread), `write_at` (pwrite), `set_len`, syncs, pinned and writable folio guards, readahead, invalidate, statistics | `filemap_read`, `filemap_get_pages`, `generic_perform_write`, `fs/inode.c` |
//! | [`writeback`] | dirty and writeback tags, `writepages`, dirty throttling, the error sequence (`errseq_t`) | `mm/page-writeback.c`, `lib/errseq.c` |
//! | [`rmap`] | the sharer state a folio header carries: mapcounts, rmap IDs and sub-IDs, the exclusivity test, per tracking strategy (seed 002); below `folio`, so nothing under `space` imports it | `folio_mapcount`, RFC `rmap_id.c` |
//! | [`space`] | address spaces over the folios: page tables, fork, COW with exact mapped-shared detection | `rmap.c`, `memory.c` (seed 002) |
//! | [`seqcount`] | atomic seqcount: concurrent adding writers, exclusive fast path | RFC `atomic_seqcount.h` (seed 002) |
//!
//!
//! # Layers
//!
//! Each module imports only from the modules listed before it, and nothing here imports from
//! the cache above (the root's [`FolioCache`](crate::FolioCache), which uses all of them):
//!
//! | layer | modules | imports |
//! |---|---|---|
//! | 0 | [`sync`] | std or loom |
//! | 1 | [`rcu`], [`refcount`], [`seqcount`], [`percpu_counter`], [`errseq`], `stats` (the counter-set macro) | `sync` |
//! | 2 | [`percpu_ref`], [`rmap`] | `rcu`; `seqcount` |
//! | 3 | [`filetable`] | `percpu_ref`, `rcu` |
//! | 4 | [`folio`] | `refcount`, `rmap` |
//! | 5 | [`index`], [`space`] | `folio`, `rcu`, `refcount`; `folio`, `refcount`, `rmap` |
//! | 6 | [`lru`] | `index`, `folio`, `refcount` |
//! | 7 | `filemap` | `index`, `folio`, `errseq`, [`io`](crate::io) |
//! | 8 | [`writeback`], [`readahead`] | `filemap`, `index`, `folio`, [`io`](crate::io) |
//! | 9 | [`Experiment`] | the variant enums of `refcount`, `readahead`, `filetable`, `lru` |
//!
//! The cache reaches back down only through traits these layers define and it implements:
//! [`lru::Evict`] for reclaim, readahead's host trait (allocation, what follows an
//! insertion, counters) for filling a window, and writeback's (the dirty accounting, the
//! error policy, the LRU's rotation) for a pass. A file reaches them as its
//! `filemap::AddressSpace`, which the cache's inode owns.
//!
//! `tests/layers.rs` reads this table from here and checks every `crate::` and `super::`
//! path of every library file against it (inline paths and grouped `use`s included, the
//! trailing test module left out): a module may name only modules of lower layers,
//! [`io`](crate::io) and the root's leaves (`variant`, `trace`), and nothing here names the
//! cache.
//!
//! Below every layer here sits [`io`](crate::io), the I/O layer (the backing trait, the file
//! backing, fault injection, the run-reading rules): it imports only [`sync`], and a user may
//! implement its [`Backing`](crate::io::Backing).

pub mod errseq;
pub mod experiment;
pub(crate) mod filemap;
pub mod filetable;
pub mod folio;
pub mod index;
pub mod lru;
pub mod percpu_counter;
pub mod percpu_ref;
pub mod rcu;
pub mod readahead;
pub mod refcount;
pub mod rmap;
pub mod seqcount;
pub mod space;
mod stats;
pub mod sync;
pub mod writeback;
pub use experiment::Experiment;
