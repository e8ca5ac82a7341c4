//! A commit log and a page file through the cache: appends with a sync every 64 KiB, page
//! updates in place, a close, a reopen that finds the pages still cached, and the bytes on
//! disk checked against what was written.
//!
//! ```text
//! cargo run --release -p foliocache --example write_log [DIR]
//! ```

use foliocache::{Config, FolioCache, OpenOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp;
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let cache = FolioCache::new(Config::new(16 << 20))?;

    // The log: 4 KiB records appended, synced every 16 records (64 KiB), as a WAL commits.
    let log = cache.open_with(
        dir.join("wal"),
        OpenOptions::new().append(true).create(true),
    )?;
    let mut offsets = Vec::new();
    for i in 0..256u32 {
        let record = [(i % 251) as u8; 4096];
        offsets.push(log.append(&record)?);
        if i % 16 == 15 {
            log.sync_data()?; // the 16 records are durable once this returns
        }
    }
    println!("log: {} bytes, {} records", log.len(), offsets.len());

    // The page file: 64 pages, each updated in place through a latch.
    let pages = cache.open_with(
        dir.join("pages"),
        OpenOptions::new().write(true).create(true),
    )?;
    pages.set_len(64 * 4096)?;
    for p in 0..64u64 {
        let mut page = pages.get_folio_mut(p)?;
        page[..8].copy_from_slice(&p.to_le_bytes());
    }
    pages.sync_all()?;
    drop(pages);

    // Reopened: still cached, and the same bytes are on disk.
    let pages = cache.open(dir.join("pages"))?;
    println!(
        "pages still cached after the close: {}",
        pages.cached_pages()
    );
    let disk = std::fs::read(dir.join("pages"))?;
    for p in 0..64usize {
        let mut head = [0u8; 8];
        pages.read_exact_at(&mut head, (p * 4096) as u64)?;
        assert_eq!(u64::from_le_bytes(head), p as u64);
        assert_eq!(&disk[p * 4096..p * 4096 + 8], &head);
    }
    let disk = std::fs::read(dir.join("wal"))?;
    for (i, &at) in offsets.iter().enumerate() {
        assert!(disk[at as usize..at as usize + 4096]
            .iter()
            .all(|&b| b == (i % 251) as u8));
    }
    let s = cache.stats();
    println!(
        "writes {}  writeback: {} pages in {} vectored writes  syncs {}",
        s.write_calls, s.writeback_pages, s.writeback_writes, s.syncs
    );
    println!("every byte checked");
    Ok(())
}
