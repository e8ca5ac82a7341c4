//! Differential test of the write path: random sequences of write, read, set_len, sync,
//! close and open over several files, against a trivially correct model (a byte vector per
//! file). The budget is smaller than the files together, so reclaim, the dirty limit and
//! writeback all run. After every step of the single-threaded phase, `validate()` recomputes
//! the cache's books, the dirty counts from the index's tags and the folios' flags included.
//! Then several threads, each with its own file and model, do the same at once, and tasks on
//! an async runtime through the async API.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use foliocache::{AsyncFile, CachedFile, Config, FolioCache, OpenOptions};

const PAGE: usize = 4096;
const MAX_LEN: usize = 40 * PAGE;

fn rw() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true);
    o
}

/// Compares file bytes with the model, reporting the first difference (not megabytes).
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    let last = got.iter().zip(want).rposition(|(a, b)| a != b);
    panic!(
        "{what}: {} bytes, model {}; first difference at {first:?} (got {:?}, want {:?}), last at {last:?}",
        got.len(),
        want.len(),
        first.map(|i| got[i]),
        first.map(|i| want[i]),
    );
}

/// One random step on `file` (reopened into `slot` on a close/open step), checked against
/// `model`; returns a description for failure messages.
fn step(
    c: &FolioCache,
    path: &std::path::Path,
    slot: &mut Option<CachedFile>,
    model: &mut Vec<u8>,
    rng: &mut StdRng,
) -> String {
    let f = slot.get_or_insert_with(|| c.open_with(path, &rw()).unwrap());
    match rng.random_range(0..100) {
        40..=44 => latch_step(f, model, rng),
        0..=39 => {
            let len = match rng.random_range(0..3) {
                0 => rng.random_range(1..64),
                1 => PAGE,
                _ => rng.random_range(1..3 * PAGE),
            };
            let off = rng.random_range(0..(MAX_LEN - len)) as u64;
            let b: u8 = rng.random();
            let before = f.len();
            f.write_all_at(&vec![b; len], off).unwrap();
            let end = off as usize + len;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].fill(b);
            // The written range and the gap it may have opened read back as the model says.
            let from = (off as usize).min(before as usize);
            let mut back = vec![0u8; end - from];
            f.read_exact_at(&mut back, from as u64).unwrap();
            if back[..] != model[from..end] {
                let g = f.get_folio(off >> 12).unwrap();
                let within = (off - g.offset()) as usize;
                let mut again = vec![0u8; len.min(64)];
                let n = f.read_at(&mut again, off).unwrap();
                eprintln!(
                    "DIAG len {} dirty {} cached {} folio[{within}] = {} (index {}), read again {:?}, stats {:?}",
                    f.len(),
                    f.dirty_pages(),
                    f.cached_pages(),
                    g[within],
                    g.index(),
                    &again[..n.min(8)],
                    c.stats()
                );
            }
            assert_same(
                &back,
                &model[from..end],
                &format!("read back (from byte {from}) after a write of {len} at {off} onto {before} bytes"),
            );
            format!("write {len} at {off} of {b}")
        }
        45..=74 => {
            let off = rng.random_range(0..MAX_LEN as u64 + 100);
            let len = rng.random_range(0..2 * PAGE);
            let mut buf = vec![0u8; len];
            let n = f.read_at(&mut buf, off).unwrap();
            let want = model
                .get(off as usize..)
                .map_or(&[][..], |t| &t[..t.len().min(len)]);
            assert_eq!(&buf[..n], want, "read {len} at {off}");
            format!("read {len} at {off}")
        }
        75..=81 => {
            let size = rng.random_range(0..MAX_LEN as u64);
            f.set_len(size).unwrap();
            model.resize(size as usize, 0);
            format!("set_len {size}")
        }
        82..=89 => {
            f.sync_data().unwrap();
            let disk = std::fs::read(path).unwrap();
            if disk != *model {
                let mut cached = vec![0u8; model.len()];
                let n = f.read_at(&mut cached, 0).unwrap();
                let stat = std::fs::metadata(path).unwrap().len();
                eprintln!(
                    "after the sync: cache len {} read {n}, dirty {}, writeback {}, cache == model: {}, stat {stat}, stats {:?}",
                    f.len(),
                    f.dirty_pages(),
                    f.writeback_pages(),
                    cached[..n] == model[..],
                    c.stats()
                );
            }
            assert_same(&disk, model, "the file after a sync");
            "sync".to_string()
        }
        90..=94 => {
            *slot = None;
            "close".to_string()
        }
        _ => {
            assert_eq!(f.len(), model.len() as u64);
            *slot = Some(f.reopen());
            "reopen".to_string()
        }
    }
}

#[test]
fn random_writes_reads_truncations_and_syncs_match_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let c = FolioCache::new(
        Config::new(48 * PAGE)
            .dirty_ratios(30, 15)
            .panic_on_bad_page(true),
    )
    .unwrap();
    let paths: Vec<_> = (0..3).map(|i| dir.path().join(format!("f{i}"))).collect();
    let mut files: Vec<Option<CachedFile>> = vec![None, None, None];
    let mut models = vec![Vec::new(); 3];
    let mut rng = StdRng::seed_from_u64(0xF011_0CAC);
    let steps = if cfg!(debug_assertions) { 1500 } else { 6000 };
    for i in 0..steps {
        let k = rng.random_range(0..3);
        let what = step(&c, &paths[k], &mut files[k], &mut models[k], &mut rng);
        if let Err(e) = c.validate() {
            panic!("step {i} ({what} on file {k}): {e}");
        }
    }
    for (k, f) in files.iter_mut().enumerate() {
        let f = f.get_or_insert_with(|| c.open_with(&paths[k], &rw()).unwrap());
        let mut all = vec![0u8; f.len() as usize];
        f.read_exact_at(&mut all, 0).unwrap();
        assert_eq!(all, models[k]);
        f.sync_all().unwrap();
        assert_same(
            &std::fs::read(&paths[k]).unwrap(),
            &models[k],
            "the file at the end",
        );
    }
    let s = c.stats();
    assert!(s.writeback_pages > 0 && s.writes_in_place > 0, "{s:?}");
    // Block latches met blocks cached in smaller folios and collapsed them.
    assert!(s.folio_collapses > 0, "{s:?}");
    assert_eq!(s.bad_pages, 0);
    drop(files);
    c.drop_caches();
    let a = c.validate().unwrap();
    assert_eq!((a.allocated_pages, a.bad_pages), (0, 0));
}

#[test]
fn threads_each_with_a_file_match_their_models() {
    let dir = tempfile::tempdir().unwrap();
    let c = FolioCache::new(Config::new(64 * PAGE).panic_on_bad_page(true)).unwrap();
    let steps = if cfg!(debug_assertions) { 800 } else { 4000 };
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (c, path) = (&c, dir.path().join(format!("t{t}")));
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                let mut model = Vec::new();
                let mut slot = None;
                // The last steps, printed if one fails.
                let mut recent = std::collections::VecDeque::new();
                for i in 0..steps {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        step(c, &path, &mut slot, &mut model, &mut rng)
                    }));
                    match r {
                        Ok(what) => {
                            recent.push_back(format!("{i}: {what} -> len {}", model.len()));
                            if recent.len() > 40 {
                                recent.pop_front();
                            }
                        }
                        Err(e) => {
                            eprintln!("thread {t}, step {i}; the steps before: {recent:?}");
                            std::panic::resume_unwind(e);
                        }
                    }
                }
                let f = slot.get_or_insert_with(|| c.open_with(&path, &rw()).unwrap());
                f.sync_data().unwrap();
                assert_same(
                    &std::fs::read(&path).unwrap(),
                    &model,
                    "the file at the end",
                );
            });
        }
    });
    c.validate().unwrap();
    c.drop_caches();
    let a = c.validate().unwrap();
    assert_eq!((a.allocated_pages, a.bad_pages), (0, 0));
}

/// [`step`] through the async API: one random write, read, truncation, sync, close or open,
/// checked against `model`.
async fn async_step(
    c: &FolioCache,
    path: &std::path::Path,
    slot: &mut Option<AsyncFile>,
    model: &mut Vec<u8>,
    rng: &mut StdRng,
) -> String {
    if slot.is_none() {
        *slot = Some(AsyncFile::open_with(c, path, &rw()).await.unwrap());
    }
    let f = slot.as_ref().unwrap();
    match rng.random_range(0..100) {
        0..=44 => {
            let len = rng.random_range(1..3 * PAGE);
            let off = rng.random_range(0..(MAX_LEN - len)) as u64;
            let b: u8 = rng.random();
            f.write_all_at(&vec![b; len], off).await.unwrap();
            let end = off as usize + len;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].fill(b);
            format!("write {len} at {off} of {b}")
        }
        45..=74 => {
            let off = rng.random_range(0..MAX_LEN as u64 + 100);
            let len = rng.random_range(0..2 * PAGE);
            let mut buf = vec![0u8; len];
            let n = f.read_at(&mut buf, off).await.unwrap();
            let want = model
                .get(off as usize..)
                .map_or(&[][..], |t| &t[..t.len().min(len)]);
            assert_eq!(&buf[..n], want, "read {len} at {off}");
            format!("read {len} at {off}")
        }
        75..=81 => {
            let size = rng.random_range(0..MAX_LEN as u64);
            f.set_len(size).await.unwrap();
            model.resize(size as usize, 0);
            format!("set_len {size}")
        }
        82..=89 => {
            f.sync_data().await.unwrap();
            assert_same(
                &std::fs::read(path).unwrap(),
                model,
                "the file after a sync",
            );
            "sync".to_string()
        }
        _ => {
            *slot = None;
            "close".to_string()
        }
    }
}

/// Four tasks on a two-thread runtime, each with its own file and model, every call through
/// [`AsyncFile`].
#[test]
fn async_tasks_each_with_a_file_match_their_models() {
    let dir = tempfile::tempdir().unwrap();
    let c = FolioCache::new(Config::new(64 * PAGE).panic_on_bad_page(true)).unwrap();
    let steps = if cfg!(debug_assertions) { 400 } else { 2000 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..4u64)
            .map(|t| {
                let (c, path) = (c.clone(), dir.path().join(format!("a{t}")));
                tokio::spawn(async move {
                    let mut rng = StdRng::seed_from_u64(100 + t);
                    let (mut model, mut slot) = (Vec::new(), None);
                    let mut trail = Trail(std::collections::VecDeque::new(), c.clone());
                    for i in 0..steps {
                        let what = async_step(&c, &path, &mut slot, &mut model, &mut rng).await;
                        trail.0.push_back(format!("task {t} step {i}: {what}"));
                        if trail.0.len() > 40 {
                            trail.0.pop_front();
                        }
                    }
                    let f = AsyncFile::open_with(&c, &path, &rw()).await.unwrap();
                    f.sync_data().await.unwrap();
                    let mut all = vec![0u8; f.len() as usize];
                    f.read_exact_at(&mut all, 0).await.unwrap();
                    assert_same(&all, &model, "the cached file at the end");
                    assert_same(
                        &std::fs::read(&path).unwrap(),
                        &model,
                        "the file at the end",
                    );
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    drop(rt);
    c.drop_caches();
    let a = c.validate().unwrap();
    assert_eq!((a.allocated_pages, a.bad_pages), (0, 0));
}

/// The last steps, and the cache's counters, printed if a check fails.
struct Trail(std::collections::VecDeque<String>, FolioCache);

impl Drop for Trail {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the steps before the failure: {:?}", self.0);
            eprintln!("the cache then: {:?}", self.1.stats());
        }
    }
}

/// Tells the reader threads to stop when dropped, so that a failing check in the main
/// thread ends the test (with its message) instead of leaving the scope waiting on readers.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One inode of the model: its bytes.
struct Inode {
    bytes: Vec<u8>,
}

/// Several handles per file, renames over open files, deletions and whole-cache drops, all
/// against a model keyed by inode (a handle keeps the file it opened, whatever its name
/// becomes, as a descriptor does), while reader threads open the same names and read them
/// (misses, readahead, large folios) during every truncation. The readers check only that
/// their reads succeed; the model checks the bytes: a byte a truncation cut that came back
/// (filled by a racing reader from the uncut file) shows in the main thread's reads of the
/// range after a later grow, and on disk after a sync.
#[test]
fn handles_renames_drops_and_concurrent_readers_match_an_inode_model() {
    const NAMES: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let c = FolioCache::new(
        Config::new(64 * PAGE)
            .dirty_ratios(30, 15)
            .panic_on_bad_page(true),
    )
    .unwrap();
    let names: Vec<_> = (0..NAMES)
        .map(|i| dir.path().join(format!("n{i}")))
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let steps = if cfg!(debug_assertions) { 1500 } else { 8000 };
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (c, names, stop) = (&c, &names, &stop);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(1000 + t);
                let mut buf = vec![0u8; 4 * PAGE];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // A name may be gone (renamed away, deleted) between look and open.
                    let Ok(f) = c.open(&names[rng.random_range(0..NAMES)]) else {
                        std::thread::yield_now();
                        continue;
                    };
                    for _ in 0..rng.random_range(1..20) {
                        let off = rng.random_range(0..MAX_LEN as u64);
                        let len = rng.random_range(1..buf.len());
                        f.read_at(&mut buf[..len], off).unwrap();
                    }
                }
            });
        }
        let _stop_readers = StopOnDrop(&stop);
        let mut rng = StdRng::seed_from_u64(0xD1FF_2222);
        let mut inodes: Vec<Inode> = Vec::new();
        // The inode each name leads to.
        let mut paths: [Option<usize>; NAMES] = [None; NAMES];
        // Open handles and the inode each keeps.
        let mut handles: Vec<(CachedFile, usize)> = Vec::new();
        let mut recent = Trail(std::collections::VecDeque::new(), c.clone());
        for i in 0..steps {
            let what = match rng.random_range(0..100) {
                // Open a name (creating its file if it has none).
                0..=9 if handles.len() < 6 => {
                    let k = rng.random_range(0..NAMES);
                    let f = c.open_with(&names[k], &rw()).unwrap();
                    let ino = *paths[k].get_or_insert_with(|| {
                        inodes.push(Inode { bytes: Vec::new() });
                        inodes.len() - 1
                    });
                    assert_eq!(f.len(), inodes[ino].bytes.len() as u64, "open {k}");
                    handles.push((f, ino));
                    format!("open n{k} -> inode {ino}")
                }
                10..=14 if !handles.is_empty() => {
                    let h = rng.random_range(0..handles.len());
                    let (_, ino) = handles.swap_remove(h);
                    format!("close a handle of inode {ino}")
                }
                // Rename one name over another (the target's file loses its name).
                15..=18 => {
                    let (a, b) = (rng.random_range(0..NAMES), rng.random_range(0..NAMES));
                    if a == b || paths[a].is_none() {
                        continue;
                    }
                    std::fs::rename(&names[a], &names[b]).unwrap();
                    paths[b] = paths[a].take();
                    format!("rename n{a} over n{b}")
                }
                19 => {
                    let k = rng.random_range(0..NAMES);
                    if paths[k].take().is_none() {
                        continue;
                    }
                    std::fs::remove_file(&names[k]).unwrap();
                    format!("delete n{k}")
                }
                20..=22 => {
                    c.drop_caches();
                    "drop caches".to_string()
                }
                _ if handles.is_empty() => continue,
                // A step of the single-file test on one of the handles.
                _ => {
                    let h = rng.random_range(0..handles.len());
                    let (f, ino) = &mut handles[h];
                    let ino = *ino;
                    let path = paths
                        .iter()
                        .position(|&p| p == Some(ino))
                        .map(|k| names[k].clone());
                    let what = inode_step(f, path.as_deref(), &mut inodes[ino].bytes, &mut rng);
                    format!("{what} on inode {ino}")
                }
            };
            // (No `validate` here: it wants a quiet cache, and the readers never stop.)
            recent.0.push_back(format!("{i}: {what}"));
            if recent.0.len() > 30 {
                recent.0.pop_front();
            }
        }
        drop(_stop_readers);
        for (f, ino) in &handles {
            let mut all = vec![0u8; f.len() as usize];
            f.read_exact_at(&mut all, 0).unwrap();
            assert_same(&all, &inodes[*ino].bytes, "a handle's file at the end");
        }
    });
    c.sync_all().unwrap();
    c.drop_caches();
    let a = c.validate().unwrap();
    assert_eq!((a.allocated_pages, a.bad_pages), (0, 0), "{:?}", c.stats());
}

/// A write, read, shrink-then-grow, set_len or sync through handle `f` of an inode whose
/// bytes are `model`; `path` names the inode if it still has a name (a sync compares the file
/// there with the model).
fn inode_step(
    f: &CachedFile,
    path: Option<&std::path::Path>,
    model: &mut Vec<u8>,
    rng: &mut StdRng,
) -> String {
    match rng.random_range(0..100) {
        35..=39 => latch_step(f, model, rng),
        0..=34 => {
            let len = rng.random_range(1..3 * PAGE);
            let off = rng.random_range(0..(MAX_LEN - len)) as u64;
            let b: u8 = rng.random_range(1..=255);
            let before = model.len();
            f.write_all_at(&vec![b; len], off).unwrap();
            let end = off as usize + len;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].fill(b);
            let from = (off as usize).min(before);
            let mut back = vec![0u8; end - from];
            f.read_exact_at(&mut back, from as u64).unwrap();
            assert_same(&back, &model[from..end], &format!("write {len} at {off}"));
            format!("write {len} at {off}")
        }
        40..=64 => {
            let off = rng.random_range(0..MAX_LEN as u64);
            let mut buf = vec![0u8; rng.random_range(1..3 * PAGE)];
            let n = f.read_at(&mut buf, off).unwrap();
            let want = model
                .get(off as usize..)
                .map_or(&[][..], |t| &t[..t.len().min(buf.len())]);
            assert_same(&buf[..n], want, &format!("read at {off}"));
            format!("read at {off}")
        }
        // Shrink (the readers race its fills), then grow: the grown range reads as zeros.
        65..=79 => {
            let cut = rng.random_range(0..=model.len() as u64);
            f.set_len(cut).unwrap();
            model.truncate(cut as usize);
            let grown = rng.random_range(cut..=MAX_LEN as u64);
            f.set_len(grown).unwrap();
            model.resize(grown as usize, 0);
            let mut back = vec![0u8; (grown - cut) as usize];
            f.read_exact_at(&mut back, cut).unwrap();
            assert_same(
                &back,
                &model[cut as usize..],
                &format!("cut to {cut}, grown to {grown}"),
            );
            format!("cut to {cut}, grow to {grown}")
        }
        80..=89 => {
            f.sync_data().unwrap();
            if let Some(p) = path {
                assert_same(&std::fs::read(p).unwrap(), model, "the file after a sync");
            }
            "sync".to_string()
        }
        _ => {
            let size = rng.random_range(0..MAX_LEN as u64);
            f.set_len(size).unwrap();
            model.resize(size as usize, 0);
            format!("set_len {size}")
        }
    }
}

/// Latches a page of the file (an in-place latch, a copying one, or a pinned page upgraded to
/// either), checks that the guard shows the page as the model has it, changes a span through
/// it and commits (a copying latch sometimes discards instead).
fn latch_step(f: &CachedFile, model: &mut [u8], rng: &mut StdRng) -> String {
    if model.is_empty() {
        return "latch: the file is empty".to_string();
    }
    let pages = model.len().div_ceil(PAGE) as u64;
    let index = rng.random_range(0..pages);
    let b: u8 = rng.random();
    let kind = rng.random_range(0..5);
    let change = |g: &mut [u8], at: u64, model: &mut [u8], rng: &mut StdRng| {
        let start = at as usize * PAGE;
        let valid = (model.len() - start).min(PAGE);
        assert_same(
            g,
            &model[start..start + valid],
            &format!("latch {kind} of page {at}"),
        );
        let from = rng.random_range(0..valid);
        let len = rng.random_range(1..=valid - from);
        g[from..from + len].fill(b);
        (start + from, len)
    };
    let (at, len, kept) = match kind {
        0 => {
            let mut g = f.get_folio_mut_in_place(index).unwrap();
            let (at, len) = change(&mut g, index, model, rng);
            (at, len, true)
        }
        1 => {
            // A large folio upgrades by its first page.
            let mut g = f.get_folio(index).unwrap().upgrade_in_place().unwrap();
            let page = g.index();
            let (at, len) = change(&mut g, page, model, rng);
            (at, len, true)
        }
        2 => {
            let mut g = f.get_folio_mut(index).unwrap();
            let (at, len) = change(&mut g, index, model, rng);
            let keep = rng.random_range(0..5) != 0;
            if !keep {
                g.discard();
            }
            (at, len, keep)
        }
        3 => {
            let mut g = f.get_folio(index).unwrap().upgrade().unwrap();
            let page = g.index();
            let (at, len) = change(&mut g, page, model, rng);
            (at, len, true)
        }
        _ => {
            // A block latch over the 8 or 16 KiB block holding the page, if the file holds
            // it whole: one folio (collapsed or split out as needed), one change across it.
            let len = [2 * PAGE, 4 * PAGE][rng.random_range(0..2)];
            let start = index as usize * PAGE / len * len;
            if start + len > model.len() {
                return format!("latch 4: no whole block of {len} at {start}");
            }
            let mut g = f.get_block_mut_in_place(start as u64, len).unwrap();
            assert_same(&g, &model[start..start + len], "latch 4");
            let from = rng.random_range(0..len);
            let n = rng.random_range(1..=len - from);
            g[from..from + n].fill(b);
            (start + from, n, true)
        }
    };
    if kept {
        model[at..at + len].fill(b);
    }
    let mut back = vec![0u8; len];
    f.read_exact_at(&mut back, at as u64).unwrap();
    assert_same(
        &back,
        &model[at..at + len],
        &format!("latch {kind} read back"),
    );
    format!("latch {kind}: {len} at {at} of {b}, kept {kept}")
}
