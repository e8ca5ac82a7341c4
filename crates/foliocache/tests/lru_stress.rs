//! Stress test of the LRU with real threads: readers, inserters, truncaters and reclaim on a
//! few files whose data is eight times the memory budget, so direct reclaim runs all the
//! time, with the drain filter on (half the runs with add-as-active, the seed's bad-page
//! condition).
//!
//! Every folio's bytes encode its file and page index; a reader that holds a folio checks
//! them, so a folio freed and reused under a reader would be caught. At the end, with every
//! file truncated and every batch drained, `Lru::validate` (lists, flags, counters),
//! `Index::validate` and `Arena::validate` must pass with no folio left and no bad page.
//!
//! Millions of operations in release builds; a tenth of that in debug builds.

#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use foliocache::mm::folio::{Arena, ArenaConfig, FolioLocked, FolioRef, PAGE_SIZE};
use foliocache::mm::index::Index;
use foliocache::mm::lru::{DrainFilter, Evict, Lru, LruConfig, LruList, LruPolicy};
use foliocache::mm::refcount::RefStrategy;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const FILES: usize = 4;
const FILE_PAGES: u64 = 512;
const BUDGET_PAGES: usize = 256;
const THREADS: usize = 4;

/// The cache's mappings, for reclaim.
struct Files(Vec<Index>);

impl Evict for Files {
    fn evict<'a>(&self, folio: FolioLocked<'a>) -> Result<(), FolioRef<'a>> {
        match self.0.iter().find(|i| i.mapping_id() == folio.mapping()) {
            Some(index) => index.evict(folio).map_err(FolioLocked::unlock),
            None => Err(folio.unlock()),
        }
    }
}

fn word(file: usize, page: u64) -> u64 {
    ((file as u64 + 1) << 40) | page
}

fn fill(folio: &mut FolioLocked<'_>, file: usize, page: u64) {
    let w = word(file, page).to_le_bytes();
    for chunk in folio.data_mut().unwrap().chunks_exact_mut(8) {
        chunk.copy_from_slice(&w);
    }
    folio.mark_uptodate();
}

fn check(folio: &FolioRef<'_>, file: usize, page: u64) {
    let data = folio.data().expect("uptodate");
    let want = word(file, page).to_le_bytes();
    assert_eq!(&data[..8], &want, "first word of file {file} page {page}");
    assert_eq!(
        &data[PAGE_SIZE - 8..],
        &want,
        "last word of file {file} page {page}"
    );
}

#[derive(Default)]
struct Counts {
    ops: AtomicU64,
    hits: AtomicU64,
    inserts: AtomicU64,
    truncates: AtomicU64,
    reclaims: AtomicU64,
}

fn stress(s: RefStrategy, add_as_active: bool, policy: LruPolicy, ops_per_thread: u64) {
    let mut c = ArenaConfig::new(BUDGET_PAGES * PAGE_SIZE, s);
    c.panic_on_bad_page = true;
    let arena = Arc::new(Arena::new(c).unwrap());
    let lru = Lru::new(
        &arena,
        LruConfig::DEFAULT
            .filter(DrainFilter::Filtered)
            .add_as_active(add_as_active)
            .policy(policy),
    );
    let files = Files((0..FILES).map(|_| Index::new(arena.clone())).collect());
    let counts = Counts::default();
    let failed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (arena, lru, files, counts, failed) = (&*arena, &lru, &files, &counts, &failed);
            scope.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t as u64 * 7919 + 1);
                // A few folios held across operations (pinned guards).
                let mut held: Vec<(usize, u64, FolioRef<'_>)> = Vec::new();
                for _ in 0..ops_per_thread {
                    if failed.load(Ordering::Relaxed) {
                        return;
                    }
                    counts.ops.fetch_add(1, Ordering::Relaxed);
                    let file = rng.random_range(0..FILES);
                    let index = &files.0[file];
                    // Skewed pages: a hot quarter gets half the accesses.
                    let page = if rng.random_bool(0.5) {
                        rng.random_range(0..FILE_PAGES / 4)
                    } else {
                        rng.random_range(0..FILE_PAGES)
                    };
                    match rng.random_range(0..1000) {
                        0..=899 => {
                            if let Some(f) = index.lookup(page) {
                                f.wait_locked();
                                if !f.is_uptodate() {
                                    continue;
                                }
                                check(&f, file, page);
                                lru.mark_accessed(arena, &f);
                                counts.hits.fetch_add(1, Ordering::Relaxed);
                                if rng.random_range(0..64) == 0 {
                                    held.push((file, page, f));
                                    if held.len() > 4 {
                                        let (hf, hp, h) = held.swap_remove(0);
                                        check(&h, hf, hp);
                                    }
                                }
                                continue;
                            }
                            let f = match lru.alloc(arena, files, 0) {
                                Ok(f) => f,
                                Err(e) => {
                                    failed.store(true, Ordering::Relaxed);
                                    panic!("allocation failed with few pins: {e}");
                                }
                            };
                            let mut l = f.lock();
                            fill(&mut l, file, page);
                            if index.add_folio(&l, page).is_ok() {
                                lru.add(arena, l.folio_ref());
                                counts.inserts.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        900..=969 => {
                            let len = rng.random_range(1..16);
                            index.truncate(page, page + len);
                            counts.truncates.fetch_add(1, Ordering::Relaxed);
                        }
                        970..=989 => {
                            lru.reclaim(arena, files, 16);
                            counts.reclaims.fetch_add(1, Ordering::Relaxed);
                        }
                        990..=997 => lru.drain(arena),
                        _ => lru.drain_all(arena),
                    }
                }
                for (hf, hp, h) in held {
                    check(&h, hf, hp);
                }
            });
        }
    });
    assert!(!failed.load(Ordering::Relaxed));
    let st = lru.validate(&arena).unwrap();
    for i in &files.0 {
        i.validate().unwrap();
    }
    eprintln!(
        "{s} add_as_active={add_as_active}: ops {} hits {} inserts {} truncates {} reclaims {}; {st:?}",
        counts.ops.load(Ordering::Relaxed),
        counts.hits.load(Ordering::Relaxed),
        counts.inserts.load(Ordering::Relaxed),
        counts.truncates.load(Ordering::Relaxed),
        counts.reclaims.load(Ordering::Relaxed),
    );
    // The run did stress what it claims to.
    assert!(st.alloc_stalls > 0 && st.reclaimed > 0, "{st:?}");
    assert!(
        st.dead_filtered > 0 && st.activated + st.deactivated > 0,
        "{st:?}"
    );
    assert_eq!(st.oom, 0);
    // Tear down: nothing may remain.
    for i in &files.0 {
        i.truncate(0, u64::MAX);
    }
    lru.drain_all(&arena);
    let st = lru.validate(&arena).unwrap();
    assert_eq!(st.folios, [0; 3], "lists empty: {:?}", LruList::ALL);
    assert_eq!(st.batched, 0);
    let a = arena.validate().unwrap();
    assert_eq!(a.allocated_pages, 0);
    assert_eq!(a.bad_pages, 0);
}

fn ops() -> u64 {
    // Release: 4 threads x 500k = 2 M operations per run.
    if cfg!(debug_assertions) {
        25_000
    } else {
        500_000
    }
}

#[test]
fn readers_truncaters_and_reclaim_locked_bit() {
    stress(RefStrategy::LockedBit, false, LruPolicy::TwoList, ops());
}

#[test]
fn readers_truncaters_and_reclaim_protected_policy() {
    stress(RefStrategy::LockedBit, false, LruPolicy::Protected, ops());
}

#[test]
fn readers_truncaters_and_reclaim_add_as_active_cas_loop() {
    stress(RefStrategy::CasLoop, true, LruPolicy::TwoList, ops());
}
