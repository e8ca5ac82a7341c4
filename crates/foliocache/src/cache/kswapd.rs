//! The background reclaimer (`kswapd`, `mm/vmscan.c`): a thread sleeping until an allocation
//! finds free pages below the low watermark, then reclaiming up to the high one
//! (`balance_pgdat`), started with the cache if [`Config::background_reclaim`] is on.
//!
//! [`Config::background_reclaim`]: super::Config::background_reclaim

use std::time::Duration;

use super::worker::Worker;
use crate::mm::folio::Arena;
use crate::mm::lru::Watermarks;
use crate::mm::sync::{AtomicU64, Ordering};

/// The reclaimer's state: its [`Worker`] and the watermarks' budget.
pub(crate) struct Kswapd {
    /// The budget the watermarks derive from (`FolioCache::set_budget` changes it).
    pub(crate) budget_pages: AtomicU64,
    /// Allocations since the last watermark check (checked every [`KSWAPD_CHECK_EVERY`]).
    allocs: AtomicU64,
    pub(crate) worker: Worker,
}

/// Allocations between two looks at the free-page count (which sums per-CPU counters).
const KSWAPD_CHECK_EVERY: u64 = 16;

/// The longest the thread sleeps between two looks at the free-page count.
const KSWAPD_INTERVAL: Duration = Duration::from_millis(100);

impl Kswapd {
    pub(crate) fn new(budget_pages: u64) -> Kswapd {
        Kswapd {
            budget_pages: AtomicU64::new(budget_pages),
            allocs: AtomicU64::new(0),
            worker: Worker::new(),
        }
    }

    /// The watermarks of the budget now.
    #[inline]
    fn wm(&self) -> Watermarks {
        Watermarks::for_budget(self.budget_pages.load(Ordering::Relaxed))
    }

    /// `wakeup_kswapd` if free pages are below the low watermark (checked every few
    /// allocations).
    #[inline]
    pub(crate) fn note_alloc(&self, arena: &Arena) {
        if self.allocs.fetch_add(1, Ordering::Relaxed) % KSWAPD_CHECK_EVERY != 0 {
            return;
        }
        if arena.stats().free_pages < self.wm().low {
            self.worker.kick();
        }
    }

    /// The thread's loop: sleep, then `balance_pgdat` while the cache lives. `low` says
    /// whether the cache's free pages are below a watermark's low mark; `balance` reclaims up
    /// to its high one (run with [`Worker::busy`] held), `after` follows it with no lock held.
    pub(crate) fn run<C>(
        &self,
        cache: std::sync::Weak<C>,
        low: impl Fn(&C, &Watermarks) -> bool,
        balance: impl Fn(&C, Watermarks),
        after: impl Fn(&C),
    ) {
        self.worker.run(KSWAPD_INTERVAL, cache, |c| {
            let wm = self.wm();
            if low(c, &wm) {
                let busy = self.worker.busy.lock();
                balance(c, wm);
                drop(busy);
                after(c);
            }
        });
    }
}
