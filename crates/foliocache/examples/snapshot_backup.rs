//! A consistent backup of a file that writers keep changing: a ledger of accounts whose
//! total never changes (each write moves money between two accounts in one `write_at`), a
//! snapshot taken while the writers run, and a backup streamed from it that releases behind
//! itself. The backup's total is the ledger's; a plain copy of the live file taken the same
//! way mixes moments and is usually off.
//!
//! ```text
//! cargo run --release -p foliocache --example snapshot_backup [DIR]
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use foliocache::{CachedFile, Config, FolioCache, OpenOptions};

/// Accounts per writer's region (8 bytes each): 64 pages.
pub const REGION_ACCOUNTS: usize = 32 * 1024;
/// What every account holds at the start.
pub const START: u64 = 1000;

/// What one run found.
#[derive(Debug)]
pub struct Report {
    /// The ledger's total, which every consistent copy shows.
    pub expected: u64,
    /// The backup's total.
    pub backup_total: u64,
    /// A plain copy of the live file's total, read while the writers ran.
    pub plain_total: u64,
    /// Writes the writers made while the backup was streamed.
    pub writes_during_backup: u64,
    /// The most pages the snapshot held at once.
    pub peak_held_pages: u64,
}

fn total(bytes: &[u8]) -> u64 {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .sum()
}

/// Moves money inside writer `w`'s region until `stop`: each move rewrites the accounts
/// from the payer to the payee (one `write_at` of up to the whole region), so the region's
/// total stays the same at every instant a snapshot can fall on.
fn writer(file: &CachedFile, w: usize, stop: &AtomicBool, writes: &AtomicU64) {
    let mut accounts = vec![START; REGION_ACCOUNTS];
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ w as u64;
    let base = (w * REGION_ACCOUNTS * 8) as u64;
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let a = (x % REGION_ACCOUNTS as u64) as usize;
        let b = ((x >> 20) % REGION_ACCOUNTS as u64) as usize;
        let (lo, hi) = (a.min(b), a.max(b));
        let amount = (x >> 40) % 10;
        if accounts[a] < amount || a == b {
            continue;
        }
        accounts[a] -= amount;
        accounts[b] += amount;
        let bytes: Vec<u8> = accounts[lo..=hi]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        file.write_all_at(&bytes, base + lo as u64 * 8).unwrap();
        writes.fetch_add(1, Ordering::Relaxed);
    }
}

/// Builds a ledger of `writers` regions in `dir`, starts the writers, backs the file up from
/// a snapshot and by a plain copy, and reports.
pub fn run(dir: &std::path::Path, writers: usize) -> Result<Report, Box<dyn std::error::Error>> {
    let cache = FolioCache::new(Config::new(64 << 20))?;
    let path = dir.join("ledger");
    let ledger = cache.open_with(
        &path,
        OpenOptions::new().write(true).create(true).truncate(true),
    )?;
    let accounts = writers * REGION_ACCOUNTS;
    let start: Vec<u8> = (0..accounts).flat_map(|_| START.to_le_bytes()).collect();
    ledger.write_all_at(&start, 0)?;
    ledger.sync_data()?;
    let expected = START * accounts as u64;

    let stop = AtomicBool::new(false);
    let writes = AtomicU64::new(0);
    let report = std::thread::scope(|s| -> Result<Report, Box<dyn std::error::Error>> {
        for w in 0..writers {
            let (ledger, stop, writes) = (&ledger, &stop, &writes);
            s.spawn(move || writer(ledger, w, stop, writes));
        }
        while writes.load(Ordering::Relaxed) < 200 {
            std::thread::yield_now();
        }

        // The backup: a snapshot (O(1)), streamed out in chunks that are released behind.
        let t = Instant::now();
        let snap = ledger.snapshot()?;
        let before = writes.load(Ordering::Relaxed);
        // Let the writers change the ledger after the snapshot before the copy starts (on a
        // slow or loaded machine the copy could otherwise end before their next write).
        let wait = Instant::now();
        while writes.load(Ordering::Relaxed) < before + 20 && wait.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        let mut backup = Vec::with_capacity(snap.len() as usize);
        let mut peak = 0;
        let mut pos = 0;
        let mut chunk = vec![0u8; 64 << 10];
        while pos < snap.len() {
            let n = chunk.len().min((snap.len() - pos) as usize);
            snap.read_exact_at(&mut chunk[..n], pos)?;
            backup.extend_from_slice(&chunk[..n]);
            peak = peak.max(snap.held_pages());
            snap.release(pos..pos + n as u64)?;
            pos += n as u64;
            // Give the writers time to change pages the backup has not reached yet.
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        let writes_during_backup = writes.load(Ordering::Relaxed) - before;
        let took = t.elapsed();
        drop(snap);

        // The control: the live file copied the same way, with no snapshot.
        let mut plain = Vec::new();
        let mut pos = 0;
        while pos < ledger.len() {
            let n = chunk.len().min((ledger.len() - pos) as usize);
            ledger.read_exact_at(&mut chunk[..n], pos)?;
            plain.extend_from_slice(&chunk[..n]);
            pos += n as u64;
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        stop.store(true, Ordering::Relaxed);
        println!(
            "backup of {} KiB in {took:?} while {writers} writers made {writes_during_backup} writes",
            backup.len() >> 10
        );
        Ok(Report {
            expected,
            backup_total: total(&backup),
            plain_total: total(&plain),
            writes_during_backup,
            peak_held_pages: peak,
        })
    })?;
    // The ledger itself, once the writers stopped, holds the total too.
    let mut all = vec![0u8; ledger.len() as usize];
    ledger.read_exact_at(&mut all, 0)?;
    assert_eq!(total(&all), expected);
    let s = cache.stats();
    println!(
        "snapshot captures {}, capture reads {}, pages held now {}",
        s.snapshot_captures, s.snapshot_capture_reads, s.snapshot_pages
    );
    Ok(report)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp;
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let r = run(&dir, 2)?;
    println!(
        "ledger total {}: backup {} ({}), a plain copy of the live file {} ({}); the snapshot held {} pages at most",
        r.expected,
        r.backup_total,
        if r.backup_total == r.expected { "consistent" } else { "INCONSISTENT" },
        r.plain_total,
        if r.plain_total == r.expected { "consistent by luck" } else { "mixes moments" },
        r.peak_held_pages
    );
    assert_eq!(
        r.backup_total, r.expected,
        "the backup is not a point-in-time copy"
    );
    Ok(())
}
