//! Large folios: readahead's orders (`page_cache_ra_order`), misses that read a whole
//! request, zero-copy byte ranges (`get_range`), writes into large folios and their
//! writeback, splitting before truncations, block latches (`get_block_mut_in_place`: in
//! place, in a copy, over a block collapsed from pages or split from a larger folio, against
//! readers, writers and snapshots), and a differential test of reads, invalidations,
//! truncations, writes and pins over mixed-order folios against a byte-vector model,
//! `validate()` after every step.

use std::sync::Arc;

use foliocache::backing::{FaultyBacking, FileBacking, MemBacking};
use foliocache::mm::readahead::InsertMode;
use foliocache::mm::Experiment;
use foliocache::{Config, FolioCache, OpenOptions, PAGE_SIZE};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PAGE: u64 = PAGE_SIZE as u64;

fn content(pages: usize, seed: u8) -> Vec<u8> {
    (0..pages * PAGE_SIZE)
        .map(|i| (i / 7) as u8 ^ (i / PAGE_SIZE) as u8 ^ seed)
        .collect()
}

/// No folio left once every file is closed and evicted, no bad page, consistent books.
fn assert_baseline(c: &FolioCache) {
    c.drop_caches();
    c.lru_add_drain_all();
    let s = c.stats();
    assert_eq!(s.allocated_pages, 0, "{s:?}");
    assert_eq!(s.bad_pages, 0, "{s:?}");
    c.validate().unwrap();
}

#[test]
fn sequential_readahead_caches_aligned_large_folios_inside_the_file() {
    // 1000 pages: not a power of two, so the last windows need smaller folios at EOF.
    let data = content(1000, 1);
    for mode in InsertMode::ALL {
        let c = FolioCache::new(
            Config::new(16 << 20)
                .experiment(Experiment::new().insert_mode(mode))
                .readahead_pages(256),
        )
        .unwrap();
        let f = c.open_backing("seq", MemBacking(data.clone())).unwrap();
        let mut buf = vec![0u8; 8192];
        let mut off = 0;
        let mut largest = 0;
        while off < data.len() as u64 {
            let n = f.read_at(&mut buf, off).unwrap();
            assert_eq!(&buf[..n], &data[off as usize..off as usize + n]);
            let g = f.get_folio_at(off).unwrap();
            // Naturally aligned, inside the file, holding the offset.
            let pages = g.len().div_ceil(PAGE_SIZE) as u64;
            assert!(pages.is_power_of_two());
            assert_eq!(
                g.index() % pages,
                0,
                "folio at page {} of {pages}",
                g.index()
            );
            assert!(g.offset() <= off && off < g.offset() + g.len() as u64);
            assert!(g.offset() + g.len() as u64 <= data.len() as u64);
            largest = largest.max(pages);
            off += n as u64;
        }
        let s = c.stats();
        assert!(largest >= 32, "{mode}: largest folio {largest} pages");
        assert!(s.readahead_large_folios > 0, "{s:?}");
        // Far fewer LRU entries (folios) than pages.
        assert!(s.readahead_folios * 4 < s.readahead_pages, "{s:?}");
        c.validate().unwrap();
        drop(f);
        assert_baseline(&c);
    }
}

#[test]
fn max_folio_order_zero_and_the_file_opt_out_cache_pages() {
    let data = content(256, 2);
    for (config, opt_out) in [
        (Config::new(4 << 20).max_folio_order(0), false),
        (Config::new(4 << 20), true),
    ] {
        let c = FolioCache::new(config).unwrap();
        let f = c.open_backing("pages", MemBacking(data.clone())).unwrap();
        if opt_out {
            f.set_large_folios(false);
        }
        let mut buf = vec![0u8; data.len()];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf, data);
        let s = c.stats();
        assert_eq!(s.readahead_large_folios, 0, "{s:?}");
        assert_eq!(s.readahead_folios, s.readahead_pages, "{s:?}");
        assert_eq!(f.get_folio(100).unwrap().len(), PAGE_SIZE);
        drop(f);
        assert_baseline(&c);
    }
    assert!(Config::new(1 << 20).max_folio_order(10).validate().is_err());
}

/// The cold-block check: 64 cold 16 KiB reads at random aligned blocks make one
/// backing read per block, whatever the configuration (it took one per page with readahead
/// off before).
#[test]
fn a_cold_block_read_is_one_backing_read_in_every_configuration() {
    let data = content(4096, 3);
    let configs = [
        ("new", Config::new(64 << 20)),
        ("block_cache", Config::block_cache(64 << 20)),
        (
            "block_cache order 0",
            Config::block_cache(64 << 20).max_folio_order(0),
        ),
        (
            "block_cache single",
            Config::block_cache(64 << 20)
                .experiment(Experiment::new().insert_mode(InsertMode::Single)),
        ),
        ("new order 0", Config::new(64 << 20).max_folio_order(0)),
    ];
    // A real file: `MemBacking` fills one buffer per vectored read.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blocks");
    std::fs::write(&path, &data).unwrap();
    for (name, config) in configs {
        let c = FolioCache::new(config).unwrap();
        let backing = Arc::new(FaultyBacking::new(FileBacking::open(&path).unwrap()));
        let f = c.open_backing("blocks", backing.clone()).unwrap();
        let mut rng = StdRng::seed_from_u64(7);
        let mut blocks: Vec<u64> = (0..256).collect();
        for i in 0..64 {
            let j = rng.random_range(i..blocks.len());
            blocks.swap(i, j);
        }
        let mut buf = vec![0u8; 16384];
        for &b in &blocks[..64] {
            let before = backing.reads();
            f.read_exact_at(&mut buf, b * 16384).unwrap();
            assert_eq!(&buf[..], &data[(b * 16384) as usize..][..16384]);
            assert_eq!(backing.reads() - before, 1, "{name}: block {b}");
        }
        drop(f);
        assert_baseline(&c);
    }
}

#[test]
fn get_range_gives_an_aligned_block_as_one_slice_and_any_range_exactly() {
    let data = content(64, 4);
    let c = FolioCache::new(Config::block_cache(4 << 20)).unwrap();
    let backing = Arc::new(FaultyBacking::new(MemBacking(data.clone())));
    let f = c.open_backing("ranges", backing.clone()).unwrap();
    // A cold aligned 16 KiB block: one backing read, one folio, one slice.
    let block = f.get_range(3 * 16384, 16384).unwrap();
    assert_eq!(backing.reads(), 1);
    assert_eq!(block.nr_folios(), 1);
    assert_eq!(block.as_slice().unwrap(), &data[3 * 16384..4 * 16384]);
    // Hit: no I/O, the same folio.
    let again = f.get_range(3 * 16384 + 100, 5000).unwrap();
    assert_eq!(backing.reads(), 1);
    assert_eq!(again.as_slice().unwrap(), &data[3 * 16384 + 100..][..5000]);
    // A range across blocks: slices in order, copy_to, to_vec.
    let across = f.get_range(16384 - 10, 16384 + 20).unwrap();
    assert!(across.nr_folios() >= 2);
    assert!(across.as_slice().is_none());
    let joined: Vec<u8> = across.slices().flatten().copied().collect();
    assert_eq!(joined, &data[16384 - 10..][..16384 + 20]);
    assert_eq!(across.to_vec(), joined);
    // Past the end: an error, nothing pinned.
    assert!(f.get_range(data.len() as u64 - 10, 11).is_err());
    // The owned form outlives the handle and is shared by clones.
    let owned = block.into_owned();
    assert!(owned.is_pinned());
    let copied = across.into_owned();
    assert!(!copied.is_pinned());
    drop(again);
    drop(f);
    let clone = owned.clone();
    let t = std::thread::spawn(move || clone.as_ref().to_vec());
    assert_eq!(t.join().unwrap(), &data[3 * 16384..4 * 16384]);
    assert_eq!(&copied[..], &joined[..]);
    assert_eq!(owned.offset(), 3 * 16384);
    drop((owned, copied));
    assert_baseline(&c);
}

#[test]
fn invalidation_keeps_a_large_folio_it_covers_only_in_part() {
    let data = content(32, 8);
    let c = FolioCache::new(Config::block_cache(4 << 20)).unwrap();
    let f = c.open_backing("inval", MemBacking(data.clone())).unwrap();
    drop(f.get_range(0, 65536).unwrap());
    assert_eq!(f.cached_pages(), 16);
    // Pages 1 and 2 of the 16-page folio: the folio stays whole.
    assert_eq!(f.invalidate(PAGE..3 * PAGE).unwrap(), 0);
    assert_eq!(f.cached_pages(), 16);
    // The whole folio: dropped.
    assert_eq!(f.invalidate(0..65536).unwrap(), 16);
    assert_eq!(f.cached_pages(), 0);
    c.validate().unwrap();
    drop(f);
    assert_baseline(&c);
}

/// Reclaim of large folios seen from the cache: an eviction frees the whole folio and the
/// budget is charged by pages, the eviction clock moves by the pages evicted, and the refaults
/// of a second pass are counted in pages, whole folios at a time. Two passes over 32 blocks
/// of 16 pages with a budget of 16 blocks (the shadow-node limit keeps the second pass's
/// shadows).
#[test]
fn reclaim_of_large_folios_frees_and_counts_them_in_pages() {
    const PAGES: usize = 16;
    const BLOCK: usize = PAGES * PAGE_SIZE;
    const BLOCKS: usize = 32;
    const BUDGET: usize = BLOCKS / 2;
    let data = content(BLOCKS * PAGES, 9);
    let c = FolioCache::new(Config::block_cache(BUDGET * BLOCK).panic_on_bad_page(true)).unwrap();
    let f = c.open_backing("blocks", MemBacking(data.clone())).unwrap();
    for pass in 0..2 {
        for b in 0..BLOCKS {
            let r = f.get_range((b * BLOCK) as u64, BLOCK).unwrap();
            let slice = r.as_slice().expect("a block is one folio");
            assert!(
                slice == &data[b * BLOCK..][..BLOCK],
                "pass {pass} block {b}"
            );
            drop(r);
            let s = c.stats();
            assert!(s.allocated_pages <= (BUDGET * PAGES) as u64, "{s:?}");
            assert_eq!(
                s.allocated_pages % PAGES as u64,
                0,
                "only whole folios: {s:?}"
            );
        }
    }
    let (lru, ws) = (c.lru_stats(), c.workingset_stats());
    assert_eq!(lru.reclaimed % PAGES as u64, 0, "{lru:?}");
    assert!(
        lru.reclaimed >= ((2 * BLOCKS - BUDGET) * PAGES) as u64,
        "{lru:?}"
    );
    assert_eq!(lru.activated, 0, "{lru:?}");
    // One tick of the clock per page evicted or activated at its refault (the block cache's
    // protected policy admits a loop's refaults while its protected set fills), and nothing
    // else moved it; refaults and activations count whole folios' pages.
    assert_eq!(
        ws.nonresident_age,
        lru.reclaimed + ws.activate,
        "{ws:?} {lru:?}"
    );
    assert!(ws.refault > 0, "{ws:?}");
    assert_eq!(ws.refault % PAGES as u64, 0, "{ws:?}");
    assert_eq!(ws.activate % PAGES as u64, 0, "{ws:?}");
    c.validate().unwrap();
    drop(f);
    assert_baseline(&c);
}

fn rw() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true);
    o
}

#[test]
fn a_write_into_a_large_folio_goes_into_it_and_a_pinned_reader_keeps_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = content(64, 5);
    std::fs::write(&path, &data).unwrap();
    let c = FolioCache::new(Config::block_cache(4 << 20)).unwrap();
    let f = c.open_with(&path, &rw()).unwrap();
    let pinned = f.get_range(0, 65536).unwrap();
    assert_eq!(pinned.nr_folios(), 1, "one order-4 folio");
    f.write_all_at(b"hello", 5 * PAGE + 3).unwrap();
    // The reader's pin still sees the old bytes (the write went into a copy of the whole
    // folio, which replaced it); the file reads the new ones.
    assert_eq!(pinned.as_slice().unwrap(), &data[..65536]);
    let mut model = data.clone();
    model[5 * PAGE_SIZE + 3..][..5].copy_from_slice(b"hello");
    let mut back = vec![0u8; 65536];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(back, &model[..65536]);
    let s = c.stats();
    assert_eq!((s.folio_splits, s.writes_replaced), (0, 1), "{s:?}");
    // Still one folio of 16 pages, dirty as a whole.
    assert_eq!(f.cached_pages(), 16);
    assert_eq!(f.get_range(0, 65536).unwrap().nr_folios(), 1);
    assert_eq!(f.dirty_pages(), 16);
    drop(pinned);
    // No one holds it now: the next write goes into the folio itself.
    f.write_all_at(b"world", 15 * PAGE + 100).unwrap();
    model[15 * PAGE_SIZE + 100..][..5].copy_from_slice(b"world");
    let s = c.stats();
    assert_eq!((s.writes_replaced, s.writes_in_place), (1, 1), "{s:?}");
    assert_eq!(f.dirty_pages(), 16);
    c.validate().unwrap();
    f.sync_all().unwrap();
    assert_eq!(f.dirty_pages(), 0);
    assert_eq!(std::fs::read(&path).unwrap(), model);
    // A sync of a range that starts inside a dirty large folio writes the folio.
    f.write_all_at(b"again", 2 * PAGE).unwrap();
    model[2 * PAGE_SIZE..][..5].copy_from_slice(b"again");
    f.sync_range(3 * PAGE..4 * PAGE).unwrap();
    assert_eq!(f.dirty_pages(), 0);
    assert_eq!(std::fs::read(&path).unwrap(), model);
    c.validate().unwrap();
    drop(f);
    assert_baseline(&c);
}

#[test]
fn a_dirty_large_folio_split_by_a_truncation_keeps_its_pages_dirty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = content(32, 9);
    std::fs::write(&path, &data).unwrap();
    let c = FolioCache::new(Config::block_cache(4 << 20)).unwrap();
    let f = c.open_with(&path, &rw()).unwrap();
    drop(f.get_range(0, 65536).unwrap());
    f.write_all_at(&[0xaa; 3 * PAGE_SIZE], 3 * PAGE).unwrap();
    assert_eq!(f.dirty_pages(), 16);
    // Cut inside the folio: it splits into 16 dirty pages and the 6 past the cut go.
    f.set_len(10 * PAGE).unwrap();
    assert_eq!(c.stats().folio_splits, 1);
    assert_eq!(f.dirty_pages(), 10);
    c.validate().unwrap();
    f.sync_all().unwrap();
    let mut model = data[..10 * PAGE_SIZE].to_vec();
    model[3 * PAGE_SIZE..6 * PAGE_SIZE].fill(0xaa);
    assert_eq!(std::fs::read(&path).unwrap(), model);
    drop(f);
    assert_baseline(&c);
}

#[test]
fn a_truncation_inside_a_large_folio_keeps_the_pages_below_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = content(32, 6);
    std::fs::write(&path, &data).unwrap();
    for cut in [10 * PAGE, 10 * PAGE + 100] {
        let c = FolioCache::new(Config::block_cache(4 << 20)).unwrap();
        let f = c.open_with(&path, &rw()).unwrap();
        drop(f.get_range(0, 65536).unwrap());
        assert_eq!(f.cached_pages(), 16);
        f.set_len(cut).unwrap();
        assert_eq!(f.cached_pages(), cut.div_ceil(PAGE), "cut at {cut}");
        let mut back = vec![0u8; cut as usize];
        f.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(back, &data[..cut as usize]);
        c.validate().unwrap();
        f.set_len(data.len() as u64).unwrap();
        std::fs::write(&path, &data).unwrap();
        drop(f);
        assert_baseline(&c);
    }
}

/// Random reads (copying and pinned, in block and odd sizes), invalidations, truncations and
/// writes over one file whose folios have every order, against a byte vector; `validate()`
/// (index, LRU, dirty books, arena) after every step. The budget is a quarter of the file,
/// so reclaim evicts large folios and their shadows come back as refaults.
#[test]
fn differential_reads_invalidations_truncations_and_writes_over_mixed_orders() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let max = 512 * PAGE_SIZE;
    let mut model = content(512, 7);
    std::fs::write(&path, &model).unwrap();
    for (seed, config) in [
        (1, Config::new(128 * PAGE_SIZE)),
        (2, Config::block_cache(128 * PAGE_SIZE)),
        (
            3,
            Config::new(128 * PAGE_SIZE)
                .experiment(Experiment::new().insert_mode(InsertMode::Single)),
        ),
    ] {
        let c = FolioCache::new(config.panic_on_bad_page(true)).unwrap();
        let f = c.open_with(&path, &rw()).unwrap();
        model.truncate(f.len() as usize);
        let mut rng = StdRng::seed_from_u64(seed);
        let steps = if cfg!(debug_assertions) { 600 } else { 3000 };
        for step in 0..steps {
            let len = model.len();
            let what = match rng.random_range(0..100) {
                0..=34 if len > 0 => {
                    let n = match rng.random_range(0..3) {
                        0 => 16384,
                        1 => 65536,
                        _ => rng.random_range(1..40000),
                    };
                    let off = rng.random_range(0..len) as u64;
                    let mut buf = vec![0u8; n];
                    let got = f.read_at(&mut buf, off).unwrap();
                    let end = (off as usize + n).min(len);
                    assert_eq!(&buf[..got], &model[off as usize..end], "step {step}");
                    format!("read {n} at {off}")
                }
                35..=54 if len > 0 => {
                    let n = [16384usize, 65536, 4096, 100][rng.random_range(0..4)].min(len);
                    let off = if rng.random_bool(0.7) {
                        (rng.random_range(0..len) / n * n).min(len - n) as u64
                    } else {
                        rng.random_range(0..=len - n) as u64
                    };
                    let r = f.get_range(off, n).unwrap();
                    assert_eq!(r.to_vec(), &model[off as usize..][..n], "step {step}");
                    if let Some(s) = r.as_slice() {
                        assert_eq!(s.len(), n);
                    }
                    format!("get_range {n} at {off}")
                }
                55..=64 => {
                    let a = rng.random_range(0..max as u64);
                    let b = a + rng.random_range(1..100 * PAGE);
                    f.invalidate(a..b).unwrap();
                    format!("invalidate {a}..{b}")
                }
                65..=74 => {
                    let size = rng.random_range(0..=max) as u64;
                    f.set_len(size).unwrap();
                    model.resize(size as usize, 0);
                    format!("set_len {size}")
                }
                75..=89 => {
                    let n = rng.random_range(1..3 * PAGE_SIZE);
                    let off = rng.random_range(0..max - n);
                    let b: u8 = rng.random();
                    f.write_all_at(&vec![b; n], off as u64).unwrap();
                    if model.len() < off + n {
                        model.resize(off + n, 0);
                    }
                    model[off..off + n].fill(b);
                    format!("write {n} at {off}")
                }
                90..=94 => {
                    f.sync_data().unwrap();
                    "sync".to_string()
                }
                _ => {
                    let a = rng.random_range(0..max as u64);
                    let _ = f.readahead(a..a + rng.random_range(1..300 * PAGE));
                    format!("readahead at {a}")
                }
            };
            assert_eq!(f.len() as usize, model.len(), "after {what}");
            if let Err(e) = c.validate() {
                panic!("step {step} ({what}): {e}");
            }
        }
        let mut all = vec![0u8; model.len()];
        f.read_exact_at(&mut all, 0).unwrap();
        assert!(all == model, "final read-back");
        f.sync_all().unwrap();
        assert!(std::fs::read(&path).unwrap() == model, "the backing file");
        let s = c.stats();
        assert!(s.readahead_large_folios > 0 && s.folio_splits > 0, "{s:?}");
        // Reclaim evicted folios of every size and left shadows, which refaulted: the
        // eviction clock counts pages, so it moved by more than the folios evicted.
        let ws = c.workingset_stats();
        assert!(ws.refault > 0 && ws.nonresident_age > 0, "{ws:?}");
        drop(f);
        assert_baseline(&c);
    }
}

const BLOCK: usize = 16 << 10;

/// A file of `blocks` 16 KiB blocks of `content`, opened for writing in a buffer pool.
fn block_file(blocks: usize) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodes");
    let data = content(blocks * BLOCK / PAGE_SIZE, 11);
    std::fs::write(&path, &data).unwrap();
    (dir, path, data)
}

#[test]
fn a_block_latch_updates_one_folio_in_place_and_commits_it_whole() {
    let (_dir, path, mut model) = block_file(8);
    let c = FolioCache::new(Config::buffer_pool(4 << 20)).unwrap();
    let f = c.open_with(&path, &rw()).unwrap();
    let at = 3 * BLOCK as u64;
    {
        let mut node = f.get_block_mut_in_place(at, BLOCK).unwrap();
        assert!(node.in_place());
        assert_eq!((node.index(), node.len()), (at / PAGE, BLOCK));
        assert_eq!(&node[..], &model[at as usize..][..BLOCK]);
        node[..4].copy_from_slice(b"head");
        node[BLOCK - 4..].copy_from_slice(b"tail");
        node.set_lsn(3);
        // The pinned share holds the block's four pages.
        assert_eq!(c.stats().pinned_pages, 4);
    }
    model[at as usize..][..4].copy_from_slice(b"head");
    model[at as usize + BLOCK - 4..][..4].copy_from_slice(b"tail");
    let block = f.get_range(at, BLOCK).unwrap();
    assert_eq!(
        block.as_slice().expect("one folio"),
        &model[at as usize..][..BLOCK]
    );
    drop(block);
    // One dirty folio of four pages, one page write for the block.
    assert_eq!(f.dirty_pages(), 4);
    let s = c.stats();
    assert_eq!((s.writes_in_place, s.folio_collapses), (1, 0), "{s:?}");
    c.validate().unwrap();
    // The write-ahead rule holds for the block: its change waits for log record 3.
    assert!(f.sync_all().is_err());
    c.log_durable(3);
    f.sync_all().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), model);
    assert_eq!(c.stats().writeback_writes, 1);
    drop(f);
    assert_baseline(&c);
}

#[test]
fn a_block_cached_in_pages_is_collapsed_keeping_their_changes_and_dirtiness() {
    let (_dir, path, mut model) = block_file(4);
    let c = FolioCache::new(Config::buffer_pool(4 << 20)).unwrap();
    let f = c.open_with(&path, &rw()).unwrap();
    // Page 5 written (cached alone, dirty), page 6 read alone (clean), 4 and 7 not cached.
    f.write_all_at(b"written", 5 * PAGE + 10).unwrap();
    model[5 * PAGE_SIZE + 10..][..7].copy_from_slice(b"written");
    let mut one = [0u8; 1];
    f.read_exact_at(&mut one, 6 * PAGE).unwrap();
    assert_eq!(f.dirty_pages(), 1);
    {
        let mut node = f.get_block_mut_in_place(BLOCK as u64, BLOCK).unwrap();
        assert!(node.in_place());
        assert_eq!(&node[..], &model[BLOCK..][..BLOCK]);
        node[PAGE_SIZE * 3] = 0xee;
    }
    model[BLOCK + 3 * PAGE_SIZE] = 0xee;
    assert_eq!(c.stats().folio_collapses, 1);
    assert_eq!(f.get_range(BLOCK as u64, BLOCK).unwrap().nr_folios(), 1);
    assert_eq!(f.dirty_pages(), 4);
    c.validate().unwrap();
    f.sync_data().unwrap();
    assert_eq!(f.dirty_pages(), 0);
    assert_eq!(std::fs::read(&path).unwrap(), model);
    // A block inside a larger folio is split out of it and collapsed: 64 KiB read as one.
    f.invalidate(0..u64::MAX).unwrap();
    drop(f.get_range(0, 4 * BLOCK).unwrap());
    assert_eq!(f.get_range(0, 4 * BLOCK).unwrap().nr_folios(), 1);
    f.get_block_mut_in_place(2 * BLOCK as u64, BLOCK).unwrap()[0] = 0x11;
    model[2 * BLOCK] = 0x11;
    let s = c.stats();
    assert_eq!((s.folio_splits, s.folio_collapses), (1, 2), "{s:?}");
    let mut back = vec![0u8; model.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == model);
    c.validate().unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_baseline(&c);
}

#[test]
fn a_pinned_block_is_latched_in_a_copy_and_readers_keep_the_old_bytes() {
    let (_dir, path, mut model) = block_file(2);
    let c = FolioCache::new(Config::buffer_pool(4 << 20)).unwrap();
    let f = c.open_with(&path, &rw()).unwrap();
    let old = f.get_range(0, BLOCK).unwrap();
    {
        let mut node = f.get_block_mut_in_place(0, BLOCK).unwrap();
        assert!(!node.in_place(), "the pin holds the folio");
        node.fill(0x5a);
        // Until the commit, readers see the old block.
        let mut page = vec![0u8; PAGE_SIZE];
        f.read_exact_at(&mut page, 2 * PAGE).unwrap();
        assert_eq!(page, &model[2 * PAGE_SIZE..][..PAGE_SIZE]);
    }
    assert_eq!(old.as_slice().unwrap(), &model[..BLOCK]);
    model[..BLOCK].fill(0x5a);
    let now = f.get_range(0, BLOCK).unwrap();
    assert_eq!(now.as_slice().expect("one folio"), &model[..BLOCK]);
    drop((old, now));
    assert_eq!(f.dirty_pages(), 4);
    c.validate().unwrap();
    f.sync_all().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), model);
    drop(f);
    assert_baseline(&c);
}

#[test]
fn a_block_latch_refuses_bad_blocks_and_its_holders_reads() {
    let (_dir, path, _model) = block_file(2);
    let c = FolioCache::new(Config::buffer_pool(4 << 20)).unwrap();
    let f = c.open_with(&path, &rw()).unwrap();
    for (offset, len) in [
        (0, PAGE_SIZE),
        (0, 3 * PAGE_SIZE),
        (PAGE, BLOCK),
        (0, 256 << 10),
    ] {
        let e = f.get_block_mut_in_place(offset, len).unwrap_err();
        assert!(
            matches!(e, foliocache::CacheError::InvalidArgument { .. }),
            "{e}"
        );
    }
    let e = f
        .get_block_mut_in_place(2 * BLOCK as u64, BLOCK)
        .unwrap_err();
    assert!(e.to_string().contains("set_len"), "{e}");
    let ro = c.open(&path).unwrap();
    assert!(matches!(
        ro.get_block_mut_in_place(0, BLOCK).unwrap_err(),
        foliocache::CacheError::NotWritable { .. }
    ));
    let node = f.get_block_mut_in_place(BLOCK as u64, BLOCK).unwrap();
    // The holder's own read of any page of the block, or write to it, would wait for
    // itself: refused. Pages outside it are free.
    let mut b = [0u8; 8];
    assert!(f.read_at(&mut b, BLOCK as u64 + 3 * PAGE).is_err());
    assert!(f.write_at(b"x", BLOCK as u64 + 2 * PAGE).is_err());
    f.write_all_at(b"free", 0).unwrap();
    drop(node);
    f.read_exact_at(&mut b, BLOCK as u64 + 3 * PAGE).unwrap();
    assert_eq!(c.stats().pinned_pages, 0);
    f.sync_all().unwrap();
    drop((f, ro));
    assert_baseline(&c);
}

#[test]
fn readers_and_writers_of_a_latched_block_wait_for_its_commit_and_see_it_whole() {
    let (_dir, path, _model) = block_file(2);
    let c = FolioCache::new(Config::buffer_pool(4 << 20)).unwrap();
    let f = Arc::new(c.open_with(&path, &rw()).unwrap());
    // Another handle writes: the guard's own handle would be refused (it would wait for
    // itself), whatever the thread.
    let other = Arc::new(c.open_with(&path, &rw()).unwrap());
    let mut rounds_in_place = 0;
    for round in 0..20u8 {
        let mut node = f.get_block_mut_in_place(BLOCK as u64, BLOCK).unwrap();
        // In place, readers wait for the commit; in a copy (a batch of another CPU still
        // held the folio), they read the block from before the latch. Whole, either way.
        let (in_place, before) = (node.in_place(), node.to_vec());
        rounds_in_place += in_place as u32;
        let readers: Vec<_> = (0..2)
            .map(|i| {
                let f = f.clone();
                std::thread::spawn(move || {
                    if i == 0 {
                        let r = f.get_range(BLOCK as u64, BLOCK).unwrap();
                        r.to_vec()
                    } else {
                        let mut v = vec![0u8; BLOCK];
                        f.read_exact_at(&mut v, BLOCK as u64).unwrap();
                        v
                    }
                })
            })
            .collect();
        let writer = {
            let f = other.clone();
            std::thread::spawn(move || f.write_all_at(&[round; 8], BLOCK as u64 + PAGE).unwrap())
        };
        // The block changes in two halves while the others wait.
        node[..BLOCK / 2].fill(round);
        std::thread::yield_now();
        node[BLOCK / 2..].fill(round);
        drop(node);
        for r in readers {
            let v = r.join().unwrap();
            // Whole: the commit's bytes (the writer's are the same), or the old block.
            assert!(
                v == vec![round; BLOCK] || (!in_place && v == before),
                "round {round} (in place: {in_place}): a reader saw part of the block"
            );
        }
        writer.join().unwrap();
    }
    assert!(rounds_in_place > 0, "no round latched the block in place");
    c.validate().unwrap();
    f.sync_all().unwrap();
    drop((f, other));
    assert_baseline(&c);
}

#[test]
fn a_snapshot_keeps_a_block_from_before_its_latch() {
    let (_dir, path, model) = block_file(2);
    let c = FolioCache::new(Config::buffer_pool(4 << 20)).unwrap();
    let f = c.open_with(&path, &rw()).unwrap();
    drop(f.get_range(0, 2 * BLOCK).unwrap());
    let snap = f.snapshot().unwrap();
    f.get_block_mut_in_place(BLOCK as u64, BLOCK)
        .unwrap()
        .fill(7);
    let mut old = vec![0u8; BLOCK];
    snap.read_exact_at(&mut old, BLOCK as u64).unwrap();
    assert_eq!(old, &model[BLOCK..][..BLOCK]);
    let mut now = vec![0u8; BLOCK];
    f.read_exact_at(&mut now, BLOCK as u64).unwrap();
    assert_eq!(now, vec![7u8; BLOCK]);
    // Again, now that every snapshot has its copy: in place.
    let mut node = f.get_block_mut_in_place(BLOCK as u64, BLOCK).unwrap();
    assert!(node.in_place());
    node.fill(8);
    // A snapshot taken from another thread waits for the latch's commit.
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            let snap2 = f.snapshot().unwrap();
            let mut b = vec![0u8; BLOCK];
            snap2.read_exact_at(&mut b, BLOCK as u64).unwrap();
            b
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(node);
        assert_eq!(t.join().unwrap(), vec![8u8; BLOCK]);
    });
    snap.read_exact_at(&mut old, BLOCK as u64).unwrap();
    assert_eq!(old, &model[BLOCK..][..BLOCK]);
    drop(snap);
    c.validate().unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_baseline(&c);
}

#[test]
fn a_pinned_block_upgrades_to_its_block_latch_without_a_second_lookup() {
    let (_dir, path, mut model) = block_file(4);
    let c = FolioCache::new(Config::buffer_pool(4 << 20)).unwrap();
    let f = c.open_with(&path, &rw()).unwrap();
    let at = 2 * BLOCK as u64;
    let r = f.get_range(at, BLOCK).unwrap();
    assert_eq!(r.nr_folios(), 1);
    let hits = c.stats().hits;
    let mut node = r.upgrade_in_place().unwrap();
    assert!(node.in_place());
    assert_eq!(c.stats().hits, hits, "the pin's folio, not a lookup");
    assert_eq!(c.stats().pinned_pages, 4);
    node[BLOCK / 2] = 0x77;
    drop(node);
    model[at as usize + BLOCK / 2] = 0x77;
    assert_eq!(c.stats().pinned_pages, 0);
    // A range that is not a block is refused (and its pin released); one over several
    // folios is looked up and made one.
    let e = f
        .get_range(at + PAGE, BLOCK)
        .unwrap()
        .upgrade_in_place()
        .unwrap_err();
    assert!(
        matches!(e, foliocache::CacheError::InvalidArgument { .. }),
        "{e}"
    );
    f.invalidate(0..u64::MAX).unwrap();
    let mut one = [0u8; 1];
    f.read_exact_at(&mut one, PAGE).unwrap(); // page 1 cached alone
    let r = f.get_range(0, BLOCK).unwrap();
    assert!(r.nr_folios() > 1);
    let mut node = r.upgrade_in_place().unwrap();
    node[0] = 0x66;
    drop(node);
    model[0] = 0x66;
    assert_eq!(c.stats().folio_collapses, 1);
    assert_eq!(c.stats().pinned_pages, 0);
    f.sync_all().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), model);
    drop(f);
    assert_baseline(&c);
}

/// A write into a clean large folio of more pages than the dirty limit (a 128 KiB folio,
/// a limit of 25 pages) reserves what the limit allows and goes over by the rest, rather
/// than wait for room that cannot come; a write making a new folio is kept well under it.
#[test]
fn a_write_into_a_folio_larger_than_the_dirty_limit_completes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = content(128, 4);
    std::fs::write(&path, &data).unwrap();
    let c = FolioCache::new(Config::new(128 * PAGE_SIZE).readahead_pages(64)).unwrap();
    assert_eq!(c.stats().dirty_limit_pages, 25);
    let f = c.open_with(&path, &rw()).unwrap();
    let r = f.get_range(0, 32 * PAGE_SIZE).unwrap();
    assert_eq!(r.nr_folios(), 1, "one 128 KiB folio");
    drop(r);
    f.write_all_at(b"x", 3).unwrap();
    // The whole folio became dirty at once (the flusher, woken over the background
    // threshold, may already have cleaned it: the high-water mark is what cannot race).
    assert!(c.stats().dirty_high_water >= 32, "{:?}", c.stats());
    assert!(matches!(f.dirty_pages(), 0 | 32), "{}", f.dirty_pages());
    f.sync_data().unwrap();
    // A new file written whole: folios of at most an eighth of the limit (2 pages here).
    let g = c.open_with(dir.path().join("g"), &rw()).unwrap();
    g.write_all_at(&data, 0).unwrap();
    assert!(c.stats().dirty_high_water <= 32 + 1, "{:?}", c.stats());
    g.sync_data().unwrap();
    let mut model = data.clone();
    model[3] = b'x';
    assert_eq!(std::fs::read(&path).unwrap(), model);
    assert_eq!(std::fs::read(dir.path().join("g")).unwrap(), data);
    drop((f, g));
    assert_baseline(&c);
}
