//! Removal: delete and replace one folio (`page_cache_delete`, `replace_page_cache_folio`),
//! split a large folio into pages, evict with or without a shadow (`__remove_mapping`), and
//! remove a range (`truncate_inode_pages_range`, `invalidate_mapping_pages`).

use super::*;

impl Index {
    /// The node and canonical offset of `pfn`'s entry at `index`, if the tree holds it there.
    /// Under the lock.
    pub(super) fn slot_of(&self, index: u64, pfn: u32) -> Option<(*const Node, usize)> {
        let (node, _, off, w) = self.walk(index)?;
        (w == Entry::folio(pfn)).then_some((node, off))
    }

    /// Retires an unlinked node: off the shadow-node list now, freed after a grace period.
    pub(super) fn retire(&self, g: &mut Locked, node: *mut Node) {
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
    pub(super) fn clear_entry(
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
    pub(super) fn delete_empty(&self, g: &mut Locked, mut node: *mut Node) {
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
    pub(super) fn unlink_node(
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
    pub(super) fn shrink(&self, g: &mut Locked) {
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
    pub(super) fn remove_locked(
        &self,
        g: &mut Locked,
        folio: &Folio,
        shadow: Option<Shadow>,
    ) -> bool {
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
    /// folios of one order of this index's arena, `new` without a mapping. Returns false,
    /// changing nothing, if `old` is not in this index or the folios do not qualify.
    ///
    /// A large folio's entry is its canonical slot (the others are siblings naming it), so
    /// one store replaces it whole, at any order.
    pub fn replace_folio(&self, old: &FolioLocked<'_>, new: &FolioLocked<'_>) -> bool {
        if old.mapping() != self.id
            || new.mapping() != 0
            || new.is_anon()
            || old.order() != new.order()
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
        let nr = old.nr_pages() as u32;
        new.refcount().add(self.arena.strategy(), nr);
        new.set_mapping(self.id, index);
        // SAFETY: `node` is in the tree and we hold the index lock. The store is Release
        // (`Node::store`), pairing with lockless readers' Acquire slot loads; a reader that
        // took a reference on `old` before it fails its re-check (the slot moved on) and
        // looks again.
        unsafe { (*node).store(off, Entry::folio(new.pfn())) };
        old.set_mapping(0, index);
        drop(g);
        self.put_detached(old);
        true
    }

    /// The page cache's side of `collapse_file` (khugepaged), by copy: puts the locked large
    /// folio `new` (unmapped, holding their bytes) in place of the locked folios `old`, which
    /// cache every page of `index..index + new.nr_pages()` between them (in page order),
    /// under one lock hold, so every page stays cached throughout. `new` takes the cache's
    /// references, this mapping and `index`; each of `old` leaves the mapping and the cache's
    /// references on it are put (the caller's keep them alive; a reader holding one keeps
    /// reading its bytes, which stay the file's bytes of that moment).
    ///
    /// The canonical slot is stored first, then the others from the last down: a reader of a
    /// slot not yet rewritten still resolves to the old folio that holds its page (an old
    /// folio's siblings are rewritten before its canonical slot, so a sibling never resolves
    /// to another sibling), and one rewritten resolves to `new`; a reader that resolved a
    /// rewritten sibling to the old first folio fails its re-check (`folio_contains`) and
    /// looks again.
    ///
    /// Orders up to 5 (one leaf node's slots). Returns false, changing nothing, if the
    /// folios do not qualify or are not all in this index.
    pub fn collapse_folios(&self, old: &[FolioLocked<'_>], new: &FolioLocked<'_>) -> bool {
        self.collapse_folios_inner(old, new, false)
    }

    /// The collapse with a deliberately wrong order, for the loom model that must catch it:
    /// the old folios' slots are emptied before the new entry is stored, so a lookup in
    /// between misses a page that stays cached. Never use it elsewhere.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn collapse_folios_with_gap(&self, old: &[FolioLocked<'_>], new: &FolioLocked<'_>) -> bool {
        self.collapse_folios_inner(old, new, true)
    }

    fn collapse_folios_inner(
        &self,
        old: &[FolioLocked<'_>],
        new: &FolioLocked<'_>,
        gap: bool,
    ) -> bool {
        let order = new.order();
        let nr = new.nr_pages() as u64;
        let Some(first) = old.first() else {
            return false;
        };
        let index = first.index();
        let mut next = index;
        for f in old {
            if f.mapping() != self.id || f.index() != next || !std::ptr::eq(f.arena(), &*self.arena)
            {
                return false;
            }
            next += f.nr_pages() as u64;
        }
        if order == 0
            || Self::target_shift(order) != 0
            || index % nr != 0
            || next != index + nr
            || old.len() < 2
            || new.mapping() != 0
            || new.is_anon()
            || !std::ptr::eq(new.arena(), &*self.arena)
        {
            return false;
        }
        let mut g = self.lock(Vec::new());
        let mut slots = Vec::with_capacity(old.len());
        for f in old {
            match self.slot_of(f.index(), f.pfn()) {
                Some(s) => slots.push(s),
                None => return false,
            }
        }
        let (node, off) = slots[0];
        if slots.iter().any(|&(n, _)| !std::ptr::eq(n, node)) {
            return false;
        }
        // `new`'s identity and the cache's references before the publishing store, as in
        // `add_locked`; the caller holds a reference.
        new.refcount().add(self.arena.strategy(), nr as u32);
        new.set_mapping(self.id, index);
        // SAFETY: under the index lock; `node` is in the tree.
        let n = unsafe { &*node };
        if gap {
            for i in 0..nr as usize {
                n.store(off + i, 0);
            }
        }
        n.store(off, Entry::folio(new.pfn()));
        for i in (1..nr as usize).rev() {
            n.store(off + i, Entry::sibling(off));
        }
        g.stats.nr_folios -= old.len() as u64 - 1;
        g.stats.collapses += 1;
        drop(g);
        for f in old {
            f.set_mapping(0, f.index());
            self.put_detached(f);
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

    pub(super) fn split_folio_inner(
        &self,
        old: &FolioLocked<'_>,
        new: &[FolioLocked<'_>],
        gap: bool,
    ) -> bool {
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
        self.put_detached(old);
        true
    }

    /// Puts the cache's references (one per page) on `old`, which has just left this index
    /// (replaced, split or collapsed). The caller's own reference keeps it alive, so the put
    /// is never the last one; were it, the folio is freed rather than leaked.
    fn put_detached(&self, old: &FolioLocked<'_>) {
        let last = old
            .refcount()
            .sub_and_test(self.arena.strategy(), old.nr_pages() as u32);
        debug_assert!(!last, "the caller holds a reference");
        if last {
            self.arena.free_won(old);
        }
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
    pub(super) fn evict_frozen<'a>(
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
    pub(super) fn first_in_range<R>(
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
    pub(super) fn find(&self, from: u64, last: u64) -> Option<(u64, u32)> {
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
    pub(super) fn remove_range(&self, start: u64, end: u64, truncate: bool) -> RemoveStats {
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
}
