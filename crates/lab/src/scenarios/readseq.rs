//! `readseq`: seed 001's workload (RocksDB `db_bench readseq`), vanilla one-by-one readahead
//! insertion against the seed's batched insertion.
//!
//! # The seed's workload and where its 1.51x came from
//!
//! Seed 001 ran `db_bench --benchmarks=readseq --threads=32 --num_multi_db=32
//! --value_size=8192` on a 32-vCPU Ice Lake: 32 threads streaming through 8 KiB values, so
//! every page the threads touch arrives by readahead. In the vanilla kernel
//! `page_cache_ra_unbounded` allocates each page of a window and inserts it into the file's
//! XArray with its own `xa_lock_irq` hold: per page, a lock acquisition with interrupts
//! disabled, and the lock word and XArray node cache lines pulled to whichever of the 32 CPUs
//! runs that file's readahead next. The seed preallocates the window and inserts it with
//! `filemap_add_folio_range` under one lock hold; the authors measured 2.18x the IPC inside
//! `page_cache_ra_unbounded` (lock excluded) and 1.51x db_bench throughput, P50 latency
//! -63.9%, P99 -31.4%. Most of that gain is the removal of 31 of every 32 lock round trips
//! *under cross-CPU cache-line traffic at 32 threads*.
//!
//! # What a 2-core machine can show
//!
//! Two threads cannot recreate 32 CPUs bouncing lock lines. What remains visible here:
//! the uncontended cost of taking and releasing the index lock and re-walking the tree once
//! per page instead of once per window (the **insertion phase**, measured alone from
//! preallocated folios, shows that directly), and, in the `shared-file` layout, two threads
//! contending for one file's index lock. End to end, each window also copies 128 KiB from
//! the backing file (a `preadv` from tmpfs, tens of microseconds), which dwarfs the insertion
//! cost, so the end-to-end ratio on 2 cores is expected to be small; it must not be below 1.
//! Run with `--threads 1:32:x2` on a big machine to approach the seed's conditions.
//!
//! # What this scenario runs
//!
//! Per layout, thread count and variant, interleaved (single, batched, single, ...):
//!
//! - **end to end**: T pinned threads each read their region sequentially in `--value-size`
//!   reads through `CachedFile::read_at`, on a cold cache (every file closed before, so its
//!   pages are gone), one pass; ops/s, per-read latency p50/p75/p99 (an HDR histogram), and
//!   index lock acquisitions per inserted page;
//! - **insertion phase**: T pinned threads each insert their region's pages into an index in
//!   windows of `--ra-pages`, from folios preallocated beforehand, the way each mode does
//!   during readahead (no I/O, no allocation in the timed part); pages inserted per second,
//!   the fastest of 5 repetitions per run (one lasts well under a millisecond: on a shared
//!   machine a preempted repetition would measure the scheduler).
//!
//! Layouts: `per-thread-file` (thread t streams file t; one index per thread) and
//! `shared-file` (all threads stream disjoint ranges of one file: one index, one lock).
//!
//! # Large folios (issue 14)
//!
//! Two more variants read the same files end to end: `order0`, today's batched insertion with
//! every page in its own 4 KiB folio (the seed's `batched` configuration), and `large`, the
//! same with large folios (`page_cache_ra_order`: folios as large as the window and the
//! alignment allow). Per MiB read they report the refcount operations of the read side (two
//! per folio lookup: the speculative get and the put), the LRU entries made (one per folio
//! inserted) and the index lock acquisitions. `large` is compared with `order0` as the
//! candidate against its baseline. The insertion phase is measured for `single` and
//! `batched` only (it inserts preallocated pages).
//!
//! # Files and I/O
//!
//! The files live in `--dir` (default `/dev/shm`, the tmpfs the seed's numbers compare
//! with); `--io` and `--direct` choose foliocache's I/O engine and direct I/O
//! ([`IoArgs`]). The output's first line names the file system, the engine the cache got
//! and whether its files are read direct or buffered; `params` records them (`filesystem`,
//! `io_engine`, `io_mode`, `direct_io_align`, see `docs/LAB-RESULTS.md`). Before every cold
//! pass the kernel's copy of the files is dropped too ([`drop_kernel_cache`]; a no-op on
//! tmpfs), so that on a disk file system a pass reads from the disk.
//!
//! # Output
//!
//! - variants: `single` (vanilla), `batched` (the seed), that is every mode of the library's
//!   `InsertMode::ALL` under its stable name, then `order0` and `large` (issue 14)
//!   ([`Fill::all`]);
//! - metrics: `ops_per_sec`, `p50_latency_ns`, `p75_latency_ns`, `p99_latency_ns`,
//!   `lock_acquisitions_per_page`, `insert_pages_per_sec`,
//!   `insert_lock_acquisitions_per_page`; every row and comparison has a `layout` field;
//! - comparisons: `batched` vs `single` for `ops_per_sec`, `p50_latency_ns`,
//!   `p75_latency_ns`, `p99_latency_ns` and `insert_pages_per_sec`, per thread count and
//!   layout; `large` vs `order0` for `ops_per_sec`, `p50_latency_ns`, `p99_latency_ns`,
//!   `refcount_ops_per_mib`, `lru_entries_per_mib` and `index_lock_acquisitions_per_mib`;
//! - tables: the seed's throughput table (ops/s), the seed's latency table (`percentile |
//!   latency before | latency after | reduction (%)` for P50, P75, P99, reduction =
//!   `(before - after) / before`), the insertion phase alone, and latency with lock counts;
//! - checks: `wrong_reads` = 0 (every read's length and first and last 8 bytes are checked,
//!   every 64th read in full), `bad_page_events` = 0, `accounting_baseline` (pages left in
//!   the caches after every file was closed) = 0, `batched_lock_acquisitions_per_page` at
//!   most 1/16 with the default 32-page window.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use foliocache::mm::folio::{Arena, ArenaConfig, FolioLocked};
use foliocache::mm::index::Index;
use foliocache::mm::readahead::insert_preallocated;
use foliocache::mm::readahead::InsertMode;
use foliocache::mm::refcount::RefStrategy;
use foliocache::mm::Experiment;
use foliocache::{CachedFile, Config, FolioCache};
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use super::files::{cache_stats_json, default_dir, LabFile};
use crate::harness::{
    drop_kernel_cache, fmt_num, merge, seed_order, seed_table, Bench, CommonArgs, IoArgs, IoSetup,
    LabResult, Report, Table,
};

/// The seed reproduced.
pub const SEED: &str = "001_1b60c5657c9329ae.txt";

/// Subcommand name.
pub const NAME: &str = "readseq";

/// One line on what it measures.
pub const ABOUT: &str = "db_bench readseq: threads stream 8 KiB values through a cold cache; \
one-by-one vs batched readahead insertion, per-thread files and one shared file";

/// The seed's vanilla insertion (one index lock hold per page), the tables' "before".
pub const VANILLA: InsertMode = InsertMode::Single;

/// The seed's batched insertion (one hold per window), "after"; also how issue 14's
/// variants insert.
pub const PATCHED: InsertMode = InsertMode::Batched;

/// A variant: how readahead inserts its folios, and how large they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Seed 001's variants: an insertion mode of the library, 4 KiB folios; named by the mode.
    Insert(InsertMode),
    /// Issue 14's variants: [`PATCHED`] insertion with 4 KiB folios (`order0`, the baseline)
    /// or large folios (`large`).
    Folios {
        /// Folios as large as the window and the alignment allow.
        large: bool,
    },
}

impl Fill {
    /// Issue 14's baseline.
    pub const ORDER0: Fill = Fill::Folios { large: false };
    /// Issue 14's candidate.
    pub const LARGE: Fill = Fill::Folios { large: true };

    /// Every variant in table order: every mode of [`InsertMode::ALL`] (vanilla, then
    /// patched, then any other, [`seed_order`]), then issue 14's baseline and candidate.
    pub fn all() -> Vec<Fill> {
        seed_order(VANILLA, PATCHED)
            .into_iter()
            .map(Fill::Insert)
            .chain([Fill::ORDER0, Fill::LARGE])
            .collect()
    }

    /// The stable name: the insertion mode's, `order0` or `large`.
    pub fn name(self) -> &'static str {
        match self {
            Fill::Insert(m) => m.name(),
            Fill::Folios { large: false } => "order0",
            Fill::Folios { large: true } => "large",
        }
    }

    /// How readahead inserts.
    fn mode(self) -> InsertMode {
        match self {
            Fill::Insert(m) => m,
            Fill::Folios { .. } => PATCHED,
        }
    }

    /// Whether files are cached in large folios.
    fn large_folios(self) -> bool {
        self == Fill::LARGE
    }

    /// Whether its insertion phase is measured (seed 001's variants).
    fn seed(self) -> bool {
        matches!(self, Fill::Insert(_))
    }
}

/// Layout names.
pub const LAYOUTS: [&str; 2] = ["per-thread-file", "shared-file"];

/// Options of `readseq`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Common options. `--duration` is not used: each run is one cold pass over the data.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Where the files are and how foliocache reads them (`--dir`, default /dev/shm; `--io`,
    /// `--direct`).
    #[command(flatten)]
    pub io: IoArgs,
    /// Bytes per read (the seed: 8 KiB values).
    #[arg(long, default_value_t = 8192)]
    pub value_size: usize,
    /// MiB each thread streams per run (default 64, or 4 with --quick).
    #[arg(long)]
    pub mib_per_thread: Option<u64>,
    /// Maximum readahead window in 4 KiB pages (the kernel default: 32).
    #[arg(long, default_value_t = 32)]
    pub ra_pages: usize,
    /// Only this layout (`per-thread-file` or `shared-file`).
    #[arg(long)]
    pub layout: Option<String>,
}

super::scenario!();

/// The files of one layout, each thread's region in them.
struct Layout {
    files: Vec<LabFile>,
    region: u64,
}

impl Layout {
    /// (file, first byte) of thread `t`'s region.
    fn region_of(&self, t: usize) -> (&LabFile, u64) {
        if self.files.len() == 1 {
            (&self.files[0], t as u64 * self.region)
        } else {
            (&self.files[t], 0)
        }
    }
}

/// Results of one end-to-end pass.
struct Pass {
    ops_per_sec: f64,
    p50: f64,
    p75: f64,
    p99: f64,
    lock_per_page: f64,
    refcount_ops_per_mib: f64,
    lru_entries_per_mib: f64,
    locks_per_mib: f64,
    wrong: u64,
}

/// Runs the scenario.
pub fn run(args: &Args) -> LabResult<Report> {
    let settings = args.common.settings();
    if args.value_size == 0 || args.value_size > 1 << 20 {
        return Err(crate::lab_err!(
            "--value-size {} is out of range: use 1 byte to 1 MiB (the seed: 8192)",
            args.value_size
        ));
    }
    if args.ra_pages == 0 || args.ra_pages > foliocache::MAX_RA_PAGES {
        return Err(crate::lab_err!(
            "--ra-pages {} is out of range: use 1..={} (the kernel default: 32)",
            args.ra_pages,
            foliocache::MAX_RA_PAGES
        ));
    }
    let layouts: Vec<&'static str> = match &args.layout {
        None => LAYOUTS.to_vec(),
        Some(l) => match LAYOUTS.iter().find(|n| *n == l) {
            Some(n) => vec![*n],
            None => {
                return Err(crate::lab_err!(
                    "unknown --layout `{l}`: use per-thread-file or shared-file"
                ))
            }
        },
    };
    let mib = args
        .mib_per_thread
        .unwrap_or(if settings.quick { 4 } else { 64 })
        .max(1);
    let region = mib << 20;
    let max_threads = *settings.threads.iter().max().unwrap_or(&1);
    let dir = args.io.dir_or(default_dir);
    let setup = IoSetup::probe(&args.io, &dir)?;
    // Budget: every thread's region plus slack; the caches never need to evict.
    let budget = (max_threads as u64 * region + (8 << 20)) as usize;

    // Each measurement is one end-to-end pass and, for seed 001's variants, an insertion
    // phase: about 6 ms per MiB streamed.
    let variants = Fill::all();
    let names: Vec<&str> = variants.iter().map(|v| v.name()).collect();
    let steps = (layouts.len() * settings.threads.len() * settings.runs * variants.len()) as u64;
    let mut bench = Bench::with_steps(
        NAME,
        SEED,
        &settings,
        merge(
            json!({
                "value_size": args.value_size,
                "mib_per_thread": mib,
                "ra_pages": args.ra_pages,
                "layouts": layouts,
                "runs_are_cold_passes": true,
            }),
            setup.params(),
        ),
        steps,
        Duration::from_millis(mib * 6),
    );
    println!("{NAME}: {}", setup.header());
    let mut tables = Vec::new();
    let mut wrong = 0u64;
    let mut bad_pages = 0u64;
    let mut leftover = 0u64;
    let mut batched_lock_per_page: f64 = 0.0;
    let mut stats = Map::new();

    for &lname in &layouts {
        let layout = if lname == "shared-file" {
            Layout {
                files: vec![LabFile::create(
                    &dir,
                    "readseq-shared",
                    0,
                    region * max_threads as u64,
                )?],
                region,
            }
        } else {
            Layout {
                files: (0..max_threads)
                    .map(|t| LabFile::create(&dir, &format!("readseq-{t}"), t as u64 + 1, region))
                    .collect::<LabResult<_>>()?,
                region,
            }
        };
        // One cache per variant, its frames faulted in once so that page faults of the
        // arena's first touch are not measured.
        let caches: Vec<(Fill, FolioCache)> = variants
            .iter()
            .map(|&v| {
                let c = FolioCache::new(
                    args.io.apply(Config::new(budget))
                        .experiment(
                            Experiment::new()
                                .insert_mode(v.mode())
                                .strategy(RefStrategy::LockedBit),
                        )
                        .readahead_pages(args.ra_pages)
                        .max_folio_order(if v.large_folios() {
                            foliocache::mm::folio::MAX_ORDER
                        } else {
                            0
                        })
                        .panic_on_bad_page(false),
                )
                .map_err(|e| crate::lab_err!("{e}"))?;
                c.populate()
                    .map_err(|e| crate::lab_err!("faulting in the budget: {e}"))?;
                Ok((v, c))
            })
            .collect::<LabResult<_>>()?;
        let insert_arena = Arc::new(
            Arena::new(ArenaConfig::new(
                (max_threads as u64 * region + (1 << 20)) as usize,
                RefStrategy::LockedBit,
            ))
            .map_err(|e| crate::lab_err!("{e}"))?,
        );
        insert_arena
            .populate()
            .map_err(|e| crate::lab_err!("faulting in the insertion arena: {e}"))?;

        let mut extra = Map::new();
        extra.insert("layout".into(), Value::String(lname.into()));
        bench.measure(lname, &variants, &extra, |il, &fill, n, _round| {
            let cache = &caches.iter().find(|(c, _)| *c == fill).expect("cache").1;
            let v = fill.name();
            let p = end_to_end(cache, &layout, n, args.value_size, settings.pin)?;
            wrong += p.wrong;
            il.add(v, n, "ops_per_sec", p.ops_per_sec);
            il.add(v, n, "p50_latency_ns", p.p50);
            il.add(v, n, "p75_latency_ns", p.p75);
            il.add(v, n, "p99_latency_ns", p.p99);
            il.add(v, n, "lock_acquisitions_per_page", p.lock_per_page);
            il.add(v, n, "refcount_ops_per_mib", p.refcount_ops_per_mib);
            il.add(v, n, "lru_entries_per_mib", p.lru_entries_per_mib);
            il.add(v, n, "index_lock_acquisitions_per_mib", p.locks_per_mib);
            if fill == Fill::Insert(PATCHED) && lname == "per-thread-file" {
                batched_lock_per_page = batched_lock_per_page.max(p.lock_per_page);
            }
            if !fill.seed() {
                return Ok(());
            }
            let (rate, locks) = insertion_phase(
                &insert_arena,
                lname == "shared-file",
                n,
                region,
                args.ra_pages,
                fill.mode(),
                settings.pin,
            );
            il.add(v, n, "insert_pages_per_sec", rate);
            il.add(v, n, "insert_lock_acquisitions_per_page", locks);
            Ok(())
        })?;
        let report = &mut bench.report;
        for &n in &settings.threads {
            for metric in [
                "ops_per_sec",
                "p50_latency_ns",
                "p75_latency_ns",
                "p99_latency_ns",
                "insert_pages_per_sec",
            ] {
                report.compare(VANILLA.name(), PATCHED.name(), n, metric, &extra);
            }
            for metric in [
                "ops_per_sec",
                "p50_latency_ns",
                "p99_latency_ns",
                "refcount_ops_per_mib",
                "lru_entries_per_mib",
                "index_lock_acquisitions_per_mib",
            ] {
                report.compare(Fill::ORDER0.name(), Fill::LARGE.name(), n, metric, &extra);
            }
        }
        for (v, c) in &caches {
            // Every file is closed: its inode, unused now, goes with its pages (the inode
            // cache keeps them otherwise); folios truncated while queued in a per-CPU LRU
            // batch are freed at its drain.
            c.drop_caches();
            c.lru_add_drain_all();
            let s = c.stats();
            bad_pages += s.bad_pages;
            leftover += s.allocated_pages;
            stats.insert(format!("{lname}/{}", v.name()), cache_stats_json(c));
        }
        let ia = insert_arena.stats();
        bad_pages += ia.bad_pages;
        leftover += ia.allocated_pages;

        tables.push((
            format!(
                "readseq [{lname}] ops/s ({} B values, cold cache, all threads; seed 001's throughput)",
                args.value_size
            ),
            seed_table(
                report,
                "ops_per_sec",
                VANILLA.name(),
                PATCHED.name(),
                &names[2..InsertMode::ALL.len()],
                &extra,
            ),
        ));
        tables.push((
            format!("readseq [{lname}] insertion phase alone: pages inserted/s from preallocated folios"),
            seed_table(
                report,
                "insert_pages_per_sec",
                VANILLA.name(),
                PATCHED.name(),
                &names[2..InsertMode::ALL.len()],
                &extra,
            ),
        ));
        tables.push((
            format!(
                "readseq [{lname}] seed 001 shape: read latency percentiles, before ({VANILLA}) \
                 and after ({PATCHED}), reduction = (before - after) / before"
            ),
            seed_latency_table(report, &settings.threads, &extra),
        ));
        tables.push((
            format!(
                "readseq [{lname}] read latency (ns) and index lock acquisitions per inserted page"
            ),
            latency_table(report, &settings.threads, &names, &extra),
        ));
        tables.push((
            format!(
                "readseq [{lname}] large folios (large) against 4 KiB folios (order0), per MiB read"
            ),
            large_table(report, &settings.threads, &extra),
        ));
    }
    let report = &mut bench.report;
    report.stats = Some(Value::Object(stats));
    report.check("wrong_reads", wrong, wrong == 0);
    report.check("bad_page_events", bad_pages, bad_pages == 0);
    report.check("accounting_baseline", leftover, leftover == 0);
    let limit = 1.0 / 16.0;
    report.check(
        "batched_lock_acquisitions_per_page",
        batched_lock_per_page,
        args.ra_pages < 32
            || !layouts.contains(&"per-thread-file")
            || batched_lock_per_page <= limit,
    );
    let mut plot_extra = Map::new();
    plot_extra.insert("layout".into(), Value::String(layouts[0].into()));
    bench.finish(&settings, &tables, Some(("ops_per_sec", &plot_extra)))
}

/// Seed 001's latency table, `#threads | percentile | latency (before) | latency (after) |
/// reduction (%)`, one line per percentile (P50, P75, P99) and thread count: before is
/// `single`, after is `batched`, the reduction `(before - after) / before` (positive when
/// batching made reads faster), as the seed reports it.
fn seed_latency_table(report: &Report, threads: &[usize], extra: &Map<String, Value>) -> Table {
    let mut t = Table::new([
        "#threads".to_string(),
        "percentile".to_string(),
        format!("latency before ({VANILLA}, ns)"),
        format!("latency after ({PATCHED}, ns)"),
        "reduction (%)".to_string(),
    ]);
    for &n in threads {
        for (name, metric) in [
            ("P50", "p50_latency_ns"),
            ("P75", "p75_latency_ns"),
            ("P99", "p99_latency_ns"),
        ] {
            let get = |v: &str| report.row(v, n, metric, extra).map(|r| r.median);
            let (before, after) = (get(VANILLA.name()), get(PATCHED.name()));
            t.row([
                n.to_string(),
                name.to_string(),
                before.map_or("-".into(), fmt_num),
                after.map_or("-".into(), fmt_num),
                reduction_pct(before, after),
            ]);
        }
    }
    t
}

/// `(before - after) / before` in percent, `-` when either is missing or before is zero.
fn reduction_pct(before: Option<f64>, after: Option<f64>) -> String {
    match (before, after) {
        (Some(b), Some(a)) if b > 0.0 => format!("{:.2}", (b - a) / b * 100.0),
        _ => "-".into(),
    }
}

/// `#threads | variant | ops/s | p50 | refcount ops/MiB | LRU entries/MiB | index locks/MiB`
/// for issue 14's variants.
fn large_table(report: &Report, threads: &[usize], extra: &Map<String, Value>) -> Table {
    medians_table(
        report,
        threads,
        &[Fill::ORDER0.name(), Fill::LARGE.name()],
        extra,
        &[
            ("ops/s", "ops_per_sec"),
            ("p50 (ns)", "p50_latency_ns"),
            ("refcount ops/MiB", "refcount_ops_per_mib"),
            ("LRU entries/MiB", "lru_entries_per_mib"),
            ("index locks/MiB", "index_lock_acquisitions_per_mib"),
        ],
    )
}

/// `#threads | variant | p50 | p75 | p99 | lock/page` for one layout.
fn latency_table(
    report: &Report,
    threads: &[usize],
    variants: &[&str],
    extra: &Map<String, Value>,
) -> Table {
    medians_table(
        report,
        threads,
        variants,
        extra,
        &[
            ("p50 (ns)", "p50_latency_ns"),
            ("p75 (ns)", "p75_latency_ns"),
            ("p99 (ns)", "p99_latency_ns"),
            ("lock acq/page", "lock_acquisitions_per_page"),
            ("insert lock acq/page", "insert_lock_acquisitions_per_page"),
        ],
    )
}

/// `#threads | variant | <column>...`: a row per thread count and variant, each cell the
/// median of the column's metric (`-` where the report has none).
fn medians_table(
    report: &Report,
    threads: &[usize],
    variants: &[&str],
    extra: &Map<String, Value>,
    columns: &[(&str, &str)],
) -> Table {
    let mut t = Table::new(
        ["#threads", "variant"]
            .into_iter()
            .chain(columns.iter().map(|&(head, _)| head)),
    );
    for &n in threads {
        for &v in variants {
            let cells = columns.iter().map(|&(_, metric)| {
                report
                    .row(v, n, metric, extra)
                    .map_or("-".to_string(), |r| fmt_num(r.median))
            });
            t.row([n.to_string(), v.to_string()].into_iter().chain(cells));
        }
    }
    t
}

fn spawn_pinned<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    pin: bool,
    i: usize,
    f: impl FnOnce() -> T + Send + 'scope,
) -> std::thread::ScopedJoinHandle<'scope, T> {
    std::thread::Builder::new()
        .name(format!("readseq-{i}"))
        .spawn_scoped(scope, move || {
            if pin {
                foliocache::mm::sync::pin_to_cpu(i);
            }
            f()
        })
        .expect("spawning a worker")
}

/// One cold pass: every thread streams its region through its own handle.
fn end_to_end(
    cache: &FolioCache,
    layout: &Layout,
    threads: usize,
    value: usize,
    pin: bool,
) -> LabResult<Pass> {
    // Cold: the previous pass's files, closed, stay cached in the inode cache until dropped
    // (`echo 3 > /proc/sys/vm/drop_caches` between the kernel's runs); and the kernel's copy
    // of the files goes too, so that a buffered read comes from the disk (on tmpfs nothing
    // goes: its pages are the file).
    cache.drop_caches();
    for f in &layout.files {
        drop_kernel_cache(f.path())
            .map_err(|e| crate::lab_err!("dropping {} from the kernel's cache: {e}", f.path().display()))?;
    }
    let handles: Vec<(CachedFile, &LabFile, u64)> = (0..threads)
        .map(|t| {
            let (file, start) = layout.region_of(t);
            cache
                .open(file.path())
                .map(|h| (h, file, start))
                .map_err(|e| crate::lab_err!("{e}"))
        })
        .collect::<LabResult<_>>()?;
    if handles.iter().any(|(h, _, _)| h.cached_pages() != 0) {
        return Err(crate::lab_err!("readseq: the cache is not cold"));
    }
    let before = cache.stats();
    let barrier = Barrier::new(threads + 1);
    let region = layout.region;
    let (elapsed, results) = std::thread::scope(|s| {
        let workers: Vec<_> = handles
            .iter()
            .enumerate()
            .map(|(i, (h, file, start))| {
                let barrier = &barrier;
                spawn_pinned(s, pin, i, move || {
                    let mut hist = Histogram::<u64>::new(3).expect("histogram");
                    let mut buf = vec![0u8; value];
                    let (mut ops, mut wrong) = (0u64, 0u64);
                    let end = start + region;
                    barrier.wait();
                    let began = Instant::now();
                    let mut off = *start;
                    while off < end {
                        let len = value.min((end - off) as usize);
                        let t0 = Instant::now();
                        let r = h.read_at(&mut buf[..len], off);
                        let ns = t0.elapsed().as_nanos() as u64;
                        let _ = hist.record(ns.max(1));
                        match r {
                            Ok(n) if n == len && check(file, &buf[..n], off, ops % 64 == 0) => {}
                            _ => wrong += 1,
                        }
                        ops += 1;
                        off += len as u64;
                    }
                    (ops, wrong, hist, began, Instant::now())
                })
            })
            .collect();
        barrier.wait();
        let results: Vec<_> = workers
            .into_iter()
            .map(|w| w.join().expect("readseq worker"))
            .collect();
        // Wall time from the first worker's start to the last one's end (measured by the
        // workers: the main thread may not run while they do).
        let began = results.iter().map(|r| r.3).min().expect("a worker");
        let ended = results.iter().map(|r| r.4).max().expect("a worker");
        (ended - began, results)
    });
    let after = cache.stats();
    drop(handles);
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let (mut ops, mut wrong) = (0u64, 0u64);
    for (o, w, h, _, _) in results {
        ops += o;
        wrong += w;
        let _ = hist.add(h);
    }
    let inserted = after.index_pages_inserted - before.index_pages_inserted;
    let locks = after.index_lock_acquisitions - before.index_lock_acquisitions;
    let mib = (threads as u64 * region) as f64 / (1 << 20) as f64;
    // Every folio lookup that hit is one speculative get and one put.
    let refs = 2 * (after.hits - before.hits);
    let folios = after.readahead_folios - before.readahead_folios
        + (after.single_page_reads - before.single_page_reads);
    Ok(Pass {
        ops_per_sec: crate::harness::per_sec(ops as f64, elapsed),
        p50: hist.value_at_quantile(0.50) as f64,
        p75: hist.value_at_quantile(0.75) as f64,
        p99: hist.value_at_quantile(0.99) as f64,
        lock_per_page: if inserted == 0 {
            0.0
        } else {
            locks as f64 / inserted as f64
        },
        refcount_ops_per_mib: refs as f64 / mib,
        lru_entries_per_mib: folios as f64 / mib,
        locks_per_mib: locks as f64 / mib,
        wrong,
    })
}

/// Checks a read: its first and last 8 bytes always, every byte when `full`.
fn check(file: &LabFile, got: &[u8], off: u64, full: bool) -> bool {
    use super::files::pattern;
    let n = got.len();
    if full {
        return got
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(file.file_no, off + i as u64));
    }
    let ends = (0..8.min(n)).chain(n.saturating_sub(8)..n);
    ends.into_iter()
        .all(|i| got[i] == pattern(file.file_no, off + i as u64))
}

/// Repetitions of the insertion phase per run; the run reports the fastest. One repetition
/// lasts well under a millisecond, so on a shared machine a single preemption would measure
/// the scheduler rather than the index.
const INSERT_REPS: usize = 5;

/// The insertion phase alone: each thread inserts its region's pages in windows of
/// `window` pages from preallocated folios ([`INSERT_REPS`] times, fastest kept). Returns
/// (pages/s over all threads, index lock acquisitions per inserted page).
fn insertion_phase(
    arena: &Arc<Arena>,
    shared: bool,
    threads: usize,
    region: u64,
    window: usize,
    mode: InsertMode,
    pin: bool,
) -> (f64, f64) {
    let pages_per_thread = (region / 4096) as usize;
    let indexes: Vec<Index> = (0..if shared { 1 } else { threads })
        .map(|_| Index::new(arena.clone()))
        .collect();
    let barrier = Barrier::new(threads + 1);
    let (mut locks, mut pages) = (0u64, 0u64);
    let best = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, indexes) = (&barrier, &indexes);
                spawn_pinned(s, pin, t, move || {
                    let (index, first) = if shared {
                        (&indexes[0], (t * pages_per_thread) as u64)
                    } else {
                        (&indexes[t], 0)
                    };
                    let mut times = Vec::with_capacity(INSERT_REPS);
                    for _ in 0..INSERT_REPS {
                        let folios: Vec<FolioLocked<'_>> = (0..pages_per_thread)
                            .map(|_| {
                                arena
                                    .alloc(0)
                                    .expect("the insertion arena holds every region")
                                    .try_lock()
                                    .expect("a new folio is unlocked")
                            })
                            .collect();
                        barrier.wait(); // A: everyone preallocated
                        let began = Instant::now();
                        let mut inserted = 0;
                        for (w, chunk) in folios.chunks(window).enumerate() {
                            let start = first + (w * window) as u64;
                            inserted += insert_preallocated(index, start, chunk, mode);
                        }
                        let ended = Instant::now();
                        assert_eq!(inserted, pages_per_thread, "every slot was free");
                        // Unlock and drop the caller's references; the index keeps its own.
                        drop(folios);
                        times.push((began, ended));
                        barrier.wait(); // B: everyone inserted
                        barrier.wait(); // C: the indexes were emptied
                    }
                    times
                })
            })
            .collect();
        // (lock acquisitions, pages inserted) of each index after its last truncation.
        let mut prev = vec![(0u64, 0u64); indexes.len()];
        for _ in 0..INSERT_REPS {
            barrier.wait(); // A
            barrier.wait(); // B
            for (index, prev) in indexes.iter().zip(&mut prev) {
                // Count the insertion's acquisitions, not the truncation's.
                let before = index.stats();
                locks += before.lock_acquisitions - prev.0;
                pages += before.pages_inserted - prev.1;
                index.truncate(0, u64::MAX);
                let after = index.stats();
                *prev = (after.lock_acquisitions, after.pages_inserted);
            }
            barrier.wait(); // C
        }
        let times: Vec<Vec<(Instant, Instant)>> = workers
            .into_iter()
            .map(|w| w.join().expect("insertion worker"))
            .collect();
        (0..INSERT_REPS)
            .map(|r| {
                let began = times.iter().map(|t| t[r].0).min().expect("a worker");
                let ended = times.iter().map(|t| t[r].1).max().expect("a worker");
                ended - began
            })
            .min()
            .expect("a repetition")
    });
    let total = (threads * pages_per_thread) as f64;
    (
        crate::harness::per_sec(total, best),
        if pages == 0 {
            0.0
        } else {
            locks as f64 / pages as f64
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variants_are_the_librarys_modes_then_issue_14s() {
        let names: Vec<_> = Fill::all().into_iter().map(Fill::name).collect();
        assert_eq!(names, ["single", "batched", "order0", "large"]);
        for m in InsertMode::ALL {
            assert!(names.contains(&m.name()), "{m} is measured");
            assert_eq!(Fill::Insert(m).mode(), m);
        }
        assert!(Fill::LARGE.large_folios() && !Fill::ORDER0.large_folios());
    }

    #[test]
    fn the_latency_table_has_the_seeds_reduction_column() {
        let mut report = Report::new(NAME, SEED, json!({}));
        let mut il = crate::harness::Interleaver::new();
        for (v, p50, p99) in [
            (VANILLA.name(), 6150.0, 507_950.0),
            (PATCHED.name(), 2220.0, 348_540.0),
        ] {
            il.add(v, 32, "p50_latency_ns", p50);
            il.add(v, 32, "p99_latency_ns", p99);
        }
        let mut extra = Map::new();
        extra.insert("layout".into(), json!("shared-file"));
        report.add_rows(&il, &extra);
        let text = seed_latency_table(&report, &[32], &extra).render();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("reduction (%)"), "{text}");
        // The seed's own figures: P50 6.15 -> 2.22 us, P99 507.95 -> 348.54 us.
        assert!(
            lines[2].starts_with("32") && lines[2].ends_with("63.90"),
            "{text}"
        );
        assert!(
            lines[3].contains("P75") && lines[3].ends_with('-'),
            "{text}"
        );
        assert!(
            lines[4].contains("P99") && lines[4].ends_with("31.38"),
            "{text}"
        );
    }
}
