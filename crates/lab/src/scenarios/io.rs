//! `io`: cold reads from a disk file system, foliocache beside the kernel's buffered path,
//! both beside fio's measure of what the device can give.
//!
//! # What it measures
//!
//! The other page-cache scenarios read files on tmpfs, where a miss is a copy from memory:
//! they measure the cache, not the I/O under it. This one puts a file on a disk file system
//! (`--dir`, default `/var/tmp`, which is ext4 on a virtio disk on the lab's machines) and
//! reads it **cold**, so that every byte the caller gets comes from the device, through one
//! of two paths:
//!
//! - `foliocache`: `CachedFile` reads through a cache whose I/O is the one asked for (`--io`:
//!   the engine; `--direct`: by default direct I/O where the file system has it, so the
//!   kernel keeps no second copy of the file);
//! - `kernel-pread`: `pread(2)` on a plain descriptor, the kernel's buffered path (its page
//!   cache and readahead), the way a storage engine without a cache of its own reads.
//!
//! Three workloads, each on one file of `--file-mib` (64 MiB with `--quick`, 1 GiB
//! otherwise):
//!
//! | workload | what the caller does | foliocache's configuration | fio's shape |
//! |---|---|---|---|
//! | `seqread` | one thread, 128 KiB `read_exact_at` calls from the first byte to the last | `Config::new` (readahead on, its default window) | `rw=read bs=128k iodepth=8` |
//! | `randread-batch` | one thread, `--reads` random 4 KiB-aligned 4 KiB reads (4,096 with `--quick`, 65,536 otherwise) in batches of 32, one call per batch | `Config::block_cache` (readahead off) | `rw=randread bs=4k iodepth=32` |
//! | `randread-threads` | `--threads` threads (default 1 and 2) sharing `--reads` random 4 KiB reads, one at a time | `Config::block_cache` | `rw=randread bs=4k iodepth=1 numjobs=N` |
//!
//! foliocache's budget is a quarter of the file, so the file does not fit and the cache
//! cannot turn the run into a warm one. The batched workload calls `read_batch`, which will
//! be `CachedFile::read_ranges` (every miss of the 32 ranges submitted at once, one wait):
//! until that exists it reads the ranges one after the other, and the kernel contender does
//! the same with one `pread` per range. The offsets are drawn from a seed per workload, run
//! and thread, so both contenders of a run read the same offsets in the same order.
//!
//! # Why cold, and how
//!
//! A warm read is a copy, and other scenarios measure copies; here the question is what a
//! miss costs and how much of the device's speed each path delivers. Every run starts cold
//! on both sides: the kernel's copy of the file is dropped (`fdatasync`, then
//! `posix_fadvise(POSIX_FADV_DONTNEED)`: [`drop_kernel_cache`]) and foliocache is a fresh
//! cache (its memory faulted in before the window, [`FolioCache::populate`], so the first
//! touch of its frames is not what is measured). The two contenders run interleaved in one
//! process (kernel, foliocache, kernel, foliocache, ... `--runs` times: 1 with `--quick`,
//! 5 otherwise; the tables show medians), so a neighbour's burst on the disk hits both.
//!
//! # fio: the device's limit
//!
//! A number such as "300 MB/s" says little without the device beside it. When `fio` is on
//! `PATH` (or `--fio PATH`; `--no-fio` skips it), it reads the same file with the same
//! pattern and queue depth, `--direct=1` with `--ioengine=io_uring` (then `libaio`, then
//! `psync` if the engine is refused), bounded by the file (`--size`), the same number of
//! random reads (`--number_ios`) and a few seconds (`--runtime`). Its bandwidth and IOPS are
//! the row `fio`, "the device's limit": what the device gives to a program that only moves
//! bytes, at that depth. Each contender's ratio to it says how much of the device it
//! delivers; a ratio above 1 can happen (the kernel's readahead reads ahead of fio's depth
//! of 8) and says the depth, not the device, was the limit. fio's latencies are per I/O
//! (completion latency), the contenders' per call.
//!
//! # Per run
//!
//! MB/s (bytes the caller got, 10^6 per second of the run) and reads per second (a batch
//! counts its 32 reads, as fio counts I/Os); p50 and p99 latency of a call (an HDR
//! histogram of every call: a 128 KiB read, a batch of 32 reads, or one 4 KiB read); CPU
//! milliseconds per GiB read (`getrusage(RUSAGE_SELF)`, user + system, every thread of the
//! process, the cache's own included, around the run; not for fio, whose start-up would
//! dominate so short a run); and the share of the file in the kernel's page cache after the
//! run ([`kernel_residency`], `mmap` + `mincore`), printed after each foliocache run:
//! direct I/O should leave nothing there, the buffered path leaves what it read.
//!
//! # Output
//!
//! Per workload the seeds' table (`#threads | kernel-pread (vanilla) | foliocache
//! (patched) | boost (%) | fio`, MB/s for `seqread`, reads per second otherwise), then one
//! table of every contender: MB/s, calls/s, latencies, CPU per GiB, ratio to the kernel, ratio
//! to fio, kernel residency.
//!
//! Stable names (see `docs/LAB-RESULTS.md`):
//!
//! | kind | names |
//! |---|---|
//! | variants | `kernel-pread`, `foliocache`, `fio` (the device's limit; one run per workload and thread count) |
//! | row fields | `workload`: `seqread`, `randread-batch` or `randread-threads` |
//! | metrics | `mb_per_sec` (bytes read, 10^6 per second), `ops_per_sec` (reads per second: 128 KiB reads for `seqread`, 4 KiB reads otherwise, a batch counting its 32; for fio, I/Os per second), `p50_latency_ns`, `p99_latency_ns` (per call; fio: per I/O), `cpu_ms_per_gib` (CPU milliseconds per GiB read; not for fio), `kernel_resident_pct` (percent of the file's pages in the kernel's page cache after the run) |
//! | comparisons | candidate `foliocache` against baseline `kernel-pread` on the workload's headline metric (`mb_per_sec` for `seqread`, `ops_per_sec` otherwise), `p99_latency_ns` and `cpu_ms_per_gib`; candidates `foliocache` and `kernel-pread` against baseline `fio` on the headline metric; per workload and thread count |
//! | checks | `reads_match_kernel` (runs whose checksum of the bytes foliocache returned differs from the kernel's for the same offsets: 0), `direct_kernel_residency` (the most of the file left in the kernel's page cache after a foliocache run whose file was read direct: at most 1 %; not judged when buffered), `read_errors` (0), `bad_page_events` (0) |
//! | params | besides the common ones and the file options' (`dir`, `filesystem`, `io_engine`, `io_mode`, `direct_io_align` ...): `file_bytes`, `budget_bytes`, `random_reads`, `batch`, `fio` (its path, or `null`), `fio_engine` |
//!
//! The checksum covers, of every read, the first and last 8 bytes of each 4 KiB page, and of
//! every 64th read every byte: cheap enough not to weigh on the CPU figures, the same for
//! both contenders.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use foliocache::{CacheError, CachedFile, Config, FolioCache};
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use super::files::{cache_stats_json, LabFile};
use super::peers::workload::splitmix64;
use crate::harness::{
    cpu_time, drop_kernel_cache, fmt_num, free_bytes, kernel_residency, merge, seed_table, Bench,
    CommonArgs, FioArgs, FioJob, Interleaver, IoArgs, IoSetup, LabResult, Report, Table, MAX_RUNS,
};

/// Not a seed: foliocache's own I/O, against the kernel's and the device's.
pub const SEED: &str = "no seed (cold reads from a disk: foliocache's I/O against the kernel's \
buffered path and fio)";

/// Subcommand name.
pub const NAME: &str = "io";

/// One line on what it measures.
pub const ABOUT: &str = "cold reads from a disk file system: 128 KiB sequential reads, 4 KiB \
random reads in batches of 32, 4 KiB random reads from N threads; foliocache and the kernel's \
buffered pread, each against fio's measure of the device";

/// The kernel's buffered `pread(2)`, the baseline.
pub const KERNEL: &str = "kernel-pread";

/// foliocache, the candidate.
pub const FOLIOCACHE: &str = "foliocache";

/// fio: the device's limit.
pub const FIO: &str = "fio";

/// The interleaved contenders, baseline first.
pub const VARIANTS: [&str; 2] = [KERNEL, FOLIOCACHE];

/// A page: the unit of the random reads.
const PAGE: usize = 4096;

/// One `seqread` call.
const SEQ_CALL: usize = 128 << 10;

/// Reads per `randread-batch` call.
const BATCH: usize = 32;

/// fio's queue depth for `seqread` (a readahead window's worth of 128 KiB requests in
/// flight is what a good sequential reader keeps).
const SEQ_DEPTH: usize = 8;

/// Every this many calls, a call's bytes are checksummed whole (else the ends of each page).
const FULL_EVERY: u64 = 64;

/// A read pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// One thread, 128 KiB reads from start to end.
    Seqread,
    /// One thread, random 4 KiB reads in batches of 32.
    RandreadBatch,
    /// N threads, random 4 KiB reads one at a time.
    RandreadThreads,
}

impl Workload {
    /// Every workload, in table order.
    pub const ALL: [Workload; 3] = [
        Workload::Seqread,
        Workload::RandreadBatch,
        Workload::RandreadThreads,
    ];

    /// Its stable name (the rows' `workload` field).
    pub fn name(self) -> &'static str {
        match self {
            Workload::Seqread => "seqread",
            Workload::RandreadBatch => "randread-batch",
            Workload::RandreadThreads => "randread-threads",
        }
    }

    /// The metric its tables and comparisons lead with.
    pub fn headline(self) -> &'static str {
        match self {
            Workload::Seqread => "mb_per_sec",
            _ => "ops_per_sec",
        }
    }

    /// The thread counts it runs at: `threads` for `randread-threads`, 1 for the others.
    fn threads(self, threads: &[usize]) -> Vec<usize> {
        match self {
            Workload::RandreadThreads => threads.to_vec(),
            _ => vec![1],
        }
    }

    /// fio's `rw`, block size and queue depth for it.
    fn fio_shape(self) -> (&'static str, &'static str, usize) {
        match self {
            Workload::Seqread => ("read", "128k", SEQ_DEPTH),
            Workload::RandreadBatch => ("randread", "4k", BATCH),
            Workload::RandreadThreads => ("randread", "4k", 1),
        }
    }

    /// The workload in words, for the table titles.
    fn describe(self, ctx: &Ctx) -> String {
        match self {
            Workload::Seqread => format!(
                "one thread, 128 KiB reads over the whole {} MiB file",
                ctx.file_bytes >> 20
            ),
            Workload::RandreadBatch => format!(
                "one thread, {} random 4 KiB reads in batches of {BATCH}",
                ctx.reads
            ),
            Workload::RandreadThreads => format!(
                "{} random 4 KiB reads shared by the threads, one at a time",
                ctx.reads
            ),
        }
    }
}

/// Options of `io`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Common options. `--duration` is not used (a run is a fixed amount of reading);
    /// `--threads` is for `randread-threads` [default: 1,2]; `--runs` [default: 1 with
    /// --quick, 5 otherwise].
    #[command(flatten)]
    pub common: CommonArgs,
    /// Where the file is and how foliocache reads it (`--dir`, default /var/tmp; `--io`,
    /// `--direct`).
    #[command(flatten)]
    pub io: IoArgs,
    /// The file's size in MiB [default: 64 with --quick, 1024 otherwise].
    #[arg(long)]
    pub file_mib: Option<u64>,
    /// Random 4 KiB reads per run, all threads together [default: 4096 with --quick, 65536
    /// otherwise].
    #[arg(long)]
    pub reads: Option<u64>,
    /// Workloads, comma-separated [default: all three].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub workload: Vec<Workload>,
    /// The fio beside the contenders (`--fio PATH`, `--no-fio`).
    #[command(flatten)]
    pub fio: FioArgs,
}

super::scenario!();

/// The directory `io` reads in unless `--dir` says otherwise: `/var/tmp` (a disk file system
/// where there is one), else the temporary directory.
pub fn default_dir() -> PathBuf {
    let var_tmp = Path::new("/var/tmp");
    if var_tmp.is_dir() {
        var_tmp.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// What every measurement shares.
struct Ctx {
    file: LabFile,
    file_bytes: u64,
    budget: usize,
    /// Random reads per run, all threads together.
    reads: u64,
    io: IoArgs,
    pin: bool,
}

impl Ctx {
    /// foliocache's configuration for `w`.
    fn config(&self, w: Workload) -> Config {
        let base = match w {
            Workload::Seqread => Config::new(self.budget),
            _ => Config::block_cache(self.budget),
        };
        self.io.apply(base).panic_on_bad_page(false)
    }

    /// Each thread's offsets for a run of `w` at `threads` threads in round `round`: the
    /// same for both contenders of the round. `seqread` walks the file and needs none.
    fn plan(&self, w: Workload, threads: usize, round: usize) -> Vec<Vec<u64>> {
        if w == Workload::Seqread {
            return vec![Vec::new(); threads];
        }
        let pages = self.file_bytes / PAGE as u64;
        let per_thread = (self.reads / threads as u64).max(1);
        (0..threads)
            .map(|t| {
                let mut x = splitmix64(
                    0x696f_0000_0000 ^ ((w as u64) << 40) ^ ((round as u64) << 20) ^ t as u64,
                );
                (0..per_thread)
                    .map(|_| {
                        x = splitmix64(x);
                        (x % pages) * PAGE as u64
                    })
                    .collect()
            })
            .collect()
    }
}

/// Runs the scenario.
pub fn run(args: &Args) -> LabResult<Report> {
    let mut settings = args.common.settings();
    let quick = settings.quick;
    settings.threads = match &args.common.threads {
        Some(t) => t.0.clone(),
        None => vec![1, 2],
    };
    settings.threads.sort_unstable();
    settings.threads.dedup();
    settings.runs = args
        .common
        .runs
        .unwrap_or(if quick { 1 } else { 5 })
        .clamp(1, MAX_RUNS);
    let mut workloads: Vec<Workload> = Vec::new();
    for &w in &args.workload {
        if !workloads.contains(&w) {
            workloads.push(w);
        }
    }
    if workloads.is_empty() {
        workloads = Workload::ALL.to_vec();
    }
    let file_mib = args.file_mib.unwrap_or(if quick { 64 } else { 1024 });
    if file_mib == 0 || file_mib > 1 << 20 {
        return Err(crate::lab_err!(
            "--file-mib {file_mib} is out of range: use 1 MiB to 1 TiB"
        ));
    }
    let reads = args.reads.unwrap_or(if quick { 4096 } else { 65536 });
    if reads == 0 {
        return Err(crate::lab_err!("--reads must be at least 1"));
    }
    let fio = args.fio.find()?;
    let dir = args.io.dir_or(default_dir);
    let setup = IoSetup::probe(&args.io, &dir)?;
    let file_bytes = file_mib << 20;
    if let Some(free) = free_bytes(&dir) {
        if free < file_bytes + (64 << 20) {
            return Err(crate::lab_err!(
                "the io scenario needs {file_mib} MiB in {} and {} MiB are free: pass a smaller \
                 --file-mib or another --dir",
                dir.display(),
                free >> 20
            ));
        }
    }
    let ctx = Ctx {
        file: LabFile::create(&dir, "io", 0, file_bytes)?,
        file_bytes,
        budget: (file_bytes / 4).max(1 << 20) as usize,
        reads,
        io: args.io.clone(),
        pin: settings.pin,
    };
    let runtime_s = if quick { 2 } else { 5 };

    println!("{NAME}: {}", setup.header());
    println!(
        "{NAME}: a {file_mib} MiB file; foliocache's budget {} MiB (a quarter of it), a fresh \
         cache every run; every run cold (the kernel's copy dropped first); {} run(s) per \
         contender, interleaved",
        ctx.budget >> 20,
        settings.runs
    );
    let shape = format!("the same pattern and depth, at most {runtime_s} s");
    println!("{}", args.fio.header(NAME, fio.as_deref(), &shape));

    let measurements: usize = workloads
        .iter()
        .map(|w| w.threads(&settings.threads).len())
        .sum();
    let steps = measurements * (settings.runs * VARIANTS.len() + usize::from(fio.is_some()));
    let mut bench = Bench::with_steps(
        NAME,
        SEED,
        &settings,
        merge(
            json!({
                "variants": VARIANTS.iter().copied().chain(fio.as_ref().map(|_| FIO)).collect::<Vec<_>>(),
                "workloads": workloads.iter().map(|w| w.name()).collect::<Vec<_>>(),
                "file_bytes": file_bytes,
                "budget_bytes": ctx.budget,
                "random_reads": reads,
                "random_read_bytes": PAGE,
                "seq_read_bytes": SEQ_CALL,
                "batch": BATCH,
                "runs_are_cold": true,
                "foliocache_config": {
                    "seqread": "Config::new (readahead on)",
                    "randread-batch": "Config::block_cache (readahead off)",
                    "randread-threads": "Config::block_cache (readahead off)",
                },
                "fio": fio.as_ref().map(|p| p.display().to_string()),
                "fio_runtime_s": runtime_s,
            }),
            setup.params(),
        ),
        steps as u64,
        Duration::from_millis(file_mib * 8),
    );

    let mut totals = Totals::default();
    let mut stats = Map::new();
    let mut fio_engine: Option<String> = None;
    for &w in &workloads {
        let extra = workload_extra(w);
        let threads = w.threads(&settings.threads);
        bench.measure_at(w.name(), &threads, &VARIANTS, &extra, |il, &v, n, round| {
            let s = measure(&ctx, v, w, n, round)?;
            let gib = s.bytes as f64 / (1u64 << 30) as f64;
            il.add(v, n, "mb_per_sec", s.bytes as f64 / 1e6 / secs(s.elapsed));
            il.add(v, n, "ops_per_sec", s.reads as f64 / secs(s.elapsed));
            il.add(v, n, "p50_latency_ns", s.hist.value_at_quantile(0.50) as f64);
            il.add(v, n, "p99_latency_ns", s.hist.value_at_quantile(0.99) as f64);
            il.add(v, n, "cpu_ms_per_gib", s.cpu.as_secs_f64() * 1e3 / gib.max(1e-12));
            il.add(v, n, "kernel_resident_pct", s.resident * 100.0);
            if v == FOLIOCACHE {
                println!(
                    "{NAME}: {} at {n} thread(s), run {}: foliocache ({}) left {:.2} % of the \
                     file in the kernel's page cache",
                    w.name(),
                    round + 1,
                    crate::harness::mode_name(s.direct_align),
                    s.resident * 100.0
                );
                if s.direct_align.is_some() {
                    totals.direct_runs += 1;
                    totals.direct_resident = totals.direct_resident.max(s.resident * 100.0);
                }
                totals.bad_pages += s.bad_pages;
                if let Some(vm) = &s.vmstat {
                    stats.insert(w.name().to_string(), vm.clone());
                }
            }
            totals.sums.push(((w, n, round), v, s.checksum));
            totals
                .errors
                .extend(s.errors.iter().map(|e| format!("{} {v}: {e}", w.name())));
            Ok(())
        })?;
        if let Some(bin) = &fio {
            let mut il = Interleaver::new();
            for &n in &threads {
                bench.message(format!("{}, fio at {n} job(s)", w.name()));
                match fio_job(&ctx, w, n, runtime_s).run(bin) {
                    Ok(f) => {
                        il.add(FIO, n, "mb_per_sec", f.bw_bytes / 1e6);
                        il.add(FIO, n, "ops_per_sec", f.iops);
                        if let Some(p) = f.p50_ns {
                            il.add(FIO, n, "p50_latency_ns", p);
                        }
                        if let Some(p) = f.p99_ns {
                            il.add(FIO, n, "p99_latency_ns", p);
                        }
                        il.add(FIO, n, "kernel_resident_pct", f.resident * 100.0);
                        fio_engine.get_or_insert(f.engine);
                    }
                    Err(e) => {
                        println!("{NAME}: fio failed for {} at {n} job(s): {e}", w.name());
                        totals.fio_errors.push(format!("{} {n}: {e}", w.name()));
                    }
                }
                bench.tick();
            }
            bench.report.add_rows(&il, &extra);
        }
        let report = &mut bench.report;
        for &n in &threads {
            for metric in [w.headline(), "p99_latency_ns", "cpu_ms_per_gib"] {
                report.compare(KERNEL, FOLIOCACHE, n, metric, &extra);
            }
            report.compare(FIO, FOLIOCACHE, n, w.headline(), &extra);
            report.compare(FIO, KERNEL, n, w.headline(), &extra);
        }
    }

    let report = &mut bench.report;
    if let (Some(e), Value::Object(p)) = (&fio_engine, &mut report.params) {
        p.insert("fio_engine".into(), json!(e));
    }
    let (compared, mismatched) = totals.checksums();
    report.check(
        "reads_match_kernel",
        mismatched,
        mismatched == 0 && compared > 0,
    );
    if totals.direct_runs > 0 {
        let pct = (totals.direct_resident * 100.0).round() / 100.0;
        report.check("direct_kernel_residency", pct, pct <= 1.0);
    } else {
        report.check(
            "direct_kernel_residency",
            "not judged: foliocache read the file buffered",
            true,
        );
    }
    report.check(
        "read_errors",
        totals.errors.len(),
        totals.errors.is_empty(),
    );
    report.check("bad_page_events", totals.bad_pages, totals.bad_pages == 0);
    for e in totals.errors.iter().take(5) {
        eprintln!("{NAME}: {e}");
    }
    if !totals.fio_errors.is_empty() {
        stats.insert("fio_errors".into(), json!(totals.fio_errors));
    }
    report.stats = (!stats.is_empty()).then_some(Value::Object(stats));

    let fio_cols: Vec<&str> = if fio.is_some() { vec![FIO] } else { vec![] };
    let mut tables = Vec::new();
    for &w in &workloads {
        let extra = workload_extra(w);
        tables.push((
            format!(
                "io, workload {}: {}, {} (no seed; vanilla = the kernel's buffered pread, \
                 patched = foliocache{}); cold, file on {}",
                w.name(),
                w.describe(&ctx),
                if w == Workload::Seqread {
                    "MB/s"
                } else {
                    "4 KiB reads/s"
                },
                if fio.is_some() {
                    "; fio = the device's limit"
                } else {
                    ""
                },
                setup.filesystem
            ),
            seed_table(report, w.headline(), KERNEL, FOLIOCACHE, &fio_cols, &extra),
        ));
    }
    tables.push((
        format!(
            "io: every contender, medians of {} run(s); foliocache: engine {}, {}; ratios on \
             MB/s for seqread, on reads (I/Os) per second for the random reads",
            settings.runs,
            setup.engine,
            setup.mode()
        ),
        detail_table(report, &workloads, &settings.threads),
    ));
    let plotted = if workloads.contains(&Workload::RandreadThreads) {
        Workload::RandreadThreads
    } else {
        workloads[0]
    };
    let plot_extra = workload_extra(plotted);
    drop(ctx);
    bench.finish(&settings, &tables, Some((plotted.headline(), &plot_extra)))
}

/// Seconds, at least a nanosecond.
fn secs(d: Duration) -> f64 {
    d.as_secs_f64().max(1e-9)
}

fn workload_extra(w: Workload) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("workload".into(), json!(w.name()));
    m
}

/// What the checks add up over every run.
#[derive(Default)]
struct Totals {
    /// (workload, threads, round), contender, checksum of what it read.
    sums: Vec<((Workload, usize, usize), &'static str, u64)>,
    errors: Vec<String>,
    fio_errors: Vec<String>,
    bad_pages: u64,
    /// foliocache runs whose file was read direct, and the most of the file (percent) the
    /// kernel's page cache held after one.
    direct_runs: u64,
    direct_resident: f64,
}

impl Totals {
    /// (runs compared, runs whose foliocache checksum differs from the kernel's).
    fn checksums(&self) -> (u64, u64) {
        let (mut compared, mut mismatched) = (0, 0);
        for (key, v, sum) in &self.sums {
            if *v != FOLIOCACHE {
                continue;
            }
            if let Some((_, _, k)) = self.sums.iter().find(|(k, v, _)| k == key && *v == KERNEL) {
                compared += 1;
                mismatched += u64::from(k != sum);
            }
        }
        (compared, mismatched)
    }
}

/// `workload | #threads | contender | MB/s | reads/s | p50 | p99 | CPU s/GiB | vs kernel | vs
/// fio | kernel resident (%)`.
fn detail_table(report: &Report, workloads: &[Workload], threads: &[usize]) -> Table {
    let mut t = Table::new([
        "workload",
        "#threads",
        "contender",
        "MB/s",
        "reads/s",
        "p50 (us)",
        "p99 (us)",
        "CPU s/GiB",
        "vs kernel",
        "vs fio",
        "kernel resident (%)",
    ]);
    for &w in workloads {
        let extra = workload_extra(w);
        for n in w.threads(threads) {
            for v in [KERNEL, FOLIOCACHE, FIO] {
                let get = |m: &str| report.row(v, n, m, &extra).map(|r| r.median);
                let Some(mb) = get("mb_per_sec") else {
                    continue;
                };
                let ratio = |baseline: &str| {
                    report
                        .comparisons
                        .iter()
                        .find(|c| {
                            c.baseline == baseline
                                && c.candidate == v
                                && c.threads == n
                                && c.metric == w.headline()
                                && c.extra.get("workload") == extra.get("workload")
                        })
                        .map_or("-".into(), |c| format!("{:.2}x", c.ratio))
                };
                t.row([
                    w.name().to_string(),
                    n.to_string(),
                    v.to_string(),
                    fmt_num(mb),
                    get("ops_per_sec").map_or("-".into(), fmt_num),
                    get("p50_latency_ns").map_or("-".into(), |x| fmt_num(x / 1e3)),
                    get("p99_latency_ns").map_or("-".into(), |x| fmt_num(x / 1e3)),
                    get("cpu_ms_per_gib").map_or("-".into(), |x| format!("{:.3}", x / 1e3)),
                    ratio(KERNEL),
                    ratio(FIO),
                    get("kernel_resident_pct").map_or("-".into(), |x| format!("{x:.2}")),
                ]);
            }
        }
    }
    t
}

// ---------------------------------------------------------------------------------------
// The two ways to read the file.
// ---------------------------------------------------------------------------------------

/// One batch of random reads through the cache: every miss of the batch is read together
/// ([`CachedFile::read_ranges`]), one wait.
fn read_batch(file: &CachedFile, reads: &mut [(u64, &mut [u8])]) -> Result<(), CacheError> {
    file.read_ranges(reads)
}

/// A contender's way to the file, one per thread.
trait Source: Sync {
    /// Exactly `buf.len()` bytes at `offset`.
    fn read_exact(&self, buf: &mut [u8], offset: u64) -> Result<(), String>;
    /// Every range of `reads`.
    fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Result<(), String>;
}

impl Source for File {
    fn read_exact(&self, buf: &mut [u8], offset: u64) -> Result<(), String> {
        FileExt::read_exact_at(self, buf, offset).map_err(|e| format!("pread at {offset}: {e}"))
    }

    /// One `pread` at a time: the kernel's buffered path has no batch.
    fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Result<(), String> {
        reads
            .iter_mut()
            .try_for_each(|(off, buf)| self.read_exact(buf, *off))
    }
}

impl Source for CachedFile {
    fn read_exact(&self, buf: &mut [u8], offset: u64) -> Result<(), String> {
        self.read_exact_at(buf, offset)
            .map_err(|e| format!("read at {offset}: {e}"))
    }

    fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Result<(), String> {
        read_batch(self, reads).map_err(|e| format!("batch read: {e}"))
    }
}

/// A checksum of one range read at `offset`: the first and last 8 bytes of each page, every
/// byte when `full`.
fn digest(offset: u64, data: &[u8], full: bool) -> u64 {
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let mut h = splitmix64(offset ^ data.len() as u64);
    if full {
        for w in data.chunks_exact(8) {
            h = splitmix64(h ^ word(w));
        }
        for &b in data.chunks_exact(8).remainder() {
            h = splitmix64(h ^ u64::from(b));
        }
    } else {
        for page in data.chunks(PAGE) {
            if page.len() >= 8 {
                h = splitmix64(h ^ word(&page[..8]));
                h = splitmix64(h ^ word(&page[page.len() - 8..]));
            } else {
                for &b in page {
                    h = splitmix64(h ^ u64::from(b));
                }
            }
        }
    }
    h
}

/// What one worker did.
struct WorkerOut {
    /// Calls made: 128 KiB reads, batches, or 4 KiB reads.
    calls: u64,
    /// Ranges read (a batch is 32 of them).
    reads: u64,
    bytes: u64,
    /// The sum of its reads' digests (order-free, so threads add up).
    sum: u64,
    hist: Histogram<u64>,
    began: Instant,
    ended: Instant,
    error: Option<String>,
}

impl WorkerOut {
    fn new() -> WorkerOut {
        WorkerOut {
            calls: 0,
            reads: 0,
            bytes: 0,
            sum: 0,
            hist: Histogram::new_with_bounds(1, 600_000_000_000, 3)
                .expect("static histogram bounds"),
            began: Instant::now(),
            ended: Instant::now(),
            error: None,
        }
    }

    /// Times one call of `reads` ranges and `bytes` bytes, and counts it if it succeeded.
    fn call(
        &mut self,
        reads: usize,
        bytes: usize,
        op: impl FnOnce() -> Result<(), String>,
    ) -> bool {
        let t0 = Instant::now();
        let r = op();
        self.hist
            .saturating_record((t0.elapsed().as_nanos() as u64).max(1));
        match r {
            Ok(()) => {
                self.calls += 1;
                self.reads += reads as u64;
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

/// One worker's reads of `w`: `offsets` (random reads) or the whole file (`seqread`).
fn worker<S: Source>(src: &S, w: Workload, offsets: &[u64], file_bytes: u64) -> WorkerOut {
    let mut out = WorkerOut::new();
    out.began = Instant::now();
    match w {
        Workload::Seqread => {
            let mut buf = vec![0u8; SEQ_CALL];
            let mut off = 0u64;
            while off < file_bytes {
                let len = (file_bytes - off).min(SEQ_CALL as u64) as usize;
                let buf = &mut buf[..len];
                if !out.call(1, len, || src.read_exact(buf, off)) {
                    break;
                }
                out.sum = out
                    .sum
                    .wrapping_add(digest(off, buf, out.calls % FULL_EVERY == 1));
                off += len as u64;
            }
        }
        Workload::RandreadBatch => {
            let mut bufs = vec![0u8; BATCH * PAGE];
            for chunk in offsets.chunks(BATCH) {
                let mut reads: Vec<(u64, &mut [u8])> =
                    chunk.iter().copied().zip(bufs.chunks_mut(PAGE)).collect();
                if !out.call(chunk.len(), chunk.len() * PAGE, || src.read_many(&mut reads)) {
                    break;
                }
                let full = out.calls % FULL_EVERY == 1;
                for (off, buf) in &reads {
                    out.sum = out.sum.wrapping_add(digest(*off, buf, full));
                }
            }
        }
        Workload::RandreadThreads => {
            let mut buf = vec![0u8; PAGE];
            for &off in offsets {
                if !out.call(1, PAGE, || src.read_exact(&mut buf, off)) {
                    break;
                }
                out.sum = out
                    .sum
                    .wrapping_add(digest(off, &buf, out.calls % FULL_EVERY == 1));
            }
        }
    }
    out.ended = Instant::now();
    out
}

/// Runs one worker per source, released together; returns the wall time from the first
/// worker's start to the last one's end, and what each did.
fn run_workers<S: Source>(
    sources: &[S],
    w: Workload,
    plan: &[Vec<u64>],
    file_bytes: u64,
    pin: bool,
) -> (Duration, Vec<WorkerOut>) {
    let barrier = Barrier::new(sources.len() + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = sources
            .iter()
            .zip(plan)
            .enumerate()
            .map(|(i, (src, offsets))| {
                let barrier = &barrier;
                std::thread::Builder::new()
                    .name(format!("io-{i}"))
                    .spawn_scoped(s, move || {
                        if pin {
                            foliocache::mm::sync::pin_to_cpu(i);
                        }
                        barrier.wait();
                        worker(src, w, offsets, file_bytes)
                    })
                    .expect("spawning an io worker")
            })
            .collect();
        barrier.wait();
        let outs: Vec<WorkerOut> = workers
            .into_iter()
            .map(|h| h.join().expect("io worker"))
            .collect();
        let began = outs.iter().map(|o| o.began).min().expect("a worker");
        let ended = outs.iter().map(|o| o.ended).max().expect("a worker");
        (ended - began, outs)
    })
}

/// One cold run of one contender.
struct Sample {
    bytes: u64,
    /// Ranges read.
    reads: u64,
    elapsed: Duration,
    hist: Histogram<u64>,
    cpu: Duration,
    /// The fraction of the file in the kernel's page cache after the run.
    resident: f64,
    checksum: u64,
    errors: Vec<String>,
    /// foliocache: its file's direct-I/O alignment (`None`: buffered).
    direct_align: Option<u32>,
    bad_pages: u64,
    vmstat: Option<Value>,
}

/// One cold run of `variant` on `w` at `threads` threads, round `round`.
fn measure(
    ctx: &Ctx,
    variant: &str,
    w: Workload,
    threads: usize,
    round: usize,
) -> LabResult<Sample> {
    let path = ctx.file.path();
    drop_kernel_cache(path).map_err(|e| {
        crate::lab_err!("dropping {} from the kernel's cache: {e}", path.display())
    })?;
    let plan = ctx.plan(w, threads, round);
    let (elapsed, outs, cpu, direct_align, cache) = if variant == KERNEL {
        let files: Vec<File> = (0..threads)
            .map(|_| File::open(path))
            .collect::<Result<_, _>>()
            .map_err(|e| crate::lab_err!("opening {}: {e}", path.display()))?;
        let cpu0 = cpu_time();
        let (elapsed, outs) = run_workers(&files, w, &plan, ctx.file_bytes, ctx.pin);
        (elapsed, outs, cpu_time() - cpu0, None, None)
    } else {
        let cache = FolioCache::new(ctx.config(w)).map_err(|e| crate::lab_err!("{e}"))?;
        // The frames' first touch (a fault and a zeroed page each) is not what is measured;
        // a kernel without MADV_POPULATE_WRITE faults them in the window instead.
        let _ = cache.populate();
        let files: Vec<CachedFile> = (0..threads)
            .map(|_| cache.open(path))
            .collect::<Result<_, _>>()
            .map_err(|e| crate::lab_err!("{e}"))?;
        if files.iter().any(|f| f.cached_pages() != 0) {
            return Err(crate::lab_err!("{NAME}: the fresh cache is not cold"));
        }
        let align = files[0].direct_io();
        let cpu0 = cpu_time();
        let (elapsed, outs) = run_workers(&files, w, &plan, ctx.file_bytes, ctx.pin);
        let cpu = cpu_time() - cpu0;
        drop(files);
        (elapsed, outs, cpu, align, Some(cache))
    };
    let resident = kernel_residency(path)
        .map_err(|e| crate::lab_err!("mincore over {}: {e}", path.display()))?;
    let (bad_pages, vmstat) = match &cache {
        Some(c) => (c.stats().bad_pages, Some(cache_stats_json(c))),
        None => (0, None),
    };
    drop(cache);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000_000, 3)
        .expect("static histogram bounds");
    let (mut bytes, mut reads, mut checksum) = (0u64, 0u64, 0u64);
    let mut errors = Vec::new();
    for o in outs {
        bytes += o.bytes;
        reads += o.reads;
        checksum = checksum.wrapping_add(o.sum);
        let _ = hist.add(&o.hist);
        errors.extend(o.error);
    }
    Ok(Sample {
        bytes,
        reads,
        elapsed,
        hist,
        cpu,
        resident,
        checksum,
        errors,
        direct_align,
        bad_pages,
        vmstat,
    })
}

// ---------------------------------------------------------------------------------------
// fio.
// ---------------------------------------------------------------------------------------

/// fio's run for `w` at `jobs` jobs: the file, `w`'s pattern and queue depth, a random
/// workload's number of reads (shared by the jobs), at most `runtime_s` seconds.
fn fio_job(ctx: &Ctx, w: Workload, jobs: usize, runtime_s: u64) -> FioJob<'_> {
    let (rw, bs, depth) = w.fio_shape();
    FioJob {
        name: "foliocache-lab-io",
        path: ctx.file.path(),
        rw,
        bs: bs.to_string(),
        depth,
        jobs,
        size: ctx.file_bytes,
        runtime: Duration::from_secs(runtime_s),
        time_based: false,
        number_ios: (w != Workload::Seqread).then(|| (ctx.reads / jobs as u64).max(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::parse_threads;

    fn quick(dir: &Path, fio: bool) -> Args {
        Args {
            common: CommonArgs {
                threads: Some(parse_threads("1,2").unwrap()),
                quick: true,
                no_pin: true,
                no_progress: true,
                ..CommonArgs::default()
            },
            io: IoArgs {
                dir: Some(dir.to_path_buf()),
                ..IoArgs::default()
            },
            file_mib: None,
            reads: None,
            workload: Vec::new(),
            fio: FioArgs {
                fio: None,
                no_fio: !fio,
            },
        }
    }

    /// Quick mode, its own sizes (a 64 MiB file, 4,096 reads, 1 run), in the temporary
    /// directory: every workload, both contenders, fio where it is installed; every check
    /// holds and the report is valid.
    #[test]
    fn a_quick_run_reads_cold_checks_and_compares() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let r = run(&quick(dir.path(), true)).unwrap();
        eprintln!("io --quick took {:?}", started.elapsed());
        assert!(r.all_checks_ok(), "{:?}", r.checks);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        for name in [
            "reads_match_kernel",
            "direct_kernel_residency",
            "read_errors",
            "bad_page_events",
        ] {
            assert!(r.checks.iter().any(|c| c.name == name), "{name}");
        }
        let with_fio = r.params["fio"].is_string();
        for w in Workload::ALL {
            let extra = workload_extra(w);
            for n in w.threads(&[1, 2]) {
                for v in VARIANTS {
                    let row = r.row(v, n, w.headline(), &extra);
                    assert!(row.is_some_and(|x| x.median > 0.0), "{} {v} {n}", w.name());
                    assert!(r.row(v, n, "kernel_resident_pct", &extra).is_some());
                    assert!(r.row(v, n, "cpu_ms_per_gib", &extra).is_some());
                }
                assert!(r
                    .comparisons
                    .iter()
                    .any(|c| c.baseline == KERNEL && c.threads == n && c.metric == w.headline()));
                if with_fio {
                    assert!(r.row(FIO, n, w.headline(), &extra).is_some(), "{}", w.name());
                }
            }
        }
        // The kernel's buffered sequential read leaves the file in its cache.
        let seq = workload_extra(Workload::Seqread);
        let k = r.row(KERNEL, 1, "kernel_resident_pct", &seq).unwrap();
        if r.params["filesystem"] != "tmpfs" {
            assert!(k.median > 50.0, "{k:?}");
        }
        assert_eq!(r.params["file_bytes"], 64 << 20);
        assert_eq!(r.params["runs"], 1);
        assert!(r.params["io_mode"].is_string());
    }

    #[test]
    fn offsets_are_aligned_inside_the_file_and_shared_by_a_round() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Ctx {
            file: LabFile::create(dir.path(), "io-plan", 0, 1 << 20).unwrap(),
            file_bytes: 1 << 20,
            budget: 1 << 20,
            reads: 100,
            io: IoArgs::default(),
            pin: false,
        };
        let a = ctx.plan(Workload::RandreadThreads, 2, 0);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].len(), 50);
        assert!(a
            .iter()
            .flatten()
            .all(|&o| o % PAGE as u64 == 0 && o < 1 << 20));
        assert_eq!(a, ctx.plan(Workload::RandreadThreads, 2, 0));
        assert_ne!(a, ctx.plan(Workload::RandreadThreads, 2, 1));
        assert_ne!(a[0], a[1]);
        assert!(ctx.plan(Workload::Seqread, 1, 0)[0].is_empty());
    }

    #[test]
    fn digests_see_every_page_end_and_every_byte_when_full() {
        let mut data = vec![7u8; 2 * PAGE];
        let base = (digest(0, &data, false), digest(0, &data, true));
        assert_ne!(digest(4096, &data, false), base.0, "the offset counts");
        data[PAGE + PAGE - 1] ^= 1;
        assert_ne!(digest(0, &data, false), base.0, "a page's last byte");
        data[PAGE + PAGE - 1] ^= 1;
        data[100] ^= 1;
        assert_eq!(digest(0, &data, false), base.0, "the middle is sampled only when full");
        assert_ne!(digest(0, &data, true), base.1);
    }

    #[test]
    fn a_missing_fio_is_refused_up_front() {
        let dir = tempfile::tempdir().unwrap();
        let mut args = quick(dir.path(), true);
        args.fio.fio = Some(dir.path().join("no-fio-here"));
        let Err(e) = run(&args) else {
            panic!("a missing --fio was accepted");
        };
        assert!(e.0.contains("--fio"), "{}", e.0);
    }
}
