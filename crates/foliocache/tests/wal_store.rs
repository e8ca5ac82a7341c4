//! The example engine (`examples/wal_store`: a page store with a write-ahead log) killed with
//! SIGKILL at random moments: after each kill, reopening the store (which replays the log)
//! finds every committed update. Its updates change cached pages before they commit, so
//! this is the write-ahead rule's end-to-end test: a page that reached the data file ahead
//! of its log record would hold a change the log does not (its page LSN past the log's end).
//! Every other kill runs the store with 16 KiB pages, each updated under a block latch. The
//! control reopens without the replay, and must find committed updates missing (the check
//! bites).

#[path = "../examples/wal_store/crash.rs"]
mod crash;
#[path = "../examples/wal_store/store.rs"]
#[allow(dead_code)]
mod store;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crash::{ahead_of_log, missing, update_of};
use store::{Store, HEADER};

const ENV: &str = "FOLIOCACHE_WAL_STORE_CHILD";
/// The child's page size, if not 4 KiB.
const PAGE_ENV: &str = "FOLIOCACHE_WAL_STORE_PAGE";
const PAGES: u64 = 1024;
const BUDGET: usize = 1 << 20;

/// The child: updates, commits every 50 and checkpoints every 2,000, until killed; prints
/// `COMMIT k` after each commit returned.
#[test]
fn wal_store_child() {
    let Ok(dir) = std::env::var(ENV) else {
        return;
    };
    let page = std::env::var(PAGE_ENV).map_or(store::PAGE, |p| p.parse().unwrap());
    let (s, _) = open(Path::new(&dir), page, true);
    let mut out = std::io::stdout().lock();
    for k in 1.. {
        let (page, bytes) = update_of(k, PAGES);
        s.update(page, HEADER, &bytes).unwrap();
        if k % 50 == 0 {
            s.commit().unwrap();
            writeln!(out, "COMMIT {k}").unwrap();
            out.flush().unwrap();
        }
        if k % 2_000 == 0 {
            s.checkpoint().unwrap();
        }
    }
}

/// The store of pages of `page` bytes in `dir`, its log replayed if `replay`.
fn open(dir: &Path, page: usize, replay: bool) -> (Store, u64) {
    let config = foliocache::Config::buffer_pool(BUDGET);
    Store::open_paged(dir, PAGES, page, config, replay).unwrap()
}

/// Runs the child (pages of `page` bytes) until it has committed `min_commits` updates, then
/// for `run_for` more, kills it, and returns the last update it committed.
fn run_and_kill(dir: &Path, page: usize, min_commits: u64, run_for: Duration) -> u64 {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "wal_store_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV, dir)
        .env(PAGE_ENV, page.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // The child's stderr, shown if it dies by itself (its panic message).
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut committed = 0;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(k) = line.strip_prefix("COMMIT ") {
                committed = k.parse().unwrap();
                let _ = tx.send(committed);
            }
        }
        committed
    });
    // However slow the machine, the kill lands after real work.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
            Ok(k) if k >= min_commits => break,
            Ok(_) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the child committed fewer than {min_commits} updates: {e}; its stderr:\n{}",
                    errors.join().unwrap()
                );
            }
        }
    }
    std::thread::sleep(run_for);
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(
        status.code().is_none(),
        "the child died by itself: {status:?}; its stderr:\n{}",
        errors.join().unwrap()
    );
    reader.join().unwrap()
}

#[test]
fn every_committed_update_survives_sigkill() {
    if std::env::var(ENV).is_ok() {
        return;
    }
    let kills = if cfg!(debug_assertions) { 4 } else { 12 };
    let (mut committed_total, mut replayed_total) = (0, 0);
    for i in 0..kills {
        let dir = tempfile::tempdir().unwrap();
        let page = [store::PAGE, 16 << 10][i as usize % 2];
        let committed = run_and_kill(dir.path(), page, 500, Duration::from_millis(20 + 40 * i));
        let (s, replayed) = open(dir.path(), page, true);
        assert_eq!(
            missing(&s, PAGES, committed).unwrap(),
            0,
            "kill {i} (pages of {page} bytes): after {committed} commits"
        );
        // The write-ahead rule itself: no page on disk holds a change the log does not.
        if let Some((page, lsn)) = ahead_of_log(&s, PAGES).unwrap() {
            panic!(
                "kill {i}: page {page} holds change {lsn}, the log ends at {}",
                s.last_lsn()
            );
        }
        if page > store::PAGE {
            let st = s.cache().stats();
            assert_eq!(st.folio_collapses, 0, "blocks are read whole: {st:?}");
        }
        committed_total += committed;
        replayed_total += replayed;
    }
    eprintln!("{kills} kills: {committed_total} committed updates checked, {replayed_total} records replayed");
    assert!(
        committed_total > 0 && replayed_total > 0,
        "the kills must land after real work"
    );
}

#[test]
fn without_the_replay_committed_updates_are_lost() {
    if std::env::var(ENV).is_ok() {
        return;
    }
    let mut lost = 0;
    for i in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let page = [store::PAGE, 16 << 10][i as usize % 2];
        let committed = run_and_kill(dir.path(), page, 1_000, Duration::from_millis(50 * i));
        let (s, _) = open(dir.path(), page, false);
        lost += missing(&s, PAGES, committed).unwrap();
        if lost > 0 {
            break;
        }
    }
    assert!(
        lost > 0,
        "a store that skips its replay must lose committed updates"
    );
}
