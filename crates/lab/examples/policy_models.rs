//! The two-list model of foliocache's replacement beside the real cache, LRU and LIRS, and
//! the protected-set variant proposed for issue 26, on the `policy` scenario's traces.
//!
//! ```sh
//! cargo run --release -p foliocache-lab --example policy_models            # quick traces
//! cargo run --release -p foliocache-lab --example policy_models -- full    # the issue's size
//! ```
//!
//! Columns: miss ratio in percent. `foliocache` is the real cache (`Config::block_cache`,
//! `read_at` of 4 KiB blocks from a file in `/dev/shm`); `model` is
//! [`TwoList::kernel`] at the block cache's ratio of 4, the model's fidelity is the gap
//! between those two; `protected` is [`TwoList::protected`], `arc` the same with ARC's
//! adaptation of the cold target ([`TwoList::protected_arc`]).

use foliocache::{Config, FolioCache};
use foliocache_lab::policy::lirs::Lirs;
use foliocache_lab::policy::lru::Lru;
use foliocache_lab::policy::traces::{Size, Trace};
use foliocache_lab::policy::twolist::TwoList;
use foliocache_lab::policy::{replay, Policy};

const BLOCK: usize = 4096;

fn real(capacity: usize, blocks: u64, trace: &[u64]) -> Result<f64, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir())?;
    let path = dir.path().join("data");
    let f = std::fs::File::create(&path)?;
    f.set_len(blocks * BLOCK as u64)?;
    let cache = FolioCache::new(Config::block_cache(capacity * BLOCK))?;
    let file = cache.open(&path)?;
    let mut buf = vec![0u8; BLOCK];
    for &b in trace {
        file.read_exact_at(&mut buf, b * BLOCK as u64)?;
    }
    let s = cache.stats();
    Ok(100.0 * s.misses as f64 / trace.len() as f64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let size = match std::env::args().nth(1).as_deref() {
        Some("full") => Size::Full,
        _ => Size::Quick,
    };
    let spec = size.spec();
    println!(
        "{} traces: {} reads over {} blocks, capacity {} blocks",
        size.name(),
        spec.reads,
        spec.blocks,
        spec.capacity
    );
    println!(
        "{:<18} {:>10} {:>8} {:>10} {:>8} {:>8} {:>8}",
        "trace", "foliocache", "model", "protected", "arc", "lru", "lirs"
    );
    for t in Trace::ALL {
        let trace = t.generate(&spec, 42);
        let mut row = vec![real(spec.capacity, spec.blocks, &trace)?];
        let mut policies: Vec<Box<dyn Policy>> = vec![
            Box::new(TwoList::kernel(spec.capacity, 4)),
            Box::new(TwoList::protected(spec.capacity)),
            Box::new(TwoList::protected_arc(spec.capacity)),
            Box::new(Lru::new(spec.capacity)),
            Box::new(Lirs::new(spec.capacity)),
        ];
        for p in policies.iter_mut() {
            row.push(replay(p.as_mut(), &trace).miss_pct());
        }
        println!(
            "{:<18} {:>10.2} {:>8.2} {:>10.2} {:>8.2} {:>8.2} {:>8.2}",
            t.name(),
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5]
        );
    }
    Ok(())
}
