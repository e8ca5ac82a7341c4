//! The page-table side of the space layer: faults, copy-on-write, zapping, fork, PMD splits
//! (`mm/memory.c`, `mm/huge_memory.c`, the rmap calls of `mm/rmap.c`).
//!
//! Every function here runs with the space's page-table lock held (`&mut Mm`), so the
//! entries it reads cannot change under it; what may change concurrently is the state of the
//! *folios*, which other spaces map and unmap under their own locks. That is what the
//! [`FolioRmap`] protocols are for.
//!
//! Reference rules (invariant 4 of the rmap module): a mapping holds one folio reference;
//! references are taken *before* the rmap add and dropped *after* the rmap remove, in
//! batches of a whole run, so refcount ≥ mapcount at every instant another thread could look.

use super::pagetable::{next_run, Pte, Run, Vma, VmaKind};
use super::{Mm, SpaceError, SpacesInner, PMD_ORDER};
use crate::mm::folio::{Folio, PAGE_SIZE};
use crate::mm::rmap::id::RmapId;
use crate::mm::rmap::FolioRmap;

impl SpacesInner {
    #[inline]
    pub(super) fn folio(&self, pfn: u32) -> &Folio {
        self.arena.folio(pfn)
    }

    #[inline]
    pub(super) fn rmap(&self, folio: &Folio) -> &FolioRmap {
        &self.arena.ext(folio).rmap
    }

    /// `folio_ref_add`: `n` more references (the caller holds one through a mapping).
    #[inline]
    pub(super) fn ref_add(&self, folio: &Folio, n: u32) {
        folio.refcount().add(self.arena.strategy(), n);
    }

    /// `folio_ref_sub` + free on the final put (`folios_put_refs`).
    #[inline]
    pub(super) fn ref_sub(&self, folio: &Folio, n: u32) {
        if folio.refcount().sub_and_test(self.arena.strategy(), n) {
            self.arena.free_won(folio);
        }
    }

    /// `vma_alloc_anon_folio_pmd` / `alloc_anon_folio`: a new anonymous folio of `order`, its
    /// bytes zeroed (or copied from page `src_page` of `src`), uptodate, with one reference
    /// that the caller turns into a mapping. Returns its pfn.
    pub(super) fn alloc_anon(
        &self,
        order: u32,
        vpn: u64,
        src: Option<(&Folio, u32)>,
    ) -> Result<u32, SpaceError> {
        let folio = self
            .arena
            .alloc(order)
            .map_err(|_| SpaceError::OutOfMemory { order })?;
        let mut locked = folio.lock();
        let data = locked.data_mut().expect("a fresh folio is not uptodate");
        match src {
            None => data.fill(0),
            Some((s, page)) => {
                let ok = s.read_racy(
                    page as usize * PAGE_SIZE,
                    &mut data[..PAGE_SIZE],
                    &self.arena,
                );
                debug_assert!(ok, "copy-on-write source is not an uptodate folio");
            }
        }
        locked.set_anon(self.anon_mapping, vpn);
        locked.mark_uptodate();
        Ok(locked.unlock().into_raw().pfn())
    }
}

/// `do_anonymous_page`: the first touch of page `idx` of the anonymous VMA at `vstart`.
///
/// Allocates a folio of the VMA's order if its naturally aligned span lies inside the VMA
/// and is entirely unpopulated (the mTHP rule), else (or if the arena cannot supply it) a
/// single page. A PMD-order folio is mapped by one entire mapping when the configuration
/// asks for PMD mappings; smaller large folios are PTE-mapped, as the kernel maps mTHPs.
pub(super) fn anon_fault(
    cx: &SpacesInner,
    me: &RmapId,
    mm: &mut Mm,
    vstart: u64,
    idx: usize,
) -> Result<(), SpaceError> {
    let t = cx.config.tracking;
    let vma = mm.pt.vmas.get_mut(&vstart).expect("vma");
    let VmaKind::Anon { order } = vma.kind else {
        unreachable!("anon fault on a file VMA")
    };
    let vpn = vma.start + idx as u64;
    let mut chosen = 0;
    let mut pfn = None;
    if order > 0 {
        let nr = 1u64 << order;
        let base = vpn & !(nr - 1);
        if base >= vma.start
            && base + nr <= vma.end()
            && vma.ptes[(base - vma.start) as usize..(base + nr - vma.start) as usize]
                .iter()
                .all(|p| !p.present())
        {
            if let Ok(p) = cx.alloc_anon(order, base, None) {
                chosen = order;
                pfn = Some((p, (base - vma.start) as usize));
            }
        }
    }
    let (pfn, first) = match pfn {
        Some(x) => x,
        None => (cx.alloc_anon(0, vpn, None)?, idx),
    };
    let folio = cx.folio(pfn);
    let nr = 1usize << chosen;
    let rmap = cx.rmap(folio);
    // Pages the user protected stay read-only (and are then not PMD-mappable).
    let prot = |p: &Pte| {
        if p.prot_ro() {
            Pte::PROT_RO | Pte::EXCL
        } else {
            Pte::WRITE | Pte::EXCL
        }
    };
    let any_prot = vma.ptes[first..first + nr].iter().any(|p| p.prot_ro());
    if chosen == PMD_ORDER && cx.config.pmd_mapping && !any_prot {
        // `map_anon_folio_pmd`: one mapping, the allocation's reference.
        rmap.add(t, chosen, me, 1);
        for (j, p) in vma.ptes[first..first + nr].iter_mut().enumerate() {
            *p = Pte::new(pfn, j as u32, Pte::WRITE | Pte::EXCL | Pte::ENTIRE);
        }
    } else {
        // `folio_add_new_anon_rmap` + `set_ptes`: nr mappings, nr references.
        if nr > 1 {
            cx.ref_add(folio, nr as u32 - 1);
        }
        rmap.add(t, chosen, me, nr as u32);
        for (j, p) in vma.ptes[first..first + nr].iter_mut().enumerate() {
            *p = Pte::new(pfn, j as u32, prot(p));
        }
    }
    mm.stats.anon_faults += 1;
    mm.stats.rmap_batches += 1;
    Ok(())
}

/// `__split_huge_pmd_locked`: turns the entire mapping that covers entry `idx` into one PTE
/// mapping per page, in one rmap batch.
///
/// The RFC (patches 13 and 14) adds the `nr` PTE mappings in one batch and then removes the
/// PMD mapping, taking the PTEs' references first and dropping the PMD's last, so refcount ≥
/// mapcount throughout. Both changes are by the same space, so we apply their net effect at
/// once: `nr − 1` more references, then `nr − 1` more mappings in a single seqcount section
/// (or lock hold). Readers see the folio go from one mapping to `nr` directly, without the
/// RFC's transient `nr + 1`.
pub(super) fn split_entire(cx: &SpacesInner, me: &RmapId, mm: &mut Mm, vstart: u64, idx: usize) {
    let t = cx.config.tracking;
    let vma = mm.pt.vmas.get_mut(&vstart).expect("vma");
    let pte = vma.ptes[idx];
    debug_assert!(pte.entire());
    let folio = cx.folio(pte.pfn());
    let order = folio.order();
    let nr = 1usize << order;
    let first = idx - pte.page() as usize;
    cx.ref_add(folio, nr as u32 - 1);
    cx.rmap(folio).add(t, order, me, nr as u32 - 1);
    for p in &mut vma.ptes[first..first + nr] {
        *p = p.without(Pte::ENTIRE);
    }
    mm.stats.pmd_splits += 1;
    mm.stats.rmap_batches += 1;
}

/// Splits the entire mappings that `[from, to)` cuts (covers only partly), so the range can
/// be changed page by page.
pub(super) fn split_cut_entire(
    cx: &SpacesInner,
    me: &RmapId,
    mm: &mut Mm,
    vstart: u64,
    from: usize,
    to: usize,
) {
    for edge in [from, to.saturating_sub(1)] {
        let vma = &mm.pt.vmas[&vstart];
        let p = vma.ptes[edge];
        if p.present() && p.entire() {
            let first = edge - p.page() as usize;
            let nr = cx.folio(p.pfn()).nr_pages();
            if first < from || first + nr > to {
                split_entire(cx, me, mm, vstart, edge);
            }
        }
    }
}

/// The result of a write fault, for statistics and the oracle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WpOutcome {
    /// The entry was anon-exclusive: made writable without asking.
    Exclusive,
    /// The folio was reused in place (all of this space's entries of it made writable).
    Reused,
    /// The page was copied into a new small folio.
    Copied,
}

/// `do_wp_page`: a write to the present, non-writable entry `idx` of an anonymous VMA.
///
/// 1. Anon-exclusive entry (`PageAnonExclusive`): make it writable.
/// 2. Entire mapping (`do_huge_pmd_wp_page`): if the folio can be reused, make the whole
///    mapping writable; otherwise split it and continue with the PTE.
/// 3. `wp_can_reuse_anon_folio`: if every reference to the folio is a mapping of this space
///    ([`FolioRmap::can_reuse`] under the strategy), reuse the *whole folio*: every entry of
///    this space that maps it becomes writable and anon-exclusive, so the next writes to its
///    other pages take no fault at all.
/// 4. Otherwise copy *the page* (`wp_page_copy`), as the kernel did for PTE-mapped THPs: one
///    4 KiB copy per write fault keeps a one-byte write cheap and does not double the memory
///    of a folio the other space keeps using; reuse (3) covers the case where a whole-folio
///    copy would have paid off, the folio no longer being shared.
pub(super) fn wp_fault(
    cx: &SpacesInner,
    me: &RmapId,
    mm: &mut Mm,
    vstart: u64,
    idx: usize,
) -> Result<WpOutcome, SpaceError> {
    let t = cx.config.tracking;
    let s = cx.arena.strategy();
    let pte = mm.pt.vmas[&vstart].ptes[idx];
    debug_assert!(pte.present() && !pte.writable() && !pte.prot_ro());
    let folio = cx.folio(pte.pfn());
    let order = folio.order();
    let rmap = cx.rmap(folio);
    if pte.excl() {
        let vma = mm.pt.vmas.get_mut(&vstart).expect("vma");
        if pte.entire() {
            let first = idx - pte.page() as usize;
            for p in &mut vma.ptes[first..first + folio.nr_pages()] {
                *p = p.with(Pte::WRITE);
            }
        } else {
            vma.ptes[idx] = pte.with(Pte::WRITE);
        }
        return Ok(WpOutcome::Exclusive);
    }
    let reuse = rmap.can_reuse(t, order, me, 0, || folio.ref_count(s));
    cx.oracle_decision(mm, me, pte.pfn(), reuse);
    if pte.entire() {
        if reuse {
            let vma = mm.pt.vmas.get_mut(&vstart).expect("vma");
            let first = idx - pte.page() as usize;
            for p in &mut vma.ptes[first..first + folio.nr_pages()] {
                *p = p.with(Pte::WRITE | Pte::EXCL);
            }
            mm.stats.cow_reuses += 1;
            return Ok(WpOutcome::Reused);
        }
        split_entire(cx, me, mm, vstart, idx);
    } else if reuse {
        let vma = mm.pt.vmas.get_mut(&vstart).expect("vma");
        let base = idx as i64 - i64::from(pte.page());
        let lo = base.max(0) as usize;
        let hi = ((base + folio.nr_pages() as i64) as usize).min(vma.ptes.len());
        for p in &mut vma.ptes[lo..hi] {
            if p.present() && p.pfn() == pte.pfn() && !p.prot_ro() {
                *p = p.with(Pte::WRITE | Pte::EXCL);
            }
        }
        mm.stats.cow_reuses += 1;
        return Ok(WpOutcome::Reused);
    }
    // Copy the page.
    let vpn = vstart + idx as u64;
    let new = cx.alloc_anon(0, vpn, Some((folio, pte.page())))?;
    let new_folio = cx.folio(new);
    cx.rmap(new_folio).add(t, 0, me, 1);
    let vma = mm.pt.vmas.get_mut(&vstart).expect("vma");
    vma.ptes[idx] = Pte::new(new, 0, Pte::WRITE | Pte::EXCL);
    rmap.remove(t, order, me, 1);
    cx.ref_sub(folio, 1);
    mm.stats.cow_copies += 1;
    mm.stats.rmap_batches += 2;
    Ok(WpOutcome::Copied)
}

/// `zap_pte_range`: removes every mapping in entries `[from, to)` of the VMA at `vstart`,
/// one rmap batch and one batched reference drop per run (`folio_remove_rmap_ptes` +
/// `folios_put_refs`). Entire mappings the range cuts are split first.
pub(super) fn zap(cx: &SpacesInner, me: &RmapId, mm: &mut Mm, vstart: u64, from: usize, to: usize) {
    if from >= to {
        return;
    }
    split_cut_entire(cx, me, mm, vstart, from, to);
    let t = cx.config.tracking;
    let vma = mm.pt.vmas.get_mut(&vstart).expect("vma");
    let mut i = from;
    let mut batches = 0;
    let mut pages = 0;
    while let Some(r) = next_run(&vma.ptes, i, to) {
        let folio = cx.folio(r.pfn);
        cx.rmap(folio).remove(t, folio.order(), me, r.mappings());
        cx.ref_sub(folio, r.mappings());
        for p in &mut vma.ptes[r.first..r.first + r.len] {
            // The protection outlives the mapping (it belongs to the VMA in the kernel).
            *p = Pte(p.0 & Pte::PROT_RO);
        }
        batches += 1;
        pages += r.len as u64;
        i = r.first + r.len;
    }
    mm.stats.rmap_batches += batches;
    mm.stats.pages_zapped += pages;
}

/// `copy_page_range` for one VMA at fork: the child's copy of `vma`, with every anonymous
/// entry write-protected and no longer anon-exclusive in both spaces (copy-on-write), and
/// the child's references and mappings added one batch per run (`folio_try_dup_anon_rmap_ptes`
/// / `_pmd` + `folio_ref_add`).
pub(super) fn copy_vma(cx: &SpacesInner, child: &RmapId, vma: &mut Vma) -> (Vma, u64) {
    let t = cx.config.tracking;
    let anon = matches!(vma.kind, VmaKind::Anon { .. });
    let mut i = 0;
    let mut batches = 0;
    let end = vma.ptes.len();
    while let Some(r) = next_run(&vma.ptes, i, end) {
        let Run { first, len, .. } = r;
        let folio = cx.folio(r.pfn);
        cx.ref_add(folio, r.mappings());
        cx.rmap(folio).add(t, folio.order(), child, r.mappings());
        if anon {
            for p in &mut vma.ptes[first..first + len] {
                *p = p.without(Pte::WRITE | Pte::EXCL);
            }
        }
        batches += 1;
        i = first + len;
    }
    (vma.clone(), batches)
}
