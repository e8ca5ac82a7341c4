//! Writeback errors (`errseq_t`): every handle open when an error happens hears of it once,
//! at its next sync; a handle opened after it was reported does not; nothing is dropped
//! silently. And what becomes of the failed pages under each policy.

use foliocache::backing::{FaultyBacking, FileBacking};
use foliocache::{CacheError, Config, FolioCache, WbErrorPolicy};

const PAGE: usize = 4096;

fn faulty(dir: &tempfile::TempDir) -> (std::path::PathBuf, FaultyBacking<FileBacking>) {
    let path = dir.path().join("data");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    (
        path.clone(),
        FaultyBacking::new(FileBacking::from_file(file, &path)),
    )
}

fn is_eio(r: Result<(), CacheError>) -> bool {
    match r {
        Err(CacheError::Writeback { source, .. }) => source.raw_os_error() == Some(libc::EIO),
        other => panic!("expected a writeback EIO, got {other:?}"),
    }
}

#[test]
fn each_handle_sees_a_failed_writeback_once() {
    let dir = tempfile::tempdir().unwrap();
    let (path, b) = faulty(&dir);
    let b = std::sync::Arc::new(b);
    let c = FolioCache::new(Config::new(1 << 20)).unwrap();
    let a = c.open_backing("data", b.clone()).unwrap();
    let bh = a.reopen();
    a.write_all_at(&[1u8; 4 * PAGE], 0).unwrap();
    b.fail_writes_at(2 * PAGE as u64);
    assert!(
        is_eio(a.sync_data()),
        "the sync that met the error reports it"
    );
    assert!(a.sync_data().is_ok(), "once for a");
    // Opened after a was told: not this handle's error.
    let late = a.reopen();
    assert!(late.sync_data().is_ok());
    // b was open when it happened: told once.
    assert!(is_eio(bh.sync_data()));
    assert!(bh.sync_data().is_ok());
    assert_eq!(c.stats().writeback_errors, 1);
    // The kernel's policy: the failed pages are clean now; healing and syncing again does not
    // rewrite them (their bytes never reached the file).
    b.heal_writes();
    assert_eq!(a.dirty_pages(), 0);
    assert!(a.sync_data().is_ok());
    assert!(std::fs::read(&path).unwrap().len() < 4 * PAGE);
    // Still readable from the cache meanwhile.
    let mut buf = [0u8; 4];
    a.read_exact_at(&mut buf, 2 * PAGE as u64).unwrap();
    assert_eq!(buf, [1; 4]);
}

#[test]
fn keep_dirty_retries_the_failed_pages() {
    let dir = tempfile::tempdir().unwrap();
    let (path, b) = faulty(&dir);
    let b = std::sync::Arc::new(b);
    let c =
        FolioCache::new(Config::new(1 << 20).writeback_errors(WbErrorPolicy::KeepDirty)).unwrap();
    let a = c.open_backing("data", b.clone()).unwrap();
    a.write_all_at(&[3u8; 4 * PAGE], 0).unwrap();
    b.fail_writes_at(0);
    assert!(is_eio(a.sync_data()));
    assert_eq!(a.dirty_pages(), 4, "kept dirty for a retry");
    c.validate().unwrap();
    b.heal_writes();
    assert!(a.sync_data().is_ok());
    assert_eq!(a.dirty_pages(), 0);
    assert_eq!(std::fs::read(&path).unwrap(), vec![3u8; 4 * PAGE]);
}

#[test]
fn a_failed_sync_of_the_backing_reaches_every_handle_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_, b) = faulty(&dir);
    let b = std::sync::Arc::new(b);
    let c = FolioCache::new(Config::new(1 << 20)).unwrap();
    let a = c.open_backing("data", b.clone()).unwrap();
    let bh = a.reopen();
    a.write_all_at(&[5u8; PAGE], 0).unwrap();
    b.fail_next_syncs(1);
    assert!(is_eio(a.sync_data()));
    assert!(is_eio(bh.sync_all()));
    assert!(a.sync_data().is_ok());
    assert!(bh.sync_data().is_ok());
}

#[test]
fn an_error_in_background_writeback_waits_for_the_next_sync() {
    // A dirty limit of one page: the second page's write writes the first back itself.
    let dir = tempfile::tempdir().unwrap();
    let (_, b) = faulty(&dir);
    let b = std::sync::Arc::new(b);
    // No flusher: the writer at the limit is the one that writes back.
    let c = FolioCache::new(
        Config::new(100 * PAGE)
            .dirty_ratios(1, 1)
            .background_writeback(false),
    )
    .unwrap();
    let a = c.open_backing("data", b.clone()).unwrap();
    let bh = a.reopen();
    b.fail_writes_at(0);
    a.write_all_at(&[7u8; PAGE], 0).unwrap();
    a.write_all_at(&[7u8; PAGE], PAGE as u64).unwrap();
    assert!(c.stats().dirty_throttled > 0);
    assert_eq!(
        c.stats().writeback_errors,
        1,
        "the throttled writer's writeback failed"
    );
    // No sync has run yet: the write calls themselves did not fail.
    assert!(is_eio(a.sync_data()));
    assert!(is_eio(bh.sync_data()));
    assert!(a.sync_data().is_ok() && bh.sync_data().is_ok());
}

#[test]
fn sync_all_of_the_cache_writes_every_file_back_and_reports_each_error_once() {
    let dir = tempfile::tempdir().unwrap();
    let (bad_path, b) = faulty(&dir);
    let b = std::sync::Arc::new(b);
    let c = FolioCache::new(Config::new(1 << 20).background_writeback(false)).unwrap();
    let bad = c.open_backing("data", b.clone()).unwrap();
    let good_path = dir.path().join("good");
    let good = c
        .open_with(
            &good_path,
            foliocache::OpenOptions::new().write(true).create(true),
        )
        .unwrap();
    good.write_all_at(&[2u8; 3 * PAGE], 0).unwrap();
    bad.write_all_at(&[9u8; 2 * PAGE], 0).unwrap();
    b.fail_writes_at(PAGE as u64);
    match c.sync_all() {
        Err(CacheError::Writeback { path, source }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EIO));
            assert_eq!(path, std::path::Path::new("data"), "the file that failed");
        }
        other => panic!("expected a writeback EIO, got {other:?}"),
    }
    assert_eq!(
        good.dirty_pages() + bad.dirty_pages(),
        0,
        "every file written"
    );
    assert_eq!(std::fs::read(&good_path).unwrap(), vec![2u8; 3 * PAGE]);
    assert!(std::fs::read(&bad_path).unwrap().len() < 2 * PAGE);
    assert!(c.sync_all().is_ok(), "reported once to sync_all");
    // The file's handle still hears of it, once.
    assert!(is_eio(bad.sync_data()));
    assert!(bad.sync_data().is_ok());
    assert!(good.sync_data().is_ok());

    // An error of an earlier writeback (a handle's sync that told its own caller) reaches the
    // next sync_all too; and so does a failed fsync of the file.
    b.heal_writes();
    bad.write_all_at(&[4u8; PAGE], 0).unwrap();
    b.fail_writes_at(0);
    assert!(is_eio(bad.sync_data()));
    assert!(is_eio(c.sync_all()));
    assert!(c.sync_all().is_ok());
    b.heal_writes();
    b.fail_next_syncs(1);
    assert!(is_eio(c.sync_all()));
    assert!(c.sync_all().is_ok());
    assert!(
        is_eio(bad.sync_data()),
        "the failed fsync, once to the handle"
    );
}

#[test]
fn sync_all_hears_of_a_background_writeback_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_, b) = faulty(&dir);
    let b = std::sync::Arc::new(b);
    // A dirty limit of one page and no flusher: the second write writes the first back.
    let c = FolioCache::new(
        Config::new(100 * PAGE)
            .dirty_ratios(1, 1)
            .background_writeback(false),
    )
    .unwrap();
    let a = c.open_backing("data", b.clone()).unwrap();
    b.fail_writes_at(0);
    a.write_all_at(&[7u8; PAGE], 0).unwrap();
    a.write_all_at(&[7u8; PAGE], PAGE as u64).unwrap();
    assert_eq!(c.stats().writeback_errors, 1);
    b.heal_writes();
    assert!(is_eio(c.sync_all()), "no sync had run: sync_all reports it");
    assert!(c.sync_all().is_ok());
    assert!(is_eio(a.sync_data()), "and the handle hears of it once");
    assert!(a.sync_data().is_ok());
}
