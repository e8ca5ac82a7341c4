//! Cache a file and read it from many threads.
//!
//! ```sh
//! cargo run --release -p foliocache --example read_file [PATH] [THREADS]
//! ```
//!
//! Without a path, a 16 MiB temporary file is created. Every thread opens its own handle (its
//! own readahead stream, as it would open its own file descriptor), reads the whole file
//! sequentially in 8 KiB pieces through the cache, and checks the bytes against
//! `std::fs::read`. The first pass is cold (readahead fills the cache), later threads hit.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use foliocache::{Config, FolioCache};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let tmp;
    let path = match args.next() {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let mut f = tempfile::NamedTempFile::new()?;
            let data: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
            f.write_all(&data)?;
            tmp = f;
            tmp.path().to_path_buf()
        }
    };
    let threads: usize = args.next().map(|t| t.parse()).transpose()?.unwrap_or(4);
    let expected = Arc::new(std::fs::read(&path)?);

    // A budget large enough for the whole file, so nothing is evicted while the threads read
    // (a smaller budget works too: reclaim evicts to stay within it, as `small_budget` shows).
    let budget = (expected.len() + (4 << 20)).next_multiple_of(4096);
    let cache = FolioCache::new(Config::new(budget))?;
    // Closing a file's last handle drops its pages; keep one open until the statistics.
    let keep = cache.open(&path)?;
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (file, expected) = (cache.open(&path), expected.clone());
            std::thread::spawn(move || -> Result<u64, foliocache::CacheError> {
                let file = file?;
                let mut buf = vec![0u8; 8192];
                let mut off = 0u64;
                loop {
                    let n = file.read_at(&mut buf, off)?;
                    if n == 0 {
                        return Ok(off);
                    }
                    assert_eq!(&buf[..n], &expected[off as usize..off as usize + n]);
                    off += n as u64;
                }
            })
        })
        .collect();
    for w in workers {
        let read = w.join().expect("reader thread")?;
        assert_eq!(read, expected.len() as u64);
    }
    let s = cache.stats();
    drop(keep);
    println!(
        "{} threads read {} ({} bytes each) in {:.1?}: every byte matched",
        threads,
        path.display(),
        expected.len(),
        start.elapsed()
    );
    println!(
        "hits {} misses {} waits {}; readahead: {} sync + {} async windows, {} pages in {} reads; \
         index lock acquisitions per inserted page {:.3}",
        s.hits,
        s.misses,
        s.waits_on_locked,
        s.sync_readahead,
        s.async_readahead,
        s.readahead_pages,
        s.io_reads,
        s.lock_acquisitions_per_page()
    );
    Ok(())
}
