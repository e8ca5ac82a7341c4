//! What a budget costs before it is used, and the budgets and settings a cache refuses.
//!
//! Each test reads the process's resident set or its limits, so they stay in their own
//! binary, away from tests that allocate a lot meanwhile.

#![cfg(not(loom))]

use foliocache::mm::folio::{MemoryLimit, METADATA_BYTES_PER_PAGE};
use foliocache::mm::Experiment;
use foliocache::{CacheError, Config, ConfigError, FolioCache};

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

/// Regression: a budget larger than the machine was accepted, and the process was killed by
/// the out-of-memory killer as the cache filled (a 1 TiB budget on a 23.5 GiB machine ran
/// out of memory in `FolioCache::new` itself).
#[test]
fn a_budget_the_machine_cannot_hold_is_refused_with_what_to_do() {
    let budget = 2 * machine_bytes();
    let e = Config::new(budget).validate().unwrap_err();
    let ConfigError::BudgetExceedsMemory(over) = e.clone() else {
        panic!("expected BudgetExceedsMemory, got {e:?}");
    };
    assert_eq!(over.limit, MemoryLimit::PhysicalMemory);
    assert!(over.needed_bytes > budget as u64);
    assert!(over.largest_budget_bytes() < machine_bytes() as u64);
    let msg = e.to_string();
    assert!(
        msg.contains("physical memory") && msg.contains("give at most"),
        "{msg}"
    );
    // The cache refuses it before mapping anything.
    let before = resident_bytes();
    match FolioCache::new(Config::new(budget)) {
        Err(CacheError::Config(ConfigError::BudgetExceedsMemory(_))) => {}
        other => panic!("expected a configuration error, got {other:?}"),
    }
    assert!(resident_bytes().saturating_sub(before) < 32 * MIB);
    // What the message suggests is accepted.
    let ok = (over.largest_budget_bytes() as usize).min(machine_bytes() / 2);
    Config::new(ok).validate().unwrap();
}

/// The address-space limit counts too: in a child process whose `RLIMIT_AS` leaves 256 MiB,
/// a 1 GiB budget is refused with a message that names the limit, and a 64 MiB one works.
#[test]
fn a_budget_over_the_address_space_limit_is_refused() {
    const CHILD: &str = "FOLIOCACHE_TEST_RLIMIT_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_budget_over_the_address_space_limit_is_refused",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "child failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let mapped: u64 = statm
        .split_whitespace()
        .next()
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 4096;
    let limit = mapped + 256 * MIB as u64;
    let lim = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: a valid rlimit; this child process exists only for this test.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
    let e = Config::new(1 << 30).validate().unwrap_err();
    let ConfigError::BudgetExceedsMemory(over) = e.clone() else {
        panic!("expected BudgetExceedsMemory, got {e:?}");
    };
    assert_eq!(over.limit, MemoryLimit::AddressSpace);
    assert!(e.to_string().contains("ulimit -v"), "{e}");
    let cache = FolioCache::new(Config::new(64 * MIB).huge_pages(false)).unwrap();
    cache.validate().unwrap();
}

/// Every bad value gets its own error, whose message gives the valid range; before, a huge
/// `batch_slots` aborted the process allocating its batches.
#[test]
fn each_bad_setting_is_a_typed_error_that_names_the_valid_range() {
    let c = Config::new(64 * MIB).experiment(Experiment::new().batch_slots(1 << 40));
    let e = c.validate().unwrap_err();
    assert!(matches!(e, ConfigError::BatchSlotsTooMany { batch_slots } if batch_slots == 1 << 40));
    assert!(e.to_string().contains("1..=8192"), "{e}");
    assert!(matches!(
        FolioCache::new(c),
        Err(CacheError::Config(ConfigError::BatchSlotsTooMany { .. }))
    ));

    let c = Config::new(64 * MIB).inactive_ratio(Some(u32::MAX));
    let e = c.validate().unwrap_err();
    assert!(matches!(e, ConfigError::InactiveRatioTooLarge { .. }));
    assert!(e.to_string().contains("0..=1024"), "{e}");

    let e = Config::new(16 << 40).validate().unwrap_err();
    assert!(matches!(e, ConfigError::BudgetTooLarge { .. }));
    assert!(e.to_string().contains("16 TiB"), "{e}");

    let e = Config::new(100).validate().unwrap_err();
    assert!(matches!(e, ConfigError::BudgetTooSmall { .. }));
    let e = Config::new(64 * MIB)
        .readahead_pages(1 << 20)
        .validate()
        .unwrap_err();
    assert!(matches!(e, ConfigError::WindowTooLarge { .. }));

    // The edges of each range are accepted.
    Config::new(64 * MIB)
        .readahead_pages(foliocache::MAX_RA_PAGES)
        .experiment(Experiment::new().batch_slots(8192))
        .inactive_ratio(Some(1024))
        .validate()
        .unwrap();
}

/// Regression: a read that found every folio pinned had reclaim look at about 40 folios per
/// page of budget (130 ms per failed read at 256 MiB); now a handful of passes over the lists
/// before it gives up on caching (and copies from the file, uncached).
#[test]
fn a_read_that_finds_everything_pinned_scans_a_few_times_the_budget() {
    use foliocache::backing::MemBacking;
    const PAGES: usize = 1024;
    let cache = FolioCache::new(
        Config::new(PAGES * 4096)
            .readahead_pages(0)
            .pinned_share(100)
            .huge_pages(false),
    )
    .unwrap();
    let file = cache
        .open_backing("data", MemBacking(vec![7u8; 2 * PAGES * 4096]))
        .unwrap();
    let pins: Vec<_> = (0..PAGES as u64)
        .map(|i| file.get_folio(i).unwrap())
        .collect();
    let before = cache.lru_stats();
    let mut buf = [0u8; 16];
    file.read_exact_at(&mut buf, (PAGES as u64 + 5) * 4096)
        .unwrap();
    assert_eq!(buf, [7u8; 16]);
    assert_eq!(cache.stats().uncached_reads, 1);
    let after = cache.lru_stats();
    let looked_at = (after.scanned - before.scanned)
        + (after.deactivated - before.deactivated)
        + (after.rotated_active - before.rotated_active);
    assert!(
        looked_at <= 8 * PAGES as u64,
        "one failed read looked at {looked_at} folios for a budget of {PAGES} pages"
    );
    drop(pins);
    file.read_exact_at(&mut buf, (PAGES as u64 + 5) * 4096)
        .unwrap();
    assert_eq!(buf, [7u8; 16]);
}
