//! Real-thread stress of the cache's read path against invalidation, explicit readahead,
//! pinning and handles coming and going: every byte read must be the file's, and when every
//! handle and guard is gone the arena must be empty and consistent.
#![cfg(not(loom))]

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use foliocache::mm::readahead::InsertMode;
use foliocache::mm::refcount::RefStrategy;
use foliocache::mm::Experiment;
use foliocache::{Config, FolioCache};
use rand::{Rng, SeedableRng};

const PAGE: u64 = 4096;

fn iterations() -> usize {
    if cfg!(debug_assertions) {
        10_000
    } else {
        300_000
    }
}

#[test]
fn readers_race_invalidation_readahead_and_pins() {
    let data: Arc<Vec<u8>> = Arc::new(
        (0..200 * 4096 + 321)
            .map(|i: usize| (i as u8) ^ ((i >> 12) as u8).wrapping_mul(13))
            .collect(),
    );
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&data).unwrap();
    f.flush().unwrap();
    for (mode, strategy) in [
        (InsertMode::Batched, RefStrategy::LockedBit),
        (InsertMode::Single, RefStrategy::CasLoop),
    ] {
        let cache = FolioCache::new(
            Config::new(2 << 20)
                .experiment(Experiment::new().insert_mode(mode).strategy(strategy))
                .readahead_pages(16)
                .panic_on_bad_page(false),
        )
        .unwrap();
        let anchor = cache.open(f.path()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        // Readers: random reads and sequential streams, each on its own handle.
        for t in 0..3u64 {
            let (file, data) = (anchor.reopen(), data.clone());
            workers.push(thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                let mut buf = vec![0u8; 3 * 4096];
                for i in 0..iterations() {
                    let off = if i % 2 == 0 {
                        rng.random_range(0..data.len() as u64)
                    } else {
                        (i as u64 * 8192) % data.len() as u64
                    };
                    let len = rng.random_range(1..buf.len());
                    match file.read_at(&mut buf[..len], off) {
                        Ok(n) => {
                            let end = (off as usize + len).min(data.len());
                            assert_eq!(n, end - off as usize, "length at {off}+{len}");
                            assert_eq!(&buf[..n], &data[off as usize..end], "bytes at {off}");
                        }
                        // The budget may be exhausted for a moment by pins and readahead.
                        Err(e) => assert!(e.is_out_of_memory(), "{e}"),
                    }
                }
            }));
        }
        // Invalidator, explicit readahead and pinner, until the readers finish.
        {
            let (file, stop, data) = (anchor.reopen(), stop.clone(), data.clone());
            workers.push(thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(99);
                let mut rounds = 0u64;
                // At least 200 rounds, even if the readers finish first.
                while rounds < 200 || !stop.load(Ordering::Relaxed) {
                    rounds += 1;
                    let a = rng.random_range(0..200) * PAGE;
                    let b = a + rng.random_range(1..64) * PAGE;
                    match rng.random_range(0..3) {
                        0 => {
                            file.invalidate(a..b).unwrap();
                        }
                        1 => {
                            let _ = file.readahead(a..b);
                        }
                        _ => {
                            if let Ok(p) = file.get_folio(a / PAGE) {
                                // The folio holding page `a`, of whatever size.
                                let i = p.offset() as usize;
                                assert!(i as u64 <= a && a < (i + p.len()) as u64);
                                assert_eq!(&p[..], &data[i..i + p.len()]);
                            }
                        }
                    }
                    // Handles come and go (never the last one: `anchor` stays).
                    drop(file.reopen());
                }
            }));
        }
        let invalidator: thread::JoinHandle<()> = workers.pop().unwrap();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        invalidator.join().unwrap();
        let s = cache.stats();
        assert!(s.hits > 0 && s.misses > 0 && s.sync_readahead > 0, "{s:?}");
        drop(anchor);
        // The file's inode, unused now, goes with its pages; folios truncated while they
        // waited in a per-CPU LRU batch go when the batches drain.
        cache.drop_caches();
        cache.lru_add_drain_all();
        let s = cache.stats();
        assert_eq!(s.allocated_pages, 0, "{s:?}");
        assert_eq!(s.bad_pages, 0);
        cache.validate().unwrap();
    }
}
