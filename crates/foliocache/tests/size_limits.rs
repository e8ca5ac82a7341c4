//! File size limits and writebacks cut short by them, against the kernel as the reference.
//!
//! - A write at or past the largest file size fails at once with `EFBIG`
//!   ([`CacheError::FileTooLarge`]), one that crosses it is cut short, and a `set_len` past it
//!   fails (`generic_write_check_limits`, `inode_newsize_ok`): the same outcomes as `pwrite`
//!   and `ftruncate` on a plain file in the same directory.
//! - A writeback run cut short by `EFBIG` (`RLIMIT_FSIZE` lowered after the cache was made, so
//!   the cache learns of it only from the refused write) leaves the bytes it did write in the
//!   file: they read back after eviction, and a later small write into one of those pages does
//!   not write zeros over the rest of it. These run in a child process, which lowers its own
//!   limit and ignores `SIGXFSZ`.

use std::io;
use std::os::unix::fs::FileExt;
use std::process::Command;

use foliocache::{CacheError, Config, FolioCache, OpenOptions};

const PAGE: usize = 4096;
/// Set in the child process: the directory to work in.
const CHILD: &str = "FOLIOCACHE_SIZE_LIMITS_CHILD";

fn rw() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true);
    o
}

fn efbig(r: &Result<impl Sized, CacheError>) -> bool {
    matches!(r, Err(CacheError::FileTooLarge { .. }))
}

/// What the kernel does with the same `pwrite` on a plain file: `Ok(n)` or `EFBIG`.
fn kernel_pwrite(file: &std::fs::File, buf: &[u8], off: u64) -> Result<usize, ()> {
    match file.write_at(buf, off) {
        Ok(n) => Ok(n),
        Err(e) if e.raw_os_error() == Some(libc::EFBIG) => Err(()),
        // `EINVAL`: an offset past `off_t` (the kernel refuses it before the size checks).
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Err(()),
        Err(e) => panic!("pwrite at {off}: {e}"),
    }
}

#[test]
fn writes_and_set_len_past_the_file_systems_limit_fail_as_the_kernels_do() {
    let dir = tempfile::tempdir().unwrap();
    let reference = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.path().join("kernel"))
        .unwrap();
    let c = FolioCache::new(Config::new(1 << 20)).unwrap();
    let f = c.open_with(dir.path().join("cached"), &rw()).unwrap();
    // The report's write: at `i64::MAX - 10` it was accepted on ext4 and the size became
    // unreachable. The kernel decides (ext4 refuses; a file system without a limit below
    // `off_t`'s, such as tmpfs, takes it).
    let k = kernel_pwrite(&reference, &[1; 10], i64::MAX as u64 - 10);
    let r = f.write_at(&[1; 10], i64::MAX as u64 - 10);
    match k {
        Err(()) => {
            assert!(efbig(&r), "{r:?}");
            assert_eq!(f.len(), 0, "nothing was written");
            let e = io::Error::from(r.unwrap_err());
            assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        }
        Ok(n) => {
            assert_eq!(r.unwrap(), n);
            f.set_len(0).unwrap();
        }
    }
    // Find the file system's limit from the kernel (the largest offset a 1-byte pwrite takes),
    // then check the cache refuses and cuts short exactly where the kernel does.
    let (mut lo, mut hi) = (0u64, i64::MAX as u64);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if kernel_pwrite(&reference, &[1], mid).is_ok() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    reference.set_len(0).unwrap();
    let limit = hi; // the first offset refused: the largest size
    if limit < i64::MAX as u64 {
        // A write across the limit is cut short at it, as the kernel cuts it.
        assert_eq!(kernel_pwrite(&reference, &[2; 10], limit - 4), Ok(4));
        assert_eq!(f.write_at(&[2; 10], limit - 4).unwrap(), 4);
        assert_eq!(f.len(), limit);
        assert!(efbig(&f.write_at(&[3; 10], limit)));
        assert!(efbig(&f.set_len(limit + 1)));
        assert!(efbig(&f.set_len(i64::MAX as u64)));
        let mut back = [0u8; 4];
        f.read_exact_at(&mut back, limit - 4).unwrap();
        assert_eq!(back, [2; 4]);
        f.sync_data().unwrap();
        f.set_len(0).unwrap();
        f.sync_data().unwrap();
    }
    // Past `off_t`'s range: an invalid argument, as the kernel's `EINVAL`.
    assert!(matches!(
        f.set_len(u64::MAX),
        Err(CacheError::InvalidArgument { .. })
    ));
    assert!(matches!(
        f.write_at(b"x", u64::MAX - 1),
        Err(CacheError::InvalidArgument { .. })
    ));
    assert_eq!(f.len(), 0);
    f.sync_data().unwrap();
    drop(f);
    c.drop_caches();
    assert_eq!(c.validate().unwrap().allocated_pages, 0);
}

/// Runs this test binary's test `name` in a child process with `CHILD` set to `dir`.
fn run_child(name: &str, dir: &std::path::Path) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

/// In the child: ignore `SIGXFSZ` (so a write past the limit fails with `EFBIG` instead of
/// killing the process) and lower `RLIMIT_FSIZE` to `bytes`.
fn lower_fsize_limit(bytes: u64) {
    // SAFETY: plain system calls on this process's own state, with valid arguments.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let r = libc::rlimit {
            rlim_cur: bytes as libc::rlim_t,
            rlim_max: libc::RLIM_INFINITY,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &r), 0);
    }
}

#[test]
fn a_writeback_cut_short_keeps_the_bytes_it_wrote() {
    let Ok(dir) = std::env::var(CHILD) else {
        let dir = tempfile::tempdir().unwrap();
        run_child("a_writeback_cut_short_keeps_the_bytes_it_wrote", dir.path());
        return;
    };
    let path = std::path::Path::new(&dir).join("cut-short");
    let data: Vec<u8> = (0..32 * PAGE).map(|i| (i % 251) as u8 + 1).collect();
    // The cache reads the limit when it is made: lowered after, it learns it from `EFBIG`.
    let c = FolioCache::new(Config::new(1 << 20).background_writeback(false)).unwrap();
    lower_fsize_limit(16 * PAGE as u64);
    let f = c.open_with(&path, &rw()).unwrap();
    f.write_all_at(&data, 0).unwrap();
    let r = f.sync_data();
    assert!(
        matches!(&r, Err(CacheError::Writeback { source, .. }) if source.raw_os_error() == Some(libc::EFBIG)),
        "{r:?}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 * PAGE as u64);
    // The failed pages ended clean (the kernel's policy): drop them all, then read back.
    c.drop_caches();
    assert_eq!(f.cached_pages(), 0);
    let mut head = vec![0u8; 16 * PAGE];
    f.read_exact_at(&mut head, 0).unwrap();
    assert!(
        head == data[..16 * PAGE],
        "bytes the failed run wrote read as zeros"
    );
    c.drop_caches();
    // A small write into page 2, then a sync: the rest of page 2 stays as written.
    f.write_all_at(b"ten bytes!", 2 * PAGE as u64 + 100)
        .unwrap();
    f.sync_data().unwrap();
    let disk = std::fs::read(&path).unwrap();
    let mut want = data[..16 * PAGE].to_vec();
    want[2 * PAGE + 100..2 * PAGE + 110].copy_from_slice(b"ten bytes!");
    assert!(
        disk[..16 * PAGE] == want[..],
        "zeros written over good data"
    );
    // The limit is known now: a write past it is refused at once, one across it cut short.
    assert!(efbig(&f.write_at(&[9; 10], 16 * PAGE as u64)));
    assert_eq!(f.write_at(&[9; 10], 16 * PAGE as u64 - 4).unwrap(), 4);
    drop(f);
    c.drop_caches();
}

#[test]
fn the_process_file_size_limit_is_checked_before_the_write() {
    let Ok(dir) = std::env::var(CHILD) else {
        let dir = tempfile::tempdir().unwrap();
        run_child(
            "the_process_file_size_limit_is_checked_before_the_write",
            dir.path(),
        );
        return;
    };
    lower_fsize_limit(64 * 1024);
    // Made after the limit was lowered: it knows it from the start.
    let c = FolioCache::new(Config::new(1 << 20)).unwrap();
    let f = c
        .open_with(std::path::Path::new(&dir).join("limited"), &rw())
        .unwrap();
    assert_eq!(
        f.write_at(&[1; 8192], 60 * 1024).unwrap(),
        4096,
        "cut short at the limit"
    );
    let r = f.write_at(&[1; 10], 64 * 1024);
    assert!(efbig(&r), "{r:?}");
    assert!(r.unwrap_err().to_string().contains("RLIMIT_FSIZE"));
    assert!(efbig(&f.set_len(64 * 1024 + 1)));
    assert_eq!(f.len(), 64 * 1024);
    f.sync_data().unwrap();
    drop(f);
    c.drop_caches();
    assert_eq!(c.validate().unwrap().allocated_pages, 0);
}
