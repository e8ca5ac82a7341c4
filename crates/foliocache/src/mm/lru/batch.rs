//! `struct folio_batch`: a small array of folios moved to or within the LRU together.
//!
//! 31 entries plus a count, like the kernel's `PAGEVEC_SIZE`, which makes the kernel struct
//! exactly 256 bytes; ours holds 32-bit folio numbers, so it is 128 bytes, two cache lines.
//! Every folio in a batch owes the batch one reference (taken when it was queued, dropped
//! when the batch is drained), except entries the drain cleared after freeing them.

/// Entries in a folio batch (`PAGEVEC_SIZE`): 31, so the kernel's `struct folio_batch` is 256 bytes.
pub const FOLIO_BATCH_SIZE: usize = 31;

/// A batch of folio numbers (`struct folio_batch`).
#[derive(Clone, Copy)]
pub(crate) struct FolioBatch {
    nr: u8,
    folios: [u32; FOLIO_BATCH_SIZE],
}

impl FolioBatch {
    /// An empty batch (`folio_batch_init`).
    pub(crate) const fn new() -> Self {
        Self {
            nr: 0,
            folios: [0; FOLIO_BATCH_SIZE],
        }
    }

    /// Appends `pfn` and returns the space left (`folio_batch_add`): 0 means the batch is full
    /// and the caller must drain it before adding more.
    #[inline]
    pub(crate) fn add(&mut self, pfn: u32) -> usize {
        assert!(
            (self.nr as usize) < FOLIO_BATCH_SIZE,
            "adding to a full folio batch"
        );
        self.folios[self.nr as usize] = pfn;
        self.nr += 1;
        FOLIO_BATCH_SIZE - self.nr as usize
    }

    /// Folios in the batch (`folio_batch_count`).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.nr as usize
    }

    /// True if the batch holds nothing.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.nr == 0
    }

    /// The queued folio numbers, oldest first.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u32] {
        &self.folios[..self.nr as usize]
    }

    /// Whether `pfn` is queued, scanning from the newest entry (as
    /// `__lru_cache_activate_folio` does: a folio just added is the likely hit).
    #[inline]
    pub(crate) fn contains(&self, pfn: u32) -> bool {
        self.as_slice().iter().rev().any(|&p| p == pfn)
    }

    /// Empties the batch and returns what it held (`folio_batch_reinit` after a copy).
    #[inline]
    pub(crate) fn take(&mut self) -> FolioBatch {
        std::mem::replace(self, FolioBatch::new())
    }
}

impl std::fmt::Debug for FolioBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_to_thirty_one_and_reports_space() {
        let mut b = FolioBatch::new();
        assert!(b.is_empty());
        for i in 0..FOLIO_BATCH_SIZE as u32 - 1 {
            assert_eq!(b.add(i), FOLIO_BATCH_SIZE - 1 - i as usize);
        }
        assert_eq!(b.add(99), 0);
        assert_eq!(b.len(), FOLIO_BATCH_SIZE);
        assert!(b.contains(99) && b.contains(0) && !b.contains(30));
        let t = b.take();
        assert!(b.is_empty());
        assert_eq!(t.as_slice().len(), FOLIO_BATCH_SIZE);
        assert_eq!(t.as_slice()[0], 0);
        assert_eq!(std::mem::size_of::<FolioBatch>(), 128);
    }

    #[test]
    #[should_panic(expected = "full folio batch")]
    fn overfilling_is_a_bug() {
        let mut b = FolioBatch::new();
        for i in 0..=FOLIO_BATCH_SIZE as u32 {
            b.add(i);
        }
    }
}
