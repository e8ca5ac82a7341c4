//! Workingset detection seen from the cache: reclaim leaves shadow entries, refaults are
//! counted and activated, shadow nodes stay bounded, and dropping files leaves nothing.
#![cfg(not(loom))]

use foliocache::backing::MemBacking;
use foliocache::mm::index::ShadowNodes;
use foliocache::mm::lru::LruPolicy;
use foliocache::mm::Experiment;
use foliocache::{CachedFile, Config, FolioCache};

const PAGE: usize = 4096;

fn content(pages: usize) -> Vec<u8> {
    (0..pages * PAGE)
        .map(|i| (i as u8).wrapping_mul(31) ^ ((i / PAGE) as u8))
        .collect()
}

/// A cache of `budget` pages without readahead and with one LRU batch slot (deterministic
/// for a single thread).
fn cache(budget: usize, workingset: bool) -> FolioCache {
    FolioCache::new(
        Config::new(budget * PAGE)
            .readahead_pages(0)
            .experiment(Experiment::new().batch_slots(1))
            .workingset(workingset)
            .panic_on_bad_page(true),
    )
    .unwrap()
}

fn read_page(file: &CachedFile, data: &[u8], page: usize) {
    let mut buf = [0u8; 64];
    file.read_exact_at(&mut buf, (page * PAGE + 100) as u64)
        .unwrap();
    assert_eq!(&buf[..], &data[page * PAGE + 100..page * PAGE + 164]);
}

fn vm(cache: &FolioCache, name: &str) -> u64 {
    cache
        .vmstat()
        .into_iter()
        .find(|&(n, _)| n == name)
        .unwrap_or_else(|| panic!("no vmstat line {name}"))
        .1
}

/// Closes the books: every file dropped, nothing cached, no shadow node left.
fn assert_baseline(cache: &FolioCache) {
    cache.drop_caches();
    let a = cache.validate().unwrap();
    assert_eq!((a.allocated_pages, a.bad_pages), (0, 0));
    assert_eq!(vm(cache, "workingset_nodes"), 0, "shadow nodes leaked");
}

#[test]
fn reclaim_leaves_shadows_and_rereads_count_as_refaults() {
    for on in [true, false] {
        let data = content(512);
        let c = cache(64, on);
        let file = c.open_backing("data", MemBacking(data.clone())).unwrap();
        for _ in 0..2 {
            for p in 0..512 {
                read_page(&file, &data, p);
            }
        }
        let ws = c.workingset_stats();
        assert_eq!(ws.enabled, on);
        if on {
            // The second pass refaults nearly every page evicted by the first.
            assert!(ws.refault >= 400, "{ws:?}");
            assert!(ws.nodes > 0 && ws.nonresident_age > 0, "{ws:?}");
        } else {
            assert_eq!((ws.refault, ws.nodes, ws.nonresident_age), (0, 0, 0));
        }
        for name in [
            "workingset_refault",
            "workingset_activate",
            "workingset_restore",
            "workingset_nodes",
            "workingset_nodereclaim",
        ] {
            vm(&c, name);
        }
        drop(file);
        assert_baseline(&c);
    }
}

#[test]
fn shadow_nodes_stay_within_the_limit() {
    let budget = 64;
    let limit = ShadowNodes::limit(budget as u64);
    assert_eq!(limit, 8);
    let data = content(64 * 64);
    let c = cache(budget, true);
    let file = c.open_backing("big", MemBacking(data.clone())).unwrap();
    for p in 0..64 * 64 {
        read_page(&file, &data, p);
        let nodes = vm(&c, "workingset_nodes");
        assert!(nodes <= limit + 1, "{nodes} shadow nodes after page {p}");
    }
    let ws = c.workingset_stats();
    assert!(ws.nodereclaim >= 50, "{ws:?}");
    c.shrink_shadow_nodes();
    assert!(c.workingset_stats().nodes <= limit);
    // A second file shares the count and the limit.
    let file2 = c.open_backing("big2", MemBacking(data.clone())).unwrap();
    for p in 0..64 * 16 {
        read_page(&file2, &data, p);
        read_page(&file, &data, p);
    }
    assert!(vm(&c, "workingset_nodes") <= limit + 1);
    drop((file, file2));
    assert_baseline(&c);
}

#[test]
fn invalidation_drops_shadows_so_rereads_are_not_refaults() {
    let data = content(256);
    let c = cache(32, true);
    let file = c.open_backing("data", MemBacking(data.clone())).unwrap();
    for p in 0..256 {
        read_page(&file, &data, p);
    }
    assert!(c.workingset_stats().nodes > 0);
    file.invalidate(0..(256 * PAGE) as u64).unwrap();
    assert_eq!(
        c.workingset_stats().nodes,
        0,
        "invalidation removed the shadows"
    );
    let before = c.workingset_stats().refault;
    for p in 0..64 {
        read_page(&file, &data, p);
    }
    assert_eq!(c.workingset_stats().refault, before);
    drop(file);
    assert_baseline(&c);
}

/// The case workingset detection exists for (`mm/workingset.c`'s opening comment): half the
/// cache holds active pages no longer used, and a loop over a set larger than the inactive
/// list but smaller than the cache thrashes: every page is evicted before its next access can
/// promote it. With refault activation the loop's refaults displace the stale active pages
/// and the loop fits.
#[test]
fn a_loop_larger_than_the_inactive_list_stops_thrashing() {
    // One CPU: pages freed to another CPU's per-CPU free list would give a thread that
    // migrates there extra room without reclaim, and the loop would thrash less than the
    // budget says (seen under a loaded CI machine: 336 hits instead of under 144).
    foliocache::mm::sync::pin_to_cpu(0);
    let (stale, set, rounds) = (32, 48, 30);
    let data = content(256);
    let mut hits = Vec::new();
    for on in [false, true] {
        let c = cache(64, on);
        let file = c.open_backing("data", MemBacking(data.clone())).unwrap();
        // Read three times (the filling read and two hits): promoted, then never used again.
        for _ in 0..3 {
            for p in 0..stale {
                read_page(&file, &data, p);
            }
        }
        let before = c.stats().hits;
        for _ in 0..rounds {
            for p in 100..100 + set {
                read_page(&file, &data, p);
            }
        }
        hits.push(c.stats().hits - before);
        let ws = c.workingset_stats();
        assert_eq!(ws.activate > 0, on, "{ws:?}");
        drop(file);
        assert_baseline(&c);
    }
    let reads = (rounds * set) as u64;
    assert!(
        hits[0] < reads / 10,
        "without workingset the loop thrashes: {hits:?}"
    );
    assert!(hits[1] > reads * 8 / 10, "with it the loop fits: {hits:?}");
}

/// A moved working set in a `Config::block_cache`, where stale blocks are harder to
/// displace: the active list holds four pages per inactive one, and every stale block was
/// read often enough to saturate its read count (four trips round the active list). Reclaim
/// must spend those counts and move the stale blocks down and out rather than let them hold
/// three quarters of the cache against a loop that is read far more now; the loop ends up
/// resident.
#[test]
fn a_moved_working_set_displaces_often_read_stale_blocks_in_a_block_cache() {
    let (stale, set, rounds) = (48, 40, 40);
    let data = content(256);
    let config = Config::block_cache(64 * PAGE)
        .panic_on_bad_page(true)
        .experiment(Experiment::new().batch_slots(1));
    let c = FolioCache::new(config).unwrap();
    let file = c.open_backing("data", MemBacking(data.clone())).unwrap();
    for _ in 0..8 {
        for p in 0..stale {
            read_page(&file, &data, p);
        }
    }
    let mut last = 0;
    for round in 0..rounds {
        let before = c.stats().hits;
        for p in 100..100 + set {
            read_page(&file, &data, p);
        }
        if round >= rounds - 10 {
            last += c.stats().hits - before;
        }
    }
    let reads = (10 * set) as u64;
    assert!(
        last > reads * 9 / 10,
        "the loop's last 10 rounds hit {last} of {reads} reads ({:?})",
        c.workingset_stats()
    );
    drop(file);
    assert_baseline(&c);
}

/// Loops over 1.25 and 2 times a block cache, the pattern LRU-like lists miss on every
/// read: the two lists activate every refault (each comes back within the active list's
/// size) and cycle through the loop in order, missing every read; the protected policy
/// refuses refaults whose reuse distance exceeds the coldest protected block's age, so most
/// of the loop stays resident and hits every round, as LIRS keeps its LIR set.
#[test]
fn a_loop_longer_than_the_cache_stays_mostly_resident_under_the_protected_policy() {
    foliocache::mm::sync::pin_to_cpu(0);
    let budget = 1024;
    // (loop length, the least hit ratio the protected policy must reach). LIRS keeps about
    // 1,020 blocks of either loop (79% and 50% hits); the protected set gives up the inactive
    // list's floor (1% plus a reclaim batch: 42 pages) and some churn.
    for (set, least) in [(1280, 0.65), (2048, 0.4)] {
        let data = content(set);
        let mut hit_ratio = Vec::new();
        for policy in [LruPolicy::TwoList, LruPolicy::Protected] {
            let c = FolioCache::new(
                Config::block_cache(budget * PAGE)
                    .panic_on_bad_page(true)
                    .experiment(Experiment::new().batch_slots(1))
                    .lru_policy(policy),
            )
            .unwrap();
            let file = c.open_backing("data", MemBacking(data.clone())).unwrap();
            for _ in 0..5 {
                for p in 0..set {
                    read_page(&file, &data, p);
                }
            }
            let rounds = 10;
            let before = c.stats().hits;
            for _ in 0..rounds {
                for p in 0..set {
                    read_page(&file, &data, p);
                }
            }
            let hits = c.stats().hits - before;
            hit_ratio.push(hits as f64 / (rounds * set) as f64);
            let ws = c.workingset_stats();
            assert!(ws.refault > 0, "{policy}: {ws:?}");
            drop(file);
            assert_baseline(&c);
        }
        assert!(
            hit_ratio[0] < 0.05,
            "{set} blocks: the two lists thrash: {hit_ratio:?}"
        );
        assert!(
            hit_ratio[1] > least,
            "{set} blocks: the protected set holds: {hit_ratio:?}"
        );
    }
}
