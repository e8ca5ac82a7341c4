//! The read side: the lockless walk under RCU (`xas_load`), the lookups that take a speculative
//! reference and re-check the slot (`filemap_get_entry`), and `contains`.

use super::*;

impl Index {
    /// `xas_load`: the node holding the entry for `index`, the offset of `index`'s own slot
    /// in it, the canonical offset of the entry (different for a sibling) and the folio word.
    /// The caller is inside an RCU read section of this index's domain or holds the index
    /// lock; the returned node stays valid as long as that lasts.
    #[inline]
    pub(super) fn walk(&self, index: u64) -> Option<(*const Node, usize, usize, usize)> {
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
    pub(super) fn resolve(n: &Node, own: usize) -> (usize, usize) {
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
    pub(super) fn lookup_inner(&self, index: u64, recheck: Recheck) -> Option<FolioRef<'_>> {
        let _rcu = self.rcu().read_lock();
        self.lookup_walk(index, recheck)
    }

    /// The lookup proper; the caller is inside a read section.
    #[inline(always)]
    pub(super) fn lookup_walk(&self, index: u64, recheck: Recheck) -> Option<FolioRef<'_>> {
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
}
