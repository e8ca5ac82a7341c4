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

// Spare nodes are `Vec<Box<Node>>`: each is later published by pointer (`Box::into_raw`) and
// freed on its own after a grace period, so each needs its own allocation.
#![allow(clippy::vec_box)]

mod node;
mod shadow;

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

    // ---------------------------------------------------------------------------------
    // Lockless lookup
    // ---------------------------------------------------------------------------------

    /// `xas_load`: the node holding the entry for `index`, the offset of `index`'s own slot
    /// in it, the canonical offset of the entry (different for a sibling) and the folio word.
    /// The caller is inside an RCU read section of this index's domain or holds the index
    /// lock; the returned node stays valid as long as that lasts.
    #[inline]
    fn walk(&self, index: u64) -> Option<(*const Node, usize, usize, usize)> {
        // ORDERING: Acquire; pairs with the Release stores of the root in `grow`/`store_entry`
        // (`prune`/`shrink` too), so the node's initialised slots are visible.
        let mut node = self.root.load(Ordering::Acquire) as *const Node;
        if node.is_null() {
            return None;
        }
        // SAFETY: nodes reachable from the root are freed only after a grace period or under
        // the lock, and the caller is in a read section or holds the lock.
        let mut n = unsafe { &*node };
        // Only the root's shift is loaded: a child's is always its parent's minus
        // CHUNK_SHIFT (`validate` checks it) and never changes once published, so the walk
        // touches one cache line per level, the slot's, not also the node's header.
        let mut shift = n.shift();
        if (index as u128) >= span(shift) {
            return None;
        }
        loop {
            let own = ((index >> shift) & node::MASK) as usize;
            debug_assert_eq!(own, n.offset_of(index));
            let (off, w) = Self::resolve(n, own);
            match Entry::decode(w) {
                Entry::Node(child) => {
                    node = child;
                    // SAFETY: as above; a child is published with Release before use.
                    n = unsafe { &*node };
                    shift -= CHUNK_SHIFT;
                }
                Entry::Folio(_) => return Some((node, own, off, w)),
                _ => return None,
            }
        }
    }

    /// The entry for slot `own` of `n`, following a sibling to its canonical slot:
    /// `(canonical offset, word)`.
    #[inline]
    fn resolve(n: &Node, own: usize) -> (usize, usize) {
        let w = n.load(own);
        match Entry::decode(w) {
            Entry::Sibling(canonical) => (canonical, n.load(canonical)),
            _ => (own, w),
        }
    }

    /// `filemap_get_entry` / `filemap_get_folio`: a reference on the folio cached at `index`,
    /// taken without the index lock (RCU walk, speculative `try_get`, re-check).
    ///
    /// The folio may be locked (I/O in flight) and not uptodate: check and
    /// [`FolioRef::wait_locked`] as the read path does.
    #[inline]
    pub fn lookup(&self, index: u64) -> Option<FolioRef<'_>> {
        self.lookup_inner(index, Recheck::Full)
    }

    /// The lookup without the re-check, for the loom model that must catch it
    /// (`src/loom_tests/index.rs`). Never use it elsewhere.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn lookup_without_recheck(&self, index: u64) -> Option<FolioRef<'_>> {
        self.lookup_inner(index, Recheck::None)
    }

    /// The lookup with the first, too weak re-check (only the canonical slot reloaded, no
    /// `folio_contains`), for the loom regression model that must catch it. Never use it
    /// elsewhere.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn lookup_with_canonical_recheck(&self, index: u64) -> Option<FolioRef<'_>> {
        self.lookup_inner(index, Recheck::CanonicalOnly)
    }

    /// [`Index::lookup`] for a caller already inside a read section of the index's RCU
    /// domain (the file table's lock-free lookup hands its section on): no nested section.
    #[inline]
    pub fn lookup_in(&self, index: u64, section: &RcuReadGuard<'_>) -> Option<FolioRef<'_>> {
        let _ = section;
        debug_assert!(
            self.rcu().read_lock_held(),
            "lookup_in outside a read section of the index's domain"
        );
        self.lookup_walk(index, Recheck::Full)
    }

    #[inline]
    fn lookup_inner(&self, index: u64, recheck: Recheck) -> Option<FolioRef<'_>> {
        let _rcu = self.rcu().read_lock();
        self.lookup_walk(index, recheck)
    }

    /// The lookup proper; the caller is inside a read section.
    #[inline(always)]
    fn lookup_walk(&self, index: u64, recheck: Recheck) -> Option<FolioRef<'_>> {
        let backoff = Backoff::new();
        loop {
            let (node, own, canonical, w) = self.walk(index)?;
            let Entry::Folio(pfn) = Entry::decode(w) else {
                unreachable!("walk returns folio entries")
            };
            self.arena.prefetch_data(pfn);
            let Some(folio) = self.arena.try_get(self.arena.folio(pfn)) else {
                // Frozen or free: a remover holds the lock and is about to clear the slot.
                backoff.snooze();
                continue;
            };
            // `xas_reload`: re-derive the entry from *our index's* slot (a sibling is followed
            // again), not just the canonical slot: between our two loads of a sibling walk the
            // large folio may have been replaced by a smaller one at its first index. Then,
            // under our reference, the folio must still be this mapping's and contain `index`
            // (`folio_contains`), which closes the window where the slots were reused twice
            // between the loads of the reload itself.
            // SAFETY: still inside the read section that found `node`.
            let n = unsafe { &*node };
            let moved = match recheck {
                Recheck::Full => {
                    Self::resolve(n, own).1 != w
                        || folio.mapping() != self.id
                        || index.wrapping_sub(folio.index()) >= folio.nr_pages() as u64
                }
                #[cfg(loom)]
                Recheck::CanonicalOnly => n.load(canonical) != w,
                #[cfg(loom)]
                Recheck::None => false,
            };
            let _ = canonical;
            if moved {
                // The folio moved on. This put may be the final put of the folio's next life;
                // the free path copes.
                drop(folio);
                continue;
            }
            return Some(folio);
        }
    }

    /// `xa_load` != NULL: whether a folio is cached at `index` (no reference taken; a hint,
    /// as readahead's "page already present?" test).
    #[inline]
    pub fn contains(&self, index: u64) -> bool {
        let _rcu = self.rcu().read_lock();
        self.walk(index).is_some()
    }

    // ---------------------------------------------------------------------------------
    // Insertion
    // ---------------------------------------------------------------------------------

    /// The level a folio of `order` is stored at.
    #[inline]
    fn target_shift(order: u32) -> u32 {
        (order / CHUNK_SHIFT) * CHUNK_SHIFT
    }

    /// `xas_create`, read-only: how many new nodes storing an entry of `order` at `index`
    /// needs, or `Err` if part of the range is occupied (by a folio: shadow entries are
    /// replaced, and a value one level up is split into a new node). Under the lock.
    fn nodes_needed(&self, index: u64, order: u32) -> Result<usize, ()> {
        let tshift = Self::target_shift(order);
        let nslots = 1usize << (order - tshift);
        let levels_below = |s: u32| ((s - tshift) / CHUNK_SHIFT) as usize;
        let root = self.root.load(Ordering::Relaxed);
        if root.is_null() {
            let mut s = tshift;
            while (index as u128) >= span(s) {
                s += CHUNK_SHIFT;
            }
            return Ok(levels_below(s) + 1);
        }
        // SAFETY: under the index lock: nodes in the tree are live.
        let mut n = unsafe { &*root };
        let mut top = n.shift();
        let mut needed = 0;
        while (index as u128) >= span(top) || top < tshift {
            top += CHUNK_SHIFT;
            needed += 1;
        }
        // Levels added on top hold the old root in slot 0: does the path leave it?
        let mut s = top;
        while s > n.shift() {
            let off = (index >> s) & node::MASK;
            if s == tshift {
                // The entry goes in a new top node; slot 0 (the old root) must not overlap,
                // unless the old tree holds only shadows (then it is freed).
                return if off != 0 || Self::only_values(n) {
                    Ok(needed)
                } else {
                    Err(())
                };
            }
            if off != 0 {
                return Ok(needed + levels_below(s - CHUNK_SHIFT) + 1);
            }
            s -= CHUNK_SHIFT;
        }
        loop {
            let off = n.offset_of(index);
            if n.shift() == tshift {
                return if (off..off + nslots).all(|i| Self::replaceable(n.load(i))) {
                    Ok(needed)
                } else {
                    Err(())
                };
            }
            match Entry::decode(n.load(off)) {
                Entry::Empty | Entry::Value(_) => {
                    return Ok(needed + levels_below(n.shift() - CHUNK_SHIFT) + 1)
                }
                // SAFETY: under the index lock.
                Entry::Node(c) => n = unsafe { &*c },
                _ => return Err(()), // a larger folio (or value) covers the index
            }
        }
    }

    /// Takes a spare node and sets it up as a child of `parent` at `offset` with `shift`.
    fn take_node(&self, g: &mut Locked, shift: u32, parent: *mut Node, offset: usize) -> *mut Node {
        let b = g
            .spare
            .pop()
            .expect("nodes_needed guaranteed the spare nodes");
        self.spare_hint.store(g.spare.len(), Ordering::Relaxed);
        b.set_shift(shift);
        // SAFETY: the node is unpublished and ours.
        unsafe {
            b.meta(|m| {
                m.count = 0;
                m.nr_values = 0;
                m.parent = parent;
                m.offset = offset as u8;
                m.on_shadow_list = false;
                m.shadow_prev = std::ptr::null_mut();
                m.shadow_next = std::ptr::null_mut();
            })
        };
        g.stats.nr_nodes += 1;
        Box::into_raw(b)
    }

    /// `xas_store` of a new folio entry, after `nodes_needed` said Ok and the stash holds the
    /// nodes. Returns the payload of a shadow entry it replaced, if any (the last one met, as
    /// `__filemap_add_folio`'s conflict walk keeps). Under the lock.
    fn store_entry(&self, g: &mut Locked, index: u64, order: u32, w: usize) -> Option<usize> {
        let tshift = Self::target_shift(order);
        let nslots = 1usize << (order - tshift);
        let mut root = self.root.load(Ordering::Relaxed);
        if root.is_null() {
            let mut s = tshift;
            while (index as u128) >= span(s) {
                s += CHUNK_SHIFT;
            }
            root = self.take_node(g, s, std::ptr::null_mut(), 0);
            // ORDERING: Release; pairs with the Acquire root load in `walk`.
            self.root.store(root, Ordering::Release);
        }
        // `xas_expand`: add levels on top.
        loop {
            // SAFETY: under the index lock.
            let r = unsafe { &*root };
            if (index as u128) < span(r.shift()) && r.shift() >= tshift {
                break;
            }
            let top = self.take_node(g, r.shift() + CHUNK_SHIFT, std::ptr::null_mut(), 0);
            // SAFETY: `top` is unpublished; `r` is in the tree and we hold the lock.
            unsafe {
                (*top).store(0, Entry::node(root));
                (*top).meta(|m| m.count = 1);
                r.meta(|m| {
                    m.parent = top;
                    m.offset = 0;
                });
            }
            // ORDERING: Release; pairs with the Acquire root load in `walk`.
            self.root.store(top, Ordering::Release);
            root = top;
        }
        let mut node = root;
        loop {
            // SAFETY: under the index lock.
            let n = unsafe { &*node };
            let off = n.offset_of(index);
            if n.shift() == tshift {
                // What the new entry overwrites: empty slots, shadows, shadow-only subtrees.
                let (mut added, mut values, mut shadow) = (0u32, 0u32, None);
                for i in off..off + nslots {
                    match Entry::decode(n.load(i)) {
                        Entry::Empty => added += 1,
                        Entry::Value(v) => {
                            values += 1;
                            shadow = Some(v);
                        }
                        Entry::Node(c) => {
                            // Readers still inside see its values ("not cached") until the
                            // grace period ends.
                            if let Some(v) = self.free_value_subtree(g, c) {
                                shadow = Some(v);
                            }
                        }
                        e => unreachable!("nodes_needed checked the slots, found {e:?}"),
                    }
                }
                for i in 1..nslots {
                    n.store(off + i, Entry::sibling(off));
                }
                // The publishing store: mapping, index and the cache's references were set
                // before it (Release).
                n.store(off, w);
                // SAFETY: under the index lock.
                unsafe {
                    n.meta(|m| {
                        m.count += added;
                        m.nr_values -= values;
                    })
                };
                g.stats.nr_shadows -= values as u64;
                self.update_node(g, node);
                return shadow;
            }
            match Entry::decode(n.load(off)) {
                Entry::Node(c) => node = c,
                Entry::Empty => {
                    let child = self.take_node(g, n.shift() - CHUNK_SHIFT, node, off);
                    n.store(off, Entry::node(child));
                    // SAFETY: under the index lock.
                    unsafe { n.meta(|m| m.count += 1) };
                    node = child;
                }
                Entry::Value(_) => {
                    // A large folio's shadow covers the index one level up: split it into a
                    // node holding a copy per slot (`xas_try_split`), then go on down. The
                    // child is complete before the Release store publishes it.
                    let old = n.load(off);
                    let child = self.take_node(g, n.shift() - CHUNK_SHIFT, node, off);
                    // SAFETY: `child` is unpublished and ours.
                    unsafe {
                        for i in 0..FANOUT {
                            (*child).store(i, old);
                        }
                        (*child).meta(|m| {
                            m.count = FANOUT as u32;
                            m.nr_values = FANOUT as u32;
                        });
                    }
                    n.store(off, Entry::node(child));
                    // SAFETY: under the index lock.
                    unsafe { n.meta(|m| m.nr_values -= 1) };
                    g.stats.nr_shadows += FANOUT as u64 - 1;
                    self.update_node(g, node);
                    node = child;
                }
                e => unreachable!("nodes_needed checked the path, found {e:?}"),
            }
        }
    }

    /// One folio into the tree under the held lock (with the shadow it replaced, if any), or
    /// the reason it cannot go in now: `Err(Ok(n))` = needs `n` more spare nodes,
    /// `Err(Err(e))` = refused.
    fn add_locked(
        &self,
        g: &mut Locked,
        folio: &Folio,
        index: u64,
    ) -> Result<Option<Shadow>, Result<usize, AddError>> {
        let order = folio.order();
        let nr = folio.nr_pages() as u64;
        if index % nr != 0 {
            return Err(Err(AddError::Misaligned { index, order }));
        }
        let mapping = folio.mapping();
        if mapping != 0 || folio.is_anon() {
            return Err(Err(AddError::AlreadyMapped { mapping }));
        }
        let need = self
            .nodes_needed(index, order)
            .map_err(|()| Err(AddError::Exists { index }))?;
        if need > g.spare.len() {
            return Err(Ok(need - g.spare.len()));
        }
        // `__filemap_add_folio`: the cache's references and the folio's identity before the
        // publishing store. The caller holds a reference, so `add` is a plain increment.
        folio.refcount().add(self.arena.strategy(), nr as u32);
        folio.set_mapping(self.id, index);
        let shadow = self
            .store_entry(g, index, order, Entry::folio(folio.pfn()))
            .map(Shadow::from_payload);
        g.stats.nr_pages += nr;
        g.stats.nr_folios += 1;
        g.stats.pages_inserted += nr;
        g.stats.shadows_replaced += shadow.is_some() as u64;
        Ok(shadow)
    }

    /// `xas_nomem`: unlock, allocate `n` nodes (plus slack), re-lock.
    #[cold]
    fn relock_with_nodes<'a>(
        &'a self,
        g: MutexGuard<'a, Locked>,
        n: usize,
    ) -> MutexGuard<'a, Locked> {
        drop(g);
        let nodes = (0..n + SPARE_SLACK).map(|_| Node::new()).collect();
        let mut g = self.lock(nodes);
        g.stats.nomem_retries += 1;
        g
    }

    fn check_arena(&self, folio: &FolioLocked<'_>) -> Result<(), AddError> {
        if std::ptr::eq(folio.arena(), &*self.arena) {
            Ok(())
        } else {
            Err(AddError::ForeignArena)
        }
    }

    /// `filemap_add_folio`: inserts one locked folio at `index` (a multiple of its size) under
    /// one lock hold. The cache takes `nr_pages` references and the folio gets this mapping
    /// and index; the caller keeps its own reference and the lock. A shadow entry the folio
    /// replaces is dropped (see [`Index::add_folio_shadow`]).
    pub fn add_folio(&self, folio: &FolioLocked<'_>, index: u64) -> Result<(), AddError> {
        self.add_folio_shadow(folio, index).map(drop)
    }

    /// `__filemap_add_folio` with `shadowp`: [`Index::add_folio`], returning the shadow entry
    /// the folio replaced, if reclaim had left one at `index` (for `workingset_refault`).
    pub fn add_folio_shadow(
        &self,
        folio: &FolioLocked<'_>,
        index: u64,
    ) -> Result<Option<Shadow>, AddError> {
        self.check_arena(folio)?;
        let mut g = self.lock(self.top_up(1));
        loop {
            match self.add_locked(&mut g, folio, index) {
                Ok(shadow) => return Ok(shadow),
                Err(Err(e)) => return Err(e),
                Err(Ok(n)) => g = self.relock_with_nodes(g, n),
            }
        }
    }

    /// `filemap_add_folio_range` (seed 001): inserts the batch `folios`, consecutive and in
    /// index order, into `start..end` under one lock hold (more only if nodes must be
    /// allocated).
    ///
    /// Stops at the first index that is occupied, or whose folio is missing or invalid.
    /// Returns the number of *pages* inserted if any (the first `k` folios of the batch are
    /// then in the cache, `k` implied by the page count), else the error that stopped it. The
    /// caller keeps its references and locks on every folio, inserted or not, and disposes of
    /// the uninserted ones.
    pub fn add_folio_range(
        &self,
        start: u64,
        end: u64,
        folios: &[FolioLocked<'_>],
    ) -> Result<u64, AddError> {
        self.add_folio_range_shadows(start, end, folios, &mut [])
    }

    /// [`Index::add_folio_range`] handing back shadows: `shadows[i]` receives the shadow entry
    /// `folios[i]` replaced (`None` if it replaced none, or was not inserted). Folios past
    /// `shadows.len()` drop theirs.
    pub fn add_folio_range_shadows(
        &self,
        start: u64,
        end: u64,
        folios: &[FolioLocked<'_>],
        shadows: &mut [Option<Shadow>],
    ) -> Result<u64, AddError> {
        shadows.iter_mut().for_each(|s| *s = None);
        if start >= end {
            return Ok(0);
        }
        if let Some(f) = folios.first() {
            self.check_arena(f)?;
        }
        let want = ((end - start) as usize).div_ceil(FANOUT) + 1;
        let mut g = self.lock(self.top_up(want));
        let mut index = start;
        let mut err = None;
        for (i, folio) in folios.iter().enumerate() {
            if index >= end {
                break;
            }
            if let Err(e) = self.check_arena(folio) {
                err = Some(e);
                break;
            }
            loop {
                match self.add_locked(&mut g, folio, index) {
                    Ok(shadow) => {
                        if let Some(slot) = shadows.get_mut(i) {
                            *slot = shadow;
                        }
                        break;
                    }
                    Err(Err(e)) => {
                        err = Some(e);
                        break;
                    }
                    Err(Ok(n)) => g = self.relock_with_nodes(g, n),
                }
            }
            if err.is_some() {
                break;
            }
            index = index.saturating_add(folio.nr_pages() as u64);
        }
        drop(g);
        if index == start && err.is_none() && index < end {
            err = Some(AddError::MissingFolio { index });
        }
        match err {
            Some(e) if index == start => Err(e),
            _ => Ok(index - start),
        }
    }

    // ---------------------------------------------------------------------------------
    // Removal
    // ---------------------------------------------------------------------------------

    /// The node and canonical offset of `pfn`'s entry at `index`, if the tree holds it there.
    /// Under the lock.
    fn slot_of(&self, index: u64, pfn: u32) -> Option<(*const Node, usize)> {
        let (node, _, off, w) = self.walk(index)?;
        (w == Entry::folio(pfn)).then_some((node, off))
    }

    /// Retires an unlinked node: off the shadow-node list now, freed after a grace period.
    fn retire(&self, g: &mut Locked, node: *mut Node) {
        // SAFETY: under the index lock; the node was in the tree until now.
        if unsafe { (*node).meta(|m| m.on_shadow_list) } {
            self.shadow_list_del(g, node);
        }
        g.stats.nr_nodes -= 1;
        let r = RetiredNode(node);
        self.rcu().call_rcu(move || r.free());
    }

    /// `xas_store(shadow or NULL)` over a folio's slots (`page_cache_delete`): with a shadow,
    /// every slot the folio used gets a copy of it and the node stays; without, the slots
    /// empty and emptied nodes are freed up the path (`xas_delete_node`), then the root
    /// shrinks (`xas_shrink`). Under the lock.
    fn clear_entry(
        &self,
        g: &mut Locked,
        node: *const Node,
        off: usize,
        order: u32,
        shadow: Option<Shadow>,
    ) {
        // SAFETY: under the index lock.
        let n = unsafe { &*node };
        let nslots = slots_of(order);
        let node = node as *mut Node;
        let w = shadow.map_or(0, Shadow::word);
        // The canonical slot first: a reader at a sibling then finds the value there, or
        // the value in its own slot.
        n.store(off, w);
        for i in 1..nslots {
            n.store(off + i, w);
        }
        if shadow.is_some() {
            // SAFETY: under the index lock.
            unsafe { n.meta(|m| m.nr_values += nslots as u32) };
            g.stats.nr_shadows += nslots as u64;
            self.update_node(g, node);
            return;
        }
        // SAFETY: under the index lock.
        unsafe { n.meta(|m| m.count -= nslots as u32) };
        self.delete_empty(g, node);
    }

    /// `xas_delete_node` up the path: while `node` is empty, unlink it from its parent (or
    /// the root) and retire it; re-file the first non-empty node on the shadow-node list;
    /// then `xas_shrink`. Under the lock.
    fn delete_empty(&self, g: &mut Locked, mut node: *mut Node) {
        loop {
            // SAFETY: under the index lock; `node` is in the tree.
            let (count, parent, offset) =
                unsafe { (*node).meta(|m| (m.count, m.parent, m.offset as usize)) };
            if count != 0 {
                self.update_node(g, node);
                break;
            }
            match self.unlink_node(g, node, parent, offset) {
                Some(parent) => node = parent,
                None => return,
            }
        }
        self.shrink(g);
    }

    /// Takes `node` out of the tree (its slot `offset` in `parent`, or the root if `parent`
    /// is null) and retires it; returns the parent, whose count it decremented, or `None`
    /// if the tree is now empty. Under the lock.
    fn unlink_node(
        &self,
        g: &mut Locked,
        node: *mut Node,
        parent: *mut Node,
        offset: usize,
    ) -> Option<*mut Node> {
        if parent.is_null() {
            // ORDERING: Release (pairs with `walk`'s Acquire; publishes "empty").
            self.root.store(std::ptr::null_mut(), Ordering::Release);
            self.retire(g, node);
            return None;
        }
        // SAFETY: the parent is in the tree; we hold the lock.
        let p = unsafe { &*parent };
        p.store(offset, 0);
        self.retire(g, node);
        // SAFETY: under the index lock.
        unsafe { p.meta(|m| m.count -= 1) };
        Some(parent)
    }

    /// `xas_shrink`: while the root has only slot 0 in use and it holds a node, make that node
    /// the root. Readers still inside the old root follow its slot 0 to the same child, which
    /// stays valid: it is freed only after a grace period that starts when it is unlinked.
    fn shrink(&self, g: &mut Locked) {
        loop {
            let root = self.root.load(Ordering::Relaxed);
            if root.is_null() {
                return;
            }
            // SAFETY: under the index lock.
            let r = unsafe { &*root };
            // SAFETY: under the index lock.
            if unsafe { r.meta(|m| m.count) } != 1 {
                return;
            }
            let Entry::Node(child) = Entry::decode(r.load(0)) else {
                return;
            };
            // SAFETY: under the index lock.
            unsafe { (*child).meta(|m| m.parent = std::ptr::null_mut()) };
            // ORDERING: Release; pairs with the Acquire root load in `walk`.
            self.root.store(child, Ordering::Release);
            self.retire(g, root);
        }
    }

    /// Removes `folio` (held in the tree at its index) under the held lock, leaving `shadow`
    /// in its slots if given, and updates the counters; `false` if the tree does not hold it.
    fn remove_locked(&self, g: &mut Locked, folio: &Folio, shadow: Option<Shadow>) -> bool {
        if folio.mapping() != self.id {
            return false;
        }
        let index = folio.index();
        let Some((node, off)) = self.slot_of(index, folio.pfn()) else {
            return false;
        };
        self.clear_entry(g, node, off, folio.order(), shadow);
        // `page_cache_delete`: the folio leaves the mapping (the index is kept, as the kernel
        // keeps it for truncation).
        folio.set_mapping(0, index);
        let nr = folio.nr_pages() as u64;
        g.stats.nr_pages -= nr;
        g.stats.nr_folios -= 1;
        g.stats.pages_removed += nr;
        true
    }

    /// `filemap_remove_folio` (`page_cache_delete` + `filemap_free_folio`): removes the locked
    /// folio from the index whoever else holds it, then drops the cache's references. Returns
    /// false if this index does not hold it. Holders keep a folio without a mapping, freed at
    /// their last put.
    pub fn delete(&self, folio: &FolioLocked<'_>) -> bool {
        if folio.mapping() != self.id || !std::ptr::eq(folio.arena(), &*self.arena) {
            return false;
        }
        let mut g = self.lock(Vec::new());
        let removed = self.remove_locked(&mut g, folio, None);
        drop(g);
        if removed {
            // The caller's reference keeps the folio alive: this put is never the last one.
            let last = folio
                .refcount()
                .sub_and_test(self.arena.strategy(), folio.nr_pages() as u32);
            debug_assert!(!last);
            if last {
                self.arena.free_won(folio);
            }
        }
        removed
    }

    /// `replace_page_cache_folio`: puts the locked folio `new` in the slot of the locked folio
    /// `old`, under one lock hold, so no lookup finds the page missing in between (a reader
    /// that did would read the backing file, which may hold older bytes than `old`). `new`
    /// takes the cache's references and `old`'s mapping and index; `old` leaves the mapping
    /// and the cache's references on it are put (the caller's keeps it alive). Both must be
    /// order-0 folios of this index's arena, `new` without a mapping. Returns false, changing
    /// nothing, if `old` is not in this index or the folios do not qualify.
    pub fn replace_folio(&self, old: &FolioLocked<'_>, new: &FolioLocked<'_>) -> bool {
        if old.mapping() != self.id
            || new.mapping() != 0
            || new.is_anon()
            || old.order() != 0
            || new.order() != 0
            || !std::ptr::eq(old.arena(), &*self.arena)
            || !std::ptr::eq(new.arena(), &*self.arena)
        {
            return false;
        }
        let index = old.index();
        let g = self.lock(Vec::new());
        let Some((node, off)) = self.slot_of(index, old.pfn()) else {
            return false;
        };
        // `new`'s identity and the cache's reference before the publishing store, as in
        // `add_locked`; the caller holds a reference, so `add` is a plain increment.
        new.refcount().add(self.arena.strategy(), 1);
        new.set_mapping(self.id, index);
        // SAFETY: `node` is in the tree and we hold the index lock. The store is Release
        // (`Node::store`), pairing with lockless readers' Acquire slot loads; a reader that
        // took a reference on `old` before it fails its re-check (the slot moved on) and
        // looks again.
        unsafe { (*node).store(off, Entry::folio(new.pfn())) };
        old.set_mapping(0, index);
        drop(g);
        // The caller's reference keeps `old` alive: this put is never the last one.
        let last = old.refcount().sub_and_test(self.arena.strategy(), 1);
        debug_assert!(!last);
        if last {
            self.arena.free_won(old);
        }
        true
    }

    /// `split_folio` for the page cache, by copy: puts the order-0 folios `new` (locked, one
    /// per page of the locked large folio `old`, holding its bytes) in `old`'s index slots
    /// under one lock hold, so every page stays cached throughout. `new[i]` takes the cache's
    /// reference and page `old.index() + i`; `old` leaves the mapping, and the cache's
    /// references on it are put (the caller's keeps it alive; a reader pinning it keeps
    /// reading its bytes, which stay the file's bytes of that moment).
    ///
    /// The kernel splits in place: it freezes the folio at the references it expects and
    /// re-labels the tail pages as folios, failing with `-EAGAIN` while anyone else holds a
    /// reference. Copying instead cannot fail because of a reader (a pinned 16 KiB block is
    /// exactly what a user of this cache holds), at the price of one allocation and one copy
    /// per page; only a write into a large folio, or a truncation inside one, pays it.
    ///
    /// Returns false, changing nothing, if `old` is not in this index or the folios do not
    /// qualify (`new` must be `old.nr_pages()` unmapped order-0 folios of this arena).
    pub fn split_folio(&self, old: &FolioLocked<'_>, new: &[FolioLocked<'_>]) -> bool {
        self.split_folio_inner(old, new, false)
    }

    /// The split with a deliberately wrong order, for the loom model that must catch it: the
    /// old entry's slots are emptied before the new pages are stored, so a lookup in between
    /// misses a page that stays cached. Never use it elsewhere.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn split_folio_with_gap(&self, old: &FolioLocked<'_>, new: &[FolioLocked<'_>]) -> bool {
        self.split_folio_inner(old, new, true)
    }

    fn split_folio_inner(&self, old: &FolioLocked<'_>, new: &[FolioLocked<'_>], gap: bool) -> bool {
        let nr = old.nr_pages();
        if old.mapping() != self.id
            || old.order() == 0
            || new.len() != nr
            || !std::ptr::eq(old.arena(), &*self.arena)
            || new.iter().any(|f| {
                f.mapping() != 0
                    || f.is_anon()
                    || f.order() != 0
                    || !std::ptr::eq(f.arena(), &*self.arena)
            })
        {
            return false;
        }
        let order = old.order();
        let tshift = Self::target_shift(order);
        // A folio stored one level up (orders 6 to 9) spans whole leaf nodes' worth of
        // indices: its pages need one new leaf node per slot it used.
        let leaves = if tshift == 0 { 0 } else { slots_of(order) };
        let index = old.index();
        let mut g = self.lock((0..leaves).map(|_| Node::new()).collect());
        let Some((node, off)) = self.slot_of(index, old.pfn()) else {
            return false;
        };
        // Identity and the cache's reference on each new folio before the stores that
        // publish them, as in `add_locked`; the caller holds a reference on each.
        for (i, f) in new.iter().enumerate() {
            f.refcount().add(self.arena.strategy(), 1);
            f.set_mapping(self.id, index + i as u64);
        }
        // SAFETY: under the index lock; `node` is in the tree.
        let n = unsafe { &*node };
        if gap {
            for i in 0..slots_of(order) {
                n.store(off + i, 0);
            }
        }
        if leaves == 0 {
            // Siblings first, the canonical slot last: a reader of a sibling slot either
            // finds its new folio there, or still resolves to `old` and fails its re-check
            // (its own slot moved on) once `old`'s entry is gone.
            for i in (0..nr).rev() {
                n.store(off + i, Entry::folio(new[i].pfn()));
            }
        } else {
            for s in (0..leaves).rev() {
                let child = self.take_node(&mut g, 0, node as *mut Node, off + s);
                // SAFETY: `child` is unpublished and ours until the store below publishes
                // it (Release, `Node::store`).
                unsafe {
                    for i in 0..FANOUT {
                        (*child).store(i, Entry::folio(new[s * FANOUT + i].pfn()));
                    }
                    (*child).meta(|m| m.count = FANOUT as u32);
                }
                n.store(off + s, Entry::node(child));
            }
        }
        old.set_mapping(0, index);
        g.stats.nr_folios += nr as u64 - 1;
        g.stats.splits += 1;
        drop(g);
        // The caller's reference keeps `old` alive: this put is never the last one.
        let last = old
            .refcount()
            .sub_and_test(self.arena.strategy(), nr as u32);
        debug_assert!(!last);
        if last {
            self.arena.free_won(old);
        }
        true
    }

    /// `__remove_mapping` / `remove_mapping` (reclaim and invalidation): if the cache's
    /// references and the caller's are the only ones, freeze the folio under the index lock,
    /// remove it and free it. Otherwise (pinned by a reader, mapped, in an LRU batch...) give
    /// the locked folio back untouched.
    ///
    /// The caller must have taken the folio off any LRU list (flags checked at free). The
    /// slot is left empty (`reclaimed == false`: invalidation); reclaim uses
    /// [`Index::evict_with_shadow`].
    pub fn evict<'a>(&self, folio: FolioLocked<'a>) -> Result<(), FolioLocked<'a>> {
        self.evict_frozen(folio, |_| None).map(FrozenFolio::free)
    }

    /// `__remove_mapping(reclaimed = true)`: [`Index::evict`], except that the slot keeps a
    /// shadow entry. Once the freeze has succeeded, still under the index lock,
    /// `workingset_eviction` is called with the frozen folio and returns the shadow to store
    /// (`None`: leave the slot empty). It is not called when the folio cannot be evicted.
    pub fn evict_with_shadow<'a>(
        &self,
        folio: FolioLocked<'a>,
        workingset_eviction: impl FnOnce(&Folio) -> Option<Shadow>,
    ) -> Result<(), FolioLocked<'a>> {
        self.evict_frozen(folio, workingset_eviction)
            .map(FrozenFolio::free)
    }

    /// [`Index::evict_with_shadow`] for a batch of reclaim's folios of this index, under one
    /// lock hold (as truncation's `delete_from_page_cache_batch` deletes a batch): each is
    /// frozen at the cache's references plus the caller's, gets its shadow, and leaves the
    /// tree; then, without the lock, the frozen ones are freed together. The folios that could
    /// not be evicted (someone else holds them, or they left this index) are pushed on
    /// `kept`, still locked. Returns the pages freed.
    ///
    /// One index-lock acquisition per batch instead of one per folio: reclaim's share of a
    /// block-cache miss shrinks by what 31 lock round trips cost, and concurrent readers
    /// inserting into the same file contend 32 times less.
    pub fn evict_batch_with_shadow<'a>(
        &self,
        folios: Vec<FolioLocked<'a>>,
        mut workingset_eviction: impl FnMut(&Folio) -> Option<Shadow>,
        kept: &mut Vec<FolioLocked<'a>>,
    ) -> u64 {
        let mut frozen = Vec::with_capacity(folios.len());
        let mut pages = 0;
        {
            let mut g = self.lock(Vec::new());
            for folio in folios {
                if folio.mapping() != self.id
                    || !std::ptr::eq(folio.arena(), &*self.arena)
                    || self.slot_of(folio.index(), folio.pfn()).is_none()
                {
                    kept.push(folio);
                    continue;
                }
                let nr = folio.nr_pages() as u32;
                // SAFETY: as in `evict_frozen`: the cache's `nr` references, owned by this
                // index and removed under its lock right below, plus the caller's one.
                match unsafe { folio.freeze(nr + 1) } {
                    Ok(f) => {
                        let shadow = workingset_eviction(&f);
                        let removed = self.remove_locked(&mut g, &f, shadow);
                        debug_assert!(removed);
                        pages += u64::from(nr);
                        frozen.push(f);
                    }
                    Err(folio) => kept.push(folio),
                }
            }
        }
        if let Some(first) = frozen.first() {
            let arena = first.arena();
            arena.free_frozen_batch(frozen);
        }
        pages
    }

    /// The shadow-storing eviction with a deliberately wrong order, for the loom model that
    /// must catch it: the shadow is published *before* the freeze is tried, and put back if
    /// the freeze fails. A lookup in between misses a folio that stays cached. Never use it
    /// elsewhere.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn evict_shadow_before_freeze<'a>(
        &self,
        folio: FolioLocked<'a>,
        shadow: Shadow,
    ) -> Result<(), FolioLocked<'a>> {
        let nr = folio.nr_pages() as u32;
        let mut g = self.lock(Vec::new());
        let Some((node, off)) = self.slot_of(folio.index(), folio.pfn()) else {
            return Err(folio);
        };
        // SAFETY: under the index lock.
        let n = unsafe { &*node };
        let w = n.load(off);
        n.store(off, shadow.word());
        // SAFETY: as in `evict_frozen`.
        match unsafe { folio.freeze(nr + 1) } {
            Ok(frozen) => {
                n.store(off, w);
                let removed = self.remove_locked(&mut g, &frozen, Some(shadow));
                debug_assert!(removed);
                drop(g);
                frozen.free();
                Ok(())
            }
            Err(folio) => {
                n.store(off, w);
                Err(folio)
            }
        }
    }

    /// [`Index::evict`] without the free: the folio, removed and frozen, for a caller that
    /// frees a batch at once (truncation).
    fn evict_frozen<'a>(
        &self,
        folio: FolioLocked<'a>,
        workingset_eviction: impl FnOnce(&Folio) -> Option<Shadow>,
    ) -> Result<FrozenFolio<'a>, FolioLocked<'a>> {
        if folio.mapping() != self.id || !std::ptr::eq(folio.arena(), &*self.arena) {
            return Err(folio);
        }
        let nr = folio.nr_pages() as u32;
        let mut g = self.lock(Vec::new());
        if self.slot_of(folio.index(), folio.pfn()).is_none() {
            return Err(folio);
        }
        // SAFETY: the expected count is the cache's `nr` references, owned by this index and
        // removed under its lock right below, plus the caller's one.
        let frozen = unsafe { folio.freeze(nr + 1) }?;
        let shadow = workingset_eviction(&frozen);
        let removed = self.remove_locked(&mut g, &frozen, shadow);
        debug_assert!(removed);
        drop(g);
        Ok(frozen)
    }

    /// The first entry covering an index of `from..=last` (in index order) for which `pick`
    /// returns something: a depth-first walk that skips the subtrees outside the range.
    /// `pick` sees every entry but nodes, with its node, the node's shift and first index,
    /// the slot, and whether that slot is the first the range touches in the node. Under the
    /// lock.
    fn first_in_range<R>(
        &self,
        from: u64,
        last: u64,
        pick: &mut dyn FnMut(*mut Node, u32, u128, usize, bool, Entry) -> Option<R>,
    ) -> Option<R> {
        type Pick<'p, R> = dyn FnMut(*mut Node, u32, u128, usize, bool, Entry) -> Option<R> + 'p;
        fn walk<R>(
            node: *mut Node,
            base: u128,
            from: u64,
            last: u64,
            pick: &mut Pick<'_, R>,
        ) -> Option<R> {
            // SAFETY: under the index lock.
            let n = unsafe { &*node };
            let s = n.shift();
            let start = if (from as u128) > base {
                ((from as u128 - base) >> s) as usize
            } else {
                0
            };
            for off in start..FANOUT {
                let ibase = base + ((off as u128) << s);
                if ibase > last as u128 {
                    return None;
                }
                let found = match Entry::decode(n.load(off)) {
                    Entry::Node(child) => walk(child, ibase, from, last, pick),
                    e => pick(node, s, base, off, off == start, e),
                };
                if found.is_some() {
                    return found;
                }
            }
            None
        }
        let root = self.root.load(Ordering::Relaxed);
        if root.is_null() || from > last {
            return None;
        }
        walk(root, 0, from, last, pick)
    }

    /// The first folio entry covering an index in `from..=last`, as `(first index, pfn)`.
    /// Under the lock.
    fn find(&self, from: u64, last: u64) -> Option<(u64, u32)> {
        self.first_in_range(from, last, &mut |node, s, base, off, first, e| match e {
            Entry::Folio(pfn) => Some(((base + ((off as u128) << s)) as u64, pfn)),
            // `from` lies inside a large folio that starts before it.
            Entry::Sibling(c) if first => {
                // SAFETY: under the index lock.
                match Entry::decode(unsafe { &*node }.load(c)) {
                    Entry::Folio(pfn) => Some(((base + ((c as u128) << s)) as u64, pfn)),
                    _ => None,
                }
            }
            _ => None,
        })
    }

    /// Shared loop of `truncate` and `invalidate`.
    fn remove_range(&self, start: u64, end: u64, truncate: bool) -> RemoveStats {
        let mut out = RemoveStats::default();
        // Freed in batches, as `truncate_inode_pages_range` releases a `folio_batch`: the LRU
        // takes its lock once per batch for the folios still on a list.
        let mut freed = Vec::new();
        let mut next = start;
        while next < end {
            if freed.len() == FREE_BATCH {
                self.arena.free_frozen_batch(std::mem::take(&mut freed));
            }
            let g = self.lock(Vec::new());
            let Some((index, pfn)) = self.find(next, end - 1) else {
                break;
            };
            // In the tree the folio holds the cache's references and cannot be frozen (only
            // `evict`, under this lock, freezes page-cache folios), so the get succeeds.
            let folio = self.arena.folio(pfn);
            next = index.saturating_add(folio.nr_pages() as u64);
            if !truncate && (index < start || next > end) {
                // `find_lock_entries` returns no folio that reaches outside the range:
                // invalidation keeps a large folio it covers only in part.
                drop(g);
                continue;
            }
            let folio = self.arena.try_get(folio);
            drop(g);
            let Some(folio) = folio else {
                continue;
            };
            let locked = if truncate {
                folio.lock()
            } else {
                match folio.try_lock() {
                    Ok(l) => l,
                    Err(_) => {
                        out.busy += 1;
                        continue;
                    }
                }
            };
            // Re-check under the folio lock: still ours, at the same place?
            if locked.mapping() != self.id || locked.index() != index {
                continue;
            }
            // `mapping_evict_folio`: invalidation never drops bytes the file does not have yet.
            if !truncate
                && locked.flags()
                    & (crate::mm::folio::flags::PG_DIRTY | crate::mm::folio::flags::PG_WRITEBACK)
                    != 0
            {
                out.busy += 1;
                continue;
            }
            let nr = locked.nr_pages() as u64;
            match self.evict_frozen(locked, |_| None) {
                Ok(frozen) => {
                    freed.push(frozen);
                    out.folios_freed += 1;
                    out.pages_freed += nr;
                }
                Err(locked) => {
                    out.busy += 1;
                    if truncate {
                        self.delete(&locked);
                    }
                }
            }
        }
        self.arena.free_frozen_batch(freed);
        // The shadows of the range go too (`truncate_folio_batch_exceptionals`,
        // `clear_shadow_entries`).
        self.clear_shadows(start, end);
        out
    }

    /// `truncate_inode_pages_range`: removes every folio overlapping `start..end` (page
    /// indices; large folios that overlap are removed whole). Waits for locked folios. Folios
    /// only the cache holds are freed; pinned ones are detached from the index and freed by
    /// their last holder (counted as `busy`), never under a reader. Shadow entries in the
    /// range are removed, and removed folios leave none.
    pub fn truncate(&self, start: u64, end: u64) -> RemoveStats {
        self.remove_range(start, end, true)
    }

    /// `invalidate_mapping_pages`: frees the folios inside `start..end` that nobody but the
    /// cache holds; locked, pinned, dirty or writeback folios are left in place and counted
    /// as `busy`, and a large folio that reaches outside the range is left whole (not
    /// counted).
    /// Shadow entries in the range are removed, and freed folios leave none.
    pub fn invalidate(&self, start: u64, end: u64) -> RemoveStats {
        self.remove_range(start, end, false)
    }

    // ---------------------------------------------------------------------------------
    // Statistics and validation
    // ---------------------------------------------------------------------------------

    /// `mapping->nrpages` and friends: a snapshot of the counters (takes the lock; not counted
    /// as an acquisition).
    pub fn stats(&self) -> IndexStats {
        let g = self.locked.lock();
        let mut s = g.stats;
        s.spare_nodes = g.spare.len() as u64;
        s
    }

    /// Folios in the index with every bit of `flag` set: a self-check helper (the dirty
    /// accounting compares it with its tags). Walks the tree under the lock (not counted as
    /// an acquisition).
    pub fn count_flagged(&self, flag: u64) -> u64 {
        let _g = self.locked.lock();
        let mut n = 0;
        self.first_in_range::<()>(0, u64::MAX, &mut |_, _, _, _, _, e| {
            if let Entry::Folio(pfn) = e {
                if self.arena.folio(pfn).flags() & flag == flag {
                    n += 1;
                }
            }
            None
        });
        n
    }

    /// `xa_dump`-style self-check: walks the whole tree under the lock and checks its
    /// structure and every counter: shifts, parent links and offsets, per-node counts and
    /// value counts, sibling entries, folio alignment, mapping and index, cache references,
    /// pages, folios, nodes, shadow entries, and the shadow-node list (exactly the nodes that
    /// hold only shadows, consistently linked).
    pub fn validate(&self) -> Result<IndexStats, String> {
        let g = self.locked.lock();
        let mut c = IndexStats::default();
        let mut listed = Vec::new();
        let root = self.root.load(Ordering::Relaxed);
        if !root.is_null() {
            // SAFETY: under the index lock.
            let r = unsafe { &*root };
            // SAFETY: under the index lock.
            if !unsafe { r.meta(|m| m.parent) }.is_null() {
                return Err("root has a parent".into());
            }
            self.validate_node(r, 0, &mut c, &mut listed)?;
        }
        let s = g.stats;
        for (name, got, want) in [
            ("nr_pages", c.nr_pages, s.nr_pages),
            ("nr_folios", c.nr_folios, s.nr_folios),
            ("nr_nodes", c.nr_nodes, s.nr_nodes),
            ("nr_shadows", c.nr_shadows, s.nr_shadows),
        ] {
            if got != want {
                return Err(format!("{name}: counted {got}, stats say {want}"));
            }
        }
        if s.pages_inserted - s.pages_removed != s.nr_pages {
            return Err(format!(
                "inserted {} - removed {} != cached {}",
                s.pages_inserted, s.pages_removed, s.nr_pages
            ));
        }
        self.validate_shadow_list(&g, &listed)?;
        let mut out = s;
        out.spare_nodes = g.spare.len() as u64;
        Ok(out)
    }

    fn validate_node(
        &self,
        n: &Node,
        base: u128,
        c: &mut IndexStats,
        listed: &mut Vec<*const Node>,
    ) -> Result<(), String> {
        let s = n.shift();
        c.nr_nodes += 1;
        let mut used = 0u32;
        let mut values = 0u32;
        let mut off = 0;
        while off < FANOUT {
            let ibase = base + ((off as u128) << s);
            let w = n.load(off);
            match Entry::decode(w) {
                Entry::Empty => off += 1,
                Entry::Value(_) => {
                    values += 1;
                    used += 1;
                    c.nr_shadows += 1;
                    off += 1;
                }
                Entry::Sibling(canon) => {
                    return Err(format!("orphan sibling at {ibase} -> slot {canon}"));
                }
                Entry::Node(child) => {
                    // SAFETY: under the index lock.
                    let ch = unsafe { &*child };
                    if s < CHUNK_SHIFT || ch.shift() != s - CHUNK_SHIFT {
                        return Err(format!("node at {ibase}: shift {} under {s}", ch.shift()));
                    }
                    // SAFETY: under the index lock.
                    let (parent, poff, count) =
                        unsafe { ch.meta(|m| (m.parent, m.offset as usize, m.count)) };
                    if !std::ptr::eq(parent, n) || poff != off {
                        return Err(format!("node at {ibase}: bad parent link"));
                    }
                    if count == 0 {
                        return Err(format!("empty node left in the tree at {ibase}"));
                    }
                    self.validate_node(ch, ibase, c, listed)?;
                    used += 1;
                    off += 1;
                }
                Entry::Folio(pfn) => {
                    if pfn >= self.arena.nr_pages() {
                        return Err(format!("entry at {ibase}: pfn {pfn} out of the arena"));
                    }
                    let f = self.arena.folio(pfn);
                    let order = f.order();
                    let nr = f.nr_pages() as u64;
                    if Self::target_shift(order) != s {
                        return Err(format!("folio {pfn} of order {order} stored at shift {s}"));
                    }
                    let nslots = 1usize << (order - s);
                    if off % nslots != 0 || off + nslots > FANOUT {
                        return Err(format!("folio {pfn} at slot {off} misaligned"));
                    }
                    for i in 1..nslots {
                        if n.load(off + i) != Entry::sibling(off) {
                            return Err(format!(
                                "folio {pfn}: slot {} is not its sibling",
                                off + i
                            ));
                        }
                    }
                    if f.mapping() != self.id || f.index() as u128 != ibase {
                        return Err(format!(
                            "folio {pfn} at index {ibase} says mapping {} index {}",
                            f.mapping(),
                            f.index()
                        ));
                    }
                    let refs = f.ref_count(self.arena.strategy()) as u64;
                    if refs < nr {
                        return Err(format!("folio {pfn}: {refs} references < {nr} cache refs"));
                    }
                    c.nr_pages += nr;
                    c.nr_folios += 1;
                    used += nslots as u32;
                    off += nslots;
                }
            }
        }
        // SAFETY: under the index lock.
        let count = unsafe { n.meta(|m| m.count) };
        if count != used {
            return Err(format!("node at {base}: count {count}, {used} slots used"));
        }
        Self::validate_shadow_node(n, base, values, listed)
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
