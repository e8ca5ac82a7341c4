//! Durability under SIGKILL: a child process writes through foliocache (random offsets and
//! lengths, growing and shrinking the file, syncing at random points) and reports, through
//! its stdout pipe, each operation it starts and each sync that returned. The parent kills it
//! at a random moment with SIGKILL, then checks the backing file: every byte the last
//! acknowledged sync covered, and that no later operation could have touched, has the value
//! the operations up to that sync give it. Zero lost bytes over every kill.
//!
//! The child is this test binary itself, re-run with an environment variable naming its
//! directory and seed (`crash_child` is a no-op otherwise).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use foliocache::{Config, FolioCache, OpenOptions};

const ENV: &str = "FOLIOCACHE_CRASH_CHILD";
/// The file stays below this size (a few times the cache's budget).
const MAX_SIZE: u64 = 1 << 20;
const PAGE: usize = 4096;

/// A small deterministic generator (splitmix64): the parent replays the child's operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Write { offset: u64, len: usize },
    SetLen(u64),
    Sync,
}

/// Operation `i` of the sequence seeded by `seed` (each depends only on `seed` and `i`).
fn op(seed: u64, i: u64) -> Op {
    let mut r = Rng(seed ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    match r.below(100) {
        0..=2 => Op::SetLen(r.below(MAX_SIZE)),
        3..=9 => Op::Sync,
        k => {
            // Mostly small writes, some page-sized and aligned, some large.
            let len = match k % 3 {
                0 => 1 + r.below(200) as usize,
                1 => PAGE,
                _ => 1 + r.below(40_000) as usize,
            };
            let mut offset = r.below(MAX_SIZE - len as u64);
            if k % 3 == 1 {
                offset &= !(PAGE as u64 - 1);
            }
            Op::Write { offset, len }
        }
    }
}

/// The byte operation `i` writes at file position `pos`.
fn byte(i: u64, pos: u64) -> u8 {
    (i.wrapping_mul(31) ^ pos.wrapping_mul(7) ^ (pos >> 9)) as u8 | 1
}

/// The child: runs the operations until killed, reporting `BEGIN i` before operation `i` and
/// `SYNC i` once the sync that is operation `i` returned.
#[test]
fn crash_child() {
    let Ok(arg) = std::env::var(ENV) else {
        return;
    };
    let (dir, seed) = arg.split_once(',').expect("dir,seed");
    let seed: u64 = seed.parse().unwrap();
    let path = Path::new(dir).join("data");
    // A budget a quarter of the file: reclaim, the dirty limit and writeback all run.
    let cache = FolioCache::new(Config::new(256 << 10)).unwrap();
    let f = cache
        .open_with(&path, OpenOptions::new().write(true).create(true))
        .unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "MODE {}",
        if f.direct_io().is_some() {
            "direct"
        } else {
            "buffered"
        }
    )
    .unwrap();
    let mut buf = Vec::new();
    for i in 0.. {
        writeln!(out, "BEGIN {i}").unwrap();
        out.flush().unwrap();
        match op(seed, i) {
            Op::Write { offset, len } => {
                buf.clear();
                buf.extend((0..len as u64).map(|k| byte(i, offset + k)));
                f.write_all_at(&buf, offset).unwrap();
            }
            Op::SetLen(size) => f.set_len(size).unwrap(),
            Op::Sync => {
                f.sync_data().unwrap();
                writeln!(out, "SYNC {i}").unwrap();
                out.flush().unwrap();
            }
        }
    }
}

/// The file as the operations `0..=last` leave it.
fn replay(seed: u64, last: u64) -> Vec<u8> {
    let mut model = Vec::new();
    for i in 0..=last {
        match op(seed, i) {
            Op::Write { offset, len } => {
                let end = offset as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                for (k, b) in model[offset as usize..end].iter_mut().enumerate() {
                    *b = byte(i, offset + k as u64);
                }
            }
            Op::SetLen(size) => model.resize(size as usize, 0),
            Op::Sync => {}
        }
    }
    model
}

/// Positions operations `first..=last` may have changed (written, cut, or grown into).
fn touched(seed: u64, first: u64, last: u64, len_at_first: usize) -> Vec<bool> {
    let mut t = vec![false; MAX_SIZE as usize];
    let mut len = len_at_first;
    for i in first..=last {
        match op(seed, i) {
            Op::Write { offset, len: n } => {
                t[offset as usize..offset as usize + n].fill(true);
                len = len.max(offset as usize + n);
            }
            Op::SetLen(size) => {
                let size = size as usize;
                // Cut or grown: everything from the smaller end on may differ.
                t[size.min(len)..].fill(true);
                len = size;
            }
            Op::Sync => {}
        }
    }
    t
}

/// One kill: runs the child for `run_for`, kills it, checks the file. Returns the operations
/// the child began and the syncs it acknowledged.
fn one_kill(seed: u64, run_for: Duration) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(ENV, format!("{},{seed}", dir.path().display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut began, mut synced) = (None, None);
        let mut mode = String::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(m) = line.strip_prefix("MODE ") {
                mode = m.to_string();
            } else if let Some(i) = line.strip_prefix("BEGIN ") {
                began = Some(i.parse::<u64>().unwrap());
            } else if let Some(i) = line.strip_prefix("SYNC ") {
                synced = Some(i.parse::<u64>().unwrap());
            }
        }
        (began, synced, mode)
    });
    std::thread::sleep(run_for);
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    let status = child.wait().unwrap();
    assert!(
        status.code().is_none(),
        "the child died by itself ({status:?}): an operation failed"
    );
    let (began, synced, mode) = reader.join().unwrap();
    // The kill test is the direct-I/O path's too: on a disk file system it must run there.
    let buffered_asked = std::env::var("FOLIOCACHE_DIRECT_IO").is_ok_and(|v| v == "off");
    let probe = std::fs::File::create(dir.path().join("probe")).unwrap();
    let disk = foliocache::io::dio_alignment(&probe)
        .ok()
        .flatten()
        .is_some();
    if !buffered_asked && !mode.is_empty() {
        if disk {
            assert_eq!(
                mode, "direct",
                "a disk file system, but the child wrote buffered"
            );
        } else if std::env::var_os("FOLIOCACHE_SKIP_DISK").is_none() {
            panic!(
                "{} has no direct I/O: run with TMPDIR on ext4, XFS or btrfs, or set \
                 FOLIOCACHE_SKIP_DISK=1 to run the kill test buffered only",
                dir.path().display()
            );
        }
    }
    let began = began.unwrap_or(0);
    let Some(synced) = synced else {
        return (began, 0);
    };
    let model = replay(seed, synced);
    let free = touched(seed, synced + 1, began.max(synced + 1), model.len());
    let disk = std::fs::read(dir.path().join("data")).unwrap();
    let mut lost = 0usize;
    let mut first_lost = None;
    for (p, &want) in model.iter().enumerate() {
        if free[p] {
            continue;
        }
        if disk.get(p) != Some(&want) {
            lost += 1;
            first_lost.get_or_insert((p, want, disk.get(p).copied()));
        }
    }
    assert_eq!(
        lost, 0,
        "seed {seed}: {lost} acknowledged bytes lost after the sync at op {synced} (child began op \
         {began}); first: (pos, want, got) = {first_lost:?}"
    );
    (began, synced + 1)
}

#[test]
fn acknowledged_syncs_survive_sigkill() {
    if std::env::var(ENV).is_ok() {
        return; // in a child: only `crash_child` runs
    }
    let kills = if cfg!(debug_assertions) { 20 } else { 120 };
    let mut rng = Rng(0x5EED);
    let (mut ops, mut with_sync) = (0, 0);
    for k in 0..kills {
        let seed = rng.next();
        // Kill anywhere from start-up to well into the run.
        let run_for = Duration::from_millis(20 + rng.below(180));
        let (began, synced) = one_kill(seed, run_for);
        ops += began;
        with_sync += (synced > 0) as u32;
        let _ = k;
    }
    // The kills must land after real work, most of them after an acknowledged sync.
    assert!(
        ops > kills as u64 * 10,
        "only {ops} operations over {kills} kills"
    );
    assert!(
        with_sync * 2 > kills,
        "only {with_sync} of {kills} kills came after an acknowledged sync"
    );
}
