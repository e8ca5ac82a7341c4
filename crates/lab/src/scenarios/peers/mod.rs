//! `peers`: foliocache against what a storage engine would use instead, on a block-cache
//! workload as storage engines run it.
//!
//! **The workload.** A data file several times larger than the cache budget (generated in a
//! temporary directory: 256 MiB, 16 MiB with `--quick`; or a user's `--file`), read in 4 KiB
//! blocks. Every worker thread replays its own precomputed trace of block numbers
//! ([`workload`]): `zipf` (default, skew `--skew` 0.99, the hot blocks scattered over the
//! file), `uniform`, `scan` (half the reads in sequential 64-block scans), or `resident`
//! (Zipf over a working set of half the budget: after the warm-up every read hits, so only
//! the hit path is measured, where the reference count's cache line is what matters). The budget is
//! `--budget-fraction` (default 1/4) of the file. Every contender is built fresh for every
//! measurement, warmed up for `--warmup` (default: the measurement's duration) with the same
//! threads, then measured; contenders are interleaved A B C ... A B C in one process. The
//! warm-up replays the first half of each thread's trace and the measurement the second:
//! fresh reads of the same distribution, since replaying the warm-up's own sample favours a
//! policy that counts frequencies (an exact LFU hits 0.8 points more at skew 0.99 on a
//! replayed trace than on a fresh one).
//!
//! **The contenders** ([`contenders`]): `foliocache` (`read_at` copying the block),
//! `foliocache-pinned` (zero-copy through a pinned folio; both built by
//! `Config::block_cache`, the configuration the library offers storage engines: readahead
//! off, as a storage engine configures random block reads (the kernel's context readahead
//! would otherwise read neighbours of cached blocks into a tight budget), and 4 active pages
//! per inactive one where the kernel's formula keeps the lists level below 1 GiB; workingset
//! detection and the active second chance on. `--ra-pages`, `--inactive-ratio` (`kernel`
//! for `Config::new`'s formula), `--no-workingset` and `--kernel-active-aging` change them),
//! foliocache reads its misses buffered here (`DirectIo::Off`), from the kernel's warm page
//! cache like every other contender (the `io` scenario measures the device), and
//! `quick_cache` and `moka` (current
//! crates.io releases holding `Arc<[u8]>` blocks, filled by `pread` on a miss),
//! `quick_cache-copy` (quick_cache whose reads copy the block into the caller's buffer, as
//! `read_at` does), and the
//! kernel's page cache through `pread` (`kernel-pread`) and a shared mapping (`mmap`). The two
//! kernel contenders' budget is **the whole machine's memory**: the file sits in the kernel's
//! page cache (it is read once before measuring), so they never miss; they are the floor a
//! userspace cache must beat to be worth its memory.
//!
//! **What is measured**, per contender and thread count: operations per second (all threads);
//! the hit ratio of the measured phase (how each contender counts a miss is in
//! [`contenders`]); p50 and p99 latency of one block read (1 read in 8 is timed, into an HDR
//! histogram, so the clock costs every contender the same ~5 ns per read); and the peak
//! resident memory the contender added: the process's RSS (`/proc/self/statm`) sampled every
//! 10 ms while it is built, warmed and measured, minus the RSS before it was built (after
//! returning freed heap to the system). VmHWM would be the process's peak over all
//! contenders, hence this growth, honestly labelled: the kernel page cache is in nobody's RSS
//! (so `kernel-pread` shows about 0), while `mmap` counts the file pages it mapped.
//!
//! **Like for like.** A zero-copy read and a copying one do different work (a 4 KiB copy is
//! about as long as a cached lookup), so each foliocache read is compared with the peers
//! that do the same: `foliocache-pinned` with `quick_cache` and `moka` (and `mmap`), which
//! hand out cached bytes in place; `foliocache` (`read_at`) with `quick_cache-copy` and
//! `kernel-pread`, which copy into the caller's buffer. The tables say so.
//!
//! **The hit-ratio sweep** ([`sweep`]; `--sweep-skews`, `--no-sweep`): every contender's hit
//! ratio at Zipf skews 0.6, 0.8, 0.9, 0.99 and 1.2 in one table, one thread, beside what an
//! exact LFU and Belady's optimum hit on the same trace and budget: where foliocache trails
//! the best peer, they say how much any policy could gain.
//!
//! **The async mode** (`--async`, [`aio`]): `--tasks` tokio tasks (default 64) on a
//! current-thread and a 2-thread runtime read a file on a disk file system cold, through
//! foliocache's `AsyncFile`, its synchronous API in `spawn_blocking`, and `tokio::fs`, beside
//! fio's measure of the device; then the same reads when the file is resident. It replaces
//! the synchronous contenders and the sweep for that run; `all` runs the synchronous mode.
//!
//! **Correctness.** Every read checks the block's first and last words against the file's
//! content (a generated file's words are a function of their offset); one read in 256 checks
//! the whole block (a user's file: against a direct `pread` of the same block).
//!
//! Stable names (see `docs/LAB-RESULTS.md`):
//!
//! | kind | names |
//! |---|---|
//! | variants | `foliocache`, `foliocache-pinned`, `quick_cache`, `quick_cache-copy`, `moka`, `kernel-pread`, `mmap`; in the sweep also `exact-lfu`, `belady-opt` |
//! | metrics | `ops_per_sec` (block reads per second, all threads), `ops_per_cpu_sec` (block reads per CPU-second the workers used: the throughput a machine with no other load would give spinning workers; it flatters a contender whose workers sleep on locks), `hit_ratio` (0 to 1), `p50_latency_ns`, `p99_latency_ns`, `rss_growth_bytes` (peak RSS added by the contender) |
//! | row fields | `mix`: `zipf`, `uniform`, `scan` or `resident`; the sweep's rows (1 thread, `hit_ratio` only, 1 run) have `sweep`: `skew` and `skew` instead |
//! | stats | `foliocache` and `foliocache-pinned`: the cache's `/proc/vmstat` lines (`FolioCache::vmstat`: read path, LRU, `workingset_*`) after their last measurement |
//! | comparisons | like for like, metric `ops_per_sec`, per thread count and mix: candidate `foliocache-pinned` against `quick_cache`, `moka`, `mmap`; candidate `foliocache` against `quick_cache-copy`, `kernel-pread` |
//! | checks | `correct_bytes` (reads whose bytes were wrong, must be 0), `sampled_reads_verified` (full-block checks made, must be above 0), `read_errors` (reads that failed, must be 0) |
//! | async mode | its variants, row fields, metrics and checks: [`aio`] |
//!
//! The targets (issue 15; Zipf 0.99, budget 1/4, at 1 and 2 threads): `foliocache-pinned`
//! at least 1.25x `quick_cache` and 3x `moka`; `foliocache` at least 1.1x `quick_cache-copy`
//! and 1.5x `kernel-pread`; with `--mix resident`, `foliocache-pinned` at least 2x
//! `quick_cache`; the hit ratio within 1 point of the best peer. The targets table prints
//! whether they were met; they are not checks (a noisy machine must not fail CI).

pub mod aio;
pub mod contenders;
mod probes;
pub mod sweep;
pub mod workload;

use std::fs::File;

use foliocache::mm::lru::{LruConfig, LruPolicy};
use foliocache::BLOCK_CACHE_INACTIVE_RATIO;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use crate::harness::{
    fmt_num, parse_duration, parse_variant, run_threads, seed_table, Bench, CommonArgs, IoArgs, LabResult, Report,
    Settings, Table, CHECK_EVERY,
};
use contenders::{Kind, Reader};
use probes::{machine_memory, rss_bytes, thread_cpu_ns, trim_heap, RssSampler};
use workload::{block, Content, Mix, BLOCK};

/// Not a seed: this scenario answers the issue's question "is it faster than what I use
/// today" (`docs/research/anchors.md` lists the peers).
pub const SEED: &str = "none (peers: quick_cache, moka, the kernel page cache)";

/// The scenario name (subcommand).
pub const NAME: &str = "peers";

/// One line for `all` and the summary.
pub const ABOUT: &str = "a storage engine's block cache: 4 KiB Zipf reads of a file 4x the \
budget; foliocache (copy and pinned) against quick_cache, moka, kernel pread and mmap";

/// One read in this many is timed.
const LATENCY_EVERY: u64 = 8;

/// One read in this many checks the whole block.
const FULL_CHECK_EVERY: u64 = 256;

/// Options of `foliocache-lab peers`.
#[derive(ClapArgs, Debug, Clone)]
pub struct Args {
    /// Options every scenario takes.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Read this file (its whole 4 KiB blocks) instead of generating one; reads are checked
    /// against direct reads of it.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Size of the generated file in MiB [default: 256; 16 with --quick].
    #[arg(long)]
    pub file_mib: Option<u64>,
    /// Cache budget as a fraction of the file.
    #[arg(long, default_value_t = 0.25)]
    pub budget_fraction: f64,
    /// Access patterns, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "zipf")]
    pub mix: Vec<Mix>,
    /// Zipf exponent of the `zipf`, `scan` and `resident` mixes (above 0).
    #[arg(long, default_value_t = 0.99)]
    pub skew: f64,
    /// Zipf exponents of the hit-ratio sweep, comma-separated (one thread, every contender,
    /// beside an exact LFU and Belady's optimum on the same trace).
    #[arg(long, value_delimiter = ',', default_value = "0.6,0.8,0.9,0.99,1.2")]
    pub sweep_skews: Vec<f64>,
    /// Skip the hit-ratio sweep.
    #[arg(long)]
    pub no_sweep: bool,
    /// Contenders to run, comma-separated [default: all].
    #[arg(long, value_delimiter = ',')]
    pub contenders: Vec<String>,
    /// Warm-up before each measurement [default: the measurement's duration].
    #[arg(long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Readahead window of the foliocache contenders, in pages. 0 (`Config::block_cache`'s)
    /// turns readahead off, as a storage engine does for its random block reads (RocksDB
    /// opens its files with `POSIX_FADV_RANDOM`); 32 is `Config::new`'s.
    #[arg(long, default_value_t = 0)]
    pub ra_pages: usize,
    /// Run the foliocache contenders without workingset detection (`Config::workingset(false)`:
    /// no shadow entries, no refault activation), to measure what it does to the hit ratio.
    #[arg(long)]
    pub no_workingset: bool,
    /// Active pages the foliocache contenders' LRU keeps per inactive page
    /// (`LruConfig::inactive_ratio`): a number, or `kernel` for the kernel's formula
    /// (`int_sqrt(10 * GiB)` of the cache, 1 below 1 GiB: what `Config::new` uses).
    /// Default: `Config::block_cache`'s.
    #[arg(long, default_value_t = InactiveRatio::Fixed(BLOCK_CACHE_INACTIVE_RATIO), value_parser = InactiveRatio::parse)]
    pub inactive_ratio: InactiveRatio,
    /// Age the foliocache contenders' active list as the kernel does for unmapped file pages,
    /// in list order, without the second chance for referenced folios
    /// (`LruConfig::active_second_chance = false`).
    #[arg(long)]
    pub kernel_active_aging: bool,
    /// The foliocache contenders' replacement policy (`Config::lru_policy`): `protected` (a
    /// protected set with non-resident history and an adaptive inactive list) or `two-list`
    /// (the kernel's active and inactive lists). Default: `Config::block_cache`'s.
    #[arg(long, value_parser = parse_variant::<LruPolicy>)]
    pub lru_policy: Option<LruPolicy>,
    /// Block size: `4k` (a page), `16k` (InnoDB's page, many RocksDB deployments' block) or
    /// `64k`. Every contender caches and reads whole blocks; `foliocache-pinned` gets an
    /// aligned block as one large folio. The JSON records it (`block_bytes`).
    #[arg(long, default_value = "4k", value_parser = parse_block)]
    pub block: usize,
    /// Where the generated file is (`--dir`: the temporary directory by default; with
    /// `--async`, /var/tmp, a disk file system) and, with `--async`, how foliocache reads it
    /// (`--io`, `--direct`; the synchronous contenders read buffered).
    #[command(flatten)]
    pub io: IoArgs,
    /// The async mode (`--async`, `--tasks`, `--runtime`, `--fio`, `--no-fio`).
    #[command(flatten)]
    pub aio: aio::AsyncArgs,
}

/// `--block`: `4k`, `16k`, `64k` (or a byte count that is a multiple of 4096).
fn parse_block(s: &str) -> Result<usize, String> {
    let bytes = match s.to_ascii_lowercase().as_str() {
        "4k" => 4096,
        "16k" => 16384,
        "64k" => 65536,
        n => n
            .parse::<usize>()
            .map_err(|_| format!("block size `{s}`: use 4k, 16k, 64k or a number of bytes"))?,
    };
    if bytes == 0 || bytes % 4096 != 0 || bytes > 2 << 20 {
        return Err(format!(
            "block size {bytes}: use a multiple of 4096 bytes, at most 2 MiB"
        ));
    }
    Ok(bytes)
}

/// `--inactive-ratio`: a fixed ratio, or the kernel's formula.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InactiveRatio {
    /// `int_sqrt(10 * GiB)`, 1 below 1 GiB (`LruConfig::inactive_ratio = None`).
    Kernel,
    /// This many active pages per inactive one.
    Fixed(u32),
}

impl InactiveRatio {
    /// `kernel`, or a positive number.
    pub fn parse(s: &str) -> Result<InactiveRatio, String> {
        if s == "kernel" {
            return Ok(InactiveRatio::Kernel);
        }
        match s.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(InactiveRatio::Fixed(n)),
            _ => Err(format!(
                "`{s}` is not an inactive ratio: give `kernel` or a whole number of at least 1"
            )),
        }
    }

    /// As `LruConfig::inactive_ratio` takes it.
    pub fn get(self) -> Option<u32> {
        match self {
            InactiveRatio::Kernel => None,
            InactiveRatio::Fixed(n) => Some(n),
        }
    }
}

impl std::fmt::Display for InactiveRatio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InactiveRatio::Kernel => f.write_str("kernel"),
            InactiveRatio::Fixed(n) => write!(f, "{n}"),
        }
    }
}

impl Default for Args {
    fn default() -> Self {
        Args {
            common: CommonArgs::default(),
            file: None,
            file_mib: None,
            budget_fraction: 0.25,
            mix: vec![Mix::Zipf],
            skew: 0.99,
            sweep_skews: SWEEP_SKEWS.to_vec(),
            no_sweep: false,
            contenders: Vec::new(),
            warmup: None,
            ra_pages: 0,
            no_workingset: false,
            inactive_ratio: InactiveRatio::Fixed(BLOCK_CACHE_INACTIVE_RATIO),
            kernel_active_aging: false,
            lru_policy: None,
            block: BLOCK,
            io: IoArgs::default(),
            aio: aio::AsyncArgs::default(),
        }
    }
}

/// The skews of the hit-ratio sweep (`--sweep-skews`' default).
pub const SWEEP_SKEWS: [f64; 5] = [0.6, 0.8, 0.9, 0.99, 1.2];

/// The seed of thread 0's trace (thread `t` uses `TRACE_SEED + t`; the sweep uses thread 0's).
pub const TRACE_SEED: u64 = 0x7ace;

crate::scenarios::scenario!();

/// What every measurement shares: the file, its content, the budget, the traces.
struct Setup {
    path: PathBuf,
    file: Arc<File>,
    blocks: u64,
    budget_blocks: usize,
    content: Arc<Content>,
    ra_pages: usize,
    /// The foliocache contenders' LRU policy.
    lru: LruConfig,
    _dir: Option<tempfile::TempDir>,
}

impl Setup {
    /// The budget in bytes: `budget_blocks` blocks of this run's block size (`--block`). Every
    /// budget-limited contender is built from this one figure (the sweep once used the 4 KiB
    /// default block here, and gave foliocache a quarter of its budget at `--block 16k`).
    fn budget_bytes(&self) -> usize {
        self.budget_blocks * block()
    }
}

/// The traces of one mix, one per thread.
struct Traces(Vec<Vec<u32>>);

/// What one phase of one contender produced.
struct PhaseOut {
    ops: u64,
    cpu_ns: u64,
    elapsed: Duration,
    bad: u64,
    verified: u64,
    misses: u64,
    hist: Histogram<u64>,
    errors: Vec<String>,
}

/// One measurement of one contender.
struct Sample {
    ops_per_sec: f64,
    ops_per_cpu_sec: f64,
    hit_ratio: f64,
    p50_ns: f64,
    p99_ns: f64,
    rss_growth: f64,
    bad: u64,
    verified: u64,
    errors: Vec<String>,
    stats: Option<Value>,
}

/// Runs the scenario: measures, prints the tables, writes JSON and plot if asked (`--async`:
/// the async mode, [`aio`]).
pub fn run(args: &Args) -> LabResult<Report> {
    check_args(args)?;
    workload::set_block(args.block);
    if args.aio.enabled {
        return aio::run(args);
    }
    let settings = args.common.settings();
    let kinds = if args.contenders.is_empty() {
        Kind::ALL.to_vec()
    } else {
        args.contenders
            .iter()
            .map(|n| {
                Kind::parse(n).ok_or_else(|| {
                    let names: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
                    crate::lab_err!("unknown contender `{n}` (have: {})", names.join(", "))
                })
            })
            .collect::<LabResult<Vec<_>>>()?
    };
    let setup = prepare(args, &settings, args.io.dir.as_deref(), true)?;
    let warmup = args.warmup.unwrap_or(settings.duration);
    let trace_len: usize = if settings.quick { 1 << 16 } else { 1 << 20 };
    let budget_mib = setup.budget_bytes() as f64 / (1 << 20) as f64;
    let file_mib = setup.blocks as f64 * block() as f64 / (1 << 20) as f64;
    let steps = (args.mix.len() * settings.threads.len() * settings.runs * kinds.len()) as u64;
    let mut bench = Bench::with_steps(
        NAME,
        SEED,
        &settings,
        json!({
            "variants": kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
            "mixes": args.mix.iter().map(|m| m.name()).collect::<Vec<_>>(),
            "skew": args.skew,
            "file": if args.file.is_some() { setup.path.display().to_string() } else { "generated".into() },
            "file_bytes": setup.blocks * block() as u64,
            "block_bytes": block(),
            "budget_bytes": setup.budget_bytes(),
            "budget_fraction": args.budget_fraction,
            "warmup_ms": warmup.as_millis() as u64,
            "foliocache_ra_pages": setup.ra_pages,
            "foliocache_workingset": setup.lru.workingset,
            "foliocache_inactive_ratio": setup.lru.inactive_ratio,
            "foliocache_active_second_chance": setup.lru.active_second_chance,
            "foliocache_lru_policy": setup.lru.policy.name(),
            "trace_len": trace_len,
            "trace_halves": "the warm-up replays the first trace_len reads of a thread's trace, the measurement the next trace_len",
            "machine_budget": "kernel-pread and mmap use the kernel page cache: their budget is the machine's memory",
            "latency_sampling": format!("1 read in {LATENCY_EVERY}"),
        }),
        steps,
        settings.duration + warmup,
    );
    println!(
        "peers: {} file of {file_mib:.0} MiB ({} blocks of {} KiB), budget {budget_mib:.1} MiB \
         ({} blocks); kernel-pread and mmap: budget = the machine's memory ({:.1} GiB), the \
         file is in the kernel page cache",
        if args.file.is_some() {
            "the"
        } else {
            "a generated"
        },
        setup.blocks,
        block() >> 10,
        setup.budget_blocks,
        machine_memory() as f64 / (1u64 << 30) as f64
    );
    println!(
        "peers: foliocache contenders: Config::block_cache, LRU policy {}, readahead {}, \
         inactive ratio {}, workingset detection {}, active second chance {}",
        setup.lru.policy,
        if setup.ra_pages == 0 {
            "off".to_string()
        } else {
            format!("{} pages", setup.ra_pages)
        },
        args.inactive_ratio,
        if setup.lru.workingset { "on" } else { "off" },
        if setup.lru.active_second_chance {
            "on"
        } else {
            "off"
        },
    );

    let (mut bad, mut verified, mut errors) = (0u64, 0u64, Vec::<String>::new());
    // The last measurement's counters of each contender that has them, by name.
    let mut stats = Map::new();
    let mut tables = Vec::new();
    let max_threads = settings.threads.iter().copied().max().unwrap_or(1);
    for &mix in &args.mix {
        let traces = Arc::new(Traces(
            (0..max_threads)
                .map(|t| {
                    workload::trace_in(
                        mix,
                        setup.blocks,
                        workload::resident_blocks(setup.budget_blocks),
                        args.skew,
                        2 * trace_len,
                        TRACE_SEED + t as u64,
                    )
                })
                .collect(),
        ));
        let extra = mix_extra(mix);
        bench.measure(mix.name(), &kinds, &extra, |il, &kind, threads, _round| {
            let s = measure(kind, &setup, &traces, threads, &settings, warmup)?;
            let name = kind.name();
            il.add(name, threads, "ops_per_sec", s.ops_per_sec);
            il.add(name, threads, "ops_per_cpu_sec", s.ops_per_cpu_sec);
            il.add(name, threads, "hit_ratio", s.hit_ratio);
            il.add(name, threads, "p50_latency_ns", s.p50_ns);
            il.add(name, threads, "p99_latency_ns", s.p99_ns);
            il.add(name, threads, "rss_growth_bytes", s.rss_growth);
            bad += s.bad;
            verified += s.verified;
            errors.extend(s.errors.into_iter().map(|e| format!("{name}: {e}")));
            if let Some(v) = s.stats {
                stats.insert(name.to_string(), v);
            }
            Ok(())
        })?;
        let report = &mut bench.report;
        for &threads in &settings.threads {
            // Like for like: each peer against the foliocache read that does the same work.
            for &k in &kinds {
                let candidate = k.like_for_like();
                if !matches!(k, Kind::Foliocache | Kind::FoliocachePinned) {
                    report.compare(k.name(), candidate.name(), threads, "ops_per_sec", &extra);
                }
            }
        }
        tables.push((
            format!(
                "peers, mix {}{}: {} KiB block reads, file {file_mib:.0} MiB, budget {budget_mib:.1} MiB \
                 (kernel-pread, mmap: the machine's memory){}; medians of {} runs of {:?} after {:?} \
                 warm-up. {LIKE_FOR_LIKE}",
                mix.name(),
                if mix == Mix::Uniform { String::new() } else { format!(" (skew {})", args.skew) },
                block() >> 10,
                if mix == Mix::Resident {
                    format!(
                        ", working set {} blocks (half the budget: hits only)",
                        workload::resident_blocks(setup.budget_blocks)
                    )
                } else {
                    String::new()
                },
                settings.runs,
                settings.duration,
                warmup
            ),
            contender_table(report, &kinds, &settings.threads, &extra, budget_mib),
        ));
        tables.push((
            format!(
                "Seed shape, mix {}: block reads per second, vanilla = quick_cache (the fastest \
                 Rust peer), patched = foliocache",
                mix.name()
            ),
            seed_table(
                report,
                "ops_per_sec",
                "quick_cache",
                "foliocache",
                &[
                    "foliocache-pinned",
                    "quick_cache-copy",
                    "moka",
                    "kernel-pread",
                    "mmap",
                ],
                &extra,
            ),
        ));
        if matches!(mix, Mix::Zipf | Mix::Resident) {
            tables.push((
                format!(
                    "Targets (issue 15; budget 1/4 of the file), like for like: {}{}",
                    if mix == Mix::Zipf {
                        "foliocache-pinned >= 1.25x quick_cache and >= 3x moka, foliocache >= 1.1x \
                         quick_cache-copy and >= 1.5x kernel-pread, hit ratio within 1 point of \
                         the best peer"
                    } else {
                        "hits only: foliocache-pinned >= 2x quick_cache"
                    },
                    if settings.quick {
                        "; quick mode is a smoke run (short runs and by default a 16 MiB file, \
                         whose 4 MiB budget fits in a CPU's caches): the targets are for full \
                         mode (`peers --threads 1,2`)"
                    } else {
                        ""
                    }
                ),
                target_table(report, mix, &settings.threads, &extra),
            ));
        }
    }
    if !args.no_sweep && !args.sweep_skews.is_empty() {
        bench.message("hit-ratio sweep");
        let half = trace_len / 2;
        let sw = sweep::run(&kinds, &setup, &args.sweep_skews, half)?;
        bad += sw.bad;
        errors.extend(sw.errors.iter().cloned());
        add_sweep_rows(&mut bench.report, &sw);
        tables.push((
            format!(
                "Hit-ratio sweep: one thread, Zipf skews, budget {budget_mib:.1} MiB; {half} reads \
                 of warm-up, then {half} counted; exact LFU and Belady's optimum on the same trace \
                 and budget (kernel-pread, mmap: the machine's memory)"
            ),
            sweep_table(&sw, &kinds),
        ));
    }
    let report = &mut bench.report;
    report.check("correct_bytes", json!(bad), bad == 0);
    report.check("sampled_reads_verified", json!(verified), verified > 0);
    report.check("read_errors", json!(errors.len()), errors.is_empty());
    for e in errors.iter().take(5) {
        eprintln!("peers: {e}");
    }
    report.stats = (!stats.is_empty()).then_some(Value::Object(stats));
    let plot_extra = mix_extra(args.mix[0]);
    bench.finish(&settings, &tables, Some(("ops_per_sec", &plot_extra)))
}

/// Refuses the options no mode can run with, before anything is built.
fn check_args(args: &Args) -> LabResult<()> {
    if !(args.skew > 0.0 && args.skew.is_finite()) {
        return Err(crate::lab_err!(
            "--skew must be above 0 (0.99 is the usual; use --mix uniform for no skew)"
        ));
    }
    if args
        .sweep_skews
        .iter()
        .any(|s| !(*s > 0.0 && s.is_finite()))
    {
        return Err(crate::lab_err!(
            "--sweep-skews must all be above 0, e.g. 0.6,0.8,0.9,0.99,1.2"
        ));
    }
    if !(args.budget_fraction > 0.0 && args.budget_fraction <= 1.0) {
        return Err(crate::lab_err!(
            "--budget-fraction must be in (0, 1], e.g. 0.25 for a budget of 1/4 of the file"
        ));
    }
    if args.block == 0 || args.block % 4096 != 0 {
        return Err(crate::lab_err!(
            "--block {} is not a whole number of 4 KiB pages",
            args.block
        ));
    }
    Ok(())
}

/// The rows' extra fields of `mix`: `mix`.
fn mix_extra(mix: Mix) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("mix".into(), json!(mix.name()));
    m
}

/// Opens `--file` for reading, refusing anything but a regular file: a directory would fail
/// only later and obscurely, and opening a FIFO would block until some writer appeared. The
/// open is non-blocking (a no-op for regular files) and the type is checked on the open file,
/// so a path swapped for a FIFO after a check cannot hang the lab either.
fn open_regular(p: &std::path::Path) -> LabResult<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| crate::lab_err!("opening --file {}: {e}", p.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| crate::lab_err!("--file {}: {e}", p.display()))?;
    if !meta.is_file() {
        return Err(crate::lab_err!(
            "--file {} is not a regular file (it is a {}); give a data file",
            p.display(),
            if meta.is_dir() {
                "directory"
            } else {
                "FIFO, socket or device"
            }
        ));
    }
    Ok(file)
}

/// Generates the file (in a temporary directory under `dir`, or under the system's temporary
/// directory) or opens `--file`, reads it once into the kernel page cache if `warm` (the
/// synchronous contenders' misses read that warm copy), sizes the budget.
fn prepare(args: &Args, settings: &Settings, dir: Option<&Path>, warm: bool) -> LabResult<Setup> {
    let (path, dir, content) = match &args.file {
        Some(p) => {
            let reference = open_regular(p)?;
            (p.clone(), None, Content::Reference(reference))
        }
        None => {
            let mib = args
                .file_mib
                .unwrap_or(if settings.quick { 16 } else { 256 });
            if mib == 0 {
                return Err(crate::lab_err!("--file-mib must be at least 1"));
            }
            let mut temp = tempfile::Builder::new();
            temp.prefix("foliocache-peers");
            let dir = match dir {
                Some(d) => temp.tempdir_in(d),
                None => temp.tempdir(),
            }
            .map_err(|e| crate::lab_err!("creating a temporary directory: {e}"))?;
            let path = dir.path().join("blocks.dat");
            workload::generate(&path, mib << 20 >> 12)
                .map_err(|e| crate::lab_err!("writing {}: {e}", path.display()))?;
            (path, Some(dir), Content::Generated)
        }
    };
    let file = File::open(&path).map_err(|e| crate::lab_err!("opening {}: {e}", path.display()))?;
    let len = file
        .metadata()
        .map_err(|e| crate::lab_err!("{}: {e}", path.display()))?
        .len();
    let blocks = len / block() as u64;
    if blocks < 4 {
        return Err(crate::lab_err!(
            "{} has {blocks} whole {} KiB blocks; the peers scenario needs at least 4",
            path.display(),
            block() >> 10
        ));
    }
    if blocks > u64::from(u32::MAX) {
        return Err(crate::lab_err!(
            "{} is larger than 16 TiB; use a smaller file",
            path.display()
        ));
    }
    if warm {
        // Into the kernel page cache, so no contender pays the storage device on its misses.
        read_whole(&file, len, &path)?;
    }
    let budget_blocks = ((blocks as f64 * args.budget_fraction) as usize).max(1);
    Ok(Setup {
        path,
        file: Arc::new(file),
        blocks,
        budget_blocks,
        content: Arc::new(content),
        ra_pages: args.ra_pages,
        lru: LruConfig::DEFAULT
            .workingset(!args.no_workingset)
            .inactive_ratio(args.inactive_ratio.get())
            .active_second_chance(!args.kernel_active_aging)
            .policy(args.lru_policy.unwrap_or(
                foliocache::Config::block_cache(block()).lru_config().policy,
            )),
        _dir: dir,
    })
}

/// Reads the first `len` bytes of `file` (at `path`) in 1 MiB calls: into the kernel's page
/// cache.
fn read_whole(file: &File, len: u64, path: &Path) -> LabResult<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < len {
        let n = file
            .read_at(&mut buf, off)
            .map_err(|e| crate::lab_err!("reading {}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    Ok(())
}

/// Builds `kind` fresh, warms it up, measures it, and drops it.
fn measure(
    kind: Kind,
    setup: &Setup,
    traces: &Arc<Traces>,
    threads: usize,
    settings: &Settings,
    warmup: Duration,
) -> LabResult<Sample> {
    trim_heap();
    let rss0 = rss_bytes();
    let sampler = RssSampler::start();
    let file = setup.file.clone();
    match kind {
        Kind::QuickCache => measure_reader(
            Arc::new(contenders::QuickCache::new(file, setup.budget_blocks)),
            setup,
            traces,
            threads,
            settings,
            warmup,
            sampler,
            rss0,
        ),
        Kind::QuickCacheCopy => measure_reader(
            Arc::new(contenders::QuickCacheCopy(contenders::QuickCache::new(
                file,
                setup.budget_blocks,
            ))),
            setup,
            traces,
            threads,
            settings,
            warmup,
            sampler,
            rss0,
        ),
        Kind::Moka => measure_reader(
            Arc::new(contenders::Moka::new(file, setup.budget_blocks)),
            setup,
            traces,
            threads,
            settings,
            warmup,
            sampler,
            rss0,
        ),
        Kind::KernelPread => measure_reader(
            Arc::new(contenders::KernelPread::new(file)),
            setup,
            traces,
            threads,
            settings,
            warmup,
            sampler,
            rss0,
        ),
        Kind::Mmap => {
            let m = contenders::Mmap::new(&file, setup.blocks)
                .map_err(|e| crate::lab_err!("mmap of {}: {e}", setup.path.display()))?;
            measure_reader(
                Arc::new(m),
                setup,
                traces,
                threads,
                settings,
                warmup,
                sampler,
                rss0,
            )
        }
        Kind::Foliocache | Kind::FoliocachePinned => {
            let c = contenders::Foliocache::new(
                &setup.path,
                setup.budget_bytes(),
                setup.ra_pages,
                setup.lru,
                kind == Kind::FoliocachePinned,
            )
            .map_err(|e| crate::lab_err!("foliocache: {e}"))?;
            measure_reader(
                Arc::new(c),
                setup,
                traces,
                threads,
                settings,
                warmup,
                sampler,
                rss0,
            )
        }
    }
}

/// Warm-up, then the measured phase, of one contender; the sampler stops before it is dropped.
#[allow(clippy::too_many_arguments)]
fn measure_reader<R: Reader>(
    r: Arc<R>,
    setup: &Setup,
    traces: &Arc<Traces>,
    threads: usize,
    settings: &Settings,
    warmup: Duration,
    sampler: RssSampler,
    rss0: u64,
) -> LabResult<Sample> {
    let content = &setup.content;
    let w = phase(&r, traces, content, threads, settings.pin, warmup, false);
    let before = r.miss_counter();
    let m = phase(
        &r,
        traces,
        content,
        threads,
        settings.pin,
        settings.duration,
        true,
    );
    let misses = match (before, r.miss_counter()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => m.misses,
    };
    let stats = r.stats();
    let peak = sampler.finish().max(rss_bytes());
    let q = |q: f64| m.hist.value_at_quantile(q) as f64;
    Ok(Sample {
        ops_per_sec: crate::harness::per_sec(m.ops as f64, m.elapsed),
        ops_per_cpu_sec: m.ops as f64 * 1e9 / (m.cpu_ns.max(1) as f64),
        hit_ratio: if m.ops == 0 {
            0.0
        } else {
            1.0 - (misses as f64 / m.ops as f64).min(1.0)
        },
        p50_ns: q(0.5),
        p99_ns: q(0.99),
        rss_growth: peak.saturating_sub(rss0) as f64,
        bad: w.bad + m.bad,
        verified: w.verified + m.verified,
        errors: w.errors.into_iter().chain(m.errors).collect(),
        stats,
    })
}

/// `threads` workers replay the first half of their traces (the warm-up) or the second
/// (`timed`) through `r` for `duration`.
fn phase<R: Reader>(
    r: &Arc<R>,
    traces: &Arc<Traces>,
    content: &Arc<Content>,
    threads: usize,
    pin: bool,
    duration: Duration,
    timed: bool,
) -> PhaseOut {
    let (r2, t2, c2) = (r.clone(), traces.clone(), content.clone());
    let run = run_threads(threads, pin, duration, move |tid, stop| {
        let (warm, fresh) = t2.0[tid].split_at(t2.0[tid].len() / 2);
        worker(&*r2, if timed { fresh } else { warm }, &c2, stop)
    });
    PhaseOut::of(run.elapsed, run.results)
}

impl PhaseOut {
    /// The workers' tallies of a window of `elapsed`, added up.
    fn of(elapsed: Duration, workers: impl IntoIterator<Item = WorkerOut>) -> PhaseOut {
        let mut out = PhaseOut {
            ops: 0,
            cpu_ns: 0,
            elapsed,
            bad: 0,
            verified: 0,
            misses: 0,
            hist: new_histogram(),
            errors: Vec::new(),
        };
        for w in workers {
            out.ops += w.ops;
            out.cpu_ns += w.cpu_ns;
            out.bad += w.bad;
            out.verified += w.verified;
            out.misses += w.misses;
            out.hist.add(&w.hist).expect("histograms of equal bounds");
            out.errors.extend(w.error);
        }
        out
    }
}

/// A latency histogram: 1 ns to 60 s, 3 significant digits.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static histogram bounds")
}

/// One worker's tally.
struct WorkerOut {
    ops: u64,
    cpu_ns: u64,
    bad: u64,
    verified: u64,
    misses: u64,
    hist: Histogram<u64>,
    error: Option<String>,
}

impl WorkerOut {
    /// A tally of nothing yet.
    fn new() -> WorkerOut {
        WorkerOut {
            ops: 0,
            cpu_ns: 0,
            bad: 0,
            verified: 0,
            misses: 0,
            hist: new_histogram(),
            error: None,
        }
    }

    /// What the next read does besides reading: whether its whole block is checked (one
    /// read in [`FULL_CHECK_EVERY`]) and, if it is timed (one in [`LATENCY_EVERY`]), when it
    /// started.
    #[inline]
    fn next_read(&self) -> (bool, Option<Instant>) {
        (
            self.ops % FULL_CHECK_EVERY == 1,
            (self.ops % LATENCY_EVERY == 0).then(Instant::now),
        )
    }

    /// Counts one read begun at [`WorkerOut::next_read`]'s `t0`: `res` is its check's
    /// verdict (`Ok(true)`: the right bytes) or its error; `full` whether the check read
    /// every byte. False after an error: the worker stops.
    #[inline]
    fn tally(&mut self, res: Result<bool, String>, full: bool, t0: Option<Instant>) -> bool {
        if let Some(t0) = t0 {
            self.hist.saturating_record(t0.elapsed().as_nanos() as u64);
        }
        self.ops += 1;
        match res {
            Ok(true) => self.verified += u64::from(full),
            Ok(false) => self.bad += 1,
            Err(e) => {
                self.error = Some(e);
                return false;
            }
        }
        true
    }
}

/// The measured loop: block numbers from the trace, one read each, its bytes checked.
fn worker<R: Reader>(r: &R, trace: &[u32], content: &Content, stop: &AtomicBool) -> WorkerOut {
    let mask = trace.len() - 1;
    let mut pos = 0;
    let mut out = WorkerOut::new();
    let mut local = match r.local() {
        Ok(l) => l,
        Err(e) => {
            out.error = Some(format!("setting up a worker: {e}"));
            return out;
        }
    };
    let cpu0 = thread_cpu_ns();
    'run: loop {
        for _ in 0..CHECK_EVERY {
            let b = trace[pos];
            pos = (pos + 1) & mask;
            let (full, t0) = out.next_read();
            let res = r.with_block(&mut local, b, |data| content.check(b, data, full));
            if !out.tally(res, full, t0) {
                break 'run;
            }
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    out.cpu_ns = thread_cpu_ns().saturating_sub(cpu0);
    out.misses = R::local_misses(&local);
    out
}

/// What the tables say about fairness.
const LIKE_FOR_LIKE: &str = "Like for like: the zero-copy foliocache-pinned against the peers \
that hand out cached blocks in place (quick_cache, moka; mmap), the copying foliocache \
(read_at) against the peers that copy each block into the caller's buffer (quick_cache-copy, \
kernel-pread)";

/// `#threads | contender | reads | ops/s | foliocache (same reads) / it | hit ratio | ...`.
fn contender_table(
    report: &Report,
    kinds: &[Kind],
    threads: &[usize],
    extra: &Map<String, Value>,
    budget_mib: f64,
) -> Table {
    let mut t = Table::new([
        "#threads",
        "contender",
        "reads",
        "ops/s",
        "ops/CPU-s",
        "like-for-like foliocache / it",
        "hit ratio",
        "p50 (ns)",
        "p99 (ns)",
        "peak RSS added (MiB)",
        "budget",
    ]);
    for &n in threads {
        let get = |v: &str, m: &str| report.row(v, n, m, extra).map(|r| r.median);
        for &k in kinds {
            let v = k.name();
            let ops = get(v, "ops_per_sec");
            let ours = k.like_for_like();
            let vs = match (get(ours.name(), "ops_per_sec"), ops) {
                (Some(a), Some(b)) if b > 0.0 && ours != k => {
                    format!("{:.2}x ({})", a / b, ours.name())
                }
                _ => "-".into(),
            };
            t.row([
                n.to_string(),
                v.to_string(),
                if k.zero_copy() { "in place" } else { "copy" }.to_string(),
                ops.map_or("-".into(), fmt_num),
                get(v, "ops_per_cpu_sec").map_or("-".into(), fmt_num),
                vs,
                get(v, "hit_ratio").map_or("-".into(), |h| format!("{:.1}%", h * 100.0)),
                get(v, "p50_latency_ns").map_or("-".into(), fmt_num),
                get(v, "p99_latency_ns").map_or("-".into(), fmt_num),
                get(v, "rss_growth_bytes")
                    .map_or("-".into(), |b| format!("{:.1}", b / (1 << 20) as f64)),
                if k.machine_budget() {
                    "machine".to_string()
                } else {
                    format!("{budget_mib:.1} MiB")
                },
            ]);
        }
    }
    t
}

/// The targets, per thread count, like for like: each (candidate, peer, minimum
/// ratio) pair of `mix`, then the hit ratio against the best budget-limited peer.
fn target_table(report: &Report, mix: Mix, threads: &[usize], extra: &Map<String, Value>) -> Table {
    let pairs: &[(&str, &str, f64)] = if mix == Mix::Resident {
        &[("foliocache-pinned", "quick_cache", 2.0)]
    } else {
        &[
            ("foliocache-pinned", "quick_cache", 1.25),
            ("foliocache-pinned", "moka", 3.0),
            ("foliocache", "quick_cache-copy", 1.1),
            ("foliocache", "kernel-pread", 1.5),
        ]
    };
    let mut t = Table::new([
        "#threads",
        "candidate",
        "against (same reads)",
        "ratio",
        "target",
        "met",
    ]);
    for &n in threads {
        let get = |v: &str, m: &str| report.row(v, n, m, extra).map(|r| r.median);
        for &(cand, peer, min) in pairs {
            let (Some(a), Some(b)) = (get(cand, "ops_per_sec"), get(peer, "ops_per_sec")) else {
                continue;
            };
            let r = if b > 0.0 { a / b } else { f64::INFINITY };
            t.row([
                n.to_string(),
                cand.to_string(),
                peer.to_string(),
                format!("{r:.2}x"),
                format!(">= {min}x"),
                if r >= min { "yes" } else { "no" }.to_string(),
            ]);
        }
        if mix != Mix::Zipf {
            continue;
        }
        let best = ["quick_cache", "quick_cache-copy", "moka"]
            .into_iter()
            .filter_map(|p| get(p, "hit_ratio").map(|h| (p, h)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(h), Some((peer, hb))) = (get("foliocache", "hit_ratio"), best) {
            let pts = (h - hb) * 100.0;
            t.row([
                n.to_string(),
                "foliocache (hit ratio)".to_string(),
                format!("{peer} (best peer)"),
                format!("{pts:+.1} pts"),
                ">= -1 pts".to_string(),
                if pts >= -1.0 { "yes" } else { "no" }.to_string(),
            ]);
        }
    }
    t
}

/// The sweep's rows: variant, 1 thread, `hit_ratio`, with extra fields `sweep` = `skew` and
/// `skew`; the two reference policies as variants `exact-lfu` and `belady-opt`.
fn add_sweep_rows(report: &mut Report, sw: &sweep::Sweep) {
    for p in &sw.points {
        let mut extra = Map::new();
        extra.insert("sweep".into(), json!("skew"));
        extra.insert("skew".into(), json!(p.skew));
        let named = p
            .hits
            .iter()
            .map(|&(k, h)| (k.name(), h))
            .chain([("exact-lfu", p.lfu), ("belady-opt", p.belady)]);
        for (variant, h) in named {
            report.rows.push(crate::harness::Row {
                variant: variant.to_string(),
                threads: 1,
                metric: "hit_ratio".to_string(),
                median: h,
                min: h,
                max: h,
                runs: 1,
                extra: extra.clone(),
            });
        }
    }
}

/// `skew | each contender's hit ratio | exact LFU | Belady | foliocache vs the best peer`.
fn sweep_table(sw: &sweep::Sweep, kinds: &[Kind]) -> Table {
    let mut head = vec!["skew".to_string()];
    head.extend(kinds.iter().map(|k| k.name().to_string()));
    head.extend(
        [
            "exact LFU",
            "Belady (optimum)",
            "foliocache - best peer (pts)",
        ]
        .map(String::from),
    );
    let mut t = Table::new(head);
    let pct = |h: f64| format!("{:.1}%", h * 100.0);
    for p in &sw.points {
        let mut row = vec![p.skew.to_string()];
        row.extend(p.hits.iter().map(|&(_, h)| pct(h)));
        row.push(pct(p.lfu));
        row.push(pct(p.belady));
        let hit = |k: Kind| p.hits.iter().find(|(q, _)| *q == k).map(|&(_, h)| h);
        let best = p
            .hits
            .iter()
            .filter(|(k, _)| matches!(k, Kind::QuickCache | Kind::QuickCacheCopy | Kind::Moka))
            .map(|&(_, h)| h)
            .fold(None, |m: Option<f64>, h| Some(m.map_or(h, |m| m.max(h))));
        row.push(match (hit(Kind::Foliocache), best) {
            (Some(a), Some(b)) => format!("{:+.1}", (a - b) * 100.0),
            _ => "-".into(),
        });
        t.row(row);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(contenders: &[&str]) -> Args {
        Args {
            common: CommonArgs {
                threads: Some(crate::harness::parse_threads("1,2").unwrap()),
                duration: Some(Duration::from_millis(20)),
                runs: Some(1),
                quick: true,
                no_pin: true,
                no_progress: true,
                ..CommonArgs::default()
            },
            file_mib: Some(2),
            contenders: contenders.iter().map(|s| s.to_string()).collect(),
            ..Args::default()
        }
    }

    #[test]
    fn peers_run_verify_and_compare() {
        let r = run(&tiny(&[])).unwrap();
        assert!(r.all_checks_ok(), "{:?}", r.checks);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        // 7 contenders x 2 thread counts x 6 metrics, then the sweep: 5 skews x (7 + 2).
        assert_eq!(r.rows.len(), 7 * 2 * 6 + 5 * 9);
        // Each of the five peers against its like-for-like foliocache, at 1 and 2 threads.
        assert_eq!(r.comparisons.len(), 5 * 2);
        let pairs: Vec<_> = r
            .comparisons
            .iter()
            .filter(|c| c.threads == 1)
            .map(|c| (c.candidate.as_str(), c.baseline.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("foliocache-pinned", "quick_cache"),
                ("foliocache", "quick_cache-copy"),
                ("foliocache-pinned", "moka"),
                ("foliocache", "kernel-pread"),
                ("foliocache-pinned", "mmap"),
            ]
        );
        let stats = r.stats.as_ref().unwrap();
        assert!(stats["foliocache"]["bytes_copied"].as_u64() > Some(0));
        assert!(stats["foliocache-pinned"]["hits"].as_u64() > Some(0));
        for v in ["foliocache", "foliocache-pinned", "quick_cache", "moka"] {
            let h = r
                .row(v, 1, "hit_ratio", &mix_extra(Mix::Zipf))
                .unwrap()
                .median;
            assert!(h > 0.3 && h < 1.0, "{v}: {h}");
        }
    }

    /// The sweep: every contender at every skew, the references on the same trace bounding
    /// the budget-limited contenders (up to the warm-up's noise), hit ratios rising with the
    /// skew.
    #[test]
    fn sweep_covers_every_contender_and_skew() {
        let r = run(&Args {
            mix: vec![Mix::Resident],
            ..tiny(&[])
        })
        .unwrap();
        assert!(r.all_checks_ok(), "{:?}", r.checks);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        let at = |v: &str, s: f64| {
            let mut e = Map::new();
            e.insert("sweep".into(), json!("skew"));
            e.insert("skew".into(), json!(s));
            r.row(v, 1, "hit_ratio", &e).map(|r| r.median)
        };
        for v in Kind::ALL.iter().map(|k| k.name()) {
            for s in SWEEP_SKEWS {
                assert!(at(v, s).is_some(), "{v} at {s}");
            }
        }
        for s in SWEEP_SKEWS {
            let opt = at("belady-opt", s).unwrap();
            assert!(at("exact-lfu", s).unwrap() <= opt + 1e-9);
            for v in ["foliocache", "quick_cache", "moka"] {
                assert!(at(v, s).unwrap() <= opt + 0.02, "{v} at {s}");
            }
        }
        assert!(at("foliocache", 1.2).unwrap() > at("foliocache", 0.6).unwrap());
        // The resident mix reads a working set half the budget: after the warm-up, hits.
        let resident = mix_extra(Mix::Resident);
        for v in [
            "foliocache",
            "foliocache-pinned",
            "quick_cache",
            "quick_cache-copy",
        ] {
            let h = r.row(v, 1, "hit_ratio", &resident).unwrap().median;
            assert!(h > 0.99, "{v}: {h}");
        }
    }

    #[test]
    fn block_sizes_parse_as_whole_pages() {
        assert_eq!(parse_block("4k"), Ok(4096));
        assert_eq!(parse_block("16K"), Ok(16384));
        assert_eq!(parse_block("64k"), Ok(65536));
        assert_eq!(parse_block("32768"), Ok(32768));
        assert!(parse_block("1000").is_err());
        assert!(parse_block("0").is_err());
        assert!(parse_block("4m").is_err());
    }

    #[test]
    fn unknown_contender_is_refused() {
        let e = run(&tiny(&["memcached"])).err().unwrap();
        assert!(e.0.contains("have: foliocache"), "{}", e.0);
    }
}
