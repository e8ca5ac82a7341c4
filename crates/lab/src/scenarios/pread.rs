//! `pread`: seed 000's benchmark exactly, through foliocache and through the kernel.
//!
//! # The seed's workload
//!
//! The locked-bit refcount series (seed 000) measured a will-it-scale-style loop: N pinned
//! threads, each with its own descriptor of one file on tmpfs, calling
//! `pread(fd, buf, 64, 0)` as fast as they can. Every call looks up the same folio and takes
//! and drops a reference on it, so all threads hammer one refcount cache line; the vanilla
//! `folio_try_get` is a CAS loop whose failures under contention serialise the readers, and
//! the seed's locked bit turns it into one `fetch_add`.
//!
//! # What this scenario runs
//!
//! The same loop, N pinned threads, each with its own handle (its own "descriptor") on the
//! same file in `--dir` (default `/dev/shm`), 64-byte reads at offset 0:
//!
//! | variant | what a read is |
//! |---|---|
//! | `cas-loop` | `CachedFile::read_at` on a cache whose folios use the vanilla CAS-loop `try_get` |
//! | `locked-bit` | the same with the seed's locked-bit refcount |
//! | `optimistic` | the same with Torvalds' "assume the count is 1" CAS |
//! | `kernel-pread` | `pread(2)` on the same file: the kernel's own page cache, syscall included |
//!
//! The foliocache variants are every strategy of the library's `RefStrategy::ALL`, under
//! its stable name ([`Reader::all`]): a strategy the library adds is measured, compared with
//! the kernel and shown in both tables without an edit here.
//!
//! The variants are interleaved (A B C D A B C D ...) in one process. A foliocache hit makes
//! no system call (RCU section, index lookup, speculative reference, re-check, copy, put;
//! the handle keeps its mapping, so a read does not resolve it in the cache's file table
//! again: `--file-table` only changes how opens and closes pin that table, and the `hash`
//! scenario measures its lookups), so the
//! foliocache variants should lead the kernel's `pread` by an order of magnitude at one
//! thread; between themselves they differ only in the refcount's atomic sequence, which is
//! invisible without contention (1 thread) and shows as soon as two cores fight over the
//! folio's cache line (2 threads and up).
//!
//! `--io` and `--direct` choose foliocache's I/O engine and direct I/O ([`IoArgs`]); the
//! file is read once before the runs, so they only matter on that miss. The first line of
//! the output and `params` name the file system, the engine and the mode.
//!
//! # Output
//!
//! Table `#threads | cas-loop | locked-bit | boost (%) | optimistic | kernel-pread`
//! (ops/s, medians), and the foliocache/kernel ratios.
//!
//! - metric: `ops_per_sec` (all threads together);
//! - comparisons: `locked-bit` vs `cas-loop`; `cas-loop`, `locked-bit` and `optimistic` each
//!   vs `kernel-pread`; per thread count;
//! - checks: `wrong_reads` (reads that returned a wrong length or wrong bytes; every read is
//!   verified) = 0, `bad_page_events` = 0, `accounting_baseline` (pages still allocated in the
//!   caches after every handle was dropped) = 0, `foliocache_misses` (lookups that missed
//!   during the measured runs, after warm-up) = 0.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use foliocache::mm::filetable::TableRef;
use foliocache::mm::refcount::RefStrategy;
use foliocache::mm::Experiment;
use foliocache::{CachedFile, Config, FolioCache};
use serde_json::{json, Map, Value};

use super::files::{cache_stats_json, default_dir, LabFile};
use crate::harness::{
    merge, parse_variant, run_threads, seed_order, seed_table, Bench, CommonArgs, IoArgs, IoSetup, LabResult,
    Report, Table, CHECK_EVERY,
};

/// The seed reproduced.
pub const SEED: &str = "000_b7e69cdd1cb63f8c.txt";

/// Subcommand name.
pub const NAME: &str = "pread";

/// One line on what it measures.
pub const ABOUT: &str = "64-byte pread at offset 0 of one tmpfs file, N pinned threads: \
foliocache with each refcount strategy against the kernel's pread";

/// The seed's vanilla refcount strategy, the tables' baseline.
pub const VANILLA: RefStrategy = RefStrategy::CasLoop;

/// The seed's patched strategy.
pub const PATCHED: RefStrategy = RefStrategy::LockedBit;

/// The kernel's `pread`, the variant beside the library's strategies.
pub const KERNEL: &str = "kernel-pread";

/// A variant: a whole foliocache with one refcount strategy, or the kernel's `pread`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// `CachedFile::read_at` on a cache whose folios use this strategy.
    Foliocache(RefStrategy),
    /// `pread(2)` on the same file.
    Kernel,
}

impl Reader {
    /// Every variant, in table order: every strategy of [`RefStrategy::ALL`], the seed's
    /// vanilla and patched first ([`seed_order`]), then the kernel.
    pub fn all() -> Vec<Reader> {
        seed_order(VANILLA, PATCHED)
            .into_iter()
            .map(Reader::Foliocache)
            .chain([Reader::Kernel])
            .collect()
    }

    /// The variant's stable name: the strategy's, or [`KERNEL`].
    pub fn name(self) -> &'static str {
        match self {
            Reader::Foliocache(s) => s.name(),
            Reader::Kernel => KERNEL,
        }
    }
}

/// Options of `pread`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Common options.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Where the file is and how foliocache reads it (`--dir`, default /dev/shm, the tmpfs
    /// the seed used; `--io`, `--direct`).
    #[command(flatten)]
    pub io: IoArgs,
    /// Bytes per read (the seed: 64).
    #[arg(long, default_value_t = 64)]
    pub read_size: usize,
    /// How opens and closes pin the cache's open-file table (reads do not look handles up):
    /// immutable, atomic, percpu, percpu-fast.
    #[arg(long, default_value = "percpu-fast", value_parser = parse_variant::<TableRef>)]
    pub file_table: TableRef,
}

super::scenario!();

/// Runs the scenario.
pub fn run(args: &Args) -> LabResult<Report> {
    let settings = args.common.settings();
    if args.read_size == 0 || args.read_size > 4096 {
        return Err(crate::lab_err!(
            "--read-size {} is out of range: use 1..=4096 (one page; the seed reads 64 bytes)",
            args.read_size
        ));
    }
    let dir = args.io.dir_or(default_dir);
    let setup = IoSetup::probe(&args.io, &dir)?;
    println!("{NAME}: {}", setup.header());
    let file = LabFile::create(&dir, "pread", 0, 4 * 4096)?;
    let expected: Arc<Vec<u8>> = Arc::new(file.expected(0, args.read_size));

    // One warm cache per strategy, reused by every round (the file stays cached, as the
    // seed's tmpfs file stays in the page cache).
    let variants = Reader::all();
    let strategies = seed_order(VANILLA, PATCHED);
    let mut caches = Vec::new();
    for &s in &strategies {
        let cache = FolioCache::new(
            args.io
                .apply(Config::new(1 << 20))
                .experiment(Experiment::new().strategy(s).file_table(args.file_table))
                .panic_on_bad_page(false),
        )
        .map_err(|e| crate::lab_err!("{e}"))?;
        let f = cache
            .open(file.path())
            .map_err(|e| crate::lab_err!("{e}"))?;
        let mut buf = vec![0u8; args.read_size];
        f.read_at(&mut buf, 0).map_err(|e| crate::lab_err!("{e}"))?;
        // `f` stays open until the end: closing a file's last handle drops its pages.
        caches.push((s.name(), cache, Some(f)));
    }
    let misses_after_warmup: u64 = caches.iter().map(|(_, c, _)| c.stats().misses).sum();

    let mut bench = Bench::new(
        NAME,
        SEED,
        &settings,
        merge(
            json!({
                "read_size": args.read_size,
                "offset": 0,
                "file_bytes": file.size,
                "file_table": args.file_table.name(),
            }),
            setup.params(),
        ),
        variants.len(),
    );
    let mut wrong = 0u64;
    let none = Map::new();
    bench.measure("", &variants, &none, |il, &v, n, _round| {
        let (ops, bad) = match caches.iter().find(|(c, _, _)| *c == v.name()) {
            Some((_, cache, _)) => {
                measure_foliocache(cache, &file, n, settings.pin, settings.duration, &expected)?
            }
            None => measure_kernel(&file, n, settings.pin, settings.duration, &expected)?,
        };
        wrong += bad;
        il.add(v.name(), n, "ops_per_sec", ops);
        Ok(())
    })?;

    let report = &mut bench.report;
    for &n in &settings.threads {
        report.compare(VANILLA.name(), PATCHED.name(), n, "ops_per_sec", &none);
        for s in &strategies {
            report.compare(KERNEL, s.name(), n, "ops_per_sec", &none);
        }
    }

    let misses: u64 =
        caches.iter().map(|(_, c, _)| c.stats().misses).sum::<u64>() - misses_after_warmup;
    let mut stats = Map::new();
    for (v, c, _) in &caches {
        stats.insert(v.to_string(), cache_stats_json(c));
    }
    // Close the last handles, and drain the LRU's per-CPU batches (folios truncated while
    // queued there are freed at the drain): each cache must then hold no folio any more.
    for c in &mut caches {
        c.2 = None;
        // The closed file's inode keeps its pages until evicted.
        c.1.drop_caches();
        c.1.lru_add_drain_all();
    }
    let bad_pages: u64 = caches.iter().map(|(_, c, _)| c.stats().bad_pages).sum();
    let leftover: u64 = caches
        .iter()
        .map(|(_, c, _)| c.stats().allocated_pages)
        .sum();
    report.stats = Some(Value::Object(stats));
    report.check("wrong_reads", wrong, wrong == 0);
    report.check("bad_page_events", bad_pages, bad_pages == 0);
    report.check("accounting_baseline", leftover, leftover == 0);
    report.check("foliocache_misses", misses, misses == 0);

    let mut ratios = Table::new(
        std::iter::once("#threads".to_string())
            .chain(strategies.iter().map(|s| format!("{s} / kernel"))),
    );
    for &n in &settings.threads {
        let mut cells = vec![n.to_string()];
        for s in &strategies {
            let r = report
                .comparisons
                .iter()
                .find(|c| c.candidate == s.name() && c.baseline == KERNEL && c.threads == n);
            cells.push(r.map_or("-".into(), |c| format!("{:.1}x", c.ratio)));
        }
        ratios.row(cells);
    }
    let others: Vec<&str> = variants[2..].iter().map(|v| v.name()).collect();
    let table = seed_table(
        report,
        "ops_per_sec",
        VANILLA.name(),
        PATCHED.name(),
        &others,
        &none,
    );
    let tables = vec![
        (
            format!(
                "pread({} bytes at offset 0) ops/s, all threads (seed 000's table; foliocache refcount strategies and the kernel)",
                args.read_size
            ),
            table,
        ),
        ("foliocache against the kernel's pread".to_string(), ratios),
    ];
    bench.finish(&settings, &tables, Some(("ops_per_sec", &none)))
}

/// N threads, each with its own handle on the cached file, reading `expected.len()` bytes at
/// offset 0 until stopped. Returns (ops/s, wrong reads).
fn measure_foliocache(
    cache: &FolioCache,
    file: &LabFile,
    threads: usize,
    pin: bool,
    duration: Duration,
    expected: &Arc<Vec<u8>>,
) -> LabResult<(f64, u64)> {
    let handles: Vec<CachedFile> = (0..threads)
        .map(|_| cache.open(file.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| crate::lab_err!("{e}"))?;
    Ok(read_loop(handles, pin, duration, expected, |f, buf| {
        f.read_at(buf, 0).ok()
    }))
}

/// The same loop with `pread(2)` on a descriptor per thread.
fn measure_kernel(
    file: &LabFile,
    threads: usize,
    pin: bool,
    duration: Duration,
    expected: &Arc<Vec<u8>>,
) -> LabResult<(f64, u64)> {
    use std::os::unix::fs::FileExt;
    let fds: Vec<std::fs::File> = (0..threads)
        .map(|_| std::fs::File::open(file.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| crate::lab_err!("opening {}: {e}", file.path().display()))?;
    Ok(read_loop(fds, pin, duration, expected, |f, buf| {
        f.read_at(buf, 0).ok()
    }))
}

/// The will-it-scale loop both contenders run: worker `i` reads into its buffer through
/// `handles[i]` with `read` (which returns the length read, `None` on error) until stopped,
/// checking every read against `expected`. Returns (ops/s, wrong reads).
fn read_loop<H, R>(
    handles: Vec<H>,
    pin: bool,
    duration: Duration,
    expected: &Arc<Vec<u8>>,
    read: R,
) -> (f64, u64)
where
    H: Send + Sync + 'static,
    R: Fn(&H, &mut [u8]) -> Option<usize> + Send + Sync + 'static,
{
    let threads = handles.len();
    let handles = Arc::new(handles);
    let expected = expected.clone();
    let run = run_threads(threads, pin, duration, move |tid, stop| {
        let h = &handles[tid];
        let mut buf = vec![0u8; expected.len()];
        let (mut ops, mut bad) = (0u64, 0u64);
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..CHECK_EVERY {
                match read(h, &mut buf) {
                    Some(k) if k == buf.len() && buf[..] == expected[..] => {}
                    _ => bad += 1,
                }
            }
            ops += CHECK_EVERY;
        }
        (ops, bad)
    });
    finish(run)
}

fn finish(run: crate::harness::ThreadRun<(u64, u64)>) -> (f64, u64) {
    let ops: u64 = run.results.iter().map(|r| r.0).sum();
    let bad: u64 = run.results.iter().map(|r| r.1).sum();
    (run.rate(ops), bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variants_are_the_librarys_strategies_then_the_kernel() {
        let names: Vec<_> = Reader::all().into_iter().map(Reader::name).collect();
        assert_eq!(names, ["cas-loop", "locked-bit", "optimistic", "kernel-pread"]);
        assert_eq!(names.len(), RefStrategy::ALL.len() + 1);
        for s in RefStrategy::ALL {
            assert!(names.contains(&s.name()), "{s} is measured");
        }
    }
}
