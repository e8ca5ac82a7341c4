//! `write`: the write path, the kernel's buffered I/O against foliocache, on the three write
//! patterns of a storage engine (issue 13; no seed thread measured it).
//!
//! # The workloads
//!
//! | workload | what a worker does | one operation | sync |
//! |---|---|---|---|
//! | `seqwrite` | writes a new file of its own (`--seq-mib`, default 128 MiB; 32 with `--quick`) from start to end | one 1 MiB write | one `sync_data` after the last write (an SST flush) |
//! | `randwrite` | overwrites 4 KiB pages of one file all workers share (`--rand-mib`, default 256 MiB; 32 with `--quick`) at Zipf-distributed page numbers (`--skew`, default 0.99, the hot pages scattered over the file) | one 4 KiB write | `sync_data` after every 1,000 of its writes (a B-tree's page updates) |
//! | `wal` | appends 4 KiB records to one log all workers share | one append | `sync_data` after every 64 KiB it appended (a commit log) |
//!
//! Sharing is the same for both variants: `seqwrite` gives every worker a file of its own (each
//! flush is its own SST), `randwrite` and `wal` share one file between the workers, each with
//! its own descriptor (kernel) or handle (foliocache), as the threads of one engine share a
//! B-tree file and a log. In `randwrite` worker `t` of `N` writes only pages whose number is
//! `t` modulo `N` (the Zipf page drawn, moved to the worker's residue class: a page has one
//! writer, as a latched B-tree page does), so the last write of every page is known and the
//! file's final bytes can be checked exactly. In the kernel both variants serialise writes to
//! one file on its inode lock (`i_rwsem`), as foliocache's writes do on the file's.
//!
//! # The variants
//!
//! - `kernel`: `std::fs::File`, `pwrite(2)` (`FileExt::write_at`) for `seqwrite` and
//!   `randwrite`, `write(2)` on an `O_APPEND` descriptor for `wal`, `fdatasync(2)`
//!   (`File::sync_data`). Every system call the workers make is counted where they make it.
//! - `foliocache`: the same files opened with `FolioCache::open_backing` over a
//!   [`FileBacking`] wrapped in a counting [`Backing`] (`CountingBacking`): every call the
//!   cache makes to the file (reads of partly written pages, `pwrite`/`pwritev` of writeback,
//!   `fdatasync`, `ftruncate`, `fstat`) is counted there, so system calls per operation and
//!   bytes written to the file per byte the caller wrote are measured where the I/O happens.
//!   The counting backing hands its descriptor to the cache's I/O engine (`raw_io`), so the
//!   engine's writes on its own io_uring ring do not pass through it: those are added from
//!   the cache's statistics (write requests and bytes), one per request, which overstates
//!   the system calls of a ring that submits a whole batch in one.
//!   The cache is `Config::block_cache` (readahead off: a storage engine's configuration) with
//!   a budget of `--budget-mib` (default 64 MiB; 16 with `--quick`), the default dirty ratios
//!   (20 % of the budget is the dirty limit, 10 % the background threshold). Every measurement
//!   builds a fresh cache, so the dirty high-water mark is the measurement's own, and reads a
//!   budget-sized hole through it before the window, then drops it, so that the cache's
//!   memory has been touched once, as a long-running cache's has (the kernel's page cache
//!   recycles warm memory; a fresh mapping's first touch faults and zeroes each page). Its
//!   writes are copies into the cache; the bytes reach the file by `pwritev` of contiguous
//!   dirty runs: at each sync, from the background flusher thread (past 10 % of the budget
//!   dirty), or from a writer throttled at the dirty limit.
//!
//! Like for like: both variants write the same files on the same filesystem, with the same
//! sync points (every batch ends with `fdatasync` or `sync_data`, and only synced operations
//! count), the same sharing and the same per-worker descriptors or handles.
//!
//! The files live in a temporary directory under `--dir` (default `/dev/shm`, the tmpfs the
//! other page-cache scenarios use). The filesystem matters: on tmpfs `fdatasync` does nothing
//! and a `pwrite` is the whole cost of durability, on a disk filesystem the sync dominates.
//! The output names the filesystem (`statfs`), foliocache's I/O engine and whether its
//! files are written direct or buffered (`--io`, `--direct`: [`IoArgs`]; by default direct
//! where the file system has it, so on tmpfs buffered); `params` records them (`filesystem`,
//! `io_engine`, `io_mode`, `direct_io_align`). Every `randwrite` measurement starts with the
//! shared file out of the kernel's cache ([`drop_kernel_cache`]; nothing goes on tmpfs).
//!
//! # How a measurement is timed
//!
//! Workers run whole batches: a batch ends with its sync (`randwrite`: 1,000 writes, `wal`:
//! 16 appends, `seqwrite`: the file), and a worker looks at the stop signal only between
//! batches, so every operation counted was made durable by a sync inside the measurement;
//! counting writes whose sync fell outside it would flatter the variant that defers work to
//! the sync (foliocache's writes are copies, its I/O happens at writeback). The window starts
//! when the workers are released together ([`run_threads`]'s start gate) and ends when the
//! last worker's last batch ends: `randwrite` runs `--duration` plus the batch in flight,
//! `wal` until `--duration` or until the log holds `--wal-mib` (default 256 MiB; 64 with
//! `--quick`), whichever comes first (the log lives in memory on tmpfs), and `seqwrite` is
//! one pass (`--duration` is not used). Latency is that of a caller's operation, the sync
//! included for the operation that ends a batch (what a committer waits for); 1 operation in
//! 8, drawn at random, is timed into an HDR histogram (every `seqwrite` write: they are few). While foliocache runs, a sampler
//! thread reads the cache's dirty page count every millisecond (the kernel variant has no
//! such thread: its dirty counters are the machine's).
//!
//! # Output
//!
//! One table per workload in the seeds' shape (`#threads | kernel (vanilla) | foliocache
//! (patched) | boost (%)`, ops/s), one with every metric, and the targets.
//!
//! | kind | names |
//! |---|---|
//! | variants | `kernel`, `foliocache` |
//! | row fields | `workload`: `seqwrite`, `randwrite` or `wal` |
//! | metrics | `ops_per_sec` (operations per second, all workers), `mb_per_sec` (bytes the callers wrote, in 10^6 per second), `p50_latency_ns`, `p99_latency_ns`, `syscalls_per_op` (system calls counted at the file per operation), `backing_bytes_per_byte` (bytes written to the file per byte the callers wrote: 1 for the kernel's calls, less for foliocache when a page is written twice between syncs), `dirty_high_water_pages` (foliocache: the most dirty + writeback pages at once; the limit is in `params.dirty_limit_pages`) |
//! | comparisons | candidate `foliocache` against baseline `kernel` on `ops_per_sec`, per workload and thread count |
//! | checks | `contents_verified` (pages or records whose bytes differ from what the run wrote and synced, over every measurement's files: 0), `dirty_within_limit` (the most dirty + writeback pages sampled, as the limit counts them: at most the limit), `bad_page_events` (0), `accounting_baseline` (pages left in the caches after every handle was dropped and `drop_caches`, `validate` passing: 0), `write_errors` (failed writes and syncs: 0) |
//! | stats | per workload, the last foliocache measurement's `/proc/vmstat` lines (`FolioCache::vmstat`) |
//!
//! The targets (full mode, medians of at least 5 interleaved runs): `randwrite`
//! foliocache at least 3x the kernel at 1 and 2 threads, `seqwrite` and `wal` at least 0.9x.
//! The targets table prints whether they were met; they are not checks (a noisy machine must
//! not fail CI). The durability targets (no acknowledged byte lost over 100 kills,
//! each writeback error reported once per handle) are the library's tests
//! (`tests/crash.rs`, `tests/write_errors.rs`), not measurements.

use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use foliocache::backing::{Backing, FileAttrs, FileBacking};
use foliocache::{CachedFile, Config, FolioCache};
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use super::files::{default_dir, vmstat_json};
use super::peers::workload::{self, Mix};
use crate::harness::{
    drop_kernel_cache, fmt_num, free_bytes, merge, run_threads, seed_table, Bench, CommonArgs,
    IoArgs, IoSetup, LabResult, Report, Settings,
    Table,
};

/// Not a seed: the write path is issue 13's question, no seed thread measured it.
pub const SEED: &str = "no seed (the write path: the kernel's buffered I/O against foliocache)";

/// Subcommand name.
pub const NAME: &str = "write";

/// One line on what it measures.
pub const ABOUT: &str = "the write path: 1 MiB writes of a new file then one sync (SST \
flush), 4 KiB Zipf overwrites with a sync every 1,000 (B-tree pages), 4 KiB appends with a \
sync every 64 KiB (commit log); the kernel's pwrite and fdatasync against foliocache";

/// Variant names, baseline first.
pub const VARIANTS: [&str; 2] = ["kernel", "foliocache"];

/// A page: the unit of `randwrite` and `wal` operations.
const PAGE: usize = 4096;

/// One `seqwrite` operation.
const SEQ_CHUNK: usize = 1 << 20;

/// `randwrite`: a worker syncs after this many writes.
const RAND_SYNC_EVERY: u64 = 1000;

/// `wal`: a worker syncs after this many bytes appended (16 records).
const WAL_SYNC_BYTES: usize = 64 << 10;

/// One operation in this many (drawn at random) is timed; every `seqwrite` write is (each
/// copies 1 MiB, and a measurement makes few).
const LATENCY_EVERY: u64 = 8;

/// The dirty sampler's period.
const SAMPLE_PERIOD: Duration = Duration::from_millis(1);

/// The targets: foliocache / kernel on `ops_per_sec`, per workload.
const TARGETS: [(Workload, f64); 3] = [
    (Workload::Seqwrite, 0.9),
    (Workload::Randwrite, 3.0),
    (Workload::Wal, 0.9),
];

/// A write pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// 1 MiB writes of a new file, one `sync_data` at the end.
    Seqwrite,
    /// 4 KiB overwrites at Zipf offsets, a sync every 1,000 writes.
    Randwrite,
    /// 4 KiB appends, a sync every 64 KiB.
    Wal,
}

impl Workload {
    /// Every workload, in the order.
    pub const ALL: [Workload; 3] = [Workload::Seqwrite, Workload::Randwrite, Workload::Wal];

    /// Its stable name (the rows' `workload` field).
    pub fn name(self) -> &'static str {
        match self {
            Workload::Seqwrite => "seqwrite",
            Workload::Randwrite => "randwrite",
            Workload::Wal => "wal",
        }
    }
}

/// Options of `write`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Common options. `seqwrite` does not use `--duration` (one pass per measurement).
    #[command(flatten)]
    pub common: CommonArgs,
    /// Where the files are and how foliocache writes them (`--dir`, default /dev/shm, the
    /// tmpfs the other page-cache scenarios use: give a disk file system's directory to
    /// measure real syncs; `--io`, `--direct`).
    #[command(flatten)]
    pub io: IoArgs,
    /// Workloads, comma-separated [default: all three].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub workload: Vec<Workload>,
    /// foliocache's budget in MiB [default: 64; 16 with --quick].
    #[arg(long)]
    pub budget_mib: Option<u64>,
    /// `seqwrite`: MiB each worker's file gets [default: 128; 32 with --quick].
    #[arg(long)]
    pub seq_mib: Option<u64>,
    /// `randwrite`: the shared file's size in MiB [default: 256; 32 with --quick].
    #[arg(long)]
    pub rand_mib: Option<u64>,
    /// `wal`: the most MiB one measurement appends to its log [default: 256; 64 with --quick].
    #[arg(long)]
    pub wal_mib: Option<u64>,
    /// `randwrite`: the Zipf exponent of the page numbers (above 0).
    #[arg(long, default_value_t = 0.99)]
    pub skew: f64,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            common: CommonArgs::default(),
            io: IoArgs::default(),
            workload: Vec::new(),
            budget_mib: None,
            seq_mib: None,
            rand_mib: None,
            wal_mib: None,
            skew: 0.99,
        }
    }
}

super::scenario!();

/// The sizes of a run, every default filled in.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    budget: usize,
    seq_bytes: u64,
    rand_pages: u64,
    wal_bytes: u64,
}

impl Sizes {
    fn of(args: &Args, quick: bool) -> LabResult<Sizes> {
        let mib = |v: Option<u64>, full: u64, small: u64, what: &str| -> LabResult<u64> {
            match v.unwrap_or(if quick { small } else { full }) {
                0 => Err(crate::lab_err!("--{what} must be at least 1")),
                n if n > 1 << 20 => Err(crate::lab_err!("--{what} {n} is above 1 TiB")),
                n => Ok(n << 20),
            }
        };
        Ok(Sizes {
            budget: mib(args.budget_mib, 64, 16, "budget-mib")? as usize,
            seq_bytes: mib(args.seq_mib, 128, 32, "seq-mib")?,
            rand_pages: mib(args.rand_mib, 256, 32, "rand-mib")? / PAGE as u64,
            wal_bytes: mib(args.wal_mib, 256, 64, "wal-mib")?,
        })
    }
}

/// Runs the scenario.
pub fn run(args: &Args) -> LabResult<Report> {
    let settings = args.common.settings();
    let mut workloads: Vec<Workload> = Vec::new();
    for &w in args.workload.iter() {
        if !workloads.contains(&w) {
            workloads.push(w);
        }
    }
    if workloads.is_empty() {
        workloads = Workload::ALL.to_vec();
    }
    if !(args.skew > 0.0 && args.skew.is_finite()) {
        return Err(crate::lab_err!(
            "--skew must be above 0 (0.99 is the usual skew of a B-tree's page updates)"
        ));
    }
    let sizes = Sizes::of(args, settings.quick)?;
    let max_threads = settings.threads.iter().copied().max().unwrap_or(1);
    if workloads.contains(&Workload::Randwrite) && max_threads as u64 * 2 > sizes.rand_pages {
        return Err(crate::lab_err!(
            "randwrite needs at least 2 pages per thread: --rand-mib {} holds {} pages for {max_threads} threads",
            (sizes.rand_pages * PAGE as u64) >> 20,
            sizes.rand_pages
        ));
    }
    let base = args.io.dir_or(default_dir);
    std::fs::create_dir_all(&base)
        .map_err(|e| crate::lab_err!("creating {}: {e}", base.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix("foliocache-lab-write")
        .tempdir_in(&base)
        .map_err(|e| crate::lab_err!("creating a directory in {}: {e}", base.display()))?;
    let setup = IoSetup::probe(&args.io, &base)?;
    let fs = setup.filesystem.to_string();
    check_space(tmp.path(), &workloads, sizes, max_threads)?;
    let config = cache_config(&args.io, sizes.budget);
    let dirty_limit = FolioCache::new(config.clone())
        .map_err(|e| crate::lab_err!("foliocache: {e}"))?
        .stats()
        .dirty_limit_pages;
    let trace_len: usize = if settings.quick { 1 << 16 } else { 1 << 20 };

    let mut bench = Bench::new(
        NAME,
        SEED,
        &settings,
        merge(json!({
            "variants": VARIANTS,
            "workloads": workloads.iter().map(|w| w.name()).collect::<Vec<_>>(),
            "foliocache_config": "Config::block_cache (readahead off), dirty_ratio 20 %, dirty_background_ratio 10 %",
            "kernel_variant": "pwrite(2) (wal: write(2) on an O_APPEND descriptor) and fdatasync(2) at every sync point, a descriptor per worker",
            "foliocache_variant": "write_all_at / append into the cache, sync_data at every sync point, a handle per worker; writeback by pwritev of contiguous dirty runs at each sync, from the flusher thread and from writers throttled at the dirty limit; a fresh cache per measurement, its memory touched before the window",
            "budget_bytes": sizes.budget,
            "dirty_limit_pages": dirty_limit,
            "seqwrite_bytes_per_thread": sizes.seq_bytes,
            "seqwrite_write_bytes": SEQ_CHUNK,
            "randwrite_file_bytes": sizes.rand_pages * PAGE as u64,
            "randwrite_skew": args.skew,
            "randwrite_sync_every_writes": RAND_SYNC_EVERY,
            "wal_record_bytes": PAGE,
            "wal_sync_every_bytes": WAL_SYNC_BYTES,
            "wal_max_bytes": sizes.wal_bytes,
            "sharing": "seqwrite: a file per thread; randwrite and wal: one file shared by the threads",
            "syscalls_counted_at": "kernel: the workers' calls; foliocache: a counting wrapper around FileBacking",
            "latency_sampling": format!("1 operation in {LATENCY_EVERY} at random (seqwrite: every write); the operation that ends a batch includes its sync"),
        }), setup.params()),
        workloads.len() * VARIANTS.len(),
    );
    println!(
        "write: {}{}; foliocache: Config::block_cache, budget {} MiB, dirty limit \
         {dirty_limit} pages",
        setup.header(),
        if setup.filesystem.name() == "tmpfs" {
            ": fdatasync does nothing there, a sync costs only its writeback"
        } else {
            ""
        },
        sizes.budget >> 20,
    );
    println!(
        "write: kernel = pwrite(2) (wal: write(2), O_APPEND) + fdatasync(2) at each sync point; \
         foliocache = copies into the cache + sync_data at the same points, written back by \
         pwritev of dirty runs at each sync, by its flusher thread and by throttled writers \
         (its fresh cache's memory touched before each window); same files, same filesystem"
    );

    let mut totals = Totals::default();
    let mut stats = Map::new();
    let mut tables = Vec::new();
    for &w in &workloads {
        let direct = setup.direct_align.is_some();
        let ctx = Ctx::new(w, tmp.path(), sizes, args.skew, trace_len, &config, direct)?;
        let extra = workload_extra(w);
        bench.measure(w.name(), &VARIANTS, &extra, |il, &v, n, round| {
            let s = measure(&ctx, v, n, round, &settings)?;
            il.add(v, n, "ops_per_sec", s.ops_per_sec);
            il.add(v, n, "mb_per_sec", s.mb_per_sec);
            il.add(v, n, "p50_latency_ns", s.p50_ns);
            il.add(v, n, "p99_latency_ns", s.p99_ns);
            il.add(v, n, "syscalls_per_op", s.syscalls_per_op);
            il.add(v, n, "backing_bytes_per_byte", s.amplification);
            if let Some(c) = &s.cache {
                il.add(v, n, "dirty_high_water_pages", c.high_water as f64);
                totals.add_cache(c, dirty_limit);
                stats.insert(w.name().to_string(), c.vmstat.clone());
            }
            totals.wrong += s.wrong;
            totals.verified += s.verified;
            totals.errors.extend(
                s.errors
                    .into_iter()
                    .map(|e| format!("{} {v}: {e}", w.name())),
            );
            Ok(())
        })?;
        let report = &mut bench.report;
        for &n in &settings.threads {
            report.compare("kernel", "foliocache", n, "ops_per_sec", &extra);
        }
        tables.push((
            format!(
                "write, workload {}: {}, ops/s of all threads (no seed; vanilla = the kernel's \
                 buffered I/O, patched = foliocache); files on {fs}",
                w.name(),
                describe(w, sizes, args.skew)
            ),
            seed_table(report, "ops_per_sec", "kernel", "foliocache", &[], &extra),
        ));
        tables.push((
            format!(
                "write, workload {}: medians of {} runs; syscalls counted at the file; dirty \
                 high water (dirty + writeback pages) against the limit",
                w.name(),
                settings.runs
            ),
            detail_table(report, &settings.threads, &extra, dirty_limit),
        ));
    }
    drop(tmp);
    let report = &mut bench.report;

    tables.push((
        format!(
            "Targets (issue 13, full mode, medians of at least 5 interleaved runs): foliocache / \
             kernel ops/s; files on {fs}{}",
            if settings.quick {
                format!(
                    "; quick mode is a smoke run (short runs, small files, a {} MiB budget): the \
                     targets are for full mode (`write --threads 1,2`)",
                    sizes.budget >> 20
                )
            } else {
                String::new()
            }
        ),
        target_table(report, &workloads, &settings.threads),
    ));

    report.check(
        "contents_verified",
        totals.wrong,
        totals.wrong == 0 && totals.verified > 0,
    );
    report.check(
        "dirty_within_limit",
        totals.max_sampled_dirty,
        totals.over_limit == 0,
    );
    report.check("bad_page_events", totals.bad_pages, totals.bad_pages == 0);
    report.check(
        "accounting_baseline",
        totals.leftover,
        totals.leftover == 0 && totals.invalid.is_empty(),
    );
    report.check(
        "write_errors",
        totals.errors.len(),
        totals.errors.is_empty(),
    );
    for e in totals.invalid.iter().chain(&totals.errors).take(5) {
        eprintln!("write: {e}");
    }
    report.stats = (!stats.is_empty()).then_some(Value::Object(stats));
    let plotted = if workloads.contains(&Workload::Randwrite) {
        Workload::Randwrite
    } else {
        workloads[0]
    };
    let plot_extra = workload_extra(plotted);
    bench.finish(&settings, &tables, Some(("ops_per_sec", &plot_extra)))
}

/// The foliocache variant's configuration, with the engine and direct I/O asked for.
fn cache_config(io: &IoArgs, budget: usize) -> Config {
    io.apply(Config::block_cache(budget)).panic_on_bad_page(false)
}

fn workload_extra(w: Workload) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("workload".into(), json!(w.name()));
    m
}

/// The workload in words, for the table titles.
fn describe(w: Workload, sizes: Sizes, skew: f64) -> String {
    match w {
        Workload::Seqwrite => format!(
            "1 MiB writes of a new {} MiB file per thread, one sync_data at the end",
            sizes.seq_bytes >> 20
        ),
        Workload::Randwrite => format!(
            "4 KiB overwrites at Zipf {skew} pages of one shared {} MiB file, budget {} MiB, \
             sync_data every {RAND_SYNC_EVERY} writes per thread",
            (sizes.rand_pages * PAGE as u64) >> 20,
            sizes.budget >> 20
        ),
        Workload::Wal => format!(
            "4 KiB appends to one shared log, sync_data every {} KiB per thread, at most {} MiB \
             per measurement",
            WAL_SYNC_BYTES >> 10,
            sizes.wal_bytes >> 20
        ),
    }
}

/// What the checks add up over every measurement.
#[derive(Default)]
struct Totals {
    wrong: u64,
    verified: u64,
    max_sampled_dirty: u64,
    over_limit: u64,
    bad_pages: u64,
    leftover: u64,
    invalid: Vec<String>,
    errors: Vec<String>,
}

impl Totals {
    fn add_cache(&mut self, c: &CacheOut, limit: u64) {
        self.max_sampled_dirty = self.max_sampled_dirty.max(c.sampled_dirty);
        self.over_limit += u64::from(c.sampled_dirty > limit);
        self.bad_pages += c.bad_pages;
        self.leftover += c.leftover;
        self.invalid.extend(c.invalid.clone());
    }
}

// ---------------------------------------------------------------------------------------
// Page contents: every 4 KiB page written is a fixed body with two stamps, so the file can be
// checked after the run without keeping its bytes.
// ---------------------------------------------------------------------------------------

/// The body every written page carries (bytes 16 to 4088 of it).
fn base_page() -> Vec<u8> {
    (0..PAGE / 8)
        .flat_map(|i| workload::splitmix64(0x7772_6974_6500 + i as u64).to_le_bytes())
        .collect()
}

/// Stamps `page` (a copy of [`base_page`]) with `a` in bytes 0..8 and `b` in bytes 8..16 and
/// in its last 8 bytes (a torn page shows a mismatch).
#[inline]
fn stamp(page: &mut [u8], a: u64, b: u64) {
    page[..8].copy_from_slice(&a.to_le_bytes());
    page[8..16].copy_from_slice(&b.to_le_bytes());
    page[PAGE - 8..PAGE].copy_from_slice(&b.to_le_bytes());
}

/// The stamps of a page whose body and trailer are right, or `None`.
fn stamps(page: &[u8], base: &[u8]) -> Option<(u64, u64)> {
    if page.len() != PAGE {
        return None;
    }
    let word = |at: usize| u64::from_le_bytes(page[at..at + 8].try_into().expect("8 bytes"));
    let (a, b) = (word(0), word(8));
    (word(PAGE - 8) == b && page[16..PAGE - 8] == base[16..PAGE - 8]).then_some((a, b))
}

/// Reads the file at `path` a page at a time, calling `each(page_number, page)`; returns the
/// file's length.
fn for_each_page(path: &Path, mut each: impl FnMut(u64, &[u8])) -> io::Result<u64> {
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    let mut buf = vec![0u8; SEQ_CHUNK];
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(buf.len() as u64) as usize;
        f.read_exact_at(&mut buf[..n], off)?;
        for (i, page) in buf[..n].chunks(PAGE).enumerate() {
            each(off / PAGE as u64 + i as u64, page);
        }
        off += n as u64;
    }
    Ok(len)
}

/// The tag in a `seqwrite` page's second stamp: the worker's file.
const SEQ_TAG: u64 = 0x5345_5100_0000_0000;

/// The tag in a `wal` record's first stamp: the worker that appended it.
const WAL_TAG: u64 = 0x5741_4c00_0000_0000;

// ---------------------------------------------------------------------------------------
// The two ways to write a file.
// ---------------------------------------------------------------------------------------

/// What the file saw during a measurement: system calls and bytes written to it.
#[derive(Debug, Default)]
struct IoCounts {
    syscalls: AtomicU64,
    bytes_written: AtomicU64,
    /// Of `syscalls`, the writes (the cache's statistics count every write request,
    /// those its I/O engine issued on its own ring too: the difference is the ring's).
    write_calls: AtomicU64,
}

impl IoCounts {
    fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.syscalls.load(Ordering::Relaxed),
            self.bytes_written.load(Ordering::Relaxed),
            self.write_calls.load(Ordering::Relaxed),
        )
    }
}

/// A [`FileBacking`] that counts every call the cache makes to the file (each is one system
/// call, bar retries after `EINTR`) and the bytes written.
#[derive(Debug)]
struct CountingBacking {
    inner: FileBacking,
    io: Arc<IoCounts>,
}

impl CountingBacking {
    fn call(&self) {
        self.io.syscalls.fetch_add(1, Ordering::Relaxed);
    }

    fn wrote(&self, r: io::Result<usize>) -> io::Result<usize> {
        self.io.write_calls.fetch_add(1, Ordering::Relaxed);
        if let Ok(n) = r {
            self.io.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

impl Backing for CountingBacking {
    fn size(&self) -> io::Result<u64> {
        self.call();
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.call();
        self.inner.read_at(buf, offset)
    }

    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        self.call();
        self.inner.read_vectored_at(bufs, offset)
    }

    fn attrs(&self) -> io::Result<FileAttrs> {
        self.call();
        self.inner.attrs()
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.call();
        self.wrote(self.inner.write_at(buf, offset))
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        self.call();
        self.wrote(self.inner.write_vectored_at(bufs, offset))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.call();
        self.inner.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.call();
        self.inner.sync_all()
    }

    fn set_len(&self, size: u64) -> io::Result<()> {
        self.call();
        self.inner.set_len(size)
    }

    /// The descriptor, so that the cache's engine drives it as it would a file it opened
    /// (io_uring requests never pass through the calls above: they are counted from the
    /// cache's statistics instead, see [`IoCounts`]).
    fn raw_io(&self) -> Option<foliocache::io::RawIo> {
        self.inner.raw_io()
    }
}

/// A worker's own count of the system calls it made and the bytes they wrote (the kernel
/// variant's; foliocache's are counted at its backing).
#[derive(Debug, Default)]
struct Tally {
    syscalls: u64,
    bytes: u64,
}

/// One worker's way to its file.
enum Handle {
    /// A descriptor of its own (`O_APPEND` for the log).
    Kernel(File),
    /// A foliocache handle.
    Cache(CachedFile),
}

impl Handle {
    /// All of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64, t: &mut Tally) -> Result<(), String> {
        match self {
            Handle::Kernel(f) => {
                let mut done = 0;
                while done < buf.len() {
                    t.syscalls += 1;
                    match f.write_at(&buf[done..], offset + done as u64) {
                        Ok(0) => return Err("pwrite wrote nothing".into()),
                        Ok(n) => {
                            done += n;
                            t.bytes += n as u64;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(format!("pwrite: {e}")),
                    }
                }
                Ok(())
            }
            Handle::Cache(f) => f.write_all_at(buf, offset).map_err(|e| e.to_string()),
        }
    }

    /// `buf` at the end of the file, in one piece.
    fn append(&self, buf: &[u8], t: &mut Tally) -> Result<(), String> {
        match self {
            Handle::Kernel(f) => loop {
                t.syscalls += 1;
                match (&*f).write(buf) {
                    Ok(n) if n == buf.len() => {
                        t.bytes += n as u64;
                        return Ok(());
                    }
                    Ok(n) => return Err(format!("a short append: {n} of {} bytes", buf.len())),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("write: {e}")),
                }
            },
            Handle::Cache(f) => f.append(buf).map(drop).map_err(|e| e.to_string()),
        }
    }

    /// `fdatasync`.
    fn sync_data(&self, t: &mut Tally) -> Result<(), String> {
        match self {
            Handle::Kernel(f) => {
                t.syscalls += 1;
                f.sync_data().map_err(|e| format!("fdatasync: {e}"))
            }
            Handle::Cache(f) => f.sync_data().map_err(|e| e.to_string()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Measurements.
// ---------------------------------------------------------------------------------------

/// What every measurement of one workload shares.
struct Ctx {
    workload: Workload,
    dir: PathBuf,
    sizes: Sizes,
    config: Config,
    /// Whether foliocache's backings are opened for direct I/O: the cache opens them itself
    /// only through `open_backing`, where that is the backing's business, so the lab does
    /// what `FolioCache::open` did for the probe ([`IoSetup`]).
    direct: bool,
    /// `randwrite`: the Zipf page numbers every worker walks (from its own offset).
    trace: Arc<Vec<u32>>,
    /// `randwrite`: per variant, the shared file and the version last written to each page
    /// (0: the file's initial content).
    rand: Vec<(PathBuf, Arc<Vec<AtomicU32>>)>,
    /// A hole of the budget's size that every foliocache measurement reads through its
    /// fresh cache before the window (see [`warm_cache`]).
    warm: PathBuf,
}

impl Ctx {
    fn new(
        workload: Workload,
        dir: &Path,
        sizes: Sizes,
        skew: f64,
        trace_len: usize,
        config: &Config,
        direct: bool,
    ) -> LabResult<Ctx> {
        let mut ctx = Ctx {
            workload,
            dir: dir.to_path_buf(),
            sizes,
            config: config.clone(),
            direct,
            trace: Arc::new(Vec::new()),
            rand: Vec::new(),
            warm: dir.join("warm"),
        };
        File::create(&ctx.warm)
            .and_then(|f| f.set_len(sizes.budget as u64))
            .map_err(|e| crate::lab_err!("creating {}: {e}", ctx.warm.display()))?;
        if workload == Workload::Randwrite {
            ctx.trace = Arc::new(workload::trace(
                Mix::Zipf,
                sizes.rand_pages,
                skew,
                trace_len,
                0x7772_6974,
            ));
            for v in VARIANTS {
                let path = dir.join(format!("randwrite-{v}"));
                create_rand_file(&path, sizes.rand_pages)
                    .map_err(|e| crate::lab_err!("writing {}: {e}", path.display()))?;
                let versions = (0..sizes.rand_pages).map(|_| AtomicU32::new(0)).collect();
                ctx.rand.push((path, Arc::new(versions)));
            }
        }
        Ok(ctx)
    }

    /// The files a measurement of `variant` at `threads` writes, one per worker or one shared.
    fn paths(&self, variant: &str, threads: usize) -> Vec<PathBuf> {
        match self.workload {
            Workload::Seqwrite => (0..threads)
                .map(|t| self.dir.join(format!("seqwrite-{variant}-{t}")))
                .collect(),
            Workload::Randwrite => vec![self.rand_of(variant).0.clone()],
            Workload::Wal => vec![self.dir.join(format!("wal-{variant}"))],
        }
    }

    fn rand_of(&self, variant: &str) -> &(PathBuf, Arc<Vec<AtomicU32>>) {
        &self.rand[VARIANTS.iter().position(|v| *v == variant).unwrap_or(0)]
    }
}

impl Drop for Ctx {
    /// The `randwrite` files go with their workload, so the next one has the space.
    fn drop(&mut self) {
        for (path, _) in &self.rand {
            let _ = std::fs::remove_file(path);
        }
        let _ = std::fs::remove_file(&self.warm);
    }
}

/// The `randwrite` file: every page stamped with its number and version 0, synced.
fn create_rand_file(path: &Path, pages: u64) -> io::Result<()> {
    let mut out = io::BufWriter::with_capacity(SEQ_CHUNK, File::create(path)?);
    let mut page = base_page();
    for p in 0..pages {
        stamp(&mut page, p, 0);
        out.write_all(&page)?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// The foliocache side of one measurement.
struct CacheOut {
    high_water: u64,
    sampled_dirty: u64,
    bad_pages: u64,
    leftover: u64,
    invalid: Vec<String>,
    vmstat: Value,
}

/// One measurement.
struct Sample {
    ops_per_sec: f64,
    mb_per_sec: f64,
    p50_ns: f64,
    p99_ns: f64,
    syscalls_per_op: f64,
    amplification: f64,
    cache: Option<CacheOut>,
    wrong: u64,
    verified: u64,
    errors: Vec<String>,
}

/// One worker's tally.
struct WorkerOut {
    /// One operation in this many is timed.
    every: u64,
    ops: u64,
    bytes: u64,
    tally: Tally,
    end: Instant,
    hist: Histogram<u64>,
    error: Option<String>,
}

impl WorkerOut {
    fn new(every: u64) -> WorkerOut {
        WorkerOut {
            every,
            ops: 0,
            bytes: 0,
            tally: Tally::default(),
            end: Instant::now(),
            hist: new_histogram(),
            error: None,
        }
    }

    /// Times `op` if this operation is drawn, and counts it if it succeeded.
    #[inline]
    fn op(
        &mut self,
        rng: &mut u64,
        bytes: usize,
        op: impl FnOnce(&mut Tally) -> Result<(), String>,
    ) -> bool {
        // xorshift64: the draw costs a few instructions, the same in both variants.
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        let t0 = (*rng % self.every == 0).then(Instant::now);
        let r = op(&mut self.tally);
        if let Some(t0) = t0 {
            self.hist.saturating_record(t0.elapsed().as_nanos() as u64);
        }
        match r {
            Ok(()) => {
                self.ops += 1;
                self.bytes += bytes as u64;
                true
            }
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("static histogram bounds")
}

/// Opens the worker handles of `variant` on `paths` (one per worker, or one shared by all),
/// building a fresh cache for foliocache.
#[allow(clippy::type_complexity)]
fn open_handles(
    ctx: &Ctx,
    variant: &str,
    paths: &[PathBuf],
    threads: usize,
) -> LabResult<(Vec<Handle>, Option<(FolioCache, Arc<IoCounts>)>)> {
    let open = |p: &Path, append: bool| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .append(append)
            .open(p)
            .map_err(|e| crate::lab_err!("opening {}: {e}", p.display()))
    };
    let path_of = |t: usize| &paths[t.min(paths.len() - 1)];
    if variant == "kernel" {
        let append = ctx.workload == Workload::Wal;
        let handles = (0..threads)
            .map(|t| open(path_of(t), append).map(Handle::Kernel))
            .collect::<LabResult<_>>()?;
        return Ok((handles, None));
    }
    let cache = FolioCache::new(ctx.config.clone()).map_err(|e| crate::lab_err!("{e}"))?;
    warm_cache(&cache, &ctx.warm, ctx.sizes.budget)?;
    let io = Arc::new(IoCounts::default());
    let mut files: Vec<CachedFile> = Vec::new();
    for p in paths {
        // Writeback writes at offsets: the backing's descriptor is never O_APPEND.
        let mut inner = FileBacking::from_file(open(p, false)?, p);
        if ctx.direct && inner.enable_direct().map_err(|e| direct_err(p, e))?.is_none() {
            return Err(direct_err(p, io::ErrorKind::Unsupported.into()));
        }
        let backing = CountingBacking {
            inner,
            io: io.clone(),
        };
        files.push(
            cache
                .open_backing(p, backing)
                .map_err(|e| crate::lab_err!("{e}"))?,
        );
    }
    let handles = (0..threads)
        .map(|t| Handle::Cache(files[t.min(files.len() - 1)].reopen()))
        .collect();
    Ok((handles, Some((cache, io))))
}

/// The error of a backing that does not get the direct I/O the probe got.
fn direct_err(p: &Path, e: io::Error) -> crate::harness::LabError {
    crate::lab_err!("direct I/O on {}: {e}", p.display())
}

/// Reads `budget` bytes of the hole at `path` through `cache`, then drops them: every page of
/// the fresh cache's memory has been touched once before the window, as a long-running
/// cache's has (and as the memory the kernel's page cache recycles has). Without it the
/// first touch of each page (a fault and the kernel zeroing the page, far slower in a virtual
/// machine) fell inside the window: 27 % of a 1-thread `seqwrite` profile.
fn warm_cache(cache: &FolioCache, path: &Path, budget: usize) -> LabResult<()> {
    let f = cache
        .open(path)
        .map_err(|e| crate::lab_err!("warming the cache: {e}"))?;
    let mut buf = vec![0u8; SEQ_CHUNK];
    let mut off = 0u64;
    while off < budget as u64 {
        let n = (budget as u64 - off).min(SEQ_CHUNK as u64) as usize;
        f.read_exact_at(&mut buf[..n], off)
            .map_err(|e| crate::lab_err!("warming the cache: {e}"))?;
        off += n as u64;
    }
    drop(f);
    cache.drop_caches();
    Ok(())
}

/// Samples a cache's dirty page count every [`SAMPLE_PERIOD`] on a thread of its own.
struct DirtySampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<u64>,
}

impl DirtySampler {
    fn start(cache: FolioCache) -> DirtySampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut max = 0;
            loop {
                max = max.max(cache.stats().dirty_charged_pages);
                if s.load(Ordering::Relaxed) {
                    return max;
                }
                std::thread::sleep(SAMPLE_PERIOD);
            }
        });
        DirtySampler { stop, handle }
    }

    /// Stops sampling; the most dirty pages seen.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or(u64::MAX)
    }
}

/// One measurement of `variant` on `ctx`'s workload with `threads` workers.
fn measure(
    ctx: &Ctx,
    variant: &str,
    threads: usize,
    round: usize,
    settings: &Settings,
) -> LabResult<Sample> {
    let paths = ctx.paths(variant, threads);
    if ctx.workload != Workload::Randwrite {
        for p in &paths {
            File::create(p).map_err(|e| crate::lab_err!("creating {}: {e}", p.display()))?;
        }
    } else {
        // Both variants start with the shared file out of the kernel's cache (on tmpfs
        // nothing goes: its pages are the file).
        for p in &paths {
            drop_kernel_cache(p).map_err(|e| {
                crate::lab_err!("dropping {} from the kernel's cache: {e}", p.display())
            })?;
        }
    }
    let (handles, cache) = open_handles(ctx, variant, &paths, threads)?;
    let handles = Arc::new(handles);
    let io0 = cache.as_ref().map(|(c, io)| (io.snapshot(), c.stats()));
    let sampler = cache.as_ref().map(|(c, _)| DirtySampler::start(c.clone()));
    let h = handles.clone();
    let run = match ctx.workload {
        Workload::Seqwrite => {
            let chunks = ctx.sizes.seq_bytes / SEQ_CHUNK as u64;
            // One pass: the stop signal (raised at once) is not looked at.
            run_threads(threads, settings.pin, Duration::ZERO, move |tid, _| {
                seqwrite(&h[tid], tid, chunks)
            })
        }
        Workload::Randwrite => {
            let (trace, versions) = (ctx.trace.clone(), ctx.rand_of(variant).1.clone());
            let start = round.wrapping_mul(0x9e37) % trace.len().max(1);
            run_threads(
                threads,
                settings.pin,
                settings.duration,
                move |tid, stop| randwrite(&h[tid], tid, threads, &trace, start, &versions, stop),
            )
        }
        Workload::Wal => {
            let appended = Arc::new(AtomicU64::new(0));
            let cap = ctx.sizes.wal_bytes;
            run_threads(
                threads,
                settings.pin,
                settings.duration,
                move |tid, stop| wal(&h[tid], tid, &appended, cap, stop),
            )
        }
    };
    let sampled_dirty = sampler.map(DirtySampler::finish);

    let end = run
        .results
        .iter()
        .map(|w| w.end)
        .max()
        .unwrap_or(run.started);
    let window = end.saturating_duration_since(run.started);
    let ops: u64 = run.results.iter().map(|w| w.ops).sum();
    let bytes: u64 = run.results.iter().map(|w| w.bytes).sum();
    let mut hist = new_histogram();
    let mut errors = Vec::new();
    let mut per_worker = Vec::with_capacity(threads);
    let (mut syscalls, mut written) = (0u64, 0u64);
    for w in &run.results {
        hist.add(&w.hist).expect("histograms of equal bounds");
        errors.extend(w.error.clone());
        per_worker.push(w.ops);
        syscalls += w.tally.syscalls;
        written += w.tally.bytes;
    }
    // Checked while the handles are still open: the bytes must be in the file because the
    // syncs put them there, not because closing the last handle wrote them back.
    let (wrong, verified) = verify(ctx, variant, &paths, &per_worker)?;
    let cache_out = match (cache, io0) {
        (Some((cache, io)), Some(((calls0, bytes0, writes0), stats0))) => {
            let (calls1, bytes1, writes1) = io.snapshot();
            let during = cache.stats();
            // The writes the engine issued on its ring: every write request the cache
            // counted, less those made through the backing's calls.
            let ring_writes = (during.writeback_writes - stats0.writeback_writes)
                .saturating_sub(writes1 - writes0);
            let ring_bytes = (during.writeback_bytes - stats0.writeback_bytes)
                .saturating_sub(bytes1 - bytes0);
            syscalls = calls1 - calls0 + ring_writes;
            written = bytes1 - bytes0 + ring_bytes;
            drop(handles);
            cache.drop_caches();
            let mut invalid = Vec::new();
            if let Err(e) = cache.validate() {
                invalid.push(format!("validate: {e}"));
            }
            let after = cache.stats();
            if after.dirty_pages != 0 {
                invalid.push(format!("{} dirty pages left", after.dirty_pages));
            }
            Some(CacheOut {
                high_water: during.dirty_high_water,
                sampled_dirty: sampled_dirty.unwrap_or(0),
                bad_pages: after.bad_pages,
                leftover: after.allocated_pages,
                invalid,
                vmstat: vmstat_json(&cache.vmstat()),
            })
        }
        _ => {
            drop(handles);
            None
        }
    };

    if ctx.workload != Workload::Randwrite {
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
    }
    let q = |q: f64| hist.value_at_quantile(q) as f64;
    Ok(Sample {
        ops_per_sec: crate::harness::per_sec(ops as f64, window),
        mb_per_sec: crate::harness::per_sec(bytes as f64, window) / 1e6,
        p50_ns: q(0.5),
        p99_ns: q(0.99),
        syscalls_per_op: syscalls as f64 / ops.max(1) as f64,
        amplification: written as f64 / bytes.max(1) as f64,
        cache: cache_out,
        wrong,
        verified,
        errors,
    })
}

/// `seqwrite`: the worker's new file in 1 MiB writes, then `sync_data`.
fn seqwrite(h: &Handle, tid: usize, chunks: u64) -> WorkerOut {
    let mut out = WorkerOut::new(1);
    let base = base_page();
    let mut buf: Vec<u8> = base.iter().copied().cycle().take(SEQ_CHUNK).collect();
    let mut rng = 0x5eed ^ (tid as u64 + 1);
    let per_chunk = (SEQ_CHUNK / PAGE) as u64;
    for c in 0..chunks {
        for (k, page) in buf.chunks_mut(PAGE).enumerate() {
            stamp(page, c * per_chunk + k as u64, SEQ_TAG | tid as u64);
        }
        let last = c + 1 == chunks;
        let ok = out.op(&mut rng, SEQ_CHUNK, |t| {
            h.write_all_at(&buf, c * SEQ_CHUNK as u64, t)?;
            if last {
                h.sync_data(t)?;
            }
            Ok(())
        });
        if !ok {
            break;
        }
    }
    out.end = Instant::now();
    out
}

/// `randwrite`'s page for a drawn page number: moved into worker `tid`'s residue class
/// modulo `n`, inside the file.
#[inline]
fn own_page(drawn: u64, tid: usize, n: usize, pages: u64) -> u64 {
    let n = n as u64;
    let p = drawn - drawn % n + tid as u64;
    if p < pages {
        p
    } else {
        p - n
    }
}

/// `randwrite`: batches of [`RAND_SYNC_EVERY`] page overwrites, each batch ending with
/// `sync_data`, until stopped.
fn randwrite(
    h: &Handle,
    tid: usize,
    n: usize,
    trace: &[u32],
    start: usize,
    versions: &[AtomicU32],
    stop: &AtomicBool,
) -> WorkerOut {
    let mut out = WorkerOut::new(LATENCY_EVERY);
    let mut page = base_page();
    let pages = versions.len() as u64;
    let mask = trace.len() - 1;
    let mut pos = (start + tid * (trace.len() / n)) & mask;
    let mut rng = 0x5eed ^ (tid as u64 + 1);
    'run: loop {
        for i in 0..RAND_SYNC_EVERY {
            let p = own_page(u64::from(trace[pos]), tid, n, pages);
            pos = (pos + 1) & mask;
            let v = versions[p as usize].load(Ordering::Relaxed) + 1;
            stamp(&mut page, p, u64::from(v));
            let last = i + 1 == RAND_SYNC_EVERY;
            let ok = out.op(&mut rng, PAGE, |t| {
                h.write_all_at(&page, p * PAGE as u64, t)?;
                if last {
                    h.sync_data(t)?;
                }
                Ok(())
            });
            if !ok {
                break 'run;
            }
            // Only this worker writes page `p` in this measurement; the main thread reads the
            // versions after joining it.
            versions[p as usize].store(v, Ordering::Relaxed);
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    out.end = Instant::now();
    out
}

/// `wal`: batches of 64 KiB of 4 KiB appends, each batch ending with `sync_data`, until
/// stopped or the log holds `cap` bytes.
fn wal(h: &Handle, tid: usize, appended: &AtomicU64, cap: u64, stop: &AtomicBool) -> WorkerOut {
    let mut out = WorkerOut::new(LATENCY_EVERY);
    let mut record = base_page();
    let mut rng = 0x5eed ^ (tid as u64 + 1);
    let per_batch = (WAL_SYNC_BYTES / PAGE) as u64;
    let mut seq = 0u64;
    'run: loop {
        for i in 0..per_batch {
            stamp(&mut record, WAL_TAG | tid as u64, seq);
            let last = i + 1 == per_batch;
            let ok = out.op(&mut rng, PAGE, |t| {
                h.append(&record, t)?;
                if last {
                    h.sync_data(t)?;
                }
                Ok(())
            });
            if !ok {
                break 'run;
            }
            seq += 1;
        }
        let total = appended.fetch_add(WAL_SYNC_BYTES as u64, Ordering::Relaxed);
        if stop.load(Ordering::Relaxed) || total + WAL_SYNC_BYTES as u64 >= cap {
            break;
        }
    }
    out.end = Instant::now();
    out
}

/// Reads the measurement's files back with `std::fs` and compares them with what the workers
/// wrote and synced. Returns (pages or records wrong or missing, files verified).
fn verify(
    ctx: &Ctx,
    variant: &str,
    paths: &[PathBuf],
    per_worker: &[u64],
) -> LabResult<(u64, u64)> {
    let base = base_page();
    let read_err = |p: &Path, e: io::Error| crate::lab_err!("verifying {}: {e}", p.display());
    let mut wrong = 0u64;
    match ctx.workload {
        Workload::Seqwrite => {
            for (t, p) in paths.iter().enumerate() {
                let want = ctx.sizes.seq_bytes / PAGE as u64;
                let mut good = 0u64;
                let len = for_each_page(p, |i, page| {
                    good += u64::from(stamps(page, &base) == Some((i, SEQ_TAG | t as u64)));
                })
                .map_err(|e| read_err(p, e))?;
                // A worker that failed wrote less; its error is reported apart.
                let written = per_worker[t] * (SEQ_CHUNK / PAGE) as u64;
                wrong +=
                    written.min(want).saturating_sub(good) + u64::from(len < written * PAGE as u64);
            }
        }
        Workload::Randwrite => {
            let (p, versions) = ctx.rand_of(variant);
            let len = for_each_page(p, |i, page| {
                let v = versions.get(i as usize).map(|v| v.load(Ordering::Relaxed));
                let ok = v.is_some_and(|v| stamps(page, &base) == Some((i, u64::from(v))));
                wrong += u64::from(!ok);
            })
            .map_err(|e| read_err(p, e))?;
            wrong += (versions.len() as u64).saturating_sub(len / PAGE as u64);
        }
        Workload::Wal => {
            let p = &paths[0];
            let mut next = vec![0u64; per_worker.len()];
            let len = for_each_page(p, |_, record| match stamps(record, &base) {
                Some((a, seq)) if a & !0xffff_ffff == WAL_TAG => {
                    let t = (a & 0xffff_ffff) as usize;
                    if t < next.len() && next[t] == seq {
                        next[t] += 1;
                    } else {
                        wrong += 1;
                    }
                }
                _ => wrong += 1,
            })
            .map_err(|e| read_err(p, e))?;
            wrong += u64::from(len % PAGE as u64 != 0);
            for (t, &n) in per_worker.iter().enumerate() {
                wrong += n.abs_diff(next[t]);
            }
        }
    }
    Ok((wrong, paths.len() as u64))
}

/// Refuses a run whose files would not fit in `dir`'s free space (on tmpfs: memory), before
/// anything is written. At most one workload's files exist at a time: `seqwrite`'s files of
/// one measurement, `randwrite`'s two shared files, or one `wal` log.
fn check_space(dir: &Path, workloads: &[Workload], sizes: Sizes, threads: usize) -> LabResult<()> {
    let need = workloads
        .iter()
        .map(|w| match w {
            Workload::Seqwrite => sizes.seq_bytes * threads as u64,
            Workload::Randwrite => sizes.rand_pages * PAGE as u64 * VARIANTS.len() as u64,
            Workload::Wal => sizes.wal_bytes + (WAL_SYNC_BYTES * threads) as u64,
        })
        .max()
        .unwrap_or(0);
    let Some(free) = free_bytes(dir) else {
        return Ok(());
    };
    if need > free {
        return Err(crate::lab_err!(
            "the write scenario needs {} MiB in {} and {} MiB are free: pass smaller \
             --seq-mib, --rand-mib or --wal-mib, fewer --threads, or another --dir",
            need >> 20,
            dir.display(),
            free >> 20
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Tables.
// ---------------------------------------------------------------------------------------

/// `#threads | variant | ops/s | MB/s | p50 | p99 | syscalls/op | file B per caller B | dirty
/// high water / limit`.
fn detail_table(
    report: &Report,
    threads: &[usize],
    extra: &Map<String, Value>,
    limit: u64,
) -> Table {
    let mut t = Table::new([
        "#threads",
        "variant",
        "ops/s",
        "MB/s",
        "p50 (ns)",
        "p99 (ns)",
        "syscalls/op",
        "file B / caller B",
        "dirty high water / limit (pages)",
    ]);
    for &n in threads {
        for v in VARIANTS {
            let get = |m: &str| report.row(v, n, m, extra).map(|r| r.median);
            let Some(ops) = get("ops_per_sec") else {
                continue;
            };
            t.row([
                n.to_string(),
                v.to_string(),
                fmt_num(ops),
                get("mb_per_sec").map_or("-".into(), fmt_num),
                get("p50_latency_ns").map_or("-".into(), fmt_num),
                get("p99_latency_ns").map_or("-".into(), fmt_num),
                get("syscalls_per_op").map_or("-".into(), |x| format!("{x:.3}")),
                get("backing_bytes_per_byte").map_or("-".into(), |x| format!("{x:.3}")),
                get("dirty_high_water_pages").map_or("-".into(), |h| format!("{h:.0} / {limit}")),
            ]);
        }
    }
    t
}

/// `workload | #threads | foliocache / kernel | target | met`.
fn target_table(report: &Report, workloads: &[Workload], threads: &[usize]) -> Table {
    let mut t = Table::new([
        "workload",
        "#threads",
        "foliocache / kernel",
        "target",
        "met",
    ]);
    for &w in workloads {
        let target = TARGETS
            .iter()
            .find(|(tw, _)| *tw == w)
            .map_or(1.0, |(_, x)| *x);
        let extra = workload_extra(w);
        for &n in threads {
            let r = report.comparisons.iter().find(|c| {
                c.threads == n
                    && c.metric == "ops_per_sec"
                    && c.candidate == "foliocache"
                    && c.extra.get("workload") == extra.get("workload")
            });
            t.row([
                w.name().to_string(),
                n.to_string(),
                r.map_or("-".into(), |c| format!("{:.2}x", c.ratio)),
                format!(">= {target}x"),
                match r {
                    Some(c) if c.ratio >= target => "yes",
                    Some(_) => "no",
                    None => "-",
                }
                .to_string(),
            ]);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::parse_threads;

    fn tiny() -> Args {
        Args {
            common: CommonArgs {
                threads: Some(parse_threads("1,2").unwrap()),
                duration: Some(Duration::from_millis(20)),
                runs: Some(1),
                quick: true,
                no_pin: true,
                no_progress: true,
                ..CommonArgs::default()
            },
            budget_mib: Some(2),
            seq_mib: Some(2),
            rand_mib: Some(4),
            wal_mib: Some(1),
            ..Args::default()
        }
    }

    #[test]
    fn a_tiny_run_writes_verifies_and_compares() {
        let r = run(&tiny()).unwrap();
        assert!(r.all_checks_ok(), "{:?}", r.checks);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        for name in [
            "contents_verified",
            "dirty_within_limit",
            "bad_page_events",
            "accounting_baseline",
        ] {
            assert!(r.checks.iter().any(|c| c.name == name), "{name}");
        }
        // kernel against foliocache for each workload at 1 and 2 threads.
        assert_eq!(r.comparisons.len(), 3 * 2);
        for w in Workload::ALL {
            let extra = workload_extra(w);
            for n in [1, 2] {
                for v in VARIANTS {
                    let ops = r.row(v, n, "ops_per_sec", &extra).unwrap().median;
                    assert!(ops > 0.0, "{} {v} {n}", w.name());
                    let p50 = r.row(v, n, "p50_latency_ns", &extra).unwrap().median;
                    assert!(p50 > 0.0, "{} {v} {n}: no operation timed", w.name());
                }
                let k = r
                    .row("kernel", n, "backing_bytes_per_byte", &extra)
                    .unwrap();
                assert_eq!(
                    k.median, 1.0,
                    "the kernel's calls write what they are given"
                );
                let calls = r
                    .row("kernel", n, "syscalls_per_op", &extra)
                    .unwrap()
                    .median;
                assert!(calls >= 1.0, "{} {n}: {calls}", w.name());
                assert!(r
                    .row("foliocache", n, "dirty_high_water_pages", &extra)
                    .is_some());
            }
        }
        // A randwrite batch rewrites hot pages: foliocache writes each dirty page back once.
        let extra = workload_extra(Workload::Randwrite);
        let amp = r
            .row("foliocache", 1, "backing_bytes_per_byte", &extra)
            .unwrap();
        assert!(amp.median < 1.0, "{amp:?}");
        let stats = r.stats.as_ref().unwrap();
        assert!(stats["wal"]["writeback_pages"].as_u64() > Some(0));
        let (title, _) = r.tables.last().unwrap();
        assert!(title.starts_with("Targets"), "{title}");
    }

    #[test]
    fn a_run_that_cannot_fit_is_refused_up_front() {
        let mut args = tiny();
        args.seq_mib = Some(1 << 20); // 1 TiB per thread
        args.workload = vec![Workload::Seqwrite];
        let Err(e) = run(&args) else {
            panic!("a run needing 1 TiB per thread was not refused");
        };
        assert!(e.0.contains("--seq-mib"), "{}", e.0);
    }

    #[test]
    fn pages_keep_to_their_worker() {
        for n in 1..5 {
            for drawn in 0..64 {
                for tid in 0..n {
                    let p = own_page(drawn, tid, n, 63);
                    assert!(p < 63 && p as usize % n == tid, "{drawn} {tid} {n}: {p}");
                }
            }
        }
    }

    #[test]
    fn a_torn_or_misplaced_page_is_caught() {
        let base = base_page();
        let mut page = base.clone();
        stamp(&mut page, 7, 3);
        assert_eq!(stamps(&page, &base), Some((7, 3)));
        page[PAGE - 1] ^= 1;
        assert_eq!(stamps(&page, &base), None, "torn trailer");
        stamp(&mut page, 7, 3);
        page[100] ^= 1;
        assert_eq!(stamps(&page, &base), None, "wrong body");
    }
}
