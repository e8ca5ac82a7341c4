//! Page tables: VMAs of page-table entries, and the runs rmap batching works on.
//!
//! A space's page table is a map from the first virtual page number (vpn) of each VMA
//! (`struct vm_area_struct`) to a dense vector of [`Pte`]s, one per page. There is no
//! separate PMD level: a PMD-mapped folio (an *entire* mapping, `folio_add_anon_rmap_pmd`)
//! is `nr_pages` consecutive PTEs carrying [`Pte::ENTIRE`], which together count as one
//! mapping and hold one folio reference. Splitting the PMD (`__split_huge_pmd_locked`)
//! clears the bit on all of them and turns them into `nr_pages` PTE mappings.
//!
//! | bits | field |
//! |---|---|
//! | 0 | `PRESENT` |
//! | 1 | `WRITE`: writable now (a present anon PTE without it is copy-on-write) |
//! | 2 | `ENTIRE`: part of one entire (PMD) mapping of its folio |
//! | 3 | `PROT_RO`: the user protected the page read-only (`mprotect(PROT_READ)`) |
//! | 4 | `EXCL`: the page is exclusive to this space (`PageAnonExclusive`): a write fault may make it writable without asking who else maps the folio |
//! | 16..32 | page index within the folio |
//! | 32..64 | the folio's pfn |

use std::collections::BTreeMap;

/// One page-table entry (see the module docs for the layout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct Pte(pub u64);

impl Pte {
    /// Present (`pte_present`).
    pub const PRESENT: u64 = 1 << 0;
    /// Writable (`pte_write`).
    pub const WRITE: u64 = 1 << 1;
    /// Part of an entire (PMD) mapping.
    pub const ENTIRE: u64 = 1 << 2;
    /// Protected read-only by the user.
    pub const PROT_RO: u64 = 1 << 3;
    /// Anon-exclusive (`PageAnonExclusive`, kept per entry here).
    pub const EXCL: u64 = 1 << 4;
    /// An empty entry (`pte_none`).
    pub const NONE: Pte = Pte(0);

    /// `mk_pte`: maps page `page` of the folio at `pfn`.
    #[inline]
    pub fn new(pfn: u32, page: u32, flags: u64) -> Self {
        debug_assert!(page < 1 << 16);
        Pte(u64::from(pfn) << 32 | u64::from(page) << 16 | flags | Self::PRESENT)
    }

    /// `pte_present`.
    #[inline]
    pub fn present(self) -> bool {
        self.0 & Self::PRESENT != 0
    }

    /// `pte_write`.
    #[inline]
    pub fn writable(self) -> bool {
        self.0 & Self::WRITE != 0
    }

    /// Part of an entire mapping.
    #[inline]
    pub fn entire(self) -> bool {
        self.0 & Self::ENTIRE != 0
    }

    /// Protected read-only.
    #[inline]
    pub fn prot_ro(self) -> bool {
        self.0 & Self::PROT_RO != 0
    }

    /// Anon-exclusive.
    #[inline]
    pub fn excl(self) -> bool {
        self.0 & Self::EXCL != 0
    }

    /// The folio's pfn.
    #[inline]
    pub fn pfn(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The page index within the folio.
    #[inline]
    pub fn page(self) -> u32 {
        ((self.0 >> 16) & 0xffff) as u32
    }

    /// With `flag` set.
    #[inline]
    pub fn with(self, flag: u64) -> Self {
        Pte(self.0 | flag)
    }

    /// With `flag` clear.
    #[inline]
    pub fn without(self, flag: u64) -> Self {
        Pte(self.0 & !flag)
    }
}

/// What backs a VMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmaKind {
    /// Private anonymous memory, faulted in as folios of `order` (`MAP_PRIVATE|MAP_ANONYMOUS`
    /// with an mTHP size).
    Anon {
        /// The folio order new faults try first.
        order: u32,
    },
    /// A shared read-only mapping of given (page-cache) folios.
    File,
}

/// `struct vm_area_struct`: a contiguous range of virtual pages and their entries.
#[derive(Clone, Debug)]
pub struct Vma {
    /// First vpn.
    pub start: u64,
    /// What backs it.
    pub kind: VmaKind,
    /// One entry per page.
    pub ptes: Vec<Pte>,
}

impl Vma {
    /// One past the last vpn.
    #[inline]
    pub fn end(&self) -> u64 {
        self.start + self.ptes.len() as u64
    }
}

/// A run of consecutive present entries of one folio, mapped the same way (all entire or
/// all PTE): the unit of one batched rmap update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Index of the first entry in the VMA.
    pub first: usize,
    /// Number of entries.
    pub len: usize,
    /// The folio's pfn.
    pub pfn: u32,
    /// True if the run is (part of) an entire mapping.
    pub entire: bool,
}

impl Run {
    /// Mappings this run accounts for: 1 for a whole entire mapping, `len` for PTEs.
    #[inline]
    pub fn mappings(&self) -> u32 {
        if self.entire {
            1
        } else {
            self.len as u32
        }
    }
}

/// The first run of `ptes[from..end]`: the maximal stretch of present entries, starting at
/// the first present one, with the same pfn, the same `ENTIRE` bit and consecutive page
/// indexes. `None` if no entry in the range is present.
#[inline]
pub fn next_run(ptes: &[Pte], from: usize, end: usize) -> Option<Run> {
    let i = (from..end).find(|&i| ptes[i].present())?;
    let p = ptes[i];
    let mut j = i + 1;
    while j < end {
        let q = ptes[j];
        if !q.present()
            || q.pfn() != p.pfn()
            || q.entire() != p.entire()
            || q.page() != p.page() + (j - i) as u32
        {
            break;
        }
        j += 1;
    }
    Some(Run {
        first: i,
        len: j - i,
        pfn: p.pfn(),
        entire: p.entire(),
    })
}

/// Calls `f` for every run of `ptes[range]` (see [`next_run`]).
pub fn for_each_run(ptes: &[Pte], range: std::ops::Range<usize>, mut f: impl FnMut(Run)) {
    let mut i = range.start;
    while let Some(r) = next_run(ptes, i, range.end) {
        f(r);
        i = r.first + r.len;
    }
}

/// `pages` empty entries, from zeroed memory: a large table costs no stores up front (the
/// allocator hands out fresh zero pages), so reserving a VMA over a big file is O(1).
fn empty_ptes(pages: usize) -> Vec<Pte> {
    let mut words = std::mem::ManuallyDrop::new(vec![0u64; pages]);
    let (ptr, len, cap) = (words.as_mut_ptr(), words.len(), words.capacity());
    // SAFETY: `Pte` is `repr(transparent)` over `u64` (same size and alignment), the vector's
    // allocation is handed over whole, and an all-zero `u64` is `Pte::NONE`.
    unsafe { Vec::from_raw_parts(ptr.cast::<Pte>(), len, cap) }
}

/// A space's page tables: its VMAs by first vpn, and where the next VMA goes.
#[derive(Debug, Default, Clone)]
pub struct PageTable {
    /// VMAs by first vpn; never overlapping.
    pub vmas: BTreeMap<u64, Vma>,
    /// The next free vpn for a new VMA (addresses are never reused).
    pub next_vpn: u64,
}

/// New VMAs start at a multiple of this many pages (2 MiB), so folios of every supported
/// order can be naturally aligned.
pub const VMA_ALIGN_PAGES: u64 = 512;

impl PageTable {
    /// An empty page table whose first VMA starts at vpn 512 (address 2 MiB; 0 stays
    /// unmapped, like the zero page of a process).
    pub fn new() -> Self {
        Self {
            vmas: BTreeMap::new(),
            next_vpn: VMA_ALIGN_PAGES,
        }
    }

    /// `get_unmapped_area`: reserves `pages` pages at an aligned vpn and inserts an empty VMA.
    pub fn insert(&mut self, pages: usize, kind: VmaKind) -> u64 {
        let start = self.reserve(pages);
        self.insert_at(start, pages, kind);
        start
    }

    /// `get_unmapped_area` alone: `pages` pages of address space at an aligned vpn that no
    /// later VMA will be given, with nothing mapped there yet ([`PageTable::insert_at`]
    /// places VMAs in it).
    pub fn reserve(&mut self, pages: usize) -> u64 {
        let start = self.next_vpn;
        let span = (pages as u64).div_ceil(VMA_ALIGN_PAGES).max(1) * VMA_ALIGN_PAGES;
        // One unmapped guard stretch between VMAs keeps them from merging by accident.
        self.next_vpn = start + span + VMA_ALIGN_PAGES;
        start
    }

    /// Inserts an empty VMA of `pages` pages at `start`, which the caller checked is free.
    pub fn insert_at(&mut self, start: u64, pages: usize, kind: VmaKind) {
        debug_assert!(self.overlapping(start, start + pages as u64).is_empty());
        self.vmas.insert(
            start,
            Vma {
                start,
                kind,
                ptes: empty_ptes(pages),
            },
        );
    }

    /// `find_vma`: the VMA containing `vpn` and the entry index within it.
    #[inline]
    pub fn find(&self, vpn: u64) -> Option<(&Vma, usize)> {
        let (_, v) = self.vmas.range(..=vpn).next_back()?;
        (vpn < v.end()).then(|| (v, (vpn - v.start) as usize))
    }

    /// `follow_page`'s walk: the present entry mapping `vpn`, if any.
    #[inline]
    pub fn present(&self, vpn: u64) -> Option<Pte> {
        let (vma, idx) = self.find(vpn)?;
        let p = vma.ptes[idx];
        p.present().then_some(p)
    }

    /// `find_vma` for changes.
    #[inline]
    pub fn find_mut(&mut self, vpn: u64) -> Option<(&mut Vma, usize)> {
        let (_, v) = self.vmas.range_mut(..=vpn).next_back()?;
        let end = v.end();
        (vpn < end).then(|| {
            let i = (vpn - v.start) as usize;
            (v, i)
        })
    }

    /// The starts of the VMAs that overlap `[start, end)`.
    pub fn overlapping(&self, start: u64, end: u64) -> Vec<u64> {
        let first = self
            .vmas
            .range(..=start)
            .next_back()
            .filter(|(_, v)| v.end() > start)
            .map(|(k, _)| *k);
        first
            .into_iter()
            .chain(self.vmas.range(start + 1..end).map(|(k, _)| *k))
            .collect()
    }

    /// Number of present entries (for statistics and tests).
    pub fn present_pages(&self) -> usize {
        self.vmas
            .values()
            .map(|v| v.ptes.iter().filter(|p| p.present()).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pte_fields_round_trip() {
        let p = Pte::new(0xdead_beef, 511, Pte::WRITE | Pte::ENTIRE);
        assert!(p.present() && p.writable() && p.entire() && !p.prot_ro());
        assert_eq!((p.pfn(), p.page()), (0xdead_beef, 511));
        let q = p.without(Pte::WRITE).with(Pte::PROT_RO);
        assert!(!q.writable() && q.prot_ro());
        assert!(!Pte::NONE.present());
    }

    #[test]
    fn runs_split_on_folio_page_and_entire_changes() {
        let mut ptes = vec![Pte::NONE; 12];
        for (i, p) in ptes.iter_mut().enumerate().take(4) {
            *p = Pte::new(8, i as u32, 0);
        }
        ptes[4] = Pte::new(8, 5, 0); // page gap
        ptes[5] = Pte::new(8, 6, 0);
        for (i, p) in ptes.iter_mut().enumerate().take(8).skip(6) {
            *p = Pte::new(16, i as u32 - 6, Pte::ENTIRE);
        }
        ptes[9] = Pte::new(20, 0, 0);
        let mut runs = Vec::new();
        for_each_run(&ptes, 0..12, |r| {
            runs.push((r.first, r.len, r.pfn, r.mappings()))
        });
        assert_eq!(
            runs,
            vec![(0, 4, 8, 4), (4, 2, 8, 2), (6, 2, 16, 1), (9, 1, 20, 1)]
        );
        let mut sub = Vec::new();
        for_each_run(&ptes, 2..5, |r| sub.push((r.first, r.len)));
        assert_eq!(sub, vec![(2, 2), (4, 1)]);
    }

    #[test]
    fn vmas_are_found_and_overlaps_listed() {
        let mut pt = PageTable::new();
        let a = pt.insert(3, VmaKind::Anon { order: 2 });
        let b = pt.insert(600, VmaKind::File);
        assert_eq!(a % VMA_ALIGN_PAGES, 0);
        assert!(b >= a + 2 * VMA_ALIGN_PAGES);
        assert_eq!(pt.find(a + 2).map(|(v, i)| (v.start, i)), Some((a, 2)));
        assert!(pt.find(a + 3).is_none());
        assert!(pt.find(0).is_none());
        assert_eq!(pt.overlapping(a + 1, b + 1), vec![a, b]);
        assert_eq!(pt.overlapping(a + 3, b), Vec::<u64>::new());
    }
}
