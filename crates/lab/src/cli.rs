//! Command-line front end: one subcommand per scenario, plus `all` and `validate`.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, Subcommand};

use crate::harness::{CommonArgs, LabResult, Report};
use crate::scenarios::{Scenario, REGISTRY};
use crate::summary::RunInfo;

/// The foliocache lab: reproduces the seed patch threads' experiments, the kernel's vanilla
/// behaviour against the patch, interleaved in one process.
#[derive(Parser, Debug)]
#[command(name = "foliocache-lab", version, about, long_about = None)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run every scenario (quick mode unless --full) and write a report directory.
    All(AllArgs),
    /// Seed 000: get+put pairs on one shared folio count (fetch-add, cas-loop, optimistic,
    /// locked-bit), Pedro Falcato's microbenchmark, and the seed's table.
    Refcount(crate::scenarios::refcount::Args),
    /// Seed 000's pread benchmark: foliocache (each refcount strategy) against the kernel.
    Pread(crate::scenarios::pread::Args),
    /// Seed 001's db_bench readseq: one-by-one against batched readahead insertion.
    Readseq(crate::scenarios::readseq::Args),
    /// Seed 002: fork / copy-on-write micro benchmarks (remap, munmap, fork, cow, cow-byte,
    /// cow-reuse, cow-reuse-byte, pte-dontneed) and concurrent anon-cow, with the sharer
    /// trackings none, rmap-id (with and without the exclusive seqcount path) and mm-owner.
    Cow(crate::scenarios::cow::Args),
    /// Seed 003: file-table lookups under a table reference (immutable, atomic, percpu,
    /// percpu-fast), `perf bench futex hash`, and resize completion time under full load.
    Hash(crate::scenarios::hash::Args),
    /// Seed 004: short-lived files churned through a cache under reclaim; dead folios at LRU
    /// drain and lruvec lock acquisitions per folio, vanilla against the drain-time filter
    /// (and the filter with add-as-active, the condition of the seed's bad pages).
    Lru(crate::scenarios::lru::Args),
    /// foliocache against what a storage engine would use instead (quick_cache, moka, the
    /// kernel's pread and mmap): 4 KiB Zipf block reads of a file 4x the cache budget.
    Peers(crate::scenarios::peers::Args),
    /// The write path (no seed): the kernel's buffered I/O (pwrite, fdatasync) against
    /// foliocache on 1 MiB writes of a new file with one sync (an SST flush), 4 KiB Zipf
    /// overwrites with a sync every 1,000 (B-tree pages) and 4 KiB appends with a sync every
    /// 64 KiB (a commit log).
    Write(crate::scenarios::write::Args),
    /// Replacement policies on synthetic traces (issue 26): the real cache's miss ratio
    /// against LRU, ARC, LIRS, S3-FIFO, W-TinyLFU, quick_cache, moka and Belady's optimum
    /// on Zipf, scan, loop, moving-hot-set, two-tenant, burst and readahead-mix traces;
    /// `--export DIR` writes the traces for libCacheSim instead.
    Policy(crate::scenarios::policy::Args),
    /// Check a JSON result file against the `foliocache-lab/1` schema rules.
    Validate {
        /// Result files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also fail if any recorded check is not ok.
        #[arg(long)]
        strict: bool,
    },
}

/// Options of `all`.
#[derive(clap::Args, Debug, Clone)]
pub struct AllArgs {
    /// Directory for the JSON results, plots and the summary report.
    #[arg(long, default_value = "lab-results")]
    pub out: PathBuf,
    /// Full-length runs instead of quick mode.
    #[arg(long)]
    pub full: bool,
    /// Only these scenarios (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Options passed to every scenario (--json and --quick are set by `all`).
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs the CLI; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("foliocache-lab: error: {e}");
            1
        }
    }
}

/// The common options of a scenario subcommand (`None` for `all` and `validate`).
fn common_of(cmd: &Command) -> Option<&CommonArgs> {
    match cmd {
        Command::Refcount(a) => Some(a.common()),
        Command::Pread(a) => Some(a.common()),
        Command::Readseq(a) => Some(a.common()),
        Command::Cow(a) => Some(a.common()),
        Command::Hash(a) => Some(a.common()),
        Command::Lru(a) => Some(a.common()),
        Command::Peers(a) => Some(a.common()),
        Command::Write(a) => Some(a.common()),
        Command::Policy(a) => Some(a.common()),
        Command::All(_) | Command::Validate { .. } => None,
    }
}

fn run(cli: Cli) -> LabResult<i32> {
    if let Some(common) = common_of(&cli.command) {
        common.check().map_err(crate::harness::LabError)?;
    }
    match cli.command {
        Command::All(a) => run_all(&a),
        Command::Refcount(a) => Ok(exit_code(a.run()?)),
        Command::Pread(a) => Ok(exit_code(a.run()?)),
        Command::Readseq(a) => Ok(exit_code(a.run()?)),
        Command::Cow(a) => Ok(exit_code(a.run()?)),
        Command::Hash(a) => Ok(exit_code(a.run()?)),
        Command::Lru(a) => Ok(exit_code(a.run()?)),
        Command::Peers(a) => Ok(exit_code(a.run()?)),
        Command::Write(a) => Ok(exit_code(a.run()?)),
        Command::Policy(a) => Ok(exit_code(a.run()?)),
        Command::Validate { files, strict } => {
            let mut bad = 0;
            // Every file is checked and reported, a bad one does not hide the ones after it.
            for f in &files {
                let (report, problems) = match Report::validate_file(f) {
                    Ok(r) => r,
                    Err(e) => {
                        bad += 1;
                        println!("{e}");
                        continue;
                    }
                };
                let failed: Vec<_> = report.checks.iter().filter(|c| !c.ok).collect();
                if problems.is_empty() && (!strict || failed.is_empty()) {
                    println!(
                        "{}: ok ({} rows, {} comparisons, {} checks)",
                        f.display(),
                        report.rows.len(),
                        report.comparisons.len(),
                        report.checks.len()
                    );
                } else {
                    bad += 1;
                    for p in problems {
                        println!("{}: {p}", f.display());
                    }
                    if strict {
                        for c in failed {
                            println!(
                                "{}: check {} failed (value {})",
                                f.display(),
                                c.name,
                                c.value
                            );
                        }
                    }
                }
            }
            Ok(i32::from(bad > 0))
        }
    }
}

/// A scenario's exit code: 0 if every check held, 1 otherwise.
fn exit_code(report: Report) -> i32 {
    i32::from(!report.all_checks_ok())
}

fn run_all(a: &AllArgs) -> LabResult<i32> {
    for name in &a.only {
        if !REGISTRY.iter().any(|e| e.name == name) {
            let names: Vec<_> = REGISTRY.iter().map(|e| e.name).collect();
            return Err(crate::lab_err!(
                "unknown scenario `{name}` (have: {})",
                names.join(", ")
            ));
        }
    }
    std::fs::create_dir_all(&a.out)
        .map_err(|e| crate::lab_err!("creating {}: {e}", a.out.display()))?;
    crate::harness::check_writable(&a.out.join("report.md")).map_err(crate::harness::LabError)?;
    let selected: Vec<_> = REGISTRY
        .iter()
        .filter(|e| a.only.is_empty() || a.only.iter().any(|n| n == e.name))
        .collect();
    let start = Instant::now();
    let mut info = RunInfo {
        command: std::iter::once("foliocache-lab".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        out: a.out.clone(),
        ..RunInfo::default()
    };
    let mut reports = Vec::new();
    for (i, e) in selected.iter().enumerate() {
        println!(
            "\n=== [{}/{}] {} (seed {}), {:.0} s elapsed\n    {}\n",
            i + 1,
            selected.len(),
            e.name,
            e.seed,
            start.elapsed().as_secs_f64(),
            e.about
        );
        let mut common = a.common.clone();
        common.quick = !a.full;
        common.json = Some(a.out.join(format!("{}.json", e.name)));
        let t = Instant::now();
        match (e.run)(&common) {
            Ok(r) => reports.push((e.name, r)),
            Err(err) => {
                eprintln!("{}: error: {err}", e.name);
                info.errors.push((e.name.to_string(), err.to_string()));
            }
        }
        info.timings.push((e.name.to_string(), t.elapsed()));
        println!(
            "=== [{}/{}] {} done in {:.1} s",
            i + 1,
            selected.len(),
            e.name,
            t.elapsed().as_secs_f64()
        );
    }
    info.elapsed = start.elapsed();
    let summary = crate::summary::markdown(&reports, &info);
    let path = a.out.join("report.md");
    std::fs::write(&path, summary)
        .map_err(|e| crate::lab_err!("writing {}: {e}", path.display()))?;
    crate::summary::write_html(&reports, &info)?;
    let failed: Vec<_> = reports
        .iter()
        .flat_map(|(n, r)| {
            r.checks
                .iter()
                .filter(|c| !c.ok)
                .map(move |c| format!("{n}.{}", c.name))
        })
        .chain(info.errors.iter().map(|(n, _)| format!("{n} (error)")))
        .collect();
    println!(
        "\n{} scenarios in {:.1} s; report: {} (JSON and plots beside it)",
        reports.len(),
        info.elapsed.as_secs_f64(),
        path.display()
    );
    if failed.is_empty() {
        Ok(0)
    } else {
        eprintln!("failed: {}", failed.join(", "));
        Ok(1)
    }
}
