//! Snapshot an address space with `fork()`, write to it, and watch copy-on-write copy pages
//! while the snapshot lives and reuse whole folios once it is gone.
//!
//! This is the Redis-style snapshot (fork, let the child serialise the frozen memory, keep
//! serving writes in the parent) on foliocache's spaces, once per sharer-tracking strategy:
//!
//! ```text
//! cargo run --release -p foliocache-lab --example cow_snapshot
//! ```
//!
//! With `none`, a large folio that was ever mapped twice stays "shared" until all but one of
//! its pages have been copied, so the parent copies page after page even after the snapshot
//! is dropped. With `rmap-id` (the seed) and `mm-owner` (today's kernel), the first write
//! after the snapshot is gone finds the folio mapped exclusively and reuses it whole.

use foliocache::mm::folio::{Arena, ArenaConfig};
use foliocache::mm::refcount::RefStrategy;
use foliocache::mm::rmap::Tracking;
use foliocache::mm::space::{SpaceConfig, Spaces};
use foliocache::mm::sync::Arc;

const MIB: usize = 1 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arena = Arc::new(Arena::new(ArenaConfig::new(
        32 * MIB,
        RefStrategy::LockedBit,
    ))?);
    for tracking in Tracking::ALL {
        let spaces = Spaces::new(arena.clone(), SpaceConfig::new(tracking));
        let db = spaces.create()?;
        // 8 MiB of "database" memory in 2 MiB folios, then PTE-map them (as after any
        // partial mprotect or munmap) so copy-on-write works page by page.
        let heap = db.anon(8 * MIB)?;
        db.write(heap, &vec![b'v'; 8 * MIB])?;
        for f in 0..4 {
            let a = heap + (f * 2 * MIB) as u64;
            db.protect(a, 4096, true)?;
            db.protect(a, 4096, false)?;
        }

        // Snapshot: the child sees the memory as of now, whatever the parent writes next.
        let snapshot = db.fork()?;
        db.write(heap, b"new value")?;
        let mut old = [0u8; 9];
        snapshot.read(heap, &mut old)?;
        assert_eq!(&old, b"vvvvvvvvv");
        let during = db.stats();

        // The snapshot is written out and exits; the parent keeps writing, one byte a page.
        drop(snapshot);
        for page in 0..(8 * MIB / 4096) {
            db.write(heap + (page * 4096) as u64 + 100, b"x")?;
        }
        let after = db.stats();
        println!(
            "{:<15} while the snapshot lives: {} page copies | after it exited: {} page copies, {} folio reuses",
            tracking.name(),
            during.cow_copies,
            after.cow_copies - during.cow_copies,
            after.cow_reuses - during.cow_reuses,
        );
        let report = spaces.check_oracle();
        assert_eq!(report.mismatches(), 0, "{report:?}");
    }
    Ok(())
}
