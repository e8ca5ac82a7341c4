//! The LRU lists themselves: intrusive doubly linked lists threaded through folio numbers.
//!
//! The kernel links `folio->lru` (a `list_head` inside `struct folio`) into the lruvec's
//! lists. We keep the links beside the folios instead, in one slot per arena frame indexed by
//! the folio's number (its pfn), and the whole table lives inside the lruvec lock's
//! [`Mutex`](crate::mm::sync::Mutex): whoever holds the lock owns every link, so the lists need no
//! atomics and no `unsafe`. A slot also records which list it is on and the folio's order, so
//! an unlink never depends on flags that might have changed since the folio was added.
//!
//! Orientation, as in `list_add`/`lru_to_folio`: new folios go to the *head* (most recently
//! used end); reclaim takes folios from the *tail* (least recently used end).
//!
//! | slot state | `list` | `prev`/`next` |
//! |---|---|---|
//! | not on any list | [`OFF_LIST`] | [`NIL`] |
//! | on list `l` | `l as u8` | neighbours towards the head / towards the tail, [`NIL`] at the ends |

use std::fmt;

use crate::mm::sync::{Arc, AtomicU64, Ordering};

/// "No folio": the end of a list, or an unlinked slot's neighbours.
pub(crate) const NIL: u32 = u32::MAX;
/// A slot's `list` when the folio is on no list.
pub(crate) const OFF_LIST: u8 = u8::MAX;

/// Which LRU list a folio sits on (`enum lru_list`, file half plus unevictable).
///
/// foliocache caches file data only, so the kernel's anonymous lists have no counterpart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LruList {
    /// `LRU_INACTIVE_FILE`: reclaim candidates, scanned from the tail.
    Inactive = 0,
    /// `LRU_ACTIVE_FILE`: folios accessed more than once; aged down into the inactive list.
    Active = 1,
    /// `LRU_UNEVICTABLE`: folios reclaim must not look at.
    Unevictable = 2,
}

/// Number of lists ([`LruList`] variants), `NR_LRU_LISTS` for the file half.
pub const NR_LRU_LISTS: usize = 3;

impl LruList {
    /// Every list, in index order.
    pub const ALL: [LruList; NR_LRU_LISTS] =
        [LruList::Inactive, LruList::Active, LruList::Unevictable];

    /// The list with index `i` (inverse of `as usize`).
    pub(crate) fn from_index(i: u8) -> Option<LruList> {
        Self::ALL.get(i as usize).copied()
    }

    /// Stable lower-case name (`inactive`, `active`, `unevictable`).
    pub fn name(self) -> &'static str {
        match self {
            LruList::Inactive => "inactive",
            LruList::Active => "active",
            LruList::Unevictable => "unevictable",
        }
    }
}

impl fmt::Display for LruList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug)]
struct Link {
    /// Neighbour towards the head (more recently used).
    prev: u32,
    /// Neighbour towards the tail (less recently used).
    next: u32,
    /// The list, or [`OFF_LIST`].
    list: u8,
    /// log2 of the folio's pages, remembered for the page counters.
    order: u8,
}

const UNLINKED: Link = Link {
    prev: NIL,
    next: NIL,
    list: OFF_LIST,
    order: 0,
};

#[derive(Clone, Copy, Debug, Default)]
struct Head {
    /// Most recently added folio, or [`NIL`].
    head: u32,
    /// Least recently added folio, or [`NIL`].
    tail: u32,
    /// Folios on the list.
    folios: usize,
    /// Base pages on the list (`lru_zone_size`).
    pages: usize,
}

const EMPTY: Head = Head {
    head: NIL,
    tail: NIL,
    folios: 0,
    pages: 0,
};

/// The lruvec's lists: one link slot per folio number, and a head per [`LruList`].
///
/// Every method is O(1) except [`Lists::iter`] and [`Lists::validate`]. Methods panic on
/// misuse (adding a folio that is already on a list, unlinking one that is not): those are
/// bugs in the LRU code, like the kernel's `VM_BUG_ON_FOLIO`s.
pub(crate) struct Lists {
    /// One link per folio number below `links.len()`: grown a chunk at a time as folios are
    /// first linked (its room is reserved up front and written only then), so a large budget
    /// costs nothing here until its pages are used. Numbers past it are unlinked.
    links: Vec<Link>,
    /// Folio numbers the lists may hold.
    slots: usize,
    heads: [Head; NR_LRU_LISTS],
    /// The active list's page count, mirrored for readers without the lock
    /// (`lruvec_page_state(NR_ACTIVE_FILE)`, read by `workingset_test_recent`). Written only
    /// by the lock holder, with plain relaxed stores: readers want a recent value, not a
    /// synchronised one.
    active_pages: Arc<AtomicU64>,
}

impl Lists {
    /// Lists able to hold folios numbered `0..slots`, all empty.
    pub(crate) fn new(slots: usize) -> Self {
        assert!(
            slots < NIL as usize,
            "the LRU addresses folios with 32-bit numbers; {slots} frames is too many"
        );
        Self {
            links: Vec::with_capacity(slots),
            slots,
            heads: [EMPTY; NR_LRU_LISTS],
            active_pages: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The lock-free mirror of the active list's page count.
    pub(crate) fn active_pages_mirror(&self) -> Arc<AtomicU64> {
        self.active_pages.clone()
    }

    /// Refreshes the mirror after `list` changed.
    #[inline]
    fn mirror(&self, list: LruList) {
        if list == LruList::Active {
            let pages = self.heads[LruList::Active as usize].pages as u64;
            self.active_pages.store(pages, Ordering::Relaxed);
        }
    }

    /// Number of folio slots.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// Makes room for the link of `pfn`: grows the links, unlinked, to the end of its chunk
    /// of 512 (one largest folio's frames, as the arena builds its headers).
    #[cold]
    fn grow_to(&mut self, pfn: u32) {
        assert!(
            (pfn as usize) < self.slots,
            "folio {pfn} past the last slot"
        );
        let end = (pfn as usize + 1).next_multiple_of(512).min(self.slots);
        self.links.resize(end, UNLINKED);
    }

    /// The list folio `pfn` is on, if any.
    #[inline]
    pub(crate) fn list_of(&self, pfn: u32) -> Option<LruList> {
        LruList::from_index(self.links.get(pfn as usize)?.list)
    }

    /// Folios on `list`.
    #[inline]
    pub(crate) fn folios(&self, list: LruList) -> usize {
        self.heads[list as usize].folios
    }

    /// Base pages on `list`.
    #[inline]
    pub(crate) fn pages(&self, list: LruList) -> usize {
        self.heads[list as usize].pages
    }

    /// The least recently added folio of `list` (`lru_to_folio`), if any.
    #[inline]
    pub(crate) fn tail(&self, list: LruList) -> Option<u32> {
        let t = self.heads[list as usize].tail;
        (t != NIL).then_some(t)
    }

    /// Links `pfn` (a folio of `order`) at the head of `list` (`list_add`).
    pub(crate) fn add_head(&mut self, pfn: u32, order: u8, list: LruList) {
        if pfn as usize >= self.links.len() {
            self.grow_to(pfn);
        }
        let l = &mut self.links[pfn as usize];
        assert_eq!(l.list, OFF_LIST, "folio {pfn} is already on an LRU list");
        let h = &mut self.heads[list as usize];
        *l = Link {
            prev: NIL,
            next: h.head,
            list: list as u8,
            order,
        };
        let old = h.head;
        h.head = pfn;
        if old == NIL {
            h.tail = pfn;
        } else {
            self.links[old as usize].prev = pfn;
        }
        h.folios += 1;
        h.pages += 1 << order;
        self.mirror(list);
    }

    /// Unlinks `pfn` from its list (`list_del`) and returns that list and the folio's order.
    pub(crate) fn del(&mut self, pfn: u32) -> (LruList, u8) {
        let l = self.links.get(pfn as usize).copied().unwrap_or(UNLINKED);
        let list = LruList::from_index(l.list)
            .unwrap_or_else(|| panic!("folio {pfn} is not on an LRU list"));
        let h = &mut self.heads[list as usize];
        if l.prev == NIL {
            h.head = l.next;
        } else {
            self.links[l.prev as usize].next = l.next;
        }
        if l.next == NIL {
            h.tail = l.prev;
        } else {
            self.links[l.next as usize].prev = l.prev;
        }
        h.folios -= 1;
        h.pages -= 1 << l.order;
        self.links[pfn as usize] = UNLINKED;
        self.mirror(list);
        (list, l.order)
    }

    /// Moves `pfn` to the tail of its list (`list_move_tail`): the end reclaim takes first.
    pub(crate) fn move_tail(&mut self, pfn: u32) {
        let (list, order) = self.del(pfn);
        let h = &mut self.heads[list as usize];
        let old = h.tail;
        self.links[pfn as usize] = Link {
            prev: old,
            next: NIL,
            list: list as u8,
            order,
        };
        h.tail = pfn;
        if old == NIL {
            h.head = pfn;
        } else {
            self.links[old as usize].next = pfn;
        }
        h.folios += 1;
        h.pages += 1 << order;
        self.mirror(list);
    }

    /// Moves `pfn` to the head of `list` (`list_move`), from whatever list it is on.
    pub(crate) fn move_head(&mut self, pfn: u32, list: LruList) {
        let (_, order) = self.del(pfn);
        self.add_head(pfn, order, list);
    }

    /// The folios of `list` from head (most recent) to tail.
    pub(crate) fn iter(&self, list: LruList) -> impl Iterator<Item = u32> + '_ {
        let mut at = self.heads[list as usize].head;
        std::iter::from_fn(move || {
            (at != NIL).then(|| {
                let pfn = at;
                at = self.links[pfn as usize].next;
                pfn
            })
        })
    }

    /// Recomputes every list from its links and compares with the heads' counters and each
    /// slot's recorded list. Returns the first inconsistency found.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let mut seen = vec![false; self.links.len()];
        for list in LruList::ALL {
            let h = &self.heads[list as usize];
            let (mut folios, mut pages, mut prev) = (0usize, 0usize, NIL);
            let mut at = h.head;
            while at != NIL {
                let l = self.links.get(at as usize).ok_or_else(|| {
                    format!("{list} list links to folio {at}, past the last slot")
                })?;
                if seen[at as usize] {
                    return Err(format!("folio {at} is linked twice ({list} list)"));
                }
                seen[at as usize] = true;
                if l.list != list as u8 {
                    return Err(format!(
                        "folio {at} is on the {list} list but its slot says {}",
                        l.list
                    ));
                }
                if l.prev != prev {
                    return Err(format!(
                        "folio {at} on the {list} list: prev {} but reached from {prev}",
                        l.prev
                    ));
                }
                folios += 1;
                pages += 1 << l.order;
                prev = at;
                at = l.next;
            }
            if h.tail != prev {
                return Err(format!(
                    "{list} list: tail is {} but the walk ended at {prev}",
                    h.tail
                ));
            }
            if (folios, pages) != (h.folios, h.pages) {
                return Err(format!(
                    "{list} list: counted {folios} folios / {pages} pages, counters say {} / {}",
                    h.folios, h.pages
                ));
            }
            if list == LruList::Active && self.active_pages.load(Ordering::Relaxed) != pages as u64
            {
                return Err(format!(
                    "active list: {pages} pages, the lock-free mirror says {}",
                    self.active_pages.load(Ordering::Relaxed)
                ));
            }
        }
        for (pfn, l) in self.links.iter().enumerate() {
            if !seen[pfn] && (l.list != OFF_LIST || l.prev != NIL || l.next != NIL) {
                return Err(format!(
                    "folio {pfn} is on no list walk but its slot says list {} prev {} next {}",
                    l.list, l.prev, l.next
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Lists {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Lists");
        for list in LruList::ALL {
            d.field(list.name(), &self.heads[list as usize].folios);
        }
        d.finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn order(l: &Lists, list: LruList) -> Vec<u32> {
        l.iter(list).collect()
    }

    #[test]
    fn insertion_removal_and_moves() {
        let mut l = Lists::new(8);
        l.add_head(3, 2, LruList::Inactive);
        l.add_head(1, 0, LruList::Inactive);
        l.add_head(2, 0, LruList::Inactive);
        assert_eq!(order(&l, LruList::Inactive), [2, 1, 3]);
        assert_eq!(l.tail(LruList::Inactive), Some(3));
        assert_eq!(
            (l.folios(LruList::Inactive), l.pages(LruList::Inactive)),
            (3, 6)
        );
        l.validate().unwrap();
        assert_eq!(l.del(1), (LruList::Inactive, 0));
        assert_eq!(order(&l, LruList::Inactive), [2, 3]);
        l.move_head(3, LruList::Active);
        assert_eq!(l.list_of(3), Some(LruList::Active));
        assert_eq!(l.list_of(1), None);
        assert_eq!(
            (l.folios(LruList::Active), l.pages(LruList::Active)),
            (1, 4)
        );
        l.validate().unwrap();
        l.del(2);
        l.del(3);
        assert_eq!(l.tail(LruList::Inactive), None);
        assert_eq!(l.tail(LruList::Active), None);
        l.validate().unwrap();
    }

    #[test]
    #[should_panic(expected = "already on an LRU list")]
    fn double_add_is_a_bug() {
        let mut l = Lists::new(2);
        l.add_head(0, 0, LruList::Inactive);
        l.add_head(0, 0, LruList::Active);
    }

    #[test]
    #[should_panic(expected = "not on an LRU list")]
    fn unlinking_an_unlisted_folio_is_a_bug() {
        Lists::new(2).del(1);
    }

    #[test]
    fn validate_catches_a_corrupt_counter() {
        let mut l = Lists::new(4);
        l.add_head(0, 0, LruList::Active);
        l.heads[LruList::Active as usize].folios = 2;
        assert!(l.validate().unwrap_err().contains("counters say"));
    }

    #[test]
    fn validate_catches_a_dangling_slot() {
        let mut l = Lists::new(4);
        l.grow_to(3);
        l.links[2].list = LruList::Inactive as u8;
        assert!(l.validate().unwrap_err().contains("folio 2"));
    }
}
