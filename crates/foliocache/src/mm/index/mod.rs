//! The page-cache index of one file: an XArray-like radix tree from page offsets to folios
//! (`mapping->i_pages`; `filemap_get_entry`, `__filemap_add_folio`, the seed's
//! `filemap_add_folio_range`, `page_cache_delete`, `__remove_mapping`,
//! `truncate_inode_pages_range` and `invalidate_mapping_pages` in `mm/filemap.c`,
//! `mm/vmscan.c` and `mm/truncate.c`; the tree itself after `lib/xarray.c`).
//!
//! # The tree
//!
//! Nodes of 64 slots; a node of `shift` s covers `64 << s` indices and its slot `i` the
//! indices `base + i << s ..`. The root covers `0 .. 64 << root.shift` and grows by adding a
//! level on top (old root in slot 0) when a larger index arrives, and shrinks again when only
//! slot 0 of the root is used. A slot word is one of:
//!
//! | word | entry |
//! |---|---|
//! | `0` | empty |
//! | `pfn << 2 \| 1` | a folio (its head frame in the arena) |
//! | `node \| 2` | a child node |
//! | `offset << 2 \| 3` | sibling: part of the multi-index entry whose canonical slot is `offset` in this node |
//! | `v << 2`, `v != 0` | value entry: a shadow left by reclaim ([`Shadow`]), read as "not cached" |
//!
//! A folio of order `o` (aligned to `2^o` pages, as the kernel requires) is stored at the
//! level whose shift is `6 * floor(o / 6)`, in `2^(o - shift)` consecutive slots: the first
//! holds the folio, the others sibling entries pointing back at it. A lookup of any index the
//! folio covers lands on it. Orders `0..=9` therefore use leaf slots (orders 0 to 5) or slots
//! one level up (orders 6 to 9).
//!
//! # Locking and lifetimes
//!
//! Writers (insert, delete, evict, truncate) hold the index lock (`xa_lock`), a mutex that
//! also holds the spare nodes and the counters. Readers take no lock: inside an RCU read
//! section ([`crate::mm::rcu`]) they load the root and walk the slots with acquire loads. Nodes
//! unlinked from the tree are freed with `call_rcu`, after every reader that could still be
//! inside them has left. Folios are never freed by the tree: the index owns `nr_pages`
//! references on each folio it holds (`folio_ref_add` in `__filemap_add_folio`), dropped after
//! the entry is cleared.
//!
//! Lock order: folio lock → index lock. (Insertion takes locked folios; delete and evict are
//! called by the folio lock holder.)
//!
//! # The speculative-reference protocol (the hard part)
//!
//! ```text
//! lookup(i):  rcu_read_lock
//!   repeat:   w = slot(i)                 (walk, acquire loads)
//!             folio = arena.folio(pfn(w))  (type-stable: always dereferenceable)
//!             try_get(folio)?  no → frozen or free: being removed; goto repeat
//!             slot(i) == w?    no → put (maybe the final put of a recycled folio); goto repeat
//!             folio still ours and contains i?  no → put; goto repeat
//!             return folio    (a reference on the folio that was at i when we re-checked)
//! ```
//!
//! `try_get` alone proves nothing: the folio may have been deleted, freed and reallocated to
//! another file (or the same file at another index) between the slot load and the get. The
//! re-check closes that: the slot still holding the same folio after our reference exists
//! means the folio was in the cache at `i` at that instant, and our reference keeps it from
//! being freed after. The reload starts again from `i`'s own slot and follows a sibling again
//! (`xas_reload`), and then the folio, now pinned, must still carry this mapping and cover `i`
//! (`folio_contains`): re-checking only the canonical slot of a multi-index entry is not
//! enough, because between the reader's load of a sibling and its load of the canonical slot
//! the large folio can be deleted and a small folio inserted at its first index (the stress
//! test found exactly that). A failed re-check drops the reference, and that put can be the *final*
//! put of the folio's new life (its new owner dropped theirs in between); the arena's free
//! path then frees it from its current state, which is why it never trusts the caller.
//!
//! Removers pair with lookups by freezing (`__remove_mapping`): under the index lock, with the
//! folio locked, [`Index::evict`] freezes the count at exactly `nr_pages + 1` (the cache's
//! references plus the caller's isolating one). Freeze and `try_get` are RMWs on the same
//! word, so either the getter came first (the freeze fails: the folio is in use and stays) or
//! the freeze did (the getter fails, retries, and finds the slot cleared, or holding the
//! folio's shadow: [`Index::evict_with_shadow`], reclaim's eviction, stores the value entry
//! only once the freeze has succeeded; see `index/shadow.rs`). A folio pinned by a
//! reader is never freed under it: [`Index::invalidate`] reports it busy and leaves it;
//! [`Index::truncate`] detaches it (removes it from the index, drops the cache's references)
//! and the reader's final put frees it later.
//!
//! # Batched insertion (seed 001)
//!
//! [`Index::add_folio`] inserts one folio per lock hold (`filemap_add_folio`); readahead that
//! uses it takes the lock once per folio. [`Index::add_folio_range`] inserts a whole batch of
//! consecutive folios under one lock hold with the seed's semantics: it stops at the first
//! occupied index (or invalid folio), returns how many *pages* it inserted if any, else the
//! error, and leaves the rest of the batch to the caller. Nodes are allocated outside the lock
//! (`xas_nomem`): before locking, the inserter tops up a small stash of spare nodes to what the
//! batch will probably need; if the tree needs more than the stash holds, it unlocks, allocates
//! exactly what is missing (plus slack), and re-locks, keeping what it already inserted. No
//! tree change is made before the nodes a step needs are in hand, so a retry never leaves a
//! half-built path. [`IndexStats::lock_acquisitions`] counts every acquisition, so the lab can
//! report acquisitions per inserted page.
//!
//! # Splitting
//!
//! [`Index::split_folio`] replaces a large folio's multi-index entry with one order-0 entry
//! per page under one lock hold (for orders 6 to 9, one new leaf node per slot the entry
//! used, published complete by its Release store): the caller supplies the pages, already
//! holding the large folio's bytes. Sibling slots are rewritten before the canonical one, so
//! a lockless reader either finds its own page's new folio or re-checks its way off the old
//! one (the slot it loaded no longer holds it). The old folio leaves the mapping and loses the
//! cache's references; a reader that pinned it keeps a consistent copy until it lets go. The
//! kernel splits in place after freezing the folio (`__split_huge_page`); a copy cannot fail
//! because of a pin, which is this cache's common case (a pinned block), and costs one copy
//! of the folio, paid only by a write or a truncation inside it.
//!
//! # Why it is fast
//!
//! A hit is an RCU read section (no shared write), two to four dependent slot loads, one
//! refcount RMW on the folio and one reload of the slot: no lock, no write to the tree. An
//! insertion batch of 32 pages costs one lock acquisition instead of 32, and the lock's cache
//! line moves between CPUs once instead of 32 times.
//!
//! # Files
//!
//! `lookup.rs` (the lockless read side), `insert.rs` (insertion under the lock, seed 001's
//! range insertion), `remove.rs` (delete, replace, split, evict, truncate, invalidate),
//! `shadow.rs` (shadow entries and the shadow-node shrinker), `node.rs` (the node layout),
//! `validate.rs` (statistics and the consistency check); this file holds the types, the
//! lock and the construction.

// Spare nodes are `Vec<Box<Node>>`: each is later published by pointer (`Box::into_raw`) and
// freed on its own after a grace period, so each needs its own allocation.
#![allow(clippy::vec_box)]

mod insert;
mod lookup;
mod node;
mod remove;
mod shadow;
mod validate;

use std::fmt;

use node::{span, Entry, Node, CHUNK_SHIFT, FANOUT};
use shadow::{slots_of, ShadowList};
pub use shadow::{Shadow, ShadowNodes};

use crate::mm::folio::{Arena, Folio, FolioLocked, FolioRef, FrozenFolio};
use crate::mm::rcu::{Rcu, RcuReadGuard};
use crate::mm::sync::{Arc, AtomicPtr, AtomicUsize, Backoff, Mutex, MutexGuard, Ordering};

/// Folios truncation frees per batch (`PAGEVEC_SIZE`).
const FREE_BATCH: usize = 31;

/// Spare nodes kept beyond what a batch needs, and the stash's cap.
const SPARE_SLACK: usize = 2;
const MAX_SPARE: usize = 32;

/// Why a folio was not inserted (`__filemap_add_folio`'s error codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddError {
    /// `-EEXIST`: a folio already occupies (part of) the range starting at `index`.
    Exists {
        /// The first page index of the folio that could not be inserted.
        index: u64,
    },
    /// `-EINVAL`: the folio's index is not a multiple of its size.
    Misaligned {
        /// The index asked for.
        index: u64,
        /// The folio's order.
        order: u32,
    },
    /// `-EINVAL`: the folio already belongs to a mapping (or is anonymous).
    AlreadyMapped {
        /// Its current mapping id.
        mapping: u64,
    },
    /// `-EINVAL`: the folio comes from another arena than the index's.
    ForeignArena,
    /// `-EINVAL` in `filemap_add_folio_range`: no folio left in the batch for `index`.
    MissingFolio {
        /// The first index not covered by the batch.
        index: u64,
    },
}

impl fmt::Display for AddError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AddError::Exists { index } => write!(
                f,
                "a folio is already cached at page index {index}: look it up instead of inserting"
            ),
            AddError::Misaligned { index, order } => write!(
                f,
                "page index {index} is not aligned to the folio's {} pages: large folios start at a multiple of their size",
                1u64 << order
            ),
            AddError::AlreadyMapped { mapping } => write!(
                f,
                "the folio already belongs to mapping {mapping}: delete it there first, or allocate a new folio"
            ),
            AddError::ForeignArena => write!(
                f,
                "the folio was allocated from another arena than this index's: allocate from the cache's arena"
            ),
            AddError::MissingFolio { index } => write!(
                f,
                "the batch has no folio for page index {index}: pass folios covering start..end"
            ),
        }
    }
}

impl std::error::Error for AddError {}

/// What [`Index::truncate`] and [`Index::invalidate`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoveStats {
    /// Folios removed from the index and freed.
    pub folios_freed: u64,
    /// Pages of those folios.
    pub pages_freed: u64,
    /// Folios that were pinned or locked by someone else: left in the index by `invalidate`,
    /// detached (removed, freed at their last put) by `truncate`.
    pub busy: u64,
}

/// A snapshot of an index's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexStats {
    /// `mapping->nrpages`: pages cached.
    pub nr_pages: u64,
    /// Folios cached.
    pub nr_folios: u64,
    /// Tree nodes in use.
    pub nr_nodes: u64,
    /// Preallocated nodes waiting in the stash.
    pub spare_nodes: u64,
    /// Acquisitions of the index lock by operations (not by `stats`/`validate`).
    pub lock_acquisitions: u64,
    /// Pages inserted since creation.
    pub pages_inserted: u64,
    /// Pages removed since creation.
    pub pages_removed: u64,
    /// Times an insertion had to drop the lock to allocate nodes (`xas_nomem` retries).
    pub nomem_retries: u64,
    /// Slots holding a shadow entry now (a large folio's shadow holds one per slot).
    pub nr_shadows: u64,
    /// Nodes holding only shadow entries now (`WORKINGSET_NODES` for this index).
    pub shadow_nodes: u64,
    /// Insertions that replaced a shadow entry (handed to the inserter) since creation.
    pub shadows_replaced: u64,
    /// Shadow entries removed by truncation or invalidation since creation.
    pub shadows_cleared: u64,
    /// Shadow nodes freed by the shrinker since creation (`WORKINGSET_NODERECLAIM`).
    pub shadow_nodes_reclaimed: u64,
    /// Large folios split into order-0 folios since creation ([`Index::split_folio`]).
    pub splits: u64,
    /// Runs of folios collapsed into one large folio since creation
    /// ([`Index::collapse_folios`]).
    pub collapses: u64,
}

/// How much of the re-check a lookup does (only `Full` outside the loom models).
#[derive(Clone, Copy)]
enum Recheck {
    /// `xas_reload` from the index's own slot, then mapping and `folio_contains`.
    Full,
    /// The canonical slot only (too weak for multi-index entries).
    #[cfg(loom)]
    CanonicalOnly,
    /// No re-check at all.
    #[cfg(loom)]
    None,
}

/// Everything the index lock protects.
struct Locked {
    spare: Vec<Box<Node>>,
    stats: IndexStats,
    /// Nodes holding only shadow entries, oldest first.
    shadows: ShadowList,
}

/// The RCU domain of an index: the process-wide one, or a private one (tests, loom).
enum Domain {
    #[cfg(not(loom))]
    Global,
    Owned(Arc<Rcu>),
}

/// A raw node pointer that may cross to the RCU callback thread.
struct RetiredNode(*mut Node);

// SAFETY: the node is unlinked and owned by the callback alone; `Node` is Send.
unsafe impl Send for RetiredNode {}

impl RetiredNode {
    fn free(self) {
        // SAFETY: the node came from `Box::into_raw` and is freed once, here, after a grace
        // period (no reader can still be inside it).
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// `struct address_space`'s `i_pages`: the page cache of one file.
pub struct Index {
    arena: Arc<Arena>,
    id: u64,
    domain: Domain,
    root: AtomicPtr<Node>,
    locked: Mutex<Locked>,
    /// Relaxed mirror of `locked.spare.len()`, read before locking to top the stash up.
    spare_hint: AtomicUsize,
    /// The shadow-node count shared with the other indexes of the cache.
    shadow_nodes: Arc<ShadowNodes>,
}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index")
            .field("mapping", &self.id)
            .finish_non_exhaustive()
    }
}

impl Index {
    /// `address_space_init_once`: an empty index whose folios come from `arena`, with a fresh
    /// mapping id, using the process-wide RCU domain.
    #[cfg(not(loom))]
    pub fn new(arena: Arc<Arena>) -> Self {
        Self::build(arena, Domain::Global, Arc::new(ShadowNodes::new()))
    }

    /// As [`Index::new`], with a private RCU domain.
    pub fn with_rcu(arena: Arc<Arena>, rcu: Arc<Rcu>) -> Self {
        Self::build(arena, Domain::Owned(rcu), Arc::new(ShadowNodes::new()))
    }

    /// As [`Index::with_rcu`], adding its shadow nodes to `shadow_nodes`, the count shared by
    /// every index of a cache (the shadow-node shrinker's `list_lru`).
    pub fn with_shadow_nodes(
        arena: Arc<Arena>,
        rcu: Arc<Rcu>,
        shadow_nodes: Arc<ShadowNodes>,
    ) -> Self {
        Self::build(arena, Domain::Owned(rcu), shadow_nodes)
    }

    fn build(arena: Arc<Arena>, domain: Domain, shadow_nodes: Arc<ShadowNodes>) -> Self {
        let id = arena.new_mapping_id();
        Self {
            arena,
            id,
            domain,
            root: AtomicPtr::new(std::ptr::null_mut()),
            locked: Mutex::new(Locked {
                spare: Vec::new(),
                stats: IndexStats::default(),
                shadows: ShadowList::new(),
            }),
            spare_hint: AtomicUsize::new(0),
            shadow_nodes,
        }
    }

    /// The shadow-node count this index adds to.
    pub fn shadow_nodes(&self) -> &Arc<ShadowNodes> {
        &self.shadow_nodes
    }

    /// `folio->mapping` of this index's folios: the mapping id they carry while cached.
    #[inline]
    pub fn mapping_id(&self) -> u64 {
        self.id
    }

    /// `mapping_gfp_mask`'s source, in our terms: the arena the folios come from.
    #[inline]
    pub fn arena(&self) -> &Arc<Arena> {
        &self.arena
    }

    #[inline]
    fn rcu(&self) -> &Rcu {
        match &self.domain {
            #[cfg(not(loom))]
            Domain::Global => Rcu::global(),
            Domain::Owned(r) => r,
        }
    }

    /// Takes the index lock, counting the acquisition, after adding `extra` spare nodes.
    fn lock(&self, extra: Vec<Box<Node>>) -> MutexGuard<'_, Locked> {
        let mut g = self.locked.lock();
        g.stats.lock_acquisitions += 1;
        if !extra.is_empty() {
            // Bounded: `top_up` brings at most MAX_SPARE, `relock_with_nodes` what a step
            // needs plus SPARE_SLACK.
            g.spare.extend(extra);
            self.spare_hint.store(g.spare.len(), Ordering::Relaxed);
        }
        g
    }

    /// Nodes to bring to the lock so the stash holds `want` (allocated before locking).
    fn top_up(&self, want: usize) -> Vec<Box<Node>> {
        let have = self.spare_hint.load(Ordering::Relaxed);
        (have..want.min(MAX_SPARE)).map(|_| Node::new()).collect()
    }
}

impl Drop for Index {
    /// `truncate_inode_pages_final` + freeing the tree: every folio leaves the mapping and
    /// loses the cache's references (holders keep theirs); nodes are freed at once (no reader
    /// can exist: they borrow the index).
    fn drop(&mut self) {
        fn free_node(arena: &Arena, strategy: crate::mm::refcount::RefStrategy, node: *mut Node) {
            // SAFETY: `&mut self`: no reader or writer remains; each node is visited once.
            let n = unsafe { Box::from_raw(node) };
            for off in 0..FANOUT {
                match Entry::decode(n.load(off)) {
                    Entry::Node(c) => free_node(arena, strategy, c),
                    Entry::Folio(pfn) => {
                        let f = arena.folio(pfn);
                        f.set_mapping(0, f.index());
                        if f.refcount().sub_and_test(strategy, f.nr_pages() as u32) {
                            arena.free_won(f);
                        }
                    }
                    _ => {}
                }
            }
        }
        let root = self.root.load(Ordering::Relaxed);
        if !root.is_null() {
            free_node(&self.arena, self.arena.strategy(), root);
        }
        // The freed tree's shadow nodes leave the cache's count.
        let shadow_nodes = self.locked.lock().stats.shadow_nodes;
        self.shadow_nodes.sub(shadow_nodes);
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
