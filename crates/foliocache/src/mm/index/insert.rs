//! Insertion under the index lock: node allocation outside it, multi-index stores, one folio
//! (`__filemap_add_folio`) and a contiguous run under one lock hold (seed 001,
//! `filemap_add_folio_range`), with the shadows they replace.

use super::*;

impl Index {
    /// The level a folio of `order` is stored at.
    #[inline]
    pub(super) fn target_shift(order: u32) -> u32 {
        (order / CHUNK_SHIFT) * CHUNK_SHIFT
    }

    /// `xas_create`, read-only: how many new nodes storing an entry of `order` at `index`
    /// needs, or `Err` if part of the range is occupied (by a folio: shadow entries are
    /// replaced, and a value one level up is split into a new node). Under the lock.
    pub(super) fn nodes_needed(&self, index: u64, order: u32) -> Result<usize, ()> {
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
    pub(super) fn take_node(
        &self,
        g: &mut Locked,
        shift: u32,
        parent: *mut Node,
        offset: usize,
    ) -> *mut Node {
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
    pub(super) fn store_entry(
        &self,
        g: &mut Locked,
        index: u64,
        order: u32,
        w: usize,
    ) -> Option<usize> {
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
    pub(super) fn add_locked(
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
    pub(super) fn relock_with_nodes<'a>(
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

    pub(super) fn check_arena(&self, folio: &FolioLocked<'_>) -> Result<(), AddError> {
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
}
