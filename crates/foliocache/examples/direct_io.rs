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

use std::os::fd::AsRawFd;
use std::time::Instant;

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
        match file.direct_io() {
            Some(align) => format!("direct I/O (alignment {align} bytes)"),
            None => "buffered I/O (the file system has no direct I/O)".into(),
        }
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
        kernel_resident_pct(&path)?
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
        kernel_resident_pct(&path)?
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
        kernel_resident_pct(&path)?
    );
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(())
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` over the whole file: the kernel drops its clean pages.
fn drop_kernel_cache(path: &std::path::Path) -> std::io::Result<()> {
    let f = std::fs::File::open(path)?;
    f.sync_data()?;
    // SAFETY: a plain system call on an open descriptor.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// The share of the file's pages in the kernel's page cache (`mincore` over a mapping).
fn kernel_resident_pct(path: &std::path::Path) -> std::io::Result<f64> {
    let f = std::fs::File::open(path)?;
    let len = f.metadata()?.len() as usize;
    if len == 0 {
        return Ok(0.0);
    }
    // SAFETY: a read-only shared mapping of an open file, unmapped below; nothing reads it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let pages = len.div_ceil(4096);
    let mut vec = vec![0u8; pages];
    // SAFETY: `p` maps `len` bytes; `vec` has one byte per page.
    let r = unsafe { libc::mincore(p, len, vec.as_mut_ptr()) };
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, len) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count() as f64 * 100.0 / pages as f64)
}
