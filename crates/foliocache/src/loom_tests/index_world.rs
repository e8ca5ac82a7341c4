//! What the page-cache index's loom models share (`index`, `workingset`): an arena
//! of a frame or a few, so that a freed folio's frame is reused at once and a lookup that
//! kept the wrong life of a frame shows the wrong `private` tag; an index on its own RCU
//! domain; and a flag the writing thread raises once its change is complete.

use crate::mm::folio::{Arena, ArenaConfig};
use crate::mm::index::Index;
use crate::mm::rcu::Rcu;
use crate::mm::refcount::RefStrategy;
use crate::mm::sync::{Arc, AtomicBool};

/// Tag of a frame's first life (set before the folio is published).
pub const FIRST: u64 = 1;
/// Tag of the frame's next life.
pub const SECOND: u64 = 2;

pub struct World {
    pub arena: Arc<Arena>,
    pub rcu: Arc<Rcu>,
    pub index: Index,
    /// The writer's change is complete (a removal finished, a refaulting folio is cached):
    /// a lookup that starts after it sees the new state.
    pub settled: AtomicBool,
}

/// A world of `pages` frames with the `s` refcount.
pub fn world(pages: usize, s: RefStrategy) -> Arc<World> {
    let mut c = ArenaConfig::new(pages * crate::mm::folio::PAGE_SIZE, s);
    c.per_cpu_lists = false;
    c.panic_on_bad_page = true;
    let arena = Arc::new(Arena::new(c).unwrap());
    let rcu = Arc::new(Rcu::new());
    let index = Index::with_rcu(arena.clone(), rcu.clone());
    Arc::new(World {
        arena,
        rcu,
        index,
        settled: AtomicBool::new(false),
    })
}

/// Caches one folio tagged FIRST at index 0; returns its pfn with one extra reference leaked
/// for the writer (a remover's, or a reclaimer's isolation reference).
pub fn cache_first(w: &World) -> u32 {
    let l = w.arena.alloc(0).unwrap().lock();
    l.set_private(FIRST);
    w.index.add_folio(&l, 0).unwrap();
    l.unlock().into_raw().pfn()
}
