//! Read a file larger than the cache's memory budget, end to end, repeatedly, from several
//! threads: reclaim (seed 004's LRU) keeps the cache within its budget.
//!
//! ```sh
//! cargo run --release -p foliocache --example small_budget [FILE_MIB] [BUDGET_MIB] [THREADS] [PASSES]
//! ```
//!
//! Defaults: a 32 MiB temporary file, a 4 MiB budget, 4 threads, 3 passes each. Every thread
//! opens its own handle and reads the whole file sequentially in 64 KiB pieces, checking every
//! byte; a watcher samples the cache's allocated pages while they run. At the end it prints
//! the peak (never above the budget), the pages reclaimed and the allocation stalls, and the
//! LRU's own counters.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use foliocache::{Config, FolioCache};

fn byte(i: usize) -> u8 {
    (i as u8).wrapping_mul(13) ^ ((i >> 12) as u8)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let file_mib = args.next().transpose()?.unwrap_or(32);
    let budget_mib = args.next().transpose()?.unwrap_or(4);
    let threads = args.next().transpose()?.unwrap_or(4);
    let passes = args.next().transpose()?.unwrap_or(3);

    let mut f = tempfile::NamedTempFile::new()?;
    let len = file_mib << 20;
    let data: Vec<u8> = (0..len).map(byte).collect();
    f.write_all(&data)?;
    f.flush()?;
    drop(data);

    let budget_pages = (budget_mib << 20) / 4096;
    let cache = FolioCache::new(Config::new(budget_mib << 20))?;
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (cache, done, peak) = (cache.clone(), done.clone(), peak.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(cache.stats().allocated_pages, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let start = Instant::now();
    let readers: Vec<_> = (0..threads)
        .map(|_| {
            let file = cache.open(f.path());
            std::thread::spawn(move || -> Result<u64, foliocache::CacheError> {
                let file = file?;
                let mut buf = vec![0u8; 64 << 10];
                let mut total = 0u64;
                for _ in 0..passes {
                    let mut off = 0usize;
                    loop {
                        let n = file.read_at(&mut buf, off as u64)?;
                        if n == 0 {
                            break;
                        }
                        for (k, &b) in buf[..n].iter().enumerate() {
                            assert_eq!(b, byte(off + k), "byte {}", off + k);
                        }
                        off += n;
                    }
                    assert_eq!(off, len);
                    total += off as u64;
                }
                Ok(total)
            })
        })
        .collect();
    let mut bytes = 0u64;
    for r in readers {
        bytes += r.join().expect("reader thread")?;
    }
    let secs = start.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher thread");

    let s = cache.stats();
    let l = cache.lru_stats();
    let peak = peak.load(Ordering::Relaxed).max(s.allocated_pages);
    println!(
        "{threads} threads x {passes} passes over a {file_mib} MiB file with a {budget_mib} MiB budget: \
         {:.0} MiB/s, every byte checked",
        bytes as f64 / secs / (1 << 20) as f64
    );
    println!(
        "memory: peak {peak} of {budget_pages} pages allocated; {} pages reclaimed in {} allocation \
         stalls ({} folios scanned)",
        l.reclaimed, l.alloc_stalls, l.scanned
    );
    println!(
        "LRU: {} folios queued, {:.4} lock acquisitions per folio, {} activated, {} aged down, \
         {} second chances; out-of-memory errors: {}",
        l.queued,
        l.lock_acquisitions_per_folio(),
        l.activated,
        l.deactivated,
        l.rotated,
        s.out_of_memory
    );
    assert!(peak <= budget_pages as u64, "over the budget");
    assert!(
        l.reclaimed > 0,
        "a file larger than the budget needs reclaim"
    );
    Ok(())
}
