//! Shadow entries and shadow nodes: what an evicted folio leaves in the index, and the lid on
//! how much of the tree such leftovers may occupy (the index's half of `mm/workingset.c`:
//! `workingset_update_node`, `count_shadow_nodes`, `shadow_lru_isolate`; and the value-entry
//! handling of `page_cache_delete`, `__filemap_add_folio`, `clear_shadow_entries`).
//!
//! # What a shadow is
//!
//! When reclaim evicts a clean folio (`__remove_mapping` with `reclaimed`), the slot does not
//! become empty: it keeps a *value entry* (`xa_mk_value`), a word tagged so that it can never
//! be mistaken for a folio or a node. The LRU packs into it what it needs to judge a later
//! refault (`lru/workingset.rs`); to the index a [`Shadow`] is an opaque payload of
//! [`Shadow::BITS`] bits. Every lookup treats a value entry as "not cached"; counts of cached
//! pages and folios ignore it. An insertion that lands on a shadow takes it out and hands it
//! to the inserter ([`Index::add_folio_shadow`], [`Index::add_folio_range_shadows`]: the
//! kernel's `shadowp`). Truncation and invalidation remove shadows along with the folios
//! (`truncate_inode_pages_range`, `invalidate_mapping_pages`), and folios they remove leave
//! none (the kernel stores a shadow only for reclaim).
//!
//! A large folio's shadow is stored as one copy of the value per slot the folio used (the
//! XArray stores a single multi-index value entry with siblings). Copies make the kernel's
//! split on insertion (`xas_try_split`) trivial: a smaller folio replaces exactly its own
//! slots, and an insertion below a value held one level up first replaces that value with a
//! node full of copies of it. A node whose whole subtree holds only values, where a large
//! folio now goes, is freed with the values in it.
//!
//! # Shadow nodes and their shrinker
//!
//! | node state | `count` vs `nr_values` | on the shadow-node list |
//! |---|---|---|
//! | holds a folio or a child node | `count > nr_values` | no |
//! | holds only value entries | `count == nr_values > 0` | yes (a *shadow node*) |
//! | empty | `0` | no (it is freed at once) |
//!
//! A node that holds only shadows would otherwise live until its file is truncated: a
//! workload streaming through files many times the cache, with the files kept open, grows the
//! tree without bound. Every change of a node's `count` or `nr_values` re-files it
//! ([`Index::update_node`], `workingset_update_node`), so the list holds exactly the shadow
//! nodes, oldest first. The list is per index (the kernel's `shadow_nodes` is one `list_lru`
//! for the whole machine); the cache adds up every index's count in a shared
//! [`ShadowNodes`], and when it exceeds [`ShadowNodes::limit`] of the cache's pages (the
//! kernel's `count_shadow_nodes`: one node per 8 pages with 64-slot nodes) the cache's
//! shrinker asks each index for its share of the excess ([`Index::shrink_shadow_nodes`],
//! `shadow_lru_isolate` + `xa_delete_node`), oldest nodes first.
//!
//! # Invariants (checked by [`Index::validate`])
//!
//! 1. `nr_values` of a node is the number of its slots holding a value entry; values are never
//!    sibling targets (copies are stored instead).
//! 2. A node is on its index's shadow-node list iff `count == nr_values > 0`; the list's
//!    length is `IndexStats::shadow_nodes` and every index's length is summed in the cache's
//!    [`ShadowNodes`].
//! 3. A node is unlinked from the list before it is retired, so the list never points at a
//!    node that is being freed.
//!
//! # Readers
//!
//! Nothing changes for the lockless lookup: a value word, wherever it is met (the slot, the
//! canonical slot of a sibling, the re-check), means "not cached", and a re-check that finds
//! a value where the folio was fails like one that finds an empty slot. A folio is replaced
//! by its shadow only after the freeze succeeded, and a shadow by a folio with the same
//! Release store that publishes any folio (`src/loom_tests/workingset.rs`).

use super::node::{Entry, Meta, Node, CHUNK_SHIFT, FANOUT, VALUE_BITS};
use super::{Index, Locked};
use crate::mm::sync::{AtomicU64, Ordering};

/// Value-entry nodes a shrinker pass frees per index lock hold, and nodes a truncation clears
/// of shadows per lock hold.
const NODES_PER_LOCK: usize = 64;

/// A shadow entry's payload: what reclaim leaves in an evicted folio's slot (a value entry,
/// `xa_mk_value`). The index stores and returns it without looking inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shadow(u64);

impl Shadow {
    /// Payload bits a shadow carries (`BITS_PER_XA_VALUE`): a slot word minus its tag.
    pub const BITS: u32 = VALUE_BITS;

    /// `xa_mk_value`: a shadow carrying `v`, which must be non-zero (zero is the empty slot)
    /// and fit in [`Shadow::BITS`] bits.
    #[inline]
    pub const fn new(v: u64) -> Option<Shadow> {
        if v != 0 && v >> Self::BITS == 0 {
            Some(Shadow(v))
        } else {
            None
        }
    }

    /// `xa_to_value`: the payload.
    #[inline]
    pub const fn value(self) -> u64 {
        self.0
    }

    #[inline]
    pub(crate) fn word(self) -> usize {
        Entry::value(self.0)
    }

    #[inline]
    pub(crate) fn from_payload(v: usize) -> Shadow {
        Shadow(v as u64)
    }
}

/// The shadow-node count of every index of one cache (`list_lru_count(&shadow_nodes)`, the
/// `WORKINGSET_NODES` and `WORKINGSET_NODERECLAIM` counters). Indexes update it under their
/// own lock; the shrinker reads it (relaxed: it is a heuristic, like the kernel's counts).
#[derive(Debug, Default)]
pub struct ShadowNodes {
    nodes: AtomicU64,
    reclaimed: AtomicU64,
}

impl ShadowNodes {
    /// An empty count.
    pub fn new() -> ShadowNodes {
        ShadowNodes::default()
    }

    /// `WORKINGSET_NODES`: index nodes holding only shadow entries, in every index sharing
    /// this count.
    #[inline]
    pub fn nodes(&self) -> u64 {
        self.nodes.load(Ordering::Relaxed)
    }

    /// `WORKINGSET_NODERECLAIM`: shadow nodes the shrinker freed.
    #[inline]
    pub fn reclaimed(&self) -> u64 {
        self.reclaimed.load(Ordering::Relaxed)
    }

    /// `count_shadow_nodes`' limit: the shadow nodes worth keeping for a cache of `pages`
    /// pages. The kernel's two lists never act on a refault farther than the active list (at
    /// most the whole cache), so shadows for about `pages` evictions suffice; assuming nodes
    /// are at worst 1/8 full, that is `pages * 8 / FANOUT` nodes (`pages >> (XA_CHUNK_SHIFT -
    /// 3)`). The protected policy looks two budgets back
    /// ([`HISTORY_BUDGETS`](crate::mm::lru::workingset::HISTORY_BUDGETS)); the same limit
    /// covers that once nodes are a quarter full, and sparser nodes lose part of the second
    /// budget's history (the lab's 2x loop over a file 8 times the budget keeps what LIRS
    /// keeps within a point).
    #[inline]
    pub fn limit(pages: u64) -> u64 {
        pages * 8 / FANOUT as u64
    }

    /// `count_shadow_nodes`: how many shadow nodes exceed [`ShadowNodes::limit`] now.
    #[inline]
    pub fn excess(&self, pages: u64) -> u64 {
        self.nodes().saturating_sub(Self::limit(pages))
    }

    #[inline]
    fn add(&self) {
        self.nodes.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    pub(super) fn sub(&self, n: u64) {
        self.nodes.fetch_sub(n, Ordering::Relaxed);
    }
}

/// The index's shadow-node list (its share of `shadow_nodes`), oldest first, linked through
/// the nodes' `Meta`. Lives in the index lock's data.
#[derive(Debug)]
pub(super) struct ShadowList {
    /// The node that became a shadow node first, or null.
    head: *mut Node,
    /// The newest, or null.
    tail: *mut Node,
}

// SAFETY: the pointers are only followed by the holder of the index lock that contains the
// list, and the nodes they point at are live tree nodes (unlinked before they are retired).
unsafe impl Send for ShadowList {}

impl ShadowList {
    pub(super) fn new() -> ShadowList {
        ShadowList {
            head: std::ptr::null_mut(),
            tail: std::ptr::null_mut(),
        }
    }
}

/// `m` of a node under the index lock.
///
/// # Safety
/// The caller holds the index lock and `node` is a live node of that index.
#[inline]
unsafe fn meta<R>(node: *mut Node, f: impl FnOnce(&mut Meta) -> R) -> R {
    // SAFETY: per the caller's contract.
    unsafe { (*node).meta(f) }
}

impl Index {
    /// `workingset_update_node`: files `node` on the shadow-node list if it now holds only
    /// value entries, takes it off if it no longer does. Called after every change of the
    /// node's `count` or `nr_values`. Under the lock.
    pub(super) fn update_node(&self, g: &mut Locked, node: *mut Node) {
        // SAFETY: under the index lock; `node` is in the tree.
        let (want, on) = unsafe { meta(node, |m| (m.shadow_only(), m.on_shadow_list)) };
        if want && !on {
            self.shadow_list_add(g, node);
        } else if !want && on {
            self.shadow_list_del(g, node);
        }
    }

    /// Appends `node` (newest) to the shadow-node list. Under the lock.
    fn shadow_list_add(&self, g: &mut Locked, node: *mut Node) {
        let tail = g.shadows.tail;
        // SAFETY: under the index lock; `node` and `tail` are live tree nodes.
        unsafe {
            meta(node, |m| {
                m.on_shadow_list = true;
                m.shadow_prev = tail;
                m.shadow_next = std::ptr::null_mut();
            });
            if tail.is_null() {
                g.shadows.head = node;
            } else {
                meta(tail, |m| m.shadow_next = node);
            }
        }
        g.shadows.tail = node;
        g.stats.shadow_nodes += 1;
        self.shadow_nodes.add();
    }

    /// Unlinks `node` from the shadow-node list. Under the lock.
    pub(super) fn shadow_list_del(&self, g: &mut Locked, node: *mut Node) {
        // SAFETY: under the index lock; `node` and its list neighbours are live tree nodes.
        unsafe {
            let (prev, next) = meta(node, |m| {
                debug_assert!(m.on_shadow_list);
                m.on_shadow_list = false;
                let pn = (m.shadow_prev, m.shadow_next);
                m.shadow_prev = std::ptr::null_mut();
                m.shadow_next = std::ptr::null_mut();
                pn
            });
            if prev.is_null() {
                g.shadows.head = next;
            } else {
                meta(prev, |m| m.shadow_next = next);
            }
            if next.is_null() {
                g.shadows.tail = prev;
            } else {
                meta(next, |m| m.shadow_prev = prev);
            }
        }
        g.stats.shadow_nodes -= 1;
        self.shadow_nodes.sub(1);
    }

    /// Frees the subtree under `node` (unlinked by the caller), which holds only value
    /// entries; returns one of its values. Under the lock.
    pub(super) fn free_value_subtree(&self, g: &mut Locked, node: *mut Node) -> Option<usize> {
        let mut shadow = None;
        for off in 0..FANOUT {
            // SAFETY: under the index lock; the subtree is still intact.
            let w = unsafe { (*node).load(off) };
            match Entry::decode(w) {
                Entry::Empty => {}
                Entry::Value(v) => {
                    g.stats.nr_shadows -= 1;
                    shadow = Some(v);
                }
                Entry::Node(c) => {
                    if let Some(v) = self.free_value_subtree(g, c) {
                        shadow = Some(v);
                    }
                }
                e => unreachable!("a subtree checked to hold only values holds {e:?}"),
            }
        }
        self.retire(g, node);
        shadow
    }

    /// Whether the subtree under `n` holds nothing but value entries. Under the lock.
    pub(super) fn only_values(n: &Node) -> bool {
        (0..FANOUT).all(|off| match Entry::decode(n.load(off)) {
            Entry::Empty | Entry::Value(_) => true,
            // SAFETY: under the index lock: children in the tree are live.
            Entry::Node(c) => Self::only_values(unsafe { &*c }),
            _ => false,
        })
    }

    /// Whether a slot at a new folio's level may be overwritten by it: empty, a shadow, or a
    /// subtree of shadows. Under the lock.
    #[inline]
    pub(super) fn replaceable(w: usize) -> bool {
        match Entry::decode(w) {
            Entry::Empty | Entry::Value(_) => true,
            // SAFETY: under the index lock.
            Entry::Node(c) => Self::only_values(unsafe { &*c }),
            _ => false,
        }
    }

    /// The first node holding a value entry that covers an index in `from..=last`, and the
    /// first index that node covers. Under the lock.
    fn find_value_node(&self, from: u64, last: u64) -> Option<(*mut Node, u128)> {
        self.first_in_range(from, last, &mut |node, _, base, _, _, e| {
            matches!(e, Entry::Value(_)).then_some((node, base))
        })
    }

    /// `clear_shadow_entries` over `start..end`: removes every shadow entry covering an index
    /// of the range (a large shadow overlapping its edge is removed whole), frees the nodes
    /// that empties, and returns the entries removed. Takes the lock once per
    /// `NODES_PER_LOCK` nodes.
    pub(super) fn clear_shadows(&self, start: u64, end: u64) -> u64 {
        let mut total = 0;
        let mut next = start;
        let mut more = true;
        while more && next < end {
            let mut g = self.lock(Vec::new());
            let mut cleared = 0;
            for _ in 0..NODES_PER_LOCK {
                let Some((node, base)) = self.find_value_node(next, end - 1) else {
                    more = false;
                    break;
                };
                // SAFETY: under the index lock.
                let n = unsafe { &*node };
                let s = n.shift();
                let first = if (next as u128) > base {
                    ((next as u128 - base) >> s) as usize
                } else {
                    0
                };
                let mut k = 0u32;
                let mut stop = FANOUT;
                for off in first..FANOUT {
                    if base + ((off as u128) << s) >= end as u128 {
                        stop = off;
                        break;
                    }
                    if let Entry::Value(_) = Entry::decode(n.load(off)) {
                        n.store(off, 0);
                        k += 1;
                    }
                }
                // SAFETY: under the index lock.
                unsafe {
                    meta(node, |m| {
                        m.count -= k;
                        m.nr_values -= k;
                    })
                };
                cleared += k as u64;
                // Everything this node covers below `stop` is now free of values.
                next = (base + ((stop as u128) << s)).min(end as u128) as u64;
                self.delete_empty(&mut g, node);
                if next >= end {
                    more = false;
                    break;
                }
            }
            g.stats.nr_shadows -= cleared;
            g.stats.shadows_cleared += cleared;
            total += cleared;
        }
        total
    }

    /// `scan_shadow_nodes` / `shadow_lru_isolate` for this index: frees up to `nr` of its
    /// oldest shadow nodes (their shadows are forgotten: refaults there look like first
    /// faults). Returns the nodes freed.
    pub fn shrink_shadow_nodes(&self, nr: u64) -> u64 {
        let mut freed = 0;
        while freed < nr {
            let mut g = self.lock(Vec::new());
            for _ in 0..NODES_PER_LOCK {
                if freed == nr {
                    break;
                }
                let node = g.shadows.head;
                if node.is_null() {
                    break;
                }
                self.delete_shadow_node(&mut g, node);
                freed += 1;
            }
            let empty = g.shadows.head.is_null();
            drop(g);
            if empty {
                break;
            }
        }
        self.shadow_nodes
            .reclaimed
            .fetch_add(freed, Ordering::Relaxed);
        freed
    }

    /// `xa_delete_node` of a shadow node: unlink it from its parent (readers still inside see
    /// its values, i.e. "not cached", until the grace period ends), retire it, and free the
    /// ancestors that empties. Under the lock.
    fn delete_shadow_node(&self, g: &mut Locked, node: *mut Node) {
        // SAFETY: under the index lock; list members are live tree nodes.
        let (values, parent, offset) = unsafe {
            meta(node, |m| {
                debug_assert!(m.shadow_only(), "a node on the shadow list holds a folio");
                (m.nr_values, m.parent, m.offset as usize)
            })
        };
        g.stats.nr_shadows -= values as u64;
        g.stats.shadow_nodes_reclaimed += 1;
        if let Some(parent) = self.unlink_node(g, node, parent, offset) {
            self.delete_empty(g, parent);
        }
    }

    /// Checks the shadow bookkeeping of one node during [`Index::validate`]: `nr_values`
    /// against the values counted, list membership against the node's contents.
    pub(super) fn validate_shadow_node(
        n: &Node,
        base: u128,
        values: u32,
        listed: &mut Vec<*const Node>,
    ) -> Result<(), String> {
        // SAFETY: under the index lock (validate holds it).
        let (nr_values, shadow_only, on) =
            unsafe { n.meta(|m| (m.nr_values, m.shadow_only(), m.on_shadow_list)) };
        if nr_values != values {
            return Err(format!(
                "node at {base}: nr_values {nr_values}, {values} value slots"
            ));
        }
        if shadow_only != on {
            return Err(format!(
                "node at {base}: shadow-only {shadow_only} but on the shadow list {on}"
            ));
        }
        if on {
            listed.push(n as *const Node);
        }
        Ok(())
    }

    /// Walks the shadow-node list, checking it links exactly the nodes `listed` (found in the
    /// tree) in a consistent order. Pointers are compared against `listed` before they are
    /// followed. Under the lock.
    pub(super) fn validate_shadow_list(
        &self,
        g: &Locked,
        listed: &[*const Node],
    ) -> Result<(), String> {
        if listed.len() as u64 != g.stats.shadow_nodes {
            return Err(format!(
                "{} shadow nodes in the tree, stats say {}",
                listed.len(),
                g.stats.shadow_nodes
            ));
        }
        let set: std::collections::HashSet<*const Node> = listed.iter().copied().collect();
        let (mut at, mut prev, mut len) = (g.shadows.head, std::ptr::null_mut::<Node>(), 0);
        while !at.is_null() {
            if !set.contains(&(at as *const Node)) || len > listed.len() {
                return Err(format!(
                    "the shadow list links a node not in the tree ({at:p})"
                ));
            }
            // SAFETY: `at` is a live tree node (in `set`); validate holds the lock.
            let (p, next) = unsafe { meta(at, |m| (m.shadow_prev, m.shadow_next)) };
            if p != prev {
                return Err("shadow list: a node's prev link is wrong".into());
            }
            len += 1;
            prev = at;
            at = next;
        }
        if g.shadows.tail != prev || len != listed.len() {
            return Err(format!(
                "shadow list: walked {len} nodes, {} expected, tail {}",
                listed.len(),
                if g.shadows.tail == prev {
                    "ok"
                } else {
                    "wrong"
                }
            ));
        }
        Ok(())
    }
}

/// Slots a folio of `order` takes at its level.
#[inline]
pub(super) fn slots_of(order: u32) -> usize {
    1usize << (order % CHUNK_SHIFT)
}
