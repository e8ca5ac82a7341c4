//! Radix-tree nodes and slot entries (`struct xa_node`, `xa_mk_internal`, `xa_mk_sibling` in
//! `include/linux/xarray.h`).

use crate::mm::sync::{AtomicU8, AtomicUsize, Ordering, UnsafeCell};

/// `XA_CHUNK_SHIFT`: log2 of the slots per node (64; 4 under loom to keep models small, the
/// kernel's `CONFIG_BASE_SMALL` idea).
#[cfg(not(loom))]
pub(crate) const CHUNK_SHIFT: u32 = 6;
#[cfg(loom)]
pub(crate) const CHUNK_SHIFT: u32 = 2;
/// `XA_CHUNK_SIZE`: slots per node.
pub(crate) const FANOUT: usize = 1 << CHUNK_SHIFT;
/// `XA_CHUNK_MASK`.
pub(crate) const MASK: u64 = FANOUT as u64 - 1;

/// Entry tags in the low two bits of a slot word.
const TAG_MASK: usize = 3;
const TAG_FOLIO: usize = 1;
const TAG_NODE: usize = 2;
const TAG_SIBLING: usize = 3;

/// A decoded slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Nothing stored (0).
    Empty,
    /// A folio, by head pfn: `pfn << 2 | 1`.
    Folio(u32),
    /// A child node: `ptr | 2` (nodes are 64-byte aligned).
    Node(*mut Node),
    /// Part of a multi-index entry whose canonical slot is at this offset of the same node
    /// (`xa_mk_sibling`): `offset << 2 | 3`.
    Sibling(usize),
    /// A value entry (`xa_mk_value`): `v << 2`, `v != 0`. The page cache stores *shadow*
    /// entries here when reclaim evicts a folio (see `index/shadow.rs`); lookups treat every
    /// value entry as "not cached".
    Value(usize),
}

impl Entry {
    #[inline]
    pub(crate) fn decode(w: usize) -> Entry {
        match w & TAG_MASK {
            _ if w == 0 => Entry::Empty,
            TAG_FOLIO => Entry::Folio((w >> 2) as u32),
            TAG_NODE => Entry::Node((w & !TAG_MASK) as *mut Node),
            TAG_SIBLING => Entry::Sibling(w >> 2),
            _ => Entry::Value(w >> 2),
        }
    }

    #[inline]
    pub(crate) fn folio(pfn: u32) -> usize {
        ((pfn as usize) << 2) | TAG_FOLIO
    }

    #[inline]
    pub(crate) fn node(p: *const Node) -> usize {
        debug_assert_eq!(p as usize & TAG_MASK, 0);
        p as usize | TAG_NODE
    }

    #[inline]
    pub(crate) fn sibling(offset: usize) -> usize {
        (offset << 2) | TAG_SIBLING
    }

    /// The word of value entry `v` (`xa_mk_value`); `0 < v < 2^VALUE_BITS`.
    #[inline]
    pub(crate) fn value(v: u64) -> usize {
        debug_assert!(v != 0 && v >> VALUE_BITS == 0);
        (v as usize) << 2
    }
}

/// Payload bits of a value entry (`BITS_PER_XA_VALUE`): the word minus the two tag bits.
pub(crate) const VALUE_BITS: u32 = usize::BITS - 2;

/// Writer-only node fields, changed under the index lock.
#[derive(Debug)]
pub(crate) struct Meta {
    /// Non-empty slots (`xa_node.count`), value entries included.
    pub(crate) count: u32,
    /// Slots holding value entries (`xa_node.nr_values`). `count == nr_values > 0` makes the
    /// node a *shadow node*, tracked on the index's shadow-node list.
    pub(crate) nr_values: u32,
    /// The parent node, null for the root.
    pub(crate) parent: *mut Node,
    /// Our slot in the parent (`xa_node.offset`).
    pub(crate) offset: u8,
    /// On the index's shadow-node list (`!list_empty(&node->private_list)`).
    pub(crate) on_shadow_list: bool,
    /// The shadow-node list's links (`xa_node.private_list`), towards the older and the newer
    /// end; null at the ends and while off the list.
    pub(crate) shadow_prev: *mut Node,
    pub(crate) shadow_next: *mut Node,
}

impl Meta {
    /// Whether the node holds only value entries (and at least one): a shadow node.
    #[inline]
    pub(crate) fn shadow_only(&self) -> bool {
        self.count != 0 && self.count == self.nr_values
    }
}

/// `struct xa_node`: `FANOUT` slots covering `FANOUT << shift` indices.
#[repr(align(64))]
pub(crate) struct Node {
    /// Slot words, loaded by lockless readers (`Acquire`) and stored under the lock
    /// (`Release`).
    pub(crate) slots: [AtomicUsize; FANOUT],
    /// `xa_node.shift`: the index bits below this node's slot number. Written before the node
    /// is published and never changed after.
    shift: AtomicU8,
    meta: UnsafeCell<Meta>,
}

// SAFETY: `slots` and `shift` are atomics; `meta` is accessed only by the holder of the
// index lock (every accessor below documents it), so sharing nodes between threads is sound.
unsafe impl Send for Node {}
// SAFETY: as above.
unsafe impl Sync for Node {}

impl Node {
    pub(crate) fn new() -> Box<Node> {
        Box::new(Node {
            slots: std::array::from_fn(|_| AtomicUsize::new(0)),
            shift: AtomicU8::new(0),
            meta: UnsafeCell::new(Meta {
                count: 0,
                nr_values: 0,
                parent: std::ptr::null_mut(),
                offset: 0,
                on_shadow_list: false,
                shadow_prev: std::ptr::null_mut(),
                shadow_next: std::ptr::null_mut(),
            }),
        })
    }

    #[inline]
    pub(crate) fn shift(&self) -> u32 {
        self.shift.load(Ordering::Relaxed) as u32
    }

    /// Sets the shift of an unpublished node.
    pub(crate) fn set_shift(&self, shift: u32) {
        self.shift.store(shift as u8, Ordering::Relaxed);
    }

    /// The slot for `index` in this node.
    #[inline]
    pub(crate) fn offset_of(&self, index: u64) -> usize {
        ((index >> self.shift()) & MASK) as usize
    }

    #[inline]
    pub(crate) fn load(&self, offset: usize) -> usize {
        // ORDERING: Acquire; pairs with the Release `store` that published the entry (a node's
        // initialised slots, a folio's mapping/index and cache references).
        self.slots[offset].load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn store(&self, offset: usize, w: usize) {
        // ORDERING: Release; pairs with the Acquire `load` of lockless readers.
        self.slots[offset].store(w, Ordering::Release);
    }

    /// Runs `f` on the writer-only fields.
    ///
    /// # Safety
    /// The caller holds the index lock of the tree this node belongs to (or owns the node
    /// exclusively: unpublished, or the tree is being dropped).
    #[inline]
    pub(crate) unsafe fn meta<R>(&self, f: impl FnOnce(&mut Meta) -> R) -> R {
        // SAFETY: exclusive access per the caller's contract.
        self.meta.with_mut(|m| f(unsafe { &mut *m }))
    }
}

/// The largest index a node of `shift` covers from its base (`FANOUT << shift` indices).
#[inline]
pub(crate) fn span(shift: u32) -> u128 {
    (FANOUT as u128) << shift
}
