//! Reads and writes a file on disk with the cache's own I/O, and shows that the kernel keeps
//! no second copy of it.
//!
//! ```text
//! cargo run --release -p foliocache --example direct_io [DIR] [MIB]
//! ```
//!
//! DIR defaults to `/var/tmp` (a disk file system; on tmpfs the cache falls back to buffered
//! I/O and says so), MIB to 256. The example writes the file through the cache, syncs it,
//! drops the kernel's cache of it, reads it back sequentially and with batches of random
//! 4 KiB reads, and prints the engine, the mode and the share of the file the kernel's page
//! cache holds after each step (`mincore`).

use std::time::Instant;

use foliocache::io::{drop_kernel_cache, kernel_residency};
use foliocache::{Config, FolioCache, OpenOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/var/tmp".into()));
    let mib: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(256);
    let path = dir.join(format!("foliocache-direct-io-{}", std::process::id()));
    let len = mib << 20;

    let cache = FolioCache::new(Config::new(len / 4))?;
    let file = cache.open_with(&path, OpenOptions::new().write(true).create(true))?;
    println!(
        "file {} ({mib} MiB), engine {}, {}",
        path.display(),
        cache.io_engine(),
        // Direct I/O where the file system has it; elsewhere buffered, uncached where the
        // kernel takes RWF_DONTCACHE.
        file.io_mode()
    );

    // Write it through the cache, 1 MiB at a time, and make it durable.
    let t = Instant::now();
    let block: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    for at in (0..len).step_by(block.len()) {
        file.write_all_at(&block, at as u64)?;
    }
    file.sync_data()?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "wrote and synced: {:.0} MB/s; kernel page cache holds {:.1}% of the file",
        len as f64 / secs / 1e6,
        kernel_residency(&path)? * 100.0
    );

    // Cold: our cache dropped, and the kernel's too (in case it is buffered).
    drop(file);
    cache.drop_caches();
    drop_kernel_cache(&path)?;
    let file = cache.open(&path)?;
    let t = Instant::now();
    let mut buf = vec![0u8; 128 << 10];
    let mut sum = 0u64;
    for at in (0..len).step_by(buf.len()) {
        file.read_exact_at(&mut buf, at as u64)?;
        sum += buf.iter().map(|&b| b as u64).sum::<u64>();
    }
    let secs = t.elapsed().as_secs_f64();
    let expect: u64 = mib as u64 * block.iter().map(|&b| b as u64).sum::<u64>();
    assert_eq!(sum, expect, "the bytes read back differ from those written");
    println!(
        "cold sequential read: {:.0} MB/s; kernel page cache holds {:.1}% of the file",
        len as f64 / secs / 1e6,
        kernel_residency(&path)? * 100.0
    );

    // Random 4 KiB reads, 32 at a time: every miss of a batch goes to the device together.
    let mut bufs = vec![[0u8; 4096]; 32];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let pages = (len / 4096) as u64;
    let t = Instant::now();
    let batches = 256;
    for _ in 0..batches {
        let mut reads: Vec<(u64, &mut [u8])> = bufs
            .iter_mut()
            .map(|b| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x % pages) * 4096, &mut b[..])
            })
            .collect();
        file.read_ranges(&mut reads)?;
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "random 4 KiB reads in batches of 32: {:.0} reads/s; kernel page cache holds {:.1}% of the file",
        (batches * 32) as f64 / secs,
        kernel_residency(&path)? * 100.0
    );
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(())
}
