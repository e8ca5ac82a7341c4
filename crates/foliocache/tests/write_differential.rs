//! Differential test of the write path: random sequences of write, read, set_len, sync,
//! close and open over several files, against a trivially correct model (a byte vector per
//! file). The budget is smaller than the files together, so reclaim, the dirty limit and
//! writeback all run. After every step of the single-threaded phase, `validate()` recomputes
//! the cache's books, the dirty counts from the index's tags and the folios' flags included.
//! Then several threads, each with its own file and model, do the same at once.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use foliocache::{CachedFile, Config, FolioCache, OpenOptions};

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
        0..=44 => {
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
