//! `cow`: David Hildenbrand's micro benchmarks from seed 002 (precise "mapped shared" vs
//! "mapped exclusively" detection for PTE-mapped THP), on foliocache's address spaces.
//!
//! **Part 1, micro benchmarks.** Anonymous memory (default 256 MiB, `--size`; 8 MiB with
//! `--quick`) backed by 2 MiB folios (`--order 9`, PMD-mapped; a smaller `--order` gives
//! PTE-mapped mTHPs) is written once, then one action is timed:
//!
//! | benchmark | setup (untimed) | timed action |
//! |---|---|---|
//! | `remap` | populate | `protect` one page of every folio read-only (PTE-remaps each PMD mapping) |
//! | `munmap` | populate, PTE-map | `unmap` the whole area |
//! | `fork` | populate, PTE-map | `fork()` |
//! | `cow` | populate, PTE-map, fork (child kept) | write the whole area |
//! | `cow-byte` | same | write one byte per page |
//! | `cow-reuse` | populate, PTE-map, fork, drop the child | write the whole area |
//! | `cow-reuse-byte` | same | write one byte per page |
//! | `pte-dontneed` | populate, PTE-map | `dontneed` every page, one call per page |
//!
//! "PTE-map" is the seed's trigger: protect the first page of each folio read-only and make
//! it writable again (the page is anon-exclusive, so no fault follows). The variants are the
//! sharer-tracking strategies: `none` (vanilla: a large folio mapped more than once is
//! shared), `rmap-id` (the seed, exclusive-writer seqcount path on), `rmap-id-noexcl` (the
//! seed without the exclusive path), `mm-owner` (the kernel's 2025 design). They run
//! interleaved per benchmark; each sample is one action on fresh memory (for the short ones,
//! `remap`, `munmap`, `fork` and `pte-dontneed`, the best of 9 or 5 repetitions, each on fresh
//! memory: a millisecond action on a shared machine is often preempted); tables show the
//! median of `--runs` samples.
//!
//! The seed's table compares its patch *stages* against a baseline kernel that did not batch
//! rmap updates; `none` here already batches them (the library always does). Part 1 therefore
//! also runs `none-unbatched`: the `none` family with every action that has a range form in
//! the public API run one page per call (`munmap` as one `unmap` per page: one rmap update
//! per page, plus the per-call overhead). Remap's PMD split and fork are single calls with no
//! per-page form, and the COW writes and `pte-dontneed` are per page already, so for those
//! `none-unbatched` does what `none` does. The seed-shaped table is % change in runtime
//! against `none-unbatched` (negative = faster), one row per variant labelled with the stage
//! it stands for (`rmap-id-noexcl` = "batch", `rmap-id` = "exclusive"); a second table gives
//! the change against `none`.
//!
//! **Part 2, anon-cow (vm-scalability `case-anon-cow-seq` / `-rand`).** A parent writes the
//! area, forks one child per thread; every thread writes one byte to every page of its child
//! (in order, or in a random order), so the threads COW-fault the pages of the same folios
//! at the same time, PTE-remapping each PMD in every child first: concurrent rmap updates of
//! one folio. Reported: pages per second over all threads, and the seed's `seq | rand` table of
//! % change in throughput against `none` (positive = better; a COW fault is per page in every
//! variant, so there `none` is the unbatched baseline too).
//!
//! **Part 3, snapshots of a cached file** (`--no-snapshot` skips it): 4 KiB Zipf overwrites
//! of a cached file with no snapshot, under a live snapshot that keeps every page already,
//! under one released whole, and with snapshots taken and dropped every 2,000 writes; and the
//! time to take a snapshot of an 8 MiB (64 MiB full) file and of a sparse 1 GiB one. One cache
//! per tracking strategy; the module [`snapshot`] has the details.
//!
//! **Correctness while measuring.** After every timed action (untimed) the brute-force oracle
//! scans every page table and compares each `mapped_exclusively` answer and every counter;
//! before the measurements, every benchmark runs once more at a small size in oracle mode,
//! where every copy-on-write decision is checked against a scan as it is made. The arena
//! must be back at its baseline after every sample.
//!
//! Stable names (see `docs/LAB-RESULTS.md`):
//!
//! | kind | names |
//! |---|---|
//! | variants | `none`, `rmap-id`, `rmap-id-noexcl`, `mm-owner`; part 1 also `none-unbatched`; part 3's `snapshot-write` rows `no-snapshot`, `snapshot-captured`, `snapshot-released`, `snapshot-churn` |
//! | metrics | `runtime_ms` (part 1, threads = 1), `pages_per_sec` (part 2), `ops_per_sec` and `take_us` (part 3) |
//! | row fields | `benchmark`: `remap`, `munmap`, `fork`, `cow`, `cow-byte`, `cow-reuse`, `cow-reuse-byte`, `pte-dontneed`, `anon-cow-seq`, `anon-cow-rand`, `snapshot-write` (with `tracking`), `snapshot-take` (with `file_mib`) |
//! | comparisons | baseline `none`, candidates the three others; `runtime_ms` per part-1 benchmark, `pages_per_sec` per part-2 benchmark and thread count; and baseline `none-unbatched`, candidates the four others, `runtime_ms` per part-1 benchmark; each with its `benchmark` field; part 3: baseline `no-snapshot`, candidates the three snapshot modes, `ops_per_sec` per `tracking` |
//! | checks | `oracle_mismatches` (wrong exclusivity answers, wrong reuse decisions and counter errors, all runs), `arena_back_to_baseline` (pages leaked over all samples), `bad_pages`, `cow_reuse_without_copies` (copies made by `rmap-id`/`mm-owner` in `cow-reuse`: must be 0); part 3: `snapshot_mismatches`, `snapshot_charge_back_to_zero`, `snapshot_validate` |
//!
//! What a 2-core VM can show: the seed measured on 20- and 32-core servers, where part 2 has
//! 20-32 writers per folio. Here part 2 has at most `--threads` writers, so it shows the
//! protocols' cost under light contention, not their scaling.

pub mod snapshot;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use foliocache::mm::folio::{Arena, ArenaConfig, PAGE_SIZE};
use foliocache::mm::refcount::RefStrategy;
use foliocache::mm::rmap::Tracking;
use foliocache::mm::space::{Space, SpaceConfig, SpaceStats, Spaces};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::{json, Map, Value};

use crate::harness::{fmt_num, seed_order, seed_table, Bench, CommonArgs, LabError, LabResult, Report, Table};

/// The seed this scenario reproduces.
pub const SEED: &str = "002_c6097cf048dbb657.txt";

/// The scenario name (subcommand).
pub const NAME: &str = "cow";

/// One line for `all` and the summary.
pub const ABOUT: &str = "fork/COW micro benchmarks on large anonymous folios (remap, munmap, \
fork, cow, cow-reuse, pte-dontneed) and concurrent anon-cow: none vs rmap-id vs mm-owner";

/// The part-1 benchmarks, in the seed's column order.
pub const BENCHMARKS: [&str; 8] = [
    "remap",
    "munmap",
    "fork",
    "cow",
    "cow-byte",
    "cow-reuse",
    "cow-reuse-byte",
    "pte-dontneed",
];

/// The part-2 benchmarks.
pub const ANON_COW: [&str; 2] = ["anon-cow-seq", "anon-cow-rand"];

/// Default size of the anonymous area.
pub const DEFAULT_SIZE: usize = 256 << 20;
/// Size with `--quick`.
pub const QUICK_SIZE: usize = 8 << 20;
/// Size of the oracle-mode verification runs (capped by `--size`).
pub const VERIFY_SIZE: usize = 4 << 20;

/// Options of `foliocache-lab cow`.
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct Args {
    /// Options every scenario takes.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Bytes of anonymous memory per benchmark (e.g. 256M, 1G; a multiple of the folio
    /// size). Default 256M, 8M with --quick.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<usize>,
    /// Folio order of the anonymous memory: 9 = 2 MiB PMD-mapped THPs, 2..=8 PTE-mapped mTHPs.
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(2..=9))]
    pub order: u32,
    /// Only these part-1 benchmarks (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub benchmarks: Vec<String>,
    /// Skip part 2 (anon-cow).
    #[arg(long)]
    pub no_anon_cow: bool,
    /// Skip part 3 (snapshots of a cached file).
    #[arg(long)]
    pub no_snapshot: bool,
    /// Bytes of the file part 3 overwrites (default 64M, 8M with --quick).
    #[arg(long, value_parser = parse_size)]
    pub snapshot_size: Option<usize>,
    /// Directory of part 3's files (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

/// Parses a size: bytes, or with a K/M/G suffix (binary).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("invalid size `{s}` (examples: 8M, 256M, 1G)"))?;
    n.checked_mul(mul)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("invalid size `{s}`: must be positive and fit in memory"))
}

fn lab(e: impl std::fmt::Display) -> LabError {
    LabError(format!("cow: {e}"))
}

/// What one sample left behind, besides its time.
#[derive(Default)]
struct Tally {
    oracle_mismatches: u64,
    first_error: Option<String>,
    leaked_pages: u64,
    reuse_copies: u64,
    stats: Vec<(String, String, SpaceStats)>,
}

impl Tally {
    fn oracle(&mut self, fam: &Spaces, what: &str) {
        let r = fam.check_oracle();
        self.oracle_mismatches += r.mismatches();
        if let (None, Some(e)) = (&self.first_error, r.first_error) {
            self.first_error = Some(format!("{what}: {e}"));
        }
    }
}

/// Writes the whole area (one `write` per folio, as a memset would fault it).
fn write_all(s: &Space, addr: u64, size: usize, chunk: &[u8]) -> LabResult<()> {
    let mut at = 0;
    while at < size {
        let n = chunk.len().min(size - at);
        s.write(addr + at as u64, &chunk[..n]).map_err(lab)?;
        at += n;
    }
    Ok(())
}

/// Writes one byte per page.
fn write_bytes(s: &Space, addr: u64, size: usize) -> LabResult<()> {
    for p in 0..size / PAGE_SIZE {
        s.write(addr + (p * PAGE_SIZE) as u64, &[p as u8 | 1])
            .map_err(lab)?;
    }
    Ok(())
}

/// Protects the first page of every folio read-only and back (the seed's PTE-mapping
/// trigger).
fn pte_map(s: &Space, addr: u64, size: usize, folio: usize) -> LabResult<()> {
    for f in 0..size / folio {
        let a = addr + (f * folio) as u64;
        s.protect(a, PAGE_SIZE, true).map_err(lab)?;
        s.protect(a, PAGE_SIZE, false).map_err(lab)?;
    }
    Ok(())
}

/// The memory every sample works on.
struct Load<'a> {
    /// Bytes of anonymous memory.
    size: usize,
    /// Folio order.
    order: u32,
    /// One folio's worth of bytes to write.
    chunk: &'a [u8],
}

/// One part-1 sample: set up, time the action, check the oracle, tear down.
///
/// `unbatched` runs the action as a loop of one-page calls where the public API has a range
/// form (`munmap`: one `unmap` per page), so every rmap update covers one page, as before the
/// seed's batching; see [`UNBATCHED`].
fn sample(
    fam: &Spaces,
    bench: &str,
    load: &Load<'_>,
    unbatched: bool,
    tally: &mut Tally,
) -> LabResult<Duration> {
    let Load { size, order, chunk } = *load;
    let arena = fam.arena();
    let base = arena.stats().allocated_pages;
    let folio = PAGE_SIZE << order;
    let s = fam.create().map_err(lab)?;
    let addr = s.anon_with_order(size, order).map_err(lab)?;
    write_all(&s, addr, size, chunk)?;
    if bench != "remap" {
        pte_map(&s, addr, size, folio)?;
    }
    let mut child = None;
    if bench == "cow" || bench == "cow-byte" {
        child = Some(s.fork().map_err(lab)?);
    } else if bench.starts_with("cow-reuse") {
        drop(s.fork().map_err(lab)?);
    }
    let before = s.stats();
    let t0 = Instant::now();
    match bench {
        "remap" => {
            for f in 0..size / folio {
                s.protect(addr + (f * folio) as u64, PAGE_SIZE, true)
                    .map_err(lab)?;
            }
        }
        "munmap" if unbatched => {
            for p in 0..size / PAGE_SIZE {
                s.unmap(addr + (p * PAGE_SIZE) as u64, PAGE_SIZE)
                    .map_err(lab)?;
            }
        }
        "munmap" => s.unmap(addr, size).map_err(lab)?,
        "fork" => child = Some(s.fork().map_err(lab)?),
        "cow" | "cow-reuse" => write_all(&s, addr, size, chunk)?,
        "cow-byte" | "cow-reuse-byte" => write_bytes(&s, addr, size)?,
        "pte-dontneed" => {
            for p in 0..size / PAGE_SIZE {
                s.dontneed(addr + (p * PAGE_SIZE) as u64, PAGE_SIZE)
                    .map_err(lab)?;
            }
        }
        other => return Err(lab(format!("unknown benchmark `{other}`"))),
    }
    let elapsed = t0.elapsed();
    tally.oracle(fam, bench);
    let mut st = s.stats();
    st.cow_copies -= before.cow_copies;
    st.cow_reuses -= before.cow_reuses;
    if bench == "cow-reuse" && fam.config().tracking != Tracking::None {
        tally.reuse_copies += st.cow_copies;
    }
    let name = if unbatched {
        UNBATCHED
    } else {
        fam.config().tracking.name()
    };
    tally.stats.push((name.to_string(), bench.to_string(), st));
    drop(child);
    drop(s);
    tally.leaked_pages += arena.stats().allocated_pages.saturating_sub(base);
    Ok(elapsed)
}

/// One part-2 sample: pages COW-faulted per second by `threads` children at once.
fn anon_cow(
    fam: &Spaces,
    load: &Load<'_>,
    threads: usize,
    random: bool,
    pin: bool,
    tally: &mut Tally,
) -> LabResult<f64> {
    let Load { size, order, chunk } = *load;
    let arena = fam.arena();
    let base = arena.stats().allocated_pages;
    let parent = fam.create().map_err(lab)?;
    let addr = parent.anon_with_order(size, order).map_err(lab)?;
    write_all(&parent, addr, size, chunk)?;
    let children: Vec<Space> = (0..threads)
        .map(|_| parent.fork().map_err(lab))
        .collect::<LabResult<_>>()?;
    let pages = size / PAGE_SIZE;
    let barrier = Barrier::new(threads);
    // Each worker times itself from the barrier to its last write; the sample spans the
    // earliest start to the latest end (the main thread may be scheduled late).
    let results: Vec<_> = std::thread::scope(|sc| {
        let hs: Vec<_> = children
            .iter()
            .enumerate()
            .map(|(tid, c)| {
                let barrier = &barrier;
                sc.spawn(move || {
                    if pin {
                        foliocache::mm::sync::pin_to_cpu(tid);
                    }
                    let mut order: Vec<usize> = (0..pages).collect();
                    if random {
                        order.shuffle(&mut StdRng::seed_from_u64(tid as u64));
                    }
                    barrier.wait();
                    let t0 = Instant::now();
                    for p in order {
                        c.write(addr + (p * PAGE_SIZE) as u64, &[tid as u8 + 1])?;
                    }
                    Ok::<_, foliocache::mm::space::SpaceError>((t0, Instant::now()))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join()).collect()
    });
    let mut span: Option<(Instant, Instant)> = None;
    for r in results {
        let (a, b) = r
            .map_err(|_| lab("anon-cow worker panicked"))?
            .map_err(lab)?;
        span = Some(span.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
    }
    let (start, end) = span.expect("at least one thread");
    let elapsed = end - start;
    tally.oracle(
        fam,
        if random {
            "anon-cow-rand"
        } else {
            "anon-cow-seq"
        },
    );
    drop(children);
    drop(parent);
    tally.leaked_pages += arena.stats().allocated_pages.saturating_sub(base);
    Ok(crate::harness::per_sec((threads * pages) as f64, elapsed))
}

/// Every benchmark once at a small size with every copy-on-write decision checked against a
/// page-table scan (oracle mode). Returns (decisions checked, mismatches).
fn verify(
    arena: &Arc<Arena>,
    t: Tracking,
    load: &Load<'_>,
    tally: &mut Tally,
) -> LabResult<(u64, u64)> {
    let mut cfg = SpaceConfig::new(t);
    cfg.anon_order = load.order;
    cfg.oracle = true;
    let fam = Spaces::new(arena.clone(), cfg);
    let mut scratch = Tally::default();
    for b in BENCHMARKS {
        sample(&fam, b, load, false, &mut scratch)?;
    }
    for random in [false, true] {
        anon_cow(&fam, load, 2, random, false, &mut scratch)?;
    }
    let (checks, bad, first) = fam.oracle_decisions();
    tally.oracle_mismatches += scratch.oracle_mismatches + bad;
    tally.leaked_pages += scratch.leaked_pages;
    if tally.first_error.is_none() {
        tally.first_error = scratch.first_error.or(first);
    }
    Ok((checks, bad))
}

super::scenario!();

/// Runs the scenario: measures both parts, prints the seed's table, writes JSON if asked.
pub fn run(args: &Args) -> LabResult<Report> {
    let settings = args.common.settings();
    let size = args.size.unwrap_or(if settings.quick {
        QUICK_SIZE
    } else {
        DEFAULT_SIZE
    });
    let order = args.order;
    let folio = PAGE_SIZE << order;
    if size % folio != 0 {
        return Err(lab(format!(
            "--size {size} is not a multiple of the folio size {folio}"
        )));
    }
    let benches: Vec<&str> = if args.benchmarks.is_empty() {
        BENCHMARKS.to_vec()
    } else {
        for b in &args.benchmarks {
            if !BENCHMARKS.contains(&b.as_str()) {
                return Err(lab(format!(
                    "unknown benchmark `{b}` (have: {})",
                    BENCHMARKS.join(", ")
                )));
            }
        }
        BENCHMARKS
            .into_iter()
            .filter(|b| args.benchmarks.iter().any(|a| a == b))
            .collect()
    };
    let max_threads = settings.threads.iter().copied().max().unwrap_or(1);
    // The parent's memory plus one full copy per concurrent child (part 2), or per the one
    // child of `cow`, plus slack for page tables of small folios.
    let budget = size * (1 + max_threads.max(1)) + (16 << 20);
    let mut ac = ArenaConfig::new(budget, RefStrategy::LockedBit);
    ac.panic_on_bad_page = false;
    let arena = Arc::new(Arena::new(ac).map_err(lab)?);
    warm(&arena);
    let chunk = vec![0xa5u8; folio];

    let (cal_excl, cal_shared) = foliocache::mm::seqcount::calibrate(20_000, 5);
    let params = json!({
        "size_bytes": size,
        "order": order,
        "pmd_mapped": order == foliocache::mm::space::PMD_ORDER,
        "benchmarks": benches,
        "variants": Tracking::ALL.map(|t| t.name()),
        "part1_baseline": UNBATCHED,
        "exclusive_path_calibration": {
            "exclusive_ns_per_20k_sections": cal_excl as u64,
            "shared_ns_per_20k_sections": cal_shared as u64,
            "exclusive_pays_off": foliocache::mm::seqcount::exclusive_path_pays_off(),
        },
    });

    let mut tally = Tally::default();
    // Oracle-mode verification first (small, every decision checked).
    let mut decisions = 0;
    let small = Load {
        size: size.min(VERIFY_SIZE),
        order,
        chunk: &chunk,
    };
    for t in Tracking::ALL {
        let (checks, _) = verify(&arena, t, &small, &mut tally)?;
        decisions += checks;
    }
    let load = Load {
        size,
        order,
        chunk: &chunk,
    };

    let families: Vec<(Tracking, Spaces)> = Tracking::ALL
        .into_iter()
        .map(|t| {
            let mut cfg = SpaceConfig::new(t);
            cfg.anon_order = order;
            (t, Spaces::new(arena.clone(), cfg))
        })
        .collect();
    let part2 = if args.no_anon_cow { 0 } else { 2 };
    let part3 = if args.no_snapshot {
        0
    } else {
        snapshot::steps(settings.runs)
    };
    let steps = (settings.runs
        * ((families.len() + 1) * benches.len() + families.len() * part2 * settings.threads.len()))
        as u64
        + part3;
    let mut bench = Bench::with_steps(
        NAME,
        SEED,
        &settings,
        params,
        steps,
        Duration::from_millis((size as u64 >> 20).max(1) * 2),
    );

    // Part 1 adds the unbatched baseline (the `none` family, actions run page by page).
    let part1: Vec<(&str, bool, &Spaces)> = std::iter::once((UNBATCHED, true, &families[0].1))
        .chain(families.iter().map(|(t, f)| (t.name(), false, f)))
        .collect();
    for &name in &benches {
        bench.measure_at(name, &[1], &part1, &extra(name), |il, &(v, unbatched, fam), _, _| {
            // The short actions are repeated on fresh memory and the sample is the best of
            // them: on a shared machine a millisecond action is often preempted, and the
            // fastest repetition is the one that measured the action alone.
            let reps = repetitions(name, settings.quick);
            let mut best = Duration::MAX;
            for _ in 0..reps {
                best = best.min(sample(fam, name, &load, unbatched, &mut tally)?);
            }
            il.add(v, 1, "runtime_ms", best.as_secs_f64() * 1e3);
            Ok(())
        })?;
    }
    if !args.no_anon_cow {
        for (i, name) in ANON_COW.iter().enumerate() {
            bench.measure(name, &families, &extra(name), |il, (t, fam), threads, _| {
                let pps = anon_cow(fam, &load, threads, i == 1, settings.pin, &mut tally)?;
                il.add(t.name(), threads, "pages_per_sec", pps);
                Ok(())
            })?;
        }
    }

    let snap_size = args.snapshot_size.unwrap_or(if settings.quick {
        snapshot::QUICK_SIZE
    } else {
        snapshot::DEFAULT_SIZE
    });
    let snap_stats = if args.no_snapshot {
        None
    } else {
        let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new()
            .prefix("foliocache-cow-")
            .tempdir_in(&base)
            .map_err(|e| lab(format!("a directory in {}: {e}", base.display())))?;
        Some(snapshot::run(&mut bench, &settings, snap_size, dir.path())?)
    };

    let report = &mut bench.report;

    for &name in &benches {
        for t in &Tracking::ALL[1..] {
            report.compare(VANILLA.name(), t.name(), 1, "runtime_ms", &extra(name));
        }
        for t in Tracking::ALL {
            report.compare(UNBATCHED, t.name(), 1, "runtime_ms", &extra(name));
        }
    }
    if !args.no_anon_cow {
        for name in ANON_COW {
            for &threads in &settings.threads {
                for t in &Tracking::ALL[1..] {
                    report.compare(
                        VANILLA.name(),
                        t.name(),
                        threads,
                        "pages_per_sec",
                        &extra(name),
                    );
                }
            }
        }
    }

    report.check(
        "oracle_mismatches",
        json!(tally.oracle_mismatches),
        tally.oracle_mismatches == 0,
    );
    if let Some(e) = &tally.first_error {
        eprintln!("cow: oracle: {e}");
    }
    report.check(
        "arena_back_to_baseline",
        json!(tally.leaked_pages),
        tally.leaked_pages == 0,
    );
    let bad = arena.stats().bad_pages;
    report.check("bad_pages", json!(bad), bad == 0);
    if benches.contains(&"cow-reuse") {
        report.check(
            "cow_reuse_without_copies",
            json!(tally.reuse_copies),
            tally.reuse_copies == 0,
        );
    }
    let mut stats = stats_json(&tally, decisions);
    if let (Some(snap), Value::Object(m)) = (snap_stats, &mut stats) {
        m.insert("snapshot".into(), snap);
    }
    report.stats = Some(stats);

    let mut tables = vec![
        (
            format!(
                "Seed 002 shape: % change in runtime against the unbatched baseline \
                 `{UNBATCHED}` (negative = faster), one row per variant with the seed's patch \
                 stage it stands for; {} MiB of order-{order} folios, medians of {} runs. \
                 `{UNBATCHED}` is `none` with munmap run as one unmap per page (one rmap \
                 update per page, as before batching; the per-call overhead counts too); the \
                 other actions have no per-page form in the API (remap's PMD split and fork \
                 are single calls) or are per page already (the cow writes, pte-dontneed), \
                 so there it equals `none`",
                size >> 20,
                settings.runs
            ),
            stage_table(report, &benches),
        ),
        (
            "% change in runtime against `none` (batched, no sharer tracking)".to_string(),
            pct_table(report, &benches),
        ),
        (
            "Runtimes (ms, medians)".to_string(),
            ms_table(report, &benches),
        ),
    ];
    if !args.no_anon_cow {
        tables.push((
            "Seed 002 shape (vm-scalability): % change in anon-cow throughput against `none` \
             (positive = more pages/s), seq and rand; the seed's baseline had no batching, but \
             a COW fault is per page in every variant, so `none` is that baseline here"
                .to_string(),
            anon_cow_pct_table(report, &settings.threads),
        ));
        for name in ANON_COW {
            tables.push((
                format!("{name}: pages COW-faulted per second, one child per thread"),
                seed_table(
                    report,
                    "pages_per_sec",
                    VANILLA.name(),
                    PATCHED.name(),
                    &seed_order(VANILLA, PATCHED)[2..]
                        .iter()
                        .map(|t| t.name())
                        .collect::<Vec<_>>(),
                    &extra(name),
                ),
            ));
        }
    }
    if !args.no_snapshot {
        tables.push((
            format!(
                "Snapshots of a cached {} MiB file: 4 KiB Zipf 0.99 overwrites per second \
                 (medians), and the ratio to `no-snapshot`, per sharer tracking",
                snap_size >> 20
            ),
            snapshot::write_table(&bench.report),
        ));
        tables.push((
            "Snapshots: the median time to take one (µs), whatever the file's size".to_string(),
            snapshot::take_table(&bench.report, snap_size),
        ));
    }
    // The plot: anon-cow-seq throughput against threads (the part-1 actions have no thread
    // axis; their table is the seed's).
    let plot_rows = extra(ANON_COW[0]);
    let plot = (!args.no_anon_cow).then_some(("pages_per_sec", &plot_rows));
    bench.finish(&settings, &tables, plot)
}

/// How many times one sample repeats the timed action (each on freshly set-up memory), the
/// sample being the fastest: the actions that take a few milliseconds or less at the default
/// size.
fn repetitions(bench: &str, quick: bool) -> u32 {
    match bench {
        _ if quick => 1,
        "remap" | "munmap" | "fork" => 9,
        "pte-dontneed" => 5,
        _ => 1,
    }
}

/// Touches every frame of the arena once (allocates everything, writes it, frees it), so no
/// sample pays the operating system's first-touch faults on the arena's mapping.
fn warm(arena: &Arena) {
    let mut held = Vec::new();
    for order in (0..=foliocache::mm::space::PMD_ORDER).rev() {
        while let Ok(f) = arena.alloc(order) {
            let mut l = f.lock();
            if let Some(d) = l.data_mut() {
                d.fill(0);
            }
            held.push(l.unlock());
        }
    }
    drop(held);
}

fn extra(bench: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("benchmark".into(), json!(bench));
    m
}

/// Copy/reuse counts of the last sample of each (variant, benchmark), and the oracle work.
fn stats_json(t: &Tally, decisions: u64) -> Value {
    let mut per = Map::new();
    for (v, b, s) in &t.stats {
        per.insert(format!("{v}/{b}"), super::files::vmstat_json(&s.vmstat()));
    }
    json!({ "oracle_decisions_checked": decisions, "last_sample": per })
}

/// The part-1 baseline: `none` with every action that has a range form in the API run one
/// page per call, so each rmap update covers one page (the seed's baseline kernel predates
/// rmap batching; the library always batches, so the unbatched form is built here).
pub const UNBATCHED: &str = "none-unbatched";

/// The baseline of every comparison: batched, no sharer tracking.
const VANILLA: Tracking = Tracking::None;

/// The seed's patched tracking (rmap-id with its exclusive path).
const PATCHED: Tracking = Tracking::RmapId {
    exclusive_writer: true,
};

/// The seed's patch stage each variant stands for, in the seed's row order.
const STAGES: [(Tracking, &str); 4] = [
    (VANILLA, "(batching alone, no stage)"),
    (
        Tracking::RmapId {
            exclusive_writer: false,
        },
        "batch (#14)",
    ),
    (PATCHED, "exclusive (#17)"),
    (Tracking::MmOwner, "(2025 mm-owner design)"),
];

/// The stage of `t` in the seed, `-` for a tracking the seed did not have.
fn stage_of(t: Tracking) -> &'static str {
    STAGES
        .iter()
        .find(|(s, _)| *s == t)
        .map_or("-", |(_, stage)| stage)
}

/// Every tracking in the seed's stage order, then any the library added since.
fn stage_order() -> Vec<Tracking> {
    STAGES
        .iter()
        .map(|(t, _)| *t)
        .chain(
            Tracking::ALL
                .into_iter()
                .filter(|t| !STAGES.iter().any(|(s, _)| s == t)),
        )
        .collect()
}

/// Seed 002's micro-benchmark table: `stage | variant | remap | munmap | ...`, each cell the %
/// runtime change against [`UNBATCHED`] (negative = faster).
fn stage_table(report: &Report, benches: &[&str]) -> Table {
    let mut header = vec!["stage (seed)".to_string(), "variant".to_string()];
    header.extend(benches.iter().map(|b| b.to_string()));
    let mut t = Table::new(header);
    for v in stage_order() {
        let mut cells = vec![stage_of(v).to_string(), v.name().to_string()];
        for b in benches {
            let get = |n: &str| report.row(n, 1, "runtime_ms", &extra(b)).map(|r| r.median);
            cells.push(pct_change(get(UNBATCHED), get(v.name())));
        }
        t.row(cells);
    }
    t
}

/// Seed 002's vm-scalability table: `#threads | variant | seq | rand`, each cell the %
/// throughput change against `none` (positive = more pages per second).
fn anon_cow_pct_table(report: &Report, threads: &[usize]) -> Table {
    let mut t = Table::new(["#threads", "variant", "seq", "rand"]);
    for &n in threads {
        for v in &Tracking::ALL[1..] {
            let mut cells = vec![n.to_string(), v.name().to_string()];
            for bench in ANON_COW {
                let get = |name: &str| {
                    report
                        .row(name, n, "pages_per_sec", &extra(bench))
                        .map(|r| r.median)
                };
                cells.push(pct_change(get(VANILLA.name()), get(v.name())));
            }
            t.row(cells);
        }
    }
    t
}

/// `candidate / base - 1` as a signed percentage, `-` when either is missing.
fn pct_change(base: Option<f64>, candidate: Option<f64>) -> String {
    match (base, candidate) {
        (Some(b), Some(c)) if b > 0.0 => format!("{:+.1}%", (c / b - 1.0) * 100.0),
        _ => "-".into(),
    }
}

/// `variant | remap | munmap | ...`: % runtime change against `none`.
fn pct_table(report: &Report, benches: &[&str]) -> Table {
    let mut header = vec!["variant".to_string()];
    header.extend(benches.iter().map(|b| b.to_string()));
    let mut t = Table::new(header);
    for v in &Tracking::ALL[1..] {
        let mut cells = vec![v.name().to_string()];
        for b in benches {
            let get = |n: &str| report.row(n, 1, "runtime_ms", &extra(b)).map(|r| r.median);
            cells.push(match (get(VANILLA.name()), get(v.name())) {
                (Some(base), Some(c)) if base > 0.0 => format!("{:+.1}%", (c / base - 1.0) * 100.0),
                _ => "-".into(),
            });
        }
        t.row(cells);
    }
    t
}

/// `variant | remap | munmap | ...`: median runtimes in ms.
fn ms_table(report: &Report, benches: &[&str]) -> Table {
    let mut header = vec!["variant".to_string()];
    header.extend(benches.iter().map(|b| b.to_string()));
    let mut t = Table::new(header);
    for v in std::iter::once(UNBATCHED).chain(Tracking::ALL.map(|t| t.name())) {
        let mut cells = vec![v.to_string()];
        for b in benches {
            cells.push(
                report
                    .row(v, 1, "runtime_ms", &extra(b))
                    .map_or("-".into(), |r| fmt_num(r.median)),
            );
        }
        t.row(cells);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("8M").unwrap(), 8 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("0").is_err());
        assert!(parse_size("lots").unwrap_err().contains("256M"));
    }

    #[test]
    fn a_tiny_run_checks_out() {
        let args = Args {
            common: CommonArgs {
                threads: Some(crate::harness::parse_threads("1,2").unwrap()),
                runs: Some(1),
                quick: true,
                // At 2 MiB an anon-cow sample lasts microseconds: far too short for the
                // harness's CPU bound on rates to judge (a window under 100 ms is not judged).
                duration: Some(Duration::from_millis(50)),
                no_pin: true,
                no_progress: true,
                ..CommonArgs::default()
            },
            size: Some(2 << 20),
            order: 9,
            benchmarks: Vec::new(),
            no_anon_cow: false,
            no_snapshot: true,
            snapshot_size: None,
            dir: None,
        };
        let r = run(&args).unwrap();
        assert!(r.all_checks_ok(), "{:?}", r.checks);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        // 8 benchmarks x (3 candidates against none + 4 against the unbatched baseline), plus
        // 2 anon-cow x 2 thread counts x 3.
        assert_eq!(r.comparisons.len(), 8 * (3 + 4) + 2 * 2 * 3);
        assert!(r
            .comparisons
            .iter()
            .all(|c| (c.baseline == "none" || c.baseline == UNBATCHED)
                && c.extra.contains_key("benchmark")));
        // The seed's shapes: stages against the unbatched baseline, and seq | rand in %.
        let (title, stages) = &r.tables[0];
        assert!(title.contains(UNBATCHED), "{title}");
        let text = stages.render();
        assert!(
            text.contains("batch (#14)") && text.contains("munmap"),
            "{text}"
        );
        let cells: Vec<&str> = text.lines().nth(2).unwrap().split('|').collect();
        assert!(cells[3].trim().ends_with('%'), "{text}");
        let anon = r
            .tables
            .iter()
            .find(|(t, _)| t.contains("vm-scalability"))
            .unwrap()
            .1
            .render();
        let header: Vec<&str> = anon
            .lines()
            .next()
            .unwrap()
            .split('|')
            .map(str::trim)
            .collect();
        assert_eq!(header, ["#threads", "variant", "seq", "rand"], "{anon}");
        assert!(anon.lines().nth(2).unwrap().ends_with('%'), "{anon}");
        assert!(r
            .row(UNBATCHED, 1, "runtime_ms", &extra("munmap"))
            .is_some());
    }

    #[test]
    fn snapshot_part_runs_checks_and_compares_every_mode() {
        let args = Args {
            common: CommonArgs {
                threads: Some(crate::harness::parse_threads("1").unwrap()),
                runs: Some(1),
                quick: true,
                duration: Some(Duration::from_millis(20)),
                no_pin: true,
                no_progress: true,
                ..CommonArgs::default()
            },
            size: Some(2 << 20),
            order: 9,
            benchmarks: vec!["munmap".into()],
            no_anon_cow: true,
            no_snapshot: false,
            snapshot_size: Some(1 << 20),
            dir: None,
        };
        let r = run(&args).unwrap();
        assert!(r.all_checks_ok(), "{:?}", r.checks);
        for name in [
            "snapshot_mismatches",
            "snapshot_charge_back_to_zero",
            "snapshot_validate",
        ] {
            assert!(r.checks.iter().any(|c| c.name == name), "{name}");
        }
        // 3 snapshot modes against no-snapshot, per tracking.
        let snap = r
            .comparisons
            .iter()
            .filter(|c| c.baseline == snapshot::MODES[0])
            .count();
        assert_eq!(snap, 3 * Tracking::ALL.len());
        let take = &r
            .tables
            .iter()
            .find(|(t, _)| t.contains("take one"))
            .unwrap()
            .1;
        assert!(take.render().contains("1024 MiB file"), "{}", take.render());
    }
}
