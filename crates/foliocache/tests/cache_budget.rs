//! What a budget costs before it is used.
//!
//! The test reads the process's resident set, so it stays in its own binary, away from tests
//! that allocate a lot meanwhile.

#![cfg(not(loom))]

use foliocache::folio::METADATA_BYTES_PER_PAGE;
use foliocache::{Config, FolioCache};

const MIB: usize = 1 << 20;

/// Resident bytes of this process (`/proc/self/statm`, second field).
fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`).
fn machine_bytes() -> usize {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: usize = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// Regression: `FolioCache::new` wrote about 141 bytes of metadata per page of budget up
/// front (1.13 GiB resident for a 32 GiB budget, 1.3 s). Now headers, extension records, buddy
/// links and LRU links are built as pages are first used, so a large budget costs a few
/// huge pages until then.
#[test]
fn a_large_budget_costs_no_metadata_until_its_pages_are_used() {
    let budget = (8usize << 30).min(machine_bytes() / 4);
    let pages = budget / 4096;
    let before = resident_bytes();
    let cache = FolioCache::new(Config::new(budget)).unwrap();
    let grown = resident_bytes().saturating_sub(before);
    assert!(
        grown < 8 * MIB,
        "FolioCache::new for {pages} pages made {} MiB resident (all the metadata: {} MiB)",
        grown / MIB,
        pages * METADATA_BYTES_PER_PAGE / MIB
    );
    let st = cache.validate().unwrap();
    assert_eq!(
        (st.total_pages, st.free_pages),
        (pages as u64, pages as u64)
    );
}
