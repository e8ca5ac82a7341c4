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

mod crash;
mod store;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crash::{ahead_of_log, missing, update_of};
use store::{Store, HEADER};

const PAGES: u64 = 2048;
const BUDGET: usize = 2 << 20;

/// The child: updates and commits until killed, printing `COMMIT k` after each commit.
fn child(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let (s, _) = Store::open(dir, PAGES, BUDGET)?;
    let mut out = std::io::stdout().lock();
    for k in 1.. {
        let (page, bytes) = update_of(k, PAGES);
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
    assert_eq!(
        missing(&s, PAGES, committed)?,
        0,
        "pages without their committed update"
    );
    println!("every committed update is there");
    // And no page reached the file ahead of its log record (the cache's write-ahead rule).
    assert_eq!(
        ahead_of_log(&s, PAGES)?,
        None,
        "(page, page LSN) ahead of the log"
    );
    println!(
        "no page holds a change the log does not (log ends at {})",
        s.last_lsn()
    );
    s.checkpoint()?;
    println!(
        "the checkpoint wrote {} pages back",
        s.cache().stats().writeback_pages
    );
    drop(s);
    let (_, replayed) = Store::open(&dir, PAGES, BUDGET)?;
    println!("after a checkpoint, a reopen replays {replayed} records");
    Ok(())
}
