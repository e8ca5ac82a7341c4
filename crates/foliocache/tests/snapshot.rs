//! Snapshots of cached files (`CachedFile::snapshot`): point-in-time views that keep their
//! bytes whatever is written, truncated, written back or reclaimed after them; a differential
//! test against a model where a snapshot is a copy of the bytes; the limit; release; the
//! accounting back at its baseline.

use std::sync::{Arc, Mutex};

use foliocache::mm::rmap::Tracking;
use foliocache::mm::Experiment;
use foliocache::{CacheError, Config, FolioCache, OpenOptions, Snapshot};

const PAGE: usize = 4096;

fn rw() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true);
    o
}

/// Every folio freed (once written back), nothing bad, the snapshot charge back at zero.
fn assert_baseline(c: &FolioCache) {
    c.sync_all().unwrap();
    c.drop_caches();
    let a = c.validate().unwrap();
    assert_eq!((a.allocated_pages, a.bad_pages), (0, 0));
    let s = c.stats();
    assert_eq!((s.snapshot_pages, s.pinned_pages), (0, 0));
}

fn read_all(s: &Snapshot) -> Vec<u8> {
    let mut v = vec![0u8; s.len() as usize];
    s.read_exact_at(&mut v, 0).unwrap();
    v
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i / 7) as u8)).collect()
}

#[test]
fn a_snapshot_keeps_cached_pages_a_write_changes() {
    let dir = tempfile::tempdir().unwrap();
    let cache = FolioCache::new(Config::new(4 << 20)).unwrap();
    {
        let f = cache.open_with(dir.path().join("f"), &rw()).unwrap();
        let old = pattern(1, 5 * PAGE + 100);
        f.write_all_at(&old, 0).unwrap();
        let snap = f.snapshot().unwrap();
        assert_eq!(snap.len(), old.len() as u64);
        f.write_all_at(&[9u8; 3 * PAGE], PAGE as u64 / 2).unwrap();
        f.write_all_at(b"grown", old.len() as u64 + 10).unwrap();
        assert_eq!(read_all(&snap), old);
        // Pages 0..=3 and 5 were changed: their old versions are held.
        assert_eq!(snap.held_pages(), 5);
        assert_eq!(cache.stats().snapshot_pages, 5);
        // The live file has the new bytes.
        let mut b = [0u8; 4];
        f.read_exact_at(&mut b, PAGE as u64).unwrap();
        assert_eq!(b, [9; 4]);
        cache.validate().unwrap();
    }
    assert_baseline(&cache);
}

#[test]
fn uncached_pages_are_read_before_a_write_and_survive_writeback_and_eviction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let old = pattern(3, 64 * PAGE);
    std::fs::write(&path, &old).unwrap();
    let cache = FolioCache::new(Config::new(1 << 20)).unwrap();
    {
        let f = cache.open_with(&path, &rw()).unwrap();
        let snap = f.snapshot().unwrap();
        // Nothing is cached: whole-page and partial writes to pages the cache never read.
        for i in (0..64).step_by(2) {
            f.write_all_at(&[0xee; PAGE], (i * PAGE) as u64).unwrap();
        }
        f.write_all_at(b"tail", (63 * PAGE + 5) as u64).unwrap();
        assert_eq!(cache.stats().snapshot_capture_reads, 33);
        f.sync_data().unwrap();
        f.invalidate(0..u64::MAX).unwrap();
        // The backing file holds the new bytes; the snapshot the old ones.
        assert_eq!(std::fs::read(&path).unwrap()[0], 0xee);
        assert_eq!(read_all(&snap), old);
        let mut backup = Vec::new();
        assert_eq!(snap.copy_to(&mut backup).unwrap(), old.len() as u64);
        assert_eq!(backup, old);
        cache.validate().unwrap();
    }
    assert_baseline(&cache);
}

#[test]
fn truncation_and_growth_leave_a_snapshot_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let old = pattern(5, 10 * PAGE + 333);
    std::fs::write(&path, &old).unwrap();
    let cache = FolioCache::new(Config::new(4 << 20)).unwrap();
    {
        let f = cache.open_with(&path, &rw()).unwrap();
        let mut b = vec![0u8; 2 * PAGE];
        f.read_exact_at(&mut b, 0).unwrap(); // pages 0 and 1 cached, the rest not
        let snap = f.snapshot().unwrap();
        f.set_len(PAGE as u64 + 10).unwrap(); // cuts into page 1
        f.set_len(20 * PAGE as u64).unwrap();
        f.write_all_at(&[1u8; 100], 3 * PAGE as u64).unwrap();
        f.sync_all().unwrap();
        f.invalidate(0..u64::MAX).unwrap();
        assert_eq!(snap.len(), old.len() as u64);
        assert_eq!(read_all(&snap), old);
        // Pages 1..=10 were cut (page 1 in part): all kept.
        assert_eq!(snap.held_pages(), 10);
        let mut past = [0u8; 8];
        assert_eq!(snap.read_at(&mut past, old.len() as u64).unwrap(), 0);
        assert!(matches!(
            snap.read_exact_at(&mut past, old.len() as u64 - 4),
            Err(CacheError::UnexpectedEof { .. })
        ));
        cache.validate().unwrap();
    }
    assert_baseline(&cache);
}

#[test]
fn open_with_truncate_keeps_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let old = pattern(7, 3 * PAGE);
    std::fs::write(&path, &old).unwrap();
    let cache = FolioCache::new(Config::new(4 << 20)).unwrap();
    {
        let f = cache.open(&path).unwrap(); // a read-only handle may snapshot
        let snap = f.snapshot().unwrap();
        let mut o = rw();
        o.truncate(true);
        let w = cache.open_with(&path, &o).unwrap();
        w.write_all_at(b"new", 0).unwrap();
        assert_eq!(read_all(&snap), old);
        drop((f, w));
        assert_eq!(read_all(&snap), old);
    }
    assert_baseline(&cache);
}

#[test]
fn a_latch_commit_and_async_writes_keep_the_old_page() {
    let dir = tempfile::tempdir().unwrap();
    let cache = FolioCache::new(Config::new(4 << 20)).unwrap();
    {
        let f = cache.open_with(dir.path().join("f"), &rw()).unwrap();
        f.write_all_at(&[1u8; 2 * PAGE], 0).unwrap();
        let snap = f.snapshot().unwrap();
        let mut w = f.get_folio_mut(0).unwrap();
        w[0] = 2;
        // Taken while the latch is held: the uncommitted change is not part of the file.
        let snap2 = f.snapshot().unwrap();
        w.commit();
        let a = foliocache::AsyncFile::new(f.reopen());
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(a.write_all_at(&[3u8; 10], PAGE as u64))
            .unwrap();
        assert_eq!(read_all(&snap), vec![1u8; 2 * PAGE]);
        assert_eq!(read_all(&snap2), vec![1u8; 2 * PAGE]);
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(b, [2]);
        // One old page per snapshot per changed page.
        assert_eq!((snap.held_pages(), snap2.held_pages()), (2, 2));
        cache.validate().unwrap();
    }
    assert_baseline(&cache);
}

#[test]
fn release_gives_pages_back_and_later_writes_keep_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = FolioCache::new(Config::new(4 << 20)).unwrap();
    {
        let f = cache.open_with(dir.path().join("f"), &rw()).unwrap();
        let old = pattern(11, 8 * PAGE);
        f.write_all_at(&old, 0).unwrap();
        let snap = f.snapshot().unwrap();
        f.write_all_at(&[0u8; 4 * PAGE], 0).unwrap();
        assert_eq!(snap.held_pages(), 4);
        // Bytes 100..3 pages: whole pages 1 and 2 only.
        assert_eq!(snap.release(100..3 * PAGE as u64).unwrap(), 2);
        assert_eq!(snap.held_pages(), 2);
        assert_eq!(snap.release(100..3 * PAGE as u64).unwrap(), 0);
        let mut b = [0u8; 10];
        assert!(matches!(
            snap.read_at(&mut b, PAGE as u64 + 5),
            Err(CacheError::SnapshotReleased { offset, .. }) if offset == PAGE as u64
        ));
        // A read running into the released range stops short before it.
        let mut b = vec![0u8; 2 * PAGE];
        assert_eq!(snap.read_at(&mut b, 0).unwrap(), PAGE);
        assert_eq!(&b[..PAGE], &old[..PAGE]);
        // Writes to released pages keep nothing; to others they still do.
        let before = cache.stats().snapshot_captures;
        f.write_all_at(&[5u8; 2 * PAGE], PAGE as u64).unwrap();
        assert_eq!(cache.stats().snapshot_captures, before);
        f.write_all_at(&[5u8; 1], 6 * PAGE as u64).unwrap();
        assert_eq!(cache.stats().snapshot_captures, before + 1);
        let mut b = vec![0u8; PAGE];
        snap.read_exact_at(&mut b, 6 * PAGE as u64).unwrap();
        assert_eq!(b, &old[6 * PAGE..7 * PAGE]);
        // Everything else still reads.
        let mut rest = vec![0u8; 5 * PAGE];
        snap.read_exact_at(&mut rest, 3 * PAGE as u64).unwrap();
        assert_eq!(rest, &old[3 * PAGE..]);
        cache.validate().unwrap();
    }
    assert_baseline(&cache);
}

#[test]
fn drain_to_streams_a_backup_and_releases_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let cache = FolioCache::new(Config::new(8 << 20)).unwrap();
    {
        let f = cache.open_with(dir.path().join("f"), &rw()).unwrap();
        let old = pattern(13, 300 * PAGE + 17);
        f.write_all_at(&old, 0).unwrap();
        let snap = f.snapshot().unwrap();
        f.write_all_at(&vec![1u8; 300 * PAGE], 0).unwrap();
        assert_eq!(snap.held_pages(), 300);
        let mut backup = Vec::new();
        assert_eq!(snap.drain_to(&mut backup).unwrap(), old.len() as u64);
        assert_eq!(backup, old);
        assert_eq!(snap.held_pages(), 0);
        assert_eq!(cache.stats().snapshot_pages, 0);
        let mut b = [0u8; 1];
        assert!(snap.read_at(&mut b, 0).is_err());
        cache.validate().unwrap();
    }
    assert_baseline(&cache);
}

#[test]
fn the_snapshot_limit_fails_the_write_and_leaves_the_page() {
    let dir = tempfile::tempdir().unwrap();
    // 1 MiB = 256 pages; 5% = 12 pages for snapshots.
    let cache = FolioCache::new(Config::new(1 << 20).snapshot_share(5)).unwrap();
    assert_eq!(cache.stats().snapshot_limit_pages, 12);
    {
        let f = cache.open_with(dir.path().join("f"), &rw()).unwrap();
        let old = pattern(17, 20 * PAGE);
        f.write_all_at(&old, 0).unwrap();
        let snap = f.snapshot().unwrap();
        let mut failed_at = None;
        for i in 0..20 {
            match f.write_all_at(&[0xaa; PAGE], (i * PAGE) as u64) {
                Ok(()) => {}
                Err(e) => {
                    assert!(matches!(e, CacheError::SnapshotLimit { .. }), "{e}");
                    assert!(e.to_string().contains("snapshot_share"), "{e}");
                    failed_at = Some(i);
                    break;
                }
            }
        }
        let i = failed_at.expect("the limit stops the writes");
        assert_eq!(i, 12);
        let mut b = vec![0u8; PAGE];
        f.read_exact_at(&mut b, (i * PAGE) as u64).unwrap();
        assert_eq!(
            b,
            &old[i * PAGE..(i + 1) * PAGE],
            "the refused page is unchanged"
        );
        assert_eq!(read_all(&snap), old);
        assert_eq!(cache.stats().snapshot_limit_failures, 1);
        // Released pages make room again.
        snap.release(0..4 * PAGE as u64).unwrap();
        f.write_all_at(&[0xaa; PAGE], (i * PAGE) as u64).unwrap();
        drop(snap);
        // Without a snapshot, writes keep nothing.
        f.write_all_at(&[0xbb; 20 * PAGE], 0).unwrap();
        cache.validate().unwrap();
    }
    assert_baseline(&cache);
}

#[test]
fn captured_pages_are_not_reclaimed_under_a_small_budget() {
    let dir = tempfile::tempdir().unwrap();
    // 512 KiB budget = 128 pages; snapshots may hold 50 of them.
    let cache = FolioCache::new(Config::new(512 << 10).snapshot_share(40)).unwrap();
    {
        let f = cache.open_with(dir.path().join("f"), &rw()).unwrap();
        let old = pattern(19, 40 * PAGE);
        f.write_all_at(&old, 0).unwrap();
        let other = cache.open_with(dir.path().join("other"), &rw()).unwrap();
        other.write_all_at(&vec![4u8; 1 << 20], 0).unwrap();
        let snap = f.snapshot().unwrap();
        f.write_all_at(&vec![8u8; 40 * PAGE], 0).unwrap();
        f.sync_data().unwrap();
        // Read twice the budget of another file: reclaim runs and must keep the snapshot's.
        let mut b = vec![0u8; 1 << 20];
        other.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(snap.held_pages(), 40);
        assert_eq!(read_all(&snap), old);
        cache.validate().unwrap();
    }
    assert_baseline(&cache);
}

#[test]
fn zero_copy_guards_of_a_snapshot_with_large_folios() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let old = pattern(23, 64 * PAGE);
    std::fs::write(&path, &old).unwrap();
    let cache = FolioCache::new(Config::new(8 << 20)).unwrap();
    {
        let f = cache.open_with(&path, &rw()).unwrap();
        f.readahead(0..old.len() as u64).unwrap(); // large folios
        let snap = f.snapshot().unwrap();
        f.write_all_at(b"xx", 5 * PAGE as u64).unwrap();
        for i in 0..64u64 {
            let g = snap.get_folio(i).unwrap();
            let at = g.offset() as usize;
            assert!(g.offset() <= i * PAGE as u64);
            assert_eq!(&g[..], &old[at..at + g.len()], "page {i}");
        }
        let r = snap.get_range(5 * PAGE as u64 - 10, 3 * PAGE).unwrap();
        let mut out = vec![0u8; 3 * PAGE];
        r.copy_to(&mut out);
        assert_eq!(out, &old[5 * PAGE - 10..8 * PAGE - 10]);
        drop(r);
        // A large live folio some page of which the snapshot holds is split, not shown.
        std::fs::write(dir.path().join("g"), &old).unwrap();
        let g = cache.open_with(dir.path().join("g"), &rw()).unwrap();
        let s2 = g.snapshot().unwrap();
        g.write_all_at(b"yy", 9 * PAGE as u64).unwrap();
        g.sync_data().unwrap();
        g.invalidate(0..u64::MAX).unwrap();
        g.readahead(0..old.len() as u64).unwrap(); // large folios with the new page 9
        for i in 0..64u64 {
            let p = s2.get_folio(i).unwrap();
            let at = p.offset() as usize;
            assert_eq!(&p[..], &old[at..at + p.len()], "page {i}");
        }
        assert!(matches!(
            snap.get_folio(64),
            Err(CacheError::InvalidArgument { .. })
        ));
        assert_eq!(
            cache.stats().pinned_pages,
            s2.held_pages() + snap.held_pages()
        );
        cache.validate().unwrap();
    }
    assert_baseline(&cache);
}

/// Behind a snapshot's release point a write goes into a large folio whole, as it would with
/// no snapshot: nothing to keep, so nothing to split. Where the snapshot still needs a page
/// of the folio, the folio is split and only the written page kept.
#[test]
fn a_large_folio_behind_the_release_point_is_written_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let old = pattern(29, 64 * PAGE);
    std::fs::write(&path, &old).unwrap();
    let cache = FolioCache::new(Config::new(8 << 20).max_folio_order(5)).unwrap();
    {
        let f = cache.open_with(&path, &rw()).unwrap();
        f.readahead(0..old.len() as u64).unwrap();
        let folios = |first: usize| {
            f.get_range((first * PAGE) as u64, 32 * PAGE)
                .unwrap()
                .nr_folios()
        };
        assert_eq!(
            f.get_range(0, 64 * PAGE).unwrap().nr_folios(),
            2,
            "two 128 KiB folios"
        );
        let snap = f.snapshot().unwrap();
        assert_eq!(snap.release(0..32 * PAGE as u64).unwrap(), 0);
        let before = cache.stats();
        f.write_all_at(b"a", 3 * PAGE as u64 + 5).unwrap();
        let after = cache.stats();
        assert_eq!(
            after.folio_splits, before.folio_splits,
            "nothing to keep: no split"
        );
        assert_eq!(after.snapshot_captures, before.snapshot_captures);
        assert_eq!(folios(0), 1);
        // The second folio: the snapshot needs its pages.
        f.write_all_at(b"b", 40 * PAGE as u64 + 5).unwrap();
        let after = cache.stats();
        assert!(after.folio_splits > before.folio_splits, "{after:?}");
        assert_eq!(after.snapshot_captures, before.snapshot_captures + 1);
        assert_eq!(snap.held_pages(), 1);
        let mut kept = vec![0u8; 32 * PAGE];
        snap.read_exact_at(&mut kept, 32 * PAGE as u64).unwrap();
        assert_eq!(kept, &old[32 * PAGE..]);
        let mut model = old.clone();
        model[3 * PAGE + 5] = b'a';
        model[40 * PAGE + 5] = b'b';
        let mut now = vec![0u8; 64 * PAGE];
        f.read_exact_at(&mut now, 0).unwrap();
        assert_eq!(now, model);
        f.sync_data().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), model);
        cache.validate().unwrap();
    }
    assert_baseline(&cache);
}

/// The model: the file's bytes, and each live snapshot with a copy of its bytes.
#[derive(Default)]
struct Model {
    file: Vec<u8>,
    snaps: Vec<(Arc<Snapshot>, Arc<Vec<u8>>)>,
}

/// xorshift64*, so runs are reproducible from the seed printed on failure.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn differential_against_copies_under_every_tracking() {
    for tracking in [
        Tracking::None,
        Tracking::MmOwner,
        Tracking::RmapId {
            exclusive_writer: true,
        },
        Tracking::RmapId {
            exclusive_writer: false,
        },
    ] {
        differential(tracking, 0x5eed ^ tracking.name().len() as u64);
    }
}

/// Writers, truncations and snapshot churn on one file from two threads, each change made
/// with the model's under one lock; two readers check live snapshots against their copies
/// meanwhile, without the lock (copying reads, pinned folios and ranges), so their reads race
/// with the captures, truncations, writeback and invalidations of the others.
fn differential(tracking: Tracking, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(2 << 20)
        .snapshot_share(60)
        .experiment(Experiment::new().tracking(tracking));
    let cache = FolioCache::new(config).unwrap();
    let f = cache.open_with(dir.path().join("f"), &rw()).unwrap();
    const MAX: u64 = 48 * PAGE as u64;
    let model = Mutex::new(Model::default());
    let done = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (f, model, done) = (&f, &model, &done);
            s.spawn(move || {
                let mut rng = Rng(seed.wrapping_mul(t + 1) | 1);
                for _ in 0..400 {
                    let mut m = model.lock().unwrap();
                    match rng.below(10) {
                        0..=4 => {
                            let off = rng.below(MAX);
                            let len = 1 + rng.below(3 * PAGE as u64) as usize;
                            let b = (rng.next() & 0xff) as u8;
                            let data = vec![b; len];
                            f.write_all_at(&data, off).unwrap();
                            let end = off as usize + len;
                            if m.file.len() < end {
                                m.file.resize(end, 0);
                            }
                            m.file[off as usize..end].copy_from_slice(&data);
                        }
                        5 => {
                            let size = rng.below(MAX);
                            f.set_len(size).unwrap();
                            m.file.resize(size as usize, 0);
                        }
                        6 | 7 if m.snaps.len() < 4 => {
                            let snap = Arc::new(f.snapshot().unwrap());
                            let bytes = Arc::new(m.file.clone());
                            m.snaps.push((snap, bytes));
                        }
                        6..=8 if !m.snaps.is_empty() => {
                            let i = rng.below(m.snaps.len() as u64) as usize;
                            m.snaps.swap_remove(i);
                        }
                        _ => {
                            drop(m);
                            f.sync_data().unwrap();
                            f.invalidate(0..u64::MAX).unwrap();
                            continue;
                        }
                    }
                    assert_eq!(f.len(), m.file.len() as u64);
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        for t in 0..2u64 {
            let (model, done) = (&model, &done);
            s.spawn(move || {
                let mut rng = Rng(seed.wrapping_mul(t + 7) | 1);
                let mut checks = 0;
                while done.load(std::sync::atomic::Ordering::SeqCst) < 2 || checks == 0 {
                    let picked = {
                        let m = model.lock().unwrap();
                        if m.snaps.is_empty() {
                            None
                        } else {
                            Some(m.snaps[rng.below(m.snaps.len() as u64) as usize].clone())
                        }
                    };
                    let Some((snap, bytes)) = picked else {
                        std::thread::yield_now();
                        continue;
                    };
                    assert_eq!(snap.len(), bytes.len() as u64);
                    let ctx = format!("{} seed {seed:#x} reader {t}", tracking.name());
                    match rng.below(3) {
                        0 => assert!(read_all(&snap) == *bytes, "{ctx}: read_at differs"),
                        1 if !bytes.is_empty() => {
                            let index = rng.below(snap.len().div_ceil(PAGE as u64));
                            let g = snap.get_folio(index).unwrap();
                            let at = g.offset() as usize;
                            assert!(
                                g[..] == bytes[at..at + g.len()],
                                "{ctx}: folio {index} differs"
                            );
                        }
                        _ if !bytes.is_empty() => {
                            let off = rng.below(bytes.len() as u64);
                            let len =
                                1 + rng.below((bytes.len() as u64 - off).min(3 * PAGE as u64));
                            let r = snap.get_range(off, len as usize).unwrap();
                            let mut out = vec![0u8; len as usize];
                            r.copy_to(&mut out);
                            let off = off as usize;
                            assert!(
                                out == bytes[off..off + len as usize],
                                "{ctx}: range differs"
                            );
                        }
                        _ => {}
                    }
                    checks += 1;
                }
            });
        }
    });
    // Quiet now: the sharer tracking and the charge checked against the page tables.
    cache.validate().unwrap();
    let m = model.into_inner().unwrap();
    let mut all = vec![0u8; m.file.len()];
    f.read_exact_at(&mut all, 0).unwrap();
    assert_eq!(all, m.file);
    for (snap, bytes) in &m.snaps {
        assert!(read_all(snap) == **bytes);
    }
    drop(m);
    drop(f);
    assert_baseline(&cache);
}

#[path = "../examples/snapshot_backup.rs"]
#[allow(dead_code)]
mod snapshot_backup;

#[test]
fn the_backup_example_is_consistent_under_writers() {
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let r = snapshot_backup::run(dir.path(), 2).unwrap();
        assert_eq!(r.backup_total, r.expected, "{r:?}");
        assert!(r.writes_during_backup > 0, "{r:?}");
    }
}

/// One thread, random writes, truncations, latch commits, releases and snapshot churn, with
/// `validate()` after every step: each folio's sharer state matches a scan of every
/// snapshot's page table, the charge matches the pages held, and every snapshot reads its
/// copy.
#[test]
fn every_step_validates_against_the_page_tables() {
    let dir = tempfile::tempdir().unwrap();
    let cache = FolioCache::new(Config::new(2 << 20).snapshot_share(60)).unwrap();
    let f = cache.open_with(dir.path().join("f"), &rw()).unwrap();
    let mut rng = Rng(0x7a11_da7e);
    let mut file: Vec<u8> = Vec::new();
    let mut snaps: Vec<(Snapshot, Vec<u8>)> = Vec::new();
    const MAX: u64 = 24 * PAGE as u64;
    for step in 0..250 {
        match rng.below(8) {
            0..=2 => {
                let off = rng.below(MAX);
                let len = 1 + rng.below(2 * PAGE as u64) as usize;
                let b = (rng.next() & 0xff) as u8;
                f.write_all_at(&vec![b; len], off).unwrap();
                let end = off as usize + len;
                if file.len() < end {
                    file.resize(end, 0);
                }
                file[off as usize..end].fill(b);
            }
            3 if !file.is_empty() => {
                let index = rng.below(file.len().div_ceil(PAGE) as u64);
                let mut g = f.get_folio_mut(index).unwrap();
                let b = (rng.next() & 0xff) as u8;
                let n = g.len().min(10);
                g[..n].fill(b);
                g.commit();
                let at = index as usize * PAGE;
                file[at..at + n].fill(b);
            }
            4 => {
                let size = rng.below(MAX) as usize;
                f.set_len(size as u64).unwrap();
                file.resize(size, 0);
            }
            5 if snaps.len() < 3 => snaps.push((f.snapshot().unwrap(), file.clone())),
            6 if !snaps.is_empty() => {
                // Released pages read as `SnapshotReleased` (below); the rest as the copy.
                let (s, copy) = &snaps[rng.below(snaps.len() as u64) as usize];
                let from = rng.below(copy.len() as u64 + 1);
                let to = from + rng.below(3 * PAGE as u64);
                s.release(from..to).unwrap();
            }
            7 if !snaps.is_empty() && rng.below(2) == 0 => {
                let i = rng.below(snaps.len() as u64) as usize;
                snaps.swap_remove(i);
            }
            _ => {
                // Written back and dropped: the next change of a page reads it in first.
                f.sync_data().unwrap();
                f.invalidate(0..u64::MAX).unwrap();
            }
        }
        cache
            .validate()
            .unwrap_or_else(|e| panic!("step {step}: {e}"));
        for (s, copy) in &snaps {
            for index in 0..copy.len().div_ceil(PAGE) {
                let at = index * PAGE;
                let end = (at + PAGE).min(copy.len());
                let mut got = vec![0u8; end - at];
                match s.read_exact_at(&mut got, at as u64) {
                    Ok(()) => assert!(got == copy[at..end], "step {step}: page {index} differs"),
                    Err(CacheError::SnapshotReleased { .. }) => {}
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
        }
    }
    let s = cache.stats();
    assert!(s.snapshot_captures > 50, "{s:?}");
    drop(snaps);
    drop(f);
    assert_baseline(&cache);
}
