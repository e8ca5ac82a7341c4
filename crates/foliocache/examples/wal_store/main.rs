//! A page store with a write-ahead log on foliocache (`store.rs`): updates change cached
//! pages before they commit, the cache's write-ahead rule keeps each page out of the file
//! until its log record is durable, and a restart replays the log.
//!
//! ```text
//! cargo run --release -p foliocache --example wal_store [DIR]
//! ```
//!
//! The example runs the store in a child process (itself, re-run), which updates 100 bytes
//! of random pages (2,048 pages, 8 MiB, with a 2 MiB cache) and commits every 100 updates,
//! reporting each commit. After a second the parent kills it with SIGKILL: the cache, with
//! its dirty pages, dies with it. The parent then reopens the store, which replays the log,
//! and checks that every committed update is there. `tests/wal_store.rs` does the same many
//! times, and shows that without the replay committed updates are lost.

mod store;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use store::{Store, HEADER};

const PAGES: u64 = 2048;
const BUDGET: usize = 2 << 20;

/// The page and the bytes of update `k` (from 1): a deterministic sequence, so the parent
/// knows what the child wrote.
fn update_of(k: u64) -> (u64, Vec<u8>) {
    let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    (
        x % PAGES,
        [k.to_le_bytes().as_slice(), &[0xAB; 92]].concat(),
    )
}

/// The child: updates and commits until killed, printing `COMMIT k` after each commit.
fn child(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let (s, _) = Store::open(dir, PAGES, BUDGET)?;
    let mut out = std::io::stdout().lock();
    for k in 1.. {
        let (page, bytes) = update_of(k);
        s.update(page, HEADER, &bytes)?;
        if k % 100 == 0 {
            s.commit()?;
            writeln!(out, "COMMIT {k}")?;
            out.flush()?;
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("--child") {
        return child(std::path::Path::new(&args.next().expect("--child DIR")));
    }
    let tmp;
    let dir = match first {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let mut c = Command::new(std::env::current_exe()?)
        .arg("--child")
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()?;
    let lines = BufReader::new(c.stdout.take().expect("piped"));
    let reader = std::thread::spawn(move || {
        let mut committed = 0u64;
        for line in lines.lines().map_while(Result::ok) {
            if let Some(k) = line.strip_prefix("COMMIT ") {
                committed = k.parse().unwrap_or(committed);
            }
        }
        committed
    });
    std::thread::sleep(Duration::from_secs(1));
    c.kill()?; // SIGKILL
    c.wait()?;
    let committed = reader.join().expect("reader");
    println!("the child committed {committed} updates before it was killed");

    let t = Instant::now();
    let (s, replayed) = Store::open(&dir, PAGES, BUDGET)?;
    println!(
        "reopened in {:.1} ms: {replayed} log records replayed",
        t.elapsed().as_secs_f64() * 1e3
    );
    // Each page holds its last committed update, or a later one the log also held.
    let mut want = vec![0u64; PAGES as usize];
    for k in 1..=committed {
        want[update_of(k).0 as usize] = k;
    }
    for (page, &k) in want.iter().enumerate() {
        let mut v = [0u8; 8];
        s.read(page as u64, HEADER, &mut v)?;
        let got = u64::from_le_bytes(v);
        assert!(
            got >= k && (got == 0 || update_of(got).0 == page as u64),
            "page {page}: update {got}, committed {k}"
        );
    }
    println!("every committed update is there");
    // And no page reached the file ahead of its log record (the cache's write-ahead rule).
    for page in 0..PAGES {
        assert!(s.page_lsn(page)? <= s.last_lsn(), "page {page}");
    }
    println!(
        "no page holds a change the log does not (log ends at {})",
        s.last_lsn()
    );
    s.checkpoint()?;
    drop(s);
    let (_, replayed) = Store::open(&dir, PAGES, BUDGET)?;
    println!("after a checkpoint, a reopen replays {replayed} records");
    Ok(())
}
