//! How an [`Lru`](super::Lru)(super::Lru) behaves: the drain filter of seed 004 ([`DrainFilter`]) and the
//! [`LruConfig`] policy switches, with their limits.

/// What the add-batch drain does with a folio whose only reference is the batch's (seed 004).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum DrainFilter {
    /// The kernel before the seed: add it to the LRU anyway; the drain's final put then takes
    /// the lock again to remove it.
    Vanilla,
    /// The seed, corrected: `freeze(1)`, clear [`LRU_FLAGS_AT_FREE`](super::LRU_FLAGS_AT_FREE), free it without the LRU
    /// and without the lock.
    #[default]
    Filtered,
    /// The seed's first version: `freeze(1)` and free the folio as it is. A folio that picked
    /// up `PG_active` in the batch reaches the free path with it: a bad page. Kept to show the
    /// bug; never use it for real.
    Naive,
    /// Loom only: a weakened filter that checks the count with a load and then drops the
    /// batch's reference as if it were the last (check-then-act instead of one CAS). The loom
    /// model must catch it freeing a folio a concurrent lookup just took.
    #[cfg(loom)]
    #[doc(hidden)]
    RacyCheck,
}

impl DrainFilter {
    /// Every filter, in declaration order.
    pub const ALL: [DrainFilter; 3] = [
        DrainFilter::Vanilla,
        DrainFilter::Filtered,
        DrainFilter::Naive,
    ];

    /// Stable name: `vanilla`, `filtered`, `naive`.
    pub const fn name(self) -> &'static str {
        match self {
            DrainFilter::Vanilla => "vanilla",
            DrainFilter::Filtered => "filtered",
            DrainFilter::Naive => "naive",
            #[cfg(loom)]
            DrainFilter::RacyCheck => "racy-check",
        }
    }
}

impl crate::Variant for DrainFilter {
    const KIND: &'static str = "drain filter";
    const ALL: &'static [Self] = &DrainFilter::ALL;
    fn name(self) -> &'static str {
        DrainFilter::name(self)
    }
}
crate::variant::variant_traits!(DrainFilter);

/// Which replacement policy an [`Lru`](super::Lru) runs over its two lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LruPolicy {
    /// The kernel's active/inactive lists (`mm/vmscan.c`'s classic half): the inactive list
    /// kept at `active / inactive_ratio`, a refault within the active list's size activated
    /// (`workingset_refault`).
    #[default]
    TwoList,
    /// The active list as a protected set that loops cannot flush, with non-resident history
    /// used as LIRS and CLOCK-Pro use theirs, and the inactive list's size adapted as ARC
    /// adapts its recency share ([`workingset`](super::workingset) explains it): a refault is
    /// activated only if its reuse distance is below the age of the coldest active folio.
    /// Aging counts one read beyond `PG_referenced`
    /// ([`PROTECTED_MAX_REFS`](super::PROTECTED_MAX_REFS)) instead of three.
    Protected,
}

impl LruPolicy {
    /// Every policy, in declaration order.
    pub const ALL: [LruPolicy; 2] = [LruPolicy::TwoList, LruPolicy::Protected];

    /// Stable name: `two-list`, `protected`.
    pub const fn name(self) -> &'static str {
        match self {
            LruPolicy::TwoList => "two-list",
            LruPolicy::Protected => "protected",
        }
    }
}

impl crate::Variant for LruPolicy {
    const KIND: &'static str = "LRU policy";
    const ALL: &'static [Self] = &LruPolicy::ALL;
    fn name(self) -> &'static str {
        LruPolicy::name(self)
    }
}
crate::variant::variant_traits!(LruPolicy);

/// How an [`Lru`](super::Lru) behaves: start from [`LruConfig::DEFAULT`] (or `default()`) and the setters,
/// which are named like the fields (new fields may come in minor releases).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LruConfig {
    /// The drain-time dead-folio filter (default [`DrainFilter::Filtered`]).
    pub filter: DrainFilter,
    /// Set `PG_active` on every folio as it is queued, as MGLRU's `folio_add_lru` does for
    /// folios added in the fault path: they land on the active list. Default false.
    pub add_as_active: bool,
    /// Number of per-CPU batch sets, `0..=`[`MAX_BATCH_SLOTS`]; 0 (the default) means one per
    /// CPU. 1 makes the LRU's order deterministic for a single thread (the differential test
    /// uses it).
    pub batch_slots: usize,
    /// Workingset detection ([`workingset`](super::workingset)): reclaim leaves shadow entries and the eviction
    /// clock runs, so that a folio read again soon after its eviction is activated at once.
    /// Default true, as in the kernel; false gives the plain two-list LRU.
    pub workingset: bool,
    /// Count the read that missed a folio, and had it filled, as the folio's first access
    /// (`PG_referenced` set at once), as the kernel's `filemap_read` does: one hit later
    /// activates it. Default false: a filled folio starts unreferenced, so it takes two hits
    /// while inactive to be activated (2Q's "re-referenced after admission"), which keeps
    /// once-hit blocks off the active list.
    pub reference_on_fill: bool,
    /// Active pages kept per inactive page before reclaim deactivates (`inactive_ratio`).
    /// `None` (the default) computes it as the kernel does from the lists' size:
    /// `int_sqrt(10 * GiB)`, 1 below 1 GiB; 0 counts as 1; at most [`MAX_INACTIVE_RATIO`]
    /// (checked by `Config::validate`). A larger ratio protects
    /// frequently used blocks longer and adapts more slowly when the working set moves: on
    /// the `peers` Zipf trace, 2 instead of 1 takes the hit ratio from 84.5% to 85.0-85.4%
    /// without workingset detection, and changes little with it.
    pub inactive_ratio: Option<u32>,
    /// Aging gives an active folio read since it last looked a second chance per read: reads
    /// of an active folio are counted (`PG_referenced`, then up to 3 more in the flags word's
    /// `LRU_REFS` field, as MGLRU counts reads through file descriptors), and when aging
    /// reaches the folio on the active tail it spends one and returns the folio to the active
    /// head instead of moving it down (a GCLOCK on the active list). Default true. False is
    /// the kernel's `shrink_active_list` for unmapped file folios, which keeps only referenced
    /// executable mappings active and otherwise deactivates in list order, and counts nothing.
    /// The active list is where frequently read blocks live; FIFO aging demotes them by age
    /// alone. On the `peers` trace (16 Ki pages over 64 Ki), Zipf 0.99 / 0.8: at ratio 1
    /// (the kernel's below 1 GiB) 84.1% / 66.5% without, 84.3% / 67.4% with; at ratio 4
    /// (`Config::block_cache`) 83.9% / 66.3% without, 86.2% / 69.3% with.
    pub active_second_chance: bool,
    /// The replacement policy (default [`LruPolicy::TwoList`]). Under
    /// [`LruPolicy::Protected`], `inactive_ratio` is unused (the inactive list's target
    /// adapts) and refault activation needs `workingset`.
    pub policy: LruPolicy,
}

/// The most per-CPU batch sets an LRU accepts ([`LruConfig::batch_slots`]): more than any
/// machine has CPUs (the kernel's largest `NR_CPUS` default), so a value beyond it is a
/// mistake, not a tuning.
pub const MAX_BATCH_SLOTS: usize = 8192;

/// The largest [`LruConfig::inactive_ratio`] accepted: the kernel's formula gives 101 at 1 TiB,
/// so a ratio beyond this one only starves the inactive list.
pub const MAX_INACTIVE_RATIO: u32 = 1024;

/// `LruConfig::field(value)` setters, one per field.
macro_rules! lru_config_setters {
    ($( $field:ident: $ty:ty, )*) => {
        impl LruConfig {
            $(
                #[doc = concat!("Sets [`LruConfig::", stringify!($field), "`].")]
                pub const fn $field(mut self, $field: $ty) -> LruConfig {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

lru_config_setters! {
    filter: DrainFilter,
    add_as_active: bool,
    batch_slots: usize,
    workingset: bool,
    reference_on_fill: bool,
    inactive_ratio: Option<u32>,
    active_second_chance: bool,
    policy: LruPolicy,
}

impl LruConfig {
    /// The defaults, as a constant: the filtered drain, one batch set per CPU, workingset
    /// detection and the active list's second chances on, the kernel's inactive ratio.
    pub const DEFAULT: LruConfig = LruConfig {
        filter: DrainFilter::Filtered,
        add_as_active: false,
        batch_slots: 0,
        workingset: true,
        reference_on_fill: false,
        inactive_ratio: None,
        active_second_chance: true,
        policy: LruPolicy::TwoList,
    };
}

impl Default for LruConfig {
    fn default() -> Self {
        LruConfig::DEFAULT
    }
}
