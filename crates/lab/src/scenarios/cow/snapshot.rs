//! Part 3 of `cow`: snapshots of a cached file ([`foliocache::Snapshot`]), the product use of
//! seed 002's spaces. One cache per sharer-tracking strategy
//! ([`Experiment::tracking`](foliocache::mm::Experiment::tracking)), a file of `--snapshot-size`
//! bytes in it, fully cached; one thread makes 4 KiB Zipf 0.99 overwrites of one of them for
//! the measurement's duration, in four modes run interleaved (one file for all four, so its
//! memory layout is the same for each):
//!
//! | mode (variant) | the file | what a write meets |
//! |---|---|---|
//! | `no-snapshot` | the same file with no live snapshot (as a file that never had one: a write then checks one count) | nothing: the baseline |
//! | `snapshot-captured` | a snapshot taken, then every page written once (untimed) | a live snapshot that already keeps every page: no write keeps anything more |
//! | `snapshot-released` | a snapshot taken and released whole (a streaming backup past the end) | a live snapshot that needs nothing |
//! | `snapshot-churn` | a snapshot taken every 2,000 writes, the older of two dropped | old versions kept for the live snapshots (a full snapshot share drops the oldest) |
//!
//! `snapshot-take` times `CachedFile::snapshot` on the 4 KiB-write file and on a sparse
//! 1 GiB file (µs, median of 200 takes per run; each snapshot dropped untimed).
//!
//! Rows: variants as above with fields `benchmark` (`snapshot-write`) and `tracking`, metric
//! `ops_per_sec`; variants the tracking names with `benchmark` `snapshot-take` and
//! `file_mib`, metric `take_us`. Comparisons: each snapshot mode against `no-snapshot`, per
//! tracking. Checks: `snapshot_mismatches` (bytes of a snapshot that differ from the file's
//! copy made when it was taken: 0), `snapshot_charge_back_to_zero` (pages still charged after
//! every snapshot dropped: 0), `snapshot_validate` (the cache's `validate`, sharer tracking
//! included, after the part: 0 errors). Stats: per tracking, pages captured per churn write,
//! the most pages the churn snapshots held, snapshot-limit hits, the folios holding the file
//! when a mode starts.
//!
//! Each mode starts from the file cached in large folios again (written back, invalidated,
//! read in by `CachedFile::readahead`; the stat `folios_at_start` says how many folios hold
//! it). A write goes into a large folio whole unless a live snapshot still needs one of its
//! pages (then the folio is split and the page kept: `snapshot-captured` and
//! `snapshot-churn` split what they touch). The tracking strategies run the same write
//! path: the live file holds its folios through its index, not a mapping, so a write asks
//! whether a snapshot maps the folio, which every strategy answers exactly, never whether
//! the live file maps it exclusively (part 1's `cow-reuse` question; the crate's
//! `cache/snapshot.rs` docs say why).

use std::path::Path;
use std::time::{Duration, Instant};

use foliocache::mm::rmap::Tracking;
use foliocache::mm::Experiment;
use foliocache::{CacheError, CachedFile, Config, FolioCache, OpenOptions, Snapshot};
use serde_json::{json, Map, Value};

use super::lab;
use crate::harness::{fmt_num, Bench, LabResult, Report, Settings, Table};
use crate::scenarios::peers::workload::{Rng, Zipf};

/// The write modes (variants), baseline first.
pub const MODES: [&str; 4] = [
    "no-snapshot",
    "snapshot-captured",
    "snapshot-released",
    "snapshot-churn",
];

/// The sparse file `snapshot-take` also times a snapshot of, in MiB.
const BIG_MIB: u64 = 1024;
/// Snapshots timed per `snapshot-take` sample.
const TAKES: usize = 200;
/// Writes between two snapshots in `snapshot-churn`.
const CHURN_EVERY: u64 = 2000;

/// Default size of the written file.
pub const DEFAULT_SIZE: usize = 64 << 20;
/// With `--quick`.
pub const QUICK_SIZE: usize = 8 << 20;

/// Progress steps of this part.
pub fn steps(runs: usize) -> u64 {
    (runs * Tracking::ALL.len() * (MODES.len() + 2)) as u64
}

fn extra_write(t: Tracking) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("benchmark".into(), json!("snapshot-write"));
    m.insert("tracking".into(), json!(t.name()));
    m
}

fn extra_take(mib: u64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("benchmark".into(), json!("snapshot-take"));
    m.insert("file_mib".into(), json!(mib));
    m
}

/// What the part found besides its rows.
#[derive(Default)]
struct Tally {
    mismatches: u64,
    validate_errors: Vec<String>,
    charge_left: u64,
    per_tracking: Map<String, Value>,
}

/// One tracking's cache and files (the written one, and a sparse one to snapshot).
struct Setup {
    tracking: Tracking,
    cache: FolioCache,
    snapped: CachedFile,
    big: CachedFile,
    pages: u64,
}

fn setup(dir: &Path, t: Tracking, size: usize) -> LabResult<Setup> {
    // Four times the file: the file cached, old versions beside it, no writeback needed.
    let budget = 4 * size + (8 << 20);
    let config = Config::buffer_pool(budget)
        .snapshot_share(40)
        .experiment(Experiment::new().tracking(t));
    let cache = FolioCache::new(config).map_err(lab)?;
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true);
    let fill = |name: &str| -> LabResult<CachedFile> {
        let f = cache.open_with(dir.join(format!("{name}-{}", t.name())), &o).map_err(lab)?;
        let chunk = vec![0x5au8; 1 << 20];
        let mut at = 0;
        while at < size {
            let n = chunk.len().min(size - at);
            f.write_all_at(&chunk[..n], at as u64).map_err(lab)?;
            at += n;
        }
        f.sync_data().map_err(lab)?;
        Ok(f)
    };
    let snapped = fill("snapped")?;
    let big = cache.open_with(dir.join(format!("big-{}", t.name())), &o).map_err(lab)?;
    big.set_len(BIG_MIB << 20).map_err(lab)?;
    Ok(Setup {
        tracking: t,
        cache,
        snapped,
        big,
        pages: (size / foliocache::PAGE_SIZE) as u64,
    })
}

/// 4 KiB Zipf overwrites of `f` for `d`; `between(n)` runs untimed-ish between writes every
/// `CHURN_EVERY` (its time counts: churn's snapshots are part of the workload). Returns
/// writes per second.
fn overwrite(
    f: &CachedFile,
    pages: u64,
    d: Duration,
    rng: &mut Rng,
    mut on_limit: impl FnMut() -> bool,
    mut between: impl FnMut(u64) -> LabResult<()>,
) -> LabResult<f64> {
    let zipf = Zipf::new(pages, 0.99);
    let mut page = vec![0u8; foliocache::PAGE_SIZE];
    let t0 = Instant::now();
    let mut n = 0u64;
    loop {
        if n % 64 == 0 && t0.elapsed() >= d {
            break;
        }
        if n % CHURN_EVERY == 0 {
            between(n)?;
        }
        let p = zipf.sample(rng) - 1;
        page[0] = n as u8;
        loop {
            match f.write_all_at(&page, p * foliocache::PAGE_SIZE as u64) {
                Ok(()) => break,
                Err(CacheError::SnapshotLimit { .. }) if on_limit() => {}
                Err(e) => return Err(lab(e)),
            }
        }
        n += 1;
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// Writes `f` back and caches it again in large folios (`CachedFile::readahead` of the
/// whole file, after an invalidation); returns the folios holding it.
fn recache(f: &CachedFile) -> LabResult<usize> {
    f.sync_data().map_err(lab)?;
    f.invalidate(0..f.len()).map_err(lab)?;
    f.readahead(0..f.len()).map_err(lab)?;
    let mut folios = 0;
    let mut at = 0;
    while at < f.len() {
        let n = (f.len() - at).min(8 << 20) as usize;
        folios += f.get_range(at, n).map_err(lab)?.nr_folios();
        at += n as u64;
    }
    Ok(folios)
}

fn read_all(f: impl Fn(&mut [u8], u64) -> Result<(), CacheError>, len: u64) -> LabResult<Vec<u8>> {
    let mut v = vec![0u8; len as usize];
    f(&mut v, 0).map_err(lab)?;
    Ok(v)
}

/// Runs the part into `bench`; returns its stats (merged into the report's).
pub fn run(bench: &mut Bench, settings: &Settings, size: usize, dir: &Path) -> LabResult<Value> {
    let mut tally = Tally::default();
    let mut setups = Vec::new();
    for t in Tracking::ALL {
        setups.push(setup(dir, t, size)?);
    }
    let d = settings.duration;
    for s in &setups {
        let mut rng = Rng::new(0x5eed ^ s.tracking.name().len() as u64);
        let mut held_peak = 0u64;
        let mut captured_writes = (0u64, 0u64);
        let mut limit_hits = 0u64;
        let mut folios_at_start = 0usize;
        bench.measure_at(
            &format!("snapshot-write {}", s.tracking.name()),
            &[1],
            &MODES,
            &extra_write(s.tracking),
            |il, &mode, _, _| {
                // Every mode starts from the file cached in large folios (the captured and
                // churn modes split what they touch).
                let folios = recache(&s.snapped)?;
                folios_at_start = folios_at_start.max(folios);
                let ops = match mode {
                    "no-snapshot" => overwrite(&s.snapped, s.pages, d, &mut rng, || false, |_| Ok(()))?,
                    "snapshot-captured" | "snapshot-released" => {
                        let before = read_all(|b, o| s.snapped.read_exact_at(b, o), s.snapped.len())?;
                        let snap = s.snapped.snapshot().map_err(lab)?;
                        if mode == "snapshot-captured" {
                            let page = vec![1u8; foliocache::PAGE_SIZE];
                            for p in 0..s.pages {
                                s.snapped
                                    .write_all_at(&page, p * foliocache::PAGE_SIZE as u64)
                                    .map_err(lab)?;
                            }
                        } else {
                            snap.release(0..snap.len()).map_err(lab)?;
                        }
                        let ops = overwrite(&s.snapped, s.pages, d, &mut rng, || false, |_| Ok(()))?;
                        if mode == "snapshot-captured" {
                            let got = read_all(|b, o| snap.read_exact_at(b, o), snap.len())?;
                            tally.mismatches +=
                                got.iter().zip(&before).filter(|(a, b)| a != b).count() as u64;
                        }
                        ops
                    }
                    _ => {
                        let c0 = s.cache.stats().snapshot_captures;
                        let mut snaps: Vec<Snapshot> = Vec::new();
                        let mut writes = 0;
                        let ops = {
                            let snaps = std::cell::RefCell::new(&mut snaps);
                            overwrite(
                                &s.snapped,
                                s.pages,
                                d,
                                &mut rng,
                                || {
                                    let mut v = snaps.borrow_mut();
                                    if v.is_empty() {
                                        return false;
                                    }
                                    v.remove(0);
                                    limit_hits += 1;
                                    true
                                },
                                |n| {
                                    writes = n;
                                    let mut v = snaps.borrow_mut();
                                    held_peak = held_peak.max(v.iter().map(|x| x.held_pages()).sum());
                                    if v.len() == 2 {
                                        v.remove(0);
                                    }
                                    v.push(s.snapped.snapshot().map_err(lab)?);
                                    Ok(())
                                },
                            )?
                        };
                        drop(snaps);
                        let c = s.cache.stats().snapshot_captures - c0;
                        captured_writes.0 += c;
                        captured_writes.1 += writes.max(1);
                        ops
                    }
                };
                il.add(mode, 1, "ops_per_sec", ops);
                Ok(())
            },
        )?;
        tally.per_tracking.insert(
            s.tracking.name().into(),
            json!({
                "churn_captures_per_write": captured_writes.0 as f64 / captured_writes.1.max(1) as f64,
                "churn_held_pages_peak": held_peak,
                "churn_snapshot_limit_hits": limit_hits,
                "folios_at_start": folios_at_start,
            }),
        );
    }
    // Snapshot takes: the written file and the sparse 1 GiB one, variants the trackings.
    let variants: Vec<&Setup> = setups.iter().collect();
    for (mib, big) in [((size >> 20) as u64, false), (BIG_MIB, true)] {
        bench.measure_at(
            &format!("snapshot-take {mib} MiB"),
            &[1],
            &variants,
            &extra_take(mib),
            |il, s, _, _| {
                let f = if big { &s.big } else { &s.snapped };
                let mut times = Vec::with_capacity(TAKES);
                for _ in 0..TAKES {
                    let t0 = Instant::now();
                    let snap = f.snapshot().map_err(lab)?;
                    times.push(t0.elapsed().as_secs_f64() * 1e6);
                    drop(snap);
                }
                times.sort_by(f64::total_cmp);
                il.add(s.tracking.name(), 1, "take_us", times[TAKES / 2]);
                Ok(())
            },
        )?;
    }
    for s in &setups {
        let st = s.cache.stats();
        tally.charge_left += st.snapshot_pages;
        s.cache.sync_all().map_err(lab)?;
        if let Err(e) = s.cache.validate() {
            tally.validate_errors.push(format!("{}: {e}", s.tracking.name()));
        }
    }
    let report = &mut bench.report;
    for t in Tracking::ALL {
        for m in &MODES[1..] {
            report.compare(MODES[0], m, 1, "ops_per_sec", &extra_write(t));
        }
    }
    report.check("snapshot_mismatches", json!(tally.mismatches), tally.mismatches == 0);
    report.check(
        "snapshot_charge_back_to_zero",
        json!(tally.charge_left),
        tally.charge_left == 0,
    );
    if let Some(e) = tally.validate_errors.first() {
        eprintln!("cow: snapshot: validate: {e}");
    }
    report.check(
        "snapshot_validate",
        json!(tally.validate_errors.len()),
        tally.validate_errors.is_empty(),
    );
    Ok(Value::Object(tally.per_tracking))
}

/// `tracking | no-snapshot | snapshot-captured | ... `: writes/s (medians) and the ratio to
/// `no-snapshot`.
pub fn write_table(report: &Report) -> Table {
    let mut header = vec!["tracking".to_string()];
    header.extend(MODES.iter().map(|m| m.to_string()));
    let mut t = Table::new(header);
    for tr in Tracking::ALL {
        let get = |m: &str| report.row(m, 1, "ops_per_sec", &extra_write(tr)).map(|r| r.median);
        let base = get(MODES[0]);
        let mut cells = vec![tr.name().to_string()];
        for m in MODES {
            cells.push(match (get(m), base) {
                (Some(v), Some(b)) if m != MODES[0] && b > 0.0 => {
                    format!("{} ({:.2}x)", fmt_num(v), v / b)
                }
                (Some(v), _) => fmt_num(v),
                _ => "-".into(),
            });
        }
        t.row(cells);
    }
    t
}

/// `tracking | <size> MiB | 1024 MiB`: median snapshot take, µs.
pub fn take_table(report: &Report, size: usize) -> Table {
    let sizes = [(size >> 20) as u64, BIG_MIB];
    let mut header = vec!["tracking".to_string()];
    header.extend(sizes.iter().map(|m| format!("{m} MiB file")));
    let mut t = Table::new(header);
    for tr in Tracking::ALL {
        let mut cells = vec![tr.name().to_string()];
        for &m in &sizes {
            cells.push(
                report
                    .row(tr.name(), 1, "take_us", &extra_take(m))
                    .map_or("-".into(), |r| format!("{:.2}", r.median)),
            );
        }
        t.row(cells);
    }
    t
}
