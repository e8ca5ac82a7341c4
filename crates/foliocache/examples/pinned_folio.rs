//! Pin a folio and read it without a copy.
//!
//! ```sh
//! cargo run --release -p foliocache --example pinned_folio [PATH]
//! ```
//!
//! `get_folio_at(offset)` returns a guard holding a reference on the folio that caches the
//! byte at `offset` (a folio holds 1 to 512 pages of 4 KiB, starting at a multiple of its
//! size; its bytes start at `folio.offset()`): its bytes are the cache's own memory, valid and unchanged until the guard drops
//! (the cache cannot evict or invalidate a pinned folio). The guard borrows the file handle;
//! `into_owned()` turns it into one that may outlive the handle. Here we scan a file folio by
//! folio for a byte without copying anything out of the cache.

use std::io::Write;

use foliocache::{Config, FolioCache};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp;
    let path = match std::env::args().nth(1) {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let mut f = tempfile::NamedTempFile::new()?;
            let mut data = vec![b'.'; 1 << 20];
            data[700_000] = b'!';
            f.write_all(&data)?;
            tmp = f;
            tmp.path().to_path_buf()
        }
    };
    let cache = FolioCache::new(Config::new(8 << 20))?;
    let file = cache.open(&path)?;
    let mut found = None;
    let mut offset = 0;
    while offset < file.len() {
        let folio = file.get_folio_at(offset)?; // pinned: a reference, no copy
        if let Some(i) = folio.iter().position(|&b| b == b'!') {
            found = Some(folio.offset() + i as u64);
            // The guard borrows `file`; `folio.into_owned()` would give one that outlives it.
            println!(
                "folio at byte {}: first byte {:?}, {} bytes, refcount {} while pinned",
                folio.offset(),
                folio[0] as char,
                folio.len(),
                folio.ref_count()
            );
            break;
        }
        offset = folio.offset() + folio.len() as u64;
    }
    match found {
        Some(off) => println!("found '!' at byte {off} of {}", path.display()),
        None => println!("no '!' in {}", path.display()),
    }
    let s = cache.stats();
    println!(
        "{} pages cached, {} backing reads, {} read_at calls (no copy out of the cache)",
        file.cached_pages(),
        s.io_reads,
        s.read_calls
    );
    Ok(())
}
