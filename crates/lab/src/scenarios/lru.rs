//! `lru`: seed 004, dead folios in the LRU's per-CPU add batches, in miniature.
//!
//! The seed's workload was a production service answering short requests: each request
//! creates page-cache and anonymous folios that die moments later, often before the per-CPU
//! `lru_add` batch that holds them has drained. Here, T pinned threads serve "requests"
//! against one [`FolioCache`] whose memory budget is smaller than its hot data, so reclaim
//! runs all the time:
//!
//! - every `--short-every`-th request creates a short-lived file (`--short-pages` pages, an
//!   in-memory backing, so the measurement is the cache's and not the disk's), reads it
//!   through the cache end to end, and drops it: its folios are truncated while many of them
//!   still wait in an add batch, and reach the drain dead;
//! - the other requests read 16 KiB at a random page of long-lived hot files totalling
//!   `--hot-ratio` times the budget: hits, and misses whose readahead adds live folios while
//!   reclaim evicts cold ones.
//!
//! Variants, interleaved A B C A B C in one process (a fresh cache per measurement):
//!
//! | variant | drain filter | add policy |
//! |---|---|---|
//! | `vanilla` | none: dead folios are linked, then unlinked by the drain's final put | classic (inactive) |
//! | `filtered` | the seed: `freeze(1)`, clear the LRU flags, free without the lock | classic |
//! | `filtered-active` | the seed | add as active (MGLRU's fault path): the condition of the seed's "Bad page state" |
//! | `naive-active` (only with `--with-naive`) | the seed's first version: no flag sanitation | add as active: shows the bad pages |
//!
//! Stable names (see `docs/LAB-RESULTS.md`):
//!
//! | kind | names |
//! |---|---|
//! | metrics | `ops_per_sec` (requests per second, all threads), `folios_added_per_sec` (folios queued for the LRU per second), `dead_pct` (percentage of drained folios that were dead when linked: the seed's "dead %"), `dead_folios_per_min` (dead folios linked per minute: the seed's "dead folios/min"), `folios_per_min` (folios the add drains took per minute: its "total folios/min"), `lock_acquisitions_per_min` (lruvec lock acquisitions per minute; the table's "saved/min" is vanilla's acquisitions per folio times a variant's folios per minute, minus the variant's acquisitions per minute), `lock_acquisitions_per_folio` (lruvec lock acquisitions, for any reason, per folio queued), `reclaim_scanned_per_sec` (folios scanned on the inactive tail), `alloc_stalls_per_sec` (allocations that entered direct reclaim), `bad_page_events` (bad pages the arena's free path found) |
//! | comparisons | baseline `vanilla`, candidate `filtered`, metrics `lock_acquisitions_per_folio` (lower is better; ratio above 1 = fewer) and `ops_per_sec`, one per thread count |
//! | checks | `bad_page_events` (0 over every vanilla, filtered and filtered-active run), `dead_pct_filtered` (dead folios linked over folios drained, in percent, over all `filtered` and `filtered-active` runs together: at most 0.01), `lru_accounting` (after each run, with everything dropped and drained: LRU and arena validate, no folio left), `large_file_read_bounded` (a file three times the budget read end to end twice by two threads, bytes verified, within the budget), and with `--with-naive` `naive_filter_bad_pages` (the naive filter does produce bad pages) |
//!
//! The first table is the seed's headline in its own columns (`dead folios/min | total
//! folios/min | dead % | lock acquisitions saved/min`), per thread count and variant; the
//! requests-per-second and per-variant cost tables follow it.
//!
//! The JSON's `stats` holds the totals of folios queued per variant over all runs (the seed's
//! target asks for at least 10 M folios with add-as-active and no bad page).

use std::sync::atomic::{AtomicBool, Ordering as StdOrdering};
use std::sync::Arc;

use clap::Args as ClapArgs;
use foliocache::backing::MemBacking;
use foliocache::mm::lru::{DrainFilter, LruStats};
use foliocache::mm::Experiment;
use foliocache::{CachedFile, Config, FolioCache};
use serde_json::{json, Map};

use crate::harness::{
    fmt_num, run_threads, seed_table, Bench, CommonArgs, LabResult, Report, Table,
    CHECK_EVERY,
};

/// The seed this scenario reproduces.
pub const SEED: &str = "004_cf50064fd6b281c5.txt";

/// The scenario name (subcommand).
pub const NAME: &str = "lru";

/// One line for `all` and the summary.
pub const ABOUT: &str = "short-lived files churned through a cache under reclaim: dead folios \
at LRU drain, lruvec lock acquisitions per folio, vanilla vs filtered (and add-as-active)";

const PAGE: usize = 4096;
/// Bytes one hot request reads.
const HOT_READ: usize = 16 << 10;

/// Options of `foliocache-lab lru`.
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct Args {
    /// Options every scenario takes.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Memory budget of the cache in MiB (default 16, 4 with --quick).
    #[arg(long)]
    pub budget_mib: Option<usize>,
    /// Hot data as a multiple of the budget (default 1.5: reclaim runs all the time).
    #[arg(long)]
    pub hot_ratio: Option<f64>,
    /// Pages of each short-lived file (default 8).
    #[arg(long)]
    pub short_pages: Option<usize>,
    /// One request in this many is a short-lived file (default 32: about 7% of the folios
    /// drained are dead, the seed's 6.7%).
    #[arg(long)]
    pub short_every: Option<u64>,
    /// Also run the seed's first version (no flag sanitation) with add-as-active, to show the
    /// bad pages it produces.
    #[arg(long)]
    pub with_naive: bool,
    /// Run the cache's background reclaimer (kswapd analog) too; off by default, so every
    /// reclaim is direct reclaim in a worker thread.
    #[arg(long)]
    pub background_reclaim: bool,
}

/// A variant: a drain filter and an add policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Variant {
    name: &'static str,
    filter: DrainFilter,
    add_as_active: bool,
}

/// The library's filters under their own names; the add-as-active ones are the lab's
/// (the filter's name and `-active`).
const VANILLA: Variant = Variant {
    name: DrainFilter::Vanilla.name(),
    filter: DrainFilter::Vanilla,
    add_as_active: false,
};
const FILTERED: Variant = Variant {
    name: DrainFilter::Filtered.name(),
    filter: DrainFilter::Filtered,
    add_as_active: false,
};
const FILTERED_ACTIVE: Variant = Variant {
    name: "filtered-active",
    filter: DrainFilter::Filtered,
    add_as_active: true,
};
const NAIVE_ACTIVE: Variant = Variant {
    name: "naive-active",
    filter: DrainFilter::Naive,
    add_as_active: true,
};

/// Resolved workload parameters.
#[derive(Clone, Copy, Debug)]
struct Workload {
    budget: usize,
    hot_files: usize,
    hot_file_bytes: usize,
    short_pages: usize,
    short_every: u64,
    background: bool,
}

impl Workload {
    fn from(args: &Args, quick: bool) -> LabResult<Workload> {
        let budget = args.budget_mib.unwrap_or(if quick { 4 } else { 16 }) << 20;
        let ratio = args.hot_ratio.unwrap_or(1.5);
        if !(ratio > 0.0 && ratio <= 16.0) {
            return Err(crate::lab_err!(
                "--hot-ratio {ratio} is out of range: give a multiple of the budget in (0, 16]"
            ));
        }
        let short_pages = args.short_pages.unwrap_or(8);
        if short_pages == 0 || short_pages > 1024 {
            return Err(crate::lab_err!(
                "--short-pages {short_pages} is out of range: give 1 to 1024 pages"
            ));
        }
        let short_every = args.short_every.unwrap_or(32).max(1);
        let hot_files = 4;
        let hot_file_bytes =
            ((budget as f64 * ratio) as usize / hot_files).max(HOT_READ) / PAGE * PAGE;
        Ok(Workload {
            budget,
            hot_files,
            hot_file_bytes,
            short_pages,
            short_every,
            background: args.background_reclaim,
        })
    }
}

/// What one measurement produced.
struct Measured {
    ops: u64,
    secs: f64,
    lru: LruStats,
    bad_pages: u64,
    accounting: Result<(), String>,
}

super::scenario!();

/// Runs the scenario: measures, prints the tables, writes JSON and plot if asked.
pub fn run(args: &Args) -> LabResult<Report> {
    let settings = args.common.settings();
    let w = Workload::from(args, settings.quick)?;
    let mut variants = vec![VANILLA, FILTERED, FILTERED_ACTIVE];
    if args.with_naive {
        variants.push(NAIVE_ACTIVE);
    }
    let mut bench = Bench::new(
        NAME,
        SEED,
        &settings,
        json!({
            "variants": variants.iter().map(|v| v.name).collect::<Vec<_>>(),
            "budget_bytes": w.budget,
            "hot_files": w.hot_files,
            "hot_file_bytes": w.hot_file_bytes,
            "hot_read_bytes": HOT_READ,
            "short_pages": w.short_pages,
            "short_every": w.short_every,
            "background_reclaim": w.background,
            "backing": "memory",
        }),
        variants.len(),
    );
    let hot_data: Vec<Arc<MemBacking>> = (0..w.hot_files)
        .map(|k| Arc::new(MemBacking(pattern(w.hot_file_bytes, k as u8))))
        .collect();
    let short_data = Arc::new(MemBacking(pattern(w.short_pages * PAGE, 0xa5)));

    let mut bad_pages = 0u64;
    let mut naive_bad_pages = 0u64;
    let mut accounting_failures = Vec::new();
    let mut queued_total: Map<String, serde_json::Value> = Map::new();
    // (dead folios linked, folios drained) over every filtered run.
    let mut filtered_dead = (0u64, 0u64);
    let none = Map::new();
    bench.measure("", &variants, &none, |il, v, threads, _round| {
        let m = measure(*v, threads, &w, &hot_data, &short_data, &settings)?;
        let secs = m.secs.max(1e-9);
        il.add(v.name, threads, "ops_per_sec", m.ops as f64 / secs);
        il.add(
            v.name,
            threads,
            "folios_added_per_sec",
            m.lru.queued as f64 / secs,
        );
        il.add(v.name, threads, "dead_pct", m.lru.dead_pct());
        // The seed's headline counts are per minute; the run's rates, scaled.
        let per_min = |n: u64| n as f64 * 60.0 / secs;
        il.add(
            v.name,
            threads,
            "dead_folios_per_min",
            per_min(m.lru.dead_inserted),
        );
        il.add(v.name, threads, "folios_per_min", per_min(m.lru.drained));
        il.add(
            v.name,
            threads,
            "lock_acquisitions_per_min",
            per_min(m.lru.lock_acquisitions),
        );
        il.add(
            v.name,
            threads,
            "lock_acquisitions_per_folio",
            m.lru.lock_acquisitions_per_folio(),
        );
        il.add(
            v.name,
            threads,
            "reclaim_scanned_per_sec",
            m.lru.scanned as f64 / secs,
        );
        il.add(
            v.name,
            threads,
            "alloc_stalls_per_sec",
            m.lru.alloc_stalls as f64 / secs,
        );
        il.add(v.name, threads, "bad_page_events", m.bad_pages as f64);
        let total = queued_total.entry(v.name.to_string()).or_insert(json!(0));
        *total = json!(total.as_u64().unwrap_or(0) + m.lru.queued);
        if v.filter == DrainFilter::Naive {
            naive_bad_pages += m.bad_pages;
        } else {
            bad_pages += m.bad_pages;
        }
        if v.filter == DrainFilter::Filtered {
            filtered_dead.0 += m.lru.dead_inserted;
            filtered_dead.1 += m.lru.drained;
        }
        if let Err(e) = m.accounting {
            accounting_failures.push(format!("{}@{threads}: {e}", v.name));
        }
        Ok(())
    })?;

    let report = &mut bench.report;
    for &threads in &settings.threads {
        for metric in ["lock_acquisitions_per_folio", "ops_per_sec"] {
            report.compare(VANILLA.name, FILTERED.name, threads, metric, &none);
        }
    }
    report.check("bad_page_events", json!(bad_pages), bad_pages == 0);
    let dead_pct_filtered = 100.0 * filtered_dead.0 as f64 / filtered_dead.1.max(1) as f64;
    report.check(
        "dead_pct_filtered",
        json!(dead_pct_filtered),
        dead_pct_filtered <= 0.01,
    );
    for e in &accounting_failures {
        eprintln!("lru: accounting: {e}");
    }
    report.check(
        "lru_accounting",
        json!(accounting_failures.len()),
        accounting_failures.is_empty(),
    );
    let large = large_file_read(&settings);
    if let Err(e) = &large {
        eprintln!("lru: large file read: {e}");
    }
    report.check(
        "large_file_read_bounded",
        json!(large
            .as_ref()
            .map_or_else(|e| e.clone(), |p| format!("peak {p} pages"))),
        large.is_ok(),
    );
    if args.with_naive {
        report.check(
            "naive_filter_bad_pages",
            json!(naive_bad_pages),
            naive_bad_pages > 0,
        );
    }
    report.stats = Some(json!({ "folios_queued_total": queued_total }));

    let others: Vec<&str> = variants[2..].iter().map(|v| v.name).collect();
    let tables = vec![
        (
            format!(
                "Seed 004 shape: LRU adds per minute (the seed's per-host averages), medians of \
                 {} runs of {:?}; lock acq saved/min = vanilla's acquisitions per folio times \
                 the variant's folios/min, minus the variant's acquisitions/min",
                settings.runs, settings.duration
            ),
            seed_lru_table(report, &settings.threads, &variants),
        ),
        (
            format!(
                "Requests per second (ops_per_sec), vanilla vs filtered \
                 (medians of {} runs of {:?}; budget {} MiB, hot data {:.1}x the budget)",
                settings.runs,
                settings.duration,
                w.budget >> 20,
                (w.hot_files * w.hot_file_bytes) as f64 / w.budget as f64
            ),
            seed_table(
                report,
                "ops_per_sec",
                VANILLA.name,
                FILTERED.name,
                &others,
                &none,
            ),
        ),
        (
            "LRU costs per variant (medians)".to_string(),
            cost_table(report, &settings.threads, &variants),
        ),
    ];
    bench.finish(&settings, &tables, Some(("ops_per_sec", &none)))
}

/// Seed 004's headline table, `#threads | variant | dead folios/min | total folios/min |
/// dead % | lock acquisitions/min | saved/min`, medians: dead folios are those linked on the
/// LRU with no reference but the batch's, the total is every folio the add drains took, and
/// saved is what vanilla would have taken for the variant's folios per minute (at vanilla's
/// acquisitions per folio) minus what the variant took: the seed's "~2.6M lock acquisitions
/// per minute per host", measured at equal load there, so a variant that merely did less
/// work in its window is not credited with saving.
fn seed_lru_table(report: &Report, threads: &[usize], variants: &[Variant]) -> Table {
    let none = Map::new();
    let mut t = Table::new([
        "#threads",
        "variant",
        "dead folios/min",
        "total folios/min",
        "dead %",
        "lock acq/min",
        "lock acq saved/min",
    ]);
    for &n in threads {
        let med = |v: &str, m: &str| report.row(v, n, m, &none).map(|r| r.median);
        // Vanilla's lock acquisitions per folio the drains took.
        let base = match (
            med(VANILLA.name, "lock_acquisitions_per_min"),
            med(VANILLA.name, "folios_per_min"),
        ) {
            (Some(l), Some(f)) if f > 0.0 => Some(l / f),
            _ => None,
        };
        for v in variants {
            let get = |m: &str| med(v.name, m);
            let locks = get("lock_acquisitions_per_min");
            let saved = match (base, locks, get("folios_per_min")) {
                (Some(b), Some(l), Some(f)) if v.name != VANILLA.name => fmt_num(b * f - l),
                _ => "-".into(),
            };
            t.row([
                n.to_string(),
                v.name.to_string(),
                get("dead_folios_per_min").map_or("-".into(), fmt_num),
                get("folios_per_min").map_or("-".into(), fmt_num),
                get("dead_pct").map_or("-".into(), |x| format!("{x:.4}")),
                locks.map_or("-".into(), fmt_num),
                saved,
            ]);
        }
    }
    t
}

/// `#threads | variant | folios added/s | dead % | lock acq/folio | scanned/s | stalls/s |
/// bad pages`.
fn cost_table(report: &Report, threads: &[usize], variants: &[Variant]) -> Table {
    let none = Map::new();
    let mut t = Table::new([
        "#threads",
        "variant",
        "folios added/s",
        "dead %",
        "lock acq/folio",
        "scanned/s",
        "stalls/s",
        "bad pages",
    ]);
    for &n in threads {
        for v in variants {
            let get = |m: &str| report.row(v.name, n, m, &none).map(|r| r.median);
            t.row([
                n.to_string(),
                v.name.to_string(),
                get("folios_added_per_sec").map_or("-".into(), fmt_num),
                get("dead_pct").map_or("-".into(), |x| format!("{x:.4}")),
                get("lock_acquisitions_per_folio").map_or("-".into(), |x| format!("{x:.4}")),
                get("reclaim_scanned_per_sec").map_or("-".into(), fmt_num),
                get("alloc_stalls_per_sec").map_or("-".into(), fmt_num),
                get("bad_page_events").map_or("-".into(), |x| format!("{x:.0}")),
            ]);
        }
    }
    t
}

/// Bytes of a test file: position-dependent, so a misplaced page is caught.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ ((i / PAGE) as u8) ^ seed)
        .collect()
}

/// A fresh cache for variant `v`. Pages are cached one per folio, as in the seed's counts
/// (its dead %, dead folios and lock acquisitions per folio are per 4 KiB folio, and the
/// workload's 8-page short-lived files are sized to its 6.7% dead): large folios would make
/// each short file one folio and change what is counted (`readseq` measures them).
fn cache_for(v: Variant, budget: usize, background: bool) -> LabResult<FolioCache> {
    let config = Config::new(budget)
        .max_folio_order(0)
        .background_reclaim(background)
        .experiment(
            Experiment::new()
                .drain_filter(v.filter)
                .add_as_active(v.add_as_active),
        )
        .panic_on_bad_page(false);
    FolioCache::new(config).map_err(|e| crate::lab_err!("building the cache: {e}"))
}

/// One measurement: a fresh cache, `threads` workers for the duration, then the accounting.
fn measure(
    v: Variant,
    threads: usize,
    w: &Workload,
    hot_data: &[Arc<MemBacking>],
    short_data: &Arc<MemBacking>,
    settings: &crate::harness::Settings,
) -> LabResult<Measured> {
    let cache = cache_for(v, w.budget, w.background)?;
    let hot: Vec<CachedFile> = hot_data
        .iter()
        .enumerate()
        .map(|(k, d)| cache.open_backing(format!("hot-{k}"), d.clone()))
        .collect::<Result<_, _>>()
        .map_err(|e| crate::lab_err!("opening the hot files: {e}"))?;
    // Warm the cache so the measurement starts in steady state.
    let mut buf = vec![0u8; HOT_READ];
    for f in &hot {
        let mut off = 0u64;
        while off < f.len() && (off as usize) < w.budget / hot.len() {
            f.read_at(&mut buf, off)
                .map_err(|e| crate::lab_err!("warming: {e}"))?;
            off += HOT_READ as u64;
        }
    }
    let before = cache.lru_stats();
    let bad_before = cache.stats().bad_pages;
    let shared = Arc::new((cache.clone(), hot, short_data.clone(), *w));
    let run = run_threads(
        threads,
        settings.pin,
        settings.duration,
        move |tid, stop| worker(&shared, tid, stop),
    );
    let secs = run.elapsed.as_secs_f64();
    let ops: u64 = run.results.iter().sum();
    let after = cache.lru_stats();
    let bad_pages = cache.stats().bad_pages - bad_before;
    let lru = after.since(&before);
    // Everything dropped and drained: no folio may remain, and the lists must be consistent.
    drop(run);
    let accounting = (|| {
        cache.drop_caches();
        let a = cache.validate()?;
        if a.allocated_pages != 0 {
            return Err(format!(
                "{} pages still allocated with every file closed",
                a.allocated_pages
            ));
        }
        Ok(())
    })();
    Ok(Measured {
        ops,
        secs,
        lru,
        bad_pages,
        accounting,
    })
}

/// One worker: requests until `stop`; returns the number served.
fn worker(
    shared: &(FolioCache, Vec<CachedFile>, Arc<MemBacking>, Workload),
    tid: usize,
    stop: &AtomicBool,
) -> u64 {
    let (cache, hot, short_data, w) = shared;
    let hot: Vec<CachedFile> = hot.iter().map(CachedFile::reopen).collect();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ ((tid as u64 + 1) << 32);
    let mut buf = vec![0u8; HOT_READ.max(w.short_pages * PAGE)];
    let hot_pages = (w.hot_file_bytes / PAGE) as u64;
    let mut n = 0u64;
    loop {
        for _ in 0..CHECK_EVERY / 16 {
            n += 1;
            if n % w.short_every == 0 {
                // A short-lived file: create, read whole, drop (truncating its folios).
                let f = cache
                    .open_backing("short", short_data.clone())
                    .expect("opening a short-lived file");
                let len = w.short_pages * PAGE;
                let got = f.read_at(&mut buf[..len], 0).expect("reading a short file");
                assert_eq!(got, len);
                drop(f);
            } else {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let f = &hot[(rng % hot.len() as u64) as usize];
                let page = (rng >> 8) % (hot_pages - (HOT_READ / PAGE) as u64 + 1);
                let got = f
                    .read_at(&mut buf[..HOT_READ], page * PAGE as u64)
                    .expect("reading a hot file");
                assert_eq!(got, HOT_READ);
            }
        }
        if stop.load(StdOrdering::Relaxed) {
            return n;
        }
    }
}

/// The acceptance check: a file three times the budget, read end to end twice by each of two
/// threads, every byte verified. Returns the peak of allocated pages seen (never above the
/// budget by construction; checked anyway).
fn large_file_read(settings: &crate::harness::Settings) -> Result<u64, String> {
    let budget = if settings.quick { 1 << 20 } else { 4 << 20 };
    let cache = cache_for(FILTERED, budget, false).map_err(|e| e.to_string())?;
    let data = Arc::new(MemBacking(pattern(3 * budget + 1234, 7)));
    let file = cache
        .open_backing("large", data.clone())
        .map_err(|e| e.to_string())?;
    let peak = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (file, data, cache, peak) = (file.reopen(), &data, &cache, &peak);
                s.spawn(move || -> Result<(), String> {
                    let mut buf = vec![0u8; 64 << 10];
                    for _ in 0..2 {
                        let mut off = 0usize;
                        while off < data.0.len() {
                            let n = file
                                .read_at(&mut buf, off as u64)
                                .map_err(|e| e.to_string())?;
                            if n == 0 || buf[..n] != data.0[off..off + n] {
                                return Err(format!("wrong bytes at offset {off}"));
                            }
                            off += n;
                            peak.fetch_max(
                                cache.stats().allocated_pages,
                                std::sync::atomic::Ordering::Relaxed,
                            );
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|h| h.join().map_err(|_| "a reader panicked".to_string())?)
            .collect::<Result<Vec<()>, String>>()
    })?;
    let peak = peak.into_inner();
    if peak > (budget / PAGE) as u64 {
        return Err(format!("{peak} pages allocated, over the budget"));
    }
    Ok(peak)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_tiny_run_compares_and_checks() {
        let args = Args {
            common: CommonArgs {
                threads: Some(crate::harness::parse_threads("1,2").unwrap()),
                duration: Some(Duration::from_millis(20)),
                runs: Some(1),
                quick: true,
                no_pin: true,
                no_progress: true,
                ..CommonArgs::default()
            },
            with_naive: true,
            ..Args::default()
        };
        let r = run(&args).unwrap();
        assert!(r.all_checks_ok(), "{:?}", r.checks);
        assert_eq!(r.comparisons.len(), 4);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        // The headline table is the seed's: dead/min, total/min, dead %, locks saved/min.
        let (title, head) = &r.tables[0];
        assert!(title.starts_with("Seed 004 shape"), "{title}");
        let header = head.render().lines().next().unwrap().to_string();
        for col in [
            "dead folios/min",
            "total folios/min",
            "dead %",
            "lock acq saved/min",
        ] {
            assert!(header.contains(col), "{header}");
        }
        let none = Map::new();
        let total = r.row("vanilla", 1, "folios_per_min", &none).unwrap().median;
        let dead = r.row("vanilla", 1, "dead_folios_per_min", &none).unwrap();
        assert!(total > 0.0 && dead.median <= total);
    }
}
