//! `peers --async`: async reads that never block an executor thread, against what an async
//! storage engine would use instead.
//!
//! **The workload.** `--tasks` (default 64) tokio tasks, each reading 4 KiB blocks one at a
//! time at the block numbers of its own trace (the scenario's `--mix`, default Zipf 0.99,
//! the hot blocks scattered over the file), on each `--runtime`: `current` (a current-thread
//! runtime: every task on one thread) and `multi` (a multi-thread runtime of
//! [`MULTI_WORKERS`] worker threads). The rows' `threads` is the runtime's worker threads
//! (1 or 2); the blocking pool, the cache's workers and the kernel's are on top. The file is
//! generated on a disk file system (`--dir`, default `/var/tmp`, as the `io` scenario's) or
//! is `--file`: 256 MiB, 16 MiB with `--quick`.
//!
//! **Cold** (row field `async`: `cold`): every measurement starts cold (the kernel's copy of
//! the file dropped, [`drop_kernel_cache`]; a new cache of a quarter of the file,
//! `--budget-fraction`) and reads for `--duration`; the contenders run interleaved, `--runs`
//! rounds (2 with `--quick`, 5 otherwise):
//!
//! | variant | a task's read of block `b` |
//! |---|---|
//! | `foliocache-async` | `AsyncFile::read_exact_at`: a hit is ready at the first poll; a miss is read by the cache's readahead workers, in batches, through its engine (direct I/O where the file system has it, `--io`, `--direct`) |
//! | `foliocache-sync-blocking` | the synchronous `CachedFile::read_exact_at` inside `tokio::task::spawn_blocking`, the same cache configuration |
//! | `tokio-fs` | a `pread` of the file opened by `tokio::fs::File::open` in `spawn_blocking` (`tokio::fs` has no positional read; a blocking-pool job per call is what its reads do), the kernel's buffered path |
//! | `fio` | not a task: `fio --rw=randread --direct=1` (io_uring, else libaio, else psync) on the same file for the same duration, one job per runtime thread, `--tasks` I/Os in flight in all: the device's limit |
//!
//! The foliocache contenders use the scenario's `Config::block_cache` settings (readahead
//! off unless `--ra-pages`, `--inactive-ratio`, `--no-workingset`,
//! `--kernel-active-aging`).
//!
//! **Resident** (row field `async`: `resident`): the hit path. One cache of 1.25x the file
//! is filled once (every page read) and read by every foliocache measurement; `tokio-fs`
//! reads the file from the kernel's page cache (read whole before each measurement). The
//! variants: `foliocache-async` with one task per runtime thread, `foliocache-sync`, the
//! synchronous `CachedFile::read_exact_at` in a loop on as many threads (the async read's
//! cost beside the synchronous one on equal terms), and `foliocache-sync-blocking` and
//! `tokio-fs` with every task as above (a hop to a blocking thread per read gains from
//! more tasks in flight).
//!
//! **What is measured**, per variant and runtime: reads per second (all tasks), misses per
//! second (foliocache: its `misses` counter; `tokio-fs`: the blocks the process read from
//! storage, `/proc/self/io`; fio: every I/O), the hit ratio, the CPU the whole process used
//! in the window (`getrusage`, user + system, every thread: the executor's, the blocking
//! pool's, the cache's workers'), reads per CPU-second, and the p50 and p99 latency of a
//! read as its task sees it (1 read in 8 timed, an await included). Every read is checked
//! as the synchronous mode checks it (the first and last words of a block, every byte of one
//! read in 256; with `--file`, that one read is compared with a `pread` of the file on the
//! task's thread).
//!
//! Stable names (see `docs/LAB-RESULTS.md`):
//!
//! | kind | names |
//! |---|---|
//! | variants | `foliocache-async`, `foliocache-sync-blocking`, `tokio-fs`, `fio` (cold only; absent without fio), `foliocache-sync` (resident only), `foyer` (cold only; with the lab built with `--features foyer`: foyer's in-memory cache, `get_or_fetch` with a direct `pread` in `spawn_blocking` per miss, the same budget in block bytes) |
//! | row fields | `mix` (as the synchronous mode's) and `async`: `cold` or `resident`; `threads`: the runtime's worker threads, 1 (current-thread) or 2 (multi-thread) |
//! | metrics | `ops_per_sec`, `misses_per_sec`, `hit_ratio`, `cpu_ms` (process CPU in the window), `ops_per_cpu_sec` (reads per second of process CPU), `p50_latency_ns`, `p99_latency_ns`; fio: `ops_per_sec` and `misses_per_sec` (its IOPS), `p50_latency_ns`, `p99_latency_ns` (per I/O) |
//! | comparisons | cold: candidate `foliocache-async` against `tokio-fs`, `foliocache-sync-blocking` and `foyer` on `ops_per_sec` and `ops_per_cpu_sec`; every contender against `fio` on `misses_per_sec`; resident: `foliocache-async` against `foliocache-sync`, `foliocache-sync-blocking` and `tokio-fs` on `ops_per_sec` |
//! | checks | `correct_bytes` (0), `sampled_reads_verified` (above 0), `read_errors` (0), `bad_page_events` (0), `resident_misses` (misses of the foliocache contenders in the resident measurements: 0) |
//! | params | besides the common ones and the file options' (`dir`, `filesystem`, `io_engine`, `io_mode` ...): `tasks`, `runtimes`, `multi_worker_threads`, `file_bytes`, `budget_bytes`, `resident_budget_bytes`, `fio`, `fio_engine` |
//! | stats | `foliocache-async`, `foliocache-sync-blocking`: the cache's `/proc/vmstat` lines after its last cold measurement; `fio_errors` when fio failed |
//!
//! The targets (the issue "Async reads that never block an executor thread"; 64 tasks on
//! the current-thread runtime, full mode): cold, `foliocache-async` at least 0.8x fio's
//! misses (its IOPS at depth 64), at least 1x `tokio-fs` in reads per second and 1.5x in
//! reads per CPU-second, at least 1.5x `foliocache-sync-blocking` in reads per CPU-second;
//! resident, at least 0.9x `foliocache-sync` and 20x `tokio-fs` (printed in reads per
//! second and per CPU-second: on the current-thread runtime, tokio-fs's blocking pool uses
//! the machine's other CPUs while the async reads stay on the executor's one); cold, at
//! least 1.2x `foyer` in reads per second (with the `foyer` feature). The targets table
//! prints whether they were met; they are not checks.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use foliocache::{AsyncFile, CachedFile, Config, FolioCache};
use serde_json::{json, Map, Value};
use tokio::runtime::Runtime;

use super::contenders::{block_cache_config, storage_read_bytes, Foliocache};
use super::workload::{self, block, Content};
use super::{
    mix_extra, phase, prepare, read_whole, Args, PhaseOut, Setup, Traces, WorkerOut, NAME, SEED,
    TRACE_SEED,
};
use crate::harness::{
    cpu_time, drop_kernel_cache, fmt_num, free_bytes, merge, per_sec, Bench, FioArgs, FioJob,
    Interleaver, IoSetup, LabResult, Report, Settings, Table, CHECK_EVERY, MAX_RUNS,
};
use crate::scenarios::files::cache_stats_json;

/// The multi-thread runtime's worker threads.
pub const MULTI_WORKERS: usize = 2;

/// `--tasks`' default.
pub const DEFAULT_TASKS: usize = 64;

/// The most tasks `--tasks` accepts.
pub const MAX_TASKS: usize = 4096;

/// fio, the device's limit.
pub const FIO: &str = "fio";

/// The resident cache's budget, in quarters of the file: 1.25x, so nothing is evicted.
const RESIDENT_QUARTERS: u64 = 5;

/// Trace entries of all tasks together at most (16 MiB of block numbers).
const TRACE_ENTRIES: usize = 1 << 22;

/// The options of `peers --async` (flattened into `peers`' options; the others are read only
/// with `--async`).
#[derive(clap::Args, Debug, Clone)]
pub struct AsyncArgs {
    /// Async reads instead of the synchronous contenders: `--tasks` tokio tasks on each
    /// `--runtime`, cold from a disk file (`--dir`), foliocache's `AsyncFile` beside its
    /// synchronous API in `spawn_blocking`, tokio::fs and fio; then resident hits.
    #[arg(long = "async")]
    pub enabled: bool,
    /// With --async: tasks reading at once, one block read each at a time (1 to 4096).
    #[arg(long, default_value_t = DEFAULT_TASKS, value_parser = parse_tasks)]
    pub tasks: usize,
    /// With --async: the tokio runtimes, comma-separated: `current` (current-thread, every
    /// task on one thread), `multi` (multi-thread, 2 worker threads).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "current,multi"
    )]
    pub runtime: Vec<Flavor>,
    /// With --async: the fio beside the contenders (`--fio PATH`, `--no-fio`).
    #[command(flatten)]
    pub fio: FioArgs,
}

impl Default for AsyncArgs {
    fn default() -> Self {
        AsyncArgs {
            enabled: false,
            tasks: DEFAULT_TASKS,
            runtime: Flavor::ALL.to_vec(),
            fio: FioArgs::default(),
        }
    }
}

/// `--tasks`: 1 to [`MAX_TASKS`].
fn parse_tasks(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_TASKS).contains(&n) => Ok(n),
        _ => Err(format!(
            "invalid task count `{s}`: a whole number from 1 to {MAX_TASKS}"
        )),
    }
}

/// A tokio runtime flavour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Flavor {
    /// `Builder::new_current_thread`: every task on the thread that calls `block_on`.
    Current,
    /// `Builder::new_multi_thread` with 2 worker threads.
    Multi,
}

impl Flavor {
    /// Both, in table order.
    pub const ALL: [Flavor; 2] = [Flavor::Current, Flavor::Multi];

    /// Its stable name (`params.runtimes`).
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Current => "current",
            Flavor::Multi => "multi",
        }
    }

    /// Its worker threads: the rows' `threads`.
    pub fn threads(self) -> usize {
        match self {
            Flavor::Current => 1,
            Flavor::Multi => MULTI_WORKERS,
        }
    }

    /// The runtime, with a blocking pool of `tasks` threads (each task has at most one job
    /// in it) started before any measurement, so no window pays for spawning them.
    fn build(self, tasks: usize) -> LabResult<Runtime> {
        let mut b = match self {
            Flavor::Current => tokio::runtime::Builder::new_current_thread(),
            Flavor::Multi => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(MULTI_WORKERS);
                b
            }
        };
        let rt = b
            .max_blocking_threads(tasks)
            .thread_keep_alive(Duration::from_secs(3600))
            .thread_name("peers-async")
            .build()
            .map_err(|e| crate::lab_err!("building a {} tokio runtime: {e}", self.name()))?;
        rt.block_on(async {
            let jobs: Vec<_> = (0..tasks)
                .map(|_| {
                    tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(5)))
                })
                .collect();
            for j in jobs {
                let _ = j.await;
            }
        });
        Ok(rt)
    }
}

/// An async-mode contender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncKind {
    /// `AsyncFile::read_exact_at`.
    FoliocacheAsync,
    /// `CachedFile::read_exact_at` in `spawn_blocking`.
    FoliocacheSyncBlocking,
    /// `CachedFile::read_exact_at` on the runtime's number of plain threads (resident only).
    FoliocacheSync,
    /// `pread` in `spawn_blocking`, as `tokio::fs` reads.
    TokioFs,
    /// foyer's in-memory cache (`foyer_memory::Cache::get_or_fetch`) of the blocks, each miss
    /// a direct `pread` in `spawn_blocking` (cold only; with the lab's `foyer` feature).
    #[cfg(feature = "foyer")]
    Foyer,
}

impl AsyncKind {
    /// The cold measurement's contenders, interleaved in this order.
    #[cfg(not(feature = "foyer"))]
    pub const COLD: [AsyncKind; 3] = [
        AsyncKind::FoliocacheAsync,
        AsyncKind::FoliocacheSyncBlocking,
        AsyncKind::TokioFs,
    ];

    /// The cold measurement's contenders, interleaved in this order.
    #[cfg(feature = "foyer")]
    pub const COLD: [AsyncKind; 4] = [
        AsyncKind::FoliocacheAsync,
        AsyncKind::FoliocacheSyncBlocking,
        AsyncKind::TokioFs,
        AsyncKind::Foyer,
    ];

    /// The resident measurement's contenders, interleaved in this order.
    pub const RESIDENT: [AsyncKind; 4] = [
        AsyncKind::FoliocacheAsync,
        AsyncKind::FoliocacheSync,
        AsyncKind::FoliocacheSyncBlocking,
        AsyncKind::TokioFs,
    ];

    /// The stable variant name.
    pub fn name(self) -> &'static str {
        match self {
            AsyncKind::FoliocacheAsync => "foliocache-async",
            AsyncKind::FoliocacheSyncBlocking => "foliocache-sync-blocking",
            AsyncKind::FoliocacheSync => "foliocache-sync",
            AsyncKind::TokioFs => "tokio-fs",
            #[cfg(feature = "foyer")]
            AsyncKind::Foyer => "foyer",
        }
    }

    /// The contender called `name`.
    pub fn parse(name: &str) -> Option<AsyncKind> {
        AsyncKind::RESIDENT
            .into_iter()
            .chain(AsyncKind::COLD)
            .find(|k| k.name() == name)
    }

    /// A task's handle on `file`, for a contender that reads through the cache in tasks.
    fn handle(self, file: &CachedFile) -> Handle {
        match self {
            AsyncKind::FoliocacheAsync => Handle::Async(AsyncFile::new(file.reopen())),
            _ => Handle::SyncBlocking(Arc::new(file.reopen())),
        }
    }
}

/// A measurement's part: cold misses, or resident hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Cold,
    Resident,
}

impl Part {
    /// The rows' `async` field.
    fn name(self) -> &'static str {
        match self {
            Part::Cold => "cold",
            Part::Resident => "resident",
        }
    }

    /// The rows' extra fields for `mix`: `mix` and `async`.
    fn extra(self, mix: workload::Mix) -> Map<String, Value> {
        let mut m = mix_extra(mix);
        m.insert("async".into(), json!(self.name()));
        m
    }
}

/// What `peers --async` was asked for, the defaults filled in.
struct Plan {
    /// The common settings; `threads`: the runtimes' worker threads; `runs`: 2 with
    /// `--quick`, else 5.
    settings: Settings,
    /// The runtimes, by worker threads.
    flavors: Vec<Flavor>,
    /// The cold measurement's contenders.
    cold: Vec<AsyncKind>,
    /// The resident measurement's contenders.
    resident: Vec<AsyncKind>,
    /// The fio to run, if any.
    fio: Option<PathBuf>,
    /// The generated file's directory (`--dir`, else /var/tmp).
    dir: PathBuf,
}

impl Plan {
    /// Resolves `args`, refusing an unknown contender, a missing `--fio` and a directory
    /// without room for the file.
    fn new(args: &Args) -> LabResult<Plan> {
        let mut settings = args.common.settings();
        let quick = settings.quick;
        let mut flavors: Vec<Flavor> = Vec::new();
        for &f in &args.aio.runtime {
            if !flavors.contains(&f) {
                flavors.push(f);
            }
        }
        if flavors.is_empty() {
            flavors = Flavor::ALL.to_vec();
        }
        flavors.sort_by_key(|f| f.threads());
        settings.threads = flavors.iter().map(|f| f.threads()).collect();
        settings.runs = args
            .common
            .runs
            .unwrap_or(if quick { 2 } else { 5 })
            .clamp(1, MAX_RUNS);
        for n in &args.contenders {
            if AsyncKind::parse(n).is_none() {
                let mut names: Vec<&str> = AsyncKind::RESIDENT.iter().map(|k| k.name()).collect();
                for k in AsyncKind::COLD {
                    if !names.contains(&k.name()) {
                        names.push(k.name());
                    }
                }
                return Err(crate::lab_err!(
                    "unknown contender `{n}` for --async (have: {})",
                    names.join(", ")
                ));
            }
        }
        let chosen = |k: &AsyncKind| {
            args.contenders.is_empty() || args.contenders.iter().any(|n| n == k.name())
        };
        let fio = args.aio.fio.find()?;
        let dir = args.io.dir_or(crate::scenarios::io::default_dir);
        if args.file.is_none() {
            let mib = args.file_mib.unwrap_or(if quick { 16 } else { 256 });
            if let Some(free) = free_bytes(&dir) {
                if free < (mib << 20) + (64 << 20) {
                    return Err(crate::lab_err!(
                        "peers --async needs {mib} MiB in {} and {} MiB are free: pass a \
                         smaller --file-mib or another --dir",
                        dir.display(),
                        free >> 20
                    ));
                }
            }
        }
        Ok(Plan {
            settings,
            flavors,
            cold: AsyncKind::COLD.into_iter().filter(chosen).collect(),
            resident: AsyncKind::RESIDENT.into_iter().filter(chosen).collect(),
            fio,
            dir,
        })
    }

    /// Every variant of the report, in table order.
    fn variants(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = Vec::new();
        let names = self.cold.iter().chain(&self.resident).map(|k| k.name());
        for name in names.chain(self.fio.as_ref().map(|_| FIO)) {
            if !v.contains(&name) {
                v.push(name);
            }
        }
        v
    }

    /// The name of the runtime whose worker threads are `threads`.
    fn runtime_name(&self, threads: usize) -> &'static str {
        self.flavors
            .iter()
            .find(|f| f.threads() == threads)
            .map_or("-", |f| f.name())
    }
}

/// What every async measurement shares.
struct Ctx<'a> {
    args: &'a Args,
    setup: Setup,
    file_bytes: u64,
    tasks: usize,
    duration: Duration,
    pin: bool,
    /// The runtimes, by flavour.
    runtimes: Vec<(Flavor, Runtime)>,
    /// Block numbers per task's trace (a power of two).
    trace_len: usize,
    /// The resident cache's budget in bytes.
    resident_budget: usize,
    /// The resident cache (1.25x the file, every page read) and its file, if a resident
    /// contender reads through it.
    resident: Option<(FolioCache, CachedFile)>,
}

impl<'a> Ctx<'a> {
    /// The file `setup`, the runtimes of `plan` built, the traces sized.
    fn new(args: &'a Args, plan: &Plan, setup: Setup) -> LabResult<Ctx<'a>> {
        let tasks = args.aio.tasks;
        let runtimes = plan
            .flavors
            .iter()
            .map(|&f| f.build(tasks).map(|rt| (f, rt)))
            .collect::<LabResult<Vec<_>>>()?;
        let mut trace_len: usize = if plan.settings.quick {
            1 << 12
        } else {
            1 << 16
        };
        while trace_len > 1 << 10 && trace_len * tasks.max(MULTI_WORKERS) > TRACE_ENTRIES {
            trace_len /= 2;
        }
        let file_bytes = setup.blocks * block() as u64;
        Ok(Ctx {
            args,
            setup,
            file_bytes,
            tasks,
            duration: plan.settings.duration,
            pin: plan.settings.pin,
            runtimes,
            trace_len,
            resident_budget: (file_bytes * RESIDENT_QUARTERS / 4) as usize,
            resident: None,
        })
    }

    /// The foliocache contenders' configuration for a budget of `budget` bytes: the
    /// scenario's block-cache settings, the I/O asked for.
    fn config(&self, budget: usize) -> Config {
        self.args
            .io
            .apply(block_cache_config(
                budget,
                self.setup.ra_pages,
                self.setup.lru,
            ))
            .panic_on_bad_page(false)
    }

    /// The runtime whose worker threads are `threads`.
    fn runtime(&self, threads: usize) -> &Runtime {
        &self
            .runtimes
            .iter()
            .find(|(f, _)| f.threads() == threads)
            .expect("a runtime per thread count")
            .1
    }

    /// What a correct block contains.
    fn content(&self) -> &Arc<Content> {
        &self.setup.content
    }

    /// One trace of `mix` per task (and per thread of the synchronous resident contender).
    fn traces(&self, mix: workload::Mix) -> Arc<Traces> {
        Arc::new(Traces(
            (0..self.tasks.max(MULTI_WORKERS))
                .map(|t| {
                    workload::trace_in(
                        mix,
                        self.setup.blocks,
                        workload::resident_blocks(self.setup.budget_blocks),
                        self.args.skew,
                        self.trace_len,
                        TRACE_SEED + t as u64,
                    )
                })
                .collect(),
        ))
    }

    /// The report's `params` besides the common ones and the file options'.
    fn params(&self, plan: &Plan) -> Value {
        let (args, setup) = (self.args, &self.setup);
        json!({
            "mode": "async",
            "variants": plan.variants(),
            "mixes": args.mix.iter().map(|m| m.name()).collect::<Vec<_>>(),
            "skew": args.skew,
            "file": if args.file.is_some() { setup.path.display().to_string() } else { "generated".into() },
            "file_bytes": self.file_bytes,
            "block_bytes": block(),
            "budget_bytes": setup.budget_bytes(),
            "budget_fraction": args.budget_fraction,
            "resident_budget_bytes": self.resident_budget,
            "tasks": self.tasks,
            "runtimes": plan.flavors.iter().map(|f| f.name()).collect::<Vec<_>>(),
            "multi_worker_threads": MULTI_WORKERS,
            "trace_len": self.trace_len,
            "runs_are_cold": true,
            "foliocache_ra_pages": setup.ra_pages,
            "foliocache_workingset": setup.lru.workingset,
            "foliocache_inactive_ratio": setup.lru.inactive_ratio,
            "foliocache_active_second_chance": setup.lru.active_second_chance,
            "foliocache_lru_policy": setup.lru.policy.name(),
            "cpu": "getrusage(RUSAGE_SELF) user + system over the window: every thread of the process",
            "latency_sampling": format!("1 read in {}", super::LATENCY_EVERY),
            "fio": plan.fio.as_ref().map(|p| p.display().to_string()),
        })
    }

    /// Prints what runs where.
    fn print_header(&self, plan: &Plan, io: &IoSetup) {
        let mib = |b: f64| b / (1 << 20) as f64;
        println!("{NAME} --async: {}", io.header());
        println!(
            "{NAME} --async: {} file of {:.0} MiB ({} blocks of {} KiB); cold: a new cache of \
             {:.1} MiB and the kernel's copy dropped before every measurement; resident: one \
             cache of {:.1} MiB, filled once; {} tasks on {}",
            if self.args.file.is_some() {
                "the"
            } else {
                "a generated"
            },
            mib(self.file_bytes as f64),
            self.setup.blocks,
            block() >> 10,
            mib(self.setup.budget_bytes() as f64),
            mib(self.resident_budget as f64),
            self.tasks,
            plan.flavors
                .iter()
                .map(|f| format!("the {} runtime ({} thread(s))", f.name(), f.threads()))
                .collect::<Vec<_>>()
                .join(" and ")
        );
        println!(
            "{}",
            self.args.aio.fio.header(
                &format!("{NAME} --async"),
                plan.fio.as_deref(),
                &format!(
                    "randread of {} KiB, {} I/Os in flight over one job per runtime thread, for \
                     {:?}",
                    block() >> 10,
                    self.tasks,
                    self.duration
                )
            )
        );
    }
}

/// One measurement of one contender.
struct Sample {
    out: PhaseOut,
    /// Misses in the window, where they can be counted.
    misses: Option<u64>,
    /// The cache's counters after a cold measurement.
    stats: Option<Value>,
    bad_pages: u64,
}

impl Sample {
    /// Records its metrics as `name` at `threads` threads.
    fn record(&self, il: &mut Interleaver, name: &str, threads: usize) {
        let m = &self.out;
        il.add(
            name,
            threads,
            "ops_per_sec",
            per_sec(m.ops as f64, m.elapsed),
        );
        if let Some(misses) = self.misses {
            il.add(
                name,
                threads,
                "misses_per_sec",
                per_sec(misses as f64, m.elapsed),
            );
            let hit = if m.ops == 0 {
                0.0
            } else {
                1.0 - (misses as f64 / m.ops as f64).min(1.0)
            };
            il.add(name, threads, "hit_ratio", hit);
        }
        il.add(name, threads, "cpu_ms", m.cpu_ns as f64 / 1e6);
        il.add(
            name,
            threads,
            "ops_per_cpu_sec",
            m.ops as f64 * 1e9 / m.cpu_ns.max(1) as f64,
        );
        let q = |q: f64| m.hist.value_at_quantile(q) as f64;
        il.add(name, threads, "p50_latency_ns", q(0.5));
        il.add(name, threads, "p99_latency_ns", q(0.99));
    }
}

/// What the checks and the report's `stats` add up over every measurement.
#[derive(Default)]
struct Totals {
    bad: u64,
    verified: u64,
    errors: Vec<String>,
    bad_pages: u64,
    /// Misses of the foliocache contenders in resident measurements (`None`: none ran).
    resident_misses: Option<u64>,
    /// The last cold measurement's cache counters, by contender; `fio_errors`.
    stats: Map<String, Value>,
    /// The engine fio ran with.
    fio_engine: Option<String>,
}

impl Totals {
    /// Adds `s`, a measurement of `kind` (`resident`: a resident one).
    fn add(&mut self, kind: AsyncKind, s: Sample, resident: bool) {
        let name = kind.name();
        self.bad += s.out.bad;
        self.verified += s.out.verified;
        self.bad_pages += s.bad_pages;
        self.errors
            .extend(s.out.errors.iter().map(|e| format!("{name}: {e}")));
        if resident && kind != AsyncKind::TokioFs {
            *self.resident_misses.get_or_insert(0) += s.misses.unwrap_or(0);
        }
        if let Some(v) = s.stats {
            self.stats.insert(name.to_string(), v);
        }
    }

    /// Records the checks, fio's engine and the stats in `report`.
    fn finish(self, report: &mut Report) {
        if let (Some(e), Value::Object(p)) = (&self.fio_engine, &mut report.params) {
            p.insert("fio_engine".into(), json!(e));
        }
        report.check("correct_bytes", json!(self.bad), self.bad == 0);
        report.check(
            "sampled_reads_verified",
            json!(self.verified),
            self.verified > 0,
        );
        report.check(
            "read_errors",
            json!(self.errors.len()),
            self.errors.is_empty(),
        );
        report.check(
            "bad_page_events",
            json!(self.bad_pages),
            self.bad_pages == 0,
        );
        match self.resident_misses {
            Some(m) => report.check("resident_misses", json!(m), m == 0),
            None => report.check(
                "resident_misses",
                "not judged: no foliocache resident measurement",
                true,
            ),
        }
        for e in self.errors.iter().take(5) {
            eprintln!("{NAME} --async: {e}");
        }
        report.stats = (!self.stats.is_empty()).then_some(Value::Object(self.stats));
    }
}

/// Runs the async mode (`peers --async`).
pub fn run(args: &Args) -> LabResult<Report> {
    let plan = Plan::new(args)?;
    let settings = &plan.settings;
    let io = IoSetup::probe(&args.io, &plan.dir)?;
    let setup = prepare(args, settings, Some(&plan.dir), false)?;
    let mut ctx = Ctx::new(args, &plan, setup)?;
    ctx.print_header(&plan, &io);
    let measurements = plan.flavors.len() * settings.runs * (plan.cold.len() + plan.resident.len());
    let steps =
        args.mix.len() * measurements + plan.flavors.len() * usize::from(plan.fio.is_some());
    let mut bench = Bench::with_steps(
        NAME,
        SEED,
        settings,
        merge(ctx.params(&plan), io.params()),
        steps as u64,
        settings.duration,
    );
    if plan.resident.iter().any(|k| *k != AsyncKind::TokioFs) {
        bench.message("filling the resident cache");
        ctx.resident = Some(fill_resident(&ctx)?);
    }
    let mut totals = Totals::default();
    let fio_rows = measure_fio(&ctx, &plan, &bench, &mut totals);
    let mut tables = Vec::new();
    for &mix in &args.mix {
        let traces = ctx.traces(mix);
        for part in [Part::Cold, Part::Resident] {
            let kinds = match part {
                Part::Cold => &plan.cold,
                Part::Resident => &plan.resident,
            };
            let label = format!("async {}, {}", part.name(), mix.name());
            bench.measure_at(
                &label,
                &settings.threads,
                kinds,
                &part.extra(mix),
                |il, &kind, n, _round| {
                    let s = match part {
                        Part::Cold => measure_cold(&ctx, kind, n, &traces)?,
                        Part::Resident => measure_resident(&ctx, kind, n, &traces)?,
                    };
                    s.record(il, kind.name(), n);
                    totals.add(kind, s, part == Part::Resident);
                    Ok(())
                },
            )?;
        }
        bench.report.add_rows(&fio_rows, &Part::Cold.extra(mix));
        compare(&mut bench.report, mix, &plan);
        tables.extend(mix_tables(&bench.report, mix, &ctx, &plan, &io));
    }
    totals.finish(&mut bench.report);
    let plot_extra = Part::Cold.extra(args.mix[0]);
    drop(ctx);
    bench.finish(settings, &tables, Some(("ops_per_sec", &plot_extra)))
}

/// fio at each runtime's thread count (as many jobs, `--tasks` I/Os in flight in all), for
/// the measurements' duration: its rows (`fio`), to be added to each mix's cold rows. A
/// failure is printed and kept in `totals`' stats (`fio_errors`).
fn measure_fio(ctx: &Ctx, plan: &Plan, bench: &Bench, totals: &mut Totals) -> Interleaver {
    let mut rows = Interleaver::new();
    let Some(bin) = &plan.fio else {
        return rows;
    };
    for &f in &plan.flavors {
        let n = f.threads();
        bench.message(format!("fio at {n} job(s)"));
        let job = FioJob {
            name: "foliocache-lab-peers",
            path: &ctx.setup.path,
            rw: "randread",
            bs: format!("{}k", block() >> 10),
            depth: ctx.tasks.div_ceil(n),
            jobs: n,
            size: ctx.file_bytes,
            runtime: ctx.duration,
            time_based: true,
            number_ios: None,
        };
        match job.run(bin) {
            Ok(o) => {
                rows.add(FIO, n, "ops_per_sec", o.iops);
                rows.add(FIO, n, "misses_per_sec", o.iops);
                if let Some(p) = o.p50_ns {
                    rows.add(FIO, n, "p50_latency_ns", p);
                }
                if let Some(p) = o.p99_ns {
                    rows.add(FIO, n, "p99_latency_ns", p);
                }
                totals.fio_engine.get_or_insert(o.engine);
            }
            Err(e) => {
                println!("{NAME} --async: fio failed at {n} job(s): {e}");
                let errs = totals
                    .stats
                    .entry("fio_errors")
                    .or_insert_with(|| json!([]));
                if let Value::Array(v) = errs {
                    v.push(json!(format!("{n}: {e}")));
                }
            }
        }
        bench.tick();
    }
    rows
}

/// The comparisons of `mix` at every runtime: cold, `foliocache-async` against `tokio-fs`
/// and `foliocache-sync-blocking` (reads per second and per CPU-second) and every contender
/// against fio (misses per second); resident, `foliocache-async` against the others.
fn compare(report: &mut Report, mix: workload::Mix, plan: &Plan) {
    let me = AsyncKind::FoliocacheAsync.name();
    let (cold, resident) = (Part::Cold.extra(mix), Part::Resident.extra(mix));
    for &n in &plan.settings.threads {
        for peer in [AsyncKind::TokioFs, AsyncKind::FoliocacheSyncBlocking] {
            for metric in ["ops_per_sec", "ops_per_cpu_sec"] {
                report.compare(peer.name(), me, n, metric, &cold);
            }
        }
        #[cfg(feature = "foyer")]
        if plan.cold.contains(&AsyncKind::Foyer) {
            for metric in ["ops_per_sec", "ops_per_cpu_sec"] {
                report.compare(AsyncKind::Foyer.name(), me, n, metric, &cold);
            }
        }
        for k in &plan.cold {
            report.compare(FIO, k.name(), n, "misses_per_sec", &cold);
        }
        for peer in [
            AsyncKind::FoliocacheSync,
            AsyncKind::FoliocacheSyncBlocking,
            AsyncKind::TokioFs,
        ] {
            report.compare(peer.name(), me, n, "ops_per_sec", &resident);
        }
    }
}

/// The tables of `mix`: the cold contenders beside fio, the resident ones, the targets.
fn mix_tables(
    report: &Report,
    mix: workload::Mix,
    ctx: &Ctx,
    plan: &Plan,
    io: &IoSetup,
) -> Vec<(String, Table)> {
    let (args, settings) = (ctx.args, &plan.settings);
    let mib = |b: f64| b / (1 << 20) as f64;
    let runtime = |n: usize| plan.runtime_name(n);
    let table = |kinds: &[AsyncKind], fio: bool, part: Part| {
        let mut names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
        if fio {
            names.push(FIO);
        }
        async_table(
            report,
            &names,
            &settings.threads,
            &part.extra(mix),
            &runtime,
        )
    };
    vec![
        (
            format!(
                "peers --async, cold, mix {}{}: {} tasks of {} KiB reads, file {:.0} MiB on {}, \
                 budget {:.1} MiB, every run cold; medians of {} runs of {:?}; CPU = the whole \
                 process's; fio = the device's limit ({} I/Os in flight)",
                mix.name(),
                if mix == workload::Mix::Uniform {
                    String::new()
                } else {
                    format!(" (skew {})", args.skew)
                },
                ctx.tasks,
                block() >> 10,
                mib(ctx.file_bytes as f64),
                io.filesystem,
                mib(ctx.setup.budget_bytes() as f64),
                settings.runs,
                settings.duration,
                ctx.tasks
            ),
            table(&plan.cold, true, Part::Cold),
        ),
        (
            format!(
                "peers --async, resident hits, mix {}: the file cached whole (foliocache: {:.1} \
                 MiB; tokio-fs: the kernel's page cache); foliocache-async: one task per runtime \
                 thread; foliocache-sync: read_exact_at on as many threads; the others: {} \
                 tasks",
                mix.name(),
                mib(ctx.resident_budget as f64),
                ctx.tasks
            ),
            table(&plan.resident, false, Part::Resident),
        ),
        (
            format!(
                "Targets (issue: async reads that never block an executor thread; stated for \
                 {DEFAULT_TASKS} tasks on the current-thread runtime, #threads 1){}",
                if settings.quick {
                    "; quick mode is a smoke run: the targets are for full mode \
                     (`peers --async`)"
                } else {
                    ""
                }
            ),
            target_table(report, mix, &settings.threads),
        ),
    ]
}

/// The resident cache: a budget of 1.25x the file, the whole file read into it.
fn fill_resident(ctx: &Ctx) -> LabResult<(FolioCache, CachedFile)> {
    let path = &ctx.setup.path;
    let cache =
        FolioCache::new(ctx.config(ctx.resident_budget)).map_err(|e| crate::lab_err!("{e}"))?;
    let _ = cache.populate();
    let file = cache.open(path).map_err(|e| crate::lab_err!("{e}"))?;
    let len = ctx.file_bytes;
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], off)
            .map_err(|e| crate::lab_err!("filling the resident cache: {e}"))?;
        off += n as u64;
    }
    Ok((cache, file))
}

/// One cold measurement of `kind` on the runtime of `threads` threads: the kernel's copy of
/// the file dropped, a new cache.
fn measure_cold(
    ctx: &Ctx,
    kind: AsyncKind,
    threads: usize,
    traces: &Arc<Traces>,
) -> LabResult<Sample> {
    let path = &ctx.setup.path;
    drop_kernel_cache(path)
        .map_err(|e| crate::lab_err!("dropping {} from the kernel's cache: {e}", path.display()))?;
    let rt = ctx.runtime(threads);
    if kind == AsyncKind::TokioFs {
        return measure_tokio_fs(ctx, rt, traces);
    }
    #[cfg(feature = "foyer")]
    if kind == AsyncKind::Foyer {
        return foyer::measure(ctx, rt, traces);
    }
    let cache = FolioCache::new(ctx.config(ctx.setup.budget_bytes()))
        .map_err(|e| crate::lab_err!("foliocache: {e}"))?;
    // The frames' first touch is not what is measured.
    let _ = cache.populate();
    let file = cache.open(path).map_err(|e| crate::lab_err!("{e}"))?;
    if file.cached_pages() != 0 {
        return Err(crate::lab_err!(
            "{NAME} --async: the fresh cache is not cold"
        ));
    }
    let handles = (0..ctx.tasks).map(|_| kind.handle(&file)).collect();
    let c = cache.clone();
    let (out, misses) = run_tasks(
        rt,
        handles,
        traces,
        ctx.content(),
        ctx.duration,
        move || c.stats().misses,
    );
    Ok(Sample {
        out,
        misses: Some(misses),
        stats: Some(cache_stats_json(&cache)),
        bad_pages: cache.stats().bad_pages,
    })
}

/// `tokio-fs` on `rt`: every task a `spawn_blocking` `pread` of the buffered file, as the
/// kernel's cache of it stands (dropped for a cold run, read whole for a resident one).
fn measure_tokio_fs(ctx: &Ctx, rt: &Runtime, traces: &Arc<Traces>) -> LabResult<Sample> {
    let file = open_tokio_fs(rt, &ctx.setup.path)?;
    let handles = (0..ctx.tasks)
        .map(|_| Handle::TokioFs(file.clone()))
        .collect();
    Ok(peer_sample(ctx, rt, handles, traces, kernel_misses))
}

/// The tasks of `handles` on `rt` for a contender without foliocache's counters (no stats,
/// no bad pages to count), its misses counted by `misses`.
fn peer_sample(
    ctx: &Ctx,
    rt: &Runtime,
    handles: Vec<Handle>,
    traces: &Arc<Traces>,
    misses: impl Fn() -> u64 + Send + 'static,
) -> Sample {
    let (out, misses) = run_tasks(rt, handles, traces, ctx.content(), ctx.duration, misses);
    Sample {
        out,
        misses: Some(misses),
        stats: None,
        bad_pages: 0,
    }
}

/// One resident measurement of `kind` at `threads` threads: the resident cache, or the file
/// in the kernel's page cache.
fn measure_resident(
    ctx: &Ctx,
    kind: AsyncKind,
    threads: usize,
    traces: &Arc<Traces>,
) -> LabResult<Sample> {
    let path = &ctx.setup.path;
    let rt = ctx.runtime(threads);
    if kind == AsyncKind::TokioFs {
        read_whole(&ctx.setup.file, ctx.file_bytes, path)?;
        return measure_tokio_fs(ctx, rt, traces);
    }
    let (cache, file) = ctx
        .resident
        .as_ref()
        .expect("the resident cache is filled for a foliocache contender");
    let misses0 = cache.stats().misses;
    let out = if kind == AsyncKind::FoliocacheSync {
        let r = Arc::new(Foliocache::with_cache(cache.clone(), file.reopen(), false));
        let cpu0 = cpu_time();
        let mut out = phase(
            &r,
            traces,
            ctx.content(),
            threads,
            ctx.pin,
            ctx.duration,
            true,
        );
        out.cpu_ns = (cpu_time() - cpu0).as_nanos() as u64;
        out
    } else {
        // The async read beside the synchronous one on equal terms: one task per runtime
        // thread, as `foliocache-sync` reads on one thread per runtime thread; the reads
        // that hop to a blocking thread keep every task (their best case).
        let tasks = if kind == AsyncKind::FoliocacheAsync {
            threads
        } else {
            ctx.tasks
        };
        let handles = (0..tasks).map(|_| kind.handle(file)).collect();
        let c = cache.clone();
        run_tasks(
            rt,
            handles,
            traces,
            ctx.content(),
            ctx.duration,
            move || c.stats().misses,
        )
        .0
    };
    Ok(Sample {
        out,
        misses: Some(cache.stats().misses.saturating_sub(misses0)),
        stats: None,
        bad_pages: 0,
    })
}

/// Blocks the process read from storage so far (`/proc/self/io`): the kernel's misses.
fn kernel_misses() -> u64 {
    storage_read_bytes() / block() as u64
}

/// `path` opened by `tokio::fs::File::open`, as the descriptor its blocking jobs `pread`.
fn open_tokio_fs(rt: &Runtime, path: &Path) -> LabResult<Arc<File>> {
    rt.block_on(async {
        let f = tokio::fs::File::open(path).await?;
        Ok::<_, std::io::Error>(Arc::new(f.into_std().await))
    })
    .map_err(|e| crate::lab_err!("tokio::fs::File::open({}): {e}", path.display()))
}

/// One task's way to the file.
enum Handle {
    /// `AsyncFile::read_exact_at`, awaited on the executor thread.
    Async(AsyncFile),
    /// The synchronous `CachedFile::read_exact_at` in `spawn_blocking`.
    SyncBlocking(Arc<CachedFile>),
    /// `pread` of the buffered file in `spawn_blocking`, as `tokio::fs` reads.
    TokioFs(Arc<File>),
    /// foyer's cache of the blocks.
    #[cfg(feature = "foyer")]
    Foyer(Arc<foyer::Blocks>),
}

impl Handle {
    /// Reads block `b` into `buf` (one block long); gives the buffer back with the outcome.
    async fn read(&self, mut buf: Vec<u8>, b: u32) -> (Vec<u8>, Result<(), String>) {
        let off = u64::from(b) * block() as u64;
        match self {
            Handle::Async(f) => {
                let r = f
                    .read_exact_at(&mut buf, off)
                    .await
                    .map_err(|e| format!("AsyncFile::read_exact_at of block {b}: {e}"));
                (buf, r)
            }
            Handle::SyncBlocking(f) => {
                let f = f.clone();
                blocking(buf, move |buf| {
                    f.read_exact_at(buf, off)
                        .map_err(|e| format!("read_exact_at of block {b} in spawn_blocking: {e}"))
                })
                .await
            }
            Handle::TokioFs(f) => {
                let f = f.clone();
                blocking(buf, move |buf| {
                    f.read_exact_at(buf, off)
                        .map_err(|e| format!("pread of block {b} in spawn_blocking: {e}"))
                })
                .await
            }
            #[cfg(feature = "foyer")]
            Handle::Foyer(f) => {
                let r = f.read(b, &mut buf).await;
                (buf, r)
            }
        }
    }
}

/// Runs `read` on `buf` as a job of the runtime's blocking pool (as `tokio::fs` runs each of
/// its calls), the buffer moved in and back.
async fn blocking(
    mut buf: Vec<u8>,
    read: impl FnOnce(&mut [u8]) -> Result<(), String> + Send + 'static,
) -> (Vec<u8>, Result<(), String>) {
    let len = buf.len();
    match tokio::task::spawn_blocking(move || {
        let r = read(&mut buf);
        (buf, r)
    })
    .await
    {
        Ok(out) => out,
        Err(e) => (vec![0; len], Err(format!("spawn_blocking: {e}"))),
    }
}

/// One task: reads the blocks of trace `i`, one at a time, checking each, until `stop`. The
/// loop is the synchronous workers' (`peers`' `worker`): the stop flag looked at every
/// [`CHECK_EVERY`] reads, the async read into the task's own buffer.
async fn task(
    h: Handle,
    traces: Arc<Traces>,
    i: usize,
    content: Arc<Content>,
    stop: Arc<AtomicBool>,
) -> WorkerOut {
    let trace = &traces.0[i];
    let mask = trace.len() - 1;
    let mut out = WorkerOut::new();
    let mut buf = vec![0u8; block()];
    let mut pos = 0;
    'run: loop {
        for _ in 0..CHECK_EVERY {
            let b = trace[pos];
            pos = (pos + 1) & mask;
            let (full, t0) = out.next_read();
            let r = match &h {
                Handle::Async(f) => f
                    .read_exact_at(&mut buf, u64::from(b) * block() as u64)
                    .await
                    .map_err(|e| format!("AsyncFile::read_exact_at of block {b}: {e}")),
                other => {
                    let (back, r) = other.read(std::mem::take(&mut buf), b).await;
                    buf = back;
                    r
                }
            };
            let res = r.map(|()| content.check(b, &buf, full));
            if !out.tally(res, full, t0) {
                break 'run;
            }
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        // A task whose reads all hit never returns `Pending`: let the others run.
        tokio::task::yield_now().await;
    }
    out
}

/// Runs one task per handle on `rt` for `duration`. The window starts before the tasks are
/// spawned and ends when a clock thread raises the stop flag; that thread also reads the
/// process's CPU time and `misses` then, so both are the window's. Each task stops after the
/// read it is in. Returns the tasks' tallies (CPU: the process's in the window) and the
/// misses in the window.
fn run_tasks(
    rt: &Runtime,
    handles: Vec<Handle>,
    traces: &Arc<Traces>,
    content: &Arc<Content>,
    duration: Duration,
    misses: impl Fn() -> u64 + Send + 'static,
) -> (PhaseOut, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let misses0 = misses();
    let cpu0 = cpu_time();
    let started = Instant::now();
    let clock = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("peers-async-clock".into())
            .spawn(move || {
                std::thread::sleep(duration);
                let elapsed = started.elapsed();
                let (cpu, m) = (cpu_time(), misses());
                stop.store(true, Ordering::Relaxed);
                (elapsed, cpu, m)
            })
            .expect("spawning the clock thread")
    };
    let outs = rt.block_on(async {
        let joins: Vec<_> = handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| tokio::spawn(task(h, traces.clone(), i, content.clone(), stop.clone())))
            .collect();
        let mut outs = Vec::with_capacity(joins.len());
        for j in joins {
            outs.push(j.await.unwrap_or_else(|e| {
                let mut w = WorkerOut::new();
                w.error = Some(format!("task: {e}"));
                w
            }));
        }
        outs
    });
    let (elapsed, cpu1, misses1) = clock.join().expect("the clock thread");
    let mut out = PhaseOut::of(elapsed, outs);
    out.cpu_ns = cpu1.saturating_sub(cpu0).as_nanos() as u64;
    (out, misses1.saturating_sub(misses0))
}

/// `runtime | contender | ops/s | misses/s | hit ratio | CPU (s) | ops/CPU-s | p50 | p99 |
/// foliocache-async / it (ops/s, ops/CPU-s) | misses/s / fio's`.
fn async_table(
    report: &Report,
    variants: &[&str],
    threads: &[usize],
    extra: &Map<String, Value>,
    runtime: &dyn Fn(usize) -> &'static str,
) -> Table {
    let mut t = Table::new([
        "#threads",
        "runtime",
        "contender",
        "ops/s",
        "misses/s",
        "hit ratio",
        "CPU (s)",
        "ops/CPU-s",
        "p50 (us)",
        "p99 (us)",
        "async / it: ops/s",
        "async / it: ops/CPU-s",
        "misses/s / fio",
    ]);
    let me = AsyncKind::FoliocacheAsync.name();
    for &n in threads {
        let get = |v: &str, m: &str| report.row(v, n, m, extra).map(|r| r.median);
        let ratio = |v: &str, m: &str, base: &str| match (get(v, m), get(base, m)) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
            _ => "-".into(),
        };
        for &v in variants {
            let Some(ops) = get(v, "ops_per_sec") else {
                continue;
            };
            let num = |m: &str| get(v, m).map_or("-".into(), fmt_num);
            let us = |m: &str| get(v, m).map_or("-".into(), |x| fmt_num(x / 1e3));
            t.row([
                n.to_string(),
                runtime(n).to_string(),
                v.to_string(),
                fmt_num(ops),
                num("misses_per_sec"),
                get(v, "hit_ratio").map_or("-".into(), |h| format!("{:.1}%", h * 100.0)),
                get(v, "cpu_ms").map_or("-".into(), |c| format!("{:.3}", c / 1e3)),
                num("ops_per_cpu_sec"),
                us("p50_latency_ns"),
                us("p99_latency_ns"),
                if v == me || v == FIO {
                    "-".into()
                } else {
                    ratio(me, "ops_per_sec", v)
                },
                if v == me || v == FIO {
                    "-".into()
                } else {
                    ratio(me, "ops_per_cpu_sec", v)
                },
                if v == FIO {
                    "-".into()
                } else {
                    ratio(v, "misses_per_sec", FIO)
                },
            ]);
        }
    }
    t
}

/// The targets for `mix`, at every runtime: (baseline, metric, minimum ratio of
/// `foliocache-async` to it), cold then resident.
fn target_table(report: &Report, mix: workload::Mix, threads: &[usize]) -> Table {
    let targets: [(Part, &str, &str, f64); 8] = [
        (Part::Cold, FIO, "misses_per_sec", 0.8),
        (Part::Cold, "tokio-fs", "ops_per_sec", 1.0),
        (Part::Cold, "tokio-fs", "ops_per_cpu_sec", 1.5),
        (
            Part::Cold,
            "foliocache-sync-blocking",
            "ops_per_cpu_sec",
            1.5,
        ),
        (Part::Resident, "foliocache-sync", "ops_per_sec", 0.9),
        (Part::Resident, "tokio-fs", "ops_per_sec", 20.0),
        // The same, per CPU-second: on the current-thread runtime tokio-fs's blocking pool
        // runs on the other CPUs too, while the async reads stay on the executor's thread.
        (Part::Resident, "tokio-fs", "ops_per_cpu_sec", 20.0),
        (Part::Cold, "foyer", "ops_per_sec", 1.2),
    ];
    let mut t = Table::new([
        "#threads",
        "part",
        "foliocache-async against",
        "metric",
        "ratio",
        "target",
        "met",
    ]);
    let me = AsyncKind::FoliocacheAsync.name();
    for &n in threads {
        for (part, base, metric, min) in targets {
            let extra = part.extra(mix);
            let get = |v: &str| report.row(v, n, metric, &extra).map(|r| r.median);
            let (Some(a), Some(b)) = (get(me), get(base)) else {
                continue;
            };
            let r = if b > 0.0 { a / b } else { f64::INFINITY };
            t.row([
                n.to_string(),
                part.name().to_string(),
                base.to_string(),
                metric.to_string(),
                format!("{r:.2}x"),
                format!(">= {min}x"),
                if r >= min { "yes" } else { "no" }.to_string(),
            ]);
        }
    }
    t
}

/// The `foyer` contender: foyer's in-memory cache of the file's blocks, as a tokio service
/// would use it (`get_or_fetch`, concurrent misses of one block read once), every miss a
/// `pread` of the file opened with `O_DIRECT` (no second copy in the kernel's cache, as
/// foliocache reads) in `spawn_blocking`; the cache's capacity is the same budget, counted
/// in the blocks' bytes (its own entries' overhead is not).
#[cfg(feature = "foyer")]
mod foyer {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;
    use std::sync::atomic::AtomicU64;

    /// The cache, the file and the misses counted by the fetches.
    pub(super) struct Blocks {
        cache: foyer_memory::Cache<u32, Arc<[u8]>>,
        file: Arc<File>,
        misses: Arc<AtomicU64>,
    }

    impl Blocks {
        /// Block `b` copied into `buf` (one block long), from the cache or read into it.
        pub(super) async fn read(&self, b: u32, buf: &mut [u8]) -> Result<(), String> {
            let (file, misses) = (self.file.clone(), self.misses.clone());
            let e = self
                .cache
                .get_or_fetch(&b, move || async move {
                    misses.fetch_add(1, Ordering::Relaxed);
                    tokio::task::spawn_blocking(move || read_direct(&file, b))
                        .await
                        .map_err(std::io::Error::other)?
                })
                .await
                .map_err(|e| format!("foyer get_or_fetch of block {b}: {e}"))?;
            buf.copy_from_slice(e.value());
            Ok(())
        }
    }

    /// Block `b` read with direct I/O (an aligned bounce buffer).
    fn read_direct(file: &File, b: u32) -> std::io::Result<Arc<[u8]>> {
        const ALIGN: usize = 4096;
        let mut raw = vec![0u8; block() + ALIGN];
        let at = raw.as_ptr().align_offset(ALIGN);
        let buf = &mut raw[at..at + block()];
        file.read_exact_at(buf, u64::from(b) * block() as u64)?;
        Ok(Arc::from(&buf[..]))
    }

    /// One cold measurement: a new cache of the budget, the file opened for direct reads.
    pub(super) fn measure(ctx: &Ctx, rt: &Runtime, traces: &Arc<Traces>) -> LabResult<Sample> {
        let path = &ctx.setup.path;
        // A file system without direct I/O (tmpfs) refuses it: read through the kernel's
        // cache there, as foliocache's `DirectIo::Auto` does.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .or_else(|_| File::open(path))
            .map_err(|e| crate::lab_err!("opening {}: {e}", path.display()))?;
        // Built inside the runtime: the cache may look for it.
        let cache = rt.block_on(async {
            foyer_memory::CacheBuilder::new(ctx.setup.budget_bytes())
                .with_weighter(|_: &u32, v: &Arc<[u8]>| v.len())
                .build()
        });
        let blocks = Arc::new(Blocks {
            cache,
            file: Arc::new(file),
            misses: Arc::new(AtomicU64::new(0)),
        });
        let handles = (0..ctx.tasks).map(|_| Handle::Foyer(blocks.clone())).collect();
        let m = blocks.misses.clone();
        Ok(peer_sample(ctx, rt, handles, traces, move || {
            m.load(Ordering::Relaxed)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::CommonArgs;

    #[test]
    fn task_counts_and_names_parse() {
        assert_eq!(parse_tasks("64"), Ok(64));
        assert_eq!(parse_tasks("1"), Ok(1));
        for bad in ["0", "x", "4097", ""] {
            assert!(parse_tasks(bad).is_err(), "{bad}");
        }
        for k in AsyncKind::RESIDENT.into_iter().chain(AsyncKind::COLD) {
            assert_eq!(AsyncKind::parse(k.name()), Some(k));
        }
        // Every cold contender but the optional foyer is measured resident too.
        assert_eq!(
            AsyncKind::COLD
                .iter()
                .filter(|k| !AsyncKind::RESIDENT.contains(k))
                .count(),
            usize::from(cfg!(feature = "foyer"))
        );
        assert_eq!(AsyncKind::parse("quick_cache"), None);
        assert_eq!(
            Flavor::ALL.map(Flavor::threads),
            [1, MULTI_WORKERS],
            "the rows' threads tell the runtimes apart"
        );
    }

    /// A tiny async run on both runtimes in the temporary directory: every contender reads
    /// the right bytes, cold and resident, and the report is valid.
    #[test]
    fn a_tiny_async_run_checks_and_compares() {
        let dir = tempfile::tempdir().unwrap();
        let args = Args {
            common: CommonArgs {
                duration: Some(Duration::from_millis(30)),
                runs: Some(1),
                quick: true,
                no_pin: true,
                no_progress: true,
                ..CommonArgs::default()
            },
            file_mib: Some(2),
            io: crate::harness::IoArgs {
                dir: Some(dir.path().to_path_buf()),
                ..Default::default()
            },
            aio: AsyncArgs {
                enabled: true,
                tasks: 8,
                fio: FioArgs {
                    fio: None,
                    no_fio: true,
                },
                ..AsyncArgs::default()
            },
            ..Args::default()
        };
        let r = super::super::run(&args).unwrap();
        assert!(r.all_checks_ok(), "{:?}", r.checks);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        let mix = workload::Mix::Zipf;
        for n in [1, MULTI_WORKERS] {
            for k in AsyncKind::COLD {
                let row = r.row(k.name(), n, "ops_per_sec", &Part::Cold.extra(mix));
                assert!(row.is_some_and(|x| x.median > 0.0), "{} {n}", k.name());
                // The tokio-fs misses are the kernel's reads from storage: none on a tmpfs.
                let misses = r.row(k.name(), n, "misses_per_sec", &Part::Cold.extra(mix));
                assert!(misses.is_some(), "{} {n}", k.name());
                if k != AsyncKind::TokioFs {
                    assert!(misses.unwrap().median > 0.0, "{} {n}", k.name());
                }
            }
            // tokio-fs's misses are the process's reads from storage (`/proc/self/io`), which
            // the tests running beside this one add to: judged on foliocache's own counters.
            for k in AsyncKind::RESIDENT.into_iter().filter(|&k| k != AsyncKind::TokioFs) {
                let h = r
                    .row(k.name(), n, "hit_ratio", &Part::Resident.extra(mix))
                    .unwrap()
                    .median;
                assert!(h > 0.99, "{} at {n}: {h}", k.name());
            }
        }
        assert!(r
            .comparisons
            .iter()
            .any(|c| c.baseline == "foliocache-sync" && c.candidate == "foliocache-async"));
        assert_eq!(r.params["tasks"], 8);
        assert_eq!(r.params["mode"], "async");
        assert!(r.stats.as_ref().unwrap()["foliocache-async"].is_object());
    }
}
