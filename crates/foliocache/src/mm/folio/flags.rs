//! The folio flags word (`enum pageflags` in `include/linux/page-flags.h`).
//!
//! One `u64` per folio head. Bits 0..32 are single flags, bits 32..40 hold a generation number
//! (reserved for a multi-generational LRU) and an access counter (used by the active list's
//! aging), like the kernel's `LRU_GEN_MASK`/`LRU_REFS_MASK` in the upper bits of
//! `page->flags`. Every bit is changed
//! with an atomic read-modify-write, so layers that own different bits never lose each other's
//! updates; a bit's *meaning* is owned by one layer (noted per constant).
//!
//! Two masks tie the word to the allocator, as `PAGE_FLAGS_CHECK_AT_FREE` and
//! `PAGE_FLAGS_CHECK_AT_PREP` do:
//!
//! | mask | checked | a set bit means |
//! |---|---|---|
//! | [`FLAGS_CHECK_AT_FREE`] | when the final reference is dropped or a frozen folio is freed | a layer forgot to undo its state (still on the LRU, still locked, still active...): a "bad page" |
//! | [`FLAGS_CHECK_AT_PREP`] | when a folio is handed out by the allocator | someone wrote a free folio's flags (a stale pointer used without a reference) |
//!
//! After the check the free path clears the whole word (the kernel's sanitising), so a bad
//! page is reported once and the memory is still reused.

/// `PG_locked`: the folio lock is held (I/O in flight, truncation, migration...).
pub const PG_LOCKED: u64 = 1 << 0;
/// `PG_waiters`: at least one thread sleeps in the wait table on this folio; the unlocker
/// must take the slow path and wake it.
pub const PG_WAITERS: u64 = 1 << 1;
/// `PG_uptodate`: the data is valid. Set once (with release ordering) by the lock holder and
/// never cleared while the folio stays allocated: the page bytes are immutable from then on.
pub const PG_UPTODATE: u64 = 1 << 2;
/// `PG_error`: the last read into this folio failed (owned by the read path).
pub const PG_ERROR: u64 = 1 << 3;
/// `PG_referenced`: accessed once since the last LRU scan (owned by the LRU).
pub const PG_REFERENCED: u64 = 1 << 4;
/// `PG_dirty`: the data differs from the backing store (reserved: no writeback yet).
pub const PG_DIRTY: u64 = 1 << 5;
/// `PG_lru`: the folio is on an LRU list (owned by the LRU; must be clear at free).
pub const PG_LRU: u64 = 1 << 6;
/// `PG_active`: on, or headed for, the active list (owned by the LRU; must be clear at free).
pub const PG_ACTIVE: u64 = 1 << 7;
/// `PG_workingset`: the folio was part of the working set when it was last evicted.
pub const PG_WORKINGSET: u64 = 1 << 8;
/// `PG_unevictable`: on the unevictable list (must be clear at free).
pub const PG_UNEVICTABLE: u64 = 1 << 9;
/// `PG_private`: a filesystem attached private data (must be clear at free).
pub const PG_PRIVATE: u64 = 1 << 10;
/// `PG_private_2`: a second private marker (fscache in the kernel; must be clear at free).
pub const PG_PRIVATE_2: u64 = 1 << 11;
/// `PG_writeback`: being written back (reserved; must be clear at free).
pub const PG_WRITEBACK: u64 = 1 << 12;
/// `PG_reserved`: never to be freed (must be clear at free).
pub const PG_RESERVED: u64 = 1 << 13;
/// `PG_mlocked`: mapped by an mlocked range; the free path clears it and counts it, as the
/// kernel does (`UNEVICTABLE_MLOCKFREED`), instead of calling it a bad page.
pub const PG_MLOCKED: u64 = 1 << 14;
/// `PG_readahead`: the reader that hits this folio should start the next async readahead.
pub const PG_READAHEAD: u64 = 1 << 15;
/// `PG_reclaim`: picked by reclaim; rotate to the inactive tail after writeback (reserved).
pub const PG_RECLAIM: u64 = 1 << 16;
/// `PG_swapbacked`: anonymous-like memory (backed by swap, not by a file).
pub const PG_SWAPBACKED: u64 = 1 << 17;
/// `PG_dropbehind`: drop from the cache once read (uncached reads).
pub const PG_DROPBEHIND: u64 = 1 << 18;
/// `PageAnon`: an anonymous folio owned by address spaces. Its bytes stay mutable after
/// uptodate and are accessed only with the racy (atomic) copies; the free path clears its
/// mapping silently (the kernel's `PAGE_MAPPING_ANON` bit lives in `folio->mapping`).
pub const PG_ANON: u64 = 1 << 19;
/// A buffer manager's exclusive latch updates this page-cache folio's bytes in place (no
/// kernel counterpart: the kernel's closest is a folio held locked from `write_begin` to
/// `write_end`, which never outlives a system call). Set by the lock holder while the
/// refcount is frozen, so no reader holds the bytes; cleared by the latch's commit under the
/// lock with a Release RMW (waking the readers that wait for it). While it is set only the
/// latch's holder touches the bytes: [`FolioRef::data`](super::FolioRef::data) refuses the
/// folio, readers wait ([`FolioRef::wait_unlatched`](super::FolioRef::wait_unlatched)) and
/// writeback skips or waits for it.
pub const PG_LATCHED: u64 = 1 << 20;

/// First bit of the reserved LRU-generation field (`LRU_GEN_PGOFF`).
pub const LRU_GEN_SHIFT: u32 = 32;
/// `LRU_GEN_MASK`: generation number + 1 of a multi-generational LRU (0 = not on one).
pub const LRU_GEN_MASK: u64 = 0xf << LRU_GEN_SHIFT;
/// First bit of the LRU access counter (`LRU_REFS_PGOFF`).
pub const LRU_REFS_SHIFT: u32 = LRU_GEN_SHIFT + 4;
/// `LRU_REFS_MASK`: an access counter, as MGLRU keeps for folios read through file
/// descriptors. Here the classic LRU uses it on the active list: reads beyond the first since
/// aging last looked (`Folio::inc_lru_refs`), each worth one more trip round the active list
/// (`LruConfig::active_second_chance`). Cleared with the rest of the word at free.
pub const LRU_REFS_MASK: u64 = 0x3 << LRU_REFS_SHIFT;
/// The largest count the field holds.
pub const LRU_REFS_MAX: u32 = 3;

/// `PAGE_FLAGS_CHECK_AT_FREE`: flags that must be clear when a folio is freed; a set one is a
/// bad page (a layer freed a folio without undoing its state).
pub const FLAGS_CHECK_AT_FREE: u64 = PG_LRU
    | PG_LOCKED
    | PG_PRIVATE
    | PG_PRIVATE_2
    | PG_WRITEBACK
    | PG_RESERVED
    | PG_ACTIVE
    | PG_UNEVICTABLE
    | PG_MLOCKED
    | PG_LATCHED
    | LRU_GEN_MASK;

/// Every flag bit defined above, including the reserved LRU fields.
pub const FLAGS_ALL: u64 = ((PG_LATCHED << 1) - 1) | LRU_GEN_MASK | LRU_REFS_MASK;

/// `PAGE_FLAGS_CHECK_AT_PREP`: flags that must be clear when the allocator hands a folio out
/// (all of them: the free path cleared the word, so a set bit means a free folio was written).
pub const FLAGS_CHECK_AT_PREP: u64 = FLAGS_ALL;

/// Bits only the folio lock holder (or the allocator) may change: the lock protocol bits and
/// the two that govern who may touch the page bytes. `Folio::set_flag` refuses them.
pub const FLAGS_PROTECTED: u64 = PG_LOCKED | PG_WAITERS | PG_UPTODATE | PG_ANON | PG_LATCHED;

/// Names for [`describe`], in bit order.
const NAMES: [(u64, &str); 21] = [
    (PG_LOCKED, "locked"),
    (PG_WAITERS, "waiters"),
    (PG_UPTODATE, "uptodate"),
    (PG_ERROR, "error"),
    (PG_REFERENCED, "referenced"),
    (PG_DIRTY, "dirty"),
    (PG_LRU, "lru"),
    (PG_ACTIVE, "active"),
    (PG_WORKINGSET, "workingset"),
    (PG_UNEVICTABLE, "unevictable"),
    (PG_PRIVATE, "private"),
    (PG_PRIVATE_2, "private_2"),
    (PG_WRITEBACK, "writeback"),
    (PG_RESERVED, "reserved"),
    (PG_MLOCKED, "mlocked"),
    (PG_READAHEAD, "readahead"),
    (PG_RECLAIM, "reclaim"),
    (PG_SWAPBACKED, "swapbacked"),
    (PG_DROPBEHIND, "dropbehind"),
    (PG_ANON, "anon"),
    (PG_LATCHED, "latched"),
];

/// `%pGp`: the flag names set in `flags`, joined by `|` (for bad-page reports and debugging).
pub fn describe(flags: u64) -> String {
    let mut out: Vec<String> = NAMES
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, name)| (*name).to_string())
        .collect();
    if flags & LRU_GEN_MASK != 0 {
        out.push(format!(
            "lru_gen={}",
            (flags & LRU_GEN_MASK) >> LRU_GEN_SHIFT
        ));
    }
    if flags & LRU_REFS_MASK != 0 {
        out.push(format!(
            "lru_refs={}",
            (flags & LRU_REFS_MASK) >> LRU_REFS_SHIFT
        ));
    }
    if out.is_empty() {
        "none".to_string()
    } else {
        out.join("|")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_consistent() {
        assert_eq!(FLAGS_CHECK_AT_FREE & !FLAGS_ALL, 0);
        assert_eq!(FLAGS_CHECK_AT_PREP, FLAGS_ALL);
        // Every named bit is distinct and covered by FLAGS_ALL.
        let mut seen = 0u64;
        for (bit, _) in NAMES {
            assert_eq!(bit.count_ones(), 1);
            assert_eq!(seen & bit, 0);
            seen |= bit;
        }
        assert_eq!(seen | LRU_GEN_MASK | LRU_REFS_MASK, FLAGS_ALL);
        assert_eq!(describe(PG_LRU | PG_ACTIVE), "lru|active");
        assert_eq!(describe(0), "none");
        assert_eq!(describe(2 << LRU_GEN_SHIFT), "lru_gen=2");
    }
}
