//! A writeback error that happens while no handle of the file is open (its dirty pages were
//! written back by another writer's dirty throttling after the last close) is not lost: the
//! inode cache keeps the inode, and the next opener's first sync reports it, once.
//!
//! Its own test binary: it limits the process's file size (`RLIMIT_FSIZE`) to make a real
//! `pwritev` fail with `EFBIG`, which other tests running beside it must not feel.

use foliocache::{CacheError, Config, FolioCache, OpenOptions};

const PAGE: usize = 4096;

#[test]
fn the_next_opener_hears_of_an_error_no_handle_was_open_for() {
    let dir = tempfile::tempdir().unwrap();
    // A dirty limit of 2 pages: the failing file's two dirty pages fill it.
    // No flusher: the other file's writer at the limit is the one that writes it back.
    let c = FolioCache::new(
        Config::new(100 * PAGE)
            .unused_inodes(0)
            .dirty_ratios(2, 1)
            .background_writeback(false),
    )
    .unwrap();
    // The limit is lowered after the cache is made, which reads it then: the cache learns of
    // it only from the refused writeback, the case this test is about (a cache made after
    // refuses the write itself, `tests/size_limits.rs`).
    // SAFETY: plain libc calls; SIGXFSZ ignored so the failing write returns EFBIG instead of
    // killing the process.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let lim = libc::rlimit {
            rlim_cur: 64 * PAGE as u64,
            rlim_max: libc::RLIM_INFINITY,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
    let mut rw = OpenOptions::new();
    rw.write(true).create(true);
    let big = dir.path().join("big");
    {
        let f = c.open_with(&big, &rw).unwrap();
        // Pages 70..72: past the file size limit, their writeback will fail.
        f.write_all_at(&[1u8; 2 * PAGE], 70 * PAGE as u64).unwrap();
    }
    assert_eq!(c.stats().inodes, 1, "dirty: kept");
    // Another file's writer meets the dirty limit and writes the other files back.
    let other = c.open_with(dir.path().join("other"), &rw).unwrap();
    other.write_all_at(&[2u8; PAGE], 0).unwrap();
    let s = c.stats();
    assert!(s.writeback_errors >= 1, "{s:?}");
    assert_eq!(
        s.inodes, 2,
        "the failed file stays cached with its unreported error"
    );
    let f = c.open(&big).unwrap();
    match f.sync_data() {
        Err(CacheError::Writeback { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EFBIG))
        }
        other => panic!("expected EFBIG, got {other:?}"),
    }
    assert!(f.sync_data().is_ok(), "once");
    let g = c.open(&big).unwrap();
    assert!(
        g.sync_data().is_ok(),
        "already reported: not a later opener's error"
    );
    drop((f, g));
    assert_eq!(c.stats().inodes, 1, "seen and clean: evictable again");
}
