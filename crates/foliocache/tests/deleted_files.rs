//! A deleted file goes at its last close (the kernel's `iput_final` with `i_nlink == 0`):
//! its pages, dirty ones included, are dropped without I/O, and its descriptors are closed, so
//! the file system frees its blocks. Before, the inode cache parked it with its descriptors
//! like any other file, until 4,096 other files had been parked (and a dirty one could not
//! leave until its pages were written to the deleted file).

use foliocache::{Config, FolioCache, OpenOptions};

const PAGE: usize = 4096;

fn rw() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true);
    o
}

/// Descriptors of this process that name `path` (as `/proc/self/fd` shows it, with
/// " (deleted)" after a deleted file's name).
fn descriptors_of(path: &std::path::Path) -> usize {
    let name = path.to_string_lossy().into_owned();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with(&name))
        .count()
}

#[test]
fn a_file_deleted_while_open_goes_at_its_last_close_with_its_dirty_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deleted-while-open");
    let c = FolioCache::new(Config::new(1 << 20).background_writeback(false)).unwrap();
    let f = c.open_with(&path, &rw()).unwrap();
    let reader = c.open(&path).unwrap();
    f.write_all_at(&vec![7u8; 8 * PAGE], 0).unwrap();
    assert_eq!(f.dirty_pages(), 8);
    let before = c.stats();
    std::fs::remove_file(&path).unwrap();
    // Open handles keep reading and writing the deleted file, as descriptors do.
    f.write_all_at(b"still here", 0).unwrap();
    let mut buf = [0u8; 10];
    reader.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"still here");
    assert!(descriptors_of(&path) > 0);
    drop(f);
    assert!(descriptors_of(&path) > 0, "a handle is still open");
    drop(reader);
    assert_eq!(
        descriptors_of(&path),
        0,
        "descriptors of the deleted file stay open"
    );
    let s = c.stats();
    assert_eq!(s.deleted_inodes_dropped - before.deleted_inodes_dropped, 1);
    assert_eq!(s.dirty_pages_discarded - before.dirty_pages_discarded, 8);
    assert_eq!(
        s.writeback_pages, before.writeback_pages,
        "nothing written to a deleted file"
    );
    assert_eq!((s.dirty_pages, s.dirty_charged_pages), (0, 0));
    assert_eq!(s.inodes, 0);
    let a = c.validate().unwrap();
    assert_eq!(a.allocated_pages, 0, "its pages left with it");
}

#[test]
fn a_file_replaced_by_a_rename_goes_at_its_last_close() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("old"), dir.path().join("new"));
    std::fs::write(&old, vec![1u8; 4 * PAGE]).unwrap();
    std::fs::write(&new, vec![2u8; 4 * PAGE]).unwrap();
    let c = FolioCache::new(Config::new(1 << 20)).unwrap();
    let f = c.open(&old).unwrap();
    let mut buf = vec![0u8; 4 * PAGE];
    f.read_exact_at(&mut buf, 0).unwrap();
    // `new` takes `old`'s name: the file `old` named has no name left.
    std::fs::rename(&new, &old).unwrap();
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf.iter().all(|&b| b == 1), "the handle keeps its file");
    drop(f);
    assert_eq!(c.stats().deleted_inodes_dropped, 1);
    assert_eq!(c.stats().inodes, 0);
    assert_eq!(descriptors_of(&old), 0);
    let g = c.open(&old).unwrap();
    g.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf.iter().all(|&b| b == 2), "the path names the new file");
}

#[test]
fn a_closed_file_that_still_has_a_name_is_kept_with_its_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kept");
    let c = FolioCache::new(Config::new(1 << 20)).unwrap();
    let f = c.open_with(&path, &rw()).unwrap();
    f.write_all_at(&vec![3u8; 2 * PAGE], 0).unwrap();
    drop(f);
    let s = c.stats();
    assert_eq!((s.inodes, s.deleted_inodes_dropped), (1, 0));
    assert_eq!(s.dirty_pages_discarded, 0);
    // A hard link keeps it alive too: one name gone, one left.
    let link = dir.path().join("link");
    std::fs::hard_link(&path, &link).unwrap();
    let g = c.open(&link).unwrap();
    std::fs::remove_file(&path).unwrap();
    drop(g);
    assert_eq!(c.stats().deleted_inodes_dropped, 0);
    assert_eq!(c.stats().inodes, 1);
    c.sync_all().unwrap();
    assert_eq!(std::fs::read(&link).unwrap(), vec![3u8; 2 * PAGE]);
}
