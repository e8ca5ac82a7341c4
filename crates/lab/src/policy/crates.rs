//! quick_cache and moka, the Rust caches a storage engine would reach for, driven as
//! policies: a read is a `get`; a miss inserts the block (a unit value, one weight unit per
//! block), with the capacity in blocks.
//!
//! - **quick_cache** (`quick_cache::unsync::Cache`, one shard: the policy itself; the `sync`
//!   cache splits the capacity over shards, which changes the hit ratio a little, and the
//!   `peers` scenario measures that one): the crate's CLOCK-Pro-like policy with hot, cold
//!   and ghost queues, its default allocations (97% hot, ghosts for half the capacity).
//! - **moka** (`moka::sync::Cache`): TinyLFU admission in front of an LRU, its frequency
//!   sketch and buffered policy updates. Its housekeeping runs when its buffers fill (or a
//!   timer passes), so it is run after every insertion here (`run_pending_tasks`) to make
//!   the replay deterministic and keep its size at the capacity (without it, moka holds
//!   more blocks than its capacity between maintenance runs).
//!
//! Both get the harness's deterministic hasher ([`super::KeyHash`]), so their figures do
//! not change from run to run.

use super::{KeyHash, Policy};

/// quick_cache's policy (see the module docs).
pub struct QuickCache {
    cache: quick_cache::unsync::Cache<
        u64,
        (),
        quick_cache::UnitWeighter,
        KeyHash,
        quick_cache::unsync::DefaultLifecycle<u64, ()>,
    >,
}

impl QuickCache {
    /// A cache of `capacity` blocks.
    pub fn new(capacity: usize) -> QuickCache {
        QuickCache {
            cache: quick_cache::unsync::Cache::with(
                capacity,
                capacity as u64,
                quick_cache::UnitWeighter,
                KeyHash::default(),
                Default::default(),
            ),
        }
    }
}

impl Policy for QuickCache {
    fn access(&mut self, key: u64) -> bool {
        if self.cache.get(&key).is_some() {
            return true;
        }
        self.cache.insert(key, ());
        false
    }

    fn resident(&self) -> usize {
        self.cache.len()
    }
}

/// moka's policy (see the module docs).
pub struct Moka {
    cache: moka::sync::Cache<u64, (), KeyHash>,
}

impl Moka {
    /// A cache of `capacity` blocks.
    pub fn new(capacity: usize) -> Moka {
        Moka {
            cache: moka::sync::Cache::builder()
                .max_capacity(capacity as u64)
                .build_with_hasher(KeyHash::default()),
        }
    }
}

impl Policy for Moka {
    fn access(&mut self, key: u64) -> bool {
        if self.cache.get(&key).is_some() {
            return true;
        }
        self.cache.insert(key, ());
        self.cache.run_pending_tasks();
        false
    }

    fn resident(&self) -> usize {
        self.cache.entry_count() as usize
    }
}
