//! [`Experiment`]: the mechanism variants a [`FolioCache`](crate::FolioCache) is built with,
//! apart from the user's settings in [`Config`](crate::Config).
//!
//! Each field picks between the kernel's vanilla behaviour and a patch thread's improvement
//! (or, for the LRU, between policies the lab compares). The defaults are the variants that
//! measured best, so a storage engine never needs this type; the lab and anyone trying a
//! refcount, batching or reclaim idea set it through
//! [`Config::experiment`](crate::Config::experiment).
//!
//! ```
//! use foliocache::{Config, FolioCache};
//! use foliocache::mm::{refcount::RefStrategy, readahead::InsertMode, Experiment};
//!
//! // The kernel as it was before seeds 000 and 001.
//! let vanilla = Experiment::new()
//!     .strategy(RefStrategy::CasLoop)
//!     .insert_mode(InsertMode::Single);
//! let cache = FolioCache::new(Config::new(1 << 20).experiment(vanilla))?;
//! assert_eq!(cache.experiment().strategy, RefStrategy::CasLoop);
//! # Ok::<(), foliocache::CacheError>(())
//! ```

use crate::mm::filetable::TableRef;
use crate::mm::lru::{DrainFilter, LruConfig, LruPolicy};
use crate::mm::readahead::InsertMode;
use crate::mm::refcount::RefStrategy;
use crate::mm::rmap::Tracking;

/// The mechanism variants of a cache (see the [module docs](self)).
///
/// Fields are public to read; build one with [`Experiment::new`] and the setters (new fields
/// may be added in minor releases).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Experiment {
    /// The folio refcount (seed 000). Default [`RefStrategy::LockedBit`].
    pub strategy: RefStrategy,
    /// How readahead inserts a window's folios (seed 001). Default [`InsertMode::Batched`].
    pub insert_mode: InsertMode,
    /// How a lookup pins a [`FileTable`](crate::mm::filetable::FileTable) built for this
    /// experiment (seed 003, the lab's `hash` scenario). Default [`TableRef::PercpuFast`]. A
    /// cache keeps no file table (a handle holds its inode), so this does not change a cache.
    pub file_table: TableRef,
    /// The LRU add batches' drain-time dead-folio filter (seed 004). Default
    /// [`DrainFilter::Filtered`].
    pub drain_filter: DrainFilter,
    /// [`LruConfig::add_as_active`]. Default false.
    pub add_as_active: bool,
    /// [`LruConfig::batch_slots`]: per-CPU add-batch sets, 0 for one per CPU (the default).
    pub batch_slots: usize,
    /// [`LruConfig::reference_on_fill`]. Default false.
    pub reference_on_fill: bool,
    /// [`LruConfig::active_second_chance`]. Default true.
    pub active_second_chance: bool,
    /// How the cache's address spaces (snapshots, [`FolioCache::spaces`](crate::FolioCache::spaces))
    /// track who maps a folio (seed 002). `None` (the default): `rmap-id`, with the
    /// exclusive-writer path as calibrated on this machine ([`Tracking::rmap_id_calibrated`]).
    pub tracking: Option<Tracking>,
}

impl Default for Experiment {
    fn default() -> Experiment {
        Experiment::new()
    }
}

impl Experiment {
    /// The defaults: every seed's improvement on, the LRU as [`LruConfig::default`].
    pub const fn new() -> Experiment {
        let lru = LruConfig::DEFAULT;
        Experiment {
            strategy: RefStrategy::LockedBit,
            insert_mode: InsertMode::Batched,
            file_table: TableRef::PercpuFast,
            drain_filter: lru.filter,
            add_as_active: lru.add_as_active,
            batch_slots: lru.batch_slots,
            reference_on_fill: lru.reference_on_fill,
            active_second_chance: lru.active_second_chance,
            tracking: None,
        }
    }

    /// Sets [`Experiment::strategy`].
    pub fn strategy(mut self, strategy: RefStrategy) -> Experiment {
        self.strategy = strategy;
        self
    }

    /// Sets [`Experiment::insert_mode`].
    pub fn insert_mode(mut self, mode: InsertMode) -> Experiment {
        self.insert_mode = mode;
        self
    }

    /// Sets [`Experiment::file_table`].
    pub fn file_table(mut self, reference: TableRef) -> Experiment {
        self.file_table = reference;
        self
    }

    /// Sets [`Experiment::drain_filter`].
    pub fn drain_filter(mut self, filter: DrainFilter) -> Experiment {
        self.drain_filter = filter;
        self
    }

    /// Sets [`Experiment::add_as_active`].
    pub fn add_as_active(mut self, on: bool) -> Experiment {
        self.add_as_active = on;
        self
    }

    /// Sets [`Experiment::batch_slots`].
    pub fn batch_slots(mut self, slots: usize) -> Experiment {
        self.batch_slots = slots;
        self
    }

    /// Sets [`Experiment::reference_on_fill`].
    pub fn reference_on_fill(mut self, on: bool) -> Experiment {
        self.reference_on_fill = on;
        self
    }

    /// Sets [`Experiment::active_second_chance`].
    pub fn active_second_chance(mut self, on: bool) -> Experiment {
        self.active_second_chance = on;
        self
    }

    /// Sets [`Experiment::tracking`].
    pub fn tracking(mut self, tracking: Tracking) -> Experiment {
        self.tracking = Some(tracking);
        self
    }

    /// The [`LruConfig`] these variants and the user's LRU settings make.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn lru_config(
        &self,
        workingset: bool,
        inactive_ratio: Option<u32>,
        policy: LruPolicy,
    ) -> LruConfig {
        LruConfig {
            filter: self.drain_filter,
            add_as_active: self.add_as_active,
            batch_slots: self.batch_slots,
            workingset,
            reference_on_fill: self.reference_on_fill,
            inactive_ratio,
            active_second_chance: self.active_second_chance,
            policy,
        }
    }
}
